//! The shape of the crate, drawn from its own source: every `crate::`, `super::` and `self::` path
//! under `src/` is an import from one module (a file) to another. The crate's layers are declared
//! once, in [`LAYERS`], and `ARCHITECTURE.md` must name the same ones in the same order.
//!
//! What fails:
//! - an import from a lower layer to a higher one;
//! - a circle of imports between files, or between top-level modules (rooms) of one layer;
//! - the invariants `ARCHITECTURE.md` states: rules never import a frontend; only frontends name
//!   tree-sitter; only reporters name miette;
//! - a module no layer names, or a layer naming a module that does not exist;
//! - a file under `src/` longer than [`MAX_LINES`].
//!
//! A folder's `mod.rs` names its own submodules to declare, register and re-export them
//! (`mod json;`, `json::parse`, `pub use full::render_full`): those paths are not imports, so a
//! submodule may import what its parent defines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, bottom to top, and the top-level modules of each. A module may import from its
/// own layer and the layers below it, never from a layer above.
const LAYERS: &[(&str, &[&str])] = &[
    ("foundation", &["diagnostic", "knowledge"]),
    ("sources", &["source"]),
    ("readers", &["config"]),
    ("facts", &["expr", "facts"]),
    ("frontends", &["frontend"]),
    ("model", &["context", "project", "estimate"]),
    ("rules", &["rules"]),
    ("suppression", &["suppress"]),
    ("pipeline", &["settings", "discover", "prefilter", "lint"]),
    ("output", &["fix", "report"]),
    ("commands", &["cli", "server"]),
];

/// Imports between top-level modules that the layers allow but the design does not.
const FORBIDDEN: &[(&str, &str, &str)] = &[(
    "rules",
    "frontend",
    "rules read facts and the model, never a frontend",
)];

/// External crates only some top-level modules may name.
const CONFINED: &[(&str, &[&str], &str)] = &[
    (
        "tree_sitter",
        &["frontend"],
        "syntax trees stay in the frontends",
    ),
    ("miette", &["report"], "reporters alone know output formats"),
];

/// No file under `src/` is longer than this.
const MAX_LINES: usize = 1200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One Rust source file of the library: its module path and its text.
struct File {
    /// `src/frontend/shell/mod.rs`
    rel: String,
    /// `["frontend", "shell"]`; the crate root is `[]`.
    module: Vec<String>,
    text: String,
}

fn library_files() -> Vec<File> {
    let src = root().join("src");
    let mut paths = Vec::new();
    collect_rs(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p != &src.join("main.rs")) // the binary: a crate of its own
        .map(|p| {
            let rel_src = p.strip_prefix(&src).expect("under src");
            let mut module: Vec<String> = rel_src
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod") | Some("lib")) {
                module.pop();
            }
            File {
                rel: format!("src/{}", rel_src.to_string_lossy().replace('\\', "/")),
                module,
                text: std::fs::read_to_string(&p).expect("read source"),
            }
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text with comments, strings and character literals blanked (newlines kept), so that only
/// code is read.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && ident(b[i - 1]);
        if b[i..].starts_with(b"//") {
            let end = memchr(b'\n', &b[i..]).map_or(b.len(), |e| i + e);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !prev_ident && (b[i] == b'r' || b[i..].starts_with(b"br")) && raw_start(b, i) {
            let start = if b[i] == b'b' { i + 2 } else { i + 1 };
            let hashes = b[start..].iter().take_while(|c| **c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = start + hashes + 1;
            let end = find(&b[body..], &close).map_or(b.len(), |e| body + e + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal (`'a'`, `'\n'`, `'é'`), or a lifetime (`'a`), left as is.
            let end = if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                Some(j + 1)
            } else {
                let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + c) == Some(&b'\'')).then_some(i + 2 + c)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"`, `r#"`, `br"`, `br#"` start a raw string at `i`.
fn raw_start(b: &[u8], i: usize) -> bool {
    let start = if b[i] == b'b' { i + 2 } else { i + 1 };
    let hashes = b[start..].iter().take_while(|c| **c == b'#').count();
    b.get(start + hashes) == Some(&b'"')
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|c| *c == needle)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

/// Tokens of code, each with its 1-based line.
fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            out.push((Tok::Ident(code[start..i].to_string()), line));
        } else if b[i..].starts_with(b"::") {
            out.push((Tok::Colons, line));
            i += 2;
        } else {
            out.push((
                match c {
                    b'{' => Tok::Open,
                    b'}' => Tok::Close,
                    b',' => Tok::Comma,
                    b'*' => Tok::Star,
                    _ => Tok::Other,
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

/// One path written in a file: where, as written, and the module path it names (items
/// included: `crate::config::Node` is `["config", "Node"]`).
struct Import {
    line: usize,
    written: String,
    target: Vec<String>,
}

/// Every `crate::`, `super::` and `self::` path of a file, use-groups expanded, resolved
/// against the module (inline modules such as `mod tests { ... }` included) it is written in.
fn imports(file: &File) -> Vec<Import> {
    let toks = tokens(&code_only(&file.text));
    let mut out = Vec::new();
    // Inline modules: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Open => depth += 1,
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Open, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Tok::Ident(first)
                if matches!(first.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Colons)
                    && !(i > 0 && toks[i - 1].0 == Tok::Colons) =>
            {
                let mut here = file.module.clone();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                let line = toks[i].1;
                let (paths, next) = path_at(&toks, i);
                for segs in paths {
                    if let Some(target) = resolve(&here, &segs) {
                        out.push(Import {
                            line,
                            written: segs.join("::"),
                            target,
                        });
                    }
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths starting at token `i` (several for a use-group), and the token after them.
fn path_at(toks: &[(Tok, usize)], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
            }
            _ => return (vec![prefix], i),
        }
        if toks.get(i).map(|t| &t.0) != Some(&Tok::Colons) {
            return (vec![prefix], i);
        }
        i += 1;
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Open) => {
                let (paths, next) = group_at(toks, i + 1, &prefix);
                return (paths, next);
            }
            Some(Tok::Star) => return (vec![prefix], i + 1),
            _ => {}
        }
    }
}

/// The items of a use-group whose `{` is just before token `i`, each prefixed.
fn group_at(toks: &[(Tok, usize)], mut i: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut out = Vec::new();
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Close => return (out, i + 1),
            Tok::Comma | Tok::Star => i += 1,
            Tok::Ident(s) if s == "self" => {
                out.push(prefix.to_vec());
                i += 1;
            }
            Tok::Ident(s) if s == "as" => i += 2,
            Tok::Ident(_) => {
                let (paths, next) = path_at(toks, i);
                for p in paths {
                    let mut full = prefix.to_vec();
                    full.extend(p);
                    out.push(full);
                }
                i = next;
            }
            _ => i += 1,
        }
    }
    (out, i)
}

/// The absolute path a `crate::`/`super::`/`self::` path names, written in module `here`.
fn resolve(here: &[String], segs: &[String]) -> Option<Vec<String>> {
    let mut at: Vec<String> = here.to_vec();
    let mut rest = segs;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        at.pop()?;
        rest = &rest[1..];
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// The file module a path lands in: its longest prefix that is a file.
fn file_of<'m>(modules: &'m BTreeSet<Vec<String>>, path: &[String]) -> &'m Vec<String> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]))
        .expect("the crate root is a module")
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// An import from one file module to another.
struct Edge {
    from: Vec<String>,
    to: Vec<String>,
    at: String,
    written: String,
}

fn edges(files: &[File]) -> Vec<Edge> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for f in files {
        for imp in imports(f) {
            let to = file_of(&modules, &imp.target);
            if *to != f.module && seen.insert((f.module.clone(), to.clone(), imp.line)) {
                out.push(Edge {
                    from: f.module.clone(),
                    to: to.clone(),
                    at: format!("{}:{}", f.rel, imp.line),
                    written: imp.written,
                });
            }
        }
    }
    out
}

/// The layer index of a module (`None` for the crate root, which declares everything).
fn layer_of(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top.as_str()))
}

/// Circles in a graph: the strongly connected components with more than one node.
fn circles(
    nodes: &BTreeSet<String>,
    arcs: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iteratively.
    let ids: Vec<&String> = nodes.iter().collect();
    let index_of: BTreeMap<&String, usize> = ids.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> = ids
        .iter()
        .map(|n| {
            arcs.get(*n)
                .into_iter()
                .flatten()
                .filter_map(|m| index_of.get(m).copied())
                .collect()
        })
        .collect();
    let n = ids.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut out) = (Vec::new(), 0, Vec::new());
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work = vec![(start, 0usize)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = succ[v].get(*k) {
                *k += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(u, _)) = work.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    scc.push(ids[w].clone());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    out.push(scc);
                }
            }
        }
    }
    out
}

fn circle_report(
    what: &str,
    edges: &[Edge],
    key: impl Fn(&[String]) -> String,
    problems: &mut Vec<String>,
) {
    let mut nodes = BTreeSet::new();
    let mut arcs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in edges {
        let (a, b) = (key(&e.from), key(&e.to));
        nodes.insert(a.clone());
        nodes.insert(b.clone());
        if a != b {
            arcs.entry(a).or_default().insert(b);
        }
    }
    for scc in circles(&nodes, &arcs) {
        let mut msg = format!("a circle of imports between {what}: {}", scc.join(", "));
        for e in edges {
            let (a, b) = (key(&e.from), key(&e.to));
            if a != b && scc.contains(&a) && scc.contains(&b) {
                let _ = write!(msg, "\n    {} -> {}: `{}` at {}", a, b, e.written, e.at);
            }
        }
        problems.push(msg);
    }
}

/// Everything wrong with the crate's shape, one sentence (and its evidence) each.
fn problems(files: &[File]) -> Vec<String> {
    let mut problems = Vec::new();
    let edges = edges(files);

    let tops: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.module.first().map(String::as_str))
        .collect();
    for top in &tops {
        if layer_of(&[top.to_string()]).is_none() {
            problems.push(format!("module `{top}` is in no layer: add it to LAYERS"));
        }
    }
    for (layer, mods) in LAYERS {
        for m in *mods {
            if !tops.contains(m) {
                problems.push(format!("layer `{layer}` names `{m}`, which does not exist"));
            }
        }
    }

    for e in &edges {
        let (Some(from), Some(to)) = (layer_of(&e.from), layer_of(&e.to)) else {
            continue;
        };
        if from < to {
            problems.push(format!(
                "{} (layer `{}`) imports `{}` from {} (layer `{}`), a higher layer, at {}",
                name(&e.from),
                LAYERS[from].0,
                e.written,
                name(&e.to),
                LAYERS[to].0,
                e.at
            ));
        }
        for (a, b, why) in FORBIDDEN {
            if e.from.first().is_some_and(|m| m == a) && e.to.first().is_some_and(|m| m == b) {
                problems.push(format!(
                    "{} imports `{}` at {}: {why}",
                    name(&e.from),
                    e.written,
                    e.at
                ));
            }
        }
    }

    circle_report("files", &edges, name, &mut problems);
    circle_report(
        "top-level modules",
        &edges,
        |m| m.first().cloned().unwrap_or_else(|| "crate".into()),
        &mut problems,
    );

    for f in files {
        let toks = tokens(&code_only(&f.text));
        for (krate, allowed, why) in CONFINED {
            let top = f.module.first().map(String::as_str).unwrap_or("crate");
            if allowed.contains(&top) {
                continue;
            }
            let named = toks.iter().enumerate().find(|(k, (t, _))| {
                matches!(t, Tok::Ident(s) if s == krate || s.starts_with(&format!("{krate}_")))
                    && toks.get(k + 1).is_some_and(|n| n.0 == Tok::Colons)
                    && !(*k > 0 && toks[k - 1].0 == Tok::Colons)
            });
            if let Some((_, (_, line))) = named {
                problems.push(format!("{}:{line} names `{krate}`: {why}", f.rel));
            }
        }
        let lines = f.text.lines().count();
        if lines > MAX_LINES {
            problems.push(format!(
                "{} has {lines} lines (at most {MAX_LINES}): split it by what it does",
                f.rel
            ));
        }
    }
    problems
}

#[test]
fn imports_run_down_the_layers_without_circles() {
    let problems = problems(&library_files());
    assert!(
        problems.is_empty(),
        "the crate's shape is off:\n- {}",
        problems.join("\n- ")
    );
}

#[test]
fn architecture_md_names_the_layers_in_order() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    // Rows of the layer table: `| n | name | `module`, `module` | ... |`.
    let rows: Vec<(String, Vec<String>)> = text
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let number = cells.get(1)?;
            if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let mods = cells
                .get(3)?
                .split(',')
                .map(|m| m.trim().trim_matches('`').trim_end_matches('/').to_string())
                .collect();
            Some((cells.get(2)?.trim_matches('*').to_string(), mods))
        })
        .collect();
    let declared: Vec<(String, Vec<String>)> = LAYERS
        .iter()
        .map(|(n, mods)| (n.to_string(), mods.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(
        rows, declared,
        "ARCHITECTURE.md's layer table and LAYERS differ"
    );
}

/// The check itself: it sees an upward import, a circle, a confined crate, and paths hidden in
/// comments and strings are not imports.
#[test]
fn the_check_sees_what_it_should() {
    let file = |rel: &str, module: &[&str], text: &str| File {
        rel: rel.into(),
        module: module.iter().map(|s| s.to_string()).collect(),
        text: text.into(),
    };
    let base = || {
        let mut files = vec![file("src/lib.rs", &[], "")];
        for (_, mods) in LAYERS {
            for m in *mods {
                files.push(file(&format!("src/{m}.rs"), &[m], ""));
            }
        }
        files
    };
    assert!(problems(&base()).is_empty());

    let mut upward = base();
    upward.push(file(
        "src/source/extra.rs",
        &["source", "extra"],
        "use crate::{diagnostic::Edit, lint::{self, check}};\n",
    ));
    let found = problems(&upward);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("imports `crate::lint` from lint"),
        "{found:?}"
    );
    assert!(found[0].contains("src/source/extra.rs:1"), "{found:?}");

    let mut circle = base();
    circle.push(file(
        "src/rules/a.rs",
        &["rules", "a"],
        "mod tests { use super::super::b::X; }",
    ));
    circle.push(file(
        "src/rules/b.rs",
        &["rules", "b"],
        "fn f() { crate::rules::a::g() }",
    ));
    let found = problems(&circle);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("rules::a, rules::b"), "{found:?}");

    let mut rooms = base();
    rooms.push(file(
        "src/lint/x.rs",
        &["lint", "x"],
        "use crate::settings::Y;",
    ));
    rooms.push(file(
        "src/settings/y.rs",
        &["settings", "y"],
        "use super::super::lint;",
    ));
    let found = problems(&rooms);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("top-level modules: lint, settings"),
        "{found:?}"
    );

    let mut hidden = base();
    hidden.push(file(
        "src/diagnostic/z.rs",
        &["diagnostic", "z"],
        "// crate::cli::x\nconst S: &str = \"crate::cli::x\"; const R: &str = r#\"crate::cli\"#;\nfn f<'a>(c: char) -> bool { c == '\"' || c == '\\'' }\n/* crate::cli */ use crate::knowledge::{self as k};",
    ));
    assert!(problems(&hidden).is_empty(), "{:?}", problems(&hidden));

    let mut trees = base();
    trees.push(file(
        "src/rules/t.rs",
        &["rules", "t"],
        "fn f(n: tree_sitter::Node) {}",
    ));
    trees.push(file(
        "src/rules/u.rs",
        &["rules", "u"],
        "use crate::frontend::x;",
    ));
    let found = problems(&trees);
    assert_eq!(found.len(), 2, "{found:?}");
}
