//! `memlint estimate --fit`: the configurations of a run that fit its GPU, cheapest first, each
//! with the largest micro-batch it allows and the flags that select it.
//!
//! The search changes what the run leaves open or allows changing: the sharding of model states
//! over the data-parallel ranks (ZeRO stages, or FSDP's strategies for a run that uses FSDP),
//! activation checkpointing, optimizer and parameter offload, and, where the user allows it,
//! an 8-bit optimizer, LoRA or QLoRA. "Cheapest" is what each change costs in speed, in this
//! order of rank: sharding that only divides states (ZeRO-1/2, `SHARD_GRAD_OP`) < an 8-bit
//! optimizer < selective recomputation < sharding the weights too (ZeRO-3, `FULL_SHARD`) <
//! full recomputation < adapters < optimizer offload < parameter offload. A configuration whose
//! changes hold those of a cheaper one that fits is not listed.

use super::{estimate, Checkpointing, Given, Inputs, Offload, Quantize, Sharding};
use crate::knowledge::knowledge;

/// What the user allows beyond the run's own training (`--fit-allow lora,qlora,8bit-optim`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Allow {
    pub lora: bool,
    pub qlora: bool,
    pub optim_8bit: bool,
}

/// One configuration that fits.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitting {
    /// The changes, as the flags that select them (`--zero 2`, `--checkpointing selective`).
    pub flags: Vec<String>,
    /// The largest micro-batch that fits, up to [`MICRO_MAX`].
    pub micro_batch: u64,
    /// The peak at that micro-batch.
    pub total_bytes: f64,
    cost: u32,
}

/// The largest micro-batch tried.
pub const MICRO_MAX: u64 = 512;
/// The configurations listed at most.
pub const LISTED: usize = 8;

/// One change and its rank in cost.
#[derive(Clone, Debug)]
struct Change {
    flag: String,
    cost: u32,
    apply: fn(&mut Inputs, &str),
}

/// The configurations of `base` that fit its GPU memory, cheapest first.
pub fn fit(base: &Inputs, allow: Allow) -> Result<Vec<Fitting>, String> {
    if base.gpu_memory.is_none() {
        return Err("--fit needs the GPU's memory: give --gpu-memory (80GB, H100)".into());
    }
    estimate(base)?;
    let groups = choices(base, allow);
    let mut fitting: Vec<Fitting> = Vec::new();
    let mut picks = vec![0usize; groups.len()];
    loop {
        let changes: Vec<&Change> = picks
            .iter()
            .zip(&groups)
            .filter_map(|(&i, g)| g.get(i))
            .flatten()
            .collect();
        if let Some(f) = try_config(base, &changes) {
            fitting.push(f);
        }
        // The next combination, like an odometer.
        let mut k = 0;
        loop {
            if k == groups.len() {
                return Ok(cheapest(fitting));
            }
            picks[k] += 1;
            if picks[k] < groups[k].len() {
                break;
            }
            picks[k] = 0;
            k += 1;
        }
    }
}

/// A sharding stage, the flag that selects it, its cost and how it changes the inputs.
type StageOption = (u8, &'static str, u32, fn(&mut Inputs, &str));

/// The alternatives of each independent choice: the first of each is "leave it as it is".
fn choices(base: &Inputs, allow: Allow) -> Vec<Vec<Option<Change>>> {
    let change = |flag: &str, cost: u32, apply: fn(&mut Inputs, &str)| {
        Some(Change {
            flag: flag.to_string(),
            cost,
            apply,
        })
    };
    let dp = base.dp.as_ref().map_or(1, |d| d.value);
    let mut groups = Vec::new();
    // Sharding divides states over the data-parallel ranks: nothing to gain on one. A stage
    // above the run's own, in the run's own framework's words.
    let (stage, fsdp) = match base.sharding.as_ref().map(|s| s.value) {
        None | Some(Sharding::None) => (0, false),
        Some(Sharding::Zero(n)) => (n, false),
        Some(Sharding::ShardGradOp) => (2, true),
        Some(Sharding::FullShard | Sharding::HybridShard) => (3, true),
    };
    if dp > 1 && stage < 3 {
        let mut g = vec![None];
        let options: Vec<StageOption> = if fsdp {
            vec![
                (2, "--fsdp shard-grad-op", 1, |i, w| {
                    i.sharding = Some(Given::new(Sharding::ShardGradOp, w))
                }),
                (3, "--fsdp full-shard", 4, |i, w| {
                    i.sharding = Some(Given::new(Sharding::FullShard, w))
                }),
            ]
        } else {
            vec![
                (1, "--zero 1", 1, |i, w| {
                    i.sharding = Some(Given::new(Sharding::Zero(1), w))
                }),
                (2, "--zero 2", 1, |i, w| {
                    i.sharding = Some(Given::new(Sharding::Zero(2), w))
                }),
                (3, "--zero 3", 4, |i, w| {
                    i.sharding = Some(Given::new(Sharding::Zero(3), w))
                }),
            ]
        };
        for (s, flag, cost, apply) in options {
            if s > stage {
                g.push(change(flag, cost, apply));
            }
        }
        groups.push(g);
    }
    // Recomputation stronger than the run's own.
    let recomputes = base.checkpointing.as_ref().map(|c| c.value);
    let mut g = vec![None];
    if matches!(recomputes, None | Some(Checkpointing::None)) {
        g.push(change("--checkpointing selective", 3, |i, w| {
            i.checkpointing = Some(Given::new(Checkpointing::Selective, w))
        }));
    }
    if recomputes != Some(Checkpointing::Full) {
        g.push(change("--checkpointing full", 5, |i, w| {
            i.checkpointing = Some(Given::new(Checkpointing::Full, w))
        }));
    }
    groups.push(g);
    if base.offload_optimizer.is_none() {
        groups.push(vec![
            None,
            change("--offload-optimizer cpu", 8, |i, w| {
                i.offload_optimizer = Some(Given::new(Offload::Cpu, w))
            }),
            change(
                "--offload-optimizer cpu --offload-params cpu",
                16,
                |i, w| {
                    i.offload_optimizer = Some(Given::new(Offload::Cpu, w));
                    i.offload_params = Some(Given::new(Offload::Cpu, w));
                },
            ),
        ]);
    }
    if base.optimizer.is_none() && allow.optim_8bit {
        groups.push(vec![
            None,
            change("--optimizer adamw8bit", 2, |i, w| {
                i.optimizer = knowledge()
                    .optimizer_by_id("adamw8bit")
                    .map(|r| Given::new(r, w));
            }),
        ]);
    }
    // Adapters need the model's shape; QLoRA quantizes the frozen weights under them.
    let adapters = base.shape.is_some() && base.lora_rank.is_none();
    if adapters && (allow.lora || allow.qlora) {
        let mut g = vec![None];
        if allow.lora {
            g.push(change("--lora-rank 16 --lora-targets all", 6, |i, w| {
                i.lora_rank = Some(Given::new(16, w));
                i.lora_targets = Some(Given::new(vec!["all".into()], w));
            }));
        }
        if allow.qlora {
            g.push(change(
                "--lora-rank 16 --lora-targets all --quantize nf4-dq",
                7,
                |i, w| {
                    i.lora_rank = Some(Given::new(16, w));
                    i.lora_targets = Some(Given::new(vec!["all".into()], w));
                    i.quantize = Some(Given::new(Quantize::Nf4Dq, w));
                },
            ));
        }
        groups.push(g);
    }
    groups
}

/// The configuration with `changes` applied, with the largest micro-batch that fits; `None`
/// when not even one sequence does.
fn try_config(base: &Inputs, changes: &[&Change]) -> Option<Fitting> {
    let mut inputs = base.clone();
    for c in changes {
        (c.apply)(&mut inputs, "--fit");
    }
    let peak = |micro: u64| {
        let mut i = inputs.clone();
        i.micro_batch = Some(Given::new(micro, "--fit"));
        estimate(&i)
            .ok()
            .filter(|e| e.fits == Some(true))
            .map(|e| e.total_bytes)
    };
    // The peak grows with the micro-batch: double, then halve the gap.
    peak(1)?;
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= MICRO_MAX && peak(hi).is_some() {
        lo = hi;
        hi *= 2;
    }
    let mut hi = hi.min(MICRO_MAX + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match peak(mid) {
            Some(_) => lo = mid,
            None => hi = mid,
        }
    }
    // One flag and its value each: a configuration adds to another when it holds its flags.
    let flags = changes
        .iter()
        .flat_map(|c| c.flag.split(" --"))
        .map(|f| format!("--{}", f.trim_start_matches("--")))
        .collect();
    Some(Fitting {
        flags,
        micro_batch: lo,
        total_bytes: peak(lo)?,
        cost: changes.iter().map(|c| c.cost).sum(),
    })
}

/// Cheapest first, without a configuration that only adds changes to a cheaper one that fits.
fn cheapest(mut all: Vec<Fitting>) -> Vec<Fitting> {
    all.sort_by(|a, b| {
        (a.cost, a.flags.len(), std::cmp::Reverse(a.micro_batch)).cmp(&(
            b.cost,
            b.flags.len(),
            std::cmp::Reverse(b.micro_batch),
        ))
    });
    let mut kept: Vec<Fitting> = Vec::new();
    for f in all {
        let adds_to_kept = kept.iter().any(|k| {
            k.flags.iter().all(|flag| f.flags.contains(flag)) && k.micro_batch >= f.micro_batch
        });
        if !adds_to_kept {
            kept.push(f);
        }
        if kept.len() == LISTED {
            break;
        }
    }
    kept
}
