//! GA003 zero-grad-inside-accumulation: gradients are zeroed on every micro-step while the
//! optimizer steps once per window, so only the last micro-batch reaches the step. Also a
//! `zero_grad()` ahead of the backward in an `accelerator.accumulate()` block. Documentation:
//! `rules/GA003.toml`.

use super::{edits, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Fix};

pub struct ZeroGradInsideAccumulation;

impl Rule for ZeroGradInsideAccumulation {
    fn code(&self) -> &'static str {
        "GA003"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for lp in &cx.facts.loops {
            let n = &lp.factor;
            for z in &lp.zero_grads {
                let call = cx.file.slice(&z.span);
                let message = format!(
                    "`{call}` runs on every micro-step while the optimizer steps every `{n}` micro-batches: each step sees only the last micro-batch's gradient"
                );
                let anchor = lp.last_step_statement();
                let edits = match (&z.statement, anchor) {
                    (Some(stmt), _) if lp.zero_grad_at_boundary => {
                        edits::delete_statement(cx.file, stmt)
                    }
                    (Some(stmt), Some(anchor)) => edits::move_after(cx.file, stmt, &anchor),
                    _ => None,
                };
                let fix = edits.map(|edits| Fix {
                    applicability: Applicability::Unsafe,
                    message: if lp.zero_grad_at_boundary {
                        "remove the per-micro-step zeroing (the step branch already zeroes)".into()
                    } else {
                        "zero the gradients right after the optimizer step".into()
                    },
                    edits,
                });
                out.push(
                    Diagnostic::new("GA003", z.span.clone(), message)
                        .with_help("zero the gradients once per optimizer step, right after `optimizer.step()`")
                        .with_fix(fix),
                );
            }
        }
        for z in &cx.facts.zero_grad_in_accumulate {
            let call = cx.file.slice(z);
            out.push(
                Diagnostic::new(
                    "GA003",
                    z.clone(),
                    format!("`{call}` comes before the backward inside `accelerator.accumulate()`: on the sync step it wipes the gradients of the window before its last backward"),
                )
                .with_help("call `zero_grad()` after `optimizer.step()` at the end of the block; the prepared optimizer skips it on non-sync steps"),
            );
        }
    }
}
