//! GA004 scheduler-per-micro-step: the learning-rate schedule advances on every micro-step while
//! the optimizer steps once per window, and the schedule is sized in optimizer steps.
//! Documentation: `rules/GA004.toml`.

use super::{edits, line_of, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Fix};
use crate::facts::Framework;

pub struct SchedulerPerMicroStep;

impl Rule for SchedulerPerMicroStep {
    fn code(&self) -> &'static str {
        "GA004"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        // A scheduler prepared by accelerate skips the steps that do not sync (and steps once
        // per process on the others): what its length should count depends on the launch.
        if cx.training.frameworks.contains(&Framework::Accelerate) {
            return;
        }
        reverse(cx, out);
        // A schedule whose length counts micro-batches is consistent with stepping per
        // micro-batch.
        if !cx.facts.schedule_in_optimizer_steps {
            return;
        }
        for lp in &cx.facts.loops {
            let n = &lp.factor;
            let anchor = lp.last_step_statement();
            for s in &lp.scheduler_steps {
                let call = cx.file.slice(&s.span);
                let fix = match (&s.statement, &anchor) {
                    (Some(stmt), Some(anchor)) => edits::move_after(cx.file, stmt, anchor),
                    _ => None,
                }
                .map(|edits| Fix {
                    applicability: Applicability::Unsafe,
                    message: "step the scheduler right after the optimizer".into(),
                    edits,
                });
                out.push(
                    Diagnostic::new(
                        "GA004",
                        s.span.clone(),
                        format!("`{call}` runs on every micro-step while the optimizer steps every `{n}` micro-batches: the schedule, sized in optimizer steps, runs `{n}` times too fast"),
                    )
                    .with_help("step the scheduler once per optimizer step, inside the step branch")
                    .with_fix(fix),
                );
            }
        }
    }
}

/// The reverse case: stepped once per optimizer step while the length counts micro-batches.
fn reverse(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    for lp in &cx.facts.loops {
        if lp.factor_value.is_some_and(|v| v <= 1.0) {
            continue;
        }
        let n = &lp.factor;
        for m in &lp.micro_sized_schedules {
            let call = cx.file.slice(&m.step.span);
            let length = &m.length;
            let built = line_of(cx.file, m.built.start);
            out.push(
                Diagnostic::new(
                    "GA004",
                    m.step.span.clone(),
                    format!("`{call}` runs once per optimizer step (every `{n}` micro-batches) while the schedule's length counts micro-batches (`{length}`; the scheduler is built at {built}): training ends after 1/`{n}` of the schedule, before the learning rate has decayed"),
                )
                .with_help(format!("size the schedule in optimizer steps: divide the micro-batch count by `{n}` (rounding up)")),
            );
        }
    }
}
