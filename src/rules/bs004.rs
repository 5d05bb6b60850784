//! BS004 global-batch-missing-factor: a global or effective batch computed as a product that
//! leaves out the world size or the accumulation factor, then used for a step count, a warm-up
//! or a learning rate; or a schedule sized as `len(dataset) // batch` in a file that accumulates
//! or shards its data. Documentation: `rules/BS004.toml`.

use super::equations::{data_parallel, launched_accumulation, launched_world};
use super::{line_of, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::{Missing, SampleSchedule};

pub struct GlobalBatchMissingFactor;

impl Rule for GlobalBatchMissingFactor {
    fn code(&self) -> &'static str {
        "BS004"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for g in &cx.facts.global_batches {
            let (name, text, user) = (&g.name, &g.text, &g.used_by);
            let (message, help) = match &g.missing {
                Missing::World => {
                    let ddp = data_parallel(cx);
                    (
                        format!("`{name} = {text}` leaves out the number of data-parallel processes although this file trains data-parallel ({ddp}): `{user}`, computed from it, counts one process's share of the batch"),
                        "multiply by the data-parallel world size: global = micro x accumulation x world",
                    )
                }
                Missing::WorldIfLaunched => {
                    let Some(world) = launched_world(cx) else {
                        continue;
                    };
                    (
                        format!("`{name} = {text}` leaves out the number of data-parallel processes although every launch of this file starts several ({world}): `{user}`, computed from it, counts one process's share of the batch"),
                        "multiply by the data-parallel world size: global = micro x accumulation x world",
                    )
                }
                Missing::Nodes => (
                    format!("`{name} = {text}` counts the devices of one node as the data-parallel size, but a Lightning run spans `num_nodes` nodes: `{user}`, computed from it, counts one node's share of the batch on a run of several"),
                    "multiply by the number of nodes (`trainer.num_nodes`), or use `trainer.world_size`: global = micro x accumulation x devices x nodes",
                ),
                Missing::EngineAccumulation => continue,
                Missing::AccumulationIfLaunched => {
                    let Some(factor) = launched_accumulation(cx) else {
                        continue;
                    };
                    (
                        format!("`{name} = {text}` leaves out the accumulation factor although every launch of this file accumulates ({factor}): `{user}`, computed from it, counts micro-batches rather than optimizer steps"),
                        "multiply by the accumulation factor: global = micro x accumulation x world",
                    )
                }
                Missing::Accumulation(n, header) => (
                    format!("`{name} = {text}` leaves out the accumulation factor although this file accumulates over `{n}` micro-batches ({}): `{user}`, computed from it, counts micro-batches rather than optimizer steps", line_of(cx.file, header.start)),
                    "multiply by the accumulation factor: global = micro x accumulation x world",
                ),
            };
            out.push(Diagnostic::new("BS004", g.span.clone(), message).with_help(help));
        }
        for s in &cx.facts.sample_schedules {
            sample_schedule(cx, s, out);
        }
        super::equations::report(cx, false, out);
    }
}

/// `len(dataset) // batch` sizing a schedule that runs once per optimizer step of each process.
fn sample_schedule(cx: &Checker<'_>, s: &SampleSchedule, out: &mut Vec<Diagnostic>) {
    let mut reasons = Vec::new();
    let mut factors = Vec::new();
    for m in &s.missing {
        match m {
            Missing::Accumulation(n, header) => {
                reasons.push(format!(
                    "it is stepped once per optimizer step, every `{n}` micro-batches ({})",
                    line_of(cx.file, header.start)
                ));
                factors.push("the accumulation factor");
            }
            Missing::World => {
                let ddp = data_parallel(cx);
                reasons.push(format!("a `DistributedSampler` gives each data-parallel process ({ddp}) only its share of the dataset"));
                factors.push("the world size");
            }
            Missing::WorldIfLaunched => {
                if let Some(world) = launched_world(cx) {
                    reasons.push(format!("a `DistributedSampler` gives each data-parallel process ({world}) only its share of the dataset"));
                    factors.push("the world size");
                }
            }
            Missing::Nodes | Missing::AccumulationIfLaunched | Missing::EngineAccumulation => {}
        }
    }
    if reasons.is_empty() {
        return;
    }
    let division = &s.division;
    let scheduler = &s.scheduler;
    out.push(
        Diagnostic::new(
            "BS004",
            s.span.clone(),
            format!(
                "`{division}` counts the dataset's batches as if one process read all of it, one micro-batch per step, but the schedule `{scheduler}` built from it ({}) is stepped fewer times: {}. The schedule outlasts the training, so the learning rate never finishes its decay",
                line_of(cx.file, s.built.start),
                reasons.join(", and ")
            ),
        )
        .with_help(format!("divide by {}: the per-device batch times the accumulation factor times the data-parallel world size is the global batch", factors.join(" and "))),
    );
}
