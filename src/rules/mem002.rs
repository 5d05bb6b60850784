//! MEM002 wrong-optimizer-multiplier: a number that states an optimizer's memory and disagrees
//! with the optimizer, in a table keyed by optimizer names (its unit inferred from the other rows)
//! or in a single `optimizer_state = model_size * k` (or a function named for the states that
//! returns it). Documentation: `rules/MEM002.toml`.

use super::mem001::TOLERANCE;
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

/// Whether a value fits a key in a unit. Adafactor's factored state has no fixed size: anything
/// between its smallest and largest variant fits.
fn fits(rows: &[&OptimizerRow], unit: &Unit, value: f64) -> bool {
    let values: Vec<f64> = rows.iter().flat_map(|r| (unit.values)(r)).collect();
    if rows.first().is_some_and(|r| r.id == "adafactor") {
        let hi = values.iter().cloned().fold(f64::MIN, f64::max);
        let lo = values.iter().cloned().fold(f64::MAX, f64::min);
        return value >= lo - 1e-9 && value <= hi * (1.0 + TOLERANCE);
    }
    values.iter().any(|v| close(value, *v))
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
        name: table.name.clone(),
        entries,
        arms: table.arms,
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
    // The units that explain the most rows; a row wrong in every one of them is wrong.
    let scores: Vec<usize> = UNITS
        .iter()
        .map(|u| rows.iter().filter(|(e, c)| fits(c, u, e.value)).count())
        .collect();
    let best = scores.iter().copied().max().unwrap_or(0);
    let units: Vec<&Unit> = UNITS
        .iter()
        .zip(&scores)
        .filter(|(_, s)| **s == best)
        .map(|(u, _)| u)
        .collect();
    let wrong: Vec<_> = rows
        .iter()
        .filter(|(e, c)| units.iter().all(|u| !fits(c, u, e.value)))
        .collect();
    if best < 2 || wrong.is_empty() || wrong.len() >= best {
        return;
    }
    let Some(unit) = units.first() else { return };
    for (e, c) in wrong {
        let Some(row) = c.first() else { continue };
        let Some(expected) = (unit.values)(row).first().copied() else {
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
