//! Gradient hooks that clip (GA005). A hook registered on a parameter runs inside every backward
//! on that backward's gradient alone: under accumulation on each micro-batch's share, under a
//! `GradScaler` on the scaled gradient. The walk notes registrations and the helpers called as
//! statements; once the file's functions are known, `finish` keeps the hooks that clip.

use super::Walker;
use crate::frontend::fields::{PyField, PyKind};
use std::collections::HashMap;
use std::ops::Range;
use tree_sitter::Node;

#[derive(Default)]
pub(super) struct HookNotes<'s> {
    /// Registrations on parameters: the call, the hook as written, the scope.
    registrations: Vec<(Range<usize>, &'s str, usize)>,
    /// Classes by name, as written (a callable instance's `__call__` may clip).
    class_texts: HashMap<&'s str, &'s str>,
    /// Helpers imported from other modules, called as statements: module, name, call, and the
    /// arguments as written.
    helper_calls: Vec<(String, String, Range<usize>, Vec<&'s str>)>,
    /// What `.parameters()` is called on (`model`, `self.net`): the models the file trains.
    pub(super) models: Vec<&'s str>,
    /// Casts to fp32 (`.float()`, `.to(torch.float32)`) and what they cast: a loaded model
    /// (`from_pretrained(...).float()`), or the name the result is bound to or read from.
    pub(super) fp32_casts: Vec<(&'s str, std::ops::Range<usize>)>,
}

impl<'s> Walker<'s> {
    /// `x.register_hook(h)` on a parameter, or a statement calling an imported helper.
    pub(super) fn note_hook_call(&mut self, node: Node, callee: &str, last: &str) {
        if matches!(last, "parameters" | "named_parameters") {
            if let Some(f) = node.field("function").and_then(|f| f.field("object")) {
                let model = self.text(f);
                if !self.hooks.models.contains(&model) {
                    self.hooks.models.push(model);
                }
            }
            return;
        }
        if matches!(last, "register_hook" | "register_post_accumulate_grad_hook") {
            let receiver = callee.rsplit_once('.').map_or("", |(r, _)| r);
            let Some(hook) = node
                .field("arguments")
                .and_then(|a| a.named_child(0))
                .map(|h| self.text(h))
            else {
                return;
            };
            if on_parameter(node, receiver, self.src) {
                let scope = self.scope();
                self.hooks
                    .registrations
                    .push((node.byte_range(), hook, scope));
            }
            return;
        }
        // A helper that registers hooks is called for what it does: as a statement, or for the
        // handles it returns.
        let statement = node
            .parent()
            .is_some_and(|p| matches!(p.ty(), "expression_statement" | "assignment"));
        if statement {
            if let Some((module, name)) = self.imported(callee) {
                let mut args = Vec::new();
                if let Some(a) = node.field("arguments") {
                    let mut c = a.walk();
                    for arg in a.named_children(&mut c) {
                        let arg = arg.field("value").unwrap_or(arg);
                        args.push(self.text(arg));
                    }
                }
                self.hooks
                    .helper_calls
                    .push((module, name, node.byte_range(), args));
            }
        }
    }

    pub(super) fn note_class_text(&mut self, name: &'s str, text: &'s str) {
        self.hooks.class_texts.insert(name, text);
    }

    /// The registrations whose hook clips: its text clips, or it names (calls, wraps in
    /// `partial`, instantiates) a function or class of the file whose text does.
    /// `.float()` or `.to(torch.float32)`: noted with what it casts (see [`HookNotes`]).
    pub(super) fn note_fp32_cast(&mut self, node: Node, func: Node) {
        let receiver = func.field("object").map_or("", |o| self.text(o));
        let bound = node
            .parent()
            .filter(|p| p.ty() == "assignment")
            .and_then(|p| p.field("left"))
            .map(|l| self.text(l));
        let what = if receiver.contains("from_pretrained(") {
            "from_pretrained("
        } else {
            bound.unwrap_or(receiver)
        };
        self.hooks.fp32_casts.push((what, node.byte_range()));
    }

    pub(super) fn finish_hooks(&mut self, root: Node) {
        let notes = std::mem::take(&mut self.hooks);
        // The weights are fp32 when a loaded model, or one the file trains, is cast to fp32.
        for (what, span) in &notes.fp32_casts {
            let root = what.split(['.', '(']).next().unwrap_or(what);
            if *what == "from_pretrained(" || notes.models.iter().any(|m| *m == *what || *m == root)
            {
                self.facts.evidence.precision.push(crate::facts::Mention {
                    value: crate::facts::Precision::Fp32,
                    span: span.clone(),
                });
            }
        }
        // A helper can register hooks on a model only when it is given one: what the file
        // takes `.parameters()` of or calls as a module (`self.model(x)`), or the parameters.
        let src = self.src.as_bytes();
        let called = |a: &str| {
            let call = format!("{a}(");
            memchr::memmem::find_iter(src, call.as_bytes()).any(|at| {
                // `model(x)`, not `build_model(x)` or `self.model(x)` for `model`.
                at == 0
                    || !(src[at - 1].is_ascii_alphanumeric() || matches!(src[at - 1], b'_' | b'.'))
            })
        };
        let model = |a: &str| {
            notes.models.contains(&a)
                || a.contains("parameters(")
                || (!a.is_empty() && !a.contains(['(', ' ']) && called(a))
        };
        for (module, name, span, args) in notes.helper_calls {
            if args.iter().any(|a| model(a)) {
                self.facts.helper_calls.push((module, name, span));
            }
        }
        for (span, hook, scope) in notes.registrations {
            let defined_clips = |w: &str| {
                self.def_texts
                    .get(w)
                    .or_else(|| notes.class_texts.get(w))
                    .is_some_and(|t| self.clips(root, t))
            };
            // A hook bound to a name first (`h = partial(clip, c)`, `h = Clamp(c)`) is read
            // through it.
            let named_clips = words(hook).any(|w| {
                defined_clips(w)
                    || self.assigned_text.get(w).is_some_and(|value| {
                        self.clips(root, value) || words(value).any(|v| v != w && defined_clips(v))
                    })
            });
            if !(self.clips(root, hook) || named_clips) {
                continue;
            }
            self.facts.clip_hooks.push(span);
            // The module-level function it sits in registers clipping hooks for its callers.
            let mut s = scope;
            while let Some(sc) = self.scopes.get(s) {
                if sc.parent == Some(0) && !sc.is_class {
                    self.facts.clip_hook_exports.push(sc.name.clone());
                    break;
                }
                match sc.parent {
                    Some(p) => s = p,
                    None => break,
                }
            }
        }
    }
}

impl Walker<'_> {
    /// Whether `text` (a slice of the file: a hook expression, a function or class, a bound
    /// value) calls something that clamps or clips (`torch.clamp(g, -c, c)`, `g.clamp_(...)`,
    /// `clip_grad_value_(...)`, a helper such as `clamp_tensor(...)`) on every backward: a call
    /// in an arm that runs only on the micro-step that syncs (`if accelerator.sync_gradients:`,
    /// its `else:` under a negated test) clips the accumulated gradient.
    fn clips(&self, root: Node, text: &str) -> bool {
        let start = (text.as_ptr() as usize).wrapping_sub(self.src.as_ptr() as usize);
        let Some(top) = self
            .src
            .get(start..start + text.len())
            .and_then(|_| root.descendant_for_byte_range(start, start + text.len()))
        else {
            return false;
        };
        let mut stack = vec![top];
        while let Some(n) = stack.pop() {
            if n.ty() == "call" && self.clip_callee(n) && !self.on_sync_only(n, top) {
                return true;
            }
            let mut c = n.walk();
            stack.extend(n.named_children(&mut c));
        }
        false
    }

    /// Whether a call's callee names a clamp or a clip (its last identifier).
    fn clip_callee(&self, call: Node) -> bool {
        let Some(f) = call.field("function") else {
            return false;
        };
        let name = f.field("attribute").unwrap_or(f);
        let callee = self.text(name).to_ascii_lowercase();
        callee.contains("clamp") || callee.starts_with("clip")
    }

    /// Whether `node` sits, below `top`, in an arm that runs only when gradients sync.
    fn on_sync_only(&self, node: Node, top: Node) -> bool {
        let mut child = node;
        while let Some(parent) = child.parent() {
            if child.id() == top.id() {
                break;
            }
            let (test, taken) = match parent.ty() {
                "if_statement" | "elif_clause"
                    if parent.field("consequence").map(|c| c.id()) == Some(child.id()) =>
                {
                    (parent.field("condition"), true)
                }
                // `else:` of `if not accelerator.sync_gradients:`.
                "else_clause" => (
                    parent
                        .parent()
                        .filter(|p| p.ty() == "if_statement")
                        .and_then(|p| p.field("condition")),
                    false,
                ),
                _ => (None, true),
            };
            if test.and_then(|t| self.arm_holds(t, taken, &Self::syncs)) == Some(true) {
                return true;
            }
            child = parent;
        }
        false
    }
}

/// The identifiers of an expression (`partial(clamp_grad, c)` → `partial`, `clamp_grad`, `c`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// Whether the receiver of a registration is a parameter: a variable bound by a loop or a
/// comprehension over parameters (`for n, p in model.named_parameters()`), or an attribute
/// that names one (`layer.weight`, `self.params[0]`).
fn on_parameter(call: Node, receiver: &str, src: &str) -> bool {
    let paramish = |t: &str| t.contains("param") || t.ends_with("weight") || t.ends_with("bias");
    if paramish(receiver) {
        return true;
    }
    let root = receiver.split(['.', '[']).next().unwrap_or(receiver);
    let text = |n: Node| src.get(n.byte_range()).unwrap_or("");
    let mut at = call.parent();
    while let Some(n) = at {
        match n.ty() {
            "for_statement" | "for_in_clause" => {
                let binds = n
                    .field("left")
                    .is_some_and(|l| words(text(l)).any(|w| w == root));
                if binds && n.field("right").is_some_and(|r| text(r).contains("param")) {
                    return true;
                }
            }
            "list_comprehension" | "generator_expression" | "set_comprehension" => {
                let mut c = n.walk();
                let found = n.named_children(&mut c).any(|k| {
                    k.ty() == "for_in_clause"
                        && k.field("left")
                            .is_some_and(|l| words(text(l)).any(|w| w == root))
                        && k.field("right").is_some_and(|r| text(r).contains("param"))
                });
                if found {
                    return true;
                }
            }
            "function_definition" | "class_definition" | "module" => return false,
            _ => {}
        }
        at = n.parent();
    }
    false
}
