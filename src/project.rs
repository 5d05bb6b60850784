//! The project around each file: which launcher runs which script with which configs, joined
//! across files so that rules can check what lives between them.
//!
//! A *run* is one launch: a shell command (`deepspeed --num_gpus 8 train.py --deepspeed ds.json`),
//! or a recipe that names its DeepSpeed config (`deepspeed: ds_z3.json` in a LLaMA-Factory or
//! axolotl YAML), together with the script it starts and the configs it names (followed one more
//! level: an accelerate config naming its DeepSpeed file). A file that no run reaches is a run of
//! its own. Paths are resolved against the launcher's folder, its parents up to the repository
//! root, and the working directory; a config or script that was not linted is read for context
//! (never reported on). Every value keeps where it came from, so messages can give the chain:
//! "8 ranks from `deepspeed --num_gpus 8` at launch.sh:3".

use crate::config::{self, Key, Node, Value};
use crate::context::{Defaults, Located, TrainingContext};
use crate::expr::Role;
use crate::facts::{Arg, Binding, Facts, Framework, InlineKind, Invocation};
use crate::lint::Unit;
use crate::source::{display_path, Language, SourceFile};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files larger than this are not read for context.
const MAX_CONTEXT_FILE: u64 = 2 * 1024 * 1024;
/// How many parent folders of a launcher are tried for a relative path.
const MAX_PARENTS: usize = 4;

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

/// What rules see of the project around one file.
#[derive(Debug, Clone, Default)]
pub struct ProjectView {
    pub config_uses: Vec<ConfigUse>,
    pub launches: Vec<LaunchView>,
    pub memory: Vec<MemoryCase>,
    /// `world-size` from the memlint configuration.
    pub world_setting: Option<u32>,
}

impl ProjectView {
    pub fn uses_of(&self, config: ConfigRef) -> impl Iterator<Item = &Arc<RunInfo>> {
        self.config_uses
            .iter()
            .filter(move |u| u.config == config)
            .map(|u| &u.run)
    }
}

// ---- files known to the join ------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fid {
    Unit(usize),
    Extra(usize),
}

struct Extra {
    file: SourceFile,
    facts: Facts,
    abs: PathBuf,
}

struct Files<'u> {
    units: &'u [Unit],
    extra: Vec<Extra>,
    index: HashMap<PathBuf, Fid>,
    /// Paths already tried and found unreadable.
    missing: std::collections::HashSet<PathBuf>,
    cwd: PathBuf,
}

impl<'u> Files<'u> {
    fn new(units: &'u [Unit], cwd: &Path) -> Self {
        let index = units
            .iter()
            .enumerate()
            .map(|(i, u)| (u.abs.clone(), Fid::Unit(i)))
            .collect();
        Files {
            units,
            extra: Vec::new(),
            index,
            missing: Default::default(),
            cwd: cwd.to_path_buf(),
        }
    }

    fn file(&self, f: Fid) -> &SourceFile {
        match f {
            Fid::Unit(i) => &self.units[i].file,
            Fid::Extra(i) => &self.extra[i].file,
        }
    }

    fn facts(&self, f: Fid) -> &Facts {
        match f {
            Fid::Unit(i) => &self.units[i].facts,
            Fid::Extra(i) => &self.extra[i].facts,
        }
    }

    fn abs(&self, f: Fid) -> &Path {
        match f {
            Fid::Unit(i) => &self.units[i].abs,
            Fid::Extra(i) => &self.extra[i].abs,
        }
    }

    fn config(&self, f: Fid, c: ConfigRef) -> Option<&Node> {
        let facts = self.facts(f);
        match c {
            ConfigRef::Root(i) => facts.config.as_ref().and_then(|d| d.roots.get(i)),
            ConfigRef::Inline(i) => facts.inline_configs.get(i).map(|c| &c.root),
        }
    }

    fn configs_of(&self, f: Fid) -> Vec<ConfigRef> {
        let facts = self.facts(f);
        let roots = facts.config.as_ref().map_or(0, |d| d.roots.len());
        (0..roots)
            .map(ConfigRef::Root)
            .chain((0..facts.inline_configs.len()).map(ConfigRef::Inline))
            .collect()
    }

    fn site(&self, f: Fid, offset: usize) -> String {
        let file = self.file(f);
        format!("{}:{}", file.display, file.position(offset).row)
    }

    /// A linted file, or one read now for context.
    fn get(&mut self, path: &Path) -> Option<Fid> {
        let path = normalize(path);
        if let Some(&f) = self.index.get(&path) {
            return Some(f);
        }
        if self.missing.contains(&path) {
            return None;
        }
        let loaded = load_for_context(&path, &self.cwd);
        match loaded {
            Some((file, facts)) => {
                self.extra.push(Extra {
                    file,
                    facts,
                    abs: path.clone(),
                });
                let f = Fid::Extra(self.extra.len() - 1);
                self.index.insert(path, f);
                Some(f)
            }
            None => {
                self.missing.insert(path);
                None
            }
        }
    }

    /// Resolve a path written in `from`: against its folder and parents (up to the repository
    /// root), then the working directory.
    fn resolve(&mut self, written: &str, from: Fid) -> Option<Fid> {
        let written = written.trim_matches(['"', '\'']);
        if written.is_empty() || written.contains(['$', '`', '*', '?', '~']) {
            return None;
        }
        let p = Path::new(written);
        if p.is_absolute() {
            // Only a linted file: absolute paths name the machine the script runs on.
            return self.index.get(&normalize(p)).copied();
        }
        let mut bases: Vec<PathBuf> = Vec::new();
        let mut dir = self.abs(from).parent().map(Path::to_path_buf);
        for _ in 0..=MAX_PARENTS {
            let Some(d) = dir else { break };
            let root = d.join(".git").exists();
            bases.push(d.clone());
            if root {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        bases.push(self.cwd.clone());
        for b in bases {
            if let Some(f) = self.get(&b.join(p)) {
                return Some(f);
            }
        }
        None
    }
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn load_for_context(path: &Path, cwd: &Path) -> Option<(SourceFile, Facts)> {
    let language = Language::from_path(path)?;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_CONTEXT_FILE {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes.contains(&0) {
        return None;
    }
    let text = String::from_utf8(bytes).ok()?;
    let file = SourceFile::new(path.to_path_buf(), display_path(path, cwd), language, text);
    let facts = crate::lint::analyse(&file).ok()?;
    Some((file, facts))
}

// ---- runs -------------------------------------------------------------------------------------

struct Run {
    /// The file the run starts from (the launcher or the recipe), and the command in it.
    origin: Fid,
    invocation: Option<usize>,
    recipe: Option<ConfigRef>,
    script: Option<Fid>,
    /// Every config document in the run.
    configs: Vec<(Fid, ConfigRef)>,
    /// Configs named on the command line, with the word that names them.
    named: Vec<(Fid, ConfigRef, Range<usize>)>,
    flags: Node,
    via: Vec<(Range<usize>, Binding)>,
    info: Arc<RunInfo>,
}

impl Run {
    fn members(&self) -> Vec<Fid> {
        let mut m = vec![self.origin];
        m.extend(self.script);
        for (f, _) in &self.configs {
            if !m.contains(f) {
                m.push(*f);
            }
        }
        m
    }
}

/// Join the files of one lint run. Returns, per unit, its evidence joined with its launchers'
/// and configs' (for the training context), and the project view its rules read.
/// Each unit's evidence joined with its runs', each unit's view of the project, and the files
/// outside the units that runs reached (read for context, or tried and not readable).
pub fn join(units: &[Unit], cwd: &Path, defaults: &[Defaults]) -> Joined {
    let mut files = Files::new(units, cwd);
    let mut runs: Vec<Run> = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        let f = Fid::Unit(u);
        for k in 0..unit.facts.invocations.len() {
            if let Some(run) = launch_run(&mut files, f, k) {
                runs.push(run);
            }
        }
    }
    // Recipes that name a DeepSpeed config and that no command reaches.
    let reached: std::collections::HashSet<Fid> = runs.iter().flat_map(Run::members).collect();
    for u in 0..units.len() {
        let f = Fid::Unit(u);
        if reached.contains(&f) {
            continue;
        }
        for c in files.configs_of(f) {
            if let Some(run) = recipe_run(&mut files, f, c) {
                runs.push(run);
            }
        }
    }
    let reached: std::collections::HashSet<Fid> = runs.iter().flat_map(Run::members).collect();
    for u in 0..units.len() {
        let f = Fid::Unit(u);
        if !reached.contains(&f) {
            runs.push(standalone_run(&mut files, f));
        }
    }

    let own: Vec<Located> = units
        .iter()
        .map(|u| Located::from_file(&u.file, &u.facts))
        .collect();
    let mut joined = own.clone();
    let mut views: Vec<ProjectView> = units
        .iter()
        .map(|u| ProjectView {
            world_setting: u.settings.options.world_size,
            ..ProjectView::default()
        })
        .collect();
    for run in &runs {
        // The script's context: the launcher's evidence (`--optim adamw`) and the configs'.
        if let (Some(Fid::Unit(s)), Some(_)) = (run.script, run.invocation) {
            if Fid::Unit(s) != run.origin {
                joined[s].join(&located(&files, run.origin, None));
                for (f, c) in &run.configs {
                    if *f != run.script.unwrap_or(run.origin) {
                        joined[s].join(&located(&files, *f, Some(*c)));
                    }
                }
            }
        }
        for (f, c) in &run.configs {
            if let Fid::Unit(u) = f {
                views[*u].config_uses.push(ConfigUse {
                    config: *c,
                    run: run.info.clone(),
                });
            }
        }
        if let Fid::Unit(u) = run.origin {
            if run.invocation.is_some() || run.recipe.is_some() {
                let external = run
                    .named
                    .iter()
                    .filter(|(f, _, _)| matches!(f, Fid::Extra(_)))
                    .filter_map(|(f, c, at)| {
                        Some(ExternalConfig {
                            display: files.file(*f).display.clone(),
                            root: files.config(*f, *c)?.clone(),
                            named_at: at.clone(),
                        })
                    })
                    .collect();
                let span = match (run.invocation, run.recipe) {
                    (Some(k), _) => units[u].facts.invocations[k].span.clone(),
                    (_, Some(c)) => files.config(run.origin, c).map_or(0..0, |n| n.span.clone()),
                    _ => 0..0,
                };
                views[u].launches.push(LaunchView {
                    span,
                    run: run.info.clone(),
                    flags: run.flags.clone(),
                    via: run.via.clone(),
                    external,
                    recipe: run.recipe.is_some(),
                });
            }
        }
        if let Some((u, case)) = memory_case(&files, run, defaults) {
            views[u].memory.push(case);
        }
    }
    let mut outside: Vec<PathBuf> = files
        .extra
        .iter()
        .map(|e| e.abs.clone())
        .chain(files.missing.iter().cloned())
        .collect();
    outside.sort();
    Joined {
        located: joined,
        views,
        outside,
    }
}

pub struct Joined {
    pub located: Vec<Located>,
    pub views: Vec<ProjectView>,
    pub outside: Vec<PathBuf>,
}

/// The evidence of one file, or of one of its configs.
fn located(files: &Files, f: Fid, config: Option<ConfigRef>) -> Located {
    let file = files.file(f);
    let facts = files.facts(f);
    match config {
        Some(ConfigRef::Inline(i)) => {
            let Some(c) = facts.inline_configs.get(i) else {
                return Located::default();
            };
            let doc = config::ConfigDoc {
                roots: vec![c.root.clone()],
            };
            let evidence = config::evidence(&doc);
            let sites = evidence
                .optimizers
                .iter()
                .map(|m| format!("{}:{}", file.display, file.position(m.span.start).row))
                .collect();
            Located {
                evidence,
                optimizer_sites: sites,
            }
        }
        _ => Located::from_file(file, facts),
    }
}

/// Extensions of files a flag may name as a config.
fn is_config_path(v: &str) -> bool {
    let l = v.to_ascii_lowercase();
    [".json", ".yaml", ".yml", ".toml"]
        .iter()
        .any(|e| l.ends_with(e))
}

/// Whether a flag names a config (rather than data: `--data_path alpaca.json`).
fn is_config_flag(flag: &str) -> bool {
    let k = flag.trim_start_matches('-').to_ascii_lowercase();
    ["config", "deepspeed", "cfg", "recipe", "ds_"]
        .iter()
        .any(|w| k.contains(w))
}

/// Where in a run's command each part is.
struct Parsed {
    /// Launcher options (before the script or module), key without dashes → value word.
    options: Vec<(String, Option<Arg>, Arg)>,
    /// The script's own options.
    flags: Vec<(String, Option<Arg>, Arg)>,
    /// Positional words after the script (`train.yaml` for `llamafactory-cli train x.yaml`).
    positional: Vec<Arg>,
    /// `python -m torch.distributed.run` and friends: the effective launcher.
    kind: String,
}

fn key_of(word: &str) -> String {
    word.trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_")
}

/// Split `--k v`, `--k=v` and bare `--flag` words. A value is the next word unless it starts with
/// `-`; a word ending in `.py` is never taken as a value (it is the script).
fn options(words: &[Arg]) -> Vec<(String, Option<Arg>, Arg)> {
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

fn parse_invocation(inv: &Invocation) -> Parsed {
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

fn flags_node(
    flags: &[(String, Option<Arg>, Arg)],
    span: Range<usize>,
) -> (Node, Vec<(Range<usize>, Binding)>) {
    let mut entries: Vec<(Key, Node)> = Vec::new();
    let mut via = Vec::new();
    for (k, v, word) in flags {
        let (value, vspan) = match v {
            Some(a) if a.known => (config::scalar(&a.value, false), a.span.clone()),
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

fn launch_run(files: &mut Files, origin: Fid, k: usize) -> Option<Run> {
    let inv = files.facts(origin).invocations.get(k)?.clone();
    let parsed = parse_invocation(&inv);
    let script = inv.script.as_deref().and_then(|s| files.resolve(s, origin));
    let mut configs: Vec<(Fid, ConfigRef)> = Vec::new();
    let mut named: Vec<(Fid, ConfigRef, Range<usize>)> = Vec::new();
    let mut names: Vec<(String, Range<usize>)> = Vec::new();
    for (key, value, word) in parsed.options.iter().chain(parsed.flags.iter()) {
        if let Some(v) = value {
            let at = word.span.start..v.span.end.max(word.span.end);
            if is_config_flag(key) && is_config_path(&v.value) {
                names.push((v.value.clone(), at));
            } else if inv.launcher == "tune" && key == "config" {
                // `tune run ... --config llama3/8B_full` names `llama3/8B_full.yaml`.
                names.push((format!("{}.yaml", v.value), at));
            }
        }
    }
    for p in &parsed.positional {
        if is_config_path(&p.value) {
            names.push((p.value.clone(), p.span.clone()));
        }
    }
    for (name, at) in names {
        for (f, c) in find_config(files, origin, &name) {
            if !configs.contains(&(f, c)) {
                configs.push((f, c));
                named.push((f, c, at.clone()));
            }
        }
    }
    if let Some(s) = script {
        for c in files.configs_of(s) {
            if matches!(c, ConfigRef::Inline(_)) {
                configs.push((s, c));
            }
        }
    }
    follow_nested(files, &mut configs, origin);
    let (flags, via) = flags_node(&parsed.flags, inv.span.clone());
    let world = world_of(files, origin, &inv, &parsed, &configs, &flags);
    // accelerate with a DeepSpeed plugin config hands the Trainer a DeepSpeed config of its own.
    let accelerate_ds = parsed.kind == "accelerate"
        && configs.iter().any(|(f, c)| {
            files
                .config(*f, *c)
                .is_some_and(|r| accelerate_deepspeed(r).is_some())
        });
    let trainer = trainer_args(files, origin, &flags, script, false, accelerate_ds);
    let command = command_text(&inv);
    let info = RunInfo {
        at: files.site(origin, inv.span.start),
        command,
        world,
        auto_find_batch_size: flags.get("auto_find_batch_size").is_some(),
        trainer,
    };
    Some(Run {
        origin,
        invocation: Some(k),
        recipe: None,
        script,
        configs,
        named,
        flags,
        via,
        info: Arc::new(info),
    })
}

/// A config named by a command: a heredoc of the same script that writes that path, or a file.
fn find_config(files: &mut Files, origin: Fid, name: &str) -> Vec<(Fid, ConfigRef)> {
    let clean = |p: &str| {
        p.trim_matches(['"', '\''])
            .trim_start_matches("./")
            .to_string()
    };
    let want = clean(name);
    let facts = files.facts(origin);
    let inline: Vec<(Fid, ConfigRef)> = facts
        .inline_configs
        .iter()
        .enumerate()
        .filter(
            |(_, c)| matches!(&c.kind, InlineKind::Heredoc { path: Some(p) } if clean(p) == want),
        )
        .map(|(i, _)| (origin, ConfigRef::Inline(i)))
        .collect();
    if !inline.is_empty() {
        return inline;
    }
    match files.resolve(name, origin) {
        Some(f) => files
            .configs_of(f)
            .into_iter()
            .filter(|c| matches!(c, ConfigRef::Root(_)))
            .map(|c| (f, c))
            .collect(),
        None => Vec::new(),
    }
}

/// Configs that name another config: accelerate's `deepspeed_config_file`, a recipe's
/// `deepspeed:`. One level is followed.
fn follow_nested(files: &mut Files, configs: &mut Vec<(Fid, ConfigRef)>, launcher: Fid) {
    let current = configs.clone();
    for (f, c) in current {
        let Some(root) = files.config(f, c) else {
            continue;
        };
        let mut named = Vec::new();
        nested_names(root, "", &mut named, 0);
        for name in named {
            let found = {
                let mut r = find_in(files, f, &name);
                if r.is_empty() {
                    r = find_in(files, launcher, &name);
                }
                r
            };
            for fc in found {
                if !configs.contains(&fc) {
                    configs.push(fc);
                }
            }
        }
    }
}

fn find_in(files: &mut Files, from: Fid, name: &str) -> Vec<(Fid, ConfigRef)> {
    match files.resolve(name, from) {
        Some(f) => files
            .configs_of(f)
            .into_iter()
            .filter(|c| matches!(c, ConfigRef::Root(_)))
            .map(|c| (f, c))
            .collect(),
        None => Vec::new(),
    }
}

fn nested_names(node: &Node, parent: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 3 {
        return;
    }
    if let Value::Map(entries) = &node.value {
        for (k, v) in entries {
            let key = k.name.to_ascii_lowercase();
            if let Some(s) = v.as_str() {
                let names_ds = matches!(
                    key.as_str(),
                    "deepspeed" | "deepspeed_config" | "deepspeed_config_file" | "ds_config"
                ) || (key == "config_file" && parent.contains("deepspeed"))
                    || (key == "config_file" && parent == "dist_config");
                if names_ds && is_config_path(s) {
                    out.push(s.to_string());
                }
            }
            nested_names(v, &key, out, depth + 1);
        }
    }
}

fn recipe_run(files: &mut Files, origin: Fid, c: ConfigRef) -> Option<Run> {
    let root = files.config(origin, c)?.clone();
    let mut named_paths = Vec::new();
    nested_names(&root, "", &mut named_paths, 0);
    if named_paths.is_empty() {
        return None;
    }
    let mut configs = vec![(origin, c)];
    follow_nested(files, &mut configs, origin);
    let named: Vec<(Fid, ConfigRef, Range<usize>)> = configs
        .iter()
        .skip(1)
        .map(|(f, cc)| (*f, *cc, root.span.start..root.span.start))
        .collect();
    let mut flags = root.clone();
    // axolotl's micro_batch_size is the Trainer's per-device batch size.
    if let Value::Map(entries) = &mut flags.value {
        let axolotl = entries.iter().any(|(k, _)| k.name == "base_model")
            && entries.iter().any(|(k, _)| k.name == "micro_batch_size");
        if axolotl {
            for (k, _) in entries.iter_mut() {
                if k.name == "micro_batch_size" {
                    k.name = "per_device_train_batch_size".into();
                }
            }
        }
    }
    let world = accelerate_world(files, origin, &root);
    let trainer = trainer_args(files, origin, &flags, None, true, false);
    let info = RunInfo {
        at: files.site(origin, root.span.start),
        command: "the recipe".into(),
        world,
        auto_find_batch_size: flags.get("auto_find_batch_size").is_some(),
        trainer,
    };
    Some(Run {
        origin,
        invocation: None,
        recipe: Some(c),
        script: None,
        configs,
        named,
        flags,
        via: Vec::new(),
        info: Arc::new(info),
    })
}

fn standalone_run(files: &mut Files, origin: Fid) -> Run {
    let mut configs: Vec<(Fid, ConfigRef)> = files
        .configs_of(origin)
        .into_iter()
        .map(|c| (origin, c))
        .collect();
    follow_nested(files, &mut configs, origin);
    let world = files
        .config(origin, ConfigRef::Root(0))
        .cloned()
        .and_then(|root| accelerate_world(files, origin, &root));
    Run {
        origin,
        invocation: None,
        recipe: None,
        script: None,
        configs,
        named: Vec::new(),
        flags: Node {
            value: Value::Map(Vec::new()),
            span: 0..0,
        },
        via: Vec::new(),
        info: Arc::new(RunInfo {
            at: files.file(origin).display.clone(),
            command: String::new(),
            world,
            trainer: None,
            auto_find_batch_size: false,
        }),
    }
}

fn command_text(inv: &Invocation) -> String {
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

// ---- world size -------------------------------------------------------------------------------

/// A launcher option's value as a positive integer, with how it reads.
struct IntOpt {
    value: u64,
    written: String,
    via: Vec<Binding>,
}

fn int_option(opts: &[(String, Option<Arg>, Arg)], keys: &[&str]) -> Option<Result<IntOpt, ()>> {
    let (k, v, w) = opts
        .iter()
        .rev()
        .find(|(k, _, _)| keys.contains(&k.as_str()))?;
    let Some(v) = v else { return Some(Err(())) };
    if !v.known {
        return Some(Err(()));
    }
    match v.value.trim().parse::<u64>() {
        Ok(n) if n > 0 => Some(Ok(IntOpt {
            value: n,
            written: if w.value.contains('=') {
                w.value.clone()
            } else {
                format!(
                    "--{} {}",
                    k.replace('_', if w.value.contains('_') { "_" } else { "-" }),
                    v.value
                )
            },
            via: v.via.clone(),
        })),
        _ => Some(Err(())),
    }
}

fn via_text(files: &Files, f: Fid, via: &[Binding]) -> String {
    let parts: Vec<String> = via
        .iter()
        .filter(|b| !b.value.contains(char::is_whitespace))
        .map(|b| {
            let at = files.site(f, b.span.start);
            if b.default {
                format!("{} defaults to {} at {at}", b.name, b.value)
            } else {
                format!("{}={} at {at}", b.name, b.value)
            }
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(", {}", parts.join(", "))
    }
}

fn world_of(
    files: &Files,
    origin: Fid,
    inv: &Invocation,
    p: &Parsed,
    configs: &[(Fid, ConfigRef)],
    flags: &Node,
) -> Option<World> {
    let at = files.site(origin, inv.span.start);
    let launcher = p.kind.as_str();
    let o = &p.options;
    let (processes, why) = match launcher {
        "deepspeed" => {
            let gpus = int_option(o, &["num_gpus", "num_gpus_per_node"])?.ok()?;
            let nodes = match int_option(o, &["num_nodes"]) {
                Some(r) => Some(r.ok()?),
                None => None,
            };
            if nodes.is_none()
                && o.iter().any(|(k, _, _)| {
                    matches!(
                        k.as_str(),
                        "hostfile" | "h" | "include" | "i" | "exclude" | "e"
                    )
                })
            {
                return None;
            }
            let n = nodes.as_ref().map_or(1, |n| n.value);
            let mut written = gpus.written.clone();
            let mut via = gpus.via.clone();
            if let Some(nd) = &nodes {
                written = format!("{} {written}", nd.written);
                via.extend(nd.via.clone());
            }
            (
                gpus.value.checked_mul(n)?,
                format!(
                    "`deepspeed {written}` at {at}{}",
                    via_text(files, origin, &via)
                ),
            )
        }
        "torchrun" => {
            let per = match int_option(o, &["nproc_per_node"]) {
                Some(r) => r.ok()?,
                None => IntOpt {
                    value: 1,
                    written: "(no --nproc_per_node: 1 per node)".into(),
                    via: Vec::new(),
                },
            };
            let nodes = match o.iter().rev().find(|(k, _, _)| k == "nnodes") {
                Some((_, Some(v), _)) if v.value.contains(':') => {
                    let (a, b) = v.value.split_once(':')?;
                    if a != b {
                        return None; // elastic: the node count is decided at run time
                    }
                    Some(IntOpt {
                        value: a.parse().ok()?,
                        written: format!("--nnodes {}", v.value),
                        via: v.via.clone(),
                    })
                }
                Some(_) => Some(int_option(o, &["nnodes"])?.ok()?),
                None => None,
            };
            let n = nodes.as_ref().map_or(1, |n| n.value);
            let mut written = per.written.clone();
            let mut via = per.via.clone();
            if let Some(nd) = &nodes {
                written = format!("{} {written}", nd.written);
                via.extend(nd.via.clone());
            }
            (
                per.value.checked_mul(n)?,
                format!(
                    "`torchrun {written}` at {at}{}",
                    via_text(files, origin, &via)
                ),
            )
        }
        "accelerate" => match int_option(o, &["num_processes"]) {
            Some(r) => {
                let n = r.ok()?;
                (
                    n.value,
                    format!(
                        "`accelerate launch {}` at {at}{}",
                        n.written,
                        via_text(files, origin, &n.via)
                    ),
                )
            }
            None => configs.iter().find_map(|(f, c)| {
                let root = files.config(*f, *c)?;
                accelerate_processes(files, *f, root)
            })?,
        },
        "mpirun" | "mpiexec" => {
            let n = int_option(o, &["np", "n"])?.ok()?;
            (n.value, format!("`{launcher} {}` at {at}", n.written))
        }
        _ => {
            // `srun python train.py`: one process per task.
            let srun = inv.wrappers.iter().find(|(w, _)| w == "srun");
            let (_, words) = srun?;
            let so = options(words);
            let sb = &files.facts(origin).sbatch;
            let from_sbatch = |key: &str| {
                sb.iter()
                    .rev()
                    .find(|(k, _, _)| k == key)
                    .and_then(|(_, v, s)| Some((v.parse::<u64>().ok()?, s.clone())))
            };
            if let Some(Ok(n)) = int_option(&so, &["ntasks", "n"]) {
                (n.value, format!("`srun {}` at {at}", n.written))
            } else {
                let nodes = match int_option(&so, &["nodes", "n_nodes"]) {
                    Some(r) => r.ok()?.value,
                    None => from_sbatch("nodes").map_or(1, |(v, _)| v),
                };
                let per = match int_option(&so, &["ntasks_per_node"]) {
                    Some(r) => r.ok()?.value,
                    None => from_sbatch("ntasks-per-node")?.0,
                };
                (
                    nodes.checked_mul(per)?,
                    format!("`srun` with {nodes} node(s) x {per} task(s) at {at} (#SBATCH)"),
                )
            }
        }
    };
    if processes == 0 {
        return None;
    }
    // Model parallelism divides the processes; the data-parallel degree is what batch sizes use.
    let mut divisor = 1u64;
    let mut parts = Vec::new();
    for keys in [
        &[
            "tensor_model_parallel_size",
            "tensor_parallel_size",
            "tp_size",
            "model_parallel_size",
        ][..],
        &[
            "pipeline_model_parallel_size",
            "pipeline_parallel_size",
            "pp_size",
            "pipe_parallel_size",
        ][..],
        &[
            "context_parallel_size",
            "ds_sequence_parallel_size",
            "sequence_parallel_size",
            "ulysses_degree",
        ][..],
    ] {
        let found = keys.iter().find_map(|k| flags.get(k).map(|n| (k, n)));
        if let Some((k, n)) = found {
            let v = n.as_number().filter(|v| *v >= 1.0 && v.fract() == 0.0)? as u64;
            if v > 1 {
                divisor = divisor.checked_mul(v)?;
                parts.push(format!("--{} {v}", k.replace('_', "-")));
            }
        }
    }
    // DeepSpeed's automatic tensor parallelism builds its own mesh: the data-parallel size is
    // not known from the launcher alone. (`sequence_parallel_size` in a DeepSpeed config is
    // applied where that config is checked.)
    for (f, c) in configs {
        let Some(root) = files.config(*f, *c) else {
            continue;
        };
        if root
            .get("tensor_parallel")
            .and_then(|t| t.get("autotp_size"))
            .is_some_and(|a| a.as_number() != Some(1.0) && a.as_number() != Some(0.0))
        {
            return None;
        }
    }
    if processes % divisor != 0 {
        return None;
    }
    let dp = processes / divisor;
    let why = if parts.is_empty() {
        format!("{processes} processes from {why}")
    } else {
        format!(
            "{processes} processes from {why}, divided by {} = {dp} data-parallel",
            parts.join(" x ")
        )
    };
    Some(World {
        processes,
        data_parallel: dp,
        why,
    })
}

/// An accelerate config file (`num_processes: 8`).
fn accelerate_world(files: &Files, f: Fid, root: &Node) -> Option<World> {
    let (v, source) = accelerate_processes(files, f, root)?;
    Some(World {
        processes: v,
        data_parallel: v,
        why: format!("{v} processes from {source}"),
    })
}

fn accelerate_processes(files: &Files, f: Fid, root: &Node) -> Option<(u64, String)> {
    let is_accelerate =
        root.get("compute_environment").is_some() || root.get("distributed_type").is_some();
    if !is_accelerate {
        return None;
    }
    let n = root.get("num_processes")?;
    let v = n.as_number().filter(|v| *v >= 1.0 && v.fract() == 0.0)? as u64;
    Some((
        v,
        format!("`num_processes: {v}` at {}", files.site(f, n.span.start)),
    ))
}

// ---- HF Trainer arguments ---------------------------------------------------------------------

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
fn trainer_args(
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

/// A number as a person writes it in a config: `4`, `0.5`, `2e-5`.
pub fn show_number(n: f64) -> String {
    if n != 0.0 && (n.abs() < 1e-3 || n.abs() >= 1e7) {
        format!("{n:e}")
    } else {
        crate::rules::fmt_num(n)
    }
}

// ---- memory -----------------------------------------------------------------------------------

/// Config keys and flags that state a parameter count.
const PARAM_KEYS: &[&str] = &[
    "n_params",
    "num_params",
    "num_parameters",
    "n_parameters",
    "param_count",
    "parameter_count",
    "model_params",
    "total_params",
    "num_model_params",
];

/// Config keys and flags that name a model.
pub const MODEL_KEYS: &[&str] = &[
    "model_name_or_path",
    "model_name",
    "base_model",
    "pretrained_model_name_or_path",
    "model_id",
    "model_path",
    "model",
];

/// A name that states a GPU's memory in GB: `gpu_memory_gb`, `GPU_MEM_GB`, `vram_gb`.
pub fn is_gpu_memory_name(name: &str) -> bool {
    let n = name
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_");
    let unit = n.split('_').any(|s| s == "gb" || s == "gib");
    let gpu = ["gpu", "vram", "device_mem", "hbm", "accelerator_mem"]
        .iter()
        .any(|w| n.contains(w));
    unit && gpu && !n.contains("per_sample") && !n.contains("free") && !n.contains("used")
}

/// The parameter count in a model name: `Llama-2-7b-hf` → 7e9, `opt-350m` → 3.5e8,
/// `torchtune.models.llama3_1.lora_llama3_1_8b` → 8e9. Mixture names (`8x7B`) are not read.
pub fn params_from_name(name: &str) -> Option<f64> {
    let lower = name.to_ascii_lowercase();
    let last = lower.rsplit('/').next().unwrap_or(&lower);
    // Mixture-of-experts names give active sizes (`Qwen1.5-MoE-A2.7B`) or expert products.
    let active = last.split(['-', '_']).any(|seg| {
        seg.len() > 1 && seg.starts_with('a') && seg[1..].starts_with(|c: char| c.is_ascii_digit())
    });
    if last.contains("moe") || active {
        return None;
    }
    let mut found = None;
    for seg in last.split(['-', '_', '.', ':']) {
        let (num, unit) = match seg.char_indices().last() {
            Some((i, c @ ('b' | 'm'))) => (&seg[..i], c),
            _ => continue,
        };
        if num.is_empty() || num.contains('x') {
            continue;
        }
        let Ok(v) = num.parse::<f64>() else { continue };
        if v <= 0.0 {
            continue;
        }
        let count = if unit == 'b' { v * 1e9 } else { v * 1e6 };
        if found.is_some() {
            return None; // two sizes in one name: not sure which
        }
        found = Some(count);
    }
    // Decimal sizes (`Qwen2.5-0.5B`) are split at the dot: read them whole.
    if found.is_none() || last.contains('.') {
        for w in last.split(['-', '_', '/', ':']) {
            if let Some(num) = w.strip_suffix('b') {
                if num.contains('.') {
                    if let Ok(v) = num.parse::<f64>() {
                        return Some(v * 1e9);
                    }
                }
            }
        }
    }
    found
}

fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{}B", crate::rules::fmt_num(v / 1e9))
    } else {
        format!("{}M", crate::rules::fmt_num(v / 1e6))
    }
}

struct Found {
    value: f64,
    why: String,
    /// The span in a linted file, to anchor a diagnostic.
    anchor: Option<(usize, Range<usize>)>,
    nominal: bool,
}

fn memory_case(files: &Files, run: &Run, defaults: &[Defaults]) -> Option<(usize, MemoryCase)> {
    // A script the run starts but that cannot be read may hold what changes the sum (LoRA).
    if let Some(k) = run.invocation {
        let inv = files.facts(run.origin).invocations.get(k)?;
        if inv.script.is_some() && run.script.is_none() {
            return None;
        }
    }
    // A config on its own says nothing of how many processes run it or how they shard
    // (torchtune's distributed recipes shard with FSDP without a key saying so).
    if run.invocation.is_none()
        && run.recipe.is_none()
        && matches!(
            files.file(run.origin).language,
            Language::Yaml | Language::Json | Language::Toml
        )
    {
        return None;
    }
    let members = run.members();
    let mut params: Vec<Found> = Vec::new();
    let mut gpus: Vec<Found> = Vec::new();
    let unit_of = |f: Fid| match f {
        Fid::Unit(u) => Some(u),
        Fid::Extra(_) => None,
    };
    for &f in &members {
        let facts = files.facts(f);
        for c in &facts.constants {
            let found = Found {
                value: c.value,
                why: format!("`{}` at {}", c.name, files.site(f, c.span.start)),
                anchor: unit_of(f).map(|u| (u, c.span.clone())),
                nominal: false,
            };
            match c.role {
                Role::ParamCount if c.value >= 1e6 => params.push(found),
                Role::Gpu if is_gpu_memory_name(&c.name) && c.value > 0.0 => gpus.push(found),
                _ => {}
            }
        }
    }
    let mut nodes: Vec<(Fid, &Node)> = run
        .configs
        .iter()
        .filter_map(|(f, c)| Some((*f, files.config(*f, *c)?)))
        .collect();
    nodes.push((run.origin, &run.flags));
    for (f, node) in nodes {
        scan_quantities(files, f, node, "", &mut params, &mut gpus, 0);
    }
    // One value each, or nothing is asserted.
    let distinct = |v: &[Found]| {
        let first = v.first()?;
        v.iter()
            .all(|x| (x.value - first.value).abs() <= 1e-9 * first.value.abs())
            .then_some(first.value)
    };
    let p = distinct(&params)?;
    let anchor_of = |v: &[Found]| v.iter().find_map(|x| x.anchor.clone());
    let (unit, anchor) = anchor_of(&params)?;
    let gpu = match distinct(&gpus) {
        Some(g) => Quantity {
            value: g,
            why: gpus
                .iter()
                .map(|x| x.why.clone())
                .next()
                .unwrap_or_default(),
        },
        None if gpus.is_empty() => {
            let configured = files.units[unit].settings.options.gpu_memory_gb?;
            Quantity {
                value: configured,
                why: "`gpu-memory-gb` in the memlint configuration".into(),
            }
        }
        None => return None,
    };
    let param_site = params
        .iter()
        .find(|x| x.anchor.as_ref().is_some_and(|(u, _)| *u == unit))
        .or(params.first())?;
    // The run's evidence, joined.
    let mut located = Located::default();
    let mut sites = Vec::new();
    for &f in &members {
        let l = located_all(files, f);
        for m in &l.evidence.precision {
            sites.push(files.site(f, m.span.start).to_string());
        }
        located.join(&l);
    }
    let training =
        TrainingContext::build(&located, defaults.get(unit).unwrap_or(&Defaults::default()));
    let mut deepspeed = None;
    let mut fsdp = false;
    for (f, c) in &run.configs {
        let Some(root) = files.config(*f, *c) else {
            continue;
        };
        if let Some(m) = ds_memory(files, *f, root) {
            deepspeed = Some(m);
        }
        if let Value::Map(entries) = &root.value {
            fsdp |= entries.iter().any(|(k, v)| {
                k.name.starts_with("fsdp") && !matches!(v.value, Value::Null | Value::Bool(false))
                    || k.name.starts_with("fsdp_")
            });
        }
    }
    if let Value::Map(entries) = &run.flags.value {
        fsdp |= entries.iter().any(|(k, _)| k.name.starts_with("fsdp"));
    }
    // torchtune's distributed recipes shard with FSDP.
    if let Some(inv) = run
        .invocation
        .and_then(|k| files.facts(run.origin).invocations.get(k))
    {
        fsdp |= inv.launcher == "tune"
            && inv
                .args
                .iter()
                .any(|a| !a.value.starts_with('-') && a.value.contains("distributed"));
    }
    let mut off_gpu = located
        .evidence
        .optimizers
        .iter()
        .find(|m| m.value.name.starts_with("paged"))
        .map(|m| format!("paged optimizer `{}`", m.value.name));
    for (f, c) in &run.configs {
        let in_bwd = files
            .config(*f, *c)
            .and_then(|r| r.get("optimizer_in_bwd"))
            .is_some_and(|v| v.value == Value::Bool(true));
        if in_bwd {
            off_gpu = Some("`optimizer_in_bwd`".into());
        }
    }
    // Flags and keys that train a fraction of the weights, quantize the base, or do not train.
    let mut maps: Vec<&Node> = run
        .configs
        .iter()
        .filter_map(|(f, c)| files.config(*f, *c))
        .collect();
    maps.push(&run.flags);
    for m in maps {
        if let Some(why) = not_full_training(m) {
            off_gpu = Some(why);
        }
    }
    Some((
        unit,
        MemoryCase {
            anchor,
            params: Quantity {
                value: p,
                why: param_site.why.clone(),
            },
            nominal: param_site.nominal,
            gpu,
            training,
            precision_sites: sites,
            deepspeed,
            world: run.info.world.clone(),
            fsdp,
            off_gpu,
        },
    ))
}

/// Keys (flags or config keys) that mean not every weight is trained with full optimizer state:
/// P-tuning and prompt tuning, a quantized base, evaluation-only runs.
fn not_full_training(map: &Node) -> Option<String> {
    let Value::Map(entries) = &map.value else {
        return None;
    };
    let on = |v: &Node| {
        !matches!(v.value, Value::Null | Value::Bool(false)) && v.as_number() != Some(0.0)
    };
    for (k, v) in entries {
        let key = k.name.to_ascii_lowercase();
        let partial = matches!(
            key.as_str(),
            "pre_seq_len"
                | "prefix_tuning"
                | "prompt_tuning"
                | "p_tuning"
                | "ptuning"
                | "num_virtual_tokens"
                | "quantization_bit"
                | "load_in_4bit"
                | "load_in_8bit"
                | "bits"
                | "double_quant"
        );
        if partial && on(v) {
            return Some(format!("`{}`", k.name));
        }
    }
    // HF example scripts: `--do_eval` / `--do_predict` without `--do_train` do not train.
    let has = |k: &str| entries.iter().any(|(e, v)| e.name == k && on(v));
    if (has("do_predict") || has("do_eval")) && !has("do_train") {
        return Some("evaluation only".into());
    }
    None
}

/// All evidence of a file: its own, and that of its inline configs.
fn located_all(files: &Files, f: Fid) -> Located {
    let mut l = Located::from_file(files.file(f), files.facts(f));
    for i in 0..files.facts(f).inline_configs.len() {
        l.join(&located(files, f, Some(ConfigRef::Inline(i))));
    }
    l
}

fn scan_quantities(
    files: &Files,
    f: Fid,
    node: &Node,
    parent: &str,
    params: &mut Vec<Found>,
    gpus: &mut Vec<Found>,
    depth: usize,
) {
    if depth > 6 {
        return;
    }
    let Value::Map(entries) = &node.value else {
        return;
    };
    let unit = match f {
        Fid::Unit(u) => Some(u),
        Fid::Extra(_) => None,
    };
    for (k, v) in entries {
        let key = k.name.to_ascii_lowercase().replace('-', "_");
        let at = files.site(f, v.span.start);
        match &v.value {
            Value::Number(n) if PARAM_KEYS.contains(&key.as_str()) && *n >= 1e6 => {
                params.push(Found {
                    value: *n,
                    why: format!("`{}` at {at}", k.name),
                    anchor: unit.map(|u| (u, v.span.clone())),
                    nominal: false,
                })
            }
            Value::Number(n) if is_gpu_memory_name(&key) && *n > 0.0 => gpus.push(Found {
                value: *n,
                why: format!("`{}` at {at}", k.name),
                anchor: unit.map(|u| (u, v.span.clone())),
                nominal: false,
            }),
            Value::String(s)
                if MODEL_KEYS.contains(&key.as_str())
                    || (key == "_component_" && parent == "model") =>
            {
                if let Some(n) = params_from_name(s) {
                    params.push(Found {
                        value: n,
                        why: format!("{} parameters in the name `{s}` at {at}", fmt_count(n)),
                        anchor: unit.map(|u| (u, v.span.clone())),
                        nominal: true,
                    });
                }
            }
            _ => {}
        }
        scan_quantities(files, f, v, &key, params, gpus, depth + 1);
    }
}

fn ds_memory(files: &Files, f: Fid, root: &Node) -> Option<DeepSpeedMemory> {
    let zero = root.get("zero_optimization");
    let looks_ds = zero.is_some()
        || root.get("train_micro_batch_size_per_gpu").is_some()
        || root.get("train_batch_size").is_some();
    if !looks_ds {
        return None;
    }
    let stage = match zero.and_then(|z| z.get("stage")) {
        Some(s) => Some(
            s.as_number()
                .filter(|v| (0.0..=3.0).contains(v) && v.fract() == 0.0)? as u8,
        ),
        None => Some(0),
    };
    let offload = zero.is_some_and(|z| {
        [
            "offload_optimizer",
            "offload_param",
            "cpu_offload",
            "cpu_offload_params",
        ]
        .iter()
        .any(|k| match z.get(k) {
            Some(n) => match &n.value {
                Value::Map(_) => n
                    .get("device")
                    .and_then(Node::scalar_text)
                    .is_none_or(|d| !d.eq_ignore_ascii_case("none")),
                Value::Bool(b) => *b,
                Value::Null => false,
                _ => true,
            },
            None => false,
        })
    });
    let enabled = |k: &str| {
        root.get(k)
            .and_then(|n| n.get("enabled"))
            .is_some_and(|e| e.value == Value::Bool(true))
    };
    let mixed = enabled("bf16") || enabled("fp16") || enabled("bfloat16");
    Some(DeepSpeedMemory {
        stage,
        offload,
        mixed,
        why: files.site(f, root.span.start),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_model_names() {
        let cases: &[(&str, Option<f64>)] = &[
            ("meta-llama/Llama-2-7b-hf", Some(7e9)),
            ("meta-llama/Llama-3.1-8B", Some(8e9)),
            ("Qwen/Qwen2.5-0.5B-Instruct", Some(0.5e9)),
            ("EleutherAI/pythia-6.9b", Some(6.9e9)),
            ("facebook/opt-350m", Some(350e6)),
            ("torchtune.models.llama3_1.lora_llama3_1_70b", Some(70e9)),
            ("mistralai/Mistral-7B-v0.1", Some(7e9)),
            ("mistralai/Mixtral-8x7B-v0.1", None),
            ("Qwen/Qwen1.5-MoE-A2.7B", None),
            ("Qwen/Qwen3-30B-A3B", None),
            ("bigscience/bloom-7b1", None),
            ("bert-base-uncased", None),
            ("gpt2-xl", None),
        ];
        for (name, want) in cases {
            assert_eq!(params_from_name(name), *want, "{name}");
        }
    }

    #[test]
    fn gpu_memory_names() {
        assert!(is_gpu_memory_name("GPU_MEMORY_GB"));
        assert!(is_gpu_memory_name("--gpu-mem-gib"));
        assert!(!is_gpu_memory_name("gpu_memory_utilization"));
        assert!(!is_gpu_memory_name("free_gpu_gb"));
        assert!(!is_gpu_memory_name("max_memory_gb"));
    }
}
