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
    pub(super) fn token_means(&self, tree: &Tree) -> Option<TokenMeans> {
        let src = self.src.as_bytes();
        let root = tree.root_node();
        // Where each of `words` is written in the code, not in a comment or a docstring.
        let written = |w: &'static str| {
            memchr::memmem::find_iter(src, w.as_bytes())
                .filter(move |at| in_code(root, *at..*at + w.len()))
                .map(move |at| at..at + w.len())
        };
        if EVEN.iter().any(|w| written(w).next().is_some()) {
            return None;
        }
        // The last place any of `words` is written.
        let last = |words: &[&'static str]| {
            words
                .iter()
                .filter_map(|w| written(w).last())
                .max_by_key(|r| r.start)
        };
        let token_loss = last(TOKEN_LOSS)?;
        let padding = last(PADDING)?;
        Some(TokenMeans {
            token_loss,
            padding,
        })
    }
}

/// Whether `span` is code: not in a comment, nor in a string that is a statement of its own
/// (a docstring).
fn in_code(root: Node, span: Range<usize>) -> bool {
    let Some(mut node) = root.descendant_for_byte_range(span.start, span.end) else {
        return false;
    };
    loop {
        match node.ty() {
            "comment" => return false,
            "string"
                if node
                    .parent()
                    .is_some_and(|p| p.ty() == "expression_statement") =>
            {
                return false
            }
            _ => {}
        }
        match node.parent() {
            Some(p) => node = p,
            None => return true,
        }
    }
}
