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
    let config = stratum_vm::config::load_file(path).map_err(|e| e.to_string())?;
    Ok(CostConfig::from_config(&config))
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
