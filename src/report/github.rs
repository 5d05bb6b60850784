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
        let (line, end_line) = e.file.annotation_lines(e.diagnostic.range.clone());
        let mut props = format!("file={},line={line}", property(&e.file.display));
        if line == end_line && e.start.row == e.end.row {
            props.push_str(&format!(
                ",col={},endLine={end_line},endColumn={}",
                e.start.column, e.end.column
            ));
        } else {
            props.push_str(&format!(",endLine={end_line}"));
        }
        props.push_str(&format!(
            ",title={}",
            property(&format!("memlint ({})", e.diagnostic.code))
        ));
        let mut message = e.diagnostic.message.clone();
        if let Some(h) = &e.diagnostic.help {
            message.push_str("\nhelp: ");
            message.push_str(h);
        }
        out.push_str(&format!("::{level} {props}::{}\n", data(&message)));
    }
    out
}
