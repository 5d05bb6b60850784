//! Where a batch equation is reported: the product or the count that leaves the factor out,
//! followed from the value a use reads down to where it is written.

use super::*;

impl<'a> Model<'a, '_> {
    /// Where the value's factors are written: through the names it reads and the operands that
    /// carry every batch factor, to the expression that combines them.
    pub(super) fn written_at(&self, node: Node<'a>, f: Factors, depth: usize) -> Node<'a> {
        if depth > MAX_DEPTH {
            return node;
        }
        let node = unparen(node);
        let batch = |n: Node| {
            let g = self.factors(n, 0);
            (g.micro, g.accum, g.world) == (f.micro, f.accum, f.world)
        };
        match node.ty() {
            "identifier" | "attribute" | "subscript" => match self.binding(self.text(node)) {
                Some(rhs) if batch(rhs) => self.written_at(rhs, f, depth + 1),
                _ => node,
            },
            "binary_operator" => {
                let (Some(l), Some(r)) = (node.field("left"), node.field("right")) else {
                    return node;
                };
                let (lf, rf) = (self.factors(l, 0), self.factors(r, 0));
                let op = node.field("operator").map_or("", |o| self.text(o));
                // `len(ds) // global_batch`: the batch is written where the divisor is, unless
                // the divisor is a partial batch the file completes elsewhere (`train_batch_size
                // * accum` in a log line): then the division left the factor out.
                if matches!(op, "/" | "//") && !lf.holds_batch() && rf.holds_batch() {
                    return match self.completed_elsewhere(r, rf) {
                        true => node,
                        false => self.written_at(r, rf, depth + 1),
                    };
                }
                // `steps * accelerator.num_processes`: a count times a factor the use needs
                // (accelerate's prepared scheduler steps once per process) is written where the
                // count is.
                let bare = |g: Factors| g.samples == 0 && g.micro == 0 && g.accum == 0;
                if op == "*" && f.samples != 0 {
                    if lf.samples == f.samples && bare(rf) && rf.holds_batch() {
                        return self.written_at(l, lf, depth + 1);
                    }
                    if rf.samples == f.samples && bare(lf) && lf.holds_batch() {
                        return self.written_at(r, rf, depth + 1);
                    }
                }
                match (lf.holds_batch(), rf.holds_batch()) {
                    (true, false) if batch(l) && f.samples == lf.samples => {
                        self.written_at(l, f, depth + 1)
                    }
                    (false, true) if batch(r) && f.samples == rf.samples => {
                        self.written_at(r, f, depth + 1)
                    }
                    _ => node,
                }
            }
            "call" => {
                let callee = node.field("function").map_or("", |c| self.text(c));
                let wrapper = matches!(
                    last_segment(callee),
                    "int" | "float" | "round" | "ceil" | "floor" | "sqrt"
                );
                let arg = node.field("arguments").and_then(|a| a.named_child(0));
                match (wrapper, arg) {
                    (true, Some(a)) if batch(a) => self.written_at(a, f, depth + 1),
                    _ => node,
                }
            }
            _ => node,
        }
    }

    /// `name` holds a batch `f` that the file multiplies elsewhere by a factor `f` lacks
    /// (`name * accum`, `world * name`).
    fn completed_elsewhere(&self, node: Node<'a>, f: Factors) -> bool {
        if !matches!(node.ty(), "identifier" | "attribute") {
            return false;
        }
        let name = self.text(node);
        let src = self.w.src;
        word_positions(src, name).any(|at| {
            let Some(used) = self.root.descendant_for_byte_range(at, at + name.len()) else {
                return false;
            };
            let product = used
                .parent()
                .filter(|p| p.ty() == "binary_operator")
                .filter(|p| p.field("operator").is_some_and(|o| self.text(o) == "*"));
            let Some(product) = product else {
                return false;
            };
            let other = [product.field("left"), product.field("right")]
                .into_iter()
                .flatten()
                .find(|o| o.byte_range() != used.byte_range());
            other.is_some_and(|o| {
                let g = self.factors(o, 0);
                (g.accum > 0 && f.accum == 0) || (g.world > 0 && f.world == 0)
            })
        })
    }
}
