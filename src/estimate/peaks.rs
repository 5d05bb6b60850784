//! The three peaks a user compares an estimate with (`rules/knowledge/runtime.toml`, cited in
//! `docs/knowledge.md` §3.5):
//!
//! - **allocated**: the tensors alive at the peak, what `torch.cuda.max_memory_allocated()`
//!   reports: the larger of the forward/backward peak and the optimizer step's, which holds the
//!   gradients and the step's own temporaries beside the states;
//! - **reserved**: allocated plus what the caching allocator keeps cached and unused at that
//!   moment, a share of the working set allocated and freed every step (activations and
//!   logits), what `torch.cuda.max_memory_reserved()` reports;
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

/// What the peaks are made of: model states that persist, the gradients (transient unless they
/// accumulate), and the working set of a micro-batch.
pub(super) struct Parts {
    pub persistent: f64,
    pub gradients: f64,
    pub working: f64,
    pub accumulating: bool,
}

/// The temporaries of one optimizer step on one GPU: a moment's size per trained parameter
/// for a multi-tensor step (`runtime.toml`); none where DeepSpeed's fused optimizer runs the
/// step, or where the step runs on the host.
pub(super) fn step_temporaries(regime: &Regime) -> f64 {
    let states = regime.optimizer_states;
    if regime.sharding.deepspeed() || regime.offload_optimizer.is_some() || states < 1.0 {
        return 0.0;
    }
    let Some(t) = knowledge()
        .runtime
        .step_temporary
        .iter()
        .find(|t| t.optimizer == regime.optimizer)
    else {
        return 0.0;
    };
    let moment = regime.state_bytes / states;
    let trained = regime.trainable / regime.model_parallel.max(1.0);
    let sharded = if regime.sharding.stage() >= 1 {
        trained / regime.shards.max(1.0)
    } else {
        trained
    };
    t.moments * moment * sharded
}

/// The three peaks of a step. `communicating`: ranks exchange tensors (data, tensor or
/// pipeline parallelism), so NCCL's buffers are on the device.
pub(super) fn peaks(parts: &Parts, temporaries: f64, communicating: bool) -> Peaks {
    let runtime = &knowledge().runtime;
    let forward_backward = parts.persistent
        + if parts.accumulating {
            parts.working + parts.gradients
        } else {
            parts.working.max(parts.gradients)
        };
    let step = parts.persistent + parts.gradients + temporaries;
    let allocated = forward_backward.max(step);
    let cache = runtime.allocator.fragmentation * parts.working;
    let reserved = allocated + cache;
    let outside = runtime.context.bytes
        + if communicating {
            runtime.nccl.bytes
        } else {
            0.0
        };
    Peaks {
        allocated,
        reserved,
        device: reserved + outside,
        step_temporaries: if step >= forward_backward {
            temporaries
        } else {
            0.0
        },
        allocator_cache: cache,
        outside_allocator: outside,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_holds_the_one_below() {
        let parts = Parts {
            persistent: 40e9,
            gradients: 10e9,
            working: 20e9,
            accumulating: false,
        };
        let p = peaks(&parts, 5e9, false);
        // The forward/backward (40 + 20) is above the step (40 + 10 + 5).
        assert_eq!(p.allocated, 60e9);
        assert_eq!(p.step_temporaries, 0.0);
        assert!(p.reserved > p.allocated && p.device > p.reserved);
        let step = peaks(&parts, 15e9, true);
        assert_eq!(step.allocated, 65e9);
        assert_eq!(step.step_temporaries, 15e9);
        assert!(
            step.outside_allocator > p.outside_allocator,
            "NCCL's buffers"
        );
        assert_eq!(Peak::parse("nvidia-smi"), Some(Peak::Device));
        assert_eq!(Peak::default(), Peak::Device);
    }
}
