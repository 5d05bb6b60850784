//! MEM008 sharding-divisor: with ZeRO or FSDP known, a per-GPU memory formula that divides the
//! wrong model states by the device count, or divides by the wrong count. Documentation:
//! `rules/MEM008.toml`; which states each stage shards: `rules/knowledge/sharding.toml`.

use super::states::{
    bytes_per_param, component, divisor, per_device, scope, sharded as is_sharded, Component,
    Reported,
};
use super::{fmt_num, Checker, Rule};
use crate::context::Seen;
use crate::diagnostic::Diagnostic;
use crate::expr::{DeviceCount, Term};
use crate::facts::{Formula, Sharding};
use crate::knowledge::{knowledge, StageRow};

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
            // A calculator that branches on the stage computes every stage: not one to judge.
            let facts = scope(cx, f);
            if f.guard.stage || facts.is_some_and(|s| s.tests.stage) {
                continue;
            }
            let (sharding, why) = match facts.and_then(|s| s.named_stage()) {
                Some(n) => (
                    Sharding::Stage(n),
                    format!(
                        "the function `{}` is named for it",
                        facts.map_or("", |s| s.name.as_str())
                    ),
                ),
                None => match stages.as_slice() {
                    [one] => (one.value, format!("seen at {}", one.at)),
                    _ => continue,
                },
            };
            if let Some(d) = judge(cx, f, sharding, &why) {
                if reported.first(f) {
                    out.push(d);
                }
            }
        }
    }
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
            t.span.clone(),
            format!(
                "divides by `{}`, every GPU of the job, after dividing by the model-parallel size: the GPU count already holds the model-parallel ranks, so they are divided out twice",
                t.divided_by.as_deref().unwrap_or_default()
            ),
        )
        .with_help("ZeRO and FSDP shard over the data-parallel degree: divide by world_size / (tensor_parallel x pipeline_parallel) instead"),
    ))
}

fn judge(cx: &Checker<'_>, f: &Formula, sharding: Sharding, why: &str) -> Option<Diagnostic> {
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
                    t.span.clone(),
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
    let n = match sharding {
        Sharding::Stage(n) => n,
        Sharding::Hybrid => {
            let t = terms
                .iter()
                .find(|t| divisor(t) == Some(DeviceCount::Total))?;
            return Some(
                Diagnostic::new(
                    "MEM008",
                    t.span.clone(),
                    format!(
                        "divides model states by `{}`, every GPU of the job, but FSDP's HYBRID_SHARD ({why}) shards within a node and replicates across nodes",
                        t.divided_by.as_deref().unwrap_or_default()
                    ),
                )
                .with_help("divide by the GPUs of one node"),
            );
        }
        _ => return None,
    };
    let row = knowledge().stage(n)?;
    // Named states: each must be divided exactly when the stage shards it.
    for t in &terms {
        let (state, sharded) = match component(t) {
            Component::Weights => ("the parameters", row.params),
            Component::Grads => ("the gradients", row.grads),
            Component::States => ("the optimizer states", row.optimizer_states),
            _ => continue,
        };
        let divided = is_sharded(t);
        if divided == sharded {
            continue;
        }
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
        return Some(Diagnostic::new("MEM008", t.span.clone(), message).with_help(help(row)));
    }
    // A parameter count times bytes: what stays whole must be no more than the stage keeps.
    let whole = bytes_per_param(f, false);
    let shared = bytes_per_param(f, true);
    if shared <= 0.0 {
        return None;
    }
    if !row.optimizer_states {
        return Some(
            Diagnostic::new(
                "MEM008",
                f.span.clone(),
                format!(
                    "divides {} bytes per parameter by the device count, but {} keeps every model state whole on every GPU ({why})",
                    fmt_num(shared),
                    row.display
                ),
            )
            .with_help(help(row)),
        );
    }
    // An fp32 master copy means 16-bit weights and gradients: 2 bytes each.
    let weight_bytes = if whole + shared > FP32_TOTAL * 1.05 {
        2.0
    } else {
        4.0
    };
    let kept = match (row.params, row.grads) {
        (true, _) => 0.0,
        (false, true) => weight_bytes,
        (false, false) => 2.0 * weight_bytes,
    };
    if whole <= kept * 1.05 {
        return None;
    }
    let kept_words = match (row.params, row.grads) {
        (true, _) => "nothing whole".to_string(),
        (false, true) => format!(
            "only the weights whole ({} bytes per parameter)",
            fmt_num(kept)
        ),
        (false, false) => format!(
            "only the weights and gradients whole ({} bytes per parameter)",
            fmt_num(kept)
        ),
    };
    Some(
        Diagnostic::new(
            "MEM008",
            f.span.clone(),
            format!(
                "counts {} bytes per parameter whole on every GPU and {} divided by the device count, but {} keeps {kept_words} ({why})",
                fmt_num(whole),
                fmt_num(shared),
                row.display
            ),
        )
        .with_help(help(row)),
    )
}

fn help(row: &StageRow) -> String {
    format!("{}: {} ({})", row.display, row.formula, row.source)
}
