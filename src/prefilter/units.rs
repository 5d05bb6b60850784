//! MEM004: decimal and binary units meet where a decimal divisor (10^9, 10^6) divides next to a
//! binary one (2^30, 2^20) or an assigned `_gib`/`_mib` name.

use super::scan::{is_ident, Scan};
use crate::expr::imports::submodule;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::sync::OnceLock;

/// Literal spellings of the divisors `unit_of_divisor` accepts, and whether each is binary
/// (2^30, 2^20) or decimal (10^9, 10^6). A spelling ending in `**` takes any exponent.
const DIVISORS: &[(&str, bool)] = &[
    ("1e9", false),
    ("1e-9", false),
    ("1e+9", false),
    ("1e6", false),
    ("1e-6", false),
    ("1e+6", false),
    ("1.0e9", false),
    ("1.0e6", false),
    ("10**9", false),
    ("10 ** 9", false),
    ("10**6", false),
    ("10 ** 6", false),
    ("1000**", false),
    ("1000 **", false),
    ("1000.0**", false),
    ("1000.0 **", false),
    ("1_000_000", false),
    ("1000000", false),
    ("1000 * 1000", false),
    ("1000*1000", false),
    ("1000 / 1000", false),
    ("1000/1000", false),
    ("1024**", true),
    ("1024 **", true),
    ("1024.0**", true),
    ("1024.0 **", true),
    ("2**30", true),
    ("2 ** 30", true),
    ("2**20", true),
    ("2 ** 20", true),
    ("2.0**30", true),
    ("<< 30", true),
    ("<<30", true),
    (">> 30", true),
    (">>30", true),
    ("<< 20", true),
    ("<<20", true),
    (">> 20", true),
    (">>20", true),
    ("1073741824", true),
    ("1048576", true),
    ("1_073_741_824", true),
    ("1_048_576", true),
    ("1024 * 1024", true),
    ("1024*1024", true),
    ("1024 / 1024", true),
    ("1024/1024", true),
    ("1024.0 / 1024", true),
    ("/ 1024) / 1024", true),
];

fn matcher(words: impl IntoIterator<Item = &'static str>, kind: MatchKind) -> Option<AhoCorasick> {
    AhoCorasickBuilder::new().match_kind(kind).build(words).ok()
}

impl Scan<'_> {
    /// A unit conversion (MEM004) is reported where decimal and binary units meet: a decimal
    /// divisor and either a binary one or a unit stated as GiB or MiB. Every way to write a divisor
    /// as literals holds one of `DIVISORS`; it counts where it divides, multiplies, shifts, or
    /// is assigned to a name that divides later (`GIB = 1024 ** 3`).
    pub(super) fn mixed_units(&self) -> bool {
        static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
        let Some(ac) = AC
            .get_or_init(|| matcher(DIVISORS.iter().map(|(w, _)| *w), MatchKind::LeftmostLongest))
        else {
            return true;
        };
        let (mut decimal, mut binary) = (false, false);
        for m in ac.find_iter(self.lower) {
            let Some(&(word, is_binary)) = DIVISORS.get(m.pattern().as_usize()) else {
                return true;
            };
            if !self.divides(m.start(), word) || !number_ends(self.lower, m.end(), word) {
                continue;
            }
            if is_binary {
                binary = true;
            } else {
                decimal = true;
            }
            if decimal && binary {
                return true;
            }
        }
        decimal && self.names_binary_unit()
    }

    /// Whether the divisor written at `at` divides, multiplies, shifts, or is assigned to a
    /// name that divides or multiplies later (`GIB = 1024 ** 3` ... `/ GIB`).
    fn divides(&self, at: usize, word: &str) -> bool {
        if word.starts_with(['<', '>', '/']) {
            return true;
        }
        let before = self.text[..at].trim_end_matches([' ', '\t', '(']);
        if before.ends_with(['/', '*']) {
            return true;
        }
        let Some(left) = before.strip_suffix('=') else {
            return false;
        };
        if left.ends_with(['/', '*']) {
            return true;
        }
        // An assignment statement, not a comparison, a keyword argument or a default.
        let line = &left[left.rfind('\n').map_or(0, |i| i + 1)..];
        let target = line.split(':').next().unwrap_or("").trim();
        if left.ends_with(['=', '!', '<', '>']) || target.contains(['(', ',', '[']) {
            return false;
        }
        let name = target.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        !name.is_empty() && self.used_as_factor(name.as_bytes())
    }

    /// `name` written after a `/` or a `*` (through `self.` or parentheses).
    fn used_as_factor(&self, name: &[u8]) -> bool {
        let lower = &self.lower;
        memchr::memmem::find_iter(lower, name).any(|i| {
            if lower.get(i + name.len()).is_some_and(|b| is_ident(*b))
                || (i > 0 && is_ident(lower[i - 1]))
            {
                return false;
            }
            let mut j = i;
            while j > 0 && (is_ident(lower[j - 1]) || lower[j - 1] == b'.') {
                j -= 1;
            }
            let before = self.text[..j].trim_end_matches([' ', '\t', '(']);
            before.ends_with(['/', '*'])
        })
    }

    /// A binary unit stated in words: a name that ends in it (`mem_gib`, camel-case
    /// `totalGiB`), a helper named for it (`def to_gib(`) or a label ("GiB"); each is read
    /// against a value divided into GB.
    fn names_binary_unit(&self) -> bool {
        let lower = &self.lower;
        [&b"gib"[..], b"mib"].iter().any(|unit| {
            memchr::memmem::find_iter(lower, unit).any(|i| {
                !lower
                    .get(i + unit.len())
                    .is_some_and(|b| b.is_ascii_alphanumeric())
            })
        })
    }
}

/// Whether a number written as `word` ends at `end` with the same value: not continued by a
/// digit, an exponent or a fraction other than zeros (`1000000.0` is 1e6, `1000000007` is not).
fn number_ends(lower: &[u8], end: usize, word: &str) -> bool {
    if !word.ends_with(|c: char| c.is_ascii_digit()) {
        return true;
    }
    match lower.get(end) {
        Some(b) if b.is_ascii_digit() || matches!(b, b'_' | b'e' | b'j') => false,
        Some(b'.') => lower[end + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .all(|b| *b == b'0'),
        _ => true,
    }
}

/// The divisors the text imports, each as the module written and the name it would define there:
/// `("units", "GIB")` for `/ GIB` after `from units import GIB` and for `/ units.GIB` after
/// `import units`; `("pkg.units", "GIB")` for `/ units.GIB` after `from pkg import units`.
pub fn imported_divisors(text: &str) -> Vec<(String, String)> {
    let imports = imports(text);
    if imports.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for at in memchr::memchr_iter(b'/', text.as_bytes()) {
        let rest = text[at + 1..].trim_start_matches(['/', ' ', '\t', '(']);
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let path: Vec<&str> = rest[..end].split('.').collect();
        let (first, last) = (path[0], path[path.len() - 1]);
        if first.is_empty() || last.is_empty() || first.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let middle = &path[1..path.len().saturating_sub(1).max(1)];
        for import in imports.iter().filter(|i| i.bound == first) {
            let found = match (&import.name, path.len()) {
                (Some(name), 1) => (import.module.clone(), name.clone()),
                // A module imported whole: the divisor is its attribute.
                (None, 1) => continue,
                (Some(sub), _) => (submodule(&import.module, sub), last.to_string()),
                (None, _) => (import.module.clone(), last.to_string()),
            };
            let found = match middle {
                [] => found,
                _ => (format!("{}.{}", found.0, middle.join(".")), found.1),
            };
            if !out.contains(&found) {
                out.push(found);
            }
        }
    }
    out
}

/// One name an import statement binds: `from module import name as bound`, or
/// `import module as bound` (no name).
struct Import {
    bound: String,
    module: String,
    name: Option<String>,
}

/// The names the import statements of `text` bind (`from m import a, b as c` binds `a` and
/// `c`; `import pkg.m as u` binds `u`, `import m` binds `m`).
fn imports(text: &str) -> Vec<Import> {
    let mut out = Vec::new();
    // Each line that holds `import`, found without reading the others.
    let mut next = 0;
    for at in memchr::memmem::find_iter(text.as_bytes(), b"import") {
        if at < next {
            continue;
        }
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let mut lines = text[start..].lines();
        let Some(line) = lines.next() else {
            continue;
        };
        next = start + line.len();
        let line = line.trim_start();
        let (from, names) = if let Some(rest) = line.strip_prefix("from ") {
            let Some((module, names)) = rest.split_once(" import ") else {
                continue;
            };
            (Some(module.trim()), names)
        } else if let Some(rest) = line.strip_prefix("import ") {
            (None, rest)
        } else {
            continue;
        };
        let mut names = names.to_string();
        // `from m import (a,\n b)`: the names run to the closing bracket.
        if names.contains('(') && !names.contains(')') {
            for more in lines.by_ref() {
                names.push_str(more);
                if more.contains(')') {
                    break;
                }
            }
        }
        for name in names.split([',', '(', ')']) {
            let name = name.split('#').next().unwrap_or("").trim();
            let (written, bound) = match name.rsplit_once(" as ") {
                Some((w, b)) => (w.trim(), b.trim()),
                None => (name, name.split('.').next().unwrap_or(name)),
            };
            if bound.is_empty() || written.is_empty() {
                continue;
            }
            out.push(match from {
                Some(module) => Import {
                    bound: bound.to_string(),
                    module: module.to_string(),
                    name: Some(written.to_string()),
                },
                None => Import {
                    bound: bound.to_string(),
                    module: if name.contains(" as ") {
                        written
                    } else {
                        bound
                    }
                    .to_string(),
                    name: None,
                },
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::imported_divisors;

    fn pairs(text: &str) -> Vec<(&'static str, &'static str)> {
        let found = imported_divisors(text);
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        found.into_iter().map(|(m, n)| (leak(m), leak(n))).collect()
    }

    #[test]
    fn names_the_module_and_the_name_of_each_imported_divisor() {
        assert_eq!(
            pairs("from units import GIB\nx = b / GIB\n"),
            [("units", "GIB")]
        );
        assert_eq!(
            pairs("from .units import GB as G\nx = b / (G)\n"),
            [(".units", "GB")]
        );
        assert_eq!(
            pairs("import units as u\nx = b / u.GIB\n"),
            [("units", "GIB")]
        );
        assert_eq!(
            pairs("from pkg import units\nx = b // units.GIB\n"),
            [("pkg.units", "GIB")]
        );
        assert_eq!(
            pairs("from . import (\n    units,\n)\nx = b / units.GIB\n"),
            [(".units", "GIB")]
        );
        assert_eq!(
            pairs("import pkg.units\nx = b / pkg.units.GIB\n"),
            [("pkg.units", "GIB")]
        );
        // A library's attribute is named too; whether it is in the project is the loader's
        // question. A module imported whole is never a divisor, nor a name not imported.
        assert_eq!(pairs("import math\nx = b / math.pi\n"), [("math", "pi")]);
        assert!(pairs("import units\nx = b / units\n").is_empty());
        assert!(pairs("from units import GIB\nx = b / gib / 2\n").is_empty());
        assert!(pairs("x = b / GIB\n").is_empty());
    }
}
