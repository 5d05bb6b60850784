//! End-to-end tests of the `memlint` binary: formats, exit codes, configuration, suppression and
//! fixes, as a user sees them.

mod common;

use assert_cmd::Command;
use common::{memlint, project};
use std::fs;

const BUDGET: &str = "import torch\n\ndef plan(model, gpu_memory_gb, model_size_gb):\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n    free_gb = gpu_memory_gb - model_size_gb * 2\n    return free_gb\n";

const LOOP: &str = "import torch\n\ndef train(model, loader, criterion, accum_steps):\n    optimizer = torch.optim.AdamW(model.parameters())\n    for i, (x, y) in enumerate(loader):\n        loss = criterion(model(x), y)\n        loss.backward()\n        if (i + 1) % accum_steps == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n";

fn stdout(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn concise_output_and_exit_codes() {
    let dir = project(&[("train.py", BUDGET), ("clean.py", "x = 1\n")]);
    let (code, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "train.py"]));
    assert_eq!(code, 1);
    assert!(out.starts_with("train.py:5:31: MEM001 memory formula counts the model 2x (params + grads); AdamW keeps 2 more states per parameter: expected at least 4x (seen at train.py:4)\n"), "{out}");
    assert!(out.contains("Found 1 diagnostic."), "{out}");

    let (code, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "clean.py"]));
    assert_eq!(code, 0);
    assert_eq!(out, "All checks passed!\n");

    let (code, _, _) = stdout(memlint(dir.path()).args(["--exit-zero", "train.py"]));
    assert_eq!(code, 0);
}

#[test]
fn missing_path_ends_the_run_before_any_file_is_read() {
    let dir = project(&[("train.py", BUDGET)]);
    fs::write(dir.path().join("bin.py"), b"\x00\x01model_gb").expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "nope.py",
        "train.py",
        "bin.py",
    ]));
    assert_eq!(code, 2);
    assert_eq!(err, "memlint: error: nope.py: no such file or directory\n");
    assert_eq!(out, "", "nothing is linted, nothing says the check passed");
}

#[test]
fn unknown_selectors_name_their_flag_and_the_closest_codes() {
    // bin.py would be skipped with a warning if it were read: the run ends before.
    let dir = project(&[("train.py", BUDGET)]);
    fs::write(dir.path().join("bin.py"), b"\x00\x01model_gb").expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).args(["--select", "MEM01X", "."]));
    assert_eq!(code, 2);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "memlint: error: unknown rule selector `MEM01X` in --select (closest: MEM010, MEM011, MEM012; `memlint rules` lists the codes)\n"
    );
    let (code, out, err) =
        stdout(memlint(dir.path()).args(["--extend-select", "GA", "--ignore", "ga01", "."]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with(
            "memlint: error: unknown rule selector `GA01` in --ignore (closest: GA001, "
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, out, err) = stdout(memlint(dir.path()).args(["--extend-select", "FOO123", "."]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "memlint: error: unknown rule selector `FOO123` in --extend-select (`memlint rules` lists the codes)\n"
    );
}

#[test]
fn an_unknown_selector_in_a_config_file_names_the_file_and_the_key() {
    let dir = project(&[
        ("train.py", BUDGET),
        (
            ".memlint.toml",
            "extend-select = [\"GA\"]\nignore = [\"MEMM001\"]\n",
        ),
    ]);
    fs::write(dir.path().join("bin.py"), b"\x00\x01model_gb").expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).arg("."));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with(
            "memlint: error: .memlint.toml: unknown rule selector `MEMM001` in `ignore` (closest: MEM001, "
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn an_invalid_config_file_ends_the_run_with_one_error() {
    let bin: &[u8] = b"\x00\x01model_gb";
    // Invalid TOML at the root.
    let dir = project(&[
        ("train.py", BUDGET),
        (".memlint.toml", "select = [\"MEM\"\n"),
    ]);
    fs::write(dir.path().join("bin.py"), bin).expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).arg("."));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("memlint: error: .memlint.toml:"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A pyproject table with a value of the wrong type.
    let dir = project(&[
        ("train.py", BUDGET),
        (
            "pyproject.toml",
            "[project]\nname = \"x\"\n\n[tool.memlint]\nfail-on = 3\n",
        ),
    ]);
    let (code, out, err) = stdout(memlint(dir.path()).arg("train.py"));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("memlint: error: pyproject.toml:5: ") && err.contains("`fail-on = 3`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // A project's own configuration below the path given is read before any file is.
    let dir = project(&[
        ("a/train.py", BUDGET),
        ("b/train.py", BUDGET),
        ("b/.memlint.toml", "fail-on = \"fatal\"\n"),
    ]);
    fs::write(dir.path().join("a/bin.py"), bin).expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).arg("."));
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "memlint: error: b/.memlint.toml: `fail-on` must be one of info, warning, error (got `fatal`)\n"
    );
    // `--config` naming a file that is not there.
    let (code, out, err) = stdout(memlint(dir.path()).args(["--config", "nope.toml", "a"]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("memlint: error: nope.toml: cannot read: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn json_is_the_contract_shape() {
    let dir = project(&[("scripts/train.py", BUDGET)]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["--output-format", "json", "scripts"]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let d = &v[0];
    assert_eq!(d["code"], "MEM001");
    assert_eq!(d["name"], "missing-optimizer-state");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["filename"], "scripts/train.py");
    assert_eq!(d["location"], serde_json::json!({"row": 5, "column": 31}));
    assert_eq!(
        d["end_location"],
        serde_json::json!({"row": 5, "column": 48})
    );
    assert!(d["help"].as_str().is_some_and(|h| h.contains("AdamW")));
    assert!(d["url"]
        .as_str()
        .is_some_and(|u| u.ends_with("MEM001.toml")));
    assert_eq!(d["fix"]["applicability"], "unsafe");
    assert_eq!(
        d["fix"]["edits"][0],
        serde_json::json!({"content": "4", "location": {"row": 5, "column": 47}, "end_location": {"row": 5, "column": 48}})
    );

    let (_, lines, _) =
        stdout(memlint(dir.path()).args(["--output-format", "json-lines", "scripts"]));
    let first: serde_json::Value =
        serde_json::from_str(lines.lines().next().expect("a line")).expect("json line");
    assert_eq!(first, *d);
}

#[test]
fn clean_json_is_an_empty_array_and_fix_is_null_without_fix() {
    let dir = project(&[("a.py", "x = 1\n")]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["--output-format", "json", "."]));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "[]");
}

#[test]
fn github_annotations_are_escaped() {
    let dir = project(&[("t,r:a%in.py", BUDGET)]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["--output-format", "github", "."]));
    assert_eq!(code, 1);
    let line = out.lines().next().expect("annotation");
    assert!(
        line.starts_with("::error file=t%2Cr%3Aa%25in.py,line=5,col=31,endLine=5,endColumn=48,title=memlint (MEM001)::memory formula counts"),
        "{line}"
    );
    assert!(line.contains("%0Ahelp: count params"), "{line}");
    assert!(out.contains("Found 1 diagnostic."), "{out}");
}

#[test]
fn sarif_has_rules_and_results() {
    let dir = project(&[("train.py", LOOP)]);
    let (_, out, _) = stdout(memlint(dir.path()).args(["--output-format", "sarif", "."]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("sarif json");
    assert_eq!(v["version"], "2.1.0");
    let run = &v["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().expect("rules");
    let ga = rules
        .iter()
        .find(|r| r["id"] == "GA001")
        .expect("GA001 rule");
    assert_eq!(ga["name"], "unscaled-accumulation-loss");
    assert_eq!(ga["defaultConfiguration"]["level"], "error");
    assert!(ga["helpUri"].as_str().is_some());
    let res = &run["results"][0];
    assert_eq!(res["ruleId"], "GA001");
    assert_eq!(res["level"], "error");
    let loc = &res["locations"][0]["physicalLocation"];
    assert_eq!(loc["artifactLocation"]["uri"], "train.py");
    assert_eq!(loc["region"]["startLine"], 7);
    assert_eq!(
        rules[res["ruleIndex"].as_u64().expect("index") as usize]["id"],
        "GA001"
    );
}

#[test]
fn full_output_shows_the_source_line_and_help() {
    let dir = project(&[("train.py", BUDGET)]);
    let (code, out, _) = stdout(memlint(dir.path()).args([
        "--output-format",
        "full",
        "--color",
        "never",
        "train.py",
    ]));
    assert_eq!(code, 1);
    assert!(out.contains("train.py:5:31: MEM001"), "{out}");
    assert!(
        out.contains("free_gb = gpu_memory_gb - model_size_gb * 2"),
        "{out}"
    );
    assert!(out.contains("missing-optimizer-state"), "{out}");
    assert!(
        out.contains("help: count params 1x, grads 1x and AdamW states 2x"),
        "{out}"
    );
    assert!(!out.contains('\u{1b}'), "no colour when asked for none");
    let (_, colored, _) = stdout(
        memlint(dir.path())
            .args(["--output-format", "full", "train.py"])
            .env("FORCE_COLOR", "1"),
    );
    assert!(colored.contains('\u{1b}'), "FORCE_COLOR forces colour");
    let (_, plain, _) = stdout(
        memlint(dir.path())
            .args(["--output-format", "full", "train.py"])
            .env("FORCE_COLOR", "1")
            .env("NO_COLOR", "1"),
    );
    assert!(!plain.contains('\u{1b}'), "NO_COLOR wins");
}

#[test]
fn selection_on_the_command_line() {
    let dir = project(&[("train.py", &format!("{BUDGET}\n{LOOP}"))]);
    let (_, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "--select", "GA", "."]));
    assert!(out.contains("GA001") && !out.contains("MEM001"), "{out}");
    let (_, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "--ignore", "MEM001", "."]));
    assert!(out.contains("GA001") && !out.contains("MEM001"), "{out}");
    let (code, _, err) = stdout(memlint(dir.path()).args(["--select", "XYZ9", "."]));
    assert_eq!(code, 2);
    assert!(err.contains("unknown rule selector `XYZ9`"), "{err}");
}

#[test]
fn config_files_are_found_and_unknown_keys_rejected() {
    let dir = project(&[
        ("pkg/train.py", &format!("{BUDGET}\n{LOOP}")),
        ("pkg/.memlint.toml", "ignore = [\"MEM\"]\n"),
        ("other/train.py", BUDGET),
    ]);
    let (_, out, _) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert!(
        out.contains("pkg/train.py") && out.contains("GA001"),
        "{out}"
    );
    assert!(
        !out.contains("pkg/train.py:5:31: MEM001"),
        "closest config ignores MEM: {out}"
    );
    assert!(out.contains("other/train.py:5:31: MEM001"), "{out}");
    // --isolated ignores configuration files.
    let (_, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "--isolated", "pkg"]));
    assert!(out.contains("MEM001"), "{out}");

    fs::write(dir.path().join("pkg/.memlint.toml"), "selcet = [\"MEM\"]\n").expect("write");
    let (code, _, err) = stdout(memlint(dir.path()).args(["pkg"]));
    assert_eq!(code, 2);
    assert!(
        err.contains(".memlint.toml") && err.contains("selcet"),
        "{err}"
    );
}

#[test]
fn pyproject_table_per_file_ignores_and_fail_on() {
    let dir = project(&[
        ("pyproject.toml", "[project]\nname = \"x\"\n\n[tool.memlint]\nper-file-ignores = { \"legacy/*.py\" = [\"GA001\"] }\nfail-on = \"error\"\n"),
        ("legacy/old.py", LOOP),
        ("new.py", LOOP),
    ]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1);
    assert!(
        out.contains("new.py:7:9: GA001") && !out.contains("legacy/old.py"),
        "{out}"
    );
}

#[test]
fn excludes_gitignore_and_force_exclude() {
    let dir = project(&[
        (".memlint.toml", "extend-exclude = [\"generated\"]\n"),
        (".gitignore", "ignored/\n"),
        ("generated/train.py", BUDGET),
        ("ignored/train.py", BUDGET),
        ("generated/dist/train.py", BUDGET),
        (".github/scripts/train.py", BUDGET),
        ("run_job", "#!/usr/bin/env bash\navail=$((gpu_memory_gb - model_size_gb - 4))\npython train.py --optimizer adamw\n"),
        ("notes.txt", BUDGET),
    ]);
    let (_, out, _) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert!(
        !out.contains("generated/") && !out.contains("ignored/"),
        "{out}"
    );
    assert!(
        out.contains(".github/scripts/train.py:5:31: MEM001"),
        "hidden folders are walked: {out}"
    );
    assert!(
        out.contains("run_job:2:"),
        "shebang scripts are linted: {out}"
    );
    assert!(!out.contains("notes.txt"), "{out}");
    // Explicit files are linted unless --force-exclude.
    let (_, out, _) =
        stdout(memlint(dir.path()).args(["--output-format", "concise", "generated/train.py"]));
    assert!(out.contains("MEM001"), "{out}");
    let (code, out, _) = stdout(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "--force-exclude",
        "generated/train.py",
    ]));
    assert_eq!(code, 0, "{out}");
    // So are explicit folders, as with ruff: an excluded or ignored folder holding them does
    // not matter, what is excluded beneath them does.
    for folder in ["generated", "ignored"] {
        let (code, out, _) =
            stdout(memlint(dir.path()).args(["--output-format", "concise", folder]));
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!("{folder}/train.py:5:31: MEM001")),
            "{out}"
        );
        assert!(!out.contains("dist/"), "{out}");
    }
    let (code, out, _) = stdout(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "--force-exclude",
        "generated",
    ]));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("MEM001"), "{out}");
}

#[test]
fn suppression_comments() {
    let trailing = BUDGET.replace(
        "model_size_gb * 2\n",
        "model_size_gb * 2  # memlint: ignore[MEM001]\n",
    );
    let above = BUDGET.replace("    free_gb =", "    # noqa: MEM001\n    free_gb =");
    let file_level = format!("# memlint: ignore-file[MEM001]\n{BUDGET}");
    let other_code = BUDGET.replace(
        "model_size_gb * 2\n",
        "model_size_gb * 2  # memlint: ignore[GA001]\n",
    );
    let no_codes = BUDGET.replace("model_size_gb * 2\n", "model_size_gb * 2  # noqa\n");
    let shell = "avail=$((gpu_memory_gb - model_size_gb - 4))  # memlint: ignore[MEM001]\npython train.py --optimizer adamw\n";
    let dir = project(&[
        ("a.py", &trailing),
        ("b.py", &above),
        ("c.py", &file_level),
        ("d.py", &other_code),
        ("e.py", &no_codes),
        ("f.sh", shell),
    ]);
    let (_, out, _) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    for silenced in ["a.py", "b.py", "c.py", "f.sh"] {
        assert!(
            !out.contains(&format!("{silenced}:")),
            "{silenced} should be suppressed: {out}"
        );
    }
    assert!(
        out.contains("d.py:5:31: MEM001"),
        "another code does not suppress: {out}"
    );
    assert!(
        out.contains("e.py:5:31: MEM001"),
        "codes are required: {out}"
    );
    // ML900 is off unless selected.
    assert!(!out.contains("ML900"), "{out}");
    let (_, out, _) = stdout(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "--extend-select",
        "ML900",
        "d.py",
    ]));
    assert!(
        out.contains("d.py:5:68: ML900 unused suppression: GA001"),
        "{out}"
    );
}

#[cfg(unix)]
#[test]
fn fix_writes_atomically_keeps_permissions_and_diff_changes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = project(&[("train.py", LOOP), ("budget.py", BUDGET)]);
    let path = dir.path().join("train.py");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o754)).expect("chmod");

    let (code, out, _) = stdout(memlint(dir.path()).args(["--diff", "train.py"]));
    assert_eq!(code, 1);
    assert!(
        out.contains("-        loss.backward()\n+        (loss / accum_steps).backward()"),
        "{out}"
    );
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        LOOP,
        "--diff changes nothing"
    );

    let (code, out, _) =
        stdout(memlint(dir.path()).args(["--fix", "--output-format", "concise", "train.py"]));
    assert_eq!(code, 0, "all fixed: {out}");
    let fixed = fs::read_to_string(&path).expect("read");
    assert_eq!(
        fixed,
        LOOP.replace("loss.backward()", "(loss / accum_steps).backward()")
    );
    let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o754);
    // Fixing again changes nothing.
    let (code, _, _) = stdout(memlint(dir.path()).args(["--fix", "train.py"]));
    assert_eq!(code, 0);
    assert_eq!(fs::read_to_string(&path).expect("read"), fixed);

    // An unsafe fix needs --unsafe-fixes.
    let (code, _, _) = stdout(memlint(dir.path()).args(["--fix", "budget.py"]));
    assert_eq!(code, 1);
    assert_eq!(
        fs::read_to_string(dir.path().join("budget.py")).expect("read"),
        BUDGET
    );
    let (code, _, _) = stdout(memlint(dir.path()).args(["--fix", "--unsafe-fixes", "budget.py"]));
    assert_eq!(code, 0);
    assert!(fs::read_to_string(dir.path().join("budget.py"))
        .expect("read")
        .contains("model_size_gb * 4"));
}

#[test]
fn a_file_with_syntax_errors_is_never_rewritten() {
    let broken = format!("{LOOP}\ndef oops(:\n    pass\n");
    let dir = project(&[("train.py", &broken)]);
    let (_, _, err) = stdout(memlint(dir.path()).args(["--fix", "train.py"]));
    assert_eq!(
        fs::read_to_string(dir.path().join("train.py")).expect("read"),
        broken
    );
    assert!(err.contains("syntax errors"), "{err}");
}

#[test]
fn unreadable_inputs_are_reported_not_fatal() {
    let dir = project(&[("train.py", BUDGET)]);
    fs::write(dir.path().join("bin.py"), b"\x00\x01\x02model_gb").expect("write");
    fs::write(dir.path().join("latin.py"), b"x = '\xe9'\n").expect("write");
    let (code, out, err) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1);
    assert!(err.contains("bin.py: skipped: binary file"), "{err}");
    assert!(err.contains("latin.py: skipped: not valid UTF-8"), "{err}");
    assert!(out.contains("train.py:5:31: MEM001"), "{out}");
}

#[test]
fn rule_documentation() {
    let dir = project(&[]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["rule", "MEM001"]));
    assert_eq!(code, 0);
    assert!(
        out.starts_with("# missing-optimizer-state (MEM001)"),
        "{out}"
    );
    assert!(out.contains("## Example (train.py)"), "{out}");
    let (_, out, _) = stdout(memlint(dir.path()).args(["rules", "--output-format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(v
        .as_array()
        .is_some_and(|a| a.iter().any(|r| r["code"] == "GA001")));
    let (code, _, err) = stdout(memlint(dir.path()).args(["rule", "NOPE1"]));
    assert_eq!(code, 2);
    assert!(err.contains("unknown rule"), "{err}");
}

#[test]
fn check_subcommand_and_default_path() {
    let dir = project(&[("train.py", BUDGET)]);
    let (code, out, _) = stdout(memlint(dir.path()).args(["check", "--output-format", "concise"]));
    assert_eq!(code, 1);
    assert!(out.contains("train.py:5:31: MEM001"), "{out}");
}

#[test]
fn launcher_context_reaches_the_script() {
    let script = "def budget(gpu_memory_gb, model_size_gb):\n    return gpu_memory_gb - model_size_gb * 2\n\nfor step in range(10):\n    loss = compute()\n    loss.backward()\n";
    let dir = project(&[
        ("train.py", script),
        (
            "launch.sh",
            "#!/bin/bash\npython train.py --optim adamw_torch\n",
        ),
    ]);
    let (_, out, _) = stdout(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert!(
        out.contains("train.py:2:28: MEM001") && out.contains("(seen at launch.sh:2)"),
        "{out}"
    );
}

#[test]
fn a_file_named_alone_keeps_the_context_around_it() {
    // What a pre-commit hook passes: only the files that changed. The launcher beside the script
    // runs it under DeepSpeed with a config that does not accumulate, so dividing the loss by
    // the config's factor (1) is harmless.
    let script = "import json\nimport deepspeed\n\ndef train(args, model, loader):\n    engine, _, _, _ = deepspeed.initialize(model=model, config=args.deepspeed_config)\n    with open(args.deepspeed_config) as f:\n        gas = json.load(f)[\"gradient_accumulation_steps\"]\n    for batch in loader:\n        loss = engine(batch) / gas\n        engine.backward(loss)\n        engine.step()\n";
    let dir = project(&[
        ("train.py", script),
        (
            "ds.json",
            "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": 1\n}\n",
        ),
        (
            "launch.sh",
            "#!/bin/bash\ndeepspeed --num_gpus 1 train.py --deepspeed --deepspeed_config ds.json\n",
        ),
    ]);
    let concise = |args: &[&str]| {
        let mut all = vec![
            "--isolated",
            "--select",
            "ALL",
            "--output-format",
            "concise",
        ];
        all.extend_from_slice(args);
        stdout(memlint(dir.path()).args(&all))
    };
    // The whole project: the script is clean under the config its launcher names.
    let (_, whole, _) = concise(&["."]);
    assert!(!whole.contains("train.py:"), "{whole}");
    // The script alone: the same verdict, and nothing reported on the files around it.
    let (code, alone, _) = concise(&["train.py"]);
    assert_eq!((code, alone.trim()), (0, "All checks passed!"), "{alone}");
    // The script run alone without that context divides by an unknown factor again.
    let lone = project(&[("train.py", script)]);
    let (_, bare, _) =
        stdout(memlint(lone.path()).args(["--isolated", "--output-format", "concise", "train.py"]));
    assert!(bare.contains("train.py:10:9: GA002"), "{bare}");
}

#[test]
fn a_launcher_or_config_named_alone_is_judged_with_the_other() {
    let dir = project(&[
        (
            "train.py",
            "import deepspeed\n\ndef main(args, model):\n    engine, _, _, _ = deepspeed.initialize(args=args, model=model)\n",
        ),
        (
            "ds.json",
            "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": 4\n}\n",
        ),
        (
            "launch.sh",
            "#!/bin/bash\ndeepspeed --num_gpus 8 train.py --deepspeed --deepspeed_config ds.json\n",
        ),
    ]);
    let concise = |path: &str| {
        stdout(memlint(dir.path()).args(["--isolated", "--output-format", "concise", path]))
    };
    // The config alone: the world size comes from the launcher beside it.
    let (code, config, _) = concise("ds.json");
    assert_eq!(code, 1, "{config}");
    assert!(config.starts_with("ds.json:2:23: BS001 DeepSpeed refuses this batch: train_batch_size 64 != micro batch 4 x accumulation 4 x 8 data-parallel ranks = 128"), "{config}");
    // The launcher alone: the config is read for context only, so the launcher is where the
    // finding lands.
    let (code, launcher, _) = concise("launch.sh");
    assert_eq!(code, 1, "{launcher}");
    assert!(
        launcher.starts_with("launch.sh:2:45: BS001 ds.json: DeepSpeed refuses this batch"),
        "{launcher}"
    );
    assert!(!launcher.contains("\nds.json:"), "{launcher}");
    // The script alone: nothing of its own to report.
    let (code, script, _) = concise("train.py");
    assert_eq!((code, script.trim()), (0, "All checks passed!"));
}
