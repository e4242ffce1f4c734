//! One module per MCP tool. Each module declares its request fields
//! ([`crate::args::Field`]), a description that teaches the protocol, and a
//! `call` that runs on validated arguments and returns a [`Reply`].
//!
//! Owns: the fields shared by several tools and the engine envelope.
//! Must never: validate requests (`args` does) or hold state between calls
//! (the [`State`] does).

pub mod agent_poll;
pub mod agent_run;
pub mod audit;
pub mod cancel_agent_run;
pub mod commit;
pub mod compile_speckit;
pub mod cost;
pub mod flow_cancel;
pub mod flow_cancel_bg;
pub mod flow_poll;
pub mod flow_run_bg;
pub mod gate_resolve;
pub mod guard;
pub mod plan;
pub mod resume;
pub mod retry;
pub mod revert;
pub mod step_done;
pub mod usage_report;
pub mod validate;

use serde::Serialize;
use serde_json::Value;
use stratum_vm::engine::EngineError;
use stratum_vm::interp::{Dispatch, Outcome, ReadyEntry};

use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::{Agents, State};

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

/// Every tool's name and request fields (the router in `server.rs` lists the
/// same names; a test holds the two equal). The fuzz target decodes
/// arguments through it.
pub const ALL: &[(&str, &[Field])] = &[
    (agent_poll::NAME, agent_poll::FIELDS),
    (agent_run::NAME, agent_run::FIELDS),
    (audit::NAME, audit::FIELDS),
    (cancel_agent_run::NAME, cancel_agent_run::FIELDS),
    (commit::NAME, commit::FIELDS),
    (compile_speckit::NAME, compile_speckit::FIELDS),
    (cost::NAME, cost::FIELDS),
    (flow_cancel::NAME, flow_cancel::FIELDS),
    (flow_cancel_bg::NAME, flow_cancel_bg::FIELDS),
    (flow_poll::NAME, flow_poll::FIELDS),
    (flow_run_bg::NAME, flow_run_bg::FIELDS),
    (gate_resolve::NAME, gate_resolve::FIELDS),
    (guard::apply_upgrade::NAME, guard::apply_upgrade::FIELDS),
    (guard::history::NAME, guard::history::FIELDS),
    (guard::migrate::NAME, guard::migrate::FIELDS),
    (guard::override_edge::NAME, guard::override_edge::FIELDS),
    (guard::register::NAME, guard::register::FIELDS),
    (guard::transition::NAME, guard::transition::FIELDS),
    (guard::upgrade::NAME, guard::upgrade::FIELDS),
    (plan::NAME, plan::FIELDS),
    (resume::NAME, resume::FIELDS),
    (retry::NAME, retry::FIELDS),
    (revert::NAME, revert::FIELDS),
    (step_done::NAME, step_done::FIELDS),
    (usage_report::NAME, usage_report::FIELDS),
    (validate::NAME, validate::FIELDS),
];

/// The request fields of the tool called `name`.
pub fn fields_of(name: &str) -> Option<&'static [Field]> {
    ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The engine response envelope (`status`, `runId`, `planHash`, `ready`, `gates`, `ledger`, `output`, `failure`).
///
/// Engine-dispatched entries whose agent has a command are the server's
/// ([`crate::driver`] runs them off the request path): they leave `ready`
/// and are listed under `running` (`{id, agent, attempt, dispatch}`, no
/// token), present only when non-empty. The other engine entries go to the
/// client as `"dispatch": "engine-fallback"` (LANGUAGE.md E8).
pub fn envelope(outcome: &Outcome, run_id: &str, plan_hash: &str, agents: &Agents) -> Value {
    #[derive(Serialize)]
    struct Running<'a> {
        id: &'a str,
        agent: &'static str,
        attempt: u32,
        dispatch: &'static str,
    }
    let (running, client): (Vec<&ReadyEntry>, Vec<&ReadyEntry>) = outcome
        .ready
        .iter()
        .partition(|e| !outcome.status.is_terminal() && crate::driver::runs_itself(e, agents));
    // the client's entries; engine entries among them have no command
    let shown = Outcome {
        ready: client
            .into_iter()
            .cloned()
            .map(|mut e| {
                if e.dispatch == Dispatch::Engine {
                    e.dispatch = Dispatch::EngineFallback;
                }
                e
            })
            .collect(),
        ..outcome.clone()
    };
    let mut v = shown.to_json(run_id, plan_hash);
    if let (false, Some(m)) = (running.is_empty(), v.as_object_mut()) {
        let running: Vec<Running> = running
            .iter()
            .map(|e| Running {
                id: &e.id,
                agent: e.agent.as_str(),
                attempt: e.attempt,
                dispatch: "engine",
            })
            .collect();
        // Invariant: strings and integers only; they always serialize.
        let running = serde_json::to_value(running).expect("invariant: running entries serialize");
        m.insert("running".into(), running);
    }
    v
}

/// An engine call on a stored run, answered with the envelope; a worker is
/// asked for when the outcome has entries the server runs itself.
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
    match op(access.engine, access.host) {
        Ok(o) => {
            let v = envelope(&o, run_id, &access.plan_hash, access.agents);
            if crate::driver::has_work(&o, access.agents) {
                state.dispatches.want(run_id);
            }
            Reply::Ok(v)
        }
        Err(e) => engine_error(&e),
    }
}
