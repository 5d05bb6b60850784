//! MEM012 run-does-not-fit: a run whose model, micro-batch, sequence length, precision, optimizer
//! and GPU memory the project states, and whose full estimate (activations and logits included)
//! exceeds the GPU even under the lightest reading of what it leaves unstated. Model states alone
//! are MEM005's. Documentation: `rules/MEM012.toml`.

use super::{Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::estimate::fit::{fit, Allow};
use crate::estimate::{estimate, Attention, Checkpointing, Component, Given, Inputs};

pub struct RunDoesNotFit;

impl Rule for RunDoesNotFit {
    fn code(&self) -> &'static str {
        "MEM012"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for run in &cx.training.project.estimates {
            if run.span.is_empty() || !stated(&run.inputs) {
                continue;
            }
            // What the run does not state is read at its lightest: the verdict holds whatever
            // the run does there.
            let mut light = run.inputs.clone();
            let lightest = "the lightest reading: the run does not say";
            light
                .checkpointing
                .get_or_insert_with(|| Given::new(Checkpointing::Full, lightest));
            light
                .attention
                .get_or_insert_with(|| Given::new(Attention::Flash, lightest));
            let Ok(e) = estimate(&light) else {
                continue;
            };
            let (Some(false), Some(gpu)) = (e.fits, e.gpu_memory) else {
                continue;
            };
            // Model states that do not fit on their own are MEM005's, and certain.
            let states: f64 = [
                Component::Weights,
                Component::Gradients,
                Component::Fp32Gradients,
                Component::MasterWeights,
                Component::OptimizerStates,
            ]
            .iter()
            .map(|c| e.get(*c))
            .sum();
            if states > gpu {
                continue;
            }
            let gb = |b: f64| format!("{:.1}", b / 1e9);
            let parts: Vec<String> = e
                .breakdown
                .iter()
                .filter(|(_, b)| *b >= 0.05e9)
                .map(|(c, b)| format!("{} {}", c.key().replace('_', " "), gb(*b)))
                .collect();
            let inputs: Vec<String> = e
                .inputs
                .iter()
                .filter(|(name, ..)| {
                    ["parameters", "micro-batch", "sequence length", "GPU memory"]
                        .contains(&name.as_str())
                })
                .map(|(name, value, from)| format!("{name} {value} ({from})"))
                .collect();
            let cheapest = fit(&run.inputs, Allow::default())
                .ok()
                .and_then(|f| f.into_iter().next());
            let help = match cheapest {
                Some(f) if f.flags.is_empty() => format!(
                    "a smaller micro-batch fits: up to {} (`memlint estimate --fit` lists the options)",
                    f.micro_batch
                ),
                Some(f) => format!(
                    "the cheapest configuration that fits: {} with a micro-batch up to {} (`memlint estimate --fit` lists the others)",
                    f.flags.join(" "),
                    f.micro_batch
                ),
                None => "nothing `memlint estimate --fit` tries fits: more GPUs or a smaller model".into(),
            };
            out.push(
                Diagnostic::new(
                    "MEM012",
                    run.span.clone(),
                    format!(
                        "this run needs about {} GB per GPU ({}) but the GPU has {} GB: the model states fit ({} GB), the activations and logits of its batch do not, {} ({})",
                        gb(e.total_bytes),
                        parts.join(", "),
                        gb(gpu),
                        gb(states),
                        match run.inputs.checkpointing {
                            None => "even with every layer recomputed",
                            Some(_) => "with the recomputation the run sets",
                        },
                        inputs.join(", ")
                    ),
                )
                .with_help(help),
            );
        }
    }
}

/// The run states the model, the micro-batch, the sequence length, the precision, the
/// optimizer and the GPU's memory.
fn stated(i: &Inputs) -> bool {
    (i.shape.is_some() || i.params.is_some())
        && i.micro_batch.is_some()
        && i.seq_len.is_some()
        && i.precision.is_some()
        && i.optimizer.is_some()
        && i.gpu_memory.is_some()
}
