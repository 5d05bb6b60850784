//! Windows: the iterations whose gradients one optimizer step applies, and how the iteration that
//! steps is told from the others.
//!
//! - Under a boundary test: the step sits in an `if` that is true once every N iterations
//!   (`(i + 1) % N == 0`, a flag holding one, a counter reset at the boundary). The iterations are
//!   those of the loop the test's branch is in, or the calls of the function when the branch is at
//!   its top level (a callback, `training_step`, a `train_step(batch, i)` called per batch).
//! - After an inner micro-batch loop: `for micro in range(N): ... backward()` then the step.
//! - accelerate's `accumulate()`: when accelerate was told to accumulate, every iteration of the
//!   loop around the block is a micro-step and its prepared optimizer steps on the ones that sync.
//! - Every iteration: a loop (or a function) whose step is under no boundary test.

use super::{CallEvent, CallKind, Recorded};
use std::ops::Range;

/// The iterations that are micro-steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Micro {
    Loop(usize),
    /// The function body runs once per micro-step.
    Function,
}

/// How the iteration that steps is told from the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boundary {
    /// Under a boundary test of this factor, as written.
    Test,
    /// The micro-steps are this inner loop; the boundary is what follows it.
    AfterInner(usize),
    /// accelerate's `sync_gradients`.
    Sync,
    /// The step runs on every iteration: nothing accumulates.
    Every,
}

#[derive(Debug, Clone)]
pub struct Window {
    pub scope: usize,
    pub micro: Micro,
    pub boundary: Boundary,
    /// The accumulation factor as written (`None` for accelerate's and for every-iteration
    /// windows).
    pub factor: Option<String>,
    /// The micro-step counter the boundary test reads, when it is one that is reset.
    pub counter: Option<String>,
    /// The loops around the iteration's body, outermost first: every call of the window has
    /// them as a prefix.
    pub around: Vec<usize>,
    /// Branches under fewer loops than this are outside the iteration (the loop's context).
    pub body_level: usize,
    /// The loop statement's first line, or the first step for a function.
    pub header: Range<usize>,
    /// The steps that made the window, as indices into the recorded calls.
    pub steps: Vec<usize>,
    /// No backward runs here: the function only clips and steps through a scaler, its
    /// gradients arriving scaled from elsewhere (read only when the file never unscales).
    pub backward_elsewhere: bool,
    /// The tests that tell the steps' iteration (an `i % N` test written otherwise may be true
    /// on another micro-step of the window).
    pub boundary_conds: Vec<usize>,
}

impl Window {
    /// The call runs in this window's iterations.
    pub fn contains(&self, ev: &CallEvent) -> bool {
        ev.ctx.scope == self.scope && ev.ctx.loops.starts_with(&self.around)
    }

    /// The names that may change from one micro-step to the next.
    pub fn changing<'a>(&self, rec: &Recorded<'a>) -> &'a [String] {
        let found = match (&self.boundary, self.micro) {
            (Boundary::AfterInner(inner), _) => rec.loops.get(*inner).map(|l| &l.assigned),
            (_, Micro::Loop(l)) => rec.loops.get(l).map(|l| &l.assigned),
            (_, Micro::Function) => rec.scopes.get(self.scope).map(|s| &s.assigned),
        };
        found.map_or(&[], |v| v.as_slice())
    }
}

pub fn find(rec: &Recorded) -> Vec<Window> {
    let mut windows: Vec<Window> = Vec::new();
    let mut placed = vec![false; rec.calls.len()];
    for (i, step) in rec.calls.iter().enumerate() {
        if !matches!(step.kind, CallKind::Step { .. }) {
            continue;
        }
        let Some(w) = accumulating(i, step, rec) else {
            continue;
        };
        placed[i] = true;
        add(&mut windows, w, i);
    }
    // A helper that accumulates by itself is judged where it is written, once.
    windows.retain(|w| {
        !(w.steps.iter().all(|s| rec.calls[*s].inlined) && micro_inside_helper(w, rec))
    });
    if rec.accelerate_accumulates {
        for (scope, loops) in rec.accumulate_blocks {
            if let Some(mut w) = synced(*scope, loops) {
                w.factor = rec.accelerate_factor.clone();
                if let Micro::Loop(l) = w.micro {
                    w.header = rec.loops.get(l).map_or(0..0, |i| i.header.clone());
                }
                if !windows.iter().any(|o| {
                    o.boundary == Boundary::Sync && o.scope == w.scope && o.micro == w.micro
                }) {
                    windows.push(w);
                }
            }
        }
    }
    for (i, step) in rec.calls.iter().enumerate() {
        if placed[i] || !matches!(step.kind, CallKind::Step { .. }) {
            continue;
        }
        if windows
            .iter()
            .any(|w| w.boundary == Boundary::Sync && w.contains(step))
        {
            continue;
        }
        if let Some(w) = every(step) {
            add(&mut windows, w, i);
        }
    }
    // accelerate's window steps with the prepared optimizer wherever the loop calls it.
    for w in windows.iter_mut().filter(|w| w.boundary == Boundary::Sync) {
        w.steps = (0..rec.calls.len())
            .filter(|i| {
                let c = &rec.calls[*i];
                matches!(c.kind, CallKind::Step { .. }) && w.contains(c)
            })
            .collect();
    }
    // A window with no backward in it trains nothing here, unless it steps through a scaler
    // with clips in a file that never unscales: its gradients arrive scaled.
    windows.retain_mut(|w| {
        let has =
            |f: &dyn Fn(&CallKind) -> bool| rec.calls.iter().any(|c| f(&c.kind) && w.contains(c));
        if has(&|k| k.is_backward()) {
            return true;
        }
        w.backward_elsewhere = w.boundary == Boundary::Every
            && !rec.unscales
            && has(&|k| matches!(k, CallKind::Step { scaler: true }))
            && has(&|k| matches!(k, CallKind::Clip { framework: false }));
        w.backward_elsewhere
    });
    windows
}

/// Join a step to the window it shares with earlier steps, or open one.
fn add(windows: &mut Vec<Window>, w: Window, step: usize) {
    match windows.iter_mut().find(|o| {
        o.scope == w.scope && o.micro == w.micro && o.boundary == w.boundary && o.factor == w.factor
    }) {
        Some(o) => {
            if !o.steps.contains(&step) {
                o.steps.push(step);
            }
            for c in w.boundary_conds {
                if !o.boundary_conds.contains(&c) {
                    o.boundary_conds.push(c);
                }
            }
        }
        None => windows.push(Window {
            steps: vec![step],
            ..w
        }),
    }
}

/// The micro-steps of a helper's steps are a loop of the helper's own.
fn micro_inside_helper(w: &Window, rec: &Recorded) -> bool {
    match w.micro {
        Micro::Function => false,
        Micro::Loop(l) => w.steps.iter().all(|s| {
            let s = &rec.calls[*s];
            !s.ctx.loops.iter().take(s.site_loops).any(|x| *x == l)
        }),
    }
}

/// The window of a step under a boundary test, or after an inner micro-batch loop.
fn accumulating(i: usize, step: &CallEvent, rec: &Recorded) -> Option<Window> {
    // Under a boundary test: the innermost branch whose test is true on the boundary.
    let guarded = step.ctx.branches.iter().rev().find_map(|b| {
        let t = rec.conds.get(b.cond)?.accum.as_ref()?;
        (t.boundary_when_true == b.taken).then_some((*b, t))
    });
    if let Some((branch, test)) = guarded {
        let (micro, header) = match branch.depth {
            // At a function's top level: the function is the micro-step.
            0 if step.ctx.scope != 0 => (Micro::Function, step.call.span.clone()),
            0 => return None,
            d => {
                let l = *step.ctx.loops.get(d - 1)?;
                (Micro::Loop(l), rec.loops.get(l)?.header.clone())
            }
        };
        let mut boundary_conds: Vec<usize> = step
            .ctx
            .branches
            .iter()
            .filter(|b| {
                rec.conds
                    .get(b.cond)
                    .and_then(|c| c.accum.as_ref())
                    .is_some_and(|t| {
                        t.boundary_when_true == b.taken && super::same_expr(&t.factor, &test.factor)
                    })
            })
            .map(|b| b.cond)
            .collect();
        // The same test written elsewhere in the function, another way (`if (i + 1) % N ==
        // 0: zero_grad()` before `if (i + 1) % N: continue` and the step): true on the same
        // micro-step.
        let phases: Vec<&String> = boundary_conds
            .iter()
            .filter_map(|c| rec.conds.get(*c)?.accum.as_ref()?.phase.as_ref())
            .collect();
        let same_phase: Vec<usize> = (0..rec.conds.len())
            .filter(|c| !boundary_conds.contains(c))
            .filter(|c| {
                let cond = &rec.conds[*c];
                cond.scope == step.ctx.scope
                    && cond
                        .accum
                        .as_ref()
                        .and_then(|t| t.phase.as_ref())
                        .is_some_and(|p| phases.contains(&p))
            })
            .collect();
        boundary_conds.extend(same_phase);
        return Some(Window {
            scope: step.ctx.scope,
            micro,
            boundary: Boundary::Test,
            factor: Some(test.factor.clone()),
            counter: test.counter.clone(),
            around: step.ctx.loops[..branch.depth].to_vec(),
            body_level: branch.depth,
            header,
            steps: vec![i],
            boundary_conds,
            backward_elsewhere: false,
        });
    }
    // After an inner micro-batch loop that ran the backwards, in the same body as the step
    // (a loop body, or a function that makes one optimizer step).
    let depth = step.ctx.loops.len();
    let inner = rec
        .calls
        .iter()
        .filter(|c| {
            c.kind.is_backward()
                && c.ctx.scope == step.ctx.scope
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
    let info = rec.loops.get(inner)?;
    Some(Window {
        scope: step.ctx.scope,
        micro: Micro::Loop(inner),
        boundary: Boundary::AfterInner(inner),
        factor: info.micro_factor.clone(),
        counter: None,
        around: step.ctx.loops.clone(),
        body_level: depth,
        header: info.header.clone(),
        steps: vec![i],
        boundary_conds: Vec::new(),
        backward_elsewhere: false,
    })
}

/// The window of an `accelerator.accumulate()` block: the loop around it (accelerate's sync
/// state lasts the whole iteration), or the function when the block is at its top level.
fn synced(scope: usize, loops: &[usize]) -> Option<Window> {
    let micro = match loops.last() {
        Some(l) => Micro::Loop(*l),
        None if scope != 0 => Micro::Function,
        None => return None,
    };
    Some(Window {
        scope,
        micro,
        boundary: Boundary::Sync,
        factor: None,
        counter: None,
        body_level: loops.len(),
        around: loops.to_vec(),
        header: 0..0,
        steps: Vec::new(),
        boundary_conds: Vec::new(),
        backward_elsewhere: false,
    })
}

/// The window of a step that runs on every iteration of its innermost loop (or of its function).
fn every(step: &CallEvent) -> Option<Window> {
    let (micro, around) = match step.ctx.loops.last() {
        Some(l) => (Micro::Loop(*l), step.ctx.loops.clone()),
        None if step.ctx.scope != 0 => (Micro::Function, Vec::new()),
        None => return None,
    };
    Some(Window {
        scope: step.ctx.scope,
        micro,
        boundary: Boundary::Every,
        factor: None,
        counter: None,
        body_level: around.len(),
        around,
        header: step.call.span.clone(),
        steps: Vec::new(),
        boundary_conds: Vec::new(),
        backward_elsewhere: false,
    })
}
