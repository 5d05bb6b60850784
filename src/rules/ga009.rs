//! GA009 ddp-sync-every-micro-step: a `DistributedDataParallel` model in an accumulating loop
//! all-reduces its gradients on every micro-step (no `no_sync()`), `no_sync()` wraps the
//! backward only, or `require_backward_grad_sync` is set after the forward it governs. Off by
//! default. Documentation: `rules/GA009.toml`.

use super::{line_of, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::facts::Framework;
use std::borrow::Cow;

pub struct DdpSyncEveryMicroStep;

impl Rule for DdpSyncEveryMicroStep {
    fn code(&self) -> &'static str {
        "GA009"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for w in &cx.facts.no_sync_backward_only {
            let with = cx.file.slice(w).trim_end().trim_end_matches(':');
            out.push(
                Diagnostic::new(
                    "GA009",
                    w.clone(),
                    format!("`{with}` wraps only the backward: the forward ran outside the context, so DDP still all-reduces the gradients on this micro-step"),
                )
                .with_help("run the forward and the backward of the non-final micro-steps inside `no_sync()`"),
            );
        }
        for (set, forward) in &cx.facts.late_sync_flags {
            let flag = cx.file.slice(set).trim();
            let (call, line) = (cx.file.slice(forward), line_of(cx.file, forward.start));
            out.push(
                Diagnostic::new(
                    "GA009",
                    set.clone(),
                    format!("`{flag}` is set after this micro-step's forward (`{call}`, {line}): DDP reads the flag in the forward, so it takes effect only on the next micro-step; the last micro-step of each window does not all-reduce, and each rank steps with its own gradients"),
                )
                .with_help("set `require_backward_grad_sync` before the micro-step's forward"),
            );
        }
        if !cx.facts.ddp_wraps.is_empty() {
            for off in &cx.facts.no_sync_off_boundary {
                let (test, line) = (&off.step_test, line_of(cx.file, off.step.start));
                out.push(
                    Diagnostic::new(
                        "GA009",
                        off.choice.clone(),
                        format!("this chooses `no_sync()` on every micro-step but the one where `{}`, while the optimizer steps when `{test}` ({line}): the backward before the step runs without the all-reduce, so each rank steps with its own gradients", off.syncs_on),
                    )
                    .with_help(format!("sync on the micro-step the optimizer steps at: choose `no_sync()` when `{test}` is false")),
                );
            }
        }
        // Frameworks and sharded wrappers that skip the sync between boundaries themselves.
        let managed = cx.training.frameworks.iter().any(|f| {
            matches!(
                f,
                Framework::Accelerate
                    | Framework::DeepSpeed
                    | Framework::HfTrainer
                    | Framework::Lightning
            )
        }) || cx.training.sharded;
        // The model is wrapped here, or a function of another module wraps and returns it.
        let elsewhere = &cx.training.project.ddp_elsewhere;
        let (wrapped, reach) = match (cx.facts.ddp_wraps.first(), elsewhere.first()) {
            (Some(ddp), _) => (
                line_of(cx.file, ddp.start),
                Cow::Borrowed(&cx.facts.ddp_scopes[..]),
            ),
            (None, Some(e)) => {
                let (f, call, at) = (&e.function, line_of(cx.file, e.at.start), &e.wrapped_at);
                let reach = elsewhere.iter().flat_map(|e| e.reach.iter().copied());
                (
                    format!("returned by `{f}` ({call}), which wraps it at {at}"),
                    Cow::Owned(reach.collect()),
                )
            }
            (None, None) => return,
        };
        if managed || cx.facts.controls_grad_sync {
            return;
        }
        // A loop in a function no DDP model reaches trains another model.
        let trains_ddp = |scope: &usize| reach.contains(scope);
        for lp in cx
            .facts
            .loops
            .iter()
            .filter(|lp| !lp.backwards.is_empty() && trains_ddp(&lp.scope))
        {
            if lp.factor_value.is_some_and(|v| v <= 1.0) {
                continue;
            }
            let n = &lp.factor;
            out.push(
                Diagnostic::new(
                    "GA009",
                    lp.header.clone(),
                    format!("this loop accumulates gradients over `{n}` micro-batches with a `DistributedDataParallel` model ({wrapped}) and never enters `no_sync()`: the gradients are all-reduced on every micro-step instead of once per optimizer step"),
                )
                .with_help("wrap the forward and backward of the non-final micro-steps in `with model.no_sync():`"),
            );
        }
    }
}
