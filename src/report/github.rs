//! GitHub workflow commands (annotations). GitHub shows only ten per step, so a plain summary
//! follows them.

use super::Entry;
use crate::diagnostic::Severity;

fn data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

pub fn render_github(entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        let level = match e.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "notice",
        };
        // Lines of the file on disk: a notebook's annotation lands on the `.ipynb` line.
        let range = &e.diagnostic.range;
        let start = e.file.disk_position(range.start, false);
        let end = e.file.disk_position(range.end, true);
        let mut props = format!("file={},line={}", property(&e.file.display), start.row);
        if start.row == end.row {
            props.push_str(&format!(
                ",col={},endLine={},endColumn={}",
                start.column, end.row, end.column
            ));
        } else {
            props.push_str(&format!(",endLine={}", end.row));
        }
        props.push_str(&format!(
            ",title={}",
            property(&format!("memlint ({})", e.diagnostic.code))
        ));
        let mut message = match e.cell {
            Some(cell) => format!("cell {cell}, line {}: ", e.start.row),
            None => String::new(),
        };
        message.push_str(&e.diagnostic.message);
        if let Some(h) = &e.diagnostic.help {
            message.push_str("\nhelp: ");
            message.push_str(h);
        }
        out.push_str(&format!("::{level} {props}::{}\n", data(&message)));
    }
    out
}
