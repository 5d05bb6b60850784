//! YAML through saphyr-parser's event stream, built into nodes with an explicit stack. Aliases are
//! never expanded (they become unknowns), so alias bombs cost nothing.

use super::{ConfigDoc, ConfigError, Key, Node, Value, MAX_DEPTH};
use crate::source::LineIndex;
use saphyr_parser::{Event, Parser, ScalarStyle, Span};

enum Open {
    List(usize, Vec<Node>),
    Map(usize, Vec<(Key, Node)>, Option<Key>),
}

pub fn parse(text: &str) -> Result<ConfigDoc, ConfigError> {
    let lines = LineIndex::new(text);
    let offset = |line: usize, col: usize| -> usize {
        let start = lines.line_start(line.saturating_sub(1)).min(text.len());
        text[start..]
            .char_indices()
            .nth(col)
            .map_or(text.len(), |(i, _)| start + i)
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
                    Open::Map(start, Vec::new(), None)
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
                    Some(Open::Map(start, entries, _)) => Some(Node {
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
            Some(Open::Map(_, entries, pending)) => match pending.take() {
                Some(key) => entries.push((key, node)),
                None => {
                    let name = node.scalar_text().unwrap_or_default();
                    *pending = Some(Key {
                        name,
                        span: node.span,
                    });
                }
            },
            None => doc.roots.push(node),
        }
    }
    Ok(doc)
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
