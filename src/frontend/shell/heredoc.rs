//! Heredocs that write a config file (`cat <<EOF > ds_config.json`, `| tee`): the body expanded as
//! the shell would, read as a config of its own, and every span mapped back to where it is
//! written, with the variable behind each value.

use super::expand::{self, source_chars, text_of, Env, Mode, RChar};
use super::flow::Status;
use super::Walker;
use crate::config::{self, Node as ConfigNode, Value};
use crate::facts::{Binding, InlineConfig, InlineKind};
use crate::frontend::fields::ShField;
use crate::source::Language;
use std::ops::Range;
use tree_sitter::Node;

impl<'s> Walker<'s> {
    /// `cat <<EOF > ds_config.json` (or `| tee`, `cat > f << EOF`): the body is a config file the
    /// script writes; variables in it are expanded as the shell would.
    pub(super) fn heredoc(&mut self, node: Node) {
        let mut c = node.walk();
        let kids: Vec<Node> = node.children(&mut c).collect();
        let Some(redirect) = kids.iter().find(|k| k.kind() == "heredoc_redirect") else {
            return;
        };
        if self.status(node) == Status::Dead {
            return;
        }
        let mut rc = redirect.walk();
        let parts: Vec<Node> = redirect.children(&mut rc).collect();
        let Some(body) = parts.iter().find(|k| k.kind() == "heredoc_body") else {
            return;
        };
        let quoted = parts
            .iter()
            .find(|k| k.kind() == "heredoc_start")
            .is_some_and(|s| self.text(*s).contains(['\'', '"', '\\']));
        let dest = kids
            .iter()
            .chain(parts.iter())
            .filter(|k| k.kind() == "file_redirect")
            .find(|k| {
                let t = self.text(**k);
                t.starts_with('>') || t.starts_with("1>")
            })
            .and_then(|k| k.field("destination"))
            .or_else(|| {
                let cmd = node.field("body")?;
                let name = cmd.field("name")?;
                if self.text(name) != "tee" {
                    return None;
                }
                let mut cc = cmd.walk();
                let found = cmd
                    .children_by_field_name("argument", &mut cc)
                    .find(|a| !self.text(*a).starts_with('-'));
                found
            });
        let Some(dest) = dest else { return };
        let path: Vec<RChar> = self
            .vars
            .expand_source(self.text(dest), dest.start_byte(), Mode::Assign)
            .into_iter()
            .flatten()
            .collect();
        let path = text_of(&path);
        let chars: Vec<RChar> = if quoted {
            source_chars(self.text(*body), body.start_byte())
        } else {
            self.vars
                .expand_source(self.text(*body), body.start_byte(), Mode::Heredoc)
                .into_iter()
                .flatten()
                .collect()
        };
        let lower = path.to_ascii_lowercase();
        let trimmed = text_of(&chars);
        let language = if lower.ends_with(".json") {
            Language::Json
        } else if lower.ends_with(".yaml") || lower.ends_with(".yml") {
            Language::Yaml
        } else if lower.ends_with(".toml") {
            Language::Toml
        } else if trimmed.trim_start().starts_with('{') {
            Language::Json
        } else {
            return;
        };
        let chars = if language == Language::Json {
            quote_unknowns(chars)
        } else {
            chars
        };
        let text = text_of(&chars);
        let Ok(doc) = config::parse(language, &text) else {
            return;
        };
        let map = SpanMap::new(&chars);
        for mut root in doc.roots {
            if !matches!(root.value, Value::Map(_)) {
                continue;
            }
            let mut via = Vec::new();
            map.remap(&mut root, &self.vars, &mut via, 0);
            self.facts.inline_configs.push(InlineConfig {
                kind: InlineKind::Heredoc {
                    path: Some(path.clone()),
                },
                root,
                via,
            });
        }
    }
}

/// In JSON, an unresolved `$VAR` outside a string becomes a string, so the rest still parses
/// (its value stays unknown).
fn quote_unknowns(chars: Vec<RChar>) -> Vec<RChar> {
    let mut out = Vec::with_capacity(chars.len() + 8);
    let mut in_str = false;
    let mut prev = ' ';
    let mut i = 0;
    while i < chars.len() {
        let r = &chars[i];
        if !in_str && r.flags & expand::UNKNOWN != 0 {
            let mut j = i;
            while j < chars.len() && chars[j].flags & expand::UNKNOWN != 0 {
                j += 1;
            }
            let quote = |src: &Range<usize>| RChar {
                c: '"',
                src: src.clone(),
                via: expand::NO_BINDING,
                flags: expand::UNKNOWN,
            };
            out.push(quote(&r.src));
            for u in &chars[i..j] {
                let mut u = u.clone();
                if u.c == '"' || u.c == '\\' {
                    u.c = '\'';
                }
                out.push(u);
            }
            out.push(quote(&chars[j - 1].src));
            i = j;
            prev = '"';
            continue;
        }
        if r.c == '"' && prev != '\\' {
            in_str = !in_str;
        }
        prev = r.c;
        out.push(r.clone());
        i += 1;
    }
    out
}

/// From byte offsets in expanded text back to where each character is written.
struct SpanMap<'a> {
    chars: &'a [RChar],
    /// The character each byte of the expanded text belongs to.
    owner: Vec<usize>,
}

impl<'a> SpanMap<'a> {
    fn new(chars: &'a [RChar]) -> Self {
        let mut owner = Vec::new();
        for (k, r) in chars.iter().enumerate() {
            owner.extend(std::iter::repeat_n(k, r.c.len_utf8()));
        }
        SpanMap { chars, owner }
    }

    fn map(&self, span: &Range<usize>) -> Range<usize> {
        let n = self.chars.len();
        if n == 0 {
            return 0..0;
        }
        let at = |b: usize| self.owner.get(b).copied().unwrap_or(n - 1);
        let first = &self.chars[at(span.start)];
        if span.end <= span.start {
            return first.src.start..first.src.start;
        }
        let last = &self.chars[at(span.end - 1)];
        first.src.start..last.src.end.max(first.src.start)
    }

    fn binding(&self, span: &Range<usize>, env: &Env) -> Option<Binding> {
        let n = self.chars.len();
        (span.start..span.end.min(self.owner.len()))
            .filter_map(|b| self.owner.get(b))
            .filter(|&&k| k < n)
            .find_map(|&k| env.bindings.get(self.chars[k].via as usize))
            .cloned()
    }

    fn remap(
        &self,
        node: &mut ConfigNode,
        env: &Env,
        via: &mut Vec<(Range<usize>, Binding)>,
        depth: usize,
    ) {
        if depth > config::MAX_DEPTH {
            return;
        }
        let original = node.span.clone();
        node.span = self.map(&original);
        match &mut node.value {
            Value::Map(entries) => {
                for (k, v) in entries {
                    k.span = self.map(&k.span);
                    self.remap(v, env, via, depth + 1);
                }
            }
            Value::List(items) => {
                for v in items {
                    self.remap(v, env, via, depth + 1);
                }
            }
            _ => {
                if let Some(b) = self.binding(&original, env) {
                    via.push((node.span.clone(), b));
                }
            }
        }
    }
}
