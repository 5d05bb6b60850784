//! Arithmetic that bash evaluates from plain words, outside `$(( ))`: `let "x = a - b"` and
//! `$(expr $a - $b)`. The words are split into tokens with their positions in the file and lowered
//! into the same linear form as `$(( ))`.

use super::super::{parse_number, MAX_EXPR_DEPTH};
use crate::expr::Lin;
use std::ops::Range;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Num(f64),
    /// A variable, with or without `$`/`${}`.
    Name(String),
    Op(char),
    Open,
    Close,
}

/// Tokens of an arithmetic string that starts at byte `base` of the file. `None` when the string
/// holds anything else (a comparison, a function, a quote).
pub fn tokenize(text: &str, base: usize) -> Option<Vec<(Tok, Range<usize>)>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        match c {
            b' ' | b'\t' => {
                i += 1;
                continue;
            }
            b'(' => {
                i += 1;
                out.push((Tok::Open, base + start..base + i));
            }
            b')' => {
                i += 1;
                out.push((Tok::Close, base + start..base + i));
            }
            b'+' | b'-' | b'*' | b'/' | b'%' => {
                i += 1;
                out.push((Tok::Op(c as char), base + start..base + i));
            }
            b'0'..=b'9' | b'.' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
                let v = parse_number(text.get(start..i)?)?;
                out.push((Tok::Num(v), base + start..base + i));
            }
            b'$' | b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let braced = text.get(i..)?.starts_with("${");
                i += if braced { 2 } else { usize::from(c == b'$') };
                let name_start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let name = text.get(name_start..i)?.to_string();
                if braced {
                    if bytes.get(i) != Some(&b'}') {
                        return None;
                    }
                    i += 1;
                }
                if name.is_empty() {
                    return None;
                }
                out.push((Tok::Name(name), base + start..base + i));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Lower tokens into the linear form; `name` resolves a variable (its value when known).
pub fn lower(
    toks: &[(Tok, Range<usize>)],
    src: &str,
    name: &dyn Fn(&str, Range<usize>) -> Lin,
) -> Option<Lin> {
    let mut p = Parser {
        toks,
        at: 0,
        src,
        name,
    };
    let lin = p.sum(0)?;
    (p.at == toks.len()).then_some(lin)
}

struct Parser<'a> {
    toks: &'a [(Tok, Range<usize>)],
    at: usize,
    src: &'a str,
    name: &'a dyn Fn(&str, Range<usize>) -> Lin,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(t, _)| t)
    }

    fn span_from(&self, start: usize) -> Range<usize> {
        let s = self.toks.get(start).map_or(0, |(_, r)| r.start);
        let e = self
            .toks
            .get(self.at.saturating_sub(1))
            .map_or(s, |(_, r)| r.end);
        s..e.max(s)
    }

    fn binary(&self, op: char, a: Lin, b: Lin, start: usize) -> Lin {
        let span = self.span_from(start);
        let text = self.src.get(span.clone()).unwrap_or("");
        Lin::binary(&op.to_string(), a, b, text, span)
    }

    fn sum(&mut self, depth: usize) -> Option<Lin> {
        let start = self.at;
        let mut lin = self.product(depth)?;
        while let Some(Tok::Op(op @ ('+' | '-'))) = self.peek().cloned() {
            self.at += 1;
            let rhs = self.product(depth)?;
            lin = self.binary(op, lin, rhs, start);
        }
        Some(lin)
    }

    fn product(&mut self, depth: usize) -> Option<Lin> {
        let start = self.at;
        let mut lin = self.unary(depth)?;
        while let Some(Tok::Op(op @ ('*' | '/' | '%'))) = self.peek().cloned() {
            self.at += 1;
            let rhs = self.unary(depth)?;
            lin = self.binary(op, lin, rhs, start);
        }
        Some(lin)
    }

    fn unary(&mut self, depth: usize) -> Option<Lin> {
        if depth > MAX_EXPR_DEPTH {
            return None;
        }
        match self.peek()?.clone() {
            Tok::Op('-') => {
                self.at += 1;
                Some(self.unary(depth + 1)?.negated())
            }
            Tok::Op('+') => {
                self.at += 1;
                self.unary(depth + 1)
            }
            Tok::Num(v) => {
                let span = self.toks.get(self.at)?.1.clone();
                self.at += 1;
                Some(Lin::constant(v, Some(span)))
            }
            Tok::Name(n) => {
                let span = self.toks.get(self.at)?.1.clone();
                self.at += 1;
                Some((self.name)(&n, span))
            }
            Tok::Open => {
                self.at += 1;
                let inner = self.sum(depth + 1)?;
                (self.peek() == Some(&Tok::Close)).then(|| self.at += 1)?;
                Some(inner)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn let_string_lowers_with_file_positions() {
        let src = "let \"free = gpu_gb - model_gb * 2\"";
        let expr_at = src.find("gpu_gb").unwrap_or(0);
        let toks = tokenize(&src[expr_at..src.len() - 1], expr_at).unwrap_or_default();
        let lin = lower(&toks, src, &|n, r| Lin::symbol(n, r)).unwrap_or_default();
        assert_eq!(lin.terms.len(), 2);
        assert_eq!(lin.terms[1].symbol, "model_gb");
        assert_eq!(lin.terms[1].coef, -2.0);
        assert_eq!(&src[lin.terms[1].symbol_span.clone()], "model_gb");
    }

    #[test]
    fn anything_else_is_not_arithmetic() {
        assert!(tokenize("a < b", 0).is_none());
        let toks = tokenize("(a + ", 0).unwrap_or_default();
        assert!(lower(&toks, "(a + ", &|n, r| Lin::symbol(n, r)).is_none());
    }
}
