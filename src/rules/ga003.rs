//! GA003 zero-grad-inside-accumulation: gradients are zeroed between a backward of a window and
//! its optimizer step, so the step sees only what came after. Documentation: `rules/GA003.toml`.

use super::{loop_fix, path_clause, window_factor, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::MisstepKind;

pub struct ZeroGradInsideAccumulation;

impl Rule for ZeroGradInsideAccumulation {
    fn code(&self) -> &'static str {
        "GA003"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for m in &cx.facts.missteps {
            if m.kind != MisstepKind::ZeroGradInWindow {
                continue;
            }
            // A loop that clears the gradients by hand is named by its first line.
            let call = match cx.file.slice(&m.call).split_once('\n') {
                Some((first, _)) => format!("{} ...", first.trim_end()),
                None => cx.file.slice(&m.call).to_string(),
            };
            let path = path_clause(&m.path);
            let message = if m.accelerate && m.micro {
                format!("`{call}` runs on every micro-step of an `accelerator.accumulate()` window{path}: accelerate skips only the prepared optimizer's `zero_grad` between syncs, so each step sees only the last micro-batch's gradient")
            } else if m.accelerate {
                format!("`{call}` comes before the backward of an `accelerator.accumulate()` window{path}: on the sync step it wipes the gradients of the window before its last backward")
            } else if m.micro {
                let n = window_factor(m);
                format!("`{call}` runs on every micro-step while the optimizer steps every {n} micro-batches{path}: each step sees only the last micro-batch's gradient")
            } else {
                let n = window_factor(m);
                format!("`{call}` runs before the last backward of each window of {n} micro-batches{path}: the step sees only that backward's gradient")
            };
            let help = if m.accelerate {
                "call `zero_grad()` after `optimizer.step()` at the end of the block; the prepared optimizer skips it on non-sync steps"
            } else {
                "zero the gradients once per optimizer step, right after `optimizer.step()`"
            };
            out.push(
                Diagnostic::new("GA003", m.call.clone(), message)
                    .with_help(help)
                    .with_fix(loop_fix(m)),
            );
        }
    }
}
