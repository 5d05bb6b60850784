//! What each model-sized term of a memory requirement counts (MEM006, MEM007), read from how its
//! value was made rather than from the words of the formula: the label the value was bound
//! under (a name, a dict key, a tuple target, a helper named for it), where the count comes
//! from (parameters that require grad, a fraction of the model), and, for a count times bytes
//! that nothing labels, its size beside the weights and the optimizer's states.

use super::states::{component, in_bytes, Component};
use super::Checker;
use crate::context::OptimizerChoice;
use crate::expr::{Role, Term};
use crate::facts::{Formula, FormulaKind};
use crate::knowledge::knowledge;
use std::ops::Range;

/// Below this many bytes per parameter of the whole model a gradient or state term counts
/// only a fraction of it (`trainable = n * 0.006`): no dtype is this small.
const FRACTION_BYTES: f64 = 0.4;
/// The same, for a size in copies of the weights (`model_gb * 0.01`).
const FRACTION_COPIES: f64 = 0.2;
const EPS: f64 = 1e-6;

/// What a model-sized term of a requirement counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Labelled the weights (`weights_gb`, `"params"`, `w = n * 2`), or a size of the model.
    Weights,
    Grads,
    States,
    /// Parameters that train: counted by their source or name, or a fraction of the model.
    Trainable,
    /// A parameter count times bytes nothing labels (`n * 8`).
    Bytes,
}

/// A term a requirement counts for the model, with what it counts.
pub struct Counted<'a> {
    pub term: &'a Term,
    pub part: Part,
}

/// Bytes per parameter of a count's term: its coefficient times the unit it was converted to
/// (`n * 2 / 1e9` is 2), or read as the plausible unit when none was (`n_b * 2`).
pub fn bytes(t: &Term) -> f64 {
    match t.conversion.as_ref().filter(|c| c.unit().is_some()) {
        Some(c) => t.coef.abs() * c.divisor,
        None => in_bytes(t.coef).abs(),
    }
}

/// A count (`ParamCount`) as opposed to a size of the weights (`Model`, counted in copies).
pub fn is_count(t: &Term) -> bool {
    t.role == Role::ParamCount
}

/// How many copies of the weights a size of them (`Model`) counts. A size in bytes converted
/// where it is summed (`(param_bytes + state_bytes) / 2**30`) is still one copy: a coefficient
/// of a billionth is the divisor changing its unit, not a share of the model.
pub fn copies(t: &Term) -> f64 {
    let coef = t.coef.abs();
    match t.conversion.as_ref().filter(|c| c.unit().is_some()) {
        Some(c) if coef < UNIT_SCALE && coef * c.divisor >= UNIT_SCALE => coef * c.divisor,
        _ => coef,
    }
}

/// Below this, a coefficient of a size of the weights is a unit's divisor, not a share.
const UNIT_SCALE: f64 = 1e-3;

/// Less than any dtype takes for the whole model: a share of it.
fn fraction(t: &Term) -> bool {
    match t.role {
        Role::ParamCount => bytes(t) < FRACTION_BYTES,
        Role::Model => copies(t) < FRACTION_COPIES,
        _ => false,
    }
}

/// The model-sized terms of `terms`, each with what it counts.
pub fn counted<'a>(terms: &[&'a Term]) -> Vec<Counted<'a>> {
    terms
        .iter()
        .filter_map(|t| {
            let sized = matches!(t.role, Role::Model | Role::ParamCount);
            let part = match component(t) {
                Component::Trainable => Part::Trainable,
                _ if sized && fraction(t) => Part::Trainable,
                // A value named for gradients or states counts them, sized or not
                // (`optimizer_gb` given as an argument).
                Component::Grads => Part::Grads,
                Component::States => Part::States,
                _ if !sized => return None,
                Component::Weights => Part::Weights,
                Component::PerParam => Part::Bytes,
                Component::Other => return None,
            };
            Some(Counted { term: t, part })
        })
        .collect()
}

/// Whether `b` bytes per parameter, left unlabelled beside weights of `weights` bytes, are one of
/// `optimizers`' states: their fp32 size, or that with a 4-byte master copy beside 16-bit
/// weights (`n * 2 + n * 8`, `n * 2 + n * 12`). Four bytes or fewer may be a gradient alone.
pub fn unlabelled_states(b: f64, weights: f64, optimizers: &[OptimizerChoice]) -> bool {
    let master = knowledge().dtype("fp32").map_or(4.0, |d| d.bytes);
    if b <= master + EPS {
        return false;
    }
    optimizers.iter().any(|o| {
        let states = o.row.bytes_per_param_fp32;
        let close = |x: f64| (b - x).abs() < 1e-3;
        states > 0.0 && (close(states) || (weights <= 2.0 + EPS && close(states + master)))
    })
}

/// A formula whose counts of the parameters that require gradients are read as the whole
/// model's.
pub fn whole_model(f: &Formula) -> Formula {
    let mut f = f.clone();
    for t in &mut f.lin.terms {
        if t.role == Role::Trainable {
            t.role = Role::ParamCount;
            if t.part == Role::Trainable {
                t.part = Role::ParamCount;
            }
        }
    }
    f
}

/// The file says only part of the model trains, by arithmetic: a name for the trainable
/// parameters assigned a fraction of the count (`trainable = n * 0.006`). Where it is.
pub fn trainable_fraction(cx: &Checker<'_>) -> Option<Range<usize>> {
    cx.facts.formulas.iter().find_map(|f| {
        let FormulaKind::Assign {
            role: Role::Trainable,
            ..
        } = &f.kind
        else {
            return None;
        };
        let [t] = f.lin.terms.as_slice() else {
            return None;
        };
        let share = t.role == Role::ParamCount && !t.opaque && t.conversion.is_none();
        (share && t.coef > 0.0 && t.coef < 0.5).then(|| f.span.clone())
    })
}

/// The estimate is for full fine-tuning, by the name it is assigned to or returned from, or
/// of the function it is written in (`full_finetune_gb`): a LoRA file may compare both.
pub fn for_full_finetuning(cx: &Checker<'_>, f: &Formula) -> bool {
    let full = |n: &str| {
        n.to_ascii_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.starts_with("full"))
    };
    super::states::target(f).is_some_and(full)
        || super::states::scope(cx, f).is_some_and(|s| full(&s.name))
}

/// Names a store outside the GPU (`checkpoint_bytes`, `disk_gb`, `save_size`): a total of the
/// weights and states there is what a checkpoint holds, not what training keeps on the device.
pub fn names_storage(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| {
        matches!(
            w,
            "checkpoint" | "ckpt" | "disk" | "file" | "save" | "saved" | "storage" | "export"
        )
    })
}

type Key = (Range<usize>, Range<usize>);

/// The model-sized terms of a formula, by where each is written: the same value read again
/// (through a name, a helper's return) keeps them.
fn keys(f: &Formula) -> Vec<Key> {
    f.lin
        .terms
        .iter()
        .filter(|t| matches!(t.role, Role::Model | Role::ParamCount | Role::Trainable))
        .map(|t| (t.symbol_span.clone(), t.span.clone()))
        .collect()
}

/// The requirement is one part of a larger one written in the file: another formula counts
/// every model-sized term it counts, where they are written, and more (`fixed = w + states`
/// then `need = fixed + grads + acts`). That one is judged instead.
pub fn part_of_larger(cx: &Checker<'_>, f: &Formula) -> bool {
    let mine = keys(f);
    !mine.is_empty()
        && cx.facts.formulas.iter().any(|g| {
            let theirs = keys(g);
            theirs.len() > mine.len() && mine.iter().all(|k| theirs.contains(k))
        })
}

/// The formulas that state the same model-sized terms as `f` (`f` itself among them): a
/// helper's return that a call site reads, a name's value read again.
pub fn same_terms<'a>(cx: &Checker<'a>, f: &Formula) -> impl Iterator<Item = &'a Formula> {
    let mine = keys(f);
    cx.facts.formulas.iter().filter(move |g| {
        let theirs = keys(g);
        !mine.is_empty() && theirs.len() == mine.len() && mine.iter().all(|k| theirs.contains(k))
    })
}

/// A dict of parts written as a literal (`return {"weights": w, "adam": s}`): the caller picks
/// which parts it adds, so the dict states no total of its own, unless a key names one
/// (`"total": w + s`).
pub fn bundle(cx: &Checker<'_>, f: &Formula) -> bool {
    let text = cx.file.slice(&f.span).trim_start();
    if !text.starts_with('{') {
        return false;
    }
    let keys = text.split(['"', '\'']).skip(1).step_by(2);
    !keys
        .into_iter()
        .any(|k| crate::expr::role_of(k) == Role::Total)
}

/// What `f` counts is what a store outside the GPU holds: a formula named for a checkpoint or
/// a file states the same terms (`need = sum(checkpoint_bytes(m).values())`).
pub fn stored(cx: &Checker<'_>, f: &Formula) -> bool {
    same_terms(cx, f).any(|g| super::states::target(g).is_some_and(names_storage))
}

/// A remainder (`left = gpu - weights - states`) that another formula of its function reduces
/// by a term of `role` (`if left - max(prefetch, grads_mem) < 0:`): the term is charged there.
pub fn charged_elsewhere(cx: &Checker<'_>, f: &Formula, role: Role) -> bool {
    let mine = keys(f);
    !mine.is_empty()
        && cx.facts.formulas.iter().any(|g| {
            g.scope == f.scope
                && g.span != f.span
                && g.lin.saw(role)
                && mine.iter().all(|k| keys(g).contains(k))
        })
}
