//! Runs: one per launch command, one per recipe that names its DeepSpeed config and that no
//! command reaches, and one for each file no run reaches. A run holds the file it starts from,
//! the script it starts, the configs it uses and what it says about them.

use super::files::{Fid, Files};
use super::launch::{command_text, flags_node, parse_invocation};
use super::lookup::{find_config, follow_nested, is_config_flag, is_config_path, nested_names};
use super::trainer::{accelerate_deepspeed, trainer_args};
use super::world::{accelerate_world, world_of};
use crate::config::{Node, Value};
use crate::context::{ConfigRef, RunInfo, Seen};
use crate::facts::Binding;
use std::ops::Range;
use std::sync::Arc;

pub(super) struct Run {
    /// The file the run starts from (the launcher or the recipe), and the command in it.
    pub(super) origin: Fid,
    pub(super) invocation: Option<usize>,
    pub(super) recipe: Option<ConfigRef>,
    pub(super) script: Option<Fid>,
    /// Every config document in the run.
    pub(super) configs: Vec<(Fid, ConfigRef)>,
    /// Configs named on the command line, with the word that names them.
    pub(super) named: Vec<(Fid, ConfigRef, Range<usize>)>,
    pub(super) flags: Node,
    pub(super) via: Vec<(Range<usize>, Binding)>,
    pub(super) info: Arc<RunInfo>,
}

impl Run {
    pub(super) fn members(&self) -> Vec<Fid> {
        let mut m = vec![self.origin];
        m.extend(self.script);
        for (f, _) in &self.configs {
            if !m.contains(f) {
                m.push(*f);
            }
        }
        m
    }
}

pub(super) fn launch_run(files: &mut Files, origin: Fid, k: usize) -> Option<Run> {
    let inv = files.facts(origin).invocations.get(k)?.clone();
    let parsed = parse_invocation(&inv);
    let script = inv.script.as_deref().and_then(|s| files.resolve(s, origin));
    let mut configs: Vec<(Fid, ConfigRef)> = Vec::new();
    let mut named: Vec<(Fid, ConfigRef, Range<usize>)> = Vec::new();
    let mut names: Vec<(String, Range<usize>)> = Vec::new();
    for (key, value, word) in parsed.options.iter().chain(parsed.flags.iter()) {
        if let Some(v) = value {
            let at = word.span.start..v.span.end.max(word.span.end);
            if is_config_flag(key) && is_config_path(&v.value) {
                names.push((v.value.clone(), at));
            } else if inv.launcher == "tune" && key == "config" {
                // `tune run ... --config llama3/8B_full` names `llama3/8B_full.yaml`.
                names.push((format!("{}.yaml", v.value), at));
            }
        }
    }
    for p in &parsed.positional {
        if is_config_path(&p.value) {
            names.push((p.value.clone(), p.span.clone()));
        }
    }
    for (name, at) in names {
        for (f, c) in find_config(files, origin, &name) {
            if !configs.contains(&(f, c)) {
                configs.push((f, c));
                named.push((f, c, at.clone()));
            }
        }
    }
    if let Some(s) = script {
        for c in files.configs_of(s) {
            if matches!(c, ConfigRef::Inline(_)) {
                configs.push((s, c));
            }
        }
        for fc in opened_configs(files, s) {
            if !configs.contains(&fc) {
                configs.push(fc);
            }
        }
    }
    follow_nested(files, &mut configs, origin);
    let (flags, via) = flags_node(&parsed.flags, inv.span.clone());
    let world = world_of(files, origin, &inv, &parsed, &configs, &flags);
    // accelerate with a DeepSpeed plugin config hands the Trainer a DeepSpeed config of its own.
    let accelerate_ds = parsed.kind == "accelerate"
        && configs.iter().any(|(f, c)| {
            files
                .config(*f, *c)
                .is_some_and(|r| accelerate_deepspeed(r).is_some())
        });
    // A recipe run by its framework's command (`llamafactory-cli train x.yaml`, `accelerate
    // launch -m axolotl.cli.train x.yml`): the recipe holds the Trainer's arguments.
    let recipe = named
        .iter()
        .filter(|_| script.is_none())
        .find_map(|(f, c, _)| {
            let root = files.config(*f, *c).filter(|r| names_deepspeed(r))?;
            Some((*f, recipe_flags(root)))
        });
    let trainer = match &recipe {
        Some((f, r)) => trainer_args(files, *f, r, None, true, false),
        None => trainer_args(files, origin, &flags, script, false, accelerate_ds),
    };
    let command = command_text(&inv);
    let info = RunInfo {
        at: files.site(origin, inv.span.start),
        command,
        world,
        auto_find_batch_size: flags.get("auto_find_batch_size").is_some(),
        accumulation: accumulation(files, origin, &flags),
        deepspeed_accumulation: deepspeed_accumulation(files, &configs),
        trainer,
        loader_keys: script.map(|s| loader_keys(files, s)).unwrap_or_default(),
    };
    Some(Run {
        origin,
        invocation: Some(k),
        recipe: None,
        script,
        configs,
        named,
        flags,
        via,
        info: Arc::new(info),
    })
}

/// A recipe's keys as the Trainer's arguments: axolotl's `micro_batch_size` is the Trainer's
/// per-device batch size.
fn recipe_flags(root: &Node) -> Node {
    let mut flags = root.clone();
    if let Value::Map(entries) = &mut flags.value {
        let axolotl = entries.iter().any(|(k, _)| k.name == "base_model")
            && entries.iter().any(|(k, _)| k.name == "micro_batch_size");
        if axolotl {
            for (k, _) in entries.iter_mut() {
                if k.name == "micro_batch_size" {
                    k.name = "per_device_train_batch_size".into();
                }
            }
        }
    }
    flags
}

/// The config names a DeepSpeed config (`deepspeed: ds_z2.json`): a recipe.
fn names_deepspeed(root: &Node) -> bool {
    let mut named = Vec::new();
    nested_names(root, "", &mut named, 0);
    !named.is_empty()
}

pub(super) fn recipe_run(files: &mut Files, origin: Fid, c: ConfigRef) -> Option<Run> {
    let mut named_paths = Vec::new();
    nested_names(files.config(origin, c)?, "", &mut named_paths, 0);
    if named_paths.is_empty() {
        return None;
    }
    let root = files.config(origin, c)?.clone();
    let mut configs = vec![(origin, c)];
    follow_nested(files, &mut configs, origin);
    let named: Vec<(Fid, ConfigRef, Range<usize>)> = configs
        .iter()
        .skip(1)
        .map(|(f, cc)| (*f, *cc, root.span.start..root.span.start))
        .collect();
    let flags = recipe_flags(&root);
    let world = accelerate_world(files, origin, &root);
    let trainer = trainer_args(files, origin, &flags, None, true, false);
    let info = RunInfo {
        at: files.site(origin, root.span.start),
        command: "the recipe".into(),
        world,
        auto_find_batch_size: flags.get("auto_find_batch_size").is_some(),
        accumulation: None,
        deepspeed_accumulation: deepspeed_accumulation(files, &configs),
        trainer,
        loader_keys: Vec::new(),
    };
    Some(Run {
        origin,
        invocation: None,
        recipe: Some(c),
        script: None,
        configs,
        named,
        flags,
        via: Vec::new(),
        info: Arc::new(info),
    })
}

/// The accumulation factor a launch passes to its script (the last flag wins), with where.
fn accumulation(files: &Files, origin: Fid, flags: &Node) -> Option<Seen<f64>> {
    let Value::Map(entries) = &flags.value else {
        return None;
    };
    let (key, value) = entries
        .iter()
        .rev()
        .find(|(k, _)| k.name == "gradient_accumulation_steps")?;
    Some(Seen {
        value: value.as_number()?,
        at: files.site(origin, key.span.start),
    })
}

/// The accumulation factor of a DeepSpeed config among a run's configs (one that sets its
/// batch or ZeRO keys), with where.
fn deepspeed_accumulation(files: &Files, configs: &[(Fid, ConfigRef)]) -> Option<Seen<f64>> {
    configs.iter().find_map(|(f, c)| {
        let root = files.config(*f, *c)?;
        let deepspeed = [
            "train_micro_batch_size_per_gpu",
            "train_batch_size",
            "zero_optimization",
        ]
        .iter()
        .any(|k| root.get(k).is_some());
        let key = root
            .get("gradient_accumulation_steps")
            .filter(|_| deepspeed)?;
        Some(Seen {
            value: key.as_number()?,
            at: files.site(*f, key.span.start),
        })
    })
}

/// The configs a script names by a literal path, resolved as the script's folder sees them.
pub(super) fn opened_configs(files: &mut Files, script: Fid) -> Vec<(Fid, ConfigRef)> {
    let paths: Vec<String> = files
        .facts(script)
        .opened_paths
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    let mut out = Vec::new();
    for p in paths {
        let Some(f) = files.resolve(&p, script) else {
            continue;
        };
        if f == script {
            continue;
        }
        for c in files.configs_of(f) {
            if matches!(c, ConfigRef::Root(_)) && !out.contains(&(f, c)) {
                out.push((f, c));
            }
        }
    }
    out
}

pub(super) fn standalone_run(files: &mut Files, origin: Fid) -> Run {
    let mut configs: Vec<(Fid, ConfigRef)> = files
        .configs_of(origin)
        .into_iter()
        .map(|c| (origin, c))
        .collect();
    for fc in opened_configs(files, origin) {
        if !configs.contains(&fc) {
            configs.push(fc);
        }
    }
    follow_nested(files, &mut configs, origin);
    let shared: &Files = files;
    let world = shared
        .config(origin, ConfigRef::Root(0))
        .and_then(|root| accelerate_world(shared, origin, root));
    let deepspeed_accumulation = deepspeed_accumulation(files, &configs);
    Run {
        origin,
        invocation: None,
        recipe: None,
        script: None,
        configs,
        named: Vec::new(),
        flags: Node {
            value: Value::Map(Vec::new()),
            span: 0..0,
        },
        via: Vec::new(),
        info: Arc::new(RunInfo {
            at: files.file(origin).display.clone(),
            command: String::new(),
            world,
            trainer: None,
            auto_find_batch_size: false,
            accumulation: None,
            deepspeed_accumulation,
            loader_keys: loader_keys(files, origin),
        }),
    }
}

/// The config keys the training loaders of `script` take their batch from, with where.
fn loader_keys(files: &Files, script: Fid) -> Vec<(Vec<String>, String)> {
    files
        .facts(script)
        .loader_keys
        .iter()
        .map(|(path, span)| (path.clone(), files.site(script, span.start)))
        .collect()
}
