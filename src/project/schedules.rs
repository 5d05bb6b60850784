//! Schedules judged across modules (GA004): a scheduler that a function of one module returns,
//! sized by a product with the accumulation factor, and that a file importing the function steps
//! once per optimizer step. The product is written in the helper's module, so the finding is
//! reported there, naming the step.
//!
//! The factor is matched by value, not by name: each name the product multiplies is read as the
//! caller hands it (`max_steps * accum` with `make(cfg.steps, cfg.ga)` multiplies `cfg.ga`), and
//! the loop's factor as the caller wrote it, or, for an `Accelerator` an imported function
//! returns, as that function's factor reads the caller's arguments.

use super::helpers::candidates;
use super::Unit;
use crate::context::{ProjectView, SteppedElsewhere};
use crate::frontend::python::same_operand;
use std::collections::HashMap;
use std::path::Path;

/// Each unit's schedules that files importing them step once per optimizer step.
pub(super) fn join(units: &[&Unit], modules: &Modules, views: &mut [ProjectView]) {
    for unit in units {
        for s in &unit.facts.links.stepped {
            let Some(a) = modules.unit(&unit.abs, &s.call.module) else {
                continue;
            };
            let factor = match &s.factor_from {
                None => s.factor.clone(),
                Some(call) => {
                    let made = modules.unit(&unit.abs, &call.module).and_then(|m| {
                        let links = &units[m].facts.links;
                        links
                            .accelerators
                            .iter()
                            .find(|x| x.function == call.function)
                    });
                    match made.and_then(|x| handed(&x.factor, &x.params, &call.args)) {
                        Some(factor) => factor,
                        None => continue,
                    }
                }
            };
            let schedules = units[a].facts.links.schedules.iter();
            for r in schedules.filter(|r| r.function == s.call.function) {
                let Some(name) = r.multiplied.iter().find(|w| {
                    handed(w, &r.params, &s.call.args).is_some_and(|h| same_operand(&h, &factor))
                }) else {
                    continue;
                };
                if views[a]
                    .stepped_elsewhere
                    .iter()
                    .any(|e| e.length_at == r.length_at)
                {
                    continue;
                }
                let row = unit.file.position(s.step.start).row;
                views[a].stepped_elsewhere.push(SteppedElsewhere {
                    length: r.length.clone(),
                    length_at: r.length_at.clone(),
                    built: r.built.clone(),
                    factor: name.clone(),
                    step: unit.file.slice(&s.step).to_string(),
                    step_at: format!("{}:{row}", unit.file.display),
                    accelerate: s.accelerate,
                    prepared: s.prepared,
                });
            }
        }
    }
}

/// The units by path, to find the unit an import names.
pub(super) struct Modules<'a>(HashMap<&'a Path, usize>);

impl<'a> Modules<'a> {
    pub(super) fn new(units: &[&'a Unit]) -> Self {
        Self(
            units
                .iter()
                .enumerate()
                .map(|(u, unit)| (unit.abs.as_path(), u))
                .collect(),
        )
    }

    /// The unit that `module`, imported by the file at `importer`, is: the first of the paths
    /// Python would try that is linted.
    pub(super) fn unit(&self, importer: &Path, module: &str) -> Option<usize> {
        candidates(importer, module)
            .iter()
            .find_map(|p| self.0.get(p.as_path()).copied())
    }
}

/// `name` (a parameter, or an attribute or item of one: `args.accum`, `hp["accum"]`) as a call
/// hands it, by keyword or by position: `None` when it reads no parameter or the call does not
/// hand it.
fn handed(name: &str, params: &[String], args: &[String]) -> Option<String> {
    let (root, rest) = name.split_at(name.find(['.', '[']).unwrap_or(name.len()));
    let index = params.iter().position(|p| p == root)?;
    fn keyword(a: &str) -> Option<(&str, &str)> {
        let (k, v) = a.split_once('=')?;
        let k = k.trim();
        let plain = k.chars().all(|c| c.is_alphanumeric() || c == '_') && !v.starts_with('=');
        plain.then_some((k, v.trim()))
    }
    let value = args
        .iter()
        .find_map(|a| keyword(a).filter(|(k, _)| *k == root).map(|(_, v)| v))
        .or_else(|| {
            let positional: Vec<&String> = args
                .iter()
                .filter(|a| keyword(a).is_none() && !a.starts_with('*'))
                .collect();
            positional.get(index).map(|a| a.as_str())
        })?;
    Some(format!("{value}{rest}"))
}

#[cfg(test)]
mod tests {
    use super::handed;

    #[test]
    fn a_parameter_is_read_as_the_call_hands_it() {
        let params = ["cfg".to_string(), "opt".to_string(), "procs".to_string()];
        let args = [
            "args".to_string(),
            "optimizer".to_string(),
            "procs=acc.num_processes".to_string(),
        ];
        assert_eq!(
            handed("cfg.accum", &params, &args).as_deref(),
            Some("args.accum")
        );
        assert_eq!(
            handed("procs", &params, &args).as_deref(),
            Some("acc.num_processes")
        );
        assert_eq!(
            handed("cfg[\"ga\"]", &params, &args).as_deref(),
            Some("args[\"ga\"]")
        );
        assert_eq!(handed("ACCUM", &params, &args), None);
        assert_eq!(handed("opt", &params, &args[..1]), None);
    }
}
