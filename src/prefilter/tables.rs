//! MEM002 and MEM003's tables: a dtype or optimizer key followed by `:` and a number in a dict;
//! a quoted key followed by `,` and a number (a pair in a list, `.get("bf16", 2)`); a key
//! written as a keyword given a number (`dict(bf16=2)`); a key compared (an `if` chain, a
//! conditional, a `match`) in a file that assigns or returns a number; a quoted key given as a
//! keyword beside a number for a `byte` or `multiplier` name (a keyword pair).

use super::scan::{finder, identifier_at, is_ident, Scan};
use crate::knowledge::{knowledge, normalize as optimizer_name};
use std::collections::HashSet;
use std::sync::OnceLock;

impl Scan<'_> {
    /// A dtype or optimizer table (MEM002, MEM003) needs a known key followed by `:` and a
    /// number (or a record of fields, `"adam": {"states": 2}`): quoted (`"bf16": 2`) or an attribute (`torch.float16: 2`, `np.float64: 8`; the
    /// frontend reads it by its last segment); or an `if` chain or a conditional comparing a
    /// quoted key and assigning a number to a name holding `byte` or `multiplier`.
    pub(super) fn table(&self) -> bool {
        let lower = &self.lower;
        let keyed = memchr::memchr_iter(b':', lower).any(|colon| {
            // A record (`"adam": {"states": 2}`) holds a row in each numeric field.
            let record = lower[colon + 1..].trim_ascii_start().first() == Some(&b'{');
            if !record && !number_follows(self.text, colon) {
                return false;
            }
            // A row gives bytes or states per parameter (`"float16": 835e12` is a rate).
            if !record && value_after(lower, colon + 1).is_some_and(|v| !per_parameter(v)) {
                return false;
            }
            let key_end = lower[..colon]
                .iter()
                .rposition(|b| *b != b' ' && *b != b'\t')
                .map_or(0, |i| i + 1);
            let key = match key_end.checked_sub(1).map(|i| lower[i]) {
                Some(b'"' | b'\'') => {
                    let close = key_end - 1;
                    let Some(open) = lower[..close].iter().rposition(|b| *b == lower[close]) else {
                        return false;
                    };
                    (open, std::str::from_utf8(&lower[open + 1..close]))
                }
                Some(b) if is_ident(b) => {
                    let (start, _) = identifier_at(lower, key_end - 1, false);
                    if start == 0 || lower[start - 1] != b'.' {
                        return false;
                    }
                    let mut first = start;
                    while first > 0 && (is_ident(lower[first - 1]) || lower[first - 1] == b'.') {
                        first -= 1;
                    }
                    (first, std::str::from_utf8(&lower[start..key_end]))
                }
                _ => return false,
            };
            let (first, Ok(name)) = key else { return false };
            // A dict entry opens the dict, follows a `,`, or starts a line (`x[a.half:2]` is a
            // slice).
            let before = lower[..first]
                .iter()
                .rev()
                .find(|b| !matches!(b, b' ' | b'\t'));
            matches!(before, None | Some(b'{' | b',' | b'\n')) && known_key(name)
        });
        if keyed || keyword_keys(lower) {
            return true;
        }
        // The quoted known keys, found once: most files hold none, and every check below reads
        // them.
        let quoted: Vec<(usize, &str)> = quoted_keys(lower).collect();
        if paired(lower, &quoted) {
            return true;
        }
        // Every check below reads a quoted known key or a known `torch.` dtype (the arms of
        // `number_near_key`): without one, the file holds no table.
        if quoted.is_empty() && torch_keys(lower).next().is_none() {
            return false;
        }

        let named = assigns_number(lower, b"byte") || assigns_number(lower, b"multiplier");
        // Unnamed arms make a table in a file that counts memory, with rows of numbers a
        // parameter can take.
        let unnamed = || number_near_key(lower, &quoted, 2, &|at| self.counts_memory_near(at));
        (compares_known_key(lower, &quoted)
            && ((named && number_near_key(lower, &quoted, 1, &|_| true)) || unnamed()))
            || (named
                // A keyword argument or default, or an annotated one (`dtype="bf16"`,
                // `dtype: str = "fp16"`), not a comparison.
                && quoted.iter().any(|&(open, _)| {
                    if open >= 2 && lower[open - 1] == b'=' && is_ident(lower[open - 2]) {
                        return true;
                    }
                    let Some(typed) = lower[..open].trim_ascii_end().strip_suffix(b"=") else {
                        return false;
                    };
                    let typed = typed.trim_ascii_end();
                    let ty = typed.iter().rev().take_while(|b| is_ident(**b)).count();
                    ty > 0 && typed[..typed.len() - ty].trim_ascii_end().last() == Some(&b':')
                }))
    }
}

/// The quoted strings of the text that are known keys: where each opens, and the key.
fn quoted_keys(lower: &[u8]) -> impl Iterator<Item = (usize, &str)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(i) = memchr::memchr2(b'"', b'\'', lower.get(at..)?) {
            let open = at + i;
            let quote = lower[open];
            let len = memchr::memchr2(quote, b'\n', lower.get(open + 1..)?)?;
            let close = open + 1 + len;
            at = close + 1;
            if lower.get(close) != Some(&quote) || len == 0 || len > 40 {
                if lower.get(close) != Some(&quote) {
                    at = close;
                }
                continue;
            }
            let Ok(key) = std::str::from_utf8(&lower[open + 1..close]) else {
                continue;
            };
            if known_key(key) {
                return Some((open, key));
            }
        }
        None
    })
}

/// `("bf16", 2)` and `.get("bf16", 2)`: a known key opened by `(` and followed by `,` and a
/// number.
fn paired(lower: &[u8], quoted: &[(usize, &str)]) -> bool {
    quoted.iter().any(|&(open, key)| {
        let before = lower[..open].trim_ascii_end().last();
        let after = &lower[open + key.len() + 2..];
        let after = after.trim_ascii_start();
        before == Some(&b'(')
            && after.first() == Some(&b',')
            && after[1..]
                .trim_ascii_start()
                .first()
                .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'('))
    })
}

/// `bf16=2`: a known key written as a keyword and given a number (`dict(bf16=2, fp32=4)`).
fn keyword_keys(lower: &[u8]) -> bool {
    memchr::memchr_iter(b'=', lower).any(|eq| {
        if lower.get(eq + 1) == Some(&b'=') || eq == 0 {
            return false;
        }
        let number = lower[eq + 1..]
            .trim_ascii_start()
            .first()
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.');
        if !number {
            return false;
        }
        let key_end = lower[..eq]
            .iter()
            .rposition(|b| *b != b' ')
            .map_or(0, |i| i + 1);
        if key_end == 0 || !is_ident(lower[key_end - 1]) {
            return false;
        }
        let (start, _) = identifier_at(lower, key_end - 1, false);
        let before = lower[..start].trim_ascii_end().last();
        matches!(before, Some(b'(' | b','))
            && std::str::from_utf8(&lower[start..key_end]).is_ok_and(known_key)
    })
}

/// How far after a key an arm's number is looked for.
const ARM_WINDOW: usize = 160;

/// A known key (quoted, or a `torch.` dtype) with a number assigned or returned just after it:
/// the arm of an `if` chain, a conditional or a `case` that makes a table row. Library code
/// compares dtypes everywhere; a table's arms give numbers right away.
fn number_near_key(
    lower: &[u8],
    quoted: &[(usize, &str)],
    rows: usize,
    also: &dyn Fn(usize) -> bool,
) -> bool {
    let near = |at: usize| {
        // A conditional gives its number before the test (`2 if d == "bf16" else 4`).
        let window = &lower[at.saturating_sub(ARM_WINDOW / 2)..lower.len().min(at + ARM_WINDOW)];
        arm_numbers(window).any(per_parameter)
    };
    // Dtypes are compared all over library code; an optimizer's name seldom is.
    let mut keys = quoted
        .iter()
        .filter(|(open, key)| near(*open) && (optimizer_key(key) || also(*open)))
        .map(|(_, key)| key.to_string())
        .chain(
            torch_keys(lower)
                .filter(|&(i, _)| near(i) && also(i))
                .map(|(_, key)| key.to_string()),
        );
    let mut seen: Vec<String> = Vec::new();
    keys.any(|k| {
        if !seen.contains(&k) {
            seen.push(k);
        }
        seen.len() >= rows
    })
}

/// The known `torch.` dtypes written (`torch.bfloat16`): where each starts, and the key.
fn torch_keys(lower: &[u8]) -> impl Iterator<Item = (usize, &str)> + '_ {
    finder!(b"torch.").find_iter(lower).filter_map(|i| {
        let (_, end) = identifier_at(lower, i + 6, false);
        let key = std::str::from_utf8(&lower[i..end]).ok()?;
        known_key(key).then_some((i, key))
    })
}

/// The numbers assigned (`x = 4`, not `x == 4`) or returned (`return (2)`) in a piece of code.
fn arm_numbers(code: &[u8]) -> impl Iterator<Item = f64> + '_ {
    let after = |at: usize| {
        let rest = &code[at..];
        let start = rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'('))?;
        let rest = &rest[start..];
        let len = rest
            .iter()
            .position(|b| !(b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'_')))
            .unwrap_or(rest.len());
        std::str::from_utf8(&rest[..len]).ok()?.parse::<f64>().ok()
    };
    let assigned = memchr::memchr_iter(b'=', code).filter_map(move |j| {
        let prev = j.checked_sub(1).map(|p| code[p]);
        let comparison =
            code.get(j + 1) == Some(&b'=') || matches!(prev, Some(b'=' | b'!' | b'<' | b'>'));
        if comparison {
            None
        } else {
            after(j + 1)
        }
    });
    let returned = finder!(b"return")
        .find_iter(code)
        .filter_map(move |i| after(i + 6));
    assigned.chain(returned)
}

/// A number that can be bytes or states per parameter (0 for SGD without momentum, 0.5 for
/// 4-bit, up to 20 for mixed-precision Adam with extras); `eps = 1e-6` or `size = 512` is not.
fn per_parameter(v: f64) -> bool {
    v == 0.0 || (0.25..=24.0).contains(&v)
}

/// Lowercase dtype names, and optimizer names as the knowledge lookup normalises them.
type Keys = HashSet<String, foldhash::fast::FixedState>;

/// The known keys, and a bit for every (length, first byte, last byte) one of them has: most
/// strings of a file miss every bit, and the bit costs less than a hash lookup.
struct KnownKeys {
    dtypes: Keys,
    optimizers: Keys,
    gate: [u64; 64],
}

impl KnownKeys {
    fn slot(key: &[u8]) -> (usize, u64) {
        let (first, last) = match key {
            [first, .., last] => (*first, *last),
            [only] => (*only, *only),
            [] => (0, 0),
        };
        let h =
            key.len().wrapping_mul(0x9e37) ^ (usize::from(first) << 4) ^ (usize::from(last) * 0x3d);
        ((h >> 6) & 63, 1 << (h & 63))
    }

    /// False when no key has the length, first and last byte of `key`.
    fn may_hold(&self, key: &[u8]) -> bool {
        let (word, bit) = Self::slot(key);
        self.gate[word] & bit != 0
    }
}

fn known_keys() -> &'static KnownKeys {
    static KEYS: OnceLock<KnownKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let k = knowledge();
        let dtypes: Keys = k
            .dtypes
            .iter()
            .flat_map(|d| d.names.iter())
            .map(|n| n.to_ascii_lowercase())
            .collect();
        let optimizers: Keys = k
            .optimizers
            .iter()
            .flat_map(|o| o.names.iter())
            .map(|n| optimizer_name(n))
            .collect();
        let mut gate = [0; 64];
        for key in dtypes.iter().chain(&optimizers) {
            let (word, bit) = KnownKeys::slot(key.as_bytes());
            gate[word] |= bit;
        }
        KnownKeys {
            dtypes,
            optimizers,
            gate,
        }
    })
}

/// The longest key worth looking up: no dtype or optimizer name is longer.
const KEY_MAX: usize = 40;

/// `normalize(key)` (its last segment, without `-` and `_`) for a key already in lowercase,
/// written into `buf`: the lookup runs for every short string of every file, so it does not
/// allocate.
fn normalized<'b>(key: &str, buf: &'b mut [u8; KEY_MAX]) -> Option<&'b str> {
    let last = key.rsplit('.').next().unwrap_or(key);
    let mut n = 0;
    for b in last.bytes().filter(|b| !matches!(b, b'-' | b'_')) {
        *buf.get_mut(n)? = b.to_ascii_lowercase();
        n += 1;
    }
    std::str::from_utf8(&buf[..n]).ok()
}

/// `knowledge().optimizer(key)` would find a row, for a key already in lowercase.
fn optimizer_key(key: &str) -> bool {
    let mut buf = [0; KEY_MAX];
    let keys = known_keys();
    normalized(key, &mut buf)
        .is_some_and(|k| keys.may_hold(k.as_bytes()) && keys.optimizers.contains(k))
}

/// A dtype name, whole or by its last segment, for a key already in lowercase.
fn dtype_key(key: &str) -> bool {
    let keys = known_keys();
    let last = key.rsplit('.').next().unwrap_or(key);
    let holds = |k: &str| keys.may_hold(k.as_bytes()) && keys.dtypes.contains(k);
    // Without a `.` the key is its last segment.
    (last.len() != key.len() && holds(key)) || holds(last)
}

/// `knowledge().dtype(key)` or `knowledge().optimizer(key)` would find a row, for a key
/// already in lowercase.
fn known_key(key: &str) -> bool {
    if key.is_empty() || key.len() > 2 * KEY_MAX {
        return false;
    }
    dtype_key(key) || optimizer_key(key)
}

/// A known key compared as the `if` chains, conditionals and `match` statements the frontend
/// reads compare it: `x == "bf16"`, `"bf16" == x`, `x != "bf16"`, `x is "bf16"`,
/// `x in ("bf16", "fp16")`, `x.startswith("bf16")`, `case "bf16":`, `x == torch.bfloat16`.
fn compares_known_key(lower: &[u8], quoted: &[(usize, &str)]) -> bool {
    let tested = quoted.iter().any(|&(open, _)| {
        let before = lower[..open].trim_ascii_end();
        before.ends_with(b" is")
            || before.ends_with(b"startswith(")
            || before.ends_with(b"endswith(")
            || before.ends_with(b"case")
            || before.ends_with(b"!=")
            || before.ends_with(b"|")
    });
    if tested {
        return true;
    }
    // `== torch.bfloat16`, `is torch.float32`, `in (torch.float16, torch.bfloat16)`
    let attribute = finder!(b"torch.").find_iter(lower).any(|i| {
        let before = lower[..i].trim_ascii_end();
        let (_, end) = identifier_at(lower, i + 6, false);
        // `(` opens a tuple tested by `in`, not a call's arguments (`x.to(torch.float32)`).
        let in_tuple = before
            .strip_suffix(b"(")
            .is_some_and(|b| b.trim_ascii_end().ends_with(b" in"));
        (before.ends_with(b"==") || before.ends_with(b" is") || in_tuple || before.ends_with(b"!="))
            && std::str::from_utf8(&lower[i..end]).is_ok_and(known_key)
    });
    attribute || compares_quoted(lower)
}

fn compares_quoted(lower: &[u8]) -> bool {
    let skip = |mut i: usize| {
        while lower
            .get(i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'('))
        {
            i += 1;
        }
        i
    };
    // The string whose opening quote is at `open`.
    let string_at = |open: usize| {
        let quote = *lower.get(open)?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        let len = memchr::memchr(quote, lower.get(open + 1..)?)?;
        std::str::from_utf8(&lower[open + 1..open + 1 + len]).ok()
    };
    let equals = finder!(b"==").find_iter(lower).any(|at| {
        if string_at(skip(at + 2)).is_some_and(known_key) {
            return true;
        }
        let left = lower[..at].trim_ascii_end();
        let Some((&quote, body)) = left.split_last() else {
            return false;
        };
        matches!(quote, b'"' | b'\'')
            && body
                .iter()
                .rposition(|b| *b == quote)
                .and_then(|open| std::str::from_utf8(&body[open + 1..]).ok())
                .is_some_and(known_key)
    });
    equals
        || finder!(b" in ").find_iter(lower).any(|at| {
            let mut i = at + 4;
            while lower.get(i).is_some_and(|b| matches!(b, b' ' | b'\t')) {
                i += 1;
            }
            if !matches!(lower.get(i), Some(b'(' | b'[' | b'{')) {
                return false;
            }
            loop {
                i += 1;
                while lower
                    .get(i)
                    .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
                {
                    i += 1;
                }
                let Some(key) = string_at(i) else {
                    return false;
                };
                if known_key(key) {
                    return true;
                }
                i += key.len() + 1;
            }
        })
}

/// The number written at `at`, after spaces and an opening parenthesis (`(2)`), when it is a
/// plain literal.
fn value_after(lower: &[u8], at: usize) -> Option<f64> {
    let rest = lower.get(at..)?;
    let start = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'('))?;
    let rest = &rest[start..];
    let len = rest
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+')))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..len])
        .ok()?
        .replace('_', "")
        .parse()
        .ok()
}

/// A number (or a sign before one) after optional spaces, a `:` and spaces: a table value.
fn number_follows(text: &str, at: usize) -> bool {
    let rest = text.get(at..).unwrap_or("");
    let rest = rest.trim_start_matches([' ', '\t']);
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    rest.trim_start_matches([' ', '\t', '(', '-', '+'])
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// A name holding `word` (any name for an empty word) assigned a number (`bytes_per_param = 4`,
/// `nbytes = 2 if ...`): the arms of an `if` chain or a conditional that make a table.
fn assigns_number(lower: &[u8], word: &[u8]) -> bool {
    if word.is_empty() {
        return memchr::memchr_iter(b'=', lower).any(|j| {
            let prev = j.checked_sub(1).map(|p| lower[p]);
            if lower.get(j + 1) == Some(&b'=') || matches!(prev, Some(b'=' | b'!' | b'<' | b'>')) {
                return false;
            }
            lower[j + 1..]
                .iter()
                .find(|b| !matches!(b, b' ' | b'\t' | b'(' | b'-'))
                .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        });
    }
    memchr::memmem::find_iter(lower, word).any(|i| {
        let mut j = i + word.len();
        while lower.get(j).is_some_and(|b| is_ident(*b)) {
            j += 1;
        }
        while lower.get(j).is_some_and(|b| *b == b' ' || *b == b'\t') {
            j += 1;
        }
        // An annotation (`bytes_per_param: int = 4`, a parameter's default).
        let annotated = lower.get(j) == Some(&b':');
        if annotated {
            j += 1;
            while lower.get(j).is_some_and(|b| {
                is_ident(*b) || matches!(b, b' ' | b'\t' | b'.' | b'[' | b']' | b'|')
            }) {
                j += 1;
            }
        }
        if lower.get(j) != Some(&b'=') || lower.get(j + 1) == Some(&b'=') {
            return false;
        }
        j += 1;
        while lower
            .get(j)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'('))
        {
            j += 1;
        }
        // A count of bytes is a number, not a sign (`-1`) or a tuple (`(1,)`).
        let digits = lower[j..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'e'))
            .count();
        // (An annotated name is a parameter or a declaration: a comma ends its default.)
        digits > 0
            && lower[j].is_ascii_digit() | (lower[j] == b'.')
            && (annotated || lower[j + digits..].trim_ascii_start().first() != Some(&b','))
    })
}
