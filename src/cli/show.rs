//! `--show-files` and `--show-settings`: what a run would read, and the settings it would read
//! them with, without linting anything.

use super::print_out;
use crate::discover::{Candidate, PathError};
use crate::settings::{Resolver, CONFIG_NAMES, DEFAULT_EXCLUDES};
use crate::source::display_path;
use std::path::PathBuf;

/// The files a run would lint, one per line, sorted.
pub fn files(candidates: &[Candidate], errors: &[PathError]) -> i32 {
    let cwd = crate::discover::cwd();
    let mut shown: Vec<String> = candidates
        .iter()
        .map(|c| display_path(&c.path, &cwd))
        .collect();
    shown.sort();
    let mut out = String::new();
    for s in shown {
        out.push_str(&s);
        out.push('\n');
    }
    print_out(&out);
    for e in errors {
        eprintln!("memlint: error: {}: {}", e.path, e.message);
    }
    if errors.is_empty() {
        0
    } else {
        2
    }
}

/// The settings that apply to the first file a run would lint (or to the first path given when
/// there is none), as TOML: where they come from, the rules enabled, the excludes and the rest
/// of the options.
pub fn settings(
    resolver: &Resolver,
    candidates: &[Candidate],
    paths: &[PathBuf],
    cli_extend_exclude: &[String],
) -> i32 {
    let cwd = crate::discover::cwd();
    // The first file, memlint's own configuration files last.
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by_key(|c| {
        let own = c
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| CONFIG_NAMES.contains(&n));
        (own, display_path(&c.path, &cwd))
    });
    let (target, settings) = match sorted.first() {
        Some(c) => (c.path.clone(), resolver.for_file(&c.path)),
        None => {
            let p = paths.first().cloned().unwrap_or_else(|| PathBuf::from("."));
            let s = if p.is_dir() {
                resolver.for_dir(&p)
            } else {
                resolver.for_file(&p)
            };
            (p, s)
        }
    };
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memlint: error: {e}");
            return 2;
        }
    };
    let quote = |s: &str| toml_string(s);
    let list = |items: &mut dyn Iterator<Item = String>| {
        let items: Vec<String> = items.map(|s| quote(&s)).collect();
        format!("[{}]", items.join(", "))
    };
    let o = &settings.options;
    let mut out = String::new();
    out.push_str(&format!(
        "# Resolved settings for: {}\n",
        display_path(&target, &cwd)
    ));
    out.push_str(&format!(
        "# Settings path: {}\n",
        settings
            .config_file
            .as_ref()
            .map_or("none (defaults)".to_string(), |f| display_path(f, &cwd))
    ));
    out.push_str(&format!(
        "root = {}\n",
        quote(&match display_path(&settings.root, &cwd) {
            s if s.is_empty() => ".".to_string(),
            s => s,
        })
    ));
    out.push_str(&format!(
        "enabled = {}\n",
        list(&mut settings.enabled.iter().map(|c| c.to_string()))
    ));
    let exclude: Vec<String> = match &o.exclude {
        Some(e) => e.clone(),
        None => DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).collect(),
    };
    out.push_str(&format!("exclude = {}\n", list(&mut exclude.into_iter())));
    let extend: Vec<String> = o
        .extend_exclude
        .iter()
        .flatten()
        .chain(cli_extend_exclude)
        .cloned()
        .collect();
    out.push_str(&format!(
        "extend-exclude = {}\n",
        list(&mut extend.into_iter())
    ));
    let pfi: Vec<String> = o
        .per_file_ignores
        .iter()
        .flatten()
        .map(|(k, v)| format!("{} = {}", quote(k), list(&mut v.iter().cloned())))
        .collect();
    out.push_str(&format!("per-file-ignores = {{ {} }}\n", pfi.join(", ")));
    out.push_str(&format!("fail-on = {}\n", quote(settings.fail_on.as_str())));
    if let Some(v) = &o.optimizer {
        out.push_str(&format!("optimizer = {}\n", quote(v)));
    }
    if let Some(v) = o.gpu_memory_gb {
        out.push_str(&format!("gpu-memory-gb = {v}\n"));
    }
    if let Some(v) = o.world_size {
        out.push_str(&format!("world-size = {v}\n"));
    }
    if let Some(v) = &o.precision {
        out.push_str(&format!("precision = {}\n", quote(v)));
    }
    print_out(&out);
    0
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
