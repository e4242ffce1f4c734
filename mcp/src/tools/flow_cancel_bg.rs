//! `stratum_flow_cancel_bg {runId}`: stops a background flow (issue 16 §2).
//!
//! Owns: settling the run as cancelled (`Engine::cancel_flow`, as
//! `stratum_flow_cancel`), then killing the recorded process groups of its
//! agents on this host (`crate::agent_runs::cancel_linked`); the driver
//! sees the cancel at its next watch and ends.
//! Must never: signal the driver process itself (it ends on the cancel and
//! lets go of its lease), or touch a group on another host.

use serde_json::{Value, json};

use super::{RUN_ID, on_run};
use crate::args::{Args, Field};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_flow_cancel_bg";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Cancel a background flow (stratum_flow_run_bg): the run is settled as cancelled, the agents its driver started on this host \
are killed with their process groups (`agentRuns`: each with its teardown), and the driver ends on its own. \
Returns the envelope plus flowSettled, acknowledged, reason (`already_<status>`), agentRuns and driver (its lease as it was).";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let driver = match state.engine.store().lease(run) {
        Ok(Some(l)) => json!({"pid": l.pid, "host": l.host}),
        _ => Value::Null,
    };
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
        m.insert("driver".into(), driver);
    }
    Reply::Ok(v)
}
