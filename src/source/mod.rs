//! A file as memlint sees it: its text, its language and a precomputed line index, so that every
//! position lookup (for reports, for miette, for fixes) is a binary search rather than a rescan.

pub mod lines;
pub mod notebook;

pub use lines::{floor_char_boundary, logical_line, LineIndex, Position};

use crate::diagnostic::Edit;
use notebook::Notebook;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The languages memlint reads. Anything else is skipped before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    Python,
    Notebook,
    Shell,
    Yaml,
    Json,
    Toml,
    /// `requirements*.txt`, or a `.txt` file in a `requirements/` folder: dependency pins.
    Requirements,
}

impl Language {
    /// The language of a path from its extension alone (`None` for extensionless files: see
    /// [`Language::from_shebang`]).
    pub fn from_path(path: &Path) -> Option<Language> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "py" | "pyi" => Language::Python,
            "ipynb" => Language::Notebook,
            "sh" | "bash" | "slurm" | "sbatch" => Language::Shell,
            "yaml" | "yml" => Language::Yaml,
            "json" => Language::Json,
            "toml" => Language::Toml,
            "txt" if is_requirements(path) => Language::Requirements,
            _ => return None,
        })
    }

    /// The language of an extensionless script from its first line.
    pub fn from_shebang(first_line: &[u8]) -> Option<Language> {
        let line = std::str::from_utf8(first_line).ok()?.trim_end();
        let rest = line.strip_prefix("#!")?;
        let mut words = rest.split_whitespace();
        let mut prog = words.next()?.rsplit('/').next()?;
        if prog == "env" {
            prog = words.find(|w| !w.starts_with('-'))?;
        }
        match prog {
            "bash" | "sh" | "dash" | "zsh" | "ksh" => Some(Language::Shell),
            p if p.starts_with("python") => Some(Language::Python),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Notebook => "notebook",
            Language::Shell => "shell",
            Language::Yaml => "yaml",
            Language::Json => "json",
            Language::Toml => "toml",
            Language::Requirements => "requirements",
        }
    }

    /// Whether `#` starts a comment that can carry a suppression.
    pub fn has_hash_comments(self) -> bool {
        !matches!(self, Language::Json)
    }
}

/// `requirements*.txt`, or a `.txt` file in a `requirements/` folder.
fn is_requirements(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let in_folder = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.eq_ignore_ascii_case("requirements"));
    name.to_ascii_lowercase().starts_with("requirements") || in_folder
}

/// A file read into memory. For a notebook, `text` is the virtual Python text of its code cells
/// (see [`notebook`]): everything that analyses the file reads it, and the positions users
/// see go through [`SourceFile::locate`] and [`SourceFile::disk_position`].
#[derive(Debug)]
pub struct SourceFile {
    /// The path as given or discovered (used to read and write the file).
    pub path: PathBuf,
    /// The path as reported: relative to the current directory when the file is under it.
    pub display: String,
    pub language: Language,
    pub text: String,
    pub lines: LineIndex,
    /// The notebook behind `text`, for `.ipynb` files.
    pub notebook: Option<Box<Notebook>>,
}

impl SourceFile {
    pub fn new(path: PathBuf, display: String, language: Language, text: String) -> Self {
        let lines = LineIndex::new(&text);
        SourceFile {
            path,
            display,
            language,
            text,
            lines,
            notebook: None,
        }
    }

    /// A notebook from the text of its `.ipynb` file. `Ok(None)` for a notebook in another
    /// language than Python; `Err` says what is malformed.
    pub fn from_notebook(
        path: PathBuf,
        display: String,
        raw: String,
    ) -> Result<Option<Self>, String> {
        match notebook::load(raw)? {
            notebook::Loaded::Python(nb, text) => {
                let mut file = SourceFile::new(path, display, Language::Notebook, text);
                file.notebook = Some(Box::new(nb));
                Ok(Some(file))
            }
            notebook::Loaded::OtherLanguage(_) => Ok(None),
        }
    }

    /// The text of the file on disk (the `.ipynb` JSON for a notebook).
    pub fn disk_text(&self) -> &str {
        match &self.notebook {
            Some(nb) => nb.raw(),
            None => &self.text,
        }
    }

    /// Where users see an offset: for a notebook the 1-based cell and the row and column within
    /// it, otherwise the row and column in the file.
    pub fn locate(&self, offset: usize) -> (Option<usize>, Position) {
        match self.notebook.as_ref().and_then(|nb| nb.locate(offset)) {
            Some((cell, p)) => (Some(cell), p),
            None => (None, self.position(offset)),
        }
    }

    /// `train.py:13`, or `train.ipynb:cell 2:4` in a notebook: where a piece of evidence was seen.
    pub fn site(&self, offset: usize) -> String {
        match self.locate(offset) {
            (Some(cell), p) => format!("{}:cell {cell}:{}", self.display, p.row),
            (None, p) => format!("{}:{}", self.display, p.row),
        }
    }

    /// Row and column in the file on disk (the `.ipynb` line for a notebook), for annotations.
    /// `end` says the offset ends a span: at the seam of two JSON strings it stays on the first.
    pub fn disk_position(&self, offset: usize, end: bool) -> Position {
        match &self.notebook {
            Some(nb) => nb.raw_position(nb.raw_offset(offset, end)),
            None => self.position(offset),
        }
    }

    /// Row and column of an offset of [`SourceFile::disk_text`].
    pub fn disk_position_at(&self, disk_offset: usize) -> Position {
        match &self.notebook {
            Some(nb) => nb.raw_position(disk_offset),
            None => self.position(disk_offset),
        }
    }

    /// Edits of `text` as edits of [`SourceFile::disk_text`]; `None` when a notebook edit cannot be
    /// written back into its cell.
    pub fn disk_edits(&self, edits: &[Edit]) -> Option<Vec<Edit>> {
        match &self.notebook {
            Some(nb) => nb.raw_edits(edits),
            None => Some(edits.to_vec()),
        }
    }

    /// Row and character column of a byte offset (clamped to the text).
    pub fn position(&self, offset: usize) -> Position {
        let offset = floor_char_boundary(&self.text, offset.min(self.text.len()));
        let line = self.lines.line_of(offset);
        let start = self.lines.line_start(line);
        let column = self.text[start..offset].chars().count() + 1;
        Position {
            row: line + 1,
            column,
        }
    }

    /// Byte offset of a 0-based line and a 0-based character column (clamped to the line).
    pub fn offset_of(&self, line: usize, char_col: usize) -> usize {
        let start = self.lines.line_start(line).min(self.text.len());
        let end = self.line_end(line);
        self.text[start..end]
            .char_indices()
            .nth(char_col)
            .map_or(end, |(i, _)| start + i)
    }

    /// End of a 0-based line, without its newline.
    pub fn line_end(&self, line: usize) -> usize {
        let next = self.lines.line_start(line + 1).min(self.text.len());
        let start = self.lines.line_start(line).min(self.text.len());
        let mut end = next;
        let bytes = self.text.as_bytes();
        while end > start && matches!(bytes[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        end
    }

    /// The text of the 0-based line holding `offset`, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.lines.line_start(line).min(self.text.len());
        &self.text[start..self.line_end(line)]
    }

    pub fn slice(&self, range: &Range<usize>) -> &str {
        self.text.get(range.clone()).unwrap_or("")
    }

    /// Leading whitespace of the line holding `offset`.
    pub fn indent_at(&self, offset: usize) -> &str {
        let line = self.lines.line_of(offset.min(self.text.len()));
        let text = self.line_text(line);
        let trimmed = text.trim_start_matches([' ', '\t']);
        &text[..text.len() - trimmed.len()]
    }
}

/// How a path is reported: relative to `cwd` when under it, as given otherwise.
pub fn display_path(path: &Path, cwd: &Path) -> String {
    let shown = if path.is_absolute() {
        path.strip_prefix(cwd).unwrap_or(path)
    } else {
        path.strip_prefix(".").unwrap_or(path)
    };
    shown.to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters() {
        let f = SourceFile::new(
            "a.py".into(),
            "a.py".into(),
            Language::Python,
            "x = 1\né = 2\n".into(),
        );
        assert_eq!(f.position(0), Position { row: 1, column: 1 });
        let e = f.text.find('=').unwrap();
        assert_eq!(f.position(e), Position { row: 1, column: 3 });
        let second = f.text.rfind('=').unwrap();
        assert_eq!(f.position(second), Position { row: 2, column: 3 });
        assert_eq!(f.offset_of(1, 2), second);
    }

    #[test]
    fn shebangs() {
        assert_eq!(
            Language::from_shebang(b"#!/usr/bin/env bash"),
            Some(Language::Shell)
        );
        assert_eq!(
            Language::from_shebang(b"#!/bin/sh -e"),
            Some(Language::Shell)
        );
        assert_eq!(
            Language::from_shebang(b"#!/usr/bin/env -S python3 -u"),
            Some(Language::Python)
        );
        assert_eq!(Language::from_shebang(b"#!/usr/bin/perl"), None);
    }
}
