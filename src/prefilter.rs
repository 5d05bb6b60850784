//! A literal scan that decides, before any parse, whether a file can hold anything a rule that is
//! reported for it reads. Each condition is *necessary* for its rule to fire, derived from what the
//! frontends record, so skipping a file never changes a result:
//! - memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) are recorded only
//!   with a term whose role is a model size or a parameter count, and a term's role is
//!   [`role_of`] of an identifier written in the file: the scan asks `role_of` about every
//!   identifier that contains `model`, `weight` or `param`. A parameter count counts only where
//!   a rule can use one: assigned a possible constant, as a config key, or multiplied where an
//!   optimizer-state `*byte*` name is assigned;
//! - the training-loop rules (GA001-GA005) need an attribute call named exactly `backward` and
//!   one named exactly `step` (the frontend compares the text after the callee's last `.`), or an
//!   `accelerator.accumulate(` block, or a Lightning return divided by `accumulate_grad_batches`;
//! - a unit mismatch (MEM004) needs a decimal divisor (10^9, 10^6) and either a binary one
//!   (2^30, 2^20) or an assigned `_gib`/`_mib` name; every way to write a divisor as literals
//!   contains one of `DIVISORS`;
//! - a dtype or optimizer table (MEM002, MEM003) needs a known key followed by `:` and a number
//!   in a dict (quoted, or an attribute such as `torch.float16` read by its last segment), or a
//!   known key compared (`==`, `in (...)`) in a file that assigns a number to a name holding
//!   `byte` or `multiplier`;
//! - a batch config written in Python (BS001, BS002) needs a DeepSpeed key or a declared global
//!   batch where a config holds it (a quoted dict key, an argparse flag, a class field);
//! - ML900: suppression directives need `memlint` or `noqa`.
//!
//! What a file gives other files (a script's context for its launcher's run) does not depend on
//! this scan: a skipped script that a run reaches is analysed when the run is joined. A rule the
//! scan does not know about makes every file of its language parse.

use crate::expr::{role_of, Role};
use crate::frontend::python_config::{BATCH_KEY_NAMES, BATCH_KEY_PARTS};
use crate::knowledge::{knowledge, normalize as optimizer_name};
use crate::project::MODEL_KEYS;
use crate::rules::{implemented_codes, UNUSED_SUPPRESSION};
use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::collections::HashSet;
use std::sync::OnceLock;

/// What the rules reported for one file can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub memory: bool,
    pub accumulation: bool,
    pub units: bool,
    pub tables: bool,
    pub batch: bool,
    /// MEM005: whether training fits, from constants and configs joined across files.
    pub fit: bool,
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
        fit: true,
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
                    w.fit = true;
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

/// Literal spellings of the divisors `unit_of_divisor` accepts, and whether each is binary
/// (2^30, 2^20) or decimal (10^9, 10^6). A spelling ending in `**` takes any exponent.
const DIVISORS: &[(&str, bool)] = &[
    ("1e9", false),
    ("1e-9", false),
    ("1e+9", false),
    ("1e6", false),
    ("1e-6", false),
    ("1e+6", false),
    ("1.0e9", false),
    ("1.0e6", false),
    ("10**9", false),
    ("10 ** 9", false),
    ("10**6", false),
    ("10 ** 6", false),
    ("1000**", false),
    ("1000 **", false),
    ("1000.0**", false),
    ("1000.0 **", false),
    ("1_000_000", false),
    ("1000000", false),
    ("1000 * 1000", false),
    ("1000*1000", false),
    ("1000 / 1000", false),
    ("1000/1000", false),
    ("1024**", true),
    ("1024 **", true),
    ("1024.0**", true),
    ("1024.0 **", true),
    ("2**30", true),
    ("2 ** 30", true),
    ("2**20", true),
    ("2 ** 20", true),
    ("2.0**30", true),
    ("<< 30", true),
    ("<<30", true),
    (">> 30", true),
    (">>30", true),
    ("<< 20", true),
    ("<<20", true),
    (">> 20", true),
    (">>20", true),
    ("1073741824", true),
    ("1048576", true),
    ("1_073_741_824", true),
    ("1_048_576", true),
    ("1024 * 1024", true),
    ("1024*1024", true),
    ("1024 / 1024", true),
    ("1024/1024", true),
    ("1024.0 / 1024", true),
    ("/ 1024) / 1024", true),
];

/// Keys the batch rules compare in a config written in Python (a dict, dataclass fields,
/// argparse defaults): DeepSpeed's batch keys (BS001), declared global batches and axolotl's
/// `micro_batch_size` next to `base_model` (BS002). A script that a launcher runs is analysed whole whatever this scan says.
const BATCH_KEYS: &[&str] = &[
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "global_batch_size",
    "effective_batch_size",
    "total_batch_size",
    "total_train_batch_size",
    "train_global_batch_size",
    "global_train_batch_size",
];

/// Parts of a name that may hold a model size or a parameter count.
const SIZED: &[&str] = &["model", "param", "weight"];

/// The scan of one file: its text and an ASCII-lowercased copy (`role_of`, the directives and
/// the unit words ignore case; a lowercased copy lets the matchers vectorise).
struct Scan<'t> {
    text: &'t str,
    bytes: &'t [u8],
    lower: Vec<u8>,
}

/// Whether the file must be parsed. Launchers and configs are always read: they give context to
/// other files. Each check runs only for the rules reported, cheapest first.
pub fn needs_parse(language: Language, text: &str, wanted: Wanted) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) || wanted.unknown {
        return true;
    }
    if !wanted.any() {
        return false;
    }
    let scan = Scan {
        text,
        bytes: text.as_bytes(),
        lower: text.as_bytes().to_ascii_lowercase(),
    };
    (wanted.suppressions && scan.directive())
        || (wanted.batch && scan.batch_key())
        || (wanted.accumulation && scan.training_loop())
        || (wanted.units && scan.mixed_units())
        || (wanted.tables && scan.table())
        || (wanted.memory && scan.sized_name())
        || (wanted.fit && scan.names_a_sized_model())
}

fn matcher(words: impl IntoIterator<Item = &'static str>, kind: MatchKind) -> Option<AhoCorasick> {
    AhoCorasickBuilder::new().match_kind(kind).build(words).ok()
}

impl Scan<'_> {
    fn directive(&self) -> bool {
        contains(&self.lower, b"memlint") || contains(&self.lower, b"noqa")
    }

    /// A batch key where a config can hold it. Every key holds `batch_size`.
    fn batch_key(&self) -> bool {
        let axolotl = contains(&self.lower, b"base_model");
        let hits = memchr::memmem::find_iter(&self.lower, b"batch_size")
            .chain(memchr::memmem::find_iter(&self.lower, b"batch-size"));
        hits.into_iter().any(|at| {
            let batch = |k: &str| BATCH_KEYS.contains(&k) || (axolotl && k == "micro_batch_size");
            self.config_key(at, at + "batch_size".len(), batch)
                .is_some()
        })
    }

    /// Where the value starts (after the `:`, the `=` or the flag) of the key around the word
    /// at `start..end`, when `known` accepts its name (lowercase, `_` for `-`, no leading dashes)
    /// and it stands where a config written in Python holds one: a quoted dict key (`"train_batch_size": 8`), an argparse flag
    /// (`"--global-batch-size"`), or a class field given a literal (`global_batch_size: int =
    /// 8`, `= field(default=8)`).
    fn config_key(&self, start: usize, end: usize, known: impl Fn(&str) -> bool) -> Option<usize> {
        let lower = &self.lower;
        let part = |b: u8| is_ident(b) || b == b'-';
        let (mut start, mut end) = (start, end);
        while start > 0 && part(lower[start - 1]) {
            start -= 1;
        }
        while end < lower.len() && part(lower[end]) {
            end += 1;
        }
        let token = std::str::from_utf8(&lower[start..end]).ok()?;
        let flag = token.starts_with("--");
        let name = token.trim_start_matches('-').replace('-', "_");
        if !known(&name) {
            return None;
        }
        let open = start.checked_sub(1).map(|i| lower[i]);
        if matches!(open, Some(b'"' | b'\'')) {
            if lower.get(end).copied() != open {
                return None;
            }
            if flag {
                return Some(end + 1);
            }
            let after = &self.text[end + 1..];
            let colon = after.trim_start_matches([' ', '\t']).strip_prefix(':')?;
            return Some(self.text.len() - colon.len());
        }
        // A field: alone at the start of its line, an annotation, then `=` and a literal or
        // `field(`.
        let line_start = memchr::memrchr(b'\n', &lower[..start]).map_or(0, |i| i + 1);
        if flag
            || !lower[line_start..start]
                .iter()
                .all(|b| *b == b' ' || *b == b'\t')
        {
            return None;
        }
        let line_end = memchr::memchr(b'\n', &lower[end..]).map_or(lower.len(), |e| end + e);
        let (head, value) = self.text[end..line_end].split_once('=')?;
        let head = head.trim();
        let literal = value.split('#').next().unwrap_or("").trim();
        let field = (head.is_empty() || head.starts_with(':'))
            && !literal.starts_with('=')
            && !literal.ends_with(',')
            && (literal.starts_with(|c: char| c.is_ascii_digit() || "\"'-+.(".contains(c))
                || literal.starts_with("field(")
                || literal.starts_with("Field("));
        field.then(|| line_end - value.len())
    }

    /// The training-loop rules need an attribute call named exactly `backward` and one named
    /// exactly `step` (the frontend compares the text after the callee's last `.`), or an
    /// `accelerator.accumulate(` block, or a Lightning return divided by
    /// `accumulate_grad_batches`.
    fn training_loop(&self) -> bool {
        let attribute = |word: &[u8]| {
            memchr::memmem::find_iter(self.bytes, word)
                .any(|i| !self.bytes.get(i + word.len()).is_some_and(|b| is_ident(*b)))
        };
        contains(&self.lower, b"accumulate_grad_batches")
            || contains(&self.lower, b".accumulate(")
            || (attribute(b".backward") && attribute(b".step"))
    }

    /// A unit conversion (MEM004) is reported where decimal and binary units meet: a decimal
    /// divisor and either a binary one or a `_gib`/`_mib` name. Every way to write a divisor
    /// as literals holds one of `DIVISORS`; it counts where it divides, multiplies, shifts, or
    /// is assigned to a name that divides later (`GIB = 1024 ** 3`).
    fn mixed_units(&self) -> bool {
        static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
        let Some(ac) = AC
            .get_or_init(|| matcher(DIVISORS.iter().map(|(w, _)| *w), MatchKind::LeftmostLongest))
        else {
            return true;
        };
        let (mut decimal, mut binary) = (false, false);
        for m in ac.find_iter(&self.lower[..]) {
            let Some(&(word, is_binary)) = DIVISORS.get(m.pattern().as_usize()) else {
                return true;
            };
            if !self.divides(m.start(), word) || !number_ends(&self.lower, m.end(), word) {
                continue;
            }
            if is_binary {
                binary = true;
            } else {
                decimal = true;
            }
            if decimal && binary {
                return true;
            }
        }
        decimal && self.names_binary_unit()
    }

    /// Whether the divisor written at `at` divides, multiplies, shifts, or is assigned to a
    /// name that divides or multiplies later (`GIB = 1024 ** 3` ... `/ GIB`).
    fn divides(&self, at: usize, word: &str) -> bool {
        if word.starts_with(['<', '>', '/']) {
            return true;
        }
        let before = self.text[..at].trim_end_matches([' ', '\t', '(']);
        if before.ends_with(['/', '*']) {
            return true;
        }
        let Some(left) = before.strip_suffix('=') else {
            return false;
        };
        if left.ends_with(['/', '*']) {
            return true;
        }
        // An assignment statement, not a comparison, a keyword argument or a default.
        let line = &left[left.rfind('\n').map_or(0, |i| i + 1)..];
        let target = line.split(':').next().unwrap_or("").trim();
        if left.ends_with(['=', '!', '<', '>']) || target.contains(['(', ',', '[']) {
            return false;
        }
        let name = target.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        !name.is_empty() && self.used_as_factor(name.as_bytes())
    }

    /// `name` written after a `/` or a `*` (through `self.` or parentheses).
    fn used_as_factor(&self, name: &[u8]) -> bool {
        let lower = &self.lower;
        memchr::memmem::find_iter(lower, name).any(|i| {
            if lower.get(i + name.len()).is_some_and(|b| is_ident(*b))
                || (i > 0 && is_ident(lower[i - 1]))
            {
                return false;
            }
            let mut j = i;
            while j > 0 && (is_ident(lower[j - 1]) || lower[j - 1] == b'.') {
                j -= 1;
            }
            let before = self.text[..j].trim_end_matches([' ', '\t', '(']);
            before.ends_with(['/', '*'])
        })
    }

    /// A `gib` or `mib` word in a name that is assigned (`mem_gib = ...`, `free_mib /= ...`,
    /// `total_gib: float = ...`), as the Python frontend reads a unit from a target's
    /// `_`-separated words.
    fn names_binary_unit(&self) -> bool {
        let lower = &self.lower;
        [&b"gib"[..], b"mib"].iter().any(|unit| {
            memchr::memmem::find_iter(lower, unit).any(|i| {
                let alnum = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
                if alnum(i.checked_sub(1).and_then(|j| lower.get(j)))
                    || alnum(lower.get(i + unit.len()))
                {
                    return false;
                }
                let mut end = i + unit.len();
                while lower.get(end).is_some_and(|b| is_ident(*b)) {
                    end += 1;
                }
                let rest = self.text[end..].trim_start_matches([' ', '\t']);
                (rest.starts_with('=') && !rest.starts_with("=="))
                    || rest.starts_with("/=")
                    || rest.starts_with("*=")
                    || rest.starts_with(':')
            })
        })
    }

    /// A dtype or optimizer table (MEM002, MEM003) needs a known key followed by `:` and a
    /// number: quoted (`"bf16": 2`) or an attribute (`torch.float16: 2`, `np.float64: 8`; the
    /// frontend reads it by its last segment); or an `if` chain or a conditional comparing a
    /// quoted key and assigning a number to a name holding `byte` or `multiplier`.
    fn table(&self) -> bool {
        let lower = &self.lower;
        let keyed = memchr::memchr_iter(b':', lower).any(|colon| {
            if !number_follows(self.text, colon) {
                return false;
            }
            let key_end = lower[..colon]
                .iter()
                .rposition(|b| *b != b' ' && *b != b'\t')
                .map_or(0, |i| i + 1);
            let key = match key_end.checked_sub(1).map(|i| lower[i]) {
                Some(b'"' | b'\'') => {
                    let close = key_end - 1;
                    let Some(open) = lower[..close].iter().rposition(|b| *b == lower[close]) else {
                        return false;
                    };
                    (open, std::str::from_utf8(&lower[open + 1..close]))
                }
                Some(b) if is_ident(b) => {
                    let (start, _) = identifier_at(lower, key_end - 1, false);
                    if start == 0 || lower[start - 1] != b'.' {
                        return false;
                    }
                    let mut first = start;
                    while first > 0 && (is_ident(lower[first - 1]) || lower[first - 1] == b'.') {
                        first -= 1;
                    }
                    (first, std::str::from_utf8(&lower[start..key_end]))
                }
                _ => return false,
            };
            let (first, Ok(name)) = key else { return false };
            // A dict entry opens the dict, follows a `,`, or starts a line (`x[a.half:2]` is a
            // slice).
            let before = lower[..first]
                .iter()
                .rev()
                .find(|b| !matches!(b, b' ' | b'\t'));
            matches!(before, None | Some(b'{' | b',' | b'\n')) && known_key(name)
        });
        keyed
            || ((assigns_number(lower, b"byte") || assigns_number(lower, b"multiplier"))
                && compares_known_key(lower))
    }

    /// Memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) are recorded
    /// only with a term whose role is a model size or a parameter count, and a term's role is
    /// [`role_of`] of an identifier written in the file. A parameter count matters only where
    /// [`Scan::counts_parameters`] says.
    fn sized_name(&self) -> bool {
        SIZED.iter().any(|word| {
            let mut read_to = 0;
            memchr::memmem::find_iter(&self.lower, word.as_bytes()).any(|at| {
                // A name is read whole at its first word.
                if at < read_to {
                    return false;
                }
                let (reading, end) = sized_name_at(self.text, at);
                read_to = end;
                match reading {
                    Reading::Sized => true,
                    Reading::Count(start, end) => self.counts_parameters(start, end),
                    Reading::Neither => false,
                }
            })
        })
    }

    /// A parameter count never makes MEM001 or MEM006 (they judge model sizes); it matters as a
    /// constant (MEM005: `n_params = 7e9`, `"num_params": 7e9`, `--num_params`) or multiplied
    /// into a `*byte*` assignment (MEM002: `optimizer_bytes = n_params * 8`).
    fn counts_parameters(&self, start: usize, end: usize) -> bool {
        let text = self.text;
        let before = &text[..start];
        let after = text[end..].trim_start_matches([' ', '\t']);
        // A quoted key or flag: `"num_params": 7e9`, `"--num-params"`.
        let quote = before.trim_end_matches('-');
        if quote.ends_with(['"', '\'']) {
            let flag = quote.len() < before.len();
            let closed = after.starts_with(&quote[quote.len() - 1..]);
            return closed && (flag || after[1..].trim_start_matches([' ', '\t']).starts_with(':'));
        }
        // Multiplied, or the whole value, on the way to a `*byte*` optimizer-state name.
        let left = before.trim_end_matches([' ', '\t', '(']);
        let assigned_to = left
            .strip_suffix('=')
            .filter(|t| !t.ends_with(['=', '!', '<', '>']));
        if after.starts_with('*') || left.ends_with('*') || assigned_to.is_some() {
            return self.assigns_state_bytes();
        }
        // Assigned: an annotation, or `=` and a value that may be a constant.
        if after.starts_with(':') {
            return true;
        }
        let Some(value) = after.strip_prefix('=').filter(|v| !v.starts_with('=')) else {
            return false;
        };
        constant_from(value.trim_start_matches([' ', '\t']))
    }

    /// MEM005 reads a parameter count from a model name in a config (`"model_name_or_path":
    /// "meta-llama/Llama-2-7b-hf"`, `--model_name`, `default="opt-350m"`); a config written in
    /// Python is kept only with a batch key.
    fn names_a_sized_model(&self) -> bool {
        let lower = &self.lower;
        let flag = |w: &str| w.replace('_', "-");
        let batch = BATCH_KEY_PARTS
            .iter()
            .any(|w| contains(lower, w.as_bytes()) || contains(lower, flag(w).as_bytes()))
            || BATCH_KEY_NAMES
                .iter()
                .any(|w| contains(lower, w.as_bytes()));
        if !batch {
            return false;
        }
        let keys = memchr::memmem::find_iter(lower, b"model")
            .chain(memchr::memmem::find_iter(lower, b"_component_"));
        keys.into_iter().any(|at| {
            // torchtune names its model by `_component_` under `model`.
            self.config_key(at, at + 1, |k| {
                MODEL_KEYS.contains(&k) || k == "_component_"
            })
            .is_some_and(|value| self.value_names_a_size(value))
        })
    }

    /// Whether a string in the value after a key ending at `from` (up to the end of its line,
    /// entry or call, at most 4 KB) gives a parameter count.
    fn value_names_a_size(&self, from: usize) -> bool {
        let bytes = self.bytes;
        let limit = (from + 4096).min(bytes.len());
        let mut depth = 0i32;
        let mut i = from;
        while i < limit {
            match bytes[i] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth < 0 {
                        return false;
                    }
                }
                b'\n' if depth == 0 => return false,
                quote @ (b'"' | b'\'') => {
                    let Some(len) = memchr::memchr(quote, &bytes[i + 1..limit]) else {
                        return false;
                    };
                    let s = std::str::from_utf8(&bytes[i + 1..i + 1 + len]).unwrap_or("");
                    if crate::project::params_from_name(s).is_some() {
                        return true;
                    }
                    i += len + 1;
                }
                _ => {}
            }
            i += 1;
        }
        false
    }

    /// A name holding `byte` whose role is the optimizer's is assigned (`optimizer_bytes = ...`).
    fn assigns_state_bytes(&self) -> bool {
        let lower = &self.lower;
        memchr::memmem::find_iter(lower, b"byte").any(|at| {
            let (start, end) = identifier_at(lower, at, false);
            let rest = self.text[end..].trim_start_matches([' ', '\t']);
            rest.starts_with('=')
                && !rest.starts_with("==")
                && role_of(&self.text[start..end]) == Role::Optimizer
        })
    }
}

/// Whether an assigned value may fold to a parameter count: not a call (`sum(...)`,
/// `model.num_parameters()`), and not a lone number below a million (`total = 0`).
fn constant_from(value: &str) -> bool {
    let line = value
        .split(['\n', '#', ';'])
        .next()
        .unwrap_or("")
        .trim_end();
    if value.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let name_end = value
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(value.len());
        return !value[name_end..]
            .trim_start_matches([' ', '\t'])
            .starts_with('(');
    }
    match crate::frontend::parse_number(line) {
        Some(v) => v >= 1e6,
        None => true,
    }
}

/// What the name around a word may be read as.
enum Reading {
    Sized,
    /// A parameter count only, read plainly from these bounds.
    Count(usize, usize),
    Neither,
}

/// Whether a number written as `word` ends at `end` with the same value: not continued by a
/// digit, an exponent or a fraction other than zeros (`1000000.0` is 1e6, `1000000007` is not).
fn number_ends(lower: &[u8], end: usize, word: &str) -> bool {
    if !word.ends_with(|c: char| c.is_ascii_digit()) {
        return true;
    }
    match lower.get(end) {
        Some(b) if b.is_ascii_digit() || matches!(b, b'_' | b'e' | b'j') => false,
        Some(b'.') => lower[end + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .all(|b| *b == b'0'),
        _ => true,
    }
}

/// Lowercase dtype names, and optimizer names as the knowledge lookup normalises them.
fn known_keys() -> &'static (HashSet<String>, HashSet<String>) {
    static KEYS: OnceLock<(HashSet<String>, HashSet<String>)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let k = knowledge();
        let dtypes = k
            .dtypes
            .iter()
            .flat_map(|d| d.names.iter())
            .map(|n| n.to_ascii_lowercase())
            .collect();
        let optimizers = k
            .optimizers
            .iter()
            .flat_map(|o| o.names.iter())
            .map(|n| optimizer_name(n))
            .collect();
        (dtypes, optimizers)
    })
}

/// `knowledge().dtype(key)` or `knowledge().optimizer(key)` would find a row, for a key
/// already in lowercase.
fn known_key(key: &str) -> bool {
    let (dtypes, optimizers) = known_keys();
    let last = key.rsplit('.').next().unwrap_or(key);
    dtypes.contains(key) || dtypes.contains(last) || optimizers.contains(&optimizer_name(key))
}

/// A known key compared as the `if` chains and conditionals the frontend reads compare it:
/// `x == "bf16"`, `"bf16" == x`, `x in ("bf16", "fp16")`.
fn compares_known_key(lower: &[u8]) -> bool {
    let skip = |mut i: usize| {
        while lower
            .get(i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'('))
        {
            i += 1;
        }
        i
    };
    // The string whose opening quote is at `open`.
    let string_at = |open: usize| {
        let quote = *lower.get(open)?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        let len = memchr::memchr(quote, lower.get(open + 1..)?)?;
        std::str::from_utf8(&lower[open + 1..open + 1 + len]).ok()
    };
    let equals = memchr::memmem::find_iter(lower, b"==").any(|at| {
        if string_at(skip(at + 2)).is_some_and(known_key) {
            return true;
        }
        let left = lower[..at].trim_ascii_end();
        let Some((&quote, body)) = left.split_last() else {
            return false;
        };
        matches!(quote, b'"' | b'\'')
            && body
                .iter()
                .rposition(|b| *b == quote)
                .and_then(|open| std::str::from_utf8(&body[open + 1..]).ok())
                .is_some_and(known_key)
    });
    equals
        || memchr::memmem::find_iter(lower, b" in ").any(|at| {
            let mut i = at + 4;
            while lower.get(i).is_some_and(|b| matches!(b, b' ' | b'\t')) {
                i += 1;
            }
            if !matches!(lower.get(i), Some(b'(' | b'[' | b'{')) {
                return false;
            }
            loop {
                i += 1;
                while lower
                    .get(i)
                    .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
                {
                    i += 1;
                }
                let Some(key) = string_at(i) else {
                    return false;
                };
                if known_key(key) {
                    return true;
                }
                i += key.len() + 1;
            }
        })
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

/// How the name around `at` may be read, and where the name ends. A reading through
/// non-ASCII letters or after a number (`2model_gb`, where recovery splits the literal from a
/// name) counts in full.
fn sized_name_at(text: &str, at: usize) -> (Reading, usize) {
    let bytes = text.as_bytes();
    let ascii = identifier_at(bytes, at, false);
    let wide = identifier_at(bytes, at, true);
    let role = |(s, e): (usize, usize)| text.get(s..e).map_or(Role::Unknown, role_of);
    let end = wide.1;
    match role(ascii) {
        Role::Model => return (Reading::Sized, end),
        Role::ParamCount if wide == ascii => return (Reading::Count(ascii.0, ascii.1), end),
        _ => {}
    }
    if wide != ascii && sized_name(&text[wide.0..wide.1]) {
        return (Reading::Sized, end);
    }
    let (start, name_end) = ascii;
    let after_number = bytes[start].is_ascii_digit()
        && (start + 1..=at).any(|k| {
            (bytes[k].is_ascii_alphabetic() || bytes[k] == b'_') && sized_name_in(text, k, name_end)
        });
    if after_number || matches!(role(ascii), Role::ParamCount) {
        return (Reading::Sized, end);
    }
    (Reading::Neither, end)
}

fn sized_name_in(text: &str, start: usize, end: usize) -> bool {
    text.get(start..end).is_some_and(sized_name)
}

fn sized_name(name: &str) -> bool {
    matches!(role_of(name), Role::Model | Role::ParamCount)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
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
        // MEM004 needs decimal and binary units to meet.
        assert!(!yes("gb = free / 2**30\n"));
        assert!(yes("gb = free / 2**30\nused_gb = used / 1e9\n"));
        assert!(!yes(
            "free_gib = free / 2**30\neps = 1e-6\nrope_theta = 1000000.0\n"
        ));
        assert!(yes("MB = 1e-6\nfree_mib = free * MB\n"));
        assert!(!yes("x = f(a, inf=1e9) / 2**30\n"));
        // A parameter count counts as a constant, a config key, or on its way to state bytes.
        assert!(!yes(
            "total_params = 0\nfor p in ps:\n    total_params += p.numel()\n"
        ));
        assert!(!yes("n = model.num_parameters()\nflops = 6 * tokens * n\n"));
        assert!(yes("cfg = {\"num_params\": 7e9}\n"));
        assert!(yes("optimizer_state_bytes = n_params * 8\n"));
        assert!(!yes("flops = 6 * tokens * num_params\n"));
        // Batch keys where a config holds them.
        assert!(!yes("effective_batch_size = input_ids.shape[0]\n"));
        assert!(!yes("cfg['train_batch_size'] = 8\n"));
        assert!(yes("class A:\n    global_batch_size: int = 256\n"));
        // Tables: dict entries and compared keys, not slices or stray strings.
        assert!(!yes("x = t[self.half:2]\n"));
        assert!(!yes("n_bytes = 4\nname = 'bf16'\n"));
        assert!(yes("nbytes = 2 if dtype in ('fp32', 'bf16') else 4\n"));
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
