//! The scan of one file's text, and what every family's check reads with: words, identifiers,
//! and where a config written in Python holds a key.

use std::cell::{Cell, OnceCell};

/// The scan of one file: its text and an ASCII-lowercased copy (`role_of`, the directives and
/// the unit words ignore case; a lowercased copy lets the matchers vectorise).
pub(super) struct Scan<'t> {
    pub(super) text: &'t str,
    pub(super) bytes: &'t [u8],
    pub(super) lower: &'t [u8],
    /// Whether each [`Word`] is written, once asked: several checks read the same words, and
    /// every search is a pass over the whole file.
    words: [Cell<Option<bool>>; WORDS.len()],
    /// Answers several checks share, found once (see their readers in `memory.rs`).
    pub(super) state_bytes: OnceCell<bool>,
}

impl<'t> Scan<'t> {
    /// The scan of `text`, lowercased into `lower` (a buffer the caller reuses across files).
    pub(super) fn new(text: &'t str, lower: &'t mut Vec<u8>) -> Self {
        lower.clear();
        lower.extend_from_slice(text.as_bytes());
        lower.make_ascii_lowercase();
        Scan::over(text, lower)
    }

    /// The scan of `text` with its lowercased copy.
    pub(super) fn over(text: &'t str, lower: &'t [u8]) -> Self {
        Scan {
            text,
            bytes: text.as_bytes(),
            lower,
            words: Default::default(),
            state_bytes: OnceCell::new(),
        }
    }

    /// Whether `word` is written (in the lowercased text, or as written for a `Word` that
    /// names a class), searched at most once per file.
    pub(super) fn has(&self, word: Word) -> bool {
        let cell = &self.words[word as usize];
        if let Some(known) = cell.get() {
            return known;
        }
        let in_lower = WORDS[word as usize].1;
        let hay = if in_lower { self.lower } else { self.bytes };
        let found = word_finders()[word as usize].find(hay).is_some();
        cell.set(Some(found));
        found
    }
}

/// Words several checks search for: see [`Scan::has`].
#[derive(Clone, Copy)]
pub(super) enum Word {
    DataLoader,
    BatchSize,
    BatchDash,
    Batch,
    Len,
    AccumulateGradBatches,
    DistributedDataParallel,
    DistributedSampler,
    InitProcessGroup,
    GradientAccumulationSteps,
}

/// Each [`Word`]'s text, and whether it is searched in the lowercased text.
const WORDS: [(&[u8], bool); 10] = [
    (b"DataLoader", false),
    (b"batch_size", true),
    (b"batch-size", true),
    (b"batch", true),
    (b"len(", true),
    (b"accumulate_grad_batches", true),
    (b"DistributedDataParallel", false),
    (b"DistributedSampler", false),
    (b"init_process_group", false),
    (b"gradient_accumulation_steps", false),
];

/// The searchers of [`WORDS`], built once.
fn word_finders() -> &'static [memchr::memmem::Finder<'static>] {
    static FINDERS: std::sync::OnceLock<Vec<memchr::memmem::Finder<'static>>> =
        std::sync::OnceLock::new();
    FINDERS.get_or_init(|| {
        WORDS
            .iter()
            .map(|(needle, _)| memchr::memmem::Finder::new(needle))
            .collect()
    })
}

/// A searcher for a literal needle, built once where it is written: building one costs about
/// as much as searching a small file.
macro_rules! finder {
    ($needle:expr) => {{
        static FINDER: std::sync::OnceLock<memchr::memmem::Finder<'static>> =
            std::sync::OnceLock::new();
        FINDER.get_or_init(|| memchr::memmem::Finder::new($needle))
    }};
}
pub(super) use finder;

/// Whether the literal `needle` is in `hay` (a kept searcher, see [`finder!`]).
macro_rules! has {
    ($hay:expr, $needle:expr) => {
        $crate::prefilter::scan::finder!($needle)
            .find($hay)
            .is_some()
    };
}
pub(super) use has;

impl Scan<'_> {
    /// Where the value starts (after the `:`, the `=` or the flag) of the key around the word
    /// at `start..end`, when `known` accepts its name (lowercase, `_` for `-`, no leading dashes)
    /// and it stands where a config written in Python holds one: a quoted dict key (`"train_batch_size": 8`), an argparse flag
    /// (`"--global-batch-size"`), or a class field given a literal (`global_batch_size: int =
    /// 8`, `= field(default=8)`).
    pub(super) fn config_key(
        &self,
        start: usize,
        end: usize,
        known: impl Fn(&str) -> bool,
    ) -> Option<usize> {
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
        let name = token.trim_start_matches('-');
        let name = match name.contains('-') {
            true => std::borrow::Cow::Owned(name.replace('-', "_")),
            false => std::borrow::Cow::Borrowed(name),
        };
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
}

pub(super) fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The bounds of the identifier around byte `at`, with non-ASCII letters or without (Python
/// names may hold them); both bounds fall on character boundaries.
pub(super) fn identifier_at(bytes: &[u8], at: usize, non_ascii: bool) -> (usize, usize) {
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

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Whether the text after a name assigns to it: `=` (not `==`), an augmented assignment
/// (`*=`, `//=`) or an annotation (`x: float = 0`).
pub(super) fn assigned_at(after: &[u8]) -> bool {
    let rest = after.trim_ascii_start();
    let op = rest
        .iter()
        .position(|b| !matches!(b, b'*' | b'/' | b'+' | b'-' | b'%'))
        .unwrap_or(rest.len());
    match rest.get(op) {
        Some(b'=') => op > 0 || rest.get(1) != Some(&b'='),
        Some(b':') => op == 0,
        _ => false,
    }
}
