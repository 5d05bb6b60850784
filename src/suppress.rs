//! Inline suppressions: `# memlint: ignore[CODE,...]` on the line or alone on the line above,
//! `# memlint: ignore-file[CODE]` anywhere, and `# noqa: CODE`. Codes are required.

use crate::diagnostic::Diagnostic;
use crate::facts::Comment;
use crate::source::{Language, SourceFile};
use std::ops::Range;

#[derive(Debug, Clone)]
pub struct Suppression {
    /// 0-based line it applies to; `None` for the whole file.
    pub line: Option<usize>,
    pub codes: Vec<(String, Range<usize>)>,
    pub comment: Range<usize>,
}

/// Parse the directives in the comments of a file. Config languages without a comment-keeping
/// parser are scanned line by line.
pub fn directives(file: &SourceFile, comments: &[Comment]) -> Vec<Suppression> {
    let mut out = Vec::new();
    let scanned;
    let comments = match file.language {
        Language::Yaml | Language::Toml | Language::Requirements => {
            scanned = scan_comments(&file.text);
            &scanned
        }
        Language::Json => return out,
        _ => comments,
    };
    for c in comments {
        let line = file.lines.line_of(c.range.start);
        let before = &file.text[file.lines.line_start(line)..c.range.start];
        let alone = before.trim().is_empty();
        for (kind, codes) in parse_comment(&c.text, c.range.start) {
            // In a notebook, a directive alone on a cell's last line covers no line of the next cell.
            let next_in_cell = || {
                file.lines.line_start(line + 1) < file.text.len()
                    && file.locate(file.lines.line_start(line + 1)).0
                        == file.locate(c.range.start).0
            };
            let target = match kind {
                Kind::File => None,
                Kind::Line if alone && (file.notebook.is_none() || next_in_cell()) => {
                    Some(line + 1)
                }
                Kind::Line => Some(line),
            };
            out.push(Suppression {
                line: target,
                codes,
                comment: c.range.clone(),
            });
        }
    }
    out
}

enum Kind {
    Line,
    File,
}

/// Directives in one comment's text; `base` is the comment's offset (for code spans).
/// Codes of a directive with where each is written.
type Codes = Vec<(String, Range<usize>)>;

fn parse_comment(text: &str, base: usize) -> Vec<(Kind, Codes)> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    let mut search = 0;
    while let Some(i) = lower[search..].find("memlint:") {
        let at = search + i + "memlint:".len();
        let rest = &lower[at..];
        let trimmed = rest.trim_start();
        let skip = at + rest.len() - trimmed.len();
        let (kind, after) = if trimmed.starts_with("ignore-file[") {
            (Kind::File, skip + "ignore-file[".len())
        } else if trimmed.starts_with("ignore[") {
            (Kind::Line, skip + "ignore[".len())
        } else {
            search = at;
            continue;
        };
        if let Some(close) = text[after..].find(']') {
            out.push((kind, codes(&text[after..after + close], base + after)));
            search = after + close;
        } else {
            search = after;
        }
    }
    if let Some(i) = lower.find("noqa:") {
        let after = i + "noqa:".len();
        let list: String = text[after..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | ' ' | '\t'))
            .collect();
        let codes = codes(&list, base + after);
        if !codes.is_empty() {
            out.push((Kind::Line, codes));
        }
    }
    out
}

fn codes(list: &str, base: usize) -> Vec<(String, Range<usize>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    for part in list.split([',', ' ', '\t']) {
        let start = pos;
        pos += part.len() + 1;
        let code = part.trim();
        if code.len() >= 3 && code.chars().all(|c| c.is_ascii_alphanumeric()) {
            let off = base + start;
            out.push((code.to_ascii_uppercase(), off..off + code.len()));
        }
    }
    out
}

/// `#` comments of YAML/TOML by a line scan, skipping `#` inside quotes.
fn scan_comments(text: &str) -> Vec<Comment> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let mut quote: Option<char> = None;
        for (i, ch) in line.char_indices() {
            match (quote, ch) {
                (None, '"' | '\'') => quote = Some(ch),
                (Some(q), c) if c == q => quote = None,
                (None, '#') if i == 0 || line[..i].ends_with([' ', '\t']) => {
                    let body = line[i..].trim_end();
                    out.push(Comment {
                        text: body.to_string(),
                        range: offset + i..offset + i + body.len(),
                    });
                    break;
                }
                _ => {}
            }
        }
        offset += line.len();
    }
    out
}

/// Drop suppressed diagnostics; return the directive codes that suppressed nothing (for ML900).
pub fn apply(
    file: &SourceFile,
    directives: &[Suppression],
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(String, Range<usize>)> {
    let mut used = vec![Vec::new(); directives.len()];
    diagnostics.retain(|d| {
        let line = file.lines.line_of(d.range.start);
        let mut keep = true;
        for (i, s) in directives.iter().enumerate() {
            if s.line.is_some_and(|l| l != line) {
                continue;
            }
            for (j, (code, _)) in s.codes.iter().enumerate() {
                if code == d.code {
                    used[i].push(j);
                    keep = false;
                }
            }
        }
        keep
    });
    let mut unused = Vec::new();
    for (i, s) in directives.iter().enumerate() {
        for (j, (code, span)) in s.codes.iter().enumerate() {
            if !used[i].contains(&j) {
                unused.push((code.clone(), span.clone()));
            }
        }
    }
    unused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directive_forms() {
        let d = parse_comment("# memlint: ignore[MEM001, GA001]", 0);
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].1.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["MEM001", "GA001"]
        );
        let d = parse_comment("# noqa: MEM001", 10);
        assert_eq!(d[0].1[0].0, "MEM001");
        assert_eq!(d[0].1[0].1, 18..24);
        assert!(parse_comment("# noqa", 0).is_empty(), "codes are required");
        assert!(matches!(
            parse_comment("# memlint: ignore-file[GA001]", 0)[0].0,
            Kind::File
        ));
    }
}
