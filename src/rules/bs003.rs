//! BS003 trainer-deepspeed-mismatch: a launcher (or recipe) passes HF Trainer arguments with
//! `--deepspeed cfg.json`, and the config holds explicit values that differ: transformers refuses
//! to start. Reported at the config key (fix: `"auto"`), or at the launcher's flag when the config
//! is not linted. Documentation: `rules/BS003.toml`.

use super::batch::{docs, looks_deepspeed, Val};
use super::{Checker, Rule};
use crate::config::{Node, Value};
use crate::context::{RunInfo, TrainerArg};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::facts::InlineKind;
use crate::source::Language;

pub struct TrainerDeepSpeedMismatch;

/// DeepSpeed keys the Trainer fills when `"auto"` and compares when explicit, with the
/// `TrainingArguments` field each must match (transformers integrations/deepspeed.py).
const PAIRS: &[(&[&str], &str)] = &[
    (
        &["train_micro_batch_size_per_gpu"],
        "per_device_train_batch_size",
    ),
    (
        &["gradient_accumulation_steps"],
        "gradient_accumulation_steps",
    ),
    (&["gradient_clipping"], "max_grad_norm"),
    (&["optimizer", "params", "lr"], "learning_rate"),
    (&["scheduler", "params", "warmup_max_lr"], "learning_rate"),
    (&["optimizer", "params", "weight_decay"], "weight_decay"),
    (&["optimizer", "params", "eps"], "adam_epsilon"),
    (&["fp16", "enabled"], "fp16"),
    (&["bf16", "enabled"], "bf16"),
];

/// One disagreement: the config node, its dotted key, what the Trainer has and why.
struct Mismatch<'a> {
    node: &'a Node,
    key: String,
    /// The launcher argument it disagrees with (for the launcher-side report).
    arg: Option<&'a TrainerArg>,
    detail: String,
}

impl Rule for TrainerDeepSpeedMismatch {
    fn code(&self) -> &'static str {
        "BS003"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let view = &cx.training.project;
        for doc in docs(cx) {
            // An accelerate config's DeepSpeed section becomes the Trainer's DeepSpeed config.
            let section = crate::project::accelerate_deepspeed(doc.root);
            let root = match section {
                Some(s) => s,
                None if looks_deepspeed(doc.root) || has_any_pair(doc.root) => doc.root,
                None => continue,
            };
            let runs: Vec<&std::sync::Arc<RunInfo>> = view.uses_of(doc.config).collect();
            // "auto" is only safe when every run that uses the config fills it from the Trainer.
            let all_trainer = !runs.is_empty() && runs.iter().all(|r| r.trainer.is_some());
            let yaml = cx.file.language == Language::Yaml
                || matches!(doc.kind, Some(InlineKind::Heredoc { path: Some(p) }) if p.ends_with(".yaml") || p.ends_with(".yml"));
            for run in &runs {
                let Some(args) = &run.trainer else { continue };
                for m in mismatches(root, args, run) {
                    let message = format!(
                        "DeepSpeed `{}` {}: the HF Trainer refuses to start when an explicit DeepSpeed value differs from its own ({} at {})",
                        m.key, m.detail, run.command, run.at
                    );
                    // accelerate's own keys take no "auto": no edit is offered there.
                    let fix = (all_trainer && section.is_none()).then(|| Fix {
                        applicability: Applicability::Unsafe,
                        message: format!(
                            "set `{}` to \"auto\" so the Trainer's value is used",
                            m.key
                        ),
                        edits: vec![Edit::replace(
                            m.node.span.clone(),
                            if yaml { "auto" } else { "\"auto\"" },
                        )],
                    });
                    let help = if section.is_some() {
                        format!(
                            "make the two values agree, or remove `{}` from the accelerate config so the Trainer's value is used",
                            m.key
                        )
                    } else {
                        format!(
                            "set `{}` to \"auto\" so the Trainer fills it, or make the two values agree",
                            m.key
                        )
                    };
                    out.push(
                        Diagnostic::new("BS003", m.node.span.clone(), message)
                            .with_help(help)
                            .with_fix(fix),
                    );
                }
            }
        }
        // Configs the launcher names that are not linted: report at the launcher's argument.
        for launch in &view.launches {
            for ext in &launch.external {
                let Some(args) = &launch.run.trainer else {
                    continue;
                };
                for m in mismatches(&ext.root, args, &launch.run) {
                    let span = m.arg.map_or(ext.named_at.clone(), |a| a.span.clone());
                    let message = format!(
                        "`{}` in {} {}: the HF Trainer refuses to start when an explicit DeepSpeed value differs from its own",
                        m.key, ext.display, m.detail
                    );
                    out.push(Diagnostic::new("BS003", span, message).with_help(format!(
                        "set `{}` to \"auto\" in {} so the Trainer fills it, or make the two values agree",
                        m.key, ext.display
                    )));
                }
            }
        }
    }
}

fn has_any_pair(root: &Node) -> bool {
    PAIRS.iter().any(|(path, _)| get_path(root, path).is_some())
}

fn get_path<'a>(root: &'a Node, path: &[&str]) -> Option<&'a Node> {
    path.iter().try_fold(root, |n, k| n.get(k))
}

fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => fmt_value(*n),
        Value::Bool(b) => b.to_string(),
        Value::String(s) | Value::Unknown(s) => s.clone(),
        _ => String::new(),
    }
}

fn fmt_value(n: f64) -> String {
    crate::diagnostic::show_number(n)
}

/// The two values differ the way Python's `!=` sees them.
fn differ(ds: &Value, hf: &Value) -> Option<bool> {
    match (ds, hf) {
        (Value::Number(a), Value::Number(b)) => {
            Some((a - b).abs() > 1e-12 * a.abs().max(b.abs()).max(1e-300))
        }
        (Value::Bool(a), Value::Bool(b)) => Some(a != b),
        // A quoted number (`"8"`) is a string: Python finds it unequal to the Trainer's 8.
        (Value::String(s), Value::Number(_)) => Some(crate::config::parse_number(s).is_some()),
        _ => None,
    }
}

fn mismatches<'a>(root: &'a Node, args: &'a [TrainerArg], run: &RunInfo) -> Vec<Mismatch<'a>> {
    let mut out = Vec::new();
    let arg = |name: &str| args.iter().rev().find(|a| a.name == name);
    for (path, hf) in PAIRS {
        if run.auto_find_batch_size && *hf == "per_device_train_batch_size" {
            continue;
        }
        let (Some(node), Some(a)) = (get_path(root, path), arg(hf)) else {
            continue;
        };
        if differ(&node.value, &a.value) == Some(true) {
            let shown = match &node.value {
                Value::String(s) => format!("the string \"{s}\""),
                v => show(v),
            };
            out.push(Mismatch {
                node,
                key: path.join("."),
                arg: Some(a),
                detail: format!(
                    "is {shown} but `{}` at {} gives the Trainer {}",
                    a.written,
                    a.at,
                    show(&a.value)
                ),
            });
        }
    }
    // `--bf16` without `--fp16` leaves the Trainer's fp16 false (and DeepSpeed cannot enable
    // both), so an explicit `fp16.enabled: true` is compared against false; the same for bf16.
    for (flag, other) in [("bf16", "fp16"), ("fp16", "bf16")] {
        let on = arg(flag).is_some_and(|a| a.value == Value::Bool(true));
        if !on || arg(other).is_some() {
            continue;
        }
        let Some(node) = get_path(root, &[other, "enabled"]) else {
            continue;
        };
        if node.value == Value::Bool(true) {
            let a = arg(flag);
            out.push(Mismatch {
                node,
                key: format!("{other}.enabled"),
                arg: a,
                detail: format!(
                    "is true but the run passes `{}` at {} and not `--{other}`, so the Trainer's {other} is false",
                    a.map_or(flag.to_string(), |a| a.written.clone()),
                    a.map_or(String::new(), |a| a.at.clone())
                ),
            });
        }
    }
    // Adam betas are compared as the pair [adam_beta1, adam_beta2].
    if let (Some(node), Some(b1), Some(b2)) = (
        get_path(root, &["optimizer", "params", "betas"]),
        arg("adam_beta1"),
        arg("adam_beta2"),
    ) {
        if let (Value::List(items), Value::Number(x1), Value::Number(x2)) =
            (&node.value, &b1.value, &b2.value)
        {
            let ds: Vec<Option<f64>> = items.iter().map(Node::as_number).collect();
            if let [Some(d1), Some(d2)] = ds.as_slice() {
                if (d1 - x1).abs() > 1e-12 || (d2 - x2).abs() > 1e-12 {
                    out.push(Mismatch {
                        node,
                        key: "optimizer.params.betas".into(),
                        arg: Some(b1),
                        detail: format!(
                            "is [{}, {}] but `{}` and `{}` give the Trainer [{}, {}]",
                            fmt_value(*d1),
                            fmt_value(*d2),
                            b1.written,
                            b2.written,
                            fmt_value(*x1),
                            fmt_value(*x2)
                        ),
                    });
                }
            }
        }
    }
    // train_batch_size: the Trainer computes world x per-device x accumulation.
    let pd = arg("per_device_train_batch_size");
    let gas = arg("gradient_accumulation_steps");
    let tbs = root.get("train_batch_size");
    if let (Some(node), Some(pd), Some(gas), false) = (tbs, pd, gas, run.auto_find_batch_size) {
        let int = |v: &Value| match super::batch::val(Some(&Node {
            value: v.clone(),
            span: 0..0,
        })) {
            Val::Num(n) => Some(n),
            _ => None,
        };
        if let (Some(t), Some(p), Some(g)) = (int(&node.value), int(&pd.value), int(&gas.value)) {
            let per = p.saturating_mul(g);
            match &run.world {
                Some(w) => {
                    let want = per.saturating_mul(w.processes);
                    if t != want {
                        out.push(Mismatch {
                            node,
                            key: "train_batch_size".into(),
                            arg: Some(pd),
                            detail: format!(
                                "is {t} but the Trainer computes {} x {p} x {g} = {want} from {} (`{}`, `{}`)",
                                w.processes,
                                w.why,
                                pd.written,
                                gas.written
                            ),
                        });
                    }
                }
                None if per > 0 && t % per != 0 => out.push(Mismatch {
                    node,
                    key: "train_batch_size".into(),
                    arg: Some(pd),
                    detail: format!(
                        "is {t}, which is not world size x {p} x {g} for any world size (`{}`, `{}`)",
                        pd.written, gas.written
                    ),
                }),
                None => {}
            }
        }
    }
    out
}
