//! Helpers imported from the project's own modules: what they return, for the losses that reach a
//! backward through them (`from utils.loss import calc_loss`, `import losses as L`).
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
use crate::facts::{Facts, Scaling};
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

/// The helpers a file gives its model to, where a gradient hook they register would matter
/// (the file scales or accumulates), and whose module may register one: `registers` tells,
/// from a module's text, or `None` when there is no such file. Most modules register no hook
/// and are never analysed for it.
pub fn hook_helpers(
    unit: &Unit,
    registers: &dyn Fn(&Path) -> Option<bool>,
) -> Vec<(String, String)> {
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
    let mut modules: Vec<(&String, bool)> = Vec::new();
    let mut out = Vec::new();
    for (module, name) in calls {
        let registers = match modules.iter().find(|(m, _)| *m == module) {
            Some((_, r)) => *r,
            None => {
                let r = candidates(&unit.abs, module)
                    .iter()
                    .find_map(|p| registers(p))
                    == Some(true);
                modules.push((module, r));
                r
            }
        };
        if registers {
            out.push((module.clone(), name.clone()));
        }
    }
    out
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
