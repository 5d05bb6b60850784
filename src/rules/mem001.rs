//! MEM001 missing-optimizer-state: a training-memory formula whose model-size terms add up to less
//! than params + grads + the optimizer's states. Documentation: `rules/MEM001.toml`.

use super::{fmt_num, Checker, Rule};
use crate::context::OptimizerChoice;
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::{Lin, Role, Term};
use crate::facts::{Formula, FormulaKind};

pub struct MissingOptimizerState;

/// Relative slack before a formula counts as short of the minimum.
pub const TOLERANCE: f64 = 0.05;

/// The side of a formula that states what training needs, as (terms, sign they carry there).
pub struct Requirement<'a> {
    pub terms: Vec<&'a Term>,
}

/// Which part of a formula is the memory training requires: the subtracted part of a budget
/// (`gpu - model * 2`), the model side of a fit check (`model * 2 > gpu`), or a total
/// (`required_gb = model * 2 + ...`). `None` when the formula is none of these.
pub fn requirement(f: &Formula) -> Option<Requirement<'_>> {
    let lin = &f.lin;
    let has_gpu = |l: &Lin, sign: f64| {
        l.terms
            .iter()
            .any(|t| t.role == Role::Gpu && t.coef * sign > 0.0)
    };
    let sized = |t: &&Term| matches!(t.role, Role::Model | Role::ParamCount);
    let model_terms: Vec<&Term> = lin.terms.iter().filter(sized).collect();
    if model_terms.is_empty() {
        return None;
    }
    // A budget: the GPU's memory minus what training needs.
    if has_gpu(lin, 1.0) && model_terms.iter().all(|t| t.coef < 0.0) {
        return Some(Requirement {
            terms: lin.terms.iter().filter(|t| t.coef < 0.0).collect(),
        });
    }
    let positive =
        model_terms.iter().all(|t| t.coef > 0.0) && !lin.terms.iter().any(|t| t.role == Role::Gpu);
    match &f.kind {
        FormulaKind::Compare { other } if positive && has_gpu(other, 1.0) => Some(Requirement {
            terms: lin.terms.iter().collect(),
        }),
        FormulaKind::Assign {
            role: Role::Total, ..
        }
        | FormulaKind::Return {
            role: Role::Total, ..
        } if positive => Some(Requirement {
            terms: lin.terms.iter().collect(),
        }),
        _ => None,
    }
}

impl Rule for MissingOptimizerState {
    fn code(&self) -> &'static str {
        "MEM001"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if !training.trains || training.inference || !training.whole_model_multipliers_apply() {
            return;
        }
        let Some(optimizers) = training.judged_optimizers() else {
            return;
        };
        // The symbols each reported formula counted: a budget built on a flagged total is the
        // same bug, reported once.
        let mut reported: Vec<Vec<std::ops::Range<usize>>> = Vec::new();
        for f in &cx.facts.formulas {
            if f.inference || f.lin.saw(Role::KvCache) || f.lin.saw(Role::Optimizer) {
                continue;
            }
            let Some(req) = requirement(f) else { continue };
            // Anything whose size is unknown, or counted per parameter, is not judged here.
            if req.terms.iter().any(|t| {
                (t.opaque
                    && t.role != Role::Unknown
                    && t.role != Role::Overhead
                    && t.role != Role::Activations)
                    || t.role == Role::ParamCount
                    || t.part == Role::Optimizer
            }) {
                continue;
            }
            let counted: Vec<&&Term> = req
                .terms
                .iter()
                // Gradients are a copy of the weights' size: a `grads_gb` term counts as one.
                .filter(|t| {
                    matches!(t.role, Role::Model | Role::Grads)
                        && matches!(
                            t.part,
                            Role::Model | Role::Grads | Role::Total | Role::Unknown
                        )
                })
                .collect();
            let k: f64 = counted.iter().map(|t| t.coef.abs()).sum();
            if k <= 0.0 {
                continue;
            }
            // Judge against the optimizer needing the least: a script that may pick SGD is
            // not wrong to budget for SGD.
            let Some(least) = optimizers.iter().min_by(|a, b| {
                a.row
                    .state_multiplier_min()
                    .total_cmp(&b.row.state_multiplier_min())
            }) else {
                continue;
            };
            let states = least.row.state_multiplier_min();
            let expected = 2.0 + states;
            // State sizes carry block scales and rounding (8-bit AdamW: 2.031 B/param); a formula
            // within 5% of the minimum is not short of a term.
            if k >= expected * (1.0 - TOLERANCE) {
                continue;
            }
            let mut symbols: Vec<_> = counted.iter().map(|t| t.symbol_span.clone()).collect();
            symbols.sort_by_key(|r| (r.start, r.end));
            if reported.contains(&symbols) {
                continue;
            }
            reported.push(symbols);
            out.push(diagnostic(
                cx,
                f,
                &counted,
                k,
                expected,
                least,
                optimizers.len() > 1,
            ));
        }
    }
}

fn diagnostic(
    cx: &Checker<'_>,
    f: &Formula,
    counted: &[&&Term],
    k: f64,
    expected: f64,
    opt: &OptimizerChoice,
    several: bool,
) -> Diagnostic {
    let row = opt.row;
    let what = if (k - 1.0).abs() < 1e-9 {
        "the weights only".to_string()
    } else if (k - 2.0).abs() < 1e-9 {
        "params + grads".to_string()
    } else {
        format!("{}x the weights", fmt_num(k))
    };
    let states = row.state_multiplier_min();
    let state_words = if row.states == 1.0 { "state" } else { "states" };
    let which = if several {
        " (the lightest optimizer seen)"
    } else {
        ""
    };
    // 8-bit states are far smaller than the weights: say so rather than count them as full states.
    let states_text = if row.state_dtype == "8bit" {
        format!(
            "keeps {} 8-bit {state_words} per parameter (about {}x the weights)",
            fmt_num(row.states),
            fmt_num(states)
        )
    } else {
        format!(
            "keeps {} more {state_words} per parameter",
            fmt_num(row.states)
        )
    };
    let message = format!(
        "memory formula counts the model {}x ({what}); {}{which} {states_text}: expected at least {}x ({})",
        fmt_num(k),
        row.display,
        fmt_num(expected),
        opt.origin.describe(),
    );
    let help = format!(
        "count params 1x, grads 1x and {} states {}x (states in the weights' dtype; fp32 master weights with mixed precision need more)",
        row.display,
        fmt_num(states)
    );
    let single = counted.len() == 1;
    let span = match counted.first() {
        Some(t) if single => t.span.clone(),
        _ => f.span.clone(),
    };
    let fix = fix(cx, counted, k, expected, opt);
    Diagnostic::new("MEM001", span, message)
        .with_help(help)
        .with_fix(fix)
}

/// Raise the one multiplier to the expected value, or multiply the one model term, and name the
/// parts in a comment. Unsafe: the expected value is the minimum for the optimizer; fp32 master
/// weights under mixed precision need more, and the weights' dtype is not known statically.
fn fix(
    cx: &Checker<'_>,
    counted: &[&&Term],
    k: f64,
    expected: f64,
    opt: &OptimizerChoice,
) -> Option<Fix> {
    let [term] = counted else { return None };
    if (expected - expected.round()).abs() > 1e-9 {
        return None;
    }
    let new = fmt_num(expected);
    let mut edits = vec![match &term.literal {
        Some(lit) if (term.coef.abs() - k).abs() < 1e-9 => Edit::replace(lit.clone(), new.clone()),
        None if (term.coef.abs() - 1.0).abs() < 1e-9 => {
            let sym = cx.file.slice(&term.symbol_span);
            Edit::replace(term.symbol_span.clone(), format!("{sym} * {new}"))
        }
        _ => return None,
    }];
    let parts = format!(
        "params 1x + grads 1x + {} states {}x",
        opt.row.display,
        fmt_num(opt.row.state_multiplier_min())
    );
    let line = cx.file.lines.line_of(term.span.start);
    if !cx.file.line_text(line).contains('#') {
        edits.push(Edit::insert(cx.file.line_end(line), format!("  # {parts}")));
    }
    Some(Fix {
        applicability: Applicability::Unsafe,
        message: format!("count {parts}: {new}x"),
        edits,
    })
}
