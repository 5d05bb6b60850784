//! Config lookup: which words of a command name a config, and where that config is: a heredoc
//! of the same script, a file next to the launcher or above it, or a config that another config
//! names (accelerate's `deepspeed_config_file`, a recipe's `deepspeed:`).

use super::files::{Fid, Files};
use crate::config::{Node, Value};
use crate::context::ConfigRef;
use crate::facts::InlineKind;

/// Extensions of files a flag may name as a config.
pub(super) fn is_config_path(v: &str) -> bool {
    let l = v.to_ascii_lowercase();
    [".json", ".yaml", ".yml", ".toml"]
        .iter()
        .any(|e| l.ends_with(e))
}

/// Whether a flag names a config (rather than data: `--data_path alpaca.json`).
pub(super) fn is_config_flag(flag: &str) -> bool {
    let k = flag.trim_start_matches('-').to_ascii_lowercase();
    ["config", "deepspeed", "cfg", "recipe", "ds_"]
        .iter()
        .any(|w| k.contains(w))
}

/// A config named by a command: a heredoc of the same script that writes that path, or a file.
pub(super) fn find_config(files: &mut Files, origin: Fid, name: &str) -> Vec<(Fid, ConfigRef)> {
    let clean = |p: &str| {
        p.trim_matches(['"', '\''])
            .trim_start_matches("./")
            .to_string()
    };
    let want = clean(name);
    let facts = files.facts(origin);
    let inline: Vec<(Fid, ConfigRef)> = facts
        .inline_configs
        .iter()
        .enumerate()
        .filter(
            |(_, c)| matches!(&c.kind, InlineKind::Heredoc { path: Some(p) } if clean(p) == want),
        )
        .map(|(i, _)| (origin, ConfigRef::Inline(i)))
        .collect();
    if !inline.is_empty() {
        return inline;
    }
    find_in(files, origin, name)
}

/// Configs that name another config: accelerate's `deepspeed_config_file`, a recipe's
/// `deepspeed:`. One level is followed.
pub(super) fn follow_nested(files: &mut Files, configs: &mut Vec<(Fid, ConfigRef)>, launcher: Fid) {
    let current = configs.clone();
    for (f, c) in current {
        let Some(root) = files.config(f, c) else {
            continue;
        };
        let mut named = Vec::new();
        nested_names(root, "", &mut named, 0);
        for name in named {
            let found = {
                let mut r = find_in(files, f, &name);
                if r.is_empty() {
                    r = find_in(files, launcher, &name);
                }
                r
            };
            for fc in found {
                if !configs.contains(&fc) {
                    configs.push(fc);
                }
            }
        }
    }
}

/// The root configs of the file `name` resolves to from `from`.
fn find_in(files: &mut Files, from: Fid, name: &str) -> Vec<(Fid, ConfigRef)> {
    match files.resolve(name, from) {
        Some(f) => files
            .configs_of(f)
            .into_iter()
            .filter(|c| matches!(c, ConfigRef::Root(_)))
            .map(|c| (f, c))
            .collect(),
        None => Vec::new(),
    }
}

pub(super) fn nested_names(node: &Node, parent: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 3 {
        return;
    }
    if let Value::Map(entries) = &node.value {
        for (k, v) in entries {
            let key = k.name.to_ascii_lowercase();
            if let Some(s) = v.as_str() {
                let names_ds = matches!(
                    key.as_str(),
                    "deepspeed" | "deepspeed_config" | "deepspeed_config_file" | "ds_config"
                ) || (key == "config_file" && parent.contains("deepspeed"))
                    || (key == "config_file" && parent == "dist_config");
                if names_ds && is_config_path(s) {
                    out.push(s.to_string());
                }
            }
            nested_names(v, &key, out, depth + 1);
        }
    }
}
