//! MEM008 sharding-divisor: with ZeRO or FSDP known, a per-GPU memory formula that divides the
//! wrong model states by the device count, or divides by the wrong count. Documentation:
//! `rules/MEM008.toml`; which states each stage shards: `rules/knowledge/sharding.toml`.

use super::states::{
    component, divisor, in_bytes, per_device, scope, sharded as is_sharded, Component, Reported,
};
use super::{fmt_num, Checker, Rule};
use crate::context::Seen;
use crate::diagnostic::Diagnostic;
use crate::expr::{DeviceCount, Role, Term};
use crate::facts::{Formula, FormulaKind, Framework, Precision, Sharding};
use crate::knowledge::{knowledge, StageRow};
use std::ops::Range;

pub struct ShardingDivisor;

/// Above this many bytes per parameter in total, the run keeps an fp32 master copy beside
/// 16-bit weights: fp32 training without one needs 16 (4 + 4 + 8 for Adam).
const FP32_TOTAL: f64 = 16.0;

impl Rule for ShardingDivisor {
    fn code(&self) -> &'static str {
        "MEM008"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if training.inference {
            return;
        }
        // Secondary partitions (ZeRO++ hpZ, MiCS) and Megatron's distributed optimizer shard
        // differently from the stage table: nothing here applies.
        if training.shards.iter().any(|s| {
            matches!(
                s.value,
                Sharding::Secondary | Sharding::DistributedOptimizer
            )
        }) {
            return;
        }
        let stages: Vec<&Seen<Sharding>> = training
            .shards
            .iter()
            .filter(|s| matches!(s.value, Sharding::Stage(_) | Sharding::Hybrid))
            .collect();
        let mut reported = Reported::default();
        // A share divided twice, by what and where it was first written: reported once.
        let mut twice: Vec<(String, Option<String>)> = Vec::new();
        for f in &cx.facts.formulas {
            if f.inference || !per_device(f) {
                continue;
            }
            if let Some((t, d)) = model_parallel_twice(f) {
                let key = (t.symbol.clone(), t.divided_by.clone());
                if !twice.contains(&key) {
                    twice.push(key);
                    out.push(d);
                }
                continue;
            }
            // `o /= world` divides one part in place: the sum that adds it is judged.
            if in_place(cx, f) {
                continue;
            }
            // A formula under a test of the stage is judged for the stages that reach it; one
            // outside such tests in a calculator that branches on the stage is not judged.
            let facts = scope(cx, f);
            let (sharding, why) = match &f.stages {
                Some((mask, test)) => (
                    Judged::Stages(*mask),
                    format!("the test `{}` it is written under", cx.file.slice(test)),
                ),
                None if f.guard.stage || facts.is_some_and(|s| s.tests.stage) => continue,
                None => match facts.and_then(|s| s.named_stage()) {
                    Some(n) => (
                        Judged::Stages(1 << n),
                        format!(
                            "the function `{}` is named for it",
                            facts.map_or("", |s| s.name.as_str())
                        ),
                    ),
                    None => match stages.as_slice() {
                        [one] => (
                            match one.value {
                                Sharding::Stage(n) => Judged::Stages(1 << n),
                                _ => Judged::Hybrid,
                            },
                            format!("seen at {}", one.at),
                        ),
                        _ => continue,
                    },
                },
            };
            if sharded_part(f, &sharding) {
                continue;
            }
            // The stage read from this function's name holds for this formula only.
            let by_name = f.stages.is_none() && facts.and_then(|s| s.named_stage()).is_some();
            // Terms a function that tests the stage wrote (`_estimate(stage=1)` under
            // `if stage >= 1:`, a calculator called with the stage) are judged there, under
            // its tests.
            if f.stages.is_none() && written_under_stage_tests(cx, f) {
                continue;
            }
            if let Some(d) = judge(cx, f, sharding, &why) {
                // A term written in another function and reached through its return (`return
                // self._zero1()` in `_zero2`, named for a stage) is reported where this formula
                // reads it.
                let elsewhere = by_name
                    && cx.facts.formulas.iter().any(|g| {
                        g.scope != f.scope
                            && g.span.start <= d.range.start
                            && d.range.end <= g.span.end
                    });
                if elsewhere && (d.range.start < f.span.start || d.range.end > f.span.end) {
                    // Its own finding: the function that wrote the term may be right.
                    reached_through(cx, d, &f.span, out);
                    continue;
                }
                if reported.first(f) {
                    out.push(d);
                }
            }
        }
        handed_back(cx, out);
    }
}

/// A divided part that a later line adds to the rest (`o = 12 * n / world`, then `w + g + o`),
/// which the stages judged shard: the part its name says (optimizer states from stage 1,
/// gradients from 2, weights at 3). A part no name says is one by its bytes: at stage 1 only
/// the states are divided, and 2 bytes per parameter are 16-bit weights or gradients; from
/// stage 2 any part may be (`rest = 14 * n / world`). The sum holds what is kept whole.
fn sharded_part(f: &Formula, sharding: &Judged) -> bool {
    let FormulaKind::Assign { target, .. } = &f.kind else {
        return false;
    };
    if !f.feeds || !f.lin.terms.iter().all(|t| t.divided_by.is_some()) {
        return false;
    }
    let lowest = match sharding {
        Judged::Stages(mask) => mask.trailing_zeros(),
        Judged::Hybrid => return false,
    };
    let bytes: f64 = f
        .lin
        .terms
        .iter()
        .filter(|t| t.role == Role::ParamCount)
        .map(|t| in_bytes(t.coef).abs())
        .sum();
    match crate::expr::part_of(target) {
        Role::Total => false,
        Role::Optimizer => lowest >= 1,
        Role::Grads => lowest >= 2,
        Role::Model => lowest >= 3,
        _ => lowest >= 2 || (lowest == 1 && bytes > 2.5),
    }
}

/// `x /= n` or `x //= n`: a part divided where it is held.
fn in_place(cx: &Checker<'_>, f: &Formula) -> bool {
    let text = cx.file.slice(&f.span);
    let name_end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(text.len());
    let rest = text[name_end..].trim_start();
    name_end > 0 && (rest.starts_with("/=") || rest.starts_with("//="))
}

/// Whether a term of `f` is written in another function of the file that tests the stage.
fn written_under_stage_tests(cx: &Checker<'_>, f: &Formula) -> bool {
    f.lin.terms.iter().any(|t| {
        cx.facts.formulas.iter().any(|g| {
            g.scope != f.scope
                && g.span.start <= t.span.start
                && t.span.end <= g.span.end
                && cx.facts.scopes.get(g.scope).is_some_and(|s| s.tests.stage)
        })
    })
}

/// A function named for a stage whose return hands back what another function of the file
/// returns, when that cannot be valued (the other function hands its estimate to something not
/// read here: `return self._create_result(breakdown)`, a method of an imported base class): the
/// other function's own per-GPU formulas are what it estimates, judged at the stage, and
/// reported at the `return` that reuses them. Once per `return`.
fn handed_back(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    let facts = cx.facts;
    for (from, to, call) in &facts.returns_call {
        let (Some(t), Some(s)) = (facts.scopes.get(*from), facts.scopes.get(*to)) else {
            continue;
        };
        let Some(n) = t.named_stage() else {
            continue;
        };
        // Valued: judged as this function's own formula. Named for the stage: judged there.
        let valued = facts.formulas.iter().any(|f| {
            f.scope == *from && matches!(f.kind, FormulaKind::Return { .. }) && f.span == *call
        });
        if valued || s.named_stage() == Some(n) || s.tests.stage {
            continue;
        }
        let why = format!("the function `{}` is named for it", t.name);
        let found = facts
            .formulas
            .iter()
            .filter(|f| f.scope == *to && !f.inference && per_device(f))
            .filter(|f| f.stages.is_none() && !f.guard.stage)
            .find_map(|f| judge(cx, f, Judged::Stages(1 << n), &why));
        if let Some(d) = found {
            reached_through(cx, d, call, out);
        }
    }
}

/// A finding on a term written in another function, reported where `span` reads it, once.
fn reached_through(
    cx: &Checker<'_>,
    mut d: Diagnostic,
    span: &Range<usize>,
    out: &mut Vec<Diagnostic>,
) {
    let read = cx.file.slice(span).lines().next().unwrap_or("");
    let read = &read[..crate::source::floor_char_boundary(read, 60)];
    d.message = format!("{} (reached through `{}`)", d.message, read.trim_end());
    d.range = span.clone();
    if !out.iter().any(|o| o.range == d.range) {
        out.push(d);
    }
}

/// What a term counts the parameters of: its own symbol for a count; for the weights' size
/// held in a name (`model_gb = n_params * 2 / 1e9`), what that size was computed from.
fn count_of(t: &Term) -> Option<&str> {
    match t.role {
        Role::ParamCount => Some(t.symbol.as_str()),
        Role::Model => t.over.as_deref(),
        _ => None,
    }
}

/// What a formula is judged against: the stages that reach it, or FSDP's hybrid sharding.
#[derive(Clone, Copy)]
enum Judged {
    Stages(u8),
    Hybrid,
}

/// A state divided by the model-parallel size and then by every GPU of the job: the GPU count
/// already holds the model-parallel ranks, so they are divided out twice. Wrong at any stage.
fn model_parallel_twice(f: &Formula) -> Option<(&Term, Diagnostic)> {
    let t = f.lin.terms.iter().find(|t| {
        !matches!(component(t), Component::Other | Component::Trainable)
            && t.device_divisors
                .iter()
                .skip_while(|d| **d != DeviceCount::ModelParallel)
                .any(|d| *d == DeviceCount::Total)
    })?;
    Some((
        t,
        Diagnostic::new(
            "MEM008",
            division(t),
            format!(
                "divides by `{}`, every GPU of the job, after dividing by the model-parallel size: the GPU count already holds the model-parallel ranks, so they are divided out twice",
                t.divided_by.as_deref().unwrap_or_default()
            ),
        )
        .with_help("ZeRO and FSDP shard over the data-parallel degree: divide by world_size / (tensor_parallel x pipeline_parallel) instead"),
    ))
}

/// Where a divided term's division is written: the wrong divisor is reported there.
fn division(t: &Term) -> std::ops::Range<usize> {
    t.divided_at.clone().unwrap_or_else(|| t.span.clone())
}

fn judge(cx: &Checker<'_>, f: &Formula, judged: Judged, why: &str) -> Option<Diagnostic> {
    let training = cx.training;
    let terms: Vec<_> = f
        .lin
        .terms
        .iter()
        .filter(|t| !matches!(component(t), Component::Other | Component::Trainable))
        .collect();
    // Dividing by every process while tensor or pipeline parallelism takes some of them.
    if let Some(mp) = training.model_parallel.first() {
        if let Some(t) = terms
            .iter()
            .find(|t| divisor(t) == Some(DeviceCount::Total))
        {
            return Some(
                Diagnostic::new(
                    "MEM008",
                    division(t),
                    format!(
                        "divides model states by `{}`, every GPU of the job, but a model-parallel degree of {} (seen at {}) leaves data-parallel ranks only: ZeRO and FSDP shard over the data-parallel degree",
                        t.divided_by.as_deref().unwrap_or_default(),
                        mp.value,
                        mp.at
                    ),
                )
                .with_help("divide by the data-parallel degree: world_size / (tensor_parallel x pipeline_parallel x context_parallel)"),
            );
        }
    }
    let mask = match judged {
        Judged::Stages(mask) => mask,
        Judged::Hybrid => {
            let t = terms
                .iter()
                .find(|t| divisor(t) == Some(DeviceCount::Total))?;
            return Some(
                Diagnostic::new(
                    "MEM008",
                    division(t),
                    format!(
                        "divides model states by `{}`, every GPU of the job, but FSDP's HYBRID_SHARD ({why}) shards within a node and replicates across nodes",
                        t.divided_by.as_deref().unwrap_or_default()
                    ),
                )
                .with_help("divide by the GPUs of one node"),
            );
        }
    };
    let rows: Vec<&StageRow> = (0..4u8)
        .filter(|s| mask & (1 << s) != 0)
        .filter_map(|s| knowledge().stage(s))
        .collect();
    // Whole bytes added and taken away again (`zero1(p) - 2 * p + 2 * p / n`: a state moved
    // from whole to divided): what a named state says is no longer what the GPU keeps, so
    // the bytes decide.
    let whole_signs: Vec<bool> = f
        .lin
        .terms
        .iter()
        .filter(|t| t.role == Role::ParamCount && !is_sharded(t))
        .map(|t| t.coef > 0.0)
        .collect();
    if whole_signs.contains(&true) && whole_signs.contains(&false) {
        return judge_bytes(f, &rows, why, deepspeed_16bit(cx));
    }
    // A whole term over another count than the divided ones (`4 * largest_layer_params`
    // beside `18 * total_params / n`: ZeRO-3's gathered layer) is a buffer, no model state,
    // whatever name holds it (`model_params_gb = largest_layer_gb`).
    let divided_counts: Vec<&str> = terms
        .iter()
        .filter(|t| is_sharded(t))
        .filter_map(|t| count_of(t))
        .collect();
    let buffer = |t: &Term| {
        !is_sharded(t)
            && !divided_counts.is_empty()
            && count_of(t).is_some_and(|c| !divided_counts.contains(&c))
    };
    // Named states: the formula runs at every stage that reaches it, so each state must be
    // divided exactly when each of those stages shards it.
    for t in terms.iter().filter(|t| !buffer(t)) {
        let (state, shards): (&str, fn(&StageRow) -> bool) = match component(t) {
            Component::Weights => ("the parameters", |r| r.params),
            Component::Grads => ("the gradients", |r| r.grads),
            Component::States => ("the optimizer states", |r| r.optimizer_states),
            _ => continue,
        };
        let divided = is_sharded(t);
        let Some(row) = rows.iter().find(|r| shards(r) != divided) else {
            continue;
        };
        let message = if divided {
            format!(
                "divides {state} by `{}`, but {} keeps {state} whole on every GPU ({why})",
                t.divided_by.as_deref().unwrap_or_default(),
                row.display
            )
        } else {
            format!(
                "counts {state} whole on every GPU, but {} shards them over the data-parallel ranks ({why})",
                row.display
            )
        };
        // A division is wrong where it is written; a term left whole is wrong in the share
        // that adds it (the component itself is right where it is computed).
        let within = t.span.start >= f.span.start && t.span.end <= f.span.end;
        let at = match (divided, within) {
            (true, _) => division(t),
            (false, true) => t.span.clone(),
            (false, false) => f.span.clone(),
        };
        return Some(Diagnostic::new("MEM008", at, message).with_help(help(row)));
    }
    judge_bytes(f, &rows, why, deepspeed_16bit(cx))
}

/// DeepSpeed trains in 16 bits (`bf16.enabled`, `fp16.enabled`, or a 16-bit model): the weights
/// it keeps on every GPU take 2 bytes each, its fp32 master copy sits with the states.
fn deepspeed_16bit(cx: &Checker<'_>) -> bool {
    let t = cx.training;
    t.frameworks.contains(&Framework::DeepSpeed)
        && t.precision
            .iter()
            .any(|p| matches!(p, Precision::Amp | Precision::Pure16))
}

/// A parameter count times bytes: what stays whole must be what the stages keep whole, no more
/// (states counted on every GPU) and no less (the weights of stages 1 and 2 divided too).
fn judge_bytes(
    f: &Formula,
    rows: &[&StageRow],
    why: &str,
    deepspeed_16bit: bool,
) -> Option<Diagnostic> {
    // One named state on its own (`states = states / world`) is not all a GPU keeps.
    let mut parts: Vec<Component> = f
        .lin
        .terms
        .iter()
        .filter(|t| t.role == Role::ParamCount)
        .map(component)
        .collect();
    parts.dedup();
    if let [one] = parts.as_slice() {
        if matches!(
            one,
            Component::Weights | Component::Grads | Component::States
        ) {
            return None;
        }
    }
    // What is kept whole is judged over the count that is divided: a buffer sized by another
    // count (`largest_layer_params * 4`, the gathered layer of ZeRO-3) is no model state.
    let divided_counts: Vec<&str> = f
        .lin
        .terms
        .iter()
        .filter(|t| t.role == Role::ParamCount && is_sharded(t))
        .map(|t| t.symbol.as_str())
        .collect();
    let bytes = |divided: bool| -> f64 {
        f.lin
            .terms
            .iter()
            .filter(|t| t.role == Role::ParamCount && is_sharded(t) == divided)
            .filter(|t| divided || divided_counts.contains(&t.symbol.as_str()))
            // Divided by the model-parallel degree alone, a term is still whole here.
            .filter(|t| divided || !t.opaque || t.divided_by.is_some())
            .map(|t| in_bytes(t.coef))
            .sum::<f64>()
            // A budget subtracts what it needs (`cap - w - g / world`).
            .abs()
    };
    let (whole, shared) = (bytes(false), bytes(true));
    if shared <= 0.0 {
        return None;
    }
    if let Some(row) = rows.iter().find(|r| !r.optimizer_states) {
        return Some(
            Diagnostic::new(
                "MEM008",
                f.span.clone(),
                format!(
                    "divides {} bytes per parameter by the device count, but {} keeps every model state whole on every GPU ({why})",
                    fmt_num(shared),
                    row.display,
                ),
            )
            .with_help(help(row)),
        );
    }
    // An fp32 master copy means 16-bit weights and gradients: 2 bytes each. A state written
    // whole at 2 bytes per parameter is one of them (`n * 2 + n * 2 + n * 12 / world`).
    let sixteen_bit = f.lin.terms.iter().any(|t| {
        t.role == Role::ParamCount && !is_sharded(t) && (in_bytes(t.coef).abs() - 2.0).abs() < 0.01
    });
    let weight_bytes = if whole + shared > FP32_TOTAL * 1.05 || sixteen_bit || deepspeed_16bit {
        2.0
    } else {
        4.0
    };
    let kept = |r: &StageRow, w: f64| match (r.params, r.grads) {
        (true, _) => 0.0,
        (false, true) => w,
        (false, false) => 2.0 * w,
    };
    if let Some(row) = rows.iter().find(|r| whole > kept(r, weight_bytes) * 1.05) {
        let kept_words = kept_words(row, kept(row, weight_bytes), true);
        return Some(
            Diagnostic::new(
                "MEM008",
                f.span.clone(),
                format!(
                    "counts {} bytes per parameter whole on every GPU and {} divided by the device count, but {} keeps {kept_words} ({why})",
                    fmt_num(whole),
                    fmt_num(shared),
                    row.display,
                ),
            )
            .with_help(help(row)),
        );
    }
    // Below stage 3 the weights stay on every GPU, at least 2 bytes each in 16 bits (and the
    // gradients too at stage 1). A size of the weights counted apart keeps them.
    let sized_whole = f
        .lin
        .terms
        .iter()
        .any(|t| t.role == Role::Model && !is_sharded(t));
    let short = |r: &&&StageRow| kept(r, 2.0) > 0.0 && whole < kept(r, 2.0) * 0.95;
    if let Some(row) = rows.iter().find(short).filter(|_| !sized_whole) {
        let kept_words = kept_words(row, kept(row, 2.0), false);
        return Some(
            Diagnostic::new(
                "MEM008",
                f.span.clone(),
                format!(
                    "divides {} bytes per parameter by the device count and keeps {} whole, but {} keeps {kept_words} on every GPU: dividing them promises memory the GPU does not have ({why})",
                    fmt_num(shared),
                    fmt_num(whole),
                    row.display,
                ),
            )
            .with_help(help(row)),
        );
    }
    None
}

/// What a stage keeps whole, `only` that when too much was kept.
fn kept_words(row: &StageRow, kept: f64, only: bool) -> String {
    let only = if only { "only " } else { "" };
    match (row.params, row.grads) {
        (true, _) => "nothing whole".to_string(),
        (false, true) => format!(
            "{only}the weights whole ({} bytes per parameter)",
            fmt_num(kept)
        ),
        (false, false) => format!(
            "{only}the weights and gradients whole ({} bytes per parameter)",
            fmt_num(kept)
        ),
    }
}

fn help(row: &StageRow) -> String {
    format!("{}: {} ({})", row.display, row.formula, row.source)
}
