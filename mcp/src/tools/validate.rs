//! `stratum_validate {spec, portable?}`: the front end's diagnostics for a
//! spec (with `portable`, also those of `stratumc check --portable`).
//!
//! Owns: running `analyze_bytes_with` on the spec text, with the
//! environment input of the `stratum.toml` in the server's directory, and rendering each
//! diagnostic with `render::json_diagnostic`, exactly as
//! `stratumc check --format json` does.
//! Must never: add, drop or reword a diagnostic: the CLI, the LSP and this
//! tool report the same diagnostics for the same text.

use serde_json::json;
use stratum_compiler::analysis::analyze_bytes_with;
use stratum_compiler::diagnostics::render;
use stratum_compiler::env::CheckEnv;

use super::SPEC;
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::{State, spec_text};

/// Tool name.
pub const NAME: &str = "stratum_validate";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Check a Stratum v1 spec (.stratum.yaml text or the same document as an object) without running it. \
Returns {status: \"valid\"|\"invalid\", valid, errors: [the error diagnostics], errorCount, warnings (a count), diagnostics: [{code, severity, message, line, column, end_line, end_column, labels, notes, help}]} \
— the same diagnostics as `stratumc check --format json`. Fix every error (read `help`) before calling stratum_plan; warnings are allowed. With `portable: true`, also one warning per use of a stratumc addition (language 1.1), as `stratumc check --portable`.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    SPEC,
    Field::opt(
        "portable",
        Kind::Bool,
        "Also warn once per use of a stratumc addition (language 1.1), for specs that must run on the original engine (default false).",
    ),
];

/// Runs the tool.
pub fn call(_: &mut State, args: &Args) -> Reply {
    let text = spec_text(args.get("spec").unwrap_or(&serde_json::Value::Null));
    // The environment input: the stratum.toml of the server's directory
    // (the spec arrives as text), as `stratum_cost` reads it.
    let (env, _) = CheckEnv::from_near(stratum_vm::config::near(None));
    let analysis = match args.flag("portable") {
        true => analyze_bytes_with(text.as_bytes(), &env).with_portability_warnings(),
        false => analyze_bytes_with(text.as_bytes(), &env),
    };
    let diagnostics: Vec<_> = analysis
        .diagnostics
        .iter()
        .map(|d| render::json_diagnostic(&analysis.text, &analysis.lines, d))
        .collect();
    let errors: Vec<_> = analysis
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| render::json_diagnostic(&analysis.text, &analysis.lines, d))
        .collect();
    let count = errors.len();
    Reply::Ok(json!({
        "status": if count == 0 { "valid" } else { "invalid" },
        "valid": count == 0,
        "errors": errors,
        "errorCount": count,
        "warnings": analysis.warning_count(),
        "diagnostics": diagnostics,
    }))
}
