//! A literal scan that decides, before any parse, whether a file can hold anything a rule that is
//! reported for it reads. Each condition is *necessary* for its rule to fire, derived from what the
//! frontends record, so skipping a file never changes a result:
//! - memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) are recorded only
//!   with a term whose role is a model size or a parameter count, and a term's role is
//!   [`role_of`](crate::expr::role_of) of an identifier written in the file: the scan asks `role_of` about every
//!   identifier that contains `model`, `weight` or `param`. A parameter count counts only where
//!   a rule can use one: assigned a possible constant, as a config key, or multiplied where an
//!   optimizer-state `*byte*` name is assigned;
//! - the training-loop rules (GA001-GA006, GA008, GA009) need an attribute call named exactly `step`
//!   (the frontend compares the text after the callee's last `.`) with a `backward`, a
//!   `manual_backward` or a gradient clip, or an `accelerator.accumulate(` block, or a Lightning
//!   return divided by `accumulate_grad_batches` or by a factor named for accumulation, or a
//!   backward beside `deepspeed:` (an engine's backward under `if args.deepspeed:`), or a
//!   backward beside `no_sync(` (GA009's block that holds only the backward); GA008's second
//!   `unscale_` and GA009's late `require_backward_grad_sync` are read only in a file whose walk
//!   saw a backward and a step. What a module hands the files that import it is read there: a
//!   returned scheduler given its length or an `Accelerator` told its factor (GA004), a
//!   `DistributedDataParallel` or `DDP` wrapper called in a file that returns (GA009);
//! - a unit mismatch (MEM004) needs a decimal divisor (10^9, 10^6) and either a binary one
//!   (2^30, 2^20) or the word GiB or MiB (a name, a helper, a label); every way to write a
//!   divisor as literals contains one of `DIVISORS`;
//! - a dtype or optimizer table (MEM002, MEM003) needs a known key followed by `:` and a number
//!   in a dict (quoted, or an attribute such as `torch.float16` read by its last segment), a
//!   quoted key opened by `(` and followed by `,` and a number (a pair, `.get("bf16", 2)`), a
//!   key written as a keyword given a number (`dict(bf16=2)`), a known key compared (`==`,
//!   `!=`, `is`, `in (...)`, `startswith(`, `case`) in a file that assigns or returns a
//!   number, or a quoted key given as a keyword (`dtype="bf16"`) where a name holding `byte` or
//!   `multiplier` is assigned a number;
//! - a batch config written in Python (BS001, BS002) needs a DeepSpeed key or a declared global
//!   batch where a config holds it (a quoted dict key, an argparse flag, a class field); a data
//!   loader built with the global batch (BS002) needs `DataLoader` and a division that may
//!   derive an accumulation factor;
//! - a global batch computed in code (BS004) needs an identifier holding `batch` and `global`,
//!   `effective` or `total` followed by `=` (or `:`), a `*`, and either the training-loop
//!   condition (the loop it accumulates in) or a data-parallel wrapper (`DDP`,
//!   `DistributedDataParallel`, `init_process_group`, a Lightning `Trainer`); its accumulation factor comes from the loop model, read when the
//!   training-loop condition holds. A schedule sized as `len(dataset) // batch` needs `len(`,
//!   `batch` or `bs`, `schedul` or `lr`, and either the training-loop condition or a
//!   `DistributedSampler`. Under Lightning, a trainer's devices of one node need `lightning`,
//!   `num_devices`, `.devices` or `device_count(`, and `batch` (read with the loop model);
//! - a Trainer loss written by hand (GA007) needs `compute_loss_func` followed by `=` with
//!   `gradient_accumulation_steps` (the keyword or key that turns accumulation on), or
//!   `compute_loss` followed by `(` with `CausalLM`, `ConditionalGeneration` or `SFTTrainer`
//!   (an override in a file that builds no trainer is judged whatever factor is written);
//! - ML900: suppression directives need `memlint` or `noqa`;
//! - a YAML or JSON config needs a key some reader of configs looks at (`configs.rs`): a test
//!   data file or a table of golden values holds none.
//!
//! What a file gives other files (a script's context for its launcher's run) does not depend on
//! this scan: a skipped script that a run reaches is analysed when the run is joined. A rule the
//! scan does not know about makes every file of its language parse.
//!
//! The checks of the memory formulas are in `memory.rs`, of the unit conversions in `units.rs`, of
//! the tables in `tables.rs`; the batch keys, the training loop and the directives are checked
//! here, and `scan.rs` holds the text and what every check reads it with.

mod configs;
mod memory;
mod scan;
mod tables;
mod units;

pub use units::imported_divisors;

use crate::rules::{implemented_codes, UNUSED_SUPPRESSION};
use crate::source::{logical_line, Language};
use scan::{assigned_at, finder, has, identifier_at, is_ident, Scan, Word};

/// What the rules reported for one file can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub memory: bool,
    pub accumulation: bool,
    /// GA007: a Trainer loss written by hand.
    pub trainer_loss: bool,
    /// GA006: dependency pins (requirements files), judged against the project's accumulation.
    pub pins: bool,
    /// BS004: a global batch computed in code, with the loop model (the accumulation factor).
    pub global_batch: bool,
    pub units: bool,
    pub tables: bool,
    pub batch: bool,
    /// MEM005: whether training fits, from constants and configs joined across files.
    pub fit: bool,
    /// MEM007-MEM010: model states counted per parameter or per device.
    pub states: bool,
    /// MEM011: memory set under a test of gradient checkpointing.
    pub checkpointing: bool,
    pub suppressions: bool,
    /// ML002: a key written twice, in any config (every config is read whole).
    pub repeated_keys: bool,
    /// A reported rule the scan knows nothing about: parse everything.
    pub unknown: bool,
}

impl Wanted {
    /// Every rule: what `--select ALL` asks for.
    pub const ALL: Wanted = Wanted {
        memory: true,
        accumulation: true,
        trainer_loss: true,
        pins: true,
        global_batch: true,
        units: true,
        tables: true,
        batch: true,
        fit: true,
        states: true,
        checkpointing: true,
        suppressions: true,
        repeated_keys: true,
        unknown: false,
    };

    /// From the question "is this code reported for the file?".
    pub fn from_codes(reported: impl Fn(&str) -> bool) -> Wanted {
        let mut w = Wanted::default();
        for code in implemented_codes() {
            if !reported(code) {
                continue;
            }
            match code {
                "MEM001" | "MEM006" => w.memory = true,
                "MEM002" => {
                    w.memory = true;
                    w.tables = true;
                }
                "MEM003" => w.tables = true,
                "MEM004" => w.units = true,
                "MEM005" | "MEM012" => {
                    w.memory = true;
                    w.batch = true;
                    w.fit = true;
                }
                "MEM007" | "MEM008" | "MEM009" | "MEM010" => w.states = true,
                "MEM011" => w.checkpointing = true,
                "BS001" | "BS002" | "BS003" => w.batch = true,
                "GA007" => w.trainer_loss = true,
                "BS004" => w.global_batch = true,
                "GA006" => {
                    w.accumulation = true;
                    w.pins = true;
                }
                c if c.starts_with("GA") => w.accumulation = true,
                c if c == UNUSED_SUPPRESSION => w.suppressions = true,
                // An invalid config (ML001) is judged where a run reaches it, and a config a
                // run names is read whole whatever the scan says.
                "ML001" => {}
                "ML002" => w.repeated_keys = true,
                _ => w.unknown = true,
            }
        }
        w
    }

    fn any(self) -> bool {
        self.memory
            || self.accumulation
            || self.trainer_loss
            || self.global_batch
            || self.units
            || self.tables
            || self.batch
            || self.states
            || self.checkpointing
            || self.suppressions
    }
}

/// What a file needs read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// The file must be parsed.
    pub parse: bool,
    /// A parsed Python file needs the loop model and loss provenance: a loop rule is reported
    /// for it and its text could hold a training loop. Files parsed for other rules skip that
    /// part of the walk; it never holds a finding for them.
    pub loop_model: bool,
    /// A parsed Python file needs its memory arithmetic valued: a memory rule is reported for
    /// it and its text could hold a formula. Files parsed only for the loop and batch rules skip
    /// that part of the walk.
    pub value_model: bool,
    /// The file may divide by a name it imports, and nothing else has its value model read: it
    /// needs the value model, and a parse, if one of its [`imported_divisors`] is defined in
    /// the project, which the scan cannot see.
    pub imported_divisor: bool,
}

impl Needs {
    /// Everything, as without the prefilter.
    pub const ALL: Needs = Needs {
        parse: true,
        loop_model: true,
        value_model: true,
        imported_divisor: false,
    };
    const NOTHING: Needs = Needs {
        parse: false,
        loop_model: false,
        value_model: false,
        imported_divisor: false,
    };

    /// What the file needs once it is known whether a module its divisors are imported from is
    /// in the project.
    pub fn with_imported_divisor(self, in_project: bool) -> Needs {
        match self.imported_divisor && in_project {
            true => Needs {
                parse: true,
                value_model: true,
                ..self
            },
            false => self,
        }
    }
}

/// What the file needs read, from one scan. Launchers and TOML files are always read: they give
/// context to other files; a YAML or JSON file is read when it holds a key a reader of configs
/// looks at (`configs.rs`). Each check runs only for the rules reported, cheapest first.
pub fn needs(language: Language, text: &str, wanted: Wanted) -> Needs {
    if language == Language::Requirements {
        // Pins are read by GA006 alone; a directive needs a comment.
        let parse = wanted.pins || wanted.unknown || (wanted.suppressions && text.contains('#'));
        return Needs {
            parse,
            ..Needs::NOTHING
        };
    }
    if matches!(language, Language::Yaml | Language::Json) && !wanted.repeated_keys {
        return match wanted.unknown || configs::holds_known_key(text, language) {
            true => Needs::ALL,
            false => Needs::NOTHING,
        };
    }
    if !matches!(language, Language::Python | Language::Notebook) || wanted.unknown {
        return Needs::ALL;
    }
    if !wanted.any() {
        return Needs::NOTHING;
    }
    thread_local! {
        static LOWER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    LOWER.with_borrow_mut(|lower| scan_needs(&Scan::new(text, lower), wanted))
}

fn scan_needs(scan: &Scan, wanted: Wanted) -> Needs {
    // BS004 judges a product only beside an accumulating loop (read with the loop model) or a
    // data-parallel wrapper (no loop model needed); its scans run last, when nothing else has
    // asked for the parse. BS002 tells an evaluation loader by the loops and functions that
    // read it, which the loop model holds, whatever else is reported.
    let training_loop =
        (wanted.accumulation || wanted.global_batch || wanted.batch) && scan.training_loop();
    let global_batch =
        || scan.global_batch() || scan.sample_schedule() || scan.batch_count(training_loop);
    let lightning_devices = wanted.global_batch && scan.lightning_devices();
    let loop_model = lightning_devices
        || (training_loop
            && (wanted.accumulation
                || (wanted.global_batch && global_batch())
                || (wanted.batch && (scan.training_loader() || scan.batch_key(true)))));
    // The families whose rules read valued memory arithmetic (formulas, units, constants,
    // checkpointed values, tables).
    let value_model = (wanted.units && scan.mixed_units())
        || (wanted.tables && scan.table())
        || ((wanted.memory || wanted.states)
            && (scan.sized_name(true)
                || scan.derived_size()
                || scan.memory_function()
                || scan.count_constant()))
        || (wanted.checkpointing && scan.checkpointed_memory())
        || (wanted.fit && scan.names_a_sized_model());
    let parse = loop_model
        || value_model
        || (wanted.suppressions && scan.directive())
        || (wanted.batch && (scan.batch_key(training_loop) || scan.training_loader()))
        || (wanted.global_batch && scan.batch_count(training_loop))
        || (wanted.trainer_loss && scan.trainer_loss())
        || (wanted.global_batch && scan.global_batch() && scan.data_parallel())
        || (wanted.global_batch && scan.has(Word::DistributedSampler) && scan.sample_schedule())
        || (wanted.accumulation && (scan.hands_schedule() || scan.hands_ddp_model()));
    Needs {
        parse,
        loop_model,
        value_model,
        // A division by an imported name (`/ GIB` after `from units import GIB`): its divisor is
        // written in another module, out of this scan's sight.
        imported_divisor: wanted.units
            && !value_model
            && has!(scan.bytes, b"import")
            && memchr::memchr(b'/', scan.bytes).is_some(),
    }
}

/// Which of the scan's checks hold for a Python text, by name: why the prefilter keeps a file
/// (a profiling aid; `examples/why_parse.rs`).
pub fn reasons(text: &str) -> Vec<&'static str> {
    let mut lower = Vec::new();
    let scan = Scan::new(text, &mut lower);
    let training_loop = scan.training_loop();
    let checks: [(&'static str, &dyn Fn() -> bool); 21] = [
        ("training_loop", &|| training_loop),
        ("global_batch", &|| scan.global_batch()),
        ("sample_schedule", &|| scan.sample_schedule()),
        ("batch_count", &|| scan.batch_count(training_loop)),
        ("training_loader", &|| scan.training_loader()),
        ("mixed_units", &|| scan.mixed_units()),
        ("table", &|| scan.table()),
        ("sized_name", &|| scan.sized_name(true)),
        ("derived_size", &|| scan.derived_size()),
        ("memory_function", &|| scan.memory_function()),
        ("count_constant", &|| scan.count_constant()),
        ("checkpointed_memory", &|| scan.checkpointed_memory()),
        ("names_a_sized_model", &|| scan.names_a_sized_model()),
        ("directive", &|| scan.directive()),
        ("batch_key", &|| scan.batch_key(training_loop)),
        ("trainer_loss", &|| scan.trainer_loss()),
        ("data_parallel", &|| scan.data_parallel()),
        ("lightning_devices", &|| scan.lightning_devices()),
        ("hands_schedule", &|| scan.hands_schedule()),
        ("hands_ddp_model", &|| scan.hands_ddp_model()),
        ("distributed_sampler", &|| {
            scan.has(Word::DistributedSampler)
        }),
    ];
    checks
        .into_iter()
        .filter(|(_, holds)| holds())
        .map(|(name, _)| name)
        .collect()
}

/// Whether a YAML or JSON config holds a key some reader of configs looks at, or a directive:
/// without one, the file gives no fact whatever its values.
pub fn config_holds_known_key(language: Language, text: &str) -> bool {
    configs::holds_known_key(text, language)
}

/// Whether the file must be parsed (see [`needs`]).
pub fn needs_parse(language: Language, text: &str, wanted: Wanted) -> bool {
    needs(language, text, wanted).parse
}

/// Keys the batch rules compare in a config written in Python (a dict, dataclass fields,
/// argparse defaults): DeepSpeed's batch keys (BS001), declared global batches and axolotl's
/// `micro_batch_size` next to `base_model` (BS002). A script that a launcher runs is analysed whole whatever this scan says.
const BATCH_KEYS: &[&str] = &[
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "global_batch_size",
    "effective_batch_size",
    "total_batch_size",
    "total_train_batch_size",
    "train_global_batch_size",
    "global_train_batch_size",
];

impl Scan<'_> {
    fn directive(&self) -> bool {
        has!(self.lower, b"memlint") || has!(self.lower, b"noqa")
    }

    /// A batch key where a config can hold it. Every key holds `batch_size`. A data loader built
    /// with the batch its accumulation factor is derived from needs `DataLoader` and a division
    /// that may derive the factor.
    fn batch_key(&self, training_loop: bool) -> bool {
        if self.has(Word::DataLoader) && (training_loop || self.divides_for_accumulation()) {
            return true;
        }
        if !self.has(Word::BatchSize) && !self.has(Word::BatchDash) {
            return false;
        }
        let axolotl = has!(self.lower, b"base_model");
        let hits = finder!(b"batch_size")
            .find_iter(self.lower)
            .chain(finder!(b"batch-size").find_iter(self.lower));
        hits.into_iter().any(|at| {
            let batch = |k: &str| BATCH_KEYS.contains(&k) || (axolotl && k == "micro_batch_size");
            self.config_key(at, at + "batch_size".len(), batch)
                .is_some()
        })
    }

    /// The batch model (`batch_model.rs`) values a batch only with a micro-batch in it: a
    /// loader's batch (`DataLoader`) or a framework's key (each holds `batch_size`). It judges
    /// a count of steps (`len(`) read by a scheduler or a Trainer's `max_steps` or
    /// `warmup_steps`, or a learning rate (`lr` or `learning_rate` followed by `=`), that
    /// leaves out a factor the file shows: an accumulating loop (the training-loop condition), a
    /// Trainer's accumulation, or data parallelism. A script a launch runs is read whole: its
    /// launches show the rest.
    fn batch_count(&self, training_loop: bool) -> bool {
        let micro = self.has(Word::DataLoader) || self.has(Word::BatchSize);
        // `word =` (a keyword or an assignment), not `==`.
        let given = |word: &memchr::memmem::Finder| {
            word.find_iter(self.lower).any(|at| {
                let rest = self.lower[at + word.needle().len()..].trim_ascii_start();
                rest.first() == Some(&b'=') && rest.get(1) != Some(&b'=')
            })
        };
        let count = || {
            self.has(Word::Len)
                && (given(finder!(b"max_steps"))
                    || given(finder!(b"warmup_steps"))
                    || (training_loop && has!(self.lower, b"schedul")))
        };
        // A rate by keyword, or a known optimizer's second argument (`SGD(params, base * bs)`).
        let rate =
            || given(finder!(b"lr")) || given(finder!(b"learning_rate")) || self.optimizer_built();
        let factor = || {
            training_loop
                || self.has(Word::GradientAccumulationSteps)
                || self.has(Word::DistributedDataParallel)
                || self.has(Word::DistributedSampler)
                || self.has(Word::InitProcessGroup)
                || finder!(b"DDP(")
                    .find_iter(self.bytes)
                    .any(|at| at == 0 || !is_ident(self.bytes[at - 1]))
                || self.lightning_trainer()
        };
        micro && factor() && (count() || rate())
    }

    /// A loader's batch is judged in a loop that trains on it (BS002).
    fn training_loader(&self) -> bool {
        self.has(Word::DataLoader) && has!(self.bytes, b"backward(")
    }

    /// A division that may derive an accumulation factor: the frontend reads one assigned to a
    /// name holding `accum`, `grad_acc` or `gas` (any case, `self.accum_cfg.steps` too), or to
    /// the factor of a loop, which the training-loop condition covers. The `/` is looked for
    /// in the rest of the assignment's logical line.
    fn divides_for_accumulation(&self) -> bool {
        let lower = self.lower;
        memchr::memchr(b'/', self.bytes).is_some()
            && [finder!(b"accum"), finder!(b"grad_acc"), finder!(b"gas")]
                .iter()
                .any(|word| {
                    word.find_iter(lower).any(|at| {
                        let (_, mut end) = identifier_at(lower, at, false);
                        // The rest of an attribute chain the word starts.
                        while lower.get(end) == Some(&b'.') {
                            end = identifier_at(lower, end + 1, false).1.max(end + 1);
                        }
                        assigned_at(&lower[end..])
                            && memchr::memchr(b'/', logical_line(lower, end)).is_some()
                    })
                })
    }

    /// BS004 needs a name holding `batch` and `global`, `effective` or `total`, followed by `=`
    /// (or `:`, an annotated assignment), and a product (`*`).
    fn global_batch(&self) -> bool {
        let lower = self.lower;
        memchr::memchr(b'*', self.bytes).is_some()
            && self.has(Word::Batch)
            && finder!(b"batch").find_iter(lower).any(|at| {
                let (start, end) = identifier_at(lower, at, false);
                let name = &lower[start..end];
                assigned_at(&lower[end..])
                    && [&b"global"[..], b"effective", b"total"]
                        .iter()
                        .any(|w| name.windows(w.len()).any(|x| x == *w))
            })
    }

    /// BS004's plain shape needs a scheduler built (a callee holding `schedule` or ending in
    /// `lr`) from `len(` divided by a batch (a name holding `batch` or `bs`).
    fn sample_schedule(&self) -> bool {
        let lower = self.lower;
        self.has(Word::Len)
            && (self.has(Word::Batch) || has!(lower, b"bs"))
            && (has!(lower, b"schedul") || has!(lower, b"lr"))
    }

    /// GA004 across modules: a function returns a scheduler (a callee holding `schedule` or
    /// ending in `lr`) given its length where a scheduler takes one (a keyword for its steps,
    /// iterations or total, or the place a known constructor takes it), or an `Accelerator`
    /// told its factor, for the files that import it.
    fn hands_schedule(&self) -> bool {
        let lower = self.lower;
        let returns_scheduler = || {
            memchr::memchr(b'*', self.bytes).is_some()
                && finder!(b"return ").find_iter(lower).any(|at| {
                    let rest = &lower[at + 7..];
                    let rest = &rest[rest.len() - rest.trim_ascii_start().len()..];
                    let end = rest
                        .iter()
                        .position(|b| !(is_ident(*b) || *b == b'.'))
                        .unwrap_or(rest.len());
                    let last = rest[..end].rsplit(|b| *b == b'.').next().unwrap_or(&[]);
                    let args = rest[end..].trim_ascii_start();
                    let scheduler =
                        last.windows(8).any(|w| w == b"schedule") || last.ends_with(b"lr");
                    scheduler
                        && args.first() == Some(&b'(')
                        && (takes_length_at(last)
                            || length_keyword(call_arguments(args), &|value| self.product(value)))
                })
        };
        let returns_accelerator = || {
            has!(self.bytes, b"return ")
                && finder!(b"Accelerator(").find_iter(self.bytes).any(|at| {
                    let args = call_arguments(&self.bytes[at + 11..]);
                    (at == 0 || !is_ident(self.bytes[at - 1]))
                        && has!(args, b"gradient_accumulation_")
                })
        };
        returns_scheduler() || returns_accelerator()
    }

    /// GA009 across modules: a function may return the model it wraps in DDP (a callee named
    /// `DistributedDataParallel` or ending in `DDP`).
    fn hands_ddp_model(&self) -> bool {
        let called = |word: &[u8]| {
            memchr::memmem::find_iter(self.bytes, word)
                .any(|at| self.bytes[at + word.len()..].trim_ascii_start().first() == Some(&b'('))
        };
        has!(self.bytes, b"return") && (called(b"DistributedDataParallel") || called(b"DDP"))
    }

    /// A lowercased value that multiplies (`steps * accum`), or a name the file assigns a
    /// product on the line (`total = steps * accum`).
    fn product(&self, value: &[u8]) -> bool {
        if memchr::memchr(b'*', value).is_some() {
            return true;
        }
        let name = value.trim_ascii();
        !name.is_empty()
            && name.iter().all(|b| is_ident(*b) || *b == b'.')
            && memchr::memmem::find_iter(self.lower, name).any(|at| {
                let end = at + name.len();
                let alone = (at == 0 || !is_ident(self.lower[at - 1]))
                    && !self.lower.get(end).is_some_and(|b| is_ident(*b));
                alone
                    && assigned_at(&self.lower[end..])
                    && memchr::memchr(b'*', logical_line(self.lower, end)).is_some()
            })
    }

    /// Under Lightning, a trainer's devices of one node (`trainer.num_devices`,
    /// `len(trainer.devices)`, `device_count()`) beside a batch: BS004 values them with the
    /// batch model, which leaves the nodes out of them.
    fn lightning_devices(&self) -> bool {
        has!(self.bytes, b"lightning")
            && (has!(self.bytes, b"num_devices")
                || has!(self.bytes, b".devices")
                || has!(self.bytes, b"device_count("))
            && has!(self.lower, b"batch")
    }

    /// A call of an optimizer class the walk knows by name (`SGD(`, `AdamW (`, any case).
    fn optimizer_built(&self) -> bool {
        static NAMES: std::sync::OnceLock<Option<aho_corasick::AhoCorasick>> =
            std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(crate::frontend::python::OPTIMIZER_CLASSES)
                .ok()
        });
        let lower = self.lower;
        names.as_ref().is_none_or(|names| {
            names.find_iter(lower).any(|m| {
                let alone = m.start() == 0 || !is_ident(lower[m.start() - 1]);
                alone && lower[m.end()..].trim_ascii_start().first() == Some(&b'(')
            })
        })
    }

    /// A DDP wrapper (`DistributedDataParallel`, a name ending in `DDP`), `init_process_group`,
    /// or a Lightning Trainer, which may be built for several devices.
    fn data_parallel(&self) -> bool {
        has!(self.bytes, b"DDP")
            || self.has(Word::DistributedDataParallel)
            || self.has(Word::InitProcessGroup)
            || self.lightning_trainer()
    }

    /// A Lightning `Trainer` (the framework's name and the class's): built for several devices
    /// or nodes, it trains data-parallel.
    fn lightning_trainer(&self) -> bool {
        has!(self.bytes, b"Trainer") && has!(self.lower, b"lightning")
    }

    /// GA007 needs a loss written for a Trainer (`compute_loss_func=`, or `def compute_loss(`
    /// with a causal LM named) and the accumulation key that turns the rule on.
    fn trainer_loss(&self) -> bool {
        // `compute_loss_func` followed by `=` (a keyword), or `compute_loss` followed by `(` (a
        // definition) in a file that names a causal LM.
        let followed = |word: &memchr::memmem::Finder, by: u8| {
            word.find_iter(self.bytes).any(|at| {
                self.bytes[at + word.needle().len()..]
                    .iter()
                    .find(|b| !matches!(**b, b' ' | b'\t'))
                    == Some(&by)
            })
        };
        // The rarer word first. An override in a file that builds no trainer is judged
        // whatever factor is written (its builder chooses one), so it needs no factor here.
        has!(self.bytes, b"compute_loss")
            && ((self.has(Word::GradientAccumulationSteps)
                && followed(finder!(b"compute_loss_func"), b'='))
                || (followed(finder!(b"compute_loss"), b'(')
                    && (has!(self.bytes, b"CausalLM")
                        || has!(self.bytes, b"ConditionalGeneration")
                        || has!(self.bytes, b"SFTTrainer"))))
    }

    /// The training-loop rules need an attribute call named exactly `step` (the frontend
    /// compares the text after the callee's last `.`) with a `backward`, a `manual_backward` or a
    /// gradient clip, or an `accelerator.accumulate(` block, or a Lightning return divided by
    /// `accumulate_grad_batches` or by a factor named for accumulation.
    fn training_loop(&self) -> bool {
        let attribute = |word: &memchr::memmem::Finder| {
            let len = word.needle().len();
            word.find_iter(self.bytes)
                .any(|i| !self.bytes.get(i + len).is_some_and(|b| is_ident(*b)))
        };
        // `backward` is rarer than `.step`: read for it first. Without one, only a clip before a
        // GradScaler's step in a file that never unscales is judged.
        let backward = has!(self.lower, b"backward")
            && (attribute(finder!(b".backward"))
                || attribute(finder!(b".manual_backward"))
                || attribute(finder!(b".backward_loss")));
        let scaled_clip = || {
            has!(self.lower, b"clip_grad_")
                && has!(self.lower, b"scaler")
                && !has!(self.lower, b"unscale_")
        };
        // A `LightningModule` subclass's `training_step` returning a loss divided by a factor
        // named for accumulation (`/ ACCUMULATE_EVERY`, a constant a Trainer elsewhere is given).
        let lightning_division = || {
            has!(self.bytes, b"training_step")
                && has!(self.bytes, b"LightningModule")
                && memchr::memchr(b'/', self.bytes).is_some()
                && (has!(self.lower, b"accum")
                    || has!(self.lower, b"grad_acc")
                    || has!(self.lower, b"gas"))
        };
        // A DeepSpeed engine's backward under DeepSpeed's `--deepspeed` flag (`if
        // args.deepspeed: model.backward(out)`), in a schedule whose steps are elsewhere.
        let engine_backward = || backward && has!(self.lower, b"deepspeed:");
        // A backward beside DDP's `no_sync()` (GA009: a block that holds only the backward), in
        // a helper whose optimizer steps elsewhere.
        let no_sync_backward = || backward && has!(self.bytes, b"no_sync(");
        self.has(Word::AccumulateGradBatches)
            || has!(self.lower, b".accumulate(")
            || lightning_division()
            || ((backward || scaled_clip())
                && (attribute(finder!(b".step")) || attribute(finder!(b".optimizer_step"))))
            || engine_backward()
            || no_sync_backward()
    }
}

/// A constructor the walk knows the place of the length of (`schedules::positional_length`),
/// lowercased.
fn takes_length_at(callee: &[u8]) -> bool {
    let known: [&[u8]; 6] = [
        b"get_scheduler",
        b"cosineannealinglr",
        b"polynomiallr",
        b"onecyclelr",
        b"constantlr",
        b"linearlr",
    ];
    known.contains(&callee) || callee.ends_with(b"_schedule_with_warmup")
}

/// The text of a call's arguments, from its `(` to the matching `)` (or the end).
fn call_arguments(open: &[u8]) -> &[u8] {
    let mut depth = 0usize;
    for (i, b) in open.iter().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &open[..i];
                }
            }
            _ => {}
        }
    }
    open
}

/// A keyword argument for a scheduler's length among lowercased arguments: its name holds
/// `steps`, `iters` or `total`, or is `t_max`, and holds neither `warmup` nor `lr`; and its
/// value is a `product`.
fn length_keyword(args: &[u8], product: &dyn Fn(&[u8]) -> bool) -> bool {
    memchr::memchr_iter(b'=', args).any(|at| {
        if args.get(at + 1) == Some(&b'=')
            || at == 0
            || matches!(args[at - 1], b'=' | b'!' | b'<' | b'>')
        {
            return false;
        }
        let before = args[..at].trim_ascii_end();
        let start = before
            .iter()
            .rposition(|b| !is_ident(*b))
            .map_or(0, |i| i + 1);
        let name = &before[start..];
        let has = |w: &[u8]| name.windows(w.len()).any(|x| x == w);
        let value = &args[at + 1..];
        let value = &value[..value.iter().position(|b| *b == b',').unwrap_or(value.len())];
        (has(b"steps") || has(b"iters") || has(b"total") || name == b"t_max")
            && !has(b"warmup")
            && !has(b"lr")
            && product(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_only_what_no_rule_reads() {
        let py = Language::Python;
        let all = Wanted::ALL;
        let yes = |t: &str| needs_parse(py, t, all);
        assert!(yes("free = gpu_gb - model_size_gb * 2\n"));
        assert!(yes("n_params = 7e9\n"));
        assert!(yes("N_PARAMS, GPU_MEMORY_GB = 13_015_864_320, 80\n"));
        assert!(!yes("opt = AdamW(model.parameters())\nmodel.train()\n"));
        assert!(yes("loss.backward()\nif i % n == 0:\n    opt.step()\n"));
        assert!(yes("accelerator.backward(loss / accum)\nopt.step()\n"));
        assert!(!yes("loss.backward()\n"));
        assert!(!yes("loss.Backward()\nopt.steps()\n"));
        assert!(yes("return loss / self.trainer.accumulate_grad_batches\n"));
        assert!(yes(
            "class M(LightningModule):\n    def training_step(self, batch, i):\n        return self.loss(batch) / ACCUMULATE_EVERY\n"
        ));
        assert!(yes("x = 1  # noqa: MEM001\n"));
        assert!(yes("free_gib = free / 1e9\n"));
        // MEM004 needs decimal and binary units to meet.
        assert!(!yes("gb = free / 2**30\n"));
        assert!(yes("gb = free / 2**30\nused_gb = used / 1e9\n"));
        assert!(!yes(
            "free_gib = free / 2**30\neps = 1e-6\nrope_theta = 1000000.0\n"
        ));
        assert!(yes("MB = 1e-6\nfree_mib = free * MB\n"));
        // A binary unit stated in a camel-case name, a helper's name or a label.
        assert!(yes("self.totalGiB = props.total_memory / 1e9\n"));
        assert!(yes("def to_gib(x):\n    return x / 1e9\n"));
        assert!(yes("print(f\"{peak / 1e9:.2f} GiB\")\n"));
        assert!(!yes("gibberish = total / 1e9\n"));
        assert!(!yes("x = f(a, inf=1e9) / 2**30\n"));
        // A parameter count counts as a constant, a config key, or multiplied or divided; a
        // count from `numel()` over parameters or `num_parameters()` whatever it is called, in a
        // file that counts memory (library code counts parameters for much else).
        let memory = |t: &str| {
            needs_parse(
                py,
                t,
                Wanted {
                    memory: true,
                    ..Wanted::default()
                },
            )
        };
        assert!(yes(
            "n = 0\nfor p in m.parameters():\n    n += p.numel()\nprint(n * 16 / 2**30)\n"
        ));
        assert!(!yes(
            "n = 0\nfor p in m.parameters():\n    n += p.numel()\nprint(n / 1e6, 'M')\n"
        ));
        assert!(!yes("assert x.numel() == y.numel()\nprint(x.nbytes)\n"));
        assert!(yes("n = model.num_parameters()\nneed_gb = 16 * n / 1e9\n"));
        assert!(!yes("n = model.num_parameters()\nflops = 6 * tokens * n\n"));
        assert!(yes("PARAMS_B = 8\nprint(PARAMS_B * 16, 'GB')\n"));
        // The library bitsandbytes is no unit of memory.
        assert!(!yes(
            "if is_bitsandbytes_available():\n    scale = lora_B.weight * 2\n"
        ));
        // A memory function's count parameter, near memory arithmetic.
        assert!(yes(
            "def train_mem_gb(P, bpp=2):\n    return P * bpp / 1e9\n"
        ));
        assert!(!yes("def train_mem(P):\n    return P + 1\n"));
        assert!(!yes("def plot(P):\n    return P * 2 / 1e9\n"));
        // A count's name given a parameter count, near memory arithmetic.
        assert!(yes("P = 7e9\nneed = P * 16 / 1e9\n"));
        assert!(yes("n = 6_738_415_616\nprint(n * 2 / 2**30, 'GiB')\n"));
        assert!(!yes("n = 10000\nx = n * 2\n"));
        // A count given to a helper's count parameter as a literal argument.
        assert!(yes(
            "def parts(n, world):\n    return {\"w\": n * 2 / world}\nprint(parts(13e9, 8)['w'] / 2**30)\n"
        ));
        assert!(!yes(
            "def pad(x, fill):\n    return x\nprint(pad(t, 1e8), y / 2**30)\n"
        ));
        assert!(!yes("batch_size_b = 8\n"));
        assert!(yes("cfg = {\"num_params\": 7e9}\n"));
        assert!(yes("optimizer_state_bytes = n_params * 8\n"));
        assert!(memory("flops = 6 * tokens * num_params\n"));
        assert!(!memory("flops = 6 * tokens * steps\n"));
        assert!(yes("flops = 6 * tokens * num_params\n"));
        // Batch keys where a config holds them.
        assert!(!yes("effective_batch_size = input_ids.shape[0]\n"));
        assert!(!yes("cfg['train_batch_size'] = 8\n"));
        assert!(yes("class A:\n    global_batch_size: int = 256\n"));
        // Tables: dict entries and compared keys, not slices or stray strings.
        assert!(!yes("x = t[self.half:2]\n"));
        assert!(!yes("n_bytes = 4\nname = 'bf16'\n"));
        assert!(yes("nbytes = 2 if dtype in ('fp32', 'bf16') else 4\n"));
        assert!(yes("ok = a / 1e9 < b / 2**30\n"));
        assert!(!yes("elapsed = t / 1e6\n"));
        assert!(!yes("opt = Adam(lr=1e-6, eps=1e-8)\n"));
        assert!(yes("SIZES = {\"bf16\": 4}\n"));
        assert!(yes(
            "OPTS = {\"adam\": {\"states\": 2}, \"sgd\": {\"states\": 0}}\n"
        ));
        assert!(yes("SIZES = dict(bf16=4, fp32=4)\n"));
        assert!(yes("SIZES = [(\"bf16\", 4)]\n"));
        assert!(yes("n = SIZES.get('bf16', 4)\n"));
        assert!(yes(
            "match d:\n    case 'bf16':\n        return 2\n    case 'fp32':\n        return 4\nprint(n * f(d) / 2**30)\n"
        ));
        assert!(!yes(
            "match d:\n    case 'bf16':\n        return 2\n    case 'fp32':\n        return 4\n"
        ));
        assert!(yes(
            "if d.startswith('bf16'):\n    return 2\nif d == 'fp32':\n    return 4\nGB = 1e9\n"
        ));
        assert!(!yes("if dtype == torch.float16:\n    eps = 1e-4\nelif dtype == torch.float32:\n    eps = 1e-8\nx = 1e9\n"));
        assert!(yes("f(n, dtype=\"bf16\", bytes_per_param=4)\n"));
        assert!(!yes("run(dtype=\"bf16\", steps=4)\n"));
        // Annotated defaults of a helper's parameters.
        assert!(yes(
            "def f(n: int, dtype: str = \"fp16\", bytes_per_elem: int = 4) -> int:\n    return n * bytes_per_elem\n"
        ));
        assert!(!yes("if dtype == \"fp16\":\n    print(bytes_seen)\n"));
        assert!(yes("SIZES = {np.float64: 4, np.int8: 1}\n"));
        assert!(yes("SIZES = {torch.bfloat16: 4}\n"));
        // Identity tests of dtypes whose arms give bytes, in a file that counts MiB.
        assert!(yes(
            "if d is torch.float32:\n    k = 4\nelif d is torch.float16:\n    k = 4\nprint(n * k / 2**20)\n"
        ));
        assert!(yes("STATES = {'adamw': 1}\n"));
        assert!(yes("if dtype == 'bf16':\n    nbytes = 4\n"));
        assert!(!yes("name = 'resnet'\nkind = 'bf16'\n"));
        assert!(yes("cfg = {\"train_batch_size\": 32}\n"));
        assert!(yes("p.add_argument(\"--global-batch-size\", default=8)\n"));
        assert!(!yes("per_device_train_batch_size = 8\n"));
        assert!(needs_parse(Language::Shell, "echo hi\n", all));
    }

    /// Edge cases of the checks that share searches or read words in one pass: the decisions
    /// are the ones each check made alone.
    #[test]
    fn shared_and_merged_searches_keep_decisions() {
        let py = Language::Python;
        let memory = Wanted {
            memory: true,
            ..Wanted::default()
        };
        let yes = |t: &str| needs_parse(py, t, memory);
        // A derived count found through `num_param`, `illion`, `_b` and `_bn` in one pass each.
        assert!(yes("n = get_num_params(m)\nprint(n * 2 / 1e9)\n"));
        assert!(yes("n = m.num_parameters()\nprint(n * 2 / 1e9)\n"));
        assert!(yes("n = num_params(m)\nprint(n * 2 / 1e9)\n"));
        assert!(!yes("n = num_paramsx\nprint(n * 2 / 1e9)\n"));
        assert!(yes("x = 3 # billion\nprint(x / 1e9)\n"));
        assert!(yes("params_b = 7\nprint(params_b / 1e9)\n"));
        assert!(yes("params_bn = 7\nprint(params_bn / 1e9)\n"));
        assert!(yes("model_mn = 7\nprint(model_mn / 1e9)\n"));
        assert!(!yes("params_bnx = 7\nprint(params_bnx / 1e9)\n"));
        assert!(!yes("params_b = 7\n"));
        // `numel()` counts only beside `parameters()`.
        assert!(!yes("k = p.numel()\nprint(k / 1e9)\n"));
        // A count's name assigned a large number, any case.
        assert!(yes("N = 7e9\nprint(N * 2 / 2**30)\n"));
        assert!(yes("num_param = 7e9\nprint(num_param * 2 / 2**30)\n"));
        assert!(!yes("num_params2 = 7e9\nprint(num_params2 * 2 / 2**30)\n"));
        // A memory helper's count parameter, its name in any case.
        assert!(yes("def Train_MEM_gb(Psi):\n    return Psi * 2 / 1e9\n"));
        assert!(!yes("def train_memo(P):\n    return P * 2 / 1e9\n"));
        assert!(yes(
            "def f(x, *NParams):\n    return 1\nprint(f(1, 13e9) / 2**30)\n"
        ));
        // A parameter count multiplied into a `*byte*` name asked about twice.
        assert!(yes("a = n_params * 2\nb = n_params * 4\nadam_bytes = 8\n"));
        // The batch rules' words, shared between checks.
        let batch = Wanted {
            batch: true,
            global_batch: true,
            ..Wanted::default()
        };
        assert!(needs_parse(
            py,
            "p.add_argument('--train-batch-size', default=8)\n",
            batch
        ));
        assert!(needs_parse(
            py,
            "steps_to_accum = bs // cap\ndl = DataLoader(ds, batch_size=bs)\n",
            batch
        ));
        assert!(!needs_parse(
            py,
            "dl = dataloader(ds)\nx = a / micro\n",
            batch
        ));
        // The division must be in the assignment to the accumulation name, on its logical line.
        assert!(needs_parse(
            py,
            "self.cfg.grad_accum = (\n    bs\n    // cap)\ndl = DataLoader(ds, batch_size=bs)\n",
            batch
        ));
        assert!(!needs_parse(
            py,
            "# split bs / cap\naccum = cfg.accum\ndl = DataLoader(ds, batch_size=bs)\nr = a / b\n",
            batch
        ));
    }

    #[test]
    fn only_what_the_reported_rules_read() {
        let py = Language::Python;
        let ga = Wanted {
            accumulation: true,
            ..Wanted::default()
        };
        assert!(needs_parse(py, "loss.backward()\nopt.step()\n", ga));
        assert!(!needs_parse(py, "free = gpu_gb - model_size_gb * 2\n", ga));
        assert!(!needs_parse(py, "x = 1  # noqa: GA001\n", ga));
        assert!(!needs_parse(
            py,
            "free = gpu_gb - model_size_gb * 2\n",
            Wanted::default()
        ));
        let unknown = Wanted {
            unknown: true,
            ..Wanted::default()
        };
        assert!(needs_parse(py, "x = 1\n", unknown));
    }
}
