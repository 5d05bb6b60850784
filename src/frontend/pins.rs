//! Dependency pins: the version constraints of `requirements*.txt` files (PEP 508 lines) and of
//! `pyproject.toml` (`[project]` dependencies, optional dependencies and dependency groups, and
//! Poetry's tables), each lowered to the highest version it admits.

use crate::config::{Node, Value};
use crate::facts::{Ceiling, Pin};

/// The pins of a requirements file, one requirement per line. Options (`-r`, `-e`,
/// `--index-url`), URLs and continued lines are not requirements memlint reads.
pub fn requirements(text: &str) -> Vec<Pin> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        // A comment starts at `#` at the line's start or after whitespace.
        let end = line
            .char_indices()
            .find(|&(i, c)| c == '#' && (i == 0 || line[..i].ends_with([' ', '\t'])))
            .map_or(line.len(), |(i, _)| i);
        let body = &line[..end];
        let trimmed = body.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('-') || body.trim_end().ends_with('\\') {
            continue;
        }
        let lead = body.len() - trimmed.len();
        out.extend(requirement(trimmed.trim_end(), start + lead));
    }
    out
}

/// The pins of a `pyproject.toml` document.
pub fn pyproject(root: &Node, text: &str) -> Vec<Pin> {
    let mut out = Vec::new();
    let mut strings = |list: Option<&Node>| {
        if let Some(Value::List(items)) = list.map(|n| &n.value) {
            for item in items {
                if let Some(s) = item.as_str() {
                    let (inner, at) = unquoted(item, text);
                    if inner == s {
                        out.extend(requirement(s, at));
                    }
                }
            }
        }
    };
    let project = root.get("project");
    strings(project.and_then(|p| p.get("dependencies")));
    for group in [
        project.and_then(|p| p.get("optional-dependencies")),
        root.get("dependency-groups"),
    ] {
        if let Some(Value::Map(groups)) = group.map(|g| &g.value) {
            for (_, list) in groups {
                strings(Some(list));
            }
        }
    }
    let poetry = root.get("tool").and_then(|t| t.get("poetry"));
    let mut tables = vec![poetry.and_then(|p| p.get("dependencies"))];
    if let Some(Value::Map(groups)) = poetry.and_then(|p| p.get("group")).map(|g| &g.value) {
        tables.extend(groups.iter().map(|(_, g)| g.get("dependencies")));
    }
    for table in tables.into_iter().flatten() {
        let Value::Map(entries) = &table.value else {
            continue;
        };
        for (key, value) in entries {
            // `name = "^4.45"` or `name = { version = "^4.45", extras = [...] }`.
            let spec = value.as_str().or_else(|| value.get("version")?.as_str());
            if let Some(spec) = spec {
                out.push(Pin {
                    package: normalise(&key.name),
                    span: key.span.start..value.span.end,
                    ceiling: poetry_ceiling(spec),
                });
            }
        }
    }
    out
}

/// The text of a string node without its quotes, and where that text starts.
fn unquoted<'t>(node: &Node, text: &'t str) -> (&'t str, usize) {
    let raw = text.get(node.span.clone()).unwrap_or("");
    let quote = raw.chars().next().filter(|c| *c == '"' || *c == '\'');
    match quote {
        Some(q) if raw.len() >= 2 && raw.ends_with(q) && !raw.starts_with("\"\"\"") => {
            (&raw[1..raw.len() - 1], node.span.start + 1)
        }
        _ => (raw, node.span.start),
    }
}

/// One PEP 508 requirement (`transformers[torch]==4.45.2 ; python_version >= "3.9"`) at `at`.
fn requirement(text: &str, at: usize) -> Option<Pin> {
    let name_len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(text.len());
    if name_len == 0 {
        return None;
    }
    let package = normalise(&text[..name_len]);
    // The specifiers run to the markers; a URL (`name @ git+https://...`) pins no version.
    let end = text.find(';').unwrap_or(text.len());
    let rest = &text[name_len..end];
    let rest = match rest.trim_start().strip_prefix('[') {
        Some(extras) => extras.split_once(']').map_or("", |(_, r)| r),
        None => rest,
    };
    let rest = rest.trim();
    if rest.starts_with('@') {
        return None;
    }
    let spec = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or(rest);
    Some(Pin {
        package,
        span: at..at + text[..end].trim_end().len(),
        ceiling: pep440_ceiling(spec),
    })
}

/// PEP 503 normalisation: lower case, runs of `-`, `_` and `.` as one `-`.
fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The lowest upper bound of comma-separated PEP 440 specifiers.
fn pep440_ceiling(spec: &str) -> Option<Ceiling> {
    lowest(spec.split(',').map(|clause| {
        let clause = clause.trim();
        let op_len = clause
            .find(|c: char| !matches!(c, '=' | '<' | '>' | '~' | '!'))
            .unwrap_or(clause.len());
        let (op, version) = clause.split_at(op_len);
        bound(op, version.trim())
    }))
}

/// The upper bound one `op version` clause sets.
fn bound(op: &str, version: &str) -> Option<Ceiling> {
    if let Some(prefix) = version.strip_suffix(".*") {
        // `==4.45.*` admits 4.45.x only.
        let (release, _) = release(prefix)?;
        return (op == "==").then(|| bumped(&release, release.len()))?;
    }
    let (release, pre) = release(version)?;
    match op {
        // A pre-release or development release comes before its release.
        "==" | "===" | "<=" => Some(Ceiling {
            release,
            inclusive: !pre,
        }),
        "<" => Some(Ceiling {
            release,
            inclusive: false,
        }),
        // `~=4.45.2` admits `4.45.*`; `~=4.45`, `4.*`.
        "~=" if release.len() >= 2 => bumped(&release, release.len() - 1),
        _ => None,
    }
}

/// Poetry's constraints: `^4.45`, `~4.45`, a bare version (exact), or PEP 440 clauses.
fn poetry_ceiling(spec: &str) -> Option<Ceiling> {
    let spec = spec.trim();
    if spec.contains("||") {
        return None;
    }
    lowest(spec.split(',').map(|clause| {
        let clause = clause.trim();
        if let Some(v) = clause.strip_prefix('^') {
            // The first non-zero part is the one that may not change.
            let (release, _) = release(v.trim())?;
            let keep = release
                .iter()
                .position(|p| *p != 0)
                .unwrap_or(release.len() - 1);
            return bumped(&release, keep + 1);
        }
        if let Some(v) = clause.strip_prefix('~').filter(|v| !v.starts_with('=')) {
            let (release, _) = release(v.trim())?;
            return bumped(&release, release.len().clamp(1, 2));
        }
        if clause.starts_with(|c: char| c.is_ascii_digit()) {
            return bound("==", clause);
        }
        pep440_ceiling(clause)
    }))
}

fn lowest(bounds: impl Iterator<Item = Option<Ceiling>>) -> Option<Ceiling> {
    bounds.flatten().min_by(|a, b| {
        crate::facts::compare_releases(&a.release, &b.release)
            .then_with(|| a.inclusive.cmp(&b.inclusive))
    })
}

/// The first `keep` parts of `release` with the last of them raised by one, excluded:
/// `bumped([4, 45, 2], 2)` is `< 4.46`.
fn bumped(release: &[u64], keep: usize) -> Option<Ceiling> {
    let mut parts: Vec<u64> = release.get(..keep)?.to_vec();
    let last = parts.last_mut()?;
    *last = last.checked_add(1)?;
    Some(Ceiling {
        release: parts,
        inclusive: false,
    })
}

/// The release numbers of a version (`v4.45.2` → `[4, 45, 2]`), and whether a pre-release or
/// development suffix follows them. An epoch (`1!2.0`) is not read.
fn release(version: &str) -> Option<(Vec<u64>, bool)> {
    let v = version.trim().trim_start_matches(['v', 'V']);
    if v.contains('!') {
        return None;
    }
    let mut parts = Vec::new();
    let mut rest = v;
    loop {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            break;
        }
        parts.push(rest[..digits].parse().ok()?);
        rest = &rest[digits..];
        match rest.strip_prefix('.') {
            Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => rest = r,
            _ => break,
        }
    }
    if parts.is_empty() {
        return None;
    }
    let suffix = rest
        .trim_start_matches(['.', '-', '_'])
        .to_ascii_lowercase();
    let pre = [
        "a", "b", "c", "rc", "alpha", "beta", "pre", "preview", "dev",
    ]
    .iter()
    .any(|p| suffix.starts_with(p));
    Some((parts, pre))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceiling(line: &str) -> Option<(Vec<u64>, bool)> {
        let pins = requirements(line);
        let c = pins.first()?.ceiling.clone()?;
        Some((c.release, c.inclusive))
    }

    #[test]
    fn requirement_lines() {
        assert_eq!(
            ceiling("transformers==4.45.2\n"),
            Some((vec![4, 45, 2], true))
        );
        assert_eq!(ceiling("transformers<4.46\n"), Some((vec![4, 46], false)));
        assert_eq!(
            ceiling("transformers >=4.40, <4.46.0 ; python_version>'3.8'  # old\n"),
            Some((vec![4, 46, 0], false))
        );
        assert_eq!(
            ceiling("transformers~=4.45.0\n"),
            Some((vec![4, 46], false))
        );
        assert_eq!(ceiling("transformers~=4.45\n"), Some((vec![5], false)));
        assert_eq!(
            ceiling("transformers==4.45.*\n"),
            Some((vec![4, 46], false))
        );
        assert_eq!(
            ceiling("transformers==4.46.0rc1\n"),
            Some((vec![4, 46, 0], false))
        );
        assert_eq!(
            ceiling("transformers[torch]<=4.45.2\n"),
            Some((vec![4, 45, 2], true))
        );
        assert_eq!(ceiling("transformers>=4.46\n"), None);
        assert_eq!(ceiling("transformers\n"), None);
        assert!(requirements("transformers @ git+https://github.com/x/y@v4.45.0\n").is_empty());
        assert!(requirements("-r base.txt\n# transformers==4.0\n--index-url x\n").is_empty());
        let pins = requirements("torch\nTransformers_Pkg==1.0  # note\n");
        assert_eq!(pins[1].package, "transformers-pkg");
        let text = "torch\nTransformers_Pkg==1.0  # note\n";
        assert_eq!(&text[pins[1].span.clone()], "Transformers_Pkg==1.0");
    }

    #[test]
    fn poetry_constraints() {
        let c = |s: &str| poetry_ceiling(s).map(|c| (c.release, c.inclusive));
        assert_eq!(c("^4.45"), Some((vec![5], false)));
        assert_eq!(c("^0.4.2"), Some((vec![0, 5], false)));
        assert_eq!(c("~4.45"), Some((vec![4, 46], false)));
        assert_eq!(c("4.45.2"), Some((vec![4, 45, 2], true)));
        assert_eq!(c(">=4.40,<4.46"), Some((vec![4, 46], false)));
        assert_eq!(c("*"), None);
        assert_eq!(c("^4.40 || ^5.0"), None);
    }

    #[test]
    fn below_a_release() {
        let c = |release: Vec<u64>, inclusive| Ceiling { release, inclusive };
        assert!(c(vec![4, 46], false).below(&[4, 46, 0]));
        assert!(!c(vec![4, 46, 0], true).below(&[4, 46, 0]));
        assert!(c(vec![4, 45, 2], true).below(&[4, 46, 0]));
        assert!(!c(vec![4, 46, 1], false).below(&[4, 46, 0]));
    }
}
