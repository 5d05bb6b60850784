//! The optimizer-step protocol, checked on the calls of each path in the order they run.
//!
//! Within one window (the micro-steps one optimizer step applies): every backward's gradients
//! reach the step (no `zero_grad` between a backward and the step), clips and `unscale_` come
//! after the window's last backward, the learning-rate schedule and the loss scale advance once
//! per step. Within one update of a `GradScaler`: one `scaler.step`, at most one `unscale_` per
//! optimizer, and any clip of scaled gradients after the `unscale_`.

use super::paths::{Item, Paths, Runs, Valuation};
use super::windows::{Boundary, Window};
use super::{is_simple_factor, CallKind, Recorded};
use crate::facts::{AccumLoop, Backward, Call, MisstepKind as Misstep};
use std::ops::Range;

/// A misstep, where it was seen and what a fix needs.
#[derive(Debug, Clone)]
pub struct Found {
    pub misstep: Misstep,
    /// The call, as an index into the recorded calls.
    pub ev: usize,
    pub call: Call,
    /// What the path assumes about the tests around the call, as written.
    pub path: Vec<(String, bool)>,
    /// The window's accumulation factor, as written.
    pub factor: Option<String>,
    /// The call it relates to: the window's step; the first `unscale_`; the boundary's update.
    pub related: Option<Range<usize>>,
    /// The window is accelerate's `accumulate()`.
    pub accelerate: bool,
    /// Seen on a micro-step that does not step (rather than on the one that does).
    pub micro: bool,
    /// The calls that run on the iteration that steps, on this path, in order (indices into
    /// the recorded calls).
    pub boundary: Vec<usize>,
    /// The window's steps (indices into the recorded calls): what tells one window from another.
    pub steps: Vec<usize>,
    /// The tests of the window that take one arm on every micro-step (steady tests and guards on
    /// the factor): a call moved to the boundary keeps them.
    pub steady: Vec<usize>,
    /// The window's kind.
    pub after_inner: Option<usize>,
}

pub struct Judged {
    pub missteps: Vec<Found>,
    pub accum_loop: Option<AccumLoop>,
}

pub fn judge(rec: &Recorded, w: &Window) -> Judged {
    let p = Paths::new(rec, w);
    // A factor known to be 1 makes every micro-step the boundary: nothing accumulates.
    let accumulating =
        w.boundary != Boundary::Every && !w.factor.as_deref().is_some_and(|f| rec.single_factor(f));
    let mut out = Judged {
        missteps: Vec::new(),
        accum_loop: None,
    };
    let mut backwards: Vec<usize> = Vec::new();
    let mut boundary_schedulers: Vec<usize> = Vec::new();
    let mut micro_schedulers: Vec<usize> = Vec::new();
    let mut any_path = false;
    let is_step = |it: &Item| matches!(rec.calls[it.ev].kind, CallKind::Step { .. });
    for v in p.valuations() {
        let mut t = p.trace(v, accumulating);
        if !w.backward_elsewhere && !t.iter().any(|it| rec.calls[it.ev].kind.is_backward()) {
            continue;
        }
        if accumulating {
            // Accumulates on this path: no step on every micro-step but those of another
            // optimizer, which are set aside with what they apply, and a step on the iteration
            // that steps.
            let micro_step = t
                .iter()
                .any(|it| !it.boundary && is_step(it) && it.runs == Runs::Always);
            if micro_step {
                // What is left accumulates only if a backward is left on the micro-steps.
                match without_other_optimizers(rec, &p, &t) {
                    Some(kept)
                        if kept
                            .iter()
                            .any(|it| !it.boundary && rec.calls[it.ev].kind.is_backward()) =>
                    {
                        t = kept
                    }
                    _ => continue,
                }
            }
            let boundary_step = t.iter().any(|it| it.boundary && is_step(it));
            if !boundary_step {
                continue;
            }
            any_path = true;
            for it in &t {
                let ev = &rec.calls[it.ev];
                match ev.kind {
                    CallKind::Backward { .. }
                        if !backwards.contains(&it.ev)
                            && (it.runs == Runs::Always || !cancelled(rec, it.ev)) =>
                    {
                        backwards.push(it.ev)
                    }
                    CallKind::SchedulerStep { .. } if it.boundary => {
                        boundary_schedulers.push(it.ev)
                    }
                    CallKind::SchedulerStep { .. } => micro_schedulers.push(it.ev),
                    _ => {}
                }
            }
            window_checks(rec, &p, v, &t, &mut out.missteps);
        } else if t.iter().any(|it| is_step(it) && it.runs == Runs::Always) {
            step_checks(rec, &p, v, &t, &mut out.missteps);
        } else {
            continue;
        }
        update_checks(rec, &p, v, &t, &mut out.missteps);
    }
    if accumulating && any_path {
        out.accum_loop = accum_loop(rec, w, &p, &backwards, {
            boundary_schedulers.retain(|s| !micro_schedulers.contains(s));
            boundary_schedulers.dedup();
            &boundary_schedulers
        });
    }
    out
}

/// The loop as the rules that read losses and schedules see it.
fn accum_loop(
    rec: &Recorded,
    w: &Window,
    p: &Paths,
    backwards: &[usize],
    boundary_schedulers: &[usize],
) -> Option<AccumLoop> {
    let factor = w.factor.clone()?;
    let calls = |ids: &[usize]| -> Vec<Call> {
        let mut out: Vec<Call> = Vec::new();
        for i in ids {
            let c = &rec.calls[*i].call;
            if !out.iter().any(|o| o.span == c.span) {
                out.push(c.clone());
            }
        }
        out
    };
    let mut backs: Vec<Backward> = Vec::new();
    if w.boundary != Boundary::Sync {
        for i in backwards {
            if let CallKind::Backward {
                loss,
                loss_text,
                prov,
                in_helper,
                ..
            } = &rec.calls[*i].kind
            {
                // A helper's own loss is reported where its backward is written.
                let call = match in_helper {
                    true => rec.calls[*i].origin.clone(),
                    false => rec.calls[*i].call.span.clone(),
                };
                if !backs.iter().any(|b| b.call == call) {
                    backs.push(Backward {
                        origin: rec.calls[*i].origin.clone(),
                        depth: rec.calls[*i].depth,
                        call,
                        loss: loss.clone(),
                        loss_text: loss_text.clone(),
                        prov: prov.clone(),
                        in_helper: *in_helper,
                    });
                }
            }
        }
    }
    // `self.n` read where the step is taken, in a helper the loop calls, may be another
    // object's attribute (a callback's): it cannot be written where the backward is.
    let factor_here = !factor.starts_with("self.")
        || backs.iter().all(|b| {
            w.steps
                .iter()
                .all(|i| rec.calls.get(*i).is_none_or(|c| c.depth == b.depth))
        });
    Some(AccumLoop {
        header: w.header.clone(),
        scope: w.scope,
        factor_is_simple: is_simple_factor(&factor),
        factor_here,
        factor_value: None,
        factor,
        counter: w.counter.clone(),
        steps: calls(&w.steps),
        backwards: backs,
        grads_rescaled: p
            .events
            .iter()
            .any(|e| matches!(rec.calls[*e].kind, CallKind::GradRescale)),
        boundary_scheduler_steps: calls(boundary_schedulers),
        iterates: match (&w.boundary, p.loop_micro()) {
            (Boundary::Test | Boundary::Sync, Some(l)) => {
                rec.loops.get(l).map(|i| i.iterates.clone())
            }
            _ => None,
        },
        updates: match &w.boundary {
            Boundary::AfterInner(_) => w
                .around
                .last()
                .and_then(|l| rec.loops.get(*l))
                .map(|i| i.iterates.clone()),
            _ => None,
        },
        micro_sized_schedules: Vec::new(),
        uses_scaler: p.events.iter().any(|e| {
            matches!(
                rec.calls[*e].kind,
                CallKind::Step { scaler: true } | CallKind::Backward { scaler: true, .. }
            )
        }),
        accelerate: w.boundary == Boundary::Sync,
    })
}

fn found(
    rec: &Recorded,
    p: &Paths,
    v: Valuation,
    t: &[Item],
    misstep: Misstep,
    at: &Item,
) -> Found {
    // The first iteration on this path that steps.
    let stepping = t
        .iter()
        .find(|it| it.boundary && matches!(rec.calls[it.ev].kind, CallKind::Step { .. }))
        .map(|it| it.iter);
    // What runs there and on no other micro-step.
    let boundary: Vec<usize> = t
        .iter()
        .filter(|it| Some(it.iter) == stepping)
        .map(|it| it.ev)
        .filter(|ev| !t.iter().any(|o| o.ev == *ev && !o.boundary))
        .collect();
    let step = p
        .window
        .steps
        .first()
        .map(|s| rec.calls[*s].call.span.clone());
    Found {
        misstep,
        ev: at.ev,
        call: rec.calls[at.ev].call.clone(),
        path: p.assumptions(at.ev, v),
        factor: p.window.factor.clone(),
        related: step,
        accelerate: p.window.boundary == Boundary::Sync,
        micro: !at.boundary,
        boundary,
        steps: p.window.steps.clone(),
        steady: p.kept_tests(),
        after_inner: match p.window.boundary {
            Boundary::AfterInner(l) => Some(l),
            _ => None,
        },
    }
}

fn push(out: &mut Vec<Found>, f: Found) {
    if !out
        .iter()
        .any(|g| g.misstep == f.misstep && g.call.span == f.call.span)
    {
        out.push(f);
    }
}

/// The checks that need a window of several micro-steps.
fn window_checks(rec: &Recorded, p: &Paths, v: Valuation, t: &[Item], out: &mut Vec<Found>) {
    let kind = |i: usize| &rec.calls[t[i].ev].kind;
    let step_between =
        |a: usize, b: usize| (a + 1..b).any(|k| matches!(kind(k), CallKind::Step { .. }));
    let backward = |j: usize, scaled: bool| {
        let k = kind(j);
        if scaled {
            k.is_scaled_backward()
        } else {
            k.is_backward()
        }
    };
    // Between two backwards of one window: one before it and one after it, no step between.
    let inside_window = |i: usize, scaled: bool| {
        (0..i)
            .rev()
            .find(|j| backward(*j, scaled))
            .is_some_and(|j| !step_between(j, i))
            && (i + 1..t.len())
                .find(|j| backward(*j, scaled))
                .is_some_and(|j| !step_between(i, j))
    };
    for (i, it) in t.iter().enumerate() {
        if it.runs != Runs::Always {
            continue;
        }
        let misstep = match kind(i) {
            CallKind::ZeroGrad { .. } => {
                let wipes = (0..i)
                    .rev()
                    .find(|j| kind(*j).is_backward())
                    .is_some_and(|j| !step_between(j, i))
                    && (i + 1..t.len()).any(|k| matches!(kind(k), CallKind::Step { .. }));
                wipes.then_some(Misstep::ZeroGradInWindow)
            }
            CallKind::Clip { .. } => inside_window(i, false).then_some(Misstep::ClipInWindow),
            CallKind::SchedulerStep { .. } => (!it.boundary).then_some(Misstep::SchedulerInWindow),
            // The scaler scales whatever backward runs (a framework's too).
            CallKind::Unscale { .. } => inside_window(i, false).then_some(Misstep::UnscaleInWindow),
            CallKind::ScalerUpdate => inside_window(i, false).then_some(Misstep::UpdateInWindow),
            _ => None,
        };
        // Under DeepSpeed the engine zeroes, clips and steps; accelerate's calls do nothing.
        let engine_owned = p.window.boundary == Boundary::Sync
            && rec.accelerate_deepspeed
            && matches!(
                misstep,
                Some(Misstep::ZeroGradInWindow | Misstep::ClipInWindow)
            );
        if let (Some(m), false) = (misstep, engine_owned) {
            push(out, found(rec, p, v, t, m, it));
        }
    }
}

/// The checks of a loop that steps on every iteration.
fn step_checks(rec: &Recorded, p: &Paths, v: Valuation, t: &[Item], out: &mut Vec<Found>) {
    // `scaler.step` on every iteration while `update()` runs only on some (under an
    // accumulation test): the second step before an update raises.
    let kind = |i: usize| &rec.calls[t[i].ev].kind;
    for (i, it) in t.iter().enumerate() {
        if !matches!(kind(i), CallKind::Step { scaler: true }) || it.runs != Runs::Always {
            continue;
        }
        let Some(next) = (i + 1..t.len()).find(|k| t[*k].ev == it.ev) else {
            continue;
        };
        let updates: Vec<&Item> = t[i + 1..next]
            .iter()
            .filter(|u| matches!(rec.calls[u.ev].kind, CallKind::ScalerUpdate))
            .collect();
        if updates.iter().any(|u| u.runs == Runs::Always) {
            continue;
        }
        let Some(update) = updates
            .iter()
            .find(|u| under_accumulation_test(rec, p, u.ev))
        else {
            continue;
        };
        let mut f = found(rec, p, v, t, Misstep::StepBeforeUpdate, it);
        f.related = Some(rec.calls[update.ev].call.span.clone());
        f.factor = accumulation_factor(rec, p, update.ev);
        push(out, f);
    }
}

/// The call sits under an accumulation test inside the iteration.
fn under_accumulation_test(rec: &Recorded, p: &Paths, ev: usize) -> bool {
    accumulation_factor(rec, p, ev).is_some()
}

fn accumulation_factor(rec: &Recorded, p: &Paths, ev: usize) -> Option<String> {
    p.inner_branches(ev).find_map(|b| {
        let t = rec.conds.get(b.cond)?.accum.as_ref()?;
        (t.boundary_when_true == b.taken).then(|| t.factor.clone())
    })
}

/// The checks within one update of a `GradScaler`, on every kind of window: a second `unscale_`
/// of one optimizer, and a clip of gradients still scaled.
fn update_checks(rec: &Recorded, p: &Paths, v: Valuation, t: &[Item], out: &mut Vec<Found>) {
    let kind = |i: usize| &rec.calls[t[i].ev].kind;
    // Where the scaler's cycle restarts: after its step or update.
    let cycle_start = |i: usize| {
        (0..i)
            .rev()
            .find(|k| {
                matches!(
                    kind(*k),
                    CallKind::ScalerUpdate | CallKind::Step { scaler: true }
                )
            })
            .map_or(0, |k| k + 1)
    };
    for (i, it) in t.iter().enumerate() {
        match kind(i) {
            CallKind::Unscale { key } if it.runs == Runs::Always => {
                let start = (0..i)
                    .rev()
                    .find(|k| matches!(kind(*k), CallKind::ScalerUpdate))
                    .map_or(0, |k| k + 1);
                // The first may run only sometimes: whenever it does, this one follows it.
                let first = (start..i).find(|k| {
                    t[*k].ev != it.ev
                        && t[*k].iter == it.iter
                        && matches!(kind(*k), CallKind::Unscale { key: other } if other == key)
                });
                if let Some(first) = first {
                    let mut f = found(rec, p, v, t, Misstep::DoubleUnscale, it);
                    f.related = Some(rec.calls[t[first].ev].call.span.clone());
                    push(out, f);
                }
            }
            CallKind::ScalerUpdate => {
                if let Some(first) = earlier_update(rec, t, i) {
                    let mut f = found(rec, p, v, t, Misstep::DoubleUpdate, it);
                    f.related = Some(rec.calls[t[first].ev].call.span.clone());
                    push(out, f);
                }
            }
            // A program that unscales only under a steady test (`if cfg.fp16:`) runs its scaler
            // only then: on a path where it does not unscale, nothing is scaled.
            CallKind::Clip { framework: false } if scaler_off(rec, p, v) => {}
            // A clip handed the scaler's current scale (`max_norm * scaler.get_scale()`, or
            // `scale=scaler.get_scale()` to a helper) compares scaled values with a scaled
            // threshold.
            CallKind::Clip { framework: false } if reads_scale(rec, t[i].ev) => {}
            CallKind::Clip { framework: false } => {
                let start = cycle_start(i);
                let scaled =
                    p.window.backward_elsewhere || (start..i).any(|k| kind(k).is_scaled_backward());
                let unscaled = (start..i).any(|k| matches!(kind(k), CallKind::Unscale { .. }));
                let steps = (i + 1..t.len())
                    .find(|k| matches!(kind(*k), CallKind::Step { .. } | CallKind::ScalerUpdate))
                    .is_some_and(|k| matches!(kind(k), CallKind::Step { scaler: true }));
                if scaled && !unscaled && steps {
                    let mut f = found(rec, p, v, t, Misstep::ClipBeforeUnscale, it);
                    f.related = (i + 1..t.len())
                        .find(|k| matches!(kind(*k), CallKind::Step { scaler: true }))
                        .map(|k| rec.calls[t[k].ev].call.span.clone());
                    push(out, f);
                }
            }
            _ => {}
        }
    }
}

/// The trace without what another optimizer, stepped on every micro-step, runs for its own
/// step (a GAN's discriminator: its zero_grad, backward, clip, step and schedule), when the
/// window's optimizers and the other's are known by name; `None` when they are not, or when a
/// GradScaler serves them (its updates belong to both).
fn without_other_optimizers(rec: &Recorded, p: &Paths, t: &[Item]) -> Option<Vec<Item>> {
    let own: Vec<&str> = p
        .window
        .steps
        .iter()
        .map(|s| optimizer_of(rec, *s))
        .collect::<Option<_>>()?;
    let kind = |k: usize| &rec.calls[t[k].ev].kind;
    let mut others: Vec<&str> = Vec::new();
    for it in t {
        match rec.calls[it.ev].kind {
            CallKind::Step { scaler: true } | CallKind::Unscale { .. } | CallKind::ScalerUpdate => {
                return None
            }
            CallKind::Step { .. } => match optimizer_of(rec, it.ev) {
                Some(o) if own.contains(&o) => {}
                Some(o) => others.push(o),
                None => return None,
            },
            _ => {}
        }
    }
    if others.is_empty() {
        return None;
    }
    let other_step = |k: usize| {
        matches!(kind(k), CallKind::Step { .. })
            && optimizer_of(rec, t[k].ev).is_some_and(|o| others.contains(&o))
    };
    let same_iteration = |k: usize, j: usize| t[k].iter == t[j].iter;
    let other = |k: usize| match kind(k) {
        CallKind::Step { .. } => other_step(k),
        // A zero_grad of a known optimizer is that optimizer's.
        CallKind::ZeroGrad { .. } if optimizer_of(rec, t[k].ev).is_some() => {
            optimizer_of(rec, t[k].ev).is_some_and(|o| others.contains(&o))
        }
        // A schedule advanced right after the other optimizer's step, on every micro-step
        // it runs, is that optimizer's.
        CallKind::SchedulerStep { .. } => (0..t.len()).filter(|j| t[*j].ev == t[k].ev).all(|at| {
            (0..at)
                .rev()
                .take_while(|j| same_iteration(*j, at))
                .find(|j| matches!(kind(*j), CallKind::Step { .. }))
                .is_some_and(other_step)
        }),
        // A clip of a model the window's optimizers train is theirs, wherever it runs.
        CallKind::Clip { .. } if clips_own(rec, t[k].ev, &own) => false,
        // What runs before the other optimizer's step in the iteration, with neither a step
        // nor that optimizer's zero_grad between, is for that step.
        _ => {
            let next = (k + 1..t.len())
                .take_while(|j| same_iteration(*j, k))
                .find(|j| matches!(kind(*j), CallKind::Step { .. }));
            next.is_some_and(|f| {
                let o = optimizer_of(rec, t[f].ev);
                other_step(f)
                    && !(k + 1..f).any(|j| {
                        matches!(kind(j), CallKind::ZeroGrad { .. })
                            && optimizer_of(rec, t[j].ev) == o
                    })
            })
        }
    };
    let kept: Vec<Item> = (0..t.len()).filter(|k| !other(*k)).map(|k| t[k]).collect();
    let stepped_on_micro = kept.iter().any(|it| {
        !it.boundary
            && it.runs == Runs::Always
            && matches!(rec.calls[it.ev].kind, CallKind::Step { .. })
    });
    (!stepped_on_micro).then_some(kept)
}

/// The clip is handed the parameters of a model one of `own` is handed (`clip_grad_norm_(
/// G.parameters(), 1.0)` with `opt_g = Adam(G.parameters())`).
fn clips_own(rec: &Recorded, ev: usize, own: &[&str]) -> bool {
    let text = rec.src.get(rec.calls[ev].origin.clone()).unwrap_or("");
    rec.optimizer_models
        .iter()
        .any(|(o, m)| own.contains(&o.as_str()) && text.contains(&format!("{m}.parameters(")))
}

/// The optimizer a call steps or zeroes, as written: the receiver of `opt.step()` and
/// `opt.zero_grad()`; for a model's `zero_grad()`, the one optimizer handed that model's
/// parameters; `None` when there is no such one, and for any other call.
fn optimizer_of<'a>(rec: &Recorded<'a>, ev: usize) -> Option<&'a str> {
    let c = &rec.calls[ev];
    let model = match c.kind {
        CallKind::Step { scaler: false } | CallKind::ZeroGrad { optimizer: true } => false,
        CallKind::ZeroGrad { optimizer: false } => true,
        _ => return None,
    };
    let receiver = receiver_of(rec.src.get(c.origin.clone())?);
    let plain = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.');
    if receiver.is_empty() || !receiver.chars().all(plain) {
        return None;
    }
    if !model {
        return Some(receiver);
    }
    // One optimizer by name, however often it is bound.
    let mut handed = rec.optimizer_models.iter().filter(|(_, m)| m == receiver);
    let (first, _) = handed.next()?;
    handed.all(|(o, _)| o == first).then_some(first.as_str())
}

/// The object a call is made on, as written (`opt` of `opt.step()`; empty for a plain call).
fn receiver_of(call: &str) -> &str {
    let callee = call.split('(').next().unwrap_or("");
    callee.rsplit_once('.').map_or("", |(recv, _)| recv).trim()
}

/// Whether a call's arguments, or those of the helper call it was reached through, read a
/// GradScaler's current scale.
fn reads_scale(rec: &Recorded, ev: usize) -> bool {
    let c = &rec.calls[ev];
    let own = rec.src.get(c.call.span.clone());
    let site = c.inlined.then(|| call_at(rec.src, c.order.0)).flatten();
    [own, site]
        .into_iter()
        .flatten()
        .any(|text| text.contains(".get_scale("))
}

/// The call written from `start` to its closing parenthesis.
fn call_at(src: &str, start: usize) -> Option<&str> {
    let rest = src.get(start..)?;
    let mut depth = 0usize;
    for (i, b) in rest.bytes().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' if depth == 1 => return rest.get(..=i),
            b')' => depth = depth.checked_sub(1)?,
            _ => {}
        }
    }
    None
}

/// An `update()` of the same scaler earlier in the iteration of `t[i]`, at the same loop depth,
/// where the scaler stepped one optimizer before it and another between it and `t[i]`: the
/// scale is updated once per iteration, after every optimizer stepped. Whenever `t[i]` runs,
/// the rest runs too: they run on every pass, or the second step is under the tests `t[i]` is.
fn earlier_update(rec: &Recorded, t: &[Item], i: usize) -> Option<usize> {
    let text = |k: usize| {
        let c = &rec.calls[t[k].ev];
        rec.src.get(c.origin.clone()).unwrap_or("")
    };
    let receiver = |k: usize| receiver_of(text(k));
    // The optimizer `scaler.step(opt)` steps, when `t[k]` is a step through `scaler`.
    let ctx = |k: usize| &rec.calls[t[k].ev].ctx;
    let with_update = |k: usize| {
        t[k].runs == Runs::Always
            || (ctx(k).scope == ctx(i).scope && ctx(i).branches.starts_with(&ctx(k).branches))
    };
    let stepped = |k: usize, scaler: &str| match rec.calls[t[k].ev].kind {
        CallKind::Step { scaler: true } if receiver(k) == scaler && with_update(k) => {
            let call = text(k);
            let args = call.split_once('(').map_or("", |(_, a)| a);
            Some(args.trim_end().trim_end_matches(')').trim())
        }
        _ => None,
    };
    let scaler = receiver(i);
    let same_iteration =
        |k: usize| t[k].iter == t[i].iter && t[k].ev != t[i].ev && ctx(k).loops == ctx(i).loops;
    let first = (0..i).rev().find(|k| {
        same_iteration(*k)
            && t[*k].runs == Runs::Always
            && matches!(rec.calls[t[*k].ev].kind, CallKind::ScalerUpdate)
            && receiver(*k) == scaler
    })?;
    let before = (0..first)
        .rev()
        .take_while(|k| t[*k].iter == t[i].iter)
        .filter(|k| t[*k].runs == Runs::Always)
        .find_map(|k| stepped(k, scaler))?;
    let between = (first + 1..i).find_map(|k| stepped(k, scaler))?;
    (!scaler.is_empty() && !before.is_empty() && before != between).then_some(first)
}

/// A backward under a test whose gradients are zeroed right after it, whenever it runs, before
/// any step (a probe, a fake pass): it never reaches the step.
fn cancelled(rec: &Recorded, ev: usize) -> bool {
    let b = &rec.calls[ev];
    rec.calls.iter().any(|z| {
        matches!(z.kind, CallKind::ZeroGrad { .. })
            && z.order > b.order
            && z.ctx.scope == b.ctx.scope
            && z.ctx.loops == b.ctx.loops
            && b.ctx.branches.starts_with(&z.ctx.branches)
            && !rec.calls.iter().any(|s| {
                matches!(s.kind, CallKind::Step { .. }) && s.order > b.order && s.order < z.order
            })
    })
}

/// The window unscales only under steady tests that path `v` does not take.
fn scaler_off(rec: &Recorded, p: &Paths, v: Valuation) -> bool {
    let unscales: Vec<usize> = p
        .events
        .iter()
        .copied()
        .filter(|e| matches!(rec.calls[*e].kind, CallKind::Unscale { .. }))
        .collect();
    !unscales.is_empty()
        && unscales
            .iter()
            .all(|e| p.runs(*e, v, true, true).is_none() && p.runs(*e, v, false, true).is_none())
}
