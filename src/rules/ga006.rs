//! GA006 token-mean-of-means: in an accumulating loop, each micro-batch's loss is a token mean of
//! a padded causal-LM batch divided by N, so the window's loss is a mean of means. Off by
//! default. Also a transformers pin before 4.46 in a project that accumulates over padded
//! causal-LM batches: that Trainer averaged the means itself. Documentation: `rules/GA006.toml`.

use super::{line_of, Checker, Rule};
use crate::diagnostic::Diagnostic;
use crate::project::pins::old_transformers;

pub struct TokenMeanOfMeans;

impl Rule for TokenMeanOfMeans {
    fn code(&self) -> &'static str {
        "GA006"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        pinned_before_fix(cx, out);
        let Some(tm) = &cx.facts.token_means else {
            return;
        };
        let token_loss = cx.file.slice(&tm.token_loss).trim();
        let padding = cx.file.slice(&tm.padding).trim();
        for lp in &cx.facts.loops {
            if lp.factor_value.is_some_and(|v| v <= 1.0) {
                continue;
            }
            let n = &lp.factor;
            // The backward's loss divided by the accumulation factor: a mean per micro-batch,
            // then averaged over the window.
            for b in &lp.backwards {
                let mut divisors = Vec::new();
                b.prov.divisors(&mut divisors);
                if !divisors.iter().any(|d| d.trim() == n.as_str()) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        "GA006",
                        b.call.clone(),
                        format!("each micro-batch's loss is a token mean (`{token_loss}`, {}) divided by `{n}`, and the batches are padded (`{padding}`, {}): micro-batches with fewer real tokens weigh as much as full ones, so the window's loss is a mean of means, not the mean over its tokens", line_of(cx.file, tm.token_loss.start), line_of(cx.file, tm.padding.start)),
                    )
                    .with_help("sum the token losses (`reduction=\"sum\"`) and divide by the number of non-ignored tokens in the whole window"),
                );
            }
        }
    }
}

/// A requirements file or `pyproject.toml` that keeps transformers before 4.46, in a project whose
/// Trainer accumulates over more than one micro-batch for a language model, without packing.
fn pinned_before_fix(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    let (Some(pin), Some(project)) = (old_transformers(cx.facts), &cx.training.project.pinned)
    else {
        return;
    };
    let (Some(factor), Some(trainer), Some(lm), None) = (
        project.accumulation.first(),
        &project.trainer,
        &project.language_model,
        &project.packing,
    ) else {
        return;
    };
    let model = match lm == trainer {
        true => String::new(),
        false => format!(" ({lm})"),
    };
    let written = cx.file.slice(&pin.span).trim();
    out.push(
        Diagnostic::new(
            "GA006",
            pin.span.clone(),
            format!("`{written}` keeps transformers before 4.46, while the project's Trainer ({trainer}) accumulates gradients over {} micro-batches ({}) for a language model{model}: before 4.46 the Trainer averaged each micro-batch's token-mean loss over the window, so micro-batches with fewer real tokens weigh as much as full ones", factor.value, factor.at),
        )
        .with_help("require `transformers>=4.48.3` (4.46 counts the window's tokens; 4.47.1 and 4.48.3 fixed its follow-ups), or pack the sequences"),
    );
}
