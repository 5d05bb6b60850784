//! Counts of optimizer steps a loop shows by what it does: the bound of a loop whose every
//! iteration is one optimizer step (`for it in range(max_iters):` around a loop over the
//! micro-steps), and what a counter of optimizer steps is compared with (`if global_step >=
//! max_steps: break`) or divides (`lr = peak * updates / warmup`).

use super::*;
use crate::facts::{LOOP_ITERATIONS, STEP_COUNTER};

impl Walker<'_> {
    /// `for it in range(max_iters):` around a loop over the micro-steps: `max_iters` counts
    /// optimizer steps. Its name, where the outer loop reads it (`range(stop)` or `range(start,
    /// stop)`).
    pub(super) fn update_count(&self, lp: &AccumLoop) -> Option<Count> {
        let updates = lp.updates.as_deref()?.trim();
        let args = updates.strip_prefix("range(")?.strip_suffix(')')?;
        let parts: Vec<&str> = args.split(',').collect();
        let stop = match parts.as_slice() {
            [stop] | [_, stop] => stop.trim(),
            _ => return None,
        };
        let plain = !stop.is_empty()
            && stop
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if !plain {
            return None;
        }
        let at = self.src[..lp.header.start].rfind(updates)?;
        let stop_at = at + "range(".len() + args.rfind(stop)?;
        Some(Count {
            value: stop_at..stop_at + stop.len(),
            scheduler: None,
            call: at..at + updates.len(),
            key: LOOP_ITERATIONS.into(),
            iterations: Some(
                (!lp.factor_value.is_some_and(|v| v <= 1.0))
                    .then(|| Missing::Accumulation(lp.factor.clone(), lp.header.clone())),
            ),
        })
    }

    /// What a counter of optimizer steps is compared with, or divides, in the function of the
    /// loop: a name the loop adds one to beside its optimizer step (in the statements of the
    /// step's block) and nowhere else in the file.
    pub(super) fn counter_counts(&self, tree: &Tree, lp: &AccumLoop) -> Vec<Count> {
        if lp.factor_value.is_some_and(|v| v <= 1.0) {
            return Vec::new();
        }
        let root = tree.root_node();
        let mut counters: Vec<(String, Node)> = Vec::new();
        for step in &lp.steps {
            let at = step.statement.as_ref().unwrap_or(&step.span);
            let Some(mut stmt) = root.descendant_for_byte_range(at.start, at.end) else {
                continue;
            };
            while let Some(p) = stmt.parent().filter(|p| p.ty() != "block") {
                stmt = p;
            }
            let Some(block) = stmt.parent() else {
                continue;
            };
            let mut c = block.walk();
            for s in block.named_children(&mut c) {
                let Some(name) = self.added_one(s) else {
                    continue;
                };
                if !counters.iter().any(|(n, _)| *n == name) && self.increments(&name) == 1 {
                    counters.push((name, block));
                }
            }
        }
        let mut out = Vec::new();
        for (counter, block) in counters {
            let mut function = block;
            while let Some(p) = function.parent() {
                function = p;
                if function.ty() == "function_definition" {
                    break;
                }
            }
            self.compared_with(function, &counter, lp, &mut out, 0);
        }
        out
    }

    /// `name += 1` as a statement: the name.
    fn added_one(&self, stmt: Node) -> Option<String> {
        let inc = stmt
            .named_child(0)
            .filter(|e| stmt.ty() == "expression_statement" && e.ty() == "augmented_assignment")?;
        let (left, right, op) = (
            inc.field("left")?,
            inc.field("right")?,
            inc.field("operator")?,
        );
        let plain = matches!(left.ty(), "identifier" | "attribute");
        (plain && self.text(op) == "+=" && self.text(right) == "1")
            .then(|| self.text(left).to_string())
    }

    /// How many statements of the file add to `name` (`name += ...`, `name = name + ...`).
    fn increments(&self, name: &str) -> usize {
        let bytes = self.src.as_bytes();
        memchr::memmem::find_iter(bytes, name.as_bytes())
            .filter(|at| {
                let before = bytes[..*at].last().copied().unwrap_or(b' ');
                if before.is_ascii_alphanumeric() || before == b'_' || before == b'.' {
                    return false;
                }
                let rest = self.src[at + name.len()..].trim_start_matches([' ', '\t']);
                rest.starts_with("+=")
                    || rest
                        .strip_prefix('=')
                        .filter(|r| !r.starts_with('='))
                        .is_some_and(|r| r.trim_start().starts_with(name))
            })
            .count()
    }

    /// Comparisons of `counter` with a name (`counter >= n`, `n > counter`) and divisions of
    /// `counter` by one (`counter / n`) under `node`.
    fn compared_with(
        &self,
        node: Node,
        counter: &str,
        lp: &AccumLoop,
        out: &mut Vec<Count>,
        depth: usize,
    ) {
        if depth > 64 {
            return;
        }
        let operands: Option<[Node; 2]> = match node.ty() {
            "comparison_operator" if node.named_child_count() == 2 => node
                .named_child(0)
                .zip(node.named_child(1))
                .map(|(a, b)| [a, b]),
            "binary_operator"
                if node
                    .field("operator")
                    .is_some_and(|o| matches!(self.text(o), "/" | "//")) =>
            {
                node.field("left")
                    .zip(node.field("right"))
                    .map(|(a, b)| [a, b])
            }
            _ => None,
        };
        if let Some([a, b]) = operands {
            let divides = node.ty() == "binary_operator";
            let other = match (self.text(a) == counter, self.text(b) == counter) {
                (true, false) => Some(b),
                (false, true) if !divides => Some(a),
                _ => None,
            };
            if let Some(n) = other.filter(|n| matches!(n.ty(), "identifier" | "attribute")) {
                out.push(Count {
                    value: n.byte_range(),
                    scheduler: None,
                    call: node.byte_range(),
                    key: format!("{STEP_COUNTER}{counter}"),
                    iterations: Some(Some(Missing::Accumulation(
                        lp.factor.clone(),
                        lp.header.clone(),
                    ))),
                });
            }
        }
        let mut c = node.walk();
        for child in node.named_children(&mut c) {
            self.compared_with(child, counter, lp, out, depth + 1);
        }
    }
}
