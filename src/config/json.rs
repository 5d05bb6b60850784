//! A small JSON reader that keeps byte spans and bounds nesting. It reads what the tools that
//! consume these files read: DeepSpeed loads its config with hjson (comments and trailing commas
//! pass), and Python's `json` writes `Infinity` and `NaN` (read here as unknown numbers).
//! A repeated key keeps its last value, where the first one stood, as `json.load` builds the
//! dict: the HF Trainer and accelerate load a DeepSpeed config that way and hand DeepSpeed the
//! dict (DeepSpeed itself refuses repeated keys only in a file it opens by path).

use super::{ConfigDoc, ConfigError, Key, Node, Repeated, Value, MAX_DEPTH};
use std::collections::HashMap;

/// The document's one value.
#[cfg(test)]
pub fn parse(text: &str) -> Result<Node, ConfigError> {
    parse_doc(text).and_then(|mut doc| {
        doc.roots.pop().ok_or(ConfigError {
            message: "no JSON value".into(),
            offset: 0,
        })
    })
}

/// The document, with the keys written twice in one object.
pub fn parse_doc(text: &str) -> Result<ConfigDoc, ConfigError> {
    let mut p = Reader {
        s: text.as_bytes(),
        text,
        i: 0,
        repeated: Vec::new(),
    };
    p.ws();
    let node = p.value(0)?;
    p.ws();
    if p.i < p.s.len() {
        let line_start = p.i == 0 || p.s.get(p.i - 1) == Some(&b'\n');
        let next_value = matches!(p.s.get(p.i), Some(b'{' | b'['));
        return Err(p.err(if line_start && next_value {
            "a second JSON value: this looks like JSON Lines (one value per line), not a JSON document"
        } else {
            "unexpected text after the JSON value"
        }));
    }
    Ok(ConfigDoc {
        roots: vec![node],
        repeated: p.repeated,
    })
}

/// Whether [`parse_doc`] surely accepts `text`, found without building its nodes: strict JSON
/// (serde_json's grammar, a subset of this reader's) whose numbers are all finite (this reader
/// refuses `1e400`). `false` says nothing: the text may still parse here (comments, trailing
/// commas, `NaN`).
pub fn surely_parses(text: &str) -> bool {
    serde_json::from_str::<Strict>(text).is_ok()
}

/// The document with its root emptied, when [`surely_parses`] and the root is an object or an
/// array: what a file that holds no key anyone reads gives, found without its nodes.
pub fn skeleton(text: &str) -> Option<ConfigDoc> {
    if !surely_parses(text) {
        return None;
    }
    // Strict JSON: only these four bytes are whitespace around the value.
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let bytes = text.as_bytes();
    let start = bytes.iter().position(|b| !ws(b))?;
    let end = bytes.len() - bytes.iter().rev().position(|b| !ws(b))?;
    let value = match bytes[start] {
        b'{' => Value::Map(Vec::new()),
        b'[' => Value::List(Vec::new()),
        _ => return None,
    };
    Some(ConfigDoc {
        roots: vec![Node {
            value,
            span: start..end,
        }],
        repeated: Vec::new(),
    })
}

/// Any strict JSON value whose numbers are finite (see [`surely_parses`]).
struct Strict;

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Strict)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value with finite numbers")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Strict, E> {
        match v.is_finite() {
            true => Ok(Strict),
            false => Err(E::custom("a number out of range")),
        }
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, Strict>()?.is_some() {}
        Ok(Strict)
    }
}

struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    repeated: Vec<Repeated>,
}

impl Reader<'_> {
    fn err(&self, message: &str) -> ConfigError {
        ConfigError {
            message: message.to_string(),
            offset: self.i.min(self.s.len()),
        }
    }

    fn ws(&mut self) {
        while self.i < self.s.len() {
            match self.s[self.i] {
                b' ' | b'\t' | b'\n' | b'\r' => self.i += 1,
                // Comments are not JSON, but hjson (DeepSpeed) and tsconfig-style files use them.
                b'/' if self.s.get(self.i + 1) == Some(&b'/') => self.skip_line(),
                b'#' => self.skip_line(),
                b'/' if self.s.get(self.i + 1) == Some(&b'*') => {
                    self.i += 2;
                    while self.i < self.s.len()
                        && !(self.s[self.i] == b'*' && self.s.get(self.i + 1) == Some(&b'/'))
                    {
                        self.i += 1;
                    }
                    self.i = (self.i + 2).min(self.s.len());
                }
                _ => break,
            }
        }
    }

    fn skip_line(&mut self) {
        while self.i < self.s.len() && self.s[self.i] != b'\n' {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, ConfigError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting is too deep"));
        }
        let start = self.i;
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut entries: Vec<(Key, Node)> = Vec::new();
                // The entry each key name holds: a repeated key replaces it.
                let mut seen: HashMap<String, usize> = HashMap::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        // A trailing comma before the brace (hjson accepts it).
                        if self.s.get(self.i) == Some(&b'}') && !entries.is_empty() {
                            self.i += 1;
                            break;
                        }
                        let kstart = self.i;
                        let name = self.string()?;
                        let key = Key {
                            name,
                            span: kstart..self.i,
                        };
                        self.ws();
                        if self.s.get(self.i) != Some(&b':') {
                            return Err(self.err("expected ':' after an object key"));
                        }
                        self.i += 1;
                        self.ws();
                        let v = self.value(depth + 1)?;
                        match seen.get(&key.name).and_then(|&i| entries.get_mut(i)) {
                            Some(entry) => {
                                self.repeated.push(Repeated {
                                    name: key.name.clone(),
                                    shadowed: entry.0.span.clone(),
                                    kept: key.span.clone(),
                                });
                                *entry = (key, v)
                            }
                            None => {
                                seen.insert(key.name.clone(), entries.len());
                                entries.push((key, v));
                            }
                        }
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(self.err("expected ',' or '}' in an object")),
                        }
                    }
                }
                Ok(Node {
                    value: Value::Map(entries),
                    span: start..self.i,
                })
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        if self.s.get(self.i) == Some(&b']') && !items.is_empty() {
                            self.i += 1;
                            break;
                        }
                        items.push(self.value(depth + 1)?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(self.err("expected ',' or ']' in an array")),
                        }
                    }
                }
                Ok(Node {
                    value: Value::List(items),
                    span: start..self.i,
                })
            }
            Some(b'"') => {
                let s = self.string()?;
                Ok(Node {
                    value: super::scalar(&s, true),
                    span: start..self.i,
                })
            }
            Some(_) => {
                while self.i < self.s.len()
                    && !matches!(
                        self.s[self.i],
                        b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'
                    )
                {
                    self.i += 1;
                }
                let word = self.text.get(start..self.i).unwrap_or("");
                let value = match word {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    // Python's json writes these; a number, but not one to compute with.
                    "Infinity" | "-Infinity" | "NaN" => Value::Unknown(word.to_string()),
                    _ => match word.parse::<f64>() {
                        Ok(n) if n.is_finite() => Value::Number(n),
                        _ => {
                            self.i = start;
                            return Err(self.err("expected a JSON value"));
                        }
                    },
                };
                Ok(Node {
                    value,
                    span: start..self.i,
                })
            }
            None => Err(self.err("unexpected end of file")),
        }
    }

    fn string(&mut self) -> Result<String, ConfigError> {
        if self.s.get(self.i) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.i += 1;
        let mut out = String::new();
        let mut run = self.i;
        while self.i < self.s.len() {
            match self.s[self.i] {
                b'"' => {
                    out.push_str(self.text.get(run..self.i).unwrap_or(""));
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(self.text.get(run..self.i).unwrap_or(""));
                    let esc = self.s.get(self.i + 1).copied();
                    self.i += 2;
                    match esc {
                        Some(b'n') => out.push('\n'),
                        Some(b't') => out.push('\t'),
                        Some(b'u') => {
                            let hex = self.text.get(self.i..self.i + 4).unwrap_or("");
                            let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                            out.push(c.unwrap_or('\u{fffd}'));
                            self.i += 4;
                        }
                        Some(c) => out.push(c as char),
                        None => return Err(self.err("unterminated string")),
                    }
                    run = self.i;
                }
                _ => self.i += 1,
            }
        }
        Err(self.err("unterminated string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surely_parses_only_what_the_reader_accepts() {
        let texts = [
            "{\"a\": [1, 2.5, -3e5, true, null, \"\\u00e9\"]}",
            "[12345678901234567890123, -0.0e-400]",
            "[1e400]",
            "{\"a\": -1e309}",
            "{\"a\": 1,}",
            "// a comment\n{\"a\": 1}",
            "{\"a\": NaN}",
            "",
            "{\"a\": 1}\n{\"a\": 2}\n",
            "{\"a\": }",
        ];
        for text in texts {
            if surely_parses(text) {
                assert!(parse_doc(text).is_ok(), "{text}");
            }
        }
        assert!(surely_parses(texts[0]) && surely_parses(texts[1]));
        assert!(!surely_parses(texts[2]) && !surely_parses(texts[3]));
        let doc = skeleton(" {\"a\": [1, {\"b\": 2}]}\n").unwrap();
        assert_eq!(doc.roots.len(), 1);
        assert_eq!(doc.roots[0].span, 1..21);
        assert_eq!(
            doc.roots[0].span,
            parse(" {\"a\": [1, {\"b\": 2}]}\n").unwrap().span
        );
        assert!(matches!(&doc.roots[0].value, Value::Map(e) if e.is_empty()));
        assert!(skeleton("12").is_none() && skeleton("{\"a\": NaN}").is_none());
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        assert!(!surely_parses(&deep) && parse_doc(&deep).is_err());
    }

    #[test]
    fn spans_and_values() {
        let text = r#"{"train_batch_size": 32, "gradient_accumulation_steps": "auto"}"#;
        let node = parse(text).unwrap();
        let tbs = node.get("train_batch_size").unwrap();
        assert_eq!(tbs.as_number(), Some(32.0));
        assert_eq!(&text[tbs.span.clone()], "32");
        assert!(matches!(
            node.get("gradient_accumulation_steps").unwrap().value,
            Value::Unknown(_)
        ));
    }

    #[test]
    fn what_python_and_hjson_write_is_readable() {
        let text = "{\n  \"snr\": Infinity, \"low\": -Infinity, \"x\": NaN,\n  # a comment\n  /* block */ \"l\": [1, 2,],\n}\n";
        let node = parse(text).unwrap();
        assert!(matches!(node.get("snr").unwrap().value, Value::Unknown(_)));
        assert!(matches!(&node.get("l").unwrap().value, Value::List(items) if items.len() == 2));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_span() {
        let text = "{\"train_batch_size\": 32,\n \"zero_optimization\": {\"stage\": 1, \"stage\": 3},\n \"train_batch_size\": 64,\n \"steps_per_print\": 10}";
        let node = parse(text).unwrap();
        let Value::Map(entries) = &node.value else {
            panic!("an object")
        };
        let names: Vec<&str> = entries.iter().map(|(k, _)| k.name.as_str()).collect();
        assert_eq!(
            names,
            ["train_batch_size", "zero_optimization", "steps_per_print"]
        );
        let tbs = node.get("train_batch_size").unwrap();
        assert_eq!(tbs.as_number(), Some(64.0));
        assert_eq!(tbs.span.start, text.find("64").unwrap());
        assert_eq!(
            entries[0].0.span.start,
            text.rfind("\"train_batch_size\"").unwrap()
        );
        let stage = node.get("zero_optimization").unwrap().get("stage").unwrap();
        assert_eq!(stage.as_number(), Some(3.0));
        assert_eq!(&text[stage.span.clone()], "3");
        assert_eq!(
            node.get("steps_per_print").and_then(Node::as_number),
            Some(10.0)
        );
        let doc = parse_doc(text).unwrap();
        let repeated: Vec<(&str, &str, &str)> = doc
            .repeated
            .iter()
            .map(|r| {
                (
                    r.name.as_str(),
                    &text[r.shadowed.clone()],
                    &text[r.kept.clone()],
                )
            })
            .collect();
        assert_eq!(
            repeated,
            [
                ("stage", "\"stage\"", "\"stage\""),
                (
                    "train_batch_size",
                    "\"train_batch_size\"",
                    "\"train_batch_size\""
                )
            ]
        );
        assert_eq!(
            doc.repeated[0].shadowed.start,
            text.find("\"stage\"").unwrap()
        );
        assert_eq!(doc.repeated[1].shadowed.start, 1);
        let replaced = parse("{\"opt\": {\"lr\": 1, \"wd\": 0}, \"opt\": {\"lr\": 2}}").unwrap();
        let opt = replaced.get("opt").unwrap();
        assert_eq!(opt.get("lr").and_then(Node::as_number), Some(2.0));
        assert!(opt.get("wd").is_none());
    }

    #[test]
    fn placeholders_and_json_lines_are_errors() {
        assert!(parse("{\"micro\": BATCH_SIZE_PER_GPU}").is_err());
        let lines = parse("{\"a\": 1}\n{\"a\": 2}\n").unwrap_err();
        assert!(lines.message.contains("JSON Lines"), "{}", lines.message);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = "[".repeat(100_000);
        assert!(parse(&text).is_err());
    }
}
