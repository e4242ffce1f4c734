//! stratum-vm: the plan format that the compiler targets, and (in a later
//! issue) the VM that executes plans.
//!
//! Owns: [`plan`] — the instruction set with its operand table, the plan data
//! types, deterministic serialization with a content hash, verification on
//! load, and the disassembler. [`store`] — the durable run store (SQLite by
//! default, in memory for tests). [`host`] — the workspace file jail and the
//! judge client behind ensure predicates. [`agent_runs`] — agent runs outside
//! a dispatch loop, with durable records. [`config`] — the one reader of
//! `stratum.toml`. [`drive`] — what every driver of a run shares. [`suggest`] — the toolchain's did-you-mean.
//! Must never: depend on the compiler or the grammar (a prebuilt plan runs
//! without the front end), or panic on a hostile plan file.

pub mod agent;
pub mod agent_runs;
pub mod background;
pub mod config;
pub mod connector;
pub mod drive;
pub mod engine;
pub mod eval;
pub mod history;
pub mod host;
pub mod interp;
pub mod operator;
pub mod plan;
pub mod report;
pub mod store;
pub mod suggest;
pub mod view;
