//! GA007 custom-loss-ignores-item-count: an HF `Trainer` loss written by hand receives the item
//! count of the accumulation window and never reads it, while the Trainer treats the loss as
//! already scaled for accumulation. Documentation: `rules/GA007.toml`.

use super::{fmt_num, line_of, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::CustomLossKind;

pub struct CustomLossIgnoresItemCount;

/// The key that turns accumulation on.
const KEY: &str = "gradient_accumulation_steps";

impl Rule for CustomLossIgnoresItemCount {
    fn code(&self) -> &'static str {
        "GA007"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        if cx.facts.custom_losses.is_empty() {
            return;
        }
        // Accumulation is on: a number above 1 written in the file for the Trainer's key (a
        // keyword argument, a dict at any depth, dataclass or argparse default), or else passed by every
        // launch that starts this file. A value set nowhere memlint reads is not known: silent.
        let keyword = cx
            .facts
            .accumulation_settings
            .iter()
            .map(|m| (m.value, m.span.start));
        let configs = cx
            .facts
            .inline_configs
            .iter()
            .filter_map(|c| c.root.find(KEY))
            .filter_map(|n| Some((n.as_number()?, n.span.start)));
        let settings: Vec<(f64, usize)> = keyword.chain(configs).collect();
        let written = settings
            .iter()
            .find(|(v, _)| *v > 1.0)
            .map(|&(factor, at)| {
                let gas = format!("`{KEY}={}` ({})", fmt_num(factor), line_of(cx.file, at));
                (Some(factor), gas)
            });
        // A trainer class the file only defines, for other code to build, trains with whatever
        // factor its builder chooses: any above 1 gives the wrong gradient.
        let built_elsewhere = || {
            settings.is_empty().then(|| {
                (
                    None,
                    format!("the `{KEY}` its builder chooses (the file builds no trainer)"),
                )
            })
        };
        let Some((factor, gas)) = written
            .or_else(|| launched_factor(cx).map(|(f, gas)| (Some(f), gas)))
            .or_else(built_elsewhere)
        else {
            return;
        };
        let times = |factor: Option<f64>| match factor {
            Some(f) => format!("{}x", fmt_num(f)),
            None => "that many times".to_string(),
        };
        for loss in &cx.facts.custom_losses {
            let elsewhere = matches!(
                loss.kind,
                CustomLossKind::Override {
                    built_elsewhere: true,
                    ..
                }
            );
            if factor.is_none() && !elsewhere {
                continue;
            }
            let f = &loss.function;
            // What the function ignores, and where the count would arrive.
            let ignores = match loss.param.strip_prefix("**") {
                Some(kw) => format!("`num_items_in_batch`, the item count of the accumulation window (it arrives in `**{kw}`)"),
                None => format!("`{}`, the item count of the accumulation window", loss.param),
            };
            let p = "num_items_in_batch";
            let defined = line_of(cx.file, loss.defined.start);
            let (message, help) = match &loss.kind {
                CustomLossKind::LossFunc => (
                    format!(
                        "`{f}` ({defined}) never reads {ignores}: with `compute_loss_func` set, the Trainer takes its loss as already scaled for accumulation and does not divide it by {gas}, so gradients come out {} too large",
                        times(factor)
                    ),
                    format!("sum the per-item losses and divide by `{p}` (as transformers' own losses do)"),
                ),
                CustomLossKind::Override {
                    class, causal_lm, ..
                } => (
                    format!(
                        "`{class}.compute_loss` never reads {ignores} and `{class}` does not set `model_accepts_loss_kwargs = False`: with a model that accepts loss keywords ({}), the Trainer takes the returned per-batch mean as already scaled for accumulation and does not divide it by {gas}, so gradients come out {} too large",
                        match causal_lm {
                            Some(lm) => format!(
                                "a causal LM: `{}`, {}",
                                cx.file.slice(lm),
                                line_of(cx.file, lm.start)
                            ),
                            None => format!("the language model `{class}`, an SFT trainer, trains"),
                        },
                        times(factor)
                    ),
                    format!("normalise by `{p}`, or set `self.model_accepts_loss_kwargs = False` in `{class}` so that the Trainer divides by the accumulation steps"),
                ),
            };
            out.push(Diagnostic::new("GA007", loss.at.clone(), message).with_help(help));
        }
    }
}

/// The accumulation factor every launch of this file passes (`--gradient_accumulation_steps 8`),
/// when they all pass the same one above 1.
fn launched_factor(cx: &Checker<'_>) -> Option<(f64, String)> {
    let (factor, run) = cx.training.project.launched_accumulation()?;
    let gas = format!(
        "`{KEY}={}` (passed by `{}` at {})",
        fmt_num(factor.value),
        run.command,
        factor.at
    );
    Some((factor.value, gas))
}
