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
        clipping_hooks(cx, out);
    }
}

/// Gradient hooks that clip run inside every backward, on that backward's gradient alone.
fn clipping_hooks(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    let facts = cx.facts;
    if !facts.hooks_see_each_backward() {
        return;
    }
    let what = if facts.builds_scaler || facts.loops.iter().any(|l| l.uses_scaler) {
        "the gradient the GradScaler still scales"
    } else {
        "each micro-batch's share of the gradient, not the accumulated one"
    };
    let help = "remove the hook and clip once before the step: `scaler.unscale_(optimizer)` (with a GradScaler), then `clip_grad_norm_` or `clip_grad_value_`";
    for span in &facts.clip_hooks {
        let message = format!(
            "`{}` registers a hook that clips inside every backward: it clips {what}",
            cx.file.slice(span)
        );
        out.push(Diagnostic::new("GA005", span.clone(), message).with_help(help));
    }
    for (module, name, span) in &facts.helper_calls {
        if cx.training.imported_clip_hooks(module, name) {
            let message = format!(
                "`{name}` (from `{module}`) registers gradient hooks that clip inside every backward: they clip {what}"
            );
            out.push(Diagnostic::new("GA005", span.clone(), message).with_help(help));
        }
    }
}
