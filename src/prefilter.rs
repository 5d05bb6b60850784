//! A literal scan that decides, before any parse, whether a file can hold anything a rule reads.
//! Each condition is *necessary* for some rule to fire, derived from what the frontends record
//! (a formula needs a model-size or parameter-count name; a loop needs `backward` and `step`), so
//! skipping a file never changes a result.

use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::sync::OnceLock;

const WORDS: &[&str] = &[
    // 0..3: names that can be a model size (with a size word) or a parameter count.
    "param",
    "model",
    "weight",
    // 3..13: size words that make a model/weight name a size.
    "gb",
    "gib",
    "mb",
    "mib",
    "bytes",
    "mem",
    "size",
    "footprint",
    "vram",
    "model_size",
    // 13..15: an accumulation loop.
    "backward",
    "step",
    // 15..17: suppression directives.
    "memlint",
    "noqa",
];

fn automaton() -> Option<&'static AhoCorasick> {
    static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    AC.get_or_init(|| {
        AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(WORDS)
            .ok()
    })
    .as_ref()
}

/// Whether the file must be parsed. Configs and launchers are always read: they give context to
/// other files.
pub fn needs_parse(language: Language, text: &str) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) {
        return true;
    }
    let Some(ac) = automaton() else { return true };
    let mut seen = [false; 17];
    for m in ac.find_overlapping_iter(text) {
        seen[m.pattern().as_usize()] = true;
    }
    let param = seen[0];
    let named = seen[1] || seen[2];
    let sized = seen[3..13].iter().any(|s| *s);
    let memory = param || (named && sized);
    let accumulation = seen[13] && seen[14];
    let directives = seen[15] || seen[16];
    memory || accumulation || directives
}
