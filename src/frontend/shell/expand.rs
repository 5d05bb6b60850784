//! Shell word expansion, as far as it can be done without running anything: quotes, `$NAME`,
//! `${NAME:-default}`, `$((arithmetic))`, word splitting and `eval`. Every character remembers
//! where it was written and which variable brought it, so a diagnostic can point at the text and
//! name the assignment. What cannot be known (`$1`, `$(command)`, a variable set on some paths
//! only) stays in the word as written and marks it unknown.

use crate::facts::{Arg, Binding};
use std::collections::HashMap;
use std::ops::Range;

/// No variable value grows past this (`X="$X $X"` in a loop would otherwise double forever).
const MAX_VALUE: usize = 64 * 1024;
/// Longest command word that is expanded.
const MAX_WORD: usize = 16 * 1024;
/// Nesting bound for `${...}` defaults and arithmetic.
const MAX_NEST: usize = 32;

pub const NO_BINDING: u32 = u32::MAX;
/// The character stands for something that could not be resolved.
pub const UNKNOWN: u8 = 1;
/// The character came from a variable assigned on some paths only.
pub const MAYBE: u8 = 2;

/// One character of an expanded word.
#[derive(Debug, Clone)]
pub struct RChar {
    pub c: char,
    /// Where it is written in the file.
    pub src: Range<usize>,
    /// The innermost variable that brought it (an index into [`Env::bindings`]).
    pub via: u32,
    pub flags: u8,
}

/// A variable's value.
#[derive(Debug, Clone)]
pub struct Var {
    pub chars: Vec<RChar>,
    pub binding: u32,
    pub maybe: bool,
}

/// The variables of a script, as the walk reaches each line.
#[derive(Debug, Default)]
pub struct Env {
    pub vars: HashMap<String, Var>,
    pub bindings: Vec<Binding>,
}

/// How a piece of text is expanded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A command word (or an `eval`'d string): quotes are removed, unquoted whitespace splits.
    Word,
    /// The value of an assignment: quotes are removed, nothing splits.
    Assign,
    /// A heredoc body: quotes are text, nothing splits.
    Heredoc,
}

impl Mode {
    /// Inside `${X:-default}`: no splitting, quotes as in the surrounding text.
    fn min_assign(self) -> Mode {
        match self {
            Mode::Heredoc => Mode::Heredoc,
            _ => Mode::Assign,
        }
    }
}

/// Source text as characters that point at themselves.
pub fn source_chars(text: &str, base: usize) -> Vec<RChar> {
    text.char_indices()
        .map(|(i, c)| RChar {
            c,
            src: base + i..base + i + c.len_utf8(),
            via: NO_BINDING,
            flags: 0,
        })
        .collect()
}

pub fn text_of(chars: &[RChar]) -> String {
    chars.iter().map(|r| r.c).collect()
}

pub fn is_known(chars: &[RChar]) -> bool {
    chars.iter().all(|r| r.flags & (UNKNOWN | MAYBE) == 0)
}

impl Env {
    pub fn bind(&mut self, name: &str, chars: Vec<RChar>, span: Range<usize>, maybe: bool) {
        let chars = if chars.len() > MAX_VALUE {
            unknown_chars(&format!("${name}"), span.clone())
        } else {
            chars
        };
        self.bindings.push(Binding {
            name: name.to_string(),
            value: text_of(&chars),
            span,
            default: false,
        });
        let binding = (self.bindings.len() - 1) as u32;
        self.vars.insert(
            name.to_string(),
            Var {
                chars,
                binding,
                maybe,
            },
        );
    }

    /// An assignment on some paths only: the variable may keep its old value.
    pub fn bind_maybe(&mut self, name: &str, chars: Vec<RChar>, span: Range<usize>) {
        let same = self
            .vars
            .get(name)
            .is_some_and(|v| !v.maybe && text_of(&v.chars) == text_of(&chars) && is_known(&chars));
        if !same {
            self.bind(name, chars, span, true);
        }
    }

    /// The integer value of a variable, when it has one on every path.
    pub fn int(&self, name: &str) -> Option<i64> {
        let v = self.vars.get(name)?;
        if v.maybe || !is_known(&v.chars) {
            return None;
        }
        text_of(&v.chars).trim().parse().ok()
    }

    /// Expand text written in the file at `base` into fields.
    pub fn expand_source(&mut self, text: &str, base: usize, mode: Mode) -> Vec<Vec<RChar>> {
        // No flag or path is this long; expanding every level of a deeply nested command
        // substitution would be quadratic in its length.
        if mode == Mode::Word && text.len() > MAX_WORD {
            return vec![unknown_chars("?", base..base + text.len())];
        }
        let chars = source_chars(text, base);
        self.expand(&chars, mode, 0)
    }

    /// Expand characters (source text, or the joined words of an `eval`).
    pub fn expand(&mut self, input: &[RChar], mode: Mode, depth: usize) -> Vec<Vec<RChar>> {
        let mut out = Fields::default();
        let quotes = mode != Mode::Heredoc;
        let split = mode == Mode::Word;
        let (mut in_s, mut in_d) = (false, false);
        let n = input.len();
        let mut i = 0;
        while i < n {
            let r = &input[i];
            let c = r.c;
            if in_s {
                if c == '\'' {
                    in_s = false;
                } else {
                    out.push(r.clone());
                }
                i += 1;
                continue;
            }
            if quotes && c == '\\' {
                match input.get(i + 1) {
                    Some(next) if next.c == '\n' => i += 2,
                    Some(next) if !in_d || matches!(next.c, '$' | '`' | '"' | '\\') => {
                        out.push(next.clone());
                        i += 2;
                    }
                    _ => {
                        out.push(r.clone());
                        i += 1;
                    }
                }
                continue;
            }
            if !quotes
                && c == '\\'
                && input
                    .get(i + 1)
                    .is_some_and(|x| matches!(x.c, '$' | '`' | '\\'))
            {
                if let Some(next) = input.get(i + 1) {
                    out.push(next.clone());
                }
                i += 2;
                continue;
            }
            if quotes && c == '\'' && !in_d {
                in_s = true;
                out.started = true;
                i += 1;
                continue;
            }
            if quotes && c == '"' {
                in_d = !in_d;
                out.started = true;
                i += 1;
                continue;
            }
            if split && !in_d && c.is_whitespace() {
                out.end();
                i += 1;
                continue;
            }
            if c == '$' && depth < MAX_NEST {
                if let Some((len, value)) = self.dollar(input, i, depth, mode) {
                    if split && !in_d {
                        for v in value {
                            if v.c.is_whitespace() {
                                out.end();
                            } else {
                                out.push(v);
                            }
                        }
                    } else {
                        out.started = true;
                        out.cur.extend(value);
                    }
                    i += len;
                    continue;
                }
            }
            if c == '`' {
                let end = (i + 1..n).find(|&j| input[j].c == '`').unwrap_or(n - 1);
                out.started = true;
                let inner = text_of(&input[(i + 1).min(end)..end]);
                if names_script_dir(&inner) {
                    let s = input[i].src.start;
                    out.cur.extend(here_dir(s..input[end].src.end.max(s)));
                } else {
                    out.cur.extend(unknown_from(&input[i..=end]));
                }
                i = end + 1;
                continue;
            }
            out.push(r.clone());
            i += 1;
        }
        out.end();
        if !split && out.fields.is_empty() {
            out.fields.push(Vec::new());
        }
        out.fields
    }

    /// The expansion starting with `$` at `i`: how many characters it spans and its value.
    fn dollar(
        &mut self,
        input: &[RChar],
        i: usize,
        depth: usize,
        mode: Mode,
    ) -> Option<(usize, Vec<RChar>)> {
        // In a heredoc the value is reported where the variable is used (the config key's line).
        let at_use = mode == Mode::Heredoc;
        let at = |j: usize| input.get(j).map(|r| r.c);
        let span_of = |a: usize, b: usize| -> Range<usize> {
            let s = input.get(a).map_or(0, |r| r.src.start);
            let e = input.get(b.saturating_sub(1)).map_or(s, |r| r.src.end);
            s..e.max(s)
        };
        match at(i + 1)? {
            '(' if at(i + 2) == Some('(') => {
                let end = matching(input, i + 1, '(', ')')?;
                // `$(( ... ))`: the inner text runs from i+3 to end-1 (the first `)` of `))`).
                let inner = text_of(&input[i + 3..end.saturating_sub(1).max(i + 3)]);
                let len = end + 1 - i;
                let value = eval_arith(&inner, self, 0);
                let span = span_of(i, i + len);
                Some((
                    len,
                    match value {
                        Some(v) => v
                            .to_string()
                            .chars()
                            .map(|c| RChar {
                                c,
                                src: span.clone(),
                                via: NO_BINDING,
                                flags: arith_flags(&inner, self),
                            })
                            .collect(),
                        None => unknown_from(&input[i..i + len]),
                    },
                ))
            }
            '(' => {
                let end = matching(input, i + 1, '(', ')')?;
                let inner = text_of(&input[i + 2..end]);
                if names_script_dir(&inner) {
                    return Some((end + 1 - i, here_dir(span_of(i, end + 1))));
                }
                Some((end + 1 - i, unknown_from(&input[i..=end])))
            }
            '{' => {
                let end = matching(input, i + 1, '{', '}')?;
                let inner = &input[i + 2..end];
                let len = end + 1 - i;
                let text = text_of(inner);
                let name_len = text
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .count();
                let name = &text[..name_len];
                let rest = &text[name_len..];
                if name.is_empty() {
                    return Some((len, unknown_from(&input[i..i + len])));
                }
                if rest.is_empty() {
                    return Some((len, self.lookup(name, &input[i..i + len], at_use)));
                }
                for op in [":-", "-", ":=", "="] {
                    if let Some(default) = rest.strip_prefix(op) {
                        if let Some(v) = self.vars.get(name) {
                            let empty = v.chars.is_empty() && op.starts_with(':');
                            if !empty {
                                return Some((len, self.lookup(name, &input[i..i + len], at_use)));
                            }
                        }
                        {
                            let start = i + 2 + name_len + op.chars().count();
                            let fields =
                                self.expand(&input[start..end], mode.min_assign(), depth + 1);
                            let mut chars: Vec<RChar> = fields.into_iter().flatten().collect();
                            self.bindings.push(Binding {
                                name: name.to_string(),
                                value: default.to_string(),
                                span: span_of(i, i + len),
                                default: true,
                            });
                            let b = (self.bindings.len() - 1) as u32;
                            for ch in &mut chars {
                                if ch.via == NO_BINDING {
                                    ch.via = b;
                                }
                            }
                            return Some((len, chars));
                        }
                    }
                }
                Some((len, unknown_from(&input[i..i + len])))
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut j = i + 1;
                while at(j).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    j += 1;
                }
                let name = text_of(&input[i + 1..j]);
                Some((j - i, self.lookup(&name, &input[i..j], at_use)))
            }
            c if c.is_ascii_digit() || matches!(c, '@' | '*' | '#' | '?' | '$' | '!' | '-') => {
                Some((2, unknown_from(&input[i..i + 2])))
            }
            _ => None,
        }
    }

    /// A variable's value at the place `written` is, or the text itself as unknown.
    fn lookup(&self, name: &str, written: &[RChar], at_use: bool) -> Vec<RChar> {
        let here = match (written.first(), written.last()) {
            (Some(a), Some(b)) => a.src.start..b.src.end.max(a.src.start),
            _ => 0..0,
        };
        match self.vars.get(name) {
            Some(v) => v
                .chars
                .iter()
                .map(|r| RChar {
                    c: r.c,
                    src: if at_use { here.clone() } else { r.src.clone() },
                    via: if r.via == NO_BINDING {
                        v.binding
                    } else {
                        r.via
                    },
                    flags: r.flags | if v.maybe { MAYBE } else { 0 },
                })
                .collect(),
            None => unknown_from(written),
        }
    }

    /// Turn expanded characters into a command word.
    pub fn arg(&self, chars: &[RChar]) -> Arg {
        let own: Vec<&RChar> = chars.iter().filter(|r| r.via == NO_BINDING).collect();
        let span = match (own.first(), own.last()) {
            (Some(a), Some(b)) => a.src.start..b.src.end.max(a.src.start),
            _ => match (chars.first(), chars.last()) {
                (Some(a), Some(b)) if b.src.end >= a.src.start => a.src.start..b.src.end,
                (Some(a), _) => a.src.clone(),
                _ => 0..0,
            },
        };
        let mut via: Vec<Binding> = Vec::new();
        for r in chars {
            if let Some(b) = self.bindings.get(r.via as usize) {
                if !via.iter().any(|v| v.span == b.span && v.name == b.name) {
                    via.push(b.clone());
                }
            }
        }
        Arg {
            value: text_of(chars),
            known: is_known(chars),
            span,
            via,
        }
    }
}

fn arith_flags(inner: &str, env: &Env) -> u8 {
    // A result computed from a variable set on some paths only is itself uncertain.
    let maybe = words_of(inner).any(|w| env.vars.get(w).is_some_and(|v| v.maybe));
    if maybe {
        MAYBE
    } else {
        0
    }
}

fn words_of(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        })
}

/// `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, `` `pwd` ``: the folder
/// the script runs in, which memlint resolves paths against anyway.
fn names_script_dir(inner: &str) -> bool {
    let t: String = inner
        .chars()
        .filter(|c| !matches!(c, '"' | '\'' | ' ' | '\t'))
        .collect();
    let t = t
        .replace(">/dev/null2>&1", "")
        .replace(">/dev/null", "")
        .replace("2>/dev/null", "");
    if t == "pwd" {
        return true;
    }
    let dirname_of_script = |s: &str| {
        matches!(
            s,
            "dirname$0"
                | "dirname${0}"
                | "dirname${BASH_SOURCE[0]}"
                | "dirname$BASH_SOURCE"
                | "dirname${BASH_SOURCE}"
        )
    };
    if dirname_of_script(&t) {
        return true;
    }
    // `cd "$(dirname ...)" && pwd` (and `pwd -P`).
    t.strip_prefix("cd$(")
        .and_then(|r| r.split_once(")&&pwd"))
        .is_some_and(|(d, rest)| dirname_of_script(d) && matches!(rest, "" | "-P"))
}

/// The script's folder, written as `.`: relative paths are resolved from the launcher's folder.
fn here_dir(span: Range<usize>) -> Vec<RChar> {
    vec![RChar {
        c: '.',
        src: span,
        via: NO_BINDING,
        flags: 0,
    }]
}

/// Index of the bracket closing the one at `open`.
fn matching(input: &[RChar], open: usize, l: char, r: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (j, ch) in input.iter().enumerate().skip(open) {
        match quote {
            Some(q) if ch.c == q => quote = None,
            Some(_) => {}
            None if ch.c == '\'' && l == '(' => quote = Some('\''),
            None if ch.c == l => depth += 1,
            None if ch.c == r => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(j);
                }
            }
            None => {}
        }
    }
    None
}

fn unknown_from(written: &[RChar]) -> Vec<RChar> {
    written
        .iter()
        .map(|r| RChar {
            c: r.c,
            src: r.src.clone(),
            via: r.via,
            flags: r.flags | UNKNOWN,
        })
        .collect()
}

pub fn unknown_chars(text: &str, span: Range<usize>) -> Vec<RChar> {
    text.chars()
        .map(|c| RChar {
            c,
            src: span.clone(),
            via: NO_BINDING,
            flags: UNKNOWN,
        })
        .collect()
}

/// Evaluate shell integer arithmetic (`TP*PP*DP`, `$GBS / ($MBS * 2)`) over known variables.
pub fn eval_arith(text: &str, env: &Env, depth: usize) -> Option<i64> {
    let tokens = arith_tokens(text)?;
    let mut p = Arith {
        t: &tokens,
        i: 0,
        env,
        depth,
    };
    let v = p.sum()?;
    (p.i == tokens.len()).then_some(v)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i64),
    Name(String),
    Op(char),
}

fn arith_tokens(text: &str) -> Option<Vec<Tok>> {
    let cs: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < cs.len() && cs[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let t: String = cs[s..i].iter().collect();
            out.push(Tok::Num(t.parse().ok()?));
        } else if c == '$' || c.is_ascii_alphabetic() || c == '_' {
            let braced = c == '$' && cs.get(i + 1) == Some(&'{');
            i += if braced {
                2
            } else if c == '$' {
                1
            } else {
                0
            };
            let s = i;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            if braced {
                if cs.get(i) != Some(&'}') {
                    return None;
                }
                i += 1;
            }
            let name: String = cs[s..i.min(cs.len())]
                .iter()
                .filter(|c| **c != '}')
                .collect();
            if name.is_empty() {
                return None;
            }
            out.push(Tok::Name(name));
        } else if matches!(c, '+' | '-' | '*' | '/' | '%' | '(' | ')') {
            if c == '*' && cs.get(i + 1) == Some(&'*') {
                out.push(Tok::Op('^'));
                i += 2;
            } else {
                out.push(Tok::Op(c));
                i += 1;
            }
        } else {
            return None;
        }
    }
    Some(out)
}

struct Arith<'a> {
    t: &'a [Tok],
    i: usize,
    env: &'a Env,
    depth: usize,
}

impl Arith<'_> {
    fn sum(&mut self) -> Option<i64> {
        let mut v = self.product()?;
        while let Some(Tok::Op(op @ ('+' | '-'))) = self.t.get(self.i) {
            self.i += 1;
            let r = self.product()?;
            v = if *op == '+' {
                v.checked_add(r)?
            } else {
                v.checked_sub(r)?
            };
        }
        Some(v)
    }

    fn product(&mut self) -> Option<i64> {
        let mut v = self.power()?;
        while let Some(Tok::Op(op @ ('*' | '/' | '%'))) = self.t.get(self.i) {
            self.i += 1;
            let r = self.power()?;
            v = match op {
                '*' => v.checked_mul(r)?,
                '/' => v.checked_div(r)?,
                _ => v.checked_rem(r)?,
            };
        }
        Some(v)
    }

    fn power(&mut self) -> Option<i64> {
        let b = self.unary()?;
        if let Some(Tok::Op('^')) = self.t.get(self.i) {
            self.i += 1;
            self.depth += 1;
            if self.depth > MAX_NEST * 4 {
                return None;
            }
            let e = self.power()?;
            self.depth -= 1;
            return b.checked_pow(u32::try_from(e).ok()?);
        }
        Some(b)
    }

    fn unary(&mut self) -> Option<i64> {
        self.depth += 1;
        if self.depth > MAX_NEST * 4 {
            return None;
        }
        let v = match self.t.get(self.i)? {
            Tok::Op('-') => {
                self.i += 1;
                self.unary()?.checked_neg()
            }
            Tok::Op('+') => {
                self.i += 1;
                self.unary()
            }
            Tok::Op('(') => {
                self.i += 1;
                let v = self.sum()?;
                if self.t.get(self.i) != Some(&Tok::Op(')')) {
                    return None;
                }
                self.i += 1;
                Some(v)
            }
            Tok::Num(n) => {
                self.i += 1;
                Some(*n)
            }
            Tok::Name(name) => {
                self.i += 1;
                self.env.int(name)
            }
            Tok::Op(_) => None,
        };
        self.depth -= 1;
        v
    }
}

/// The words of a field list joined with single spaces (what `eval` sees).
pub fn join_fields(fields: &[Vec<RChar>]) -> Vec<RChar> {
    let mut out = Vec::new();
    for (k, f) in fields.iter().enumerate() {
        if k > 0 {
            let at = f.first().map_or(0..0, |r| r.src.start..r.src.start);
            out.push(RChar {
                c: ' ',
                src: at,
                via: NO_BINDING,
                flags: 0,
            });
        }
        out.extend(f.iter().cloned());
    }
    out
}

#[derive(Default)]
struct Fields {
    fields: Vec<Vec<RChar>>,
    cur: Vec<RChar>,
    /// A quote opened: the field exists even if empty (`""`).
    started: bool,
}

impl Fields {
    fn push(&mut self, r: RChar) {
        self.cur.push(r);
        self.started = true;
    }

    fn end(&mut self) {
        if self.started || !self.cur.is_empty() {
            self.fields.push(std::mem::take(&mut self.cur));
        }
        self.started = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(env: &mut Env, text: &str) -> Vec<String> {
        env.expand_source(text, 0, Mode::Word)
            .iter()
            .map(|f| text_of(f))
            .collect()
    }

    #[test]
    fn quotes_variables_defaults_and_splitting() {
        let mut env = Env::default();
        let v = env.expand_source("8", 100, Mode::Assign).remove(0);
        env.bind("N", v, 98..101, false);
        let opts = env
            .expand_source("\"--a 1 \\\n  --b=$N\"", 200, Mode::Assign)
            .remove(0);
        env.bind("OPTS", opts, 195..220, false);
        assert_eq!(words(&mut env, "--num_gpus=$N"), ["--num_gpus=8"]);
        assert_eq!(words(&mut env, "$OPTS"), ["--a", "1", "--b=8"]);
        assert_eq!(words(&mut env, "\"$OPTS\""), ["--a 1   --b=8"]);
        assert_eq!(words(&mut env, "${M:-4}"), ["4"]);
        assert_eq!(words(&mut env, "${N:-4}"), ["8"]);
        assert_eq!(words(&mut env, "$((N*2))"), ["16"]);
        assert_eq!(
            words(&mut env, "\"$(dirname \"$0\")/ds.json\""),
            ["./ds.json"]
        );
        assert_eq!(
            words(
                &mut env,
                "$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" >/dev/null 2>&1 && pwd)/x"
            ),
            ["./x"]
        );
        assert_eq!(words(&mut env, "`pwd`/c.json"), ["./c.json"]);
        assert!(!is_known(&env.expand_source("$(date)", 0, Mode::Word)[0]));
        let f = env.expand_source("$1", 0, Mode::Word);
        assert!(!is_known(&f[0]));
        let f = env.expand_source("$N", 300, Mode::Word);
        let a = env.arg(&f[0]);
        assert_eq!(a.value, "8");
        assert!(a.known);
        assert_eq!(a.via[0].name, "N");
        assert_eq!(a.span, 100..101);
    }

    #[test]
    fn arithmetic() {
        let mut env = Env::default();
        let v = env.expand_source("4", 0, Mode::Assign).remove(0);
        env.bind("TP", v, 0..1, false);
        assert_eq!(eval_arith("TP * (2 + $TP) % 5", &env, 0), Some(4));
        assert_eq!(eval_arith("2**10", &env, 0), Some(1024));
        assert_eq!(eval_arith("X + 1", &env, 0), None);
        assert_eq!(eval_arith("1 / 0", &env, 0), None);
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert_eq!(eval_arith(&deep, &env, 0), None);
    }
}
