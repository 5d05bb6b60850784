//! Hostile inputs, generated at test time in a temporary folder: for each, memlint exits 0, 1 or 2,
//! names the file it skipped and says why, and never panics, overflows its stack or hangs (a run is
//! killed after a generous timeout, which fails the test).

use assert_cmd::Command;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// MEM001 at 4:27 (the optimizer is seen on line 3).
const BUDGET: &str = "import torch\n\nopt = torch.optim.AdamW(model.parameters())\nfree_gb = gpu_memory_gb - model_size_gb * 2\n";

/// Deep enough to overflow any recursive descent on a thread's stack.
const DEEP: usize = 100_000;

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Run memlint (no configuration files) in `dir` and check what every run must satisfy.
fn run(dir: &Path, args: &[&str]) -> Outcome {
    let out = Command::cargo_bin("memlint")
        .expect("binary")
        .current_dir(dir)
        .env_remove("MEMLINT_OUTPUT_FORMAT")
        .env("NO_COLOR", "1")
        .arg("--isolated")
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run memlint");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // No exit code: killed by a signal (a stack overflow aborts) or by the timeout.
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| (0..=2).contains(&c)),
        "memlint {args:?} exited with {:?}\nstderr:\n{}",
        out.status,
        tail(&stderr)
    );
    assert!(
        !stderr.contains("panicked"),
        "memlint {args:?} panicked:\n{}",
        tail(&stderr)
    );
    Outcome {
        code: code.unwrap_or(-1),
        stdout,
        stderr,
    }
}

fn tail(s: &str) -> &str {
    let cut = s.len().saturating_sub(2000);
    s.get(cut..).unwrap_or(s)
}

fn write(dir: &Path, name: &str, content: impl AsRef<[u8]>) {
    fs::write(dir.join(name), content).expect("write input");
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn nested(open: &str, inner: &str, close: &str, depth: usize) -> String {
    format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
}

#[test]
fn syntax_errors_mid_file_keep_the_diagnostics_of_what_parses() {
    let dir = tempdir();
    let py = format!(
        "{BUDGET}\ndef broken(:\n    return ]\n\nfor i, (x, y) in enumerate(loader):\n    loss = criterion(model(x), y)\n    loss.backward()\n    if (i + 1) % accum_steps == 0:\n        opt.step()\n\nx = = 1\n"
    );
    write(dir.path(), "train.py", &py);
    write(
        dir.path(),
        "budget.sh",
        "#!/bin/bash\nOPTIM=adamw\nFREE=$(( GPU_GB - MODEL_SIZE_GB * 2 ))\nif [ \"$x\" = ; then\n  fi fi\ncase in\n",
    );
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout.contains("train.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("train.py:11:5: GA001"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("budget.sh:3:19: MEM001"),
        "{}",
        out.stdout
    );

    // Fixes are not written into a file that does not parse, and the user is told.
    let out = run(dir.path(), &["--fix", "--unsafe-fixes", "train.py"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("train.py: has syntax errors; analysed what parses, not rewritten"),
        "{}",
        out.stderr
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("train.py")).expect("read"),
        py
    );
}

#[test]
fn undecodable_binary_and_empty_files_are_skipped_by_name() {
    let dir = tempdir();
    write(dir.path(), "train.py", BUDGET);
    // Invalid UTF-8: a Latin-1 byte, and a multi-byte sequence cut short at the end.
    write(dir.path(), "latin1.py", b"model_size_gb = 1  # caf\xe9\n");
    write(dir.path(), "cut.yaml", b"optim: adamw\nname: \xe2\x82");
    // A compiled file and a UTF-16 file carry NUL bytes.
    let mut binary = b"\x6f\x0d\x0d\x0a\x00\x00\x00\x00".to_vec();
    binary.extend((0u32..4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    write(dir.path(), "compiled.py", &binary);
    let utf16: Vec<u8> = "model_size_gb = 1\n"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    write(dir.path(), "utf16.py", &utf16);
    write(dir.path(), "nul.sh", b"#!/bin/bash\necho a\0b\n");
    for empty in ["empty.py", "empty.sh", "empty.yaml", "empty.toml"] {
        write(dir.path(), empty, "");
    }

    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout.contains("train.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
    for (file, reason) in [
        ("latin1.py", "not valid UTF-8"),
        ("cut.yaml", "not valid UTF-8"),
        ("compiled.py", "binary file"),
        ("utf16.py", "binary file"),
        ("nul.sh", "binary file"),
    ] {
        assert!(
            out.stderr
                .contains(&format!("memlint: warning: {file}: skipped: {reason}")),
            "{file}: {}",
            out.stderr
        );
    }
    assert!(!out.stderr.contains("empty."), "{}", out.stderr);

    // Alone, an empty file passes.
    let out = run(
        dir.path(),
        &["empty.py", "empty.sh", "empty.yaml", "empty.toml"],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

#[test]
fn an_enormous_file_is_skipped_and_the_rest_is_linted() {
    let dir = tempdir();
    write(dir.path(), "train.py", BUDGET);
    let line = "free_gb = gpu_memory_gb - model_size_gb * 2\n";
    let big = line.repeat(50 * 1024 * 1024 / line.len() + 1);
    write(dir.path(), "generated.py", big);
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("memlint: warning: generated.py: skipped: larger than 10 MB"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("train.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
}

#[test]
fn deeply_nested_code_does_not_overflow_the_stack() {
    let dir = tempdir();
    // Memory names make the prefilter keep every Python file: all of them are parsed.
    let files = [
        (
            "parens.py",
            format!(
                "{BUDGET}x_gb = model_size_gb * {}\n",
                nested("(", "2", ")", DEEP)
            ),
        ),
        (
            "brackets.py",
            format!("{BUDGET}x = {}\n", nested("[", "", "]", DEEP)),
        ),
        (
            "braces.py",
            format!("{BUDGET}x = {}\n", nested("{1: ", "1", "}", DEEP / 4)),
        ),
        (
            "calls.py",
            format!(
                "{BUDGET}x_gb = {}\n",
                nested("f(", "model_size_gb", ")", DEEP)
            ),
        ),
        (
            "unary.py",
            format!("{BUDGET}x_gb = {}model_size_gb\n", "-".repeat(DEEP)),
        ),
        (
            "attributes.py",
            format!("{BUDGET}x_gb = a{}.model_size_gb\n", ".b".repeat(DEEP)),
        ),
        (
            "unclosed.py",
            format!("{BUDGET}x_gb = {}model_size_gb\n", "(".repeat(DEEP)),
        ),
        (
            "blocks.py",
            format!(
                "{BUDGET}{}{}x_gb = model_size_gb * 2\n",
                (0..1000)
                    .map(|i| format!("{}if x:\n", " ".repeat(i)))
                    .collect::<String>(),
                " ".repeat(1000)
            ),
        ),
        (
            "arith.sh",
            format!(
                "#!/bin/bash\nOPTIM=adamw\nFREE=$(( GPU_GB - MODEL_SIZE_GB * {} ))\n",
                nested("(", "2", ")", DEEP)
            ),
        ),
        (
            "subshells.sh",
            format!("#!/bin/bash\nX={}\n", nested("$(", "echo", ")", DEEP / 5)),
        ),
        // Each config holds a key a rule reads (`optimizer`, `lr`): the prefilter reads it whole.
        (
            "arrays.json",
            format!("{{\"optimizer\": {}}}", nested("[", "", "]", DEEP)),
        ),
        ("objects.json", nested("{\"optimizer\": ", "1", "}", DEEP)),
        (
            "flow.yaml",
            format!("optimizer: {}\n", nested("[", "", "]", DEEP)),
        ),
        (
            "flow_maps.yaml",
            format!("optimizer: {}\n", nested("{b: ", "1", "}", DEEP)),
        ),
        (
            "blocks.yaml",
            (0..2000)
                .map(|i| format!("{}lr:\n", " ".repeat(i)))
                .collect::<String>(),
        ),
        (
            "arrays.toml",
            format!("optimizer = {}\n", nested("[", "", "]", DEEP)),
        ),
        (
            "tables.toml",
            format!("optimizer = {}\n", nested("{b = ", "1", "}", DEEP)),
        ),
    ];
    for (name, content) in &files {
        write(dir.path(), name, content);
    }
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    // The deep files do not hide the diagnostics of their first lines.
    for name in ["parens.py", "brackets.py", "calls.py", "unclosed.py"] {
        assert!(
            out.stdout.contains(&format!("{name}:4:27: MEM001")),
            "{name}: {}",
            out.stdout
        );
    }
    // Configs nested beyond what memlint reads are skipped, by name, when they are read: the
    // prefilter passes over a file with more keys than a config holds (`objects.json` and
    // `flow_maps.yaml` open a mapping at every level), so the readers are also run on every
    // config without it.
    let configs = [
        "arrays.json",
        "objects.json",
        "flow.yaml",
        "flow_maps.yaml",
        "arrays.toml",
        "tables.toml",
    ];
    let mut whole = vec!["--output-format", "concise", "--no-prefilter"];
    whole.extend(configs);
    let read = run(dir.path(), &whole);
    for name in configs {
        assert!(
            read.stderr
                .contains(&format!("memlint: warning: {name}: skipped: invalid")),
            "{name}: {}",
            read.stderr
        );
        let data = matches!(name, "objects.json" | "flow_maps.yaml");
        assert_eq!(
            out.stderr
                .contains(&format!("memlint: warning: {name}: skipped: invalid")),
            !data,
            "{name}: {}",
            out.stderr
        );
    }
    // Every output format, and fixing, cope with the deep files.
    for format in ["full", "json", "sarif", "github"] {
        run(
            dir.path(),
            &["--output-format", format, "parens.py", "arith.sh"],
        );
    }
    let out = run(dir.path(), &["--fix", "--unsafe-fixes", "parens.py"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let fixed = fs::read_to_string(dir.path().join("parens.py")).expect("read");
    assert!(
        fixed.contains("free_gb = gpu_memory_gb - model_size_gb * 4"),
        "{}",
        &fixed[..300]
    );
}

/// Shapes where every nesting level is analysed on its own (each comparison is a formula, each call
/// is read for evidence, each `$((` in an argument is a command substitution holding a command):
/// work per level must not
/// grow with the text inside it, or memory and time are quadratic (20,000 levels took 4 GB).
#[test]
fn nesting_where_every_level_is_analysed_stays_linear() {
    let dir = tempdir();
    let levels = 10_000;
    write(
        dir.path(),
        "compare.py",
        format!(
            "{BUDGET}x = {}\n",
            nested("(model_size_gb * 2 < ", "1", ")", levels)
        ),
    );
    write(
        dir.path(),
        "expand.sh",
        format!(
            "#!/bin/bash\nOPTIM=adamw\nX={}\necho {}\n",
            nested("$(( MODEL_SIZE_GB * 2 + ", "1", " ))", levels),
            nested("$(( MODEL_SIZE_GB * 2 + ", "1", " ))", levels)
        ),
    );
    write(
        dir.path(),
        "calls.py",
        format!(
            "{BUDGET}x = {}\ny = f{}\nz = p{}\n",
            nested("a.to(", "torch.bfloat16", ")", levels),
            "(1)".repeat(levels),
            ".grad.div_(2)".repeat(levels)
        ),
    );
    write(
        dir.path(),
        "commands.sh",
        format!(
            "#!/bin/bash\necho {}\n",
            nested("$(echo --optim ", "adamw", ")", levels)
        ),
    );
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout.contains("compare.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
}

/// An attribute saved and restored around a call (`saved = self.width ... self.width = saved`)
/// in a method called from several places: each read of the attribute is valued at each call
/// site, and it reads itself. Valued once per binding, the file takes milliseconds; valued again
/// at every level, the work multiplies by the call sites at each of ~190 levels and never ends.
#[test]
fn attributes_that_read_themselves_are_valued_once() {
    let dir = tempdir();
    let mut src = format!("{BUDGET}\nclass Padder:\n");
    for m in 0..6 {
        src.push_str(&format!(
            "    def pad{m}(self, x, size):\n        saved = self.width\n        \
             self.width = size\n        y = x * self.width\n        self.width = saved\n        \
             return y\n\n"
        ));
    }
    src.push_str("    def run(self, x):\n");
    for m in 0..6 {
        src.push_str(&format!(
            "        x = self.pad{m}(x, 4) + self.pad{m}(x, 8) + self.pad{m}(x, 16)\n"
        ));
    }
    src.push_str("        return x\n");
    write(dir.path(), "cycle.py", src);
    let out = run(
        dir.path(),
        &[
            "--no-prefilter",
            "--select",
            "ALL",
            "--output-format",
            "concise",
            ".",
        ],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout.contains("cycle.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
}

#[test]
fn ten_thousand_line_expressions_and_lines() {
    let dir = tempdir();
    let terms: String = (0..10_000).map(|i| format!("\n    + part_{i}")).collect();
    write(
        dir.path(),
        "long.py",
        format!("{BUDGET}total_gb = (model_size_gb * 2{terms}\n)\nfree_gb = gpu_memory_gb - model_size_gb * 2\n"),
    );
    write(
        dir.path(),
        "wide.py",
        format!(
            "{BUDGET}total_gb = model_size_gb * 2{}\n",
            " + x".repeat(100_000)
        ),
    );
    write(
        dir.path(),
        "long.sh",
        format!(
            "#!/bin/bash\nOPTIM=adamw\nTOTAL=$(( MODEL_SIZE_GB * 2{} ))\n",
            (0..10_000)
                .map(|i| format!(" \\\n + P{i}"))
                .collect::<String>()
        ),
    );
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1);
    // The formula after the long one is still read.
    assert!(
        out.stdout.contains("long.py:10007:27: MEM001"),
        "{}",
        out.stdout
    );
    for format in ["full", "json"] {
        run(dir.path(), &["--output-format", format, "."]);
    }

    // A diagnostic past column 65,535 (miette pads to the label's column): shown without the
    // source line, in every format.
    write(
        dir.path(),
        "far.py",
        format!("{BUDGET}x = 1{}  # noqa: GA001\n", " + 1".repeat(20_000)),
    );
    for format in ["full", "concise", "github", "sarif"] {
        let out = run(
            dir.path(),
            &["--select", "ALL", "--output-format", format, "far.py"],
        );
        assert_eq!(out.code, 1, "{}", out.stderr);
    }
    let out = run(
        dir.path(),
        &["--select", "ALL", "--output-format", "full", "far.py"],
    );
    assert!(
        out.stdout.contains("far.py:5:80016: ML900 (")
            && out.stdout.contains("unused suppression: GA001"),
        "{}",
        &out.stdout[..out.stdout.len().min(2000)]
    );
}

#[test]
fn long_runs_of_comment_lines_stay_linear_and_keep_their_directives() {
    // tree-sitter-python looks ahead over a whole run of comment lines at each line of it: parsed
    // as written, these 30,000 lines would take minutes.
    let dir = tempdir();
    let run_of_comments = "# a line of code commented out and kept for reference\n".repeat(30_000);
    let string_of_hashes = "# memlint: ignore[MEM001] inside a string\n".repeat(30_000);
    write(
        dir.path(),
        "commented.py",
        format!(
            "{BUDGET}{run_of_comments}# memlint: ignore[MEM001]\nfree_gb = gpu_memory_gb - model_size_gb * 2\nx_gb = gpu_memory_gb - model_size_gb * 2\nDOC = \"\"\"\n{string_of_hashes}\"\"\"\ny_gb = gpu_memory_gb - model_size_gb * 2\n"
        ),
    );
    let out = run(
        dir.path(),
        &["--select", "ALL", "--output-format", "concise", "."],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.contains(": ")).collect();
    assert_eq!(
        lines,
        [
            "commented.py:4:27: MEM001 memory formula counts the model 2x (params + grads); AdamW keeps 2 more states per parameter: expected at least 4x (seen at commented.py:3)",
            "commented.py:30007:24: MEM001 memory formula counts the model 2x (params + grads); AdamW keeps 2 more states per parameter: expected at least 4x (seen at commented.py:3)",
            "commented.py:60010:24: MEM001 memory formula counts the model 2x (params + grads); AdamW keeps 2 more states per parameter: expected at least 4x (seen at commented.py:3)",
        ],
        "the directive above line 30006 applies and is used; those in the string are text"
    );
}

#[test]
fn yaml_alias_bombs_are_not_expanded() {
    let dir = tempdir();
    let mut bomb = String::from(
        "a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n",
    );
    let names: Vec<char> = ('b'..='z').collect();
    let mut prev = 'a';
    for n in names {
        bomb.push_str(&format!(
            "{n}: &{n} [{}]\n",
            vec![format!("*{prev}"); 9].join(", ")
        ));
        prev = n;
    }
    bomb.push_str("optimizer: *z\n");
    write(dir.path(), "bomb.yaml", &bomb);
    // Merge keys that multiply, and an alias of itself.
    // Each file holds a key a rule reads, so that the prefilter hands it to the reader.
    let mut merges = String::from("optimizer: adamw\nbase: &b0 {x: 1}\n");
    for i in 1..40 {
        merges.push_str(&format!(
            "l{i}: &b{i}\n  <<: [*b{}, *b{}]\n  k{i}: 1\n",
            i - 1,
            i - 1
        ));
    }
    write(dir.path(), "merges.yaml", &merges);
    write(dir.path(), "self.yaml", "lr: &a\n  b: *a\n");
    write(dir.path(), "undefined.yaml", "optimizer: *nowhere\n");
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert!(out.code <= 1, "{}", out.stderr);
    for name in ["bomb.yaml", "merges.yaml", "self.yaml"] {
        assert!(!out.stderr.contains(name), "{}", out.stderr);
    }
    assert!(
        out.stderr
            .contains("memlint: warning: undefined.yaml: skipped: invalid YAML"),
        "{}",
        out.stderr
    );
}

#[cfg(unix)]
#[test]
fn symlink_loops_and_dangling_links() {
    use std::os::unix::fs::symlink;
    let dir = tempdir();
    fs::create_dir(dir.path().join("sub")).expect("mkdir");
    write(dir.path(), "sub/train.py", BUDGET);
    symlink("..", dir.path().join("sub/up")).expect("symlink");
    symlink(".", dir.path().join("sub/here")).expect("symlink");
    symlink("self.py", dir.path().join("self.py")).expect("symlink");
    symlink("b.py", dir.path().join("a.py")).expect("symlink");
    symlink("a.py", dir.path().join("b.py")).expect("symlink");
    symlink("missing.py", dir.path().join("dangling.py")).expect("symlink");

    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        out.stdout.matches("MEM001").count(),
        1,
        "linted once: {}",
        out.stdout
    );

    // Named explicitly, each is an error naming it, and the run ends before any file is read.
    let out = run(
        dir.path(),
        &[
            "--output-format",
            "concise",
            "self.py",
            "a.py",
            "dangling.py",
            "sub/up",
            "sub",
        ],
    );
    assert_eq!(out.code, 2);
    for name in ["self.py", "a.py"] {
        assert!(
            out.stderr.contains(&format!("memlint: error: {name}: ")),
            "{}",
            out.stderr
        );
    }
    assert!(
        out.stderr
            .contains("memlint: error: dangling.py: no such file or directory"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "", "nothing is linted");
}

/// Run memlint in `dir` as an unprivileged user (`setpriv`), for tests running as root: root reads
/// files whatever their mode. `None` when that is not possible here (no `setpriv`, or the binary or
/// the folder out of that user's reach), which the probe, a run on `train.py`, tells.
#[cfg(unix)]
fn unprivileged(dir: &Path, args: &[&str]) -> Option<Outcome> {
    let bin = assert_cmd::cargo::cargo_bin("memlint");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .arg("--isolated")
            .args(args)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .output()
            .ok()?;
        Some(Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    };
    let probe = run(&["--output-format", "concise", "train.py"])?;
    if probe.code != 1 || !probe.stdout.contains("train.py:4:27: MEM001") {
        return None;
    }
    run(args)
}

#[cfg(unix)]
#[test]
fn unreadable_files_and_folders() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    write(dir.path(), "train.py", BUDGET);
    write(dir.path(), "locked.py", BUDGET);
    fs::create_dir(dir.path().join("closed")).expect("mkdir");
    write(dir.path(), "closed/inner.py", BUDGET);
    let mode = |p: &str, m: u32| {
        fs::set_permissions(dir.path().join(p), fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode("locked.py", 0o000);
    mode("closed", 0o000);
    let root_reads = fs::read(dir.path().join("locked.py")).is_ok();

    let expect_denied = |out: &Outcome| {
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("memlint: error: locked.py: permission denied"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr
                .contains("memlint: error: closed: permission denied"),
            "{}",
            out.stderr
        );
        assert!(
            out.stdout.contains("train.py:4:27: MEM001"),
            "{}",
            out.stdout
        );
    };
    if !root_reads {
        expect_denied(&run(dir.path(), &["--output-format", "concise", "."]));
    } else {
        // As root, permissions do not stop reading: the files are linted like any other.
        let out = run(dir.path(), &["--output-format", "concise", "."]);
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stdout.contains("locked.py:4:27: MEM001"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("closed/inner.py:4:27: MEM001"),
            "{}",
            out.stdout
        );
        // And, when possible, the denied path is exercised as an unprivileged user.
        mode(".", 0o755);
        mode("train.py", 0o644);
        match unprivileged(dir.path(), &["--output-format", "concise", "."]) {
            Some(outcome) => expect_denied(&outcome),
            None => eprintln!(
                "note: running as root and cannot drop privileges; permission denial not exercised"
            ),
        }
    }
    // Let the temporary folder be removed.
    mode("closed", 0o755);
}

#[cfg(unix)]
#[test]
fn file_names_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempdir();
    let name = OsStr::from_bytes(b"caf\xe9.py");
    let folder = OsStr::from_bytes(b"d\xff\xfe");
    fs::write(dir.path().join(name), BUDGET).expect("write");
    fs::create_dir(dir.path().join(folder)).expect("mkdir");
    fs::write(dir.path().join(folder).join("t.py"), BUDGET).expect("write");

    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("caf\u{fffd}.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("d\u{fffd}\u{fffd}/t.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
    for format in ["json", "sarif", "github", "full"] {
        let out = run(dir.path(), &["--output-format", format, "."]);
        assert_eq!(out.code, 1);
        if format != "full" && format != "github" {
            let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("valid JSON");
            assert!(!v.is_null());
        }
    }
    // Fixing writes to the real (non-UTF-8) name.
    let out = Command::cargo_bin("memlint")
        .expect("binary")
        .current_dir(dir.path())
        .arg("--isolated")
        .args(["--fix", "--unsafe-fixes"])
        .arg(name)
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(fs::read_to_string(dir.path().join(name))
        .expect("read")
        .contains("model_size_gb * 4"));
}

#[cfg(unix)]
#[test]
fn a_fifo_named_like_code_does_not_block() {
    let dir = tempdir();
    write(dir.path(), "train.py", BUDGET);
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe.py"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let out = run(dir.path(), &["--output-format", "concise", "."]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("train.py:4:27: MEM001"),
        "{}",
        out.stdout
    );
    run(dir.path(), &["--output-format", "concise", "pipe.py"]);
}
