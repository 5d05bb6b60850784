//! MEM005 training-does-not-fit: the parameter count, the GPU memory and the optimizer are all
//! literal somewhere in the project, and weights + gradients + optimizer states alone exceed the
//! GPU. Computed from the joined run (launcher, script, configs); silent under LoRA, frozen
//! weights, FSDP, offload, inference, or an optimizer whose state size is not a constant.
//! Documentation: `rules/MEM005.toml`.

use super::{fmt_num, Checker, Rule};
use crate::context::MemoryCase;
use crate::context::{OptimizerChoice, Origin};
use crate::diagnostic::{fmt_count, Diagnostic};
use crate::estimate::{model_states, Regime, Sharding};
use crate::facts::{Framework, Precision};
use crate::knowledge::{knowledge, OptimizerRow};

pub struct TrainingDoesNotFit;

/// GPU sizes are read as GiB, the larger reading of "GB": the rule errs towards fitting.
const GIB: f64 = 1_073_741_824.0;
/// A size read from a model name is nominal (`7b` is 6.7 B for Llama 2): it must miss by more.
const NOMINAL_MARGIN: f64 = 1.05;

impl Rule for TrainingDoesNotFit {
    fn code(&self) -> &'static str {
        "MEM005"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for case in &cx.training.project.memory {
            if let Some(d) = judge(case) {
                out.push(d);
            }
        }
    }
}

/// Bytes per parameter of each part, and how the regime was decided.
struct Priced {
    weights: f64,
    grads: f64,
    states: f64,
    label: String,
    /// Nothing fixed the precision: the cheapest regime was used.
    at_least: bool,
}

fn judge(case: &MemoryCase) -> Option<Diagnostic> {
    let t = &case.training;
    if t.lora
        || t.frozen
        || t.inference
        || t.unknown_optimizer
        || case.fsdp
        || case.off_gpu.is_some()
    {
        return None;
    }
    let (row, optimizer_why) = optimizer(case)?;
    let precision = |p: Precision| t.precision.iter().position(|x| *x == p);
    let site = |i: usize| case.precision_sites.get(i).cloned().unwrap_or_default();
    let ds = case.deepspeed.as_ref();
    // DeepSpeed's 16-bit modes keep fp32 master weights and states whatever dtype the model
    // is loaded in (it casts the model itself).
    let regime = if let Some(d) = ds.filter(|d| d.mixed) {
        Priced {
            weights: 2.0,
            grads: 2.0,
            states: 4.0 + row.bytes_per_param_fp32,
            label: format!(
                "DeepSpeed mixed precision (at {}): 16-bit weights and gradients, fp32 master weights kept with the states",
                d.why
            ),
            at_least: false,
        }
    } else if let Some(i) = precision(Precision::Pure16) {
        Priced {
            weights: 2.0,
            grads: 2.0,
            states: row.bytes_per_param_bf16,
            label: format!("16-bit weights (at {})", site(i)),
            at_least: false,
        }
    } else if let Some(i) = precision(Precision::Fp32) {
        Priced {
            weights: 4.0,
            grads: 4.0,
            states: row.bytes_per_param_fp32,
            label: format!("fp32 weights (at {})", site(i)),
            at_least: false,
        }
    } else {
        Priced {
            weights: 2.0,
            grads: 2.0,
            states: row.bytes_per_param_bf16,
            label: "at the least: 16-bit weights, gradients and states".into(),
            at_least: true,
        }
    };
    let p = case.params.value;
    let gb = |bytes_per_param: f64| p * bytes_per_param / 1e9;
    let (w, g, s) = (gb(regime.weights), gb(regime.grads), gb(regime.states));
    // The floor MEM005 asserts is the estimate's model states (src/estimate/states.rs) with
    // nothing that depends on the model's shape: no gathered layer, no DeepSpeed fp32 gradient
    // partition, no activations. Sharding divides by the data-parallel degree; only ZeRO with
    // a known degree is computed.
    let on_gpu = |stage: u8, dp: f64| {
        let st = model_states(&Regime {
            params: p,
            trainable: p,
            frozen_bytes: 0.0,
            weight_bytes: regime.weights,
            grad_bytes: regime.grads,
            fp32_grad_bytes: 0.0,
            master_bytes: 0.0,
            state_bytes: regime.states,
            sharding: Sharding::Zero(stage),
            shards: dp,
            model_parallel: 1.0,
            offload_optimizer: None,
            offload_params: None,
            largest_module: 0.0,
            gpus_per_node: 1.0,
            // Model states only: the step's temporaries are not part of the floor.
            optimizer: String::new(),
            optimizer_display: String::new(),
            optimizer_states: 0.0,
        });
        (st.weights + st.grads + st.master + st.states) / 1e9
    };
    let (need, breakdown) = if t.sharded {
        let d = ds?;
        if d.offload {
            return None;
        }
        match d.stage? {
            0 => (on_gpu(0, 1.0), format!("{} + {} + {}", n(w), n(g), n(s))),
            stage => {
                let dp = case.world.as_ref()?.data_parallel as f64;
                let why = case
                    .world
                    .as_ref()
                    .map(|w| w.why.clone())
                    .unwrap_or_default();
                let text = match stage {
                    1 => format!("{} + {} + {} / {dp}", n(w), n(g), n(s)),
                    2 => format!("{} + ({} + {}) / {dp}", n(w), n(g), n(s)),
                    _ => format!("({} + {} + {}) / {dp}", n(w), n(g), n(s)),
                };
                (
                    on_gpu(stage, dp),
                    format!("{text} with ZeRO-{stage} over {dp} ranks ({why})"),
                )
            }
        }
    } else {
        if ds.is_some_and(|d| d.offload) {
            return None;
        }
        (on_gpu(0, 1.0), format!("{} + {} + {}", n(w), n(g), n(s)))
    };
    let margin = if case.nominal { NOMINAL_MARGIN } else { 1.0 };
    let gpu = case.gpu.value;
    if need * 1e9 <= gpu * GIB * margin {
        return None;
    }
    let per = regime.weights + regime.grads + regime.states;
    let message = format!(
        "{} parameters need {}{} B/param for weights, gradients and {} states alone: {breakdown} = {} GB > {} GB of GPU memory ({}; GPU memory from {}; {}; {})",
        fmt_count(p),
        if regime.at_least { "at least " } else { "" },
        fmt_num(per),
        row.display,
        n(need),
        fmt_num(gpu),
        case.params.why,
        case.gpu.why,
        optimizer_why,
        regime.label,
    );
    let eight_bit = knowledge()
        .optimizer_by_id("adamw8bit")
        .map_or(2.0, |r| r.bytes_per_param_bf16);
    // ZeRO-3 / FSDP divide the whole sum by the number of GPUs.
    let min_gpus = ((w + g + s) * 1e9 / (gpu * GIB)).ceil().max(2.0);
    let help = format!(
        "LoRA or QLoRA (gradients and states only for the adapters), an 8-bit optimizer (about {} B/param of state instead of {}), ZeRO-3 or FSDP over at least {} GPUs, optimizer offload to CPU, or a GPU with more memory; gradient checkpointing does not shrink this sum",
        fmt_num(eight_bit),
        fmt_num(regime.states),
        fmt_num(min_gpus)
    );
    Some(Diagnostic::new("MEM005", case.anchor.clone(), message).with_help(help))
}

/// The optimizer seen (or configured), or the HF Trainer's documented default. The cheapest when
/// several are seen.
fn optimizer(case: &MemoryCase) -> Option<(&'static OptimizerRow, String)> {
    let t = &case.training;
    let seen: Vec<&OptimizerChoice> = t
        .optimizers
        .iter()
        .filter(|o| !matches!(o.origin, Origin::Assumed))
        .collect();
    if seen.iter().any(|o| !o.row.known) {
        return None;
    }
    if let Some(best) = seen.iter().min_by(|a, b| {
        a.row
            .bytes_per_param_bf16
            .total_cmp(&b.row.bytes_per_param_bf16)
    }) {
        return Some((
            best.row,
            format!("{} {}", best.row.display, best.origin.describe()),
        ));
    }
    if t.frameworks.contains(&Framework::HfTrainer) {
        let row = knowledge().optimizer_by_id("adamw")?;
        return Some((row, "AdamW, the HF Trainer's default optimizer".into()));
    }
    None
}

fn n(v: f64) -> String {
    if v >= 10.0 {
        format!("{}", v.round() as i64)
    } else {
        fmt_num((v * 10.0).round() / 10.0)
    }
}
