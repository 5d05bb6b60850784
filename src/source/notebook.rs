//! Jupyter notebooks as one virtual Python source.
//!
//! The code cells are joined in order (each ends with a newline), so the Python frontend, the
//! rules and suppression see one program and share one training context across cells; markdown
//! and raw cells are skipped and outputs are never read. IPython syntax (`%magic`, `%%cell magic`,
//! `!shell`, `name = !shell`, `obj?`) is masked in place by bytes of the same length, so it neither
//! breaks the parse nor moves any offset: a byte offset inside a cell is the same in the virtual
//! text and in the cell's real source.
//!
//! Every piece of a cell's `source` (a JSON string; nbformat allows one string or a list of them)
//! keeps the byte span of its contents in the `.ipynb` file. That gives the two mappings the
//! reports need (virtual offset → cell and row; → line and column of the `.ipynb` file) and lets a
//! fix rewrite only the JSON string contents it touches, escaped, leaving every other byte as is.

use super::lines::{floor_char_boundary, LineIndex, Position};
use crate::diagnostic::Edit;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;

/// Cell magics whose body is Python: only their first line is masked.
const PYTHON_BODY_MAGICS: &[&str] = &["time", "timeit", "capture", "prun"];

/// A notebook's code cells, mapped to the virtual text and to the `.ipynb` file.
#[derive(Debug)]
pub struct Notebook {
    raw: String,
    raw_lines: LineIndex,
    /// Non-empty code cells in order.
    cells: Vec<CodeCell>,
    /// The file's line ending, for fixes that split a list element in two.
    newline: &'static str,
}

/// A code cell's real source in the notebook.
#[derive(Debug)]
pub struct CodeCell {
    /// 1-based position among all cells of the notebook (markdown and raw cells count).
    pub number: usize,
    /// Offset of the cell's first byte in the virtual text.
    pub start: usize,
    /// The source as the user wrote it (magics not masked).
    pub source: String,
    pub lines: LineIndex,
    /// Byte ranges of the masked lines (they are not Python: fixes never touch them).
    masked: Vec<Range<usize>>,
    pieces: Vec<Piece>,
}

/// One JSON string of a cell's `source`.
#[derive(Debug)]
struct Piece {
    /// Offset of its first decoded byte in the cell source.
    start: usize,
    len: usize,
    /// The string's contents in the `.ipynb` file, without the quotes.
    raw: Range<usize>,
    /// For an element of a `source` list that starts its own line: the whitespace before its
    /// opening quote, so a fix that adds a line can add a list element laid out like its siblings.
    indent: Option<String>,
}

/// What reading a `.ipynb` file gives.
#[derive(Debug)]
pub enum Loaded {
    /// A Python notebook, with the virtual Python text of its code cells.
    Python(Notebook, String),
    /// A notebook in another language (its kernel's language): not linted.
    OtherLanguage(String),
}

#[derive(Deserialize)]
struct RawNotebook<'a> {
    #[serde(borrow, default)]
    cells: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(default)]
    worksheets: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct RawCell<'a> {
    #[serde(borrow, default)]
    cell_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    kernelspec: Option<KernelSpec>,
    #[serde(default)]
    language_info: Option<LanguageInfo>,
}

#[derive(Deserialize)]
struct KernelSpec {
    #[serde(default)]
    language: Option<String>,
}

#[derive(Deserialize)]
struct LanguageInfo {
    #[serde(default)]
    name: Option<String>,
}

/// Byte offset of `inner` inside `outer`, when `inner` is a slice of it.
fn offset_in(outer: &str, inner: &str) -> Option<usize> {
    let at = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    (at + inner.len() <= outer.len()).then_some(at)
}

/// Read a notebook. An error is a sentence saying what is malformed and where.
pub fn load(raw: String) -> Result<Loaded, String> {
    let raw_lines = LineIndex::new(&raw);
    let line_of = |offset: usize| raw_lines.line_of(offset) + 1;
    let doc: RawNotebook = serde_json::from_str(&raw).map_err(|e| {
        if e.is_data() {
            format!("not a notebook: {e}")
        } else {
            format!("invalid notebook JSON: {e}")
        }
    })?;
    let Some(cells) = doc.cells else {
        return Err(if doc.worksheets.is_some() {
            "nbformat 3 notebook (cells under \"worksheets\"): convert it with `jupyter nbconvert --to notebook --inplace`".to_string()
        } else {
            "not a notebook: no \"cells\" list".to_string()
        });
    };
    let metadata: Metadata = doc
        .metadata
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .unwrap_or_default();
    let language = metadata
        .kernelspec
        .and_then(|k| k.language)
        .or_else(|| metadata.language_info.and_then(|l| l.name));
    if let Some(lang) = language {
        if !lang.eq_ignore_ascii_case("python") {
            return Ok(Loaded::OtherLanguage(lang));
        }
    }

    let mut code = Vec::new();
    let mut virt = String::new();
    for (i, cell_raw) in cells.iter().enumerate() {
        let number = i + 1;
        let at = offset_in(&raw, cell_raw.get()).unwrap_or(0);
        let where_ = |what: &str| format!("cell {number} (line {}): {what}", line_of(at));
        let cell: RawCell = serde_json::from_str(cell_raw.get())
            .map_err(|_| where_("a cell must be a JSON object"))?;
        let cell_type: String = cell
            .cell_type
            .and_then(|t| serde_json::from_str(t.get()).ok())
            .ok_or_else(|| where_("no \"cell_type\" string"))?;
        if cell_type != "code" {
            continue;
        }
        let value = cell
            .source
            .ok_or_else(|| where_("a code cell without \"source\""))?;
        let (pieces, source) = pieces_of(&raw, value).map_err(|e| where_(&e))?;
        if source.is_empty() {
            continue;
        }
        let (masked_text, masked) = mask(&source);
        let start = virt.len();
        virt.push_str(&masked_text);
        if !virt.ends_with('\n') {
            virt.push('\n');
        }
        code.push(CodeCell {
            number,
            start,
            lines: LineIndex::new(&source),
            source,
            masked,
            pieces,
        });
    }
    let newline = if raw.contains("\r\n") { "\r\n" } else { "\n" };
    Ok(Loaded::Python(
        Notebook {
            raw,
            raw_lines,
            cells: code,
            newline,
        },
        virt,
    ))
}

/// The pieces of a `source` value (a string or a list of strings) and the decoded source.
fn pieces_of(raw: &str, value: &RawValue) -> Result<(Vec<Piece>, String), String> {
    let shape = || "\"source\" must be a string or a list of strings (nbformat 4)".to_string();
    let text = value.get();
    let strings: Vec<&RawValue> = if text.starts_with('[') {
        serde_json::from_str(text).map_err(|_| shape())?
    } else {
        vec![value]
    };
    let listed = text.starts_with('[');
    let mut pieces = Vec::new();
    let mut source = String::new();
    for s in strings {
        let token = s.get();
        if !token.starts_with('"') {
            return Err(shape());
        }
        let decoded: String = serde_json::from_str(token).map_err(|e| {
            // The error's own position counts within the string: give the cell's instead.
            let e = e.to_string();
            let e = e.rfind(" at line ").map_or(e.as_str(), |i| &e[..i]);
            format!("a \"source\" string is invalid: {e}")
        })?;
        let at = offset_in(raw, token).ok_or_else(shape)?;
        // A string token is `"` contents `"`.
        let contents = at + 1..at + token.len() - 1;
        let line_start = raw[..at].rfind('\n').map_or(0, |i| i + 1);
        let before = &raw[line_start..at];
        let indent = (listed && before.trim().is_empty()).then(|| before.to_string());
        pieces.push(Piece {
            start: source.len(),
            len: decoded.len(),
            raw: contents,
            indent,
        });
        source.push_str(&decoded);
    }
    Ok((pieces, source))
}

/// Raw offsets and decoded characters of a JSON string's contents (already validated).
fn walk(contents: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let bytes = contents.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= bytes.len() {
            return None;
        }
        let at = i;
        if bytes[i] != b'\\' {
            let c = contents[i..].chars().next()?;
            i += c.len_utf8();
            return Some((at, c));
        }
        let esc = *bytes.get(i + 1)?;
        i += 2;
        let c = match esc {
            b'n' => '\n',
            b't' => '\t',
            b'r' => '\r',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'u' => {
                let hex = |j: usize| {
                    contents
                        .get(j..j + 4)
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                };
                let hi = hex(i)?;
                i += 4;
                if (0xD800..0xDC00).contains(&hi) && contents[i..].starts_with("\\u") {
                    let lo = hex(i + 2)?;
                    i += 6;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00)))
                        .unwrap_or('\u{fffd}')
                } else {
                    char::from_u32(hi).unwrap_or('\u{fffd}')
                }
            }
            other => other as char,
        };
        Some((at, c))
    })
}

/// JSON string escaping for text written into a notebook (non-ASCII kept as is, as nbformat
/// writes it).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Mask IPython syntax line by line; returns the masked text (same length, same line breaks) and
/// the masked byte ranges. A line is only IPython syntax where a Python statement could start:
/// not inside brackets, a string or after a backslash continuation.
fn mask(source: &str) -> (String, Vec<Range<usize>>) {
    let mut out = source.as_bytes().to_vec();
    let mut masked = Vec::new();
    let lines: Vec<(usize, &str)> = source
        .split_inclusive('\n')
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .collect();
    let body = |line: &str| line.trim_end_matches(['\n', '\r']).len();

    // A cell magic must be the cell's first non-blank line.
    if let Some(&(at, line)) = lines.iter().find(|(_, l)| !l.trim().is_empty()) {
        if let Some(rest) = line.trim_start().strip_prefix("%%") {
            let name = rest.split_whitespace().next().unwrap_or("");
            let whole = !PYTHON_BODY_MAGICS.contains(&name);
            for &(start, l) in &lines {
                if whole || start == at {
                    blank(&mut out, start..start + body(l));
                    masked.push(start..start + body(l));
                }
                if !whole && start > at {
                    break;
                }
            }
            if whole {
                return (String::from_utf8(out).unwrap_or_default(), masked);
            }
        }
    }

    let mut scan = Scanner::default();
    let mut magic_continues = false;
    for &(start, line) in &lines {
        let range = start..start + body(line);
        if range.is_empty() {
            magic_continues = false;
            continue;
        }
        if masked.iter().any(|m: &Range<usize>| m.start == start) {
            continue;
        }
        let continues_magic = magic_continues;
        if continues_magic || (scan.at_statement_start() && is_ipython(line)) {
            if continues_magic {
                blank(&mut out, range.clone());
            } else {
                let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
                blank(&mut out, start + indent..range.end);
                out[start + indent] = b'0';
            }
            magic_continues = line.trim_end().ends_with('\\');
            masked.push(range);
            continue;
        }
        scan.line(line);
    }
    // Only ASCII bytes replaced whole lines' bytes: the text is still UTF-8.
    (String::from_utf8(out).unwrap_or_default(), masked)
}

fn blank(out: &mut [u8], range: Range<usize>) {
    for b in &mut out[range] {
        *b = b' ';
    }
}

/// Whether a line (at a statement start) is IPython syntax rather than Python.
fn is_ipython(line: &str) -> bool {
    let t = line.trim();
    if t.starts_with(['%', '!', '?']) {
        return true;
    }
    // `obj?` / `obj??` help, unless the `?` is in a comment or a string.
    if t.ends_with('?') && !t.contains(['#', '"', '\'']) {
        return true;
    }
    // `files = !ls`, `t = %timeit -o f()`
    let name_end = t
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.')))
        .unwrap_or(t.len());
    if name_end > 0 {
        if let Some(rhs) = t[name_end..].trim_start().strip_prefix('=') {
            return rhs.trim_start().starts_with(['!', '%']);
        }
    }
    false
}

/// Just enough of Python's lexer to know whether a line starts a statement.
#[derive(Default)]
struct Scanner {
    depth: usize,
    string: Option<(u8, bool)>,
    backslash: bool,
}

impl Scanner {
    fn at_statement_start(&self) -> bool {
        self.depth == 0 && self.string.is_none() && !self.backslash
    }

    fn line(&mut self, line: &str) {
        let b = line.as_bytes();
        let mut i = 0;
        self.backslash = false;
        while i < b.len() {
            if let Some((q, triple)) = self.string {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if triple && b[i..].starts_with(&[q, q, q]) {
                    self.string = None;
                    i += 3;
                    continue;
                }
                if !triple && b[i] == q {
                    self.string = None;
                }
                i += 1;
                continue;
            }
            match b[i] {
                b'#' => break,
                q @ (b'"' | b'\'') => {
                    let triple = b[i..].starts_with(&[q, q, q]);
                    self.string = Some((q, triple));
                    i += if triple { 3 } else { 1 };
                    continue;
                }
                b'(' | b'[' | b'{' => self.depth += 1,
                b')' | b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                b'\\' if b[i + 1..].iter().all(|c| matches!(c, b'\n' | b'\r')) => {
                    self.backslash = true;
                }
                _ => {}
            }
            i += 1;
        }
        // A one-quote string ends with its line unless a backslash continues it.
        if let Some((_, false)) = self.string {
            if !line.trim_end_matches(['\n', '\r']).ends_with('\\') {
                self.string = None;
            }
        }
    }
}

impl Notebook {
    /// The `.ipynb` file's text.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The code cell holding a virtual offset (the one before it at a cell's trailing newline).
    pub fn cell_at(&self, offset: usize) -> Option<&CodeCell> {
        let i = self.cells.partition_point(|c| c.start <= offset);
        self.cells.get(i.checked_sub(1)?)
    }

    /// Cell number and row/column (characters) within the cell of a virtual offset.
    pub fn locate(&self, offset: usize) -> Option<(usize, Position)> {
        let cell = self.cell_at(offset)?;
        let o = (offset - cell.start).min(cell.source.len());
        Some((cell.number, cell.position(o)))
    }

    /// The `.ipynb` byte offset of a virtual offset. At the boundary of two pieces, an `end`
    /// offset stays at the end of the earlier one (on its line), a start goes to the later one.
    pub fn raw_offset(&self, offset: usize, end: bool) -> usize {
        let Some(cell) = self.cell_at(offset) else {
            return 0;
        };
        let o = (offset - cell.start).min(cell.source.len());
        let Some(piece) = cell.piece_at(o, end) else {
            return 0;
        };
        piece.raw_of(&self.raw, o - piece.start)
    }

    /// Row and character column of a byte offset of the `.ipynb` file.
    pub fn raw_position(&self, offset: usize) -> Position {
        let offset = floor_char_boundary(&self.raw, offset.min(self.raw.len()));
        let line = self.raw_lines.line_of(offset);
        let start = self.raw_lines.line_start(line);
        Position {
            row: line + 1,
            column: self.raw[start..offset].chars().count() + 1,
        }
    }

    /// Virtual-text edits as edits of the `.ipynb` text: only the JSON string contents they touch
    /// change, escaped. `None` when an edit cannot be written back (it crosses cells, touches a
    /// masked IPython line or the newline that joins two cells).
    pub fn raw_edits(&self, edits: &[Edit]) -> Option<Vec<Edit>> {
        let mut out = Vec::new();
        for e in edits {
            let cell = self.cell_at(e.range.start)?;
            let (o1, o2) = (
                e.range.start - cell.start,
                e.range.end.checked_sub(cell.start)?,
            );
            if o1 > o2 || o2 > cell.source.len() {
                return None;
            }
            if cell.masked.iter().any(|m| m.start <= o2 && o1 <= m.end) {
                return None;
            }
            if o1 == o2 {
                let piece = cell.piece_at(o1, false)?;
                let at = piece.raw_of(&self.raw, o1 - piece.start);
                let tail = o1 < piece.start + piece.len;
                out.push(Edit::insert(at, self.encode(&e.content, piece, tail)));
                continue;
            }
            let mut first = true;
            for piece in &cell.pieces {
                let (s, t) = (o1.max(piece.start), o2.min(piece.start + piece.len));
                if s >= t {
                    continue;
                }
                let range = piece.raw_of(&self.raw, s - piece.start)
                    ..piece.raw_of(&self.raw, t - piece.start);
                let content = if first {
                    self.encode(&e.content, piece, t < piece.start + piece.len)
                } else {
                    String::new()
                };
                first = false;
                out.push(Edit::replace(range, content));
            }
        }
        Some(out)
    }

    /// `text` as the contents of `piece`: escaped; in a list element, a newline with text after it
    /// in the element closes the element and opens the next, as nbformat writes one line each.
    fn encode(&self, text: &str, piece: &Piece, tail: bool) -> String {
        let Some(indent) = &piece.indent else {
            return escape(text);
        };
        let parts: Vec<&str> = text.split_inclusive('\n').collect();
        let mut out = String::new();
        for (i, part) in parts.iter().enumerate() {
            out.push_str(&escape(part));
            let more = i + 1 < parts.len() || tail;
            if part.ends_with('\n') && more {
                out.push_str("\",");
                out.push_str(self.newline);
                out.push_str(indent);
                out.push('"');
            }
        }
        out
    }

    /// The code cells, in order.
    pub fn cells(&self) -> &[CodeCell] {
        &self.cells
    }
}

impl CodeCell {
    /// Row and character column of a byte offset of the cell's source.
    pub fn position(&self, offset: usize) -> Position {
        let offset = floor_char_boundary(&self.source, offset.min(self.source.len()));
        let line = self.lines.line_of(offset);
        let start = self.lines.line_start(line);
        Position {
            row: line + 1,
            column: self.source[start..offset].chars().count() + 1,
        }
    }

    fn piece_at(&self, o: usize, end: bool) -> Option<&Piece> {
        let inside = |p: &&Piece| {
            if end {
                p.start < o && o <= p.start + p.len
            } else {
                p.start <= o && o < p.start + p.len
            }
        };
        self.pieces
            .iter()
            .find(inside)
            .or_else(|| self.pieces.iter().rev().find(|p| p.len > 0))
            .or_else(|| self.pieces.last())
    }
}

impl Piece {
    /// Raw offset of the decoded byte `o` of this piece.
    fn raw_of(&self, raw: &str, o: usize) -> usize {
        let contents = raw.get(self.raw.clone()).unwrap_or("");
        let mut decoded = 0;
        for (at, c) in walk(contents) {
            if decoded >= o {
                return self.raw.start + at;
            }
            decoded += c.len_utf8();
        }
        self.raw.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python(raw: &str) -> (Notebook, String) {
        match load(raw.to_string()) {
            Ok(Loaded::Python(nb, text)) => (nb, text),
            other => panic!("not a Python notebook: {other:?}"),
        }
    }

    const NB: &str = r##"{
 "cells": [
  {"cell_type": "markdown", "metadata": {}, "source": ["# Title\n"]},
  {"cell_type": "code", "metadata": {}, "outputs": [{"output_type": "stream", "text": ["x = !ls\n"]}],
   "source": [
    "%matplotlib inline\n",
    "import torch\n",
    "s = \"é\\\"q\"  # ünï\n",
    "!pip install x"
   ]},
  {"cell_type": "code", "metadata": {}, "source": "y = 1\nz = 2\n"}
 ],
 "metadata": {"kernelspec": {"language": "python"}},
 "nbformat": 4, "nbformat_minor": 5
}"##;

    #[test]
    fn cells_are_joined_and_magics_masked_in_place() {
        let (nb, text) = python(NB);
        assert_eq!(
            text,
            "0                 \nimport torch\ns = \"é\\\"q\"  # ünï\n0             \ny = 1\nz = 2\n"
        );
        assert_eq!(nb.cells().len(), 2);
        assert_eq!(nb.cells()[0].number, 2);
        assert_eq!(nb.cells()[1].number, 3);
        // `z` is on row 2 of cell 3.
        let z = text.find('z').unwrap();
        assert_eq!(nb.locate(z), Some((3, Position { row: 2, column: 1 })));
        // In the .ipynb, `ü` of the comment sits after the escaped quote.
        let u = text.find('ü').unwrap();
        let raw_u = nb.raw_offset(u, false);
        assert!(nb.raw()[raw_u..].starts_with("ünï"));
        let p = nb.raw_position(raw_u);
        assert_eq!(p.row, 8);
        assert_eq!(
            p.column,
            nb.raw()
                .lines()
                .nth(7)
                .unwrap()
                .chars()
                .position(|c| c == 'ü')
                .unwrap()
                + 1
        );
    }

    #[test]
    fn walk_matches_serde_decoding() {
        for token in [
            r#""a\"b\\c\/d\n\t\u00e9\ud83d\ude00 é""#,
            r#""\b\f\r""#,
            r#""""#,
        ] {
            let decoded: String = serde_json::from_str(token).unwrap();
            let walked: String = walk(&token[1..token.len() - 1]).map(|(_, c)| c).collect();
            assert_eq!(walked, decoded);
        }
    }

    #[test]
    fn edits_rewrite_only_the_touched_string_contents() {
        let (nb, text) = python(NB);
        let at = text.find("import").unwrap();
        let edits = nb
            .raw_edits(&[Edit::replace(at..at + 6, "from \"x\" import")])
            .unwrap();
        let (new, _) = crate::diagnostic::apply_edits(nb.raw(), &[&edits]);
        assert_eq!(
            new,
            NB.replace(r#""import torch\n""#, r#""from \"x\" import torch\n""#)
        );
        // A new line in a list element becomes a new element.
        let end = text.find("torch").unwrap() + 5;
        let edits = nb.raw_edits(&[Edit::insert(end, "\nimport math")]).unwrap();
        let (new, _) = crate::diagnostic::apply_edits(nb.raw(), &[&edits]);
        assert!(
            new.contains("    \"import torch\\n\",\n    \"import math\\n\",\n"),
            "{new}"
        );
        let (_, new_text) = python(&new);
        assert!(new_text.contains("import torch\nimport math\n"));
        // A string source takes the edit inside its one string.
        let y = text.find("y = 1").unwrap();
        let edits = nb.raw_edits(&[Edit::replace(y + 4..y + 5, "10")]).unwrap();
        let (new, _) = crate::diagnostic::apply_edits(nb.raw(), &[&edits]);
        assert!(new.contains(r#""source": "y = 10\nz = 2\n""#), "{new}");
        // Masked lines and the joint between cells are never rewritten.
        assert!(nb.raw_edits(&[Edit::replace(0..1, "1")]).is_none());
        let last = nb.cells()[0].start + nb.cells()[0].source.len();
        assert!(nb.raw_edits(&[Edit::replace(last..last + 1, "")]).is_none());
    }

    #[test]
    fn magics_only_at_statement_starts() {
        let src = "x = (1\n% 2)\ns = \"\"\"\n!not shell\n\"\"\"\n  %time f()\nfiles = !ls\nf?\ny = a != b\n";
        let (text, masked) = mask(src);
        assert_eq!(masked.len(), 3, "{text}");
        assert!(text.contains("% 2)"));
        assert!(text.contains("!not shell"));
        assert!(text.contains("  0        \n"));
        assert!(text.contains("\n0          \n0 \ny = a != b\n"), "{text:?}");
        let (text, _) = mask("%%bash\necho hi\n  ls\n");
        assert_eq!(text.trim(), "");
        let (text, _) = mask("%%time\nfor i in x:\n    !ls\n");
        assert_eq!(text, "      \nfor i in x:\n    0  \n");
    }

    #[test]
    fn malformed_notebooks_say_what_is_wrong() {
        let err = |raw: &str| load(raw.to_string()).unwrap_err();
        assert!(err("{\"cells\": [").starts_with("invalid notebook JSON: EOF"));
        assert_eq!(err("{}"), "not a notebook: no \"cells\" list");
        assert!(err("[]").starts_with("not a notebook"));
        assert_eq!(
            err("{\"cells\": [{\"cell_type\": \"code\", \"source\": 3}]}"),
            "cell 1 (line 1): \"source\" must be a string or a list of strings (nbformat 4)"
        );
        assert_eq!(
            err("{\"cells\": [\n{\"source\": []}]}"),
            "cell 1 (line 2): no \"cell_type\" string"
        );
        assert!(err("{\"worksheets\": []}").starts_with("nbformat 3"));
        assert!(matches!(
            load(
                r#"{"cells": [], "metadata": {"kernelspec": {"language": "R"}}}"#.to_string()
            ),
            Ok(Loaded::OtherLanguage(l)) if l == "R"
        ));
    }
}
