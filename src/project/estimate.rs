//! What a run says about its memory, as `memlint estimate` reads it: the model (a name in the
//! shape table, or a parameter count), the batch and sequence, precision, optimizer, sharding,
//! offload, LoRA and checkpointing, from the launcher, the script and the configs joined, each
//! with where it was written.

use super::files::{located, Fid, Files};
use super::names::{is_gpu_memory_name, names_model, params_from_name, PARAM_KEYS};
use super::runs::Run;
use crate::config::{Node, Value};
use crate::context::{Located, Origin, TrainingContext};
use crate::estimate::{self as est, shapes, Given, Inputs};
use crate::expr::Role;
use crate::facts::{Checkpointing, Offloaded, Precision, Sharding};

pub(super) const MICRO_BATCH_KEYS: &[&str] = &[
    "train_micro_batch_size_per_gpu",
    "per_device_train_batch_size",
    "micro_batch_size",
    "per_gpu_train_batch_size",
    "train_batch_size_per_device",
];
pub(super) const SEQ_KEYS: &[&str] = &[
    "max_seq_length",
    "max_seq_len",
    "seq_length",
    "seq_len",
    "sequence_len",
    "max_length",
    "block_size",
    "cutoff_len",
    "model_max_length",
    "context_length",
];
pub(super) const ACCUM_KEYS: &[&str] = &["gradient_accumulation_steps", "accumulate_grad_batches"];
pub(super) const LORA_RANK_KEYS: &[&str] = &["lora_r", "lora_rank", "r"];
pub(super) const LORA_TARGET_KEYS: &[&str] =
    &["lora_target_modules", "target_modules", "lora_target"];

/// A key's value in a run, with its site.
struct Keyed<'n> {
    key: String,
    parent: String,
    node: &'n Node,
    file: Fid,
}

impl Keyed<'_> {
    /// Where the value is written, as `path:line`: formatted only for a value the estimate
    /// uses (a config may hold thousands of keys).
    fn at(&self, files: &Files) -> String {
        files.site(self.file, self.node.span.start)
    }
}

fn collect<'n>(f: Fid, node: &'n Node, parent: &str, out: &mut Vec<Keyed<'n>>) {
    let Value::Map(entries) = &node.value else {
        return;
    };
    for (k, v) in entries {
        let key = k
            .name
            .trim_start_matches('-')
            .to_ascii_lowercase()
            .replace('-', "_");
        out.push(Keyed {
            key: key.clone(),
            parent: parent.to_string(),
            node: v,
            file: f,
        });
        if out.len() < 10_000 {
            collect(f, v, &key, out);
        }
    }
}

/// The run's inputs, named by where it starts and what it runs; `None` when nothing gives the
/// model's size.
pub(super) fn run_inputs(files: &Files, run: &Run) -> Option<(String, Inputs)> {
    // The command line's flags first: they override the configs and the scripts' defaults.
    let mut keyed = Vec::new();
    collect(run.origin, &run.flags, "", &mut keyed);
    for (f, c) in &run.configs {
        if let Some(root) = files.config(*f, *c) {
            collect(*f, root, "", &mut keyed);
        }
    }
    let number = |keys: &[&str]| {
        keyed.iter().find_map(|k| {
            let n = k.node.as_number()?;
            (keys.contains(&k.key.as_str()) && n > 0.0 && n.fract() == 0.0)
                .then(|| Given::new(n as u64, format!("`{}` at {}", k.key, k.at(files))))
        })
    };
    let mut inputs = Inputs::default();
    // The model: a name of the table, a parameter count in a name, or a constant.
    for k in &keyed {
        let Some(name) = k.node.scalar_text() else {
            continue;
        };
        let name = name.as_str();
        let model_key = names_model(&k.key, &k.parent);
        if !model_key {
            continue;
        }
        if let Some(shape) = shapes::by_name(name) {
            inputs.shape = Some(Given::new(
                shape.clone(),
                format!("`{}` at {}", k.key, k.at(files)),
            ));
            break;
        }
        if inputs.params.is_none() {
            if let Some(n) = params_from_name(name) {
                inputs.params = Some(Given::new(
                    n,
                    format!("the name `{name}` at {}", k.at(files)),
                ));
            }
        }
    }
    let members = run.members();
    if inputs.shape.is_none() && inputs.params.is_none() {
        inputs.params = keyed
            .iter()
            .find_map(|k| {
                let n = k.node.as_number()?;
                (PARAM_KEYS.contains(&k.key.as_str()) && n >= 1e6)
                    .then(|| Given::new(n, format!("`{}` at {}", k.key, k.at(files))))
            })
            .or_else(|| {
                members.iter().find_map(|&f| {
                    files.facts(f).constants.iter().find_map(|c| {
                        (c.role == Role::ParamCount && c.value >= 1e6).then(|| {
                            Given::new(
                                c.value,
                                format!("`{}` at {}", c.name, files.site(f, c.span.start)),
                            )
                        })
                    })
                })
            });
    }
    let mut block = None;
    if inputs.shape.is_none() && inputs.params.is_none() {
        (inputs.shape, block) = code_shape(files, &members).unzip();
    }
    if inputs.shape.is_none() && inputs.params.is_none() {
        return None;
    }
    // A run's own `batch_size` (torchtune's recipes, nanoGPT's constants, a loader's flag) is
    // what one step of each process loads, when nothing names the micro-batch.
    inputs.micro_batch = number(MICRO_BATCH_KEYS).or_else(|| {
        keyed.iter().find_map(|k| {
            let n = k.node.as_number()?;
            (k.key == "batch_size" && k.parent.is_empty() && n >= 1.0 && n.fract() == 0.0)
                .then(|| Given::new(n as u64, format!("`{}` at {}", k.key, k.at(files))))
        })
    });
    inputs.seq_len = number(SEQ_KEYS).or(block.flatten());
    inputs.gradient_accumulation = number(ACCUM_KEYS);
    inputs.gpu_memory = keyed.iter().find_map(|k| {
        let n = k.node.as_number()?;
        (is_gpu_memory_name(&k.key) && n > 0.0)
            .then(|| Given::new(n * 1e9, format!("`{}` at {} (GB)", k.key, k.at(files))))
    });
    if inputs.gpu_memory.is_none() {
        inputs.gpu_memory = members.iter().find_map(|&f| {
            files.facts(f).constants.iter().find_map(|c| {
                (c.role == Role::Gpu && is_gpu_memory_name(&c.name) && c.value > 0.0).then(|| {
                    Given::new(
                        c.value * 1e9,
                        format!("`{}` at {} (GB)", c.name, files.site(f, c.span.start)),
                    )
                })
            })
        });
    }
    // The evidence of every file of the run, joined.
    let mut joined = Located::default();
    for &f in &members {
        joined.join(&located(files, f, None));
        for i in 0..files.facts(f).inline_configs.len() {
            joined.join(&located(
                files,
                f,
                Some(crate::context::ConfigRef::Inline(i)),
            ));
        }
    }
    let unit = members.iter().find_map(|f| match f {
        Fid::Unit(u) => Some(*u),
        Fid::Extra(_) => None,
    })?;
    let defaults = &files.units[unit].defaults;
    // What the project states in its memlint configuration, when the run states no GPU.
    if inputs.gpu_memory.is_none() {
        inputs.gpu_memory = defaults.gpu_memory_gb.filter(|g| *g > 0.0).map(|g| {
            Given::new(
                g * 1e9,
                "`gpu-memory-gb` in the memlint configuration".to_string(),
            )
        });
    }
    let cx = TrainingContext::build(&joined, defaults);
    read_context(files, &cx, &keyed, &mut inputs);
    if let Some(w) = &run.info.world {
        inputs.dp = Some(Given::new(w.data_parallel.max(1), w.why.clone()));
    }
    let name = match (&run.info.command, run.info.at.as_str()) {
        (c, at) if !c.is_empty() => format!("{at}: {c}"),
        (_, at) => at.to_string(),
    };
    Some((name, inputs))
}

/// A GPT's shape from the constants of a file of the run (`n_layer = 12`, `n_head = 12`, `n_embd =
/// 768`, as nanoGPT's `train.py` writes them), the vocabulary from the constants or from a
/// `GPTConfig`-style dataclass of the project; and `block_size`, the sequence length it trains
/// on.
fn code_shape(files: &Files, members: &[Fid]) -> Option<(Given<est::Shape>, Option<Given<u64>>)> {
    let (f, written) = members.iter().find_map(|&f| {
        let mut fields: Vec<(&str, u64, usize)> = Vec::new();
        for (name, v, span) in &files.facts(f).model_fields {
            if !fields.iter().any(|(n, ..)| n == name) {
                fields.push((name.as_str(), *v, span.start));
            }
        }
        let has = |k: &str| fields.iter().any(|(n, ..)| *n == k);
        (has("n_layer") && has("n_head") && has("n_embd")).then_some((f, fields))
    })?;
    let at = |offset: usize| files.site(f, offset);
    let mut why: Vec<String> = written
        .iter()
        .filter(|(n, ..)| *n != "block_size")
        .map(|(n, v, o)| format!("`{n} = {v}` at {}", at(*o)))
        .collect();
    let vocab = match written.iter().any(|(n, ..)| *n == "vocab_size") {
        true => 0,
        false => {
            let (v, site) = config_vocab(files).unwrap_or((
                50304,
                "assumed: nanoGPT's `GPTConfig` default, GPT-2's 50257 padded to 50304".into(),
            ));
            why.push(format!("vocab_size {v} ({site})"));
            v
        }
    };
    let fields: Vec<(&str, u64)> = written.iter().map(|(n, v, _)| (*n, *v)).collect();
    let id = format!("the GPT of {}", files.file(f).display);
    let shape = est::shapes::gpt_from_fields(&fields, vocab, &id)?;
    let block = written
        .iter()
        .find(|(n, ..)| *n == "block_size")
        .map(|(_, v, o)| Given::new(*v, format!("`block_size` at {}", at(*o))));
    Some((Given::new(shape, why.join(", ")), block))
}

/// `vocab_size` of a dataclass of the project that declares a GPT's fields (`GPTConfig`).
fn config_vocab(files: &Files) -> Option<(u64, String)> {
    files.units.iter().enumerate().find_map(|(i, u)| {
        u.facts.inline_configs.iter().find_map(|c| {
            if !matches!(c.kind, crate::facts::InlineKind::Dataclass { .. }) {
                return None;
            }
            c.root.get("n_embd")?;
            let v = c.root.get("vocab_size")?;
            let n = v.as_number().filter(|n| *n >= 1.0 && n.fract() == 0.0)?;
            Some((
                n as u64,
                format!("`vocab_size` at {}", files.site(Fid::Unit(i), v.span.start)),
            ))
        })
    })
}

/// Precision, optimizer, sharding, offload, checkpointing and LoRA from the run's evidence.
fn read_context(files: &Files, cx: &TrainingContext, keyed: &[Keyed<'_>], inputs: &mut Inputs) {
    if let Some(s) = cx.shards.first() {
        let sharding = match s.value {
            Sharding::Stage(n) => Some(est::Sharding::Zero(n)),
            Sharding::Hybrid => Some(est::Sharding::HybridShard),
            Sharding::DistributedOptimizer => Some(est::Sharding::Zero(1)),
            Sharding::Secondary => None,
        };
        inputs.sharding = sharding.map(|v| Given::new(v, s.at.clone()));
    }
    // Weights loaded in 16 bits stay so under a trainer's autocast flag (`--bf16`).
    let precision = cx
        .precisions
        .iter()
        .find(|p| p.value == Precision::Pure16)
        .or(cx.precisions.first());
    if let Some(p) = precision {
        let v = match p.value {
            Precision::Fp32 => est::Precision::Fp32,
            Precision::Amp => est::Precision::Bf16Mixed,
            Precision::Pure16 => est::Precision::Bf16,
        };
        inputs.precision = Some(Given::new(v, p.at.clone()));
    }
    if let Some(o) = cx
        .optimizers
        .iter()
        .find(|o| !matches!(o.origin, Origin::Assumed) && o.row.known)
    {
        inputs.optimizer = Some(Given::new(o.row, o.origin.describe()));
        // The name a config or flag writes for it (`optim: adamw_torch_fused`) tells its
        // implementations apart.
        inputs.optimizer_written = keyed.iter().find_map(|k| {
            let name = k.node.scalar_text()?;
            (["optim", "optimizer"].contains(&k.key.as_str())
                && crate::knowledge::knowledge()
                    .optimizer(&name)
                    .is_some_and(|r| r.id == o.row.id))
            .then_some(name)
        });
    }
    for o in &cx.offload {
        let device = if o.value.nvme {
            est::Offload::Nvme
        } else {
            est::Offload::Cpu
        };
        match o.value.what {
            Offloaded::Optimizer => {
                inputs.offload_optimizer = Some(Given::new(device, o.at.clone()))
            }
            Offloaded::Params => inputs.offload_params = Some(Given::new(device, o.at.clone())),
        }
    }
    if let Some(c) = cx
        .checkpointing
        .iter()
        .find(|c| c.value == Checkpointing::On)
    {
        inputs.checkpointing = Some(Given::new(est::Checkpointing::Full, c.at.clone()));
    }
    if let Some(m) = cx.model_parallel.first() {
        inputs.tp = Some(Given::new(u64::from(m.value), m.at.clone()));
    }
    if cx.lora {
        let why = cx.lora_at.clone().unwrap_or_else(|| "LoRA in use".into());
        let rank = keyed.iter().find_map(|k| {
            let n = k.node.as_number()?;
            LORA_RANK_KEYS
                .contains(&k.key.as_str())
                .then(|| Given::new(n as u64, format!("`{}` at {}", k.key, k.at(files))))
        });
        inputs.lora_rank =
            Some(rank.unwrap_or_else(|| Given::new(8, format!("{why}; rank 8 assumed"))));
        inputs.lora_targets = keyed.iter().find_map(|k| {
            if !LORA_TARGET_KEYS.contains(&k.key.as_str()) {
                return None;
            }
            let targets: Vec<String> = match &k.node.value {
                Value::List(items) => items.iter().filter_map(Node::scalar_text).collect(),
                _ => {
                    let text = k.node.scalar_text()?;
                    text.split(',').map(|s| s.trim().to_string()).collect()
                }
            };
            Some(Given::new(
                targets,
                format!("`{}` at {}", k.key, k.at(files)),
            ))
        });
    }
}
