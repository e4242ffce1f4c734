//! One module per MCP tool. Each module declares its request fields
//! ([`crate::args::Field`]), a description that teaches the protocol, and a
//! `call` that runs on validated arguments and returns a [`Reply`].
//!
//! Owns: the fields shared by several tools and the engine envelope.
//! Must never: validate requests (`args` does) or hold state between calls
//! (the [`State`] does).

pub mod audit;
pub mod commit;
pub mod compile_speckit;
pub mod cost;
pub mod flow_cancel;
pub mod gate_resolve;
pub mod plan;
pub mod resume;
pub mod revert;
pub mod step_done;
pub mod usage_report;
pub mod validate;

use serde_json::Value;
use stratum_vm::engine::EngineError;
use stratum_vm::interp::{Dispatch, Outcome};

use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// `runId` (or `flow_id`).
pub const RUN_ID: Field =
    Field::req("runId", Kind::Str, "The run id returned by stratum_plan.").or("flow_id");

/// `stepId` (or `step_id`).
pub const STEP_ID: Field = Field::req(
    "stepId",
    Kind::Str,
    "The step id: a ready entry's `id` (e.g. `draft`, `child/step`, `fan/0`) or a gate's `stepId`.",
)
.or("step_id");

/// `spec`: YAML text or an object.
pub const SPEC: Field = Field::req(
    "spec",
    Kind::StrOrObj,
    "The Stratum v1 spec: the YAML text of a `.stratum.yaml` file, or the same document as a JSON object.",
);

/// `flow`: which flow (default `flows.entry`).
pub const FLOW: Field = Field::opt(
    "flow",
    Kind::Str,
    "The flow to use (default: the spec's `flows.entry`).",
);

/// A tool body.
pub type Call = fn(&mut State, &Args) -> Reply;

/// The engine response envelope (`status`, `runId`, `planHash`, `ready`, `gates`, `ledger`, `output`, `failure`).
///
/// Engine-dispatched entries still in the outcome have no command to run
/// them (the [`crate::driver`] ran the others): they go to the client as
/// `"dispatch": "engine-fallback"` (LANGUAGE.md E8).
pub fn envelope(outcome: &Outcome, run_id: &str, plan_hash: &str) -> Value {
    let mut outcome = outcome.clone();
    for e in outcome
        .ready
        .iter_mut()
        .filter(|e| e.dispatch == Dispatch::Engine)
    {
        e.dispatch = Dispatch::EngineFallback;
    }
    outcome.to_json(run_id, plan_hash)
}

/// An engine call on a stored run, answered with the envelope.
pub fn on_run(
    state: &mut State,
    run_id: &str,
    op: impl FnOnce(
        &mut stratum_vm::engine::Engine,
        &mut stratum_vm::host::StdHost,
    ) -> Result<Outcome, EngineError>,
) -> Reply {
    let access = match state.run(run_id) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let done = op(access.engine, access.host)
        .and_then(|o| crate::driver::drive(access.engine, access.host, access.agents, run_id, o));
    match done {
        Ok(o) => Reply::Ok(envelope(&o, run_id, &access.plan_hash)),
        Err(e) => engine_error(&e),
    }
}
