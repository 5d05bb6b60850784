//! GA008 scaler-per-micro-step: in an accumulating loop a `GradScaler` updates its scale or
//! unscales the gradients on every micro-step while the optimizer steps once per window, steps
//! on every micro-step while it updates once per window, or one optimizer is unscaled twice
//! before the scaler updates. Documentation: `rules/GA008.toml`.

use super::{edits, line_of, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Fix};
use crate::facts::ScalerOp;

pub struct ScalerPerMicroStep;

impl Rule for ScalerPerMicroStep {
    fn code(&self) -> &'static str {
        "GA008"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for lp in &cx.facts.loops {
            let n = &lp.factor;
            let Some(step) = lp.steps.first() else {
                continue;
            };
            let step_text = cx.file.slice(&step.span);
            let step_line = line_of(cx.file, step.span.start);
            for c in &lp.scaler_micro_calls {
                let call = cx.file.slice(&c.call.span);
                let (message, help, anchor) = match c.op {
                    ScalerOp::Update => (
                        format!("`{call}` runs on every micro-step while the optimizer steps every `{n}` micro-batches (`{step_text}`, {step_line}): the loss scale changes while the window's scaled gradients accumulate"),
                        "update the scale once per optimizer step, right after `scaler.step(optimizer)`",
                        // After the step; not when the boundary already updates.
                        (!lp.update_at_boundary)
                            .then(|| lp.last_step_statement())
                            .flatten()
                            .map(|a| (a, true)),
                    ),
                    ScalerOp::Unscale => (
                        format!("`{call}` runs on every micro-step while the optimizer steps every `{n}` micro-batches (`{step_text}`, {step_line}): it unscales partial sums that later micro-batches add scaled gradients to, and a second `unscale_` before `update()` raises a RuntimeError"),
                        "unscale once, at the boundary, just before clipping and `scaler.step(optimizer)`",
                        // Before the step; not when the boundary clips (the unscale goes before
                        // the clip) or already unscales.
                        (lp.unscales.is_empty() && !lp.clip_at_boundary && lp.clips.is_empty())
                            .then(|| step.statement.clone())
                            .flatten()
                            .map(|a| (a, false)),
                    ),
                };
                let fix = match (&c.call.statement, anchor) {
                    (Some(stmt), Some((anchor, true))) => edits::move_after(cx.file, stmt, &anchor),
                    (Some(stmt), Some((anchor, false))) => {
                        edits::move_before(cx.file, stmt, &anchor)
                    }
                    _ => None,
                }
                .map(|edits| Fix {
                    applicability: Applicability::Unsafe,
                    message: "move it to the optimizer step".into(),
                    edits,
                });
                out.push(
                    Diagnostic::new("GA008", c.call.span.clone(), message)
                        .with_help(help)
                        .with_fix(fix),
                );
            }
        }
        for d in &cx.facts.steps_before_update {
            let step = cx.file.slice(&d.step.span);
            let update = cx.file.slice(&d.update.span);
            let update_line = line_of(cx.file, d.update.span.start);
            let n = &d.factor;
            let fix = match (&d.step.statement, &d.update.statement) {
                (Some(stmt), Some(anchor)) => edits::move_before(cx.file, stmt, anchor),
                _ => None,
            }
            .map(|edits| Fix {
                applicability: Applicability::Unsafe,
                message: format!("move it to the boundary, before `{update}`"),
                edits,
            });
            out.push(
                Diagnostic::new(
                    "GA008",
                    d.step.span.clone(),
                    format!("`{step}` runs on every micro-step while `{update}` runs every `{n}` micro-batches ({update_line}): GradScaler allows one `step` per `update`, so the second micro-step raises a RuntimeError (and with the scaler disabled the optimizer steps on every micro-step while the gradients are still accumulating)"),
                )
                .with_help("step at the boundary: call `scaler.step(optimizer)` inside the accumulation branch, just before `scaler.update()`")
                .with_fix(fix),
            );
        }
        for d in &cx.facts.double_unscales {
            let call = cx.file.slice(&d.second.span);
            let first_line = line_of(cx.file, d.first.start);
            out.push(
                Diagnostic::new(
                    "GA008",
                    d.second.span.clone(),
                    format!("`{call}` unscales an optimizer already unscaled at {first_line} with no `scaler.update()` between: `unscale_` may run once per optimizer step and a second call raises a RuntimeError"),
                )
                .with_help("unscale once per step, before clipping and `scaler.step(optimizer)`"),
            );
        }
    }
}
