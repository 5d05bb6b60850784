//! GA005 clip-per-micro-step: gradients are clipped before the window's last backward (clipping
//! partial sums) while the optimizer steps once per window, or clipped while a `GradScaler`
//! still scales them. Documentation: `rules/GA005.toml`.

use super::{loop_fix, path_clause, window_factor, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::MisstepKind;

pub struct ClipPerMicroStep;

impl Rule for ClipPerMicroStep {
    fn code(&self) -> &'static str {
        "GA005"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for m in &cx.facts.missteps {
            let call = cx.file.slice(&m.call);
            let path = path_clause(&m.path);
            let (message, help) = match m.kind {
                MisstepKind::ClipInWindow if m.accelerate => (
                    format!("`{call}` runs on every micro-step inside `accelerator.accumulate()`{path}: it clips partial sums, and under fp16 unscales the gradients again before the step"),
                    "clip only when the window ends: `if accelerator.sync_gradients:` before the clip".to_string(),
                ),
                MisstepKind::ClipInWindow => (
                    format!("`{call}` runs on every micro-step while the optimizer steps every {} micro-batches{path}: it clips partial sums, not the accumulated gradient", window_factor(m)),
                    "clip at the boundary: unscale (with a GradScaler), clip, step, update, zero".to_string(),
                ),
                MisstepKind::ClipBeforeUnscale => (
                    format!("`{call}` clips gradients that the GradScaler still multiplies by its loss scale{path}: the threshold applies to scaled values"),
                    "call `scaler.unscale_(optimizer)` before clipping".to_string(),
                ),
                _ => continue,
            };
            out.push(
                Diagnostic::new("GA005", m.call.clone(), message)
                    .with_help(help)
                    .with_fix(loop_fix(m)),
            );
        }
    }
}
