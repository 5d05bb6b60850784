//! What a rule reports: a code, a message and a byte span, with an optional help line and fix;
//! how numbers read in its message; and how a fix's edits apply to a text.

use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Severity> {
        match s {
            "info" => Some(Severity::Info),
            "warning" => Some(Severity::Warning),
            "error" => Some(Severity::Error),
            _ => None,
        }
    }
}

/// How far a fix can be trusted (the same three levels as ruff).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Applicability {
    /// Shown, never applied.
    DisplayOnly,
    /// Rests on an assumption (an optimizer that was assumed, not seen): applied with `--unsafe-fixes`.
    Unsafe,
    /// Exactly the documented correct form for what was detected: applied with `--fix`.
    Safe,
}

impl Applicability {
    pub fn as_str(self) -> &'static str {
        match self {
            Applicability::Safe => "safe",
            Applicability::Unsafe => "unsafe",
            Applicability::DisplayOnly => "display-only",
        }
    }
}

/// Replace the bytes in `range` with `content`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub range: Range<usize>,
    pub content: String,
}

impl Edit {
    pub fn replace(range: Range<usize>, content: impl Into<String>) -> Self {
        Edit {
            range,
            content: content.into(),
        }
    }

    pub fn insert(at: usize, content: impl Into<String>) -> Self {
        Edit {
            range: at..at,
            content: content.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub applicability: Applicability,
    pub message: String,
    pub edits: Vec<Edit>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub code: &'static str,
    pub message: String,
    /// Byte span in the file's text.
    pub range: Range<usize>,
    pub help: Option<String>,
    pub fix: Option<Fix>,
}

impl Diagnostic {
    pub fn new(code: &'static str, range: Range<usize>, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            range,
            help: None,
            fix: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn with_fix(mut self, fix: Option<Fix>) -> Self {
        self.fix = fix;
        self
    }
}

/// Format a multiplier the way people write it: `4`, `2.5`.
pub fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A parameter count as people say it: `7B`, `350M`.
pub fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{}B", fmt_num(v / 1e9))
    } else {
        format!("{}M", fmt_num(v / 1e6))
    }
}

/// A number as a person writes it in a config: `4`, `0.5`, `2e-5`.
pub fn show_number(n: f64) -> String {
    if n != 0.0 && (n.abs() < 1e-3 || n.abs() >= 1e7) {
        format!("{n:e}")
    } else {
        fmt_num(n)
    }
}

/// Apply non-overlapping edits to `text` (sorted by position; an edit overlapping an earlier one
/// is skipped). Returns the new text and how many fixes were applied in full.
pub fn apply_edits(text: &str, fixes: &[&[Edit]]) -> (String, usize) {
    let (chosen, applied) = select_edits(text, fixes);
    (splice(text, &chosen), applied)
}

/// The edits of the fixes that apply together (whole fixes, first come first served), sorted.
pub fn select_edits<'a>(text: &str, fixes: &[&'a [Edit]]) -> (Vec<&'a Edit>, usize) {
    let mut chosen: Vec<&Edit> = Vec::new();
    let mut applied = 0;
    let mut sorted: Vec<&[Edit]> = fixes.to_vec();
    sorted.sort_by_key(|edits| edits.iter().map(|e| e.range.start).min().unwrap_or(0));
    for edits in sorted {
        let clashes = edits.iter().any(|e| {
            e.range.end > text.len()
                || e.range.start > e.range.end
                || !text.is_char_boundary(e.range.start)
                || !text.is_char_boundary(e.range.end)
                || chosen.iter().any(|c| overlaps(&c.range, &e.range))
        });
        if clashes {
            continue;
        }
        chosen.extend(edits.iter());
        applied += 1;
    }
    chosen.sort_by_key(|e| (e.range.start, e.range.end));
    (chosen, applied)
}

/// `text` with sorted, non-overlapping edits applied.
pub fn splice(text: &str, edits: &[&Edit]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for e in edits {
        out.push_str(&text[at..e.range.start]);
        out.push_str(&e.content);
        at = e.range.end;
    }
    out.push_str(&text[at..]);
    out
}

fn overlaps(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end || (a.start == b.start && (a.is_empty() || b.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_edits_are_skipped() {
        let text = "abcdef";
        let a = [Edit::replace(1..3, "X")];
        let b = [Edit::replace(2..4, "Y")];
        let c = [Edit::replace(4..5, "Z")];
        let (out, n) = apply_edits(text, &[&a, &b, &c]);
        assert_eq!(out, "aXdZf");
        assert_eq!(n, 2);
    }
}
