//! `--statistics`: one line per code with its count, as ruff (after flake8) prints them: most
//! frequent first, codes in order among equal counts; `[*]` marks a code whose every diagnostic
//! `--fix` would fix, when any code has one.

use super::{applicable, Entry};
use crate::diagnostic::Applicability;
use serde::Serialize;

#[derive(Serialize)]
struct Statistic<'a> {
    code: &'a str,
    name: &'a str,
    count: usize,
    fixable: bool,
}

fn statistics<'a>(entries: &'a [Entry], threshold: Applicability) -> Vec<Statistic<'a>> {
    let mut out: Vec<Statistic> = Vec::new();
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.diagnostic.code);
    for e in sorted {
        let fixable = applicable(e.diagnostic, threshold);
        match out.last_mut() {
            Some(s) if s.code == e.diagnostic.code => {
                s.count += 1;
                s.fixable &= fixable;
            }
            _ => out.push(Statistic {
                code: e.diagnostic.code,
                name: e.name,
                count: 1,
                fixable,
            }),
        }
    }
    // Stable: equal counts keep the codes' order.
    out.sort_by_key(|s| std::cmp::Reverse(s.count));
    out
}

/// The text table: `count<TAB>code<TAB>[*] name`.
pub fn render_statistics(entries: &[Entry], threshold: Applicability) -> String {
    let stats = statistics(entries, threshold);
    let count_width = stats
        .iter()
        .map(|s| s.count.to_string().len())
        .max()
        .unwrap_or(1);
    let code_width = stats.iter().map(|s| s.code.len()).max().unwrap_or(0);
    let any_fixable = stats.iter().any(|s| s.fixable);
    let mut out = String::new();
    for s in &stats {
        let mark = match (any_fixable, s.fixable) {
            (false, _) => "",
            (true, true) => "[*] ",
            (true, false) => "[ ] ",
        };
        out.push_str(&format!(
            "{:>count_width$}\t{:<code_width$}\t{mark}{}\n",
            s.count, s.code, s.name
        ));
    }
    out
}

/// The statistics as a JSON array of `{code, name, count, fixable}`.
pub fn render_statistics_json(entries: &[Entry], threshold: Applicability) -> String {
    let mut s = serde_json::to_string_pretty(&statistics(entries, threshold))
        .unwrap_or_else(|_| "[]".into());
    s.push('\n');
    s
}
