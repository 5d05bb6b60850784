//! What the memory rules of the second wave (MEM007-MEM011) share: which model state a term of a
//! formula counts, and what the formula says about itself (per device, an upper bound).

use super::Checker;
use crate::expr::{DeviceCount, Role, Term};
use crate::facts::{Formula, FormulaKind, ScopeFacts};

/// The model state a term of a memory formula counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The weights, as a size (`model_size_gb`, `param_mem`).
    Weights,
    Grads,
    /// Optimizer states (and any master copy counted with them).
    States,
    /// A parameter count times bytes per parameter (`total_params * 16`): the coefficient is
    /// bytes per parameter, whatever states they stand for.
    PerParam,
    /// Parameters that train under an adapter (`trainable_params`).
    Trainable,
    Other,
}

pub fn component(t: &Term) -> Component {
    if t.role == Role::Trainable || t.part == Role::Trainable {
        return Component::Trainable;
    }
    if t.part == Role::Optimizer || t.role == Role::Optimizer {
        return Component::States;
    }
    if t.part == Role::Grads || t.role == Role::Grads {
        return Component::Grads;
    }
    match (t.role, t.part) {
        (Role::Model | Role::ParamCount, Role::Model) => Component::Weights,
        (Role::Model, Role::Total | Role::Unknown | Role::Gpu) => Component::Weights,
        (Role::ParamCount, Role::ParamCount | Role::Total | Role::Unknown | Role::Gpu) => {
            Component::PerParam
        }
        _ => Component::Other,
    }
}

/// The kind of device count a per-device term is divided by.
pub fn divisor(t: &Term) -> Option<DeviceCount> {
    t.divided_kind
}

/// Divided over data-parallel ranks (or every GPU), not only split by model parallelism.
pub fn sharded(t: &Term) -> bool {
    t.divided_by.is_some()
        && (t.device_divisors.is_empty()
            || t.device_divisors
                .iter()
                .any(|d| *d != DeviceCount::ModelParallel))
}

/// Some term is a per-device share: the formula states memory on one GPU of a sharded run.
pub fn per_device(f: &Formula) -> bool {
    f.lin.terms.iter().any(sharded)
}

/// A count's coefficient in bytes per parameter: `n_params * 16 / 1e9` (GB) or `/ 2**30` (GiB)
/// carries the unit in its coefficient. The unit is the one that leaves a plausible size (at
/// most 64 bytes), the roundest when two do.
pub fn in_bytes(coef: f64) -> f64 {
    const UNITS: [f64; 7] = [
        1.0,
        1e9,
        1_073_741_824.0,
        1e6,
        1_048_576.0,
        1e12,
        1_099_511_627_776.0,
    ];
    let plausible = |b: f64| (0.05..=64.0).contains(&b.abs());
    let roughness = |b: f64| ((b * 4.0).round() - b * 4.0).abs();
    UNITS
        .iter()
        .map(|u| coef * u)
        .filter(|b| plausible(*b))
        .min_by(|a, b| roughness(*a).total_cmp(&roughness(*b)))
        .unwrap_or(coef)
}

/// The name a formula assigns or the function it returns from.
pub fn target(f: &Formula) -> Option<&str> {
    match &f.kind {
        FormulaKind::Assign { target, .. } => Some(target),
        FormulaKind::Return { function, .. } => Some(function),
        _ => None,
    }
}

pub fn scope<'a>(cx: &Checker<'a>, f: &Formula) -> Option<&'a ScopeFacts> {
    cx.facts.scopes.get(f.scope)
}

/// The estimate says it is a bound, not a prediction (`upper_bound_gb`, `# worst case`,
/// `lower_bound_gb`: a quick reject below any real need).
pub fn says_upper_bound(cx: &Checker<'_>, f: &Formula) -> bool {
    let named = target(f).map(str::to_ascii_lowercase).is_some_and(|n| {
        ["upper", "worst", "bound", "max_mem"]
            .iter()
            .any(|w| n.contains(w))
    });
    // The formula's line and the lines that write what it counts (`if need_gb > gpu_gb:`
    // judges `need_gb = n * 8 / 1e9`, two lines up); a comment alone on the line above one
    // speaks for it.
    let mut lines: Vec<usize> = std::iter::once(f.span.start)
        .chain(counted(f).into_iter().map(|s| s.start))
        .map(|at| cx.file.lines.line_of(at))
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let mut text = String::new();
    for line in lines {
        text.push_str(&cx.file.line_text(line).to_ascii_lowercase());
        if let Some(above) = line.checked_sub(1) {
            let above = cx.file.line_text(above).trim_start();
            if above.starts_with('#') {
                text.push_str(&above.to_ascii_lowercase());
            }
        }
    }
    let written = cx.file.slice(&f.span).to_ascii_lowercase();
    named
        || ["upper", "worst_case", "max_mem", "lower_bound"]
            .iter()
            .any(|w| written.contains(w))
        || text.contains("upper bound")
        || text.contains("lower bound")
        || text.contains("worst case")
        || text.contains("worst-case")
}

/// The symbols a formula counts, where they are written: a check built on a reported total
/// (`required_gb > gpu_gb` after `required_gb = n * 16 / 1e9`) is the same finding.
pub fn counted(f: &Formula) -> Vec<std::ops::Range<usize>> {
    let mut spans: Vec<_> = f
        .lin
        .terms
        .iter()
        .filter(|t| component(t) != Component::Other)
        .map(|t| t.symbol_span.clone())
        .collect();
    spans.sort_by_key(|r| (r.start, r.end));
    spans
}

/// Remembers what was reported; `true` the first time a formula's counted symbols are seen.
#[derive(Default)]
pub struct Reported(Vec<Vec<std::ops::Range<usize>>>);

impl Reported {
    pub fn first(&mut self, f: &Formula) -> bool {
        let key = counted(f);
        if self.0.contains(&key) {
            return false;
        }
        self.0.push(key);
        true
    }
}
