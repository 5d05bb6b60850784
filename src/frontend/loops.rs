//! The loop model: from the training calls the Python walk recorded (each with the loops and
//! branches around it, and the calls of the file's own helpers already inlined at their call
//! sites), find the loops that accumulate gradients and sort their calls into those that run on
//! every micro-step and those that run only at the optimizer boundary.
//!
//! A loop accumulates when its optimizer steps only on some iterations: under an accumulation test
//! (`(i + 1) % N == 0`, a boolean holding one, a counter or a window that is reset), after a
//! `continue` guard that skips the step, or after an inner `for micro in range(N)` loop that runs
//! the backwards. A function whose step is under such a test at its top level (Lightning's
//! `training_step` with manual optimization, a `train_step(batch, i)` called per batch) is itself
//! the micro-step.
//!
//! A call under an `if` whose test does not change between micro-steps (`if args.fp16:`,
//! `if grad_clip != 0.0:`) runs on every micro-step, in one arm or the other.

use crate::facts::{
    AccumLoop, Backward, Call, DoubleUnscale, Prov, ScaledClip, ScalerCall, ScalerOp,
    StepBeforeUpdate,
};
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

    /// This context, as seen from a call site: a helper's calls run inside the site's loops and
    /// branches.
    pub fn inside(&self, site: &Ctx) -> Ctx {
        let depth = site.loops.len();
        let mut branches = site.branches.clone();
        branches.extend(self.branches.iter().map(|b| Branch {
            depth: b.depth + depth,
            ..*b
        }));
        let mut loops = site.loops.clone();
        loops.extend(&self.loops);
        Ctx {
            scope: site.scope,
            loops,
            accumulate: self
                .accumulate
                .map(|(block, n)| (block, n + site.branches.len()))
                .or(site.accumulate),
            branches,
        }
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
    /// Names assigned inside the loop, its own variables included.
    pub assigned: Vec<String>,
    /// What a `for` loop iterates over, as written (`enumerate(train_loader)`).
    pub iterates: String,
}

/// What an `if` tests about the accumulation window.
#[derive(Debug, Clone)]
pub struct AccumTest {
    pub factor: String,
    /// The counter that is reset at the boundary, for a counter test.
    pub counter: Option<String>,
    /// The test is true on the step that updates the weights.
    pub boundary_when_true: bool,
}

/// An `if`'s condition.
#[derive(Debug, Clone, Default)]
pub struct Cond {
    pub accum: Option<AccumTest>,
    /// The names and attributes it reads; `None` when it calls something or reads a name that
    /// says it follows the window (`sync`, `last`, `step`): it may change between micro-steps.
    pub reads: Option<Vec<String>>,
}

/// A function of the file: the names assigned in it, its parameters included (a function that
/// is the micro-step gets them anew on every call).
#[derive(Debug, Clone, Default)]
pub struct ScopeInfo {
    pub assigned: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct CallEvent {
    pub ctx: Ctx,
    pub kind: CallKind,
    pub call: Call,
    /// Source order: the call's start, or for a helper's calls, the call site's start and the
    /// call's place in the helper.
    pub order: (usize, usize),
    /// A helper's call, seen at a call site of the helper.
    pub inlined: bool,
    /// For a helper's call, how many of its loops are the call site's.
    pub site_loops: usize,
}

#[derive(Debug, Clone)]
pub enum CallKind {
    /// `optimizer.step()` or `scaler.step(optimizer)`.
    Step {
        scaler: bool,
    },
    /// `loss.backward()`, `scaler.scale(loss).backward()`, or a backward that takes the loss
    /// and does not divide (`fabric.backward(loss)`, `self.manual_backward(loss)`).
    Backward {
        loss: Range<usize>,
        loss_text: String,
        prov: Prov,
        scaler: bool,
        in_helper: bool,
    },
    /// `accelerator.backward(loss)`, `engine.backward(loss)`.
    FrameworkBackward,
    GradRescale,
    ZeroGrad,
    SchedulerStep,
    Clip {
        framework: bool,
    },
    /// `scaler.unscale_(optimizer)`; `key` is the call as written without spaces.
    Unscale {
        key: String,
    },
    /// `scaler.update()`.
    ScalerUpdate,
}

/// The iterations that are micro-steps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Micro {
    Loop(usize),
    /// The function body runs once per micro-step.
    Function,
}

/// How the micro-steps of a loop are told from its boundary step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Boundary {
    /// The boundary runs under this branch (`if (i + 1) % N == 0:`).
    Branch(Branch),
    /// The micro-steps are an inner loop; the boundary is what follows it in the same body.
    AfterInner(usize),
}

/// The accumulation factor as written, and the counter its test resets.
type Factor = (String, Option<String>);

/// What the walk recorded, for the assembly.
pub struct Recorded<'a> {
    /// The file writes `unscale_` somewhere (in code or not).
    pub unscales: bool,
    pub loops: &'a [LoopInfo],
    pub conds: &'a [Cond],
    pub scopes: &'a [ScopeInfo],
    pub calls: &'a [CallEvent],
}

pub struct Assembled {
    pub loops: Vec<AccumLoop>,
    pub zero_grad_in_accumulate: Vec<Range<usize>>,
    pub clips_in_accumulate: Vec<Range<usize>>,
    pub clips_before_unscale: Vec<ScaledClip>,
    pub double_unscales: Vec<DoubleUnscale>,
    pub steps_before_update: Vec<StepBeforeUpdate>,
}

pub fn assemble(rec: &Recorded) -> Assembled {
    // Steps grouped by the loop and boundary they belong to, in source order.
    let mut groups: Vec<(usize, Micro, Boundary, Factor, Vec<&CallEvent>)> = Vec::new();
    for step in rec
        .calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::Step { .. }))
    {
        let Some((micro, boundary, factor)) = boundary_of(step, rec) else {
            continue;
        };
        let scope = step.ctx.scope;
        match groups
            .iter_mut()
            .find(|(s, m, b, _, _)| *s == scope && *m == micro && *b == boundary)
        {
            Some(g) => g.4.push(step),
            None => groups.push((scope, micro, boundary, factor, vec![step])),
        }
    }
    let mut out = Assembled {
        loops: Vec::new(),
        zero_grad_in_accumulate: zero_grads_in_accumulate(rec.calls),
        clips_in_accumulate: clips_in_accumulate(rec),
        clips_before_unscale: clips_before_unscale(rec.calls, rec.unscales),
        double_unscales: if trains(rec.calls) {
            double_unscales(rec.calls)
        } else {
            Vec::new()
        },
        steps_before_update: if trains(rec.calls) {
            steps_before_update(rec)
        } else {
            Vec::new()
        },
    };
    for (_, micro, boundary, factor, steps) in groups {
        // A helper that accumulates by itself is judged where it is written, once.
        if steps.iter().all(|s| s.inlined) && micro_inside_helper(micro, &steps) {
            continue;
        }
        if let Some(lp) = build(micro, boundary, factor, &steps, rec) {
            out.loops.push(lp);
        }
    }
    out
}

/// The micro-steps of a helper's steps are a loop of the helper's own.
fn micro_inside_helper(micro: Micro, steps: &[&CallEvent]) -> bool {
    match micro {
        Micro::Function => false,
        Micro::Loop(l) => steps
            .iter()
            .all(|s| !s.ctx.loops.iter().take(s.site_loops).any(|x| *x == l)),
    }
}

/// The micro-steps a step belongs to, how its boundary is recognised, and the factor.
fn boundary_of(step: &CallEvent, rec: &Recorded) -> Option<(Micro, Boundary, Factor)> {
    // Under an accumulation test: the innermost branch whose test is true on the boundary.
    let guarded = step.ctx.branches.iter().rev().find_map(|b| {
        let t = rec.conds.get(b.cond)?.accum.as_ref()?;
        (t.boundary_when_true == b.taken).then(|| (*b, (t.factor.clone(), t.counter.clone())))
    });
    if let Some((branch, factor)) = guarded {
        let micro = match branch.depth {
            // At a function's top level: the function is the micro-step.
            0 if step.ctx.scope != 0 => Micro::Function,
            0 => return None,
            d => Micro::Loop(*step.ctx.loops.get(d - 1)?),
        };
        return Some((micro, Boundary::Branch(branch), factor));
    }
    // After an inner micro-batch loop that ran the backwards, in the same body as the step
    // (a loop body, or a function that makes one optimizer step).
    let depth = step.ctx.loops.len();
    let inner = rec
        .calls
        .iter()
        .filter(|c| {
            matches!(
                c.kind,
                CallKind::Backward { .. } | CallKind::FrameworkBackward
            ) && c.ctx.scope == step.ctx.scope
                && c.ctx.loops.len() > depth
                && c.ctx.loops.starts_with(&step.ctx.loops)
                && c.order < step.order
        })
        .filter_map(|c| c.ctx.loops.get(depth).copied())
        .rfind(|l| {
            rec.loops
                .get(*l)
                .is_some_and(|info| info.micro_factor.is_some())
        })?;
    let factor = rec.loops.get(inner)?.micro_factor.clone()?;
    Some((
        Micro::Loop(inner),
        Boundary::AfterInner(inner),
        (factor, None),
    ))
}

fn build(
    micro: Micro,
    boundary: Boundary,
    (factor, counter): Factor,
    steps: &[&CallEvent],
    rec: &Recorded,
) -> Option<AccumLoop> {
    let first = steps.first()?;
    let scope = first.ctx.scope;
    let around = &first.ctx.loops;
    let header = match micro {
        Micro::Loop(l) => rec.loops.get(l)?.header.clone(),
        Micro::Function => first.call.span.clone(),
    };
    // The names that may change between micro-steps.
    let changing: &[String] = match micro {
        Micro::Loop(l) => &rec.loops.get(l)?.assigned,
        Micro::Function => &rec.scopes.get(scope)?.assigned,
    };
    // A test that reads nothing that changes between micro-steps takes the same arm on each.
    let steady = |b: &Branch| {
        rec.conds.get(b.cond).is_some_and(|c| {
            c.accum.is_none()
                && c.reads
                    .as_ref()
                    .is_some_and(|r| r.iter().all(|n| !changing.contains(n)))
        })
    };
    // Calls in an arm of an `if` that excludes every step (a plain path beside an accumulating
    // one) belong to another loop shape.
    let with_steps = |ev: &CallEvent| steps.iter().any(|s| !s.ctx.exclusive(&ev.ctx));
    // Where the micro-steps begin in a call's context: the branches inside them.
    let level = |ev: &CallEvent| match micro {
        Micro::Loop(l) => ev.ctx.loops.iter().position(|x| *x == l).map(|p| p + 1),
        Micro::Function => Some(0),
    };
    let in_micro = |ev: &CallEvent| {
        with_steps(ev)
            && ev.ctx.scope == scope
            && level(ev).is_some()
            && match boundary {
                Boundary::Branch(b) => !ev.ctx.branches.contains(&b),
                Boundary::AfterInner(_) => true,
            }
    };
    // Runs on every micro-step: no branch inside the micro-step but steady ones.
    let every_micro_step = |ev: &CallEvent| {
        in_micro(ev)
            && level(ev)
                .is_some_and(|level| ev.ctx.branches.iter().all(|b| b.depth < level || steady(b)))
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
    if rec
        .calls
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
        counter,
        steps: steps.iter().map(|s| s.call.clone()).collect(),
        backwards: Vec::new(),
        grads_rescaled: false,
        zero_grads: Vec::new(),
        scheduler_steps: Vec::new(),
        clips: Vec::new(),
        unscales: Vec::new(),
        boundary_scheduler_steps: Vec::new(),
        iterates: match (micro, boundary) {
            (Micro::Loop(l), Boundary::Branch(_)) => rec.loops.get(l).map(|i| i.iterates.clone()),
            _ => None,
        },
        micro_sized_schedules: Vec::new(),
        scaler_micro_calls: Vec::new(),
        update_at_boundary: false,
        clip_at_boundary: false,
        zero_grad_at_boundary: false,
        uses_scaler: steps
            .iter()
            .any(|s| matches!(s.kind, CallKind::Step { scaler: true })),
    };
    // A backward under a test, whose gradients are zeroed right after it in the same block (a
    // probe, a fake pass), never reaches the step.
    let cancelled = |ev: &CallEvent| {
        rec.calls.iter().any(|z| {
            matches!(z.kind, CallKind::ZeroGrad)
                && z.order > ev.order
                && z.ctx.scope == ev.ctx.scope
                && z.ctx.loops == ev.ctx.loops
                && ev.ctx.branches.starts_with(&z.ctx.branches)
                && !rec.calls.iter().any(|s| {
                    matches!(s.kind, CallKind::Step { .. })
                        && s.order > ev.order
                        && s.order < z.order
                })
        })
    };
    let mut any_backward = false;
    for ev in rec.calls {
        let micro = in_micro(ev);
        let every = every_micro_step(ev);
        match &ev.kind {
            CallKind::Backward {
                loss,
                loss_text,
                prov,
                scaler,
                in_helper,
            } if micro && (every || !cancelled(ev)) => {
                any_backward = true;
                lp.uses_scaler |= *scaler;
                // A backward inside a branch that only some micro-steps take (a NaN guard, a
                // warm-up) is still the window's backward; the same backward reached through
                // two call sites is one.
                if !lp.backwards.iter().any(|b| b.call == ev.call.span) {
                    lp.backwards.push(Backward {
                        call: ev.call.span.clone(),
                        loss: loss.clone(),
                        loss_text: loss_text.clone(),
                        prov: prov.clone(),
                        in_helper: *in_helper,
                    });
                }
            }
            CallKind::FrameworkBackward if micro => any_backward = true,
            // Rescaled anywhere in the loop: in either arm of the boundary test too.
            CallKind::GradRescale if ev.ctx.scope == scope && level(ev).is_some() => {
                lp.grads_rescaled = true
            }
            CallKind::ZeroGrad if every => lp.zero_grads.push(ev.call.clone()),
            CallKind::ZeroGrad if on_boundary(ev) => lp.zero_grad_at_boundary = true,
            CallKind::SchedulerStep if every => lp.scheduler_steps.push(ev.call.clone()),
            CallKind::SchedulerStep if on_boundary(ev) => {
                lp.boundary_scheduler_steps.push(ev.call.clone())
            }
            CallKind::Clip { .. } if every => lp.clips.push(ev.call.clone()),
            CallKind::Clip { .. } if on_boundary(ev) => lp.clip_at_boundary = true,
            CallKind::Unscale { .. } if on_boundary(ev) => lp.unscales.push(ev.call.clone()),
            CallKind::Unscale { .. } if every => lp.scaler_micro_calls.push(ScalerCall {
                op: ScalerOp::Unscale,
                call: ev.call.clone(),
            }),
            CallKind::ScalerUpdate if on_boundary(ev) => lp.update_at_boundary = true,
            CallKind::ScalerUpdate if every => lp.scaler_micro_calls.push(ScalerCall {
                op: ScalerOp::Update,
                call: ev.call.clone(),
            }),
            _ => {}
        }
    }
    if !any_backward {
        return None;
    }
    dedup_calls(&mut lp.zero_grads);
    dedup_calls(&mut lp.scheduler_steps);
    dedup_calls(&mut lp.clips);
    dedup_calls(&mut lp.boundary_scheduler_steps);
    let mut seen: Vec<Range<usize>> = Vec::new();
    lp.scaler_micro_calls.retain(|c| {
        let new = !seen.contains(&c.call.span);
        seen.push(c.call.span.clone());
        new
    });
    Some(lp)
}

/// A helper reached from two call sites records its calls twice: one call, one finding.
fn dedup_calls(calls: &mut Vec<Call>) {
    let mut seen: Vec<Range<usize>> = Vec::new();
    calls.retain(|c| {
        let new = !seen.contains(&c.span);
        seen.push(c.span.clone());
        new
    });
}

/// Clips between a `GradScaler`'s scaled backward and its step, with no `unscale_` between: in
/// any training loop, accumulating or not. An fp32 arm beside an fp16 arm has no scaler to
/// unscale, and apex's `amp.scale_loss` unscales by itself.
fn clips_before_unscale(calls: &[CallEvent], file_unscales: bool) -> Vec<ScaledClip> {
    let mut out: Vec<ScaledClip> = Vec::new();
    for clip in calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::Clip { framework: false }))
    {
        let together =
            |ev: &CallEvent| ev.ctx.scope == clip.ctx.scope && !ev.ctx.exclusive(&clip.ctx);
        // The scaler's step that follows in the same iteration.
        let Some(step) = calls.iter().find(|s| {
            matches!(s.kind, CallKind::Step { scaler: true })
                && together(s)
                && s.order > clip.order
                && s.ctx.loops == clip.ctx.loops[..s.ctx.loops.len().min(clip.ctx.loops.len())]
        }) else {
            continue;
        };
        // A scaled backward before the clip, in the same iteration or an inner loop of it; or,
        // in a function that only steps (the backward is elsewhere), a file that never writes
        // `unscale_`.
        let scaled_backward = calls.iter().any(|b| {
            matches!(b.kind, CallKind::Backward { scaler: true, .. })
                && together(b)
                && b.order < clip.order
                && b.ctx.loops.starts_with(&step.ctx.loops)
        }) || (!calls.iter().any(|b| {
            matches!(
                b.kind,
                CallKind::Backward { .. } | CallKind::FrameworkBackward
            ) && b.ctx.scope == clip.ctx.scope
        }) && !file_unscales);
        let unscaled = calls.iter().any(|u| {
            matches!(u.kind, CallKind::Unscale { .. })
                && together(u)
                && u.order < clip.order
                && u.ctx.loops.starts_with(&step.ctx.loops)
        });
        if scaled_backward && !unscaled && !out.iter().any(|c| c.clip.span == clip.call.span) {
            out.push(ScaledClip {
                clip: clip.call.clone(),
                step: step.call.span.clone(),
            });
        }
    }
    out
}

/// The file's walk saw a backward and an optimizer step: what the literal prefilter asks of
/// every file whose training calls are read.
pub fn trains(calls: &[CallEvent]) -> bool {
    calls
        .iter()
        .any(|c| matches!(c.kind, CallKind::Step { .. }))
        && calls.iter().any(|c| {
            matches!(
                c.kind,
                CallKind::Backward { .. } | CallKind::FrameworkBackward
            )
        })
}

/// `scaler.unscale_(optimizer)` twice in one iteration, for the same optimizer, with no
/// `scaler.update()` between: whenever one runs the other does too (one's branches are a prefix
/// of the other's), and `unscale_` may run once per step.
fn double_unscales(calls: &[CallEvent]) -> Vec<DoubleUnscale> {
    let mut out: Vec<DoubleUnscale> = Vec::new();
    for (i, a) in calls.iter().enumerate() {
        let CallKind::Unscale { key } = &a.kind else {
            continue;
        };
        let Some(b) = calls.iter().skip(i + 1).find(|b| {
            matches!(&b.kind, CallKind::Unscale { key: k } if k == key)
                && b.call.span != a.call.span
                && b.order > a.order
                && b.ctx.scope == a.ctx.scope
                && b.ctx.loops == a.ctx.loops
                && (a.ctx.branches.starts_with(&b.ctx.branches)
                    || b.ctx.branches.starts_with(&a.ctx.branches))
        }) else {
            continue;
        };
        // An update between them starts a new step.
        let updated = calls.iter().any(|u| {
            matches!(u.kind, CallKind::ScalerUpdate)
                && u.ctx.scope == a.ctx.scope
                && u.order > a.order
                && u.order < b.order
        });
        if !updated && !out.iter().any(|d| d.second.span == b.call.span) {
            out.push(DoubleUnscale {
                first: a.call.span.clone(),
                second: b.call.clone(),
            });
        }
    }
    out
}

/// `scaler.step(optimizer)` that runs on every iteration of a loop body whose only
/// `scaler.update()` sits under an accumulation test the step is not under: GradScaler allows
/// one `step` per `update` and raises on the second micro-step.
fn steps_before_update(rec: &Recorded) -> Vec<StepBeforeUpdate> {
    let calls = rec.calls;
    let mut out: Vec<StepBeforeUpdate> = Vec::new();
    let same_body = |a: &CallEvent, b: &CallEvent| {
        a.ctx.scope == b.ctx.scope && a.ctx.loops == b.ctx.loops && !a.ctx.loops.is_empty()
    };
    for step in calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::Step { scaler: true }))
    {
        let updates: Vec<&CallEvent> = calls
            .iter()
            .filter(|u| matches!(u.kind, CallKind::ScalerUpdate) && same_body(u, step))
            .collect();
        // An update that runs whenever the step does: the pair is whole.
        if updates
            .iter()
            .any(|u| step.ctx.branches.starts_with(&u.ctx.branches))
        {
            continue;
        }
        // The update runs inside the step's branches, under a test that is true on the boundary.
        let boundary = updates.iter().find_map(|u| {
            let rest = u.ctx.branches.strip_prefix(step.ctx.branches.as_slice())?;
            let factor = rest.iter().find_map(|b| {
                let t = rec.conds.get(b.cond)?.accum.as_ref()?;
                (t.boundary_when_true == b.taken).then(|| t.factor.clone())
            })?;
            Some((*u, factor))
        });
        let Some((update, factor)) = boundary else {
            continue;
        };
        if !out.iter().any(|d| d.step.span == step.call.span) {
            out.push(StepBeforeUpdate {
                step: step.call.clone(),
                update: update.call.clone(),
                factor,
            });
        }
    }
    out
}

/// `accelerator.clip_grad_norm_` in an `accelerator.accumulate()` block with no test between
/// the block and the clip but steady ones: it runs on every micro-step (the guard is
/// `if accelerator.sync_gradients:`).
fn clips_in_accumulate(rec: &Recorded) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for clip in rec
        .calls
        .iter()
        .filter(|c| matches!(c.kind, CallKind::Clip { framework: true }))
    {
        let Some((_, branches)) = clip.ctx.accumulate else {
            continue;
        };
        let guarded = clip.ctx.branches.iter().skip(branches).any(|b| {
            rec.conds
                .get(b.cond)
                .is_none_or(|c| c.accum.is_some() || c.reads.is_none())
        });
        if !guarded && !out.contains(&clip.call.span) {
            out.push(clip.call.span.clone());
        }
    }
    out
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
        let backwards: Vec<(usize, usize)> = calls
            .iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    CallKind::Backward { .. } | CallKind::FrameworkBackward
                ) && c.ctx.accumulate.is_some_and(|(b, _)| b == block)
            })
            .map(|c| c.order)
            .collect();
        if !backwards.is_empty()
            && backwards.iter().all(|b| *b > z.order)
            && !out.contains(&z.call.span)
        {
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
