//! `stratum_flow_cancel {runId}`: cancel a run.
//!
//! Owns: calling `Engine::cancel`; a finished run is left as it is and its
//! real status is returned.
//! Must never: resurrect a cancelled run: later reports, gate decisions,
//! resumes and checkpoints on it are refused by the engine.

use serde_json::Value;

use super::{RUN_ID, on_run};
use crate::args::{Args, Field};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_flow_cancel";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Cancel a run: outstanding entries and gates can no longer be reported or decided, and the run cannot be resumed. \
Stop any work you started for it. Returns the envelope with status `cancelled` (or the run's final status if it had already finished), \
plus `flowSettled` (the run is cancelled now), `acknowledged` (this call cancelled it) and `reason` (`already_<status>` when it had ended before).";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let mut cancelled = None;
    let reply = on_run(state, run, |engine, host| {
        let c = engine.cancel_flow(run, host)?;
        let outcome = c.outcome.clone();
        cancelled = Some(c);
        Ok(outcome)
    });
    let (Reply::Ok(mut v), Some(c)) = (reply.clone(), cancelled) else {
        return reply;
    };
    crate::agent_runs::cancel_linked(state, run, &mut v);
    if let Some(m) = v.as_object_mut() {
        m.insert("flowSettled".into(), Value::from(c.settled()));
        m.insert("acknowledged".into(), Value::from(c.acknowledged));
        m.insert("reason".into(), c.reason().map_or(Value::Null, Value::from));
    }
    Reply::Ok(v)
}
