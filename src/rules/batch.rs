//! What the batch-size rules (BS001-BS003) share: the config documents of a file, reading a
//! batch value, and the words that say where a value came from.

use super::Checker;
use crate::config::{Node, Value};
use crate::context::{ConfigRef, World};
use crate::facts::{Binding, InlineKind};
use crate::source::SourceFile;
use std::ops::Range;

/// A config document in the file being checked.
pub struct Doc<'a> {
    pub config: ConfigRef,
    pub root: &'a Node,
    pub via: &'a [(Range<usize>, Binding)],
    pub kind: Option<&'a InlineKind>,
}

pub fn docs<'a>(cx: &'a Checker<'_>) -> Vec<Doc<'a>> {
    let mut out = Vec::new();
    if let Some(doc) = &cx.facts.config {
        for (i, root) in doc.roots.iter().enumerate() {
            out.push(Doc {
                config: ConfigRef::Root(i),
                root,
                via: &[],
                kind: None,
            });
        }
    }
    for (i, c) in cx.facts.inline_configs.iter().enumerate() {
        out.push(Doc {
            config: ConfigRef::Inline(i),
            root: &c.root,
            via: &c.via,
            kind: Some(&c.kind),
        });
    }
    out
}

/// A batch value as a config gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    Absent,
    /// `"auto"`, an interpolation, a name, or a number that is not a positive integer.
    Unknown,
    Num(u64),
}

pub fn val(node: Option<&Node>) -> Val {
    match node.map(|n| &n.value) {
        None | Some(Value::Null) => Val::Absent,
        Some(Value::Number(n)) if *n >= 1.0 && n.fract() == 0.0 && *n < 1e15 => Val::Num(*n as u64),
        Some(_) => Val::Unknown,
    }
}

/// ` (GLOBAL_BATCH=1 at run.sh:47)` when the value came from a shell variable.
pub fn via_note(file: &SourceFile, via: &[(Range<usize>, Binding)], span: &Range<usize>) -> String {
    let notes: Vec<String> = via
        .iter()
        .filter(|(s, _)| s == span)
        .map(|(_, b)| {
            let at = format!("{}:{}", file.display, file.position(b.span.start).row);
            if b.default {
                format!("{} defaults to {} at {at}", b.name, b.value)
            } else {
                format!("{}={} at {at}", b.name, b.value)
            }
        })
        .collect();
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join(", "))
    }
}

/// A DeepSpeed config: the micro-batch key, or the global one next to keys only DeepSpeed uses.
pub fn looks_deepspeed(node: &Node) -> bool {
    let Value::Map(entries) = &node.value else {
        return false;
    };
    let has = |k: &str| entries.iter().any(|(e, _)| e.name == k);
    if has("train_micro_batch_size_per_gpu") {
        return true;
    }
    has("train_batch_size")
        && [
            "zero_optimization",
            "steps_per_print",
            "wall_clock_breakdown",
            "zero_allow_untested_optimizer",
            "gradient_clipping",
            "fp16",
            "bf16",
        ]
        .iter()
        .any(|k| has(k))
}

/// The data-parallel sizes of the runs that use a config, or the configured `world-size`.
pub fn worlds(cx: &Checker<'_>, config: ConfigRef) -> Vec<World> {
    let view = &cx.training.project;
    let mut out: Vec<World> = Vec::new();
    for run in view.uses_of(config) {
        if let Some(w) = &run.world {
            if !out.iter().any(|o| o.data_parallel == w.data_parallel) {
                out.push(w.clone());
            }
        }
    }
    if out.is_empty() {
        if let Some(w) = view.world_setting.filter(|w| *w > 0) {
            out.push(World {
                processes: u64::from(w),
                data_parallel: u64::from(w),
                why: "`world-size` in the memlint configuration".into(),
            });
        }
    }
    out
}

/// `rank` or `ranks`.
pub fn ranks(n: u64) -> String {
    if n == 1 {
        "1 data-parallel rank".into()
    } else {
        format!("{n} data-parallel ranks")
    }
}
