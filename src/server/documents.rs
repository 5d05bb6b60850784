//! The documents an editor holds open: text documents and notebooks, the paths they stand for,
//! and positions in the negotiated encoding (UTF-16 code units by default, or UTF-8 bytes).

use crate::diagnostic::Edit;
use crate::lint::FileResult;
use crate::source::SourceFile;
use lsp_types::{Position, Range, Uri};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How the client counts a position's `character`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
}

/// An open text document.
pub struct TextDoc {
    pub path: PathBuf,
    pub version: i32,
    pub text: String,
}

/// An open notebook: its cells in order, each with the URI of its text document.
pub struct NotebookDoc {
    pub path: PathBuf,
    pub version: i32,
    pub cells: Vec<Cell>,
}

pub struct Cell {
    pub uri: Uri,
    pub code: bool,
}

/// Every open document.
#[derive(Default)]
pub struct Documents {
    pub texts: HashMap<Uri, TextDoc>,
    pub notebooks: HashMap<Uri, NotebookDoc>,
    /// Cell documents (their text lives in `texts`, their path is the notebook's).
    pub cell_of: HashMap<Uri, Uri>,
}

impl Documents {
    /// The texts of the open files by absolute path: text documents as they are, notebooks as
    /// `.ipynb` JSON built from their cells.
    pub fn overlay(&self) -> crate::lint::Overlay {
        let mut out = crate::lint::Overlay::new();
        for (uri, doc) in &self.texts {
            if !self.cell_of.contains_key(uri) {
                out.insert(doc.path.clone(), doc.text.clone());
            }
        }
        for nb in self.notebooks.values() {
            out.insert(nb.path.clone(), self.notebook_json(nb));
        }
        out
    }

    /// A notebook as the `.ipynb` text memlint reads: one string of source per cell.
    pub fn notebook_json(&self, nb: &NotebookDoc) -> String {
        let cells: Vec<serde_json::Value> = nb
            .cells
            .iter()
            .map(|c| {
                let text = self.texts.get(&c.uri).map_or("", |d| d.text.as_str());
                serde_json::json!({
                    "cell_type": if c.code { "code" } else { "markdown" },
                    "metadata": {},
                    "source": text,
                })
            })
            .collect();
        serde_json::json!({
            "cells": cells,
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        })
        .to_string()
    }

    /// The path of the file a document stands for (a cell's is its notebook's).
    pub fn path_of(&self, uri: &Uri) -> Option<&Path> {
        if let Some(nb) = self.cell_of.get(uri).and_then(|n| self.notebooks.get(n)) {
            return Some(&nb.path);
        }
        self.texts
            .get(uri)
            .map(|d| d.path.as_path())
            .or_else(|| self.notebooks.get(uri).map(|n| n.path.as_path()))
    }

    /// The URIs diagnostics are published to, with the version of each.
    pub fn targets(&self) -> Vec<(Uri, Option<i32>)> {
        let mut out: Vec<(Uri, Option<i32>)> = self
            .texts
            .iter()
            .map(|(u, d)| (u.clone(), Some(d.version)))
            .collect();
        out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        out
    }
}

/// A `file:` URI's path, percent-decoded; other schemes (`untitled:`) get a path of their own
/// under `root`, named after the URI's last segment.
pub fn uri_to_path(uri: &Uri, root: &Path, language_id: Option<&str>) -> PathBuf {
    let s = uri.as_str();
    if let Some(rest) = s.strip_prefix("file://") {
        // `file:///home/x`, `file://localhost/home/x`, `file:///C:/x`.
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let decoded = percent_decode(path);
        let bytes = decoded.as_bytes();
        let windows = bytes.len() > 2 && bytes[0] == b'/' && bytes[2] == b':';
        return PathBuf::from(if windows { &decoded[1..] } else { &decoded });
    }
    let last = s
        .rsplit(['/', ':'])
        .next()
        .filter(|l| !l.is_empty())
        .unwrap_or("untitled");
    let mut name: String = percent_decode(last)
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if crate::source::Language::from_path(Path::new(&name)).is_none() {
        let ext = match language_id.unwrap_or("") {
            "shellscript" | "sh" | "bash" => "sh",
            "yaml" => "yaml",
            "json" | "jsonc" => "json",
            "toml" => "toml",
            _ => "py",
        };
        name = format!("{name}.{ext}");
    }
    root.join(".memlint-unsaved").join(name)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The width of `s` in the client's units.
fn width(s: &str, enc: Encoding) -> u32 {
    match enc {
        Encoding::Utf8 => s.len() as u32,
        Encoding::Utf16 => s.encode_utf16().count() as u32,
    }
}

/// The byte offset in `line` of a `character` in the client's units (clamped to the line).
fn byte_in_line(line: &str, character: u32, enc: Encoding) -> usize {
    let mut units = 0u32;
    for (i, c) in line.char_indices() {
        if units >= character {
            return i;
        }
        units += match enc {
            Encoding::Utf8 => c.len_utf8() as u32,
            Encoding::Utf16 => c.len_utf16() as u32,
        };
    }
    line.len()
}

/// A text with its line starts, for positions in one document.
pub struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
}

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lines { text, starts }
    }

    pub fn position(&self, offset: usize, enc: Encoding) -> Position {
        let offset = crate::source::floor_char_boundary(self.text, offset.min(self.text.len()));
        let line = self
            .starts
            .partition_point(|s| *s <= offset)
            .saturating_sub(1);
        let start = self.starts[line];
        Position::new(line as u32, width(&self.text[start..offset], enc))
    }

    pub fn offset(&self, pos: Position, enc: Encoding) -> usize {
        let Some(&start) = self.starts.get(pos.line as usize) else {
            return self.text.len();
        };
        let end = self
            .starts
            .get(pos.line as usize + 1)
            .map_or(self.text.len(), |e| e.saturating_sub(1));
        let line = &self.text[start..end.max(start)];
        let line = line.strip_suffix('\r').unwrap_or(line);
        start + byte_in_line(line, pos.character, enc)
    }
}

/// Where an offset of a linted file lands in the editor: the document (the cell of a notebook)
/// and the position in it. A `.ipynb` file open as a text document (its JSON) gets the positions
/// of the JSON, as the `github` format reports them.
pub struct Mapper<'a> {
    pub file: &'a SourceFile,
    /// For a notebook open through notebook sync: the URI of each cell, by index among all cells.
    cells: Option<Vec<Uri>>,
    uri: Uri,
    enc: Encoding,
    /// The text positions are counted in: the linted text, or a notebook's JSON.
    lines: Lines<'a>,
    raw: bool,
}

impl<'a> Mapper<'a> {
    pub fn new(result: &'a FileResult, uri: Uri, cells: Option<Vec<Uri>>, enc: Encoding) -> Self {
        let file = &*result.file;
        let raw = cells.is_none() && file.notebook.is_some();
        Mapper {
            file,
            cells,
            uri,
            enc,
            lines: Lines::new(if raw { file.disk_text() } else { &file.text }),
            raw,
        }
    }

    /// A span of the linted text in the offsets [`Mapper::offset`] gives.
    pub fn span(&self, span: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        match (&self.file.notebook, self.raw) {
            (Some(nb), true) => nb.raw_offset(span.start, false)..nb.raw_offset(span.end, true),
            _ => span.clone(),
        }
    }

    /// The document and position of an offset of the linted text.
    fn locate(&self, offset: usize, end: bool) -> Option<(Uri, Position)> {
        let Some(nb) = &self.file.notebook else {
            return Some((self.uri.clone(), self.lines.position(offset, self.enc)));
        };
        let Some(cells) = &self.cells else {
            let raw = nb.raw_offset(offset, end);
            return Some((self.uri.clone(), self.lines.position(raw, self.enc)));
        };
        let cell = nb.cell_at(offset)?;
        let uri = cells.get(cell.number.checked_sub(1)?)?.clone();
        let o = offset.saturating_sub(cell.start).min(cell.source.len());
        Some((uri, Lines::new(&cell.source).position(o, self.enc)))
    }

    /// The range of a span of the linted text, when it stays in one document.
    pub fn range(&self, span: &std::ops::Range<usize>) -> Option<(Uri, Range)> {
        let (uri, start) = self.locate(span.start, false)?;
        let (end_uri, end) = self.locate(span.end.max(span.start), true)?;
        let end = if end_uri == uri { end } else { start };
        Some((uri, Range::new(start, end)))
    }

    /// Edits of the linted text as edits of the documents (a notebook's JSON gets its edits in
    /// the strings of its cells). `None` when one cannot be written.
    pub fn edits(&self, edits: &[&Edit]) -> Option<Vec<(Uri, Range, String)>> {
        if !self.raw {
            return edits
                .iter()
                .map(|e| {
                    let (uri, range) = self.range(&e.range)?;
                    Some((uri, range, e.content.clone()))
                })
                .collect();
        }
        let owned: Vec<Edit> = edits.iter().map(|e| (*e).clone()).collect();
        let raw = self.file.disk_edits(&owned)?;
        Some(
            raw.into_iter()
                .map(|e| {
                    let start = self.lines.position(e.range.start, self.enc);
                    let end = self.lines.position(e.range.end, self.enc);
                    (self.uri.clone(), Range::new(start, end), e.content)
                })
                .collect(),
        )
    }

    /// The offset at a position of `uri`, in the offsets of [`Mapper::span`].
    pub fn offset(&self, uri: &Uri, pos: Position) -> Option<usize> {
        let (Some(nb), Some(cells)) = (&self.file.notebook, &self.cells) else {
            return Some(self.lines.offset(pos, self.enc));
        };
        let number = cells.iter().position(|c| c == uri)? + 1;
        let cell = nb.cells().iter().find(|c| c.number == number)?;
        Some(cell.start + Lines::new(&cell.source).offset(pos, self.enc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn positions_in_both_encodings() {
        let text = "é😀x = 1\ny\r\n";
        let l = Lines::new(text);
        let x = text.find('x').unwrap_or(0);
        assert_eq!(l.position(x, Encoding::Utf16), Position::new(0, 3));
        assert_eq!(l.position(x, Encoding::Utf8), Position::new(0, 6));
        assert_eq!(l.offset(Position::new(0, 3), Encoding::Utf16), x);
        assert_eq!(
            l.offset(Position::new(1, 9), Encoding::Utf16),
            text.len() - 2
        );
        assert_eq!(l.offset(Position::new(7, 0), Encoding::Utf16), text.len());
    }

    #[test]
    fn uris_and_paths() {
        let uri = Uri::from_str("file:///tmp/a%20b/train.py").expect("uri");
        assert_eq!(
            uri_to_path(&uri, Path::new("/w"), None),
            PathBuf::from("/tmp/a b/train.py")
        );
        let untitled = Uri::from_str("untitled:Untitled-1").expect("uri");
        assert_eq!(
            uri_to_path(&untitled, Path::new("/w"), Some("python")),
            PathBuf::from("/w/.memlint-unsaved/Untitled-1.py")
        );
    }
}
