//! The memory case: everything MEM005 needs about one run (the parameter count, the GPU's
//! memory, the optimizer, precision and sharding of the run joined), anchored at the parameter
//! count in a linted file.

use super::files::{located, Fid, Files};
use super::names::{is_gpu_memory_name, names_model, params_from_name, PARAM_KEYS};
use super::runs::Run;
use crate::config::{Node, Value};
use crate::context::{ConfigRef, DeepSpeedMemory, Located, MemoryCase, Quantity, TrainingContext};
use crate::diagnostic::fmt_count;
use crate::expr::Role;
use crate::facts::Framework;
use crate::source::Language;
use std::ops::Range;

struct Found {
    value: f64,
    why: String,
    /// The span in a linted file, to anchor a diagnostic.
    anchor: Option<(usize, Range<usize>)>,
    nominal: bool,
}

/// `lone`: the project's only accelerate config and the configs it names, which a script that
/// uses accelerate and that no command launches runs with.
pub(super) fn memory_case(
    files: &Files,
    run: &Run,
    lone: &[(Fid, ConfigRef)],
) -> Option<(usize, MemoryCase)> {
    // A script the run starts but that cannot be read may hold what changes the sum (LoRA).
    if let Some(k) = run.invocation {
        let inv = files.facts(run.origin).invocations.get(k)?;
        if inv.script.is_some() && run.script.is_none() {
            return None;
        }
    }
    // A config on its own says nothing of how many processes run it or how they shard
    // (torchtune's distributed recipes shard with FSDP without a key saying so).
    if run.invocation.is_none()
        && run.recipe.is_none()
        && matches!(
            files.file(run.origin).language,
            Language::Yaml | Language::Json | Language::Toml
        )
    {
        return None;
    }
    let members = run.members();
    let mut params: Vec<Found> = Vec::new();
    let mut gpus: Vec<Found> = Vec::new();
    let unit_of = |f: Fid| match f {
        Fid::Unit(u) => Some(u),
        Fid::Extra(_) => None,
    };
    for &f in &members {
        let facts = files.facts(f);
        for c in &facts.constants {
            // A flag's default gives way to the value the launch passes.
            if c.flag && passes(&run.flags, &c.name) {
                continue;
            }
            let found = Found {
                value: c.value,
                why: format!("`{}` at {}", c.name, files.site(f, c.span.start)),
                anchor: unit_of(f).map(|u| (u, c.span.clone())),
                nominal: false,
            };
            match c.role {
                Role::ParamCount if c.value >= 1e6 => params.push(found),
                Role::Gpu if is_gpu_memory_name(&c.name) && c.value > 0.0 => gpus.push(found),
                _ => {}
            }
        }
    }
    let mut nodes: Vec<(Fid, &Node)> = run
        .configs
        .iter()
        .filter_map(|(f, c)| Some((*f, files.config(*f, *c)?)))
        .collect();
    nodes.push((run.origin, &run.flags));
    for (f, node) in nodes {
        scan_quantities(files, f, node, "", &mut params, &mut gpus, 0);
    }
    // A count written as a number states it; one read from a model's name (`pythia-6.9b` for
    // 6,857,302,016) is nominal, and only read where no number is written.
    if params.iter().any(|x| !x.nominal) {
        params.retain(|x| !x.nominal);
    }
    // One value each, or nothing is asserted.
    let distinct = |v: &[Found]| {
        let first = v.first()?;
        v.iter()
            .all(|x| (x.value - first.value).abs() <= 1e-9 * first.value.abs())
            .then_some(first.value)
    };
    let p = distinct(&params)?;
    let anchor_of = |v: &[Found]| v.iter().find_map(|x| x.anchor.clone());
    let (unit, anchor) = anchor_of(&params)?;
    let gpu = match distinct(&gpus) {
        Some(g) => Quantity {
            value: g,
            why: gpus
                .iter()
                .map(|x| x.why.clone())
                .next()
                .unwrap_or_default(),
        },
        None if gpus.is_empty() => {
            let configured = files.units[unit].defaults.gpu_memory_gb?;
            Quantity {
                value: configured,
                why: "`gpu-memory-gb` in the memlint configuration".into(),
            }
        }
        None => return None,
    };
    let param_site = params
        .iter()
        .find(|x| x.anchor.as_ref().is_some_and(|(u, _)| *u == unit))
        .or(params.first())?;
    // The run's evidence, joined.
    let mut located = Located::default();
    let mut sites = Vec::new();
    for &f in &members {
        let l = located_all(files, f);
        for m in &l.evidence.precision {
            sites.push(files.site(f, m.span.start).to_string());
        }
        located.join(&l);
    }
    let training = TrainingContext::build(&located, &files.units[unit].defaults);
    let mut deepspeed = None;
    let mut fsdp = false;
    let standalone = run.invocation.is_none() && run.recipe.is_none();
    let accelerate = training.frameworks.contains(&Framework::Accelerate);
    let lone = if standalone && accelerate { lone } else { &[] };
    for (f, c) in run.configs.iter().chain(lone) {
        let Some(root) = files.config(*f, *c) else {
            continue;
        };
        if let Some(m) = ds_memory(files, *f, root, &run.flags) {
            deepspeed = Some(m);
        }
        if let Value::Map(entries) = &root.value {
            fsdp |= entries.iter().any(|(k, v)| {
                k.name.starts_with("fsdp") && !matches!(v.value, Value::Null | Value::Bool(false))
                    || k.name.starts_with("fsdp_")
            });
        }
    }
    if let Value::Map(entries) = &run.flags.value {
        fsdp |= entries.iter().any(|(k, _)| k.name.starts_with("fsdp"));
    }
    // torchtune's distributed recipes shard with FSDP.
    if let Some(inv) = run
        .invocation
        .and_then(|k| files.facts(run.origin).invocations.get(k))
    {
        fsdp |= inv.launcher == "tune"
            && inv
                .args
                .iter()
                .any(|a| !a.value.starts_with('-') && a.value.contains("distributed"));
    }
    let mut off_gpu = located
        .evidence
        .optimizers
        .iter()
        .find(|m| m.value.name.starts_with("paged"))
        .map(|m| format!("paged optimizer `{}`", m.value.name));
    for (f, c) in &run.configs {
        let in_bwd = files
            .config(*f, *c)
            .and_then(|r| r.get("optimizer_in_bwd"))
            .is_some_and(|v| v.value == Value::Bool(true));
        if in_bwd {
            off_gpu = Some("`optimizer_in_bwd`".into());
        }
    }
    // Flags and keys that train a fraction of the weights, quantize the base, or do not train.
    let mut maps: Vec<&Node> = run
        .configs
        .iter()
        .filter_map(|(f, c)| files.config(*f, *c))
        .collect();
    maps.push(&run.flags);
    for m in maps {
        if let Some(why) = not_full_training(m) {
            off_gpu = Some(why);
        }
    }
    Some((
        unit,
        MemoryCase {
            anchor,
            params: Quantity {
                value: p,
                why: param_site.why.clone(),
            },
            nominal: param_site.nominal,
            gpu,
            training,
            precision_sites: sites,
            deepspeed,
            world: run.info.world.clone(),
            fsdp,
            off_gpu,
        },
    ))
}

/// Keys (flags or config keys) that mean not every weight is trained with full optimizer state:
/// P-tuning and prompt tuning, a quantized base, evaluation-only runs.
fn not_full_training(map: &Node) -> Option<String> {
    let Value::Map(entries) = &map.value else {
        return None;
    };
    let on = |v: &Node| {
        !matches!(v.value, Value::Null | Value::Bool(false)) && v.as_number() != Some(0.0)
    };
    for (k, v) in entries {
        let key = k.name.to_ascii_lowercase();
        let partial = matches!(
            key.as_str(),
            "pre_seq_len"
                | "prefix_tuning"
                | "prompt_tuning"
                | "p_tuning"
                | "ptuning"
                | "num_virtual_tokens"
                | "quantization_bit"
                | "load_in_4bit"
                | "load_in_8bit"
                | "bits"
                | "double_quant"
        );
        if partial && on(v) {
            return Some(format!("`{}`", k.name));
        }
    }
    // HF example scripts: `--do_eval` / `--do_predict` without `--do_train` do not train.
    let has = |k: &str| entries.iter().any(|(e, v)| e.name == k && on(v));
    if (has("do_predict") || has("do_eval")) && !has("do_train") {
        return Some("evaluation only".into());
    }
    None
}

/// All evidence of a file: its own, and that of its inline configs.
fn located_all(files: &Files, f: Fid) -> Located {
    let mut l = Located::from_file(files.file(f), files.facts(f));
    for i in 0..files.facts(f).inline_configs.len() {
        l.join(&located(files, f, Some(ConfigRef::Inline(i))));
    }
    l
}

/// Whether a launch's flags give `name` (`--gpu-memory-gb` for `gpu_memory_gb`).
fn passes(flags: &Node, name: &str) -> bool {
    given(flags, name).next().is_some()
}

/// Whether a launch turns a boolean flag on: `--bf16`, `--bf16 true`, `--bf16=1`.
fn flag_on(flags: &Node, name: &str) -> bool {
    given(flags, name).any(|v| match &v.value {
        Value::Bool(b) => *b,
        Value::Null => true,
        Value::Number(n) => *n != 0.0,
        Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "" | "true" | "1" | "yes"),
        _ => false,
    })
}

/// The values a launch's flags give `name` (`--gpu-memory-gb` for `gpu_memory_gb`).
fn given<'a>(flags: &'a Node, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
    let entries = match &flags.value {
        Value::Map(entries) => entries.as_slice(),
        _ => &[],
    };
    entries
        .iter()
        .filter(move |(k, _)| k.name.trim_start_matches('-').replace('-', "_") == name)
        .map(|(_, v)| v)
}

fn scan_quantities(
    files: &Files,
    f: Fid,
    node: &Node,
    parent: &str,
    params: &mut Vec<Found>,
    gpus: &mut Vec<Found>,
    depth: usize,
) {
    if depth > 6 {
        return;
    }
    let Value::Map(entries) = &node.value else {
        return;
    };
    let unit = match f {
        Fid::Unit(u) => Some(u),
        Fid::Extra(_) => None,
    };
    for (k, v) in entries {
        let key = k.name.to_ascii_lowercase().replace('-', "_");
        if let Some(q) = stated(&key, parent, &v.value) {
            let at = files.site(f, v.span.start);
            let anchor = unit.map(|u| (u, v.span.clone()));
            let (list, found) = match q {
                Stated::Params { value, named } => (
                    &mut *params,
                    Found {
                        value,
                        why: match &v.value {
                            Value::String(s) if named => {
                                format!("{} parameters in the name `{s}` at {at}", fmt_count(value))
                            }
                            _ => format!("`{}` at {at}", k.name),
                        },
                        anchor,
                        nominal: named,
                    },
                ),
                Stated::Gpu(value) => (
                    &mut *gpus,
                    Found {
                        value,
                        why: format!("`{}` at {at}", k.name),
                        anchor,
                        nominal: false,
                    },
                ),
            };
            list.push(found);
        }
        scan_quantities(files, f, v, &key, params, gpus, depth + 1);
    }
}

/// What a config key states for MEM005.
enum Stated {
    /// A parameter count, as a number or in a model's name (`named`: nominal).
    Params { value: f64, named: bool },
    /// The GPU's memory.
    Gpu(f64),
}

/// The quantity `key` (under `parent`) gives, if any: a count under a count's key, a size in a
/// model's name, or the GPU's memory.
fn stated(key: &str, parent: &str, value: &Value) -> Option<Stated> {
    match value {
        Value::Number(n) if PARAM_KEYS.contains(&key) && *n >= 1e6 => Some(Stated::Params {
            value: *n,
            named: false,
        }),
        Value::Number(n) if is_gpu_memory_name(key) && *n > 0.0 => Some(Stated::Gpu(*n)),
        Value::String(s) if names_model(key, parent) => {
            params_from_name(s).map(|value| Stated::Params { value, named: true })
        }
        _ => None,
    }
}

fn ds_memory(files: &Files, f: Fid, root: &Node, flags: &Node) -> Option<DeepSpeedMemory> {
    let zero = root.get("zero_optimization");
    let looks_ds = zero.is_some()
        || root.get("train_micro_batch_size_per_gpu").is_some()
        || root.get("train_batch_size").is_some();
    if !looks_ds {
        return None;
    }
    let stage = match zero.and_then(|z| z.get("stage")) {
        Some(s) => Some(
            s.as_number()
                .filter(|v| (0.0..=3.0).contains(v) && v.fract() == 0.0)? as u8,
        ),
        None => Some(0),
    };
    let offload = zero.is_some_and(|z| {
        [
            "offload_optimizer",
            "offload_param",
            "cpu_offload",
            "cpu_offload_params",
        ]
        .iter()
        .any(|k| match z.get(k) {
            Some(n) => match &n.value {
                Value::Map(_) => n
                    .get("device")
                    .and_then(Node::scalar_text)
                    .is_none_or(|d| !d.eq_ignore_ascii_case("none")),
                Value::Bool(b) => *b,
                Value::Null => false,
                _ => true,
            },
            None => false,
        })
    });
    // `"auto"` takes the Trainer's flag (`--bf16`, `--fp16`), as transformers fills it in.
    let enabled = |k: &str, flag: &str| {
        root.get(k)
            .and_then(|n| n.get("enabled"))
            .is_some_and(|e| match &e.value {
                Value::Bool(b) => *b,
                Value::String(s) | Value::Unknown(s) if s.eq_ignore_ascii_case("auto") => {
                    flag_on(flags, flag)
                }
                _ => false,
            })
    };
    let mixed = enabled("bf16", "bf16") || enabled("fp16", "fp16") || enabled("bfloat16", "bf16");
    Some(DeepSpeedMemory {
        stage,
        offload,
        mixed,
        why: files.site(f, root.span.start),
    })
}

/// Whether a config states both a parameter count (or a model name with its size) and a GPU's
/// memory: all MEM005 needs from a config, besides the optimizer a script that opens it builds.
pub fn states_a_fit(facts: &crate::facts::Facts) -> bool {
    fn scan(node: &Node, parent: &str, found: &mut (bool, bool), depth: usize) {
        let Value::Map(entries) = &node.value else {
            return;
        };
        if depth > 6 {
            return;
        }
        for (k, v) in entries {
            let key = k.name.to_ascii_lowercase().replace('-', "_");
            match stated(&key, parent, &v.value) {
                Some(Stated::Params { .. }) => found.0 = true,
                Some(Stated::Gpu(_)) => found.1 = true,
                None => {}
            }
            scan(v, &key, found, depth + 1);
        }
    }
    let mut found = (false, false);
    for root in facts.config.iter().flat_map(|d| &d.roots) {
        scan(root, "", &mut found, 0);
    }
    found.0 && found.1
}
