//! Jupyter notebooks end to end: cell numbers in the human and JSON formats, `.ipynb` lines in the
//! github and sarif formats, fixes that rewrite only the changed source lines, suppression inside
//! cells, and malformed notebooks reported and skipped.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn fixture() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/notebook/finetune.ipynb");
    fs::read_to_string(path).expect("fixture")
}

fn memlint(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("memlint").expect("binary");
    cmd.current_dir(dir)
        .env_remove("NO_COLOR")
        .env_remove("FORCE_COLOR")
        .env_remove("MEMLINT_OUTPUT_FORMAT")
        .env("COLUMNS", "100");
    cmd
}

fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A minimal nbformat 4 notebook from `(cell_type, source lines)`.
fn notebook(cells: &[(&str, &[&str])]) -> String {
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .map(|(kind, lines)| {
            let mut cell = serde_json::json!({"cell_type": kind, "metadata": {}, "source": lines});
            if *kind == "code" {
                cell["outputs"] = serde_json::json!([]);
                cell["execution_count"] = serde_json::Value::Null;
            }
            cell
        })
        .collect();
    let nb = serde_json::json!({
        "cells": cells,
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    });
    serde_json::to_string_pretty(&nb).expect("json") + "\n"
}

const OPTIMIZER: &[&str] = &[
    "import torch\n",
    "model = torch.nn.Linear(4096, 4096)\n",
    "optimizer = torch.optim.AdamW(model.parameters())",
];

/// The 1-based line of the fixture file holding `needle`, and the character column where it starts.
fn line_col(text: &str, needle: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|b| (i + 1, l[..b].chars().count() + 1)))
        .expect("needle in file")
}

#[test]
fn both_diagnostics_name_their_cell_in_human_and_json_output() {
    let dir = project(&[("finetune.ipynb", &fixture())]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        out,
        "finetune.ipynb:cell 5:1:29: MEM001 memory formula counts the model 2x (params + grads); AdamW keeps 2 more states per parameter: expected at least 4x (seen at finetune.ipynb:cell 3:4)\n\
         finetune.ipynb:cell 7:7:5: GA001 loss reaches backward() undivided while the optimizer steps every `accum_steps` micro-batches: gradients come out 8x (`accum_steps`) the full-batch gradient [*]\n\
         Found 2 diagnostics.\n[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    );

    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "json", "."]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let found: Vec<(String, u64, u64, u64)> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap_or("").to_string(),
                d["cell"].as_u64().unwrap_or(0),
                d["location"]["row"].as_u64().unwrap_or(0),
                d["location"]["column"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        found,
        [("MEM001".into(), 5, 1, 29), ("GA001".into(), 7, 7, 5)]
    );
    // Fix edits count rows in the same cell.
    assert_eq!(v[1]["fix"]["edits"][0]["location"]["row"], 7);
    assert_eq!(v[1]["fix"]["edits"][0]["content"], "(loss / accum_steps)");

    // The full format shows the cell as written, numbered from its first row.
    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "full", "."]));
    assert!(
        out.contains("╭─[finetune.ipynb:cell 7:7:5]\n 6 │     loss = criterion(model(x), y)\n 7 │     loss.backward()\n"),
        "{out}"
    );
}

#[test]
fn json_of_a_python_file_has_no_cell_key() {
    let dir = project(&[(
        "train.py",
        "import torch\nopt = torch.optim.AdamW(m.parameters())\nfree = gpu_gb - model_size_gb * 2\n",
    )]);
    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "json", "."]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["code"], "MEM001");
    assert!(v[0].get("cell").is_none(), "{out}");
}

#[test]
fn github_and_sarif_point_at_the_ipynb_line() {
    let text = fixture();
    let dir = project(&[("finetune.ipynb", &text)]);
    let (mem_line, mem_col) = line_col(&text, "model_size_gb * 2");
    let (ga_line, ga_col) = line_col(&text, "loss.backward()\\n");

    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "github", "."]));
    assert_eq!(code, 1);
    let expected_mem = format!(
        "::error file=finetune.ipynb,line={mem_line},col={mem_col},endLine={mem_line},endColumn={},title=memlint (MEM001)::cell 5, line 1: memory formula",
        mem_col + "model_size_gb * 2".len()
    );
    assert!(out.contains(&expected_mem), "{out}");
    let expected_ga = format!(
        "::error file=finetune.ipynb,line={ga_line},col={ga_col},endLine={ga_line},endColumn={},title=memlint (GA001)::cell 7, line 7: ",
        ga_col + "loss.backward()".len()
    );
    assert!(out.contains(&expected_ga), "{out}");

    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "sarif", "."]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("sarif");
    let results = v["runs"][0]["results"].as_array().expect("results");
    let region = &results[1]["locations"][0]["physicalLocation"]["region"];
    assert_eq!(results[1]["ruleId"], "GA001");
    assert_eq!(region["startLine"], ga_line);
    assert_eq!(region["startColumn"], ga_col);
    // Its fix replaces the JSON string contents of that line.
    let replacement = &results[1]["fixes"][0]["artifactChanges"][0]["replacements"][0];
    assert_eq!(replacement["deletedRegion"]["startLine"], ga_line);
    assert_eq!(
        replacement["insertedContent"]["text"],
        "(loss / accum_steps)"
    );
}

#[test]
fn fix_rewrites_only_the_changed_source_lines() {
    let original = fixture();
    let dir = project(&[("finetune.ipynb", &original)]);
    let path = dir.path().join("finetune.ipynb");

    // --diff changes nothing and shows the JSON lines that would change.
    let (code, out, _) = run(memlint(dir.path()).args(["--diff", "--unsafe-fixes", "."]));
    assert_eq!(code, 1);
    assert!(
        out.contains(
            "-    \"    loss.backward()\\n\",\n+    \"    (loss / accum_steps).backward()\\n\",\n"
        ),
        "{out}"
    );
    assert_eq!(fs::read_to_string(&path).expect("read"), original);

    // Safe fixes only: the loop is repaired, the unsafe memory fix is not applied.
    let (code, out, _) =
        run(memlint(dir.path()).args(["--fix", "--output-format", "concise", "."]));
    assert_eq!(code, 1, "MEM001 remains: {out}");
    assert!(out.contains("finetune.ipynb:cell 5:1:29: MEM001"), "{out}");
    assert!(!out.contains("GA001"), "{out}");
    let expected = original.replace(
        "\"    loss.backward()\\n\",",
        "\"    (loss / accum_steps).backward()\\n\",",
    );
    assert_ne!(expected, original);
    assert_eq!(fs::read_to_string(&path).expect("read"), expected);

    // With the unsafe fixes as well, the memory formula is repaired and nothing remains.
    let (code, out, _) = run(memlint(dir.path()).args([
        "--fix",
        "--unsafe-fixes",
        "--output-format",
        "concise",
        ".",
    ]));
    assert_eq!(code, 0, "{out}");
    let fixed = fs::read_to_string(&path).expect("read");
    let expected = expected.replace(
        "\"usable_gb = gpu_memory_gb - model_size_gb * 2\\n\",",
        "\"usable_gb = gpu_memory_gb - model_size_gb * 4  # params 1x + grads 1x + AdamW states 2x\\n\",",
    );
    assert_eq!(fixed, expected);
    // Every other line of the file is byte-identical, and it is still a notebook.
    let changed: Vec<usize> = original
        .split('\n')
        .zip(fixed.split('\n'))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        changed,
        [
            line_col(&original, "model_size_gb * 2").0,
            line_col(&original, "    loss.backward()\\n").0
        ]
    );
    let v: serde_json::Value = serde_json::from_str(&fixed).expect("still JSON");
    assert_eq!(
        v["cells"][4]["source"][0],
        "usable_gb = gpu_memory_gb - model_size_gb * 4  # params 1x + grads 1x + AdamW states 2x\n"
    );
}

#[test]
fn string_sources_are_linted_and_fixed_in_place() {
    // nbformat allows a cell's source as one string as well as a list of lines.
    let text = serde_json::json!({
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": "import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": "for i, (x, y) in enumerate(loader):\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    if (i + 1) % accum == 0:\n        optimizer.step()\n        optimizer.zero_grad()"}
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5
    })
    .to_string();
    let dir = project(&[("nb.ipynb", &text)]);
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1);
    assert!(out.starts_with("nb.ipynb:cell 2:3:5: GA001"), "{out}");
    let (code, _, _) = run(memlint(dir.path()).args(["--fix", "."]));
    assert_eq!(code, 0);
    let fixed = fs::read_to_string(dir.path().join("nb.ipynb")).expect("read");
    assert_eq!(
        fixed,
        text.replace("\\n    loss.backward()", "\\n    (loss / accum).backward()")
    );
}

#[test]
fn suppression_comments_work_inside_cells() {
    let nb = notebook(&[
        ("code", OPTIMIZER),
        (
            "code",
            &["free_gb = gpu_gb - model_size_gb * 2  # memlint: ignore[MEM001]\n"],
        ),
        (
            "code",
            &[
                "spare_gb = gpu_gb - model_size_gb * 2  # noqa: MEM001\n",
                "left_gb = gpu_gb - model_size_gb * 2",
            ],
        ),
        // Alone on a cell's last line, a directive does not reach into the next cell.
        ("code", &["x = 1\n", "# memlint: ignore[MEM001]"]),
        ("code", &["rest_gb = gpu_gb - model_size_gb * 2"]),
    ]);
    let dir = project(&[("nb.ipynb", &nb)]);
    let (code, out, _) = run(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "--extend-select",
        "ML900",
        ".",
    ]));
    assert_eq!(code, 1);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("nb.ipynb"))
        .map(|l| l.split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        [
            "nb.ipynb:cell 3:2:20", // not suppressed
            "nb.ipynb:cell 4:2:19", // the directive that reaches no line
            "nb.ipynb:cell 5:1:20",
        ],
        "{out}"
    );
}

#[test]
fn magics_and_shell_escapes_do_not_break_the_parse() {
    let nb = notebook(&[
        (
            "code",
            &[
                "%load_ext autoreload\n",
                "%autoreload 2\n",
                "!pip install -q torch\n",
                "files = !ls data\n",
                "import torch\n",
                "optimizer = torch.optim.AdamW(model.parameters())\n",
                "torch.optim.AdamW?",
            ],
        ),
        ("code", &["%%bash\n", "echo model_size_gb * 2\n"]),
        ("code", &["headroom = gpu_gb - model_size_gb * 2"]),
    ]);
    let dir = project(&[("nb.ipynb", &nb)]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1, "{err}");
    assert!(out.starts_with("nb.ipynb:cell 3:1:21: MEM001"), "{out}");
    assert!(out.contains("Found 1 diagnostic."), "{out}");
    // The parse is clean, so the notebook may be rewritten.
    let (code, _, err) = run(memlint(dir.path()).args(["--fix", "--unsafe-fixes", "."]));
    assert_eq!(code, 0, "{err}");
    assert!(fs::read_to_string(dir.path().join("nb.ipynb"))
        .expect("read")
        .contains("\"headroom = gpu_gb - model_size_gb * 4  # params"));
}

#[test]
fn malformed_notebooks_are_reported_and_skipped() {
    let good = notebook(&[
        ("code", OPTIMIZER),
        ("code", &["free = gpu_gb - model_size_gb * 2"]),
    ]);
    let dir = project(&[
        ("a_bad_json.ipynb", "{\"cells\": [\n"),
        ("b_no_cells.ipynb", "{\"metadata\": {}, \"nbformat\": 4}"),
        (
            "c_bad_source.ipynb",
            "{\"cells\": [{\"cell_type\": \"code\", \"source\": {\"x\": 1}}]}",
        ),
        ("d_good.ipynb", &good),
        (
            "e_julia.ipynb",
            "{\"cells\": [{\"cell_type\": \"code\", \"source\": [\"x = model_size_gb * 2\"]}], \"metadata\": {\"kernelspec\": {\"language\": \"julia\"}}}",
        ),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1, "the good notebook is still linted");
    assert!(out.starts_with("d_good.ipynb:cell 2:1:17: MEM001"), "{out}");
    assert_eq!(
        err,
        "memlint: warning: a_bad_json.ipynb: skipped: malformed notebook: invalid notebook JSON: EOF while parsing a list at line 2 column 0\n\
         memlint: warning: b_no_cells.ipynb: skipped: malformed notebook: not a notebook: no \"cells\" list\n\
         memlint: warning: c_bad_source.ipynb: skipped: malformed notebook: cell 1 (line 1): \"source\" must be a string or a list of strings (nbformat 4)\n"
    );
}

#[test]
fn context_is_shared_across_cells() {
    // The optimizer is built in one cell; the memory formula three cells later knows it.
    let nb = notebook(&[
        ("code", &["import torch\n"]),
        (
            "code",
            &["optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"],
        ),
        ("markdown", &["no momentum: no state\n"]),
        ("code", &["free = gpu_gb - model_size_gb * 2"]),
    ]);
    let dir = project(&[("sgd.ipynb", &nb)]);
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 0, "plain SGD keeps no state: {out}");

    let nb = nb.replace(
        "SGD(model.parameters(), lr=0.1)",
        "Adam(model.parameters())",
    );
    fs::write(dir.path().join("sgd.ipynb"), nb).expect("write");
    let (code, out, _) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1);
    assert!(
        out.contains("cell 4:1:17: MEM001") && out.contains("(seen at sgd.ipynb:cell 2:1)"),
        "{out}"
    );
}
