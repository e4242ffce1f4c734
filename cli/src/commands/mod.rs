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
pub mod guard;
pub mod init;
pub mod lsp;
pub mod migrate;
pub mod models;
pub mod query;
pub mod report;
pub mod run;
pub mod schema;
pub mod speckit;
pub mod store;
pub mod verify;
pub mod watch;

/// Writes to stdout, ignoring a closed pipe (`stratumc inspect x | head`).
pub fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Prints `error: MESSAGE` on stderr; the exit status of a usage or I/O error.
pub fn usage(message: impl std::fmt::Display) -> crate::Exit {
    eprintln!("error: {message}");
    crate::Exit::Usage
}

/// Reads and analyses a spec that must be free of errors for `what` (e.g.
/// "no graph drawn"). On errors the diagnostics are rendered (to stdout when
/// `to_stdout`, else stderr; coloured on a terminal unless NO_COLOR) with a
/// closing `failed:` line, and the exit status is returned as the error.
pub fn error_free_spec(
    path: &std::path::Path,
    what: &str,
    to_stdout: bool,
) -> Result<stratum_compiler::Analysis, crate::Exit> {
    use std::io::{IsTerminal, Write};
    let shown = path.display().to_string();
    let bytes = crate::input::read(path, crate::input::Kind::Spec).map_err(usage)?;
    let analysis = stratum_compiler::analysis::analyze_bytes(&bytes);
    if analysis.ir.is_some() {
        return Ok(analysis);
    }
    let terminal = if to_stdout {
        std::io::stdout().is_terminal()
    } else {
        std::io::stderr().is_terminal()
    };
    let color = terminal && std::env::var_os("NO_COLOR").is_none();
    let text = stratum_compiler::diagnostics::render::human(
        &shown,
        &analysis.text,
        &analysis.diagnostics,
        color,
    );
    if to_stdout {
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    } else {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
    let n = analysis.error_count();
    eprintln!(
        "failed: {shown} has {n} error{}; {what}",
        if n == 1 { "" } else { "s" }
    );
    Err(crate::Exit::Errors)
}
