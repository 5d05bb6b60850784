//! The documentation against what it documents: the README's options table against
//! `memlint --help`, the values the README gives `memlint estimate`'s flags against what the
//! command accepts, and the rule pages' citations against the files of this repository.

mod common;

use common::{memlint, project};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

fn help(args: &[&str]) -> String {
    let dir = project(&[]);
    let out = memlint(dir.path())
        .args(args)
        .env("COLUMNS", "200")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--flag` and `-f` tokens of a text.
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'-';
    let mut i = 0;
    while i < b.len() {
        let starts = b[i] == b'-' && (i == 0 || !word(b[i - 1]) && b[i - 1] != b'[');
        if starts {
            let mut j = i + 1;
            if b.get(j) == Some(&b'-') {
                j += 1;
            }
            let name_start = j;
            while j < b.len() && word(b[j]) {
                j += 1;
            }
            let name = &text[name_start..j];
            let long = j - i - name.len() == 2;
            let valid = if long {
                name.len() > 1 && name.as_bytes()[0].is_ascii_alphabetic()
            } else {
                name.len() == 1 && name.as_bytes()[0].is_ascii_alphabetic()
            };
            if valid {
                out.insert(text[i..j].to_string());
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The flags `--help` lists under `Options:` (the option lines, not their descriptions).
fn help_flags(text: &str) -> BTreeSet<String> {
    let options = text.split("Options:").nth(1).expect("an Options section");
    options
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            // `-q, --quiet`, `--select <SELECT>`: the flags before the value name or description.
            let head = l.split("  ").next().unwrap_or(l);
            flags_in(head.split('<').next().unwrap_or(head))
        })
        .collect()
}

/// The flags of the README's options table (its first column).
fn table_flags(readme: &str) -> BTreeSet<String> {
    let table = readme
        .split("| option | meaning |")
        .nth(1)
        .expect("the options table");
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            let first = l.split(" | ").next().unwrap_or("");
            flags_in(first)
        })
        .collect()
}

#[test]
fn the_readme_table_lists_every_flag_of_help_and_nothing_else() {
    let from_help = help_flags(&help(&["--help"]));
    let from_table = table_flags(&readme());
    assert!(from_help.contains("--stdin-filename") && from_help.contains("-q"));
    let missing: Vec<&String> = from_help.difference(&from_table).collect();
    let extra: Vec<&String> = from_table.difference(&from_help).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README options table: missing {missing:?} (listed by --help), extra {extra:?} (not in --help)"
    );
    // `memlint check --help` lists the same flags but the version.
    let mut check = help_flags(&help(&["check", "--help"]));
    check.extend(["-V".to_string(), "--version".to_string()]);
    assert_eq!(check, from_help);
}

#[test]
fn the_comparison_sees_a_flag_missing_from_either_side() {
    let table =
        "| option | meaning |\n|---|---|\n| `--fix` | x |\n| `-q`, `--quiet` | y |\n\nafter";
    assert_eq!(
        table_flags(table),
        ["--fix", "--quiet", "-q"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    let help = "Usage: memlint\n\nOptions:\n      --fix\n          Apply safe fixes (with --diff)\n  -q, --quiet\n          Print\n      --select <SELECT>\n          Codes\n";
    assert_eq!(
        help_flags(help),
        ["--fix", "--quiet", "-q", "--select"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

/// `--flag a|b|c` in the paragraph of the README that lists `memlint estimate`'s flags.
fn readme_estimate_values(readme: &str) -> Vec<(String, Vec<String>)> {
    let start = readme
        .find("Flags: `--model")
        .expect("the estimate flags paragraph");
    let para = &readme[start..];
    let para = &para[..para.find("\n\n").unwrap_or(para.len())];
    let mut out = Vec::new();
    for piece in para.split('`') {
        let Some(rest) = piece.strip_prefix("--") else {
            continue;
        };
        let Some((flag, values)) = rest.split_once(' ') else {
            continue;
        };
        let values: Vec<String> = values.split('|').map(str::to_string).collect();
        let plain = values.iter().all(|v| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
        if values.len() > 1 && plain {
            out.push((flag.to_string(), values));
        }
    }
    out
}

/// `--flag` and its `[possible values: ...]` in `memlint estimate --help`.
fn help_estimate_values(help: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut flag: Option<String> = None;
    for line in help.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--") {
            flag = Some(rest.split([' ', '<']).next().unwrap_or("").to_string());
        }
        if let (Some(f), Some(at)) = (&flag, line.find("[possible values: ")) {
            let list = &line[at + "[possible values: ".len()..];
            let list = &list[..list.find(']').unwrap_or(list.len())];
            out.push((f.clone(), list.split(", ").map(str::to_string).collect()));
        }
    }
    out
}

#[test]
fn the_readme_gives_estimate_flags_the_values_the_command_accepts() {
    let readme = readme_estimate_values(&readme());
    let help: Vec<(String, Vec<String>)> = help_estimate_values(&help(&["estimate", "--help"]))
        .into_iter()
        .filter(|(f, _)| f != "output-format")
        .collect();
    assert!(help.iter().any(|(f, _)| f == "fsdp"), "{help:?}");
    // A flag whose values --help lists: the README lists the same.
    for (flag, values) in &help {
        let written = readme.iter().find(|(f, _)| f == flag);
        assert_eq!(
            written.map(|(_, v)| v),
            Some(values),
            "README's `--{flag}` against `memlint estimate --help`"
        );
    }
    // Every value the README gives, and FSDP's own spellings, the command takes.
    let dir = project(&[]);
    let mut tried = 0;
    for (flag, values) in &readme {
        let extra: &[&str] = if flag == "fsdp" {
            &["full_shard", "FULL_SHARD", "shard_grad_op", "HYBRID_SHARD"]
        } else {
            &[]
        };
        for v in values
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
        {
            let out = memlint(dir.path())
                .args([
                    "estimate",
                    "--model",
                    "meta-llama/Llama-2-7b-hf",
                    "--dp",
                    "8",
                ])
                .arg(format!("--{flag}"))
                .arg(v)
                .output()
                .expect("run");
            assert_eq!(
                out.status.code(),
                Some(0),
                "--{flag} {v}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tried += 1;
        }
    }
    assert!(tried > 20, "{readme:?}");
}

/// Documents outside this repository that the project's own text once cited.
const OUTSIDE: &[&str] = &[
    "KNOWLEDGE.md",
    "PRODUCT.md",
    "RULES.md",
    "ECOSYSTEM.md",
    "ANCHORS.md",
    "../shared",
    "/work/",
];

/// Where a path written in the text points into this repository.
const REPO_PREFIXES: &[&str] = &[
    "docs/knowledge.md",
    "docs/measure/",
    "rules/",
    "fixtures/",
    "scripts/",
    "bench/",
    "tests/",
    "https://github.com/memlint/memlint/blob/main/",
];

/// Paths into this repository written in `text` (relative to its root), and the links to it.
/// A path that is part of another URL is not one.
fn repo_paths(text: &str) -> Vec<String> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./-#:".contains(c);
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let before = text[..i].chars().next_back();
        let boundary = before.is_none_or(|c| !path_char(c) || c == ':' || c == '#');
        let prefix = REPO_PREFIXES.iter().find(|p| rest.starts_with(**p));
        match prefix {
            Some(p) if boundary => {
                let len = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
                let mut token = &rest[..len];
                token = token.split('#').next().unwrap_or(token);
                // `launch.sh:10`: a line of the file.
                if !token.starts_with("https://") {
                    token = token.split(':').next().unwrap_or(token);
                }
                let token = token.trim_end_matches(['.', ',', ':', ';']);
                let rel = token
                    .strip_prefix("https://github.com/memlint/memlint/blob/main/")
                    .unwrap_or(token);
                out.push(rel.to_string());
                i += len.max(p.len());
            }
            _ => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// Problems with the citations of one text: documents outside the repository, paths into it that
/// do not exist, and (with `strict`) a `.md` or `.rst` named outside a URL that is not a file of
/// the repository.
fn citation_problems(name: &str, text: &str, strict: bool) -> Vec<String> {
    let mut out = Vec::new();
    for o in OUTSIDE {
        if text.contains(o) {
            out.push(format!(
                "{name} cites `{o}`, which is not in this repository"
            ));
        }
    }
    for p in repo_paths(text) {
        if !root().join(&p).exists() {
            out.push(format!("{name} points to `{p}`, which does not exist"));
        }
    }
    if strict {
        for word in text.split(|c: char| c.is_whitespace() || "`()[]\"',;".contains(c)) {
            let bare = word.trim_end_matches(['.', ':']);
            let doc = bare.ends_with(".md") || bare.ends_with(".rst");
            if doc && !bare.contains("://") && !root().join(bare).is_file() {
                out.push(format!(
                    "{name} names `{bare}`, which is not a file of this repository"
                ));
            }
        }
    }
    // `docs/knowledge.md §N` names a section it has.
    let knowledge = std::fs::read_to_string(root().join("docs/knowledge.md")).unwrap_or_default();
    for (at, _) in text.match_indices("docs/knowledge.md §") {
        let n: String = text[at + "docs/knowledge.md §".len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !n.is_empty() && !knowledge.contains(&format!("\n## {n}. ")) {
            out.push(format!(
                "{name} cites docs/knowledge.md §{n}, which it does not have"
            ));
        }
    }
    // A measurement `[M#]` is one the knowledge index lists.
    for (at, _) in text.match_indices("[M") {
        let id: String = text[at + 2..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !id.is_empty() && !knowledge.contains(&format!("\n| M{id} |")) {
            out.push(format!(
                "{name} cites measurement M{id}, which docs/knowledge.md does not index"
            ));
        }
    }
    out
}

fn toml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn pages_cite_only_what_the_repository_holds() {
    let mut problems = Vec::new();
    let mut pages = 0;
    for path in toml_files("rules")
        .into_iter()
        .chain(toml_files("rules/knowledge"))
    {
        let text = std::fs::read_to_string(&path).expect("read page");
        let name = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        problems.extend(citation_problems(&name, &text, true));
        // Each reference of a rule page gives a link or a file of this repository.
        if let Ok(page) = toml::from_str::<toml::Table>(&text) {
            let refs = page.get("references").and_then(|r| r.as_array());
            for r in refs.into_iter().flatten().filter_map(|r| r.as_str()) {
                let local = repo_paths(r).iter().any(|p| root().join(p).exists())
                    || r.starts_with("README.md");
                if !r.contains("https://") && !local {
                    problems.push(format!("{name}: reference without a link: {r}"));
                }
            }
            pages += usize::from(page.contains_key("references"));
        }
    }
    for doc in ["README.md", "ARCHITECTURE.md", "docs/measure/README.md"] {
        let text = std::fs::read_to_string(root().join(doc)).expect("read doc");
        problems.extend(citation_problems(doc, &text, false));
    }
    let knowledge = std::fs::read_to_string(root().join("docs/knowledge.md")).expect("knowledge");
    problems.extend(citation_problems("docs/knowledge.md", &knowledge, false));
    assert!(pages >= 27, "{pages} rule pages read");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_citation_check_finds_what_it_looks_for() {
    let page = "references = [\n  \"KNOWLEDGE.md §5a [M9]\",\n  \"docs/knowledge.md §42\",\n  \"docs/measure/nope.py\",\n  \"see https://github.com/memlint/memlint/blob/main/rules/NOPE.toml#x\",\n  \"PRODUCT.md (suppression)\",\n  \"[M99]\",\n]";
    let found = citation_problems("page", page, true);
    for expected in [
        "cites `KNOWLEDGE.md`",
        "cites `PRODUCT.md`",
        "cites docs/knowledge.md §42",
        "points to `docs/measure/nope.py`",
        "points to `rules/NOPE.toml`",
        "names `KNOWLEDGE.md`",
        "measurement M99",
    ] {
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{expected}: {found:?}"
        );
    }
    let fine = "docs/knowledge.md §5a [M9]; docs/measure/measure_grad_accum.py; rules/knowledge/dtypes.toml; \
                https://github.com/pytorch/pytorch/blob/v2.15.0/torch/optim/adam.py#L179-L188; \
                https://github.com/memlint/memlint/blob/main/README.md#suppression";
    assert_eq!(citation_problems("page", fine, true), Vec::<String>::new());
    assert_eq!(
        repo_paths("a https://github.com/x/y/blob/main/rules/Z.toml b rules/GA001.toml."),
        ["rules/GA001.toml"]
    );
}
