//! `stratum_flow_poll {runId}`: a background flow's state (issue 16 §2).
//!
//! Owns: the envelope as of now (status, ready, gates, ledger: the spend),
//! the run's `progress` (steps settled of all), and its `driver` (the lease:
//! pid, host, heartbeat, whether it lapsed).
//! Must never: change the run (a read, not a touch).

use serde_json::{Value, json};

use super::{RUN_ID, on_run};
use crate::args::{Args, Field};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_flow_poll";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Read a background flow (stratum_flow_run_bg) without changing it: the envelope (status, ready, gates, ledger with the spend), \
plus `progress` {done, total} (steps settled) and `driver` {pid, host, heartbeatMs, expiresMs, lapsed} (null when no driver holds the run). \
Poll until status is completed, failed, killed, budget_exhausted or cancelled; a run waiting at a gate with no driver needs stratum_gate_resolve \
and then stratum_flow_run_bg {resumeRun: runId}.";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let mut reply = on_run(state, run, |engine, host| engine.poll(run, host));
    // a poll never asks for this server's worker: a driver may hold the run
    state.dispatches.forget(run);
    let Reply::Ok(v) = &mut reply else {
        return reply;
    };
    let progress = stratum_vm::view::load(&mut state.engine, run).map(|view| {
        let (done, total) = view.progress();
        json!({"done": done, "total": total})
    });
    let now = crate::agent_runs::now_ms();
    let driver = match state.engine.store().lease(run) {
        Ok(Some(l)) => json!({"pid": l.pid, "host": l.host, "heartbeatMs": l.heartbeat_ms,
                              "expiresMs": l.expires_ms, "lapsed": l.expires_ms <= now}),
        _ => Value::Null,
    };
    if let Some(m) = v.as_object_mut() {
        m.insert("progress".into(), progress.unwrap_or(Value::Null));
        m.insert("driver".into(), driver);
    }
    reply
}
