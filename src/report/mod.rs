//! Reporters turn diagnostics into each output format (and the rule pages into text or JSON).
//! Only `full` knows miette.

mod estimate;
mod full;
mod github;
mod pages;
mod sarif;
mod statistics;

pub use estimate::{render_estimate_json, render_estimate_table, EstimatedRun};
pub use full::render_full;
pub use github::render_github;
pub use pages::{render_rule_list, render_rule_page, DocFormat};
pub use sarif::render_sarif;
pub use statistics::{render_statistics, render_statistics_json};

use crate::diagnostic::{Applicability, Diagnostic, Severity};
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

/// Whether the diagnostic's fix is applied by `--fix` at this threshold (`Safe`, or `Unsafe`
/// with `--unsafe-fixes`).
pub fn applicable(d: &Diagnostic, threshold: Applicability) -> bool {
    d.fix.as_ref().is_some_and(|f| {
        f.applicability >= threshold && f.applicability != Applicability::DisplayOnly
    })
}

/// Whether the diagnostic's fix is unsafe and `--unsafe-fixes` was not given: a hidden fix.
fn hidden(d: &Diagnostic, threshold: Applicability) -> bool {
    threshold == Applicability::Safe
        && d.fix
            .as_ref()
            .is_some_and(|f| f.applicability == Applicability::Unsafe)
}

/// One line per diagnostic; `[*]` marks the ones `--fix` applies (safe fixes).
pub fn render_concise(entries: &[Entry]) -> String {
    render_concise_with(entries, Applicability::Safe)
}

/// [`render_concise`], `[*]` marking the fixes applied at this threshold (`Unsafe` with
/// `--unsafe-fixes`).
pub fn render_concise_with(entries: &[Entry], threshold: Applicability) -> String {
    let mut s = String::new();
    for e in entries {
        let fixable = if applicable(e.diagnostic, threshold) {
            " [*]"
        } else {
            ""
        };
        s.push_str(&format!(
            "{}: {} {}{fixable}\n",
            e.location(),
            e.diagnostic.code,
            e.diagnostic.message
        ));
    }
    s
}

/// What the closing lines of the human formats count.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Diagnostics fixed by `--fix` in this run.
    pub fixed: usize,
    /// The fix threshold: `Unsafe` with `--unsafe-fixes`.
    pub threshold: Option<Applicability>,
    /// Files could not be read: no line may say that the check passed.
    pub failed: bool,
}

/// The closing lines of the human formats: the count, what `--fix` would fix, and the unsafe
/// fixes that `--unsafe-fixes` would enable, as ruff words them.
pub fn summary(entries: &[Entry], tally: Tally) -> String {
    let threshold = tally.threshold.unwrap_or(Applicability::Safe);
    let fixed = tally.fixed;
    let n = entries.len();
    let fixable = entries
        .iter()
        .filter(|e| applicable(e.diagnostic, threshold))
        .count();
    let hidden = entries
        .iter()
        .filter(|e| hidden(e.diagnostic, threshold))
        .count();
    let mut s = String::new();
    if n == 0 && fixed == 0 {
        if !tally.failed {
            s.push_str("All checks passed!\n");
        }
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
    let es = if hidden == 1 { "" } else { "es" };
    match (fixable, hidden) {
        (0, 0) => {}
        (f, 0) => s.push_str(&format!("[*] {f} fixable with the `--fix` option.\n")),
        (0, h) => s.push_str(&format!(
            "No fixes available ({h} hidden fix{es} can be enabled with the `--unsafe-fixes` option).\n"
        )),
        (f, h) => s.push_str(&format!(
            "[*] {f} fixable with the `--fix` option ({h} hidden fix{es} can be enabled with the `--unsafe-fixes` option).\n"
        )),
    }
    s
}
