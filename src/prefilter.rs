//! A literal scan that decides, before any parse, whether a file can hold anything a rule that is
//! reported for it reads. Each condition is *necessary* for its rule to fire, derived from what the
//! frontends record, so skipping a file never changes a result:
//! - memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) are recorded only
//!   with a term whose role is a model size or a parameter count, and a term's role is
//!   [`role_of`] of an identifier written in the file: the scan asks `role_of` about every
//!   identifier that contains `model`, `weight` or `param`;
//! - the training-loop rules (GA001-GA005) need an attribute call named exactly `backward` and
//!   one named exactly `step` (the frontend compares the text after the callee's last `.`), or an
//!   `accelerator.accumulate(` block, or a Lightning return divided by `accumulate_grad_batches`;
//! - a unit conversion (MEM004) needs a divisor that folds to 10^9, 2^30, 10^6 or 2^20 (every
//!   way to write one as literals contains one of `DIVISORS`), and either a name with a `_gb`,
//!   `_gib`, `_mb` or `_mib` word to contradict, or a second divisor to compare with;
//! - a dtype or optimizer table (MEM002, MEM003) needs a key that is a quoted dtype or optimizer
//!   name from the knowledge tables: followed by `:` in a dict, or compared in an `if` chain or a
//!   conditional that assigns a name holding `byte` or `multiplier`; or an attribute key such as
//!   `torch.float16:` or `np.float64:` (the frontend reads the dtype from its last segment);
//! - a batch config written in Python (BS001-BS003, MEM005) needs a DeepSpeed key or a declared
//!   global batch, whose names are literals here;
//! - ML900: suppression directives need `memlint` or `noqa`.
//!
//! A rule the scan does not know about makes every file of its language parse.

use crate::expr::{role_of, Role};
use crate::knowledge::knowledge;
use crate::rules::{implemented_codes, UNUSED_SUPPRESSION};
use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

/// What the rules reported for one file can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub memory: bool,
    pub accumulation: bool,
    pub units: bool,
    pub tables: bool,
    pub batch: bool,
    pub suppressions: bool,
    /// A reported rule the scan knows nothing about: parse everything.
    pub unknown: bool,
}

impl Wanted {
    /// Every rule: what `--select ALL` asks for.
    pub const ALL: Wanted = Wanted {
        memory: true,
        accumulation: true,
        units: true,
        tables: true,
        batch: true,
        suppressions: true,
        unknown: false,
    };

    /// From the question "is this code reported for the file?".
    pub fn from_codes(reported: impl Fn(&str) -> bool) -> Wanted {
        let mut w = Wanted::default();
        for code in implemented_codes() {
            if !reported(code) {
                continue;
            }
            match code {
                "MEM001" | "MEM006" => w.memory = true,
                "MEM002" => {
                    w.memory = true;
                    w.tables = true;
                }
                "MEM003" => w.tables = true,
                "MEM004" => w.units = true,
                "MEM005" => {
                    w.memory = true;
                    w.batch = true;
                }
                "BS001" | "BS002" | "BS003" => w.batch = true,
                c if c.starts_with("GA") => w.accumulation = true,
                c if c == UNUSED_SUPPRESSION => w.suppressions = true,
                _ => w.unknown = true,
            }
        }
        w
    }

    fn any(self) -> bool {
        self.memory
            || self.accumulation
            || self.units
            || self.tables
            || self.batch
            || self.suppressions
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Hit {
    /// Part of an identifier that may name a model size or a parameter count.
    Sized,
    Backward,
    Step,
    /// Enough for the loop rules on its own.
    Loop,
    Divisor,
    /// A quoted dtype or optimizer name: a dict key when a `:` follows.
    Quoted,
    /// A `torch.<dtype>:` dict key.
    TableKey,
    Batch,
    Directive,
}

const DIVISORS: &[&str] = &[
    "1e9",
    "1e-9",
    "1e+9",
    "1e6",
    "1e+6",
    "1.0e9",
    "1.0e6",
    "10**9",
    "10 ** 9",
    "10**6",
    "10 ** 6",
    "1000**",
    "1000 **",
    "1000.0**",
    "1000.0 **",
    "1024**",
    "1024 **",
    "1024.0**",
    "1024.0 **",
    "2**30",
    "2 ** 30",
    "2**20",
    "2 ** 20",
    "2.0**30",
    "<< 30",
    "<<30",
    ">> 30",
    ">>30",
    "<< 20",
    "<<20",
    ">> 20",
    ">>20",
    "1073741824",
    "1048576",
    "1_073_741_824",
    "1_048_576",
    "1_000_000",
    "1000000",
    "1024 * 1024",
    "1024*1024",
    "1000 * 1000",
    "1000*1000",
    "1024 / 1024",
    "1024/1024",
    "1024.0 / 1024",
    "1000 / 1000",
    "1000/1000",
    "/ 1024) / 1024",
];

const BATCH: &[&str] = &[
    "\"train_batch_size\"",
    "'train_batch_size'",
    "train_micro_batch_size_per_gpu",
    "global_batch",
    "global-batch",
    "effective_batch",
    "effective-batch",
    "total_batch",
    "total-batch",
    "total_train_batch",
];

/// Few words keep the scan vectorised; each hit is then checked where it stands.
fn patterns() -> Vec<(String, Hit)> {
    let mut p: Vec<(String, Hit)> = Vec::new();
    p.extend(
        ["param", "model", "weight"]
            .iter()
            .map(|w| (w.to_string(), Hit::Sized)),
    );
    p.push((".backward".into(), Hit::Backward));
    p.push((".step".into(), Hit::Step));
    p.push(("accumulate_grad_batches".into(), Hit::Loop));
    p.push((".accumulate(".into(), Hit::Loop));
    // Every divisor starts with one of these.
    p.extend(
        [
            "1e", "1.0e", "10", "2**", "2 **", "2.0**", "<<", ">>", "1_0", "/ 1024",
        ]
        .iter()
        .map(|w| (w.to_string(), Hit::Divisor)),
    );
    p.extend(BATCH.iter().map(|w| (w.to_string(), Hit::Batch)));
    p.extend(
        ["memlint", "noqa"]
            .iter()
            .map(|w| (w.to_string(), Hit::Directive)),
    );
    // A quoted key before `:`, and `torch.<dtype>:`.
    p.extend(
        ["\":", "\" :", "':", "' :"]
            .iter()
            .map(|w| (w.to_string(), Hit::Quoted)),
    );
    // `torch.float16:`, `np.float64:`: every dtype attribute a table can be keyed by starts so.
    p.extend(
        [".float", ".half", ".double", ".bfloat", ".int", ".uint"]
            .iter()
            .map(|w| (w.to_string(), Hit::TableKey)),
    );
    p
}

/// Lowercase dtype and optimizer names of the knowledge tables: the keys a table can have.
fn table_keys() -> &'static std::collections::HashSet<String> {
    static KEYS: OnceLock<std::collections::HashSet<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let k = knowledge();
        k.dtypes
            .iter()
            .flat_map(|d| d.names.iter())
            .chain(k.optimizers.iter().flat_map(|o| o.names.iter()))
            .map(|n| n.to_ascii_lowercase())
            .collect()
    })
}

/// The quoted string that ends just before byte `close` (the closing quote).
fn quoted_before(lower: &[u8], close: usize) -> Option<&str> {
    let quote = *lower.get(close)?;
    let open = lower.get(..close)?.iter().rposition(|b| *b == quote)?;
    std::str::from_utf8(lower.get(open + 1..close)?).ok()
}

/// Any quoted known key in the file (for `if` chains on a dtype or optimizer name).
fn any_quoted_key(lower: &[u8]) -> bool {
    let text = String::from_utf8_lossy(lower);
    text.split(['"', '\''])
        .skip(1)
        .step_by(2)
        .any(|s| table_keys().contains(s))
}

/// The matcher and, by pattern index, each word and what it stands for.
type Scanner = (AhoCorasick, Vec<(String, Hit)>);

fn automaton() -> Option<&'static Scanner> {
    static AC: OnceLock<Option<Scanner>> = OnceLock::new();
    AC.get_or_init(|| {
        let p = patterns();
        AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(p.iter().map(|(w, _)| w.as_str()))
            .ok()
            .map(|ac| (ac, p))
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
    memchr::memmem::find(hay, needle).is_some()
}

/// Whether the file must be parsed. Launchers and configs are always read: they give context to
/// other files.
pub fn needs_parse(language: Language, text: &str, wanted: Wanted) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) || wanted.unknown {
        return true;
    }
    if !wanted.any() {
        return false;
    }
    let Some((ac, patterns)) = automaton() else {
        return true;
    };
    let bytes = text.as_bytes();
    let (mut backward, mut step) = (false, false);
    // MEM004 needs a named unit with one divisor, or two converted values to compare.
    let mut divisors = 0;
    // Leftmost-longest matches, restarting after each one's start, so every occurrence of a word
    // is seen except inside a name already read whole. The words are matched in ASCII lowercase
    // (`role_of` and the directives ignore case); a lowercased copy lets the matcher vectorise.
    let mut at = 0;
    let lower = bytes.to_ascii_lowercase();
    while let Some(m) = ac.find(Input::new(&lower).span(at..lower.len())) {
        let Some((word, hit)) = patterns.get(m.pattern().as_usize()) else {
            return true;
        };
        at = m.start() + 1;
        match hit {
            Hit::Sized => {
                let (sized, end) = sized_name_at(text, m.start());
                if wanted.memory && sized {
                    return true;
                }
                // The rest of the name is read here; no other word starts a rule inside it.
                let rest = &lower[m.start()..end];
                if wanted.suppressions && (contains(rest, b"memlint") || contains(rest, b"noqa")) {
                    return true;
                }
                at = end.max(at);
            }
            Hit::Backward | Hit::Step => {
                if !wanted.accumulation || !is_attribute(bytes, m.start(), m.end(), word) {
                    continue;
                }
                if *hit == Hit::Backward {
                    backward = true;
                } else {
                    step = true;
                }
                if backward && step {
                    return true;
                }
            }
            Hit::Loop if wanted.accumulation => return true,
            // A divisor divides, multiplies (`* 1e-9`, `1024 * 1024`), shifts, or is assigned to
            // a name that divides later (`GIB = 1024 ** 3`).
            Hit::Divisor if wanted.units => {
                let here = &lower[m.start()..];
                let before = text[..m.start()].trim_end_matches([' ', '\t', '(']);
                let divisor = DIVISORS.iter().any(|d| here.starts_with(d.as_bytes()));
                if divisor
                    && (word.starts_with(['<', '>', '/']) || before.ends_with(['/', '*', '=']))
                {
                    divisors += 1;
                    if divisors >= 2 {
                        return true;
                    }
                }
            }
            Hit::TableKey if wanted.tables => {
                let name_end = lower[m.end()..]
                    .iter()
                    .position(|b| !is_ident(*b))
                    .map_or(lower.len(), |e| m.end() + e);
                let name = std::str::from_utf8(&lower[m.start() + 1..name_end]).unwrap_or("");
                if table_keys().contains(name)
                    && lower.get(name_end) == Some(&b':')
                    && number_follows(text, name_end)
                {
                    return true;
                }
            }
            Hit::Quoted if wanted.tables => {
                let key = quoted_before(&lower, m.start());
                if key.is_some_and(|k| table_keys().contains(k))
                    && number_follows(text, m.start() + 1)
                {
                    return true;
                }
            }
            Hit::Batch if wanted.batch => return true,
            Hit::Directive if wanted.suppressions => return true,
            _ => {}
        }
    }
    (divisors == 1 && names_a_unit(&lower))
        || (wanted.tables
            && (assigns_number(&lower, b"byte") || assigns_number(&lower, b"multiplier"))
            && any_quoted_key(&lower))
}

/// A `gb`, `gib`, `mb` or `mib` word, as the Python frontend reads a unit from a name's
/// `_`-separated words.
fn names_a_unit(lower: &[u8]) -> bool {
    [&b"gb"[..], b"gib", b"mb", b"mib"].iter().any(|unit| {
        memchr::memmem::find_iter(lower, unit).any(|i| {
            let before = i.checked_sub(1).and_then(|j| lower.get(j));
            let after = lower.get(i + unit.len());
            let edge = |b: Option<&u8>| b.is_none_or(|b| !b.is_ascii_alphanumeric());
            edge(before) && edge(after)
        })
    })
}

/// A number (or a sign before one) after optional spaces, a `:` and spaces: a table value.
fn number_follows(text: &str, at: usize) -> bool {
    let rest = text.get(at..).unwrap_or("");
    let rest = rest.trim_start_matches([' ', '\t']);
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    rest.trim_start_matches([' ', '\t', '(', '-', '+'])
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// A name holding `word` assigned a number (`bytes_per_param = 4`, `nbytes = 2 if ...`): the
/// arms of an `if` chain or a conditional that make a table.
fn assigns_number(lower: &[u8], word: &[u8]) -> bool {
    memchr::memmem::find_iter(lower, word).any(|i| {
        let mut j = i + word.len();
        while lower.get(j).is_some_and(|b| is_ident(*b)) {
            j += 1;
        }
        while lower.get(j).is_some_and(|b| *b == b' ' || *b == b'\t') {
            j += 1;
        }
        if lower.get(j) != Some(&b'=') || lower.get(j + 1) == Some(&b'=') {
            return false;
        }
        j += 1;
        while lower
            .get(j)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'(' | b'-'))
        {
            j += 1;
        }
        lower
            .get(j)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_only_what_no_rule_reads() {
        let py = Language::Python;
        let all = Wanted::ALL;
        let yes = |t: &str| needs_parse(py, t, all);
        assert!(yes("free = gpu_gb - model_size_gb * 2\n"));
        assert!(yes("n_params = 7e9\n"));
        assert!(!yes("opt = AdamW(model.parameters())\nmodel.train()\n"));
        assert!(yes("loss.backward()\nif i % n == 0:\n    opt.step()\n"));
        assert!(yes("accelerator.backward(loss / accum)\nopt.step()\n"));
        assert!(!yes("loss.backward()\n"));
        assert!(!yes("loss.Backward()\nopt.steps()\n"));
        assert!(yes("return loss / self.trainer.accumulate_grad_batches\n"));
        assert!(yes("x = 1  # noqa: MEM001\n"));
        assert!(yes("free_gib = free / 1e9\n"));
        assert!(yes("gb = free / 2**30\n"));
        assert!(yes("ok = a / 1e9 < b / 2**30\n"));
        assert!(!yes("elapsed = t / 1e6\n"));
        assert!(!yes("opt = Adam(lr=1e-6, eps=1e-8)\n"));
        assert!(yes("SIZES = {\"bf16\": 4}\n"));
        assert!(yes("SIZES = {np.float64: 4, np.int8: 1}\n"));
        assert!(yes("SIZES = {torch.bfloat16: 4}\n"));
        assert!(yes("STATES = {'adamw': 1}\n"));
        assert!(yes("if dtype == 'bf16':\n    nbytes = 4\n"));
        assert!(!yes("name = 'resnet'\nkind = 'bf16'\n"));
        assert!(yes("cfg = {\"train_batch_size\": 32}\n"));
        assert!(yes("p.add_argument(\"--global-batch-size\", default=8)\n"));
        assert!(!yes("per_device_train_batch_size = 8\n"));
        assert!(needs_parse(Language::Shell, "echo hi\n", all));
    }

    #[test]
    fn only_what_the_reported_rules_read() {
        let py = Language::Python;
        let ga = Wanted {
            accumulation: true,
            ..Wanted::default()
        };
        assert!(needs_parse(py, "loss.backward()\nopt.step()\n", ga));
        assert!(!needs_parse(py, "free = gpu_gb - model_size_gb * 2\n", ga));
        assert!(!needs_parse(py, "x = 1  # noqa: GA001\n", ga));
        assert!(!needs_parse(
            py,
            "free = gpu_gb - model_size_gb * 2\n",
            Wanted::default()
        ));
        let unknown = Wanted {
            unknown: true,
            ..Wanted::default()
        };
        assert!(needs_parse(py, "x = 1\n", unknown));
    }
}
