//! The join: runs built over the units and the files read for context, then each unit's view of
//! the runs that reach it.

use super::estimate::run_inputs;
use super::files::{located, ContextFiles, Fid, Files, Unit};
use super::memory::memory_case;
use super::pins::{old_transformers, pinned_project, project_root};
use super::runs::{launch_run, recipe_run, standalone_run, Run};
use crate::context::{ConfigUse, ExternalConfig, LaunchView, Located, ProjectView};
use std::path::{Path, PathBuf};

/// Join the units of one lint run, reading only what is loaded: the units, and the files read
/// for context so far. While a run names a file that is neither, the join says which files it
/// needs ([`Join::Needs`]); once every file it looks up is known, it gives each unit's evidence
/// joined with its runs' (for the training context), each unit's view of the project, and the
/// files outside the units that runs reached ([`Join::Joined`]).
pub fn join(units: &[&Unit], context: &ContextFiles, cwd: &Path) -> Join {
    let mut files = Files::new(units, context, cwd);
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
    // Every path is looked up while the runs are built: what a run reads of a file it could not
    // look up would be wrong.
    if !files.needs.is_empty() {
        return Join::Needs(files.needs.into_iter().collect());
    }

    let own: Vec<Located> = units
        .iter()
        .map(|u| Located::from_file(&u.file, &u.facts))
        .collect();
    let mut joined = own.clone();
    let mut views: Vec<ProjectView> = units
        .iter()
        .map(|u| ProjectView {
            world_setting: u.defaults.world_size,
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
        if let (Some(Fid::Unit(s)), Some(_)) = (run.script, run.invocation) {
            if Fid::Unit(s) != run.origin {
                views[s].launched_by.push(run.info.clone());
            }
        }
        // A file run on its own reads the configs it opens by a literal path.
        if let (Fid::Unit(u), None, None) = (run.origin, run.invocation, run.recipe) {
            for (f, c) in &run.configs {
                if *f != run.origin {
                    joined[u].join(&located(&files, *f, Some(*c)));
                }
            }
            views[u].own_run = Some(run.info.clone());
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
        if let Some((u, case)) = memory_case(&files, run) {
            views[u].memory.push(case);
        }
        if let (Fid::Unit(u), Some(found)) = (run.origin, run_inputs(&files, run)) {
            views[u].estimates.push(found);
        }
    }
    for (u, unit) in units.iter().enumerate() {
        if old_transformers(&unit.facts).is_some() {
            if let Some(root) = project_root(&unit.abs) {
                views[u].pinned = Some(pinned_project(&files, &runs, root));
            }
        }
    }
    Join::Joined(Joined {
        located: joined,
        views,
        outside: files.reached.into_iter().collect(),
    })
}

/// What joining the units gives.
pub enum Join {
    /// Paths that runs name, outside the units and not read yet (normalised, absolute when the
    /// units' are): read them into the [`ContextFiles`] and join again.
    Needs(Vec<PathBuf>),
    Joined(Joined),
}

/// The project joined, per unit (in the units' order).
pub struct Joined {
    /// The unit's evidence joined with its launchers' and configs'.
    pub located: Vec<Located>,
    pub views: Vec<ProjectView>,
    /// Files outside the units that runs reached (read for context, or not readable), sorted.
    pub outside: Vec<PathBuf>,
}
