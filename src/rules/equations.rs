//! The batch equations a file breaks (BS002's loaders, BS004's counts and learning rates), read
//! from the batch model: each message names the factor left out and where the run shows it.

use super::{fmt_num, line_of, Checker};
use crate::diagnostic::Diagnostic;
use crate::facts::{BatchEquation, BatchUse, Missing, LOOP_ITERATIONS, STEP_COUNTER};

/// The equations of the file: loaders (BS002) or counts and rates (BS004), skipping a line
/// another of the rule's findings already reports.
pub(super) fn report(cx: &Checker<'_>, loaders: bool, out: &mut Vec<Diagnostic>) {
    for e in &cx.facts.batch_equations {
        if (code_of(e) == "BS002") != loaders {
            continue;
        }
        let line = cx.file.position(e.span.start).row;
        if out
            .iter()
            .any(|d| d.code == code_of(e) && cx.file.position(d.range.start).row == line)
        {
            continue;
        }
        let factors: Vec<String> = e.missing.iter().filter_map(|m| factor(cx, m)).collect();
        if factors.is_empty() {
            continue;
        }
        if let Some(d) = diagnostic(cx, e, &factors) {
            out.push(d);
        }
    }
}

fn diagnostic(cx: &Checker<'_>, e: &BatchEquation, factors: &[String]) -> Option<Diagnostic> {
    let (written, has) = (&e.written, &e.has);
    let left_out = factors.join(", and ");
    let (code, message, help) = match &e.used {
        BatchUse::Count { key, scheduler, call } => {
            let counter = key.strip_prefix(STEP_COUNTER);
            let reader = match scheduler {
                Some(s) => format!("the {} of `{s}` ({})", key.replace('_', " "), line_of(cx.file, call.start)),
                None if key == LOOP_ITERATIONS => format!("the iterations of the loop over `{}` ({}), one optimizer step each,", cx.file.slice(call), line_of(cx.file, call.start)),
                None if counter.is_some() => format!("`{}` ({}), where `{}` counts optimizer steps,", cx.file.slice(call), line_of(cx.file, call.start), counter.unwrap_or_default()),
                None => format!("the Trainer's `{key}` ({})", line_of(cx.file, call.start)),
            };
            (
                "BS004",
                format!("`{written}` sizes {reader} with a batch of {has} per optimizer step, but one optimizer step of this run reads micro-batch × accumulation × data-parallel size samples: it leaves out {left_out}, so the count is too large by that factor and {}", match (key == LOOP_ITERATIONS, counter) {
                    (true, _) => "training runs that many times the epochs it was sized for".to_string(),
                    (false, Some(c)) => format!("`{c}` reaches it that many times later than meant"),
                    (false, None) => "the schedule never reaches its end".to_string(),
                }),
                "divide by the global batch: per-device micro-batch × accumulation factor × data-parallel size",
            )
        }
        BatchUse::Rate { call, callee } => (
            "BS004",
            format!("`{written}` scales the learning rate given to `{callee}` ({}) by {has}, but the batch of one optimizer step is micro-batch × accumulation × data-parallel size: it leaves out {left_out}, so the learning rate is too small by that factor", line_of(cx.file, call.start)),
            "scale by the global batch: per-device micro-batch × accumulation factor × data-parallel size",
        ),
        BatchUse::Loader { call } => (
            "BS002",
            format!("the data loader ({}) is built with `{written}`, a batch of {has}, but a loader yields one micro-batch per process and micro-step: the batch also holds {left_out}, so each optimizer step reads that many times the declared batch", line_of(cx.file, call.start)),
            "build the loader with the per-device micro-batch: the global batch divided by the accumulation factor and the data-parallel size",
        ),
        BatchUse::Window { factor, header } => (
            "BS002",
            format!("`{written}`, the micro-batches the loop at {} accumulates per optimizer step (`{factor}`), holds {has}, but each data-parallel process accumulates that many: with {left_out} in the factor, each optimizer step reads that many times the declared global batch", line_of(cx.file, header.start)),
            "divide by the data-parallel size too: accumulation = global batch ÷ (micro-batch × data-parallel size)",
        ),
    };
    Some(Diagnostic::new(code, e.span.clone(), message).with_help(help))
}

/// A factor in words, with where the run shows it; `None` when the launches do not show it.
fn factor(cx: &Checker<'_>, m: &Missing) -> Option<String> {
    Some(match m {
        Missing::Accumulation(n, at) => format!(
            "the accumulation factor `{n}` ({})",
            line_of(cx.file, at.start)
        ),
        Missing::World => format!(
            "the data-parallel size (this file trains data-parallel: {})",
            data_parallel(cx)
        ),
        Missing::WorldIfLaunched => format!(
            "the data-parallel size (every launch of this file starts several processes: {})",
            launched_world(cx)?
        ),
        Missing::Nodes => {
            "the number of nodes (a Lightning run spans `trainer.num_nodes` nodes of these devices)"
                .to_string()
        }
        Missing::AccumulationIfLaunched => {
            format!("the accumulation factor ({})", launched_accumulation(cx)?)
        }
        Missing::EngineAccumulation => {
            let a = super::deepspeed_accumulation(cx)?;
            format!(
                "the accumulation factor of the DeepSpeed config whose engine steps the scheduler (`gradient_accumulation_steps` {} at {})",
                fmt_num(a.value),
                a.at
            )
        }
    })
}

/// The data-parallel processes every launch of this file starts, when there is a launch and
/// each starts more than one: `8 ranks from ... at launch.sh:3`.
pub(super) fn launched_world(cx: &Checker<'_>) -> Option<String> {
    let runs = &cx.training.project.launched_by;
    let worlds: Option<Vec<_>> = runs.iter().map(|r| r.world.as_ref()).collect();
    let worlds = worlds?;
    let first = worlds.first()?;
    worlds
        .iter()
        .all(|w| w.data_parallel > 1)
        .then(|| first.why.clone())
}

/// The accumulation factor every launch of this file passes, when they agree on one above 1.
pub(super) fn launched_accumulation(cx: &Checker<'_>) -> Option<String> {
    let (factor, _) = cx.training.project.launched_accumulation()?;
    Some(format!(
        "`gradient_accumulation_steps={}` at {}",
        fmt_num(factor.value),
        factor.at
    ))
}

fn code_of(e: &BatchEquation) -> &'static str {
    match e.used {
        BatchUse::Loader { .. } | BatchUse::Window { .. } => "BS002",
        _ => "BS004",
    }
}

/// What shows the file trains data-parallel: a DDP wrapper, `init_process_group`, or an FSDP
/// wrapper, with its line.
pub(super) fn data_parallel(cx: &Checker<'_>) -> String {
    if let Some(d) = cx.facts.ddp_wraps.first() {
        return format!(
            "a `DistributedDataParallel` model at {}",
            line_of(cx.file, d.start)
        );
    }
    if let Some(t) = cx.facts.parallel_trainers.first() {
        return format!(
            "a Lightning `Trainer` for several devices or nodes at {}, which gives each process its share of every loader",
            line_of(cx.file, t.start)
        );
    }
    let text = &cx.file.text;
    for (word, what) in [
        ("init_process_group", "`init_process_group`"),
        (
            "FullyShardedDataParallel",
            "a `FullyShardedDataParallel` model",
        ),
        ("fully_shard(", "`fully_shard`"),
    ] {
        if let Some(at) = text.find(word) {
            return format!("{what} at {}", line_of(cx.file, at));
        }
    }
    "a data-parallel wrapper".into()
}
