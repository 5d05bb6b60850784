//! Configs written as Python: dict literals (`ds_config = {...}`), dataclass field defaults and
//! `argparse` defaults, lowered into the same config model as YAML/JSON/TOML. Only literals are
//! values; a name, a call or arithmetic is an unknown.

use super::parse_number;
use crate::config::{scalar, Key, Node, Value, MAX_DEPTH};
use crate::facts::{Facts, InlineConfig, InlineKind};
use crate::frontend::fields::{PyField, PyKind};
use tree_sitter::Node as TsNode;

/// Words a batch key holds (`per_device_train_batch_size`, `grad_accum_steps`).
pub const BATCH_KEY_PARTS: &[&str] = &["batch_size", "gradient_accumulation", "grad_accum"];
/// Batch keys that are whole names: Lightning's, and the DeepSpeed section the batch rules read.
pub const BATCH_KEY_NAMES: &[&str] = &["accumulate_grad_batches", "zero_optimization"];

/// Keys that make a dict, a class or a set of options worth keeping: batch sizes and the
/// DeepSpeed sections the batch rules read.
pub fn is_batch_key(key: &str) -> bool {
    let k = key
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_");
    BATCH_KEY_PARTS.iter().any(|p| k.contains(p)) || BATCH_KEY_NAMES.contains(&k.as_str())
}

fn text<'a>(n: TsNode, src: &'a str) -> &'a str {
    src.get(n.byte_range()).unwrap_or("")
}

/// A Python literal as a config value; anything else is an unknown with its text.
pub fn literal(n: TsNode, src: &str, depth: usize) -> Node {
    let span = n.byte_range();
    let t = text(n, src);
    let value = if depth > MAX_DEPTH {
        Value::Unknown(String::new())
    } else {
        match n.ty() {
            "integer" | "float" => match parse_number(t) {
                Some(v) => Value::Number(v),
                None => Value::Unknown(t.to_string()),
            },
            "unary_operator" if t.starts_with('-') => {
                match n.field("argument").map(|a| literal(a, src, depth + 1)) {
                    Some(Node {
                        value: Value::Number(v),
                        ..
                    }) => Value::Number(-v),
                    _ => Value::Unknown(t.to_string()),
                }
            }
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "none" => Value::Null,
            "string" => match string_value(n, src) {
                Some(s) => scalar(&s, true),
                None => Value::Unknown(t.to_string()),
            },
            // `dict(global_batch_size=1024, ...)`: its keywords are its keys.
            "call" if n.field("function").map(|f| text(f, src)) == Some("dict") => {
                let mut entries = Vec::new();
                let args = n.field("arguments");
                let mut c = n.walk();
                let keywords: Vec<TsNode> = match args {
                    Some(a) => a.named_children(&mut c).collect(),
                    None => Vec::new(),
                };
                for kw in keywords {
                    let (Some(k), Some(v)) = (kw.field("name"), kw.field("value")) else {
                        continue;
                    };
                    let key = Key {
                        name: text(k, src).to_string(),
                        span: k.byte_range(),
                    };
                    entries.push((key, literal(v, src, depth + 1)));
                }
                Value::Map(entries)
            }
            "dictionary" => {
                let mut entries = Vec::new();
                let mut c = n.walk();
                for pair in n.named_children(&mut c) {
                    if pair.ty() != "pair" {
                        continue;
                    }
                    let (Some(k), Some(v)) = (pair.field("key"), pair.field("value")) else {
                        continue;
                    };
                    let Some(name) = (k.ty() == "string").then(|| string_value(k, src)).flatten()
                    else {
                        continue;
                    };
                    entries.push((
                        Key {
                            name,
                            span: k.byte_range(),
                        },
                        literal(v, src, depth + 1),
                    ));
                }
                Value::Map(entries)
            }
            "list" | "tuple" => {
                let mut c = n.walk();
                let items = n
                    .named_children(&mut c)
                    .filter(|i| i.ty() != "comment")
                    .map(|i| literal(i, src, depth + 1))
                    .collect();
                Value::List(items)
            }
            "parenthesized_expression" => match n.named_child(0) {
                Some(inner) => return literal(inner, src, depth + 1),
                None => Value::Unknown(t.to_string()),
            },
            _ => Value::Unknown(t.to_string()),
        }
    };
    Node { value, span }
}

/// The text of a plain string literal (no f-string interpolation, no implicit concatenation).
fn string_value(n: TsNode, src: &str) -> Option<String> {
    let mut c = n.walk();
    let mut out = String::new();
    for part in n.children(&mut c) {
        match part.ty() {
            "string_start" => {
                let p = text(part, src).to_ascii_lowercase();
                if p.contains('f') {
                    return None;
                }
            }
            "string_content" => out.push_str(text(part, src)),
            "string_end" => {}
            _ => return None,
        }
    }
    Some(out)
}

/// A dict literal given as a DeepSpeed config keyword (`deepspeed.initialize(config={...})`,
/// `config_params=`), kept when it holds batch keys.
pub fn keyword_dict(n: TsNode, parent: Option<TsNode>, src: &str, facts: &mut Facts) {
    // The walk hands the parent over: asking the node would walk down from the root.
    let Some(parent) = parent else { return };
    let keyword = parent.field("name").map(|k| text(k, src));
    if parent.ty() != "keyword_argument" || !matches!(keyword, Some("config" | "config_params")) {
        return;
    }
    let mut c = n.walk();
    if n.named_children(&mut c)
        .any(|p| p.ty() == "dictionary_splat")
    {
        return;
    }
    let root = literal(n, src, 0);
    if has_batch_key(&root, 0) {
        facts.inline_configs.push(InlineConfig {
            kind: InlineKind::Dict { name: None },
            root,
            via: Vec::new(),
        });
    }
}

/// A dict assigned to a name (a literal, or `dict(key=value, ...)`), kept when it holds batch
/// keys and the file never changes it afterwards (`cfg["train_batch_size"] = ...` would make its
/// literals stale). The walk hands the parent over: asking the node would walk down from the
/// root.
pub fn dict(n: TsNode, parent: Option<TsNode>, src: &str, facts: &mut Facts) {
    let Some(parent) = parent else { return };
    if parent.ty() != "assignment" || parent.field("right") != Some(n) {
        return;
    }
    if n.ty() == "call" && n.field("function").map(|f| text(f, src)) != Some("dict") {
        return;
    }
    let Some(target) = parent.field("left") else {
        return;
    };
    if !matches!(target.ty(), "identifier" | "attribute") {
        return;
    }
    let mut c = n.walk();
    let entries = match n.ty() {
        "call" => n.field("arguments"),
        _ => Some(n),
    };
    if entries.is_none_or(|e| {
        e.named_children(&mut c)
            .any(|p| matches!(p.ty(), "dictionary_splat" | "list_splat"))
    }) {
        return;
    }
    let root = literal(n, src, 0);
    if !has_batch_key(&root, 0) {
        return;
    }
    let name = text(target, src).to_string();
    let after = src.get(n.end_byte()..).unwrap_or("");
    let changed = [format!("{name}.update("), format!("{name}.setdefault(")]
        .iter()
        .any(|p| after.contains(p.as_str()))
        || item_assigned(after, &name);
    if changed {
        return;
    }
    facts.inline_configs.push(InlineConfig {
        kind: InlineKind::Dict { name: Some(name) },
        root,
        via: Vec::new(),
    });
}

/// `name[...] = ...` (or `+=`, ...) in `text`: an item of `name` is assigned; reading one
/// (`name["lr"]`, `name[k] == v`) is not.
fn item_assigned(text: &str, name: &str) -> bool {
    let open = format!("{name}[");
    text.match_indices(&open).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            return false;
        }
        let rest = &text[at + open.len()..];
        let Some(close) = rest.find(']') else {
            return false;
        };
        let after = rest[close + 1..].trim_start_matches([' ', '\t']);
        let op = after.trim_start_matches(['+', '-', '*', '/', '%']);
        op.starts_with('=') && !op.starts_with("==")
    })
}

fn has_batch_key(node: &Node, depth: usize) -> bool {
    if depth > 4 {
        return false;
    }
    match &node.value {
        Value::Map(entries) => entries
            .iter()
            .any(|(k, v)| is_batch_key(&k.name) || has_batch_key(v, depth + 1)),
        _ => false,
    }
}

/// The field defaults of a `@dataclass` (or pydantic / settings) class with batch fields:
/// `micro_batch_size: int = 8`, `gradient_accumulation_steps: int = field(default=4)`.
pub fn class_defaults(class: TsNode, src: &str, facts: &mut Facts) {
    let decorated = class
        .parent()
        .filter(|p| p.ty() == "decorated_definition")
        .is_some_and(|p| {
            let mut c = p.walk();
            let found = p
                .children(&mut c)
                .filter(|d| d.ty() == "decorator")
                .any(|d| {
                    let t = text(d, src);
                    t.contains("dataclass") || t.contains("define") || t.contains("attr.s")
                });
            found
        });
    let bases = class
        .field("superclasses")
        .map(|b| text(b, src))
        .unwrap_or("");
    let settings = ["BaseModel", "BaseSettings", "Config", "Arguments", "Args"]
        .iter()
        .any(|b| bases.contains(b));
    if !decorated && !settings {
        return;
    }
    let Some(body) = class.field("body") else {
        return;
    };
    let mut entries = Vec::new();
    let mut c = body.walk();
    for stmt in body.named_children(&mut c) {
        if stmt.ty() != "expression_statement" {
            continue;
        }
        let Some(a) = stmt.named_child(0).filter(|a| a.ty() == "assignment") else {
            continue;
        };
        let (Some(left), Some(right)) = (a.field("left"), a.field("right")) else {
            continue;
        };
        if left.ty() != "identifier" {
            continue;
        }
        let value = field_default(right, src).unwrap_or(right);
        entries.push((
            Key {
                name: text(left, src).to_string(),
                span: left.byte_range(),
            },
            literal(value, src, 0),
        ));
    }
    // A batch config, or a GPT's shape (`GPTConfig`: `memlint estimate` reads its vocabulary).
    if !entries
        .iter()
        .any(|(k, _)| is_batch_key(&k.name) || k.name == "n_embd")
    {
        return;
    }
    let name = class
        .field("name")
        .map(|n| text(n, src).to_string())
        .unwrap_or_default();
    facts.inline_configs.push(InlineConfig {
        kind: InlineKind::Dataclass { name },
        root: Node {
            value: Value::Map(entries),
            span: class.byte_range(),
        },
        via: Vec::new(),
    });
}

/// `field(default=8)` → `8`.
fn field_default<'t>(n: TsNode<'t>, src: &str) -> Option<TsNode<'t>> {
    if n.ty() != "call" {
        return None;
    }
    let f = n.field("function").map(|f| text(f, src))?;
    if !matches!(f.rsplit('.').next(), Some("field" | "Field")) {
        return None;
    }
    let args = n.field("arguments")?;
    let mut c = args.walk();
    let found = args.named_children(&mut c).find_map(|kw| {
        (kw.ty() == "keyword_argument" && kw.field("name").map(|k| text(k, src)) == Some("default"))
            .then(|| kw.field("value"))
            .flatten()
    });
    found
}

/// `parser.add_argument("-m", "--micro-batch-size", type=int, default=8)`: one entry of the
/// file's argparse defaults, keyed by the long option name without dashes.
pub fn argparse_default(call: TsNode, src: &str, facts: &mut Facts) {
    let Some(args) = call.field("arguments") else {
        return;
    };
    let mut c = args.walk();
    let mut flag = None;
    let mut default = None;
    for a in args.named_children(&mut c) {
        match a.ty() {
            "string" => {
                if let Some(s) = string_value(a, src).filter(|s| s.starts_with("--")) {
                    flag.get_or_insert((s, a.byte_range()));
                }
            }
            "keyword_argument" if a.field("name").map(|n| text(n, src)) == Some("default") => {
                default = a.field("value");
            }
            _ => {}
        }
    }
    let (Some((flag, flag_span)), Some(default)) = (flag, default) else {
        return;
    };
    if !is_batch_key(&flag) {
        return;
    }
    let key = Key {
        name: flag.trim_start_matches('-').replace('-', "_"),
        span: flag_span,
    };
    let value = literal(default, src, 0);
    let existing = facts
        .inline_configs
        .iter_mut()
        .find(|c| c.kind == InlineKind::Argparse);
    match existing {
        Some(cfg) => {
            if let Value::Map(entries) = &mut cfg.root.value {
                entries.push((key, value));
            }
        }
        None => facts.inline_configs.push(InlineConfig {
            kind: InlineKind::Argparse,
            root: Node {
                span: value.span.clone(),
                value: Value::Map(vec![(key, value)]),
            },
            via: Vec::new(),
        }),
    }
}
