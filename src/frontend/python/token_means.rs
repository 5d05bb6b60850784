//! Token means of padded batches (GA006): a causal-LM loss that averages over each micro-batch's
//! own tokens, in a file that pads its batches and neither packs them nor counts tokens.

use super::*;

/// A causal-LM token loss: a cross-entropy that ignores padded labels, or a causal LM's `.loss`.
const TOKEN_LOSS: &[&str] = &["ignore_index", "ForCausalLM"];
/// Batches padded to different numbers of real tokens.
const PADDING: &[&str] = &[
    "pad_sequence",
    "padding=",
    "DataCollatorForSeq2Seq",
    "DataCollatorWithPadding",
    "DataCollatorForLanguageModeling",
];
/// Packed batches, or losses normalised by a token count: the means weigh tokens alike.
const EVEN: &[&str] = &[
    "pack",
    "group_texts",
    "num_items_in_batch",
    "num_tokens",
    "n_tokens",
    "ntokens",
    "token_count",
    "tokens_in_batch",
    "reduction=\"sum\"",
    "reduction='sum'",
    "reduction = \"sum\"",
];

impl Walker<'_> {
    pub(super) fn token_means(&self) -> Option<TokenMeans> {
        let src = self.src.as_bytes();
        let find = |words: &[&str]| {
            words
                .iter()
                .filter_map(|w| memchr::memmem::rfind(src, w.as_bytes()).map(|at| at..at + w.len()))
                .max_by_key(|r| r.start)
        };
        if find(EVEN).is_some() {
            return None;
        }
        let token_loss = find(TOKEN_LOSS)?;
        let padding = find(PADDING)?;
        Some(TokenMeans {
            token_loss,
            padding,
        })
    }
}
