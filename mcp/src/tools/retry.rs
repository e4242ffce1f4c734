//! `stratum_retry {runId, from?, spec?}` (X8): start a new run of a finished
//! run's flow and inputs, reusing what still holds.
//!
//! Owns: the new run's host (the old run's workspace root, the configuration
//! resolved afresh, frozen into the new run: a retry is where a fixed
//! configuration takes effect), compiling `spec` when one is given, and
//! calling `Engine::retry`.
//! Must never: decide what is reused (the interpreter's reuse rule does) or
//! change the old run beyond the `retried` event the engine records.

use std::path::PathBuf;

use serde_json::Value;

use super::{RUN_ID, envelope};
use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_retry";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Re-run a finished run (completed, failed, killed, budget_exhausted or cancelled) from where it went wrong: starts a NEW run \
(new runId) of the same flow and input, on a changed spec when `spec` is given. Steps of the old run that succeeded (gates: approved) and whose \
compiled step, inputs and file evidence are unchanged are reused: they are not handed out again and spend nothing. `from` names a step that \
runs again together with everything downstream of it. Returns the engine envelope of the new run: continue with stratum_step_done / \
stratum_gate_resolve. A run that is still running is refused.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    Field::opt(
        "from",
        Kind::Str,
        "A step id of the flow: it and every step downstream of it run again (default: only what changed or did not succeed).",
    ),
    Field::opt(
        "spec",
        Kind::StrOrObj,
        "A changed spec (YAML text or object) to run instead of the old run's own plan; it must have the old run's flow.",
    ),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let old = args.req_str("runId");
    let plan = match args.get("spec") {
        None | Some(Value::Null) => None,
        Some(spec) => match super::plan::compile(state, spec) {
            Ok(p) => Some(p),
            Err(r) => return r,
        },
    };
    let root = match state.engine.workspace_of(old) {
        Ok(r) => r.map_or_else(
            || std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            PathBuf::from,
        ),
        Err(e) => return engine_error(&e),
    };
    let (mut host, agents, frozen) = match state.new_run(&root) {
        Ok(x) => x,
        Err(e) => return Reply::error("host_unavailable", e),
    };
    let from = args.str("from");
    match state
        .engine
        .retry(old, from, plan.as_ref(), &mut host, Some(&frozen))
    {
        Ok((run_id, outcome)) => {
            let hash = match plan {
                Some(p) => p.hash,
                None => match state.engine.load(&run_id) {
                    Ok((run, _)) => run.header.plan_hash,
                    Err(e) => return engine_error(&e),
                },
            };
            let v = envelope(&outcome, &run_id, &hash, &agents);
            let work = crate::driver::has_work(&outcome, &agents);
            state.remember(&run_id, host, &hash, agents);
            if work {
                state.dispatches.want(&run_id);
            }
            Reply::Ok(v)
        }
        Err(e) => engine_error(&e),
    }
}
