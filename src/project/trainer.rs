//! HF Trainer arguments: the `TrainingArguments` a run passes along with a DeepSpeed config
//! (launcher flags or recipe keys), which BS003 compares with that config.

use super::files::{Fid, Files};
use super::lookup::is_config_path;
use crate::config::{Node, Value};
use crate::context::TrainerArg;
use crate::diagnostic::show_number;
use crate::facts::Framework;

/// The Trainer arguments BS003 compares, under the names `TrainingArguments` uses.
pub const TRAINER_ARGS: &[&str] = &[
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "max_grad_norm",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "bf16",
    "fp16",
];

/// HF Trainer arguments of a run that hands a DeepSpeed config path to a Trainer script.
pub(super) fn trainer_args(
    files: &Files,
    origin: Fid,
    flags: &Node,
    script: Option<Fid>,
    recipe: bool,
    accelerate_ds: bool,
) -> Option<Vec<TrainerArg>> {
    let ds_path = flags
        .get("deepspeed")
        .and_then(Node::as_str)
        .is_some_and(is_config_path);
    if !ds_path && !accelerate_ds {
        return None;
    }
    // A script we can read must use the Trainer (`--deepspeed` is a switch in DeepSpeed's own
    // argument helper).
    if let Some(s) = script {
        let facts = files.facts(s);
        let text = &files.file(s).text;
        let trainer = facts
            .evidence
            .frameworks
            .iter()
            .any(|m| m.value == Framework::HfTrainer)
            || text.contains("TrainingArguments")
            || text.contains("HfArgumentParser");
        if !trainer {
            return None;
        }
    }
    let Value::Map(entries) = &flags.value else {
        return None;
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        if !TRAINER_ARGS.contains(&k.name.as_str()) {
            continue;
        }
        let shown = match &v.value {
            Value::Number(n) => show_number(*n),
            Value::Bool(b) => b.to_string(),
            Value::String(s) | Value::Unknown(s) => s.clone(),
            _ => String::new(),
        };
        let written = if recipe {
            format!("{}: {shown}", k.name)
        } else {
            let text = &files.file(origin).text;
            let flag = text.get(k.span.clone()).unwrap_or(&k.name).to_string();
            if v.span == k.span || flag.contains('=') {
                flag
            } else {
                format!("{flag} {shown}")
            }
        };
        out.push(TrainerArg {
            name: k.name.clone(),
            value: v.value.clone(),
            written,
            at: files.site(origin, k.span.start),
            span: k.span.start..v.span.end.max(k.span.end),
        });
    }
    Some(out)
}

/// The `deepspeed_config:` section of an accelerate config with `distributed_type: DEEPSPEED`
/// that does not point at a DeepSpeed file: accelerate builds the DeepSpeed config from it.
pub fn accelerate_deepspeed(root: &Node) -> Option<&Node> {
    let deepspeed = root
        .get("distributed_type")
        .and_then(Node::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("deepspeed"));
    let section = root.get("deepspeed_config")?;
    (deepspeed && section.get("deepspeed_config_file").is_none()).then_some(section)
}
