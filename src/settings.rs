//! memlint's own configuration: `.memlint.toml`, `memlint.toml` or `pyproject.toml [tool.memlint]`,
//! the closest one walking up from each linted file, overridden by the command line.

use crate::diagnostic::Severity;
use crate::prefilter::Wanted;
use crate::rules::catalog;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The keys a configuration file may hold. Unknown keys are an error that names the key and file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Options {
    pub select: Option<Vec<String>>,
    pub ignore: Option<Vec<String>>,
    pub extend_select: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
    pub extend_exclude: Option<Vec<String>>,
    pub per_file_ignores: Option<BTreeMap<String, Vec<String>>>,
    pub fail_on: Option<String>,
    pub optimizer: Option<String>,
    pub gpu_memory_gb: Option<f64>,
    pub world_size: Option<u32>,
    pub precision: Option<String>,
}

#[derive(Deserialize)]
struct Pyproject {
    tool: Option<PyprojectTool>,
}

#[derive(Deserialize)]
struct PyprojectTool {
    memlint: Option<Options>,
}

/// Selection given on the command line; it wins over the file.
#[derive(Debug, Default, Clone)]
pub struct CliOverrides {
    pub select: Option<Vec<String>>,
    pub ignore: Vec<String>,
    pub extend_select: Vec<String>,
    pub extend_exclude: Vec<String>,
}

/// Settings resolved for the files under one configuration.
#[derive(Debug)]
pub struct Settings {
    /// The folder the configuration applies from (patterns are relative to it).
    pub root: PathBuf,
    pub config_file: Option<PathBuf>,
    pub enabled: BTreeSet<&'static str>,
    pub exclude: GlobSet,
    per_file_ignores: Vec<(GlobSet, Vec<String>)>,
    pub fail_on: Severity,
    pub options: Options,
    /// What the prefilter reads for a file without per-file ignores (asked once, not per file).
    wanted: Wanted,
}

pub const DEFAULT_EXCLUDES: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "__pycache__",
    "node_modules",
    "site-packages",
    "build",
    "dist",
    ".ipynb_checkpoints",
    "target",
];

#[derive(Debug, Clone, PartialEq)]
pub struct SettingsError(pub String);

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read the memlint options of a configuration file (`None`: a pyproject without the table).
pub fn read_options(path: &Path) -> Result<Option<Options>, SettingsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SettingsError(format!("{}: cannot read: {e}", shown(path))))?;
    let is_pyproject = path.file_name().is_some_and(|n| n == "pyproject.toml");
    let parsed: Result<Option<Options>, toml::de::Error> = if is_pyproject {
        toml::from_str::<Pyproject>(&text).map(|p| p.tool.and_then(|t| t.memlint))
    } else {
        toml::from_str::<Options>(&text).map(Some)
    };
    parsed.map_err(|e| {
        let msg = e.message().replace('\n', " ");
        match e.span() {
            Some(span) => {
                let start = span.start.min(text.len());
                let line = text[..start].matches('\n').count() + 1;
                let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                let line_text = text[line_start..].lines().next().unwrap_or("").trim();
                let shown_line = if line_text.is_empty() || line_text.len() > 80 {
                    String::new()
                } else {
                    format!(" (`{line_text}`)")
                };
                SettingsError(format!("{}:{line}: {msg}{shown_line}", shown(path)))
            }
            None => SettingsError(format!("{}: {msg}", shown(path))),
        }
    })
}

/// A configuration file as messages name it: relative to the current directory when under it.
fn shown(path: &Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) => crate::source::display_path(path, &cwd),
        Err(_) => path.display().to_string(),
    }
}

fn globset(patterns: &[String]) -> Result<GlobSet, SettingsError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let p = p.trim_end_matches('/');
        b.add(Glob::new(p).map_err(|e| SettingsError(format!("invalid pattern `{p}`: {e}")))?);
        if !p.contains('/') {
            b.add(
                Glob::new(&format!("**/{p}"))
                    .map_err(|e| SettingsError(format!("invalid pattern `{p}`: {e}")))?,
            );
        }
    }
    b.build().map_err(|e| SettingsError(e.to_string()))
}

/// Expand rule selectors (`MEM`, `GA0`, `MEM001`, `ALL`) into codes. Unknown selectors are errors.
pub fn expand(selectors: &[String]) -> Result<BTreeSet<&'static str>, SettingsError> {
    expand_in(selectors, None)
}

/// [`expand`], naming where the selectors were written (`--select`, the `select` key) in the
/// error, with the closest valid selectors.
pub fn expand_in(
    selectors: &[String],
    origin: Option<&str>,
) -> Result<BTreeSet<&'static str>, SettingsError> {
    let codes = crate::rules::implemented_codes();
    let mut out = BTreeSet::new();
    for s in selectors {
        let s = s.trim().to_ascii_uppercase();
        let matched: Vec<&'static str> = codes
            .iter()
            .copied()
            .filter(|c| s == "ALL" || c.starts_with(s.as_str()))
            .collect();
        // A code of the catalogue that is not implemented yet selects nothing, quietly.
        if matched.is_empty()
            && !catalog::pages()
                .iter()
                .any(|p| p.code.starts_with(s.as_str()))
        {
            let within = origin.map(|o| format!(" in {o}")).unwrap_or_default();
            let closest = closest_selectors(&s, &codes);
            let closest = if closest.is_empty() {
                String::new()
            } else {
                format!("closest: {}; ", closest.join(", "))
            };
            return Err(SettingsError(format!(
                "unknown rule selector `{s}`{within} ({closest}`memlint rules` lists the codes)"
            )));
        }
        out.extend(matched);
    }
    Ok(out)
}

/// The valid selectors nearest to `s` by edit distance: codes, and the prefixes that name a
/// family (`MEM`, `GA`, `BS`, `ML`). At most three, nearest first, and none that differs in more
/// than half its characters.
fn closest_selectors(s: &str, codes: &[&'static str]) -> Vec<String> {
    let mut candidates: Vec<String> = codes.iter().map(|c| c.to_string()).collect();
    for c in codes {
        let family: String = c.chars().take_while(char::is_ascii_alphabetic).collect();
        if !candidates.contains(&family) {
            candidates.push(family);
        }
    }
    candidates.push("ALL".into());
    let mut scored: Vec<(usize, String)> = candidates
        .into_iter()
        .map(|c| (edit_distance(s, &c), c))
        .filter(|(d, c)| *d * 2 <= c.len().max(s.len()))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Check the selectors given on the command line, each named by its flag: before any file is
/// read, so that a typo ends the run at once.
pub fn validate_cli(cli: &CliOverrides) -> Result<(), SettingsError> {
    if let Some(select) = &cli.select {
        expand_in(select, Some("--select"))?;
    }
    expand_in(&cli.extend_select, Some("--extend-select"))?;
    expand_in(&cli.ignore, Some("--ignore"))?;
    Ok(())
}

impl Settings {
    pub fn new(
        root: PathBuf,
        config_file: Option<PathBuf>,
        options: Options,
        cli: &CliOverrides,
    ) -> Result<Settings, SettingsError> {
        let ctx = |e: SettingsError| match &config_file {
            Some(f) => SettingsError(format!("{}: {e}", shown(f))),
            None => e,
        };
        let defaults: Vec<String> = catalog::pages()
            .iter()
            .filter(|p| p.default_enabled)
            .map(|p| p.code.clone())
            .collect();
        let mut enabled = match (&cli.select, &options.select) {
            (Some(s), _) => expand_in(s, Some("--select"))?,
            (None, Some(s)) => expand_in(s, Some("`select`")).map_err(ctx)?,
            (None, None) => expand(&defaults)?,
        };
        enabled.extend(
            expand_in(
                options.extend_select.as_deref().unwrap_or(&[]),
                Some("`extend-select`"),
            )
            .map_err(ctx)?,
        );
        enabled.extend(expand_in(&cli.extend_select, Some("--extend-select"))?);
        for code in
            expand_in(options.ignore.as_deref().unwrap_or(&[]), Some("`ignore`")).map_err(ctx)?
        {
            enabled.remove(code);
        }
        for code in expand_in(&cli.ignore, Some("--ignore"))? {
            enabled.remove(code);
        }
        let mut exclude: Vec<String> = match &options.exclude {
            Some(e) => e.clone(),
            None => DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).collect(),
        };
        exclude.extend(options.extend_exclude.clone().unwrap_or_default());
        exclude.extend(cli.extend_exclude.iter().cloned());
        let exclude = globset(&exclude).map_err(ctx)?;
        let mut per_file_ignores = Vec::new();
        for (pattern, codes) in options.per_file_ignores.clone().unwrap_or_default() {
            expand_in(&codes, Some(&format!("`per-file-ignores` for `{pattern}`"))).map_err(ctx)?;
            per_file_ignores.push((globset(&[pattern]).map_err(ctx)?, codes));
        }
        let fail_on = match options.fail_on.as_deref() {
            None => Severity::Info,
            Some(s) => Severity::parse(s).ok_or_else(|| {
                ctx(SettingsError(format!(
                    "`fail-on` must be one of info, warning, error (got `{s}`)"
                )))
            })?,
        };
        if let Some(opt) = &options.optimizer {
            if crate::knowledge::knowledge().optimizer(opt).is_none() {
                return Err(ctx(SettingsError(format!("unknown optimizer `{opt}`"))));
            }
        }
        let wanted = Wanted::from_codes(|code| enabled.contains(code));
        Ok(Settings {
            root,
            config_file,
            enabled,
            exclude,
            per_file_ignores,
            fail_on,
            options,
            wanted,
        })
    }

    fn relative<'p>(&self, path: &'p Path) -> &'p Path {
        path.strip_prefix(&self.root)
            .or_else(|_| path.strip_prefix("./"))
            .unwrap_or(path)
    }

    /// Whether a walk skips what it finds at `path`: its own path or name matches an exclude.
    /// The folders between the walk's root and it were asked as the walk entered them; those
    /// holding the root are not asked, as a folder given is linted (`memlint target/gen/`).
    pub fn is_excluded_entry(&self, path: &Path) -> bool {
        self.exclude.is_match(self.relative(path))
    }

    /// Whether `path` is excluded by its own path or name, or by a folder holding it (a folder
    /// excluded by name excludes everything below it).
    pub fn is_excluded(&self, path: &Path) -> bool {
        self.relative(path)
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .any(|a| self.exclude.is_match(a))
    }

    /// Whether `code` is reported for `path` (selection and per-file ignores).
    pub fn reports(&self, code: &str, path: &Path) -> bool {
        if !self.enabled.contains(code) {
            return false;
        }
        if self.per_file_ignores.is_empty() {
            return true;
        }
        let rel = self.relative(path);
        !self.per_file_ignores.iter().any(|(set, codes)| {
            set.is_match(rel)
                && codes
                    .iter()
                    .any(|c| code.starts_with(&c.to_ascii_uppercase()))
        })
    }
}

impl Settings {
    /// What the prefilter must read for `path`: the rules reported for it.
    pub fn wanted(&self, path: &Path) -> Wanted {
        if self.per_file_ignores.is_empty() {
            return self.wanted;
        }
        Wanted::from_codes(|code| self.reports(code, path))
    }
}

/// Finds and caches the settings that apply to each file.
pub struct Resolver {
    cli: CliOverrides,
    /// `--config FILE` or `--isolated`: one settings for every file.
    fixed: Option<Arc<Settings>>,
    cwd: PathBuf,
    cache: Mutex<HashMap<PathBuf, Arc<Settings>>>,
}

pub const CONFIG_NAMES: &[&str] = &[".memlint.toml", "memlint.toml", "pyproject.toml"];

impl Resolver {
    pub fn new(
        cli: CliOverrides,
        config: Option<&Path>,
        isolated: bool,
        cwd: PathBuf,
    ) -> Result<Resolver, SettingsError> {
        let fixed = if isolated {
            Some(Arc::new(Settings::new(
                cwd.clone(),
                None,
                Options::default(),
                &cli,
            )?))
        } else if let Some(path) = config {
            let options = read_options(path)?.unwrap_or_default();
            let root = path
                .parent()
                .map(|p| {
                    if p.as_os_str().is_empty() {
                        cwd.clone()
                    } else {
                        absolute(p, &cwd)
                    }
                })
                .unwrap_or_else(|| cwd.clone());
            Some(Arc::new(Settings::new(
                root,
                Some(path.to_path_buf()),
                options,
                &cli,
            )?))
        } else {
            None
        };
        Ok(Resolver {
            cli,
            fixed,
            cwd,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The settings for files in `dir` (absolute or relative to the current directory).
    pub fn for_dir(&self, dir: &Path) -> Result<Arc<Settings>, SettingsError> {
        if let Some(s) = &self.fixed {
            return Ok(s.clone());
        }
        let dir = absolute(dir, &self.cwd);
        if let Some(s) = self.cache.lock().ok().and_then(|c| c.get(&dir).cloned()) {
            return Ok(s);
        }
        // The nearest folder with a configuration decides; a folder without one shares its
        // parent's settings, resolved (and cached) once for the whole subtree.
        let mut own = None;
        for name in CONFIG_NAMES {
            let candidate = dir.join(name);
            if candidate.is_file() {
                if let Some(options) = read_options(&candidate)? {
                    own = Some((candidate, options));
                    break;
                }
            }
        }
        let settings = match (own, dir.parent()) {
            (Some((file, options)), _) => {
                Arc::new(Settings::new(dir.clone(), Some(file), options, &self.cli)?)
            }
            (None, Some(parent)) => self.for_dir(parent)?,
            (None, None) => Arc::new(Settings::new(
                self.cwd.clone(),
                None,
                Options::default(),
                &self.cli,
            )?),
        };
        if let Ok(mut c) = self.cache.lock() {
            c.insert(dir, settings.clone());
        }
        Ok(settings)
    }

    pub fn for_file(&self, path: &Path) -> Result<Arc<Settings>, SettingsError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        self.for_dir(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    }
}

pub fn absolute(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    // Normalise `.` and `..` lexically (no symlink resolution).
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
