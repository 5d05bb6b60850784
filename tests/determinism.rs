//! The same input gives the same output: whatever the thread count (byte for byte, through the
//! binary) and with or without the literal prefilter (over generated training-code-like files,
//! under several rule selections).

use assert_cmd::Command;
use memlint::diagnostic::Applicability;
use memlint::fix;
use memlint::lint::{lint, LintOptions, Run};
use memlint::settings::{CliOverrides, Resolver};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn output_is_identical_whatever_the_thread_count() {
    let run = |threads: &str, format: &str| {
        let out = Command::cargo_bin("memlint")
            .expect("binary")
            .current_dir(root())
            .env("NO_COLOR", "1")
            .args([
                "--isolated",
                "--select",
                "ALL",
                "--output-format",
                format,
                "--threads",
                threads,
                "fixtures",
            ])
            .output()
            .expect("run");
        (out.status.code(), out.stdout, out.stderr)
    };
    for format in ["json", "concise"] {
        let one = run("1", format);
        assert_eq!(one.0, Some(1));
        assert!(one.1.len() > 1000, "the fixtures raise diagnostics");
        for threads in ["2", "7", "16"] {
            let many = run(threads, format);
            assert!(
                many == one,
                "--threads {threads} differs from --threads 1 ({format})"
            );
        }
    }
}

/// A small deterministic generator (xorshift), so that a failure can be reproduced.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const MODEL_NAMES: &[&str] = &[
    "model_size_gb",
    "model_gb",
    "weights_gb",
    "param_bytes",
    "model_mem",
    "MODEL_SIZE_GB",
    "self.model_size_gb",
    "cfg.model_gb",
    "n_params",
    "num_params",
    "model_size",
    "embedding_params",
    "model",
    "weights",
    "param_groups",
    "weight_decay",
];
const GPU_NAMES: &[&str] = &[
    "gpu_memory_gb",
    "vram_gb",
    "free_gb",
    "budget_gb",
    "capacity",
];
const OPTIMIZERS: &[&str] = &[
    "torch.optim.AdamW(model.parameters(), lr=1e-4)",
    "torch.optim.Adam(model.parameters())",
    "torch.optim.SGD(model.parameters(), lr=0.1)",
    "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
    "bnb.optim.AdamW8bit(model.parameters())",
];
const FACTORS: &[&str] = &["2", "3", "4", "16", "1.5", "bytes_per_param"];
const COMMENTS: &[&str] = &[
    "",
    "  # noqa: E501",
    "  # noqa: MEM001",
    "  # memlint: ignore[MEM001]",
    "  # memlint: ignore[GA001]",
    "  # weights and params",
];

/// One top-level block of a training-code-like file.
fn block(rng: &mut Rng) -> String {
    let m = rng.pick(MODEL_NAMES);
    let g = rng.pick(GPU_NAMES);
    let f = rng.pick(FACTORS);
    let c = rng.pick(COMMENTS);
    // Accumulation loops are drawn three times as often: they have more ways to go wrong.
    let kind = match rng.next() % 16 {
        12..=14 => 5,
        k => k,
    };
    match kind {
        0 => format!("optimizer = {}{c}\n", rng.pick(OPTIMIZERS)),
        1 => format!("headroom_gb = {g} - {m} * {f}{c}\n"),
        2 => format!("required_gb = {m} * {f} + activations_gb{c}\n"),
        3 => format!("if {m} * {f} > {g}:{c}\n    raise RuntimeError(\"does not fit\")\n"),
        4 => format!(
            "def plan({g}, model_size_gb):\n    opt = {}\n    return {g} - model_size_gb * {f}{c}\n",
            rng.pick(OPTIMIZERS)
        ),
        5 => {
            let step = rng.pick(&["optimizer.step()", "optimizer.step()", "scaler.step(optimizer)", "scheduler.step()", "optimizer.steps()"]);
            let back = rng.pick(&["loss.backward()", "loss.backward()", "loss.backward()", "(loss / accum_steps).backward()", "accelerator.backward(loss)", "loss.backward_hook()", "loss.Backward()"]);
            let test = rng.pick(&["(i + 1) % accum_steps == 0", "i % 4 == 3", "i % accum_steps", "i // accum_steps", "do_step"]);
            format!(
                "def train(model, loader, criterion, accum_steps):\n    optimizer = {}\n    for i, (x, y) in enumerate(loader):\n        loss = criterion(model(x), y)\n        {back}{c}\n        if {test}:\n            {step}\n            optimizer.zero_grad()\n",
                rng.pick(OPTIMIZERS)
            )
        }
        6 => "logger.info(\"%d steps, %s\" % (n, name))\n".to_string(),
        7 => format!("{m} = load_checkpoint(path)\n"),
        8 => format!("x = model(x)  # {} of {m}\n", rng.pick(&["step", "backward", "%"])),
        9 => "from transformers import Trainer\ntrainer = Trainer(model=model)\n".to_string(),
        10 => format!("class Budget:\n    def __init__(self):\n        self.model_size_gb = 7\n        self.opt = {}\n\n    def free(self):\n        return self.{g} - self.model_size_gb * {f}\n", rng.pick(OPTIMIZERS)),
        11 => format!("print({m}){c}\n"),
        _ => "for batch in loader:\n    out = net(batch)\n".to_string(),
    }
}

fn render(run: &Run) -> String {
    let mut out = String::new();
    for r in &run.results {
        for d in &r.diagnostics {
            let p = r.file.position(d.range.start);
            let _ = writeln!(
                out,
                "{}:{}:{}: {} {}",
                r.file.display, p.row, p.column, d.code, d.message
            );
        }
        if let Some(fixed) = fix::fix_file(r, Applicability::Unsafe) {
            out.push_str(&fixed.new_text);
        }
    }
    for s in &run.skipped {
        let _ = writeln!(out, "skipped {}: {}", s.path, s.reason);
    }
    out
}

fn lint_dir(dir: &Path, select: Option<&[&str]>, config: Option<&Path>, prefilter: bool) -> Run {
    let cli = CliOverrides {
        select: select.map(|s| s.iter().map(|c| c.to_string()).collect()),
        ..CliOverrides::default()
    };
    let resolver =
        Resolver::new(cli, config, config.is_none(), dir.to_path_buf()).expect("settings");
    lint(
        &[dir.to_path_buf()],
        &resolver,
        LintOptions {
            prefilter,
            force_exclude: false,
        },
    )
}

#[test]
fn the_prefilter_never_changes_a_result_on_generated_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let files = 400;
    for i in 0..files {
        let blocks = 1 + rng.next() % 3;
        let mut text = String::from("import torch\n\n");
        for _ in 0..blocks {
            text.push_str(&block(&mut rng));
            text.push('\n');
        }
        let name = if rng.chance(30) {
            format!("a{i}.py")
        } else {
            format!("f{i}.py")
        };
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let config = dir.path().join("memlint.toml");
    std::fs::write(
        &config,
        "extend-select = [\"ML900\"]\nper-file-ignores = { \"a*.py\" = [\"MEM001\"] }\n",
    )
    .expect("write config");

    let selections: [(Option<&[&str]>, Option<&Path>); 6] = [
        (None, None),
        (Some(&["ALL"]), None),
        (Some(&["MEM001"]), None),
        (Some(&["GA001"]), None),
        (Some(&["ML900", "GA001"]), None),
        (None, Some(&config)),
    ];
    for (select, config) in selections {
        let with = lint_dir(dir.path(), select, config, true);
        let without = lint_dir(dir.path(), select, config, false);
        let (a, b) = (render(&with), render(&without));
        if a != b {
            let diff = similar::TextDiff::from_lines(&b, &a)
                .unified_diff()
                .to_string();
            panic!("{select:?} {config:?}: the prefilter changed the result:\n{diff}");
        }
        // The comparison means something: diagnostics are found, and files are ruled out.
        let found = with
            .results
            .iter()
            .map(|r| r.diagnostics.len())
            .sum::<usize>();
        assert!(found >= 5, "{select:?}: only {found} diagnostics");
        assert!(
            with.results.len() < without.results.len(),
            "{select:?}: the prefilter ruled nothing out"
        );
    }
}
