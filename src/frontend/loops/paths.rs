//! Paths through a window: each test inside the iteration is classified, the steady ones are
//! enumerated, and on each path the window's calls are laid out in the order they run.

use super::windows::{Boundary, Micro, Window};
use super::{CallKind, Recorded};
use std::collections::HashMap;

/// Steady tests enumerated per window: 2^8 paths at most. Tests beyond these are read as tests
/// that may change between micro-steps, whose calls run only sometimes (the rule pages say so).
pub const MAX_STEADY: usize = 8;

/// What a test does across the micro-steps of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// True on the iteration that steps (`(i + 1) % N == 0`), or false on it.
    Boundary(bool),
    /// Compares the accumulation factor with one: true when accumulating, or false.
    AboveOne(bool),
    /// Every step of the window is under this arm: on the window's iterations it is taken.
    Context(bool),
    /// Reads nothing the micro-steps change: the same arm on each.
    Steady,
    /// May change between micro-steps.
    Changing,
}

/// Whether a call runs on an iteration of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    Always,
    /// Under a test that may change between micro-steps.
    Sometimes,
}

/// One call in the order the calls run on a path.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// Index into the recorded calls.
    pub ev: usize,
    pub runs: Runs,
    /// Which iteration of the laid-out windows.
    pub iter: usize,
    /// The iteration is the one that steps (or, after an inner loop, the code around it).
    pub boundary: bool,
}

/// The paths of one window.
pub struct Paths<'r, 'a> {
    rec: &'r Recorded<'a>,
    pub window: &'r Window,
    /// The window's calls, in source order.
    pub events: Vec<usize>,
    classes: HashMap<usize, Class>,
    /// The steady tests that are enumerated.
    pub steady: Vec<usize>,
}

/// A path: the arm each enumerated steady test takes (bit `k` for `steady[k]`).
pub type Valuation = u32;

impl<'r, 'a> Paths<'r, 'a> {
    pub fn new(rec: &'r Recorded<'a>, window: &'r Window) -> Paths<'r, 'a> {
        let mut events: Vec<usize> = (0..rec.calls.len())
            .filter(|i| window.contains(&rec.calls[*i]))
            .collect();
        events.sort_by_key(|i| rec.calls[*i].order);
        let mut p = Paths {
            rec,
            window,
            events,
            classes: HashMap::new(),
            steady: Vec::new(),
        };
        let conds: Vec<usize> = p
            .events
            .iter()
            .flat_map(|i| p.inner_branches(*i).map(|b| b.cond).collect::<Vec<_>>())
            .collect();
        for c in conds {
            if p.classes.contains_key(&c) {
                continue;
            }
            let mut class = p.classify(c);
            if class == Class::Steady {
                if p.steady.len() < MAX_STEADY {
                    p.steady.push(c);
                } else {
                    class = Class::Changing;
                }
            }
            p.classes.insert(c, class);
        }
        p
    }

    /// The branches of a call inside the iteration.
    pub fn inner_branches(&self, ev: usize) -> impl Iterator<Item = &super::Branch> + '_ {
        let level = self.window.body_level;
        self.rec.calls[ev]
            .ctx
            .branches
            .iter()
            .filter(move |b| b.depth >= level)
    }

    pub fn class(&self, cond: usize) -> Class {
        self.classes.get(&cond).copied().unwrap_or(Class::Changing)
    }

    fn classify(&self, c: usize) -> Class {
        let Some(cond) = self.rec.conds.get(c) else {
            return Class::Changing;
        };
        let w = self.window;
        if let Some(t) = &cond.accum {
            // The steps' own tests; another `% N` test may be true on another micro-step.
            if w.boundary_conds.contains(&c) {
                return Class::Boundary(t.boundary_when_true);
            }
            return Class::Changing;
        }
        if let Some(when_true) = cond.sync {
            return if w.boundary == Boundary::Sync {
                Class::Boundary(when_true)
            } else {
                Class::Changing
            };
        }
        if let (Some((expr, above)), Some(f)) = (&cond.above_one, &w.factor) {
            if same_expr(expr, f) {
                return Class::AboveOne(*above);
            }
        }
        // A test every step is under (`if runner.is_train_loader:` around the whole callback):
        // the iterations of the window are the ones that take it.
        if cond.accum.is_none() && !w.steps.is_empty() {
            let arms: Vec<Option<bool>> = w
                .steps
                .iter()
                .map(|s| {
                    self.rec.calls[*s]
                        .ctx
                        .branches
                        .iter()
                        .find(|b| b.cond == c)
                        .map(|b| b.taken)
                })
                .collect();
            if let Some(Some(taken)) = arms.first() {
                if arms.iter().all(|a| *a == Some(*taken)) {
                    return Class::Context(*taken);
                }
            }
        }
        let Some(reads) = &cond.reads else {
            return Class::Changing;
        };
        // A loop that steps on every iteration is judged within an iteration: what its own
        // tests read is fixed there (a helper's tests read what the helper computes).
        if w.boundary == Boundary::Every && cond.scope == w.scope {
            return Class::Steady;
        }
        // A helper's test reads the helper's own names, which its caller cannot see change.
        let changing = match w.boundary {
            Boundary::Every => &[],
            _ => w.changing(self.rec),
        };
        let own = cond.scope == w.scope;
        let helper_names = |n: &String| {
            !own && !n.starts_with("self.")
                && self
                    .rec
                    .scopes
                    .get(cond.scope)
                    .is_none_or(|s| s.assigned.contains(n))
        };
        // `self.x` is read as a whole: another attribute of `self` changing leaves it alone.
        if reads
            .iter()
            .filter(|n| n.as_str() != "self")
            .any(|n| changing.contains(n) || helper_names(n))
        {
            Class::Changing
        } else {
            Class::Steady
        }
    }

    /// The valuations of the enumerated steady tests.
    pub fn valuations(&self) -> impl Iterator<Item = Valuation> {
        0..(1u32 << self.steady.len())
    }

    /// Whether call `ev` runs on an iteration of path `v`: `None` when it does not.
    pub fn runs(
        &self,
        ev: usize,
        v: Valuation,
        boundary: bool,
        accumulating: bool,
    ) -> Option<Runs> {
        let call = &self.rec.calls[ev];
        // accelerate's prepared optimizer and scheduler skip the iterations that do not sync.
        if self.window.boundary == Boundary::Sync
            && !boundary
            && matches!(
                call.kind,
                CallKind::Step { .. }
                    | CallKind::ZeroGrad { optimizer: true }
                    | CallKind::SchedulerStep { prepared: true }
            )
        {
            return None;
        }
        let mut runs = Runs::Always;
        for b in self.inner_branches(ev) {
            let value = match self.class(b.cond) {
                Class::Boundary(when_true) => Some(boundary == when_true),
                Class::AboveOne(when_true) => Some(accumulating == when_true),
                Class::Context(taken) => Some(taken),
                Class::Steady => {
                    let k = self.steady.iter().position(|c| *c == b.cond)?;
                    Some(v & (1 << k) != 0)
                }
                Class::Changing => None,
            };
            match value {
                Some(x) if x != b.taken => return None,
                Some(_) => {}
                None => runs = Runs::Sometimes,
            }
        }
        Some(runs)
    }

    /// Two windows of path `v` laid out in the order their calls run: for a test or
    /// accelerate's sync, micro-step, micro-step, boundary; after an inner loop, the code before
    /// it, three inner iterations, the code after it; for every-iteration windows, two
    /// iterations.
    pub fn trace(&self, v: Valuation, accumulating: bool) -> Vec<Item> {
        let mut out = Vec::new();
        let mut iter = 0;
        let push = |out: &mut Vec<Item>, events: &[usize], boundary: bool, iter: usize| {
            for &ev in events {
                if let Some(runs) = self.runs(ev, v, boundary, accumulating) {
                    out.push(Item {
                        ev,
                        runs,
                        iter,
                        boundary,
                    });
                }
            }
        };
        match &self.window.boundary {
            Boundary::AfterInner(inner) => {
                let inner_span = self.rec.loops.get(*inner).map(|l| l.span.clone());
                let in_inner = |ev: &usize| self.rec.calls[*ev].ctx.loops.contains(inner);
                let start = inner_span.map_or(0, |s| s.start);
                let before: Vec<usize> = self
                    .events
                    .iter()
                    .copied()
                    .filter(|e| !in_inner(e) && self.rec.calls[*e].order.0 < start)
                    .collect();
                let inside: Vec<usize> = self.events.iter().copied().filter(in_inner).collect();
                let after: Vec<usize> = self
                    .events
                    .iter()
                    .copied()
                    .filter(|e| !in_inner(e) && self.rec.calls[*e].order.0 >= start)
                    .collect();
                for _ in 0..2 {
                    push(&mut out, &before, true, iter);
                    iter += 1;
                    for _ in 0..3 {
                        push(&mut out, &inside, false, iter);
                        iter += 1;
                    }
                    push(&mut out, &after, true, iter);
                    iter += 1;
                }
            }
            Boundary::Every => {
                for _ in 0..2 {
                    push(&mut out, &self.events, true, iter);
                    iter += 1;
                }
            }
            Boundary::Test | Boundary::Sync => {
                for _ in 0..2 {
                    for boundary in [false, false, true] {
                        push(&mut out, &self.events, boundary, iter);
                        iter += 1;
                    }
                }
            }
        }
        out
    }

    /// What path `v` assumes about the tests around call `ev`, as written: each steady test or
    /// factor guard and the arm taken.
    pub fn assumptions(&self, ev: usize, v: Valuation) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = Vec::new();
        for b in self.inner_branches(ev) {
            let shown = match self.class(b.cond) {
                Class::AboveOne(_) => true,
                Class::Steady => self
                    .steady
                    .iter()
                    .position(|c| *c == b.cond)
                    .is_some_and(|k| (v & (1 << k) != 0) == b.taken),
                _ => false,
            };
            let Some(cond) = self.rec.conds.get(b.cond) else {
                continue;
            };
            if shown && !out.iter().any(|(t, _)| *t == cond.text) {
                out.push((cond.text.clone(), b.taken));
            }
        }
        out
    }

    /// The tests that take one arm on every micro-step of this window: steady tests and guards
    /// on the factor.
    pub fn kept_tests(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .classes
            .iter()
            .filter(|(_, c)| matches!(c, Class::Steady | Class::AboveOne(_)))
            .map(|(k, _)| *k)
            .collect();
        out.sort();
        out
    }

    /// The micro-steps are a loop of the function (not the function itself).
    pub fn loop_micro(&self) -> Option<usize> {
        match self.window.micro {
            Micro::Loop(l) => Some(l),
            Micro::Function => None,
        }
    }
}

/// Two expressions as written are the same, whitespace aside.
pub fn same_expr(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace()) || {
        let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        strip(a) == strip(b)
    }
}
