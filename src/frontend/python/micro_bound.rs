//! A schedule as long as the training, where the training is counted in micro-steps: the loop
//! ends when a counter that goes up on every micro-step reaches a total (`if it >= total:
//! break`), and the scheduler stepped only at the boundary is built with that total as its
//! length. It advances total / N times: training ends after 1/N of the schedule (GA004's
//! reverse case, judged by what the loop does, whatever the total is named or derived from).

use super::*;

/// `while c < total:` or `if c >= total: break`: training ends when `c` reaches `total`.
#[derive(Clone, Debug)]
pub(super) struct StepBound {
    pub(super) counter: String,
    pub(super) total: String,
    /// The comparison.
    pub(super) at: Range<usize>,
}

impl Walker<'_> {
    /// Each accumulating loop's schedules whose length is the total its micro-steps end the
    /// training at: a scheduler stepped at its boundary, built with the total as its length,
    /// or a counter of optimizer steps measured against it (`lr = peak * updates / total`).
    pub(super) fn match_bounded_schedules(
        &self,
        tree: &Tree,
        loops: &mut [AccumLoop],
        counter_uses: &[Vec<batch_model::CounterUse>],
    ) {
        let root = tree.root_node();
        for (lp, uses) in loops.iter_mut().zip(counter_uses) {
            if lp.factor_value.is_some_and(|v| v <= 1.0) || lp.accelerate {
                continue;
            }
            let Some(node) = batch_model::loop_node(root, &lp.header) else {
                continue;
            };
            let mut found: Vec<MicroSchedule> = Vec::new();
            for bound in self.micro_bounds(node, lp) {
                let schedules = lp
                    .boundary_scheduler_steps
                    .iter()
                    .filter_map(|step| self.sized_by(lp, step, &bound, root));
                let counted = uses
                    .iter()
                    .filter(|u| self.src[u.count.clone()].trim() == bound.total)
                    .filter_map(|u| {
                        let step = Call {
                            span: u.used.clone(),
                            statement: None,
                        };
                        let (length, length_at) = self.total_written(&bound, u.count.clone())?;
                        Some(MicroSchedule {
                            counter: Some(u.counter.clone()),
                            ..bounded(step, u.used.clone(), length, length_at, &bound)
                        })
                    });
                for schedule in schedules.chain(counted).collect::<Vec<_>>() {
                    let seen =
                        lp.micro_sized_schedules.iter().chain(&found).any(|s| {
                            s.built == schedule.built || s.length_at == schedule.length_at
                        });
                    if !seen {
                        found.push(schedule);
                    }
                }
            }
            lp.micro_sized_schedules.extend(found);
        }
    }

    /// Where the loop's micro-steps end the training: a counter of them compared with a total
    /// inside the loop or a loop around it (`while it < total:` around the loop over the
    /// micro-batches; not a check before training starts), or the loop's own `range(total)`
    /// when it holds the optimizer's step.
    fn micro_bounds(&self, node: Node, lp: &AccumLoop) -> Vec<StepBound> {
        let loops_around = around(node);
        let mut out: Vec<StepBound> = Vec::new();
        for counter in self.micro_counters(node) {
            out.extend(
                self.step_bounds
                    .iter()
                    .filter(|b| {
                        b.counter == counter
                            && loops_around
                                .iter()
                                .any(|l| l.start <= b.at.start && b.at.end <= l.end)
                    })
                    .cloned(),
            );
        }
        let steps_inside = lp
            .steps
            .iter()
            .any(|s| node.start_byte() <= s.span.start && s.span.end <= node.end_byte());
        if let Some(bound) = self.range_bound(node).filter(|_| steps_inside) {
            out.push(bound);
        }
        out
    }

    /// `for it in range(total):` (or `range(start, total)`): the loop ends after `total`
    /// iterations, each one micro-step.
    fn range_bound(&self, node: Node) -> Option<StepBound> {
        if node.ty() != "for_statement" || skips_iterations(node.field("body")?, node) {
            return None;
        }
        let right = node.field("right")?;
        if right.ty() != "call" || right.field("function").map(|f| self.text(f)) != Some("range") {
            return None;
        }
        let args = right.field("arguments")?;
        let mut c = args.walk();
        let all: Vec<Node> = args.named_children(&mut c).collect();
        let total = match all.as_slice() {
            [total] | [_, total] => *total,
            _ => return None,
        };
        let counter = self.text(node.field("left")?).to_string();
        matches!(total.ty(), "identifier" | "attribute").then(|| StepBound {
            counter,
            total: self.text(total).to_string(),
            at: right.byte_range(),
        })
    }

    /// The total as written where it is given its value, when that is one place in the file,
    /// or else where it is used (`used`).
    fn total_written(
        &self,
        bound: &StepBound,
        used: Range<usize>,
    ) -> Option<(String, Range<usize>)> {
        let total = bound.total.as_str();
        Some(match self.assigned_text.get(total) {
            Some(value) if !self.batch.reassigned.contains(total) => {
                let at = batch_model::offset_in(self.src, value)?;
                let shown = batch_model::compact_spaced(value);
                (format!("{total} = {shown}"), at..at + value.len())
            }
            _ => (total.to_string(), used),
        })
    }

    /// Names that go up by one on every iteration of the loop: added to by a statement of its
    /// body itself (no branch, no `continue` that can skip it), and nowhere else in the file.
    /// A counter of optimizer steps is not one.
    fn micro_counters(&self, lp: Node) -> Vec<String> {
        let Some(body) = lp.field("body") else {
            return Vec::new();
        };
        if skips_iterations(body, lp) {
            return Vec::new();
        }
        let mut c = body.walk();
        body.named_children(&mut c)
            .filter_map(|s| self.added_one(s))
            .filter(|name| {
                self.increments(name) == 1 && !self.step_counters.iter().any(|(c, _)| c == name)
            })
            .collect()
    }

    /// The schedule of the scheduler `step` advances, when the scheduler is built with the
    /// bound's total as its length (any argument but a warm-up's).
    fn sized_by(
        &self,
        lp: &AccumLoop,
        step: &Call,
        bound: &StepBound,
        root: Node,
    ) -> Option<MicroSchedule> {
        let (_, recv) = self.scheduler_steps.iter().find(|(s, _)| *s == step.span)?;
        let (_, _, built) = self
            .built_schedulers
            .iter()
            .rev()
            .find(|(name, scope, _)| {
                name == recv && (name.contains('.') || *scope == 0 || *scope == lp.scope)
            })?;
        let ctor = root.descendant_for_byte_range(built.start, built.end)?;
        let args = ctor.field("arguments")?;
        let mut c = args.walk();
        let length = args.named_children(&mut c).find_map(|a| {
            let (key, value) = match a.ty() {
                "keyword_argument" => (a.field("name").map(|k| self.text(k)), a.field("value")?),
                _ => (None, a),
            };
            let warmup = key.is_some_and(|k| k.to_ascii_lowercase().contains("warm"));
            (!warmup && self.text(value) == bound.total).then_some(value)
        })?;
        let (length, length_at) = self.total_written(bound, length.byte_range())?;
        Some(bounded(
            step.clone(),
            built.clone(),
            length,
            length_at,
            bound,
        ))
    }
}

/// A schedule as long as the training the bound ends.
fn bounded(
    step: Call,
    built: Range<usize>,
    length: String,
    length_at: Range<usize>,
    bound: &StepBound,
) -> MicroSchedule {
    MicroSchedule {
        step,
        built,
        length,
        length_at,
        warmup: false,
        by_factor: false,
        prepared: false,
        counter: None,
        ends_training: false,
        micro_bound: Some((bound.counter.clone(), bound.at.clone())),
    }
}

/// The loop and the loops around it in its function, as byte ranges.
fn around(lp: Node) -> Vec<Range<usize>> {
    let mut out = vec![lp.byte_range()];
    let mut at = lp.parent();
    while let Some(n) = at.filter(|n| n.ty() != "function_definition") {
        if matches!(n.ty(), "for_statement" | "while_statement") {
            out.push(n.byte_range());
        }
        at = n.parent();
    }
    out
}

/// A `continue` of the loop `lp` somewhere in its body: some iterations skip its statements.
fn skips_iterations(body: Node, lp: Node) -> bool {
    let mut stack = vec![body];
    while let Some(n) = stack.pop() {
        match n.ty() {
            "continue_statement" => return true,
            // A nested loop's `continue` is its own; a nested function is not run here.
            "for_statement" | "while_statement" | "function_definition" | "class_definition"
                if n != lp =>
            {
                continue
            }
            _ => {}
        }
        let mut c = n.walk();
        stack.extend(n.named_children(&mut c));
    }
    false
}
