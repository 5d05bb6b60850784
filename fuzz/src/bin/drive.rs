//! A fuzzing driver that needs no nightly toolchain and no libFuzzer: it mutates seed inputs with a
//! small structure-aware mutator, runs the same checks as the libFuzzer targets, keeps inputs that
//! reach a new outcome, and saves every input that panics, overflows the stack or hangs.
//!
//!   cargo run --release --no-default-features --bin drive -- [TARGET|all] [SECONDS] [--seed N]
//!
//! SECONDS is per target (default 60). Crashes go to `artifacts/TARGET/crash-HASH`; the input being
//! run is always in `artifacts/TARGET/last-input`, so an abort (a stack overflow) leaves it there;
//! an input that runs longer than 10 s is saved as `slow-HASH` and stops the run.

use memlint_fuzz::checks::TARGETS;
use std::collections::HashSet;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// memlint analyses files on rayon's worker threads, which get the standard 2 MiB stack.
const WORKER_STACK: usize = 2 << 20;
const HANG: Duration = Duration::from_secs(10);
const MAX_INPUT: usize = 256 * 1024;
const POOL: usize = 4096;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const COMMON: &[&str] = &[
    "\n",
    "\r\n",
    "\r",
    " ",
    "    ",
    "\t",
    "#",
    "\"",
    "'",
    "\\",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    "=",
    "*",
    "%",
    "-",
    "+",
    "/",
    ".",
    "0",
    "1",
    "2",
    "4",
    "1e9",
    "0x10",
    "1_000",
    "é",
    "\u{feff}",
    "\u{2028}",
    "𝑥",
    "model_size_gb",
    "gpu_memory_gb",
    "num_params",
    "optimizer",
    "adamw",
    "sgd",
    "momentum",
    "accum_steps",
    "gradient_accumulation_steps",
    "zero_stage",
    "lora_r",
    "bf16",
    "# noqa: MEM001",
    "# memlint: ignore[GA001]",
    "# memlint: ignore-file[MEM001]",
];

fn dictionary(target: &str) -> Vec<&'static str> {
    let own: &[&str] = match target {
        "python" | "fixes" => &[
            "def f(x):\n    ",
            "class C:\n    ",
            "for i, b in enumerate(loader):\n    ",
            "if ",
            "while ",
            "with ",
            "lambda: ",
            "return ",
            "self.",
            "loss.backward()",
            "(loss / accum_steps).backward()",
            "optimizer.step()",
            "scaler.step(optimizer)",
            "optimizer.zero_grad()",
            "(i + 1) % accum_steps == 0",
            "torch.optim.AdamW(model.parameters())",
            "torch.optim.SGD(model.parameters(), momentum=0.9)",
            "model_size_gb * 2",
            "gpu_memory_gb - ",
            "f\"{x}\"",
            "\"\"\"",
            "'''",
            "async ",
            "await ",
            "yield ",
            "@decorator\n",
            "**",
            "//",
            "not ",
            " and ",
            " or ",
            "accelerator.backward(loss)",
            "Trainer(",
            "int(",
            "math.ceil(",
        ],
        "shell" => &[
            "#!/bin/bash\n",
            "$((",
            "))",
            "$(",
            "${",
            "}",
            "`",
            "export ",
            "FREE=$(( GPU_GB - MODEL_SIZE_GB * 2 ))",
            "python train.py --optim adamw_torch ",
            "--gradient_accumulation_steps ",
            "<<EOF\n",
            "EOF\n",
            "if [ ",
            " ]; then\n",
            "fi\n",
            "case $x in\n",
            "esac\n",
            "for i in 1 2; do\n",
            "done\n",
            "|",
            "&&",
            ";",
            "deepspeed ",
            "torchrun ",
            "accelerate launch ",
            "OPTIM=adamw\n",
        ],
        "yaml" => &[
            "---\n",
            "...\n",
            "- ",
            "? ",
            "&a ",
            "*a",
            "<<: *a\n",
            "!!str ",
            "!tag ",
            "|\n  ",
            ">\n  ",
            "key: value\n",
            "optimizer: adamw\n",
            "train_batch_size: 8\n",
            "  ",
            "%YAML 1.2\n",
            "{a: [",
        ],
        "json" => &[
            "{\"a\": ",
            "[",
            "]",
            "}",
            "\"optimizer\": {\"type\": \"AdamW\"}",
            "\"zero_optimization\": {\"stage\": 3}",
            "\"train_batch_size\": 32",
            "\"gradient_accumulation_steps\": 4",
            "null",
            "true",
            "false",
            "-0.0e+10",
            "\"\\u0000\"",
            "\"\\ud800\"",
            "\"\\\"\"",
        ],
        "toml" => &[
            "[table]\n",
            "[[array]]\n",
            "a = ",
            "a.b = ",
            "\"\"\"",
            "'''",
            "{ a = 1 }",
            "[1, 2]",
            "1979-05-27T07:32:00Z",
            "inf",
            "nan",
            "+1_000",
            "0b101",
            "optimizer = \"adamw\"\n",
            "[tool.memlint]\n",
            "select = [\"ALL\"]\n",
        ],
        _ => &[],
    };
    COMMON.iter().chain(own).copied().collect()
}

/// Own-written starting points, and the project's own files of the target's kind.
fn seeds(target: &str, root: &Path) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = match target {
        "python" | "fixes" => vec![
            "import torch\nopt = torch.optim.AdamW(model.parameters())\nfree_gb = gpu_memory_gb - model_size_gb * 2\n".into(),
            "def train(model, loader, criterion, accum_steps):\n    optimizer = torch.optim.AdamW(model.parameters())\n    for i, (x, y) in enumerate(loader):\n        loss = criterion(model(x), y)\n        loss.backward()\n        if (i + 1) % accum_steps == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n".into(),
        ],
        "shell" => vec![
            "#!/bin/bash\nOPTIM=adamw\nFREE=$(( GPU_GB - MODEL_SIZE_GB * 2 ))\npython train.py --optim adamw_torch --gradient_accumulation_steps 4\n".into(),
        ],
        "yaml" => vec!["optimizer:\n  name: adamw\nbatch:\n  micro: 4\n  accum: 8\nbase: &b {lr: 1e-4}\nrun: *b\n".into()],
        "json" => vec!["{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2, \"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 2}}".into()],
        "toml" => vec!["[tool.memlint]\noptimizer = \"adamw\"\nselect = [\"MEM\", \"GA\"]\n[train]\nbatch = { micro = 4, accum = 8 }\n".into()],
        _ => Vec::new(),
    };
    let wanted: &[&str] = match target {
        "python" | "fixes" => &["py"],
        "shell" => &["sh"],
        "yaml" => &["yaml", "yml"],
        "json" => &["json"],
        "toml" => &["toml"],
        _ => &[],
    };
    let mut files = Vec::new();
    for dir in ["fixtures", "rules", ".github", "fuzz/corpus"] {
        collect(&root.join(dir), &mut files);
    }
    collect(&root.join("fuzz/corpus").join(target), &mut files);
    for f in files {
        let ext = f.extension().and_then(|e| e.to_str()).unwrap_or("");
        let in_corpus = f.starts_with(root.join("fuzz/corpus").join(target));
        if wanted.contains(&ext) || in_corpus {
            if let Ok(bytes) = fs::read(&f) {
                out.push(bytes);
            }
        }
    }
    if target == "fixes" {
        // The first byte picks the mode (see checks::fixes).
        out = out
            .into_iter()
            .flat_map(|s| (0u8..4).map(move |m| [vec![m], s.clone()].concat()))
            .collect();
    }
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>], dict: &[&str]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(9) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                let bytes = b" \n\t()[]{}:,=*%#'\"\\abcxyz019_.-+";
                data[i] = bytes[rng.below(bytes.len())];
            }
            1 | 2 => {
                let token = dict[rng.below(dict.len())];
                data.splice(at..at, token.bytes());
            }
            3 if !data.is_empty() => {
                let len = 1 + rng.below(16.min(data.len()));
                let start = rng.below(data.len() - len + 1);
                data.drain(start..start + len);
            }
            4 if !data.is_empty() => {
                // Repeat a slice: long lines, long expressions.
                let len = 1 + rng.below(64.min(data.len()));
                let start = rng.below(data.len() - len + 1);
                let piece = data[start..start + len].to_vec();
                let times = 1 + rng.below(64);
                for _ in 0..times {
                    data.splice(at..at, piece.iter().copied());
                }
            }
            5 => {
                // Deep nesting.
                let (open, close) = [
                    ("(", ")"),
                    ("[", "]"),
                    ("{", "}"),
                    ("$((", "))"),
                    ("f(", ")"),
                ][rng.below(5)];
                let depth = 1 + rng.below(5000);
                let middle = dict[rng.below(dict.len())];
                let nested = format!("{}{middle}{}", open.repeat(depth), close.repeat(depth));
                data.splice(at..at, nested.bytes());
            }
            6 if !pool.is_empty() => {
                // Splice in part of another input.
                let other = &pool[rng.below(pool.len())];
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let len = 1 + rng.below((other.len() - start).min(512));
                    data.splice(at..at, other[start..start + len].iter().copied());
                }
            }
            7 => {
                // Swap two lines.
                let text = String::from_utf8_lossy(&data).into_owned();
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if lines.len() > 1 {
                    let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                    lines.swap(a, b);
                    data = lines.concat().into_bytes();
                }
            }
            _ if !data.is_empty() => {
                // Truncate.
                data.truncate(rng.below(data.len()));
            }
            _ => {}
        }
    }
    data.truncate(MAX_INPUT);
    data
}

fn hash_of(data: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

struct Stats {
    runs: u64,
    crashes: u64,
    kept: usize,
}

fn fuzz(target: &str, check: fn(&[u8]) -> u64, secs: u64, seed: u64, root: &Path) -> Stats {
    let artifacts = root.join("fuzz/artifacts").join(target);
    fs::create_dir_all(&artifacts).expect("artifacts folder");
    let mut last = fs::File::create(artifacts.join("last-input")).expect("last-input");

    // A watchdog saves an input that hangs, then stops the run.
    let started = Arc::new(AtomicU64::new(0));
    let current: Arc<Mutex<Vec<u8>>> = Arc::default();
    let epoch = Instant::now();
    {
        let (started, current, artifacts) = (started.clone(), current.clone(), artifacts.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let s = started.load(Ordering::SeqCst);
            if s != 0 && epoch.elapsed().as_millis() as u64 > s + HANG.as_millis() as u64 {
                let input = current.lock().map(|c| c.clone()).unwrap_or_default();
                let path = artifacts.join(format!("slow-{:016x}", hash_of(&input)));
                let _ = fs::write(&path, &input);
                eprintln!(
                    "HANG: an input ran longer than {HANG:?}: saved to {}",
                    path.display()
                );
                std::process::exit(3);
            }
        });
    }

    let dict = dictionary(target);
    let mut pool = seeds(target, root);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut rng = Rng(seed | 1);
    let mut stats = Stats {
        runs: 0,
        crashes: 0,
        kept: 0,
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut crashed: HashSet<u64> = HashSet::new();
    let mut i = 0usize;
    while Instant::now() < deadline {
        // Seeds first, as they are; then mutations of the pool.
        let input = if i < pool.len() {
            pool[i].clone()
        } else {
            let base = &pool[rng.below(pool.len())];
            mutate(&mut rng, base, &pool, &dict)
        };
        i += 1;
        let _ = last.set_len(0);
        let _ = last.rewind();
        let _ = last.write_all(&input);
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        started.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
        let outcome = std::panic::catch_unwind(|| check(&input));
        started.store(0, Ordering::SeqCst);
        stats.runs += 1;
        match outcome {
            Ok(sig) => {
                if seen.insert(sig) && i > pool.len() {
                    if pool.len() < POOL {
                        pool.push(input);
                    } else {
                        let slot = rng.below(POOL);
                        pool[slot] = input;
                    }
                    stats.kept += 1;
                }
            }
            Err(_) => {
                let h = hash_of(&input);
                if crashed.insert(h) {
                    stats.crashes += 1;
                    let path = artifacts.join(format!("crash-{h:016x}"));
                    let _ = fs::write(&path, &input);
                    eprintln!("CRASH in {target}: saved to {}", path.display());
                }
            }
        }
    }
    stats
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut seed = 0x5eed_u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seed" {
            seed = it.next().and_then(|s| s.parse().ok()).unwrap_or(seed);
        } else {
            positional.push(a.as_str());
        }
    }
    let which = positional.first().copied().unwrap_or("all");
    let secs: u64 = positional.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let chosen: Vec<_> = TARGETS
        .iter()
        .filter(|(name, _)| which == "all" || *name == which)
        .copied()
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "unknown target `{which}`; one of: all, {}",
            names.join(", ")
        );
        std::process::exit(2);
    }
    let mut total_crashes = 0;
    for (name, check) in chosen {
        let root = root.clone();
        let stats = std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn(move || fuzz(name, check, secs, seed, &root))
            .expect("worker thread")
            .join()
            .expect("fuzz loop");
        println!(
            "{name}: {} runs in {secs} s, {} inputs kept, {} crashes",
            stats.runs, stats.kept, stats.crashes
        );
        total_crashes += stats.crashes;
    }
    if total_crashes > 0 {
        std::process::exit(1);
    }
}
