//! `stratum_plan {spec, flow?, input, workspaceRoot?}`: compile a spec and
//! start a run.
//!
//! Owns: the pipeline spec text → analysis → plan → plan file → stored plan
//! → started run, and the run's workspace root (given, else the server's
//! directory), recorded in the run so any later server uses the same root.
//! The started run gets the cost model's per-step estimate in its audit
//! (`estimated`, through `Engine::record_estimate`) for `stratumc report`.
//! Must never: start a run from a spec with errors (the reply then carries
//! the diagnostics), or hand out anything before the run is committed to
//! the store (the engine commits in `start`).

use std::path::PathBuf;

use serde_json::{Value, json};
use stratum_compiler::analysis::{Analysis, analyze_bytes};
use stratum_compiler::build::build_plan;
use stratum_compiler::diagnostics::render;

use super::{FLOW, SPEC, envelope};
use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::{State, spec_text};

/// Tool name.
pub const NAME: &str = "stratum_plan";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Start a run of a Stratum v1 spec: call this first. The server compiles the spec and returns the engine envelope \
{status, runId, planHash, ready: [...], gates: [...], ledger, output?, failure?}. \
Do each entry of `ready` yourself: carry out its `do` task (agent, attempt, attemptsLeft are given), produce JSON matching its `contract` \
(fields and types) that satisfies its `ensure` predicates, then report it with stratum_step_done echoing the entry's `id` and `dispatchToken`. \
Entries are independent: report them in any order. When `gates` is non-empty, a human decision is needed: stratum_gate_resolve with the gate's `gateToken`. \
The run ends at status completed (read `output`), failed, killed, budget_exhausted or cancelled (read `failure`). \
An invalid spec is refused with its diagnostics; an input that does not match the flow's `input` is refused with the reason.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    SPEC,
    FLOW,
    Field::opt(
        "input",
        Kind::Obj,
        "The flow's input object, matching its `input:` declaration (default {}).",
    )
    .or("inputs"),
    Field::opt(
        "workspaceRoot",
        Kind::Str,
        "Directory that file_exists/file_contains predicates are confined to (default: the server's working directory).",
    ),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let (loaded, analysis) = match compile_analysed(state, args.get("spec").unwrap_or(&Value::Null))
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let root = match args.str("workspaceRoot") {
        Some(r) => PathBuf::from(r),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) => {
            return Reply::error(
                "invalid_request",
                format!("workspaceRoot {}: {e}", root.display()),
            );
        }
    };
    let (mut host, agents, frozen) = match state.new_run(&root) {
        Ok(x) => x,
        Err(e) => return Reply::error("host_unavailable", e),
    };
    let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
    let estimate = estimate(&analysis, args.str("flow"), &input, &frozen);
    match state.engine.start_frozen(
        &loaded,
        args.str("flow"),
        input,
        &mut host,
        Some(root.display().to_string()),
        &frozen,
    ) {
        Ok((run_id, outcome)) => {
            if let Some(steps) = estimate {
                record_estimate(state, &run_id, steps, &mut host);
            }
            let v = envelope(&outcome, &run_id, &loaded.hash, &agents);
            let work = crate::driver::has_work(&outcome, &agents);
            state.remember(&run_id, host, &loaded.hash, agents);
            if work {
                state.dispatches.want(&run_id);
            }
            Reply::Ok(v)
        }
        Err(e) => engine_error(&e),
    }
}

/// Records the estimate in the started run; a failure is logged (stderr,
/// never the protocol channel) and the run goes on.
#[allow(clippy::print_stderr)]
fn record_estimate(
    state: &mut State,
    run_id: &str,
    steps: Vec<stratum_vm::interp::event::StepEstimate>,
    host: &mut stratum_vm::host::StdHost,
) {
    if let Err(e) = state.engine.record_estimate(run_id, steps, host) {
        eprintln!("stratumc mcp: warning: the cost estimate was not recorded in {run_id}: {e}");
    }
}

/// The cost model's per-step estimate of the run about to start (its input,
/// its frozen configuration's profiles), recorded in its audit as the
/// `estimated` event for `stratumc report`.
fn estimate(
    analysis: &Analysis,
    flow: Option<&str>,
    input: &Value,
    frozen: &stratum_vm::config::Frozen,
) -> Option<Vec<stratum_vm::interp::event::StepEstimate>> {
    use stratum_compiler::cost::{CostConfig, run_estimate};
    let config = CostConfig::from_toml(&frozen.text).unwrap_or_default();
    run_estimate(analysis.ir.as_ref()?, flow, input, &config)
}

/// Compiles a spec (YAML text or object) and stores its plan; a spec with
/// errors is refused with its diagnostics (`stratum_plan`, `stratum_retry`).
pub fn compile(state: &mut State, spec: &Value) -> Result<stratum_vm::engine::LoadedPlan, Reply> {
    compile_analysed(state, spec).map(|(plan, _)| plan)
}

/// [`compile`], with the spec's analysis (its IR serves the estimate).
fn compile_analysed(
    state: &mut State,
    spec: &Value,
) -> Result<(stratum_vm::engine::LoadedPlan, Analysis), Reply> {
    let text = spec_text(spec);
    let analysis = analyze_bytes(text.as_bytes());
    let errors = analysis.error_count();
    if errors > 0 {
        let diagnostics: Vec<_> = analysis
            .diagnostics
            .iter()
            .map(|d| render::json_diagnostic(&analysis.text, &analysis.lines, d))
            .collect();
        let first = analysis
            .diagnostics
            .iter()
            .find(|d| d.is_error())
            .map(|d| format!(" (first: {} {})", d.code.as_str(), d.message))
            .unwrap_or_default();
        return Err(Reply::error_with(
            "spec_validation_failed",
            format!(
                "the spec has {errors} error{}{first}; nothing was started. Fix them and call stratum_plan again",
                if errors == 1 { "" } else { "s" }
            ),
            json!({"diagnostics": diagnostics}),
        ));
    }
    let Some(plan) = build_plan(&analysis) else {
        return Err(Reply::error(
            "spec_validation_failed",
            "the spec could not be built",
        ));
    };
    let (bytes, _) = stratum_vm::plan::file::encode(&plan);
    let loaded = state
        .engine
        .add_plan(&bytes)
        .map_err(|e| engine_error(&e))?;
    Ok((loaded, analysis))
}
