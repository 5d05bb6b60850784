//! Applying fixes: edits sorted, overlapping ones skipped, repeated until stable; the result must
//! still parse and must not raise what was fixed again. Files are written atomically (a temporary
//! file in the same folder, then a rename) with their permissions kept; a file that does not parse
//! is never rewritten.

use crate::diagnostic::{apply_edits, select_edits, splice, Applicability, Diagnostic, Edit};
use crate::lint::{analyse, check, FileResult};
use crate::source::SourceFile;
use std::io::Write;
use std::path::Path;

/// Rounds of fixing before giving up on convergence.
const MAX_ROUNDS: usize = 10;

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
