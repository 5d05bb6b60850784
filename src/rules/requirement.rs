//! Which part of a memory formula states what training needs, read by how the formula uses its
//! values: what is subtracted from the device's memory, what is compared with it, or a total
//! the code states as one. The device's memory itself is known by where it comes from
//! (`total_memory`, `mem_get_info()`, a name for it), or by its use: a plain number or value
//! that a model-sized need is compared with or subtracted from is the capacity it is checked
//! against.

use super::states::in_bytes;
use crate::expr::{part_of, Lin, Role, Term};
use crate::facts::{Formula, FormulaKind};

/// What a requirement is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    /// The device's memory, known by its source or its name.
    Capacity,
    /// A number or a value only its use marks as the capacity (`need_gb > 80`, `limit - need`).
    Threshold,
    /// Nothing: a total the code states (`required_gb = ...`, a bundle of components).
    Total,
}

/// The side of a formula that states what training needs.
pub struct Requirement<'a> {
    pub terms: Vec<&'a Term>,
    pub against: Against,
}

impl Requirement<'_> {
    /// Checked against a number whose meaning only its use gives: the need must charge more
    /// than the weights before it is read as what training needs (a loading check compares
    /// the weights alone).
    pub fn loose(&self) -> bool {
        self.against == Against::Threshold
    }
}

/// A model-sized term that is memory, not a count: a size of the weights, or a parameter count
/// times bytes (`n * 2`, `n * 16 / 1e9`), not a count in billions (`n / 1e9`).
pub fn is_memory(t: &Term) -> bool {
    match t.role {
        Role::Model => true,
        Role::ParamCount => {
            let b = in_bytes(t.coef).abs();
            (0.05..=64.0).contains(&b) && (b - 1.0).abs() > 1e-9
        }
        _ => false,
    }
}

fn sized(t: &Term) -> bool {
    matches!(t.role, Role::Model | Role::ParamCount)
}

/// A term that can be the capacity a need is checked against: the device's memory by source or
/// name, or by use a plain value of no other role.
fn capacity(t: &Term) -> Option<Against> {
    match t.role {
        Role::Gpu => Some(Against::Capacity),
        Role::Unknown | Role::Total
            if !t.opaque && t.value.is_none_or(|v| v > 0.0) && !names_host(&t.symbol) =>
        {
            Some(Against::Threshold)
        }
        _ => None,
    }
}

/// Host memory or storage (`host_ram_gb`, `cpu_mem`, `disk_free`): not what a GPU holds.
fn names_host(symbol: &str) -> bool {
    let s = symbol.to_ascii_lowercase();
    s.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| {
        matches!(
            w,
            "cpu" | "host" | "ram" | "disk" | "nvme" | "swap" | "dram" | "psutil"
        )
    })
}

/// What a side of a comparison or a budget's positive part is checked against, if it is a
/// capacity at all: the device's memory wins over a threshold; what is taken off it (a margin,
/// a reserve) does not change what it is.
fn against(terms: &[&Term], constant: f64, name: Option<&str>) -> Option<Against> {
    if name.is_some_and(names_host) {
        return None;
    }
    let positive: Vec<&&Term> = terms.iter().filter(|t| t.coef > 0.0).collect();
    if positive.iter().any(|t| t.role == Role::Gpu) {
        return Some(Against::Capacity);
    }
    if positive.iter().all(|t| capacity(t).is_some()) && (!positive.is_empty() || constant > 0.0) {
        return Some(Against::Threshold);
    }
    None
}

pub fn requirement(f: &Formula) -> Option<Requirement<'_>> {
    // What a checkpoint or a file holds is no device's memory.
    if super::states::target(f).is_some_and(super::parts::names_storage) {
        return None;
    }
    let lin = &f.lin;
    let model_terms: Vec<&Term> = lin.terms.iter().filter(|t| sized(t)).collect();
    if model_terms.is_empty() || !model_terms.iter().any(|t| is_memory(t)) {
        return None;
    }
    // A budget: the GPU's memory (or a number used as it) minus what training needs.
    if model_terms.iter().all(|t| t.coef < 0.0) {
        let positive: Vec<&Term> = lin.terms.iter().filter(|t| t.coef > 0.0).collect();
        if let Some(a) = against(&positive, lin.constant, lin.const_name.as_deref()) {
            return Some(Requirement {
                terms: lin.terms.iter().filter(|t| t.coef < 0.0).collect(),
                against: a,
            });
        }
    }
    let positive =
        model_terms.iter().all(|t| t.coef > 0.0) && !lin.terms.iter().any(|t| t.role == Role::Gpu);
    if !positive {
        return None;
    }
    let whole = |against| {
        Some(Requirement {
            terms: lin.terms.iter().collect(),
            against,
        })
    };
    match &f.kind {
        FormulaKind::Compare { other } => {
            let sized_other = other.terms.iter().any(sized);
            let terms: Vec<&Term> = other.terms.iter().collect();
            match against(&terms, other.constant, other.const_name.as_deref()) {
                Some(a) if !sized_other => whole(a),
                _ => None,
            }
        }
        FormulaKind::Assign {
            role: Role::Total, ..
        }
        | FormulaKind::Return {
            role: Role::Total, ..
        } => whole(Against::Total),
        // A value of no named part printed with a memory unit, and added to nothing later,
        // is the total the code states (`train_gb = model_gb * 3`, then `f"{train_gb} GB"`).
        FormulaKind::Assign {
            role: Role::Unknown,
            target,
        } if f.shown
            && !f.feeds
            && !part_of(target).is_component()
            && !weights_as_they_are(lin) =>
        {
            whole(Against::Total)
        }
        // A sum of named parts that nothing adds to later is a total too.
        FormulaKind::Assign { .. } | FormulaKind::Return { .. }
            if !f.feeds && named_parts(lin) >= 2 =>
        {
            whole(Against::Total)
        }
        _ => None,
    }
}

/// The size of the weights and nothing else (`size_gb = sum(p.numel() * p.element_size() ...) /
/// 1e9`): the model's size, whatever it is printed beside, not a need stated.
fn weights_as_they_are(lin: &Lin) -> bool {
    lin.constant == 0.0
        && matches!(lin.terms.as_slice(), [t] if t.role == Role::Model
            && (super::parts::copies(t) - 1.0).abs() < 1e-9)
}

/// How many distinct components a sum names (weights, gradients, states, activations, ...).
fn named_parts(lin: &Lin) -> usize {
    let mut parts: Vec<Role> = lin
        .terms
        .iter()
        .map(|t| t.part)
        .filter(|p| p.is_component())
        .collect();
    parts.sort();
    parts.dedup();
    parts.len()
}
