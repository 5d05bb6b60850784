//! The project around each file: which launcher runs which script with which configs, joined
//! across files so that rules can check what lives between them.
//!
//! A *run* is one launch: a shell command (`deepspeed --num_gpus 8 train.py --deepspeed ds.json`),
//! or a recipe that names its DeepSpeed config (`deepspeed: ds_z3.json` in a LLaMA-Factory or
//! axolotl YAML), together with the script it starts and the configs it names (followed one more
//! level: an accelerate config naming its DeepSpeed file). A file that no run reaches is a run of
//! its own. Paths are resolved against the launcher's folder, its parents up to the repository
//! root, and the working directory; a config or script that was not linted is read for context
//! (never reported on). Every value keeps where it came from, so messages can give the chain:
//! "8 ranks from `deepspeed --num_gpus 8` at launch.sh:3".
//!
//! The join is a function of what is loaded: it never reads a file itself. When a run names a
//! file that is neither linted nor read yet, [`join`] says so ([`Join::Needs`]); the pipeline
//! reads it into the [`ContextFiles`] and joins again. What it computes, rules read through
//! [`crate::context`]: the training context of each file and its [`ProjectView`](crate::context::ProjectView).
//!
//! - `files.rs`: the units and the files read for context, and path resolution;
//! - `launch.rs`: a command's words, split into launcher options, script flags and positionals;
//! - `lookup.rs`: which words name a config, and where that config is;
//! - `world.rs`: the processes a launch starts, and the data-parallel degree;
//! - `trainer.rs`: the HF Trainer arguments a run passes with its DeepSpeed config;
//! - `runs.rs`: one run per launch, recipe, or file no run reaches;
//! - `names.rs`: parameter counts in model names, and the keys that state quantities;
//! - `memory.rs`: the memory case of a run, for MEM005;
//! - `join.rs`: the runs built, then each unit's view of them;
//! - `pins.rs`: what the project under a requirements file shows, for its dependency pins;
//! - `helpers.rs`: what helpers imported from the project's modules return, for loss provenance
//!   and for the memory arithmetic that calls them;
//! - `exported.rs`: whether a module's text may define such a helper, before it is read for one;
//! - `schedules.rs`: schedulers a module returns, stepped by the files that import them (GA004);
//! - `models.rs`: models a module returns wrapped in DDP, trained by the files that import them
//!   (GA009).

mod estimate;
mod exported;
mod files;
pub mod helpers;
mod join;
mod launch;
mod lookup;
mod memory;
mod models;
mod names;
pub mod pins;
mod runs;
mod schedules;
mod trainer;
mod world;

pub use exported::may_export;
pub use files::{ContextFile, ContextFiles, Unit};
pub use join::{join, Join, Joined};
pub use memory::states_a_fit;
pub use names::{is_gpu_memory_name, params_from_name, MODEL_KEYS};
pub use trainer::{accelerate_deepspeed, TRAINER_ARGS};

/// The key lists the readers of configs compare with, for the prefilter's tests.
#[cfg(test)]
pub(crate) fn config_key_lists() -> Vec<&'static [&'static str]> {
    vec![
        names::PARAM_KEYS,
        MODEL_KEYS,
        TRAINER_ARGS,
        estimate::MICRO_BATCH_KEYS,
        estimate::SEQ_KEYS,
        estimate::ACCUM_KEYS,
        estimate::LORA_RANK_KEYS,
        estimate::LORA_TARGET_KEYS,
        pins::PACKING_KEYS,
    ]
}
