//! MEM007 lora-full-multiplier: with LoRA or QLoRA in use, a training-memory formula that charges
//! gradients or optimizer states to every parameter of the model. Documentation:
//! `rules/MEM007.toml`.

use super::parts::{self, bytes, counted, is_count, Counted, Part};
use super::requirement::requirement;
use super::states::{says_upper_bound, scope, sharded, Reported};
use super::{fmt_num, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::expr::{Role, Term};
use crate::facts::{Formula, FormulaKind};
use std::ops::Range;

pub struct LoraFullMultiplier;

/// A parameter count may carry up to fp32 weights' 4 bytes before it counts more than weights.
const WEIGHT_BYTES_MAX: f64 = 4.0;
/// A model size counted twice (within 5%) counts a second copy: gradients or states.
const SECOND_COPY: f64 = 1.95;

impl Rule for LoraFullMultiplier {
    fn code(&self) -> &'static str {
        "MEM007"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        if training.inference {
            return;
        }
        // LoRA by what the run uses (peft, a rank given, a LoRA config it opens or is given), or
        // by arithmetic: a trainable count computed as a fraction of the model. A formula that
        // charges gradients or states is a training estimate whatever else the file does.
        let lora_at = match (&training.lora_at, parts::trainable_fraction(cx)) {
            (Some(at), _) if training.lora => at.clone(),
            (_, Some(share)) => cx.file.site(share.start),
            _ => return,
        };
        let mut reported = Reported::default();
        for f in &cx.facts.formulas {
            // A formula that branches on LoRA has an arm for full fine-tuning.
            let branches = f.guard.lora || scope(cx, f).is_some_and(|s| s.tests.lora);
            if f.inference
                || branches
                || f.lin.saw(Role::KvCache)
                || parts::same_terms(cx, f).any(|g| says_upper_bound(cx, g))
                || parts::for_full_finetuning(cx, f)
                || parts::stored(cx, f)
            {
                continue;
            }
            let Some(terms) = requirement(f).map(|r| r.terms).or_else(|| shown_part(f)) else {
                continue;
            };
            let Some((span, what)) = judge(cx, f, &terms) else {
                continue;
            };
            // On the term where it is written: in the formula, in a part of it the same
            // function assigns first (`grads_gb = n * 2 / 1e9`, then the sum), or in a helper
            // that writes its bytes (`return n_total * 8`); on the formula when the helper
            // takes its bytes from the caller (`gb(n, 16)`).
            let within = |g: &Formula| span.start >= g.span.start && span.end <= g.span.end;
            // A helper of this file writes the bytes beside the count.
            let written = cx.facts.formulas.iter().flat_map(|g| &g.lin.terms);
            let helper_writes = terms.iter().copied().chain(written).any(|t| {
                t.span == span
                    && cx.file.slice(&t.symbol_span) == t.symbol
                    && t.literal
                        .as_ref()
                        .is_some_and(|l| l.start >= span.start && l.end <= span.end)
            });
            // Or a helper's return holds the whole term (`return self.n * (w + g + s)`).
            let own = within(f)
                || helper_writes
                || cx.facts.formulas.iter().any(|g| {
                    within(g)
                        && (g.scope == f.scope || matches!(g.kind, FormulaKind::Return { .. }))
                });
            let span = if own { span } else { f.span.clone() };
            // A name read in the sum (`grads_gib` in `w + grads_gib + s`) is charged where the
            // same function assigns it (`grads_gib = weights_gib`).
            let read = cx.file.slice(&span);
            let assigned = cx.facts.formulas.iter().rev().find(|g| {
                g.scope == f.scope
                    && g.span.end <= span.start
                    && matches!(&g.kind, FormulaKind::Assign { target, .. } if target == read)
            });
            let span = assigned.map_or(span, |g| g.span.clone());
            if !reported.first(f) {
                continue;
            }
            let message = format!(
                "LoRA is in use (seen at {lora_at}), but this memory formula {what}: only the adapters' parameters get gradients and optimizer states"
            );
            let help = "count the frozen base once at its storage dtype and charge gradients and optimizer states to the trainable parameters only: total_params x weight_bytes + trainable_params x (param + grad + state bytes), plus activations";
            out.push(Diagnostic::new("MEM007", span, message).with_help(help));
        }
    }
}

/// The gradients or the optimizer states estimated alone and shown to the user, feeding no
/// total (`states_gb = n_total * 8 / 1e9`, then printed): charged to the whole model, the
/// estimate is wrong whatever total it would have joined.
fn shown_part(f: &Formula) -> Option<Vec<&Term>> {
    let FormulaKind::Assign { target, .. } = &f.kind else {
        return None;
    };
    let part = crate::expr::part_of(target);
    // One count times bytes: a sum over several counts (`frozen * 2 + adapters * 12`) adds
    // up the model's states, whatever its name calls them.
    let one_count = f.lin.terms.len() == 1;
    (f.shown && !f.feeds && one_count && matches!(part, Role::Grads | Role::Optimizer))
        .then(|| f.lin.terms.iter().collect())
}

/// What a requirement charges to every parameter of the model beyond its weights, and where.
fn judge(cx: &Checker<'_>, f: &Formula, terms: &[&Term]) -> Option<(Range<usize>, String)> {
    // Embeddings and heads that train in full (`modules_to_save`) carry full states; a share
    // per device is MEM008's.
    let whole: Vec<&Term> = terms
        .iter()
        .copied()
        .filter(|t| !names_a_trained_module(&t.symbol) && !sharded(t))
        .collect();
    let parts = counted(&whole);
    let sized = |t: &Term| matches!(t.role, Role::Model | Role::ParamCount) && !t.opaque;
    // Gradients or states labelled as such, on the whole model.
    if let Some(c) = parts
        .iter()
        .find(|c| matches!(c.part, Part::Grads | Part::States) && sized(c.term))
    {
        let state = if c.part == Part::Grads {
            "gradients"
        } else {
            "optimizer states"
        };
        return Some((
            c.term.span.clone(),
            format!("charges {state} to the whole model (`{}`)", c.term.symbol),
        ));
    }
    // Counts of the whole model times bytes: more than its weights take, or counted again.
    let counts: Vec<&Counted> = parts
        .iter()
        .filter(|c| matches!(c.part, Part::Weights | Part::Bytes) && is_count(c.term))
        .filter(|c| !c.term.opaque)
        .collect();
    let per_param: f64 = counts.iter().map(|c| bytes(c.term)).sum();
    let labelled = counts.iter().any(|c| c.part == Part::Weights);
    let again = counts
        .iter()
        .find(|c| labelled && c.part == Part::Bytes && bytes(c.term) >= 1.0);
    let copies: f64 = parts
        .iter()
        .filter(|c| c.part == Part::Weights && c.term.role == Role::Model && !c.term.opaque)
        .map(|c| parts::copies(c.term))
        .sum();
    if per_param > WEIGHT_BYTES_MAX * 1.05 {
        // On the one count beyond the weights, when one term carries them.
        let beyond: Vec<&&Counted> = counts.iter().filter(|c| c.part != Part::Weights).collect();
        // Or on the one count that carries them all, where it is written (a helper's return).
        let at = match beyond.as_slice() {
            [c] if labelled || counts.len() == 1 => c.term.span.clone(),
            _ => f.span.clone(),
        };
        return Some((
            at,
            format!(
                "counts {} bytes for every parameter of the model, more than its weights take",
                fmt_num(per_param)
            ),
        ));
    }
    if let Some(c) = again {
        return Some((
            c.term.span.clone(),
            format!(
                "counts every parameter of the model again beside its weights (`{}`), as if all had gradients",
                cx.file.slice(&c.term.span)
            ),
        ));
    }
    let whole_copies = counts.iter().filter(|c| bytes(c.term) >= 1.0).count();
    if whole_copies >= 2 {
        return Some((
            f.span.clone(),
            format!(
                "counts every parameter of the model {whole_copies} times ({} bytes in all), as if all had gradients",
                fmt_num(per_param)
            ),
        ));
    }
    let model_terms: Vec<&Counted> = parts
        .iter()
        .filter(|c| c.part == Part::Weights && c.term.role == Role::Model && !c.term.opaque)
        .collect();
    (copies >= SECOND_COPY).then(|| {
        (
            match model_terms.as_slice() {
                [one] => one.term.span.clone(),
                _ => f.span.clone(),
            },
            format!(
                "counts the whole model {}x, as if every parameter had gradients{}",
                fmt_num(copies),
                if copies >= 3.0 {
                    " and optimizer states"
                } else {
                    ""
                }
            ),
        )
    })
}

/// `embed_params`, `lm_head_gb`, `modules_to_save_mem`: a module that trains in full beside the
/// adapters.
fn names_a_trained_module(symbol: &str) -> bool {
    let s = symbol.to_ascii_lowercase();
    [
        "embed",
        "head",
        "modules_to_save",
        "vocab",
        "trainable_token",
    ]
    .iter()
    .any(|w| s.contains(w))
}
