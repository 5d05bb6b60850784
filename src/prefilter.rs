//! A literal scan that decides, before any parse, whether a file can hold anything a rule reads.
//! Each condition is *necessary* for some rule to fire, derived from what the frontends record, so
//! skipping a file never changes a result:
//! - memory formulas are recorded only with a term whose role is a model size or a parameter
//!   count, and a term's role is [`role_of`] of an identifier written in the file: the scan asks
//!   `role_of` about every identifier that contains `model`, `weight` or `param`;
//! - every training-loop rule needs a `backward` call and a `step` (an optimizer step, or a
//!   Lightning `training_step`), except a Lightning `training_step` that divides by
//!   `accumulate_grad_batches`, which names it;
//! - suppression directives need `memlint` or `noqa` (for ML900).

use crate::expr::{role_of, Role};
use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::sync::OnceLock;

const WORDS: &[&str] = &[
    "param",
    "model",
    "weight",
    "backward",
    "step",
    "memlint",
    "noqa",
    "accumulate_grad_batches",
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

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier around byte `at`.
fn identifier_at(bytes: &[u8], at: usize) -> &[u8] {
    let mut start = at;
    while start > 0 && is_ident(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = at;
    while end < bytes.len() && is_ident(bytes[end]) {
        end += 1;
    }
    &bytes[start..end]
}

/// Whether the file must be parsed. Launchers and configs are always read: they give context to
/// other files.
pub fn needs_parse(language: Language, text: &str) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) {
        return true;
    }
    let Some(ac) = automaton() else { return true };
    let bytes = text.as_bytes();
    let (mut backward, mut step) = (false, false);
    for m in ac.find_overlapping_iter(text) {
        match m.pattern().as_usize() {
            0..=2 => {
                let ident = identifier_at(bytes, m.start());
                let sized = std::str::from_utf8(ident)
                    .is_ok_and(|id| matches!(role_of(id), Role::Model | Role::ParamCount));
                if sized {
                    return true;
                }
            }
            3 => backward = true,
            4 => step = true,
            _ => return true,
        }
    }
    backward && step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_only_what_no_rule_reads() {
        let py = Language::Python;
        assert!(needs_parse(py, "free = gpu_gb - model_size_gb * 2\n"));
        assert!(needs_parse(py, "n_params = 7e9\n"));
        assert!(!needs_parse(
            py,
            "opt = AdamW(model.parameters())\nmodel.train()\n"
        ));
        assert!(needs_parse(
            py,
            "loss.backward()\nif i % n == 0:\n    opt.step()\n"
        ));
        assert!(needs_parse(
            py,
            "accelerator.backward(loss / accum)\nopt.step()\n"
        ));
        assert!(!needs_parse(py, "loss.backward()\n"));
        assert!(needs_parse(
            py,
            "return loss / self.trainer.accumulate_grad_batches\n"
        ));
        assert!(needs_parse(py, "x = 1  # noqa: MEM001\n"));
        assert!(needs_parse(Language::Shell, "echo hi\n"));
    }
}
