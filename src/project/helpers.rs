//! Helpers imported from the project's own modules: what they return, for the losses that reach a
//! backward through them (`from utils.loss import calc_loss`, `import losses as L`), and for the
//! memory arithmetic that calls them (`from utils.precision import gb_from_bytes`).
//!
//! A module is looked up as Python would find it from the importing file: a relative import from
//! its folder (one level up per extra dot), an absolute one from the file's folder and each of its
//! parents (the package root is one of them). A module found in the project is judged by what its
//! function returns ([`crate::facts::Facts::exports`]); one found but unreadable, or whose helper
//! calls further into other modules, is unknown; a module that is not in the project (a library)
//! leaves the loss to the mean default. Like the join, this reads no file: it names the paths it
//! needs and the pipeline reads them.

use super::Unit;
use crate::context::ImportedReturns;
use crate::expr::imports::Found;
use crate::facts::{Facts, Scaling};
use crate::source::Language;
use std::path::{Path, PathBuf};

/// How many folders above the importing file an absolute import is looked for.
const MAX_PACKAGE_DEPTH: usize = 6;

/// What the pipeline knows of a path.
pub enum Looked<'a> {
    Python(&'a Facts),
    /// Read, and not a Python file memlint could analyse.
    Unreadable,
    /// No such file.
    Absent,
    /// Not read yet.
    NotRead,
}

/// The imported helpers a file's losses depend on, and `hooks` (see [`hook_helpers`]), by
/// module as written and name.
pub fn needed(facts: &Facts, hooks: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = hooks.to_vec();
    for lp in &facts.loops {
        for bw in &lp.backwards {
            bw.prov.imports(&mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The files a module may be, from the importing file, most likely first.
pub fn candidates(file: &Path, module: &str) -> Vec<PathBuf> {
    let dots = module.chars().take_while(|c| *c == '.').count();
    let parts: Vec<&str> = module[dots..]
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let Some(dir) = file.parent() else {
        return Vec::new();
    };
    let bases: Vec<&Path> = if dots > 0 {
        dir.ancestors().nth(dots - 1).into_iter().collect()
    } else {
        dir.ancestors().take(MAX_PACKAGE_DEPTH).collect()
    };
    let mut out = Vec::new();
    for base in bases {
        let mut p = base.to_path_buf();
        p.extend(&parts);
        if parts.is_empty() {
            out.push(p.join("__init__.py"));
        } else {
            out.push(p.with_extension("py"));
            out.push(p.join("__init__.py"));
        }
    }
    out
}

/// A module of helpers beside the scripts (its folder is no package) that counts memory and
/// builds no optimizer itself: the names of its functions that hold its formulas, which scripts
/// importing them may call. Its formulas are judged with what those scripts train with (the
/// join); library packages are not.
pub fn helper_module(unit: &Unit) -> Option<Vec<&str>> {
    let facts = &unit.facts;
    let ev = &facts.evidence;
    if unit.file.language != Language::Python || !ev.optimizers.is_empty() || !ev.trains.is_empty()
    {
        return None;
    }
    let mut functions: Vec<&str> = facts
        .formulas
        .iter()
        .filter(|f| f.scope != 0)
        .filter_map(|f| Some(facts.scopes.get(f.scope)?.name.as_str()))
        .collect();
    functions.sort_unstable();
    functions.dedup();
    let in_package = || {
        unit.abs
            .parent()
            .is_some_and(|d| d.join("__init__.py").is_file())
    };
    (!functions.is_empty() && !in_package()).then_some(functions)
}

/// Whether a script at `importer` may import the module of helpers at `module`: it sits in the
/// module's folder or the folder above, as `from helpers import f` or `from scripts.helpers
/// import f` finds it.
pub fn may_import(importer: &Path, module: &Path) -> bool {
    importers_folder(module).is_some_and(|b| within(importer, b))
}

/// The folder the scripts that may import the module at `module` sit under.
pub fn importers_folder(module: &Path) -> Option<&Path> {
    let dir = module.parent();
    dir.and_then(Path::parent).or(dir)
}

/// `path.starts_with(dir)` for lexically normalised paths, compared as bytes: a join weighs
/// every module of helpers against every script, and components cost more to compare.
pub fn within(path: &Path, dir: &Path) -> bool {
    let (p, d) = (
        path.as_os_str().as_encoded_bytes(),
        dir.as_os_str().as_encoded_bytes(),
    );
    d.is_empty()
        || p.starts_with(d)
            && (p.len() == d.len()
                || d.last()
                    .is_some_and(|&c| std::path::is_separator(c as char))
                || std::path::is_separator(p[d.len()] as char))
}

/// Whether a Python file at `importer` with `text` imports one of `functions` from the module at
/// `module`.
pub fn imports_any(importer: &Path, text: &[u8], module: &Path, functions: &[&str]) -> bool {
    // Most files import nothing of it: only a text near the module that names a function is
    // read for its imports.
    if !may_import(importer, module) {
        return false;
    }
    let named = functions
        .iter()
        .any(|f| memchr::memmem::find(text, f.as_bytes()).is_some());
    if !named {
        return false;
    }
    let text = String::from_utf8_lossy(text);
    imports(&text).iter().any(|imp| {
        functions
            .iter()
            .any(|f| imp.reaches(importer, &text, module, f))
    })
}

/// What a Python text imports: each module with the names it takes from it (`from m import a,
/// b`), or with the name it binds the module to (`import m as x`, read as `x.a`).
fn imports(text: &str) -> Vec<Import> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("from ") {
            let Some((module, names)) = rest.split_once(" import ") else {
                continue;
            };
            let mut names = names.trim().to_string();
            // `from m import (\n a,\n b,\n)`
            if names.starts_with('(') {
                while !names.contains(')') {
                    let Some(next) = lines.next() else { break };
                    names.push_str(next);
                }
            }
            let names = names
                .trim_matches(|c| matches!(c, '(' | ')' | ' '))
                .split(',')
                .filter_map(|n| n.split_whitespace().next())
                .map(|n| n.trim_matches(|c| matches!(c, '(' | ')')).to_string())
                .filter(|n| !n.is_empty() && !n.starts_with('#'))
                .collect();
            out.push(Import::Names(module.trim().to_string(), names));
        } else if let Some(rest) = line.strip_prefix("import ") {
            for part in rest.split('#').next().unwrap_or("").split(',') {
                let mut words = part.split_whitespace();
                let Some(module) = words.next() else { continue };
                let alias = match (words.next(), words.next()) {
                    (Some("as"), Some(alias)) => alias,
                    _ => module,
                };
                out.push(Import::Module(module.to_string(), alias.to_string()));
            }
        }
    }
    out
}

/// One import statement's module and what the importing file calls it by.
#[derive(Debug, PartialEq)]
enum Import {
    Names(String, Vec<String>),
    Module(String, String),
}

impl Import {
    /// Whether the import reaches `function` of the module at `path` from `importer` (in whose
    /// `text` a module import's calls are looked for).
    fn reaches(&self, importer: &Path, text: &str, path: &Path, function: &str) -> bool {
        let (module, named) = match self {
            Import::Names(m, names) => (m, names.iter().any(|n| n == function)),
            Import::Module(m, alias) => (m, text.contains(&format!("{alias}.{function}("))),
        };
        named && candidates(importer, module).iter().any(|c| c == path)
    }
}

/// The helpers a file gives its model to, where a gradient hook they register would matter
/// (the file scales or accumulates), and that register one in their own body (see
/// [`registers_hook`]): `read` gives a module's text, or `None` when there is no such file.
/// Most helpers register no hook, and their modules are never analysed for it.
pub fn hook_helpers(unit: &Unit, read: &dyn Fn(&Path) -> Option<Vec<u8>>) -> Vec<(String, String)> {
    if !unit.facts.hooks_see_each_backward() {
        return Vec::new();
    }
    let mut calls: Vec<(&String, &String)> = unit
        .facts
        .helper_calls
        .iter()
        .map(|(m, n, _)| (m, n))
        .collect();
    calls.sort();
    calls.dedup();
    // Each module is read once, however many of its helpers the file calls.
    let mut modules: Vec<(&String, Option<Vec<u8>>)> = Vec::new();
    let mut out = Vec::new();
    for (module, name) in calls {
        let at = match modules.iter().position(|(m, _)| *m == module) {
            Some(at) => at,
            None => {
                let text = candidates(&unit.abs, module).iter().find_map(|p| read(p));
                modules.push((module, text));
                modules.len() - 1
            }
        };
        if modules[at]
            .1
            .as_deref()
            .is_some_and(|t| registers_hook(t, name))
        {
            out.push((module.clone(), name.clone()));
        }
    }
    out
}

/// Whether `name` is a function defined at the top of the module whose text holds a hook
/// registration (`..._hook(`) in its body: the walk exports a clipping hook only by the
/// module-level function its registration sits in. The body runs to the next top-level `def`,
/// `class` or decorator, which may take in more than the body, never less.
pub fn registers_hook(text: &[u8], name: &str) -> bool {
    let top_level = |line: &[u8]| {
        [&b"def "[..], b"async def ", b"class ", b"@"]
            .iter()
            .any(|p| line.starts_with(p))
    };
    let defines = |line: &[u8]| {
        let line = line.strip_prefix(b"async ").unwrap_or(line);
        line.strip_prefix(b"def ")
            .and_then(|rest| rest.strip_prefix(name.as_bytes()))
            .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"("))
    };
    let mut lines = text.split(|b| *b == b'\n');
    while let Some(line) = lines.next() {
        if defines(line) {
            return lines
                .take_while(|l| !top_level(l))
                .any(|l| memchr::memmem::find(l, b"_hook(").is_some());
        }
    }
    false
}

/// What each needed helper returns, or the paths that must be read first.
pub fn imported_returns<'a>(
    unit: &Unit,
    hooks: &[(String, String)],
    look: &dyn Fn(&Path) -> Looked<'a>,
) -> Result<ImportedReturns, Vec<PathBuf>> {
    let mut out = ImportedReturns::default();
    let mut needs = Vec::new();
    for (module, name) in needed(&unit.facts, hooks) {
        // `from pkg import mod` then `mod.f(...)` names `pkg.mod`; the first candidate that is a
        // file decides.
        let mut judged = None;
        for path in candidates(&unit.abs, &module) {
            match look(&path) {
                Looked::Python(facts) => {
                    judged = Some((
                        returns(facts, &name),
                        facts.clip_hook_exports.contains(&name),
                    ));
                    break;
                }
                Looked::Unreadable => {
                    judged = Some((Scaling::Unknown, false));
                    break;
                }
                Looked::Absent => {}
                Looked::NotRead => {
                    needs.push(path);
                    break;
                }
            }
        }
        if let Some((s, clips)) = judged {
            if clips {
                out.clip_hooks.push((module.clone(), name.clone()));
            }
            out.returns.push(((module, name), s));
        }
    }
    if needs.is_empty() {
        Ok(out)
    } else {
        Err(needs)
    }
}

/// Modules to read, each with a name wanted from it.
pub type ToRead = Vec<(PathBuf, String)>;

/// What the helpers a file's memory arithmetic calls from other modules return (`calls`, by
/// module as written and name; see [`Facts::value_exports`]), or the modules that must be read
/// first, each with the name wanted from it. A helper whose module is not in the project, or
/// that its module does not define as arithmetic over its parameters, is left out: its calls
/// stay of unknown value.
pub fn imported_values<'a>(
    file: &Path,
    calls: &[(String, String)],
    look: &dyn Fn(&Path) -> Looked<'a>,
) -> Result<Found, ToRead> {
    let mut out = Vec::new();
    let mut needs = Vec::new();
    for (module, name) in calls {
        for path in candidates(file, module) {
            match look(&path) {
                Looked::Python(facts) => {
                    if let Some(e) = facts.value_exports.iter().find(|e| &e.name == name) {
                        out.push(((module.clone(), name.clone()), e.clone()));
                    }
                    break;
                }
                Looked::Unreadable => break,
                Looked::Absent => {}
                Looked::NotRead => {
                    needs.push((path, name.clone()));
                    break;
                }
            }
        }
    }
    if needs.is_empty() {
        Ok(out)
    } else {
        Err(needs)
    }
}

/// What `name` of a module returns; unknown when the module does not define it where it can be
/// read (a re-export, a class with no `__call__`/`forward`) or calls into further modules.
fn returns(facts: &Facts, name: &str) -> Scaling {
    facts
        .exports
        .iter()
        .find(|(n, _)| n == name)
        .map_or(Scaling::Unknown, |(_, prov)| {
            prov.scaling(&|_, _| Some(Scaling::Unknown))
        })
}

#[cfg(test)]
mod tests {
    use super::{registers_hook, within};
    use std::path::Path;

    #[test]
    fn a_path_is_within_a_folder_only_at_a_separator() {
        let within = |p: &str, d: &str| within(Path::new(p), Path::new(d));
        assert!(within("/r/scripts/train.py", "/r/scripts"));
        assert!(within("/r/scripts/train.py", "/r/"));
        assert!(within("/r/scripts", "/r/scripts"));
        assert!(within("/r/scripts/train.py", "/"));
        assert!(!within("/r/scripts2/train.py", "/r/scripts"));
        assert!(!within("/r/train.py", "/r/scripts"));
        assert!(within("train.py", ""));
    }

    const MODULE: &str = "\
import torch

def unwrap(model):
    return model.module

async def attach(\n    model,\n    limit,\n):
    def clip(g):
        return g.clamp(-limit, limit)

    for p in model.parameters():
        p.register_hook(clip)

@torch.no_grad()
def later(model):
    model.register_forward_hook(print)

class Guard:
    def install(self, model):
        model.register_full_backward_hook(self)
";

    #[test]
    fn a_helper_registers_a_hook_only_in_its_own_body() {
        let text = MODULE.as_bytes();
        assert!(registers_hook(text, "attach"));
        assert!(registers_hook(text, "later"));
        // The registrations below `unwrap` belong to other functions.
        assert!(!registers_hook(text, "unwrap"));
        // A class is not an exported hook registrar, nor is a name the module does not define.
        assert!(!registers_hook(text, "Guard"));
        assert!(!registers_hook(text, "attac"));
        assert!(!registers_hook(text, "missing"));
    }
}
