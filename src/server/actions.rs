//! What the server answers with: its capabilities, the diagnostics of a lint as LSP sends them,
//! code actions (a fix per diagnostic, fix all, ignore on this line) and hover with the rule page.

use super::documents::{Encoding, Mapper};
use super::Server;
use crate::diagnostic::{select_edits, Applicability, Diagnostic, Edit};
use crate::fix;
use crate::lint::FileResult;
use crate::report::severity_of;
use crate::rules::catalog;
use lsp_types::{
    CodeAction, CodeActionKind, CodeActionParams, DiagnosticSeverity, HoverParams, NumberOrString,
    TextEdit, Uri, WorkspaceEdit,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

/// The kind of the action that applies every safe fix.
pub const FIX_ALL: &str = "source.fixAll.memlint";

pub fn capabilities(enc: Encoding) -> Value {
    json!({
        "positionEncoding": match enc { Encoding::Utf8 => "utf-8", Encoding::Utf16 => "utf-16" },
        "textDocumentSync": {"openClose": true, "change": 1, "save": true},
        "notebookDocumentSync": {
            "notebookSelector": [{"notebook": "*", "cells": [{"language": "python"}]}],
            "save": true,
        },
        "codeActionProvider": {
            "codeActionKinds": ["quickfix", FIX_ALL],
            "resolveProvider": false,
        },
        "hoverProvider": true,
    })
}

/// The mapping from a linted file to the documents open for it: the notebook's cells, or the
/// text document. `None` when no open document stands for the file.
fn mapper<'a>(server: &Server, path: &Path, result: &'a FileResult) -> Option<Mapper<'a>> {
    if let Some((uri, nb)) = server.docs.notebooks.iter().find(|(_, n)| n.path == path) {
        let cells = nb.cells.iter().map(|c| c.uri.clone()).collect();
        return Some(Mapper::new(result, uri.clone(), Some(cells), server.enc));
    }
    let (uri, _) = server
        .docs
        .texts
        .iter()
        .find(|(u, d)| d.path == path && !server.docs.cell_of.contains_key(*u))?;
    Some(Mapper::new(result, uri.clone(), None, server.enc))
}

fn lsp_diagnostic(m: &Mapper, d: &Diagnostic) -> Option<(Uri, lsp_types::Diagnostic)> {
    let (uri, range) = m.range(&d.range)?;
    let severity = match severity_of(d.code) {
        crate::diagnostic::Severity::Error => DiagnosticSeverity::ERROR,
        crate::diagnostic::Severity::Warning => DiagnosticSeverity::WARNING,
        crate::diagnostic::Severity::Info => DiagnosticSeverity::INFORMATION,
    };
    let href = Uri::from_str(&catalog::url(d.code)).ok();
    let message = match &d.help {
        Some(help) => format!("{}\nhelp: {help}", d.message),
        None => d.message.clone(),
    };
    Some((
        uri,
        lsp_types::Diagnostic {
            range,
            severity: Some(severity),
            code: Some(NumberOrString::String(d.code.to_string())),
            code_description: href.map(|href| lsp_types::CodeDescription { href }),
            source: Some("memlint".into()),
            message,
            ..Default::default()
        },
    ))
}

/// Every diagnostic of the last lint that lands in an open document.
pub fn all_diagnostics(server: &Server) -> Vec<(Uri, Vec<lsp_types::Diagnostic>)> {
    let mut out: HashMap<Uri, Vec<lsp_types::Diagnostic>> = HashMap::new();
    for (path, result) in &server.results {
        let Some(m) = mapper(server, path, result) else {
            continue;
        };
        for d in &result.diagnostics {
            if let Some((uri, diag)) = lsp_diagnostic(&m, d) {
                out.entry(uri).or_default().push(diag);
            }
        }
    }
    out.into_iter().collect()
}

/// Edits of the linted text as a workspace edit (a notebook's go to its cells).
fn workspace_edit(m: &Mapper, edits: &[&Edit]) -> Option<WorkspaceEdit> {
    let mut changes: HashMap<Uri, Vec<TextEdit>> = HashMap::new();
    for (uri, range, new_text) in m.edits(edits)? {
        changes
            .entry(uri)
            .or_default()
            .push(TextEdit { range, new_text });
    }
    Some(WorkspaceEdit {
        changes: Some(changes),
        ..Default::default()
    })
}

fn wanted(only: &Option<Vec<CodeActionKind>>, kind: &str) -> bool {
    match only {
        None => true,
        Some(kinds) => kinds.iter().any(|k| {
            let k = k.as_str();
            kind == k || kind.starts_with(&format!("{k}."))
        }),
    }
}

pub fn code_actions(server: &Server, p: &CodeActionParams) -> Value {
    let uri = &p.text_document.uri;
    let Some(path) = server.docs.path_of(uri).map(Path::to_path_buf) else {
        return json!([]);
    };
    let Some(result) = server.results.get(&path) else {
        return json!([]);
    };
    let Some(m) = mapper(server, &path, result) else {
        return json!([]);
    };
    let (Some(from), Some(to)) = (m.offset(uri, p.range.start), m.offset(uri, p.range.end)) else {
        return json!([]);
    };
    let only = &p.context.only;
    let mut actions: Vec<CodeAction> = Vec::new();
    for d in &result.diagnostics {
        let span = m.span(&d.range);
        let touches = span.start <= to && from <= span.end;
        let Some((d_uri, diag)) = lsp_diagnostic(&m, d) else {
            continue;
        };
        if !touches || &d_uri != uri {
            continue;
        }
        if wanted(only, "quickfix") {
            if let Some(f) = d
                .fix
                .as_ref()
                .filter(|f| f.applicability != Applicability::DisplayOnly)
            {
                let edits: Vec<&Edit> = f.edits.iter().collect();
                let unsafe_fix = f.applicability == Applicability::Unsafe;
                let title = match unsafe_fix {
                    true => format!("Fix {} (unsafe fix): {}", d.code, f.message),
                    false => format!("Fix {}: {}", d.code, f.message),
                };
                if let Some(edit) = workspace_edit(&m, &edits) {
                    actions.push(CodeAction {
                        title,
                        kind: Some(CodeActionKind::QUICKFIX),
                        diagnostics: Some(vec![diag.clone()]),
                        edit: Some(edit),
                        is_preferred: Some(!unsafe_fix),
                        ..Default::default()
                    });
                }
            }
            if let Some(edit) = ignore_edit(&result.file, d).and_then(|e| workspace_edit(&m, &[&e]))
            {
                actions.push(CodeAction {
                    title: format!("Ignore {} on this line", d.code),
                    kind: Some(CodeActionKind::QUICKFIX),
                    diagnostics: Some(vec![diag]),
                    edit: Some(edit),
                    ..Default::default()
                });
            }
        }
    }
    if wanted(only, FIX_ALL) {
        if let Some(edit) = fix_all(server, &m, result) {
            actions.push(CodeAction {
                title: "memlint: fix all auto-fixable problems".into(),
                kind: Some(CodeActionKind::from(FIX_ALL)),
                edit: Some(edit),
                ..Default::default()
            });
        }
    }
    serde_json::to_value(actions).unwrap_or_else(|_| json!([]))
}

/// The suppression comment for a diagnostic: `# memlint: ignore[CODE]` at the end of its line,
/// or the code added to a directive the line already has (see [`fix::suppression_edit`]).
/// `None` where comments cannot be written (JSON).
fn ignore_edit(file: &crate::source::SourceFile, d: &Diagnostic) -> Option<Edit> {
    let line = file.lines.line_of(d.range.start.min(file.text.len()));
    fix::suppression_edit(file, line, &[d.code])
}

/// Every fix at or above the threshold (safe, or unsafe too when `unsafe-fixes` is set). A file
/// is fixed as `--fix` fixes it (rounds until stable, the result checked), and the change sent as
/// one edit; a notebook gets one round of edits, each in its cell.
fn fix_all(server: &Server, m: &Mapper, result: &FileResult) -> Option<WorkspaceEdit> {
    let threshold = match server.options.unsafe_fixes {
        true => Applicability::Unsafe,
        false => Applicability::Safe,
    };
    if result.file.notebook.is_some() {
        let fixes: Vec<&[Edit]> = result
            .diagnostics
            .iter()
            .filter_map(|d| d.fix.as_ref())
            .filter(|f| f.applicability >= threshold)
            .map(|f| f.edits.as_slice())
            .collect();
        let (chosen, n) = select_edits(&result.file.text, &fixes);
        return (n > 0).then(|| workspace_edit(m, &chosen)).flatten();
    }
    let fixed = fix::fix_file(result, threshold)?;
    let old = result.file.text.as_str();
    let new = fixed.file.text.as_str();
    let mut prefix = old
        .bytes()
        .zip(new.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while !old.is_char_boundary(prefix) || !new.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let mut suffix = old[prefix..]
        .bytes()
        .rev()
        .zip(new[prefix..].bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    while !old.is_char_boundary(old.len() - suffix) || !new.is_char_boundary(new.len() - suffix) {
        suffix -= 1;
    }
    let edit = Edit::replace(prefix..old.len() - suffix, &new[prefix..new.len() - suffix]);
    workspace_edit(m, &[&edit])
}

pub fn hover(server: &Server, p: &HoverParams) -> Value {
    let at = &p.text_document_position_params;
    let uri = &at.text_document.uri;
    let Some(path) = server.docs.path_of(uri).map(Path::to_path_buf) else {
        return Value::Null;
    };
    let Some(result) = server.results.get(&path) else {
        return Value::Null;
    };
    let Some(m) = mapper(server, &path, result) else {
        return Value::Null;
    };
    let Some(offset) = m.offset(uri, at.position) else {
        return Value::Null;
    };
    let mut range = None;
    let mut pages: Vec<String> = Vec::new();
    let mut codes: Vec<&str> = Vec::new();
    for d in &result.diagnostics {
        let span = m.span(&d.range);
        if span.start > offset || offset > span.end || codes.contains(&d.code) {
            continue;
        }
        let Some((d_uri, r)) = m.range(&d.range) else {
            continue;
        };
        if &d_uri != uri {
            continue;
        }
        range.get_or_insert(r);
        codes.push(d.code);
        if let Some(page) = catalog::page(d.code) {
            pages.push(page_markdown(page));
        }
    }
    if pages.is_empty() {
        return Value::Null;
    }
    let hover = lsp_types::Hover {
        contents: lsp_types::HoverContents::Markup(lsp_types::MarkupContent {
            kind: lsp_types::MarkupKind::Markdown,
            value: pages.join("\n\n---\n\n"),
        }),
        range,
    };
    serde_json::to_value(hover).unwrap_or(Value::Null)
}

/// A rule's page as markdown: what it reports, why, and what its fix does.
fn page_markdown(page: &catalog::RulePage) -> String {
    format!(
        "**{}** `{}` ({})\n\n{}\n\n{}\n\n**Fix:** {}\n\n[{}]({})",
        page.code,
        page.name,
        page.severity.as_str(),
        page.summary,
        page.explanation.trim(),
        page.fix,
        "Rule page",
        catalog::url(&page.code),
    )
}
