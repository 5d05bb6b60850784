//! The training context of a file: its own evidence joined with what the project around it says
//! (the launcher that runs it, the configs it is given, the project's `.memlint.toml` defaults).

use crate::facts::{Evidence, Facts, Framework, Precision};
use crate::knowledge::{knowledge, OptimizerRow};
use crate::source::SourceFile;

/// Where a piece of context came from, for the message's evidence chain.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Seen in a file (`train.py:12`, `launch.sh:3`).
    Seen(String),
    /// Stated in the memlint configuration.
    Configured,
    /// Nothing was seen: the common default, stated as an assumption.
    Assumed,
}

impl Origin {
    pub fn describe(&self) -> String {
        match self {
            Origin::Seen(at) => format!("seen at {at}"),
            Origin::Configured => "from the memlint configuration".into(),
            Origin::Assumed => "assumed: no optimizer was seen".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct OptimizerChoice {
    pub row: &'static OptimizerRow,
    pub origin: Origin,
}

/// Evidence from one file, with the file's name and positions resolved.
#[derive(Debug, Clone, Default)]
pub struct Located {
    pub evidence: Evidence,
    /// `(path, line)` of each optimizer mention, parallel to `evidence.optimizers`.
    pub optimizer_sites: Vec<String>,
}

impl Located {
    pub fn from_file(file: &SourceFile, facts: &Facts) -> Self {
        let sites = facts
            .evidence
            .optimizers
            .iter()
            .map(|m| file.site(m.span.start))
            .collect();
        Located {
            evidence: facts.evidence.clone(),
            optimizer_sites: sites,
        }
    }

    pub fn join(&mut self, other: &Located) {
        self.evidence.extend(&other.evidence);
        self.optimizer_sites
            .extend(other.optimizer_sites.iter().cloned());
    }
}

/// What rules know about how the code in a file trains.
#[derive(Debug, Clone, Default)]
pub struct TrainingContext {
    /// Every distinct optimizer seen for this file (a script may choose between several).
    pub optimizers: Vec<OptimizerChoice>,
    pub trains: bool,
    /// Inference evidence and no training evidence: no training rule applies to the file.
    pub inference: bool,
    pub lora: bool,
    pub frozen: bool,
    pub sharded: bool,
    pub precision: Vec<Precision>,
    pub frameworks: Vec<Framework>,
    /// An optimizer name that is not in the knowledge table: nothing may be asserted about it.
    pub unknown_optimizer: bool,
    /// The launchers, scripts and configs around the file (see [`crate::project`]).
    pub project: std::sync::Arc<crate::project::ProjectView>,
    /// What the helpers this file imports from other modules of the project return, by module
    /// as written and name (see [`crate::facts::Prov`]).
    pub imported: std::sync::Arc<Vec<((String, String), crate::facts::Scaling)>>,
}

impl TrainingContext {
    /// What an imported helper returns: `None` when its module is not part of the project.
    pub fn imported_return(&self, module: &str, name: &str) -> Option<crate::facts::Scaling> {
        self.imported
            .iter()
            .find(|((m, n), _)| m == module && n == name)
            .map(|(_, s)| *s)
    }
}

/// Project-level defaults from the memlint configuration.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    pub optimizer: Option<String>,
}

impl TrainingContext {
    pub fn build(located: &Located, defaults: &Defaults) -> Self {
        let ev = &located.evidence;
        let k = knowledge();
        let mut cx = TrainingContext {
            trains: !ev.trains.is_empty() || !ev.optimizers.is_empty(),
            // Inference-only: a training script that evaluates under `no_grad` still trains;
            // formulas inside inference code are marked one by one.
            inference: !ev.inference.is_empty() && ev.trains.is_empty() && ev.optimizers.is_empty(),
            lora: !ev.lora.is_empty(),
            frozen: !ev.frozen.is_empty(),
            sharded: !ev.sharding.is_empty(),
            precision: ev.precision.iter().map(|m| m.value).collect(),
            frameworks: ev.frameworks.iter().map(|m| m.value).collect(),
            ..TrainingContext::default()
        };
        for (i, m) in ev.optimizers.iter().enumerate() {
            let row = if m.value.name == "sgd" && m.value.momentum.is_some_and(|v| v != 0.0) {
                k.optimizer_by_id("sgd-momentum")
            } else if m.value.amsgrad {
                k.optimizer_by_id("adam-amsgrad")
            } else if m.value.name == "adafactor" && m.value.beta1 {
                k.optimizer_by_id("adafactor-beta1")
            } else {
                k.optimizer(&m.value.name)
            };
            match row {
                Some(row) => {
                    if !cx.optimizers.iter().any(|o| o.row.id == row.id) {
                        let at = located.optimizer_sites.get(i).cloned().unwrap_or_default();
                        cx.optimizers.push(OptimizerChoice {
                            row,
                            origin: Origin::Seen(at),
                        });
                    }
                }
                None => cx.unknown_optimizer = true,
            }
        }
        if cx.optimizers.is_empty() {
            if let Some(row) = defaults.optimizer.as_deref().and_then(|n| k.optimizer(n)) {
                cx.optimizers.push(OptimizerChoice {
                    row,
                    origin: Origin::Configured,
                });
            }
        }
        cx
    }

    /// The optimizer to judge a training-memory formula against: the one(s) seen, else AdamW as
    /// an assumption the message states. `None` when nothing may be asserted.
    pub fn judged_optimizers(&self) -> Option<Vec<OptimizerChoice>> {
        if self.unknown_optimizer || self.optimizers.iter().any(|o| !o.row.known) {
            return None;
        }
        if !self.optimizers.is_empty() {
            return Some(self.optimizers.clone());
        }
        let row = knowledge().optimizer_by_id("adamw")?;
        Some(vec![OptimizerChoice {
            row,
            origin: Origin::Assumed,
        }])
    }

    /// Only a fraction of the parameters trains, or the states are sharded: whole-model
    /// multipliers do not apply.
    pub fn whole_model_multipliers_apply(&self) -> bool {
        !(self.lora || self.frozen || self.sharded)
    }
}
