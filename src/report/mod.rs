//! Reporters turn diagnostics into each output format (and the rule pages into text or JSON).
//! Only `full` knows miette.

mod estimate;
mod full;
mod github;
mod pages;
mod sarif;

pub use estimate::{render_estimate_json, render_estimate_table, EstimatedRun};
pub use full::render_full;
pub use github::render_github;
pub use pages::{render_rule_list, render_rule_page, DocFormat};
pub use sarif::render_sarif;

use crate::diagnostic::{Diagnostic, Severity};
use crate::lint::FileResult;
use crate::rules::catalog;
use crate::source::{Position, SourceFile};
use serde::Serialize;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Full,
    Concise,
    Json,
    JsonLines,
    Github,
    Sarif,
}

/// One diagnostic with everything a reporter needs, in reporting order.
pub struct Entry<'a> {
    pub file: &'a Arc<SourceFile>,
    pub diagnostic: &'a Diagnostic,
    pub severity: Severity,
    pub name: &'static str,
    /// The notebook cell (1-based among all cells) holding the diagnostic; `start` and `end` then
    /// count rows within that cell.
    pub cell: Option<usize>,
    pub start: Position,
    pub end: Position,
}

impl Entry<'_> {
    /// `train.py:8:35` or `train.ipynb:cell 3:2:5`, as the text formats start a line.
    pub fn location(&self) -> String {
        match self.cell {
            Some(cell) => format!(
                "{}:cell {cell}:{}:{}",
                self.file.display, self.start.row, self.start.column
            ),
            None => format!(
                "{}:{}:{}",
                self.file.display, self.start.row, self.start.column
            ),
        }
    }
}

pub fn severity_of(code: &str) -> Severity {
    catalog::page(code).map_or(Severity::Warning, |p| p.severity)
}

pub fn name_of(code: &str) -> &'static str {
    catalog::page(code).map_or("", |p| p.name.as_str())
}

/// All diagnostics of a run, ordered by path, line, column, code.
pub fn entries(results: &[FileResult]) -> Vec<Entry<'_>> {
    let mut out: Vec<Entry> = results
        .iter()
        .flat_map(|r| {
            r.diagnostics.iter().map(move |d| {
                let (cell, start) = r.file.locate(d.range.start);
                Entry {
                    file: &r.file,
                    diagnostic: d,
                    severity: severity_of(d.code),
                    name: name_of(d.code),
                    cell,
                    start,
                    end: r.file.locate(d.range.end).1,
                }
            })
        })
        .collect();
    // Offsets order a notebook's cells too (its rows restart in each cell).
    out.sort_by(|a, b| {
        (&a.file.display, a.diagnostic.range.start, a.diagnostic.code).cmp(&(
            &b.file.display,
            b.diagnostic.range.start,
            b.diagnostic.code,
        ))
    });
    out
}

#[derive(Serialize)]
struct JsonLocation {
    row: usize,
    column: usize,
}

#[derive(Serialize)]
struct JsonEdit {
    content: String,
    /// Only when a notebook edit is in another cell than its diagnostic.
    #[serde(skip_serializing_if = "Option::is_none")]
    cell: Option<usize>,
    location: JsonLocation,
    end_location: JsonLocation,
}

#[derive(Serialize)]
struct JsonFix {
    applicability: &'static str,
    message: String,
    edits: Vec<JsonEdit>,
}

#[derive(Serialize)]
struct JsonMessage<'a> {
    code: &'a str,
    name: &'a str,
    severity: &'a str,
    message: &'a str,
    filename: &'a str,
    /// Notebooks only: the cell that `location` and `end_location` count rows in.
    #[serde(skip_serializing_if = "Option::is_none")]
    cell: Option<usize>,
    location: JsonLocation,
    end_location: JsonLocation,
    help: Option<&'a str>,
    url: String,
    fix: Option<JsonFix>,
}

fn loc(p: Position) -> JsonLocation {
    JsonLocation {
        row: p.row,
        column: p.column,
    }
}

fn json_message<'a>(e: &'a Entry<'a>) -> JsonMessage<'a> {
    let d = e.diagnostic;
    JsonMessage {
        code: d.code,
        name: e.name,
        severity: e.severity.as_str(),
        message: &d.message,
        filename: &e.file.display,
        cell: e.cell,
        location: loc(e.start),
        end_location: loc(e.end),
        help: d.help.as_deref(),
        url: catalog::url(d.code),
        fix: d.fix.as_ref().map(|f| JsonFix {
            applicability: f.applicability.as_str(),
            message: f.message.clone(),
            edits: f
                .edits
                .iter()
                .map(|ed| {
                    let (cell, start) = e.file.locate(ed.range.start);
                    JsonEdit {
                        content: ed.content.clone(),
                        cell: cell.filter(|c| Some(*c) != e.cell),
                        location: loc(start),
                        end_location: loc(e.file.locate(ed.range.end).1),
                    }
                })
                .collect(),
        }),
    }
}

pub fn render_json(entries: &[Entry]) -> String {
    let messages: Vec<JsonMessage> = entries.iter().map(json_message).collect();
    let mut s = serde_json::to_string_pretty(&messages).unwrap_or_else(|_| "[]".into());
    s.push('\n');
    s
}

pub fn render_json_lines(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        if let Ok(line) = serde_json::to_string(&json_message(e)) {
            s.push_str(&line);
            s.push('\n');
        }
    }
    s
}

pub fn render_concise(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        let safe = e
            .diagnostic
            .fix
            .as_ref()
            .is_some_and(|f| f.applicability == crate::diagnostic::Applicability::Safe);
        let fixable = if safe { " [*]" } else { "" };
        s.push_str(&format!(
            "{}: {} {}{fixable}\n",
            e.location(),
            e.diagnostic.code,
            e.diagnostic.message
        ));
    }
    s
}

/// The closing line of the human formats.
pub fn summary(entries: &[Entry], fixed: usize) -> String {
    let n = entries.len();
    let fixable = entries
        .iter()
        .filter(|e| {
            e.diagnostic
                .fix
                .as_ref()
                .is_some_and(|f| f.applicability == crate::diagnostic::Applicability::Safe)
        })
        .count();
    let mut s = String::new();
    if n == 0 && fixed == 0 {
        s.push_str("All checks passed!\n");
        return s;
    }
    if fixed > 0 {
        s.push_str(&format!(
            "Found {} diagnostic{} ({fixed} fixed, {n} remaining).\n",
            n + fixed,
            if n + fixed == 1 { "" } else { "s" }
        ));
    } else {
        s.push_str(&format!(
            "Found {n} diagnostic{}.\n",
            if n == 1 { "" } else { "s" }
        ));
    }
    if fixable > 0 {
        s.push_str(&format!("[*] {fixable} fixable with the `--fix` option.\n"));
    }
    s
}
