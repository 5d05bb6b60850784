//! Frontends own everything about one language: parsing, and lowering what rules need into
//! [`Facts`](crate::facts::Facts).

pub mod config;
pub mod fields;
mod loops;
pub mod pins;
pub mod python;
pub mod python_config;
pub mod regime;
pub mod shell;
pub mod units;

/// Numbers read the same in every language memlint reads.
pub use crate::config::parse_number;

use crate::facts::{Evidence, Mention, OptimizerMention, Precision, Sharding};
use std::cell::RefCell;
use std::ops::Range;
use std::thread::LocalKey;
use std::time::{Duration, Instant};
use tree_sitter::{ParseOptions, ParseState, Parser, Tree};

/// A thread's parser for one grammar, created on first use (one parser per thread).
pub type ParserSlot = LocalKey<RefCell<Option<Parser>>>;

/// A parse that takes longer than this is abandoned and its file skipped with a message: a bound
/// on pathological input, far above what real files need (the corpus's largest, 300 KB, parses
/// in under 0.1 s).
pub const PARSE_TIME_LIMIT: Duration = Duration::from_secs(10);

/// Parse with this thread's parser for `language`, within [`PARSE_TIME_LIMIT`].
pub fn parse_with(
    slot: &'static ParserSlot,
    language: tree_sitter::Language,
    text: &str,
) -> Result<Tree, String> {
    slot.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut p = Parser::new();
            p.set_language(&language).map_err(|e| e.to_string())?;
            *slot = Some(p);
        }
        let parser = slot.as_mut().ok_or("no parser")?;
        let started = Instant::now();
        let mut too_slow = |_: &ParseState| started.elapsed() > PARSE_TIME_LIMIT;
        let bytes = text.as_bytes();
        let tree = parser.parse_with_options(
            &mut |at, _| bytes.get(at..).unwrap_or_default(),
            None,
            Some(ParseOptions::new().progress_callback(&mut too_slow)),
        );
        tree.ok_or_else(|| {
            // An abandoned parse would resume on the next call.
            parser.reset();
            format!(
                "parsing took longer than {} s, not analysed",
                PARSE_TIME_LIMIT.as_secs()
            )
        })
    })
}

/// Recursion bound for expression lowering: deeper expressions are left opaque, so nested input of
/// any depth cannot overflow the stack.
pub const MAX_EXPR_DEPTH: usize = 200;

/// Values of a CLI flag or config key that name an optimizer (`--optim adamw_torch`).
pub fn is_optimizer_key(key: &str) -> bool {
    let k = key
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_");
    matches!(
        k.as_str(),
        "optim" | "optimizer" | "optimizer_name" | "optimizer_type" | "opt" | "optim_type"
    )
}

/// How much of a name, key or argument is read where it is compared with short words.
const LONGEST: usize = 256;

/// The start of `s`, up to [`LONGEST`] bytes. Nested input (arguments holding nested calls or
/// command substitutions) would otherwise make every level read the rest of the line: quadratic.
pub(crate) fn clip(s: &str) -> &str {
    &s[..crate::source::floor_char_boundary(s, LONGEST.min(s.len()))]
}

/// The end of `s`, up to [`LONGEST`] bytes (a callee's receiver chain ends with what names it).
pub(crate) fn clip_tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(LONGEST);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Record what a `key value` pair (a CLI flag, a shell variable, a config key) says about training.
/// Settings that turn LoRA on when given a value that does not switch it off.
pub const LORA_KEYS: &[&str] = &[
    "lora_r",
    "lora_rank",
    "use_lora",
    "lora",
    "use_peft",
    "peft",
    "adapter",
    "finetuning_type",
    "lora_alpha",
    "qlora",
    "use_qlora",
];

/// A setting's value that turns its feature off (`false`, `0`, `none`, `full` fine-tuning).
fn switches_off(v: &str) -> bool {
    matches!(
        v,
        "false" | "0" | "0.0" | "no" | "none" | "full" | "freeze" | "\"\"" | "''"
    )
}

/// A LoRA setting written in code (`lora_r = 16`, `"use_lora": True`, `def f(lora_rank=8)`)
/// with a literal value that does not switch it off: the run trains adapters.
pub fn lora_setting(key: &str, value: &str, span: Range<usize>, ev: &mut Evidence) {
    let k = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let v = value.trim().to_ascii_lowercase();
    let literal = v.parse::<f64>().is_ok() || v == "true" || v.starts_with(['"', '\'']);
    if LORA_KEYS.contains(&k.as_str()) && literal && !switches_off(v.trim_matches(['"', '\''])) {
        ev.lora.push(span);
    }
}

pub fn flag_evidence(key: &str, value: &str, span: Range<usize>, ev: &mut Evidence) {
    let k = clip(key.trim_start_matches('-'))
        .to_ascii_lowercase()
        .replace('-', "_");
    let v = clip(value.trim_matches(['"', '\''])).to_ascii_lowercase();
    if is_optimizer_key(&k) && !v.is_empty() && !v.starts_with('$') {
        ev.optimizers.push(Mention {
            value: OptimizerMention {
                name: v.rsplit('.').next().unwrap_or(&v).to_string(),
                momentum: None,
                amsgrad: false,
                beta1: false,
                centered: false,
                name_only: true,
            },
            span,
        });
        return;
    }
    regime::flag(&k, &v, span.clone(), ev);
    match k.as_str() {
        "bf16" | "fp16" | "half" if matches!(v.as_str(), "" | "true" | "1" | "yes") => {
            ev.precision.push(Mention {
                value: Precision::Amp,
                span,
            })
        }
        // accelerate's `mixed_precision: bf16` (config key, `--mixed_precision` flag,
        // `Accelerator(mixed_precision="bf16")`): autocast with fp32 master weights.
        "mixed_precision" if matches!(v.as_str(), "bf16" | "fp16" | "fp8") => {
            ev.precision.push(Mention {
                value: Precision::Amp,
                span,
            })
        }
        // Lightning's and Fabric's `precision="bf16-mixed"` autocasts over fp32 weights;
        // `"bf16-true"` casts the weights themselves.
        "precision" if matches!(v.as_str(), "16-mixed" | "bf16-mixed") => {
            ev.precision.push(Mention {
                value: Precision::Amp,
                span,
            })
        }
        // Hugging Face's `--torch_dtype bfloat16` loads the weights in that dtype.
        "torch_dtype" => {
            if let Some(value) = loaded_dtype(&v) {
                ev.precision.push(Mention { value, span })
            }
        }
        "precision" if matches!(v.as_str(), "16-true" | "bf16-true") => {
            ev.precision.push(Mention {
                value: Precision::Pure16,
                span,
            })
        }
        _ if LORA_KEYS.contains(&k.as_str()) && !switches_off(&v) => ev.lora.push(span),
        // accelerate's `fsdp_sharding_strategy: FULL_SHARD` (or `1`; `3` is NO_SHARD).
        "fsdp_sharding_strategy"
            if matches!(
                regime::fsdp_strategy(&v),
                Some(Sharding::Stage(1..) | Sharding::Hybrid)
            ) =>
        {
            ev.sharding.push(span)
        }
        "deepspeed" | "zero_stage" | "fsdp" | "zero" | "offload_optimizer"
        | "zero_optimization" | "fsdp_config" | "sharding_strategy"
            if !matches!(v.as_str(), "false" | "0" | "no" | "none" | "no_shard" | "") =>
        {
            ev.sharding.push(span)
        }
        _ => {}
    }
}

/// The precision of weights loaded or trained in dtype `v` (lowercase): `bf16`, `torch.float16`,
/// `fp32`.
pub fn loaded_dtype(v: &str) -> Option<Precision> {
    match v.trim_start_matches("torch.") {
        "bf16" | "bfloat16" | "fp16" | "float16" | "half" => Some(Precision::Pure16),
        "fp32" | "float32" | "float" => Some(Precision::Fp32),
        _ => None,
    }
}
