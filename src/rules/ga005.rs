//! GA005 clip-per-micro-step: gradients are clipped on every micro-step (clipping partial sums)
//! while the optimizer steps once per window, or clipped at the boundary while a `GradScaler`
//! still scales them. Documentation: `rules/GA005.toml`.

use super::{edits, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Fix};

pub struct ClipPerMicroStep;

impl Rule for ClipPerMicroStep {
    fn code(&self) -> &'static str {
        "GA005"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for lp in &cx.facts.loops {
            let n = &lp.factor;
            let first_step = lp.steps.first().and_then(|s| s.statement.clone());
            for c in &lp.clips {
                let call = cx.file.slice(&c.span);
                // With a scaler the clip belongs after `unscale_`; without one, before the step.
                let anchor = match (lp.uses_scaler, lp.unscales.first()) {
                    (true, Some(u)) => u.statement.clone().map(|u| (u, true)),
                    (true, None) => None,
                    (false, _) => first_step.clone().map(|s| (s, false)),
                };
                let fix = match (&c.statement, anchor) {
                    (Some(stmt), Some((anchor, true))) => edits::move_after(cx.file, stmt, &anchor),
                    (Some(stmt), Some((anchor, false))) => {
                        edits::move_before(cx.file, stmt, &anchor)
                    }
                    _ => None,
                }
                .map(|edits| Fix {
                    applicability: Applicability::Unsafe,
                    message: "clip once, at the optimizer step".into(),
                    edits,
                });
                out.push(
                    Diagnostic::new(
                        "GA005",
                        c.span.clone(),
                        format!("`{call}` runs on every micro-step while the optimizer steps every `{n}` micro-batches: it clips partial sums, not the accumulated gradient"),
                    )
                    .with_help("clip at the boundary: unscale (with a GradScaler), clip, step, update, zero")
                    .with_fix(fix),
                );
            }
        }
        for c in &cx.facts.clips_in_accumulate {
            let call = cx.file.slice(c);
            out.push(
                Diagnostic::new(
                    "GA005",
                    c.clone(),
                    format!("`{call}` runs on every micro-step inside `accelerator.accumulate()`: it clips partial sums, and under fp16 unscales the gradients again before the step"),
                )
                .with_help("clip only when the window ends: `if accelerator.sync_gradients:` before the clip"),
            );
        }
        for c in &cx.facts.clips_before_unscale {
            let call = cx.file.slice(&c.clip.span);
            let unscale = unscale_for(cx.file.slice(&c.step));
            let fix = match (&c.clip.statement, unscale) {
                (Some(stmt), Some(u)) => edits::insert_before(cx.file, stmt, &u).map(|edits| Fix {
                    applicability: Applicability::Unsafe,
                    message: format!("unscale first: `{u}`"),
                    edits,
                }),
                _ => None,
            };
            out.push(
                Diagnostic::new(
                    "GA005",
                    c.clip.span.clone(),
                    format!("`{call}` clips gradients that the GradScaler still multiplies by its loss scale: the threshold applies to scaled values"),
                )
                .with_help("call `scaler.unscale_(optimizer)` before clipping")
                .with_fix(fix),
            );
        }
    }
}

/// `scaler.step(optimizer)` → `scaler.unscale_(optimizer)`.
fn unscale_for(step: &str) -> Option<String> {
    let (recv, rest) = step.split_once(".step(")?;
    let arg = rest.strip_suffix(')')?.split(',').next()?.trim();
    if arg.is_empty() || arg.contains('=') || !recv.contains("scaler") {
        return None;
    }
    Some(format!("{recv}.unscale_({arg})"))
}
