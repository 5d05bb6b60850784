//! The loop model: what runs on each micro-step of a training loop.
//!
//! The Python walk records every training call (step, backward, zero_grad, scheduler step, clip,
//! unscale, scaler update) with the loops and `if` arms around it, the file's own helpers already
//! inlined at their call sites. From those the model finds each loop's *window*: the iterations
//! (micro-steps) whose gradients one optimizer step applies, and how the step's iteration is told
//! from the others (`windows.rs`). It then enumerates the loop's paths (`paths.rs`): each test is
//! a boundary test (true on the step's iteration), a guard on the accumulation factor (`if N > 1`),
//! a steady test that takes the same arm on every micro-step (`if args.fp16`: both arms are
//! tried), or a test that may change between micro-steps (its calls run only sometimes). On each
//! path it lays out two windows of calls in the order they run and checks the optimizer-step
//! protocol on them (`protocol.rs`): one backward per micro-batch divided once, no `zero_grad`
//! between two backwards of a window, clips and `unscale_` only after the window's last
//! backward, one `scaler.step` per `update`, one `unscale_` per optimizer per update.

mod paths;
mod protocol;
mod windows;

pub use paths::same_expr;
pub use protocol::Found;

use crate::facts::{AccumLoop, Call, Prov};
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
    /// The whole loop statement.
    pub span: Range<usize>,
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
    /// The micro-step a plain remainder test picks, as written without spaces (`(i+1)%N==0`
    /// for `(i + 1) % N == 0`, `not (i + 1) % N` and a bare `(i + 1) % N`): two tests that
    /// pick the same one are the same boundary, whichever way each is negated.
    pub phase: Option<String>,
    /// The same micro-step read for its value: which counter, modulo which factor, at which
    /// remainder (`(i + 1) % N == 0` and `i % N == N - 1` both pick `i` at -1).
    pub pick: Option<Pick>,
}

/// The micro-step a remainder test picks: `counter ≡ residue (mod factor)`, and whether the
/// test is true on that micro-step alone (`==`) or on every other one (`!=`, a bare `i % N`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub counter: String,
    pub factor: String,
    pub residue: i64,
    pub true_on_pick: bool,
}

/// An `if`'s condition.
#[derive(Debug, Clone, Default)]
pub struct Cond {
    /// The test as written (for messages and for fixes that keep a guard).
    pub text: String,
    /// The function scope it is written in.
    pub scope: usize,
    pub accum: Option<AccumTest>,
    /// `N > 1`, `N == 1`, `not N > 1`: the expression compared with one, and whether the test
    /// is true when it is above one.
    pub above_one: Option<(String, bool)>,
    /// Reads accelerate's `sync_gradients`: whether the test is true on the iteration that
    /// syncs.
    pub sync: Option<bool>,
    /// The names and attributes it reads; `None` when it calls something: it may change
    /// between micro-steps.
    pub reads: Option<Vec<String>>,
    /// An arm of `match` on a ZeRO stage (`case 2:`): the stages it is taken for.
    pub stages: Option<u8>,
    /// Whether its body, and its `else:`, run with gradient checkpointing on (`if use_ckpt:`,
    /// the `else:` of `if not use_ckpt:`); read for the value model only.
    pub checkpointing: [bool; 2],
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
    /// Where the call is written (a helper's call keeps it through inlining).
    pub origin: Range<usize>,
    /// How many helper calls deep it was inlined (0: where it is written).
    pub depth: usize,
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
    /// `zero_grad()` of an optimizer (`optimizer: true`: one the file steps or builds) or of a
    /// model.
    ZeroGrad {
        optimizer: bool,
    },
    /// `scheduler.step()`; `prepared: false` when the file prepares other objects with
    /// accelerate but not this scheduler.
    SchedulerStep {
        prepared: bool,
    },
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

impl CallKind {
    pub fn is_backward(&self) -> bool {
        matches!(
            self,
            CallKind::Backward { .. } | CallKind::FrameworkBackward
        )
    }

    /// A backward whose gradients a `GradScaler` multiplies.
    fn is_scaled_backward(&self) -> bool {
        matches!(self, CallKind::Backward { scaler: true, .. })
    }
}

/// What the walk recorded, for the assembly.
pub struct Recorded<'a> {
    /// The file's text: a call's receiver and arguments tell scalers and optimizers apart.
    pub src: &'a str,
    /// The file writes `unscale_` somewhere (in code or not).
    pub unscales: bool,
    pub loops: &'a [LoopInfo],
    pub conds: &'a [Cond],
    pub scopes: &'a [ScopeInfo],
    pub calls: &'a [CallEvent],
    /// accelerate was told to accumulate: its prepared optimizer and scheduler skip the
    /// iterations that do not sync, and `accumulate()` blocks are windows.
    pub accelerate_accumulates: bool,
    /// The `Accelerator`'s `gradient_accumulation_steps` as written, when one is.
    pub accelerate_factor: Option<String>,
    /// accelerate runs DeepSpeed: its prepared optimizer's `step` and `zero_grad` do nothing
    /// (the engine steps and zeroes) and its `clip_grad_norm_` leaves clipping to the engine.
    pub accelerate_deepspeed: bool,
    /// `with accelerator.accumulate(...)` blocks: their scope and the loops around them.
    pub accumulate_blocks: &'a [(usize, Vec<usize>)],
    /// Names bound once, at module level, to a number of at most 1 (`ACCUM = 1`): a window
    /// over such a factor steps on every micro-step.
    pub single_factors: &'a [&'a str],
    /// Each optimizer bound to a name, with a model whose parameters it is handed: a model's
    /// `zero_grad()` clears what that optimizer steps.
    pub optimizer_models: &'a [(String, String)],
}

impl Recorded<'_> {
    /// Whether the factor, as written, is known to be at most 1.
    pub fn single_factor(&self, factor: &str) -> bool {
        crate::config::parse_number(factor).is_some_and(|v| v <= 1.0)
            || self.single_factors.contains(&factor)
    }
}

pub struct Assembled {
    pub loops: Vec<AccumLoop>,
    /// Calls that break the step protocol, each once, with the path it was seen on.
    pub missteps: Vec<Found>,
}

pub fn assemble(rec: &Recorded) -> Assembled {
    let windows = windows::find(rec);
    let mut out = Assembled {
        loops: Vec::new(),
        missteps: Vec::new(),
    };
    for w in &windows {
        let judged = protocol::judge(rec, w);
        for f in judged.missteps {
            if !out
                .missteps
                .iter()
                .any(|g| g.misstep == f.misstep && g.call.span == f.call.span)
            {
                out.missteps.push(f);
            }
        }
        if let Some(lp) = judged.accum_loop {
            out.loops.push(lp);
        }
    }
    out.missteps.sort_by_key(|f| f.call.span.start);
    judge_each_backward_once(&mut out.loops);
    out
}

/// A backward seen in several windows (a helper's own, and its callers' that inline it) is
/// judged once: where its loss is known (not a parameter of the helper), from the nearest window.
fn judge_each_backward_once(loops: &mut [AccumLoop]) {
    let rank = |b: &crate::facts::Backward| (matches!(b.prov, Prov::Param(_)), b.depth);
    let mut best: Vec<(Range<usize>, (bool, usize))> = Vec::new();
    for b in loops.iter().flat_map(|l| &l.backwards) {
        match best.iter_mut().find(|(o, _)| *o == b.origin) {
            Some((_, r)) if rank(b) < *r => *r = rank(b),
            Some(_) => {}
            None => best.push((b.origin.clone(), rank(b))),
        }
    }
    for l in loops.iter_mut() {
        let mut kept: Vec<Range<usize>> = Vec::new();
        l.backwards.retain(|b| {
            let keep = best.iter().any(|(o, r)| *o == b.origin && *r == rank(b))
                && !kept.contains(&b.origin);
            if keep {
                kept.push(b.origin.clone());
            }
            keep
        });
    }
}

/// The file's walk saw a backward and an optimizer step: what the literal prefilter asks of
/// every file whose training calls are read.
pub fn trains(calls: &[CallEvent]) -> bool {
    calls
        .iter()
        .any(|c| matches!(c.kind, CallKind::Step { .. }))
        && calls.iter().any(|c| c.kind.is_backward())
}

fn is_simple_factor(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}
