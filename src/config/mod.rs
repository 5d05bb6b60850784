//! One config model with spans over YAML, JSON and TOML, so a diagnostic can point at the exact key.
//! `"auto"`, interpolations (`${...}`) and YAML aliases are unknowns, never numbers.

mod json;
mod toml;
mod yaml;

use crate::source::Language;
use std::ops::Range;

/// Deeper documents are refused: no reader recurses without bound.
pub const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    /// `"auto"`, `${interpolation}`, a YAML alias: known to exist, value unknown.
    Unknown(String),
    List(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub span: Range<usize>,
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The first value of `key` at any depth (a section's `{"training": {"key": 8}}`).
    pub fn find(&self, key: &str) -> Option<&Node> {
        fn within<'n>(node: &'n Node, key: &str, depth: usize) -> Option<&'n Node> {
            match &node.value {
                _ if depth > MAX_DEPTH => None,
                Value::Map(entries) => entries
                    .iter()
                    .find(|(k, _)| k.name == key)
                    .map(|(_, v)| v)
                    .or_else(|| entries.iter().find_map(|(_, v)| within(v, key, depth + 1))),
                Value::List(items) => items.iter().find_map(|v| within(v, key, depth + 1)),
                _ => None,
            }
        }
        within(self, key, 0)
    }

    pub fn as_number(&self) -> Option<f64> {
        match self.value {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A scalar as text (for flags and evidence).
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::String(s) | Value::Unknown(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// A parsed config file: one root per document (YAML may hold several).
#[derive(Debug, Clone, Default)]
pub struct ConfigDoc {
    pub roots: Vec<Node>,
    /// Keys written twice in one mapping, in the order they were read.
    pub repeated: Vec<Repeated>,
}

/// A key written again in the same mapping. The reader keeps the last value, as `json.load` and
/// PyYAML's `safe_load` build the dict; the earlier value is discarded.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeated {
    pub name: String,
    /// The earlier key, whose value is discarded.
    pub shadowed: Range<usize>,
    /// The key written after it, whose value is kept (unless written again).
    pub kept: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub message: String,
    pub offset: usize,
}

/// Whether [`parse`] surely accepts `text`, found fast and without spans (JSON only; `false`
/// says nothing).
pub fn surely_parses(language: Language, text: &str) -> bool {
    language == Language::Json && json::surely_parses(text)
}

/// The document with its root emptied, found without reading it whole (JSON only, see
/// [`json::skeleton`]): for a config that holds no key a reader looks at.
pub fn skeleton(language: Language, text: &str) -> Option<ConfigDoc> {
    match language {
        Language::Json => json::skeleton(text),
        _ => None,
    }
}

pub fn parse(language: Language, text: &str) -> Result<ConfigDoc, ConfigError> {
    match language {
        // An empty file holds no config (and is not worth a warning).
        Language::Json if text.trim().is_empty() => Ok(ConfigDoc::default()),
        Language::Json => json::parse_doc(text),
        Language::Yaml => yaml::parse(text),
        // TOML forbids a repeated key: the reader refuses it, as Python's tomllib does.
        Language::Toml => toml::parse(text).map(|root| ConfigDoc {
            roots: vec![root],
            repeated: Vec::new(),
        }),
        _ => Ok(ConfigDoc::default()),
    }
}

/// Turn a scalar written in a config into a value: `"auto"` and interpolations are unknowns.
pub fn scalar(text: &str, quoted: bool) -> Value {
    let t = text.trim();
    if t == "auto" || t.contains("${") || t.contains("{{") || t.starts_with('$') {
        return Value::Unknown(t.to_string());
    }
    if quoted {
        return Value::String(text.to_string());
    }
    match t {
        "true" | "True" | "TRUE" | "yes" | "on" => return Value::Bool(true),
        "false" | "False" | "FALSE" | "no" | "off" => return Value::Bool(false),
        "null" | "~" | "" | "None" => return Value::Null,
        _ => {}
    }
    match parse_number(t) {
        Some(n)
            if t.chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+' || c == '.') =>
        {
            Value::Number(n)
        }
        _ => Value::String(text.to_string()),
    }
}

/// Parse a numeric literal as Python, shell and configs write them (`1_000`, `1e9`, `0x10`).
pub fn parse_number(text: &str) -> Option<f64> {
    let t = text.replace('_', "");
    let t = t.trim_end_matches(['j', 'J', 'l', 'L']);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}
