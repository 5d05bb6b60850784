//! MEM011 checkpointing-misattributed: a memory value that gradient checkpointing sets to zero
//! (activations) or shrinks (parameters, gradients, optimizer states). Documentation:
//! `rules/MEM011.toml`.

use super::{fmt_num, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::expr::Role;
use crate::facts::{CheckpointedValue, Checkpointing};

pub struct CheckpointingMisattributed;

impl Rule for CheckpointingMisattributed {
    fn code(&self) -> &'static str {
        "MEM011"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if training.inference {
            return;
        }
        // Offloaded activations legitimately leave the GPU.
        let offloads = training
            .checkpointing
            .iter()
            .any(|c| c.value == Checkpointing::Offloaded);
        for v in &cx.facts.checkpointed {
            let message = if activations(v) && zeroed(v) && !offloads && !v.offloaded {
                let what = if v.returned {
                    format!("`{}` returns 0", v.target)
                } else {
                    format!("sets `{}` to 0", v.target)
                };
                format!(
                    "{what} when checkpointing: checkpointing still keeps each layer's input (about 2 x seq x batch x hidden bytes per layer in 16 bits) and one layer's activations while it is recomputed"
                )
            } else if let Some(k) = shrunk(v) {
                format!(
                    "scales `{}` by {} when checkpointing, but checkpointing recomputes activations only: parameters, gradients and optimizer states are the same size with or without it",
                    v.target,
                    fmt_num(k)
                )
            } else {
                continue;
            };
            out.push(
                Diagnostic::new("MEM011", v.span.clone(), message).with_help(
                    "with checkpointing, count activations as about 2 x seq x batch x hidden x layers bytes plus one layer's full activations, and keep the model-state terms as they are",
                ),
            );
        }
    }
}

fn activations(v: &CheckpointedValue) -> bool {
    let target = v.target.to_ascii_lowercase();
    // `act` and `acts` say activations as whole segments (`act_gib`, not `exact_gb`).
    let abbreviated = target.split(['_', '.']).any(|s| s == "act" || s == "acts");
    v.role == Role::Activations && target.contains("activ") || abbreviated
}

/// Set to 0, or multiplied by 0 in place (`activations_gib *= 0`).
fn zeroed(v: &CheckpointedValue) -> bool {
    v.factor == Some(0.0) || (v.lin.terms.iter().all(|t| t.coef == 0.0) && v.lin.constant == 0.0)
}

/// A model state scaled down (`optimizer_gb *= 0.5`, `params_gb = params_gb / 2`).
fn shrunk(v: &CheckpointedValue) -> Option<f64> {
    let k = v.factor?;
    (matches!(v.role, Role::Model | Role::Grads | Role::Optimizer) && k > 0.0 && k < 1.0 - 1e-9)
        .then_some(k)
}
