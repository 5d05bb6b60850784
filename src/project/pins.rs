//! The project around a dependency pin: a `transformers` pin that keeps the project before 4.46
//! matters only if the project's Trainer accumulates gradients for a language model trained on
//! token losses, without packing its sequences (docs/knowledge.md §5d′). The project of a pin file is the
//! folder that holds it (the parent of a `requirements/` folder).

use super::files::{Fid, Files};
use super::runs::Run;
use crate::config::{Node, Value};
use crate::context::{PinnedProject, Seen};
use crate::facts::{Facts, Framework, Pin};
use std::path::Path;

/// The first release whose Trainer divides the window's token losses by its token count
/// (transformers PR #34191).
pub const TRANSFORMERS_FIXED: [u64; 3] = [4, 46, 0];

/// The first `transformers` pin of a file that admits no release with the fix.
pub fn old_transformers(facts: &Facts) -> Option<&Pin> {
    facts.pins.iter().find(|p| {
        p.package == "transformers"
            && p.ceiling
                .as_ref()
                .is_some_and(|c| c.below(&TRANSFORMERS_FIXED))
    })
}

/// The folder a pin file speaks for.
pub fn project_root(pin_file: &Path) -> Option<&Path> {
    let folder = pin_file.parent()?;
    let named = folder
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.eq_ignore_ascii_case("requirements"));
    match named {
        true => folder.parent(),
        false => Some(folder),
    }
}

/// Words in a Python file or launcher that show a model trained on token losses (a causal or
/// sequence-to-sequence LM, or a trainer or collator made for one).
const LANGUAGE_MODEL_WORDS: &[&str] = &[
    "CausalLM",
    "ConditionalGeneration",
    "SFTTrainer",
    "SFTConfig",
    "Seq2SeqTrainer",
    "DataCollatorForLanguageModeling",
    "DataCollatorForSeq2Seq",
];

/// Keys that turn sequence packing on: every micro-batch is full, so the means agree.
pub(super) const PACKING_KEYS: &[&str] =
    &["packing", "sample_packing", "neat_packing", "group_texts"];

/// What the units under `root` show, with where. The pieces must meet at one Trainer: a file
/// that builds or subclasses transformers' Trainer, with the accumulation factor given to it (in
/// the same file, or by a launch of that file) and the language model it trains named there; or
/// a recipe (LLaMA-Factory, axolotl) that sets its own factor. An import alone, or a factor of a
/// hand-written loop in another file, is not the Trainer's.
pub(super) fn pinned_project(files: &Files, runs: &[Run], root: &Path) -> PinnedProject {
    let mut found = PinnedProject::default();
    let mut packing: Option<String> = None;
    for (u, unit) in files.units.iter().enumerate() {
        if !unit.abs.starts_with(root) {
            continue;
        }
        let f = Fid::Unit(u);
        let facts = &unit.facts;
        let site = |offset: usize| unit.file.site(offset);
        let mut accumulation: Vec<Seen<f64>> = Vec::new();
        for m in &facts.accumulation_settings {
            if m.value > 1.0 {
                push(&mut accumulation, m.value, site(m.span.start));
            }
        }
        let mut recipe: Option<String> = None;
        for c in files.configs_of(f) {
            let Some(root) = files.config(f, c) else {
                continue;
            };
            walk(root, 0, &mut |key, value| match key {
                "gradient_accumulation_steps" => {
                    if let Some(v) = value.as_number().filter(|v| *v > 1.0) {
                        push(&mut accumulation, v, site(value.span.start));
                    }
                }
                // A LLaMA-Factory stage that trains on tokens, an axolotl recipe's model: both
                // train language models with the Trainer.
                "stage" if matches!(value.as_str(), Some("sft" | "pt")) => {
                    recipe.get_or_insert_with(|| site(value.span.start));
                }
                "base_model" if value.as_str().is_some() => {
                    recipe.get_or_insert_with(|| site(value.span.start));
                }
                k if PACKING_KEYS.contains(&k) && switched_on(value) => {
                    packing.get_or_insert_with(|| site(value.span.start));
                }
                _ => {}
            });
        }
        if packing.is_none() {
            packing = python_packing(&unit.file.text).map(site);
        }
        // The Trainer built or subclassed here (not merely imported).
        let trainer = facts
            .evidence
            .frameworks
            .iter()
            .find(|m| m.value == Framework::HfTrainer)
            .map(|m| site(m.span.start));
        if trainer.is_some() && grouped_texts(&unit.file.text).is_some() {
            continue;
        }
        let (trainer, language_model) = match (trainer, recipe) {
            (Some(t), _) => {
                // The factor a launch of this script passes reaches its Trainer, and so do the
                // configs its runs read (the ones it opens by a literal path among them).
                for run in runs
                    .iter()
                    .filter(|r| r.script == Some(f) || (r.origin == f && r.invocation.is_none()))
                {
                    if let Some(a) = run.info.accumulation.as_ref().filter(|a| a.value > 1.0) {
                        push(&mut accumulation, a.value, a.at.clone());
                    }
                    for (cf, c) in run.configs.iter().filter(|(cf, _)| *cf != f) {
                        if let Some(root) = files.config(*cf, *c) {
                            walk(root, 0, &mut |key, value| {
                                if key == "gradient_accumulation_steps" {
                                    if let Some(v) = value.as_number().filter(|v| *v > 1.0) {
                                        push(
                                            &mut accumulation,
                                            v,
                                            files.site(*cf, value.span.start),
                                        );
                                    }
                                }
                            });
                        }
                    }
                }
                let bytes = unit.file.text.as_bytes();
                let lm = LANGUAGE_MODEL_WORDS
                    .iter()
                    .filter_map(|w| memchr::memmem::find(bytes, w.as_bytes()))
                    .min()
                    .map(site);
                (t, lm)
            }
            (None, Some(r)) => (r.clone(), Some(r)),
            (None, None) => continue,
        };
        if found.trainer.is_some() || accumulation.is_empty() {
            continue;
        }
        if let Some(lm) = language_model {
            found.trainer = Some(trainer);
            found.language_model = Some(lm);
            found.accumulation = accumulation;
        }
    }
    for run in runs {
        let Fid::Unit(u) = run.origin else {
            continue;
        };
        if !files.units[u].abs.starts_with(root) {
            continue;
        }
        walk(&run.flags, 0, &mut |key, value| {
            if PACKING_KEYS.contains(&key) && (switched_on(value) || value.value == Value::Null) {
                packing.get_or_insert_with(|| files.site(run.origin, value.span.start));
            }
        });
    }
    found.packing = packing;
    found
}

/// A file's text holds a word [`pinned_project`] reads: an accumulation setting, the Trainer, a
/// language model or packing. Files without one show it nothing.
pub fn could_show(text: &[u8]) -> bool {
    let has = |w: &[u8]| memchr::memmem::find(text, w).is_some();
    has(b"accumulation_steps")
        || has(b"accumulation-steps")
        || has(b"packing")
        || has(b"Trainer")
        || LANGUAGE_MODEL_WORDS.iter().any(|w| has(w.as_bytes()))
}

fn push(list: &mut Vec<Seen<f64>>, value: f64, at: String) {
    if !list.iter().any(|s| s.at == at) {
        list.push(Seen { value, at });
    }
}

/// `true`, or a string that says so.
fn switched_on(node: &Node) -> bool {
    match &node.value {
        Value::Bool(b) => *b,
        Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
        Value::Number(n) => *n != 0.0,
        _ => false,
    }
}

/// `packing=True` (TRL's `SFTConfig`/`SFTTrainer`) or a `packing = True` constant in Python:
/// where it is. An attribute set on the way (`args.packing = True` under a test) is not a
/// setting of the project.
fn python_packing(text: &str) -> Option<usize> {
    memchr::memmem::find_iter(text.as_bytes(), b"packing").find(|&at| {
        let rest = text[at + "packing".len()..].trim_start();
        let attribute = text[..at]
            .trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
            .ends_with('.');
        !attribute
            && rest
                .strip_prefix('=')
                .is_some_and(|r| r.trim_start().starts_with("True"))
    })
}

/// The texts joined and cut into blocks of one length (`run_clm`'s `group_texts`:
/// `list(chain(*examples[k]))` sliced by a block size): the Trainer of the same file trains on
/// full blocks. Other scripts of the project may not (a pre-training stage beside a fine-tuning
/// one).
fn grouped_texts(text: &str) -> Option<usize> {
    let at = memchr::memmem::find(text.as_bytes(), b"chain(*")?;
    (text.contains("def group_texts") || text.contains("concatenated")).then_some(at)
}

/// Every key of a config and its value, at any depth (bounded).
fn walk<'n>(node: &'n Node, depth: usize, visit: &mut dyn FnMut(&str, &'n Node)) {
    if depth > 16 {
        return;
    }
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                visit(&k.name, v);
                walk(v, depth + 1, visit);
            }
        }
        Value::List(items) => {
            for item in items {
                walk(item, depth + 1, visit);
            }
        }
        _ => {}
    }
}
