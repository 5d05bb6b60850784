//! The one model of training memory per GPU that `memlint estimate` prints and MEM005 judges
//! with: model states by precision and optimizer (`states.rs`: fp32 master weights under mixed
//! precision, ZeRO stages and FSDP strategies over the data-parallel degree, offload, LoRA and
//! QLoRA), activations per layer after Korthikanti et al. 2022 and the logits (`activations.rs`),
//! and what the process holds beyond its tensors at three levels, allocated, reserved and
//! device (`peaks.rs`). Every number comes from `rules/knowledge/` or is cited where it is used;
//! every input not given is assumed, and the assumption is named in the result.

mod activations;
mod counts;
pub mod fit;
pub mod hub;
mod peaks;
pub mod shapes;
mod states;

pub use peaks::{Peak, Peaks};
pub use shapes::Shape;
pub use states::{model_states, Regime, States};

use crate::knowledge::{knowledge, OptimizerRow};

/// How weights, gradients and optimizer states are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    /// fp32 weights with 16-bit autocast (PyTorch AMP, Lightning `16-mixed`, HF `fp16=True`); under
    /// DeepSpeed, 16-bit weights with fp32 master weights.
    Fp16Mixed,
    Bf16Mixed,
    /// Weights cast to 16 bits (`model.to(torch.bfloat16)`): gradients and states follow.
    Bf16,
    Fp16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s.to_ascii_lowercase().as_str() {
            "fp32" | "32" | "32-true" | "float32" | "no" => Precision::Fp32,
            "fp16-mixed" | "16-mixed" | "fp16_mixed" | "amp" => Precision::Fp16Mixed,
            "bf16-mixed" | "bf16_mixed" => Precision::Bf16Mixed,
            "bf16" | "bf16-true" | "bfloat16" => Precision::Bf16,
            "fp16" | "16-true" | "float16" | "half" => Precision::Fp16,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16Mixed => "fp16-mixed",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    pub fn mixed(self) -> bool {
        matches!(self, Precision::Fp16Mixed | Precision::Bf16Mixed)
    }

    /// Bytes of one activation element: 16-bit unless everything is fp32.
    pub fn activation_bytes(self) -> f64 {
        if self == Precision::Fp32 {
            4.0
        } else {
            2.0
        }
    }
}

/// How model states are split over the data-parallel ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharding {
    None,
    /// DeepSpeed ZeRO stage 0-3.
    Zero(u8),
    /// FSDP `FULL_SHARD` (like ZeRO-3).
    FullShard,
    /// FSDP `SHARD_GRAD_OP` (like ZeRO-2).
    ShardGradOp,
    /// FSDP `HYBRID_SHARD`: `FULL_SHARD` within a node, replicated across nodes.
    HybridShard,
}

impl Sharding {
    /// The ZeRO stage the strategy matches (`docs/knowledge.md` §3.2).
    pub fn stage(self) -> u8 {
        match self {
            Sharding::None => 0,
            Sharding::Zero(s) => s.min(3),
            Sharding::ShardGradOp => 2,
            Sharding::FullShard | Sharding::HybridShard => 3,
        }
    }

    pub fn deepspeed(self) -> bool {
        matches!(self, Sharding::Zero(_))
    }

    pub fn describe(self) -> String {
        match self {
            Sharding::None => "none".into(),
            Sharding::Zero(s) => format!("ZeRO-{s}"),
            Sharding::FullShard => "FSDP full_shard".into(),
            Sharding::ShardGradOp => "FSDP shard_grad_op".into(),
            Sharding::HybridShard => "FSDP hybrid_shard".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    None,
    /// Attention recomputed (Korthikanti et al.'s selective recomputation).
    Selective,
    /// Every layer recomputed from its input.
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    Cpu,
    Nvme,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// The s x s scores materialised (and saved for the backward).
    Eager,
    Sdpa,
    Flash,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantize {
    /// 4-bit NormalFloat with an fp32 scale per block of 64 (4.5 bits per weight).
    Nf4,
    /// NF4 with the scales quantized again (QLoRA's double quantization, 4.127 bits).
    Nf4Dq,
    Int8,
}

/// One input and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Given<T> {
    pub value: T,
    /// "from ds_config.json:3", "--micro-batch".
    pub why: String,
}

impl<T> Given<T> {
    pub fn new(value: T, why: impl Into<String>) -> Self {
        Given {
            value,
            why: why.into(),
        }
    }
}

/// Everything the model reads; `None` is assumed (and the assumption named).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub shape: Option<Given<Shape>>,
    /// A parameter count without a shape (`--params`, a constant in a script).
    pub params: Option<Given<f64>>,
    pub seq_len: Option<Given<u64>>,
    pub micro_batch: Option<Given<u64>>,
    pub precision: Option<Given<Precision>>,
    pub optimizer: Option<Given<&'static OptimizerRow>>,
    /// The optimizer's name as written (`adamw_torch_fused`, `FusedAdam`): it tells apart
    /// implementations of one row whose steps hold different temporaries.
    pub optimizer_written: Option<String>,
    pub sharding: Option<Given<Sharding>>,
    pub dp: Option<Given<u64>>,
    pub tp: Option<Given<u64>>,
    pub pp: Option<Given<u64>>,
    pub gpus_per_node: Option<Given<u64>>,
    pub checkpointing: Option<Given<Checkpointing>>,
    pub offload_optimizer: Option<Given<Offload>>,
    pub offload_params: Option<Given<Offload>>,
    pub lora_rank: Option<Given<u64>>,
    pub lora_targets: Option<Given<Vec<String>>>,
    pub quantize: Option<Given<Quantize>>,
    /// PEFT's `prepare_model_for_kbit_training` prepares the quantized base (true), or nothing
    /// does (false: litgpt, torchtune); assumed from the sharding when not given.
    pub kbit_prep: Option<Given<bool>>,
    pub attention: Option<Given<Attention>>,
    pub gradient_accumulation: Option<Given<u64>>,
    /// GPU memory in bytes.
    pub gpu_memory: Option<Given<f64>>,
    /// The CUDA context's bytes, as measured on the stack that runs.
    pub cuda_context: Option<Given<f64>>,
    /// The peak `total_bytes` gives (the device's, what nvidia-smi shows, unless said).
    pub peak: Option<Given<Peak>>,
}

/// One part of the memory of a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Weights,
    Gradients,
    /// DeepSpeed's fp32 gradient partition, kept for the optimizer step under mixed precision.
    Fp32Gradients,
    MasterWeights,
    OptimizerStates,
    /// Parameters (and their gradients) gathered for the layer being computed under ZeRO-3/FSDP.
    GatheredParameters,
    Activations,
    Logits,
    /// The 16-bit copies of trained fp32 weights autocast keeps from the forward to the
    /// backward (AMP without DeepSpeed).
    AutocastCopies,
    /// What the optimizer step allocates beside the states (a multi-tensor AdamW's square
    /// roots of the second moments), when the step is the peak.
    StepTemporaries,
    /// Bytes PyTorch's caching allocator holds cached and unused at the peak.
    AllocatorCache,
    /// What lives outside PyTorch's allocator: the CUDA context, and NCCL's buffers when ranks
    /// communicate.
    Overhead,
}

impl Component {
    pub const ALL: [Component; 12] = [
        Component::Weights,
        Component::Gradients,
        Component::Fp32Gradients,
        Component::MasterWeights,
        Component::OptimizerStates,
        Component::GatheredParameters,
        Component::Activations,
        Component::Logits,
        Component::AutocastCopies,
        Component::StepTemporaries,
        Component::AllocatorCache,
        Component::Overhead,
    ];

    /// The key in JSON output.
    pub fn key(self) -> &'static str {
        match self {
            Component::Weights => "weights",
            Component::Gradients => "gradients",
            Component::Fp32Gradients => "fp32_gradients",
            Component::MasterWeights => "master_weights",
            Component::OptimizerStates => "optimizer_states",
            Component::GatheredParameters => "gathered_parameters",
            Component::Activations => "activations",
            Component::Logits => "logits",
            Component::AutocastCopies => "autocast_copies",
            Component::StepTemporaries => "step_temporaries",
            Component::AllocatorCache => "allocator_cache",
            Component::Overhead => "overhead",
        }
    }

    pub fn by_key(key: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.key() == key)
    }
}

/// The estimate for one GPU of a run.
#[derive(Clone, Debug)]
pub struct Estimate {
    /// Bytes per component, in [`Component::ALL`] order; zero parts are kept.
    pub breakdown: Vec<(Component, f64)>,
    /// The selected peak (`peak`): allocated, reserved or device.
    pub total_bytes: f64,
    /// The peak `total_bytes` is.
    pub peak: Peak,
    /// All three peaks, and the parts between them.
    pub peaks: Peaks,
    /// Host memory an offload needs, per node (DeepSpeed's estimator, with its 1.5 buffer factor).
    pub host_bytes: f64,
    pub gpu_memory: Option<f64>,
    pub fits: Option<bool>,
    /// Each input used: (name, value, where it came from).
    pub inputs: Vec<(String, String, String)>,
    pub assumptions: Vec<String>,
    pub params: f64,
    /// For a mixture of experts, the parameters one token uses.
    pub active_params: Option<f64>,
    pub trainable: f64,
    /// What makes the run as given doubtful (a sequence longer than the model's positions).
    pub warnings: Vec<String>,
}

impl Estimate {
    pub fn get(&self, c: Component) -> f64 {
        self.breakdown
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0.0, |(_, v)| *v)
    }
}

/// The estimate, or why none can be made (no model size at all).
pub fn estimate(inputs: &Inputs) -> Result<Estimate, String> {
    let mut noted = Noted::default();
    let params = match (&inputs.shape, &inputs.params) {
        (_, Some(p)) => {
            noted.input("parameters", crate::diagnostic::fmt_count(p.value), &p.why);
            p.value
        }
        (Some(s), None) => {
            noted.input(
                "parameters",
                crate::diagnostic::fmt_count(s.value.params),
                &format!("{} ({})", s.value.id, s.why),
            );
            if let Some(a) = s.value.active_params() {
                noted.input(
                    "active parameters",
                    crate::diagnostic::fmt_count(a),
                    &format!(
                        "{} of {} experts per token in {} MoE layers",
                        s.value.experts_per_token.unwrap_or(1),
                        s.value.experts(),
                        s.value.moe_layers()
                    ),
                );
            }
            s.value.params
        }
        (None, None) => {
            return Err(
                "no model size: give --model NAME, --model PATH/config.json or --params N".into(),
            )
        }
    };
    let shape = inputs.shape.as_ref().map(|s| &s.value);
    let (regime, detail) = states::regime(inputs, params, shape, &mut noted)?;
    let mut st = model_states(&regime);
    let fsdp = states::fsdp_buffers(&regime, &detail);
    if let Some(b) = fsdp {
        st.gathered = b;
    }
    let acts = activations::activations(inputs, &regime, &detail, shape, &mut noted);
    let accumulating = match &inputs.gradient_accumulation {
        Some(g) => {
            noted.input("gradient accumulation", g.value.to_string(), &g.why);
            g.value > 1
        }
        None => false,
    };
    // Autocast casts each trained fp32 weight to 16 bits once per forward and keeps the copy
    // for the backward (`runtime.toml`, [autocast]); DeepSpeed's mixed precision and 16-bit
    // weights have none.
    let mixed = inputs
        .precision
        .as_ref()
        .map_or(Precision::Bf16Mixed, |p| p.value)
        .mixed();
    let copies = if mixed && regime.weight_bytes == 4.0 && !regime.sharding.deepspeed() {
        let per_gpu = regime.trainable / regime.model_parallel.max(1.0);
        let sharded = if regime.sharding.stage() == 3 {
            per_gpu / regime.shards.max(1.0)
        } else {
            per_gpu
        };
        knowledge().runtime.autocast.copy_bytes * sharded
    } else {
        0.0
    };
    let parts = peaks::Parts {
        persistent: st.weights + st.master + st.states,
        gathered: st.gathered + copies,
        own_streams: fsdp.is_some(),
        gradients: st.grads + st.fp32_grads,
        working: acts.activations + acts.logits,
        accumulating,
    };
    let (temporaries, step) = peaks::step_temporaries(&regime, inputs.optimizer_written.as_deref());
    match step {
        peaks::Step::MultiTensor => noted.assume(&format!(
            "{}'s step: torch's multi-tensor (foreach) implementation, one temporary of a moment's size (a fused step, --optimizer adamw_torch_fused, has none)",
            regime.optimizer_display
        )),
        peaks::Step::InPlace(name) => noted.input(
            "optimizer step",
            "in place, no temporary".into(),
            &format!("`{name}` updates every tensor in place"),
        ),
        peaks::Step::None => {}
    }
    let communicating = regime.shards * regime.model_parallel > 1.0;
    let context = match &inputs.cuda_context {
        Some(c) => {
            noted.input(
                "CUDA context",
                format!("{:.0} MiB", c.value / 1_048_576.0),
                &c.why,
            );
            c.value
        }
        None => knowledge().runtime.context.bytes,
    };
    let levels = peaks::peaks(
        &parts,
        temporaries,
        communicating,
        context,
        inputs.gpu_memory.as_ref().map(|g| g.value),
    );
    if parts.own_streams {
        let fsdp = &knowledge().runtime.fsdp;
        noted.assume(&format!(
            "FSDP wraps each transformer block (its transformer auto-wrap policy) and limits all-gathers: {} units gathered at once, {} reduce-scatter buffers of a unit's gradients",
            fsdp.all_gathers, fsdp.reduce_scatter_buffers
        ));
    }
    if levels.trimmed {
        noted.assume("the allocator's cache stops at the GPU's memory: it frees cached blocks and retries before it runs out");
    }
    noted.assume(&format!(
        "outside PyTorch's allocator: {:.0} MiB of CUDA context{}",
        context / 1_048_576.0,
        if communicating {
            format!(
                " and {:.0} MiB of NCCL buffers",
                knowledge().runtime.nccl.bytes / 1_048_576.0
            )
        } else {
            String::new()
        }
    ));
    // Which peak to give is a choice of output, not an input of the model: named only when made.
    let peak = inputs.peak.as_ref().map_or(Peak::Device, |p| {
        noted.input("peak", p.value.name().to_string(), &p.why);
        p.value
    });
    let total = levels.get(peak);
    let device = levels.device;
    let breakdown = vec![
        (Component::Weights, st.weights),
        (Component::Gradients, st.grads),
        (Component::Fp32Gradients, st.fp32_grads),
        (Component::MasterWeights, st.master),
        (Component::OptimizerStates, st.states),
        (Component::GatheredParameters, st.gathered),
        (Component::Activations, acts.activations),
        (Component::Logits, acts.logits),
        (Component::AutocastCopies, copies),
        (Component::StepTemporaries, levels.step_temporaries),
        (Component::AllocatorCache, levels.allocator_cache),
        (Component::Overhead, levels.outside_allocator),
    ];
    let gpu_memory = inputs.gpu_memory.as_ref().map(|g| {
        noted.input(
            "GPU memory",
            crate::diagnostic::fmt_num(g.value / 1e9) + " GB",
            &g.why,
        );
        g.value
    });
    Ok(Estimate {
        breakdown,
        total_bytes: total,
        peak,
        peaks: levels,
        host_bytes: st.host,
        gpu_memory,
        // Whatever peak is printed, the device's is what must fit the GPU's memory.
        fits: gpu_memory.map(|g| device <= g),
        inputs: noted.inputs,
        assumptions: noted.assumptions,
        params,
        active_params: match (&inputs.shape, &inputs.params) {
            (Some(s), None) => s.value.active_params(),
            _ => None,
        },
        trainable: regime.trainable,
        warnings: shapes::longer_than_the_model(inputs).into_iter().collect(),
    })
}

/// What the estimate read and what it assumed, in the order met.
#[derive(Default)]
pub(crate) struct Noted {
    inputs: Vec<(String, String, String)>,
    assumptions: Vec<String>,
}

impl Noted {
    pub(crate) fn input(&mut self, name: &str, value: String, why: &str) {
        self.inputs.push((name.into(), value, why.into()));
    }

    pub(crate) fn assume(&mut self, what: &str) {
        self.assumptions.push(what.into());
    }

    /// An input given, or its default assumed and named.
    pub(crate) fn take<T: Clone + std::fmt::Debug>(
        &mut self,
        given: &Option<Given<T>>,
        name: &str,
        default: T,
        show: impl Fn(&T) -> String,
    ) -> T {
        match given {
            Some(g) => {
                self.input(name, show(&g.value), &g.why);
                g.value.clone()
            }
            None => {
                self.assume(&format!("{name}: {}", show(&default)));
                default
            }
        }
    }
}
