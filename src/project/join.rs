//! The join: runs built over the units and the files read for context, then each unit's view of
//! the runs that reach it.

use super::estimate::run_inputs;
use super::files::{located, ContextFiles, Fid, Files, Unit};
use super::helpers;
use super::lookup::follow_nested;
use super::memory::memory_case;
use super::pins::{old_transformers, pinned_project, project_root};
use super::runs::{launch_run, recipe_run, standalone_run, Run};
use crate::context::{
    ConfigRef, ConfigUse, ExternalConfig, LaunchView, Located, ProjectView, RunEstimate,
};
use crate::source::Language;
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
    let modules = super::schedules::Modules::new(units);
    super::schedules::join(units, &modules, &mut views);
    super::models::join(units, &modules, &mut views);
    let lone = lone_accelerate_config(&mut files, units.len(), &runs);
    // A launcher that checks memory before its one command (a shell pre-flight) checks the run
    // that command starts: its formulas read the configs the command is given.
    let mut launched: Vec<Vec<&Run>> = vec![Vec::new(); units.len()];
    for run in &runs {
        if let (Fid::Unit(u), Some(_)) = (run.origin, run.invocation) {
            launched[u].push(run);
        }
    }
    for (u, evidence) in joined.iter_mut().enumerate() {
        let [run] = launched[u].as_slice() else {
            continue;
        };
        if units[u].facts.formulas.is_empty() {
            continue;
        }
        join_configs(evidence, &mut files, run, |f| {
            Some(f) == run.script || f == run.origin
        });
    }
    for run in &runs {
        // The script's context: the launcher's evidence (`--optim adamw`) and the configs'.
        if let (Some(Fid::Unit(s)), Some(_)) = (run.script, run.invocation) {
            if Fid::Unit(s) != run.origin {
                let ev = &units[s].facts.evidence;
                let trains = !ev.trains.is_empty() || !ev.optimizers.is_empty();
                joined[s].join(&launcher_located(&files, run, trains));
                join_configs(&mut joined[s], &mut files, run, |f| f == Fid::Unit(s));
            }
        }
        if let (Some(Fid::Unit(s)), Some(_)) = (run.script, run.invocation) {
            if Fid::Unit(s) != run.origin {
                views[s].launched_by.push(run.info.clone());
            }
        }
        // A file run on its own reads the configs it opens by a literal path.
        if let (Fid::Unit(u), None, None) = (run.origin, run.invocation, run.recipe) {
            join_configs(&mut joined[u], &mut files, run, |f| f == run.origin);
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
                    .filter(|(f, _, _)| match f {
                        Fid::Extra(_) => true,
                        Fid::Unit(c) => !units[*c].reported,
                    })
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
        if let Some((u, case)) = memory_case(&files, run, &lone) {
            views[u].memory.push(case);
        }
        if let (Fid::Unit(u), Some((name, inputs))) = (run.origin, run_inputs(&files, run)) {
            let span = match (run.invocation, run.recipe) {
                (Some(k), _) => units[u].facts.invocations[k].span.clone(),
                (_, Some(c)) => files.config(run.origin, c).map_or(0..0, |n| n.span.clone()),
                _ => 0..0,
            };
            views[u].estimates.push(RunEstimate { name, inputs, span });
        }
    }
    launches_that_train(units, &files, &runs, &mut joined);
    join_siblings(&mut files, &runs, &mut joined);
    join_importers(units, &own, &mut joined);
    join_lone_accelerate_config(&files, units, &lone, &mut joined);
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

/// A module of helpers beside the scripts that counts memory for the scripts importing it (`from
/// mem_budget import fits`; [`helpers::helper_module`]): its formulas are judged with what the
/// scripts that import its functions train with. The pipeline analyses those scripts whole.
fn join_importers(units: &[&Unit], own: &[Located], joined: &mut [Located]) {
    let trainers: Vec<usize> = (0..units.len())
        .filter(|&i| {
            units[i].file.language == Language::Python
                && !units[i].facts.evidence.optimizers.is_empty()
        })
        .collect();
    if trainers.is_empty() {
        return;
    }
    for (h, helper) in units.iter().enumerate() {
        let Some(functions) = helpers::helper_module(helper) else {
            continue;
        };
        let Some(folder) = helpers::importers_folder(&helper.abs) else {
            continue;
        };
        for &i in &trainers {
            let importer = units[i];
            if !helpers::within(&importer.abs, folder) {
                continue;
            }
            let text = importer.file.text.as_bytes();
            if helpers::imports_any(&importer.abs, text, &helper.abs, &functions) {
                joined[h].join(&own[i]);
            }
        }
    }
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

/// How a config reached a run, for messages: the launcher word that names it, or the script's
/// line that opens it by a literal path.
fn route(files: &mut Files, run: &Run, config: Fid) -> String {
    if let Some((_, _, at)) = run.named.iter().find(|(f, _, _)| *f == config) {
        return format!(", which {} names", files.site(run.origin, at.start));
    }
    let script = run.script.unwrap_or(run.origin);
    let opened: Vec<(String, usize)> = files
        .facts(script)
        .opened_paths
        .iter()
        .map(|(p, span)| (p.clone(), span.start))
        .collect();
    for (path, at) in opened {
        if files.resolve(&path, script) == Some(config) {
            return format!(", which {} opens", files.site(script, at));
        }
    }
    String::new()
}

/// Join into `into` what each config `run` is given says, by the route that reaches it, all but
/// the files `skip` names (the script or launcher joining them).
fn join_configs(into: &mut Located, files: &mut Files, run: &Run, skip: impl Fn(Fid) -> bool) {
    for (f, c) in &run.configs {
        if !skip(*f) {
            let route = route(files, run, *f);
            into.join(&located(files, *f, Some(*c)).via(&route));
        }
    }
}

/// What the launcher of `run` says about it. A script that trains (`trains`) is the run of its
/// own command: it sees that command's words and what the launcher says outside every command
/// (an `export`, a variable the commands read), not the flags of its other commands, which
/// start other runs. A script that does not train (a pre-flight check) sees the whole launcher.
fn launcher_located(files: &Files, run: &Run, trains: bool) -> Located {
    let facts = files.facts(run.origin);
    let invocations = &facts.invocations;
    let own = run.invocation.and_then(|k| invocations.get(k));
    let keep = |at: usize| {
        !trains
            || own.is_some_and(|i| i.span.contains(&at))
            || !invocations.iter().any(|i| i.span.contains(&at))
    };
    Located::from_file_where(files.file(run.origin), facts, keep)
}

/// A launcher that runs a pre-flight script beside the training command
/// (`python check_memory.py` then `deepspeed train.py --deepspeed ds.json`): the script given no
/// config of its own checks the run its sibling command starts, so it reads that command's
/// configs.
fn join_siblings(files: &mut Files, runs: &[Run], joined: &mut [Located]) {
    for run in runs {
        let (Some(Fid::Unit(s)), Some(_)) = (run.script, run.invocation) else {
            continue;
        };
        if run.configs.iter().any(|(f, _)| Some(*f) != run.script) {
            continue;
        }
        for sibling in runs {
            let named_elsewhere = sibling.origin == run.origin
                && sibling.invocation.is_some()
                && sibling.invocation != run.invocation
                && sibling.script != run.script;
            if !named_elsewhere {
                continue;
            }
            let Some(k) = sibling.invocation else {
                continue;
            };
            let at = files
                .facts(sibling.origin)
                .invocations
                .get(k)
                .map_or(0, |i| i.span.start);
            let command = files.site(sibling.origin, at);
            for (f, c) in &sibling.configs {
                if Some(*f) == sibling.script {
                    continue;
                }
                let route = format!(", which the sibling command at {command} is given");
                if let Some(l) = joined.get_mut(s) {
                    l.join(&located(files, *f, Some(*c)).via(&route));
                }
            }
        }
    }
}

/// An accelerate config (`compute_environment:`, `distributed_type:`) that no command names,
/// alone of its kind among the files linted: what `accelerate launch` runs the project's
/// accelerate scripts with. With it, the configs it names (`deepspeed_config_file:`).
pub(super) fn lone_accelerate_config(
    files: &mut Files,
    units: usize,
    runs: &[Run],
) -> Vec<(Fid, ConfigRef)> {
    // Named by a command, or by another recipe (an accelerate config that names its DeepSpeed
    // config is a recipe of its own, and still the one `accelerate launch` reads).
    let named: std::collections::HashSet<Fid> = runs
        .iter()
        .filter(|r| r.invocation.is_some() || r.recipe.is_some())
        .flat_map(|r| {
            r.configs
                .iter()
                .map(|(f, _)| *f)
                .filter(move |f| r.invocation.is_some() || *f != r.origin)
        })
        .collect();
    let accelerate: Vec<(Fid, ConfigRef)> = (0..units)
        .map(Fid::Unit)
        .flat_map(|f| {
            files
                .configs_of(f)
                .into_iter()
                .filter(|c| matches!(c, ConfigRef::Root(_)))
                .map(move |c| (f, c))
        })
        .filter(|(f, c)| {
            files.config(*f, *c).is_some_and(|root| {
                root.get("compute_environment").is_some() || root.get("distributed_type").is_some()
            })
        })
        .collect();
    let [one] = accelerate.as_slice() else {
        return Vec::new();
    };
    if named.contains(&one.0) {
        return Vec::new();
    }
    let mut configs = vec![*one];
    follow_nested(files, &mut configs, one.0);
    configs
}

/// The lone accelerate config joins every script that uses accelerate.
fn join_lone_accelerate_config(
    files: &Files,
    units: &[&Unit],
    lone: &[(Fid, ConfigRef)],
    joined: &mut [Located],
) {
    let Some(&(accelerate, _)) = lone.first() else {
        return;
    };
    for (u, unit) in units.iter().enumerate() {
        let uses_accelerate = unit
            .facts
            .evidence
            .frameworks
            .iter()
            .any(|m| m.value == crate::facts::Framework::Accelerate);
        if uses_accelerate {
            if let Some(l) = joined.get_mut(u) {
                for &(config, c) in lone {
                    let route = match config == accelerate {
                        true => ", the project's only accelerate config".to_string(),
                        false => format!(
                            ", which {}, the project's only accelerate config, names",
                            files.file(accelerate).display
                        ),
                    };
                    l.join(&located(files, config, Some(c)).via(&route));
                }
            }
        }
    }
}

/// A launch command is training evidence for its launcher only when what it runs trains: the
/// script's own evidence where the project holds it; otherwise the command's words (a
/// distributed launcher, a flag only training takes). `python eval_harness.py --tasks arc` or
/// `python serve.py --port 8000` does not make the launcher's memory check a training one.
fn launches_that_train(units: &[&Unit], files: &Files, runs: &[Run], joined: &mut [Located]) {
    for run in runs {
        let (Fid::Unit(u), Some(k)) = (run.origin, run.invocation) else {
            continue;
        };
        let Some(inv) = units[u].facts.invocations.get(k) else {
            continue;
        };
        let trains = match run.script {
            Some(s) if s != run.origin => {
                let ev = &files.facts(s).evidence;
                !ev.trains.is_empty() || !ev.optimizers.is_empty()
            }
            _ => command_trains(inv),
        };
        if !trains {
            joined[u].evidence.trains.retain(|t| *t != inv.span);
        }
    }
}

/// Whether a command whose script is not in the project says it trains: a launcher other than
/// the interpreter (`torchrun`, `deepspeed`, `accelerate launch`, `tune run`), a wrapper that
/// starts several processes (`srun`, `mpirun`), or a flag only training takes.
fn command_trains(inv: &crate::facts::Invocation) -> bool {
    const INTERPRETERS: &[&str] = &["python", "python3"];
    const MULTI_PROCESS: &[&str] = &["srun", "mpirun"];
    const TRAINING_FLAGS: &[&str] = &[
        "train",
        "learning_rate",
        "lr",
        "optim",
        "epoch",
        "accum",
        "deepspeed",
        "fsdp",
        "max_steps",
        "warmup",
        "weight_decay",
        "grad",
    ];
    !INTERPRETERS.contains(&inv.launcher.as_str())
        || inv
            .wrappers
            .iter()
            .any(|(p, _)| MULTI_PROCESS.contains(&p.as_str()))
        || inv.args.iter().any(|a| {
            let flag = a.value.trim_start_matches('-').to_ascii_lowercase();
            a.value.starts_with("--")
                && flag
                    .split(['_', '-', '='])
                    .any(|w| TRAINING_FLAGS.iter().any(|t| w.starts_with(t)))
        })
}
