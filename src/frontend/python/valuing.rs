//! Valuing a file's memory arithmetic once its walk is done (or once the helpers it imports
//! are known, see [`super::deferred`]): each pending formula valued into the facts.

use super::units::judge_units;
use super::values::{Pending, PendingKind};
use super::*;

impl Walker<'_> {
    /// Value every pending formula (see [`value_pending`]).
    pub(super) fn value_formulas(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let program = std::mem::take(&mut self.program);
        value_pending(&pending, &program, &mut self.facts);
        self.program = program;
    }
}

/// Value every pending formula: as written, and in each helper once per call site (a helper
/// whose parameters' roles only its callers say). Kept: what is sized by the model.
pub(super) fn value_pending(pending: &[Pending], program: &Program, facts: &mut Facts) {
    let valuer = program.valuer();
    let reads = program.reads();
    // A value printed is reported, not added into a larger sum: it still states a total. One
    // printed within a sum (`f"{(w + g + st) / 2**30} GiB"`) is a part of that sum.
    let printed: Vec<Range<usize>> = pending
        .iter()
        .filter_map(|p| match &p.kind {
            PendingKind::Printed { figures } => Some(
                figures
                    .iter()
                    .filter(|f| !program.adds_terms(f.0))
                    .map(|f| f.2.clone()),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    // The figures printed with a memory unit (`{need / 2**20:.0f} MiB`).
    let labelled: Vec<Range<usize>> = pending
        .iter()
        .filter_map(|p| match &p.kind {
            PendingKind::Printed { figures } => Some(
                figures
                    .iter()
                    .filter(|f| f.1.is_some())
                    .map(|f| f.2.clone()),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    for p in pending {
        judge_units(facts, p, program, &valuer);
        if let PendingKind::Printed { figures } = &p.kind {
            printed_figures(facts, p, figures, program, &valuer);
            continue;
        }
        let later = |inside: &dyn Fn(usize) -> bool| match &p.kind {
            PendingKind::Assign { target }
            | PendingKind::Checkpointed {
                target,
                returned: false,
                ..
            } => reads
                .get(&(p.scope, target.as_str()))
                .is_some_and(|at| at.iter().any(|a| *a > p.span.end && inside(*a))),
            _ => false,
        };
        let feeds = later(&|a| !printed.iter().any(|r| r.contains(&a)));
        let shown = later(&|a| labelled.iter().any(|r| r.contains(&a)));
        // Under a test of the stage, what the call hands back is judged by the test.
        let plain = p.stages.is_none() && !p.guard.stage;
        if let (PendingKind::Return { .. }, true) = (&p.kind, plain) {
            if let Some(other) = program.callee(p.value) {
                facts.returns_call.push((p.scope, other, p.span.clone()));
            }
        }
        let per_call = matches!(
            p.kind,
            PendingKind::Assign { .. }
                | PendingKind::Return { .. }
                | PendingKind::Compare { .. }
                | PendingKind::Expr
        );
        let valued = valuer.valuations(p.value, p.scope, per_call);
        for (lin, frame) in valued {
            settle(facts, p, lin, &valuer, frame.as_ref(), (feeds, shown));
        }
    }
}

/// The figures an f-string prints with a unit of memory that are calculations of their own
/// (`f"{n * 8 / 1e9:.1f} GB"`; a name printed so is judged where it is assigned): what the
/// code states memory takes, shown to the user.
fn printed_figures(
    facts: &mut Facts,
    p: &Pending,
    figures: &[(crate::expr::program::Id, Option<Unit>, Range<usize>)],
    program: &Program,
    valuer: &crate::expr::program::Valuer,
) {
    for (id, unit, span) in figures {
        if unit.is_none() || !program.is_arithmetic(*id) {
            continue;
        }
        for (lin, _) in valuer.valuations(*id, p.scope, false) {
            // At the figure, not the whole f-string.
            push_formula(facts, FormulaKind::Expr, lin, p, span, (false, true));
        }
    }
}

/// One valued formula into the facts.
fn settle(
    facts: &mut Facts,
    p: &Pending,
    lin: Lin,
    valuer: &crate::expr::program::Valuer,
    frame: Option<&crate::expr::program::Frame>,
    used: (bool, bool),
) {
    let kind = match &p.kind {
        PendingKind::Assign { target } => {
            push_formula(
                facts,
                FormulaKind::Assign {
                    target: target.clone(),
                    role: lin.assigned_role(target),
                },
                lin.assigned_to(target),
                p,
                &p.span,
                used,
            );
            return;
        }
        PendingKind::Return { function } => {
            let bundle = matches!(
                valuer.value(p.value, frame),
                crate::expr::program::Value::Bundle(_)
            );
            FormulaKind::Return {
                function: function.clone(),
                // A function named for the GPU that adds up what the model needs
                // (`gpu_bytes()`) returns a requirement, as a name assigned one holds.
                role: if bundle {
                    Role::Total
                } else {
                    lin.assigned_role(function)
                },
            }
        }
        PendingKind::Compare { other, .. } => FormulaKind::Compare {
            other: valuer.lin(*other, frame),
        },
        PendingKind::Printed { .. } => return,
        PendingKind::Expr => FormulaKind::Expr,
        PendingKind::Checkpointed {
            target,
            factor,
            offloaded,
            returned,
        } => {
            if !crate::expr::is_memory_name(target) && !used.1 {
                return;
            }
            facts.checkpointed.push(CheckpointedValue {
                target: target.clone(),
                role: role_of(target),
                lin,
                factor: *factor,
                span: p.span.clone(),
                offloaded: *offloaded,
                returned: *returned,
            });
            return;
        }
        PendingKind::Constant { name } => {
            facts.note_constant(name, &lin, p.span.clone());
            return;
        }
    };
    push_formula(facts, kind, lin, p, &p.span, (false, false));
}

/// `used`: whether a later line reads the value again, and whether it prints it as memory.
/// `span`: where the formula is written (the pending's, or a part of it).
fn push_formula(
    facts: &mut Facts,
    kind: FormulaKind,
    lin: Lin,
    p: &Pending,
    span: &Range<usize>,
    (feeds, shown): (bool, bool),
) {
    // A count of the parameters that train (`if p.requires_grad`) sizes a formula too.
    let trainable = || lin.terms.iter().any(|t| t.role == Role::Trainable);
    if !lin.is_sized() && !trainable() {
        return;
    }
    facts.formulas.push(Formula {
        kind,
        lin,
        span: span.clone(),
        scope: p.scope,
        guard: p.guard,
        inference: p.inference,
        feeds,
        shown,
        stages: p.stages.clone(),
    });
}
