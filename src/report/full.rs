//! The human format: each diagnostic once, as miette renders it: `train.py:5:31: MEM001 (url)`,
//! the message, the source lines with the span labelled, the help and the fix. Reports are
//! rendered through a line-indexed source, so each lookup is a binary search instead of a rescan
//! of the file (miette's own `str` source is O(file) per call).

use super::Entry;
use crate::diagnostic::Severity;
use crate::rules::catalog;
use crate::source::LineIndex;
use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError,
    MietteSpanContents, SourceCode, SourceSpan, SpanContents,
};
use std::fmt;

/// A source with a precomputed line index. Reads a window of whole lines around the span and lets
/// miette's own logic work inside it, so the output is identical to miette's.
struct Indexed<'a> {
    name: &'a str,
    text: &'a str,
    lines: &'a LineIndex,
}

impl SourceCode for Indexed<'_> {
    fn read_span<'b>(
        &'b self,
        span: &SourceSpan,
        before: usize,
        after: usize,
    ) -> Result<Box<dyn SpanContents<'b> + 'b>, MietteError> {
        let len = self.text.len();
        let start = span.offset();
        let end = start + span.len();
        if end > len {
            return Err(MietteError::OutOfBounds);
        }
        let first = self.lines.line_of(start);
        let last = self.lines.line_of(end.saturating_sub(1).max(start));
        let wline = first.saturating_sub(before);
        let wstart = self.lines.line_start(wline).min(len);
        let wend = self
            .lines
            .line_start(last.saturating_add(after).saturating_add(2))
            .min(len);
        let window: &'b [u8] = &self.text.as_bytes()[wstart..wend];
        let inner = window.read_span(
            &SourceSpan::new((start - wstart).into(), span.len()),
            before,
            after,
        )?;
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.to_string(),
            inner.data(),
            SourceSpan::new((inner.span().offset() + wstart).into(), inner.span().len()),
            inner.line() + wline,
            inner.column(),
            inner.line_count() + wline,
        )))
    }
}

struct Report<'a> {
    entry: &'a Entry<'a>,
    /// `train.py:5:31: MEM001`: miette's header line, above the message.
    header: String,
    source: Indexed<'a>,
    /// The diagnostic's span in `source` (a notebook shows its cell, whose offsets start at 0).
    span: std::ops::Range<usize>,
    url: String,
    /// Whether the source lines are short enough to be shown (see [`LONGEST_SHOWN_LINE`]).
    snippet: bool,
}

/// miette formats a label's column as a padding width, which panics past 65,535 columns; a line
/// that long cannot be read on a terminal anyway. Diagnostics on longer lines (or next to one) are
/// shown without the source snippet.
const LONGEST_SHOWN_LINE: usize = 1_000;

fn snippet_fits(e: &Entry) -> bool {
    let file = &e.file;
    let len = file.text.len();
    let r = &e.diagnostic.range;
    let first = file.lines.line_of(r.start.min(len));
    let last = file.lines.line_of(r.end.min(len));
    let count = file.lines.line_count();
    (first.saturating_sub(1)..=last.saturating_add(1).min(count.saturating_sub(1))).all(|line| {
        let start = file.lines.line_start(line).min(len);
        file.line_end(line).saturating_sub(start) <= LONGEST_SHOWN_LINE
    })
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entry.diagnostic.message)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entry.diagnostic.message)
    }
}

impl std::error::Error for Report<'_> {}

impl Diagnostic for Report<'_> {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(&self.header))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.entry.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
            Severity::Info => miette::Severity::Advice,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        let d = self.entry.diagnostic;
        match (&d.help, &d.fix) {
            (Some(h), Some(fix)) => Some(Box::new(format!(
                "{h}\nfix ({}): {}",
                fix.applicability.as_str(),
                fix.message
            ))),
            (Some(h), None) => Some(Box::new(h.clone())),
            (None, Some(fix)) => Some(Box::new(format!(
                "fix ({}): {}",
                fix.applicability.as_str(),
                fix.message
            ))),
            (None, None) => None,
        }
    }

    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(&self.url))
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.snippet.then_some(&self.source as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if !self.snippet {
            return None;
        }
        let r = &self.span;
        let len = r.end.saturating_sub(r.start);
        Some(Box::new(std::iter::once(LabeledSpan::new_with_span(
            Some(self.entry.name.to_string()),
            SourceSpan::new(r.start.into(), len),
        ))))
    }
}

pub fn render_full(entries: &[Entry], color: bool, width: usize) -> String {
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(width)
        .with_links(false)
        .with_context_lines(1);
    let mut out = String::new();
    for e in entries {
        let range = e.diagnostic.range.clone();
        let cell = e
            .file
            .notebook
            .as_ref()
            .and_then(|nb| nb.cell_at(range.start));
        let (text, lines, span, name) = match cell {
            // A notebook shows the cell as written (magics unmasked), numbered from its first row.
            Some(c) => {
                let len = c.source.len();
                let start = (range.start - c.start).min(len);
                let end = range.end.saturating_sub(c.start).clamp(start, len);
                let name = format!("{}:cell {}", e.file.display, c.number);
                (c.source.as_str(), &c.lines, start..end, name)
            }
            None => (
                e.file.text.as_str(),
                &e.file.lines,
                range,
                e.file.display.clone(),
            ),
        };
        // The location and code head the report; miette prints the message once, below them.
        let report = Report {
            entry: e,
            header: format!("{}: {}", e.location(), e.diagnostic.code),
            source: Indexed {
                name: &name,
                text,
                lines,
            },
            span,
            url: catalog::url(e.diagnostic.code),
            snippet: snippet_fits(e),
        };
        if handler.render_report(&mut out, &report).is_err() {
            out.push_str("  (could not render the source snippet)\n");
        }
        out.push('\n');
    }
    out
}
