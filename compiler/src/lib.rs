//! stratum-compiler: the front end of stratumc.
//!
//! Owns: spanned YAML loading ([`yaml`]), the structural decoder ([`syntax`]),
//! the contract type language ([`types`]), resolution and every static rule
//! ([`check`]), the checked IR ([`ir`]), cost analysis ([`cost`]),
//! diagnostics ([`diagnostics`]) and the public analysis API ([`analysis`])
//! that the CLI, the LSP and the MCP server call.
//! Must never: do I/O beyond what callers hand it (it takes source text), or
//! print anything.

pub mod analysis;
pub mod build;
pub mod check;
pub mod cost;
pub mod db;
pub mod diagnostics;
pub mod env;
pub mod ide;
pub mod ir;
pub mod lower;
pub mod migrate;
pub mod schema;
pub mod source;
pub mod speckit;
pub mod syntax;
pub mod testgen;
pub mod types;
pub mod yaml;

pub use analysis::{Analysis, analyze};
pub use diagnostics::{Code, Diagnostic, Severity};
pub use source::{LineCol, LineIndex, Span};
