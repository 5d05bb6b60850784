//! Launch parsing: a command's words split into the launcher's options, the script's flags and
//! its positional words (`deepspeed --num_gpus 8 train.py --deepspeed ds.json`, `python -m
//! torch.distributed.run`, `accelerate launch`, `tune run`), and the flags as a config tree.

use crate::config::{scalar, Key, Node, Value};
use crate::facts::{Arg, Binding, Invocation};
use std::ops::Range;

/// Where in a run's command each part is.
pub(super) struct Parsed {
    /// Launcher options (before the script or module), key without dashes → value word.
    pub(super) options: Vec<(String, Option<Arg>, Arg)>,
    /// The script's own options.
    pub(super) flags: Vec<(String, Option<Arg>, Arg)>,
    /// Positional words after the script (`train.yaml` for `llamafactory-cli train x.yaml`).
    pub(super) positional: Vec<Arg>,
    /// `python -m torch.distributed.run` and friends: the effective launcher.
    pub(super) kind: String,
}

fn key_of(word: &str) -> String {
    word.trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_")
}

/// Split `--k v`, `--k=v` and bare `--flag` words. A value is the next word unless it starts with
/// `-`; a word ending in `.py` is never taken as a value (it is the script).
pub(super) fn options(words: &[Arg]) -> Vec<(String, Option<Arg>, Arg)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if !w.value.starts_with('-') || w.value == "-" || w.value == "--" {
            i += 1;
            continue;
        }
        if let Some((k, v)) = w.value.split_once('=') {
            let eq = k.len() + 1;
            let value = Arg {
                value: v.to_string(),
                known: w.known,
                span: if w.span.len() >= w.value.len() {
                    w.span.start + eq..w.span.end
                } else {
                    w.span.clone()
                },
                via: w.via.clone(),
            };
            out.push((key_of(k), Some(value), w.clone()));
            i += 1;
            continue;
        }
        // A negative number is a value; another option or the script is not.
        let next = words.get(i + 1).filter(|n| {
            let option = n.value.starts_with('-') && n.value.parse::<f64>().is_err();
            !option && !n.value.ends_with(".py")
        });
        match next {
            Some(n) => {
                out.push((key_of(&w.value), Some(n.clone()), w.clone()));
                i += 2;
            }
            None => {
                out.push((key_of(&w.value), None, w.clone()));
                i += 1;
            }
        }
    }
    out
}

pub(super) fn parse_invocation(inv: &Invocation) -> Parsed {
    let mut kind = inv.launcher.clone();
    let mut args: &[Arg] = &inv.args;
    // `python -m torch.distributed.run ...`: the module is the launcher.
    if kind.starts_with("python") {
        if let Some(m) = args.iter().position(|a| a.value == "-m") {
            if let Some(module) = args.get(m + 1) {
                let launcher = match module.value.as_str() {
                    "torch.distributed.run" | "torch.distributed.launch" => Some("torchrun"),
                    "deepspeed.launcher.runner" => Some("deepspeed"),
                    "accelerate.commands.launch" => Some("accelerate"),
                    _ => None,
                };
                if let Some(l) = launcher {
                    kind = l.to_string();
                    args = &args[m + 2..];
                }
            }
        }
    }
    if kind == "accelerate" && args.first().is_some_and(|a| a.value == "launch") {
        args = &args[1..];
    }
    // `tune run [--nproc_per_node N] <recipe> --config <file> key=value...`: torchrun's options,
    // then a recipe; a `*_single_device` recipe runs one process.
    if kind == "tune" && args.first().is_some_and(|a| a.value == "run") {
        let rest = &args[1..];
        let opts = options(rest);
        let mut i = 0;
        while let Some(a) = rest.get(i) {
            if !a.value.starts_with('-') {
                break;
            }
            let takes_value = !a.value.contains('=')
                && rest.get(i + 1).is_some_and(|n| !n.value.starts_with('-'))
                && opts
                    .iter()
                    .any(|(k, v, _)| *k == key_of(&a.value) && v.is_some());
            i += if takes_value { 2 } else { 1 };
        }
        let recipe = rest.get(i).map(|a| a.value.clone()).unwrap_or_default();
        let launcher_opts: Vec<(String, Option<Arg>, Arg)> = options(&rest[..i.min(rest.len())]);
        let after = rest.get(i + 1..).unwrap_or(&[]);
        let single = recipe.ends_with("single_device") && launcher_opts.is_empty();
        return Parsed {
            options: if single {
                vec![(
                    "nproc_per_node".into(),
                    Some(Arg {
                        value: "1".into(),
                        known: true,
                        span: rest.get(i).map_or(0..0, |a| a.span.clone()),
                        via: Vec::new(),
                    }),
                    rest.get(i).cloned().unwrap_or(Arg {
                        value: recipe.clone(),
                        known: true,
                        span: 0..0,
                        via: Vec::new(),
                    }),
                )]
            } else {
                launcher_opts
            },
            flags: options(after),
            positional: Vec::new(),
            kind: if single || !rest[..i.min(rest.len())].is_empty() {
                "torchrun".into()
            } else {
                "tune".into()
            },
        };
    }
    // The script (or `-m module`) separates launcher options from the script's.
    let split = args
        .iter()
        .position(|a| a.value.ends_with(".py") && !a.value.starts_with('-'))
        .map(|i| (i, i + 1))
        .or_else(|| {
            args.iter()
                .position(|a| a.value == "-m" || a.value == "--module")
                .map(|i| (i, i + 2))
        });
    let (opts, rest) = match split {
        Some((i, j)) if !kind.starts_with("python") => (&args[..i], args.get(j..).unwrap_or(&[])),
        Some((_, j)) => (&[][..], args.get(j..).unwrap_or(&[])),
        None if matches!(kind.as_str(), "llamafactory-cli" | "axolotl" | "tune") => (&[][..], args),
        None => (args, &[][..]),
    };
    let flags = options(rest);
    let positional = rest
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.value.starts_with('-')
                && (*i == 0
                    || !rest[i - 1].value.starts_with('-')
                    || rest[i - 1].value.contains('='))
        })
        .map(|(_, a)| a.clone())
        .collect();
    Parsed {
        options: options(opts),
        flags,
        positional,
        kind,
    }
}

pub(super) fn flags_node(
    flags: &[(String, Option<Arg>, Arg)],
    span: Range<usize>,
) -> (Node, Vec<(Range<usize>, Binding)>) {
    let mut entries: Vec<(Key, Node)> = Vec::new();
    let mut via = Vec::new();
    for (k, v, word) in flags {
        let (value, vspan) = match v {
            Some(a) if a.known => (scalar(&a.value, false), a.span.clone()),
            Some(a) => (Value::Unknown(a.value.clone()), a.span.clone()),
            None => (Value::Bool(true), word.span.clone()),
        };
        if let Some(a) = v {
            for b in &a.via {
                via.push((vspan.clone(), b.clone()));
            }
        }
        let node = Node { value, span: vspan };
        let key = Key {
            name: k.clone(),
            span: word.span.clone(),
        };
        // argparse: the last occurrence wins.
        entries.retain(|(e, _)| e.name != *k);
        entries.push((key, node));
    }
    (
        Node {
            value: Value::Map(entries),
            span,
        },
        via,
    )
}

pub(super) fn command_text(inv: &Invocation) -> String {
    let mut words = vec![inv.launcher.clone()];
    for a in &inv.args {
        if words.len() >= 6 {
            words.push("...".into());
            break;
        }
        words.push(a.value.clone());
        if a.value.ends_with(".py") {
            break;
        }
    }
    words.join(" ")
}
