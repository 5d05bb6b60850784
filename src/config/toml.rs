//! TOML through the `toml` crate's span-keeping document parser.

use super::{ConfigError, Key, Node, Value};
use ::toml::de::{DeTable, DeValue};
use ::toml::Spanned;

pub fn parse(text: &str) -> Result<Node, ConfigError> {
    let table = DeTable::parse(text).map_err(|e| ConfigError {
        message: e.message().to_string(),
        offset: e.span().map_or(0, |s| s.start),
    })?;
    let span = table.span();
    Ok(Node {
        value: map(table.into_inner()),
        span,
    })
}

fn map(table: DeTable<'_>) -> Value {
    Value::Map(
        table
            .into_iter()
            .map(|(k, v)| {
                (
                    Key {
                        span: k.span(),
                        name: k.into_inner().into_owned(),
                    },
                    node(v),
                )
            })
            .collect(),
    )
}

fn node(v: Spanned<DeValue<'_>>) -> Node {
    let span = v.span();
    let value = match v.into_inner() {
        DeValue::String(s) => super::scalar(&s, true),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map(|n| Value::Number(n as f64))
            .unwrap_or(Value::Unknown(i.as_str().to_string())),
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .map(Value::Number)
            .unwrap_or(Value::Unknown(f.as_str().to_string())),
        DeValue::Boolean(b) => Value::Bool(b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(a) => Value::List(a.into_iter().map(node).collect()),
        DeValue::Table(t) => map(t),
    };
    Node { value, span }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_invalid_toml() {
        for text in [
            "lr = 1\nlr = 2\n",
            "[train]\nbatch = 8\nbatch = 16\n",
            "[train]\nbatch = 8\n[train]\ngas = 2\n",
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.contains("duplicate"), "{text}: {}", e.message);
        }
    }

    #[test]
    fn spans_point_at_values() {
        let text = "[train]\nbatch = 8\n";
        let root = parse(text).unwrap();
        let batch = root.get("train").and_then(|t| t.get("batch")).unwrap();
        assert_eq!(batch.as_number(), Some(8.0));
        assert_eq!(&text[batch.span.clone()], "8");
    }
}
