//! The flags a ruff user reaches for, run through the binary: `-` with `--stdin-filename`,
//! `--statistics`, `-q`/`-s`, `--add-noqa`, `--show-files`, `--show-settings`, the warning when
//! nothing is found, the summary's count of hidden unsafe fixes, and the full format printing
//! each message once.

mod common;

use assert_cmd::Command;
use common::{memlint, project};
use std::fs;

const BUDGET: &str = "import torch\n\ndef plan(model, gpu_memory_gb, model_size_gb):\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n    free_gb = gpu_memory_gb - model_size_gb * 2\n    return free_gb\n";

const LOOP: &str = "import torch\n\ndef train(model, loader, criterion, accum_steps):\n    optimizer = torch.optim.AdamW(model.parameters())\n    for i, (x, y) in enumerate(loader):\n        loss = criterion(model(x), y)\n        loss.backward()\n        if (i + 1) % accum_steps == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n";

/// A loop whose optimizer comes from the launcher: the script alone does not say AdamW.
const BUDGET_NO_OPTIMIZER: &str = "def budget(gpu_memory_gb, model_size_gb):\n    return gpu_memory_gb - model_size_gb * 2\n\nfor step in range(10):\n    loss = compute()\n    loss.backward()\n";

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stdin_is_linted_as_the_name_given_within_its_project() {
    let dir = project(&[
        (
            "scripts/launch.sh",
            "#!/bin/bash\npython train.py --optim adamw_torch\n",
        ),
        ("scripts/train.py", "x = 1\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path())
        .args([
            "--output-format",
            "concise",
            "--stdin-filename",
            "scripts/train.py",
            "-",
        ])
        .write_stdin(BUDGET_NO_OPTIMIZER));
    assert_eq!(code, 1, "{err}");
    assert_eq!(err, "");
    // The launcher beside the name gives the optimizer: the text is linted as that script.
    assert!(
        out.starts_with("scripts/train.py:2:28: MEM001 ")
            && out.contains("(seen at scripts/launch.sh:2)"),
        "{out}"
    );
    assert!(out.ends_with("Found 1 diagnostic.\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"), "{out}");
    // The file on disk is not what was linted.
    assert_eq!(
        fs::read_to_string(dir.path().join("scripts/train.py")).expect("read"),
        "x = 1\n"
    );
}

#[test]
fn stdin_follows_the_configuration_of_its_name() {
    let dir = project(&[("legacy/.memlint.toml", "ignore = [\"MEM\"]\n")]);
    let (code, out, _) = run(memlint(dir.path())
        .args([
            "--output-format",
            "concise",
            "--stdin-filename",
            "legacy/train.py",
            "-",
        ])
        .write_stdin(BUDGET));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    let (code, out, _) = run(memlint(dir.path())
        .args([
            "--output-format",
            "concise",
            "--stdin-filename",
            "new/train.py",
            "-",
        ])
        .write_stdin(BUDGET));
    assert_eq!(code, 1);
    assert!(out.starts_with("new/train.py:5:31: MEM001 "), "{out}");
}

#[test]
fn stdin_without_a_name_is_python_named_dash() {
    let dir = project(&[]);
    let (code, out, err) = run(memlint(dir.path())
        .args(["--output-format", "concise", "-"])
        .write_stdin(BUDGET));
    assert_eq!((code, err.as_str()), (1, ""));
    assert!(out.starts_with("-:5:31: MEM001 "), "{out}");
}

#[test]
fn stdin_with_fix_prints_the_fixed_text_and_reports_on_stderr() {
    let dir = project(&[("train.py", LOOP)]);
    let (code, out, err) = run(memlint(dir.path())
        .args(["--fix", "--stdin-filename", "train.py", "-"])
        .write_stdin(LOOP));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        LOOP.replace("loss.backward()", "(loss / accum_steps).backward()")
    );
    assert_eq!(err, "Found 1 diagnostic (1 fixed, 0 remaining).\n");
    assert_eq!(
        fs::read_to_string(dir.path().join("train.py")).expect("read"),
        LOOP,
        "the file on disk is never written"
    );
    // Nothing to fix: the text comes back as it was read.
    let (code, out, err) = run(memlint(dir.path())
        .args(["--fix", "--stdin-filename", "clean.py", "-"])
        .write_stdin("x = 1\n"));
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "x = 1\n", "All checks passed!\n")
    );
    // An unsafe fix stays unapplied without --unsafe-fixes, and the report says so.
    let (code, out, err) = run(memlint(dir.path())
        .args([
            "--fix",
            "--output-format",
            "concise",
            "--stdin-filename",
            "budget.py",
            "-",
        ])
        .write_stdin(BUDGET));
    assert_eq!(code, 1);
    assert_eq!(out, BUDGET);
    assert!(err.starts_with("budget.py:5:31: MEM001 "), "{err}");
}

#[test]
fn stdin_usage_errors() {
    let dir = project(&[("train.py", BUDGET)]);
    let (code, out, err) = run(memlint(dir.path()).args(["-", "train.py"]).write_stdin(""));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "memlint: error: `-` (standard input) cannot be given with other paths\n"
    );
    let (code, out, err) = run(memlint(dir.path()).args(["--stdin-filename", "x.py", "train.py"]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "memlint: error: --stdin-filename names standard input: give `-` as the only path\n"
    );
    let (code, out, err) = run(memlint(dir.path())
        .args(["--stdin-filename", "notes.txt", "-"])
        .write_stdin(BUDGET));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("memlint: error: notes.txt: not a file memlint reads"),
        "{err}"
    );
}

#[test]
fn statistics_count_each_code_most_frequent_first() {
    let two_loops = format!("{LOOP}\n\n{}", LOOP.replace("def train(", "def train2("));
    let dir = project(&[("loops.py", &two_loops), ("budget.py", BUDGET)]);
    let (code, out, err) = run(memlint(dir.path()).args(["--statistics", "."]));
    assert_eq!((code, err.as_str()), (1, ""));
    assert_eq!(
        out,
        "2\tGA001 \t[*] unscaled-accumulation-loss\n\
         1\tMEM001\t[ ] missing-optimizer-state\n\
         Found 3 diagnostics.\n\
         [*] 2 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    );
    let (code, out, _) =
        run(memlint(dir.path()).args(["--statistics", "--output-format", "json", "."]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        v,
        serde_json::json!([
            {"code": "GA001", "name": "unscaled-accumulation-loss", "count": 2, "fixable": true},
            {"code": "MEM001", "name": "missing-optimizer-state", "count": 1, "fixable": false},
        ])
    );
    // With --unsafe-fixes the unsafe fix counts as fixable.
    let (_, out, _) = run(memlint(dir.path()).args(["--statistics", "--unsafe-fixes", "."]));
    assert!(
        out.contains("1\tMEM001\t[*] missing-optimizer-state\n"),
        "{out}"
    );
    let (code, out, err) =
        run(memlint(dir.path()).args(["--statistics", "--output-format", "sarif", "."]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "memlint: error: --statistics prints text (full, concise) or json\n"
    );
}

#[test]
fn quiet_prints_diagnostics_only_and_silent_nothing() {
    let dir = project(&[("train.py", BUDGET)]);
    fs::write(dir.path().join("bin.py"), b"\x00\x01model_gb").expect("write");
    let (code, out, err) =
        run(memlint(dir.path()).args(["--output-format", "concise", "--quiet", "."]));
    assert_eq!(code, 1);
    assert_eq!(err, "", "no warnings under --quiet");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("train.py:5:31: MEM001 "), "{out}");
    let (code, out, err) = run(memlint(dir.path()).args(["-q", "--output-format", "full", "."]));
    assert_eq!((code, err.as_str()), (1, ""));
    assert!(
        out.contains("train.py:5:31: MEM001") && !out.contains("Found"),
        "{out}"
    );
    let (code, out, err) = run(memlint(dir.path()).args(["-s", "."]));
    assert_eq!((code, out.as_str(), err.as_str()), (1, "", ""));
    let (code, out, err) = run(memlint(dir.path()).args(["--silent", "--exit-zero", "."]));
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    // A clean run under --quiet prints nothing at all.
    let clean = project(&[("a.py", "x = 1\n")]);
    let (code, out, err) = run(memlint(clean.path()).args(["-q", "."]));
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    // Errors that end the run are still printed.
    let (code, out, err) = run(memlint(dir.path()).args(["-s", "nope.py"]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(err, "memlint: error: nope.py: no such file or directory\n");
    let (code, _, err) = run(memlint(dir.path()).args(["-q", "-s", "."]));
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn add_noqa_writes_directives_that_silence_each_line() {
    let budget_with_directive = BUDGET.replace(
        "model_size_gb * 2\n",
        "model_size_gb * 2  # memlint: ignore[GA001]\n",
    );
    let broken = format!("{LOOP}\ndef oops(:\n    pass\n");
    let dir = project(&[
        ("a.py", &format!("{budget_with_directive}\n{LOOP}")),
        ("broken.py", &broken),
        ("clean.py", "x = 1\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--add-noqa", "."]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        "memlint: warning: broken.py: no directive added: does not parse; not rewritten\n\
         Added 2 suppression directives.\n"
    );
    let expected = format!(
        "{}\n{}",
        BUDGET.replace(
            "model_size_gb * 2\n",
            "model_size_gb * 2  # memlint: ignore[GA001, MEM001]\n"
        ),
        LOOP.replace(
            "loss.backward()\n",
            "loss.backward()  # memlint: ignore[GA001]\n"
        )
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("a.py")).expect("read"),
        expected
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("broken.py")).expect("read"),
        broken,
        "a file that does not parse is never touched"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("clean.py")).expect("read"),
        "x = 1\n"
    );
    // The directives silence what they were added for; only the broken file is left.
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "a.py"]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    // Run again, nothing is added.
    let (code, _, err) = run(memlint(dir.path()).args(["--add-noqa", "a.py"]));
    assert_eq!(
        (code, err.as_str()),
        (0, "Added 0 suppression directives.\n")
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("a.py")).expect("read"),
        expected
    );
}

#[test]
fn add_noqa_leaves_json_and_puts_a_directive_above_a_continued_line() {
    let ds = "{\n  \"train_batch_size\": 100,\n  \"train_micro_batch_size_per_gpu\": 3,\n  \"gradient_accumulation_steps\": 4\n}\n";
    // A comment after a backslash would end the continuation: the directive goes alone on the
    // line above, which it covers.
    let continued = BUDGET.replace(
        "model_size_gb * 2\n",
        "model_size_gb * 2 - \\\n        overhead_gb\n",
    );
    let dir = project(&[("ds_config.json", ds), ("plan.py", &continued)]);
    let (code, _, err) = run(memlint(dir.path()).args(["--add-noqa", "."]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "memlint: warning: ds_config.json: no directive added: JSON has no comments to hold a directive: use `per-file-ignores`\n\
         Added 1 suppression directive.\n"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("ds_config.json")).expect("read"),
        ds
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("plan.py")).expect("read"),
        continued.replace(
            "    free_gb =",
            "    # memlint: ignore[MEM001]\n    free_gb ="
        )
    );
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "plan.py"]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
}

#[test]
fn show_files_lists_what_would_be_linted() {
    let dir = project(&[
        (".memlint.toml", "extend-exclude = [\"generated\"]\n"),
        ("train.py", BUDGET),
        ("configs/ds.json", "{}\n"),
        ("generated/train.py", BUDGET),
        ("notes.txt", "x\n"),
        ("run_job", "#!/usr/bin/env bash\necho hi\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path()).arg("--show-files"));
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, ".memlint.toml\nconfigs/ds.json\nrun_job\ntrain.py\n");
}

#[test]
fn show_settings_prints_the_settings_of_the_first_file() {
    let dir = project(&[
        (
            "pkg/.memlint.toml",
            "select = [\"GA\"]\nignore = [\"GA009\"]\nfail-on = \"warning\"\noptimizer = \"adamw\"\n",
        ),
        ("pkg/train.py", LOOP),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--show-settings", "pkg"]));
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.starts_with("# Resolved settings for: pkg/train.py\n# Settings path: pkg/.memlint.toml\nroot = \"pkg\"\nenabled = [\"GA001\", \"GA002\", \"GA003\", \"GA004\", \"GA005\", \"GA006\", \"GA007\", \"GA008\"]\n"), "{out}");
    assert!(
        out.contains("fail-on = \"warning\"\noptimizer = \"adamw\"\n"),
        "{out}"
    );
    let (code, out, _) = run(memlint(dir.path()).args(["--show-settings", "--isolated", "pkg"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("# Settings path: none (defaults)\n") && out.contains("\"MEM001\""),
        "{out}"
    );
}

#[test]
fn a_run_that_finds_no_file_says_so() {
    let dir = project(&[("notes.txt", "x\n"), ("empty/.keep", "")]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 0);
    assert_eq!(out, "All checks passed!\n");
    assert_eq!(
        err,
        "memlint: warning: no files found under the given paths\n"
    );
    let (_, _, err) = run(memlint(dir.path()).args(["-q", "."]));
    assert_eq!(err, "");
}

#[test]
fn the_summary_counts_hidden_unsafe_fixes() {
    let dir = project(&[("budget.py", BUDGET), ("loop.py", LOOP)]);
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "budget.py"]));
    assert_eq!(code, 1);
    assert!(out.ends_with("Found 1 diagnostic.\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"), "{out}");
    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert!(out.ends_with("Found 2 diagnostics.\n[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"), "{out}");
    // With --unsafe-fixes both are fixable, and both lines say so.
    let (_, out, _) =
        run(memlint(dir.path()).args(["--output-format", "concise", "--unsafe-fixes", "."]));
    assert!(
        out.contains("budget.py:5:31: MEM001 ")
            && out.contains("expected at least 4x (seen at budget.py:4) [*]\n"),
        "{out}"
    );
    assert!(
        out.ends_with("Found 2 diagnostics.\n[*] 2 fixable with the `--fix` option.\n"),
        "{out}"
    );
    // After --fix, what remains is counted the same way.
    let (code, out, _) =
        run(memlint(dir.path()).args(["--output-format", "concise", "--fix", "."]));
    assert_eq!(code, 1);
    assert!(out.ends_with("Found 2 diagnostics (1 fixed, 1 remaining).\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"), "{out}");
}

#[test]
fn full_format_prints_each_message_once() {
    let dir = project(&[("train.py", BUDGET)]);
    let (code, out, _) =
        run(memlint(dir.path()).args(["--output-format", "full", "--color", "never", "train.py"]));
    assert_eq!(code, 1);
    assert_eq!(
        out.matches("memory formula counts the model 2x").count(),
        1,
        "{out}"
    );
    assert!(
        out.starts_with("train.py:5:31: MEM001 (https://github.com/memlint/memlint/blob/main/rules/MEM001.toml)\n\n  × memory formula counts the model 2x"),
        "{out}"
    );
    assert!(out.contains("╭─[train.py:5:31]"), "{out}");
    assert!(out.contains("╰── missing-optimizer-state"), "{out}");
}

/// A file that cannot be read met in the walk is an error (exit 2), the rest is linted, and no
/// line says the check passed. Root reads whatever the mode: the run then drops to an
/// unprivileged user with `setpriv`, and the test says so when that cannot be done here.
#[cfg(unix)]
#[test]
fn a_run_with_an_unreadable_file_never_says_the_check_passed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = project(&[("a.py", "x = 1\n"), ("locked.py", "y = 2\n")]);
    let mode = |p: &str, m: u32| {
        fs::set_permissions(dir.path().join(p), fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode(".", 0o755);
    mode("a.py", 0o644);
    mode("locked.py", 0o000);
    let bin = assert_cmd::cargo::cargo_bin("memlint");
    let out = if fs::read(dir.path().join("locked.py")).is_err() {
        std::process::Command::new(&bin)
            .args(["--output-format", "concise", "."])
            .current_dir(dir.path())
            .output()
            .ok()
    } else {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["--output-format", "concise", "."])
            .current_dir(dir.path())
            .output()
            .ok()
            .filter(|o| String::from_utf8_lossy(&o.stderr).contains("locked.py"))
    };
    let Some(out) = out else {
        eprintln!("note: running as root and cannot drop privileges; not exercised");
        return;
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr, "memlint: error: locked.py: permission denied\n");
    assert_eq!(stdout, "", "no success line after an error");
}

#[test]
fn add_noqa_writes_into_a_notebook_cells_source() {
    let nb = fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/notebook/finetune.ipynb"),
    )
    .expect("fixture");
    let dir = project(&[("finetune.ipynb", &nb)]);
    let (code, _, err) = run(memlint(dir.path()).args(["--add-noqa", "."]));
    assert_eq!(
        (code, err.as_str()),
        (0, "Added 2 suppression directives.\n")
    );
    let after = fs::read_to_string(dir.path().join("finetune.ipynb")).expect("read");
    let v: serde_json::Value = serde_json::from_str(&after).expect("still a notebook");
    let lines: Vec<&str> = v["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .flat_map(|c| c["source"].as_array().into_iter().flatten())
        .filter_map(|l| l.as_str())
        .filter(|l| l.contains("# memlint: ignore["))
        .collect();
    assert_eq!(
        lines,
        [
            "usable_gb = gpu_memory_gb - model_size_gb * 2  # memlint: ignore[MEM001]\n",
            "    loss.backward()  # memlint: ignore[GA001]\n"
        ]
    );
    // Only those two source lines changed.
    let changed = nb
        .lines()
        .zip(after.lines())
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!((changed, nb.lines().count()), (2, after.lines().count()));
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
}
