//! Applying fixes: edits sorted, overlapping ones skipped, repeated until stable; the result must
//! still parse and must not raise what was fixed again. Files are written atomically (a temporary
//! file in the same folder, then a rename) with their permissions kept; a file that does not parse
//! is never rewritten.

use crate::diagnostic::{Applicability, Diagnostic, Edit};
use crate::lint::{analyse, check, FileResult};
use crate::source::SourceFile;
use std::io::Write;
use std::path::Path;

/// Rounds of fixing before giving up on convergence.
const MAX_ROUNDS: usize = 10;

/// Apply non-overlapping edits to `text` (sorted by position; an edit overlapping an earlier one
/// is skipped). Returns the new text and how many fixes were applied in full.
pub fn apply_edits(text: &str, fixes: &[&[Edit]]) -> (String, usize) {
    let (chosen, applied) = select_edits(text, fixes);
    (splice(text, &chosen), applied)
}

/// The edits of the fixes that apply together (whole fixes, first come first served), sorted.
fn select_edits<'a>(text: &str, fixes: &[&'a [Edit]]) -> (Vec<&'a Edit>, usize) {
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
fn splice(text: &str, edits: &[&Edit]) -> String {
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

/// The outcome of fixing one file.
pub struct Fixed {
    /// The new text of the file on disk (the `.ipynb` JSON for a notebook).
    pub new_text: String,
    /// The fixed file, as analysed for the diagnostics that remain.
    pub file: SourceFile,
    pub applied: usize,
    /// Diagnostics left after the fixes.
    pub remaining: Vec<Diagnostic>,
}

/// Fix one linted file in memory. `None` when nothing applies or the file may not be rewritten.
pub fn fix_file(result: &FileResult, threshold: Applicability) -> Option<Fixed> {
    if result.syntax_error {
        return None;
    }
    let mut file: Option<SourceFile> = None;
    let mut diagnostics = result.diagnostics.clone();
    let mut applied = 0;
    for _ in 0..MAX_ROUNDS {
        let current = file.as_ref().unwrap_or(&result.file);
        let fixes: Vec<&[Edit]> = diagnostics
            .iter()
            .filter_map(|d| d.fix.as_ref())
            .filter(|f| {
                f.applicability >= threshold && f.applicability != Applicability::DisplayOnly
            })
            .map(|f| f.edits.as_slice())
            .collect();
        if fixes.is_empty() {
            break;
        }
        let (chosen, n) = select_edits(&current.text, &fixes);
        let text = splice(&current.text, &chosen);
        if n == 0 || text == current.text {
            break;
        }
        let candidate = rewrite(current, &chosen, text)?;
        // The fixed file must parse as well as the original did.
        let facts = analyse(&candidate).ok()?;
        if facts.syntax_error {
            return None;
        }
        let next = check(&candidate, &facts, &result.training, &result.settings);
        applied += n;
        file = Some(candidate);
        diagnostics = next;
    }
    let file = file.filter(|_| applied > 0)?;
    Some(Fixed {
        new_text: file.disk_text().to_string(),
        file,
        applied,
        remaining: diagnostics,
    })
}

/// The file after `edits`, whose result on the analysed text is `text`. A notebook gets the edits
/// in the JSON strings of its cells and is read again; it must give exactly `text` back, or the
/// fix is not written.
fn rewrite(file: &SourceFile, edits: &[&Edit], text: String) -> Option<SourceFile> {
    let (path, display) = (file.path.clone(), file.display.clone());
    if file.notebook.is_none() {
        return Some(SourceFile::new(path, display, file.language, text));
    }
    let owned: Vec<Edit> = edits.iter().map(|e| (*e).clone()).collect();
    let raw_edits = file.disk_edits(&owned)?;
    let (raw, n) = apply_edits(file.disk_text(), &[&raw_edits]);
    if n != 1 && !raw_edits.is_empty() {
        return None;
    }
    let reread = SourceFile::from_notebook(path, display, raw).ok()??;
    (reread.text == text).then_some(reread)
}

/// Replace a file's contents atomically, keeping its permissions.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let perms = std::fs::metadata(path)?.permissions();
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    std::fs::set_permissions(tmp.path(), perms)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A unified diff of one file's fix, as `--diff` prints it.
pub fn unified_diff(display: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{display}"), &format!("b/{display}"))
        .to_string()
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
