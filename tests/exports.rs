//! What a module exports as arithmetic, and the text scan that decides whether a module is read
//! for it: the scan must never rule out what the walk exports, or a module would give its
//! helpers when it is linted and not when it is only read for context.

use std::path::{Path, PathBuf};

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            python_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "py") {
            out.push(p);
        }
    }
}

#[test]
fn the_scan_never_rules_out_what_the_walk_exports() {
    let mut files = Vec::new();
    python_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        &mut files,
    );
    let mut exports = 0;
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(facts) = memlint::frontend::python::extract(&text) else {
            continue;
        };
        for e in &facts.value_exports {
            exports += 1;
            assert!(
                memlint::project::may_export(&text, &[e.name.as_str()]),
                "{}: `{}` is exported but the scan rules it out",
                path.display(),
                e.name
            );
        }
    }
    assert!(exports > 100, "only {exports} exports among the fixtures");
}
