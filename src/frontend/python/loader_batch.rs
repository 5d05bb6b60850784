//! Data loaders built with the global batch (BS002's loader case): `DataLoader(ds,
//! batch_size=batch_size)` in a file that derives the accumulation factor as
//! `batch_size // micro_batch_size`, which says `batch_size` is the batch of a whole window and
//! `micro_batch_size` the batch of one micro-step.

use super::*;
use crate::frontend::fields::{PyField, PyKind};

/// A loader's `batch_size` argument as written, where, and the loader's call.
pub(super) struct LoaderArg<'s> {
    pub(super) text: &'s str,
    span: Range<usize>,
    call: Range<usize>,
    /// The parameter it names, when it names one of the function the loader is built in.
    param: Option<Param>,
}

/// A parameter of a function: the function's name, the parameter's position (without `self`),
/// and the function's text, where a derivation reads the parameter itself.
struct Param {
    function: String,
    at: usize,
    body: Range<usize>,
}

/// A batch as written somewhere on its way to a loader: the text and where, the function whose
/// parameter it is (a derivation in that function reads the same value; one outside it,
/// another), and the call it is an argument of (the loader's, or a helper's that builds one).
struct Candidate {
    text: String,
    span: Range<usize>,
    within: Option<Range<usize>>,
    call: Range<usize>,
}

/// How many functions up a loader's batch is followed through the parameters it is passed as.
const PASSED_DEPTH: usize = 3;

/// The function a node is written in, if any (a lambda or a class body ends the search).
fn enclosing_function(node: Node) -> Option<Node> {
    let mut at = node.parent();
    while let Some(n) = at {
        match n.ty() {
            "function_definition" => return Some(n),
            "lambda" | "class_definition" => return None,
            _ => at = n.parent(),
        }
    }
    None
}

impl<'s> Walker<'s> {
    /// `batch_size=<value>` in a call of a data loader.
    pub(super) fn note_loader_batch(&mut self, keyword: Node, value: Node) {
        let Some(call) = keyword
            .parent()
            .and_then(|args| args.parent())
            .filter(|call| call.ty() == "call")
        else {
            return;
        };
        let is_loader = call
            .field("function")
            .is_some_and(|f| last_segment(self.text(f)).ends_with("DataLoader"));
        let text = self.text(value);
        if is_loader && matches!(value.ty(), "identifier" | "attribute") {
            let param = (value.ty() == "identifier")
                .then(|| self.param_named(value, text))
                .flatten();
            self.loader_batch_args.push(LoaderArg {
                text,
                span: value.byte_range(),
                call: call.byte_range(),
                param,
            });
        }
    }

    /// The loaders whose batch is the one the file divides by the micro batch to get the
    /// accumulation factor (a name for one, or the factor an accumulating loop steps on), but
    /// not an evaluation loader.
    pub(super) fn loader_batches(&self, tree: &Tree, loops: &[AccumLoop]) -> Vec<LoaderBatch> {
        let mut out = Vec::new();
        for LoaderArg {
            text: arg,
            span,
            call,
            param,
        } in &self.loader_batch_args
        {
            // A parameter of the loader's function holds what its callers pass: the batch the
            // file derives the factor from where the function derives it from the parameter,
            // or where a call passes that batch. Reported where the batch is written.
            let mut candidates = vec![Candidate {
                text: arg.to_string(),
                span: span.clone(),
                within: param.as_ref().map(|p| p.body.clone()),
                call: call.clone(),
            }];
            if let Some(p) = param {
                candidates.extend(self.passed(tree, &p.function, arg, p.at, PASSED_DEPTH));
            }
            out.extend(candidates.iter().find_map(|c| self.loader_batch(c, loops)));
        }
        out
    }

    /// What the calls of `function` in the file pass for its parameter `name`, the `at`-th
    /// (without `self`): by keyword or by position, as written and where. A call that passes a
    /// parameter of its own function on (`make(batch_size=batch_size)` inside `def
    /// loaders(batch_size)`) is followed to that function's calls, `depth` functions up.
    fn passed(
        &self,
        tree: &Tree,
        function: &str,
        name: &str,
        at: usize,
        depth: usize,
    ) -> Vec<Candidate> {
        let root = tree.root_node();
        let mut out = Vec::new();
        for found in memchr::memmem::find_iter(self.src.as_bytes(), function.as_bytes()) {
            let end = found + function.len();
            let Some(callee) = root.descendant_for_byte_range(found, end) else {
                continue;
            };
            if callee.ty() != "identifier" || callee.byte_range() != (found..end) {
                continue;
            }
            let function_node = match callee.parent() {
                Some(a) if a.ty() == "attribute" && a.field("attribute") == Some(callee) => a,
                _ => callee,
            };
            let Some(call) = function_node
                .parent()
                .filter(|c| c.ty() == "call" && c.field("function") == Some(function_node))
            else {
                continue;
            };
            let Some(args) = call.field("arguments") else {
                continue;
            };
            let mut cursor = args.walk();
            let children: Vec<Node> = args.named_children(&mut cursor).collect();
            let keyword = children.iter().find_map(|n| {
                (n.ty() == "keyword_argument"
                    && n.field("name").map(|k| self.text(k)) == Some(name))
                .then(|| n.field("value"))?
            });
            let value = keyword.or_else(|| {
                children
                    .iter()
                    .filter(|n| !matches!(n.ty(), "keyword_argument" | "comment"))
                    .nth(at)
                    .copied()
            });
            let Some(v) = value else { continue };
            let text = self.text(v);
            let outer = (v.ty() == "identifier")
                .then(|| self.param_named(v, text))
                .flatten();
            out.push(Candidate {
                text: text.to_string(),
                span: v.byte_range(),
                within: outer.as_ref().map(|p| p.body.clone()),
                call: call.byte_range(),
            });
            if let Some(p) = outer.filter(|p| depth > 0 && p.function != function) {
                out.extend(self.passed(tree, &p.function, text, p.at, depth - 1));
            }
        }
        out
    }

    /// The parameter `name` of the function `node` is written in, if it is one.
    fn param_named(&self, node: Node, name: &str) -> Option<Param> {
        let f = enclosing_function(node)?;
        Some(Param {
            at: self.params_of(f).iter().position(|p| p == name)?,
            function: self.text(f.field("name")?).to_string(),
            body: f.byte_range(),
        })
    }

    /// The loader whose `batch_size` is `arg`, when `arg` is the batch the file divides by the
    /// micro batch to get the accumulation factor.
    fn loader_batch(&self, candidate: &Candidate, loops: &[AccumLoop]) -> Option<LoaderBatch> {
        let Candidate {
            text: arg,
            span,
            within,
            call,
        } = candidate;
        let key = last_segment(arg);
        if key.to_ascii_lowercase().contains("micro") || self.evaluation_loader(call) {
            return None;
        }
        // `accum = <key> // <micro>` with the same prefix (`cfg.batch_size // cfg.micro_batch_size`).
        let prefix = arg.strip_suffix(key).unwrap_or("");
        let derivation = self.assigned_text.iter().find_map(|(name, text)| {
            if !names_accumulation(name) && !loops.iter().any(|lp| lp.factor == *name) {
                return None;
            }
            let compact: String = text.split_whitespace().collect();
            let (left, right) = compact
                .split_once("//")
                .or_else(|| compact.split_once('/'))?;
            let left = left.trim_start_matches("int(").trim_start_matches('(');
            let right = right.trim_end_matches(')');
            let micro = right.strip_prefix(prefix)?;
            (left == arg
                && crate::expr::device_count(micro).is_none()
                && micro.chars().all(|c| c.is_alphanumeric() || c == '_'))
            .then(|| (name.clone(), text.to_string(), right.to_string()))
        });
        let (accum, text, micro) = derivation?;
        // A parameter's value is derived from only inside its function.
        let at = memchr::memmem::find_iter(self.src.as_bytes(), text.as_bytes())
            .find(|a| within.as_ref().is_none_or(|w| w.contains(a)));
        if within.is_some() && at.is_none() {
            return None;
        }
        // A batch bound again between the derivation and the call (`batch_size =
        // micro_batch_size`) is no longer the window's.
        if at.is_some_and(|a| self.rebound(arg, a + text.len()..span.start)) {
            return None;
        }
        Some(LoaderBatch {
            span: span.clone(),
            arg: arg.to_string(),
            micro,
            accum,
            derivation: text.split_whitespace().collect::<Vec<_>>().join(" "),
            derived_at: at.map(|a| a..a + text.len()),
        })
    }

    /// Whether `name` (a plain name) is assigned at the start of a line within `range`.
    fn rebound(&self, name: &str, range: Range<usize>) -> bool {
        let Some(text) = self.src.get(range) else {
            return false;
        };
        let bytes = text.as_bytes();
        memchr::memmem::find_iter(bytes, name.as_bytes()).any(|at| {
            let line = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |i| i + 1);
            let after = text[at + name.len()..].trim_start_matches([' ', '\t']);
            bytes[line..at].iter().all(|b| matches!(b, b' ' | b'\t'))
                && after.starts_with('=')
                && !after.starts_with("==")
        })
    }
}
