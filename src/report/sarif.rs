//! SARIF 2.1.0 for GitHub code scanning: rule metadata from the catalogue, results with
//! repository-relative URIs and regions (columns in Unicode code points), and fixes.

use super::Entry;
use crate::diagnostic::Severity;
use crate::rules::catalog;
use serde_json::{json, Value};

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

pub fn render_sarif(entries: &[Entry]) -> String {
    let codes = crate::rules::implemented_codes();
    let rules: Vec<Value> = codes
        .iter()
        .filter_map(|c| catalog::page(c))
        .map(|p| {
            json!({
                "id": p.code,
                "name": p.name,
                "shortDescription": {"text": p.summary},
                "fullDescription": {"text": p.explanation},
                "help": {"text": p.explanation, "markdown": p.explanation},
                "helpUri": catalog::url(&p.code),
                "defaultConfiguration": {"level": level(p.severity)},
                "properties": {"tags": [p.code.trim_end_matches(char::is_numeric)]},
            })
        })
        .collect();
    let results: Vec<Value> = entries
        .iter()
        .map(|e| {
            let d = e.diagnostic;
            // Regions of the file on disk: for a notebook, the `.ipynb` line of the cell's source.
            let start = e.file.disk_position(d.range.start, false);
            let end = e.file.disk_position(d.range.end, true);
            let uri = e.file.display.clone();
            let region = json!({
                "startLine": start.row, "startColumn": start.column,
                "endLine": end.row, "endColumn": end.column,
            });
            let mut result = json!({
                "ruleId": d.code,
                "ruleIndex": codes.iter().position(|c| *c == d.code),
                "level": level(e.severity),
                "message": {"text": match &d.help {
                    Some(h) => format!("{}\nhelp: {h}", d.message),
                    None => d.message.clone(),
                }},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"},
                        "region": region,
                    }
                }],
            });
            // A notebook's fix is given as its edits of the `.ipynb` JSON (escaped in place).
            let disk_edits = d.fix.as_ref().and_then(|f| e.file.disk_edits(&f.edits));
            if let (Some(fix), Some(edits)) = (&d.fix, disk_edits) {
                let replacements: Vec<Value> = edits
                    .iter()
                    .map(|ed| {
                        let s = e.file.disk_position_at(ed.range.start);
                        let t = e.file.disk_position_at(ed.range.end);
                        json!({
                            "deletedRegion": {"startLine": s.row, "startColumn": s.column, "endLine": t.row, "endColumn": t.column},
                            "insertedContent": {"text": ed.content},
                        })
                    })
                    .collect();
                result["fixes"] = json!([{
                    "description": {"text": fix.message},
                    "artifactChanges": [{
                        "artifactLocation": {"uri": e.file.display, "uriBaseId": "%SRCROOT%"},
                        "replacements": replacements,
                    }],
                }]);
            }
            result
        })
        .collect();
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "memlint",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/memlint/memlint",
                "rules": rules,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
