//! `stratumc schema`: print the JSON Schema (draft-07) of the v1 spec, for
//! yaml-language-server and other schema-aware YAML editors.
//!
//! Owns: printing the schema as pretty JSON on stdout (exit 0).
//! Must never: build the schema itself (`stratum_compiler::schema` derives it
//! from the decoder's tables).

use crate::Exit;

/// Runs the command.
pub fn run() -> Exit {
    let schema = stratum_compiler::schema::schema();
    let text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    super::emit(&format!("{text}\n"));
    Exit::Ok
}
