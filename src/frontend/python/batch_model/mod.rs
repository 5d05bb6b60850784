//! The batch model of a file (BS002, BS004): every batch, step count and batch-scaled learning
//! rate the file writes is valued as a product of the run's factors (the per-device micro-batch,
//! the accumulation factor, the data-parallel size, the dataset's samples), each known from how
//! the value is derived and used, whatever it is called, and checked against the equation its use
//! implies: a data loader loads one micro-batch per process, a count of optimizer steps divides
//! the samples by all three factors, a learning rate scaled by the batch multiplies by all three.

use super::*;
use crate::facts::{BatchEquation, BatchUse, Missing};
use std::collections::HashSet;

mod arms;
mod built;
mod factors;
mod modules;
mod updates;
mod written;

use factors::*;
use modules::tree_root;
pub(super) use updates::{loop_node, CounterUse};

/// What the walk saw that sizes or reads a batch.
#[derive(Debug, Default)]
pub(super) struct BatchNotes {
    loaders: Vec<Loader>,
    /// Values that count optimizer steps.
    counts: Vec<Count>,
    /// Learning rates given to an optimizer, a Trainer or, under Lightning, a module: the
    /// value, the call and the callee.
    rates: Vec<(Range<usize>, Range<usize>, String)>,
    /// Values set as a factor by a framework's keyword (`gradient_accumulation_steps=accum`,
    /// `per_device_train_batch_size=bs`, `num_replicas=world`), as written.
    seeds: Vec<(String, Factors)>,
    /// Accumulation set on a Trainer's arguments: the call and the value (None when not given).
    trainer_accum: Vec<(Range<usize>, Option<Setting>)>,
    /// Values handed over as a dataset (`train_dataset=ds`), as written.
    datasets: Vec<String>,
    /// Items assigned (`cfg["max_steps"] = ...`): the item as written and its value.
    items: Vec<(String, Range<usize>)>,
    /// Names assigned more than once: which value a reader sees is not known.
    pub(super) reassigned: HashSet<String>,
    /// `split_batches=True`: a prepared loader's batch is the batch of all processes.
    split_batches: bool,
    /// Schedulers handed to a DeepSpeed engine (`deepspeed.initialize(lr_scheduler=s)`): the
    /// engine steps them once per optimizer step.
    engine_schedulers: Vec<String>,
    /// A Lightning `Trainer(accumulate_grad_batches=N)`: the setting, its value, the call.
    lightning_accum: Option<(String, Option<f64>, Range<usize>)>,
    /// Calls of a class the walk does not know that take parameters first, as an optimizer
    /// does (`SparseLamb(model.parameters(), lr=...)`, a list of `{"params": ...}` groups).
    optimizers_by_arguments: Vec<Range<usize>>,
    /// Classes that derive from a `Trainer` (`class RunTrainer(pl.Trainer)`): built, they take
    /// its arguments.
    trainer_classes: Vec<String>,
    /// The text of each class defined at the file's top level, by name: found once, when first
    /// asked for, from the whole tree.
    classes: std::cell::OnceCell<HashMap<String, Range<usize>>>,
    /// What each module class's rate reads (see [`Walker::rate_reads`]), once found.
    rate_reads: std::cell::RefCell<HashMap<String, Vec<Range<usize>>>>,
}

/// A data loader: the call, its `batch_size` value and its dataset, as written.
#[derive(Debug)]
struct Loader {
    call: Range<usize>,
    batch: Option<Range<usize>>,
    dataset: Option<String>,
}

/// A setting as written, and its value when it is a number.
type Setting = (String, Option<f64>);

#[derive(Debug)]
struct Count {
    value: Range<usize>,
    /// The scheduler it sizes, or `None` for a Trainer's `max_steps` or `warmup_steps`.
    scheduler: Option<String>,
    call: Range<usize>,
    key: String,
    /// The iterations of a loop whose every iteration is one optimizer step (`for it in
    /// range(max_iters):` around the micro-steps), with the accumulation its inner loop has.
    iterations: Option<Option<Missing>>,
}

/// Keys whose meaning a framework defines: DeepSpeed's, the HF Trainer's, Megatron's,
/// accelerate's and the declared global batches of recipes.
fn schema(key: &str) -> Option<Factors> {
    Some(match key {
        "per_device_train_batch_size"
        | "per_gpu_train_batch_size"
        | "train_micro_batch_size_per_gpu"
        | "micro_batch_size" => MICRO,
        "gradient_accumulation_steps" | "accumulate_grad_batches" => ACCUM,
        "world_size" | "WORLD_SIZE" | "num_processes" | "data_parallel_size" => WORLD,
        k if k.ends_with("samples") || k.ends_with("num_examples") => SAMPLES,
        "global_batch_size"
        | "effective_batch_size"
        | "total_batch_size"
        | "total_train_batch_size"
        | "global_train_batch_size"
        | "train_global_batch_size" => GLOBAL,
        _ => return None,
    })
}

fn is_optimizer(callee: &str) -> bool {
    OPTIMIZER_CLASSES.contains(&callee.to_ascii_lowercase().as_str())
}

/// A Trainer's arguments (`TrainingArguments`, `SFTConfig`).
fn is_trainer_arguments(callee: &str) -> bool {
    callee.ends_with("TrainingArguments") || callee.ends_with("Config")
}

/// Calls that return the number of data-parallel processes or devices.
const WORLD_CALLS: &[&str] = &[
    "get_world_size",
    "get_data_parallel_world_size",
    "device_count",
    "world_size",
    "process_count",
    "xrt_world_size",
];

impl<'s> Walker<'s> {
    /// A value handed over as a dataset (`Trainer(train_dataset=ds)`).
    pub(super) fn note_dataset(&mut self, key: &str, value: &str) {
        if key.ends_with("dataset") || key == "training_data" {
            self.batch.datasets.push(value.to_string());
        }
    }

    /// `name = Scheduler(...)`: its length and its warm-up count optimizer steps when the
    /// scheduler is stepped once per optimizer step.
    pub(super) fn note_schedule_count(&mut self, name: &str, ctor: Node) {
        let Some(args) = ctor.field("arguments") else {
            return;
        };
        // Every argument but the optimizer may count steps (`get_cosine_schedule_with_warmup(opt,
        // 200, total)`); a lambda counts by the names its body reads. The valuation keeps the
        // counts.
        let mut counts = Vec::new();
        let mut c = args.walk();
        for (i, a) in args.named_children(&mut c).enumerate() {
            let (key, value) = match a.ty() {
                "keyword_argument" => (
                    a.field("name").map_or("", |k| self.text(k)),
                    a.field("value"),
                ),
                "comment" => continue,
                _ if i == 0 => continue,
                _ => ("length", Some(a)),
            };
            let Some(value) = value.filter(|_| key != "optimizer") else {
                continue;
            };
            let key = match key.contains("warmup") {
                true => key.to_string(),
                false => "length".to_string(),
            };
            match value.ty() {
                "lambda" => {
                    let mut names = Vec::new();
                    if let Some(body) = value.field("body") {
                        self.names_read(body, &mut names, 0);
                    }
                    counts.extend(names.into_iter().map(|n| (n, key.clone())));
                }
                _ => counts.push((value, key)),
            }
        }
        for (value, key) in counts {
            self.batch.counts.push(Count {
                value: value.byte_range(),
                scheduler: Some(name.to_string()),
                call: ctor.byte_range(),
                key,
                iterations: None,
            });
        }
    }

    /// `cfg["max_steps"] = ...`: an item is a name its readers value.
    pub(super) fn note_item(&mut self, item: Node, value: Node) {
        let text = self.text(item);
        if text.len() < 120 {
            self.batch
                .items
                .push((text.to_string(), value.byte_range()));
        }
    }

    /// The names an expression reads (`total_steps` in `lambda s: min(s, total_steps) /
    /// total_steps`), each once, the lambda's own parameters included (they value unknown).
    fn names_read<'t>(&self, node: Node<'t>, out: &mut Vec<Node<'t>>, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if matches!(node.ty(), "identifier" | "attribute" | "subscript") {
            if !out.iter().any(|n| self.text(*n) == self.text(node)) {
                out.push(node);
            }
            return;
        }
        let mut c = node.walk();
        for child in node.named_children(&mut c) {
            if node.ty() == "call" && child.ty() != "argument_list" {
                continue;
            }
            self.names_read(child, out, depth + 1);
        }
    }

    /// The equations the file's batches and counts break.
    pub(super) fn batch_equations(
        &self,
        tree: &Tree,
        loops: &[AccumLoop],
        counter_uses: &[Vec<CounterUse>],
    ) -> Vec<BatchEquation> {
        let notes = &self.batch;
        let updates = self.loop_counts(loops, counter_uses);
        let nothing = notes.counts.is_empty() && notes.rates.is_empty() && loops.is_empty();
        if nothing && notes.loaders.is_empty() && updates.is_empty() {
            return Vec::new();
        }
        let model = self.model(tree, loops);
        let run = self.run(loops);
        // The length of an iterable dataset the file defines is what its `__len__` says (often
        // one rank's shard), not the samples one epoch reads. A file that only mentions
        // `IterableDataset` (an `isinstance` test, a streaming arm) counts map-style datasets.
        let iterable = defines_iterable_dataset(self.src);
        let counts = notes.counts.iter().chain(&updates).filter(|_| !iterable);
        let mut out: Vec<BatchEquation> = counts
            .filter_map(|c| self.count_equation(&model, &run, c))
            .chain(
                notes
                    .rates
                    .iter()
                    .filter_map(|r| self.rate_equation(&model, &run, r)),
            )
            .chain(
                notes
                    .loaders
                    .iter()
                    .filter_map(|l| self.loader_equation(&model, &run, l)),
            )
            .chain(
                loops
                    .iter()
                    .filter_map(|lp| self.window_equation(&model, &run, lp)),
            )
            .collect();
        out.sort_by_key(|e| e.span.start);
        out.dedup_by(|a, b| a.span == b.span);
        out
    }

    /// The config keys training loaders take their batch from: `cfg["data"]["batch_size"]`, or
    /// `cfg.data.batch_size` where `cfg` is loaded from a file (`yaml.safe_load(...)`,
    /// `OmegaConf.load(...)`), as a key path without the root.
    pub(super) fn loader_keys(&self) -> Vec<(Vec<String>, Range<usize>)> {
        let mut out = Vec::new();
        for loader in &self.batch.loaders {
            let Some(batch) = &loader.batch else {
                continue;
            };
            let Some(text) = self.src.get(batch.clone()) else {
                continue;
            };
            if !self.trains_on(&loader.call) {
                continue;
            }
            if let Some(path) = self.key_path(text) {
                out.push((path, batch.clone()));
            }
        }
        out
    }

    /// `root["a"]["b"]` or `root.a.b` (a loaded config) as `["a", "b"]`.
    fn key_path(&self, text: &str) -> Option<Vec<String>> {
        let text = compact(text);
        let word =
            |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if let Some((root, rest)) = text.split_once('[') {
            let mut path = Vec::new();
            for part in rest.strip_suffix(']')?.split("][") {
                let key = part
                    .strip_prefix('"')
                    .and_then(|p| p.strip_suffix('"'))
                    .or_else(|| part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')))?;
                path.push(key.to_string());
            }
            return (word(root) && path.iter().all(|k| word(k))).then_some(path);
        }
        let mut parts = text.split('.');
        let root = parts.next()?;
        let path: Vec<String> = parts.map(str::to_string).collect();
        let loaded = self
            .assigned_text
            .get(root)
            .is_some_and(|rhs| rhs.contains("load(") || rhs.contains("load_config("));
        (loaded && !path.is_empty() && path.iter().all(|k| word(k))).then_some(path)
    }

    /// The values of the file, seeded with what each factor is by its use.
    fn model<'t>(&'t self, tree: &'t Tree, loops: &[AccumLoop]) -> Model<'t, 's> {
        let mut seeds: HashMap<String, Factors> = HashMap::default();
        for (text, f) in &self.batch.seeds {
            seeds.entry(text.clone()).or_insert(*f);
        }
        for lp in loops {
            seeds.entry(compact(&lp.factor)).or_insert(ACCUM);
        }
        Model {
            w: self,
            root: tree.root_node(),
            in_arms: Default::default(),
            seeds,
        }
    }

    /// Whether `text`, written in the file, divides by the data-parallel size and by nothing
    /// else (`math.ceil(len(loader) / accelerator.num_processes)`): one process's share of a
    /// count, in the count's unit.
    pub(super) fn divides_by_world_only(
        &self,
        tree: &Tree,
        loops: &[AccumLoop],
        text: &str,
    ) -> bool {
        let Some(at) = offset_in(self.src, text) else {
            return false;
        };
        let model = self.model(tree, loops);
        let Some(node) = model.node(&(at..at + text.len())) else {
            return false;
        };
        let mut divisors = Vec::new();
        divisors_in(node, &mut divisors, 0);
        !divisors.is_empty() && divisors.iter().all(|d| model.factors(*d, 0) == WORLD)
    }

    /// The products written as global batches whose values, as the model reads them, do leave
    /// out the factor they are missing by their names (`ws = dist.get_world_size()` is the
    /// world size whatever it is called).
    pub(super) fn confirmed_products(
        &self,
        tree: &Tree,
        loops: &[AccumLoop],
        products: Vec<GlobalBatch>,
    ) -> Vec<GlobalBatch> {
        if products.is_empty() {
            return products;
        }
        let model = self.model(tree, loops);
        products
            .into_iter()
            .filter(|g| {
                // Only a value shows the devices of one node.
                let Some(f) = model.node(&g.span).map(|n| model.factors(n, 0)) else {
                    return g.missing != Missing::Nodes;
                };
                if f.number_in_batch() {
                    return false;
                }
                match g.missing {
                    Missing::World | Missing::WorldIfLaunched => f.world == 0,
                    Missing::Nodes => f.world > 0 && f.nodes < 0,
                    _ => f.accum == 0,
                }
            })
            .collect()
    }

    /// What the file shows of the run's factors.
    fn run<'l>(&self, loops: &'l [AccumLoop]) -> Run<'l> {
        let src = self.src;
        let accumulating = loops
            .iter()
            .find(|lp| !lp.factor_value.is_some_and(|v| v <= 1.0));
        let distributed = self.trains_data_parallel()
            || ["FullyShardedDataParallel", "fully_shard("]
                .iter()
                .any(|w| memchr::memmem::find(src.as_bytes(), w.as_bytes()).is_some());
        // A LightningModule's scheduler with `"interval": "step"`.
        let lightning_steps = self.lightning()
            && ["\"interval\": \"step\"", "'interval': 'step'"]
                .iter()
                .any(|w| src.contains(w));
        Run {
            accumulating,
            accumulation: accumulating
                .map(|lp| Missing::Accumulation(lp.factor.clone(), lp.header.clone())),
            distributed,
            accelerate: contains_word(src, "Accelerator"),
            lightning_steps,
            world: match distributed {
                true => Missing::World,
                false => Missing::WorldIfLaunched,
            },
        }
    }

    /// A count of optimizer steps that leaves out a factor the run has.
    fn count_equation(&self, model: &Model, run: &Run, count: &Count) -> Option<BatchEquation> {
        let value = model.node(&count.value)?;
        let f = model.factors(value, 0);
        if f.choice {
            return None;
        }
        // The samples (`len(ds)`), or a budget known to be a number (`TOKEN_BUDGET //
        // tokens_per_step`), over a batch that holds the micro-batch, with no divisor of
        // unknown meaning.
        let counted = f.samples == 1 || (f.samples == 0 && !f.unknown_up);
        if !counted || f.micro != -1 || f.unknown_down || f.number_in_batch() {
            return None;
        }
        let mut missing = Vec::new();
        match &count.scheduler {
            _ if count.iterations.is_some() => {
                if let (Some(Some(a)), 0) = (&count.iterations, f.accum) {
                    missing.push(a.clone());
                }
                let sharded = model
                    .dataset_of(value, 0)
                    .map_or(run.distributed, |d| schedules::shards(self.src, d));
                if f.world == 0 && !run.accelerate && !self.batch.split_batches && sharded {
                    missing.push(run.world.clone());
                }
            }
            Some(name) => {
                let stepped = self.scheduler_steps.iter().any(|(_, r)| r == name);
                let engine = self.batch.engine_schedulers.iter().any(|s| s == name);
                if !stepped && !run.lightning_steps && !engine {
                    return None;
                }
                // A DeepSpeed engine steps it once per optimizer step of its config.
                if engine && f.accum == 0 {
                    missing.push(Missing::EngineAccumulation);
                }
                // Lightning steps a module's scheduler once per optimizer step.
                if let Some((text, value, call)) = self.batch.lightning_accum.as_ref() {
                    if run.lightning_steps && !value.is_some_and(|v| v <= 1.0) && f.accum == 0 {
                        missing.push(Missing::Accumulation(text.clone(), call.clone()));
                    }
                }
                // Stepped at the boundary of an accumulating loop: once per optimizer step.
                let boundary = run.accumulating.filter(|lp| {
                    lp.boundary_scheduler_steps.iter().any(|step| {
                        self.scheduler_steps
                            .iter()
                            .any(|(span, r)| *span == step.span && r == name)
                    })
                });
                if let Some(lp) = boundary {
                    if f.accum == 0 {
                        missing.push(Missing::Accumulation(lp.factor.clone(), lp.header.clone()));
                    }
                }
                // Each process reads its shard of the dataset; accelerate's prepared
                // scheduler steps once per process.
                let sharded = model
                    .dataset_of(value, 0)
                    .map_or(run.distributed, |d| schedules::shards(self.src, d));
                if f.world == 0 && !run.accelerate && !self.batch.split_batches && sharded {
                    missing.push(run.world.clone());
                }
            }
            None => {
                let accum = self
                    .batch
                    .trainer_accum
                    .iter()
                    .find(|(call, _)| *call == count.call)
                    .and_then(|(_, a)| a.clone());
                match accum {
                    Some((text, value)) if !value.is_some_and(|v| v <= 1.0) && f.accum == 0 => {
                        missing.push(Missing::Accumulation(text, count.call.clone()))
                    }
                    _ => {}
                }
                if f.world == 0 {
                    missing.push(run.world.clone());
                }
            }
        }
        // Under Lightning, divided by the devices of one node and not by the nodes.
        if f.world < 0 && f.nodes > 0 {
            missing.push(Missing::Nodes);
        }
        if missing.is_empty() {
            return None;
        }
        Some(model.equation(
            value,
            f,
            f.describe_inverse(),
            BatchUse::Count {
                key: count.key.clone(),
                scheduler: count.scheduler.clone(),
                call: count.call.clone(),
            },
            missing,
        ))
    }

    /// A learning rate scaled by a batch that leaves out a factor the run has.
    fn rate_equation(
        &self,
        model: &Model,
        run: &Run,
        (value, call, callee): &(Range<usize>, Range<usize>, String),
    ) -> Option<BatchEquation> {
        let node = model.node(value)?;
        let f = model.factors(node, 0);
        if f.micro < 1 || f.samples != 0 || f.choice || f.number_in_batch() {
            return None;
        }
        let mut missing = Vec::new();
        // Lightning accumulates for the module, by its Trainer's `accumulate_grad_batches`.
        let lightning_accum = self
            .batch
            .lightning_accum
            .as_ref()
            .filter(|_| self.lightning());
        let lightning_accum = lightning_accum
            .filter(|(_, value, _)| !value.is_some_and(|v| v <= 1.0))
            .map(|(text, _, call)| Missing::Accumulation(text.clone(), call.clone()));
        // A Lightning module's rate: read against what the file's Trainer shows of the run.
        let optimizer = is_optimizer(callee) || self.batch.optimizers_by_arguments.contains(call);
        if !is_trainer_arguments(callee) && !optimizer {
            if !self.lightning() {
                return None;
            }
            // A module of this file that reads a factor into its rate scales the rate itself.
            let reads = |words: &[&str]| self.module_scales_rate(model.root, callee, words);
            if let (Some(a), 0) = (lightning_accum, f.accum) {
                if !reads(&["accumulate_grad_batches"]) {
                    missing.push(a);
                }
            }
            let world = [
                "world_size",
                "num_devices",
                "devices",
                "num_nodes",
                "device_count",
            ];
            if f.world == 0 && run.distributed && !self.batch.split_batches && !reads(&world) {
                missing.push(run.world.clone());
            }
            if f.world > 0 && f.nodes < 0 {
                missing.push(Missing::Nodes);
            }
            return (!missing.is_empty()).then(|| {
                let used = BatchUse::Rate {
                    call: call.clone(),
                    callee: callee.clone(),
                };
                model.equation(node, f, f.describe(), used, missing)
            });
        }
        let trainer = !optimizer;
        let accum = match trainer {
            true => self
                .batch
                .trainer_accum
                .iter()
                .find(|(c, _)| c == call)
                .and_then(|(_, a)| a.clone())
                .filter(|(_, v)| !v.is_some_and(|v| v <= 1.0))
                .map(|(text, _)| Missing::Accumulation(text, call.clone())),
            false => run.accumulation.clone().or(lightning_accum),
        };
        if let (Some(a), 0) = (accum, f.accum) {
            missing.push(a);
        }
        // With `split_batches=True` the loader's batch is the batch of all processes.
        let sharded = trainer || run.distributed || self.shards_data() || run.accelerate;
        if f.world == 0 && sharded && !self.batch.split_batches {
            missing.push(run.world.clone());
        }
        if f.world > 0 && f.nodes < 0 {
            missing.push(Missing::Nodes);
        }
        if missing.is_empty() {
            return None;
        }
        Some(model.equation(
            node,
            f,
            f.describe(),
            BatchUse::Rate {
                call: call.clone(),
                callee: callee.clone(),
            },
            missing,
        ))
    }

    /// An accumulation factor derived from a batch that holds the data-parallel size
    /// (`accum = global_batch_size // micro_batch_size` in a run of several processes): each
    /// process accumulates that many micro-batches, so one step reads the global batch that
    /// many times over.
    fn window_equation(&self, model: &Model, run: &Run, lp: &AccumLoop) -> Option<BatchEquation> {
        // A factor written as a number states no meaning; one bound to arithmetic over named
        // sizes does, whether or not their values are known (`ACC = int(GLOBAL / MICRO)`).
        if crate::config::parse_number(&lp.factor).is_some() || self.batch.split_batches {
            return None;
        }
        let rhs = model.binding(&lp.factor)?;
        let f = model.factors(rhs, 0);
        let pure = f.micro == 0 && f.samples == 0 && !f.choice && !f.unknown_up && !f.unknown_down;
        if !pure || f.accum < 1 || f.world < 1 || f.nodes < 0 {
            return None;
        }
        let used = BatchUse::Window {
            factor: lp.factor.clone(),
            header: lp.header.clone(),
        };
        Some(model.equation(rhs, f, f.describe(), used, vec![run.world.clone()]))
    }

    /// A training loader built with a batch that holds a factor beside the micro-batch.
    fn loader_equation(&self, model: &Model, run: &Run, loader: &Loader) -> Option<BatchEquation> {
        let Loader { call, batch, .. } = loader;
        let node = batch.as_ref().and_then(|b| model.node(b))?;
        if !self.trains_on(call) {
            return None;
        }
        // The loader's own batch is not its own evidence. What it holds besides the factors
        // it is known to hold is the micro-batch (`args.micro_bsz * args.accum`).
        let mut f = model.factors_unseeded(node);
        if f.choice {
            return None;
        }
        if f.micro == 0 && f.unknown_up && !f.unknown_down && (f.accum > 0 || f.world > 0) {
            f = Factors {
                micro: 1,
                unknown_up: false,
                ..f
            };
        }
        if f.micro != 1 || f.samples != 0 {
            return None;
        }
        let mut extra = Vec::new();
        if f.accum > 0 {
            if let Some(a) = &run.accumulation {
                extra.push(a.clone());
            }
        }
        if f.world > 0 && !self.batch.split_batches {
            extra.push(run.world.clone());
        }
        if extra.is_empty() {
            return None;
        }
        Some(model.equation(
            node,
            f,
            f.describe(),
            BatchUse::Loader { call: call.clone() },
            extra,
        ))
    }

    /// A `DistributedSampler` shards the data, or the file wraps a model in DDP: each process
    /// reads its share of the dataset.
    /// The file trains data-parallel: it wraps a model in DDP, calls `init_process_group`, or,
    /// under Lightning, builds a Trainer for several devices or nodes.
    pub(super) fn trains_data_parallel(&self) -> bool {
        !self.facts.ddp_wraps.is_empty()
            || memchr::memmem::find(self.src.as_bytes(), b"init_process_group").is_some()
            || (self.lightning() && !self.facts.parallel_trainers.is_empty())
    }

    fn shards_data(&self) -> bool {
        !self.facts.ddp_wraps.is_empty()
            || memchr::memmem::find(self.src.as_bytes(), b"DistributedSampler").is_some()
            || memchr::memmem::find(self.src.as_bytes(), b"init_process_group").is_some()
    }

    /// The name the loader built by `call` is assigned to.
    fn loader_name(&self, call: &Range<usize>) -> Option<&str> {
        // `a = b = DataLoader(...)` binds two names: the first by name, whatever the map's order.
        self.assigned_text
            .iter()
            .filter(|(_, rhs)| offset_in(self.src, rhs) == Some(call.start))
            .map(|(name, _)| name.as_str())
            .min()
    }

    /// The loader built by `call` is iterated by a loop that trains (it calls `backward`).
    fn trains_on(&self, call: &Range<usize>) -> bool {
        let Some(name) = self.loader_name(call) else {
            return false;
        };
        self.loops.iter().any(|lp| {
            word_in(&lp.iterates, name)
                && self
                    .src
                    .get(lp.span.clone())
                    .is_some_and(|body| body.contains("backward("))
        })
    }

    /// The loader built by `call` serves evaluation only: every use of the name it is bound to
    /// is a loop that takes no backward, or an argument of a function of this file that takes
    /// none (`evaluate(model, val_loader)`).
    pub(super) fn evaluation_loader(&self, call: &Range<usize>) -> bool {
        let Some(name) = self.loader_name(call) else {
            return false;
        };
        let src = self.src;
        let trains = |text: &str| text.contains("backward(");
        let mut uses = 0;
        for at in word_positions(src, name) {
            let after = src[at + name.len()..].trim_start_matches([' ', '\t']);
            if (after.starts_with('=') && !after.starts_with("==")) || call.contains(&at) {
                continue;
            }
            uses += 1;
            let looped = self
                .loops
                .iter()
                .find(|lp| lp.header.contains(&at) && word_in(&lp.iterates, name));
            if let Some(lp) = looped {
                if src.get(lp.span.clone()).is_none_or(trains) {
                    return false;
                }
                continue;
            }
            let callee = enclosing_callee(src, at);
            let body = callee.and_then(|c| self.def_texts.get(c));
            if body.is_none_or(|b| trains(b)) {
                return false;
            }
        }
        uses > 0
    }
}

/// What a file shows of its run: the accumulating loop, data parallelism, accelerate, a
/// LightningModule's per-step schedulers.
struct Run<'l> {
    accumulating: Option<&'l AccumLoop>,
    accumulation: Option<Missing>,
    distributed: bool,
    accelerate: bool,
    lightning_steps: bool,
    /// How the data-parallel size is missing: shown by the file, or by its launches.
    world: Missing,
}

/// The valuation of a file's expressions into the run's factors.
struct Model<'a, 's> {
    w: &'a Walker<'s>,
    root: Node<'a>,
    /// The names bound in each arm of one `if` whose arms are being valued: met again inside
    /// them, they are left unknown.
    in_arms: std::cell::RefCell<Vec<String>>,
    /// Values a framework's keyword says are a factor, by their text.
    seeds: HashMap<String, Factors>,
}

/// Nested names and calls followed before a value is left unknown.
const MAX_DEPTH: usize = 12;

impl<'a> Model<'a, '_> {
    /// The equation a value breaks, reported where its factors are written.
    fn equation(
        &self,
        node: Node<'a>,
        f: Factors,
        has: String,
        used: BatchUse,
        missing: Vec<Missing>,
    ) -> BatchEquation {
        let at = self.written_at(node, f, 0);
        // A count is described by the batch written where it is reported: under accelerate's
        // prepared scheduler, `steps * num_processes` cancels the data-parallel size that the
        // count's own batch holds.
        let has = match (&used, self.factors(at, 0)) {
            (BatchUse::Count { .. }, g) if at != node && g.samples != 0 => g.describe_inverse(),
            (BatchUse::Count { .. }, g) if at != node && g.holds_batch() => g.describe(),
            _ => has,
        };
        BatchEquation {
            span: at.byte_range(),
            written: compact_spaced(self.text(at)),
            has,
            used,
            missing,
        }
    }

    fn node(&self, span: &Range<usize>) -> Option<Node<'a>> {
        self.root.descendant_for_byte_range(span.start, span.end)
    }

    fn text(&self, n: Node) -> &str {
        self.w.src.get(n.byte_range()).unwrap_or("")
    }

    /// A loader's batch, valued without what the loaders' own batches seed.
    fn factors_unseeded(&self, node: Node) -> Factors {
        let model = Model {
            w: self.w,
            root: self.root,
            in_arms: Default::default(),
            seeds: self
                .seeds
                .iter()
                .filter(|(_, f)| **f != MICRO)
                .map(|(k, f)| (k.clone(), *f))
                .collect(),
        };
        model.factors(node, 0)
    }

    fn factors(&self, node: Node, depth: usize) -> Factors {
        if depth > MAX_DEPTH {
            return UNKNOWN;
        }
        let node = unparen(node);
        match node.ty() {
            // A number written into a product may be a factor of the run (`* 8` for eight
            // GPUs); one bound to a name alone carries the name's meaning (`seq_len = 2048`).
            "integer"
                if parse_number(self.text(node)).is_some_and(|n| n >= 2.0)
                    && in_arithmetic(node) =>
            {
                Factors {
                    literal_up: true,
                    ..ONE
                }
            }
            "integer" | "float" => ONE,
            "unary_operator" => node
                .field("argument")
                .map_or(UNKNOWN, |a| self.factors(a, depth + 1)),
            "binary_operator" => {
                let (Some(l), Some(r)) = (node.field("left"), node.field("right")) else {
                    return UNKNOWN;
                };
                let op = node.field("operator").map_or("", |o| self.text(o));
                let (a, b) = (self.factors(l, depth + 1), self.factors(r, depth + 1));
                match op {
                    "*" => a.times(b),
                    "/" | "//" => a.over(b),
                    "+" | "-" => a.plus(b),
                    _ => UNKNOWN,
                }
            }
            "conditional_expression" => {
                let mut c = node.walk();
                let mut arms = node
                    .named_children(&mut c)
                    .step_by(2)
                    .map(|a| self.factors(a, depth + 1));
                let first = arms.next().unwrap_or(UNKNOWN);
                arms.try_fold(first, |value, arm| {
                    value.same_factors(arm).then(|| value.either(arm))
                })
                .unwrap_or(Factors {
                    choice: true,
                    ..UNKNOWN
                })
            }
            "call" => self.call_factors(node, depth),
            "identifier" | "attribute" | "subscript" => self.name_factors(node, depth),
            _ => UNKNOWN,
        }
    }

    fn call_factors(&self, call: Node, depth: usize) -> Factors {
        let callee = call.field("function").map_or("", |f| self.text(f));
        let last = last_segment(callee);
        let Some(args) = call.field("arguments") else {
            return UNKNOWN;
        };
        let positional = positionals(Some(args));
        let first_string = positional
            .first()
            .filter(|a| a.ty() == "string")
            .map(|a| string_key(self.text(*a)));
        match last {
            "int" | "float" | "round" | "ceil" | "floor" | "sqrt" | "abs" => positional
                .first()
                .map_or(UNKNOWN, |a| self.factors(*a, depth + 1)),
            "max" | "min" => {
                let values: Vec<Factors> = positional
                    .iter()
                    .map(|a| self.factors(*a, depth + 1))
                    .filter(|f| !f.is_constant())
                    .collect();
                match values.windows(2).all(|w| w[0].same_factors(w[1])) {
                    true => values.first().copied().unwrap_or(ONE),
                    false => UNKNOWN,
                }
            }
            "len"
                if self.w.lightning()
                    && positional
                        .first()
                        .is_some_and(|a| last_segment(self.text(*a)) == "devices") =>
            {
                DEVICES
            }
            "len" => positional
                .first()
                .map_or(UNKNOWN, |a| self.length_factors(*a)),
            // Under Lightning the devices of one node; elsewhere a count of devices is the
            // data-parallel size.
            "device_count" if self.w.lightning() => DEVICES,
            l if WORLD_CALLS.contains(&l) => WORLD,
            // `os.environ.get("WORLD_SIZE", 1)`, `os.getenv(...)`, `cfg.get("global_batch_size")`
            "get" | "getenv" => first_string.and_then(|k| schema(&k)).unwrap_or(UNKNOWN),
            _ => UNKNOWN,
        }
    }

    fn name_factors(&self, node: Node, depth: usize) -> Factors {
        let text = self.text(node);
        let key = match node.ty() {
            "subscript" => node
                .field("subscript")
                .filter(|s| s.ty() == "string")
                .map(|s| string_key(self.text(s)))
                .unwrap_or_default(),
            _ => last_segment(text).to_string(),
        };
        // A name bound to a number is a factor by its use (`accum = 4` given as
        // `gradient_accumulation_steps=accum`); bound to arithmetic, by its derivation.
        let bound = self.binding(text).map(|rhs| self.factors(rhs, depth + 1));
        if let Some(f) = bound.filter(|f| !f.is_unknown() && !f.is_constant()) {
            return f;
        }
        // Lightning's own counts: a trainer's devices of one node, and its nodes.
        if self.w.lightning() {
            match key.as_str() {
                "num_devices" if node.ty() == "attribute" => return DEVICES,
                "num_nodes" => return NODES,
                _ => {}
            }
        }
        // A module constant keeps the key's meaning in capitals (`GLOBAL_BATCH_SIZE = 512`).
        schema(&key.to_ascii_lowercase())
            .or_else(|| self.seeds.get(&compact(text)).copied())
            .or(bound)
            .unwrap_or(UNKNOWN)
    }

    /// The one value a name is bound to, when nothing changes it in place (`steps //= accum`)
    /// and it does not read itself.
    fn binding(&self, name: &str) -> Option<Node<'a>> {
        if let Some((_, span)) = self.w.batch.items.iter().rev().find(|(i, _)| i == name) {
            return self.node(span);
        }
        if self.w.batch.reassigned.contains(name) {
            return self.arm_binding(name);
        }
        let rhs = *self.w.assigned_text.get(name)?;
        if word_in(rhs, name) || modified_in_place(self.w.src, name) {
            return None;
        }
        let start = offset_in(self.w.src, rhs)?;
        self.node(&(start..start + rhs.len()))
    }

    /// `len(x)`: the dataset's samples when `x` is what a loader is built on (or is built as a
    /// dataset), unknown for a loader (GA004 judges loader lengths) or anything else.
    fn length_factors(&self, arg: Node) -> Factors {
        let t = self.text(arg);
        let loaded = self
            .w
            .batch
            .loaders
            .iter()
            .any(|l| l.dataset.as_deref() == Some(t))
            || self.w.batch.datasets.iter().any(|d| d == t);
        let iterated = self.w.loops.iter().any(|lp| word_in(&lp.iterates, t));
        let built = self
            .binding(t)
            .filter(|b| b.ty() == "call")
            .and_then(|b| b.field("function"))
            .map(|f| last_segment(self.text(f)).to_ascii_lowercase());
        let loader = built.as_deref().is_some_and(|c| c.ends_with("loader"));
        let dataset = built
            .as_deref()
            .is_some_and(|c| c.contains("dataset") || c.ends_with("ds"));
        match (loaded || dataset) && !loader && !iterated {
            true => SAMPLES,
            false => UNKNOWN,
        }
    }

    /// The dataset whose `len()` the value reads.
    fn dataset_of(&self, node: Node<'a>, depth: usize) -> Option<&'a str> {
        if depth > MAX_DEPTH {
            return None;
        }
        let node = unparen(node);
        match node.ty() {
            "identifier" | "attribute" => {
                self.dataset_of(self.binding(self.text(node))?, depth + 1)
            }
            "binary_operator" => node
                .field("left")
                .and_then(|l| self.dataset_of(l, depth + 1))
                .or_else(|| self.dataset_of(node.field("right")?, depth + 1)),
            "call" => {
                let arg = node.field("arguments")?.named_child(0)?;
                match node.field("function").map(|f| self.text(f)) {
                    Some("len") => self.w.src.get(arg.byte_range()),
                    _ => self.dataset_of(arg, depth + 1),
                }
            }
            _ => None,
        }
    }
}

/// The right operands of the divisions under `node`.
fn divisors_in<'t>(node: Node<'t>, out: &mut Vec<Node<'t>>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let op = node.field("operator").map(|o| o.kind());
    if node.ty() == "binary_operator" && matches!(op, Some("/" | "//")) {
        out.extend(node.field("right"));
    }
    let mut c = node.walk();
    for child in node.named_children(&mut c) {
        divisors_in(child, out, depth + 1);
    }
}

/// The file defines a class derived from `IterableDataset` (`class Stream(IterableDataset):`).
pub(super) fn defines_iterable_dataset(src: &str) -> bool {
    word_positions(src, "IterableDataset").any(|at| {
        let line = &src[src[..at].rfind('\n').map_or(0, |i| i + 1)..at];
        line.trim_start().starts_with("class ") && line.contains('(')
    })
}

/// The node is an operand of arithmetic (within parentheses, if any).
fn in_arithmetic(node: Node) -> bool {
    let mut up = node.parent();
    while let Some(p) = up.filter(|p| p.ty() == "parenthesized_expression") {
        up = p.parent();
    }
    up.is_some_and(|p| p.ty() == "binary_operator")
}

/// Where `part`, a slice of `src`, starts in it.
pub(super) fn offset_in(src: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(src.as_ptr() as usize)?;
    (start + part.len() <= src.len()).then_some(start)
}

/// `text` reads `name` as a whole name (not `name_b` or `x.name`... a prefix `self.` is part of it).
fn word_in(text: &str, name: &str) -> bool {
    !name.is_empty() && word_positions(text, name).next().is_some()
}

/// Where `name` stands as a whole word (not an attribute's tail).
fn word_positions<'t>(text: &'t str, name: &'t str) -> impl Iterator<Item = usize> + 't {
    let part = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let t = text.as_bytes();
    memchr::memmem::find_iter(t, name.as_bytes()).filter(move |&at| {
        let before = at.checked_sub(1).map(|i| t[i]);
        let after = t.get(at + name.len()).copied();
        !before.is_some_and(|b| part(b) || b == b'.') && !after.is_some_and(part)
    })
}

/// The last segment of the callee whose argument list holds byte `at` (`evaluate` for
/// `evaluate(model, val_loader)`), on the same logical line.
fn enclosing_callee(src: &str, at: usize) -> Option<&str> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut i = at;
    let open = loop {
        i = i.checked_sub(1)?;
        match (b[i], depth) {
            (b'(', 0) => break i,
            (b'[' | b'{' | b'\n', 0) => return None,
            (b')' | b']' | b'}', _) => depth += 1,
            (b'(' | b'[' | b'{', _) => depth -= 1,
            _ => {}
        }
    };
    let end = open;
    let start = b[..end]
        .iter()
        .rposition(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
        .map_or(0, |p| p + 1);
    src.get(start..end).filter(|n| !n.is_empty())
}

/// `name //= x`, `name /= x` or `name *= x` somewhere in the file.
fn modified_in_place(src: &str, name: &str) -> bool {
    let s = src.as_bytes();
    memchr::memmem::find_iter(s, name.as_bytes()).any(|at| {
        let before = at.checked_sub(1).map(|i| s[i]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
            return false;
        }
        let rest = s[at + name.len()..].trim_ascii_start();
        rest.starts_with(b"//=") || rest.starts_with(b"/=") || rest.starts_with(b"*=")
    })
}

/// The text without whitespace: how a value is compared with another.
fn compact(text: &str) -> String {
    text.split_whitespace().collect()
}

/// The text on one line, single-spaced: how a value is quoted in a message.
pub(super) fn compact_spaced(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
