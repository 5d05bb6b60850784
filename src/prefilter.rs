//! A literal scan that decides, before any parse, whether a file can hold anything a rule reads.
//! Each condition is *necessary* for some rule to fire, derived from what the frontends record, so
//! skipping a file never changes a result:
//! - memory formulas are recorded only with a term whose role is a model size or a parameter
//!   count, and a term's role is [`role_of`] of an identifier written in the file: the scan asks
//!   `role_of` about every identifier that contains `model`, `weight` or `param`;
//! - every training-loop rule needs a `backward` call and a `step` (an optimizer step, or a
//!   Lightning `training_step`), except a Lightning `training_step` that divides by
//!   `accumulate_grad_batches`, which names it;
//! - a unit conversion (MEM004) needs a divisor that folds to 10^9, 2^30, 10^6 or 2^20, and every
//!   way to write one as literals contains one of `DIVISORS` (`1e9`, `1024 ** 3`, `/ 1024 / 1024`,
//!   `1 << 30`);
//! - a dtype or optimizer table (MEM002, MEM003) needs a key that is a quoted dtype or optimizer
//!   name from the knowledge tables: followed by `:` in a dict, or compared in an `if` chain or a
//!   conditional that assigns a name holding `byte` or `mult`; or a `torch.<dtype>:` dict key;
//! - suppression directives need `memlint` or `noqa` (for ML900);
//! - a batch config written in Python (a DeepSpeed dict, a dataclass, argparse defaults) is
//!   reported only with a DeepSpeed key or a declared global batch, whose names are literals here.

use crate::expr::{role_of, Role};
use crate::knowledge::knowledge;
use crate::source::Language;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::sync::OnceLock;

#[derive(Clone, Copy, PartialEq)]
enum Hit {
    /// Part of an identifier that may name a model size or a parameter count.
    Sized,
    Backward,
    Step,
    /// A quoted dtype or optimizer name: a dict key when a `:` follows.
    Quoted,
    /// Enough on its own.
    Parse,
}

const SIZED: &[&str] = &["param", "model", "weight"];
const ALWAYS: &[&str] = &[
    "memlint",
    "noqa",
    "accumulate_grad_batches",
    "\"train_batch_size\"",
    "'train_batch_size'",
    "train_micro_batch_size_per_gpu",
    "global_batch",
    "global-batch",
    "effective_batch",
    "effective-batch",
    "total_batch",
    "total-batch",
    "total_train_batch",
];
const DIVISORS: &[&str] = &[
    "1e9",
    "1e-9",
    "1e+9",
    "1e6",
    "1e-6",
    "1e+6",
    "1.0e9",
    "1.0e6",
    "10**9",
    "10 ** 9",
    "10**6",
    "10 ** 6",
    "1000**",
    "1000 **",
    "1000.0**",
    "1000.0 **",
    "1024**",
    "1024 **",
    "1024.0**",
    "1024.0 **",
    "2**30",
    "2 ** 30",
    "2**20",
    "2 ** 20",
    "2.0**30",
    "<< 30",
    "<<30",
    ">> 30",
    ">>30",
    "<< 20",
    "<<20",
    ">> 20",
    ">>20",
    "1073741824",
    "1048576",
    "1_073_741_824",
    "1_048_576",
    "1_000_000",
    "1000000",
    "1024 * 1024",
    "1024*1024",
    "1000 * 1000",
    "1000*1000",
    "1024 / 1024",
    "1024/1024",
    "1024.0 / 1024",
    "1000 / 1000",
    "1000/1000",
    "/ 1024) / 1024",
];

fn patterns() -> Vec<(String, Hit)> {
    let mut p: Vec<(String, Hit)> = Vec::new();
    p.extend(SIZED.iter().map(|w| (w.to_string(), Hit::Sized)));
    p.push(("backward".into(), Hit::Backward));
    p.push(("step".into(), Hit::Step));
    p.extend(ALWAYS.iter().map(|w| (w.to_string(), Hit::Parse)));
    p.extend(DIVISORS.iter().map(|w| (w.to_string(), Hit::Parse)));
    let k = knowledge();
    let names = k
        .dtypes
        .iter()
        .flat_map(|d| d.names.iter())
        .chain(k.optimizers.iter().flat_map(|o| o.names.iter()));
    for n in names {
        match n.strip_prefix("torch.") {
            Some(_) => p.push((format!("{n}:"), Hit::Parse)),
            None => {
                p.push((format!("\"{n}\""), Hit::Quoted));
                p.push((format!("'{n}'"), Hit::Quoted));
            }
        }
    }
    p
}

fn automaton() -> Option<&'static (AhoCorasick, Vec<Hit>)> {
    static AC: OnceLock<Option<(AhoCorasick, Vec<Hit>)>> = OnceLock::new();
    AC.get_or_init(|| {
        let (words, hits): (Vec<String>, Vec<Hit>) = patterns().into_iter().unzip();
        AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(words)
            .ok()
            .map(|ac| (ac, hits))
    })
    .as_ref()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier around byte `at`.
fn identifier_at(bytes: &[u8], at: usize) -> &[u8] {
    let mut start = at;
    while start > 0 && is_ident(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = at;
    while end < bytes.len() && is_ident(bytes[end]) {
        end += 1;
    }
    &bytes[start..end]
}

/// Whether the file must be parsed. Launchers and configs are always read: they give context to
/// other files.
pub fn needs_parse(language: Language, text: &str) -> bool {
    if !matches!(language, Language::Python | Language::Notebook) {
        return true;
    }
    let Some((ac, hits)) = automaton() else {
        return true;
    };
    let bytes = text.as_bytes();
    let (mut backward, mut step, mut quoted) = (false, false, false);
    for m in ac.find_overlapping_iter(text) {
        match hits.get(m.pattern().as_usize()) {
            Some(Hit::Sized) => {
                let ident = identifier_at(bytes, m.start());
                let sized = std::str::from_utf8(ident)
                    .is_ok_and(|id| matches!(role_of(id), Role::Model | Role::ParamCount));
                if sized {
                    return true;
                }
            }
            Some(Hit::Backward) => backward = true,
            Some(Hit::Step) => step = true,
            Some(Hit::Quoted) => {
                let rest = text.get(m.end()..).unwrap_or("");
                if rest.trim_start_matches([' ', '\t']).starts_with(':') {
                    return true;
                }
                quoted = true;
            }
            Some(Hit::Parse) | None => return true,
        }
    }
    (backward && step) || (quoted && table_target(text))
}

/// A name an `if` chain may build a table for (see the Python frontend's branch tables).
fn table_target(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("byte") || t.contains("mult")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_only_what_no_rule_reads() {
        let py = Language::Python;
        assert!(needs_parse(py, "free = gpu_gb - model_size_gb * 2\n"));
        assert!(needs_parse(py, "n_params = 7e9\n"));
        assert!(!needs_parse(
            py,
            "opt = AdamW(model.parameters())\nmodel.train()\n"
        ));
        assert!(needs_parse(
            py,
            "loss.backward()\nif i % n == 0:\n    opt.step()\n"
        ));
        assert!(needs_parse(
            py,
            "accelerator.backward(loss / accum)\nopt.step()\n"
        ));
        assert!(!needs_parse(py, "loss.backward()\n"));
        assert!(needs_parse(
            py,
            "return loss / self.trainer.accumulate_grad_batches\n"
        ));
        assert!(needs_parse(py, "x = 1  # noqa: MEM001\n"));
        assert!(needs_parse(py, "free_gib = free / 1e9\n"));
        assert!(needs_parse(py, "SIZES = {\"bf16\": 4}\n"));
        assert!(needs_parse(py, "STATES = {'adamw': 1}\n"));
        assert!(!needs_parse(py, "name = 'resnet'\n"));
        assert!(needs_parse(py, "cfg = {\"train_batch_size\": 32}\n"));
        assert!(needs_parse(
            py,
            "p.add_argument(\"--global-batch-size\", default=8)\n"
        ));
        assert!(!needs_parse(py, "per_device_train_batch_size = 8\n"));
        assert!(needs_parse(Language::Shell, "echo hi\n"));
    }
}
