//! What rules know of a file beyond its own facts: its training context (its evidence joined with
//! what the project around it says: the launcher that runs it, the configs it is given, the
//! project's `.memlint.toml` defaults) and the project around it (the runs that use its configs,
//! the launches it writes, the memory cases anchored in it). [`crate::project`] computes them.

use crate::config::{Node, Value};
use crate::facts::{
    Binding, Checkpointing, Evidence, Facts, Framework, InlineKind, Offload, Precision, Sharding,
};
use crate::knowledge::{knowledge, OptimizerRow};
use crate::source::SourceFile;
use std::ops::Range;
use std::sync::Arc;

/// Where a piece of context came from, for the message's evidence chain.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Seen in a file (`train.py:12`, `launch.sh:3`).
    Seen(String),
    /// Stated in the memlint configuration.
    Configured,
    /// Nothing was seen: the common default, stated as an assumption.
    Assumed,
}

impl Origin {
    pub fn describe(&self) -> String {
        match self {
            Origin::Seen(at) => format!("seen at {at}"),
            Origin::Configured => "from the memlint configuration".into(),
            Origin::Assumed => "assumed: no optimizer was seen".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct OptimizerChoice {
    pub row: &'static OptimizerRow,
    pub origin: Origin,
}

/// Evidence from one file, with the file's name and positions resolved.
#[derive(Debug, Clone, Default)]
pub struct Located {
    pub evidence: Evidence,
    /// `(path, line)` of each optimizer mention, parallel to `evidence.optimizers`.
    pub optimizer_sites: Vec<String>,
    /// Where each mention of the other kinds is, parallel to their lists in `evidence`.
    pub sites: Sites,
}

/// `path:line` of evidence mentions, one list per kind.
#[derive(Debug, Clone, Default)]
pub struct Sites {
    pub lora: Vec<String>,
    pub precision: Vec<String>,
    pub shards: Vec<String>,
    pub offload: Vec<String>,
    pub checkpointing: Vec<String>,
    pub model_parallel: Vec<String>,
}

impl Sites {
    fn of(ev: &Evidence, site: &dyn Fn(usize) -> String) -> Sites {
        Sites {
            lora: ev.lora.iter().map(|r| site(r.start)).collect(),
            precision: ev.precision.iter().map(|m| site(m.span.start)).collect(),
            shards: ev.shards.iter().map(|m| site(m.span.start)).collect(),
            offload: ev.offload.iter().map(|m| site(m.span.start)).collect(),
            checkpointing: ev
                .checkpointing
                .iter()
                .map(|m| site(m.span.start))
                .collect(),
            model_parallel: ev
                .model_parallel
                .iter()
                .map(|m| site(m.span.start))
                .collect(),
        }
    }

    fn extend(&mut self, o: &Sites) {
        self.lora.extend(o.lora.iter().cloned());
        self.precision.extend(o.precision.iter().cloned());
        self.shards.extend(o.shards.iter().cloned());
        self.offload.extend(o.offload.iter().cloned());
        self.checkpointing.extend(o.checkpointing.iter().cloned());
        self.model_parallel.extend(o.model_parallel.iter().cloned());
    }
}

impl Located {
    /// Evidence with each mention placed by `site` (a byte offset to `path:line`).
    pub fn new(evidence: Evidence, site: &dyn Fn(usize) -> String) -> Self {
        Located {
            optimizer_sites: evidence
                .optimizers
                .iter()
                .map(|m| site(m.span.start))
                .collect(),
            sites: Sites::of(&evidence, site),
            evidence,
        }
    }

    pub fn from_file(file: &SourceFile, facts: &Facts) -> Self {
        Located::from_file_where(file, facts, |_| true)
    }

    /// [`Located::from_file`], with only the file's own mentions that start where `keep` says.
    pub fn from_file_where(file: &SourceFile, facts: &Facts, keep: impl Fn(usize) -> bool) -> Self {
        let mut evidence = facts.evidence.clone();
        retain_at(&mut evidence, keep);
        // How the file's own configs (a DeepSpeed dict, argparse defaults) train, split and
        // place the states holds for the file whether or not a run names them.
        for inline in &facts.inline_configs {
            let ev = crate::frontend::config::evidence_of(std::iter::once(&inline.root));
            evidence.optimizers.extend(ev.optimizers);
            evidence.precision.extend(ev.precision);
            evidence.shards.extend(ev.shards);
            evidence.offload.extend(ev.offload);
            evidence.checkpointing.extend(ev.checkpointing);
            evidence.model_parallel.extend(ev.model_parallel);
        }
        // An engine built from a DeepSpeed dict of the file with no ZeRO section trains whole
        // (stage 0 is DeepSpeed's default): the call alone is no sharding then.
        evidence
            .sharding
            .retain(|span| !unsharded_engine(&file.text, facts, span));
        Located::new(evidence, &|at| file.site(at))
    }

    /// Say how the evidence reached the file it is joined to (`ds.json:5, which
    /// `preflight.py:8` opens`).
    pub fn via(mut self, route: &str) -> Located {
        let sites = &mut self.sites;
        for list in [
            &mut self.optimizer_sites,
            &mut sites.lora,
            &mut sites.precision,
            &mut sites.shards,
            &mut sites.offload,
            &mut sites.checkpointing,
            &mut sites.model_parallel,
        ] {
            for s in list.iter_mut() {
                s.push_str(route);
            }
        }
        self
    }

    pub fn join(&mut self, other: &Located) {
        self.evidence.extend(&other.evidence);
        self.optimizer_sites
            .extend(other.optimizer_sites.iter().cloned());
        self.sites.extend(&other.sites);
    }
}

/// Whether `span` is a `deepspeed.initialize(...)` call handed a dict of the file (written in
/// the call or assigned to the name it is given) that neither shards nor offloads.
fn unsharded_engine(text: &str, facts: &Facts, span: &Range<usize>) -> bool {
    let Some(call) = text.get(span.clone()) else {
        return false;
    };
    if !call.starts_with("deepspeed.initialize") {
        return false;
    }
    let compact: String = call.chars().filter(|c| !c.is_whitespace()).collect();
    let handed = |name: &str| {
        ["config=", "config_params="].iter().any(|kw| {
            let given = format!("{kw}{name}");
            compact.match_indices(&given).any(|(at, _)| {
                let before = compact[..at].chars().next_back();
                let after = compact[at + given.len()..].chars().next();
                matches!(before, Some(',' | '('))
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            })
        })
    };
    facts.inline_configs.iter().any(|c| {
        let passed = match &c.kind {
            InlineKind::Dict { name: None } => {
                span.start <= c.root.span.start && c.root.span.end <= span.end
            }
            InlineKind::Dict { name: Some(name) } => handed(name),
            _ => false,
        };
        let ev = crate::frontend::config::evidence_of(std::iter::once(&c.root));
        passed && ev.sharding.is_empty() && ev.offload.is_empty()
    })
}

/// Every stage the run states is 0, and nothing is offloaded.
fn explicitly_unsharded(ev: &Evidence) -> bool {
    !ev.shards.is_empty()
        && ev.shards.iter().all(|m| m.value == Sharding::Stage(0))
        && ev.offload.is_empty()
}

/// One piece of evidence and where it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen<T> {
    pub value: T,
    pub at: String,
}

fn seen<T: Copy + PartialEq>(values: impl Iterator<Item = T>, sites: &[String]) -> Vec<Seen<T>> {
    let mut out: Vec<Seen<T>> = Vec::new();
    for (i, value) in values.enumerate() {
        if !out.iter().any(|s| s.value == value) {
            out.push(Seen {
                value,
                at: sites.get(i).cloned().unwrap_or_default(),
            });
        }
    }
    out
}

/// What rules know about how the code in a file trains.
#[derive(Debug, Clone, Default)]
pub struct TrainingContext {
    /// Every distinct optimizer seen for this file (a script may choose between several).
    pub optimizers: Vec<OptimizerChoice>,
    pub trains: bool,
    /// Inference evidence and no training evidence: no training rule applies to the file.
    pub inference: bool,
    pub lora: bool,
    pub frozen: bool,
    pub sharded: bool,
    pub precision: Vec<Precision>,
    pub frameworks: Vec<Framework>,
    /// An optimizer name that is not in the knowledge table: nothing may be asserted about it.
    pub unknown_optimizer: bool,
    /// Where adapters were seen (the first mention).
    pub lora_at: Option<String>,
    /// Each distinct precision, sharding, offload, checkpointing and model-parallel degree seen,
    /// with where.
    pub precisions: Vec<Seen<Precision>>,
    pub shards: Vec<Seen<Sharding>>,
    pub offload: Vec<Seen<Offload>>,
    pub checkpointing: Vec<Seen<Checkpointing>>,
    pub model_parallel: Vec<Seen<u32>>,
    /// The launchers, scripts and configs around the file (see [`crate::project`]).
    pub project: Arc<ProjectView>,
    /// What the helpers this file imports from other modules of the project return, by module
    /// as written and name (see [`crate::facts::Prov`]).
    pub imported: Arc<ImportedReturns>,
}

/// What helpers imported from the project's modules do, by module as written and name.
#[derive(Debug, Clone, Default)]
pub struct ImportedReturns {
    /// What each returns, as far as loss scaling goes.
    pub returns: Vec<((String, String), crate::facts::Scaling)>,
    /// The helpers that register gradient hooks that clip.
    pub clip_hooks: Vec<(String, String)>,
}

impl TrainingContext {
    /// What an imported helper returns: `None` when its module is not part of the project.
    pub fn imported_return(&self, module: &str, name: &str) -> Option<crate::facts::Scaling> {
        self.imported
            .returns
            .iter()
            .find(|((m, n), _)| m == module && n == name)
            .map(|(_, s)| *s)
    }

    /// Whether an imported helper registers gradient hooks that clip.
    pub fn imported_clip_hooks(&self, module: &str, name: &str) -> bool {
        self.imported
            .clip_hooks
            .iter()
            .any(|(m, n)| m == module && n == name)
    }
}

/// Project-level defaults from the memlint configuration.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    pub optimizer: Option<String>,
    /// `world-size`: the number of processes, when no launcher says.
    pub world_size: Option<u32>,
    /// `gpu-memory-gb`: the GPU's memory, when no file says.
    pub gpu_memory_gb: Option<f64>,
}

impl TrainingContext {
    pub fn build(located: &Located, defaults: &Defaults) -> Self {
        let ev = &located.evidence;
        let k = knowledge();
        let mut cx = TrainingContext {
            trains: !ev.trains.is_empty() || !ev.optimizers.is_empty(),
            // Inference-only: a training script that evaluates under `no_grad` still trains;
            // formulas inside inference code are marked one by one.
            inference: !ev.inference.is_empty() && ev.trains.is_empty() && ev.optimizers.is_empty(),
            lora: !ev.lora.is_empty(),
            frozen: !ev.frozen.is_empty(),
            // A run told to stage 0 (a DeepSpeed config's `"stage": 0`, FSDP's `NO_SHARD`)
            // trains whole whatever engine it is handed to.
            sharded: !ev.sharding.is_empty() && !explicitly_unsharded(ev),
            precision: ev.precision.iter().map(|m| m.value).collect(),
            frameworks: ev.frameworks.iter().map(|m| m.value).collect(),
            lora_at: located.sites.lora.first().cloned(),
            precisions: seen(
                ev.precision.iter().map(|m| m.value),
                &located.sites.precision,
            ),
            shards: seen(ev.shards.iter().map(|m| m.value), &located.sites.shards),
            offload: seen(ev.offload.iter().map(|m| m.value), &located.sites.offload),
            checkpointing: seen(
                ev.checkpointing.iter().map(|m| m.value),
                &located.sites.checkpointing,
            ),
            model_parallel: seen(
                ev.model_parallel.iter().map(|m| m.value),
                &located.sites.model_parallel,
            ),
            ..TrainingContext::default()
        };
        for (i, m) in ev.optimizers.iter().enumerate() {
            // A name alone (`optim: sgd`) is the optimizer the code builds with its settings,
            // when they are written there (`momentum=0.9`, not `momentum=cfg["momentum"]`).
            let built = |o: &&crate::facts::Mention<crate::facts::OptimizerMention>| {
                !o.value.name_only
                    && o.value.name == m.value.name
                    && !o.value.momentum.is_some_and(f64::is_nan)
            };
            if m.value.name_only && ev.optimizers.iter().any(|o| built(&o)) {
                continue;
            }
            let row = if m.value.name == "sgd" && m.value.momentum.is_some_and(|v| v != 0.0) {
                k.optimizer_by_id("sgd-momentum")
            } else if m.value.name == "rmsprop"
                && (m.value.centered || m.value.momentum.is_some_and(|v| v != 0.0))
            {
                let momentum = m.value.momentum.is_some_and(|v| v != 0.0);
                k.optimizer_by_id(match (m.value.centered, momentum) {
                    (true, true) => "rmsprop-centered-momentum",
                    (true, false) => "rmsprop-centered",
                    _ => "rmsprop-momentum",
                })
            } else if m.value.amsgrad {
                k.optimizer_by_id("adam-amsgrad")
            } else if m.value.name == "adafactor" && m.value.beta1 {
                k.optimizer_by_id("adafactor-beta1")
            } else {
                k.optimizer(&m.value.name)
            };
            match row {
                Some(row) => {
                    if !cx.optimizers.iter().any(|o| o.row.id == row.id) {
                        let at = located.optimizer_sites.get(i).cloned().unwrap_or_default();
                        cx.optimizers.push(OptimizerChoice {
                            row,
                            origin: Origin::Seen(at),
                        });
                    }
                }
                None => cx.unknown_optimizer = true,
            }
        }
        if cx.optimizers.is_empty() {
            if let Some(row) = defaults.optimizer.as_deref().and_then(|n| k.optimizer(n)) {
                cx.optimizers.push(OptimizerChoice {
                    row,
                    origin: Origin::Configured,
                });
            }
        }
        cx
    }

    /// The optimizer to judge a training-memory formula against: the one(s) seen, else AdamW as
    /// an assumption the message states. `None` when nothing may be asserted.
    pub fn judged_optimizers(&self) -> Option<Vec<OptimizerChoice>> {
        if self.unknown_optimizer || self.optimizers.iter().any(|o| !o.row.known) {
            return None;
        }
        if !self.optimizers.is_empty() {
            return Some(self.optimizers.clone());
        }
        let row = knowledge().optimizer_by_id("adamw")?;
        Some(vec![OptimizerChoice {
            row,
            origin: Origin::Assumed,
        }])
    }

    /// Only a fraction of the parameters trains, or the states are sharded: whole-model
    /// multipliers do not apply.
    pub fn whole_model_multipliers_apply(&self) -> bool {
        !(self.lora || self.frozen || self.sharded)
    }
}

// ---- the project around a file ---------------------------------------------------------------

/// Which config document of a file: a root of the file itself, or an inline config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigRef {
    Root(usize),
    Inline(usize),
}

/// The number of processes a launch starts, and how many of them hold a data-parallel replica.
#[derive(Debug, Clone, PartialEq)]
pub struct World {
    pub processes: u64,
    /// `processes / (tensor x pipeline x context/sequence parallel)`.
    pub data_parallel: u64,
    /// Where the numbers come from, for messages.
    pub why: String,
}

/// An HF Trainer argument a run passes (a launcher flag or a recipe key).
#[derive(Debug, Clone)]
pub struct TrainerArg {
    /// The `TrainingArguments` name (`per_device_train_batch_size`).
    pub name: String,
    pub value: Value,
    /// As written (`--gradient_accumulation_steps 8`).
    pub written: String,
    /// `launch.sh:9`.
    pub at: String,
    /// Where it is written in the launcher or recipe file.
    pub span: Range<usize>,
}

/// One run as the configs it uses see it.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// Where the run starts (`launch.sh:12`).
    pub at: String,
    /// The command or recipe, shortened (`deepspeed --num_gpus 8 train.py`).
    pub command: String,
    pub world: Option<World>,
    /// HF Trainer arguments, when the run passes them to a Trainer script along with
    /// `--deepspeed cfg.json` (or a recipe with `deepspeed:`); `None` otherwise.
    pub trainer: Option<Vec<TrainerArg>>,
    /// `--auto_find_batch_size`: the Trainer does not compare batch sizes.
    pub auto_find_batch_size: bool,
    /// The accumulation factor the launch passes to its script
    /// (`--gradient_accumulation_steps 8`, or a recipe's key), with where it is written.
    pub accumulation: Option<Seen<f64>>,
    /// The `gradient_accumulation_steps` of a DeepSpeed config the run reaches, with where.
    pub deepspeed_accumulation: Option<Seen<f64>>,
    /// The config keys the script's training loaders take their batch from, with where.
    pub loader_keys: Vec<(Vec<String>, String)>,
}

/// A config this file holds, and a run that uses it.
#[derive(Debug, Clone)]
pub struct ConfigUse {
    pub config: ConfigRef,
    pub run: Arc<RunInfo>,
}

/// A config a launcher in this file names but that is not linted in this run: rules report at
/// the launcher instead.
#[derive(Debug, Clone)]
pub struct ExternalConfig {
    pub display: String,
    pub root: Node,
    /// The word that names it in the launcher (`--deepspeed ds.json`).
    pub named_at: Range<usize>,
}

/// A launch command (or recipe) written in this file.
#[derive(Debug, Clone)]
pub struct LaunchView {
    pub span: Range<usize>,
    pub run: Arc<RunInfo>,
    /// The options given to the script (or the recipe's keys), last one winning, keyed without
    /// dashes and with `-` as `_`.
    pub flags: Node,
    /// Bindings behind each flag value, by the value's span.
    pub via: Vec<(Range<usize>, Binding)>,
    pub external: Vec<ExternalConfig>,
    /// The flags are a recipe file's keys, not a command line.
    pub recipe: bool,
}

/// A quantity found somewhere in a run, with where.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity {
    pub value: f64,
    pub why: String,
}

/// What a DeepSpeed config of a run says about memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeepSpeedMemory {
    pub stage: Option<u8>,
    /// `offload_optimizer` or `offload_param` to a device other than `none`.
    pub offload: bool,
    /// `bf16.enabled` or `fp16.enabled`: 16-bit weights with fp32 master weights and states.
    pub mixed: bool,
    pub why: String,
}

/// Everything MEM005 needs about one run, anchored at the parameter count in this file.
#[derive(Debug, Clone)]
pub struct MemoryCase {
    pub anchor: Range<usize>,
    pub params: Quantity,
    /// The count was read from a model name (`Llama-2-7b`): a nominal size.
    pub nominal: bool,
    /// GPU memory in GB as written (read as GiB when comparing, the larger reading).
    pub gpu: Quantity,
    /// The run's evidence joined (optimizer, precision, LoRA, sharding, inference).
    pub training: TrainingContext,
    /// Where each precision mention is (parallel to `training.precision`).
    pub precision_sites: Vec<String>,
    pub deepspeed: Option<DeepSpeedMemory>,
    pub world: Option<World>,
    /// A `fsdp_*` key or an FSDP launcher option: parameters are sharded by FSDP.
    pub fsdp: bool,
    /// Optimizer states or gradients need not stay on the GPU: a paged optimizer (states in
    /// unified memory, evicted under pressure) or `optimizer_in_bwd` (no gradients kept).
    pub off_gpu: Option<String>,
}

/// A run that starts in this file, with what it says about its memory.
#[derive(Debug, Clone)]
pub struct RunEstimate {
    /// Where it starts and what it runs (`launch.sh:10: python train.py`).
    pub name: String,
    pub inputs: crate::estimate::Inputs,
    /// The launch command or recipe in this file; empty for a file run on its own.
    pub span: Range<usize>,
}

/// What rules see of the project around one file.
#[derive(Debug, Clone, Default)]
pub struct ProjectView {
    pub config_uses: Vec<ConfigUse>,
    pub launches: Vec<LaunchView>,
    pub memory: Vec<MemoryCase>,
    /// Each run that starts here, named, with what it says about its memory
    /// (`memlint estimate`).
    pub estimates: Vec<RunEstimate>,
    /// `world-size` from the memlint configuration.
    pub world_setting: Option<u32>,
    /// The runs that start this file as their script.
    pub launched_by: Vec<Arc<RunInfo>>,
    /// The file run on its own, with the configs it names by a literal path.
    pub own_run: Option<Arc<RunInfo>>,
    /// For a file that pins transformers before 4.46: what the project it speaks for shows.
    pub pinned: Option<PinnedProject>,
    /// Schedules this file's functions return that files importing them step once per
    /// optimizer step (`project::schedules`).
    pub stepped_elsewhere: Vec<SteppedElsewhere>,
    /// Calls of functions of other modules that return a model wrapped in DDP
    /// (`project::models`).
    pub ddp_elsewhere: Vec<DdpElsewhere>,
}

/// A call in this file of a function that another module defines and that returns the model
/// it wraps in `DistributedDataParallel`.
#[derive(Debug, Clone)]
pub struct DdpElsewhere {
    /// The call here, and the function's name.
    pub at: std::ops::Range<usize>,
    pub function: String,
    /// Where the function wraps the model (`utils/dist.py:41`).
    pub wrapped_at: String,
    /// The functions of this file that may run the model (as `Facts::ddp_scopes`).
    pub reach: Vec<usize>,
}

/// A schedule a function of this file returns, sized by a product with the accumulation factor,
/// that a file importing the function steps once per optimizer step.
#[derive(Debug, Clone)]
pub struct SteppedElsewhere {
    /// The product as written, where, and the scheduler's construction.
    pub length: String,
    pub length_at: std::ops::Range<usize>,
    pub built: std::ops::Range<usize>,
    /// The name of the product that is the caller's accumulation factor, as written here.
    pub factor: String,
    /// The caller's `scheduler.step()` and where it is (`train.py:88`).
    pub step: String,
    pub step_at: String,
    /// The caller accumulates with accelerate, and prepares the scheduler.
    pub accelerate: bool,
    pub prepared: bool,
}

/// What the project under a requirements file or `pyproject.toml` shows, for its pins (GA006).
#[derive(Debug, Clone, Default)]
pub struct PinnedProject {
    /// Accumulation factors above 1 that the project sets, with where.
    pub accumulation: Vec<Seen<f64>>,
    /// Where transformers' Trainer (or one built on it) is first seen.
    pub trainer: Option<String>,
    /// Where a model trained on token losses is first seen.
    pub language_model: Option<String>,
    /// Where sequence packing is switched on.
    pub packing: Option<String>,
}

impl ProjectView {
    /// The accumulation factor above 1 that every launch of this file passes, with the first
    /// launch: a launch that passes none or another factor leaves it unknown.
    pub fn launched_accumulation(&self) -> Option<(&Seen<f64>, &RunInfo)> {
        let run = self.launched_by.first()?;
        let factor = run.accumulation.as_ref()?;
        let agreed = self.launched_by.iter().all(|r| {
            r.accumulation
                .as_ref()
                .is_some_and(|a| a.value == factor.value)
        });
        (agreed && factor.value > 1.0).then_some((factor, run.as_ref()))
    }

    pub fn uses_of(&self, config: ConfigRef) -> impl Iterator<Item = &Arc<RunInfo>> {
        self.config_uses
            .iter()
            .filter(move |u| u.config == config)
            .map(|u| &u.run)
    }
}

/// Keep the mentions of `ev` that start where `keep` says.
fn retain_at(ev: &mut Evidence, keep: impl Fn(usize) -> bool) {
    ev.optimizers.retain(|m| keep(m.span.start));
    for spans in [
        &mut ev.trains,
        &mut ev.inference,
        &mut ev.lora,
        &mut ev.frozen,
        &mut ev.sharding,
    ] {
        spans.retain(|r| keep(r.start));
    }
    ev.shards.retain(|m| keep(m.span.start));
    ev.offload.retain(|m| keep(m.span.start));
    ev.checkpointing.retain(|m| keep(m.span.start));
    ev.model_parallel.retain(|m| keep(m.span.start));
    ev.precision.retain(|m| keep(m.span.start));
    ev.frameworks.retain(|m| keep(m.span.start));
}
