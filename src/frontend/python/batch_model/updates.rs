//! Counts of optimizer steps a loop shows by what it does: the bound of a loop whose every
//! iteration is one optimizer step (`for it in range(max_iters):` around a loop over the
//! micro-steps), and what a counter of optimizer steps is compared with (`if global_step >=
//! max_steps: break`) or divides (`lr = peak * updates / warmup`).

use super::*;
use crate::facts::{LOOP_ITERATIONS, STEP_COUNTER};

impl Walker<'_> {
    /// The counts of optimizer steps the loops show: their bounds and what their counters are
    /// compared with.
    pub(super) fn loop_counts(
        &self,
        loops: &[AccumLoop],
        counter_uses: &[Vec<CounterUse>],
    ) -> Vec<Count> {
        let bounds = loops.iter().filter_map(|lp| self.update_count(lp));
        let counted = loops
            .iter()
            .zip(counter_uses)
            .flat_map(|(lp, uses)| counter_counts(lp, uses));
        bounds.chain(counted).collect()
    }

    /// `for it in range(max_iters):` around a loop over the micro-steps: `max_iters` counts
    /// optimizer steps. Its name, where the outer loop reads it (`range(stop)` or `range(start,
    /// stop)`).
    fn update_count(&self, lp: &AccumLoop) -> Option<Count> {
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
    /// loop: a name the loop adds one to where its optimizer steps and nowhere else in the
    /// file. Where it steps is the statements of the step's block, or a branch taken only on
    /// the iteration that steps (`if accelerator.sync_gradients:`, the accumulation boundary);
    /// under accelerate's `accumulate()` the optimizer is called on every micro-step, so only
    /// the branch tells.
    pub(in super::super) fn step_counter_uses(
        &self,
        tree: &Tree,
        lp: &AccumLoop,
    ) -> Vec<CounterUse> {
        if lp.factor_value.is_some_and(|v| v <= 1.0) {
            return Vec::new();
        }
        let root = tree.root_node();
        let Some(lp_node) = loop_node(root, &lp.header) else {
            return Vec::new();
        };
        let mut counters: Vec<String> = Vec::new();
        let mut add = |name: String| {
            if !counters.contains(&name) && self.increments(&name) == 1 {
                counters.push(name);
            }
        };
        for step in lp.steps.iter().filter(|_| !lp.accelerate) {
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
                if let Some(name) = self.added_one(s) {
                    add(name);
                }
            }
        }
        for (name, at) in &self.step_counters {
            if lp_node.byte_range().contains(at) {
                add(name.clone());
            }
        }
        let mut function = lp_node;
        while let Some(p) = function.parent() {
            function = p;
            if function.ty() == "function_definition" {
                break;
            }
        }
        let mut out = Vec::new();
        for counter in counters {
            self.compared_with(function, &counter, &mut out, 0);
        }
        out
    }

    /// `name += 1` (or `name = name + 1`) as a statement: the name.
    pub(in super::super) fn added_one(&self, stmt: Node) -> Option<String> {
        let inc = stmt
            .named_child(0)
            .filter(|_| stmt.ty() == "expression_statement")?;
        let plain = inc
            .field("left")
            .is_some_and(|l| matches!(l.ty(), "identifier" | "attribute"));
        self.counts_up(inc).filter(|_| plain).map(str::to_string)
    }

    /// How many statements of the file add to `name` (`name += ...`, `name = name + ...`).
    pub(in super::super) fn increments(&self, name: &str) -> usize {
        let bytes = self.src.as_bytes();
        memchr::memmem::find_iter(bytes, name.as_bytes())
            .filter(|at| {
                let before = bytes[..*at].last().copied().unwrap_or(b' ');
                if before.is_ascii_alphanumeric() || before == b'_' || before == b'.' {
                    return false;
                }
                let rest = self.src[at + name.len()..].trim_start_matches([' ', '\t']);
                // `name = name + 1`, not a keyword argument (`f(name=name)`).
                rest.starts_with("+=")
                    || rest
                        .strip_prefix('=')
                        .filter(|r| !r.starts_with('='))
                        .and_then(|r| r.trim_start().strip_prefix(name))
                        .is_some_and(|r| r.trim_start().starts_with('+'))
            })
            .count()
    }

    /// Comparisons of `counter` with a name (`counter >= n`, `n > counter`) and divisions of
    /// `counter` by one (`counter / n`) under `node`.
    fn compared_with(&self, node: Node, counter: &str, out: &mut Vec<CounterUse>, depth: usize) {
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
        if let Some([a, b]) = operands.filter(|_| !self.reported_only(node)) {
            let divides = node.ty() == "binary_operator";
            // A counter scaled before it is divided (`pi * updates / total`) is divided too.
            let is_counter = |n: Node| {
                self.text(n) == counter
                    || (divides
                        && n.ty() == "binary_operator"
                        && n.field("operator").is_some_and(|o| self.text(o) == "*")
                        && [n.field("left"), n.field("right")]
                            .into_iter()
                            .flatten()
                            .any(|f| self.text(f) == counter))
            };
            let other = match (is_counter(a), self.text(b) == counter) {
                (true, false) => Some(b),
                (false, true) if !divides => Some(a),
                _ => None,
            };
            // A count named or written in place (`updates / (len(loader) * epochs)`).
            let count = |n: &Node| {
                matches!(
                    n.ty(),
                    "identifier"
                        | "attribute"
                        | "parenthesized_expression"
                        | "binary_operator"
                        | "call"
                )
            };
            if let Some(n) = other.filter(count).map(super::super::unparen) {
                out.push(CounterUse {
                    counter: counter.to_string(),
                    count: n.byte_range(),
                    used: node.byte_range(),
                });
            }
        }
        if node.ty() == "call" && depth < 32 {
            self.handed_to_helper(node, counter, out, depth);
        }
        let mut c = node.walk();
        for child in node.named_children(&mut c) {
            self.compared_with(child, counter, out, depth + 1);
        }
    }

    /// A value that is only shown (`print(f"{step / total:.0%}")`, `bar.set_postfix(...)`):
    /// it sizes nothing.
    fn reported_only(&self, node: Node) -> bool {
        let mut at = node;
        while let Some(p) = at.parent() {
            if p.ty().ends_with("statement") || p.ty() == "block" {
                return false;
            }
            let shown = match p.ty() {
                "interpolation" => true,
                "call" => p.field("function").is_some_and(|f| {
                    matches!(
                        last_segment(self.text(f)),
                        "print"
                            | "log"
                            | "log_dict"
                            | "log_metrics"
                            | "info"
                            | "debug"
                            | "warning"
                            | "write"
                            | "add_scalar"
                            | "set_postfix"
                            | "set_description"
                    )
                }),
                _ => false,
            };
            if shown {
                return true;
            }
            at = p;
        }
        false
    }

    /// `lr_at(updates, total)`, a function of the file that compares or divides its parameters:
    /// the counter measured against the argument the call hands in.
    fn handed_to_helper(&self, call: Node, counter: &str, out: &mut Vec<CounterUse>, depth: usize) {
        let (Some(func), Some(args)) = (call.field("function"), call.field("arguments")) else {
            return;
        };
        let mut c = args.walk();
        let args: Vec<Node> = args.named_children(&mut c).collect();
        let Some(at) = args.iter().position(|a| self.text(*a) == counter) else {
            return;
        };
        let name = self.text(func);
        let mut root = call;
        while let Some(p) = root.parent() {
            root = p;
        }
        let mut c = root.walk();
        let def = root.named_children(&mut c).find_map(|n| {
            let d = match n.ty() {
                "decorated_definition" => n.field("definition")?,
                _ => n,
            };
            let named = d.field("name").is_some_and(|f| self.text(f) == name);
            (d.ty() == "function_definition" && named).then_some(d)
        });
        let (Some(params), Some(body)) = (
            def.and_then(|d| d.field("parameters")),
            def.and_then(|d| d.field("body")),
        ) else {
            return;
        };
        let mut c = params.walk();
        let params: Vec<&str> = params
            .named_children(&mut c)
            .map(|p| match p.ty() {
                "identifier" => self.text(p),
                _ => p.field("name").map_or("", |n| self.text(n)),
            })
            .collect();
        let Some(param) = params.get(at).filter(|p| !p.is_empty()) else {
            return;
        };
        let mut inner = Vec::new();
        self.compared_with(body, param, &mut inner, depth + 1);
        for u in inner {
            let count = self.src.get(u.count.clone()).unwrap_or("");
            // The argument given for the parameter the helper measures against, by position.
            let given = params
                .iter()
                .position(|p| *p == count)
                .and_then(|i| args.get(i))
                .filter(|a| matches!(a.ty(), "identifier" | "attribute"));
            if let Some(a) = given {
                out.push(CounterUse {
                    counter: counter.to_string(),
                    count: a.byte_range(),
                    used: call.byte_range(),
                });
            }
        }
    }
}

/// A counter of optimizer steps compared with a count, or dividing it.
pub(in super::super) struct CounterUse {
    pub(in super::super) counter: String,
    /// The count as written where it is used (`total` in `updates >= total`).
    pub(in super::super) count: Range<usize>,
    /// The comparison or the division.
    pub(in super::super) used: Range<usize>,
}

/// The loop statement whose first line is `header`.
pub(in super::super) fn loop_node<'t>(root: Node<'t>, header: &Range<usize>) -> Option<Node<'t>> {
    let mut node = root.descendant_for_byte_range(header.start, header.start)?;
    loop {
        if matches!(node.ty(), "for_statement" | "while_statement")
            && node.start_byte() == header.start
        {
            return Some(node);
        }
        node = node.parent()?;
    }
}

/// What the loop's counters of optimizer steps are compared with or divide: counts of
/// optimizer steps.
fn counter_counts(lp: &AccumLoop, uses: &[CounterUse]) -> Vec<Count> {
    uses.iter()
        .map(|u| Count {
            value: u.count.clone(),
            scheduler: None,
            call: u.used.clone(),
            key: format!("{STEP_COUNTER}{}", u.counter),
            iterations: Some(Some(Missing::Accumulation(
                lp.factor.clone(),
                lp.header.clone(),
            ))),
        })
        .collect()
}
