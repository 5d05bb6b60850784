//! Statement-level edits shared by the fixes that delete a statement.

use crate::diagnostic::Edit;
use crate::source::SourceFile;
use std::ops::Range;

/// A statement that stands alone on its lines: the whole lines (to delete) and the statement's
/// text with any trailing comment (to re-insert). `None` when something else shares the lines.
fn own_lines<'a>(file: &'a SourceFile, stmt: &Range<usize>) -> Option<(Range<usize>, &'a str)> {
    let text = file.text.as_str();
    let start = text.get(..stmt.start)?.rfind('\n').map_or(0, |i| i + 1);
    let end = text
        .get(stmt.end..)?
        .find('\n')
        .map_or(text.len(), |i| stmt.end + i);
    let before = text.get(start..stmt.start)?;
    let after = text.get(stmt.end..end)?.trim();
    if !before.trim().is_empty() || !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    let moved = text.get(stmt.start..end)?.trim_end();
    Some((start..(end + 1).min(text.len()), moved))
}

/// Delete a statement's lines; a statement that is its block's only one becomes `pass`.
pub fn delete_statement(file: &SourceFile, stmt: &Range<usize>) -> Option<Vec<Edit>> {
    let (lines, _) = own_lines(file, stmt)?;
    if sole_statement(file, &lines) {
        return Some(vec![Edit::replace(stmt.clone(), "pass")]);
    }
    Some(vec![Edit::replace(lines, "")])
}

/// The lines hold the only statement of a block: the code line before opens the block (ends with
/// `:`) and the code line after is not indented deeper than that opener.
fn sole_statement(file: &SourceFile, lines: &Range<usize>) -> bool {
    let code = |l: &&str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    };
    let indent = |l: &str| l.len() - l.trim_start().len();
    let before = file.text[..lines.start].lines().rev().find(code);
    let after = file.text[lines.end..].lines().find(code);
    match before {
        Some(opener)
            if opener
                .split('#')
                .next()
                .unwrap_or("")
                .trim_end()
                .ends_with(':') =>
        {
            after.is_none_or(|a| indent(a) <= indent(opener))
        }
        _ => false,
    }
}
