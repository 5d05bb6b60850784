//! The loop model: from the training calls the Python walk recorded (each with the loops and
//! branches around it), find the loops that accumulate gradients and sort their calls into those
//! that run on every micro-step and those that run only at the optimizer boundary.
//!
//! A loop accumulates when its optimizer steps only on some iterations: under an accumulation test
//! (`(i + 1) % N == 0`, a boolean holding one, a counter that is reset), after a `continue` guard
//! that skips the step, or after an inner `for micro in range(N)` loop that runs the backwards.

use crate::facts::{AccumLoop, Backward, Call, Scaling};
use std::ops::Range;

/// Where a call sits: its function scope, the loops around it (outermost first) and the branches
/// it is under, each with the number of loops around that branch.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    pub scope: usize,
    pub loops: Vec<usize>,
    pub branches: Vec<Branch>,
    /// The innermost `with accelerator.accumulate(...)` block, with the number of branches
    /// around it.
    pub accumulate: Option<(usize, usize)>,
}

impl Ctx {
    /// The two places are in different arms of one `if`: they never run in the same iteration.
    fn exclusive(&self, other: &Ctx) -> bool {
        self.branches.iter().any(|a| {
            other
                .branches
                .iter()
                .any(|b| a.cond == b.cond && a.taken != b.taken)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Branch {
    pub cond: usize,
    pub taken: bool,
    /// Loops around the branch: it is inside `ctx.loops[depth - 1]`.
    pub depth: usize,
}

#[derive(Debug, Clone)]
pub struct LoopInfo {
    /// The loop statement's first line.
    pub header: Range<usize>,
    /// `N` of `for _ in range(N)`, when the loop variable or `N` names micro-batches.
    pub micro_factor: Option<String>,
}

/// What an `if` tests about the accumulation window.
#[derive(Debug, Clone)]
pub struct AccumTest {
    pub factor: String,
    /// The test is true on the step that updates the weights.
    pub boundary_when_true: bool,
}

#[derive(Debug)]
pub struct CallEvent {
    pub ctx: Ctx,
    pub kind: CallKind,
    pub call: Call,
}

#[derive(Debug)]
pub enum CallKind {
    /// `optimizer.step()` or `scaler.step(optimizer)`.
    Step {
        scaler: bool,
    },
    /// `loss.backward()` or `scaler.scale(loss).backward()`.
    Backward {
        loss: Range<usize>,
        loss_text: String,
        scaling: Scaling,
        scaler: bool,
    },
    /// `accelerator.backward(loss)`, `engine.backward(loss)`.
    FrameworkBackward,
    GradRescale,
    ZeroGrad,
    SchedulerStep,
    Clip {
        framework: bool,
    },
    Unscale,
}

/// How the micro-steps of a loop are told from its boundary step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Boundary {
    /// The boundary runs under this branch of the loop (`if (i + 1) % N == 0:`).
    Branch(Branch),
    /// The micro-steps are an inner loop; the boundary is what follows it in the same body.
    AfterInner(usize),
}

pub struct Assembled {
    pub loops: Vec<AccumLoop>,
    pub zero_grad_in_accumulate: Vec<Range<usize>>,
}

pub fn assemble(loops: &[LoopInfo], tests: &[Option<AccumTest>], calls: &[CallEvent]) -> Assembled {
    // Steps grouped by the loop and boundary they belong to, in source order.
    let mut groups: Vec<(usize, Boundary, String, Vec<&CallEvent>)> = Vec::new();
    for step in calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::Step { .. }))
    {
        let Some((loop_id, boundary, factor)) = boundary_of(step, loops, tests, calls) else {
            continue;
        };
        match groups
            .iter_mut()
            .find(|(l, b, _, _)| *l == loop_id && *b == boundary)
        {
            Some(g) => g.3.push(step),
            None => groups.push((loop_id, boundary, factor, vec![step])),
        }
    }
    let mut out = Assembled {
        loops: Vec::new(),
        zero_grad_in_accumulate: zero_grads_in_accumulate(calls),
    };
    for (loop_id, boundary, factor, steps) in groups {
        if let Some(lp) = build(loop_id, boundary, factor, &steps, loops, calls) {
            out.loops.push(lp);
        }
    }
    out
}

/// The accumulating loop a step belongs to, how its boundary is recognised, and the factor.
fn boundary_of(
    step: &CallEvent,
    loops: &[LoopInfo],
    tests: &[Option<AccumTest>],
    calls: &[CallEvent],
) -> Option<(usize, Boundary, String)> {
    // Under an accumulation test: the innermost branch whose test is true on the boundary.
    let guarded = step.ctx.branches.iter().rev().find_map(|b| {
        let t = tests.get(b.cond)?.as_ref()?;
        (t.boundary_when_true == b.taken && b.depth > 0).then(|| (*b, t.factor.clone()))
    });
    if let Some((branch, factor)) = guarded {
        let loop_id = *step.ctx.loops.get(branch.depth - 1)?;
        return Some((loop_id, Boundary::Branch(branch), factor));
    }
    // After an inner micro-batch loop that ran the backwards, in the same body as the step
    // (a loop body, or a function that makes one optimizer step).
    let depth = step.ctx.loops.len();
    let inner = calls
        .iter()
        .filter(|c| {
            matches!(
                c.kind,
                CallKind::Backward { .. } | CallKind::FrameworkBackward
            ) && c.ctx.scope == step.ctx.scope
                && c.ctx.loops.len() > depth
                && c.ctx.loops.starts_with(&step.ctx.loops)
                && c.call.span.start < step.call.span.start
        })
        .filter_map(|c| c.ctx.loops.get(depth).copied())
        .rfind(|l| {
            loops
                .get(*l)
                .is_some_and(|info| info.micro_factor.is_some())
        })?;
    let factor = loops.get(inner)?.micro_factor.clone()?;
    Some((inner, Boundary::AfterInner(inner), factor))
}

fn build(
    loop_id: usize,
    boundary: Boundary,
    factor: String,
    steps: &[&CallEvent],
    loops: &[LoopInfo],
    calls: &[CallEvent],
) -> Option<AccumLoop> {
    let first = steps.first()?;
    let scope = first.ctx.scope;
    // The loops around the steps, and the loop whose iterations are the micro-steps.
    let around = &first.ctx.loops;
    let micro_loop = loop_id;
    let header = loops.get(micro_loop)?.header.clone();
    // Calls in an arm of an `if` that excludes every step (a plain path beside an accumulating
    // one) belong to another loop shape.
    let with_steps = |ev: &CallEvent| steps.iter().any(|s| !s.ctx.exclusive(&ev.ctx));
    let in_micro = |ev: &CallEvent| {
        with_steps(ev)
            && ev.ctx.scope == scope
            && ev.ctx.loops.contains(&micro_loop)
            && match boundary {
                Boundary::Branch(b) => !ev.ctx.branches.contains(&b),
                Boundary::AfterInner(_) => true,
            }
    };
    // Runs on every micro-step: no branch between the micro loop and the call.
    let every_micro_step = |ev: &CallEvent| {
        in_micro(ev) && {
            let level = ev.ctx.loops.iter().position(|l| *l == micro_loop);
            level.is_some_and(|level| ev.ctx.branches.iter().all(|b| b.depth <= level))
        }
    };
    let on_boundary = |ev: &CallEvent| {
        with_steps(ev)
            && ev.ctx.scope == scope
            && match boundary {
                Boundary::Branch(b) => ev.ctx.branches.contains(&b),
                Boundary::AfterInner(inner) => {
                    ev.ctx.loops.starts_with(around)
                        && !ev.ctx.loops.contains(&inner)
                        && ev.call.span.start > header.start
                }
            }
    };
    // Another optimizer stepping on every iteration (a GAN's discriminator): the loop's
    // backwards cannot be told apart by optimizer, so nothing is judged.
    if calls
        .iter()
        .any(|c| matches!(c.kind, CallKind::Step { .. }) && every_micro_step(c))
    {
        return None;
    }
    let mut lp = AccumLoop {
        header: header.clone(),
        factor_is_simple: is_simple_factor(&factor),
        factor_value: None,
        factor,
        steps: steps.iter().map(|s| s.call.clone()).collect(),
        backwards: Vec::new(),
        grads_rescaled: false,
        zero_grads: Vec::new(),
        scheduler_steps: Vec::new(),
        clips: Vec::new(),
        clips_before_unscale: Vec::new(),
        unscales: Vec::new(),
        zero_grad_at_boundary: false,
        uses_scaler: steps
            .iter()
            .any(|s| matches!(s.kind, CallKind::Step { scaler: true })),
    };
    let mut any_backward = false;
    let mut boundary_clips: Vec<&CallEvent> = Vec::new();
    // Where a GradScaler acts: scaled backwards and scaler steps.
    let mut scaler_sites: Vec<&Ctx> = steps
        .iter()
        .filter(|s| matches!(s.kind, CallKind::Step { scaler: true }))
        .map(|s| &s.ctx)
        .collect();
    let mut unscales: Vec<&CallEvent> = Vec::new();
    for ev in calls {
        let micro = in_micro(ev);
        let every = every_micro_step(ev);
        match &ev.kind {
            CallKind::Backward {
                loss,
                loss_text,
                scaling,
                scaler,
            } if micro => {
                any_backward = true;
                lp.uses_scaler |= *scaler;
                if *scaler {
                    scaler_sites.push(&ev.ctx);
                }
                lp.backwards.push(Backward {
                    call: ev.call.span.clone(),
                    loss: loss.clone(),
                    loss_text: loss_text.clone(),
                    scaling: *scaling,
                });
            }
            CallKind::FrameworkBackward if micro => any_backward = true,
            CallKind::GradRescale if micro || on_boundary(ev) => lp.grads_rescaled = true,
            CallKind::ZeroGrad if every => lp.zero_grads.push(ev.call.clone()),
            CallKind::ZeroGrad if on_boundary(ev) => lp.zero_grad_at_boundary = true,
            CallKind::SchedulerStep if every => lp.scheduler_steps.push(ev.call.clone()),
            CallKind::Clip { .. } if every => lp.clips.push(ev.call.clone()),
            CallKind::Clip { framework: false } if on_boundary(ev) => boundary_clips.push(ev),
            CallKind::Unscale if on_boundary(ev) => {
                lp.unscales.push(ev.call.clone());
                unscales.push(ev);
            }
            _ => {}
        }
    }
    if !any_backward {
        return None;
    }
    // A clip on a path where the scaler scales and no unscale ran before it (an fp32 arm beside
    // an fp16 arm has no scaler to unscale).
    lp.clips_before_unscale = boundary_clips
        .into_iter()
        .filter(|c| {
            scaler_sites.iter().any(|s| !s.exclusive(&c.ctx))
                && !unscales
                    .iter()
                    .any(|u| !u.ctx.exclusive(&c.ctx) && u.call.span.start < c.call.span.start)
        })
        .map(|c| c.call.clone())
        .collect();
    Some(lp)
}

/// `zero_grad()` ahead of the backwards of an `accelerator.accumulate()` block: on the sync
/// step it runs and wipes the window before the last backward.
fn zero_grads_in_accumulate(calls: &[CallEvent]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for z in calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::ZeroGrad))
    {
        let Some((block, branches)) = z.ctx.accumulate else {
            continue;
        };
        if z.ctx.branches.len() != branches {
            continue;
        }
        // At the top of the block: ahead of every backward in it. A zero_grad between two
        // models' backward-step pairs belongs to the first.
        let backwards: Vec<usize> = calls
            .iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    CallKind::Backward { .. } | CallKind::FrameworkBackward
                ) && c.ctx.accumulate.is_some_and(|(b, _)| b == block)
            })
            .map(|c| c.call.span.start)
            .collect();
        if !backwards.is_empty() && backwards.iter().all(|b| *b > z.call.span.start) {
            out.push(z.call.span.clone());
        }
    }
    out
}

fn is_simple_factor(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}
