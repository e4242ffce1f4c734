//! `stratum_cost {spec, flow?, input?}`: the cost bounds of a flow before any run.
//!
//! Owns: the same document as `stratumc cost --format json` (`version` plus
//! the serialized `FlowCost`), with the agent profiles of `./stratum.toml`
//! when it exists, else the built-in defaults.
//! Must never: estimate anything itself — every figure comes from
//! `stratum_compiler::cost::analyze_cost`.

use serde_json::{Value, json};
use stratum_compiler::analysis::analyze_bytes;
use stratum_compiler::cost::{CostConfig, analyze_cost};
use stratum_compiler::diagnostics::render;

use super::{FLOW, SPEC};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::{State, spec_text};

/// Tool name.
pub const NAME: &str = "stratum_cost";

/// Version of the document (the same as `stratumc cost --format json`).
pub const JSON_VERSION: u32 = 1;

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Estimate what a flow will cost before running it: dispatches, tokens, usd, ms as {min, expected, worst} \
(symbolic when they depend on input sizes: give `input` to get numbers), per-step entries, human decisions, chance of success, \
and whether the worst case exceeds the flow's declared `budget`. Same report as `stratumc cost --format json`.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    SPEC,
    FLOW,
    Field::opt(
        "input",
        Kind::Obj,
        "The flow's input, to size fanouts and lists (optional).",
    )
    .or("inputs"),
];

fn config() -> Result<CostConfig, String> {
    let path = std::path::Path::new("stratum.toml");
    if !path.is_file() {
        return Ok(CostConfig::default());
    }
    let text = read_config(path)?;
    CostConfig::from_toml(&text).map_err(|e| format!("stratum.toml: {e}"))
}

/// Largest `stratum.toml` read (the limit of `stratumc cost --config`).
const MAX_CONFIG_SIZE: u64 = 1024 * 1024;

/// The text of `stratum.toml`, at most [`MAX_CONFIG_SIZE`] bytes.
fn read_config(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG_SIZE + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("stratum.toml: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_SIZE {
        return Err(format!(
            "stratum.toml: a configuration file is limited to 1 MiB ({MAX_CONFIG_SIZE} bytes)"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "stratum.toml: the file is not UTF-8 text".to_string())
}

/// Runs the tool.
pub fn call(_: &mut State, args: &Args) -> Reply {
    let text = spec_text(args.get("spec").unwrap_or(&Value::Null));
    let analysis = analyze_bytes(text.as_bytes());
    let Some(ir) = analysis.ir.as_ref() else {
        let diagnostics: Vec<_> = analysis
            .diagnostics
            .iter()
            .map(|d| render::json_diagnostic(&analysis.text, &analysis.lines, d))
            .collect();
        let n = analysis.error_count();
        return Reply::error_with(
            "spec_validation_failed",
            format!(
                "the spec has {n} error{}; no cost computed",
                if n == 1 { "" } else { "s" }
            ),
            json!({"diagnostics": diagnostics}),
        );
    };
    let flow = match args.str("flow") {
        None => ir.entry,
        Some(name) => match ir.flow(name) {
            Some((id, _)) => id,
            None => {
                let names: Vec<String> = ir.flows.iter().map(|f| format!("`{}`", f.name)).collect();
                return Reply::error(
                    "unknown_flow",
                    format!(
                        "no flow `{name}`; the spec's flows are {}",
                        names.join(", ")
                    ),
                );
            }
        },
    };
    let config = match config() {
        Ok(c) => c,
        Err(e) => return Reply::error("invalid_config", e),
    };
    let cost = analyze_cost(ir, flow, args.get("input"), &config);
    let mut doc = serde_json::Map::new();
    doc.insert("version".into(), JSON_VERSION.into());
    if let Ok(Value::Object(fields)) = serde_json::to_value(&cost) {
        doc.extend(fields);
    }
    Reply::Ok(Value::Object(doc))
}
