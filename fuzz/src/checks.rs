//! The properties each fuzz target checks, shared by the libFuzzer targets, the stable driver
//! (`src/bin/drive.rs`) and memlint's regression tests (`tests/fuzz_regressions.rs` includes this
//! file). Each check panics when a property fails and otherwise returns a small signature of what
//! the input reached, which the stable driver uses to keep inputs that do something new.
//!
//! Properties: no panic anywhere from parse to every report format; every diagnostic span lies in
//! the text on character boundaries; fixes give text that parses, raises no fixable diagnostic
//! again, and that a second `--fix` leaves alone.

use memlint::context::{Defaults, Located, TrainingContext};
use memlint::diagnostic::Applicability;
use memlint::facts::Facts;
use memlint::fix;
use memlint::lint::{analyse, check, FileResult};
use memlint::report;
use memlint::settings::{CliOverrides, Resolver, Settings};
use memlint::source::{Language, SourceFile};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Every rule selected, no configuration file read.
fn settings() -> Arc<Settings> {
    static SETTINGS: OnceLock<Arc<Settings>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let cli = CliOverrides {
                select: Some(vec!["ALL".into()]),
                ..CliOverrides::default()
            };
            let resolver =
                Resolver::new(cli, None, true, PathBuf::from(".")).expect("settings for ALL");
            resolver.for_file(Path::new("fuzz")).expect("settings")
        })
        .clone()
}

fn source(language: Language, text: &str) -> SourceFile {
    let name = match language {
        Language::Python | Language::Notebook => "fuzz.py",
        Language::Shell => "fuzz.sh",
        Language::Yaml => "fuzz.yaml",
        Language::Json => "fuzz.json",
        Language::Toml => "fuzz.toml",
        Language::Requirements => "requirements.txt",
    };
    SourceFile::new(PathBuf::from(name), name.into(), language, text.to_string())
}

/// Rules, selection and suppression over one file's facts, with `optimizer` as the configured
/// default, as `memlint --isolated --select ALL` does for a file alone.
fn result_of(file: SourceFile, facts: &Facts, optimizer: Option<&str>) -> FileResult {
    let defaults = Defaults {
        optimizer: optimizer.map(str::to_string),
        ..Defaults::default()
    };
    let training = TrainingContext::build(&Located::from_file(&file, facts), &defaults);
    let settings = settings();
    let diagnostics = check(&file, facts, &training, &settings);
    FileResult {
        syntax_error: facts.syntax_error,
        file: Arc::new(file),
        diagnostics,
        settings,
        training,
    }
}

/// Lint one in-memory file. `None` when the file is skipped (a config that does not parse).
pub fn lint_text(language: Language, text: &str, optimizer: Option<&str>) -> Option<FileResult> {
    let file = source(language, text);
    let facts = analyse(&file).ok()?;
    Some(result_of(file, &facts, optimizer))
}

/// What the frontend made of the input, coarsely: which kinds of facts and how many (up to 3).
fn shape(facts: &Facts) -> u64 {
    let ev = &facts.evidence;
    let counts = [
        facts.formulas.len(),
        facts.loops.len(),
        facts.invocations.len(),
        facts.comments.len(),
        ev.optimizers.len(),
        ev.trains.len(),
        ev.inference.len(),
        ev.lora.len(),
        ev.frozen.len(),
        ev.sharding.len(),
        ev.precision.len(),
        ev.frameworks.len(),
        usize::from(facts.config.is_some()),
        usize::from(facts.syntax_error),
    ];
    let mut h = DefaultHasher::new();
    for c in counts {
        c.min(3).hash(&mut h);
    }
    h.finish()
}

/// Spans inside the text, on character boundaries; every output format renders; JSON is JSON.
fn check_reports(result: &FileResult) {
    let text = &result.file.text;
    for d in &result.diagnostics {
        assert!(
            d.range.start <= d.range.end && d.range.end <= text.len(),
            "{} span {:?} outside a text of {} bytes",
            d.code,
            d.range,
            text.len()
        );
        assert!(
            text.is_char_boundary(d.range.start) && text.is_char_boundary(d.range.end),
            "{} span {:?} splits a character",
            d.code,
            d.range
        );
    }
    let results = std::slice::from_ref(result);
    let entries = report::entries(results);
    let _ = report::render_full(&entries, true, 80);
    let _ = report::render_full(&entries, false, 20);
    let _ = report::render_concise(&entries);
    let _ = report::render_github(&entries);
    for json in [
        report::render_json(&entries),
        report::render_sarif(&entries),
    ] {
        assert!(
            serde_json::from_str::<serde_json::Value>(&json).is_ok(),
            "invalid JSON output:\n{json}"
        );
    }
    for line in report::render_json_lines(&entries).lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "{line}"
        );
    }
}

fn signature(result: Option<&FileResult>, extra: usize) -> u64 {
    let mut h = DefaultHasher::new();
    extra.hash(&mut h);
    if let Some(r) = result {
        r.syntax_error.hash(&mut h);
        for d in &r.diagnostics {
            d.code.hash(&mut h);
            d.fix.is_some().hash(&mut h);
        }
    }
    h.finish()
}

/// Parse, lower, check and report one file of `language`.
fn frontend(language: Language, data: &[u8]) -> u64 {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    let file = source(language, text);
    match analyse(&file) {
        Err(reason) => {
            // Which error, without its position.
            let mut h = DefaultHasher::new();
            reason
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .collect::<String>()
                .hash(&mut h);
            h.finish()
        }
        Ok(facts) => {
            let shape = shape(&facts);
            let result = result_of(file, &facts, None);
            check_reports(&result);
            shape ^ signature(Some(&result), language as usize)
        }
    }
}

pub fn python(data: &[u8]) -> u64 {
    frontend(Language::Python, data)
}

pub fn shell(data: &[u8]) -> u64 {
    frontend(Language::Shell, data)
}

pub fn yaml(data: &[u8]) -> u64 {
    frontend(Language::Yaml, data)
}

pub fn json(data: &[u8]) -> u64 {
    frontend(Language::Json, data)
}

pub fn toml(data: &[u8]) -> u64 {
    frontend(Language::Toml, data)
}

fn fixable(result: &FileResult) -> Vec<String> {
    result
        .diagnostics
        .iter()
        .filter(|d| {
            d.fix.as_ref().is_some_and(|f| {
                f.applicability >= Applicability::Unsafe
                    && f.applicability != Applicability::DisplayOnly
            })
        })
        .map(|d| format!("{} at {:?}: {}", d.code, d.range, d.message))
        .collect()
}

/// The fix engine. The first byte picks the language (even: Python, odd: shell) and whether an
/// optimizer is configured; the rest is the file.
pub fn fixes(data: &[u8]) -> u64 {
    let Some((&mode, rest)) = data.split_first() else {
        return 0;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return 0;
    };
    let language = if mode % 2 == 0 {
        Language::Python
    } else {
        Language::Shell
    };
    let optimizer = (mode & 2 != 0).then_some("adamw");
    let Some(result) = lint_text(language, text, optimizer) else {
        return 0;
    };
    let Some(fixed) = fix::fix_file(&result, Applicability::Unsafe) else {
        // Nothing was rewritten: a file with syntax errors never is.
        return signature(Some(&result), 1);
    };
    assert!(!result.syntax_error, "a file with syntax errors was fixed");
    assert!(fixed.applied > 0);
    assert_ne!(
        fixed.new_text, text,
        "{} fixes applied, text unchanged",
        fixed.applied
    );

    // The fixed file parses, and a fresh run (what a second `memlint --fix` does) finds nothing
    // left to fix and changes nothing.
    let again = lint_text(language, &fixed.new_text, optimizer)
        .unwrap_or_else(|| panic!("the fixed text does not load:\n{}", fixed.new_text));
    assert!(
        !again.syntax_error,
        "the fixed text has syntax errors:\n--- before\n{text}\n--- after\n{}",
        fixed.new_text
    );
    let left = fixable(&again);
    assert!(
        left.is_empty(),
        "after fixing, still fixable: {left:?}\n--- before\n{text}\n--- after\n{}",
        fixed.new_text
    );
    if let Some(twice) = fix::fix_file(&again, Applicability::Unsafe) {
        assert_eq!(
            twice.new_text, fixed.new_text,
            "fixing twice differs from fixing once"
        );
    }
    check_reports(&again);
    signature(Some(&result), 2 + fixed.applied)
}

/// A check: panics when a property fails, else returns the signature of the outcome.
pub type Check = fn(&[u8]) -> u64;

/// The targets by name, for the driver and the regression tests.
pub const TARGETS: &[(&str, Check)] = &[
    ("python", python),
    ("shell", shell),
    ("yaml", yaml),
    ("json", json),
    ("toml", toml),
    ("fixes", fixes),
];
