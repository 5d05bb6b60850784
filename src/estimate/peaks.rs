//! The three peaks a user compares an estimate with (`rules/knowledge/runtime.toml`, cited in
//! `docs/knowledge.md` §3.5):
//!
//! - **allocated**: the tensors alive at the peak, what `torch.cuda.max_memory_allocated()`
//!   reports: the larger of the forward/backward peak and the optimizer step's, which holds the
//!   gradients and the step's own temporaries beside the states;
//! - **reserved**: allocated plus what the caching allocator keeps cached and unused at that
//!   moment, a share of the working set allocated and freed every step (activations and
//!   logits), what `torch.cuda.max_memory_reserved()` reports. At an optimizer step that
//!   allocates temporaries, the blocks the forward and backward freed are still held (the
//!   allocator returns memory only when an allocation fails), and so are the blocks of FSDP's
//!   own streams, whose pools the step cannot draw on; on a GPU of known memory the cache
//!   stops at it, since the allocator frees cached blocks and retries before it fails;
//! - **device**: reserved plus what lives outside the allocator, the CUDA context and, when
//!   ranks communicate, NCCL's buffers: what nvidia-smi shows as used.

use super::Regime;
use crate::knowledge::knowledge;

/// Which of the three peaks `total_bytes` gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Peak {
    Allocated,
    Reserved,
    #[default]
    Device,
}

impl Peak {
    pub fn name(self) -> &'static str {
        match self {
            Peak::Allocated => "allocated",
            Peak::Reserved => "reserved",
            Peak::Device => "device",
        }
    }

    /// What the peak is, in the words a user checks it with.
    pub fn meaning(self) -> &'static str {
        match self {
            Peak::Allocated => "tensors alive, as torch.cuda.max_memory_allocated reports",
            Peak::Reserved => {
                "tensors and the allocator's cache, as torch.cuda.max_memory_reserved reports"
            }
            Peak::Device => "all the process uses on the GPU, as nvidia-smi shows",
        }
    }

    pub fn parse(s: &str) -> Option<Peak> {
        match s.to_ascii_lowercase().as_str() {
            "allocated" => Some(Peak::Allocated),
            "reserved" => Some(Peak::Reserved),
            "device" | "nvidia-smi" => Some(Peak::Device),
            _ => None,
        }
    }
}

/// The three peaks, and the parts between them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Peaks {
    pub allocated: f64,
    pub reserved: f64,
    pub device: f64,
    /// The optimizer step's temporaries (part of `allocated` when the step is the peak).
    pub step_temporaries: f64,
    /// Cached and unused at the peak: `reserved - allocated`.
    pub allocator_cache: f64,
    /// The CUDA context and NCCL's buffers: `device - reserved`.
    pub outside_allocator: f64,
    /// The cache was cut to the GPU's memory: the allocator frees cached blocks rather than
    /// fail while the tensors alive still fit.
    pub trimmed: bool,
}

impl Peaks {
    pub fn get(&self, p: Peak) -> f64 {
        match p {
            Peak::Allocated => self.allocated,
            Peak::Reserved => self.reserved,
            Peak::Device => self.device,
        }
    }
}

/// What the peaks are made of: model states that persist, parameters gathered while a layer
/// computes, the gradients (transient unless they accumulate), and the working set of a
/// micro-batch.
pub(super) struct Parts {
    pub persistent: f64,
    pub gathered: f64,
    /// The gathered parameters live in pools of FSDP's own streams, which the compute stream's
    /// allocations cannot reuse.
    pub own_streams: bool,
    pub gradients: f64,
    pub working: f64,
    pub accumulating: bool,
}

/// How the optimizer's step was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A multi-tensor step with a temporary (`runtime.toml`).
    MultiTensor,
    /// Written as an implementation that updates in place (`adamw_torch_fused`): no temporary.
    InPlace(String),
    /// No temporary known, or the step is not on this GPU.
    None,
}

/// The temporaries of one optimizer step on one GPU: a moment's size per trained parameter
/// for a multi-tensor step (`runtime.toml`); none where the optimizer is written as a fused
/// implementation (`written`, the name as the run or the flag spells it), where DeepSpeed's
/// fused optimizer runs the step, or where the step runs on the host.
pub(super) fn step_temporaries(regime: &Regime, written: Option<&str>) -> (f64, Step) {
    let states = regime.optimizer_states;
    if regime.sharding.deepspeed() || regime.offload_optimizer.is_some() || states < 1.0 {
        return (0.0, Step::None);
    }
    let Some(t) = knowledge()
        .runtime
        .step_temporary
        .iter()
        .find(|t| t.optimizer == regime.optimizer)
    else {
        return (0.0, Step::None);
    };
    if let Some(name) = written {
        let n = crate::knowledge::normalize(name);
        if t.in_place
            .iter()
            .any(|p| crate::knowledge::normalize(p) == n)
        {
            return (0.0, Step::InPlace(name.to_string()));
        }
    }
    let moment = regime.state_bytes / states;
    let trained = regime.trainable / regime.model_parallel.max(1.0);
    let sharded = if regime.sharding.stage() >= 1 {
        trained / regime.shards.max(1.0)
    } else {
        trained
    };
    (t.moments * moment * sharded, Step::MultiTensor)
}

/// The three peaks of a step. `communicating`: ranks exchange tensors (data, tensor or
/// pipeline parallelism), so NCCL's buffers are on the device. `context`: the CUDA context's
/// bytes. `gpu_memory`: the device's
/// memory, when known, which the allocator's cache does not grow past.
pub(super) fn peaks(
    parts: &Parts,
    temporaries: f64,
    communicating: bool,
    context: f64,
    gpu_memory: Option<f64>,
) -> Peaks {
    let runtime = &knowledge().runtime;
    let fragmentation = runtime.allocator.fragmentation;
    let forward_backward = parts.persistent
        + parts.gathered
        + if parts.accumulating {
            parts.working + parts.gradients
        } else {
            parts.working.max(parts.gradients)
        };
    let step = parts.persistent + parts.gradients + temporaries;
    let allocated = forward_backward.max(step);
    let reserved_forward_backward = forward_backward + fragmentation * parts.working;
    // The step's temporaries come after the backward freed the working set: its blocks, and
    // those of FSDP's streams, are still held when they are allocated.
    let reserved_step = if temporaries > 0.0 {
        step + (1.0 + fragmentation) * parts.working
            + if parts.own_streams {
                parts.gathered
            } else {
                0.0
            }
    } else {
        0.0
    };
    let mut reserved = reserved_forward_backward.max(reserved_step);
    let outside = context
        + if communicating {
            runtime.nccl.bytes
        } else {
            0.0
        };
    let mut trimmed = false;
    if let Some(g) = gpu_memory {
        if reserved + outside > g && allocated + outside <= g {
            reserved = g - outside;
            trimmed = true;
        }
    }
    Peaks {
        allocated,
        reserved,
        device: reserved + outside,
        step_temporaries: if step >= forward_backward {
            temporaries
        } else {
            0.0
        },
        allocator_cache: reserved - allocated,
        outside_allocator: outside,
        trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_holds_the_one_below() {
        let parts = Parts {
            persistent: 40e9,
            gathered: 0.0,
            own_streams: false,
            gradients: 10e9,
            working: 20e9,
            accumulating: false,
        };
        let p = peaks(&parts, 5e9, false, 5e8, None);
        // The forward/backward (40 + 20) is above the step (40 + 10 + 5).
        assert_eq!(p.allocated, 60e9);
        assert_eq!(p.step_temporaries, 0.0);
        assert!(p.reserved > p.allocated && p.device > p.reserved);
        let step = peaks(&parts, 15e9, true, 5e8, None);
        assert_eq!(step.allocated, 65e9);
        assert_eq!(step.step_temporaries, 15e9);
        assert!(
            step.outside_allocator > p.outside_allocator,
            "NCCL's buffers"
        );
        // At the step, the working set's blocks are still cached beside the temporaries.
        assert!(step.reserved >= step.allocated + parts.working);
        // A GPU that holds the tensors but not the cache: the cache stops at its memory.
        let g = step.allocated + step.outside_allocator + 1e9;
        let cut = peaks(&parts, 15e9, true, 5e8, Some(g));
        assert!(cut.trimmed && cut.device == g && cut.allocated == step.allocated);
        // One that cannot hold the tensors: nothing is cut, the run does not fit.
        let small = peaks(&parts, 15e9, true, 5e8, Some(step.allocated));
        assert!(!small.trimmed && small.device > step.allocated);
        assert_eq!(Peak::parse("nvidia-smi"), Some(Peak::Device));
        assert_eq!(Peak::default(), Peak::Device);
    }
}
