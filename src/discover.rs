//! Discovery: the files to lint from the paths given. Folders are walked in parallel with
//! `.gitignore`/`.ignore` respected and the configured excludes applied; hidden folders are walked
//! (`.github/` holds workflows). Explicit files and folders are always linted unless
//! `--force-exclude`: what is excluded is what the walk finds beneath them, as with ruff.

use crate::settings::Resolver;
use crate::source::Language;
use ignore::{WalkBuilder, WalkState};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    pub path: PathBuf,
    pub language: Language,
    /// Read only for the context it gives the files linted (a launcher or a config around a
    /// file named on the command line): never reported on.
    pub context: bool,
}

/// A problem with an input path: reported, and the run's exit code becomes 2.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PathError {
    pub path: String,
    pub message: String,
}

/// Language of a file: by extension, else by shebang for extensionless files.
pub fn classify(path: &Path) -> Option<Language> {
    if path.extension().is_some() {
        return Language::from_path(path);
    }
    let mut head = [0u8; 128];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let first = head[..n].split(|b| *b == b'\n').next()?;
    Language::from_shebang(first)
}

pub fn discover(
    paths: &[PathBuf],
    resolver: &Resolver,
    force_exclude: bool,
) -> (Vec<Candidate>, Vec<PathError>) {
    let found = Mutex::new(Vec::new());
    let errors = Mutex::new(Vec::new());
    let push_err = |path: &Path, message: String| {
        if let Ok(mut e) = errors.lock() {
            e.push(PathError {
                path: path.display().to_string(),
                message,
            });
        }
    };
    for path in paths {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                push_err(path, io_message(&e));
                continue;
            }
        };
        if meta.is_file() {
            if force_exclude {
                match resolver.for_file(path) {
                    Ok(s) if s.is_excluded(&crate::settings::absolute(path, &cwd())) => continue,
                    Ok(_) => {}
                    Err(e) => {
                        push_err(path, e.to_string());
                        continue;
                    }
                }
            }
            if let Some(language) = classify(path) {
                if let Ok(mut f) = found.lock() {
                    f.push(Candidate {
                        path: path.clone(),
                        language,
                        context: false,
                    });
                }
            }
            continue;
        }
        let root_settings = match resolver.for_dir(path) {
            Ok(s) => s,
            Err(e) => {
                push_err(path, e.to_string());
                continue;
            }
        };
        let cwd = cwd();
        // A folder given is walked, unless `--force-exclude` and it, or a folder holding it, is
        // excluded.
        if force_exclude && root_settings.is_excluded(&crate::settings::absolute(path, &cwd)) {
            continue;
        }
        let walker = WalkBuilder::new(path)
            .hidden(false)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .ignore(true)
            .parents(true)
            .require_git(false)
            .follow_links(false)
            .filter_entry({
                let settings = root_settings.clone();
                let cwd = cwd.clone();
                move |entry| {
                    entry.depth() == 0
                        || !settings
                            .is_excluded_entry(&crate::settings::absolute(entry.path(), &cwd))
                }
            })
            .build_parallel();
        walker.run(|| {
            let found = &found;
            let push_err = &push_err;
            let cwd = &cwd;
            Box::new(move |entry| {
                match entry {
                    Ok(e) => {
                        if e.file_type().is_some_and(|t| t.is_file()) {
                            if let Some(language) = classify(e.path()) {
                                if let Ok(mut f) = found.lock() {
                                    f.push(Candidate {
                                        path: e.path().to_path_buf(),
                                        language,
                                        context: false,
                                    });
                                }
                            }
                        }
                    }
                    Err(err) => {
                        // Unreadable folders and symlink loops: reported, the walk goes on.
                        let (p, message) = walk_error(&err);
                        let shown = match p {
                            Some(p) => PathBuf::from(crate::source::display_path(&p, cwd)),
                            None => path.clone(),
                        };
                        push_err(&shown, message);
                    }
                }
                WalkState::Continue
            })
        });
    }
    let mut found = found.into_inner().unwrap_or_default();
    found.sort();
    found.dedup();
    let mut errors = errors.into_inner().unwrap_or_default();
    errors.sort();
    (found, errors)
}

/// The path and the plain reason of a walk error (`ignore` wraps them in depth and path layers).
fn walk_error(err: &ignore::Error) -> (Option<PathBuf>, String) {
    match err {
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            walk_error(err)
        }
        ignore::Error::WithPath { path, err } => {
            let (_, message) = walk_error(err);
            (Some(path.clone()), message)
        }
        ignore::Error::Loop { ancestor, child } => (
            Some(child.clone()),
            format!("symbolic link loop back to {}", ancestor.display()),
        ),
        ignore::Error::Io(e) => (None, io_message(e)),
        ignore::Error::Partial(errs) => match errs.first() {
            Some(first) => walk_error(first),
            None => (None, err.to_string()),
        },
        _ => (None, err.to_string()),
    }
}

/// Launchers and configs that give files their project: the shell scripts and JSON, YAML and
/// TOML files beside each file and in the folders above it, up to the repository root (a folder
/// holding `.git`) or the current folder, each folder read once. Large files, and more than a
/// few hundred files beside one file, are left out, as the Language Server leaves them out.
pub fn neighbours(files: &[PathBuf], cwd: &Path) -> Vec<PathBuf> {
    const MAX_FILES: usize = 200;
    const MAX_BYTES: u64 = 1 << 20;
    let mut read: std::collections::HashSet<&Path> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for abs in files {
        let mut mine = 0;
        for dir in abs.ancestors().skip(1) {
            if !read.insert(dir) {
                break;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                break;
            };
            let mut here: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    matches!(
                        Language::from_path(p),
                        Some(Language::Shell | Language::Yaml | Language::Json | Language::Toml)
                    ) && std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= MAX_BYTES)
                })
                .collect();
            here.sort();
            here.truncate(MAX_FILES - mine);
            mine += here.len();
            out.extend(here);
            if mine == MAX_FILES || dir.join(".git").exists() || dir == cwd || !dir.starts_with(cwd)
            {
                break;
            }
        }
    }
    let named: std::collections::HashSet<&PathBuf> = files.iter().collect();
    out.retain(|p| !named.contains(p));
    out.sort();
    out.dedup();
    out
}

pub fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}

pub fn io_message(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
