//! The rule catalogue as data: one TOML page per rule under `rules/`, the single source for
//! `memlint rule`, `memlint rules`, SARIF rule metadata and the documentation.

use crate::diagnostic::Severity;
use crate::knowledge::PAGES;
use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulePage {
    pub code: String,
    pub name: String,
    pub severity: Severity,
    pub default_enabled: bool,
    pub summary: String,
    pub fix: String,
    pub explanation: String,
    pub references: Vec<String>,
    pub example: Example,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    pub path: String,
    pub bad: String,
    pub good: String,
    #[serde(default)]
    pub context: Vec<ContextFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextFile {
    pub path: String,
    pub content: String,
}

/// Every page, parsed once; a page that does not parse is reported by the test suite.
pub fn pages() -> &'static [RulePage] {
    static P: OnceLock<Vec<RulePage>> = OnceLock::new();
    P.get_or_init(|| {
        PAGES
            .iter()
            .filter_map(|(_, text)| toml::from_str(text).ok())
            .collect()
    })
}

pub fn page(code: &str) -> Option<&'static RulePage> {
    pages().iter().find(|p| p.code == code)
}

/// Parse errors of the embedded pages, for the test suite.
pub fn page_errors() -> Vec<String> {
    PAGES
        .iter()
        .filter_map(|(name, text)| {
            toml::from_str::<RulePage>(text)
                .err()
                .map(|e| format!("rules/{name}.toml: {e}"))
        })
        .collect()
}

pub const DOCS_URL: &str = "https://github.com/memlint/memlint/blob/main/rules";

pub fn url(code: &str) -> String {
    format!("{DOCS_URL}/{code}.toml")
}
