//! The rules: one file per rule, each reading facts and the training context, never syntax trees.

mod batch;
mod bs001;
mod bs002;
mod bs003;
mod bs004;
pub mod catalog;
mod edits;
mod equations;
mod ga001;
mod ga002;
mod ga003;
mod ga004;
mod ga005;
mod ga006;
mod ga007;
mod ga008;
mod ga009;
mod mem001;
mod mem002;
mod mem003;
mod mem004;
mod mem005;
mod mem006;
mod mem007;
mod mem008;
mod mem009;
mod mem010;
mod mem011;
mod mem012;
mod ml002;
mod parts;
mod requirement;
mod states;

pub use crate::diagnostic::fmt_num;

use crate::context::TrainingContext;
use crate::diagnostic::Diagnostic;
use crate::facts::Facts;
use crate::source::SourceFile;

/// What a rule sees of one file.
pub struct Checker<'a> {
    pub file: &'a SourceFile,
    pub facts: &'a Facts,
    pub training: &'a TrainingContext,
}

pub trait Rule: Sync {
    fn code(&self) -> &'static str;
    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>);
}

/// Every rule that runs over facts. ML900 (unused suppression) runs in the suppression pass.
pub static RULES: &[&dyn Rule] = &[
    &mem001::MissingOptimizerState,
    &mem002::WrongOptimizerMultiplier,
    &mem003::WrongDtypeBytes,
    &mem004::GbGibMismatch,
    &mem006::MissingGradientTerm,
    &mem007::LoraFullMultiplier,
    &mem008::ShardingDivisor,
    &mem009::MixedPrecisionHalving,
    &mem010::OffloadedStatesOnGpu,
    &mem011::CheckpointingMisattributed,
    &ga001::UnscaledAccumulationLoss,
    &ga002::DoubleScaledLoss,
    &ga003::ZeroGradInsideAccumulation,
    &ga004::SchedulerPerMicroStep,
    &ga005::ClipPerMicroStep,
    &ga006::TokenMeanOfMeans,
    &ga007::CustomLossIgnoresItemCount,
    &ga008::ScalerPerMicroStep,
    &ga009::DdpSyncEveryMicroStep,
    &bs001::DeepSpeedBatchMismatch,
    &bs002::EffectiveBatchMismatch,
    &bs003::TrainerDeepSpeedMismatch,
    &bs004::GlobalBatchMissingFactor,
    &mem005::TrainingDoesNotFit,
    &mem012::RunDoesNotFit,
    &ml002::RepeatedKey,
];

pub const UNUSED_SUPPRESSION: &str = "ML900";

/// A training config that a run reaches and that does not parse: reported by the pipeline, which
/// alone knows what runs reach (see `lint.rs`).
pub const INVALID_CONFIG: &str = "ML001";

/// Where a piece of evidence is in the file being checked: `line 12`, or `cell 2, line 4` in a
/// notebook.
pub fn line_of(file: &SourceFile, offset: usize) -> String {
    match file.locate(offset) {
        (Some(cell), p) => format!("cell {cell}, line {}", p.row),
        (None, p) => format!("line {}", p.row),
    }
}

/// Codes memlint can report, in catalogue order.
pub fn implemented_codes() -> Vec<&'static str> {
    let mut codes: Vec<&'static str> = RULES.iter().map(|r| r.code()).collect();
    codes.push(UNUSED_SUPPRESSION);
    codes.push(INVALID_CONFIG);
    codes.sort();
    codes
}

/// A loop misstep's path, as a clause for its message: ` when \`args.fp16\` and not \`clip\``,
/// or nothing when it shows on every path.
pub fn path_clause(path: &[(String, bool)]) -> String {
    if path.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = path
        .iter()
        .map(|(test, holds)| {
            if *holds {
                format!("`{test}`")
            } else {
                format!("not `{test}`")
            }
        })
        .collect();
    format!(" (when {})", parts.join(" and "))
}

/// The fix the loop model built and checked for a misstep.
pub fn loop_fix(m: &crate::facts::Misstep) -> Option<crate::diagnostic::Fix> {
    m.fix.as_ref().map(|f| crate::diagnostic::Fix {
        // A statement moves between blocks: what else reads it may change.
        applicability: crate::diagnostic::Applicability::Unsafe,
        message: f.message.clone(),
        edits: f.edits.clone(),
    })
}

/// How a misstep's window counts its micro-batches, for its message: `` `N` `` or
/// accelerate's factor.
pub fn window_factor(m: &crate::facts::Misstep) -> String {
    match (&m.factor, m.accelerate) {
        (Some(n), false) => format!("`{n}`"),
        _ => "the Accelerator's `gradient_accumulation_steps`".to_string(),
    }
}

/// The accumulation factor of a DeepSpeed config a run of this file reads, when it is above 1:
/// under accelerate's DeepSpeed plugin, the engine's `backward` divides by it.
pub fn deepspeed_accumulation<'a>(cx: &'a Checker<'_>) -> Option<&'a crate::context::Seen<f64>> {
    let project = &cx.training.project;
    project
        .launched_by
        .iter()
        .chain(&project.own_run)
        .find_map(|r| r.deepspeed_accumulation.as_ref().filter(|a| a.value > 1.0))
}

/// The key lists the batch rules compare configs with, for the prefilter's tests.
#[cfg(test)]
pub(crate) fn config_key_lists() -> Vec<&'static [&'static str]> {
    vec![bs002::GLOBAL, bs002::MICRO, bs002::ACCUM]
}
