//! A literal scan that decides, before any parse, whether a file can hold anything a rule that is
//! reported for it reads. Each condition is *necessary* for its rule to fire, derived from what the
//! frontends record, so skipping a file never changes a result:
//! - MEM001: memory formulas are recorded only with a term whose role is a model size or a
//!   parameter count, and a term's role is [`role_of`] of an identifier written in the file: the
//!   scan asks `role_of` about every identifier that contains `model`, `weight` or `param`;
//! - GA001: an accumulating loop needs an attribute call whose name is exactly `backward` and one
//!   whose name is exactly `step` (the frontend compares the text after the callee's last `.`, so
//!   the source holds `.backward` and `.step` not followed by an identifier character), and a `%`
//!   test;
//! - ML900: suppression directives need `memlint` or `noqa`.
//!
//! A rule the scan does not know about makes every file of its language parse.

use crate::expr::{role_of, Role};
use crate::rules::{implemented_codes, UNUSED_SUPPRESSION};
use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

/// What the rules reported for one file can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub memory: bool,
    pub accumulation: bool,
    pub suppressions: bool,
    /// A reported rule the scan knows nothing about: parse everything.
    pub unknown: bool,
}

impl Wanted {
    /// Every rule: what `--select ALL` asks for.
    pub const ALL: Wanted = Wanted {
        memory: true,
        accumulation: true,
        suppressions: true,
        unknown: false,
    };

    /// From the question "is this code reported for the file?".
    pub fn from_codes(reported: impl Fn(&str) -> bool) -> Wanted {
        let mut w = Wanted {
            memory: false,
            accumulation: false,
            suppressions: false,
            unknown: false,
        };
        for code in implemented_codes() {
            if !reported(code) {
                continue;
            }
            match code {
                "MEM001" => w.memory = true,
                "GA001" => w.accumulation = true,
                c if c == UNUSED_SUPPRESSION => w.suppressions = true,
                _ => w.unknown = true,
            }
        }
        w
    }
}

const MEMORY: std::ops::RangeInclusive<usize> = 0..=2;
const BACKWARD: usize = 3;
const STEP: usize = 4;
const WORDS: &[&str] = &[
    "param",
    "model",
    "weight",
    ".backward",
    ".step",
    "memlint",
    "noqa",
];

fn automaton() -> Option<&'static AhoCorasick> {
    static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    AC.get_or_init(|| {
        AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostFirst)
            .build(WORDS)
            .ok()
    })
    .as_ref()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The bounds of the identifier around byte `at`, with non-ASCII letters or without (Python
/// names may hold them); both bounds fall on character boundaries.
fn identifier_at(bytes: &[u8], at: usize, non_ascii: bool) -> (usize, usize) {
    let part = |b: u8| is_ident(b) || (non_ascii && b >= 0x80);
    let mut start = at;
    while start > 0 && part(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = at;
    while end < bytes.len() && part(bytes[end]) {
        end += 1;
    }
    (start, end)
}

/// Whether any reading of the name around `at` has a model-size or parameter-count role, and where
/// the name ends.
fn sized_name_at(text: &str, at: usize) -> (bool, usize) {
    let bytes = text.as_bytes();
    let ascii = identifier_at(bytes, at, false);
    let wide = identifier_at(bytes, at, true);
    let sized = |(s, e): (usize, usize)| text.get(s..e).is_some_and(sized_name);
    if sized(ascii) || (wide != ascii && sized(wide)) {
        return (true, wide.1);
    }
    // After a number (`2model_gb`, `0x1model_gb`, where recovery splits the literal from a name),
    // the name may start at any letter before the word.
    let (start, end) = ascii;
    let after_number = bytes[start].is_ascii_digit()
        && (start + 1..=at)
            .any(|k| (bytes[k].is_ascii_alphabetic() || bytes[k] == b'_') && sized((k, end)));
    (after_number, wide.1)
}

/// Names repeat within a file and across a project (`model`, `weight_decay`): each thread
/// remembers the answers, up to a bound.
fn sized_name(name: &str) -> bool {
    const REMEMBERED: usize = 1 << 16;
    thread_local! {
        static SEEN: RefCell<HashMap<Box<str>, bool>> = RefCell::new(HashMap::new());
    }
    let ask = || matches!(role_of(name), Role::Model | Role::ParamCount);
    SEEN.with(|seen| {
        let Ok(mut seen) = seen.try_borrow_mut() else {
            return ask();
        };
        if let Some(&known) = seen.get(name) {
            return known;
        }
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        let answer = ask();
        seen.insert(name.into(), answer);
        answer
    })
}

/// `.name` exactly as written (the scan is case-insensitive, the frontend is not), not continued
/// by an identifier character.
fn is_attribute(bytes: &[u8], start: usize, end: usize, word: &str) -> bool {
    bytes.get(start..end) == Some(word.as_bytes()) && !bytes.get(end).is_some_and(|b| is_ident(*b))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether the file must be parsed. Launchers and configs are always read: they give context to
/// other files.
pub fn needs_parse(language: Language, text: &str, wanted: Wanted) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) || wanted.unknown {
        return true;
    }
    if !(wanted.memory || wanted.accumulation || wanted.suppressions) {
        return false;
    }
    let Some(ac) = automaton() else { return true };
    let bytes = text.as_bytes();
    let (mut backward, mut step) = (false, false);
    // Leftmost matches, restarting after each one's start: no two words start at the same byte,
    // so every occurrence of every word is seen, except words inside a name already read whole.
    let mut at = 0;
    // The words are matched in ASCII lowercase (`role_of` and the directives ignore case); a
    // lowercased copy lets the matcher use its vectorised search.
    let lower = bytes.to_ascii_lowercase();
    while let Some(m) = ac.find(Input::new(&lower).span(at..lower.len())) {
        let p = m.pattern().as_usize();
        at = m.start() + 1;
        if MEMORY.contains(&p) {
            let (sized, end) = sized_name_at(text, m.start());
            if wanted.memory && sized {
                return true;
            }
            // The rest of the name is read here; `.backward` and `.step` cannot start in it.
            let rest = &lower[m.start()..end];
            if wanted.suppressions && (contains(rest, b"memlint") || contains(rest, b"noqa")) {
                return true;
            }
            at = end;
        } else if p == BACKWARD || p == STEP {
            if !wanted.accumulation || !is_attribute(bytes, m.start(), m.end(), WORDS[p]) {
                continue;
            }
            if p == BACKWARD {
                backward = true;
            } else {
                step = true;
            }
            if backward && step {
                if text.contains('%') {
                    return true;
                }
                // No `%` anywhere: only memory formulas or directives remain possible.
                if !(wanted.memory || wanted.suppressions) {
                    return false;
                }
            }
        } else if wanted.suppressions {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_only_what_no_rule_reads() {
        let py = Language::Python;
        let all = Wanted::ALL;
        assert!(needs_parse(py, "free = gpu_gb - model_size_gb * 2\n", all));
        assert!(needs_parse(py, "n_params = 7e9\n", all));
        assert!(!needs_parse(
            py,
            "opt = AdamW(model.parameters())\nmodel.train()\n",
            all
        ));
        assert!(needs_parse(
            py,
            "loss.backward()\nif i % n == 0:\n    opt.step()\n",
            all
        ));
        assert!(!needs_parse(py, "loss.backward()\nopt.step()\n", all));
        assert!(needs_parse(py, "x = 1  # noqa: MEM001\n", all));
        assert!(needs_parse(Language::Shell, "echo hi\n", all));
    }

    #[test]
    fn accumulation_needs_the_exact_attribute_names() {
        let py = Language::Python;
        let ga = Wanted {
            memory: false,
            accumulation: true,
            suppressions: false,
            unknown: false,
        };
        let looped = "loss.backward()\nif i % n == 0:\n    opt.step()\n";
        assert!(needs_parse(py, looped, ga));
        for other in [
            looped.replace(".backward", ".Backward"),
            looped.replace(".backward", ".backward_hook"),
            looped.replace(".step", ".steps"),
            looped.replace("opt.step", "step"),
            looped.replace('%', "//"),
        ] {
            assert!(!needs_parse(py, &other, ga), "{other}");
        }
        // A name glued to a number is read as the parser may split it.
        assert!(needs_parse(py, "x = 1mem_model * 2\n", Wanted::ALL));
        // At the end of the file, `.step` is still a name.
        assert!(needs_parse(py, "loss.backward()\nx = i % n\nopt.step", ga));
    }

    #[test]
    fn only_the_reported_rules_count() {
        let py = Language::Python;
        let none = Wanted::from_codes(|_| false);
        assert!(!needs_parse(
            py,
            "free = gpu_gb - model_size_gb * 2\n",
            none
        ));
        let default = Wanted::from_codes(|c| c != UNUSED_SUPPRESSION);
        assert!(!needs_parse(py, "x = 1  # noqa: E501\n", default));
        assert!(needs_parse(py, "x = 1  # noqa: E501\n", Wanted::ALL));
        assert!(needs_parse(Language::Yaml, "a: 1\n", none));
    }
}
