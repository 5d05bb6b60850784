//! GA004 scheduler-per-micro-step: the learning-rate schedule advances on every micro-step while
//! the optimizer steps once per window, and the schedule is sized in optimizer steps.
//! Documentation: `rules/GA004.toml`.

use super::{line_of, loop_fix, path_clause, window_factor, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::MisstepKind;

pub struct SchedulerPerMicroStep;

impl Rule for SchedulerPerMicroStep {
    fn code(&self) -> &'static str {
        "GA004"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        reverse(cx, out);
        stepped_elsewhere(cx, out);
        // A schedule whose length counts micro-batches is consistent with stepping per
        // micro-batch. (A scheduler prepared by accelerate outside `accumulate()` steps on every
        // call, once per process: at least as fast.)
        if !cx.facts.schedule_in_optimizer_steps {
            return;
        }
        for m in &cx.facts.missteps {
            if m.kind != MisstepKind::SchedulerInWindow {
                continue;
            }
            let call = cx.file.slice(&m.call);
            let n = window_factor(m);
            let path = path_clause(&m.path);
            // accelerate's factor is the one it was told, or its setting.
            let (every, times) = match (&m.factor, m.accelerate) {
                (Some(_), false) => (format!("every {n} micro-batches"), format!("{n} times")),
                (factor, _) => {
                    let n = factor.as_deref().unwrap_or("gradient_accumulation_steps");
                    (
                        format!("every `{n}` micro-batches (the Accelerator's factor)"),
                        format!("`{n}` times"),
                    )
                }
            };
            out.push(
                Diagnostic::new(
                    "GA004",
                    m.call.clone(),
                    format!("`{call}` runs on every micro-step while the optimizer steps {every}{path}: the schedule, sized in optimizer steps, runs {times} too fast"),
                )
                .with_help("step the scheduler once per optimizer step, inside the step branch")
                .with_fix(loop_fix(m)),
            );
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
            if out.iter().any(|d| d.range == m.length_at) {
                continue;
            }
            if let (Some(counter), Some((micro, bound))) = (&m.counter, &m.micro_bound) {
                let (length, used) = (&m.length, cx.file.slice(&m.built));
                let at = line_of(cx.file, m.built.start);
                let (ends, ends_at) = (cx.file.slice(bound), line_of(cx.file, bound.start));
                out.push(
                    Diagnostic::new(
                        "GA004",
                        m.length_at.clone(),
                        format!("`{length}` counts micro-batches: training ends at `{ends}` ({ends_at}), and `{micro}` goes up on every micro-step; but `{counter}`, measured against it in `{used}` ({at}), advances once per optimizer step (every `{n}` micro-batches): training ends when it has reached 1/`{n}` of the length, so the hand-written schedule never completes"),
                    )
                    .with_help(format!("measure the schedule in micro-steps, or divide its length by `{n}` (rounding up)")),
                );
                continue;
            }
            if let Some(counter) = &m.counter {
                let (length, used) = (&m.length, cx.file.slice(&m.built));
                let at = line_of(cx.file, m.built.start);
                let sized = match m.ends_training {
                    true => "the training it bounds",
                    false => "the hand-written schedule",
                };
                out.push(
                    Diagnostic::new(
                        "GA004",
                        m.length_at.clone(),
                        format!("`{length}` counts micro-batches, but `{counter}`, measured against it in `{used}` ({at}), advances once per optimizer step (every `{n}` micro-batches): it reaches the length `{n}` times later than meant, so {sized} runs `{n}` times too long"),
                    )
                    .with_help(format!("count it in optimizer steps: divide the micro-batch count by `{n}` (rounding up)")),
                );
                continue;
            }
            let call = cx.file.slice(&m.step.span);
            let length = &m.length;
            let built = line_of(cx.file, m.built.start);
            let step = line_of(cx.file, m.step.span.start);
            if let Some((counter, bound)) = &m.micro_bound {
                let ends = cx.file.slice(bound);
                let at = line_of(cx.file, bound.start);
                out.push(
                    Diagnostic::new(
                        "GA004",
                        m.length_at.clone(),
                        format!("the schedule's length `{length}` (the scheduler is built at {built}) counts micro-batches: training ends at `{ends}` ({at}), and `{counter}` goes up on every micro-step; but `{call}` ({step}) runs once per optimizer step (every `{n}` micro-batches): training ends after 1/`{n}` of the schedule, before the learning rate has decayed"),
                    )
                    .with_help(format!("step the scheduler on every micro-step, or size its length in optimizer steps: divide it by `{n}` (rounding up)")),
                );
                continue;
            }
            let runs = if lp.accelerate && !m.prepared {
                format!("`{call}` ({step}) runs only when the gradients sync, once per optimizer step (every `{n}` micro-batches, the Accelerator's factor)")
            } else if lp.accelerate {
                format!("`{call}` ({step}) advances the prepared scheduler only when the gradients sync, once per optimizer step (every `{n}` micro-batches, the Accelerator's factor)")
            } else {
                format!(
                    "`{call}` ({step}) runs once per optimizer step (every `{n}` micro-batches)"
                )
            };
            // Reported where the length is written: that is the number to divide (once, when
            // several boundaries step the scheduler).
            let counts = match m.by_factor {
                true => format!("counts micro-batches (it is multiplied by the accumulation factor `{n}`; the scheduler is built at {built})"),
                false => format!("counts micro-batches (the scheduler is built at {built})"),
            };
            let (message, help) = match m.warmup {
                true => (
                    format!("the warm-up's length `{length}` {counts}, but {runs}: the warm-up lasts `{n}` times longer than meant"),
                    format!("count the warm-up in optimizer steps: divide it by `{n}`, or leave out the factor"),
                ),
                false => (
                    format!("the schedule's length `{length}` {counts}, but {runs}: training ends after 1/`{n}` of the schedule, before the learning rate has decayed"),
                    format!("size the schedule in optimizer steps: divide the micro-batch count by `{n}` (rounding up)"),
                ),
            };
            out.push(Diagnostic::new("GA004", m.length_at.clone(), message).with_help(help));
        }
    }
}

/// The reverse case across modules: a scheduler a function of this file returns, sized by a
/// product with the accumulation factor, stepped once per optimizer step by a file that imports
/// the function.
fn stepped_elsewhere(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    for e in &cx.training.project.stepped_elsewhere {
        if out.iter().any(|d| d.range == e.length_at) {
            continue;
        }
        let (length, n, call, at) = (&e.length, &e.factor, &e.step, &e.step_at);
        let built = line_of(cx.file, e.built.start);
        let runs = match (e.accelerate, e.prepared) {
            (true, true) => "advances the prepared scheduler only when the gradients sync, once per optimizer step",
            (true, false) => "runs only when the gradients sync, once per optimizer step",
            (false, _) => "runs once per optimizer step",
        };
        out.push(
            Diagnostic::new(
                "GA004",
                e.length_at.clone(),
                format!("the schedule's length `{length}` counts micro-batches (it is multiplied by the accumulation factor `{n}`; the scheduler is built at {built}), but `{call}` ({at}), where this scheduler is stepped, {runs} (every `{n}` micro-batches): training ends after 1/`{n}` of the schedule, before the learning rate has decayed"),
            )
            .with_help(format!("size the schedule in optimizer steps: leave `{n}` out of its length")),
        );
    }
}
