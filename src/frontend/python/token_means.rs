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
        // The last place any of `words` is written. A forward search is vectorised, a
        // backward one is not; none of the words overlaps itself, so the last match found
        // forward is the last one written.
        let find = |words: &[&str]| {
            words
                .iter()
                .filter_map(|w| {
                    let at = memchr::memmem::find_iter(src, w.as_bytes()).last()?;
                    Some(at..at + w.len())
                })
                .max_by_key(|r| r.start)
        };
        if EVEN
            .iter()
            .any(|w| memchr::memmem::find(src, w.as_bytes()).is_some())
        {
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
