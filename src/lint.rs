//! The pipeline: read + classify → prefilter → parse → facts (per file, in parallel) → project
//! context (joined across files) → rules → suppression → sorted results.

use crate::config;
use crate::context::{Defaults, TrainingContext};
use crate::diagnostic::Diagnostic;
use crate::discover::{discover, io_message, Candidate, PathError};
use crate::expr::imports::Found;
use crate::facts::Facts;
use crate::frontend::{python, shell};
use crate::prefilter::Needs;
use crate::project::helpers::{self, Looked};
use crate::project::pins;
use crate::project::{self, ContextFile, ContextFiles, Join, Unit};
use crate::rules::{Checker, INVALID_CONFIG, RULES, UNUSED_SUPPRESSION};
use crate::settings::{absolute, Resolver, Settings};
use crate::source::{display_path, Language, SourceFile};
use crate::suppress;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
pub struct LintOptions {
    /// Skip files that no rule can use before parsing them (never changes a result).
    pub prefilter: bool,
    pub force_exclude: bool,
}

impl Default for LintOptions {
    fn default() -> Self {
        LintOptions {
            prefilter: true,
            force_exclude: false,
        }
    }
}

/// A file that was read but could not be analysed (not UTF-8, binary, a broken config).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// One linted file, read and lowered, with the settings that apply to it.
struct Linted {
    unit: Unit,
    settings: Arc<Settings>,
    /// Memory arithmetic left to value until the helpers it imports are found.
    deferred: Option<python::Deferred>,
}

pub struct FileResult {
    pub file: Arc<SourceFile>,
    pub diagnostics: Vec<Diagnostic>,
    pub settings: Arc<Settings>,
    /// The context rules saw, kept so fixes can re-check the file alone.
    pub training: TrainingContext,
    pub syntax_error: bool,
}

#[derive(Default)]
pub struct Run {
    pub results: Vec<FileResult>,
    pub errors: Vec<PathError>,
    pub skipped: Vec<Skipped>,
    /// What the run noticed outside the files it lints (a config a run reaches that does not
    /// parse), for stderr.
    pub warnings: Vec<String>,
}

/// Texts that stand in for files on disk, by absolute path (an editor's unsaved buffers): a file
/// of the overlay is linted from its text, and read for context from it, whether or not it
/// exists on disk.
pub type Overlay = HashMap<PathBuf, String>;

pub fn lint(paths: &[PathBuf], resolver: &Resolver, opts: LintOptions) -> Run {
    lint_with(paths, resolver, opts, &Overlay::new())
}

/// [`lint`], with the files of `overlay` read from it instead of from disk. The paths that
/// the overlay holds are linted as given (they need not exist on disk); the others are
/// discovered as on the command line.
pub fn lint_with(
    paths: &[PathBuf],
    resolver: &Resolver,
    opts: LintOptions,
    overlay: &Overlay,
) -> Run {
    let (candidates, errors) = candidates_with(paths, resolver, opts, overlay);
    lint_candidates(candidates, errors, resolver, opts, overlay)
}

/// The files a run of `paths` reads, one per file however it was named, with the problems met
/// finding them: the files of `overlay` as given, the others discovered as on the command line.
/// A text of the overlay named `-` (standard input without a name) is read as Python.
pub fn candidates_with(
    paths: &[PathBuf],
    resolver: &Resolver,
    opts: LintOptions,
    overlay: &Overlay,
) -> (Vec<Candidate>, Vec<PathError>) {
    let cwd = crate::discover::cwd();
    let (held, on_disk): (Vec<&PathBuf>, Vec<&PathBuf>) = paths
        .iter()
        .partition(|p| overlay.contains_key(&absolute(p, &cwd)));
    let on_disk: Vec<PathBuf> = on_disk.into_iter().cloned().collect();
    let (mut candidates, errors) = if on_disk.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        discover(&on_disk, resolver, opts.force_exclude)
    };
    for p in held {
        let text = overlay.get(&absolute(p, &cwd)).map_or("", String::as_str);
        let first = text.as_bytes().split(|b| *b == b'\n').next().unwrap_or(b"");
        let language = if p.as_os_str() == "-" {
            Some(Language::Python)
        } else if p.extension().is_some() {
            Language::from_path(p)
        } else {
            Language::from_shebang(first)
        };
        if let Some(language) = language {
            candidates.push(Candidate {
                path: p.clone(),
                language,
                context: false,
            });
        }
    }
    // One candidate per file, however it was named.
    let mut keyed: Vec<(PathBuf, Candidate)> = candidates
        .into_iter()
        .map(|c| (absolute(&c.path, &cwd), c))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    let candidates: Vec<Candidate> = keyed.into_iter().map(|(_, c)| c).collect();
    (candidates, errors)
}

/// Lint `candidates` with the files at `around` (launchers and configs beside them) read for the
/// context they give, never reported on: a run's launcher and its config still reach a script
/// named alone.
pub fn lint_in_context(
    mut candidates: Vec<Candidate>,
    errors: Vec<PathError>,
    around: &[PathBuf],
    resolver: &Resolver,
    opts: LintOptions,
    overlay: &Overlay,
) -> Run {
    let cwd = crate::discover::cwd();
    let named: HashSet<PathBuf> = candidates.iter().map(|c| absolute(&c.path, &cwd)).collect();
    let around: Vec<PathBuf> = around
        .iter()
        .filter(|p| !named.contains(&absolute(p, &cwd)))
        .cloned()
        .collect();
    if !around.is_empty() {
        let (context, _) = candidates_with(&around, resolver, opts, overlay);
        candidates.extend(
            context
                .into_iter()
                .map(|c| Candidate { context: true, ..c }),
        );
    }
    lint_candidates(candidates, errors, resolver, opts, overlay)
}

/// Lint the files [`candidates_with`] found.
pub fn lint_candidates(
    candidates: Vec<Candidate>,
    errors: Vec<PathError>,
    resolver: &Resolver,
    opts: LintOptions,
    overlay: &Overlay,
) -> Run {
    let cwd = crate::discover::cwd();
    let mut got = Loading {
        units: Vec::new(),
        ruled_out: Vec::new(),
        errors,
        skipped: Vec::new(),
        invalid: Vec::new(),
        overlay,
    };
    let all: Vec<&Candidate> = candidates.iter().collect();
    let mut context = ContextFiles::default();
    got.load(&all, resolver, &cwd, opts, &mut context);
    let mut contexts = project_contexts(&got.units, &mut context, &cwd, overlay);
    // A script the prefilter ruled out but a run reaches may get the run's diagnostics (its
    // argparse defaults against the launcher's world size, a parameter count in its name): it
    // is analysed whole, and the runs joined again.
    let whole = LintOptions {
        prefilter: false,
        ..opts
    };
    let (reached, mut ruled_out): (Vec<&Candidate>, Vec<&Candidate>) =
        std::mem::take(&mut got.ruled_out)
            .into_iter()
            .partition(|c| {
                contexts
                    .outside
                    .binary_search(&absolute(&c.path, &cwd))
                    .is_ok()
            });
    // A config the prefilter ruled out holds no key a reader of configs looks at (a tokenizer's
    // vocabulary, a dataset): read whole, it gives no fact, and a diagnostic only where a run
    // reaches it and it does not parse (ML001). Only those that may not parse are read whole.
    let reached: Vec<&Candidate> = reached
        .into_par_iter()
        .filter(|c| !surely_parses(c, &absolute(&c.path, &cwd), overlay))
        .collect();
    ruled_out.retain(|c| !matches!(c.language, Language::Yaml | Language::Json));
    if !reached.is_empty() {
        got.load(&reached, resolver, &cwd, whole, &mut context);
        contexts = project_contexts(&got.units, &mut context, &cwd, overlay);
    }
    // A transformers pin before 4.46 is judged by what its whole project shows (GA006, off by
    // default): where GA006 is reported for the pin, the files under it that the prefilter
    // ruled out and that could show it are analysed whole.
    let roots: Vec<PathBuf> = got
        .units
        .iter()
        .filter(|l| pins::old_transformers(&l.unit.facts).is_some())
        .filter(|l| l.settings.wanted(&l.unit.abs).pins)
        .filter_map(|l| pins::project_root(&l.unit.abs).map(Path::to_path_buf))
        .collect();
    if !roots.is_empty() {
        let (pinned, rest): (Vec<&Candidate>, Vec<&Candidate>) =
            ruled_out.into_iter().partition(|c| {
                let abs = absolute(&c.path, &cwd);
                roots.iter().any(|r| abs.starts_with(r)) && shows_pinned_project(&abs, overlay)
            });
        ruled_out = rest;
        if !pinned.is_empty() {
            got.load(&pinned, resolver, &cwd, whole, &mut context);
            contexts = project_contexts(&got.units, &mut context, &cwd, overlay);
        }
    }
    // Whether a run reaches a config that does not parse may rest on a Python file the prefilter
    // ruled out (`TrainingArguments(deepspeed="ds.json")`, `open("ds.json")`): those that name
    // one are analysed whole, and the runs joined again. So are those that name a config
    // stating a model's size and a GPU's memory: the optimizer they build decides the fit.
    let stating: Vec<&Path> = got
        .units
        .iter()
        .filter(|l| crate::project::states_a_fit(&l.unit.facts))
        .map(|l| l.unit.abs.as_path())
        .collect();
    if !got.invalid.is_empty() || !stating.is_empty() {
        let names: Vec<String> = got
            .invalid
            .iter()
            .map(|c| c.path.as_path())
            .chain(stating)
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        let naming: Vec<&Candidate>;
        (naming, ruled_out) = ruled_out
            .into_iter()
            .partition(|c| names_any(&absolute(&c.path, &cwd), overlay, &names));
        if !naming.is_empty() {
            got.load(&naming, resolver, &cwd, whole, &mut context);
            contexts = project_contexts(&got.units, &mut context, &cwd, overlay);
        }
    }
    // A module of helpers beside the scripts is judged with the optimizer of the scripts that
    // import its functions (the join): those the prefilter ruled out are analysed whole.
    let modules: Vec<(PathBuf, Vec<String>)> = got
        .units
        .iter()
        .filter_map(|l| {
            let functions = helpers::helper_module(&l.unit)?;
            Some((
                l.unit.abs.clone(),
                functions.into_iter().map(str::to_string).collect(),
            ))
        })
        .collect();
    if !modules.is_empty() {
        let importing: Vec<&Candidate> = ruled_out
            .into_par_iter()
            .filter(|c| c.language == Language::Python)
            .filter(|c| {
                let abs = absolute(&c.path, &cwd);
                let near: Vec<&(PathBuf, Vec<String>)> = modules
                    .iter()
                    .filter(|(module, _)| helpers::may_import(&abs, module))
                    .collect();
                !near.is_empty()
                    && text_says(&abs, overlay, |text| {
                        near.iter().any(|(module, functions)| {
                            let functions: Vec<&str> =
                                functions.iter().map(String::as_str).collect();
                            helpers::imports_any(&abs, text, module, &functions)
                        })
                    })
            })
            .collect();
        if !importing.is_empty() {
            got.load(&importing, resolver, &cwd, whole, &mut context);
            contexts = project_contexts(&got.units, &mut context, &cwd, overlay);
        }
    }
    let Loading {
        units,
        mut errors,
        mut skipped,
        invalid,
        ..
    } = got;
    let (reported, warnings) = invalid_configs(
        &invalid,
        &contexts.outside,
        &context,
        resolver,
        &cwd,
        overlay,
    );
    skipped.retain(|s| !reported.iter().any(|r| r.file.display == s.path));
    let contexts = contexts.contexts;
    let mut results: Vec<FileResult> = units
        .into_par_iter()
        .zip(contexts.into_par_iter())
        .map(|(Linted { unit, settings, .. }, training)| {
            let diagnostics = check(&unit.file, &unit.facts, &training, &settings);
            FileResult {
                syntax_error: unit.facts.syntax_error,
                file: unit.file,
                diagnostics,
                settings,
                training,
            }
        })
        .collect();
    results.extend(reported);
    // Files read only for their context are not reported on, nor are problems reading them.
    let context: HashSet<String> = candidates
        .iter()
        .filter(|c| c.context)
        .map(|c| display_path(&c.path, &cwd))
        .collect();
    if !context.is_empty() {
        results.retain(|r| !context.contains(&r.file.display));
        errors.retain(|e| !context.contains(&e.path));
        skipped.retain(|s| !context.contains(&s.path));
    }
    results.sort_by(|a, b| a.file.display.cmp(&b.file.display));
    errors.sort();
    skipped.sort();
    Run {
        results,
        errors,
        skipped,
        warnings,
    }
}

/// Whether the file is a config that surely parses ([`config::surely_parses`]).
fn surely_parses(c: &Candidate, abs: &Path, overlay: &Overlay) -> bool {
    c.language == Language::Json
        && text_says(abs, overlay, |bytes| {
            std::str::from_utf8(bytes).is_ok_and(|t| config::surely_parses(c.language, t))
        })
}

/// Whether the file's text holds one of `names` (the file names of configs that do not parse).
fn names_any(abs: &Path, overlay: &Overlay, names: &[String]) -> bool {
    text_says(abs, overlay, |bytes| {
        names
            .iter()
            .any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some())
    })
}

/// What `test` says of the file's text, from the overlay or the disk (false when it cannot be
/// read): for the files a pass ruled out, whose text is not kept.
fn text_says(abs: &Path, overlay: &Overlay, test: impl Fn(&[u8]) -> bool) -> bool {
    match overlay.get(abs) {
        Some(t) => test(t.as_bytes()),
        None => std::fs::read(abs).is_ok_and(|bytes| test(&bytes)),
    }
}

/// The configs that do not parse and that a run reaches (`outside`: the files outside the units
/// that the join looked up, sorted). A linted one gets ML001 at the parse error, where the run
/// would stop loading it; one that is not linted is a warning (it is read for context, never
/// reported on). Configs nothing reaches stay skipped, with their warning.
fn invalid_configs(
    invalid: &[&Candidate],
    outside: &[PathBuf],
    context: &ContextFiles,
    resolver: &Resolver,
    cwd: &Path,
    overlay: &Overlay,
) -> (Vec<FileResult>, Vec<String>) {
    let mut reported = Vec::new();
    let mut linted: Vec<PathBuf> = Vec::new();
    // A config read only for context is not linted: where a run reaches it, it is a warning.
    let mut around: Vec<PathBuf> = Vec::new();
    for c in invalid {
        let abs = absolute(&c.path, cwd);
        if outside.binary_search(&abs).is_err() {
            continue;
        }
        if c.context {
            around.push(abs);
            continue;
        }
        linted.push(abs.clone());
        if let Some(r) = invalid_config(c, &abs, resolver, cwd, overlay) {
            reported.push(r);
        }
    }
    let mut warnings = Vec::new();
    for p in outside {
        let unread = matches!(context.get(p), Some(None)) || around.contains(p);
        let config = matches!(
            Language::from_path(p),
            Some(Language::Yaml | Language::Json | Language::Toml)
        );
        if !unread || !config || linted.contains(p) {
            continue;
        }
        let Some((language, text)) = config_text(p, p, overlay) else {
            continue;
        };
        if let Err(e) = config::parse(language, &text) {
            let at = SourceFile::new(p.clone(), String::new(), language, text).position(e.offset);
            warnings.push(format!(
                "{}: invalid {} at {}:{}: {} (a run of the files linted reads it; give its \
                 path to report it)",
                display_path(p, cwd),
                language.name().to_uppercase(),
                at.row,
                at.column,
                e.message
            ));
        }
    }
    (reported, warnings)
}

/// A config's language and text, from the overlay or the disk: `None` when it is not a config,
/// is larger than [`MAX_FILE_BYTES`], binary or not UTF-8.
fn config_text(path: &Path, abs: &Path, overlay: &Overlay) -> Option<(Language, String)> {
    let language = Language::from_path(path)
        .filter(|l| matches!(l, Language::Yaml | Language::Json | Language::Toml))?;
    let text = match overlay.get(abs) {
        Some(t) => t.clone(),
        None => {
            let mut bytes = Vec::new();
            read_bounded(path, &mut bytes).ok()?;
            String::from_utf8(bytes).ok()?
        }
    };
    (text.len() as u64 <= MAX_FILE_BYTES && !text.contains('\0')).then_some((language, text))
}

/// ML001 for a linted config that a run reaches and that does not parse, at the parse error.
/// `None` when it parses after all, or ML001 is not reported for it.
fn invalid_config(
    c: &Candidate,
    abs: &Path,
    resolver: &Resolver,
    cwd: &Path,
    overlay: &Overlay,
) -> Option<FileResult> {
    let (language, text) = config_text(&c.path, abs, overlay)?;
    let error = config::parse(language, &text).err()?;
    let settings = resolver.for_file(&c.path).ok()?;
    if !settings.reports(INVALID_CONFIG, abs) {
        return None;
    }
    let file = SourceFile::new(c.path.clone(), display_path(&c.path, cwd), language, text);
    let start = crate::source::floor_char_boundary(&file.text, error.offset.min(file.text.len()));
    let end = file.text[start..]
        .chars()
        .next()
        .filter(|ch| *ch != '\n')
        .map_or(start, |ch| start + ch.len_utf8());
    let kind = language.name().to_uppercase();
    let mut diagnostics = vec![Diagnostic::new(
        INVALID_CONFIG,
        start..end,
        format!(
            "invalid {kind} ({}): a run of this project reads this config and fails to load it",
            error.message
        ),
    )
    .with_help(format!(
        "make it valid {kind}; a template with placeholders should not be a file a launcher, a \
         Trainer argument or an `open()` names"
    ))];
    let directives = suppress::directives(&file, &[]);
    suppress::apply(&file, &directives, &mut diagnostics);
    if diagnostics.is_empty() {
        return None;
    }
    Some(FileResult {
        file: Arc::new(file),
        diagnostics,
        settings,
        training: TrainingContext::default(),
        syntax_error: true,
    })
}

/// Whether a file the prefilter ruled out could show the project of a pin something
/// ([`pins::could_show`]).
fn shows_pinned_project(abs: &Path, overlay: &Overlay) -> bool {
    text_says(abs, overlay, pins::could_show)
}

/// Candidates loaded so far, sorted by outcome.
struct Loading<'c> {
    /// In path order: the join reads them so, whichever pass analysed them.
    units: Vec<Linted>,
    /// Read but not analysed (ruled out by the prefilter, or a notebook in another language).
    ruled_out: Vec<&'c Candidate>,
    errors: Vec<PathError>,
    skipped: Vec<Skipped>,
    /// Configs that do not parse (also in `skipped`): ML001 where a run reaches one.
    invalid: Vec<&'c Candidate>,
    overlay: &'c Overlay,
}

impl<'c> Loading<'c> {
    /// Load `candidates`, then value the memory arithmetic of those that call helpers of
    /// other modules (read for context into `context` when they are not loaded).
    fn load(
        &mut self,
        candidates: &[&'c Candidate],
        resolver: &Resolver,
        cwd: &Path,
        opts: LintOptions,
        context: &mut ContextFiles,
    ) {
        let loaded: Vec<Result<Option<Linted>, Loaded>> = candidates
            .par_iter()
            .map(|c| load(c, resolver, cwd, opts, self.overlay))
            .collect();
        for (c, l) in candidates.iter().zip(loaded) {
            match l {
                Ok(Some(u)) => self.units.push(u),
                Ok(None) => self.ruled_out.push(c),
                Err(Loaded::Error(e)) => self.errors.push(e),
                Err(Loaded::Skipped(s)) => self.skipped.push(s),
                Err(Loaded::Invalid(s)) => {
                    self.skipped.push(s);
                    self.invalid.push(c);
                }
            }
        }
        self.units.sort_by(|a, b| a.unit.abs.cmp(&b.unit.abs));
        value_imported(&mut self.units, context, cwd, self.overlay);
    }
}

/// Value the memory arithmetic of the files that call helpers imported from other modules, with
/// what the project's modules say those return (see [`helpers::imported_values`]). The modules
/// are read for context as the join's files are: a few rounds, each reading in parallel what
/// the one before found missing. `units` is sorted by path.
fn value_imported(units: &mut [Linted], context: &mut ContextFiles, cwd: &Path, overlay: &Overlay) {
    let mut waiting: Vec<usize> = (0..units.len())
        .filter(|i| units[*i].deferred.is_some())
        .collect();
    if waiting.is_empty() {
        return;
    }
    let mut found: HashMap<usize, Found> = HashMap::new();
    // Modules that cannot export the names wanted from them (see [`project::may_export`]):
    // not read.
    let mut defining_none: HashSet<PathBuf> = HashSet::new();
    for _ in 0..8 {
        let read: &ContextFiles = context;
        let look = |p: &Path| match units.binary_search_by(|u| u.unit.abs.as_path().cmp(p)) {
            Ok(k) => Looked::Python(&units[k].unit.facts),
            Err(_) if defining_none.contains(p) => Looked::Unreadable,
            Err(_) => match read.get(p) {
                Some(Some(c)) => Looked::Python(&c.facts),
                Some(None) => Looked::Unreadable,
                None if !p.is_file() && !overlay.contains_key(p) => Looked::Absent,
                None => Looked::NotRead,
            },
        };
        let looked: Vec<(usize, Result<Found, helpers::ToRead>)> = waiting
            .par_iter()
            .map(|&i| {
                let calls = units[i]
                    .deferred
                    .as_ref()
                    .map(python::Deferred::imports)
                    .unwrap_or_default();
                (
                    i,
                    helpers::imported_values(&units[i].unit.abs, &calls, &look),
                )
            })
            .collect();
        waiting.clear();
        let mut missing: helpers::ToRead = Vec::new();
        for (i, result) in looked {
            match result {
                Ok(values) => {
                    found.insert(i, values);
                }
                Err(paths) => {
                    missing.extend(paths);
                    waiting.push(i);
                }
            }
        }
        if missing.is_empty() {
            break;
        }
        missing.sort();
        missing.dedup();
        let mut wanted: Vec<(PathBuf, Vec<String>)> = Vec::new();
        for (path, name) in missing {
            match wanted.last_mut() {
                Some((p, names)) if *p == path => names.push(name),
                _ => wanted.push((path, vec![name])),
            }
        }
        let read: Vec<(PathBuf, Option<Option<ContextFile>>)> = wanted
            .into_par_iter()
            .map(|(p, names)| {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let text = match overlay.get(&p) {
                    Some(t) => Some(t.clone()),
                    None => std::fs::metadata(&p)
                        .ok()
                        .filter(|m| m.len() <= MAX_CONTEXT_FILE)
                        .and_then(|_| std::fs::read_to_string(&p).ok()),
                };
                let defines = text.is_some_and(|t| project::may_export(&t, &names));
                let file = defines.then(|| load_for_context(&p, cwd, overlay));
                (p, file)
            })
            .collect();
        for (path, file) in read {
            match file {
                Some(file) => context.insert(path, file),
                None => {
                    defining_none.insert(path);
                }
            }
        }
    }
    units.par_iter_mut().enumerate().for_each(|(i, l)| {
        if let Some(deferred) = l.deferred.take() {
            let values = found.get(&i).map_or(&[][..], Vec::as_slice);
            python::finish_values(&l.unit.file.text, &mut l.unit.facts, &deferred, values);
        }
    });
}

enum Loaded {
    Error(PathError),
    Skipped(Skipped),
    /// A config that does not parse.
    Invalid(Skipped),
}

fn load(
    c: &Candidate,
    resolver: &Resolver,
    cwd: &Path,
    opts: LintOptions,
    overlay: &Overlay,
) -> Result<Option<Linted>, Loaded> {
    let display = display_path(&c.path, cwd);
    if let Some(text) = overlay.get(&absolute(&c.path, cwd)) {
        return load_bytes(c, text.as_bytes(), display, resolver, cwd, opts, overlay);
    }
    // Most files are ruled out by the prefilter once read: each thread reads into one buffer it
    // keeps, and only a file that is parsed gets a copy of its own.
    thread_local! {
        static READ: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    READ.with_borrow_mut(|bytes| match read_bounded(&c.path, bytes) {
        Ok(()) => load_bytes(c, bytes, display, resolver, cwd, opts, overlay),
        Err(e) => Err(Loaded::Error(PathError {
            path: display,
            message: io_message(&e),
        })),
    })
}

fn load_bytes(
    c: &Candidate,
    bytes: &[u8],
    display: String,
    resolver: &Resolver,
    cwd: &Path,
    opts: LintOptions,
    overlay: &Overlay,
) -> Result<Option<Linted>, Loaded> {
    let skip = |reason: &str| {
        Loaded::Skipped(Skipped {
            path: display.clone(),
            reason: reason.to_string(),
        })
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(skip(&format!(
            "larger than {} MB, not analysed",
            MAX_FILE_BYTES >> 20
        )));
    }
    if memchr::memchr(0, bytes).is_some() {
        return Err(skip("binary file (contains NUL bytes)"));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| skip("not valid UTF-8"))?;
    let settings = resolver.for_file(&c.path).map_err(|e| {
        Loaded::Error(PathError {
            path: display.clone(),
            message: e.to_string(),
        })
    })?;
    // A file the prefilter rules out can get no diagnostic: its text is not kept. A notebook is
    // judged by its code cells as Python, never by the JSON around them.
    let abs = absolute(&c.path, cwd);
    let wanted = settings.wanted(&abs);
    let needs = |language, text: &str| match opts.prefilter {
        true => {
            let needs = crate::prefilter::needs(language, text, wanted);
            let in_project = || {
                crate::prefilter::imported_divisors(text)
                    .iter()
                    .any(|(module, name)| defined_in_project(&abs, module, name, overlay))
            };
            needs.with_imported_divisor(needs.imported_divisor && in_project())
        }
        false => Needs::ALL,
    };
    let (file, needs) = if c.language == Language::Notebook {
        // A notebook in another language is skipped like any file memlint does not read.
        match SourceFile::from_notebook(c.path.clone(), display.clone(), text.to_owned()) {
            Ok(Some(file)) => {
                let needs = needs(Language::Python, &file.text);
                (file, needs)
            }
            Ok(None) => return Ok(None),
            Err(reason) => return Err(skip(&format!("malformed notebook: {reason}"))),
        }
    } else {
        // Built only for a file that is read: a source file indexes its lines.
        let needs = needs(c.language, text);
        if !needs.parse {
            return Ok(None);
        }
        let file = SourceFile::new(c.path.clone(), display.clone(), c.language, text.to_owned());
        (file, needs)
    };
    if !needs.parse {
        return Ok(None);
    }
    let (facts, deferred) = analyse_deferring(
        &file,
        python::Reads {
            loops: needs.loop_model,
            values: needs.value_model,
        },
    )
    .map_err(|reason| match c.language {
        Language::Yaml | Language::Json | Language::Toml => Loaded::Invalid(Skipped {
            path: display.clone(),
            reason,
        }),
        _ => skip(&reason),
    })?;
    let defaults = Defaults {
        optimizer: settings.options.optimizer.clone(),
        world_size: settings.options.world_size,
        gpu_memory_gb: settings.options.gpu_memory_gb,
    };
    Ok(Some(Linted {
        unit: Unit {
            abs,
            file: Arc::new(file),
            facts,
            defaults,
            reported: !c.context,
        },
        settings,
        deferred,
    }))
}

/// Whether `module`, imported as written by the file at `abs`, is a file of the project that
/// may define `name` as a number (the file Python would import, as the value model finds it).
fn defined_in_project(abs: &Path, module: &str, name: &str, overlay: &Overlay) -> bool {
    let Some(path) = helpers::candidates(abs, module)
        .into_iter()
        .find(|p| overlay.contains_key(p) || p.is_file())
    else {
        return false;
    };
    let text = match overlay.get(&path) {
        Some(text) => Some(text.clone()),
        None => std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= MAX_CONTEXT_FILE)
            .and_then(|_| std::fs::read_to_string(&path).ok()),
    };
    text.is_some_and(|t| project::may_export(&t, &[name]))
}

/// Files larger than this are not analysed: a syntax tree takes tens of bytes per byte of source
/// (a 50 MB module would need gigabytes), and code that large is generated.
pub const MAX_FILE_BYTES: u64 = 10 << 20;

/// The file's bytes into `bytes` (replacing what it held), reading at most one byte past
/// [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    bytes.clear();
    let file = std::fs::File::open(path)?;
    let hint = file
        .metadata()
        .map_or(0, |m| m.len())
        .min(MAX_FILE_BYTES + 1);
    bytes.reserve(hint as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(bytes)?;
    Ok(())
}

/// Parse one file and lower it into facts.
pub fn analyse(file: &SourceFile) -> Result<Facts, String> {
    analyse_with(file, python::Reads::ALL)
}

/// [`analyse_with`], except that a Python file whose memory arithmetic calls helpers imported
/// from other modules is left to value once they are found (see [`value_imported`]).
fn analyse_deferring(
    file: &SourceFile,
    reads: python::Reads,
) -> Result<(Facts, Option<python::Deferred>), String> {
    match file.language {
        Language::Python | Language::Notebook => python::extract_deferring(&file.text, reads),
        _ => Ok((analyse_with(file, reads)?, None)),
    }
}

/// [`analyse`], with or without the loop model and loss provenance of Python (`loops`).
fn analyse_with(file: &SourceFile, reads: python::Reads) -> Result<Facts, String> {
    Ok(match file.language {
        // A notebook's text is the Python of its code cells.
        Language::Python | Language::Notebook => python::extract_with(&file.text, reads)?,
        Language::Shell => shell::extract(&file.text)?,
        Language::Requirements => Facts {
            pins: crate::frontend::pins::requirements(&file.text),
            ..Facts::default()
        },
        Language::Yaml | Language::Json | Language::Toml => {
            match config::parse(file.language, &file.text) {
                Ok(doc) => config_facts(file, doc),
                Err(e) => {
                    let p = file.position(e.offset);
                    return Err(format!(
                        "invalid {} at {}:{}: {}",
                        file.language.name().to_uppercase(),
                        p.row,
                        p.column,
                        e.message
                    ));
                }
            }
        }
    })
}

/// What a config's document says.
fn config_facts(file: &SourceFile, doc: config::ConfigDoc) -> Facts {
    let evidence = crate::frontend::config::evidence(&doc);
    let is_pyproject = file.language == Language::Toml
        && file.path.file_name().is_some_and(|n| n == "pyproject.toml");
    let pins = match doc.roots.first() {
        Some(root) if is_pyproject => crate::frontend::pins::pyproject(root, &file.text),
        _ => Vec::new(),
    };
    Facts {
        evidence,
        tables: crate::frontend::config::tables(&doc),
        config: Some(doc),
        pins,
        ..Facts::default()
    }
}

/// Join each file's evidence with its launchers' and configs', and give each file the view of
/// the project around it (see [`crate::project`]). The join reads only what is loaded: the files
/// it needs that are neither linted nor read yet are read for context here, and it runs again.
struct Contexts {
    contexts: Vec<TrainingContext>,
    /// Files outside the units that runs reached, sorted.
    outside: Vec<PathBuf>,
}

fn project_contexts(
    linted: &[Linted],
    context: &mut ContextFiles,
    cwd: &Path,
    overlay: &Overlay,
) -> Contexts {
    let units: Vec<&Unit> = linted.iter().map(|l| &l.unit).collect();
    // A run reaches at most a script, the configs it names and the configs those name: a few
    // rounds, each reading what the one before found named.
    let joined = loop {
        match project::join(&units, context, cwd) {
            Join::Joined(joined) => break joined,
            Join::Needs(paths) => {
                let read: Vec<(PathBuf, Option<ContextFile>)> = paths
                    .into_par_iter()
                    .map(|p| {
                        let file = load_for_context(&p, cwd, overlay);
                        (p, file)
                    })
                    .collect();
                for (path, file) in read {
                    context.insert(path, file);
                }
            }
        }
    };
    let contexts = joined
        .located
        .into_iter()
        .zip(joined.views)
        .zip(&units)
        .map(|((located, view), unit)| {
            let mut cx = TrainingContext::build(&located, &unit.defaults);
            cx.project = Arc::new(view);
            cx
        })
        .collect::<Vec<_>>();
    let contexts = with_imported_helpers(contexts, &units, context, cwd, overlay);
    Contexts {
        contexts,
        outside: joined.outside,
    }
}

/// What the helpers each file imports from the project return: the modules are read for context
/// as the join's files are (see [`project::helpers`]).
fn with_imported_helpers(
    mut contexts: Vec<TrainingContext>,
    units: &[&Unit],
    context: &mut ContextFiles,
    cwd: &Path,
    overlay: &Overlay,
) -> Vec<TrainingContext> {
    let read = |p: &Path| match overlay.get(p) {
        Some(t) => Some(t.as_bytes().to_vec()),
        None => std::fs::read(p).ok(),
    };
    // The files that call helpers of other modules, with the hook registrars they call.
    let mut pending: Vec<(usize, Vec<(String, String)>)> = units
        .iter()
        .enumerate()
        .filter_map(|(i, unit)| {
            let hooks = helpers::hook_helpers(unit, &read);
            (!helpers::needed(&unit.facts, &hooks).is_empty()).then_some((i, hooks))
        })
        .collect();
    // Each round reads, once and in parallel, the modules that any file found missing in the
    // round before: a few rounds at most.
    for _ in 0..8 {
        let mut missing: Vec<PathBuf> = Vec::new();
        pending.retain(|(i, hooks)| {
            let read: &ContextFiles = context;
            // A linted file parsed without the loop model exports nothing: read it whole.
            let look = |p: &Path| match units.iter().find(|u| u.abs == p && u.facts.loops_read) {
                Some(u) => Looked::Python(&u.facts),
                None => match read.get(p) {
                    Some(Some(c)) => Looked::Python(&c.facts),
                    Some(None) => Looked::Unreadable,
                    None if !p.is_file() && !overlay.contains_key(p) => Looked::Absent,
                    None => Looked::NotRead,
                },
            };
            match helpers::imported_returns(units[*i], hooks, &look) {
                Ok(found) => {
                    contexts[*i].imported = Arc::new(found);
                    false
                }
                Err(paths) => {
                    missing.extend(paths);
                    true
                }
            }
        });
        if missing.is_empty() {
            break;
        }
        missing.sort();
        missing.dedup();
        let read: Vec<(PathBuf, Option<ContextFile>)> = missing
            .into_par_iter()
            .map(|p| {
                let file = load_for_context(&p, cwd, overlay);
                (p, file)
            })
            .collect();
        for (path, file) in read {
            context.insert(path, file);
        }
    }
    contexts
}

/// Files larger than this are not read for context.
const MAX_CONTEXT_FILE: u64 = 2 * 1024 * 1024;

/// A file a run names that is not linted, read for its context: `None` when it is not a file
/// memlint reads (by its extension), is larger than [`MAX_CONTEXT_FILE`], binary, not UTF-8, or
/// does not analyse.
fn load_for_context(path: &Path, cwd: &Path, overlay: &Overlay) -> Option<ContextFile> {
    let language = Language::from_path(path)?;
    let bytes = match overlay.get(path) {
        Some(text) if text.len() as u64 > MAX_CONTEXT_FILE => return None,
        Some(text) => text.as_bytes().to_vec(),
        None => {
            let meta = std::fs::metadata(path).ok()?;
            if !meta.is_file() || meta.len() > MAX_CONTEXT_FILE {
                return None;
            }
            std::fs::read(path).ok()?
        }
    };
    if bytes.contains(&0) {
        return None;
    }
    let text = String::from_utf8(bytes).ok()?;
    // A JSON file a run names that holds no key a reader looks at (a tokenizer's vocabulary)
    // gives what its empty document gives.
    let skeleton = match crate::prefilter::config_holds_known_key(language, &text) {
        true => None,
        false => config::skeleton(language, &text),
    };
    let file = SourceFile::new(path.to_path_buf(), display_path(path, cwd), language, text);
    let facts = match skeleton {
        Some(doc) => config_facts(&file, doc),
        None => analyse(&file).ok()?,
    };
    Some(ContextFile { file, facts })
}

/// Run the rules over one file's facts, then selection and suppression.
pub fn check(
    file: &SourceFile,
    facts: &Facts,
    training: &TrainingContext,
    settings: &Settings,
) -> Vec<Diagnostic> {
    let cx = Checker {
        file,
        facts,
        training,
    };
    let path = absolute(&file.path, &crate::discover::cwd());
    let mut out = Vec::new();
    for rule in RULES {
        if settings.reports(rule.code(), &path) {
            rule.check(&cx, &mut out);
        }
    }
    // One bug, one diagnostic: formulas that reach the same term report the same span.
    out.sort_by(|a, b| {
        (a.range.start, a.range.end, a.code).cmp(&(b.range.start, b.range.end, b.code))
    });
    out.dedup_by(|a, b| a.code == b.code && a.range == b.range);
    let directives = suppress::directives(file, &facts.comments);
    let unused = suppress::apply(file, &directives, &mut out);
    if settings.enabled.contains(UNUSED_SUPPRESSION) {
        for (code, span) in unused {
            // Codes of rules that are not enabled are not judged.
            if settings.enabled.contains(code.as_str()) {
                out.push(
                    Diagnostic::new(
                        UNUSED_SUPPRESSION,
                        span,
                        format!("unused suppression: {code} is not reported on this line"),
                    )
                    .with_help("remove the code from the directive"),
                );
            }
        }
        out.sort_by(|a, b| (a.range.start, a.code).cmp(&(b.range.start, b.code)));
    }
    out
}
