//! The files the join knows: the linted units, and the files outside them that runs name, read
//! for context by the pipeline (never reported on). Paths written in a file are resolved against
//! its folder, its parents up to the repository root, and the working directory.

use crate::config::{ConfigDoc, Node};
use crate::context::{ConfigRef, Defaults, Located};
use crate::facts::Facts;
use crate::frontend::config::evidence;
use crate::source::SourceFile;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How many parent folders of a launcher are tried for a relative path.
const MAX_PARENTS: usize = 4;

/// A linted file, as the join reads it.
pub struct Unit {
    pub file: Arc<SourceFile>,
    pub facts: Facts,
    /// The absolute path, lexically normalised: runs name files by it.
    pub abs: PathBuf,
    /// What the memlint configuration that applies to the file says about the project.
    pub defaults: Defaults,
    /// Whether the file is reported on; `false` for one read only for the context it gives
    /// (a config linted only as context counts, for a launcher, as a config not linted).
    pub reported: bool,
}

/// A file that a run names and that is not linted, read for its context.
pub struct ContextFile {
    pub file: SourceFile,
    pub facts: Facts,
}

/// The files read for context so far, by normalised absolute path, with what reading each gave:
/// the pipeline reads the paths a join [needs](super::Join::Needs) and joins again.
#[derive(Default)]
pub struct ContextFiles {
    read: Vec<(PathBuf, ContextFile)>,
    /// Index into `read`; `None` for a path that is not a readable file memlint reads.
    index: HashMap<PathBuf, Option<usize>>,
}

impl ContextFiles {
    /// What reading `path` gave: `None` when it was never read, `Some(None)` when it is not a
    /// file memlint reads.
    pub fn get(&self, path: &Path) -> Option<Option<&ContextFile>> {
        self.index
            .get(path)
            .map(|i| i.and_then(|i| self.read.get(i).map(|(_, f)| f)))
    }

    /// Record what reading `path` gave (`None`: nothing to read). A path recorded once stays.
    pub fn insert(&mut self, path: PathBuf, file: Option<ContextFile>) {
        if self.index.contains_key(&path) {
            return;
        }
        match file {
            Some(file) => {
                self.index.insert(path.clone(), Some(self.read.len()));
                self.read.push((path, file));
            }
            None => {
                self.index.insert(path, None);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Fid {
    Unit(usize),
    /// A file read for context: an index into [`ContextFiles`].
    Extra(usize),
}

/// What the join knows of a path.
enum Known {
    File(Fid),
    /// Read for context, and not a file memlint reads.
    Unreadable,
    /// Not read yet: the join needs it.
    NotRead,
}

pub(super) struct Files<'u> {
    pub(super) units: &'u [&'u Unit],
    context: &'u ContextFiles,
    index: HashMap<PathBuf, Fid>,
    /// Paths outside the units that the join looked up and that were read (readable or not).
    pub(super) reached: BTreeSet<PathBuf>,
    /// Paths outside the units that the join looked up and that were never read.
    pub(super) needs: BTreeSet<PathBuf>,
    cwd: PathBuf,
}

impl<'u> Files<'u> {
    pub(super) fn new(units: &'u [&'u Unit], context: &'u ContextFiles, cwd: &Path) -> Self {
        let index = units
            .iter()
            .enumerate()
            .map(|(i, u)| (u.abs.clone(), Fid::Unit(i)))
            .collect();
        Files {
            units,
            context,
            index,
            reached: BTreeSet::new(),
            needs: BTreeSet::new(),
            cwd: cwd.to_path_buf(),
        }
    }

    pub(super) fn file(&self, f: Fid) -> &SourceFile {
        match f {
            Fid::Unit(i) => &self.units[i].file,
            Fid::Extra(i) => &self.context.read[i].1.file,
        }
    }

    pub(super) fn facts(&self, f: Fid) -> &Facts {
        match f {
            Fid::Unit(i) => &self.units[i].facts,
            Fid::Extra(i) => &self.context.read[i].1.facts,
        }
    }

    fn abs(&self, f: Fid) -> &Path {
        match f {
            Fid::Unit(i) => &self.units[i].abs,
            Fid::Extra(i) => &self.context.read[i].0,
        }
    }

    pub(super) fn config(&self, f: Fid, c: ConfigRef) -> Option<&Node> {
        let facts = self.facts(f);
        match c {
            ConfigRef::Root(i) => facts.config.as_ref().and_then(|d| d.roots.get(i)),
            ConfigRef::Inline(i) => facts.inline_configs.get(i).map(|c| &c.root),
        }
    }

    pub(super) fn configs_of(&self, f: Fid) -> Vec<ConfigRef> {
        let facts = self.facts(f);
        let roots = facts.config.as_ref().map_or(0, |d| d.roots.len());
        (0..roots)
            .map(ConfigRef::Root)
            .chain((0..facts.inline_configs.len()).map(ConfigRef::Inline))
            .collect()
    }

    pub(super) fn site(&self, f: Fid, offset: usize) -> String {
        let file = self.file(f);
        format!("{}:{}", file.display, file.position(offset).row)
    }

    /// A linted file, or one read for context.
    fn known(&mut self, path: &Path) -> Known {
        let path = normalize(path);
        if let Some(&f) = self.index.get(&path) {
            return Known::File(f);
        }
        match self.context.index.get(&path) {
            Some(read) => {
                let known = match read {
                    Some(i) => Known::File(Fid::Extra(*i)),
                    None => Known::Unreadable,
                };
                self.reached.insert(path);
                known
            }
            None => {
                self.needs.insert(path);
                Known::NotRead
            }
        }
    }

    /// Resolve a path written in `from`: against its folder and parents (up to the repository
    /// root), then the working directory. The first of those that is a file memlint reads wins,
    /// so while one before it is not read yet, nothing is resolved.
    pub(super) fn resolve(&mut self, written: &str, from: Fid) -> Option<Fid> {
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
        let mut not_read = false;
        for b in bases {
            match self.known(&b.join(p)) {
                Known::File(f) if !not_read => return Some(f),
                Known::NotRead => not_read = true,
                Known::File(_) | Known::Unreadable => {}
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

/// The evidence of one file, or of one of its configs.
pub(super) fn located(files: &Files, f: Fid, config: Option<ConfigRef>) -> Located {
    let file = files.file(f);
    let facts = files.facts(f);
    match config {
        Some(ConfigRef::Inline(i)) => {
            let Some(c) = facts.inline_configs.get(i) else {
                return Located::default();
            };
            let doc = ConfigDoc {
                roots: vec![c.root.clone()],
                ..ConfigDoc::default()
            };
            Located::new(evidence(&doc), &|at| {
                format!("{}:{}", file.display, file.position(at).row)
            })
        }
        _ => Located::from_file(file, facts),
    }
}
