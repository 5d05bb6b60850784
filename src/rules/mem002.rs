//! MEM002 wrong-optimizer-multiplier: a number that states an optimizer's memory and disagrees
//! with the optimizer, in a table keyed by optimizer names (its unit inferred from the other rows)
//! or in a single `optimizer_state = model_size * k` (or a function named for the states that
//! returns it). Documentation: `rules/MEM002.toml`.

use super::mem001::TOLERANCE;
use super::states::{component, in_bytes, sharded, Component};
use super::{fmt_num, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::Role;
use crate::expr::Term;
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

/// The unit of a table of bytes per state times its count of states: bytes per parameter of
/// the states alone, fp32 or 16-bit (a master copy is no state).
const PRODUCT_UNITS: &[Unit] = &[Unit {
    what: "optimizer-state bytes per parameter",
    values: |r| vec![r.bytes_per_param_fp32, r.bytes_per_param_bf16],
}];

/// The rows a key may mean: `sgd` may have momentum, `adafactor` a first moment, `rmsprop`
/// momentum or centering, `lion` lion-pytorch's class (state allocated like the parameter).
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
        // `lion32bit`, `paged_lion` name bitsandbytes' classes.
        "lion" if crate::knowledge::normalize(key) == "lion" => &["lion-param"],
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

/// Bytes of an fp32 weight or gradient.
const FP32_BYTES: f64 = 4.0;

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
        let tables = &cx.facts.tables;
        let pairs: Vec<(&Table, &Table)> = tables
            .iter()
            .filter_map(|t| Some((t, per_state(cx, t, tables)?)))
            .collect();
        let counts = |t: &Table| pairs.iter().any(|(_, c)| std::ptr::eq(*c, t));
        for table in tables.iter().filter(|t| !t.counts_states() && !counts(t)) {
            match pairs.iter().find(|(b, _)| std::ptr::eq(*b, table)) {
                // Bytes per state beside a count of states: a count of state tensors is the
                // same at every precision, so a wrong one is reported alone; otherwise the
                // product is per parameter.
                Some((_, counts)) => {
                    if !check_counts(counts, out) {
                        check_product(table, counts, out)
                    }
                }
                // A table named for a count of state tensors (`state_tensors_per_param`)
                // counts them, where its numbers would also fit multiples of the weights.
                None if names_state_count(table) => check_table(table, None, &UNITS[..1], out),
                None => check_table(table, None, UNITS, out),
            }
        }
        // A count of states on its own (`case $OPT in adam) STATE_COUNT=2 ;;`) is judged as
        // one beside bytes per state is.
        for table in tables.iter().filter(|t| t.counts_states() && !counts(t)) {
            check_counts(table, out);
        }
        // A sum says more about a term (the weights' precision beside it) than the term alone.
        check_sums(cx, out);
        check_assignments(cx, out);
        check_copied_arms(cx, out);
    }
}

/// One optimizer's states, chosen per optimizer by a chain, written again as a term of a sum
/// outside the chain: that sum costs every optimizer as the copied arm's.
fn check_copied_arms(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    if cx.training.inference {
        return;
    }
    for copy in &cx.facts.copied_arms {
        let key = copy.keys.join("`/`");
        let subject = match copy.subject.as_str() {
            "" => "the optimizer".to_string(),
            s => format!("`{s}`"),
        };
        let message = format!(
            "`{}` is the `{key}` arm's optimizer states (line {}: `{} = {}`), written here whatever {subject} is: every other optimizer is costed as `{key}`",
            cx.file.slice(&copy.span),
            cx.file.lines.line_of(copy.arm.start) + 1,
            copy.target,
            cx.file.slice(&copy.arm),
        );
        out.push(
            Diagnostic::new("MEM002", copy.span.clone(), message).with_help(format!(
                "read `{}`, the states the chain chose for {subject}",
                copy.target
            )),
        );
    }
}

/// The table of state counts that `table` is counted per (`bytes_per_param = 1.0` and
/// `state_params = 2` in the same arms): same keys, small whole numbers, and either a name
/// that counts states or a product of the two names in a formula of the file (`n * width *
/// tensors`), where the counts are the table nearer the optimizers' counts of states.
fn per_state<'t>(cx: &Checker<'_>, table: &Table, tables: &'t [Table]) -> Option<&'t Table> {
    let keys = |t: &Table| -> Vec<String> {
        let mut k: Vec<String> = t.entries.iter().map(|e| e.key.clone()).collect();
        k.sort();
        k
    };
    let small = |t: &Table| {
        t.entries
            .iter()
            .all(|e| e.value.fract() == 0.0 && (0.0..=4.0).contains(&e.value))
    };
    let mine = keys(table);
    let paired = |t: &&Table| !std::ptr::eq(*t, table) && keys(t) == mine && small(t);
    if let Some(named) = tables.iter().filter(paired).find(|t| t.counts_states()) {
        return Some(named);
    }
    if !table.arms || table.returned || table.counts_states() {
        return None;
    }
    let name = table.name.as_deref()?;
    tables.iter().filter(paired).find(|t| {
        t.arms
            && !t.returned
            && t.name
                .as_deref()
                .is_some_and(|other| multiplied(cx, name, other))
            && agrees_with_states(t) > agrees_with_states(table)
    })
}

/// Whether some formula of the file multiplies the two names (`n * width * tensors`).
fn multiplied(cx: &Checker<'_>, a: &str, b: &str) -> bool {
    cx.facts.formulas.iter().any(|f| {
        let text = cx.file.slice(&f.span);
        text.contains('*') && mentions(text, a) && mentions(text, b)
    })
}

/// Whether `text` holds `name` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name)
        .any(|(i, _)| !text[..i].ends_with(ident) && !text[i + name.len()..].starts_with(ident))
}

/// How many of a table's rows give their optimizer's count of states.
fn agrees_with_states(t: &Table) -> usize {
    t.entries
        .iter()
        .filter(|e| candidates(&e.key).iter().any(|r| r.states == e.value))
        .count()
}

/// Whether a table's name says it counts state tensors: `stateTensorsPerParam`, `num_states`,
/// `STATE_COUNT`, never a size (`state_bytes`, `state_multiplier`, `state_gb`).
fn names_state_count(table: &Table) -> bool {
    let name = table.name.as_deref().unwrap_or("").to_ascii_lowercase();
    let counts = ["tensor", "count", "num_"].iter().any(|w| name.contains(w));
    let sized = ["byte", "multiplier", "size", "mem", "gb", "mult"]
        .iter()
        .any(|w| name.contains(w));
    name.contains("state") && counts && !sized
}

/// A table of bytes per state, judged through its count of states.
/// A table of state tensors per optimizer (beside its bytes per state): a row whose count no
/// variant of its optimizer keeps, where the other rows' counts are right. Whether one was
/// reported.
fn check_counts(counts: &Table, out: &mut Vec<Diagnostic>) -> bool {
    let rows: Vec<(&TableEntry, Vec<&OptimizerRow>)> = counts
        .entries
        .iter()
        .map(|e| (e, candidates(&e.key)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let keeps = |e: &TableEntry, c: &[&OptimizerRow]| c.iter().any(|r| close(e.value, r.states));
    let wrong: Vec<_> = rows.iter().filter(|(e, c)| !keeps(e, c)).collect();
    let right = rows.len() - wrong.len();
    if wrong.is_empty() || right < 2 || wrong.len() >= right {
        return false;
    }
    let mut seen: Vec<&std::ops::Range<usize>> = Vec::new();
    for (e, c) in wrong {
        let Some(row) = c.first() else { continue };
        if seen.contains(&&e.value_span) {
            continue;
        }
        seen.push(&e.value_span);
        out.push(
            Diagnostic::new(
                "MEM002",
                e.value_span.clone(),
                format!(
                    "`{}: {}` counts {} optimizer state tensors, but {} keeps {} per parameter (the table's other rows count the states each optimizer keeps)",
                    e.key,
                    fmt_num(e.value),
                    fmt_num(e.value),
                    row.display,
                    fmt_num(row.states)
                ),
            )
            .with_help(format!(
                "count the states from the optimizer's table row ({})",
                row.source
            ))
            .with_fix(Some(Fix {
                applicability: Applicability::Unsafe,
                message: format!("use {} for {}", fmt_num(row.states), row.display),
                edits: vec![Edit::replace(e.value_span.clone(), fmt_num(row.states))],
            })),
        );
    }
    true
}

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
    check_table(&product, Some(counts), PRODUCT_UNITS, out);
}

/// `per_state` holds the counts a product table was multiplied by (no single number to fix);
/// `units` are those the table may be written in.
fn check_table(
    table: &Table,
    per_state: Option<&Table>,
    units: &'static [Unit],
    out: &mut Vec<Diagnostic>,
) {
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
    let conventions: Vec<(&Unit, usize)> = units
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
        let count = per_state.and_then(|c| c.entries.iter().find(|c| c.key == e.key));
        let value = match count {
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
        // In a product, the number that is wrong: the count of states when the bytes per state
        // give the row with the optimizer's count, else the bytes per state.
        let (span, replacement) = match count {
            None => (e.value_span.clone(), expected),
            Some(n) => {
                let per_state = e.value / n.value;
                if n.value != row.states && close(per_state * row.states, expected) {
                    (n.value_span.clone(), row.states)
                } else {
                    (e.value_span.clone(), expected / n.value)
                }
            }
        };
        // A number written once for several keys (`case "adam" | "lion":`) is changed only
        // when every key it serves wants the new number.
        let counted = per_state.is_some() && span != e.value_span;
        let wants = |key: &str| -> Option<f64> {
            let row = *candidates(key).first()?;
            match (
                counted,
                per_state.and_then(|c| c.entries.iter().find(|c| c.key == key)),
            ) {
                (true, _) => Some(row.states),
                (false, Some(n)) => Some((unit.values)(row).get(variant)? / n.value),
                (false, None) => (unit.values)(row).get(variant).copied(),
            }
        };
        let shared = table
            .entries
            .iter()
            .chain(per_state.into_iter().flat_map(|c| &c.entries))
            .filter(|o| o.key != e.key && o.value_span == span)
            .any(|o| !wants(&o.key).is_some_and(|v| close(v, replacement)));
        // A product's bytes per state are replaced only by a whole number (8-bit states carry
        // block scales: 1.02 bytes is no number to write).
        let whole = count.is_none() || replacement.fract() == 0.0;
        let fix = (!shared && whole).then(|| Fix {
            applicability: Applicability::Unsafe,
            message: format!("use {} for {}", fmt_num(replacement), row.display),
            edits: vec![Edit::replace(span.clone(), fmt_num(replacement))],
        });
        out.push(
            Diagnostic::new("MEM002", span, message)
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
        // A value read from a table's arms (`n * bytes_per_state * state_tensors`) takes one
        // row per optimizer: the table is judged, not the row the valuer happened to take.
        let text = cx.file.slice(&f.span);
        let from_arms = cx
            .facts
            .tables
            .iter()
            .any(|t| t.arms && t.name.as_deref().is_some_and(|n| mentions(text, n)));
        // A function that chooses the states per optimizer (`if optim == "adamw": ...`) returns
        // one row per optimizer; a name that calls its value a total (ZeRO's "model states" are
        // weights, gradients and optimizer states) holds more than the states.
        let chosen = cx.facts.optimizer_tests.contains(&f.scope);
        let total = ["total", "sum", "model_state"]
            .iter()
            .any(|w| target.to_ascii_lowercase().contains(w));
        // A value computed elsewhere (`return state_bytes / 1e9`) is judged where it is computed;
        // the weights' size read where it is derived (`model.get_memory_footprint()`, a
        // `numel() * element_size()` sum) is no multiplier of its own.
        let elsewhere = f.lin.terms.iter().any(|t| {
            !(t.derived && t.role == Role::Model)
                && (t.symbol_span.start < f.span.start || t.symbol_span.end > f.span.end)
        });
        let judged = out.iter().any(|d| d.range == f.span);
        if f.inference || from_arms || chosen || total || elsewhere || judged {
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
        // A size of the weights converted to a unit where it is derived (`sum(...) / 1e9`)
        // counts its copies of the weights, not its divisor.
        let mut k: f64 = lin
            .terms
            .iter()
            .map(|t| match t.role {
                Role::Model => super::parts::copies(t).copysign(t.coef),
                _ => t.coef,
            })
            .sum();
        // A count converted from bytes to a unit (`n * 8 / 2**20`): its bytes per parameter.
        let divisors: Vec<f64> = lin
            .terms
            .iter()
            .filter_map(|t| t.conversion.as_ref().map(|c| c.divisor))
            .collect();
        let converted = role == Role::ParamCount
            && divisors.len() == lin.terms.len()
            && divisors.windows(2).all(|d| d[0] == d[1]);
        if let (true, Some(d)) = (converted, divisors.first()) {
            k *= d;
        }
        // Model-size units: the least the states can be. Bytes per parameter (the name says
        // bytes, or the value was converted from bytes): between the 16-bit states and fp32
        // states plus a master copy.
        let (lo, hi, unit) = if role == Role::Model {
            let lo = optimizers
                .iter()
                .map(|o| o.row.state_multiplier_min())
                .fold(f64::MAX, f64::min);
            // Weights of a known precision (`model_gb = n * 4 / 1e9`) bound it above: fp32
            // states of fp32 weights, or fp32 states and a master copy of 16-bit weights (with
            // room for Adafactor's factored statistics).
            let weight_bytes: Option<Vec<f64>> = lin
                .terms
                .iter()
                .map(|t| Some(t.per_param? * t.conversion.as_ref().map_or(1.0, |c| c.divisor)))
                .collect();
            let most = |per: fn(&OptimizerRow) -> f64| {
                optimizers
                    .iter()
                    .map(|o| per(o.row))
                    .fold(f64::MIN, f64::max)
                    + 0.05
            };
            let hi = match weight_bytes.as_deref() {
                Some([w, rest @ ..]) if rest.iter().all(|x| close(*x, *w)) && close(*w, 4.0) => {
                    most(|r| r.bytes_per_param_fp32 / 4.0)
                }
                Some([w, rest @ ..]) if rest.iter().all(|x| close(*x, *w)) && close(*w, 2.0) => {
                    most(|r| (r.bytes_per_param_fp32 + 4.0) / 2.0)
                }
                _ => f64::MAX,
            };
            (lo, hi, "x the weights")
        } else if converted || target.to_ascii_lowercase().contains("byte") {
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
        // ZeRO's "model states" are the weights, gradients and optimizer states: a value
        // named for states that holds exactly that (4 + 4 + 8 bytes for AdamW) is that total.
        let model_states = unit == " bytes per parameter"
            && optimizers
                .iter()
                .any(|o| close(k, 2.0 * FP32_BYTES + o.row.bytes_per_param_fp32));
        if model_states {
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
            [t] if short && !converted && (bound - bound.round()).abs() < 1e-9 => {
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
/// is the optimizer's states, whatever it is called. The weights and the gradients are the
/// terms named for them, or, beside a term a name calls the states, the two other
/// per-parameter terms when they count one precision alike (`n * 4 + n * 4 + states(n)`).
/// Judged against the optimizer the file builds (never an assumed one), at the precision the
/// weights are counted in: too few bytes for its states, or more than its states and an fp32
/// master copy together.
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
    // With every parameter training, those that require gradients are all of them
    // (`sum(p.numel() for p in model.parameters() if p.requires_grad)`).
    let all_train = super::parts::trainable_fraction(cx).is_none();
    let mut reported: Vec<std::ops::Range<usize>> = Vec::new();
    for f in cx.facts.formulas.iter().filter(|f| !f.inference) {
        let whole;
        let f = match all_train {
            true => {
                whole = super::parts::whole_model(f);
                &whole
            }
            false => f,
        };
        let Some((w, g, states)) = model_states(&f.lin.terms) else {
            continue;
        };
        // Reached through a name assigned, or a function returning it, elsewhere: that
        // statement states the states.
        if f.span.start <= states.span.start && states.span.end <= f.span.end {
            continue;
        }
        let Some((target, assign)) = cx.facts.formulas.iter().find_map(|a| match &a.kind {
            FormulaKind::Assign { target, .. }
            | FormulaKind::Return {
                function: target,
                role: Role::Optimizer,
            } if a.span.start <= states.span.start && states.span.end <= a.span.end => {
                Some((target, a))
            }
            _ => None,
        }) else {
            continue;
        };
        // A function that chooses the states per optimizer (`if optim == "adamw": ...`) gives
        // one row per optimizer: which arm the sum reads is not known here.
        let chosen = cx.facts.optimizer_tests.contains(&assign.scope);
        if chosen || names_other_part(target) || reported.contains(&assign.span) {
            continue;
        }
        // Bytes per parameter: a count's coefficient in the unit its terms are counted in, or,
        // for a size of the weights (`weights_gb = n * 2 / 1e9`), the count's coefficient it was
        // made with, times its own.
        let Some(unit) = [w, g, states]
            .iter()
            .find(|t| t.role == Role::ParamCount)
            .map(|t| in_bytes(t.coef) / t.coef)
        else {
            continue;
        };
        let bytes = |t: &Term| match t.role {
            Role::ParamCount => Some(t.coef * unit),
            _ => t.per_param.map(|p| p * t.coef * unit),
        };
        let (Some(wb), Some(gb), Some(k)) = (bytes(w), bytes(g), bytes(states)) else {
            continue;
        };
        let fp32 = (wb - 4.0).abs() < 1e-6;
        let half = (wb - 2.0).abs() < 1e-6;
        if !(fp32 || half) || !((gb - 2.0).abs() < 1e-6 || (gb - 4.0).abs() < 1e-6) || k <= 0.0 {
            continue;
        }
        // fp32 weights keep fp32 states; 16-bit weights keep 16-bit states (pure bf16) or fp32
        // states beside an fp32 master copy. At most: the largest variant's fp32 states, with a
        // master copy folded in beside 16-bit weights.
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
        let master = if fp32 { 0.0 } else { 4.0 };
        let hi = optimizers
            .iter()
            .flat_map(|o| variants_of(o.row))
            .map(|r| r.bytes_per_param_fp32 + master)
            .fold(f64::MIN, f64::max);
        let short = lo > 0.0 && k < lo * (1.0 - TOLERANCE);
        let over = k > hi * (1.0 + TOLERANCE);
        if !short && !over {
            continue;
        }
        let Some(opt) = optimizers.first() else {
            continue;
        };
        let row = opt.row;
        reported.push(assign.span.clone());
        let message = format!(
            "`{target}` counts {} bytes per parameter, and `{}` adds it to {} bytes of weights and {} of gradients: it is {}'s states, which take {} {} ({} {} per parameter at {}{}; {})",
            fmt_num(k),
            cx.file.slice(&f.span).trim(),
            fmt_num(wb),
            fmt_num(gb),
            row.display,
            if short { "at least" } else { "at most" },
            fmt_num(if short { lo } else { hi }),
            fmt_num(row.states),
            if row.states == 1.0 { "state" } else { "states" },
            if fp32 { "fp32" } else { "16 bits" },
            if short || fp32 { "" } else { ", with an fp32 master copy" },
            opt.origin.describe(),
        );
        // Too few: the least the states take. Too many with fp32 weights: the fp32 states.
        let bound = match (short, fp32) {
            (true, _) => Some(lo),
            (false, true) => Some(row.bytes_per_param_fp32),
            (false, false) => None,
        };
        let fix = bound.and_then(|bound| {
            let lit = states.literal.as_ref()?;
            let written = cx.file.slice(lit).trim().parse::<f64>().ok()?;
            // The literal is the bytes when the unit is bytes; scale it otherwise.
            let replaced = written * bound / k;
            ((replaced - replaced.round()).abs() < 1e-9).then(|| Fix {
                applicability: Applicability::Unsafe,
                message: format!("count {} bytes per parameter", fmt_num(bound)),
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

/// The weights, the gradients and the states of a sum of model states per parameter (see
/// [`check_sums`]), each a plain count times bytes.
fn model_states(terms: &[crate::expr::Term]) -> Option<(&Term, &Term, &Term)> {
    let plain = |t: &Term| {
        (t.role == Role::ParamCount || (t.role == Role::Model && t.per_param.is_some()))
            && !t.opaque
            && !sharded(t)
            && t.divided_by.is_none()
    };
    let of = |c: Component| terms.iter().filter(move |t| component(t) == c);
    if of(Component::Trainable).next().is_some() {
        return None;
    }
    let (weights, grads): (Vec<&Term>, Vec<&Term>) = (
        of(Component::Weights).collect(),
        of(Component::Grads).collect(),
    );
    let per_param: Vec<&Term> = of(Component::PerParam).collect();
    let named: Vec<&Term> = of(Component::States).collect();
    let (w, g, states) = match (weights.as_slice(), grads.as_slice()) {
        ([w], [g]) => match (per_param.as_slice(), named.as_slice()) {
            ([s], []) | ([], [s]) => (*w, *g, *s),
            _ => return None,
        },
        ([], []) => match (per_param.as_slice(), named.as_slice()) {
            ([w, g], [s]) if w.coef == g.coef => (*w, *g, *s),
            _ => return None,
        },
        _ => return None,
    };
    [w, g, states]
        .iter()
        .all(|t| plain(t))
        .then_some((w, g, states))
}

/// An optimizer's row and the variants its class may be built as (`sgd` with momentum,
/// Adafactor with a first moment).
fn variants_of(row: &'static OptimizerRow) -> Vec<&'static OptimizerRow> {
    let rows = candidates(&row.id);
    if rows.is_empty() {
        vec![row]
    } else {
        rows
    }
}
