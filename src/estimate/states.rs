//! Model states per GPU: weights, gradients, master weights and optimizer states, by precision
//! and optimizer (`docs/knowledge.md` §3.1), divided over the data-parallel ranks by the ZeRO stage or
//! FSDP strategy (`rules/knowledge/sharding.toml`, §3.2), moved to the host by an offload (§4.2),
//! and for LoRA and QLoRA only the adapters trained (§3.3).

use super::{Inputs, Noted, Offload, Precision, Quantize, Shape, Sharding};
use crate::knowledge::{knowledge, OptimizerRow};

/// Bytes per parameter of each state, and how many parameters each covers: what the regime of
/// a run is, before it is divided over GPUs.
#[derive(Clone, Debug)]
pub struct Regime {
    pub params: f64,
    /// Parameters with gradients and optimizer states (all, or the adapters).
    pub trainable: f64,
    /// Bytes per parameter of the frozen part of the weights (LoRA's base), when there is one.
    pub frozen_bytes: f64,
    pub weight_bytes: f64,
    pub grad_bytes: f64,
    /// DeepSpeed's fp32 gradient partition (mixed precision only).
    pub fp32_grad_bytes: f64,
    pub master_bytes: f64,
    pub state_bytes: f64,
    pub sharding: Sharding,
    /// The degree states are divided by (the data-parallel degree; GPUs of a node under
    /// `HYBRID_SHARD`).
    pub shards: f64,
    /// Model-parallel degree (tensor x pipeline): each GPU holds this share of the model first.
    pub model_parallel: f64,
    pub offload_optimizer: Option<Offload>,
    pub offload_params: Option<Offload>,
    /// Parameters gathered at once under ZeRO-3 and FSDP (the largest module).
    pub largest_module: f64,
    pub gpus_per_node: f64,
    /// The optimizer's id in `rules/knowledge/optimizers.toml`, and its full-size states per
    /// parameter (the step's temporaries are counted in these).
    pub optimizer: String,
    pub optimizer_display: String,
    pub optimizer_states: f64,
}

/// What the estimate reads of a regime beyond the model states MEM005 shares.
#[derive(Clone, Debug, Default)]
pub(super) struct Detail {
    /// FSDP's units when it wraps each transformer block: the largest block's parameters and
    /// those outside the blocks (the root unit).
    pub fsdp_units: (f64, f64),
    /// Bytes per parameter of the frozen base's linear layers (quantized under QLoRA) and of
    /// its other weights (embeddings, head, norms).
    pub frozen_linear_bytes: f64,
    pub frozen_other_bytes: f64,
    /// PEFT's `prepare_model_for_kbit_training` ran: the weights it does not quantize are
    /// fp32, and so is the residual stream.
    pub kbit_upcast: bool,
}

/// Model-state bytes on one GPU, and on the host of one node.
#[derive(Clone, Copy, Debug, Default)]
pub struct States {
    pub weights: f64,
    pub grads: f64,
    pub fp32_grads: f64,
    pub master: f64,
    pub states: f64,
    pub gathered: f64,
    pub host: f64,
}

/// GPUs per node when nothing says (HYBRID_SHARD's shard group, DeepSpeed's host estimate).
const DEFAULT_GPUS_PER_NODE: u64 = 8;
/// DeepSpeed's estimator multiplies host memory by this safety factor (`stage_1_and_2.py`,
/// `additional_buffer_factor=1.5`; `docs/knowledge.md` §4.2).
const HOST_BUFFER_FACTOR: f64 = 1.5;
/// 4-bit NF4: 4 bits and an fp32 scale per block of 64 weights (4.5 bits); with double
/// quantization 4.127 bits (QLoRA, arXiv:2305.14314 §2, reproduced in `docs/knowledge.md` §3.3 [M3]).
const NF4_BYTES: f64 = 4.5 / 8.0;
const NF4_DQ_BYTES: f64 = 4.127 / 8.0;
/// LLM.int8(): one byte per weight (bitsandbytes `Int8Params`; `docs/knowledge.md` §1).
const INT8_BYTES: f64 = 1.0;
/// LoRA's rank and targets when only LoRA is said: PEFT's default targets for Llama-style
/// models are `q_proj` and `v_proj`.
const DEFAULT_LORA_RANK: u64 = 8;

pub(super) fn regime(
    inputs: &Inputs,
    params: f64,
    shape: Option<&Shape>,
    noted: &mut Noted,
) -> Result<(Regime, Detail), String> {
    let mut precision = noted.take(&inputs.precision, "precision", Precision::Bf16Mixed, |p| {
        p.name().to_string()
    });
    let adamw = knowledge()
        .optimizer_by_id("adamw")
        .ok_or("the optimizer table has no AdamW row")?;
    let optimizer: &OptimizerRow =
        noted.take(&inputs.optimizer, "optimizer", adamw, |o| o.display.clone());
    if !optimizer.known {
        return Err(format!(
            "{}'s state size depends on the tensors' shapes; no constant per parameter is known",
            optimizer.display
        ));
    }
    let sharding = noted.take(&inputs.sharding, "sharding", Sharding::None, |s| {
        s.describe()
    });
    let count = |v: &u64| v.to_string();
    let dp = noted
        .take(&inputs.dp, "data-parallel degree", 1, count)
        .max(1);
    let tp = inputs.tp.as_ref().map_or(1, |g| {
        noted.input("tensor-parallel degree", g.value.to_string(), &g.why);
        g.value.max(1)
    });
    let pp = inputs.pp.as_ref().map_or(1, |g| {
        noted.input("pipeline-parallel degree", g.value.to_string(), &g.why);
        g.value.max(1)
    });
    let gpus_per_node = match &inputs.gpus_per_node {
        Some(g) => {
            noted.input("GPUs per node", g.value.to_string(), &g.why);
            g.value.max(1)
        }
        None => DEFAULT_GPUS_PER_NODE.min(dp * tp * pp),
    };
    if sharding.deepspeed() && !precision.mixed() && precision != Precision::Fp32 {
        // DeepSpeed's bf16/fp16 modes keep fp32 master weights: they are mixed precision.
        noted.assume(&format!(
            "DeepSpeed's {} keeps fp32 master weights: read as {}-mixed",
            precision.name(),
            precision.name()
        ));
        precision = if precision == Precision::Bf16 {
            Precision::Bf16Mixed
        } else {
            Precision::Fp16Mixed
        };
    }
    // Bytes per trained parameter (docs/knowledge.md §3.1): under DeepSpeed (and Megatron) mixed
    // precision the weights and gradients are 16-bit and fp32 masters sit beside the states;
    // under AMP and FSDP's mixed precision the weights stay fp32.
    let (weight, grad, fp32_grad, master, state) = match precision {
        Precision::Fp32 => (4.0, 4.0, 0.0, 0.0, optimizer.bytes_per_param_fp32),
        p if p.mixed() && sharding.deepspeed() => {
            (2.0, 2.0, 4.0, 4.0, optimizer.bytes_per_param_fp32)
        }
        p if p.mixed() => (4.0, 4.0, 0.0, 0.0, optimizer.bytes_per_param_fp32),
        _ => (2.0, 2.0, 0.0, 0.0, optimizer.bytes_per_param_bf16),
    };
    // LoRA / QLoRA: a frozen base, adapters trained.
    let quantize = inputs.quantize.as_ref().map(|q| {
        noted.input(
            "quantization",
            match q.value {
                Quantize::Nf4 => "nf4".into(),
                Quantize::Nf4Dq => "nf4-dq".into(),
                Quantize::Int8 => "int8".into(),
            },
            &q.why,
        );
        q.value
    });
    let lora = inputs.lora_rank.is_some() || inputs.lora_targets.is_some() || quantize.is_some();
    // A quantized base prepared by PEFT's `prepare_model_for_kbit_training` (what TRL's
    // SFTTrainer and the QLoRA recipes run, except for a base sharded by FSDP or ZeRO-3, which
    // TRL leaves alone): every weight not quantized is cast to fp32 (`runtime.toml`, [kbit]).
    let kbit_upcast = match (quantize, &inputs.kbit_prep) {
        (None, _) => false,
        (Some(_), Some(g)) => {
            noted.input(
                "k-bit preparation",
                if g.value { "peft" } else { "none" }.into(),
                &g.why,
            );
            g.value
        }
        (Some(_), None) => {
            let sharded = sharding.stage() == 3 && dp > 1;
            noted.assume(if sharded {
                "k-bit preparation: none (TRL skips PEFT's prepare_model_for_kbit_training for a sharded base)"
            } else {
                "k-bit preparation: PEFT's prepare_model_for_kbit_training, the weights it does not quantize and the residual stream in fp32 (--kbit-prep none for litgpt or torchtune)"
            });
            !sharded
        }
    };
    let mut frozen_linear_bytes = 0.0;
    let mut frozen_other_bytes = 0.0;
    let (trainable, frozen_bytes) = if lora {
        let rank = noted.take(&inputs.lora_rank, "LoRA rank", DEFAULT_LORA_RANK, count);
        let targets = noted.take(
            &inputs.lora_targets,
            "LoRA targets",
            vec!["q".to_string(), "v".to_string()],
            |t| t.join(","),
        );
        let Some(shape) = shape else {
            return Err(
                "LoRA's adapter size needs the model's shape: give --model NAME or PATH/config.json"
                    .into(),
            );
        };
        let adapters = shape.lora_params(rank, &targets);
        // The frozen base: 16-bit (or fp32) weights, or quantized linear layers beside 16-bit
        // embeddings, head and norms.
        let base = match precision {
            Precision::Fp32 => 4.0,
            _ => 2.0,
        };
        let frozen = match quantize {
            Some(q) => {
                let linear = shape.linear_params().min(params);
                let per = match q {
                    Quantize::Nf4 => NF4_BYTES,
                    Quantize::Nf4Dq => NF4_DQ_BYTES,
                    Quantize::Int8 => INT8_BYTES,
                };
                let other = if kbit_upcast { 4.0 } else { base };
                frozen_linear_bytes = per;
                frozen_other_bytes = other;
                (linear * per + (params - linear) * other) / params
            }
            None => {
                frozen_linear_bytes = base;
                frozen_other_bytes = base;
                base
            }
        };
        (adapters, frozen)
    } else {
        (params, weight)
    };
    let offload_optimizer = take_offload(&inputs.offload_optimizer, "optimizer offload", noted);
    let offload_params = take_offload(&inputs.offload_params, "parameter offload", noted);
    let shards = match sharding {
        Sharding::HybridShard => gpus_per_node.min(dp),
        _ => dp,
    } as f64;
    let largest_module = shape.map_or(0.0, Shape::largest_module);
    if sharding.stage() == 3 && shape.is_none() {
        noted.assume("gathered parameters not counted: the largest layer needs the model's shape");
    }
    let detail = Detail {
        fsdp_units: shape.map_or((0.0, 0.0), Shape::blocks_and_rest),
        frozen_linear_bytes,
        frozen_other_bytes,
        kbit_upcast,
    };
    Ok((
        Regime {
            params,
            trainable,
            frozen_bytes,
            weight_bytes: weight,
            grad_bytes: grad,
            fp32_grad_bytes: fp32_grad,
            master_bytes: master,
            state_bytes: state,
            sharding,
            shards,
            model_parallel: (tp * pp) as f64,
            offload_optimizer,
            offload_params,
            largest_module,
            gpus_per_node: gpus_per_node as f64,
            optimizer: optimizer.id.clone(),
            optimizer_display: optimizer.display.clone(),
            optimizer_states: optimizer.states,
        },
        detail,
    ))
}

fn take_offload(
    given: &Option<super::Given<Offload>>,
    name: &str,
    noted: &mut Noted,
) -> Option<Offload> {
    given.as_ref().map(|g| {
        let device = match g.value {
            Offload::Cpu => "cpu",
            Offload::Nvme => "nvme",
        };
        noted.input(name, device.into(), &g.why);
        g.value
    })
}

/// What FSDP holds unsharded for the units in flight (`runtime.toml`, [fsdp]): the all-gathered
/// parameters of `all_gathers` units (FULL_SHARD and HYBRID_SHARD reshard after each unit;
/// SHARD_GRAD_OP keeps them whole, counted with the weights) and the reduce-scatter buffers of
/// a unit's gradients, the largest unit each: a transformer block, or the root with the
/// embeddings and the head.
/// `None` when the run is not FSDP's over several ranks, or the units are not known.
pub(super) fn fsdp_buffers(r: &Regime, d: &Detail) -> Option<f64> {
    let stage = r.sharding.stage();
    if r.sharding.deepspeed() || stage < 2 || r.shards <= 1.0 || d.fsdp_units.0 <= 0.0 {
        return None;
    }
    let fsdp = &knowledge().runtime.fsdp;
    let (block, rest) = d.fsdp_units;
    let lora = r.trainable < r.params;
    let (block_bytes, rest_bytes) = if lora {
        (d.frozen_linear_bytes, d.frozen_other_bytes)
    } else {
        (r.weight_bytes, r.weight_bytes)
    };
    let gathered = if stage == 3 {
        fsdp.all_gathers * (block * block_bytes).max(rest * rest_bytes)
    } else {
        0.0
    };
    // Gradients of a unit: all of it in full training, its adapters under LoRA.
    let trained = if lora { r.trainable / r.params } else { 1.0 };
    let reduce = fsdp.reduce_scatter_buffers * block.max(rest) * trained * r.grad_bytes;
    Some((gathered + reduce) / r.model_parallel.max(1.0))
}

/// Model-state bytes on one GPU (and the host of one node) for a regime.
pub fn model_states(r: &Regime) -> States {
    let stage = r.sharding.stage();
    let n = r.shards.max(1.0);
    let mp = r.model_parallel.max(1.0);
    let lora = r.trainable < r.params;
    // What each GPU holds before data-parallel sharding: its model-parallel share.
    let p = r.params / mp;
    let t = r.trainable / mp;
    let divide = |bytes: f64, from_stage: u8| {
        if stage >= from_stage {
            bytes / n
        } else {
            bytes
        }
    };
    let frozen = if lora { (p - t) * r.frozen_bytes } else { 0.0 };
    let mut s = States {
        weights: divide(t * r.weight_bytes + frozen, 3),
        grads: divide(t * r.grad_bytes, 2),
        fp32_grads: divide(t * r.fp32_grad_bytes, 1),
        master: divide(t * r.master_bytes, 1),
        states: divide(t * r.state_bytes, 1),
        gathered: 0.0,
        host: 0.0,
    };
    if stage == 3 {
        // The layer being computed is gathered whole, with its 16-bit gradients: 4 bytes per
        // parameter of the largest layer (DeepSpeed's `largest_layer_memory`, docs/knowledge.md
        // §4.2). The gradient shards stay (DeepSpeed's flat partition buffer). FSDP's own
        // buffers replace this where the units are known ([`fsdp_buffers`]).
        s.gathered = 4.0 * r.largest_module / mp;
    }
    if r.offload_optimizer.is_some() {
        // DeepSpeed's CPU (or NVMe) offload moves master weights, states and gradients off the
        // GPU; the host of each node holds the fp32 copies. Host bytes per parameter as
        // DeepSpeed's estimators give them (docs/knowledge.md §4.2): at ZeRO-2, max(4 x GPUs, 16);
        // at ZeRO-3 (zero_init), 16, or 18 with the parameters offloaded too, over the nodes.
        let total_gpus = n * mp;
        let nodes = (total_gpus / r.gpus_per_node.max(1.0)).max(1.0);
        let per_param = match stage {
            3 if r.offload_params.is_some() => 18.0 / nodes,
            3 => 16.0 / nodes,
            _ => (4.0 * total_gpus).max(16.0),
        };
        s.host = r.trainable * per_param * HOST_BUFFER_FACTOR;
        s.grads = 0.0;
        s.fp32_grads = 0.0;
        s.master = 0.0;
        s.states = 0.0;
    }
    if r.offload_params.is_some() && stage == 3 {
        s.weights = 0.0;
    }
    s
}
