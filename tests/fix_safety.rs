//! Fix safety through the binary, over a copy of every fixture: `--fix --unsafe-fixes` once, then
//! again. The second run changes no byte; every fixed file still parses; nothing fixable is left;
//! what was fixed is not reported again.

use assert_cmd::Command;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from)
        .expect("read fixtures")
        .filter_map(Result::ok)
    {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            fs::copy(&path, &target).expect("copy");
        }
    }
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read").filter_map(Result::ok) {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap_or(&p).to_path_buf();
                out.insert(rel, fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn memlint(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("memlint")
        .expect("binary")
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(["--isolated", "--select", "ALL"])
        .args(args)
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `(file, code, line of the start)` of every diagnostic that carries an applicable fix.
fn fixable(json: &str) -> Vec<(String, String, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).expect("json output");
    v.as_array()
        .expect("array")
        .iter()
        .filter(|d| {
            d["fix"]["applicability"]
                .as_str()
                .is_some_and(|a| a == "safe" || a == "unsafe")
        })
        .map(|d| {
            (
                d["filename"].as_str().unwrap_or("").to_string(),
                d["code"].as_str().unwrap_or("").to_string(),
                d["location"]["row"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn fixing_every_fixture_is_safe_and_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    copy_tree(&root.join("fixtures"), dir.path());
    let before = snapshot(dir.path());

    let (_, json, _) = memlint(dir.path(), &["--output-format", "json", "."]);
    let to_fix = fixable(&json);
    assert!(to_fix.len() >= 10, "the fixtures offer fixes: {to_fix:?}");

    let (code, out, err) = memlint(dir.path(), &["--fix", "--unsafe-fixes", "."]);
    assert!(code <= 1, "{out}{err}");
    let once = snapshot(dir.path());
    let changed: Vec<&PathBuf> = once
        .iter()
        .filter(|(p, text)| before.get(*p) != Some(*text))
        .map(|(p, _)| p)
        .collect();
    assert!(changed.len() >= 10, "fixes were written: {changed:?}");

    // Every rewritten file still parses.
    for path in &changed {
        let text = &once[*path];
        let config = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Some(memlint::source::Language::Json),
            Some("yaml" | "yml") => Some(memlint::source::Language::Yaml),
            Some("toml") => Some(memlint::source::Language::Toml),
            _ => None,
        };
        if let Some(language) = config {
            assert!(
                memlint::config::parse(language, text).is_ok(),
                "{} no longer parses:\n{text}",
                path.display()
            );
            continue;
        }
        let cells;
        let tree = match path.extension().and_then(|e| e.to_str()) {
            Some("ipynb") => {
                cells = memlint::source::SourceFile::from_notebook(
                    (*path).clone(),
                    path.display().to_string(),
                    text.clone(),
                )
                .expect("a fixed notebook is still a notebook")
                .expect("a Python notebook");
                memlint::frontend::python::parse(&cells.text)
            }
            Some("py") => memlint::frontend::python::parse(text),
            Some("sh") => memlint::frontend::shell::parse(text),
            other => panic!("unexpected fixed file type {other:?}: {}", path.display()),
        };
        let tree = tree.expect("parse");
        assert!(
            !tree.root_node().has_error(),
            "{} no longer parses:\n{text}",
            path.display()
        );
    }

    // Nothing fixable is left, and no diagnostic that had a fix is reported again at its line.
    let (_, json, _) = memlint(dir.path(), &["--output-format", "json", "."]);
    let left = fixable(&json);
    assert!(left.is_empty(), "still fixable after --fix: {left:?}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    for (file, code, row) in &to_fix {
        let again = v.as_array().into_iter().flatten().any(|d| {
            d["filename"] == file.as_str()
                && d["code"] == code.as_str()
                && d["location"]["row"] == *row
        });
        assert!(
            !again,
            "{file}:{row} {code} is reported again after its fix"
        );
    }

    // Fixing twice equals fixing once.
    let (code, out, err) = memlint(dir.path(), &["--fix", "--unsafe-fixes", "."]);
    assert!(code <= 1, "{out}{err}");
    assert_eq!(snapshot(dir.path()), once, "a second --fix changed files");
}
