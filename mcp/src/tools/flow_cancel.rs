//! `stratum_flow_cancel {runId}`: cancel a run.
//!
//! Owns: calling `Engine::cancel`; a finished run is left as it is and its
//! real status is returned.
//! Must never: resurrect a cancelled run: later reports, gate decisions,
//! resumes and checkpoints on it are refused by the engine.

use serde_json::Value;
use stratum_vm::interp::RunStatus;

use super::{RUN_ID, on_run};
use crate::args::{Args, Field};
use crate::reply::{Reply, engine_error};
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
    // read first: a finished run is never modified, and the answer says so
    let before = match state.run(run) {
        Ok(a) => match a.engine.poll(run, a.host) {
            Ok(o) => o.status,
            Err(e) => return engine_error(&e),
        },
        Err(r) => return r,
    };
    let reply = on_run(state, run, |engine, host| engine.cancel(run, host));
    let Reply::Ok(mut v) = reply else {
        return reply;
    };
    let (settled, acknowledged, reason) = match before {
        RunStatus::Running => (true, true, None),
        ended => (
            ended == RunStatus::Cancelled,
            false,
            Some(format!("already_{}", ended.as_str())),
        ),
    };
    if let Some(m) = v.as_object_mut() {
        m.insert("flowSettled".into(), Value::from(settled));
        m.insert("acknowledged".into(), Value::from(acknowledged));
        m.insert("reason".into(), reason.map_or(Value::Null, Value::from));
    }
    Reply::Ok(v)
}
