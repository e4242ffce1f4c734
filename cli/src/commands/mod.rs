//! One module per subcommand.
//!
//! Owns: the glue between arguments, files and the compiler's analysis API.
//! Must never: contain language rules.

pub mod build;
pub mod check;
pub mod cost;
pub mod explain;
pub mod flow;
pub mod gate;
pub mod graph;
pub mod lsp;
pub mod migrate;
pub mod query;
pub mod run;
pub mod schema;
pub mod speckit;
pub mod watch;

/// Writes to stdout, ignoring a closed pipe (`stratumc inspect x | head`).
pub fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
