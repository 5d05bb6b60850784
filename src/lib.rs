//! memlint: a linter for GPU-memory formulas, gradient-accumulation loops and batch-size settings
//! in ML training code and configs.
//!
//! The flow: [`discover`] → [`prefilter`] → [`frontend`] / [`config`] (parse and lower into
//! [`facts`]) → [`context`] (join files of a project) → [`rules`] → [`suppress`] → [`report`] or
//! [`fix`]. [`lint`] drives it.

pub mod cli;
pub mod config;
pub mod context;
pub mod diagnostic;
pub mod discover;
pub mod expr;
pub mod facts;
pub mod fix;
pub mod frontend;
pub mod knowledge;
pub mod lint;
pub mod prefilter;
pub mod project;
pub mod report;
pub mod rules;
pub mod settings;
pub mod source;
pub mod suppress;
