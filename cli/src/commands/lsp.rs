//! `stratumc lsp`: the language server over stdio, for any LSP editor.
//!
//! Owns: mapping how the session ended to the exit status the LSP
//! specification asks for (0 after `shutdown` + `exit`, 1 otherwise).
//! Must never: write to stdout (it carries the protocol) or implement any
//! part of the server (`stratum-lsp` does).

use crate::Exit;

/// Runs the server until the client exits.
pub fn run() -> Exit {
    match stratum_lsp::run_stdio() {
        Ok(stratum_lsp::Ending::Clean) => Exit::Ok,
        Ok(stratum_lsp::Ending::Abrupt) => Exit::Errors,
        Err(e) => {
            eprintln!("error: lsp: {e}");
            Exit::Usage
        }
    }
}
