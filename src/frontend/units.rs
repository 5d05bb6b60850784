//! MEM004 judged per calculation in Python: the values that meet in one comparison, sum,
//! subtraction, return or printout, valued through names and helpers, are in a decimal and a
//! binary unit. A unit comes from the divisor a value went through (`/ 1e9`, `/ 2**30`, `/ GB`);
//! a name that states a unit (`_gib`, `freeGiB`) is weaker evidence, read only where the value
//! shows no divisor. Shell arithmetic is judged by the same rules in `shell/units.rs`, which
//! records its mismatches through [`push`].

use crate::expr::units::{names_bytes, unit_of_name, Unit};
use crate::expr::{Lin, Role, Term};
use crate::facts::{DivisorSyntax, Facts, UnitClash, UnitMismatch, UnitSide};
use std::ops::Range;

/// What a term holds, for units.
#[derive(Clone, Copy, PartialEq)]
enum Holds {
    /// Bytes of memory, by its role or words.
    Memory,
    /// A count of something else (`num_params / 1e9` is billions of parameters).
    Count,
    Unknown,
}

/// A value with a unit in one calculation.
struct Seen {
    unit: Unit,
    /// Converted by a division; otherwise only its name states the unit.
    divided: bool,
    holds: Holds,
    side: UnitSide,
    /// What was divided (`free_bytes`), to tell a deliberate `b / 1e9 - b / 2**30` apart.
    symbol: String,
    /// The divisor as one operand, which a fix may rewrite.
    operand: Option<Range<usize>>,
}

fn holds(t: &Term, divisor: f64) -> Holds {
    let named = |n: &str| names_bytes(n) || unit_of_name(n).is_some();
    match t.role {
        Role::Gpu
        | Role::Model
        | Role::Grads
        | Role::Optimizer
        | Role::Activations
        | Role::Overhead
        | Role::KvCache
        | Role::Total => Holds::Memory,
        // A parameter count divided as it is counts billions; times bytes each, it is bytes.
        Role::ParamCount | Role::Trainable => {
            if t.opaque || (t.coef * divisor - 1.0).abs() > 0.01 {
                Holds::Memory
            } else {
                Holds::Count
            }
        }
        Role::Devices => Holds::Count,
        Role::Unknown if named(&t.symbol) || t.via.as_deref().is_some_and(named) => Holds::Memory,
        Role::Unknown => Holds::Unknown,
    }
}

/// The divisor that gives `unit`, as the message writes it when the source's is not one operand.
fn canonical(unit: Unit) -> &'static str {
    match (unit.binary, unit.power) {
        (true, 2) => "2**20",
        (false, 2) => "1e6",
        (true, _) => "2**30",
        (false, _) => "1e9",
    }
}

/// Every value with a unit in `lin`: its converted terms and constants, and the terms whose
/// names alone state a unit.
fn seen_in(lin: &Lin) -> Vec<Seen> {
    let mut out = Vec::new();
    for t in lin.terms.iter().filter(|t| t.coef != 0.0) {
        let shown = t.via.clone().unwrap_or_else(|| t.symbol.clone());
        match t.conversion.as_ref().and_then(|c| Some((c, c.unit()?))) {
            Some((c, unit)) => {
                let h = holds(t, c.divisor);
                if h == Holds::Count {
                    continue;
                }
                let written = c.operand.as_ref().map(|(text, _)| text.clone());
                out.push(Seen {
                    unit,
                    divided: true,
                    holds: h,
                    side: UnitSide {
                        unit,
                        what: shown,
                        divisor: Some((
                            written.unwrap_or_else(|| canonical(unit).to_string()),
                            c.at.start,
                        )),
                        reported: None,
                    },
                    symbol: t.symbol.clone(),
                    operand: c.operand.as_ref().map(|(_, r)| r.clone()),
                });
            }
            None => {
                if let Some(unit) = unit_of_name(&shown) {
                    out.push(Seen {
                        unit,
                        divided: false,
                        holds: Holds::Memory,
                        side: UnitSide {
                            unit,
                            what: shown,
                            divisor: None,
                            reported: None,
                        },
                        symbol: t.symbol.clone(),
                        operand: None,
                    });
                }
            }
        }
    }
    if lin.constant != 0.0 {
        for c in &lin.const_conversions {
            let Some(unit) = c.unit() else { continue };
            let what = lin
                .const_name
                .clone()
                .unwrap_or_else(|| crate::diagnostic::fmt_num(lin.constant));
            out.push(Seen {
                unit,
                divided: true,
                holds: if lin.const_name.as_deref().is_some_and(names_bytes) {
                    Holds::Memory
                } else {
                    Holds::Unknown
                },
                side: UnitSide {
                    unit,
                    what: what.clone(),
                    divisor: Some((
                        c.operand
                            .as_ref()
                            .map_or_else(|| canonical(unit).to_string(), |(t, _)| t.clone()),
                        c.at.start,
                    )),
                    reported: None,
                },
                symbol: what,
                operand: c.operand.as_ref().map(|(_, r)| r.clone()),
            });
        }
    }
    out
}

/// A value stored in (or returned by, or printed as) `target`, whose name states a binary
/// unit while its divisor gives the decimal one: `free_gib = free / 1e9`. A name stating the
/// decimal unit for a binary divisor is the loose label DeepSpeed and accelerate print: judged
/// only where it meets a decimal value.
pub fn named(
    target: &str,
    lin: &Lin,
    span: Range<usize>,
    syntax: DivisorSyntax,
    label: bool,
) -> Option<UnitMismatch> {
    let stated = unit_of_name(target)?;
    named_unit(stated, target, lin, span, syntax, label)
}

fn named_unit(
    stated: Unit,
    target: &str,
    lin: &Lin,
    span: Range<usize>,
    syntax: DivisorSyntax,
    label: bool,
) -> Option<UnitMismatch> {
    if !stated.binary {
        return None;
    }
    let seen: Vec<Seen> = seen_in(lin)
        .into_iter()
        .filter(|s| s.divided && s.unit.power == stated.power)
        .collect();
    if seen.is_empty() || seen.iter().any(|s| s.unit.binary) {
        return None;
    }
    let fix = match seen.as_slice() {
        [one] => one
            .operand
            .clone()
            .filter(|r| !r.is_empty() && r.start >= span.start && r.end <= span.end),
        _ => None,
    };
    let first = seen.into_iter().next()?;
    Some(UnitMismatch {
        span,
        clash: UnitClash::Named { label, fix },
        decimal: first.side,
        binary: UnitSide {
            unit: stated,
            what: target.to_string(),
            divisor: None,
            reported: None,
        },
        call: None,
        syntax,
    })
}

/// The values of one calculation in a decimal and a binary unit of one power, at least one of
/// them memory by its role or words: both divided, or (with `weak`) a decimal value divided and
/// a binary one named (`need / 1e9 < free_gib`, where nothing shows how `free_gib` was made).
/// The same bytes converted both ways on purpose (`b / 1e9 - b / 2**30`) are no mix.
pub fn meeting(
    values: &[&Lin],
    clash: UnitClash,
    span: Range<usize>,
    weak: bool,
    syntax: DivisorSyntax,
) -> Option<UnitMismatch> {
    let seen: Vec<Seen> = values.iter().flat_map(|l| seen_in(l)).collect();
    for power in [3, 2] {
        let of = |binary: bool, divided: bool| -> Vec<&Seen> {
            seen.iter()
                .filter(|s| {
                    s.unit.power == power && s.unit.binary == binary && s.divided == divided
                })
                .collect()
        };
        let (decimal, binary) = (of(false, true), of(true, true));
        let named = if weak { of(true, false) } else { Vec::new() };
        let Some(d) = decimal.first() else { continue };
        let b = if let Some(b) = binary.first() {
            let memory = decimal
                .iter()
                .chain(&binary)
                .any(|s| s.holds == Holds::Memory);
            let deliberate = decimal
                .iter()
                .all(|d| binary.iter().any(|b| b.symbol == d.symbol));
            if !memory || deliberate {
                continue;
            }
            b
        } else if let Some(b) = named.first() {
            if !decimal.iter().any(|s| s.holds == Holds::Memory) {
                continue;
            }
            b
        } else {
            continue;
        };
        return Some(UnitMismatch {
            span,
            clash,
            decimal: d.side.clone(),
            binary: b.side.clone(),
            call: None,
            syntax,
        });
    }
    None
}

/// The figures of one printout (an f-string), each with the unit its label states: a figure
/// labelled GiB but divided by 1e9, or figures in both units where some label does not say
/// which (`f"{used / 1e9:.1f} / {total / 2**30:.1f} GB"`). Figures each labelled with their
/// own unit are honest, whatever the others are.
pub fn printed(
    figures: &[(Lin, Option<Unit>, Range<usize>)],
    syntax: DivisorSyntax,
) -> Vec<UnitMismatch> {
    let mut out = Vec::new();
    let mut honest = true;
    for (lin, label, span) in figures {
        let seen = seen_in(lin);
        if let Some(label) = label {
            if let Some(m) = named_unit(*label, label.name(), lin, span.clone(), syntax, true) {
                out.push(m);
                continue;
            }
        }
        honest &= seen
            .iter()
            .filter(|s| s.divided)
            .all(|s| Some(s.unit) == *label);
    }
    if out.is_empty() && !honest {
        let lins: Vec<&Lin> = figures.iter().map(|(l, _, _)| l).collect();
        let whole = match (figures.first(), figures.last()) {
            (Some(a), Some(b)) => a.2.start..b.2.end,
            _ => 0..0,
        };
        out.extend(meeting(&lins, UnitClash::Printed, whole, false, syntax));
    }
    out
}

/// Record a mismatch once: a calculation whose values flow on (`gap = a - b; if gap > 0`) is
/// reported where they first meet.
pub fn push(facts: &mut Facts, m: UnitMismatch) {
    let key = |m: &UnitMismatch| {
        (
            m.decimal.divisor.as_ref().map(|d| d.1),
            m.binary.divisor.as_ref().map(|d| d.1),
        )
    };
    let named = |m: &UnitMismatch| matches!(m.clash, UnitClash::Named { .. });
    let repeated = facts.unit_mismatches.iter().any(|o| {
        o.span == m.span
            || match (named(o), named(&m)) {
                // One conversion named GiB, then printed as GiB: one mistake.
                (true, true) => key(o).0.is_some() && key(o).0 == key(&m).0,
                (false, false) => key(o) == key(&m) && key(&m).0.is_some() && key(&m).1.is_some(),
                _ => false,
            }
    });
    if !repeated {
        facts.unit_mismatches.push(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn divided(name: &str, by: f64, at: usize) -> Lin {
        let lin = Lin::symbol(name, at..at + name.len());
        Lin::binary("/", lin, Lin::constant(by, None), name, at..at + 10)
    }

    #[test]
    fn a_comparison_of_both_units_is_a_mix() {
        let need = divided("need_bytes", 1e9, 0);
        let free = divided("free_bytes", 2f64.powi(30), 20);
        let m = meeting(
            &[&need, &free],
            UnitClash::Compared,
            0..40,
            true,
            DivisorSyntax::Python,
        );
        assert!(m.is_some());
        let same = divided("free_bytes", 1e9, 20);
        assert!(meeting(
            &[&need, &same],
            UnitClash::Compared,
            0..40,
            true,
            DivisorSyntax::Python
        )
        .is_none());
        // The same bytes both ways: a deliberate conversion.
        let both = divided("need_bytes", 2f64.powi(30), 20);
        assert!(meeting(
            &[&need, &both],
            UnitClash::Compared,
            0..40,
            true,
            DivisorSyntax::Python
        )
        .is_none());
    }

    #[test]
    fn billions_of_parameters_are_no_unit() {
        let count = divided("n_params", 1e9, 0);
        let free = divided("free_bytes", 2f64.powi(30), 20);
        assert!(meeting(
            &[&count, &free],
            UnitClash::Compared,
            0..40,
            true,
            DivisorSyntax::Python
        )
        .is_none());
    }
}
