//! MEM010 offloaded-states-on-gpu: DeepSpeed offloads the optimizer states (or parameters) of the
//! run, while a GPU-memory estimate still counts them on the GPU, or nothing checks the host
//! memory the offload needs. Documentation: `rules/MEM010.toml`.

use super::requirement::requirement;
use super::states::{component, in_bytes, says_upper_bound, scope, target, Component, Reported};
use super::{fmt_num, Checker, Rule};
use crate::context::Seen;
use crate::diagnostic::Diagnostic;
use crate::expr::{Role, Term};
use crate::facts::{Formula, FormulaKind, Offload, Offloaded};

pub struct OffloadedStatesOnGpu;

/// What DeepSpeed keeps on the GPU when the optimizer is offloaded: the 16-bit weights
/// (`estimate_zero2_model_states_mem_needs`: `gpu_mem = 2 * total_params`; docs/knowledge.md §4.2).
const GPU_BYTES_OFFLOADED: f64 = 2.0;
/// More than fp32 weights: states or gradients are counted too.
const WEIGHTS_MAX: f64 = 4.0;

impl Rule for OffloadedStatesOnGpu {
    fn code(&self) -> &'static str {
        "MEM010"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if training.inference {
            return;
        }
        let offloaded = |what| training.offload.iter().find(|o| o.value.what == what);
        let offload = Offloads {
            optimizer: offloaded(Offloaded::Optimizer),
            params: offloaded(Offloaded::Params),
        };
        if offload.optimizer.is_none() && offload.params.is_none() {
            return;
        }
        let mut reported = Reported::default();
        let mut gpu_estimates = 0;
        let mut first: Option<&Formula> = None;
        for f in &cx.facts.formulas {
            if f.inference || says_upper_bound(cx, f) || !estimates_gpu(f) {
                continue;
            }
            // A calculator that branches on offload knows where the states go.
            if f.guard.offload || scope(cx, f).is_some_and(|s| s.tests.offload) {
                continue;
            }
            gpu_estimates += 1;
            first.get_or_insert(f);
            if let Some(d) = judge(cx, f, &offload) {
                if reported.first(f) {
                    out.push(d);
                }
            }
        }
        // No host-memory check at all for a CPU offload of the optimizer, whose host need
        // DeepSpeed's estimator gives (NVMe keeps host memory small by design).
        let Some(offload) = offload.optimizer.filter(|o| !o.value.nvme) else {
            return;
        };
        let Some(f) = first.filter(|_| gpu_estimates > 0) else {
            return;
        };
        let text = cx.file.text.to_ascii_lowercase();
        let checks_host = [
            "cpu_mem",
            "host_mem",
            "cpu_ram",
            "host_ram",
            "virtual_memory",
            "psutil",
            "meminfo",
            "ram_gb",
            "cpu_memory",
            "host_memory",
        ]
        .iter()
        .any(|w| text.contains(w))
            // A memory value computed for the host: a formula assigned to a name for it
            // (`cpu_bytes = n * max(4 * gpus, 16) * 1.5`).
            || cx.facts.formulas.iter().any(|f| match &f.kind {
                FormulaKind::Assign { target, .. } => target
                    .to_ascii_lowercase()
                    .split(['_', '.'])
                    .any(|w| matches!(w, "cpu" | "host" | "ram" | "dram")),
                _ => false,
            });
        if !checks_host && out.iter().all(|d| d.code != "MEM010") {
            out.push(
                Diagnostic::new(
                    "MEM010",
                    f.span.clone(),
                    format!(
                        "optimizer states are offloaded to the CPU (seen at {}), but nothing here checks host memory: DeepSpeed's estimator asks for params x max(4 x GPUs, 16) x 1.5 bytes of RAM",
                        offload.at
                    ),
                )
                .with_help("check host RAM too: about 16-18 bytes per parameter (fp32 master weights, gradients and Adam moments) with DeepSpeed's 1.5 safety factor"),
            );
        }
    }
}

/// A formula that states GPU memory: a budget or fit check against the GPU, or a total named
/// for the GPU (`gpu_mem = ...`), not one named for the host.
fn estimates_gpu(f: &Formula) -> bool {
    let name = target(f).map(str::to_ascii_lowercase).unwrap_or_default();
    let for_host = |name: &str| {
        name.to_ascii_lowercase()
            .split(['_', '.'])
            .any(|w| matches!(w, "cpu" | "host" | "ram" | "offload" | "offloaded" | "nvme"))
    };
    // Named for the host, or a check of a value named for the host (`host_ram_gb > avail`).
    let term_for_host = |t: &Term| for_host(&t.symbol) || t.via.as_deref().is_some_and(for_host);
    if for_host(&name) || f.lin.terms.iter().any(term_for_host) {
        return false;
    }
    if requirement(f).is_some() {
        return true;
    }
    let named_gpu = ["gpu", "vram", "device", "cuda"]
        .iter()
        .any(|w| name.contains(w));
    named_gpu
        && !f.lin.terms.iter().any(|t| t.role == Role::Gpu)
        && f.lin.terms.iter().all(|t| t.coef >= 0.0)
}

/// What the run offloads, each with where it was seen.
struct Offloads<'a> {
    optimizer: Option<&'a Seen<Offload>>,
    params: Option<&'a Seen<Offload>>,
}

fn device(offload: &Seen<Offload>) -> &'static str {
    if offload.value.nvme {
        "NVMe"
    } else {
        "the CPU"
    }
}

fn judge(cx: &Checker<'_>, f: &Formula, offload: &Offloads) -> Option<Diagnostic> {
    if let Some(optimizer) = offload.optimizer {
        if let Some(d) = judge_states(cx, f, optimizer, offload.params.is_some()) {
            return Some(d);
        }
    }
    judge_params(cx, f, offload.params?, offload.optimizer.is_some())
}

/// With parameters offloaded (ZeRO-3), the GPU holds only the layers being gathered for
/// compute: DeepSpeed's ZeRO-3 estimator gives `gpu_mem = 4 * largest_layer_params` with both
/// offloads (docs/knowledge.md §4.2). A weights term sized by the whole model is then off the GPU;
/// with the optimizer offloaded too, so is every byte per parameter.
fn judge_params(
    cx: &Checker<'_>,
    f: &Formula,
    params: &Seen<Offload>,
    optimizer_offloaded: bool,
) -> Option<Diagnostic> {
    let device = device(params);
    // A layer's size is what stays: `largest_layer_params * 4`. Read on the count the term
    // multiplies (its span may be the whole sum it was divided with).
    let whole_model = |t: &&Term| t.coef > 0.0 && !t.symbol.to_ascii_lowercase().contains("layer");
    let help = "count the offloaded parameters where they now live (host memory or NVMe); the GPU keeps the layers being computed (DeepSpeed: 4 bytes x the largest layer's parameters)";
    if let Some(t) = f
        .lin
        .terms
        .iter()
        .filter(whole_model)
        .find(|t| component(t) == Component::Weights)
    {
        return Some(
            Diagnostic::new(
                "MEM010",
                t.span.clone(),
                format!(
                    "counts the model's weights (`{}`) in GPU memory, but the parameters are offloaded to {device} (seen at {}): under ZeRO-3 the GPU holds only the layers being gathered for compute",
                    cx.file.slice(&t.span),
                    params.at
                ),
            )
            .with_help(help),
        );
    }
    if !optimizer_offloaded {
        // The optimizer's partition stays on the GPU: bytes per parameter are not judged.
        return None;
    }
    let b: f64 = f
        .lin
        .terms
        .iter()
        .filter(whole_model)
        .filter(|t| component(t) == Component::PerParam)
        .map(|t| in_bytes(t.coef))
        .sum();
    (b > 0.0).then(|| {
        Diagnostic::new(
            "MEM010",
            bytes_at(f, |t| whole_model(t) && component(t) == Component::PerParam),
            format!(
                "counts {} bytes per parameter in GPU memory, but the parameters and the optimizer states are offloaded to {device} (seen at {}): DeepSpeed's ZeRO-3 estimator keeps only the largest layer there, 4 bytes per parameter of that layer",
                fmt_num(b),
                params.at
            ),
        )
        .with_help(help)
    })
}

/// With the optimizer offloaded, the GPU keeps the 16-bit weights: a state term or more than
/// fp32 weights per parameter counts the states there. With the parameters offloaded too, the
/// weights are judged by [`judge_params`].
fn judge_states(
    cx: &Checker<'_>,
    f: &Formula,
    offload: &Seen<Offload>,
    params_offloaded: bool,
) -> Option<Diagnostic> {
    let device = device(offload);
    // What the estimate charges: the need a budget takes from the GPU (`vram - weights -
    // states`), or the terms a total adds.
    let charged: Vec<&Term> = match requirement(f) {
        Some(req) => req.terms,
        None => f.lin.terms.iter().filter(|t| t.coef > 0.0).collect(),
    };
    if let Some(t) = charged.iter().find(|t| component(t) == Component::States) {
        // The states are right where they are computed; counting them in this GPU estimate
        // is the mistake: on the estimate, unless the term is written in it.
        let within = t.span.start >= f.span.start && t.span.end <= f.span.end;
        return Some(
            Diagnostic::new(
                "MEM010",
                if within { t.span.clone() } else { f.span.clone() },
                format!(
                    "counts optimizer states (`{}`) in GPU memory, but they are offloaded to {device} (seen at {})",
                    cx.file.slice(&t.span),
                    offload.at
                ),
            )
            .with_help("move the optimizer-state term to a host-memory estimate; the GPU keeps the 16-bit weights (and, at ZeRO-3 with parameter offload, only the largest layer)"),
        );
    }
    // Bytes per parameter charged, whether a total adds them or a budget takes them away.
    let b: f64 = charged
        .iter()
        .filter(|t| component(t) == Component::PerParam)
        .map(|t| in_bytes(t.coef).abs())
        .sum();
    if b > WEIGHTS_MAX * 1.05 && !params_offloaded {
        return Some(
            Diagnostic::new(
                "MEM010",
                bytes_at(f, |t| component(t) == Component::PerParam),
                format!(
                    "counts {} bytes per parameter in GPU memory, but the optimizer states are offloaded to {device} (seen at {}): DeepSpeed keeps the 16-bit weights there, {} bytes per parameter",
                    fmt_num(b),
                    offload.at,
                    fmt_num(GPU_BYTES_OFFLOADED)
                ),
            )
            .with_help("count the offloaded states against host memory, not the GPU"),
        );
    }
    None
}

/// Where bytes per parameter are written: on the one term that carries them (a dict entry,
/// `"gpu": 18 * P / n`), else on the formula.
fn bytes_at(f: &Formula, carries: impl Fn(&&Term) -> bool) -> std::ops::Range<usize> {
    let mut terms = f.lin.terms.iter().filter(carries);
    match (terms.next(), terms.next()) {
        (Some(t), None) if t.span.start >= f.span.start && t.span.end <= f.span.end => {
            t.span.clone()
        }
        _ => f.span.clone(),
    }
}
