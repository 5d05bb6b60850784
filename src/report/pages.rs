//! The rule catalogue as `memlint rule CODE` and `memlint rules` print it: text or JSON.

use crate::rules::catalog::{self, RulePage};

/// How the rule pages are printed.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DocFormat {
    Text,
    Json,
}

/// One rule's page (`memlint rule CODE`).
pub fn render_rule_page(page: &RulePage, format: DocFormat) -> String {
    match format {
        DocFormat::Json => {
            let v = serde_json::json!({
                "code": page.code, "name": page.name, "severity": page.severity.as_str(),
                "summary": page.summary, "fix": page.fix, "default_enabled": page.default_enabled,
                "explanation": page.explanation, "references": page.references,
                "example": {"path": page.example.path, "bad": page.example.bad, "good": page.example.good},
                "url": catalog::url(&page.code),
            });
            format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        DocFormat::Text => {
            let mut s = format!(
                "# {} ({})\n\n{}\n\nSeverity: {}. Fix: {}.{}\n\n{}\n",
                page.name,
                page.code,
                page.summary,
                page.severity.as_str(),
                page.fix,
                if page.default_enabled {
                    ""
                } else {
                    " Off unless selected."
                },
                page.explanation.trim()
            );
            s.push_str(&format!(
                "\n## Example ({})\n\nFlagged:\n\n{}\n\nCorrect:\n\n{}\n",
                page.example.path,
                indent(&page.example.bad),
                indent(&page.example.good)
            ));
            s.push_str("\n## References\n\n");
            for r in &page.references {
                s.push_str(&format!("- {r}\n"));
            }
            s
        }
    }
}

fn indent(code: &str) -> String {
    code.trim_end()
        .lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The list of rules (`memlint rules`).
pub fn render_rule_list(pages: &[&RulePage], format: DocFormat) -> String {
    match format {
        DocFormat::Json => {
            let v: Vec<_> = pages
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "code": p.code, "name": p.name, "severity": p.severity.as_str(),
                        "summary": p.summary, "fix": p.fix, "default_enabled": p.default_enabled,
                        "url": catalog::url(&p.code),
                    })
                })
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        DocFormat::Text => pages
            .iter()
            .map(|p| {
                format!(
                    "{:<7} {:<32} {:<8} {}{}\n",
                    p.code,
                    p.name,
                    p.severity.as_str(),
                    p.summary,
                    if p.default_enabled {
                        ""
                    } else {
                        " (off by default)"
                    }
                )
            })
            .collect(),
    }
}
