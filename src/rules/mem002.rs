//! MEM002 wrong-optimizer-multiplier: a number that states an optimizer's memory and disagrees
//! with the optimizer, in a table keyed by optimizer names (its unit inferred from the other rows)
//! or in a single `optimizer_state = model_size * k` (or a function named for the states that
//! returns it). Documentation: `rules/MEM002.toml`.

use super::mem001::TOLERANCE;
use super::states::{component, in_bytes, sharded, Component};
use super::{fmt_num, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::Role;
use crate::facts::{FormulaKind, Table, TableEntry};
use crate::knowledge::{knowledge, OptimizerRow};

pub struct WrongOptimizerMultiplier;

/// The units a table of optimizer numbers may be written in, with the values each row may take.
struct Unit {
    what: &'static str,
    values: fn(&OptimizerRow) -> Vec<f64>,
}

const UNITS: &[Unit] = &[
    Unit {
        what: "optimizer state tensors per parameter",
        values: |r| vec![r.states],
    },
    Unit {
        what: "multiples of the weights' size for the optimizer states",
        values: |r| vec![r.bytes_per_param_fp32 / 4.0, r.bytes_per_param_bf16 / 2.0],
    },
    Unit {
        what: "optimizer-state bytes per parameter",
        // fp32 params, 16-bit params, and with an fp32 master copy folded in.
        values: |r| {
            vec![
                r.bytes_per_param_fp32,
                r.bytes_per_param_bf16,
                r.bytes_per_param_fp32 + 4.0,
            ]
        },
    },
    Unit {
        what: "multiples of the weights' size for params + grads + states",
        values: |r| {
            vec![
                2.0 + r.bytes_per_param_fp32 / 4.0,
                2.0 + r.bytes_per_param_bf16 / 2.0,
            ]
        },
    },
    Unit {
        what: "bytes per parameter for params + grads + states",
        // fp32 (or 16-bit weights and grads with an fp32 master copy), and pure 16-bit.
        values: |r| vec![8.0 + r.bytes_per_param_fp32, 4.0 + r.bytes_per_param_bf16],
    },
];

/// The rows a key may mean: `sgd` may have momentum, `adafactor` a first moment, `rmsprop`
/// momentum or centering.
fn candidates(key: &str) -> Vec<&'static OptimizerRow> {
    let k = knowledge();
    let Some(row) = k.optimizer(key) else {
        return Vec::new();
    };
    if !row.known {
        return Vec::new();
    }
    let variants: &[&str] = match row.id.as_str() {
        "sgd" => &["sgd-momentum"],
        "adafactor" => &["adafactor-beta1"],
        "rmsprop" => &[
            "rmsprop-momentum",
            "rmsprop-centered",
            "rmsprop-centered-momentum",
        ],
        _ => &[],
    };
    let mut rows = vec![row];
    rows.extend(variants.iter().filter_map(|id| k.optimizer_by_id(id)));
    rows
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= b.abs() * TOLERANCE + 1e-9
}

/// Whether a value fits a key in a unit, at one of its conventions (`variant`: the index into
/// the unit's values, e.g. fp32 or 16-bit parameters): a table keeps one convention for all its
/// rows. Adafactor's factored state has no fixed size: anything between its smallest and largest
/// variant fits.
fn fits(rows: &[&OptimizerRow], unit: &Unit, variant: usize, value: f64) -> bool {
    let values: Vec<f64> = rows
        .iter()
        .filter_map(|r| (unit.values)(r).get(variant).copied())
        .collect();
    if rows.first().is_some_and(|r| r.id == "adafactor") {
        let hi = values.iter().cloned().fold(f64::MIN, f64::max);
        let lo = values.iter().cloned().fold(f64::MAX, f64::min);
        return value >= lo - 1e-9 && value <= hi * (1.0 + TOLERANCE);
    }
    values.iter().any(|v| close(value, *v))
}

/// How many conventions a unit has.
fn variants(unit: &Unit) -> usize {
    knowledge()
        .optimizer_by_id("adamw")
        .map_or(1, |r| (unit.values)(r).len())
}

impl Rule for WrongOptimizerMultiplier {
    fn code(&self) -> &'static str {
        "MEM002"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for table in cx.facts.tables.iter().filter(|t| !t.counts_states()) {
            match per_state(table, &cx.facts.tables) {
                // Bytes per state beside a count of states: the product is per parameter.
                Some(counts) => check_product(table, counts, out),
                None => check_table(table, None, out),
            }
        }
        check_assignments(cx, out);
        check_sums(cx, out);
    }
}

/// The table of state counts that `table` is counted per (`bytes_per_param = 1.0` and
/// `state_params = 2` in the same arms): same keys, a name that counts states, small whole
/// numbers.
fn per_state<'t>(table: &Table, tables: &'t [Table]) -> Option<&'t Table> {
    let keys = |t: &Table| -> Vec<String> {
        let mut k: Vec<String> = t.entries.iter().map(|e| e.key.clone()).collect();
        k.sort();
        k
    };
    let mine = keys(table);
    tables.iter().find(|t| {
        t.counts_states()
            && keys(t) == mine
            && t.entries
                .iter()
                .all(|e| e.value.fract() == 0.0 && (0.0..=4.0).contains(&e.value))
    })
}

/// A table of bytes per state, judged through its count of states.
fn check_product(table: &Table, counts: &Table, out: &mut Vec<Diagnostic>) {
    let entries = table
        .entries
        .iter()
        .filter_map(|e| {
            let n = counts.entries.iter().find(|c| c.key == e.key)?.value;
            // No states: nothing to cost, whatever the bytes per state.
            (n > 0.0).then_some(())?;
            Some(TableEntry {
                value: e.value * n,
                ..e.clone()
            })
        })
        .collect();
    let product = Table {
        entries,
        ..table.clone()
    };
    check_table(&product, Some(counts), out);
}

/// `per_state` holds the counts a product table was multiplied by (no single number to fix).
fn check_table(table: &Table, per_state: Option<&Table>, out: &mut Vec<Diagnostic>) {
    let rows: Vec<(&TableEntry, Vec<&OptimizerRow>)> = table
        .entries
        .iter()
        .map(|e| (e, candidates(&e.key)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if rows.len() < 2 {
        return;
    }
    // The units and conventions that explain the most rows; a row wrong in every one of them
    // is wrong.
    let conventions: Vec<(&Unit, usize)> = UNITS
        .iter()
        .flat_map(|u| (0..variants(u)).map(move |v| (u, v)))
        .collect();
    let scores: Vec<usize> = conventions
        .iter()
        .map(|(u, v)| rows.iter().filter(|(e, c)| fits(c, u, *v, e.value)).count())
        .collect();
    let best = scores.iter().copied().max().unwrap_or(0);
    let units: Vec<(&Unit, usize)> = conventions
        .iter()
        .zip(&scores)
        .filter(|(_, s)| **s == best)
        .map(|(u, _)| *u)
        .collect();
    let wrong: Vec<_> = rows
        .iter()
        .filter(|(e, c)| units.iter().all(|(u, v)| !fits(c, u, *v, e.value)))
        .collect();
    if best < 2 || wrong.is_empty() || wrong.len() >= best {
        return;
    }
    let Some(&(unit, variant)) = units.first() else {
        return;
    };
    let mut seen: Vec<&std::ops::Range<usize>> = Vec::new();
    for (e, c) in wrong {
        // One number under several keys (`case "adam" | "adamw": return 1`): one finding.
        if seen.contains(&&e.value_span) {
            continue;
        }
        seen.push(&e.value_span);
        let Some(row) = c.first() else { continue };
        let Some(expected) = (unit.values)(row).get(variant).copied() else {
            continue;
        };
        let value = match per_state.and_then(|c| c.entries.iter().find(|c| c.key == e.key)) {
            Some(n) => format!(
                "{} x {} states",
                fmt_num(e.value / n.value),
                fmt_num(n.value)
            ),
            None => fmt_num(e.value),
        };
        let message = format!(
            "`{}: {}` disagrees with {}: the table's other rows count {}, and {} comes to {}",
            e.key,
            value,
            row.display,
            unit.what,
            row.display,
            fmt_num(expected)
        );
        // A product of two tables has no single number to replace.
        let fix = per_state.is_none().then(|| Fix {
            applicability: Applicability::Unsafe,
            message: format!("use {} for {}", fmt_num(expected), row.display),
            edits: vec![Edit::replace(e.value_span.clone(), fmt_num(expected))],
        });
        out.push(
            Diagnostic::new("MEM002", e.value_span.clone(), message)
                .with_help(format!(
                    "{} keeps {} state tensors per parameter ({})",
                    row.display,
                    fmt_num(row.states),
                    row.source
                ))
                .with_fix(fix),
        );
    }
}

/// `optimizer_state_gb = model_size_gb * k`, `optimizer_bytes = n_params * k`, judged against the
/// optimizer in use.
fn check_assignments(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    let training = cx.training;
    if training.inference || !training.whole_model_multipliers_apply() {
        return;
    }
    let Some(optimizers) = training.judged_optimizers() else {
        return;
    };
    for f in &cx.facts.formulas {
        // `optimizer_state = n * k`, or a function named for the states that returns `n * k`.
        let target = match &f.kind {
            FormulaKind::Assign {
                target,
                role: Role::Optimizer,
            } => target,
            FormulaKind::Return {
                function,
                role: Role::Optimizer,
            } => function,
            _ => continue,
        };
        if f.inference {
            continue;
        }
        let lin = &f.lin;
        let role = match lin.terms.first() {
            Some(t) if lin.terms.iter().all(|u| u.role == t.role && !u.opaque) => t.role,
            _ => continue,
        };
        if lin.constant != 0.0 || !matches!(role, Role::Model | Role::ParamCount) {
            continue;
        }
        let k: f64 = lin.terms.iter().map(|t| t.coef).sum();
        // Model-size units: the least the states can be. Bytes per parameter (only when the name
        // says bytes): between the 16-bit states and fp32 states plus a master copy.
        let (lo, hi, unit) = if role == Role::Model {
            let lo = optimizers
                .iter()
                .map(|o| o.row.state_multiplier_min())
                .fold(f64::MAX, f64::min);
            (lo, f64::MAX, "x the weights")
        } else if target.to_ascii_lowercase().contains("byte") {
            let lo = optimizers
                .iter()
                .map(|o| o.row.bytes_per_param_fp32.min(o.row.bytes_per_param_bf16))
                .fold(f64::MAX, f64::min);
            let hi = optimizers
                .iter()
                .map(|o| o.row.bytes_per_param_fp32 + 4.0)
                .fold(f64::MIN, f64::max);
            (lo, hi, " bytes per parameter")
        } else {
            continue;
        };
        let short = k < lo * (1.0 - TOLERANCE);
        let over = k > hi * (1.0 + TOLERANCE);
        if !short && !over {
            continue;
        }
        let Some(opt) = optimizers.first() else {
            continue;
        };
        let row = opt.row;
        let bound = if short { lo } else { hi };
        let message = format!(
            "`{target}` counts {}{unit} for {}'s states, which take {} {}{unit} ({} {} per parameter, {}; {})",
            fmt_num(k),
            row.display,
            if short { "at least" } else { "at most" },
            fmt_num(bound),
            fmt_num(row.states),
            if row.states == 1.0 { "state" } else { "states" },
            row.state_dtype_words(),
            opt.origin.describe(),
        );
        let fix = match lin.terms.as_slice() {
            [t] if short && (bound - bound.round()).abs() < 1e-9 => {
                t.literal.as_ref().map(|lit| Fix {
                    applicability: if matches!(opt.origin, crate::context::Origin::Assumed) {
                        Applicability::Unsafe
                    } else {
                        Applicability::Safe
                    },
                    message: format!("count {}{unit}", fmt_num(bound)),
                    edits: vec![Edit::replace(lit.clone(), fmt_num(bound))],
                })
            }
            _ => None,
        };
        out.push(
            Diagnostic::new("MEM002", f.span.clone(), message)
                .with_help(format!(
                    "size optimizer states from the optimizer's table row ({})",
                    row.source
                ))
                .with_fix(fix),
        );
    }
}

/// Names that say a per-parameter term is something other than the optimizer's states: the
/// veto a name keeps when the use says "states".
fn names_other_part(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !matches!(
        crate::expr::role_of(name),
        Role::Unknown | Role::ParamCount | Role::Optimizer
    ) || [
        "master",
        "act",
        "buffer",
        "cache",
        "ema",
        "copy",
        "fp32",
        "lora",
        "adapter",
        "extra",
        "misc",
        "other",
        "overhead",
        "temp",
        "tmp",
        "workspace",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// `opt_bytes = 4 * n_params` added into `weights + grads + opt_bytes` (or compared with the
/// GPU): the one per-parameter term of a sum that already counts the weights and the gradients
/// is the optimizer's states, whatever it is called. Judged against the optimizer the file
/// builds (never an assumed one), at the precision the weights are counted in.
fn check_sums(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    let training = cx.training;
    if training.inference || !training.whole_model_multipliers_apply() {
        return;
    }
    let Some(optimizers) = training.judged_optimizers() else {
        return;
    };
    if optimizers
        .iter()
        .any(|o| matches!(o.origin, crate::context::Origin::Assumed))
    {
        return;
    }
    let mut reported: Vec<std::ops::Range<usize>> = Vec::new();
    for f in cx.facts.formulas.iter().filter(|f| !f.inference) {
        let terms = &f.lin.terms;
        let counted = |c: Component| terms.iter().filter(move |t| component(t) == c);
        let plain = |t: &&crate::expr::Term| {
            t.role == Role::ParamCount && !t.opaque && !sharded(t) && t.divided_by.is_none()
        };
        let weights: Vec<_> = counted(Component::Weights).collect();
        let grads: Vec<_> = counted(Component::Grads).collect();
        // The rest: per-parameter terms, or ones a name calls the states (`opt_bytes`).
        let rest: Vec<_> = terms
            .iter()
            .filter(|t| matches!(component(t), Component::PerParam | Component::States))
            .collect();
        if weights.len() != 1
            || grads.len() != 1
            || counted(Component::Trainable).next().is_some()
            || !weights.iter().chain(&grads).chain(&rest).all(plain)
        {
            continue;
        }
        let [states] = rest.as_slice() else { continue };
        // Reached through a name assigned elsewhere: that assignment states the states.
        if f.span.start <= states.span.start && states.span.end <= f.span.end {
            continue;
        }
        let Some((target, assign)) = cx.facts.formulas.iter().find_map(|a| match &a.kind {
            FormulaKind::Assign { target, .. }
                if a.span.start <= states.span.start && states.span.end <= a.span.end =>
            {
                Some((target, a))
            }
            _ => None,
        }) else {
            continue;
        };
        if names_other_part(target) || reported.contains(&assign.span) {
            continue;
        }
        // Bytes per parameter, in the unit the weights are counted in.
        let (Some(w), Some(g)) = (weights.first(), grads.first()) else {
            continue;
        };
        let unit = in_bytes(w.coef) / w.coef;
        let (wb, gb, k) = (w.coef * unit, g.coef * unit, states.coef * unit);
        let fp32 = (wb - 4.0).abs() < 1e-6;
        let half = (wb - 2.0).abs() < 1e-6;
        if !(fp32 || half) || !(gb == 2.0 || gb == 4.0) {
            continue;
        }
        // fp32 weights keep fp32 states; 16-bit weights keep 16-bit states (pure bf16) or fp32
        // states beside an fp32 master copy.
        let lo = optimizers
            .iter()
            .map(|o| {
                if fp32 {
                    o.row.bytes_per_param_fp32
                } else {
                    o.row.bytes_per_param_fp32.min(o.row.bytes_per_param_bf16)
                }
            })
            .fold(f64::MAX, f64::min);
        if lo <= 0.0 || k >= lo * (1.0 - TOLERANCE) || k <= 0.0 {
            continue;
        }
        let Some(opt) = optimizers.first() else {
            continue;
        };
        let row = opt.row;
        reported.push(assign.span.clone());
        let message = format!(
            "`{target}` counts {} bytes per parameter, and `{}` adds it to {} bytes of weights and {} of gradients: it is {}'s states, which take at least {} ({} {} per parameter at {}; {})",
            fmt_num(k),
            cx.file.slice(&f.span).trim(),
            fmt_num(wb),
            fmt_num(gb),
            row.display,
            fmt_num(lo),
            fmt_num(row.states),
            if row.states == 1.0 { "state" } else { "states" },
            if fp32 { "fp32" } else { "16 bits" },
            opt.origin.describe(),
        );
        let fix = states.literal.as_ref().and_then(|lit| {
            let written = cx.file.slice(lit).trim().parse::<f64>().ok()?;
            // The literal is the bytes when the unit is bytes; scale it otherwise.
            let replaced = written * lo / k;
            ((replaced - replaced.round()).abs() < 1e-9).then(|| Fix {
                applicability: Applicability::Unsafe,
                message: format!("count {} bytes per parameter", fmt_num(lo)),
                edits: vec![Edit::replace(lit.clone(), fmt_num(replaced))],
            })
        });
        out.push(
            Diagnostic::new("MEM002", assign.span.clone(), message)
                .with_help(format!(
                    "{} keeps {} state tensors per parameter ({})",
                    row.display,
                    fmt_num(row.states),
                    row.source
                ))
                .with_fix(fix),
        );
    }
}
