//! GA002 double-scaled-loss: the loss is divided by the accumulation factor by hand and again by
//! the framework it is handed to (accelerate, a DeepSpeed engine, Lightning). Documentation:
//! `rules/GA002.toml`.

use super::{edits, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::facts::{Framework, ManualDivision};

pub struct DoubleScaledLoss;

impl Rule for DoubleScaledLoss {
    fn code(&self) -> &'static str {
        "GA002"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for d in &cx.facts.manual_divisions {
            let n = &d.divisor;
            let who = match d.framework {
                // The default factor of 1: only the DeepSpeed engine under accelerate's plugin
                // divides, when a DeepSpeed config of the run accumulates.
                Framework::Accelerate if d.engine_config => {
                    match super::deepspeed_accumulation(cx) {
                        Some(ds) => format!("under accelerate's DeepSpeed plugin the engine's `backward` divides it again by the DeepSpeed config's `gradient_accumulation_steps` ({} at {})", super::fmt_num(ds.value), ds.at),
                        // The divisor is the engine's own factor, read from its config.
                        None if d.engine_factor => "under accelerate's DeepSpeed plugin the engine's `backward` divides it again by the same factor, the DeepSpeed config's `gradient_accumulation_steps`, whenever it is above 1".to_string(),
                        None => continue,
                    }
                }
                Framework::Accelerate => "`accelerator.backward` divides it again by the Accelerator's `gradient_accumulation_steps`".to_string(),
                Framework::DeepSpeed => {
                    // The runs' DeepSpeed configs do not accumulate: the engine divides by 1.
                    // What the DeepSpeed configs say: those the script's launches reach, and
                    // dicts written in the script that hold DeepSpeed's batch keys.
                    let project = &cx.training.project;
                    let mut factors: Vec<f64> = project
                        .launched_by
                        .iter()
                        .chain(&project.own_run)
                        .filter_map(|r| r.deepspeed_accumulation.as_ref().map(|a| a.value))
                        .collect();
                    factors.extend(cx.facts.inline_configs.iter().filter_map(|c| {
                        let root = &c.root;
                        let deepspeed = ["train_micro_batch_size_per_gpu", "train_batch_size", "zero_optimization"]
                            .iter()
                            .any(|k| root.get(k).is_some());
                        root.get("gradient_accumulation_steps")
                            .filter(|_| deepspeed)?
                            .as_number()
                    }));
                    if !factors.is_empty() && factors.iter().all(|v| *v <= 1.0) {
                        continue;
                    }
                    "the DeepSpeed engine's `backward` divides it again by the config's `gradient_accumulation_steps` (`scale_wrt_gas` defaults to True)".to_string()
                }
                Framework::Lightning => {
                    if cx.facts.manual_optimization {
                        continue;
                    }
                    "Lightning divides what `training_step` returns by `accumulate_grad_batches` again".to_string()
                }
                Framework::HfTrainer => continue,
            };
            let message = format!(
                "loss is divided by `{n}` by hand and {who}: gradients come out `{n}` times too small"
            );
            out.push(
                Diagnostic::new("GA002", d.at.clone(), message)
                    .with_help(format!(
                        "drop the manual `/ {n}`: the framework already averages over the accumulation window"
                    ))
                    .with_fix(fix(cx, d)),
            );
        }
    }
}

/// Undo the division: delete `loss = loss / n` / `loss /= n`, or cut ` / n` out of the expression.
fn fix(cx: &Checker<'_>, d: &ManualDivision) -> Option<Fix> {
    let division = d.division.as_ref()?;
    let edits = match &division.statement {
        Some(stmt) => edits::delete_statement(cx.file, stmt)?,
        None => vec![Edit::replace(division.operator_and_divisor.clone(), "")],
    };
    Some(Fix {
        // The loss may also be logged or compared: its value changes for every reader.
        applicability: Applicability::Unsafe,
        message: format!("remove the division by `{}`", d.divisor),
        edits,
    })
}
