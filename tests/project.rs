//! End-to-end tests of what joins files: a launcher linted without its config, the project's
//! configured GPU memory and world size, and configs that are broken or unusual.

mod common;

use common::{memlint, project};
use std::fs;
use std::path::Path;

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = memlint(dir)
        .args(["--output-format", "concise"])
        .args(args)
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const HF_SCRIPT: &str = "from transformers import Trainer, TrainingArguments\n\nTrainer(model=None, args=TrainingArguments('out')).train()\n";
const LAUNCH: &str = "#!/bin/bash\ndeepspeed --num_gpus 4 train.py \\\n  --per_device_train_batch_size 8 \\\n  --gradient_accumulation_steps 2 \\\n  --deepspeed configs/ds.json\n";
const DS: &str = "{\n  \"train_batch_size\": 32,\n  \"train_micro_batch_size_per_gpu\": 8,\n  \"gradient_accumulation_steps\": 4\n}\n";

#[test]
fn a_launcher_linted_alone_reads_its_config_and_reports_at_the_flag() {
    let dir = project(&[
        ("launch.sh", LAUNCH),
        ("train.py", HF_SCRIPT),
        ("configs/ds.json", DS),
    ]);
    let (code, out, _) = run(dir.path(), &["launch.sh"]);
    assert_eq!(code, 1, "{out}");
    // BS003 at the Trainer flag, BS001 at the word that names the config.
    assert!(
        out.contains("launch.sh:4:3: BS003 `gradient_accumulation_steps` in configs/ds.json is 4 but `--gradient_accumulation_steps 2`"),
        "{out}"
    );
    assert!(
        out.contains("launch.sh:5:3: BS001 configs/ds.json: DeepSpeed refuses this batch: train_batch_size 32 != micro batch 8 x accumulation 4 x 4 data-parallel ranks = 128"),
        "{out}"
    );
    assert!(
        !out.lines().any(|l| l.starts_with("configs/ds.json")),
        "the config is not reported on: {out}"
    );

    // Linted together, the same findings are reported in the config, with the fix offered.
    let (_, out, _) = run(dir.path(), &["."]);
    assert!(out.contains("configs/ds.json:4:34: BS003"), "{out}");
    assert!(out.contains("configs/ds.json:2:23: BS001"), "{out}");
    // With "auto" for both keys the Trainer fills them and DeepSpeed's triple holds.
    let (code, out, _) = run(dir.path(), &["--fix", "--unsafe-fixes", "."]);
    assert_eq!(code, 0, "{out}");
    let fixed = fs::read_to_string(dir.path().join("configs/ds.json")).expect("read");
    assert!(
        fixed.contains("\"train_batch_size\": \"auto\"")
            && fixed.contains("\"gradient_accumulation_steps\": \"auto\""),
        "{fixed}"
    );
}

#[test]
fn configured_gpu_memory_and_world_size_complete_the_project() {
    let train = "import torch\n\nN_PARAMS = 7_000_000_000\nmodel = torch.nn.Linear(4096, 4096)\noptimizer = torch.optim.AdamW(model.parameters())\n";
    let ds = "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"gradient_accumulation_steps\": 4\n}\n";
    let dir = project(&[("train.py", train), ("ds_config.json", ds)]);
    let (code, out, _) = run(dir.path(), &["--isolated", "."]);
    assert_eq!(
        code, 0,
        "nothing is known about the GPU or the world size: {out}"
    );

    fs::write(
        dir.path().join(".memlint.toml"),
        "gpu-memory-gb = 40\nworld-size = 8\n",
    )
    .expect("write");
    let (code, out, _) = run(dir.path(), &["."]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("train.py:3:12: MEM005 7B parameters need at least 8 B/param")
            && out.contains("56 GB > 40 GB of GPU memory")
            && out.contains("GPU memory from `gpu-memory-gb` in the memlint configuration"),
        "{out}"
    );
    assert!(
        out.contains("ds_config.json:2:23: BS001")
            && out.contains("x 8 data-parallel ranks = 128")
            && out.contains("`world-size` in the memlint configuration"),
        "{out}"
    );
}

#[test]
fn broken_configs_are_named_and_the_rest_is_linted() {
    let dir = project(&[
        ("dup.toml", "lr = 1\nlr = 2\n"),
        ("python_dump.json", "{\"snr\": Infinity, \"train_batch_size\": 100, \"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 4}\n"),
        ("empty.json", ""),
        ("flow.yaml", "args: [\n  '--ini',\n  '.bandit',\n]\n"),
    ]);
    let (code, out, err) = run(dir.path(), &["."]);
    assert_eq!(code, 1, "{out}{err}");
    // TOML forbids a repeated key: the file is invalid.
    assert!(
        err.contains("dup.toml: skipped: invalid TOML at 2:1: duplicate key"),
        "{err}"
    );
    assert!(
        !err.contains("empty.json") && !err.contains("flow.yaml"),
        "{err}"
    );
    assert!(!err.contains("python_dump.json"), "{err}");
    assert!(out.contains("python_dump.json:1:39: BS001"), "{out}");
}

#[test]
fn a_repeated_key_is_read_as_python_reads_it() {
    // `json.load` and PyYAML's `safe_load` keep the last value of a repeated key.
    let dir = project(&[
        ("dup.json", "{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 4,\n \"train_batch_size\": 100}\n"),
        ("dup.yaml", "lr: 1\nlr: 2\ntraining:\n  global_batch_size: 96\n  micro_batch_size: 8\n  gradient_accumulation_steps: 4\n  gradient_accumulation_steps: 5\n"),
    ]);
    let (code, out, err) = run(dir.path(), &["."]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!err.contains("skipped"), "{err}");
    assert!(
        out.contains("dup.json:2:22: BS001 train_batch_size 100 is not a multiple of micro batch 3 x accumulation 4 = 12"),
        "{out}"
    );
    assert!(
        out.contains("dup.yaml:4:22: BS002") && out.contains("gradient_accumulation_steps 5"),
        "{out}"
    );
}

#[test]
fn a_script_the_prefilter_rules_out_still_gets_its_runs_findings() {
    // Nothing in the script alone names a model size or a DeepSpeed key; the parameter count
    // is in a model name of its config dict, the GPU memory in the memlint configuration.
    let train = "import torch\n\nCONFIG = {\n    \"model_name_or_path\": \"meta-llama/Llama-2-7b-hf\",\n    \"per_device_train_batch_size\": 4,\n}\nmodel = torch.nn.Linear(4096, 4096)\noptimizer = torch.optim.AdamW(model.parameters())\n";
    let launch = "#!/bin/bash\ntorchrun --nproc_per_node 1 train.py\n";
    let dir = project(&[
        ("train.py", train),
        ("launch.sh", launch),
        (".memlint.toml", "gpu-memory-gb = 24\n"),
    ]);
    let expect = "train.py:4:27: MEM005 7B parameters need at least 8 B/param";
    for args in [&["."][..], &["--no-prefilter", "."]] {
        let (code, out, _) = run(dir.path(), args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(out.contains(expect), "{args:?}: {out}");
        assert!(out.contains("AdamW seen at train.py:8"), "{args:?}: {out}");
    }
    // Without the launcher the script is a run of its own, with the same finding.
    fs::remove_file(dir.path().join("launch.sh")).expect("remove");
    let (code, out, _) = run(dir.path(), &["."]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(expect), "{out}");
}

#[test]
fn a_script_too_large_to_read_for_context_is_analysed_when_a_run_reaches_it() {
    // Nothing in the script rules it in; beyond the size read for context (2 MB), only
    // analysing it as a linted file shows the run that it trains with the whole model.
    let padding = "# a line of commentary padding the script beyond two megabytes\n".repeat(40_000);
    let train = format!("{HF_SCRIPT}{padding}");
    let launch = "#!/bin/bash\ntorchrun --nproc_per_node 1 train.py --model_name_or_path meta-llama/Llama-2-7b-hf --optim adamw_torch\n";
    let dir = project(&[
        ("train.py", train.as_str()),
        ("launch.sh", launch),
        (".memlint.toml", "gpu-memory-gb = 24\n"),
    ]);
    for args in [&["."][..], &["--no-prefilter", "."]] {
        let (code, out, _) = run(dir.path(), args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(
            out.contains("launch.sh:2:59: MEM005 7B parameters need at least 8 B/param"),
            "{args:?}: {out}"
        );
    }
}

#[test]
fn a_run_is_priced_against_the_configured_gpu_memory() {
    let launch = "#!/usr/bin/env bash\nMODEL=meta-llama/Llama-3.2-1B\nMICRO_BS=16\n\npython train.py --model_name_or_path \"$MODEL\" --bf16 --optim adamw_torch_fused \\\n  --per_device_train_batch_size \"$MICRO_BS\" --max_seq_length 4096\n";
    let dir = project(&[("sweep.sh", launch), ("train.py", "import transformers\n")]);
    // No GPU named anywhere: the estimate has nothing to compare with.
    let (code, out, _) = run(dir.path(), &["--select", "MEM012", "."]);
    assert_eq!(code, 0, "{out}");
    fs::write(dir.path().join(".memlint.toml"), "gpu-memory-gb = 24\n").expect("write");
    let (code, out, _) = run(dir.path(), &["--select", "MEM012", "."]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("sweep.sh:5:1: MEM012")
            && out.contains("`gpu-memory-gb` in the memlint configuration"),
        "{out}"
    );
}
