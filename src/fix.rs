//! Applying fixes: edits sorted, overlapping ones skipped, repeated until stable; the result must
//! still parse and must not raise what was fixed again. Files are written atomically (a temporary
//! file in the same folder, then a rename) with their permissions kept; a file that does not parse
//! is never rewritten.

use crate::diagnostic::{apply_edits, select_edits, splice, Applicability, Diagnostic, Edit};
use crate::lint::{analyse, check, FileResult};
use crate::source::SourceFile;
use std::collections::{BTreeMap, BTreeSet};
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

/// The edit that silences `codes` on the 0-based `line`: the codes added to a
/// `# memlint: ignore[...]` directive the line already has, else the directive at the end of
/// the line; a line continued with a backslash gets it alone on the line above (a comment there
/// would end the continuation). `None` where comments cannot be written (JSON).
pub fn suppression_edit(file: &SourceFile, line: usize, codes: &[&str]) -> Option<Edit> {
    if !file.language.has_hash_comments() || codes.is_empty() {
        return None;
    }
    let list = codes.join(", ");
    let start = file.lines.line_start(line).min(file.text.len());
    let end = file.line_end(line);
    let text = file.line_text(line);
    let lower = text.to_ascii_lowercase();
    if let Some(i) = lower.find("memlint: ignore[") {
        let open = i + "memlint: ignore[".len();
        let close = open + text[open..].find(']')?;
        let sep = if text[open..close].trim().is_empty() {
            ""
        } else {
            ", "
        };
        return Some(Edit::insert(start + close, format!("{sep}{list}")));
    }
    if text.trim_end().ends_with('\\') {
        let indent = file.indent_at(start);
        return Some(Edit::insert(
            start,
            format!("{indent}# memlint: ignore[{list}]\n"),
        ));
    }
    Some(Edit::insert(end, format!("  # memlint: ignore[{list}]")))
}

/// A linted file with a directive added for every diagnostic it reports (`--add-noqa`).
pub struct Directed {
    pub file: SourceFile,
    /// Lines that got a directive or codes added to one.
    pub lines: usize,
}

/// Add `# memlint: ignore[CODE]` for each diagnostic of `result`, merged into the directive its
/// line already has. The new text must parse as the old one did, and the file read again must
/// report none of the diagnostics: otherwise (a line that ends inside a string, a heredoc) it is
/// not rewritten, and the reason is given. `Ok(None)`: nothing to add.
pub fn add_directives(result: &FileResult) -> Result<Option<Directed>, String> {
    let file = &result.file;
    if result.diagnostics.is_empty() {
        return Ok(None);
    }
    if result.syntax_error {
        return Err("does not parse; not rewritten".into());
    }
    if !file.language.has_hash_comments() {
        return Err(format!(
            "{} has no comments to hold a directive: use `per-file-ignores`",
            file.language.name().to_uppercase()
        ));
    }
    let mut by_line: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
    for d in &result.diagnostics {
        let line = file.lines.line_of(d.range.start.min(file.text.len()));
        by_line.entry(line).or_default().insert(d.code);
    }
    let edits: Vec<Edit> = by_line
        .iter()
        .filter_map(|(line, codes)| {
            let codes: Vec<&str> = codes.iter().copied().collect();
            suppression_edit(file, *line, &codes)
        })
        .collect();
    if edits.len() != by_line.len() {
        return Err("a line cannot hold a directive; not rewritten".into());
    }
    let groups: Vec<&[Edit]> = edits.iter().map(std::slice::from_ref).collect();
    let (chosen, n) = select_edits(&file.text, &groups);
    if n != edits.len() {
        return Err("the directives overlap; not rewritten".into());
    }
    let text = splice(&file.text, &chosen);
    let candidate =
        rewrite(file, &chosen, text).ok_or("the directives cannot be written into the file")?;
    let facts = analyse(&candidate).map_err(|e| format!("does not read back: {e}"))?;
    if facts.syntax_error {
        return Err("a directive would break the syntax; not rewritten".into());
    }
    let left = check(&candidate, &facts, &result.training, &result.settings);
    let targeted: BTreeSet<&str> = result.diagnostics.iter().map(|d| d.code).collect();
    if left.iter().any(|d| targeted.contains(d.code)) {
        return Err(
            "a directive would not silence its diagnostic (the line ends inside a string?); not rewritten"
                .into(),
        );
    }
    Ok(Some(Directed {
        file: candidate,
        lines: by_line.len(),
    }))
}
