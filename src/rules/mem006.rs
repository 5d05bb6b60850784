//! MEM006 missing-gradient-term: a training-memory formula that counts optimizer states but no
//! gradients. Documentation: `rules/MEM006.toml`.
//!
//! A requirement (what is compared with or subtracted from the device's memory, or a total a
//! calculator states) is split into the parts its terms count ([`super::parts`]): one copy of the
//! weights, optimizer states (labelled by how the value was bound, or a count's bytes that match
//! the optimizer's states), and nothing else sized by the model.

use super::parts::{self, bytes, counted, is_count, Counted, Part};
use super::requirement::requirement;
use super::{Checker, Rule};
use crate::context::OptimizerChoice;
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::expr::{Role, Term};
use crate::facts::{Formula, Precision};

pub struct MissingGradientTerm;

/// A labelled weights term may count up to fp32 weights' bytes; an unlabelled one no more than
/// 16-bit weights (4 bytes may be bf16 weights and gradients together).
const LABELLED_WEIGHT_BYTES: f64 = 4.0;
const UNLABELLED_WEIGHT_BYTES: f64 = 2.0;
/// A size of the weights counted more than this many times may already hold the gradients.
const ONE_COPY: f64 = 1.5;

impl Rule for MissingGradientTerm {
    fn code(&self) -> &'static str {
        "MEM006"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let training = cx.training;
        // Only part of the model trains (its gradients are MEM007's), or offloading moves the
        // gradients with the states (ZeRO-Offload keeps them on the host). A formula that
        // charges optimizer states is a training estimate: no other evidence of training is
        // asked for.
        if training.lora
            || training.frozen
            || !training.offload.is_empty()
            || parts::trainable_fraction(cx).is_some()
        {
            return;
        }
        // Unlabelled bytes are read as states only against the optimizer in use (AdamW when none
        // is seen), never in an fp32-only run, where MEM001 judges the bytes.
        let fp32 = !training.precision.is_empty()
            && training.precision.iter().all(|p| *p == Precision::Fp32);
        let optimizers = training
            .judged_optimizers()
            .filter(|_| !fp32)
            .unwrap_or_default();
        // A total built on a reported formula is the same omission: report the first.
        let mut reported: Vec<std::ops::Range<usize>> = Vec::new();
        for f in &cx.facts.formulas {
            // With no adapter and nothing frozen (both ruled out above), the parameters that
            // require gradients are all of them: `sum(p.numel() for p in ... if
            // p.requires_grad)` counts the whole model.
            let whole;
            let f = match f.lin.terms.iter().any(|t| t.role == Role::Trainable) {
                true => {
                    whole = parts::whole_model(f);
                    &whole
                }
                false => f,
            };
            // A per-device share is judged against its stage by MEM008.
            if f.inference
                || f.lin.saw(Role::KvCache)
                || f.lin.saw(Role::Grads)
                || super::states::per_device(f)
            {
                continue;
            }
            // A dict of parts that a caller adds up is judged at the caller's sum.
            if parts::bundle(cx, f) && parts::same_terms(cx, f).any(|g| !parts::bundle(cx, g)) {
                continue;
            }
            let Some(req) = requirement(f) else { continue };
            let Some(weights) = states_without_grads(&req.terms, &optimizers) else {
                continue;
            };
            if parts::part_of_larger(cx, f)
                || parts::stored(cx, f)
                || parts::charged_elsewhere(cx, f, Role::Grads)
                || reported.contains(&weights.symbol_span)
            {
                continue;
            }
            reported.push(weights.symbol_span.clone());
            // A helper that returns the total (`return n * bpp + states_bytes(n)`) states it
            // where its weights are written: reported there rather than at the call site.
            let within = |g: &&Formula| {
                weights.span.start >= g.span.start
                    && weights.span.end <= g.span.end
                    && !parts::bundle(cx, g)
            };
            let at = parts::same_terms(cx, f).find(within).unwrap_or(f);
            out.push(diagnostic(cx, at, weights));
        }
    }
}

/// The weights term of a requirement that counts one copy of the weights and optimizer states,
/// and nothing else sized by the model: no gradients, no trainable share, nothing unlabelled
/// that could hold them.
fn states_without_grads<'a>(
    terms: &[&'a Term],
    optimizers: &[OptimizerChoice],
) -> Option<&'a Term> {
    let parts = counted(terms);
    if parts
        .iter()
        .any(|c| matches!(c.part, Part::Grads | Part::Trainable) || c.term.opaque)
    {
        return None;
    }
    let of = |p: Part| parts.iter().filter(move |c| c.part == p);
    let unlabelled: Vec<&Counted> = of(Part::Bytes).collect();
    let weights = match of(Part::Weights).collect::<Vec<_>>().as_slice() {
        [w] => w.term,
        [] => {
            // Nothing labels the weights: the one count at 16-bit weights' bytes is them.
            let small: Vec<&&Counted> = unlabelled
                .iter()
                .filter(|c| bytes(c.term) <= UNLABELLED_WEIGHT_BYTES + 1e-9)
                .collect();
            match small.as_slice() {
                [w] => w.term,
                _ => return None,
            }
        }
        _ => return None,
    };
    let one_copy = match weights.role {
        Role::Model => parts::copies(weights) <= ONE_COPY,
        _ => bytes(weights) <= LABELLED_WEIGHT_BYTES + 1e-9,
    };
    if !one_copy {
        return None;
    }
    // Every other unlabelled count must be the optimizer's states by its size.
    let rest: Vec<&&Counted> = unlabelled
        .iter()
        .filter(|c| !std::ptr::eq(c.term, weights))
        .collect();
    let inferred = !rest.is_empty()
        && is_count(weights)
        && rest
            .iter()
            .all(|c| parts::unlabelled_states(bytes(c.term), bytes(weights), optimizers));
    if !rest.is_empty() && !inferred {
        return None;
    }
    (of(Part::States).next().is_some() || inferred).then_some(weights)
}

fn diagnostic(cx: &Checker<'_>, f: &Formula, weights: &Term) -> Diagnostic {
    let text = cx.file.slice(&weights.span).to_string();
    let sign = if weights.coef < 0.0 { "-" } else { "+" };
    let message = format!(
        "memory formula counts the weights (`{text}`) and optimizer states but no gradients: every trainable parameter also holds a gradient of its size"
    );
    // Reported where the formula is written; on its weights term when that is written there.
    let written_here = weights.span.start >= f.span.start && weights.span.end <= f.span.end;
    let span = if written_here {
        weights.span.clone()
    } else {
        f.span.clone()
    };
    // The gradient term mirrors the weights term: same size, same sign. Only where the
    // weights are written in the formula itself, so the copy reads what they read, and the
    // formula is a plain sum, so a term added at its end adds to it.
    let fixable =
        written_here && plain_sum(cx.file.slice(&f.span), weights.span.start - f.span.start);
    let fix = fixable.then(|| Fix {
        applicability: Applicability::Unsafe,
        message: format!("add the gradients: `{sign} {text}`"),
        edits: vec![Edit::insert(f.span.end, format!(" {sign} {text}"))],
    });
    Diagnostic::new("MEM006", span, message)
        .with_help("add a gradients term the size of the trainable weights (in the gradient dtype, usually the weights')")
        .with_fix(fix)
}

/// The weights term (at byte `at` of `text`) is a term of the sum `text` states at its top
/// level (`gpu - w - states`, `w * 2 + opt`): not inside a call, a container or brackets, and
/// the sum not shifted or compared (`free - w - s >> 20`).
fn plain_sum(text: &str, at: usize) -> bool {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        if i == at && depth != 0 {
            return false;
        }
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '<' | '>' | ',' | '=' | ':' | '&' | '|' | '^' if depth == 0 => return false,
            _ => {}
        }
    }
    depth == 0 && !text.contains(" if ")
}
