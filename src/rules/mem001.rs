//! MEM001 missing-optimizer-state: a training-memory formula whose model-size terms add up to less
//! than params + grads + the optimizer's states. Documentation: `rules/MEM001.toml`.

use super::parts;
use super::requirement::requirement;
use super::states::in_bytes;
use super::{fmt_num, Checker, Rule};
use crate::context::OptimizerChoice;
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::{Role, Term};
use crate::facts::{Formula, FormulaKind, Precision};

pub struct MissingOptimizerState;

/// Relative slack before a formula counts as short of the minimum.
pub const TOLERANCE: f64 = 0.05;
/// The most bytes one weight takes (fp32): a size derived as more per parameter holds more than
/// the weights.
const FP32_BYTES: f64 = 4.0;

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
        // The symbols each judged formula counted: a budget built on a total already judged
        // is judged there, and reported once.
        let mut reported: Vec<Vec<std::ops::Range<usize>>> = Vec::new();
        // With nothing frozen and no adapter (both ruled out above), the parameters that
        // require gradients are all of them.
        let partial = super::parts::trainable_fraction(cx).is_some();
        // A part of a formula before the formula (`gpu_gb - resident` before the batch size
        // `int((gpu_gb - resident) / per_image_gb)` that scales it): the budget as written
        // states the multiplier, and a formula built on it is judged there.
        let mut formulas: Vec<&Formula> = cx.facts.formulas.iter().collect();
        formulas.sort_by_key(|f| (f.span.end, std::cmp::Reverse(f.span.start)));
        for f in formulas {
            if f.inference
                || f.lin.saw(Role::KvCache)
                || f.lin.saw(Role::Optimizer)
                || continued(cx, f)
            {
                continue;
            }
            let whole;
            let f = match !partial && f.lin.terms.iter().any(|t| t.role == Role::Trainable) {
                true => {
                    whole = super::parts::whole_model(f);
                    &whole
                }
                false => f,
            };
            let Some(req) = requirement(f) else { continue };
            // Anything whose size is unknown is not judged here.
            if req.terms.iter().any(|t| {
                (t.opaque
                    && t.role != Role::Unknown
                    && t.role != Role::Overhead
                    && t.role != Role::Activations)
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
            let per_param: Vec<&&Term> = req
                .terms
                .iter()
                .filter(|t| t.role == Role::ParamCount)
                .collect();
            // Judge against the optimizer needing the least: a script that may pick SGD is
            // not wrong to budget for SGD.
            let Some(least) = optimizers.iter().min_by(|a, b| {
                a.row
                    .state_multiplier_min()
                    .total_cmp(&b.row.state_multiplier_min())
            }) else {
                continue;
            };
            let several = optimizers.len() > 1;
            // A size derived as more bytes per parameter than any weight takes (`model_bytes =
            // n * 16`) counts the states beside the weights, whatever its name calls it.
            let beyond_weights = |t: &&&Term| {
                t.per_param
                    .is_some_and(|p| in_bytes(p).abs() > FP32_BYTES * (1.0 + TOLERANCE))
            };
            let derived = !counted.is_empty()
                && counted.iter().all(|t| t.per_param.is_some())
                && counted.iter().any(beyond_weights);
            if !per_param.is_empty() || derived {
                // Sizes and bytes per parameter in one sum add up only where each size is known
                // per parameter (`params_gb = n * 4 / 1e9` beside `grads_gb` read as `n * 4 / 1e9`).
                let sizes: Option<Vec<PerParam>> = counted
                    .iter()
                    .map(|t| {
                        t.per_param.map(|p| PerParam {
                            coef: t.coef * p,
                            part: t.part,
                        })
                    })
                    .collect();
                let Some(sizes) = sizes else { continue };
                let mut all: Vec<PerParam> = sizes;
                all.extend(per_param.iter().map(|t| PerParam {
                    coef: t.coef,
                    part: t.part,
                }));
                let single = match (counted.as_slice(), per_param.as_slice()) {
                    ([], [t]) => Some(**t),
                    _ => None,
                };
                // A value only printed (no name calls it a need) may be one part printed beside
                // the others; a term of no known role beside the weights may hold the rest.
                let unread = req.terms.iter().any(|t| t.role == Role::Unknown);
                let printed = matches!(
                    f.kind,
                    FormulaKind::Assign {
                        role: Role::Unknown,
                        ..
                    }
                );
                let loose = req.loose() || printed || unread;
                if let Some(d) = judge_bytes(cx, f, &all, single, least, several, loose) {
                    let mut symbols: Vec<_> =
                        per_param.iter().map(|t| t.symbol_span.clone()).collect();
                    symbols.sort_by_key(|r| (r.start, r.end));
                    if !reported.contains(&symbols) {
                        reported.push(symbols);
                        out.push(d);
                    }
                }
                continue;
            }
            let k: f64 = counted.iter().map(|t| parts::copies(t)).sum();
            if k <= 0.0 || (req.loose() && k <= 1.0 + TOLERANCE) {
                continue;
            }
            // The model terms are judged where they are first combined: a budget divided on
            // (`micro = left / 3`) scales every term and states no multiplier of its own.
            let mut symbols: Vec<_> = counted.iter().map(|t| t.symbol_span.clone()).collect();
            symbols.sort_by_key(|r| (r.start, r.end));
            if reported.contains(&symbols) {
                continue;
            }
            reported.push(symbols);
            let states = least.row.state_multiplier_min();
            let expected = 2.0 + states;
            // State sizes carry block scales and rounding (8-bit AdamW: 2.031 B/param); a formula
            // within 5% of the minimum is not short of a term.
            if k >= expected * (1.0 - TOLERANCE) {
                continue;
            }
            out.push(diagnostic(cx, f, &counted, k, expected, least, several));
        }
    }
}

/// A term's bytes per parameter, in the unit its formula is written in, and what it counts.
struct PerParam {
    coef: f64,
    part: Role,
}

/// A need counted in bytes per parameter (`n_params * 4`, `PARAMS_B * 6`): at least the
/// weights, gradients and the optimizer's states at 16 bits each (4 bytes per element when the
/// run trains in fp32, or when nothing shows its precision and the formula counts the weights at
/// 4 bytes). `single` is the one term a fix may rewrite.
fn judge_bytes(
    cx: &Checker<'_>,
    f: &Formula,
    terms: &[PerParam],
    single: Option<&Term>,
    opt: &OptimizerChoice,
    several: bool,
    loose: bool,
) -> Option<Diagnostic> {
    let b: f64 = terms.iter().map(|t| in_bytes(t.coef).abs()).sum();
    // Weights counted at 4 bytes beside another term are fp32 weights: with nothing else to show
    // the precision, gradients and torch's optimizer states take that dtype too.
    let weights_fp32 = terms.len() > 1
        && terms
            .iter()
            .find(|t| t.part == Role::Model)
            .is_some_and(|t| (in_bytes(t.coef).abs() - 4.0).abs() < 1e-9);
    // Under mixed precision the states' dtype is MEM009's to judge: 16 bits is the least here,
    // unless the formula itself counts the weights at 4 bytes (fp32 master weights, whose
    // states are fp32 too).
    let mixed = cx.training.precision.contains(&Precision::Amp);
    let fp32 = (!cx.training.precision.is_empty()
        && cx.training.precision.iter().all(|p| *p == Precision::Fp32))
        || ((cx.training.precision.is_empty() || mixed) && weights_fp32);
    let (element, state_bytes) = if fp32 {
        (4.0, opt.row.bytes_per_param_fp32)
    } else {
        (2.0, opt.row.bytes_per_param_bf16)
    };
    let expected = element * 2.0 + state_bytes;
    // Up to 4 bytes may be the weights alone (a loading check, an export's size): judged once
    // gradients are counted, or once the weights are known to take 2 bytes. Exactly 2 bytes
    // can only be 16-bit weights: against the device's memory, or stated as the total, that is
    // what training is said to need, as a size counted once is (whatever the need is called);
    // 4 may also be 16-bit weights and gradients, or fp32 weights.
    let grads = terms.iter().any(|t| t.part == Role::Grads);
    // The weights take 2 bytes where the model is cast or loaded at 16 bits and nothing casts
    // it back to fp32: autocast beside the cast (`bf16=True` with `torch_dtype=bfloat16`)
    // computes in 16 bits and keeps the weights as they are.
    let precision = &cx.training.precision;
    let pure16 = precision.contains(&Precision::Pure16) && !precision.contains(&Precision::Fp32);
    // Two per-parameter terms count two components (`n * 2 + n * 2`), not the weights alone.
    let beyond_weights = b > 4.0 + 1e-9 || grads || terms.len() > 1 || (pure16 && b > 2.0 + 1e-9);
    // ... where the training is shown by its optimizer, on the GPU: with none seen (a launcher
    // whose script may train only an adapter), with states offloaded, or in an estimator whose
    // function branches on offload or a ZeRO stage (MEM010's and MEM008's to judge), the weights
    // alone may be all the check means.
    let branches_on_regime = cx
        .facts
        .formulas
        .iter()
        .any(|g| g.scope == f.scope && (g.guard.offload || g.guard.stage));
    let sixteen_bit_weights = (b - 2.0).abs() < 1e-9
        && !matches!(opt.origin, crate::context::Origin::Assumed)
        && cx.training.offload.is_empty()
        && !branches_on_regime;
    let weights_alone = !beyond_weights && (loose || !sixteen_bit_weights);
    if b <= 0.0 || b >= expected * (1.0 - TOLERANCE) || weights_alone {
        return None;
    }
    let which = if several {
        " (the lightest optimizer seen)"
    } else {
        ""
    };
    let dtype = if fp32 { "fp32" } else { "16 bits" };
    let message = format!(
        "memory formula counts {} bytes per parameter; {}{which} needs at least {} ({} weights + {} gradients + {} for its states, in {dtype}) ({})",
        fmt_num(b),
        opt.row.display,
        fmt_num(expected),
        fmt_num(element),
        fmt_num(element),
        fmt_num(state_bytes),
        opt.origin.describe(),
    );
    let help = format!(
        "count weights, gradients and {} states per parameter: {} bytes in pure 16-bit training, {} with fp32 weights or mixed precision",
        opt.row.display,
        fmt_num(4.0 + opt.row.bytes_per_param_bf16),
        fmt_num(8.0 + opt.row.bytes_per_param_fp32),
    );
    let span = match single {
        Some(t) => t.span.clone(),
        None => written_at(cx, f),
    };
    let fix = match single {
        Some(t) if (expected - expected.round()).abs() < 1e-9 => t
            .literal
            .clone()
            .filter(|l| {
                crate::config::parse_number(cx.file.slice(l)).is_some_and(|v| (v - b).abs() < 1e-9)
            })
            .map(|l| Fix {
                applicability: Applicability::Unsafe,
                message: format!("count {} bytes per parameter", fmt_num(expected)),
                edits: vec![Edit::replace(l, fmt_num(expected))],
            }),
        _ => None,
    };
    Some(
        Diagnostic::new("MEM001", span, message)
            .with_help(help)
            .with_fix(fix),
    )
}

/// A step of an augmented budget that a later step continues (`budget -= params_gib`, then
/// `budget -= grads_gib` in the same function), or the assignment such steps start from
/// (`need = n * 2`, then `need += n * 2`): it states only part of what the budget takes, and
/// the budget is judged whole at its last step.
fn continued(cx: &Checker<'_>, f: &Formula) -> bool {
    let augmented = |g: &Formula| {
        if !matches!(g.kind, FormulaKind::Expr) {
            return None;
        }
        let text = cx.file.slice(&g.span);
        let (name, _) = text.split_once("-=").or_else(|| text.split_once("+="))?;
        Some(name.trim())
    };
    let name = match &f.kind {
        FormulaKind::Assign { target, .. } => target.as_str(),
        _ => match augmented(f) {
            Some(name) => name,
            None => return false,
        },
    };
    cx.facts
        .formulas
        .iter()
        .any(|g| g.scope == f.scope && g.span.start >= f.span.end && augmented(g) == Some(name))
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
        _ => written_at(cx, f),
    };
    let fix = fix(cx, counted, k, expected, opt);
    Diagnostic::new("MEM001", span, message)
        .with_help(help)
        .with_fix(fix)
}

/// Where a formula's sum is written: a comparison or budget of a named sum (`if need > cap:`
/// after `need = w + g`) is reported on the line that adds the parts, where the fix goes.
fn written_at(cx: &Checker<'_>, f: &Formula) -> std::ops::Range<usize> {
    let within = |g: &&Formula| {
        f.lin
            .terms
            .iter()
            .all(|t| t.span.start >= g.span.start && t.span.end <= g.span.end)
            && !super::parts::bundle(cx, g)
    };
    super::parts::same_terms(cx, f)
        .find(within)
        .map_or_else(|| f.span.clone(), |g| g.span.clone())
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
