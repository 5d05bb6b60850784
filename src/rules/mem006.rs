//! MEM006 missing-gradient-term: a training-memory formula that counts optimizer states but no
//! gradients. Documentation: `rules/MEM006.toml`.

use super::requirement::requirement;
use super::states::in_bytes;
use super::{Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::{Role, Term};

pub struct MissingGradientTerm;

impl Rule for MissingGradientTerm {
    fn code(&self) -> &'static str {
        "MEM006"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        // Offloads move gradients with the states (ZeRO-Offload keeps them on the host).
        if !training.trains
            || training.inference
            || training.lora
            || training.frozen
            || !training.offload.is_empty()
        {
            return;
        }
        // A total built on a reported formula is the same omission: report the first.
        let mut reported: Vec<std::ops::Range<usize>> = Vec::new();
        for f in &cx.facts.formulas {
            // A per-device share is judged against its stage by MEM008.
            if f.inference
                || f.lin.saw(Role::KvCache)
                || f.lin.saw(Role::Grads)
                || super::states::per_device(f)
            {
                continue;
            }
            let Some(req) = requirement(f) else { continue };
            let counts_states = req
                .terms
                .iter()
                .any(|t| t.part == Role::Optimizer || t.role == Role::Optimizer);
            let weights: Vec<&&Term> = req
                .terms
                .iter()
                .filter(|t| {
                    matches!(t.role, Role::Model | Role::ParamCount)
                        && matches!(t.part, Role::Model | Role::ParamCount | Role::Unknown)
                })
                .collect();
            let [weights] = weights.as_slice() else {
                continue;
            };
            // A weights term counted twice or more may already hold the gradients
            // (`model_gb * 2 + optimizer_gb`); so may an unlabelled count times bytes, or more
            // bytes than fp32 weights take.
            let one_copy = match weights.role {
                Role::Model => weights.coef.abs() <= 1.5,
                _ => weights.part == Role::Model && in_bytes(weights.coef).abs() <= 4.0 + 1e-9,
            };
            if !counts_states || weights.opaque || !one_copy {
                continue;
            }
            if reported.contains(&weights.symbol_span) {
                continue;
            }
            reported.push(weights.symbol_span.clone());
            let text = cx.file.slice(&weights.span).to_string();
            let sign = if weights.coef < 0.0 { "-" } else { "+" };
            let message = format!(
                "memory formula counts the weights (`{text}`) and optimizer states but no gradients: every trainable parameter also holds a gradient of its size"
            );
            // The gradient term mirrors the weights term: same size, same sign. Only where the
            // weights are written in the formula itself, so the copy reads what they read.
            let formula = cx.file.slice(&f.span).trim_start();
            let written_here = weights.span.start >= f.span.start
                && weights.span.end <= f.span.end
                && !formula.starts_with(['{', '['])
                && !formula.starts_with("dict(");
            let fix = written_here.then(|| Fix {
                applicability: Applicability::Unsafe,
                message: format!("add the gradients: `{sign} {text}`"),
                edits: vec![Edit::insert(f.span.end, format!(" {sign} {text}"))],
            });
            out.push(
                Diagnostic::new("MEM006", weights.span.clone(), message)
                    .with_help("add a gradients term the size of the trainable weights (in the gradient dtype, usually the weights')")
                    .with_fix(fix),
            );
        }
    }
}
