//! Data loaders built with the global batch (BS002's loader case): `DataLoader(ds,
//! batch_size=batch_size)` in a file that derives the accumulation factor as
//! `batch_size // micro_batch_size`, which says `batch_size` is the batch of a whole window and
//! `micro_batch_size` the batch of one micro-step.

use super::*;
use crate::frontend::fields::{PyField, PyKind};

impl<'s> Walker<'s> {
    /// `batch_size=<value>` in a call of a data loader.
    pub(super) fn note_loader_batch(&mut self, keyword: Node, value: Node) {
        let Some(call) = keyword
            .parent()
            .and_then(|args| args.parent())
            .filter(|call| call.ty() == "call")
        else {
            return;
        };
        let is_loader = call
            .field("function")
            .is_some_and(|f| last_segment(self.text(f)).ends_with("DataLoader"));
        let text = self.text(value);
        if is_loader && matches!(value.ty(), "identifier" | "attribute") {
            self.loader_batch_args
                .push((text, value.byte_range(), call.byte_range()));
        }
    }

    /// The loaders whose batch is the one the file divides by the micro batch to get the
    /// accumulation factor (a name for one, or the factor an accumulating loop steps on), but
    /// not an evaluation loader.
    pub(super) fn loader_batches(&self, loops: &[AccumLoop]) -> Vec<LoaderBatch> {
        let mut out = Vec::new();
        for (arg, span, call) in &self.loader_batch_args {
            let key = last_segment(arg);
            if key.to_ascii_lowercase().contains("micro") || self.evaluation_loader(call) {
                continue;
            }
            // `accum = <key> // <micro>` with the same prefix (`cfg.batch_size // cfg.micro_batch_size`).
            let prefix = arg.strip_suffix(key).unwrap_or("");
            let derivation = self.assigned_text.iter().find_map(|(name, text)| {
                if !names_accumulation(name) && !loops.iter().any(|lp| lp.factor == *name) {
                    return None;
                }
                let compact: String = text.split_whitespace().collect();
                let (left, right) = compact
                    .split_once("//")
                    .or_else(|| compact.split_once('/'))?;
                let left = left.trim_start_matches("int(").trim_start_matches('(');
                let right = right.trim_end_matches(')');
                let micro = right.strip_prefix(prefix)?;
                (left == *arg
                    && micro.to_ascii_lowercase().contains("micro")
                    && micro.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .then(|| (name.clone(), text.to_string(), right.to_string()))
            });
            let Some((accum, text, micro)) = derivation else {
                continue;
            };
            let at = memchr::memmem::find(self.src.as_bytes(), text.as_bytes());
            out.push(LoaderBatch {
                span: span.clone(),
                arg: arg.to_string(),
                micro,
                accum,
                derivation: text.split_whitespace().collect::<Vec<_>>().join(" "),
                derived_at: at.map(|a| a..a + text.len()),
            });
        }
        out
    }
}
