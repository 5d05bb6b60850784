//! GA006 token-mean-of-means: in an accumulating loop, each micro-batch's loss is a token mean of
//! a padded causal-LM batch divided by N, so the window's loss is a mean of means. Off by
//! default. Documentation: `rules/GA006.toml`.

use super::{line_of, Checker, Rule};
use crate::diagnostic::Diagnostic;

pub struct TokenMeanOfMeans;

impl Rule for TokenMeanOfMeans {
    fn code(&self) -> &'static str {
        "GA006"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
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
