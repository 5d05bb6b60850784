//! Costly runs of comment lines, blanked before the parse.

use std::ops::Range;

/// A run of comment lines costs tree-sitter-python its length at every line (it looks ahead for
/// the next line's indentation), so a run this large in lines x bytes is parsed as blank lines.
const COMMENT_RUN_COST: usize = 1 << 20;

/// The text with the comments of costly comment runs replaced by spaces (same offsets, still
/// UTF-8), and the blanked comments' ranges; `None` when no run is costly.
pub(super) fn blank_long_comment_runs(text: &str) -> Option<(String, Vec<Range<usize>>)> {
    let bytes = text.as_bytes();
    let mut costly: Vec<Range<usize>> = Vec::new();
    let mut run: Vec<Range<usize>> = Vec::new();
    let mut run_bytes = 0;
    let mut close = |run: &mut Vec<Range<usize>>, run_bytes: &mut usize| {
        if run.len() * *run_bytes >= COMMENT_RUN_COST {
            costly.append(run);
        }
        run.clear();
        *run_bytes = 0;
    };
    let mut start = 0;
    while start < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |e| start + e);
        let line = &bytes[start..end];
        let indent = line
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\x0c' | b'\r'));
        match indent.map(|i| line[i]) {
            Some(b'#') => {
                run.push(start + indent.unwrap_or(0)..end);
                run_bytes += line.len() + 1;
            }
            // Blank lines neither end a run nor count in it.
            None => {}
            Some(_) => close(&mut run, &mut run_bytes),
        }
        start = end + 1;
    }
    close(&mut run, &mut run_bytes);
    if costly.is_empty() {
        return None;
    }
    let mut blanked = bytes.to_vec();
    for r in &costly {
        blanked[r.clone()].fill(b' ');
    }
    String::from_utf8(blanked).ok().map(|t| (t, costly))
}
