//! Language-neutral facts: what the frontends lower a file into and the only thing rules read.

use crate::config::ConfigDoc;
use crate::expr::{Lin, Role};
use std::ops::Range;

/// Everything memlint learned from one file.
#[derive(Debug, Default)]
pub struct Facts {
    pub formulas: Vec<Formula>,
    pub loops: Vec<AccumLoop>,
    /// Lookup tables of numbers: dict literals (`{"bf16": 2, "fp32": 4}`) and the values one name
    /// takes in the arms of an `if`/`elif` chain on a string (`if dtype == "bf16": nbytes = 2`).
    pub tables: Vec<Table>,
    /// One optimizer's states copied out of a chain that chooses them per optimizer (MEM002).
    pub copied_arms: Vec<CopiedArm>,
    /// The functions (indexes into [`Facts::scopes`]) that test the optimizer by name in an
    /// `if` chain or a `match` (`if optim == "adamw":`): their values are chosen per optimizer.
    pub optimizer_tests: Vec<usize>,
    /// Decimal and binary memory units meeting in one calculation.
    pub unit_mismatches: Vec<UnitMismatch>,
    /// Losses divided by the accumulation factor by hand and handed to a framework that divides too.
    pub manual_divisions: Vec<ManualDivision>,
    /// Training calls that break the optimizer-step protocol on some path of a loop.
    pub missteps: Vec<Misstep>,
    pub evidence: Evidence,
    /// Commands in a shell script that run a training script (`python train.py --optim adamw`).
    pub invocations: Vec<Invocation>,
    pub comments: Vec<Comment>,
    pub config: Option<ConfigDoc>,
    /// What the file shows about its per-micro-batch losses being token means of padded
    /// batches (GA006); read only when the file accumulates.
    pub token_means: Option<TokenMeans>,
    /// Data loaders built with the batch the file divides by the micro batch (BS002).
    pub loader_batches: Vec<LoaderBatch>,
    /// The config keys training loaders take their batch from (`cfg["data"]["batch_size"]`):
    /// the key path, and the loader's `batch_size` value (BS002 compares it with the config).
    pub loader_keys: Vec<(Vec<String>, Range<usize>)>,
    /// Global batches computed as products that leave out a factor the file shows (BS004).
    pub global_batches: Vec<GlobalBatch>,
    /// Schedules sized in per-device batches of the whole dataset (BS004).
    pub sample_schedules: Vec<SampleSchedule>,
    /// Batches, step counts and batch-scaled learning rates that break the run's batch
    /// equation (BS002, BS004).
    pub batch_equations: Vec<BatchEquation>,
    /// `DistributedDataParallel(...)` constructions.
    pub ddp_wraps: Vec<Range<usize>>,
    /// Lightning `Trainer(...)` calls built for several devices or nodes (`devices=4`,
    /// `num_nodes=cfg.nodes`, `strategy="ddp"`): Lightning shards each loader across them.
    pub parallel_trainers: Vec<Range<usize>>,
    /// The functions (indexes into [`Facts::scopes`]) that may run a model wrapped in
    /// `DistributedDataParallel`: those that wrap one, those that call them, and those these
    /// call, with every method of an object they build; every function when one is wrapped at module level.
    pub ddp_scopes: Vec<usize>,
    /// The file controls DDP's gradient sync itself (`no_sync`, `require_backward_grad_sync`);
    /// read only when the file wraps a model in DDP.
    pub controls_grad_sync: bool,
    /// `with model.no_sync():` blocks that hold backwards only: the forward ran outside, so
    /// the backward still synchronises. The `with` line.
    pub no_sync_backward_only: Vec<Range<usize>>,
    /// `model.require_backward_grad_sync = ...` set after the micro-step's forward (DDP reads
    /// it there) and before its backward: the assignment and the forward.
    pub late_sync_flags: Vec<(Range<usize>, Range<usize>)>,
    /// A `no_sync()` chosen by a remainder test that syncs another micro-step than the one
    /// the optimizer steps at: the choice, the test it syncs on, and the step's test.
    pub no_sync_off_boundary: Vec<OffBoundarySync>,
    /// HF Trainer losses written by hand that never read the window's item count.
    pub custom_losses: Vec<CustomLoss>,
    /// `gradient_accumulation_steps=<number>` keyword arguments (not `Accelerator`'s).
    pub accumulation_settings: Vec<Mention<f64>>,
    /// Dependencies a requirements file or `pyproject.toml` constrains, with their versions.
    pub pins: Vec<Pin>,
    /// What each module-level function returns, as far as loss scaling goes (`"f"`), and what an
    /// instance of each class returns when called (`"Class()"`): read by files that import them.
    pub exports: Vec<(String, Prov)>,
    /// The module-level functions that return arithmetic over their parameters (`def
    /// gb(b): return b / 2**30`): how files that import them value their calls.
    pub value_exports: Vec<crate::expr::imports::Export>,
    /// Returns that hand back what another function of the file returns (`return
    /// self._zero1(...)`): the returning function, the other one (indexes into
    /// [`Facts::scopes`]), and the call.
    pub returns_call: Vec<(usize, usize, Range<usize>)>,
    /// A learning-rate scheduler is sized in optimizer steps (its length involves the
    /// accumulation factor).
    pub schedule_in_optimizer_steps: bool,
    /// Schedulers and Accelerators the module's top-level functions return, and the schedulers
    /// returned by functions of other modules that this file steps at an accumulation boundary:
    /// joined across the project (`project::schedules`).
    pub links: ModuleLinks,
    /// A LightningModule sets `self.automatic_optimization = False`: Lightning does not scale.
    pub manual_optimization: bool,
    /// Configs written inside the file: shell heredocs, Python dict literals, dataclass and
    /// argparse defaults.
    pub inline_configs: Vec<InlineConfig>,
    /// Config files the script names by a literal path (`json.load(open("ds_zero2.json"))`,
    /// `args_file="train_args.json"`): the path as written and where.
    pub opened_paths: Vec<(String, Range<usize>)>,
    /// Numbers bound to names that state a parameter count or a GPU's memory (`N_PARAMS = 7e9`).
    pub constants: Vec<NamedConstant>,
    /// A GPT's shape written as constants, by the fields of nanoGPT's `GPTConfig` (`n_layer =
    /// 12`, `n_embd = 768`): the value and where (`memlint estimate`).
    pub model_fields: Vec<(String, u64, Range<usize>)>,
    /// `#SBATCH` directives of a batch script: `(option, value, span)`, option without dashes.
    pub sbatch: Vec<(String, String, Range<usize>)>,
    /// The parser had to recover from syntax errors: facts cover what parsed; never rewrite.
    pub syntax_error: bool,
    /// The loop model and loss provenance were read (a Python file parsed for other rules skips
    /// them: it has no loops, backwards or exports).
    pub loops_read: bool,
    /// The file's functions (index 0: the module), as memory rules see them.
    pub scopes: Vec<ScopeFacts>,
    /// Values assigned because gradient checkpointing is on.
    pub checkpointed: Vec<CheckpointedValue>,
    /// Gradient hooks registered on parameters that clamp or clip what they are given: each
    /// registration.
    pub clip_hooks: Vec<Range<usize>>,
    /// Module-level functions that register such hooks, for the files that import them.
    pub clip_hook_exports: Vec<String>,
    /// Calls, as statements, of helpers imported from other modules (`gu.add_hooks(model)`):
    /// the module as written, the name and the call.
    pub helper_calls: Vec<(String, String, Range<usize>)>,
    /// A `GradScaler` is built in the file.
    pub builds_scaler: bool,
}

/// An expression that may be memory arithmetic, lowered.
#[derive(Debug, Clone)]
pub struct Formula {
    pub kind: FormulaKind,
    pub lin: Lin,
    /// The expression as written.
    pub span: Range<usize>,
    /// Written under `torch.no_grad()`/`inference_mode()` or in a function for inference
    /// (decorated with one, or named for generation or serving): no training rule applies.
    pub inference: bool,
    /// The function it is written in: an index into [`Facts::scopes`].
    pub scope: usize,
    /// What the conditions it is written under test (`if cpu_offload:` ... `else:` both count).
    pub guard: Topics,
    /// An assigned value that a later line of its function reads again: a part of a larger
    /// sum, not a total of its own.
    pub feeds: bool,
    /// An assigned value a later line prints with a memory unit (`f"{need / 2**20:.0f} MiB"`):
    /// memory by its use, whatever its name.
    pub shown: bool,
    /// Written under tests of the ZeRO stage that say which stages reach it (`if stage == 2:`,
    /// the `else` of `if zero_stage >= 2:`): the stages as bits 0-3, and the innermost test.
    pub stages: Option<(u8, Range<usize>)>,
}

/// Every ZeRO stage, as bits of a stage mask.
pub const ALL_STAGES: u8 = 0b1111;

/// The stages a test of the ZeRO stage lets through (`zero_stage == 2`, `stage >= 2`, `stage
/// in (2, 3)`, `stage > 1 and not offload`, `if stage:`), as bits 0-3. `None` when it tests the
/// stage in a way not read here.
pub fn stage_mask(test: &str) -> Option<u8> {
    let t = test.trim();
    if let Some((a, b)) = split_word(t, " or ") {
        return Some(stage_mask(a)? | stage_mask(b)?);
    }
    if let Some((a, b)) = split_word(t, " and ") {
        return match (stage_mask(a), stage_mask(b)) {
            (Some(x), Some(y)) => Some(x & y),
            (Some(x), None) if !mentions_stage(b) => Some(x),
            (None, Some(y)) if !mentions_stage(a) => Some(y),
            _ => None,
        };
    }
    if let Some(rest) = t.strip_prefix("not ") {
        return stage_mask(rest).map(|m| !m & ALL_STAGES);
    }
    let t = t.trim_start_matches('(').trim_end_matches(')').trim();
    if !mentions_stage(t) {
        return None;
    }
    for op in ["==", "!=", ">=", "<=", ">", "<", " not in ", " in "] {
        let Some((left, right)) = t.split_once(op) else {
            continue;
        };
        let (name_left, value) = if mentions_stage(left) {
            (true, right.trim())
        } else {
            (false, left.trim())
        };
        let op = if name_left { op } else { flip(op) };
        if op.trim().ends_with("in") {
            let mut mask = 0u8;
            for v in value
                .trim_matches(['(', ')', '[', ']', '{', '}'])
                .split(',')
                .filter(|v| !v.trim().is_empty())
            {
                mask |= 1 << stage_number(v)?;
            }
            return Some(if op.trim() == "not in" {
                !mask & ALL_STAGES
            } else {
                mask
            });
        }
        let n = stage_number(value)?;
        let mask = (0..4u8).fold(0u8, |m, s| {
            let keep = match op {
                "==" => s == n,
                "!=" => s != n,
                ">=" => s >= n,
                "<=" => s <= n,
                ">" => s > n,
                _ => s < n,
            };
            if keep {
                m | (1 << s)
            } else {
                m
            }
        });
        return Some(mask);
    }
    // `if zero_stage:`: any stage but 0.
    let word = t.rsplit('.').next().unwrap_or(t);
    (word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && mentions_stage(word))
        .then_some(ALL_STAGES & !1)
}

fn split_word<'a>(t: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    t.split_once(word)
}

fn flip(op: &str) -> &str {
    match op {
        ">=" => "<=",
        "<=" => ">=",
        ">" => "<",
        "<" => ">",
        other => other,
    }
}

fn mentions_stage(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("stage") || t.contains("zero")
}

/// `2`, `"2"`, `ZeroStage.TWO` is not read.
fn stage_number(text: &str) -> Option<u8> {
    let v: u8 = text.trim().trim_matches(['"', '\'']).parse().ok()?;
    (v <= 3).then_some(v)
}

/// What a memory calculator may branch on. A formula written under such a test, or in a function
/// that tests it, was written for that case and is judged with it in mind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Topics {
    /// A ZeRO stage or sharding strategy (`if zero_stage >= 2:`).
    pub stage: bool,
    pub offload: bool,
    pub checkpointing: bool,
    pub lora: bool,
}

impl Topics {
    /// The topics a condition's text names, read by the words of its names (`zero_stage`,
    /// `args.use_amp`; not `example`).
    pub fn of(text: &str) -> Topics {
        let t = text.to_ascii_lowercase();
        let words: Vec<&str> = t
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let starts = |prefixes: &[&str]| {
            words
                .iter()
                .any(|w| prefixes.iter().any(|p| w.starts_with(p)))
        };
        // A name for memory (`shard_gb > 75`) is the size of a share, not a test of the stage.
        let stage = t
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|name| !crate::expr::names_memory_unit(name))
            .flat_map(|name| name.split('_'))
            .any(|w| {
                ["stage", "zero", "shard", "fsdp"]
                    .iter()
                    .any(|p| w.starts_with(p))
            });
        Topics {
            stage,
            // DeepSpeed's `activation_checkpointing.cpu_checkpointing` moves the checkpoints to
            // the host.
            offload: starts(&["offload"]) || t.contains("cpu_checkpointing"),
            checkpointing: starts(&["checkpointing", "recompute", "remat"])
                // `checkpoint_activations`, `ckpt_layers`; not `save_checkpoint`.
                || (starts(&["checkpoint", "ckpt"])
                    && starts(&["activ", "act", "grad", "layer", "block", "use", "enable"]))
                || [
                    "grad_ckpt",
                    "act_ckpt",
                    "activation_ckpt",
                    "gradient_checkpoint",
                ]
                .iter()
                .any(|w| t.contains(w))
                || t.contains("activation_checkpoint")
                || t.contains("use_checkpoint"),
            lora: starts(&["lora", "qlora", "peft", "adapter"]),
        }
    }

    pub fn union(self, o: Topics) -> Topics {
        Topics {
            stage: self.stage || o.stage,
            offload: self.offload || o.offload,
            checkpointing: self.checkpointing || o.checkpointing,
            lora: self.lora || o.lora,
        }
    }
}

/// A function (or the module) as memory rules see it.
#[derive(Debug, Clone, Default)]
pub struct ScopeFacts {
    pub name: String,
    /// What any condition in it tests.
    pub tests: Topics,
}

impl ScopeFacts {
    /// The ZeRO stage the function is named for (`estimate_zero2_model_states_mem_needs`).
    pub fn named_stage(&self) -> Option<u8> {
        let n = self.name.to_ascii_lowercase().replace('_', "");
        ["zerostage", "zero", "stage"].iter().find_map(|w| {
            let at = n.find(w)? + w.len();
            let d = n.as_bytes().get(at)?;
            (b'0'..=b'3').contains(d).then(|| d - b'0')
        })
    }
}

/// `if gradient_checkpointing: activation_gb = 0`, `opt_gb *= 0.5 if use_checkpoint else 1`: a
/// memory value set in the branch taken when checkpointing is on.
#[derive(Debug, Clone)]
pub struct CheckpointedValue {
    pub target: String,
    pub role: Role,
    /// The value in that branch.
    pub lin: Lin,
    /// What the statement scales the name's own value by (`opt_gb *= 0.5`, `x = x / 2`).
    pub factor: Option<f64>,
    pub span: Range<usize>,
    /// The same test also names offloading (`if ckpt and offload_activations:`).
    pub offloaded: bool,
    /// Returned from a function named for the value (`return 0` in `activation_memory_gb`).
    pub returned: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FormulaKind {
    /// `target = expr` (or a shell `target=$((expr))`).
    Assign { target: String, role: Role },
    /// `return expr` inside a function whose name says what it returns.
    Return { function: String, role: Role },
    /// One side of a comparison; `other` is the side it is compared with.
    Compare { other: Lin },
    /// Any other arithmetic (an argument, an `echo $((...))`).
    Expr,
}

/// A mention of something that changes what training costs, with where it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention<T> {
    pub value: T,
    pub span: Range<usize>,
}

/// An optimizer as written: a constructor, an `optim=` value, a flag or a config key.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerMention {
    /// Lowercased name as written, last dotted segment (`adamw`, `adamw_torch`, `adamw8bit`).
    pub name: String,
    pub momentum: Option<f64>,
    pub amsgrad: bool,
    pub beta1: bool,
    /// `centered=True` (RMSprop keeps a mean of the gradients too).
    pub centered: bool,
    /// A name alone (a flag or a config key): settings not given are unknown, not defaults.
    pub name_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    /// Autocast / AMP: fp32 master weights.
    Amp,
    /// Weights cast to bf16/fp16 (torch optimizers then keep states in that dtype too).
    Pure16,
}

/// How model states are split over the data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// A ZeRO stage; FSDP's `NO_SHARD` is 0, `SHARD_GRAD_OP` 2, `FULL_SHARD` and `fully_shard` 3.
    Stage(u8),
    /// FSDP `HYBRID_SHARD`: sharded within a node, replicated across nodes.
    Hybrid,
    /// ZeRO++ hierarchical partitions (`zero_hpz_partition_size`) or MiCS: secondary partitions.
    Secondary,
    /// Megatron's distributed optimizer: optimizer states sharded (about ZeRO-1).
    DistributedOptimizer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloaded {
    Optimizer,
    Params,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    pub what: Offloaded,
    /// To NVMe: host memory stays small by design.
    pub nvme: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointing {
    /// Activations recomputed in the backward (`gradient_checkpointing: true`).
    On,
    /// Checkpointed activations moved off the GPU (`enable_activation_offloading`,
    /// DeepSpeed `cpu_checkpointing`).
    Offloaded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Accelerate,
    DeepSpeed,
    Lightning,
    HfTrainer,
}

/// Evidence about the training context found in one file.
#[derive(Debug, Default, Clone)]
pub struct Evidence {
    pub optimizers: Vec<Mention<OptimizerMention>>,
    /// Something that only happens in training: `.backward()`, `optimizer.step()`, a trainer.
    pub trains: Vec<Range<usize>>,
    /// Inference-only signals: `torch.no_grad()`, `inference_mode`, `.generate(`, KV caches.
    pub inference: Vec<Range<usize>>,
    /// LoRA / PEFT adapters: only a fraction of parameters is trainable.
    pub lora: Vec<Range<usize>>,
    /// Frozen parameters (`requires_grad = False`).
    pub frozen: Vec<Range<usize>>,
    /// ZeRO / FSDP sharding or optimizer offload.
    pub sharding: Vec<Range<usize>>,
    /// How states are sharded, where it is said (`zero_optimization.stage: 2`, `SHARD_GRAD_OP`).
    pub shards: Vec<Mention<Sharding>>,
    /// DeepSpeed offload of optimizer states or parameters.
    pub offload: Vec<Mention<Offload>>,
    pub checkpointing: Vec<Mention<Checkpointing>>,
    /// Tensor, pipeline, context or sequence parallel degree above 1 (`--tensor-model-parallel-size 4`).
    pub model_parallel: Vec<Mention<u32>>,
    pub precision: Vec<Mention<Precision>>,
    pub frameworks: Vec<Mention<Framework>>,
}

impl Evidence {
    pub fn extend(&mut self, other: &Evidence) {
        self.optimizers.extend(other.optimizers.iter().cloned());
        self.trains.extend(other.trains.iter().cloned());
        self.inference.extend(other.inference.iter().cloned());
        self.lora.extend(other.lora.iter().cloned());
        self.frozen.extend(other.frozen.iter().cloned());
        self.sharding.extend(other.sharding.iter().cloned());
        self.shards.extend(other.shards.iter().cloned());
        self.offload.extend(other.offload.iter().cloned());
        self.checkpointing
            .extend(other.checkpointing.iter().cloned());
        self.model_parallel
            .extend(other.model_parallel.iter().cloned());
        self.precision.extend(other.precision.iter().cloned());
        self.frameworks.extend(other.frameworks.iter().cloned());
    }
}

/// A loop that accumulates gradients: the optimizer steps only on some iterations.
#[derive(Debug, Clone)]
pub struct AccumLoop {
    /// The loop statement's first line.
    pub header: Range<usize>,
    /// The function the loop runs in: an index into [`Facts::scopes`].
    pub scope: usize,
    /// The accumulation factor N as written (`accum_steps`, `args.gradient_accumulation_steps`).
    pub factor: String,
    /// N is a plain name, attribute or literal: a fix may use it as written.
    pub factor_is_simple: bool,
    /// N as written means the same where the backwards are: not `self.n` read by a method of
    /// another object (a callback's `on_batch_end`) that the loop calls to step.
    pub factor_here: bool,
    /// N's value when it is a literal or a module constant (`ACCUM = 4`).
    pub factor_value: Option<f64>,
    /// The micro-step counter the boundary test reads, when it is one that is reset
    /// (`if seen >= N: ...; seen = 0`).
    pub counter: Option<String>,
    /// The conditional `optimizer.step()` calls (statements, in source order).
    pub steps: Vec<Call>,
    /// `backward` calls that run on the micro-steps, on some path.
    pub backwards: Vec<Backward>,
    /// Gradients are rescaled in the loop before the step (`p.grad.div_(N)`, `scale_grads`).
    pub grads_rescaled: bool,
    /// `scheduler.step()` calls that run only on the iteration that steps.
    pub boundary_scheduler_steps: Vec<Call>,
    /// What the micro-step loop iterates over, as written, when each iteration is one
    /// micro-batch and a test marks the boundary (`enumerate(train_loader)`).
    pub iterates: Option<String>,
    /// What the loop around an inner micro-step loop iterates over (`range(max_iters)`): one
    /// iteration per optimizer step.
    pub updates: Option<String>,
    /// Schedulers stepped at the boundary whose length counts the micro-batches of the loader
    /// this loop iterates.
    pub micro_sized_schedules: Vec<MicroSchedule>,
    /// The loop's gradients go through a `GradScaler`.
    pub uses_scaler: bool,
    /// The window is accelerate's `accumulate()`: the factor is the `Accelerator`'s.
    pub accelerate: bool,
}

/// A training call that breaks the optimizer-step protocol on some path of a loop.
#[derive(Debug, Clone)]
pub struct Misstep {
    pub kind: MisstepKind,
    pub call: Range<usize>,
    /// What the path it was found on assumes about the tests around the call, as written: each
    /// test and whether it holds (`config.TRAIN.CLIP_GRAD`, true).
    pub path: Vec<(String, bool)>,
    /// The window's accumulation factor as written (`None`: accelerate's, or a loop that steps
    /// on every iteration).
    pub factor: Option<String>,
    /// The call it relates to: the window's step; for a second `unscale_`, the first; for a
    /// step before an update, the update.
    pub related: Option<Range<usize>>,
    /// The window is accelerate's `accumulate()`.
    pub accelerate: bool,
    /// Seen on a micro-step that does not step (rather than on the one that does).
    pub micro: bool,
    /// An edit of the loop that the loop model, run again on the edited text, shows keeping
    /// the protocol on every path.
    pub fix: Option<LoopFix>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MisstepKind {
    /// `zero_grad()` between a backward of a window and its step.
    ZeroGradInWindow,
    /// A clip before a later backward of the same window.
    ClipInWindow,
    /// `scheduler.step()` on every micro-step.
    SchedulerInWindow,
    /// `scaler.unscale_` before a later scaled backward of the same window.
    UnscaleInWindow,
    /// `scaler.update()` before a later scaled backward of the same window.
    UpdateInWindow,
    /// `scaler.step` on every micro-step while `update()` runs once per window.
    StepBeforeUpdate,
    /// The same optimizer unscaled twice before an update.
    DoubleUnscale,
    /// A second `update()` of one scaler in an iteration that steps two optimizers through it.
    DoubleUpdate,
    /// A clip of gradients the `GradScaler` still multiplies.
    ClipBeforeUnscale,
}

#[derive(Debug, Clone)]
pub struct LoopFix {
    pub message: String,
    pub edits: Vec<crate::diagnostic::Edit>,
}

/// A causal-LM token loss of padded batches: where each is seen (the last mention, the use
/// rather than the import).
#[derive(Debug, Clone)]
pub struct TokenMeans {
    /// The word that shows it: `ignore_index` of a cross-entropy, or a causal LM (`ForCausalLM`)
    /// whose `.loss` is a token mean.
    pub token_loss: Range<usize>,
    /// Padding: `pad_sequence`, `padding=`, a padding collator.
    pub padding: Range<usize>,
}

/// One dependency's version constraint (`transformers==4.45.2`, `torch>=2.1,<2.4`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    /// The distribution name, normalised (lower case, runs of `-_.` as `-`).
    pub package: String,
    /// The requirement as written (name, extras and specifiers; not its markers or comment).
    pub span: Range<usize>,
    /// The highest version the constraint admits, when it has one.
    pub ceiling: Option<Ceiling>,
}

/// An upper bound on a version: `<4.46` (excluded) or `==4.45.2` (included).
#[derive(Debug, Clone, PartialEq)]
pub struct Ceiling {
    /// The release numbers (`[4, 46]`).
    pub release: Vec<u64>,
    pub inclusive: bool,
}

impl Ceiling {
    /// Every version the bound admits is older than `release`.
    pub fn below(&self, release: &[u64]) -> bool {
        match compare_releases(&self.release, release) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Equal => !self.inclusive,
            std::cmp::Ordering::Greater => false,
        }
    }
}

/// Release numbers compared as PEP 440 does, missing parts as zeros (`4.46` = `4.46.0`).
pub fn compare_releases(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// `DataLoader(ds, batch_size=batch_size)` where the file computes the accumulation factor as
/// `batch_size // micro_batch_size`: the loader yields whole windows at every micro-step.
#[derive(Debug, Clone)]
pub struct LoaderBatch {
    /// The loader's `batch_size` value.
    pub span: Range<usize>,
    pub arg: String,
    /// The micro batch the derivation divides by, as written.
    pub micro: String,
    /// The accumulation factor's name and its derivation as written.
    pub accum: String,
    pub derivation: String,
    pub derived_at: Option<Range<usize>>,
}

/// `global_batch = a * b` that leaves out the world size or the accumulation factor, read by a
/// step count or a learning rate.
#[derive(Debug, Clone)]
pub struct GlobalBatch {
    pub name: String,
    /// The product.
    pub span: Range<usize>,
    pub text: String,
    pub missing: Missing,
    /// The step count or learning rate computed from it.
    pub used_by: String,
}

/// A schedule sized in per-device batches of the whole dataset (`len(ds) // batch_size`, the
/// batch a data loader is built with) in a file that accumulates or shards its data across
/// processes, with nothing on the way dividing by what is left out (BS004).
#[derive(Debug, Clone)]
pub struct SampleSchedule {
    /// The division as written (`len(train_ds) // args.batch_size`).
    pub span: Range<usize>,
    pub division: String,
    /// The scheduler it sizes, and where it is built.
    pub scheduler: String,
    pub built: Range<usize>,
    /// What the count leaves out: [`Missing::Accumulation`], [`Missing::World`] or
    /// [`Missing::WorldIfLaunched`].
    pub missing: Vec<Missing>,
}

/// A value that breaks the batch equation of its use: a count of optimizer steps or a
/// batch-scaled learning rate that leaves out a factor the run has, or a loader's batch that
/// holds one.
#[derive(Debug, Clone)]
pub struct BatchEquation {
    /// Where the factors are combined (or the value is read, when it is one name).
    pub span: Range<usize>,
    pub written: String,
    /// The batch factors it holds, in words (`micro-batch × accumulation`).
    pub has: String,
    pub used: BatchUse,
    /// The factors it leaves out (a count, a rate) or holds too many (a loader).
    pub missing: Vec<Missing>,
}

/// The key of a [`BatchUse::Count`] that bounds a loop whose every iteration is one optimizer
/// step (`for it in range(max_iters):` around the micro-steps).
pub const LOOP_ITERATIONS: &str = "iterations";
/// The key of a [`BatchUse::Count`] compared with (or dividing) a counter of optimizer steps,
/// followed by the counter's name (`counter global_step`).
pub const STEP_COUNTER: &str = "counter ";

/// What reads a batch value.
#[derive(Debug, Clone)]
pub enum BatchUse {
    /// A count of optimizer steps: a scheduler's length or warm-up (`key`), a Trainer's
    /// `max_steps` or `warmup_steps` (no scheduler), or a loop's iterations
    /// ([`LOOP_ITERATIONS`], no scheduler).
    Count {
        key: String,
        scheduler: Option<String>,
        call: Range<usize>,
    },
    /// A learning rate given to an optimizer or a Trainer.
    Rate { call: Range<usize>, callee: String },
    /// A data loader's batch.
    Loader { call: Range<usize> },
    /// The accumulation factor `factor` of the loop at `header`, derived from a batch: a
    /// process accumulates that many micro-batches.
    Window {
        factor: String,
        header: Range<usize>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Missing {
    /// The file runs data-parallel (a DDP wrapper, `init_process_group`).
    World,
    /// The file accumulates over this factor, in the loop at this span.
    Accumulation(String, Range<usize>),
    /// No world size, in a file that shows no data parallelism: missing if the launches that
    /// start the file start several data-parallel processes.
    WorldIfLaunched,
    /// No accumulation factor, in a file with no accumulating loop: missing if the launches that
    /// start the file pass a factor above 1.
    AccumulationIfLaunched,
    /// Under Lightning, the devices of one node and no node count (`trainer.num_nodes`).
    Nodes,
    /// No accumulation factor, for a scheduler a DeepSpeed engine steps: missing if the DeepSpeed
    /// config a run of the file reads accumulates.
    EngineAccumulation,
}

/// A scheduler stepped once per optimizer step, sized in micro-batches.
#[derive(Debug, Clone)]
pub struct MicroSchedule {
    /// The boundary's `scheduler.step()`.
    pub step: Call,
    /// The scheduler's construction.
    pub built: Range<usize>,
    /// The length as written, followed through the names it reads (`len(train_loader) * epochs`).
    pub length: String,
    /// Where that length is written.
    pub length_at: Range<usize>,
    /// The warm-up's length rather than the schedule's.
    pub warmup: bool,
    /// Counted in micro-batches by a product with the loop's factor (`steps * accum`), not by
    /// the loader's length.
    pub by_factor: bool,
    /// The scheduler is prepared by accelerate (it advances only when the gradients sync).
    pub prepared: bool,
    /// A schedule written by hand: the counter of optimizer steps compared with the length
    /// (`step` and `built` are then the comparison).
    pub counter: Option<String>,
    /// The counter's comparison ends the training (`while updates < total`, `if updates >=
    /// total: break`).
    pub ends_training: bool,
    /// The length is the total that ends the training, measured by a counter that goes up on
    /// every micro-step: the counter and the comparison (`if it >= total: break`).
    pub micro_bound: Option<(String, Range<usize>)>,
}

/// A loss an HF `Trainer` uses that is written by hand and never reads `num_items_in_batch`
/// (the item count of the accumulation window), although it receives it.
#[derive(Debug, Clone)]
pub struct CustomLoss {
    pub kind: CustomLossKind,
    /// Where to report: the `compute_loss_func=f` keyword, or the `def compute_loss` line.
    pub at: Range<usize>,
    /// The function as written (`my_loss`, `MyTrainer.compute_loss`).
    pub function: String,
    /// Its `def` line (or the lambda).
    pub defined: Range<usize>,
    /// The parameter that receives the count (`num_items_in_batch`, or a `**kwargs` name).
    pub param: String,
}

#[derive(Debug, Clone)]
pub enum CustomLossKind {
    /// `Trainer(..., compute_loss_func=f)`.
    LossFunc,
    /// A `Trainer` subclass overriding `compute_loss`, in a file that loads a causal LM
    /// (a model that accepts loss keywords) at `causal_lm`, or deriving from TRL's
    /// `SFTTrainer` (`causal_lm` is `None`: SFT trains a language model).
    Override {
        class: String,
        causal_lm: Option<Range<usize>>,
        /// The file builds no trainer and no training arguments: the class is for other code
        /// to build, with whatever accumulation factor it chooses.
        built_elsewhere: bool,
    },
}

/// A call as a statement: where the call is, and the whole statement line when the call stands
/// alone on it (what a fix may move).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub span: Range<usize>,
    pub statement: Option<Range<usize>>,
}

/// A loss divided by hand by the accumulation factor, then given to a framework that divides by it
/// again.
#[derive(Debug, Clone)]
pub struct ManualDivision {
    pub framework: Framework,
    /// Where the loss reaches the framework (`accelerator.backward(loss)`, `return loss / n`).
    pub at: Range<usize>,
    /// The divisor as written.
    pub divisor: String,
    /// Where the division is written, to undo it; `None` when a helper divides (its other
    /// callers may rely on it).
    pub division: Option<Division>,
    /// accelerate under its DeepSpeed plugin with the default factor: the engine divides by its
    /// config's factor, which the run's DeepSpeed config must show.
    pub engine_config: bool,
    /// The divisor is read from the DeepSpeed config of the run (`deepspeed_plugin.
    /// deepspeed_config["gradient_accumulation_steps"]`): the engine's own factor.
    pub engine_factor: bool,
}

/// `x / N` as written: what to delete to undo it.
#[derive(Debug, Clone)]
pub struct Division {
    /// ` / N`, from the end of the dividend to the end of the divisor.
    pub operator_and_divisor: Range<usize>,
    /// The whole statement when the division is its own statement (`loss = loss / N`, `loss /= N`).
    pub statement: Option<Range<usize>>,
}

#[derive(Debug, Clone)]
pub struct Backward {
    /// The whole call, e.g. `loss.backward()` or `scaler.scale(loss).backward()`; for a backward
    /// inside a helper of the file, the call of the helper in the loop.
    pub call: Range<usize>,
    /// The loss expression handed to the backward (`loss` in `scaler.scale(loss)`).
    pub loss: Range<usize>,
    pub loss_text: String,
    /// How the loss was produced, with the file's own helpers already followed.
    pub prov: Prov,
    /// The backward runs inside a helper whose loss is its own: a fix at the call site cannot
    /// reach it.
    pub in_helper: bool,
    /// Where the backward is written, and how many helper calls deep the loop reaches it.
    pub origin: Range<usize>,
    pub depth: usize,
}

impl Backward {
    /// The loss's scaling, with helpers imported from other files of the project judged by
    /// `imported` (see [`Prov::scaling`]).
    pub fn scaling(&self, imported: &dyn Fn(&str, &str) -> Option<Scaling>) -> Scaling {
        self.prov.scaling(imported)
    }
}

/// A `no_sync()` left on the optimizer's micro-step (GA009).
#[derive(Debug, Clone, PartialEq)]
pub struct OffBoundarySync {
    /// The statement that chooses the context.
    pub choice: Range<usize>,
    /// The micro-step it syncs on, as `counter % factor == residue`.
    pub syncs_on: String,
    /// The test the step runs under, as written, and the step's call.
    pub step_test: String,
    pub step: Range<usize>,
}

/// A command that runs a script, with its arguments, from a shell launcher.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The launcher (`python`, `torchrun`, `deepspeed`, `accelerate`), inside any wrappers.
    pub launcher: String,
    /// The script path as written.
    pub script: Option<String>,
    /// The words after the launcher, expanded.
    pub args: Vec<Arg>,
    pub span: Range<usize>,
    /// Programs around the launcher (`srun -N 2`, `nohup`, `mpirun -np 8`), with their words.
    pub wrappers: Vec<(String, Vec<Arg>)>,
    /// The command runs on some paths through the script only (an `if` whose condition is not
    /// known, a `case` branch, a loop body).
    pub conditional: bool,
}

/// A word of a shell command after expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// The word as the shell passes it; parts that could not be resolved keep their `$NAME` text.
    pub value: String,
    /// Every part is a literal, or a variable with one value on every path to the command.
    pub known: bool,
    pub span: Range<usize>,
    /// Variables whose values make up the word.
    pub via: Vec<Binding>,
}

/// Where a shell variable got the value a word uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub name: String,
    pub value: String,
    /// The assignment, the `${NAME:-default}` expansion or the `#SBATCH` line.
    pub span: Range<usize>,
    /// The value is the default of `${NAME:-default}`: what the script uses when run as written.
    pub default: bool,
}

/// A config written inside another file.
#[derive(Debug, Clone)]
pub struct InlineConfig {
    pub kind: InlineKind,
    pub root: crate::config::Node,
    /// Values that came from shell variables, by the span of the value.
    pub via: Vec<(Range<usize>, Binding)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InlineKind {
    /// A shell heredoc written to a file (`cat <<EOF > ds.json`): the path as the script spells
    /// it, with unresolved parts kept as written.
    Heredoc { path: Option<String> },
    /// A Python dict literal, with the name it is assigned to.
    Dict { name: Option<String> },
    /// The field defaults of a Python dataclass or settings class.
    Dataclass { name: String },
    /// The `argparse` defaults of a file, keyed by option name without dashes.
    Argparse,
}

/// The fields of nanoGPT's `GPTConfig`, as training scripts also write them as constants.
pub const GPT_FIELDS: &[&str] = &["n_layer", "n_head", "n_embd", "block_size", "vocab_size"];

/// A number bound to a name that says what it is (`N_PARAMS = 7_000_000_000`, `GPU_MEMORY_GB=40`).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedConstant {
    pub name: String,
    pub role: Role,
    pub value: f64,
    /// The value as written.
    pub span: Range<usize>,
    /// A command-line flag's default (`--gpu-memory-gb`, default 24): a launch that passes
    /// the flag overrides it.
    pub flag: bool,
}

impl Facts {
    /// Whether a gradient hook would see something other than the gradient the optimizer
    /// applies: the file builds a `GradScaler` (scaled gradients) or accumulates (each
    /// micro-batch's share).
    pub fn hooks_see_each_backward(&self) -> bool {
        self.builds_scaler
            || self
                .loops
                .iter()
                .any(|l| l.uses_scaler || l.factor_value.is_none_or(|v| v > 1.0))
    }

    /// Keep `name = value` when the name states a parameter count or a GPU's memory.
    pub fn note_constant(&mut self, name: &str, lin: &Lin, span: Range<usize>) {
        self.note_value(name, lin, span, false);
    }

    /// See [`Facts::note_constant`]; `flag`: the value is a command-line flag's default.
    pub fn note_value(&mut self, name: &str, lin: &Lin, span: Range<usize>, flag: bool) {
        if !lin.is_constant() {
            return;
        }

        let mut role = crate::expr::role_of(name);
        // `PARAMS = 13e9`: a count's name given a number no model size in GB reaches (as the
        // value model reads it).
        if matches!(role, Role::Unknown | Role::Model)
            && crate::expr::names_a_count(name)
            && lin.constant >= crate::expr::PARAM_COUNT_MIN
        {
            role = Role::ParamCount;
        }
        if matches!(role, Role::ParamCount | Role::Gpu) {
            self.constants.push(NamedConstant {
                name: name.to_string(),
                role,
                value: lin.constant,
                span,
                flag,
            });
        }
    }
}

/// A comment, for suppressions.
#[derive(Debug, Clone)]
pub struct Comment {
    pub text: String,
    pub range: Range<usize>,
}

/// A table of numbers keyed by name.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// The name the table is bound to or the name its arms assign, when there is one.
    pub name: Option<String>,
    pub entries: Vec<TableEntry>,
    /// The values one name takes in the arms of an `if` chain, a `match` or a conditional (not
    /// a dict literal).
    pub arms: bool,
    /// Those arms return the values: the table is named for the function.
    pub returned: bool,
}

impl Table {
    /// Counts of optimizer states assigned in an `if` chain (`state_params = 2`): read only
    /// beside a table of bytes per state, never judged alone (the file is read for the bytes).
    pub fn counts_states(&self) -> bool {
        let name = self.name.as_deref().unwrap_or("").to_ascii_lowercase();
        self.arms
            && !self.returned
            && name.contains("state")
            && !name.contains("byte")
            && !name.contains("multiplier")
    }
}

/// A product that repeats the value one arm of an `if` chain or a `match` on the optimizer
/// assigns (`if optimizer == "adam": opt_mem = params * 4 * 2`), written as a term of a sum
/// outside the arms: every optimizer is costed as that arm's.
#[derive(Debug, Clone)]
pub struct CopiedArm {
    /// The repeated product.
    pub span: Range<usize>,
    /// The arm's keys (`adam`), its value as written there, and the name it assigns.
    pub keys: Vec<String>,
    pub arm: Range<usize>,
    pub target: String,
    /// What the chain tests (`optimizer`).
    pub subject: String,
}

#[derive(Debug, Clone)]
pub struct TableEntry {
    /// The key as written, without quotes (`bf16`, `torch.float16`, `adamw`).
    pub key: String,
    pub value: f64,
    /// The number as written: what a fix replaces.
    pub value_span: Range<usize>,
}

mod scaling;
mod units;
pub use scaling::{Callee, Prov, Scaling};
pub use units::*;

/// What one module tells others about the schedules and models its functions build, and what it
/// does with the ones it imports.
#[derive(Debug, Clone, Default)]
pub struct ModuleLinks {
    pub schedules: Vec<ReturnedSchedule>,
    pub accelerators: Vec<ReturnedAccelerator>,
    pub stepped: Vec<ImportedSchedule>,
    /// Top-level functions that return the model they wrap in `DistributedDataParallel`.
    pub ddp_returned: Vec<ReturnedModel>,
    /// Calls of imported functions in a file that accumulates with no DDP wrapper of its own.
    pub ddp_candidates: Vec<ImportedModel>,
}

/// A top-level function that returns the model it wraps in `DistributedDataParallel`
/// (`model = DDP(model, ...); return model, optimizer`).
#[derive(Debug, Clone)]
pub struct ReturnedModel {
    pub function: String,
    /// The wrapper's call.
    pub wrapped: Range<usize>,
}

/// A call of an imported function that may return a wrapped model, in a file with an
/// accumulating loop: the functions that may run what it returns
/// (as [`Facts::ddp_scopes`] are for a wrapper written in the file).
#[derive(Debug, Clone)]
pub struct ImportedModel {
    /// The module as imported, and the function's name.
    pub module: String,
    pub function: String,
    pub at: Range<usize>,
    pub reach: Vec<usize>,
}

/// A top-level function that returns a scheduler sized by a product, with no division
/// (`return get_scheduler(..., num_training_steps=max_steps * procs * accum)`).
#[derive(Debug, Clone)]
pub struct ReturnedSchedule {
    pub function: String,
    /// The function's parameters by name, in order.
    pub params: Vec<String>,
    /// The product as written, and where.
    pub length: String,
    pub length_at: Range<usize>,
    /// The scheduler's construction.
    pub built: Range<usize>,
    /// The names the product multiplies.
    pub multiplied: Vec<String>,
}

/// A top-level function that returns the `Accelerator` it builds, with its accumulation factor
/// as written in the function.
#[derive(Debug, Clone)]
pub struct ReturnedAccelerator {
    pub function: String,
    pub params: Vec<String>,
    pub factor: String,
}

/// A call of a function imported from another module, as written: the module as imported, the
/// function's name, its arguments (`name=value` for a keyword).
#[derive(Debug, Clone)]
pub struct ImportedCall {
    pub module: String,
    pub function: String,
    pub args: Vec<String>,
}

/// A scheduler an imported function returns (`sched = utils.make_scheduler(args, opt)`),
/// stepped at the boundary of an accumulating loop: once per optimizer step.
#[derive(Debug, Clone)]
pub struct ImportedSchedule {
    pub call: ImportedCall,
    /// The loop's accumulation factor as written, and, when it is the factor of an
    /// `Accelerator` an imported function returns, that call.
    pub factor: String,
    pub factor_from: Option<ImportedCall>,
    /// The boundary's `scheduler.step()`.
    pub step: Range<usize>,
    /// The loop accumulates under accelerate, and the scheduler is prepared.
    pub accelerate: bool,
    pub prepared: bool,
}
