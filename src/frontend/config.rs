//! Configs: what a YAML, JSON or TOML document (read by [`crate::config`]) says about training.

use super::flag_evidence;
use crate::config::{ConfigDoc, Node, Value};
use crate::facts::{Evidence, Framework, Mention, OptimizerMention, Precision, Table, TableEntry};

/// What a config says about training: optimizer, precision, sharding, adapters.
pub fn evidence(doc: &ConfigDoc) -> Evidence {
    evidence_of(doc.roots.iter())
}

/// What these config trees say about training.
pub fn evidence_of<'a>(roots: impl Iterator<Item = &'a Node>) -> Evidence {
    let mut ev = Evidence::default();
    let mut stack: Vec<(&str, &Node)> = roots.map(|r| ("", r)).collect();
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
                                centered: false,
                                name_only: node.get("params").is_none(),
                            },
                            span: node.span.clone(),
                        });
                    }
                }
                if k == "zero_optimization" {
                    super::regime::zero_section(node, &mut ev);
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
                    // `dtype: bf16` (torchtune) trains in that dtype; `fp32` keeps fp32 weights
                    // (`torch_dtype` is read as a flag is).
                    if key == "dtype" {
                        if let Some(value) = super::loaded_dtype(&text.to_ascii_lowercase()) {
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

/// Mappings keyed by dtype or optimizer names with numbers (`bytes_per_param: {fp32: 4, bf16:
/// 2}`, a JSON file of optimizer state bytes): tables MEM002 and MEM003 judge, as a dict in
/// Python is. Flags written as numbers (`bf16: 1`, `fp16: 0`) are no table: three rows at least,
/// one of them above 1.
pub fn tables(doc: &ConfigDoc) -> Vec<Table> {
    let k = crate::knowledge::knowledge();
    let known = |key: &str| k.dtype(key).is_some() || k.optimizer(key).is_some();
    let mut found = Vec::new();
    let mut stack: Vec<(Option<&str>, &Node, usize)> =
        doc.roots.iter().map(|r| (None, r, 0)).collect();
    while let Some((name, node, depth)) = stack.pop() {
        match &node.value {
            Value::Map(entries) if depth < crate::config::MAX_DEPTH => {
                let rows: Vec<TableEntry> = entries
                    .iter()
                    .filter_map(|(key, v)| {
                        // The number first: most keys hold none, and the name lookup costs more.
                        let value = v.as_number()?;
                        known(&key.name).then(|| TableEntry {
                            key: key.name.clone(),
                            value,
                            value_span: v.span.clone(),
                        })
                    })
                    .collect();
                if rows.len() >= 3 && rows.iter().any(|r| r.value > 1.0) {
                    found.push(Table {
                        name: name.map(str::to_string),
                        entries: rows,
                        arms: false,
                        returned: false,
                    });
                }
                stack.extend(
                    entries
                        .iter()
                        .map(|(key, v)| (Some(key.name.as_str()), v, depth + 1)),
                );
            }
            Value::List(items) if depth < crate::config::MAX_DEPTH => {
                stack.extend(items.iter().map(|v| (name, v, depth + 1)));
            }
            _ => {}
        }
    }
    found
}
