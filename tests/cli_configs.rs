//! Configs a run uses, through the binary: one that a launch, a Trainer argument or a literal
//! `open()` reaches and that does not parse is ML001 (exit 1); one nothing reaches stays a
//! warning; repeated keys are read last-value-wins, with ML002 when selected.

mod common;

use assert_cmd::Command;
use common::{memlint, project};

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const LAUNCH: &str =
    "#!/bin/bash\ndeepspeed --num_gpus 8 train.py \\\n  --bf16 \\\n  --deepspeed ds_config.json\n";

const PLACEHOLDER: &str = "{\n  \"train_batch_size\": \"auto\",\n  \"train_micro_batch_size_per_gpu\": MICRO,\n  \"zero_optimization\": {\"stage\": 2}\n}\n";

#[test]
fn a_config_the_launcher_names_that_does_not_parse_is_ml001() {
    let dir = project(&[
        ("launch.sh", LAUNCH),
        ("train.py", "import torch\n"),
        ("ds_config.json", PLACEHOLDER),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1, "CI fails where the run would: {err}");
    assert_eq!(err, "", "no warning: the file is a finding");
    assert_eq!(
        out,
        "ds_config.json:3:37: ML001 invalid JSON (expected a JSON value): a run of this project reads this config and fails to load it\n\
         Found 1 diagnostic.\n"
    );
    let (_, out, _) = run(memlint(dir.path()).args(["--output-format", "json", "."]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["code"], "ML001");
    assert_eq!(v[0]["name"], "invalid-config");
    assert_eq!(v[0]["severity"], "error");
    assert_eq!(
        v[0]["location"],
        serde_json::json!({"row": 3, "column": 37})
    );
    assert_eq!(v[0]["fix"], serde_json::Value::Null);
    // It is a rule like the others: ignored, the file is skipped with a warning as before.
    let (code, out, err) =
        run(memlint(dir.path()).args(["--output-format", "concise", "--ignore", "ML001", "."]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    assert_eq!(
        err,
        "memlint: warning: ds_config.json: skipped: invalid JSON at 3:37: expected a JSON value\n"
    );
}

#[test]
fn a_trainer_argument_or_a_literal_open_reaches_a_config() {
    let trainer = "from transformers import Trainer, TrainingArguments\n\nargs = TrainingArguments(output_dir=\"out\", deepspeed=\"ds_zero3.json\")\n";
    let opened = "import yaml\n\nwith open(\"train.yaml\") as f:\n    cfg = yaml.safe_load(f)\n";
    let dir = project(&[
        ("sft/train.py", trainer),
        (
            "sft/ds_zero3.json",
            "{\"zero_optimization\": {\"stage\": 3,\n",
        ),
        ("pre/prepare.py", opened),
        ("pre/train.yaml", "batch_size: 8\n  lr: 1e-4\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!((code, err.as_str()), (1, ""));
    assert_eq!(
        out,
        "pre/train.yaml:2:5: ML001 invalid YAML (mapping values are not allowed in this context): a run of this project reads this config and fails to load it\n\
         sft/ds_zero3.json:2:1: ML001 invalid JSON (expected a string): a run of this project reads this config and fails to load it\n\
         Found 2 diagnostics.\n"
    );
}

#[test]
fn an_accelerate_config_the_launcher_names_is_reached() {
    let dir = project(&[
        (
            "launch.sh",
            "#!/bin/bash\naccelerate launch --config_file fsdp.yaml train.py\n",
        ),
        ("train.py", "from accelerate import Accelerator\n"),
        (
            "fsdp.yaml",
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n fsdp_offload_params: false\n",
        ),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!((code, err.as_str()), (1, ""));
    assert!(
        out.starts_with("fsdp.yaml:4:2: ML001 invalid YAML ("),
        "{out}"
    );
}

#[test]
fn a_config_nothing_reaches_stays_a_warning() {
    let dir = project(&[
        ("templates/ds_template.json", PLACEHOLDER),
        ("train.py", "import torch\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    assert_eq!(
        err,
        "memlint: warning: templates/ds_template.json: skipped: invalid JSON at 3:37: expected a JSON value\n"
    );
}

/// A JSON file a run names that holds no key a reader of configs looks at (a vocabulary, with
/// `noqa` among its words) is not read whole; one of them that does not parse is still ML001.
#[test]
fn a_data_file_a_run_names_is_ml001_only_when_it_does_not_parse() {
    let launch =
        "#!/bin/bash\ndeepspeed train.py --deepspeed data/ds.json --vocab data/vocab.json\n";
    let vocab = "{\"the\": 1, \"noqa\": 2, \"memlint\": 3}\n";
    let dir = project(&[
        ("launch.sh", launch),
        ("train.py", "import torch\n"),
        ("data/vocab.json", vocab),
        ("data/ds.json", "{\"hello\": 1,,}\n"),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(code, 1, "{err}");
    assert_eq!(err, "");
    assert_eq!(
        out,
        "data/ds.json:1:13: ML001 invalid JSON (expected a string): a run of this project reads this config and fails to load it\n\
         Found 1 diagnostic.\n"
    );
    std::fs::write(dir.path().join("data/ds.json"), "{\"hello\": 1}\n").unwrap();
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "All checks passed!\n", "")
    );
}

#[test]
fn a_reached_config_outside_the_files_linted_is_a_warning_naming_it() {
    let dir = project(&[
        ("launch.sh", LAUNCH),
        ("train.py", "import torch\n"),
        ("ds_config.json", PLACEHOLDER),
    ]);
    let (code, out, err) =
        run(memlint(dir.path()).args(["--output-format", "concise", "launch.sh"]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    assert_eq!(
        err,
        "memlint: warning: ds_config.json: invalid JSON at 3:37: expected a JSON value (a run of the files linted reads it; give its path to report it)\n"
    );
}

#[test]
fn a_yaml_directive_on_the_error_line_suppresses_ml001() {
    let dir = project(&[
        (
            "launch.sh",
            "#!/bin/bash\npython finetune.py --config recipe.yaml\n",
        ),
        ("finetune.py", "import sys\n"),
        (
            "recipe.yaml",
            "batch_size: 8\n  lr: 1e-4  # memlint: ignore[ML001]\n",
        ),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!((code, out.as_str()), (0, "All checks passed!\n"));
    assert_eq!(
        err,
        "memlint: warning: recipe.yaml: skipped: invalid YAML at 2:5: mapping values are not allowed in this context\n"
    );
}

#[test]
fn repeated_keys_are_read_last_value_wins_with_ml002_when_selected() {
    // The later accumulation value is the one the run uses: 4 x 8 x 1 = 32, not 4 x 8 x 2.
    let ds = "{\n  \"train_batch_size\": 32,\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": 2,\n  \"gradient_accumulation_steps\": 8\n}\n";
    let dir = project(&[
        (
            "launch.sh",
            "#!/bin/bash\ndeepspeed --num_gpus 1 train.py --deepspeed ds_config.json\n",
        ),
        ("train.py", "import deepspeed\n"),
        ("ds_config.json", ds),
        (
            "axolotl.yaml",
            "micro_batch_size: 2\nlr: 1\nmicro_batch_size: 4\n",
        ),
    ]);
    let (code, out, err) = run(memlint(dir.path()).args(["--output-format", "concise", "."]));
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "All checks passed!\n", ""),
        "read as json.load reads it, and ML002 is off by default"
    );
    let (code, out, err) = run(memlint(dir.path()).args([
        "--output-format",
        "concise",
        "--extend-select",
        "ML002",
        ".",
    ]));
    assert_eq!((code, err.as_str()), (1, ""));
    assert_eq!(
        out,
        "axolotl.yaml:1:1: ML002 `micro_batch_size` is written again at line 3 of the same mapping: this value is discarded (json.load and PyYAML keep the last one)\n\
         ds_config.json:4:3: ML002 `gradient_accumulation_steps` is written again at line 5 of the same mapping: this value is discarded (json.load and PyYAML keep the last one)\n\
         Found 2 diagnostics.\n"
    );
}
