//! Variables: assignments bound in the program of [`super::values`] (`x=$(( ))`, `let`,
//! `(( x = ... ))`, `$(expr ...)`, `$(f args)`, numbers), and what each variable holds as text,
//! for expanding command words later.

use super::arith;
use super::expand::{self, Mode, RChar};
use super::flow::Status;
use super::values::PendingKind;
use super::Walker;
use crate::expr::program::Node as V;
use crate::expr::Lin;
use crate::frontend::fields::ShField;
use crate::frontend::{flag_evidence, parse_number};
use tree_sitter::Node;

impl<'s> Walker<'s> {
    pub(super) fn assignment(&mut self, node: Node) {
        let (Some(name), Some(value)) = (node.field("name"), node.field("value")) else {
            return;
        };
        let target = self.text(name);
        let value_text = self.text(value);
        flag_evidence(
            target,
            value_text,
            node.byte_range(),
            &mut self.facts.evidence,
        );
        let literal = value_text.trim_matches(['"', '\'']);
        let status = self.text_binding(node, target, value);
        // `VAR=x cmd` sets the variable for that command only; a branch known not to run sets
        // nothing.
        if self.parent_kind() == Some("command") || status == Status::Dead {
            return;
        }
        if status == Status::Live {
            if let Some(v) = parse_number(literal) {
                let lin = Lin::constant(v, None);
                self.facts.note_constant(target, &lin, value.byte_range());
            }
        }
        let local = node.parent().is_some_and(|p| {
            p.kind() == "declaration_command"
                && ["local", "declare", "typeset"]
                    .iter()
                    .any(|w| self.text(p).starts_with(w))
        });
        let append = self
            .src
            .get(name.end_byte()..value.start_byte())
            .is_some_and(|t| t.starts_with("+="));
        let id = if append || value.kind() == "array" {
            self.sync_path();
            let scope = self.scope();
            self.program.add(V::Opaque, value.byte_range(), scope)
        } else {
            self.value_of(value, 0)
        };
        self.bind_name(target, id, node.end_byte(), local);
        self.note_unit(target, value);
        if !append && self.guard().checkpointing && crate::expr::is_memory_name(target) {
            let factor = rescaled_by(self.text(value), target);
            self.pend(
                PendingKind::Checkpointed {
                    target: target.to_string(),
                    factor,
                },
                id,
                node.byte_range(),
            );
        }
        // What is computed here (not a copy of a name or a number) is a formula of its own.
        let computed = match value.kind() {
            "arithmetic_expansion" => value.named_child(0).map(|e| e.byte_range()),
            "command_substitution" => Some(value.byte_range()),
            "string" => {
                let mut c = value.walk();
                let parts: Vec<Node> = value.named_children(&mut c).collect();
                match parts.as_slice() {
                    [one] if one.kind() == "command_substitution" => Some(one.byte_range()),
                    [one] if one.kind() == "arithmetic_expansion" => {
                        one.named_child(0).map(|e| e.byte_range())
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let (Some(span), false) = (computed, append) {
            self.pend(
                PendingKind::Assign {
                    target: target.to_string(),
                },
                id,
                span,
            );
        }
    }

    /// `let "x = a - b"` (each argument one assignment): arithmetic like `$(( ))`.
    pub(super) fn let_command(&mut self, node: Node) {
        let mut c = node.walk();
        let args: Vec<Node> = node.children_by_field_name("argument", &mut c).collect();
        for a in args {
            let text = self.text(a);
            let (inner, base) = match a.kind() {
                "string" | "raw_string" if text.len() >= 2 => {
                    (&text[1..text.len() - 1], a.start_byte() + 1)
                }
                "word" => (text, a.start_byte()),
                _ => continue,
            };
            let Some(eq) = inner.find('=') else { continue };
            let target = inner[..eq].trim();
            let compound = inner[eq + 1..].starts_with('=')
                || target.ends_with(['+', '-', '*', '/', '%', '!', '<', '>']);
            if compound
                || target.is_empty()
                || !target
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                continue;
            }
            let expr = &inner[eq + 1..];
            self.sync_path();
            let scope = self.scope();
            let lowered = arith::tokenize(expr, base + eq + 1, false).and_then(|toks| {
                arith::lower(&toks, &mut self.program, scope, &|p, n, r| {
                    p.add(V::Name(n), r, scope)
                })
            });
            let lead = expr.len() - expr.trim_start().len();
            let span = base + eq + 1 + lead..base + eq + 1 + expr.trim_end().len();
            let id = match lowered {
                Some(id) => id,
                None => self.program.add(V::Opaque, span.clone(), scope),
            };
            self.bind_name(target, id, node.end_byte(), false);
            // Words of `let` are not read for units: the variable's earlier unit no longer holds.
            self.scales.remove(target);
            if lowered.is_some() {
                self.pend(
                    PendingKind::Assign {
                        target: target.to_string(),
                    },
                    id,
                    span,
                );
            }
        }
    }

    /// `(( x = a * 2 ))`: an assignment; `(( need > gpu ))`: a comparison.
    pub(super) fn arithmetic_command(&mut self, node: Node) {
        if !self.text(node).starts_with("((") {
            return;
        }
        let mut c = node.walk();
        let kids: Vec<Node> = node.named_children(&mut c).collect();
        for k in kids {
            let op = k.field("operator").map(|o| self.text(o));
            match (k.kind(), op, k.field("left"), k.field("right")) {
                ("binary_expression", Some("="), Some(l), Some(r))
                    if l.kind() == "variable_name" =>
                {
                    let target = self.text(l);
                    let id = self.value_of(r, 0);
                    self.bind_name(target, id, node.end_byte(), false);
                    self.note_unit(target, r);
                    self.pend(
                        PendingKind::Assign {
                            target: target.to_string(),
                        },
                        id,
                        r.byte_range(),
                    );
                }
                // `(( x += 1 ))` and the like: no longer a value known here.
                ("binary_expression", Some(op), Some(l), Some(_))
                    if l.kind() == "variable_name"
                        && op.ends_with('=')
                        && !matches!(op, "==" | "!=" | "<=" | ">=") =>
                {
                    self.sync_path();
                    let scope = self.scope();
                    let id = self.program.add(V::Opaque, k.byte_range(), scope);
                    self.bind_name(self.text(l), id, node.end_byte(), false);
                }
                _ => self.comparisons(k, 0, true),
            }
        }
    }

    /// Record what a variable holds as text (for command words), unless the assignment never runs.
    fn text_binding(&mut self, node: Node, target: &str, value: Node) -> Status {
        // `VAR=x cmd` sets the variable for that command only.
        if self.parent_kind() == Some("command") {
            return Status::Maybe;
        }
        let status = self.status(node);
        if status == Status::Dead {
            return status;
        }
        let append = self
            .src
            .get(node.start_byte()..value.start_byte())
            .is_some_and(|t| t.ends_with("+="));
        let mut chars: Vec<RChar> = if value.kind() == "array" {
            expand::unknown_chars(self.text(value), value.byte_range())
        } else {
            self.vars
                .expand_source(self.text(value), value.start_byte(), Mode::Assign)
                .into_iter()
                .flatten()
                .collect()
        };
        if append {
            let mut old = self
                .vars
                .vars
                .get(target)
                .map(|v| v.chars.clone())
                .unwrap_or_default();
            old.append(&mut chars);
            chars = old;
        }
        match status {
            Status::Live => self.vars.bind(target, chars, node.byte_range(), false),
            _ => self.vars.bind_maybe(target, chars, node.byte_range()),
        }
        status
    }

    /// `for x in one; do`: a loop over one word binds it; over several, `x` has no single value.
    pub(super) fn for_variable(&mut self, node: Node) {
        let Some(var) = node.field("variable") else {
            return;
        };
        let name = self.text(var).to_string();
        let mut c = node.walk();
        let values: Vec<Node> = node.children_by_field_name("value", &mut c).collect();
        let status = self.status(node);
        if status == Status::Dead {
            return;
        }
        match values.as_slice() {
            [one] if status == Status::Live => {
                let chars: Vec<RChar> = self
                    .vars
                    .expand_source(self.text(*one), one.start_byte(), Mode::Word)
                    .into_iter()
                    .flatten()
                    .collect();
                self.vars.bind(&name, chars, node.byte_range(), false);
            }
            _ => {
                let unknown = expand::unknown_chars(&format!("${name}"), var.byte_range());
                self.vars.bind(&name, unknown, node.byte_range(), true);
            }
        }
    }
}

impl<'s> Walker<'s> {
    /// `case "$DTYPE" in bf16) BPP=2 ;; fp32) BPP=4 ;; esac`: the numbers each arm assigns, a
    /// table keyed by the arms' dtype or optimizer names (MEM002, MEM003), as the arms of a
    /// Python `match` are.
    pub(super) fn case_table(&mut self, node: Node) {
        let k = crate::knowledge::knowledge();
        let known = |key: &str| k.dtype(key).is_some() || k.optimizer(key).is_some();
        let mut tables: Vec<crate::facts::Table> = Vec::new();
        let mut c = node.walk();
        for item in node
            .named_children(&mut c)
            .filter(|n| n.kind() == "case_item")
        {
            let mut ci = item.walk();
            let keys: Vec<String> = item
                .children_by_field_name("value", &mut ci)
                .map(|v| self.text(v).trim_matches(['"', '\'']).to_string())
                .filter(|key| known(key))
                .collect();
            if keys.is_empty() {
                continue;
            }
            let mut cs = item.walk();
            for s in item.named_children(&mut cs) {
                let (Some(name), Some(value)) = (s.field("name"), s.field("value")) else {
                    continue;
                };
                if s.kind() != "variable_assignment" {
                    continue;
                }
                let literal = self.text(value).trim_matches(['"', '\'']);
                let Some(number) = parse_number(literal) else {
                    continue;
                };
                let target = self.text(name).to_string();
                let at = match tables.iter().position(|t| t.name.as_ref() == Some(&target)) {
                    Some(i) => i,
                    None => {
                        tables.push(crate::facts::Table {
                            name: Some(target),
                            entries: Vec::new(),
                            arms: true,
                            returned: false,
                        });
                        tables.len() - 1
                    }
                };
                tables[at]
                    .entries
                    .extend(keys.iter().map(|key| crate::facts::TableEntry {
                        key: key.clone(),
                        value: number,
                        value_span: value.byte_range(),
                    }));
            }
        }
        self.facts
            .tables
            .extend(tables.into_iter().filter(|t| t.entries.len() >= 2));
    }
}

/// What `$((NAME * k))` or `$((NAME / k))` scales `NAME`'s own value by.
fn rescaled_by(value: &str, name: &str) -> Option<f64> {
    let inner = value
        .trim_matches('"')
        .strip_prefix("$((")?
        .strip_suffix("))")?
        .replace(' ', "");
    let rest = inner.strip_prefix('$').unwrap_or(&inner);
    let rest = match rest.strip_prefix('{') {
        Some(braced) => braced.strip_prefix(name)?.strip_prefix('}')?,
        None => rest.strip_prefix(name)?,
    };
    let k = crate::frontend::parse_number(rest.get(1..)?)?;
    match rest.as_bytes().first()? {
        b'*' => Some(k),
        b'/' if k != 0.0 => Some(1.0 / k),
        _ => None,
    }
}
