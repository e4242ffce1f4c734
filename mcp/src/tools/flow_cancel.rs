//! `stratum_flow_cancel {runId}`: cancel a run.
//!
//! Owns: calling `Engine::cancel_flow` (the one home of "a finished run is
//! never modified" and of `already_<status>`, which `stratumc flow cancel`
//! shares), then stopping the agent commands this server runs for the run
//! and reporting them under `agents` ([`crate::driver::Dispatches::reap`]).
//! Must never: resurrect a cancelled run: later reports, gate decisions,
//! resumes and checkpoints on it are refused by the engine.

use serde_json::Value;

use super::{RUN_ID, envelope};
use crate::args::{Args, Field};
use crate::driver::{Reaped, TEARDOWN_WAIT};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_flow_cancel";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Cancel a run: outstanding entries and gates can no longer be reported or decided, and the run cannot be resumed. \
Stop any work you started for it. Returns the envelope with status `cancelled` (or the run's final status if it had already finished), \
plus `flowSettled` (the run is cancelled now), `acknowledged` (this call cancelled it), `reason` (`already_<status>` when it had ended before) \
and `agents` {signalled, reaped, unreaped}: the agent commands this server was running for the run, stopped and confirmed gone.";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let access = match state.run(run) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let c = match access.engine.cancel_flow(run, access.host) {
        Ok(c) => c,
        Err(e) => return engine_error(&e),
    };
    let mut v = envelope(&c.outcome, run, &access.plan_hash, access.agents);
    // a cancelled run (by this call or an earlier one) has its commands stopped
    let agents = match c.settled() {
        true => state.dispatches.reap(run, TEARDOWN_WAIT),
        false => Reaped::default(),
    };
    crate::agent_runs::cancel_linked(state, run, &mut v);
    if let Some(m) = v.as_object_mut() {
        m.insert("flowSettled".into(), Value::from(c.settled()));
        m.insert("acknowledged".into(), Value::from(c.acknowledged));
        m.insert("reason".into(), c.reason().map_or(Value::Null, Value::from));
        // Invariant: three integers; they always serialize.
        let agents = serde_json::to_value(agents).expect("invariant: counts serialize");
        m.insert("agents".into(), agents);
    }
    Reply::Ok(v)
}
