//! BS001 deepspeed-batch-mismatch: a DeepSpeed config whose `train_batch_size`,
//! `train_micro_batch_size_per_gpu` and `gradient_accumulation_steps` cannot satisfy
//! `train_batch_size = micro x accumulation x data-parallel size`, and Megatron's
//! `--global-batch-size` that is not divisible by micro batch x data-parallel size.
//! Documentation: `rules/BS001.toml`.

use super::batch::{docs, looks_deepspeed, ranks, val, via_note, worlds, Val};
use super::{Checker, Rule};
use crate::config::{Node, Value};
use crate::context::World;
use crate::diagnostic::Diagnostic;
use crate::facts::Binding;
use std::ops::Range;

pub struct DeepSpeedBatchMismatch;

impl Rule for DeepSpeedBatchMismatch {
    fn code(&self) -> &'static str {
        "BS001"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for doc in docs(cx) {
            if !looks_deepspeed(doc.root) {
                continue;
            }
            let worlds = worlds(cx, doc.config);
            if let Some(d) = triple(cx, doc.root, doc.via, &worlds, None) {
                out.push(d);
            }
        }
        for launch in &cx.training.project.launches {
            // A config the launcher names but that is not linted: report at the launcher.
            for ext in &launch.external {
                if !looks_deepspeed(&ext.root) {
                    continue;
                }
                let worlds: Vec<World> = launch.run.world.iter().cloned().collect();
                if let Some(d) = triple(
                    cx,
                    &ext.root,
                    &[],
                    &worlds,
                    Some((&ext.display, ext.named_at.clone())),
                ) {
                    out.push(d);
                }
            }
            if !launch.recipe {
                if let Some(d) = megatron(cx, &launch.flags, &launch.via, launch.run.world.as_ref())
                {
                    out.push(d);
                }
            }
        }
    }
}

/// What is wrong with the triple on `w` data-parallel ranks, and the value that would fit.
fn on_world(t: u64, m: Option<u64>, g: Option<u64>, w: u64) -> Option<(String, String)> {
    match (m, g) {
        (Some(m), Some(g)) => {
            let want = m.checked_mul(g)?.checked_mul(w)?;
            (t != want).then(|| {
                (
                    format!("train_batch_size {t} != micro batch {m} x accumulation {g} x {} = {want}", ranks(w)),
                    format!("set `train_batch_size` to {want} (or \"auto\" under the HF Trainer or accelerate)"),
                )
            })
        }
        (Some(m), None) => {
            let step = m.checked_mul(w)?;
            let g = t / m / w;
            if g == 0 {
                Some((
                    format!("DeepSpeed derives gradient_accumulation_steps = {t} // {m} // {w} = 0 on {}", ranks(w)),
                    format!("use a `train_batch_size` that is a multiple of {step} (micro batch x ranks)"),
                ))
            } else {
                let got = step.checked_mul(g)?;
                (got != t).then(|| {
                    (
                        format!(
                            "DeepSpeed derives gradient_accumulation_steps = {t} // {m} // {w} = {g} on {}, and {m} x {g} x {w} = {got} != train_batch_size {t}",
                            ranks(w)
                        ),
                        format!("use a `train_batch_size` that is a multiple of {step} (micro batch x ranks)"),
                    )
                })
            }
        }
        (None, Some(g)) => {
            let step = g.checked_mul(w)?;
            let m = t / w / g;
            if m == 0 {
                Some((
                    format!("DeepSpeed derives train_micro_batch_size_per_gpu = {t} // {w} // {g} = 0 on {}", ranks(w)),
                    format!("use a `train_batch_size` that is a multiple of {step} (accumulation x ranks)"),
                ))
            } else {
                let got = step.checked_mul(m)?;
                (got != t).then(|| {
                    (
                        format!(
                            "DeepSpeed derives train_micro_batch_size_per_gpu = {t} // {w} // {g} = {m} on {}, and {m} x {g} x {w} = {got} != train_batch_size {t}",
                            ranks(w)
                        ),
                        format!("use a `train_batch_size` that is a multiple of {step} (accumulation x ranks)"),
                    )
                })
            }
        }
        (None, None) => {
            let m = t / w;
            (m == 0 || m * w != t).then(|| {
                (
                    format!("DeepSpeed derives train_micro_batch_size_per_gpu = {t} // {w} = {m} on {}, and {m} x {w} != train_batch_size {t}", ranks(w)),
                    format!("use a `train_batch_size` that is a multiple of {w}"),
                )
            })
        }
    }
}

/// What is wrong with the triple whatever the number of GPUs.
fn on_any_world(t: u64, m: Option<u64>, g: Option<u64>) -> Option<(String, String)> {
    let (step, what) = match (m, g) {
        (Some(m), Some(g)) => (
            m.checked_mul(g)?,
            format!("micro batch {m} x accumulation {g}"),
        ),
        (Some(m), None) => (m, format!("micro batch {m}")),
        (None, Some(g)) => (g, format!("accumulation {g}")),
        (None, None) => return None,
    };
    if t.is_multiple_of(step) && t >= step {
        return None;
    }
    let lower = t / step * step;
    let near = if lower == 0 {
        format!("{step}")
    } else {
        format!("{lower} or {}", lower + step)
    };
    Some((
        format!(
            "train_batch_size {t} is not a multiple of {what} = {step}: no number of GPUs satisfies train_batch_size = micro x accumulation x world size"
        ),
        format!("use a multiple of {step}, e.g. {near} (or \"auto\" under the HF Trainer or accelerate)"),
    ))
}

fn triple(
    cx: &Checker<'_>,
    root: &Node,
    via: &[(Range<usize>, Binding)],
    worlds: &[World],
    external: Option<(&str, Range<usize>)>,
) -> Option<Diagnostic> {
    // Elastic training (older DeepSpeed) chooses the batch sizes itself.
    if root
        .get("elasticity")
        .and_then(|e| e.get("enabled"))
        .is_some_and(|e| e.value == Value::Bool(true))
    {
        return None;
    }
    let tn = root.get("train_batch_size");
    let mn = root.get("train_micro_batch_size_per_gpu");
    let gn = root.get("gradient_accumulation_steps");
    let (t, m, g) = (val(tn), val(mn), val(gn));
    if [t, m, g].contains(&Val::Unknown) {
        return None;
    }
    let Val::Num(t) = t else { return None };
    let num = |v: Val| match v {
        Val::Num(n) => Some(n),
        _ => None,
    };
    let (m, g) = (num(m), num(g));
    // DeepSpeed divides the world by the config's `sequence_parallel_size` (without an mpu);
    // GPT-NeoX style configs state their model-parallel sizes next to the batch sizes.
    let mut divisor = 1u64;
    for k in [
        "sequence_parallel_size",
        "model_parallel_size",
        "pipe_parallel_size",
    ] {
        match val(root.get(k)) {
            Val::Num(n) => divisor = divisor.checked_mul(n)?,
            Val::Unknown => return None,
            Val::Absent => {}
        }
    }
    let anchor = tn?;
    let file = cx.file;
    let values = {
        let mut v = format!("train_batch_size {t}{}", via_note(file, via, &anchor.span));
        if let (Some(m), Some(n)) = (m, mn) {
            v.push_str(&format!(
                ", train_micro_batch_size_per_gpu {m}{}",
                via_note(file, via, &n.span)
            ));
        }
        if let (Some(g), Some(n)) = (g, gn) {
            v.push_str(&format!(
                ", gradient_accumulation_steps {g}{}",
                via_note(file, via, &n.span)
            ));
        }
        v
    };
    let prefix = external
        .as_ref()
        .map_or(String::new(), |(d, _)| format!("{d}: "));
    let span = external
        .as_ref()
        .map_or(anchor.span.clone(), |(_, s)| s.clone());
    for w in worlds {
        if !w.data_parallel.is_multiple_of(divisor) {
            continue;
        }
        let dp = w.data_parallel / divisor;
        if let Some((what, fix)) = on_world(t, m, g, dp) {
            let message = format!(
                "{prefix}DeepSpeed refuses this batch: {what} ({values}; {})",
                w.why
            );
            return Some(Diagnostic::new("BS001", span, message).with_help(fix));
        }
    }
    let (what, fix) = on_any_world(t, m, g)?;
    let message = format!("{prefix}{what} ({values})");
    Some(Diagnostic::new("BS001", span, message).with_help(fix))
}

/// Megatron: `--global-batch-size` must be divisible by `--micro-batch-size` x data-parallel size.
fn megatron(
    cx: &Checker<'_>,
    flags: &Node,
    via: &[(Range<usize>, Binding)],
    world: Option<&World>,
) -> Option<Diagnostic> {
    let gn = flags.get("global_batch_size")?;
    let mn = flags.get("micro_batch_size")?;
    // Megatron derives the accumulation: a launch that passes one runs another script (BS002).
    if flags.get("decrease_batch_size_if_needed").is_some()
        || super::bs002::ACCUM.iter().any(|k| flags.get(k).is_some())
    {
        return None;
    }
    let (Val::Num(g), Val::Num(m)) = (val(Some(gn)), val(Some(mn))) else {
        return None;
    };
    let file = cx.file;
    let key_span = match &flags.value {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.name == "global_batch_size")
            .map(|(k, _)| k.span.start..gn.span.end.max(k.span.end)),
        _ => None,
    }?;
    let values = format!(
        "--global-batch-size {g}{}, --micro-batch-size {m}{}",
        via_note(file, via, &gn.span),
        via_note(file, via, &mn.span)
    );
    if let Some(w) = world {
        let dp = w.data_parallel;
        let step = m.checked_mul(dp)?;
        if g % step != 0 {
            let lower = g / step * step;
            let near = if lower == 0 {
                format!("{step}")
            } else {
                format!("{lower} or {}", lower + step)
            };
            return Some(
                Diagnostic::new(
                    "BS001",
                    key_span,
                    format!(
                        "global batch {g} is not divisible by micro batch {m} x {} = {step}: Megatron refuses to start ({values}; {})",
                        ranks(dp),
                        w.why
                    ),
                )
                .with_help(format!("use a global batch that is a multiple of {step}, e.g. {near}")),
            );
        }
        return None;
    }
    if g % m != 0 || g < m {
        return Some(
            Diagnostic::new(
                "BS001",
                key_span,
                format!("global batch {g} is not a multiple of micro batch {m}: no data-parallel size fits ({values})"),
            )
            .with_help(format!("use a global batch that is a multiple of {m}")),
        );
    }
    None
}
