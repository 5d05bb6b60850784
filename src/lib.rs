//! memlint: a linter for GPU-memory formulas, gradient-accumulation loops and batch-size settings
//! in ML training code and configs.
//!
//! The flow: [`discover`] → [`prefilter`] → [`config`] / [`frontend`] (read, parse and lower into
//! [`facts`]) → [`project`] (join the files of a project into each file's [`context`]) →
//! [`rules`] → [`suppress`] → [`report`] or [`fix`]. [`lint`] drives it.
//!
//! The modules below are grouped by layer, bottom to top: each imports only from its own layer
//! and the layers below (see `ARCHITECTURE.md`; `tests/architecture.rs` checks it).

// foundation
pub mod diagnostic;
pub mod knowledge;

// sources
pub mod source;

// readers
pub mod config;

// facts
pub mod expr;
pub mod facts;

// frontends
pub mod frontend;

// model
pub mod context;
pub mod estimate;
pub mod project;

// rules
pub mod rules;

// suppression
pub mod suppress;

// pipeline
pub mod discover;
pub mod lint;
pub mod prefilter;
pub mod settings;

// output
pub mod fix;
pub mod report;

// commands
pub mod cli;
pub mod server;
