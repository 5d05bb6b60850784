//! MEM004 in Python: each calculation (an assignment, a return, a comparison, a running sum, an
//! f-string's figures) judged once the file is valued, as written and, where it reads a helper's
//! parameters, with the arguments of each call site.

use super::values::{Pending, PendingKind};
use super::*;
use crate::expr::program::{Frame as CallFrame, Valuer};
use crate::expr::units::unit_word;
use crate::frontend::units as judge;

/// More figures than this in one f-string is a table dump, not a calculation.
const MAX_FIGURES: usize = 16;

impl<'s> Walker<'s> {
    /// An f-string's figures, each with the unit its label states (`{x:.1f} GiB`). Kept only
    /// when some figure is labelled with a unit: an unlabelled printout states nothing.
    pub(super) fn printed(&mut self, node: Node) {
        let mut c = node.walk();
        let kids: Vec<Node> = node.children(&mut c).collect();
        let fstring = kids
            .first()
            .is_some_and(|s| s.ty() == "string_start" && self.text(*s).contains(['f', 'F']));
        if !fstring {
            return;
        }
        let label = |n: Option<&Node>| {
            let text = n
                .filter(|n| n.ty() == "string_content")
                .map(|n| self.text(*n))?;
            let word: String = text
                .trim_start()
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            unit_word(&word.to_ascii_lowercase())
        };
        let parts: Vec<(Node, Option<Unit>)> = kids
            .iter()
            .enumerate()
            .filter(|(_, k)| k.ty() == "interpolation")
            .filter_map(|(i, k)| {
                let expr = k.field("expression").or_else(|| k.named_child(0))?;
                Some((expr, label(kids.get(i + 1))))
            })
            .collect();
        if parts.len() > MAX_FIGURES || parts.iter().all(|(_, l)| l.is_none()) {
            return;
        }
        let figures: Vec<_> = parts
            .into_iter()
            .map(|(expr, label)| (self.value_of(expr, 0), label, expr.byte_range()))
            .collect();
        if let Some(first) = figures.first().map(|f| f.0) {
            self.pend(PendingKind::Printed { figures }, first, node.byte_range());
        }
    }
}

/// Judge one pending calculation's units: as written, then, when it reads the function's
/// parameters and finds nothing, once per call site with the arguments bound.
pub(super) fn judge_units(facts: &mut Facts, p: &Pending, program: &Program, valuer: &Valuer) {
    let mut found = units_in(p, valuer, None);
    if found.is_empty() && program.is_function(p.scope) {
        let ids: Vec<_> = match &p.kind {
            PendingKind::Compare { other, .. } => vec![p.value, *other],
            PendingKind::Printed { figures } => figures.iter().map(|f| f.0).collect(),
            _ => vec![p.value],
        };
        let reads = ids.iter().any(|id| {
            valuer
                .lin(*id, None)
                .terms
                .iter()
                .any(|t| program.is_param(p.scope, &t.symbol))
        });
        if reads {
            for frame in valuer.frames(p.scope) {
                found = units_in(p, valuer, Some(&frame));
                if !found.is_empty() {
                    for m in &mut found {
                        m.call = Some(frame.call.clone());
                    }
                    break;
                }
            }
        }
    }
    for m in found {
        judge::push(facts, m);
    }
}

fn units_in(p: &Pending, valuer: &Valuer, frame: Option<&CallFrame>) -> Vec<UnitMismatch> {
    let py = DivisorSyntax::Python;
    let mut out = Vec::new();
    match &p.kind {
        PendingKind::Assign { target } | PendingKind::Return { function: target } => {
            for lin in valuer.paths(p.value, frame) {
                out.extend(judge::named(target, &lin, p.span.clone(), py, false));
                out.extend(judge::meeting(
                    &[&lin],
                    UnitClash::Combined,
                    p.span.clone(),
                    true,
                    py,
                ));
            }
        }
        // Judged once, from its left side.
        PendingKind::Compare { other, whole } if p.span.start == whole.start => {
            let other = valuer.lin(*other, frame);
            for lin in valuer.paths(p.value, frame) {
                out.extend(judge::meeting(
                    &[&lin, &other],
                    UnitClash::Compared,
                    whole.clone(),
                    true,
                    py,
                ));
            }
        }
        PendingKind::Expr => {
            let lin = valuer.lin(p.value, frame);
            out.extend(judge::meeting(
                &[&lin],
                UnitClash::Combined,
                p.span.clone(),
                true,
                py,
            ));
        }
        PendingKind::Printed { figures } => {
            let figures: Vec<_> = figures
                .iter()
                .map(|(id, label, span)| (valuer.lin(*id, frame), *label, span.clone()))
                .collect();
            out.extend(judge::printed(&figures, py));
        }
        _ => {}
    }
    out
}
