//! The GitHub Action's lint step (scripts/action/run.sh), run as action.yml runs it: with the
//! inputs in the environment and the built `memlint` on PATH. (Its install step runs in `.ci/wheel`
//! against the built wheel.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run the step in `dir` with the given inputs; returns the exit code, stdout and stderr.
fn step(dir: &Path, inputs: &[(&str, &str)]) -> (i32, String, String) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_memlint"));
    let bin_dir = bin.parent().expect("binary folder");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/action/run.sh"))
        .current_dir(dir)
        .env("PATH", path)
        .env("GITHUB_OUTPUT", dir.join("github_output"))
        .env_remove("MEMLINT_OUTPUT_FORMAT")
        .env_remove("INPUT_PATHS")
        .env_remove("INPUT_ARGS")
        .env_remove("INPUT_SARIF_FILE");
    for (k, v) in inputs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("bash");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let nb = fs::read_to_string(root().join("fixtures/notebook/finetune.ipynb")).expect("fixture");
    fs::create_dir_all(dir.path().join("notebooks")).expect("mkdir");
    fs::write(dir.path().join("notebooks/finetune.ipynb"), nb).expect("write");
    fs::write(dir.path().join("clean.py"), "x = 1\n").expect("write");
    dir
}

#[test]
fn annotations_and_sarif_with_paths_and_args() {
    let dir = project();
    let (code, out, err) = step(
        dir.path(),
        &[
            ("INPUT_PATHS", "notebooks clean.py"),
            ("INPUT_ARGS", "--select GA"),
            ("INPUT_SARIF_FILE", "memlint.sarif"),
        ],
    );
    assert_eq!(code, 1, "diagnostics fail the step: {err}");
    let annotations: Vec<&str> = out.lines().filter(|l| l.starts_with("::")).collect();
    assert_eq!(annotations.len(), 1, "{out}");
    assert!(
        annotations[0].starts_with(
            "::error file=notebooks/finetune.ipynb,line=89,col=10,endLine=89,endColumn=25,title=memlint (GA001)::cell 7, line 7: "
        ),
        "{out}"
    );
    assert!(out.ends_with("Found 1 diagnostic.\n[*] 1 fixable with the `--fix` option.\n"));

    let sarif: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("memlint.sarif")).expect("sarif"))
            .expect("SARIF is JSON");
    let results = sarif["runs"][0]["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "--select reaches the SARIF run too");
    assert_eq!(results[0]["ruleId"], "GA001");
    assert_eq!(
        results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "notebooks/finetune.ipynb"
    );
    let outputs = fs::read_to_string(dir.path().join("github_output")).expect("outputs");
    assert_eq!(outputs, "sarif-file=memlint.sarif\n");
}

#[test]
fn defaults_lint_the_workspace_and_pass_when_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("train.py"), "x = 1\n").expect("write");
    let (code, out, _) = step(dir.path(), &[]);
    assert_eq!(code, 0);
    assert_eq!(out, "All checks passed!\n");
    assert!(
        !dir.path().join("github_output").exists(),
        "no SARIF asked for, none announced"
    );

    let dir = project();
    let (code, out, _) = step(dir.path(), &[("INPUT_PATHS", "")]);
    assert_eq!(code, 1);
    assert_eq!(out.lines().filter(|l| l.starts_with("::error ")).count(), 2);
}

#[test]
fn errors_fail_the_step_with_exit_2() {
    let dir = project();
    let (code, _, err) = step(
        dir.path(),
        &[
            ("INPUT_PATHS", "missing"),
            ("INPUT_SARIF_FILE", "out.sarif"),
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("memlint: error: missing:"), "{err}");
    assert!(err.contains("writing SARIF failed (exit 2)"), "{err}");

    let (code, _, err) = step(dir.path(), &[("INPUT_ARGS", "--no-such-flag")]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn exit_zero_in_args_passes_the_step_and_still_writes_sarif() {
    let dir = project();
    let (code, out, err) = step(
        dir.path(),
        &[
            ("INPUT_ARGS", "--exit-zero"),
            ("INPUT_SARIF_FILE", "out.sarif"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("::error ")).count(), 2);
    let sarif = fs::read_to_string(dir.path().join("out.sarif")).expect("sarif");
    let v: serde_json::Value = serde_json::from_str(&sarif).expect("json");
    assert_eq!(v["runs"][0]["results"].as_array().map(Vec::len), Some(2));
}
