//! Statement-level edits shared by the fixes that move or delete a call.

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

fn newline(file: &SourceFile) -> &'static str {
    if file.text.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
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

/// Move a statement to the line after `anchor` (a statement), at the anchor's indentation.
pub fn move_after(
    file: &SourceFile,
    stmt: &Range<usize>,
    anchor: &Range<usize>,
) -> Option<Vec<Edit>> {
    let (lines, moved) = own_lines(file, stmt)?;
    let (anchor_lines, _) = own_lines(file, anchor)?;
    let nl = newline(file);
    // Insert before the anchor's line break so the edit never touches the deleted lines.
    let at = anchor_lines.end - usize::from(file.text[..anchor_lines.end].ends_with('\n'));
    let at = at - usize::from(nl == "\r\n" && file.text[..at].ends_with('\r'));
    let indent = file.indent_at(anchor.start);
    Some(vec![
        Edit::replace(lines, ""),
        Edit::insert(at, format!("{nl}{indent}{moved}")),
    ])
}

/// Move a statement to the line before `anchor`, at the anchor's indentation.
pub fn move_before(
    file: &SourceFile,
    stmt: &Range<usize>,
    anchor: &Range<usize>,
) -> Option<Vec<Edit>> {
    let (lines, moved) = own_lines(file, stmt)?;
    let (anchor_lines, _) = own_lines(file, anchor)?;
    let indent = file.indent_at(anchor.start);
    Some(vec![
        Edit::replace(lines, ""),
        Edit::insert(
            anchor_lines.start,
            format!("{indent}{moved}{}", newline(file)),
        ),
    ])
}

/// Insert a new statement on the line before `anchor`, at its indentation.
pub fn insert_before(
    file: &SourceFile,
    anchor: &Range<usize>,
    statement: &str,
) -> Option<Vec<Edit>> {
    let (anchor_lines, _) = own_lines(file, anchor)?;
    let indent = file.indent_at(anchor.start);
    Some(vec![Edit::insert(
        anchor_lines.start,
        format!("{indent}{statement}{}", newline(file)),
    )])
}
