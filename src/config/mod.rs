//! One config model with spans over YAML, JSON and TOML, so a diagnostic can point at the exact key.
//! `"auto"`, interpolations (`${...}`) and YAML aliases are unknowns, never numbers.

mod json;
pub mod python;
mod toml;
mod yaml;

use crate::facts::{Evidence, Framework, Mention, OptimizerMention, Precision};
use crate::frontend::flag_evidence;
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub message: String,
    pub offset: usize,
}

pub fn parse(language: Language, text: &str) -> Result<ConfigDoc, ConfigError> {
    match language {
        // An empty file holds no config (and is not worth a warning).
        Language::Json if text.trim().is_empty() => Ok(ConfigDoc::default()),
        Language::Json => json::parse(text).map(|root| ConfigDoc { roots: vec![root] }),
        Language::Yaml => yaml::parse(text),
        Language::Toml => toml::parse(text).map(|root| ConfigDoc { roots: vec![root] }),
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
    match crate::frontend::parse_number(t) {
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

/// What a config says about training: optimizer, precision, sharding, adapters.
pub fn evidence(doc: &ConfigDoc) -> Evidence {
    let mut ev = Evidence::default();
    let mut stack: Vec<(&str, &Node)> = doc.roots.iter().map(|r| ("", r)).collect();
    while let Some((key, node)) = stack.pop() {
        match &node.value {
            Value::Map(entries) => {
                let k = key.to_ascii_lowercase();
                if k == "optimizer" || k == "optim" {
                    let name = ["type", "name", "_component_", "_target_", "class_path"]
                        .iter()
                        .find_map(|f| node.get(f).and_then(Node::as_str));
                    if let Some(name) = name {
                        ev.optimizers.push(Mention {
                            value: OptimizerMention {
                                name: name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase(),
                                momentum: node
                                    .get("params")
                                    .unwrap_or(node)
                                    .get("momentum")
                                    .and_then(Node::as_number),
                                amsgrad: false,
                                beta1: false,
                            },
                            span: node.span.clone(),
                        });
                    }
                }
                if k == "zero_optimization" {
                    let stage = node.get("stage").and_then(Node::as_number).unwrap_or(0.0);
                    if stage >= 1.0 {
                        ev.sharding.push(node.span.clone());
                    }
                    ev.frameworks.push(Mention {
                        value: Framework::DeepSpeed,
                        span: node.span.clone(),
                    });
                }
                if (k == "bf16" || k == "fp16")
                    && node
                        .get("enabled")
                        .is_some_and(|e| e.value == Value::Bool(true))
                {
                    ev.precision.push(Mention {
                        value: Precision::Amp,
                        span: node.span.clone(),
                    });
                }
                for (k, v) in entries {
                    stack.push((&k.name, v));
                }
            }
            Value::List(items) => stack.extend(items.iter().map(|i| (key, i))),
            _ => {
                if let Some(text) = node.scalar_text() {
                    flag_evidence(key, &text, node.span.clone(), &mut ev);
                    // `dtype: bf16` (torchtune) trains in that dtype; `fp32` keeps fp32 weights.
                    if matches!(key, "dtype" | "torch_dtype") {
                        let t = text.to_ascii_lowercase();
                        let value = match t.trim_start_matches("torch.") {
                            "bf16" | "bfloat16" | "fp16" | "float16" | "half" => {
                                Some(Precision::Pure16)
                            }
                            "fp32" | "float32" | "float" => Some(Precision::Fp32),
                            _ => None,
                        };
                        if let Some(value) = value {
                            ev.precision.push(Mention {
                                value,
                                span: node.span.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    ev
}
