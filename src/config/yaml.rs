//! YAML through saphyr-parser's event stream, built into nodes with an explicit stack. Aliases are
//! never expanded (they become unknowns), so alias bombs cost nothing. A repeated key keeps its
//! last value, where the first one stood, as PyYAML's `safe_load` builds the dict.

use super::{ConfigDoc, ConfigError, Key, Node, Repeated, Value, MAX_DEPTH};
use crate::source::LineIndex;
use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use std::collections::HashMap;

enum Open {
    List(usize, Vec<Node>),
    /// Start, entries, the key waiting for its value, and the entry each key name holds.
    Map(
        usize,
        Vec<(Key, Node)>,
        Option<Pending>,
        HashMap<String, usize>,
    ),
}

/// A key read, waiting for its value.
struct Pending {
    key: Key,
    /// A scalar key other than the merge key `<<`: a later key of the same name replaces it.
    unique: bool,
}

pub fn parse(text: &str) -> Result<ConfigDoc, ConfigError> {
    match parse_shifted(text, text, &[]) {
        Ok(doc) => Ok(doc),
        Err(first) => {
            // PyYAML (and so every Python tool) accepts a flow collection whose closing bracket
            // sits at the indentation of its key; saphyr does not. Indent such lines and retry,
            // mapping positions back to the original text.
            match relax_flow_indent(text) {
                Some((patched, shift)) => parse_shifted(&patched, text, &shift).map_err(|_| first),
                None => Err(first),
            }
        }
    }
}

/// Parse `text`, whose line `i` was indented by `shift[i]` extra spaces relative to `original`;
/// spans refer to `original`.
fn parse_shifted(text: &str, original: &str, shift: &[usize]) -> Result<ConfigDoc, ConfigError> {
    let lines = LineIndex::new(original);
    let offset = |line: usize, col: usize| -> usize {
        let line0 = line.saturating_sub(1);
        let col = col.saturating_sub(shift.get(line0).copied().unwrap_or(0));
        let start = lines.line_start(line0).min(original.len());
        original[start..]
            .char_indices()
            .nth(col)
            .map_or(original.len(), |(i, _)| start + i)
    };
    let span_of =
        |s: &Span| offset(s.start.line(), s.start.col())..offset(s.end.line(), s.end.col());
    let mut doc = ConfigDoc::default();
    let mut stack: Vec<Open> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| ConfigError {
            message: e.info().to_string(),
            offset: offset(e.marker().line(), e.marker().col()),
        })?;
        let finished = match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ConfigError {
                        message: "nesting is too deep".into(),
                        offset: span_of(&span).start,
                    });
                }
                let start = span_of(&span).start;
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::List(start, Vec::new())
                } else {
                    Open::Map(start, Vec::new(), None, HashMap::new())
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let end = span_of(&span).end;
                match stack.pop() {
                    Some(Open::List(start, items)) => Some(Node {
                        value: Value::List(items),
                        span: start..end.max(start),
                    }),
                    Some(Open::Map(start, entries, _, _)) => Some(Node {
                        value: Value::Map(entries),
                        span: start..end.max(start),
                    }),
                    None => None,
                }
            }
            Event::Scalar(text, style, _, _) => Some(Node {
                value: super::scalar(&text, style != ScalarStyle::Plain),
                span: span_of(&span),
            }),
            Event::Alias(_) => Some(Node {
                value: Value::Unknown("*alias".into()),
                span: span_of(&span),
            }),
            _ => None,
        };
        let Some(node) = finished else { continue };
        match stack.last_mut() {
            Some(Open::List(_, items)) => items.push(node),
            Some(Open::Map(_, entries, pending, seen)) => match pending.take() {
                Some(Pending { key, unique }) => {
                    match seen.get(&key.name).and_then(|&i| entries.get_mut(i)) {
                        Some(entry) if unique => {
                            doc.repeated.push(Repeated {
                                name: key.name.clone(),
                                shadowed: entry.0.span.clone(),
                                kept: key.span.clone(),
                            });
                            *entry = (key, node)
                        }
                        _ => {
                            if unique {
                                seen.insert(key.name.clone(), entries.len());
                            }
                            entries.push((key, node));
                        }
                    }
                }
                None => {
                    let text = node.scalar_text();
                    let unique = text.as_deref().is_some_and(|name| name != "<<");
                    *pending = Some(Pending {
                        key: Key {
                            name: text.unwrap_or_default(),
                            span: node.span,
                        },
                        unique,
                    });
                }
            },
            None => doc.roots.push(node),
        }
    }
    Ok(doc)
}

/// Indent the lines inside flow collections (`[ ... ]`, `{ ... }`) that are not indented more
/// than the line that opened the collection. `None` when nothing needed it.
fn relax_flow_indent(text: &str) -> Option<(String, Vec<usize>)> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut shift = Vec::new();
    let mut depth = 0usize;
    let mut opener_indent = 0usize;
    // Indentation of a line that started a block scalar (`key: |`): deeper lines are text.
    let mut block_scalar: Option<usize> = None;
    let mut quote: Option<char> = None;
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = line.trim();
        if let Some(b) = block_scalar {
            if body.is_empty() || indent > b {
                out.push_str(line);
                shift.push(0);
                continue;
            }
            block_scalar = None;
        }
        let mut pad = 0;
        if depth > 0 && !body.is_empty() && indent <= opener_indent {
            pad = opener_indent + 1 - indent;
            changed = true;
        }
        shift.push(pad);
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(line);
        let before = depth;
        (depth, quote) = flow_depth_after(body, depth, quote);
        if before == 0 && depth > 0 {
            opener_indent = indent;
        }
        if depth == 0 {
            let t = body.split(" #").next().unwrap_or("").trim_end();
            let last = t.rsplit([' ', ':']).next().unwrap_or("");
            if (t.ends_with('|') || t.ends_with('>') || t.ends_with("|-") || t.ends_with(">-"))
                && (t.contains(": ") || t.starts_with("- ") || last.len() <= 3)
                && !t.starts_with('#')
            {
                block_scalar = Some(indent);
            }
        }
    }
    changed.then_some((out, shift))
}

/// Bracket depth after one line, skipping quoted text (which may continue on the next line)
/// and comments.
fn flow_depth_after(
    line: &str,
    mut depth: usize,
    mut quote: Option<char>,
) -> (usize, Option<char>) {
    let mut prev = ' ';
    for c in line.chars() {
        match quote {
            Some(q) => {
                if c == q && !(q == '"' && prev == '\\') {
                    quote = None;
                }
            }
            None => match c {
                '#' if prev == ' ' || prev == '\t' => break,
                '\'' | '"' if depth > 0 || matches!(prev, ' ' | ':' | '[' | '{' | ',') => {
                    quote = Some(c)
                }
                '[' | '{' => depth += 1,
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = c;
    }
    // A quote only continues onto the next line inside a flow collection.
    (depth, if depth > 0 { quote } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_point_at_values() {
        let text = "train:\n  batch_size: 8\n  optimizer:\n    _component_: torch.optim.AdamW\n";
        let doc = parse(text).unwrap();
        let bs = doc.roots[0]
            .get("train")
            .unwrap()
            .get("batch_size")
            .unwrap();
        assert_eq!(bs.as_number(), Some(8.0));
        assert_eq!(&text[bs.span.clone()], "8");
    }

    #[test]
    fn dedented_closing_bracket_is_read_as_python_reads_it() {
        let text = "hooks:\n  args: [\n      '--ini',\n      '.bandit',\n  ]\nnext: 1\n";
        let doc = parse(text).unwrap();
        let args = doc.roots[0].get("hooks").unwrap().get("args").unwrap();
        assert!(matches!(&args.value, Value::List(items) if items.len() == 2));
        let next = doc.roots[0].get("next").unwrap();
        assert_eq!(&text[next.span.clone()], "1");
        let top = "cuda: [\n  \"0\",\n  \"0,1\"\n]\n";
        assert!(parse(top).is_ok());
        let multiline = "task:\n  command: [\n    'sh', '-c'\n  ]\n  arguments: ['deepspeed\n    train.py\n    --x [1]']\n  next: 2\n";
        let doc = parse(multiline).unwrap();
        let task = doc.roots[0].get("task").unwrap();
        assert_eq!(task.get("next").and_then(Node::as_number), Some(2.0));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_the_rest_is_read() {
        let text = "lr: 1\ntrain:\n  gas: 2\n  bs: 8\n  gas: 4\nlr: 3\nnext: 5\n";
        let doc = parse(text).unwrap();
        let root = &doc.roots[0];
        let Value::Map(top) = &root.value else {
            panic!("a map")
        };
        let names: Vec<&str> = top.iter().map(|(k, _)| k.name.as_str()).collect();
        assert_eq!(names, ["lr", "train", "next"]);
        let lr = root.get("lr").unwrap();
        assert_eq!(lr.as_number(), Some(3.0));
        assert_eq!(lr.span.start, text.find("3").unwrap());
        assert_eq!(top[0].1.span.start, lr.span.start);
        let key_at = text.rfind("lr").unwrap();
        assert_eq!(top[0].0.span.start, key_at);
        let train = root.get("train").unwrap();
        let gas = train.get("gas").unwrap();
        assert_eq!(gas.as_number(), Some(4.0));
        assert_eq!(&text[gas.span.clone()], "4");
        assert!(matches!(&train.value, Value::Map(e) if e.len() == 2));
        assert_eq!(root.get("next").and_then(Node::as_number), Some(5.0));
        let repeated: Vec<(&str, usize, usize)> = doc
            .repeated
            .iter()
            .map(|r| (r.name.as_str(), r.shadowed.start, r.kept.start))
            .collect();
        assert_eq!(
            repeated,
            [
                ("gas", text.find("gas").unwrap(), text.rfind("gas").unwrap()),
                ("lr", 0, key_at),
            ]
        );
    }

    #[test]
    fn a_repeated_map_is_replaced_whole_not_merged() {
        let text = "opt:\n  lr: 1\n  wd: 0\nopt:\n  lr: 2\n";
        let doc = parse(text).unwrap();
        let opt = doc.roots[0].get("opt").unwrap();
        assert_eq!(opt.get("lr").and_then(Node::as_number), Some(2.0));
        assert!(opt.get("wd").is_none());
        assert_eq!(opt.span.start, text.rfind("lr").unwrap());
        let flow = "{a: 1, b: {c: 1, c: 2}, a: 9}\n";
        let doc = parse(flow).unwrap();
        assert_eq!(doc.roots[0].get("a").and_then(Node::as_number), Some(9.0));
        let b = doc.roots[0].get("b").unwrap();
        assert_eq!(b.get("c").and_then(Node::as_number), Some(2.0));
    }

    #[test]
    fn merge_keys_are_never_replaced() {
        let text = "base: &b {x: 1}\nrun:\n  <<: *b\n  <<: *b\n  y: 2\n";
        let doc = parse(text).unwrap();
        let run = doc.roots[0].get("run").unwrap();
        assert!(matches!(&run.value, Value::Map(e) if e.len() == 3));
    }

    #[test]
    fn alias_bomb_is_not_expanded() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for i in 0..30 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("a{}", i - 1)
            };
            text.push_str(&format!("a{i}: &a{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let doc = parse(&text).unwrap();
        assert_eq!(doc.roots.len(), 1);
    }
}
