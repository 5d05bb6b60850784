//! Arithmetic that bash evaluates from plain words, outside `$(( ))`: `let "x = a - b"`,
//! `$(expr $a - $b)` and the string piped into `bc`. The words are split into tokens with their
//! positions in the file and built into the same program nodes as `$(( ))`.

use super::super::{parse_number, MAX_EXPR_DEPTH};
use crate::expr::program::{Id, Node as V, Program};
use std::ops::Range;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok<'s> {
    Num(f64),
    /// A variable, with or without `$`/`${}`.
    Name(&'s str),
    Op(char),
    Open,
    Close,
}

/// Tokens of an arithmetic string that starts at byte `base` of the file. `None` when the string
/// holds anything else (a comparison, a function, a quote). `bc` reads `^` as a power (bash
/// reads it as a bitwise or).
pub fn tokenize(text: &str, base: usize, bc: bool) -> Option<Vec<(Tok<'_>, Range<usize>)>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' => {
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
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' if c != b'^' || bc => {
                i += 1;
                // `**` is bash's power, `^` bc's.
                let op = if c == b'*' && bytes.get(i) == Some(&b'*') {
                    i += 1;
                    '^'
                } else {
                    c as char
                };
                out.push((Tok::Op(op), base + start..base + i));
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
                let name = text.get(name_start..i)?;
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

/// Build tokens into program nodes of `scope`; `name` makes the node of a variable read.
pub fn lower<'s>(
    toks: &[(Tok<'s>, Range<usize>)],
    program: &mut Program<'s>,
    scope: usize,
    name: &dyn Fn(&mut Program<'s>, &'s str, Range<usize>) -> Id,
) -> Option<Id> {
    let mut p = Parser {
        toks,
        at: 0,
        program,
        scope,
        name,
    };
    let id = p.sum(0)?;
    (p.at == toks.len()).then_some(id)
}

struct Parser<'a, 's> {
    toks: &'a [(Tok<'s>, Range<usize>)],
    at: usize,
    program: &'a mut Program<'s>,
    scope: usize,
    name: &'a dyn Fn(&mut Program<'s>, &'s str, Range<usize>) -> Id,
}

impl<'s> Parser<'_, 's> {
    fn peek(&self) -> Option<&Tok<'s>> {
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

    fn binary(&mut self, op: char, a: Id, b: Id, start: usize) -> Id {
        let span = self.span_from(start);
        let op = match op {
            '+' => "+",
            '-' => "-",
            '*' => "*",
            '/' => "/",
            '^' => "**",
            _ => "%",
        };
        self.program.add(V::Bin(op, a, b), span, self.scope)
    }

    fn sum(&mut self, depth: usize) -> Option<Id> {
        let start = self.at;
        let mut id = self.product(depth)?;
        while let Some(Tok::Op(op @ ('+' | '-'))) = self.peek().cloned() {
            self.at += 1;
            let rhs = self.product(depth)?;
            id = self.binary(op, id, rhs, start);
        }
        Some(id)
    }

    fn product(&mut self, depth: usize) -> Option<Id> {
        let start = self.at;
        let mut id = self.power(depth)?;
        while let Some(Tok::Op(op @ ('*' | '/' | '%'))) = self.peek().cloned() {
            self.at += 1;
            let rhs = self.power(depth)?;
            id = self.binary(op, id, rhs, start);
        }
        Some(id)
    }

    fn power(&mut self, depth: usize) -> Option<Id> {
        let start = self.at;
        let base = self.unary(depth)?;
        if let Some(Tok::Op('^')) = self.peek() {
            self.at += 1;
            let exp = self.power(depth + 1)?;
            return Some(self.binary('^', base, exp, start));
        }
        Some(base)
    }

    fn unary(&mut self, depth: usize) -> Option<Id> {
        if depth > MAX_EXPR_DEPTH {
            return None;
        }
        let start = self.at;
        match self.peek()?.clone() {
            Tok::Op('-') => {
                self.at += 1;
                let inner = self.unary(depth + 1)?;
                let span = self.span_from(start);
                Some(self.program.add(V::Neg(inner), span, self.scope))
            }
            Tok::Op('+') => {
                self.at += 1;
                self.unary(depth + 1)
            }
            Tok::Num(v) => {
                let span = self.toks.get(self.at)?.1.clone();
                self.at += 1;
                Some(self.program.add(V::Num(v), span, self.scope))
            }
            Tok::Name(n) => {
                let span = self.toks.get(self.at)?.1.clone();
                self.at += 1;
                Some((self.name)(self.program, n, span))
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
    use crate::expr::Role;

    #[test]
    fn let_string_lowers_with_file_positions() {
        let src = "let \"free = gpu_gb - model_gb * 2\"";
        let expr_at = src.find("gpu_gb").unwrap_or(0);
        let toks = tokenize(&src[expr_at..src.len() - 1], expr_at, false).unwrap_or_default();
        let mut p = Program::new(src);
        let id = lower(&toks, &mut p, 0, &|p, n, r| p.add(V::Name(n), r, 0));
        let lin = p.valuer().lin(id.unwrap_or(0), None);
        assert_eq!(lin.terms.len(), 2);
        assert_eq!(lin.terms[1].symbol, "model_gb");
        assert_eq!(lin.terms[1].role, Role::Model);
        assert_eq!(lin.terms[1].coef, -2.0);
        assert_eq!(&src[lin.terms[1].symbol_span.clone()], "model_gb");
    }

    #[test]
    fn anything_else_is_not_arithmetic() {
        assert!(tokenize("a < b", 0, false).is_none());
        let toks = tokenize("(a + ", 0, false).unwrap_or_default();
        let mut p = Program::new("(a + ");
        assert!(lower(&toks, &mut p, 0, &|p, n, r| p.add(V::Name(n), r, 0)).is_none());
    }
}
