//! MEM009 mixed-precision-halving: with mixed precision on, a training estimate that prices every
//! model state at 16 bits, as if mixed precision halved the fp32 estimate. Documentation:
//! `rules/MEM009.toml`.

use super::requirement::requirement;
use super::states::{component, in_bytes, per_device, says_upper_bound, Component, Reported};
use super::{fmt_num, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::{names_memory_unit, Role};
use crate::facts::{FormulaKind, Precision};

pub struct MixedPrecisionHalving;

/// Bytes of an fp32 value and of a 16-bit one.
const FP32: f64 = 4.0;
const HALF: f64 = 2.0;

impl Rule for MixedPrecisionHalving {
    fn code(&self) -> &'static str {
        "MEM009"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if !training.trains || training.inference || !training.whole_model_multipliers_apply() {
            return;
        }
        // Weights cast to 16 bits with a torch optimizer train with no fp32 copy: 16-bit states
        // are right there.
        if training
            .precisions
            .iter()
            .any(|p| p.value == Precision::Pure16)
        {
            return;
        }
        let Some(mixed) = training
            .precisions
            .iter()
            .find(|p| p.value == Precision::Amp)
        else {
            return;
        };
        let Some(optimizers) = training.judged_optimizers() else {
            return;
        };
        let Some(least) = optimizers.iter().min_by(|a, b| {
            a.row
                .bytes_per_param_fp32
                .total_cmp(&b.row.bytes_per_param_fp32)
        }) else {
            return;
        };
        // fp32 master weights, fp32 gradients (or 16-bit ones plus the master copy) and the
        // states in the dtype the optimizer keeps them in with fp32 parameters: 4 + 4 + 8 for
        // AdamW, 4 + 4 + 2 for an 8-bit AdamW (docs/knowledge.md §3.1).
        let states = least.row.states;
        let expected = FP32 * 2.0 + least.row.bytes_per_param_fp32;
        let all_half = HALF * 2.0 + least.row.bytes_per_param_bf16;
        let mut reported = Reported::default();
        for f in &cx.facts.formulas {
            if f.inference || per_device(f) || f.lin.saw(Role::KvCache) || says_upper_bound(cx, f) {
                continue;
            }
            let total = matches!(
                f.kind,
                FormulaKind::Assign {
                    role: Role::Total,
                    ..
                } | FormulaKind::Return {
                    role: Role::Total,
                    ..
                }
            );
            // A value of no named part, counted in memory units, is the memory its terms take.
            let unnamed_memory = match &f.kind {
                FormulaKind::Assign {
                    target,
                    role: Role::Unknown,
                } => names_memory_unit(target),
                FormulaKind::Return {
                    function,
                    role: Role::Unknown,
                } => names_memory_unit(function),
                _ => false,
            };
            if requirement(f).is_none() && !total && !unnamed_memory && !f.shown {
                continue;
            }
            // States counted as sizes of the weights (`optimizer_gb = model_gb * 2`) are another
            // rule's to judge; counted in bytes per parameter, labelled or not, they add up here.
            if f.lin.terms.iter().any(|t| {
                t.role == Role::Model
                    && matches!(
                        component(t),
                        Component::States | Component::Grads | Component::Weights
                    )
            }) {
                continue;
            }
            // Weights labelled at 4 bytes are fp32 already: the formula prices them as mixed
            // precision keeps them, and a term it leaves out is MEM001's.
            if f.lin.terms.iter().any(|t| {
                t.role == Role::ParamCount
                    && t.part == Role::Model
                    && (in_bytes(t.coef).abs() - 4.0).abs() < 1e-9
            }) {
                continue;
            }
            let b: f64 = f
                .lin
                .terms
                .iter()
                .filter(|t| t.role == Role::ParamCount && !t.opaque)
                .map(|t| in_bytes(t.coef))
                .sum::<f64>()
                .abs();
            if b < all_half * 0.95
                || b >= (all_half * 1.3).min(expected * 0.95)
                || !reported.first(f)
            {
                continue;
            }
            let state_words = if states == 1.0 { "state" } else { "states" };
            let eight_bit = least.row.state_dtype == "8bit";
            let kept = if eight_bit {
                format!(
                    "its {state_words} take {} bytes",
                    fmt_num(least.row.bytes_per_param_fp32)
                )
            } else {
                format!("keeps its {state_words} in fp32")
            };
            let message = format!(
                "memory formula counts {} bytes per parameter, every model state at 16 bits, but mixed precision (seen at {}) keeps fp32 master weights, and {} {kept}: {} bytes per parameter",
                fmt_num(b),
                mixed.at,
                least.row.display,
                fmt_num(expected),
            );
            let states_part = if eight_bit {
                format!("{} for the states", fmt_num(least.row.bytes_per_param_fp32))
            } else {
                format!("{} x 4 for the states", fmt_num(states))
            };
            let help = format!(
                "mixed precision saves activation memory, not model states: count {} bytes per parameter (fp32 weights 4 + gradients 4 + {states_part}), or cast the model to 16 bits if that is what trains",
                fmt_num(expected),
            );
            out.push(
                Diagnostic::new("MEM009", f.span.clone(), message)
                    .with_help(help)
                    .with_fix(fix(f, b, expected)),
            );
        }
    }
}

/// Raise the one bytes-per-parameter literal. Unsafe: the weights might be meant to train in
/// 16 bits, which memlint cannot see.
fn fix(f: &crate::facts::Formula, b: f64, expected: f64) -> Option<Fix> {
    let counts: Vec<_> = f
        .lin
        .terms
        .iter()
        .filter(|t| component(t) == Component::PerParam)
        .collect();
    let [t] = counts.as_slice() else { return None };
    let lit = t
        .literal
        .clone()
        .filter(|_| (in_bytes(t.coef.abs()) - b).abs() < 1e-9)?;
    Some(Fix {
        applicability: Applicability::Unsafe,
        message: format!("count {} bytes per parameter", fmt_num(expected)),
        edits: vec![Edit::replace(lit, fmt_num(expected))],
    })
}
