//! Gradients cleared by hand: `for p in model.parameters(): p.grad = None` zeroes them as
//! `zero_grad()` does, and the loop model reads such a loop as one zeroing call.

use super::*;

/// How deep loops over parameter groups are followed (`for g in opt.param_groups: for p in
/// g["params"]: ...`).
const MAX_NESTED: usize = 2;

impl<'s> Walker<'s> {
    /// A `for` loop whose body only clears the gradients of what it iterates: recorded as a
    /// `zero_grad()` written where the loop is.
    pub(super) fn note_grad_clearing(&mut self, node: Node) {
        let span = node.byte_range();
        // A loop over a group's parameters inside one over the groups is part of that one.
        let within = |e: &CallEvent| {
            matches!(e.kind, CallKind::ZeroGrad { .. })
                && e.call.span.start <= span.start
                && span.end <= e.call.span.end
        };
        if !self.clears_grads(node, 0) || self.calls.iter().rev().any(within) {
            return;
        }
        let ctx = self.ctx(span.start);
        self.calls.push(CallEvent {
            ctx,
            kind: CallKind::ZeroGrad { optimizer: false },
            order: (span.start, 0),
            inlined: false,
            site_loops: 0,
            origin: span.clone(),
            depth: 0,
            call: Call {
                statement: Some(span.clone()),
                span,
            },
        });
    }

    /// Every statement of the loop's body clears or detaches the gradient of a loop
    /// variable (under `if p.grad is not None:`, or in a loop over a group's parameters), and
    /// one of them clears it: `p.grad = None`, `p.grad = torch.zeros_like(p)`,
    /// `p.grad.zero_()`, `p.grad.data.zero_()`.
    fn clears_grads(&self, node: Node, depth: usize) -> bool {
        let (Some(left), Some(body)) = (node.field("left"), node.field("body")) else {
            return false;
        };
        if node.field("alternative").is_some() {
            return false;
        }
        // `for p in params`, or the parameter of a pair (`for name, p in
        // model.named_parameters()`): the name whose gradient the body clears.
        let mut c = left.walk();
        let names: Vec<Node> = match left.ty() {
            "identifier" => vec![left],
            "pattern_list" | "tuple_pattern" => left
                .named_children(&mut c)
                .filter(|n| n.ty() == "identifier")
                .collect(),
            _ => Vec::new(),
        };
        names.iter().any(|name| {
            let mut cleared = false;
            self.block_clears(body, self.text(*name), depth, &mut cleared) && cleared
        })
    }

    fn block_clears(&self, block: Node, var: &str, depth: usize, cleared: &mut bool) -> bool {
        let mut c = block.walk();
        let statements: Vec<Node> = block
            .named_children(&mut c)
            .filter(|n| n.ty() != "comment")
            .collect();
        !statements.is_empty()
            && statements
                .iter()
                .all(|s| self.statement_clears(*s, var, depth, cleared))
    }

    fn statement_clears(&self, stmt: Node, var: &str, depth: usize, cleared: &mut bool) -> bool {
        let grad = |n: Node| {
            let text: String = self.text(n).split_whitespace().collect();
            let text = text.strip_suffix(".data").unwrap_or(&text).to_string();
            text.strip_prefix(var) == Some(".grad")
        };
        match stmt.ty() {
            "expression_statement" => {
                let Some(e) = stmt.named_child(0) else {
                    return false;
                };
                match e.ty() {
                    "assignment" => {
                        let (Some(left), Some(right)) = (e.field("left"), e.field("right")) else {
                            return false;
                        };
                        let value = self.text(right).trim();
                        let clears = value == "None"
                            || (right.ty() == "call"
                                && right
                                    .field("function")
                                    .is_some_and(|f| self.text(f).ends_with("zeros_like")));
                        *cleared |= clears;
                        grad(left) && clears
                    }
                    "call" => {
                        let Some(f) = e.field("function").filter(|f| f.ty() == "attribute") else {
                            return false;
                        };
                        let (Some(object), Some(method)) =
                            (f.field("object"), f.field("attribute"))
                        else {
                            return false;
                        };
                        let method = self.text(method);
                        let clears = method == "zero_";
                        *cleared |= clears;
                        grad(object) && (clears || matches!(method, "detach_" | "requires_grad_"))
                    }
                    _ => false,
                }
            }
            // `if p.grad is not None:` around the clearing, with no other arm.
            "if_statement" => {
                let tests_grad = stmt
                    .field("condition")
                    .is_some_and(|c| self.text(c).contains(&format!("{var}.grad")));
                tests_grad
                    && stmt.field("alternative").is_none()
                    && stmt
                        .field("consequence")
                        .is_some_and(|b| self.block_clears(b, var, depth, cleared))
            }
            "for_statement" if depth < MAX_NESTED => {
                let inner = self.clears_grads(stmt, depth + 1);
                *cleared |= inner;
                inner
            }
            _ => false,
        }
    }
}
