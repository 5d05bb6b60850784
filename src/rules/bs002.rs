//! BS002 effective-batch-mismatch: a config (YAML, JSON, TOML, a Python dict, dataclass or
//! argparse defaults, or a launcher's flags) that declares a global batch that cannot equal micro
//! batch x accumulation x data-parallel size. Documentation: `rules/BS002.toml`.

use super::batch::{docs, looks_deepspeed, ranks, val, via_note, worlds, Doc, Val};
use super::{line_of, Checker, Rule};
use crate::config::{Key, Node, Value};
use crate::context::World;
use crate::diagnostic::Diagnostic;
use crate::facts::{Binding, InlineKind};
use std::ops::Range;

pub struct EffectiveBatchMismatch;

/// Keys that declare the batch of one optimizer step across all GPUs.
pub(super) const GLOBAL: &[&str] = &[
    "global_batch_size",
    "effective_batch_size",
    "total_batch_size",
    "total_train_batch_size",
    "train_global_batch_size",
    "global_train_batch_size",
];
/// Keys for the batch one GPU sees per micro-step.
pub(super) const MICRO: &[&str] = &[
    "micro_batch_size",
    "per_device_train_batch_size",
    "micro_batch_size_per_gpu",
    "per_gpu_train_batch_size",
    "per_device_batch_size",
    "batch_size_per_gpu",
    "batch_size_per_device",
    "train_micro_batch_size",
];
/// A LightningCLI data module's `batch_size`, the batch its loaders are built with: one
/// process's micro batch (see `lightning_cli`).
const DATA_BATCH: &str = "data.batch_size";

/// Keys for the number of micro-steps per optimizer step.
pub(super) const ACCUM: &[&str] = &[
    "gradient_accumulation_steps",
    "grad_accum_steps",
    "gradient_accumulation",
    "accumulate_grad_batches",
    "grad_accum",
    "accumulation_steps",
    "gradient_accumulation_iters",
    "grad_acc_steps",
];

impl Rule for EffectiveBatchMismatch {
    fn code(&self) -> &'static str {
        "BS002"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        loaders(cx, out);
        super::equations::report(cx, true, out);
        for doc in docs(cx) {
            // Defaults of a script: the launcher may pass other values, so only what no world
            // size can fix is reported there.
            let defaults = matches!(
                doc.kind,
                Some(InlineKind::Argparse | InlineKind::Dataclass { .. })
            );
            let worlds = if defaults {
                Vec::new()
            } else {
                worlds(cx, doc.config)
            };
            visit(cx, doc.root, doc.via, &worlds, 0, out);
            loader_keys(cx, &doc, out);
            if let Some((run, world)) = lightning_cli(cx, doc.root) {
                let worlds: Vec<World> = world.into_iter().chain(worlds).collect();
                out.extend(check_map(cx, &run, doc.via, &worlds, false));
            }
        }
        for launch in &cx.training.project.launches {
            if launch.recipe {
                continue;
            }
            // Megatron's --global-batch-size / --micro-batch-size pair is BS001's: Megatron
            // derives the accumulation from them, so a launch that also passes it is not one.
            let megatron = launch.flags.get("global_batch_size").is_some()
                && launch.flags.get("micro_batch_size").is_some()
                && !ACCUM.iter().any(|k| launch.flags.get(k).is_some());
            if megatron {
                continue;
            }
            let worlds: Vec<World> = launch.run.world.iter().cloned().collect();
            if let Some(d) = check_map(cx, &launch.flags, &launch.via, &worlds, true) {
                out.push(d);
            }
        }
    }
}

fn visit(
    cx: &Checker<'_>,
    node: &Node,
    via: &[(Range<usize>, Binding)],
    worlds: &[World],
    depth: usize,
    out: &mut Vec<Diagnostic>,
) {
    if depth > 8 {
        return;
    }
    let Value::Map(entries) = &node.value else {
        return;
    };
    if !looks_deepspeed(node) {
        if let Some(d) = check_map(cx, node, via, worlds, false) {
            out.push(d);
        }
    }
    for (_, v) in entries {
        visit(cx, v, via, worlds, depth + 1, out);
    }
}

/// A training loader built with a key of this config (`cfg["data"]["batch_size"]`) whose
/// value is not the micro batch the config declares but micro x accumulation, or the declared
/// global batch: each micro-step reads the whole window.
fn loader_keys(cx: &Checker<'_>, doc: &Doc<'_>, out: &mut Vec<Diagnostic>) {
    let uses = cx.training.project.config_uses.iter();
    let runs = uses.filter(|u| u.config == doc.config).map(|u| &u.run);
    let mut seen = Vec::new();
    for (path, site) in runs.flat_map(|r| &r.loader_keys) {
        // A loader built with a declared global batch is wrong in the code: reported there.
        let last = path
            .last()
            .map(|k| k.to_ascii_lowercase())
            .unwrap_or_default();
        if GLOBAL.contains(&last.as_str()) || ACCUM.contains(&last.as_str()) {
            continue;
        }
        let Some(node) = path.iter().try_fold(doc.root, |n, k| n.get(k)) else {
            continue;
        };
        let (Val::Num(l), false) = (val(Some(node)), seen.contains(&node.span)) else {
            continue;
        };
        let number = |keys: &[&str]| {
            let (k, n) = unique(doc.root, keys)?;
            match val(Some(n)) {
                Val::Num(v) => Some((k, v)),
                _ => None,
            }
        };
        let Some((mkey, m)) = number(MICRO) else {
            continue;
        };
        let accum = number(ACCUM).filter(|(_, a)| *a > 1);
        let global = number(GLOBAL);
        let window = match (accum, global) {
            (Some((akey, a)), _) if m.checked_mul(a) == Some(l) => {
                format!("micro batch {m} x {} {a}", akey.name)
            }
            (_, Some((gkey, g))) if g == l && g != m => format!("the declared {} {g}", gkey.name),
            _ => continue,
        };
        if l == m {
            continue;
        }
        seen.push(node.span.clone());
        let key = path.join(".");
        out.push(
            Diagnostic::new(
                "BS002",
                node.span.clone(),
                format!("`{key}` {l} builds the training loader at {site}, but it is {window}, not the micro batch this config declares ({} {m}): a loader yields one micro-batch per micro-step, so each reads {} micro-batches", mkey.name, l / m.max(1)),
            )
            .with_help(format!("set `{key}` to the micro batch, {m}, or build the loader with `{}`", mkey.name)),
        );
    }
}

/// The one entry, at any depth, whose key is one of `keys`; none when there are several.
fn unique<'n>(root: &'n Node, keys: &[&str]) -> Option<(&'n Key, &'n Node)> {
    fn walk<'n>(n: &'n Node, keys: &[&str], found: &mut Vec<(&'n Key, &'n Node)>, depth: usize) {
        let Value::Map(entries) = &n.value else {
            return;
        };
        if depth > 8 {
            return;
        }
        if let Some(hit) = find(n, keys) {
            found.push(hit);
        }
        for (_, v) in entries {
            walk(v, keys, found, depth + 1);
        }
    }
    let mut found = Vec::new();
    walk(root, keys, &mut found, 0);
    match found.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// A LightningCLI config (`trainer:`, `model:` and `data:` sections, each class's arguments
/// under `init_args`) declares one run across its sections: their batch keys, gathered in one
/// map, when each is written once. A data module's `batch_size` is the batch its loaders are
/// built with, one process's. A DDP strategy over `devices` x `num_nodes` fixes the world.
fn lightning_cli(cx: &Checker<'_>, root: &Node) -> Option<(Node, Option<World>)> {
    let trainer = root.get("trainer")?;
    let sections: Vec<(&str, &Node)> = ["trainer", "model", "data"]
        .into_iter()
        .filter_map(|name| {
            let sec = root.get(name)?;
            Some((name, sec.get("init_args").unwrap_or(sec)))
        })
        .collect();
    // Within one section the map is read as it stands.
    if sections
        .iter()
        .any(|(_, sec)| find(sec, GLOBAL).is_some() && find(sec, MICRO).is_some())
    {
        return None;
    }
    let mut entries: Vec<(Key, Node)> = Vec::new();
    for (section, sec) in &sections {
        let Value::Map(pairs) = &sec.value else {
            continue;
        };
        for (k, v) in pairs {
            let name = k.name.to_ascii_lowercase();
            let key = if *section == "data" && name == "batch_size" && find(sec, MICRO).is_none() {
                Key {
                    name: DATA_BATCH.into(),
                    span: k.span.clone(),
                }
            } else if [GLOBAL, MICRO, ACCUM]
                .iter()
                .any(|keys| keys.contains(&name.as_str()))
            {
                k.clone()
            } else {
                continue;
            };
            if entries
                .iter()
                .any(|(e, _)| e.name.eq_ignore_ascii_case(&key.name))
            {
                return None;
            }
            entries.push((key, v.clone()));
        }
    }
    let gathered = |keys: &[&str]| {
        entries
            .iter()
            .filter(|(k, _)| keys.contains(&k.name.to_ascii_lowercase().as_str()))
            .count()
    };
    if gathered(GLOBAL) != 1 || gathered(MICRO) + gathered(&[DATA_BATCH]) != 1 {
        return None;
    }
    let number = |key: &str| match trainer.get(key).map(|n| &n.value) {
        Some(Value::Number(n)) if *n >= 1.0 && n.fract() == 0.0 => Some(*n as u64),
        None => Some(1),
        _ => None,
    };
    let ddp = matches!(trainer.get("strategy").map(|n| &n.value), Some(Value::String(s)) if s.starts_with("ddp"));
    // `devices: auto` fixes no world size; the sections are judged without one.
    let processes = number("devices")
        .zip(number("num_nodes"))
        .map_or(1, |(d, n)| d.saturating_mul(n));
    let world = (ddp && processes > 1).then(|| World {
        processes,
        data_parallel: processes,
        why: format!(
            "{processes} processes from the trainer's `devices` x `num_nodes` with strategy `ddp` ({})",
            line_of(cx.file, trainer.get("devices").unwrap_or(trainer).span.start)
        ),
    });
    let run = Node {
        value: Value::Map(entries),
        span: root.span.clone(),
    };
    Some((run, world))
}

fn find<'n>(map: &'n Node, keys: &[&str]) -> Option<(&'n Key, &'n Node)> {
    let Value::Map(entries) = &map.value else {
        return None;
    };
    entries
        .iter()
        .find(|(k, _)| {
            let name = k
                .name
                .trim_start_matches('-')
                .to_ascii_lowercase()
                .replace('-', "_");
            keys.contains(&name.as_str())
        })
        .map(|(k, v)| (k, v))
}

fn check_map(
    cx: &Checker<'_>,
    map: &Node,
    via: &[(Range<usize>, Binding)],
    worlds: &[World],
    flags: bool,
) -> Option<Diagnostic> {
    // accelerate's `split_batches`: the loader batch is already the global one.
    if map
        .get("split_batches")
        .is_some_and(|v| v.value == Value::Bool(true))
    {
        return None;
    }
    // axolotl: `batch_size` is micro batch x accumulation per device (older versions: global).
    let axolotl = map.get("base_model").is_some() && map.get("micro_batch_size").is_some();
    let (gkey, gnode) = if axolotl {
        find(map, &["batch_size"]).or_else(|| find(map, GLOBAL))?
    } else {
        find(map, GLOBAL)?
    };
    let (mkey, mnode) = find(map, MICRO).or_else(|| find(map, &[DATA_BATCH]))?;
    let accum = find(map, ACCUM);
    let (Val::Num(g), Val::Num(m)) = (val(Some(gnode)), val(Some(mnode))) else {
        return None;
    };
    let a = match accum.map(|(_, n)| val(Some(n))) {
        None | Some(Val::Absent) => None,
        Some(Val::Num(a)) => Some(a),
        Some(Val::Unknown) => return None,
    };
    let file = cx.file;
    let dash = |k: &Key| {
        if flags {
            format!("--{}", k.name)
        } else {
            k.name.clone()
        }
    };
    let mut values = format!(
        "{} {g}{}, {} {m}{}",
        dash(gkey),
        via_note(file, via, &gnode.span),
        dash(mkey),
        via_note(file, via, &mnode.span)
    );
    if let (Some(a), Some((akey, anode))) = (a, accum) {
        values.push_str(&format!(
            ", {} {a}{}",
            dash(akey),
            via_note(file, via, &anode.span)
        ));
    }
    // A flag's value may come from a variable set elsewhere: point at the flag itself.
    let span = if flags {
        gkey.span.clone()
    } else {
        gnode.span.clone()
    };
    if !axolotl {
        for w in worlds {
            let dp = w.data_parallel;
            let problem = match a {
                Some(a) => {
                    let want = m.checked_mul(a)?.checked_mul(dp)?;
                    (g != want).then(|| {
                        (
                            format!("{} x {} = {want}", format_args!("micro batch {m} x accumulation {a}"), ranks(dp)),
                            format!("set it to {want}, or change the micro batch or accumulation so that they multiply to {g}"),
                        )
                    })
                }
                None => {
                    let step = m.checked_mul(dp)?;
                    (g % step != 0).then(|| {
                        (
                            format!(
                                "micro batch {m} x {} x any whole number of accumulation steps",
                                ranks(dp)
                            ),
                            format!("use a multiple of {step}"),
                        )
                    })
                }
            };
            if let Some((what, help)) = problem {
                return Some(
                    Diagnostic::new(
                        "BS002",
                        span,
                        format!(
                            "declared global batch {g} cannot equal {what} ({values}; {})",
                            w.why
                        ),
                    )
                    .with_help(help),
                );
            }
        }
    }
    let (step, what) = match a {
        Some(a) => (
            m.checked_mul(a)?,
            format!("micro batch {m} x accumulation {a}"),
        ),
        None => (m, format!("micro batch {m}")),
    };
    if g % step == 0 && g >= step {
        return None;
    }
    let lower = g / step * step;
    let near = if lower == 0 {
        format!("{step}")
    } else {
        format!("{lower} or {}", lower + step)
    };
    let message = if axolotl {
        format!("axolotl batch_size {g} is not a multiple of {what} = {step}: it cannot be micro batch x accumulation on any number of GPUs ({values})")
    } else {
        format!("declared global batch {g} is not a multiple of {what} = {step}: no number of GPUs makes micro x accumulation x world size equal it ({values})")
    };
    Some(
        Diagnostic::new("BS002", span, message)
            .with_help(format!("use a multiple of {step}, e.g. {near}")),
    )
}

/// A data loader built with the batch the file divides by the micro batch to get the
/// accumulation factor: every micro-step reads a whole window.
fn loaders(cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
    for l in &cx.facts.loader_batches {
        let (arg, micro, accum, derivation) = (&l.arg, &l.micro, &l.accum, &l.derivation);
        let at = l
            .derived_at
            .as_ref()
            .map(|r| format!(" ({})", line_of(cx.file, r.start)))
            .unwrap_or_default();
        out.push(
            Diagnostic::new(
                "BS002",
                l.span.clone(),
                format!("the data loader is built with `batch_size={arg}` while the accumulation factor is derived as `{accum} = {derivation}`{at}: `{arg}` is the batch of a whole window and `{micro}` the batch of one micro-step, so each micro-step reads `{accum}` times the micro batch"),
            )
            .with_help(format!("build the loader with `batch_size={micro}`")),
        );
    }
}
