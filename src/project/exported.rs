//! Whether a module's text may export a helper as arithmetic (see
//! [`crate::facts::Facts::value_exports`]), read before the module is analysed for it: most
//! imported names are classes, re-exports, or functions that return anything but arithmetic
//! (`return logging.getLogger(name)`), and a module read for none of them is not parsed.
//!
//! A necessary condition, never a sufficient one: a definition is ruled out only by what the walk
//! could not export for certain (an attribute, a subscript or a test in a value returned, a name
//! returned that the function binds twice), so a module that passes may still export nothing.

/// How many of a function's bound names a returned value is followed through; deeper, it is let
/// through.
const MAX_FOLLOWED: usize = 8;

/// Whether `text` defines one of `names` (`def name(`, `name = lambda`, at any indentation) in
/// a way the walk may export.
pub fn may_export(text: &str, names: &[&str]) -> bool {
    // Most modules never write the names: no lexing for them.
    if !names.iter().any(|n| text.contains(n)) {
        return false;
    }
    let lines = logical_lines(text);
    lines.iter().enumerate().any(|(i, (indent, line))| {
        names.iter().any(|name| match definition(line, name) {
            Some(Defined::Lambda(body)) => !ruled_out(body, &[], 0),
            Some(Defined::Def(inline)) => {
                let own = own_statements(&lines[i + 1..], *indent, inline);
                function_may_export(&own)
            }
            // A module's number may be bound under `if __name__ == "__main__":` too.
            None => assigns(line, name),
        })
    })
}

/// `line` assigns `name` (`GIB = 1024**3`, `GPU_GB: float = 80`): the walk exports it when the
/// module binds it to a number.
fn assigns(line: &str, name: &str) -> bool {
    let Some(rest) = line.strip_prefix(name) else {
        return chained_target(line, name);
    };
    let rest = match rest.trim_start().strip_prefix(':') {
        Some(annotated) => annotated.split_once('=').map_or("", |(_, v)| v),
        None => rest.trim_start().strip_prefix('=').unwrap_or(""),
    };
    !rest.is_empty() && !rest.starts_with('=') && !rest.trim_start().starts_with("lambda")
}

/// `name` is a later target of a chained assignment (`weights_gb = grads_gb = n * 2 / 1e9`).
fn chained_target(line: &str, name: &str) -> bool {
    let mut rest = line;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        if end == 0 {
            return false;
        }
        let (target, after) = rest.split_at(end);
        let Some(value) = after.trim_start().strip_prefix('=') else {
            return false;
        };
        if value.starts_with('=') {
            return false;
        }
        if target == name {
            return !value.trim().is_empty();
        }
        rest = value.trim_start();
    }
}

enum Defined<'a> {
    /// What follows the signature's `:` on its line (a one-line body), maybe empty.
    Def(&'a str),
    /// The lambda's expression.
    Lambda(&'a str),
}

/// `line` defines `name`: `def name(...): ...` or `name = lambda ...: ...`.
fn definition<'a>(line: &'a str, name: &str) -> Option<Defined<'a>> {
    if let Some(rest) = line.strip_prefix("def ") {
        let rest = rest.trim_start().strip_prefix(name)?.trim_start();
        if !rest.starts_with('(') {
            return None;
        }
        // The signature ends at the first `:` outside brackets.
        let mut depth = 0i32;
        for (at, c) in rest.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ':' if depth == 0 => return Some(Defined::Def(rest[at + 1..].trim())),
                _ => {}
            }
        }
        return Some(Defined::Def(""));
    }
    let rest = line.strip_prefix(name)?.trim_start();
    let rest = rest
        .strip_prefix('=')?
        .trim_start()
        .strip_prefix("lambda")?;
    let (_, body) = rest.split_once(':')?;
    Some(Defined::Lambda(body.trim()))
}

/// The statements of a function at `indent` whose body follows (and `inline`, a body written
/// on the signature's line), without those of the functions and classes nested in it.
fn own_statements<'a>(
    after: &'a [(usize, String)],
    indent: usize,
    inline: &'a str,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    if !inline.is_empty() {
        out.push(inline);
    }
    let mut nested: Option<usize> = None;
    for (i, line) in after {
        if *i <= indent {
            break;
        }
        if nested.is_some_and(|n| *i > n) {
            continue;
        }
        nested = None;
        let l = line.as_str();
        if ["def ", "class ", "async def "]
            .iter()
            .any(|k| l.starts_with(k))
        {
            nested = Some(*i);
            continue;
        }
        out.push(l);
    }
    out
}

/// Whether a function with these statements may return arithmetic on every `return`.
fn function_may_export(own: &[&str]) -> bool {
    let returns: Vec<&str> = own.iter().flat_map(|s| returned(s)).collect();
    // The walk exports a function by what it returns.
    if returns.is_empty() {
        return false;
    }
    let bindings = bindings(own);
    !returns.iter().any(|r| ruled_out(r, &bindings, 0))
}

/// What each `return` of a statement returns (`if x: return a` holds one too).
fn returned(statement: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&statement[from..], "return") {
        let start = from + at + "return".len();
        let rest = &statement[start..];
        let end = rest.find(';').unwrap_or(rest.len());
        out.push(rest[..end].trim());
        from = start;
    }
    out
}

/// The names a function binds, each with the value of its one plain binding (`None` for any
/// other: a second binding, `+=`, a loop's or a `with`'s target, one of several targets).
fn bindings<'a>(own: &[&'a str]) -> Vec<(&'a str, Option<&'a str>)> {
    let mut out: Vec<(&str, Option<&str>)> = Vec::new();
    let mut bind =
        |name: &'a str, value: Option<&'a str>| match out.iter_mut().find(|(n, _)| *n == name) {
            Some(seen) => seen.1 = None,
            None => out.push((name, value)),
        };
    for s in own {
        if let Some(targets) = s.strip_prefix("for ").and_then(|r| r.split(" in ").next()) {
            identifiers(targets).into_iter().for_each(|n| bind(n, None));
            continue;
        }
        if s.starts_with("with ") {
            for part in s.split(" as ").skip(1) {
                identifiers(part.split([',', ':']).next().unwrap_or(""))
                    .into_iter()
                    .for_each(|n| bind(n, None));
            }
            continue;
        }
        let Some(eq) = assignment(s) else { continue };
        let (left, right) = (s[..eq].trim(), s[eq + 1..].trim());
        // `x: int = 3` binds `x`.
        let left = left.split(':').next().unwrap_or(left).trim();
        let augmented = left.ends_with(['+', '-', '*', '/', '%', '&', '|', '^', '@', '<', '>']);
        let target = left
            .trim_end_matches(['+', '-', '*', '/', '%', '&', '|', '^', '@', '<', '>'])
            .trim();
        if is_identifier(target) {
            bind(target, (!augmented).then_some(right));
        } else if !target.contains(['.', '[']) {
            // `a, b = ...`
            identifiers(target).into_iter().for_each(|n| bind(n, None));
        }
    }
    out
}

/// Where a statement's assignment `=` is, when it is an assignment.
fn assignment(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for (i, c) in b.iter().enumerate() {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'=' if depth == 0 => {
                let before = i.checked_sub(1).map(|j| b[j]);
                let after = b.get(i + 1);
                if after != Some(&b'=') && !matches!(before, Some(b'=' | b'!' | b':')) {
                    // `<=`, `>=` compare; `<<=`, `>>=` assign.
                    let compares = matches!(before, Some(b'<' | b'>'))
                        && !matches!(i.checked_sub(2).map(|j| b[j]), Some(b'<' | b'>'));
                    return (!compares).then_some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether the walk could not export a function that returns `value`, for certain: it holds
/// what has no shape (an attribute, a subscript, a test, a string outside a dict, a keyword),
/// or a name the function binds otherwise than once to such a value.
fn ruled_out(value: &str, bindings: &[(&str, Option<&str>)], followed: usize) -> bool {
    if has_no_shape(value) {
        return true;
    }
    if followed >= MAX_FOLLOWED {
        return false;
    }
    identifiers(value).into_iter().any(|name| {
        bindings
            .iter()
            .find(|(n, _)| *n == name)
            .is_some_and(|(_, bound)| match bound {
                None => true,
                Some(v) => ruled_out(v, bindings, followed + 1),
            })
    })
}

/// Python words that end an arithmetic shape.
const NO_SHAPE_WORDS: &[&str] = &[
    "lambda", "if", "else", "for", "not", "and", "or", "await", "yield", "None", "True", "False",
    "is", "in",
];

fn has_no_shape(value: &str) -> bool {
    let b = value.as_bytes();
    if value.contains('[') || value.contains(":=") {
        return true;
    }
    // A string the walk reads only as a dict's key.
    if value.contains("\"\"") && !value.contains('{') {
        return true;
    }
    for (i, c) in b.iter().enumerate() {
        let next = b.get(i + 1).copied();
        match c {
            b'@' | b'|' | b'&' | b'^' | b'~' => return true,
            b'!' if next == Some(b'=') => return true,
            b'=' if next == Some(b'=') => return true,
            b'<' | b'>' => {
                let prev = i.checked_sub(1).map(|j| b[j]);
                // `<<` and `>>` shift; one alone (or `<=`) compares.
                if next != Some(*c) && prev != Some(*c) {
                    return true;
                }
            }
            b'.' if next.is_some_and(|n| n.is_ascii_alphabetic() || n == b'_') => {
                let start = b[..i]
                    .iter()
                    .rposition(|x| !(x.is_ascii_alphanumeric() || *x == b'_'))
                    .map_or(0, |p| p + 1);
                let token = &value[start..i];
                let number = token.starts_with(|c: char| c.is_ascii_digit());
                let math = token == "math"
                    && ["ceil", "floor"].iter().any(|f| {
                        value[i + 1..]
                            .strip_prefix(f)
                            .is_some_and(|r| r.trim_start().starts_with('('))
                    });
                if !number && !math {
                    return true;
                }
            }
            _ => {}
        }
    }
    NO_SHAPE_WORDS.iter().any(|w| find_word(value, w).is_some())
}

/// The names an expression reads (not attributes, not callees, not keywords).
fn identifiers(value: &str) -> Vec<&str> {
    let b = value.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let after = value[i..].trim_start();
            let attribute = start > 0 && b[start - 1] == b'.';
            let number = start > 0 && b[start - 1].is_ascii_digit();
            if !attribute
                && !number
                && !after.starts_with('(')
                && !NO_SHAPE_WORDS.contains(&&value[start..i])
            {
                out.push(&value[start..i]);
            }
        } else {
            i += 1;
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Where `word` stands alone in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = at.checked_sub(1).map(|j| b[j]);
        let after = b.get(at + word.len()).copied();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The text as logical lines, each with its indentation: strings blanked to `""`, comments
/// dropped, physical lines joined while a bracket or a string is open or a line ends in `\`.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut cur = String::new();
    let mut indent = 0;
    let mut depth = 0i32;
    let mut start_of_line = true;
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if start_of_line && depth == 0 && cur.is_empty() {
            let mut n = 0;
            while i < chars.len() && matches!(chars[i], ' ' | '\t') {
                n += 1;
                i += 1;
            }
            indent = n;
            start_of_line = false;
            continue;
        }
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '"' | '\'' => {
                let triple = chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c);
                i += if triple { 3 } else { 1 };
                while i < chars.len() {
                    if chars[i] == '\\' {
                        i += 2;
                        continue;
                    }
                    if chars[i] == c
                        && (!triple
                            || (chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c)))
                    {
                        i += if triple { 3 } else { 1 };
                        break;
                    }
                    // An unclosed one-line string ends with its line.
                    if chars[i] == '\n' && !triple {
                        break;
                    }
                    i += 1;
                }
                cur.push_str("\"\"");
                continue;
            }
            '\\' if chars.get(i + 1) == Some(&'\n') => {
                cur.push(' ');
                i += 2;
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = (depth - 1).max(0),
            '\n' => {
                if depth == 0 {
                    let line = cur.trim();
                    if !line.is_empty() {
                        out.push((indent, line.to_string()));
                    }
                    cur.clear();
                    start_of_line = true;
                } else {
                    cur.push(' ');
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        i += 1;
    }
    let line = cur.trim();
    if !line.is_empty() {
        out.push((indent, line.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::may_export;

    const MODULE: &str = r#"import logging

GIB = 1024**3


def gib(num_bytes):
    """Bytes to GiB.

    return value.attribute: a docstring, not a return.
    """
    return num_bytes / GIB  # logging.info would be read


def get_logger(name):
    return logging.getLogger(name)


def total(weights, grads, states):
    out = weights + grads
    out = out + states
    return out


def per_gpu(
    n_params,
    world_size=8,
):
    shard = n_params * 16 / world_size
    return math.ceil(shard)


def pick(table, key):
    return table[key]


def branch(b, binary):
    if binary: return b / 2**30
    return b / 1e9


def loop(xs):
    acc = 0
    for x in xs:
        acc += x
    return acc


def later(n):
    def inner(c):
        return c.item()

    return n * 2.5e-9


def no_return(x):
    print(x)


class Sizes:
    def twice(self, b):
        return self.scale * b


to_gb = lambda n: n / 1e9
of_model = lambda m: m.num_parameters()
"#;

    #[test]
    fn arithmetic_helpers_pass_and_others_are_ruled_out() {
        for name in ["gib", "per_gpu", "branch", "later", "to_gb"] {
            assert!(may_export(MODULE, &[name]), "{name} is ruled out");
        }
        for name in [
            "get_logger",
            "total",
            "pick",
            "loop",
            "no_return",
            "twice",
            "of_model",
            "missing",
        ] {
            assert!(!may_export(MODULE, &[name]), "{name} is let through");
        }
        assert!(may_export(MODULE, &["get_logger", "gib"]));
        let chained = "weights_gb = grads_gb = 7e9 * 2 / 1e9\nok = a == b\n";
        assert!(may_export(chained, &["grads_gb"]) && may_export(chained, &["weights_gb"]));
        assert!(!may_export(chained, &["b"]));
    }
}
