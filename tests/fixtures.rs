//! Snapshot tests over `fixtures/<CODE>/`: every `bad_*` entry must raise its rule, every `clean_*`
//! entry must not; the snapshot records what a user sees (code, line, message) and the fixed text.
//! Also checks that each rule has its page, its fixtures, and a page example that behaves.

use memlint::diagnostic::Applicability;
use memlint::fix;
use memlint::lint::{lint, LintOptions, Run};
use memlint::rules::{catalog, implemented_codes};
use memlint::settings::{CliOverrides, Resolver};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Lint one fixture (a file, or a folder holding a small project) with every rule selected.
pub fn run(path: &Path, prefilter: bool) -> Run {
    let cli = CliOverrides {
        select: Some(vec!["ALL".into()]),
        ..CliOverrides::default()
    };
    let resolver = Resolver::new(cli, None, true, root()).expect("settings");
    lint(
        &[path.to_path_buf()],
        &resolver,
        LintOptions {
            prefilter,
            force_exclude: false,
        },
    )
}

/// What the user sees: concise lines with the help and fix, then the diff of all fixes.
fn render(run: &Run) -> String {
    let mut out = String::new();
    for r in &run.results {
        for d in &r.diagnostics {
            let (cell, p) = r.file.locate(d.range.start);
            let cell = cell.map(|c| format!("cell {c}:")).unwrap_or_default();
            out.push_str(&format!(
                "{}:{cell}{}:{}: {} {}\n",
                r.file.display, p.row, p.column, d.code, d.message
            ));
            if let Some(h) = &d.help {
                out.push_str(&format!("  help: {h}\n"));
            }
            if let Some(f) = &d.fix {
                out.push_str(&format!(
                    "  fix ({}): {}\n",
                    f.applicability.as_str(),
                    f.message
                ));
            }
        }
    }
    for r in &run.results {
        if let Some(fixed) = fix::fix_file(r, Applicability::Unsafe) {
            out.push_str(&fix::unified_diff(
                &r.file.display,
                r.file.disk_text(),
                &fixed.new_text,
            ));
        }
    }
    out
}

fn fixture_entries(code: &str) -> Vec<PathBuf> {
    let dir = root().join("fixtures").join(code);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.starts_with("bad_") || name.starts_with("clean_")
    });
    entries.sort();
    entries
}

#[test]
fn fixtures_behave_and_match_their_snapshots() {
    let mut failures = Vec::new();
    for code in implemented_codes() {
        let entries = fixture_entries(code);
        for path in entries {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let result = std::env::set_current_dir(root());
            assert!(result.is_ok());
            let rel = path.strip_prefix(root()).unwrap_or(&path).to_path_buf();
            let run = run(&rel, true);
            // The prefilter never changes a result, across files too.
            let whole = render(&self::run(&rel, false));
            if whole != render(&run) {
                failures.push(format!(
                    "the prefilter changes the result of {}",
                    rel.display()
                ));
            }
            let fired = run
                .results
                .iter()
                .any(|r| r.diagnostics.iter().any(|d| d.code == code));
            if name.starts_with("bad_") && !fired {
                failures.push(format!("missing: {} did not raise {code}", rel.display()));
            }
            if name.starts_with("clean_") && fired {
                failures.push(format!(
                    "noisy: {} raised {code}:\n{}",
                    rel.display(),
                    render(&run)
                ));
            }
            // A fix must converge, keep the file parseable and not raise the same diagnostic.
            for r in &run.results {
                if let Some(fixed) = fix::fix_file(r, Applicability::Unsafe) {
                    let again = fixed
                        .remaining
                        .iter()
                        .filter(|d| {
                            d.fix
                                .as_ref()
                                .is_some_and(|f| f.applicability != Applicability::DisplayOnly)
                        })
                        .count();
                    if again > 0 {
                        failures.push(format!("fix of {} does not converge", rel.display()));
                    }
                }
            }
            let snapshot = format!("{code}__{}", name.replace('.', "_"));
            insta::with_settings!({snapshot_path => root().join("tests/snapshots"), prepend_module_to_snapshot => false, omit_expression => true}, {
                insta::assert_snapshot!(snapshot, render(&run));
            });
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_rule_has_a_page_fixtures_and_snapshots() {
    assert!(
        catalog::page_errors().is_empty(),
        "{:?}",
        catalog::page_errors()
    );
    for code in implemented_codes() {
        let page = catalog::page(code).unwrap_or_else(|| panic!("{code} has no page under rules/"));
        assert_eq!(page.code, code);
        assert!(
            !page.explanation.trim().is_empty(),
            "{code}: empty explanation"
        );
        let entries = fixture_entries(code);
        let names: Vec<String> = entries
            .iter()
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with("bad_")),
            "{code}: no bad_ fixture"
        );
        assert!(
            names.iter().any(|n| n.starts_with("clean_")),
            "{code}: no clean_ fixture"
        );
        for n in names {
            let snap = root()
                .join("tests/snapshots")
                .join(format!("{code}__{}.snap", n.replace('.', "_")));
            assert!(snap.exists(), "{code}: no snapshot for {n}");
        }
    }
}

/// The bad example of each page raises its rule, the good one does not.
#[test]
fn page_examples_behave() {
    for code in implemented_codes() {
        let page = catalog::page(code).expect("page");
        for (which, text, should_fire) in [
            ("bad", &page.example.bad, true),
            ("good", &page.example.good, false),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let file = dir.path().join(&page.example.path);
            std::fs::write(&file, text).expect("write example");
            for c in &page.example.context {
                std::fs::write(dir.path().join(&c.path), &c.content).expect("write context");
            }
            let run = run(dir.path(), true);
            let fired = run
                .results
                .iter()
                .any(|r| r.diagnostics.iter().any(|d| d.code == code));
            assert_eq!(
                fired,
                should_fire,
                "{code}: the {which} example {}",
                if should_fire {
                    "is not flagged"
                } else {
                    "is flagged"
                }
            );
        }
    }
}

/// The prefilter never changes a result, and neither does the thread count.
#[test]
fn prefilter_never_changes_a_result() {
    std::env::set_current_dir(root()).expect("cd");
    let with = render(&run(Path::new("fixtures"), true));
    let without = render(&run(Path::new("fixtures"), false));
    assert_eq!(with, without);
    assert!(!with.is_empty());
}
