//! One module per subcommand.
//!
//! Owns: the glue between arguments, files and the compiler's analysis API.
//! Must never: contain language rules.

pub mod build;
pub mod check;
pub mod completions;
pub mod cost;
pub mod explain;
pub mod flow;
pub mod gate;
pub mod graph;
pub mod guard;
pub mod init;
pub mod lease;
pub mod lsp;
pub mod migrate;
pub mod models;
pub(crate) mod progress;
pub mod query;
pub mod report;
pub mod run;
pub mod schema;
pub mod speckit;
pub mod store;
pub mod store_migrate;
pub mod ui;
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

/// A flow's input as `--inputs` gives it (`run`, `cost`): JSON text, or
/// `@FILE` to read it from a file; it must be a JSON object. A value that
/// is not JSON but names a file gets the hint to write `@FILE`.
pub fn flow_inputs(arg: &str) -> Result<serde_json::Value, String> {
    use std::path::Path;
    let (text, origin) = match arg.strip_prefix('@') {
        Some(file) => (
            crate::input::read_text(Path::new(file), crate::input::Kind::Inputs).map_err(|e| {
                match e {
                    crate::input::ReadError::Io { error, .. } => {
                        format!("cannot read inputs file {file}: {error}")
                    }
                    other => other.to_string(),
                }
            })?,
            file.to_string(),
        ),
        None => (arg.to_string(), "--inputs".to_string()),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        let hint = match arg.starts_with('@') || !Path::new(arg).is_file() {
            true => String::new(),
            false => format!(
                "\nhelp: `{arg}` is a file; to read the input from it, write `--inputs @{arg}`"
            ),
        };
        format!("{origin} is not valid JSON: {e}{hint}")
    })?;
    let found = match &value {
        serde_json::Value::Object(_) => return Ok(value),
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
    };
    Err(format!(
        "{origin} must be a JSON object (the flow's input), found {found}"
    ))
}
