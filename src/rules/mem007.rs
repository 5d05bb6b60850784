//! MEM007 lora-full-multiplier: with LoRA or QLoRA in use, a training-memory formula that charges
//! gradients or optimizer states to every parameter of the model. Documentation:
//! `rules/MEM007.toml`.

use super::requirement::requirement;
use super::states::{component, in_bytes, says_upper_bound, scope, sharded, Component, Reported};
use super::{fmt_num, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::expr::{Role, Term};

pub struct LoraFullMultiplier;

/// A parameter count may carry up to fp32 weights' 4 bytes before it counts more than weights.
const WEIGHT_BYTES_MAX: f64 = 4.0;
/// A model size counted twice (within 5%) counts a second copy: gradients or states.
const SECOND_COPY: f64 = 1.95;

impl Rule for LoraFullMultiplier {
    fn code(&self) -> &'static str {
        "MEM007"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        let Some(lora_at) = training.lora_at.as_deref() else {
            return;
        };
        if !training.lora || !training.trains || training.inference {
            return;
        }
        let mut reported = Reported::default();
        for f in &cx.facts.formulas {
            // A formula that branches on LoRA has an arm for full fine-tuning.
            let branches = f.guard.lora || scope(cx, f).is_some_and(|s| s.tests.lora);
            if f.inference
                || branches
                || f.lin.saw(Role::Trainable)
                || f.lin.saw(Role::KvCache)
                || says_upper_bound(cx, f)
            {
                continue;
            }
            let Some(req) = requirement(f) else { continue };
            // Embeddings and heads that train in full (`modules_to_save`) carry full states.
            let whole = |t: &&&Term| !names_a_trained_module(&t.symbol);
            let terms: Vec<&&Term> = req.terms.iter().filter(whole).collect();
            let charged: Vec<&&Term> = terms
                .iter()
                .copied()
                .filter(|t| {
                    matches!(component(t), Component::Grads | Component::States)
                        && matches!(t.role, Role::Model | Role::ParamCount)
                        && !sharded(t)
                })
                .collect();
            let per_param: f64 = terms
                .iter()
                .filter(|t| component(t) == Component::PerParam && !t.opaque)
                .map(|t| in_bytes(t.coef.abs()))
                .sum();
            let copies: f64 = terms
                .iter()
                .filter(|t| component(t) == Component::Weights && !t.opaque)
                .map(|t| t.coef.abs())
                .sum();
            let what = if let Some(t) = charged.first() {
                let state = if component(t) == Component::Grads {
                    "gradients"
                } else {
                    "optimizer states"
                };
                Some((
                    t.span.clone(),
                    format!("charges {state} to the whole model (`{}`)", t.symbol),
                ))
            } else if per_param > WEIGHT_BYTES_MAX * 1.05 {
                Some((
                    f.span.clone(),
                    format!(
                        "counts {} bytes for every parameter of the model, more than its weights take",
                        fmt_num(per_param)
                    ),
                ))
            } else if copies >= SECOND_COPY {
                Some((
                    f.span.clone(),
                    format!(
                        "counts the whole model {}x, as if every parameter had gradients{}",
                        fmt_num(copies),
                        if copies >= 3.0 {
                            " and optimizer states"
                        } else {
                            ""
                        }
                    ),
                ))
            } else {
                None
            };
            let Some((span, what)) = what else { continue };
            if !reported.first(f) {
                continue;
            }
            let message = format!(
                "LoRA is in use (seen at {lora_at}), but this memory formula {what}: only the adapters' parameters get gradients and optimizer states"
            );
            let help = "count the frozen base once at its storage dtype and charge gradients and optimizer states to the trainable parameters only: total_params x weight_bytes + trainable_params x (param + grad + state bytes), plus activations";
            out.push(Diagnostic::new("MEM007", span, message).with_help(help));
        }
    }
}

/// `embed_params`, `lm_head_gb`, `modules_to_save_mem`: a module that trains in full beside the
/// adapters.
fn names_a_trained_module(symbol: &str) -> bool {
    let s = symbol.to_ascii_lowercase();
    [
        "embed",
        "head",
        "modules_to_save",
        "vocab",
        "trainable_token",
    ]
    .iter()
    .any(|w| s.contains(w))
}
