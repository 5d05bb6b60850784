//! GA008 scaler-per-micro-step: in an accumulating loop a `GradScaler` updates its scale or
//! unscales the gradients before the window's last backward, steps on every micro-step while it
//! updates once per window, one optimizer is unscaled twice before the scaler updates, or the
//! scaler updates twice in an iteration that steps two optimizers.
//! Documentation: `rules/GA008.toml`.

use super::{line_of, loop_fix, path_clause, window_factor, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::MisstepKind;

pub struct ScalerPerMicroStep;

impl Rule for ScalerPerMicroStep {
    fn code(&self) -> &'static str {
        "GA008"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for m in &cx.facts.missteps {
            let call = cx.file.slice(&m.call);
            let path = path_clause(&m.path);
            let related = m
                .related
                .as_ref()
                .map(|r| (cx.file.slice(r), line_of(cx.file, r.start)));
            let (message, help) = match (m.kind, related) {
                (MisstepKind::UpdateInWindow, Some((step, line))) => (
                    format!("`{call}` runs on every micro-step while the optimizer steps every {} micro-batches (`{step}`, {line}){path}: the loss scale changes while the window's scaled gradients accumulate", window_factor(m)),
                    "update the scale once per optimizer step, right after `scaler.step(optimizer)`",
                ),
                (MisstepKind::UnscaleInWindow, Some((step, line))) => (
                    format!("`{call}` runs on every micro-step while the optimizer steps every {} micro-batches (`{step}`, {line}){path}: it unscales partial sums that later micro-batches add scaled gradients to, and a second `unscale_` before `update()` raises a RuntimeError", window_factor(m)),
                    "unscale once, at the boundary, just before clipping and `scaler.step(optimizer)`",
                ),
                (MisstepKind::StepBeforeUpdate, Some((update, line))) => (
                    format!("`{call}` runs on every micro-step while `{update}` runs every {} micro-batches ({line}){path}: GradScaler allows one `step` per `update`, so the second micro-step raises a RuntimeError (and with the scaler disabled the optimizer steps on every micro-step while the gradients are still accumulating)", window_factor(m)),
                    "step at the boundary: call `scaler.step(optimizer)` inside the accumulation branch, just before `scaler.update()`",
                ),
                (MisstepKind::DoubleUnscale, Some((_, line))) => (
                    format!("`{call}` unscales an optimizer already unscaled at {line} with no `scaler.update()` between{path}: `unscale_` may run once per optimizer step and a second call raises a RuntimeError"),
                    "unscale once per step, before clipping and `scaler.step(optimizer)`",
                ),
                (MisstepKind::DoubleUpdate, Some((_, line))) => (
                    format!("`{call}` updates the scale a second time in this iteration (first at {line}), after the scaler stepped a second optimizer{path}: the scale should be updated once per iteration, after every optimizer stepped"),
                    "call `scaler.update()` once, after the last `scaler.step(...)` of the iteration",
                ),
                _ => continue,
            };
            out.push(
                Diagnostic::new("GA008", m.call.clone(), message)
                    .with_help(help)
                    .with_fix(loop_fix(m)),
            );
        }
    }
}
