//! How a run splits and places model states, as keys, flags and calls say it: ZeRO stages and
//! FSDP strategies, DeepSpeed offload, activation checkpointing and model-parallel degrees. Read
//! by the memory rules of the second wave (MEM007-MEM011) through the training context.

use crate::config::{parse_number, Node, Value};
use crate::facts::{Checkpointing, Evidence, Mention, Offload, Offloaded, Sharding};
use std::ops::Range;

/// A strategy as FSDP (`FULL_SHARD`, `ShardingStrategy.SHARD_GRAD_OP`, accelerate's `1`..`5`) or
/// HF's `--fsdp "full_shard auto_wrap"` writes it.
pub fn fsdp_strategy(value: &str) -> Option<Sharding> {
    let v = value.to_ascii_lowercase();
    let v = v.rsplit('.').next().unwrap_or(&v).trim();
    if v.contains("hybrid") || v == "4" || v == "5" {
        Some(Sharding::Hybrid)
    } else if v.contains("full_shard") || v == "1" {
        Some(Sharding::Stage(3))
    } else if v.contains("shard_grad_op") || v == "2" {
        Some(Sharding::Stage(2))
    } else if v.contains("no_shard") || v == "3" {
        Some(Sharding::Stage(0))
    } else {
        None
    }
}

fn truthy(v: &str) -> bool {
    matches!(v, "" | "true" | "1" | "yes" | "on")
}

/// What a `key value` pair (a flag, a config key, a keyword argument) says about the regime.
/// `k` is lowercase with `_` for `-`; `v` lowercase without quotes.
pub fn flag(k: &str, v: &str, span: Range<usize>, ev: &mut Evidence) {
    let number = || parse_number(v);
    let mut shard = |s: Sharding| {
        ev.shards.push(Mention {
            value: s,
            span: span.clone(),
        })
    };
    match k {
        "zero_stage" | "zero" | "deepspeed_zero_stage" => {
            if let Some(n) = number().filter(|n| (0.0..=3.0).contains(n) && n.fract() == 0.0) {
                shard(Sharding::Stage(n as u8));
            }
        }
        "fsdp" | "fsdp_sharding_strategy" | "sharding_strategy" => {
            if let Some(s) = fsdp_strategy(v) {
                shard(s);
            }
        }
        "use_distributed_optimizer" if truthy(v) => shard(Sharding::DistributedOptimizer),
        "zero_hpz_partition_size" if number().is_some_and(|n| n > 1.0) => {
            shard(Sharding::Secondary)
        }
        "mics_shard_size" if number().is_some_and(|n| n > 0.0) => shard(Sharding::Secondary),
        "offload_optimizer_device"
        | "offload_param_device"
        | "offload_optimizer"
        | "offload_param"
            if matches!(v, "cpu" | "nvme" | "true") =>
        {
            ev.offload.push(Mention {
                value: Offload {
                    what: if k.starts_with("offload_param") {
                        Offloaded::Params
                    } else {
                        Offloaded::Optimizer
                    },
                    nvme: v == "nvme",
                },
                span,
            })
        }
        "gradient_checkpointing"
        | "use_gradient_checkpointing"
        | "enable_activation_checkpointing"
        | "activation_checkpointing"
        | "checkpoint_activations"
        | "fsdp_activation_checkpointing"
            if truthy(v) =>
        {
            ev.checkpointing.push(Mention {
                value: Checkpointing::On,
                span,
            })
        }
        "recompute_granularity" | "recompute_activations" if v != "none" && v != "false" => {
            ev.checkpointing.push(Mention {
                value: Checkpointing::On,
                span,
            })
        }
        "enable_activation_offloading" | "offload_activations" | "cpu_checkpointing"
            if truthy(v) =>
        {
            ev.checkpointing.push(Mention {
                value: Checkpointing::Offloaded,
                span,
            })
        }
        // `--tensor-model-parallel-size 4`, `TP=4`, `pp_degree: 2`: any model-parallel degree.
        _ if crate::expr::device_count(k) == Some(crate::expr::DeviceCount::ModelParallel)
            || k == "sequence_parallel_size" =>
        {
            if let Some(n) = number().filter(|n| *n > 1.0 && n.fract() == 0.0) {
                ev.model_parallel.push(Mention {
                    value: n as u32,
                    span,
                });
            }
        }
        _ => {}
    }
}

/// DeepSpeed's `zero_optimization` section: its stage, offload devices and secondary partitions.
pub fn zero_section(zero: &Node, ev: &mut Evidence) {
    if let Some(stage) = zero
        .get("stage")
        .and_then(Node::as_number)
        .filter(|n| (0.0..=3.0).contains(n) && n.fract() == 0.0)
    {
        ev.shards.push(Mention {
            value: Sharding::Stage(stage as u8),
            span: zero.span.clone(),
        });
    }
    for (key, what) in [
        ("offload_optimizer", Offloaded::Optimizer),
        ("offload_param", Offloaded::Params),
    ] {
        let Some(section) = zero.get(key) else {
            continue;
        };
        let device = match &section.value {
            Value::Map(_) => section
                .get("device")
                .and_then(Node::scalar_text)
                .map(|d| d.to_ascii_lowercase()),
            _ => None,
        };
        if let Some(d @ ("cpu" | "nvme")) = device.as_deref() {
            ev.offload.push(Mention {
                value: Offload {
                    what,
                    nvme: d == "nvme",
                },
                span: section.span.clone(),
            });
        }
    }
}
