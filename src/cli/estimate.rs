//! `memlint estimate [PATHS]`: the memory of each run a project launches, or of the run the
//! flags describe. A flag overrides what the project says.

use crate::estimate::{
    self, hub, shapes, Attention, Checkpointing, Given, Inputs, Offload, Peak, Precision, Quantize,
    Sharding,
};
use crate::knowledge::knowledge;
use crate::lint::{lint, LintOptions};
use crate::report::{render_estimate_json, render_estimate_table, EstimatedRun};
use crate::settings::{CliOverrides, Resolver};
use clap::{Args, ValueEnum};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Default, Clone)]
pub struct EstimateArgs {
    /// Project folders or files whose runs to estimate (launchers, scripts, configs). Without
    /// them and without --model or --params, the current folder.
    pub paths: Vec<PathBuf>,
    /// A model of the table (`meta-llama/Llama-3.2-3B`, `llama-3.2-3b`), any model on the Hugging
    /// Face Hub (`ORG/NAME`, or `ORG/NAME@REVISION` for a branch, tag or commit other than
    /// main: its config.json and safetensors headers, cached per revision), or a local
    /// config.json.
    #[arg(long)]
    pub model: Option<String>,
    /// Total parameters (`7e9`, `6.7B`, `350M`).
    #[arg(long)]
    pub params: Option<String>,
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Sequences per GPU per micro-step.
    #[arg(long)]
    pub micro_batch: Option<u64>,
    /// fp32, fp16-mixed, bf16-mixed, bf16 or fp16.
    #[arg(long)]
    pub precision: Option<String>,
    /// An optimizer of the knowledge table: adamw, adamw8bit, adafactor, sgd, sgd-momentum, lion...
    #[arg(long)]
    pub optimizer: Option<String>,
    /// DeepSpeed ZeRO stage.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: Option<u8>,
    #[arg(long, value_enum)]
    pub fsdp: Option<FsdpArg>,
    /// Data-parallel degree.
    #[arg(long)]
    pub dp: Option<u64>,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u64>,
    /// Pipeline-parallel degree.
    #[arg(long)]
    pub pp: Option<u64>,
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    #[arg(long, value_enum)]
    pub checkpointing: Option<CheckpointingArg>,
    #[arg(long, value_enum)]
    pub offload_optimizer: Option<DeviceArg>,
    #[arg(long, value_enum)]
    pub offload_params: Option<DeviceArg>,
    #[arg(long)]
    pub lora_rank: Option<u64>,
    /// Projections with adapters: q,k,v,o,gate,up,down, or all.
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Vec<String>,
    #[arg(long, value_enum)]
    pub quantize: Option<QuantizeArg>,
    /// What prepares a quantized base: `peft` (PEFT's prepare_model_for_kbit_training, as TRL
    /// and the QLoRA recipes run it: the weights it does not quantize, and so the residual
    /// stream, in fp32) or `none` (litgpt, torchtune). Assumed `peft` unless FSDP or ZeRO-3
    /// shards the base.
    #[arg(long, value_enum)]
    pub kbit_prep: Option<KbitPrepArg>,
    #[arg(long, value_enum)]
    pub attention: Option<AttentionArg>,
    /// Micro-steps per optimizer step (gradients then live beside the activations).
    #[arg(long)]
    pub grad_accum: Option<u64>,
    /// Memory the CUDA context takes, as measured on the stack that runs (`1343MiB`: what
    /// nvidia-smi shows once `torch.ones(1).cuda()` has run); 500 MiB unless given.
    #[arg(long)]
    pub cuda_context: Option<String>,
    /// Memory of one GPU: `80GB`, `24GiB` (GB is 10^9 bytes, GiB 2^30, as written), or a GPU's
    /// name (`H100`, `A100-40GB`, `RTX 4090`, `MI300X`): the total the device reports.
    #[arg(long)]
    pub gpu_memory: Option<String>,
    /// The peak to give: `allocated` (tensors alive, torch.cuda.max_memory_allocated),
    /// `reserved` (and the caching allocator's cache, torch.cuda.max_memory_reserved) or
    /// `device` (and the CUDA context and NCCL buffers: what nvidia-smi shows). Whichever is
    /// given, the device's peak is what must fit --gpu-memory.
    #[arg(long, value_enum)]
    pub peak: Option<PeakArg>,
    /// Search the configurations that fit --gpu-memory (sharding, checkpointing, offload) and
    /// print them cheapest first, each with the largest micro-batch it allows.
    #[arg(long)]
    pub fit: bool,
    /// What --fit may change beyond the run's training: lora, qlora, 8bit-optim.
    #[arg(long, value_delimiter = ',', requires = "fit")]
    pub fit_allow: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub output_format: EstimateFormat,
    /// List the models of the shape table and exit.
    #[arg(long)]
    pub list_models: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Default)]
pub enum EstimateFormat {
    #[default]
    Text,
    Json,
}

/// FSDP's sharding strategies, as `--help` lists them; FSDP's own spellings (`full_shard`,
/// `FULL_SHARD`) are accepted too.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum FsdpArg {
    #[value(alias = "full_shard", alias = "FULL_SHARD")]
    FullShard,
    #[value(alias = "shard_grad_op", alias = "SHARD_GRAD_OP")]
    ShardGradOp,
    #[value(alias = "hybrid_shard", alias = "HYBRID_SHARD")]
    HybridShard,
    // Every rank holds everything, as under DDP.
    #[value(alias = "no_shard", alias = "NO_SHARD")]
    NoShard,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum PeakArg {
    Allocated,
    Reserved,
    #[value(alias = "nvidia-smi")]
    Device,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum CheckpointingArg {
    None,
    Selective,
    Full,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum DeviceArg {
    Cpu,
    Nvme,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum QuantizeArg {
    Nf4,
    Nf4Dq,
    Int8,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum KbitPrepArg {
    Peft,
    None,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum AttentionArg {
    Eager,
    Sdpa,
    Flash,
}

/// A parameter count as people write it: `7e9`, `6.7B`, `350M`, `1.5b`.
pub fn parse_count(s: &str) -> Option<f64> {
    let t = s.trim().replace('_', "");
    let (num, scale) = match t.char_indices().last()? {
        (i, 'b' | 'B') => (&t[..i], 1e9),
        (i, 'm' | 'M') => (&t[..i], 1e6),
        (i, 'k' | 'K') => (&t[..i], 1e3),
        (i, 't' | 'T') => (&t[..i], 1e12),
        _ => (t.as_str(), 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * scale)
}

/// GPU memory as written: `80GB` (10^9), `24GiB` (2^30), `40 G` (GB); a bare number is GB.
pub fn parse_memory(s: &str) -> Option<f64> {
    let t = s.trim().to_ascii_lowercase().replace(' ', "");
    let (num, scale) = if let Some(n) = t.strip_suffix("gib") {
        (n, 1_073_741_824.0)
    } else if let Some(n) = t.strip_suffix("mib") {
        (n, 1_048_576.0)
    } else if let Some(n) = t.strip_suffix("gb").or_else(|| t.strip_suffix('g')) {
        (n, 1e9)
    } else if let Some(n) = t.strip_suffix("mb") {
        (n, 1e6)
    } else {
        (t.as_str(), 1e9)
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * scale)
}

/// `--gpu-memory H100`: the memory the device reports, with the table's row as its source.
fn gpu_memory(name: &str) -> Result<Given<f64>, String> {
    match knowledge().gpu(name) {
        Ok(g) => Ok(Given::new(
            g.bytes,
            format!(
                "--gpu-memory {name}: {} MiB as the device reports it, {} stated",
                (g.bytes / 1_048_576.0).round(),
                g.stated
            ),
        )),
        Err(family) if !family.is_empty() => {
            let ids: Vec<&str> = family.iter().map(|g| g.id.as_str()).collect();
            Err(format!(
                "--gpu-memory: `{name}` comes in several sizes: give one of {}",
                ids.join(", ")
            ))
        }
        Err(_) => {
            let ids: Vec<&str> = knowledge().gpus.iter().map(|g| g.id.as_str()).collect();
            Err(format!(
                "--gpu-memory: not a size or a known GPU: `{name}` (80GB, 24GiB, or one of {})",
                ids.join(", ")
            ))
        }
    }
}

/// The model named by `--model`: a path to a config (or a folder holding `config.json`), a name
/// in the table, or a model on the Hugging Face Hub (`ORG/NAME`, or `ORG/NAME@REVISION` for a
/// branch, tag or commit other than `main`).
pub fn shape_of(model: &str) -> Result<Given<estimate::Shape>, String> {
    let flag = "--model";
    let path = Path::new(model);
    if path.exists() {
        return shapes::from_config(path).map(|s| Given::new(s, flag));
    }
    if let Some(s) = shapes::by_name(model) {
        return Ok(Given::new(s.clone(), flag));
    }
    if let Some((repo, revision)) = hub::split_revision(model) {
        let fetched = hub::Hub::from_env().shape(repo, revision)?;
        for w in &fetched.warnings {
            eprintln!("memlint: warning: {w}");
        }
        return Ok(Given::new(
            fetched.shape,
            format!("{flag}, {}", fetched.source),
        ));
    }
    Err(format!(
        "unknown model `{model}`: give a Hugging Face Hub id (ORG/NAME or ORG/NAME@REVISION), a local config.json \
         (--model PATH/config.json), the parameter count (--params 7e9), or one of the {} models \
         of `memlint estimate --list-models`",
        shapes::known_models().len()
    ))
}

/// The inputs the flags give, each with the flag as its source.
pub fn inputs_from_flags(a: &EstimateArgs) -> Result<Inputs, String> {
    let flag = |name: &str| format!("--{name}");
    let mut i = Inputs::default();
    if let Some(m) = &a.model {
        i.shape = Some(shape_of(m)?);
    }
    if let Some(p) = &a.params {
        let n = parse_count(p).ok_or_else(|| format!("--params: not a parameter count: `{p}`"))?;
        i.params = Some(Given::new(n, flag("params")));
    }
    i.seq_len = a.seq_len.map(|v| Given::new(v, flag("seq-len")));
    i.micro_batch = a.micro_batch.map(|v| Given::new(v, flag("micro-batch")));
    if let Some(p) = &a.precision {
        let v = Precision::parse(p).ok_or_else(|| {
            format!("--precision: `{p}` is none of fp32, fp16-mixed, bf16-mixed, bf16, fp16")
        })?;
        i.precision = Some(Given::new(v, flag("precision")));
    }
    if let Some(o) = &a.optimizer {
        let row = knowledge()
            .optimizer_by_id(o)
            .or_else(|| knowledge().optimizer(o))
            .ok_or_else(|| {
                let ids: Vec<&str> = knowledge()
                    .optimizers
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect();
                format!("--optimizer: unknown `{o}` (known: {})", ids.join(", "))
            })?;
        i.optimizer = Some(Given::new(row, flag("optimizer")));
        i.optimizer_written = Some(o.clone());
    }
    let sharding = match (a.zero, a.fsdp) {
        (Some(_), Some(_)) => return Err("--zero and --fsdp: give one".into()),
        (Some(z), None) => Some((Sharding::Zero(z), flag("zero"))),
        (None, Some(f)) => Some((
            match f {
                FsdpArg::FullShard => Sharding::FullShard,
                FsdpArg::ShardGradOp => Sharding::ShardGradOp,
                FsdpArg::HybridShard => Sharding::HybridShard,
                FsdpArg::NoShard => Sharding::None,
            },
            flag("fsdp"),
        )),
        (None, None) => None,
    };
    i.sharding = sharding.map(|(s, why)| Given::new(s, why));
    i.dp = a.dp.map(|v| Given::new(v, flag("dp")));
    i.tp = a.tp.map(|v| Given::new(v, flag("tp")));
    i.pp = a.pp.map(|v| Given::new(v, flag("pp")));
    i.gpus_per_node = a
        .gpus_per_node
        .map(|v| Given::new(v, flag("gpus-per-node")));
    i.checkpointing = a.checkpointing.map(|c| {
        let v = match c {
            CheckpointingArg::None => Checkpointing::None,
            CheckpointingArg::Selective => Checkpointing::Selective,
            CheckpointingArg::Full => Checkpointing::Full,
        };
        Given::new(v, flag("checkpointing"))
    });
    let device = |d: DeviceArg| match d {
        DeviceArg::Cpu => Offload::Cpu,
        DeviceArg::Nvme => Offload::Nvme,
    };
    i.offload_optimizer = a
        .offload_optimizer
        .map(|d| Given::new(device(d), flag("offload-optimizer")));
    i.offload_params = a
        .offload_params
        .map(|d| Given::new(device(d), flag("offload-params")));
    i.lora_rank = a.lora_rank.map(|v| Given::new(v, flag("lora-rank")));
    if !a.lora_targets.is_empty() {
        i.lora_targets = Some(Given::new(a.lora_targets.clone(), flag("lora-targets")));
    }
    i.quantize = a.quantize.map(|q| {
        let v = match q {
            QuantizeArg::Nf4 => Quantize::Nf4,
            QuantizeArg::Nf4Dq => Quantize::Nf4Dq,
            QuantizeArg::Int8 => Quantize::Int8,
        };
        Given::new(v, flag("quantize"))
    });
    i.kbit_prep = a
        .kbit_prep
        .map(|k| Given::new(k == KbitPrepArg::Peft, flag("kbit-prep")));
    i.attention = a.attention.map(|x| {
        let v = match x {
            AttentionArg::Eager => Attention::Eager,
            AttentionArg::Sdpa => Attention::Sdpa,
            AttentionArg::Flash => Attention::Flash,
        };
        Given::new(v, flag("attention"))
    });
    i.gradient_accumulation = a.grad_accum.map(|v| Given::new(v, flag("grad-accum")));
    i.peak = a.peak.map(|p| {
        let v = match p {
            PeakArg::Allocated => Peak::Allocated,
            PeakArg::Reserved => Peak::Reserved,
            PeakArg::Device => Peak::Device,
        };
        Given::new(v, flag("peak"))
    });
    if let Some(g) = &a.gpu_memory {
        i.gpu_memory = Some(match parse_memory(g) {
            Some(bytes) => Given::new(bytes, flag("gpu-memory")),
            None => gpu_memory(g)?,
        });
    }
    if let Some(c) = &a.cuda_context {
        let bytes = parse_memory(c)
            .ok_or_else(|| format!("--cuda-context: not a size: `{c}` (500MiB, 1.3GB)"))?;
        i.cuda_context = Some(Given::new(bytes, flag("cuda-context")));
    }
    Ok(i)
}

/// Run the command; the exit code.
pub fn run(args: EstimateArgs) -> i32 {
    if args.list_models {
        for m in shapes::known_models() {
            println!(
                "{:40} {:>8} params  {}",
                m.id,
                crate::diagnostic::fmt_count(m.params),
                m.aliases.join(", ")
            );
        }
        return 0;
    }
    let flags = match inputs_from_flags(&args) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("memlint: error: {e}");
            return 2;
        }
    };
    let explicit = flags.shape.is_some() || flags.params.is_some();
    let mut runs: Vec<(String, Inputs)> = Vec::new();
    if !explicit || !args.paths.is_empty() {
        let paths = if args.paths.is_empty() {
            vec![PathBuf::from(".")]
        } else {
            args.paths.clone()
        };
        let found = match project_runs(&paths) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("memlint: error: {e}");
                return 2;
            }
        };
        for (name, inputs) in found {
            runs.push((name, overlay(inputs, &flags)));
        }
        if runs.is_empty() && !explicit {
            eprintln!(
                "memlint: error: no run with a model size found in {}: give --model NAME, --model PATH/config.json or --params N",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return 2;
        }
    }
    if runs.is_empty() {
        runs.push(("the run the flags describe".into(), flags));
    }
    if args.fit {
        return fit_runs(&runs, &args);
    }
    let mut estimated = Vec::new();
    for (name, inputs) in runs {
        match estimate::estimate(&inputs) {
            Ok(e) => {
                for w in &e.warnings {
                    eprintln!("memlint: warning: {name}: {w}");
                }
                estimated.push(EstimatedRun { name, estimate: e })
            }
            Err(e) => {
                eprintln!("memlint: error: {name}: {e}");
                return 2;
            }
        }
    }
    let out = match args.output_format {
        EstimateFormat::Json => render_estimate_json(&estimated),
        EstimateFormat::Text => render_estimate_table(&estimated, std::io::stdout().is_terminal()),
    };
    print!("{out}");
    0
}

/// `--fit`: for each run, the configurations that fit its GPU, cheapest first.
fn fit_runs(runs: &[(String, Inputs)], args: &EstimateArgs) -> i32 {
    let mut allow = estimate::fit::Allow::default();
    for a in &args.fit_allow {
        match a.as_str() {
            "lora" => allow.lora = true,
            "qlora" => allow.qlora = true,
            "8bit-optim" => allow.optim_8bit = true,
            other => {
                eprintln!(
                    "memlint: error: --fit-allow: unknown `{other}` (lora, qlora, 8bit-optim)"
                );
                return 2;
            }
        }
    }
    let mut found = Vec::new();
    for (name, inputs) in runs {
        match estimate::fit::fit(inputs, allow) {
            Ok(f) => found.push((name.as_str(), inputs, f)),
            Err(e) => {
                eprintln!("memlint: error: {name}: {e}");
                return 2;
            }
        }
    }
    let out = match args.output_format {
        EstimateFormat::Json => render_fit_json(&found),
        EstimateFormat::Text => render_fit_table(&found),
    };
    print!("{out}");
    0
}

type FitRun<'r> = (&'r str, &'r Inputs, Vec<estimate::fit::Fitting>);

fn render_fit_table(found: &[FitRun<'_>]) -> String {
    let gb = |b: f64| format!("{:.1} GB", b / 1e9);
    let mut out = String::new();
    for (k, (name, inputs, fits)) in found.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let memory = inputs.gpu_memory.as_ref().map_or(0.0, |g| g.value);
        out.push_str(&format!("{name}\n"));
        if fits.is_empty() {
            out.push_str(&format!(
                "  nothing the search tries fits {}: more GPUs, a smaller model or --fit-allow lora,qlora,8bit-optim\n",
                gb(memory)
            ));
            continue;
        }
        out.push_str(&format!("  fits {} (cheapest first):\n", gb(memory)));
        for (i, f) in fits.iter().enumerate() {
            let flags = match f.flags.is_empty() {
                true => "as it is".to_string(),
                false => f.flags.join(" "),
            };
            out.push_str(&format!(
                "  {}. {flags}\n     micro-batch up to {}{}, peak {}\n",
                i + 1,
                f.micro_batch,
                if f.micro_batch == estimate::fit::MICRO_MAX {
                    " (the most tried)"
                } else {
                    ""
                },
                gb(f.total_bytes)
            ));
        }
    }
    out
}

fn render_fit_json(found: &[FitRun<'_>]) -> String {
    let runs: Vec<serde_json::Value> = found
        .iter()
        .map(|(name, inputs, fits)| {
            serde_json::json!({
                "run": name,
                "gpu_memory_bytes": inputs.gpu_memory.as_ref().map(|g| g.value),
                "fits": fits.iter().map(|f| serde_json::json!({
                    "flags": f.flags,
                    "micro_batch": f.micro_batch,
                    "total_bytes": f.total_bytes.round() as u64,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&runs).unwrap_or_default() + "\n"
}

/// The runs the project launches, with what each says about its memory: every file analysed
/// (a launcher's script matters whatever it holds), the runs joined as for linting.
fn project_runs(paths: &[PathBuf]) -> Result<Vec<(String, Inputs)>, String> {
    let resolver = Resolver::new(CliOverrides::default(), None, false, crate::discover::cwd())
        .map_err(|e| e.to_string())?;
    let opts = LintOptions {
        prefilter: false,
        force_exclude: false,
    };
    let run = lint(paths, &resolver, opts);
    for e in &run.errors {
        eprintln!("memlint: warning: {}: {}", e.path, e.message);
    }
    let mut found: Vec<(String, Inputs)> = Vec::new();
    for r in &run.results {
        for e in &r.training.project.estimates {
            if !found.iter().any(|(n, _)| *n == e.name) {
                found.push((e.name.clone(), e.inputs.clone()));
            }
        }
    }
    Ok(found)
}

/// The project's inputs with every flag given laid over them.
fn overlay(mut found: Inputs, flags: &Inputs) -> Inputs {
    macro_rules! over {
        ($($field:ident),*) => {
            $(if flags.$field.is_some() {
                found.$field = flags.$field.clone();
            })*
        };
    }
    over!(
        shape,
        params,
        seq_len,
        micro_batch,
        precision,
        optimizer,
        sharding,
        dp,
        tp,
        pp,
        gpus_per_node,
        checkpointing,
        offload_optimizer,
        offload_params,
        lora_rank,
        lora_targets,
        quantize,
        kbit_prep,
        attention,
        gradient_accumulation,
        gpu_memory,
        cuda_context,
        peak
    );
    if flags.shape.is_some() && flags.params.is_none() {
        found.params = None;
    }
    // The name as written goes with the optimizer it names.
    if flags.optimizer.is_some() {
        found.optimizer_written = flags.optimizer_written.clone();
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sizes_as_written() {
        assert_eq!(parse_count("7e9"), Some(7e9));
        assert_eq!(parse_count("6.7B"), Some(6.7e9));
        assert_eq!(parse_count("350M"), Some(350e6));
        assert_eq!(parse_count("seven"), None);
        assert_eq!(parse_memory("80GB"), Some(80e9));
        assert_eq!(parse_memory("24GiB"), Some(24.0 * 1_073_741_824.0));
        assert_eq!(parse_memory("40"), Some(40e9));
        assert_eq!(parse_memory("-1GB"), None);
    }
}
