//! `stratum_flow_run_bg {spec, input?, flow?, workspaceRoot?}` or
//! `{resumeRun}`: a flow driven in the background by a driver process (issue
//! 16 §2) that outlives this server: `stratumc run --resume RUN`, which
//! hands every dispatch to its agent's configured connector or command,
//! holds the run's lease with a heartbeat, and ends at a terminal status or
//! at a gate it has no rule for.
//!
//! Owns: starting the run as `stratum_plan` does (one home: its `call`),
//! withdrawing this server's own engine worker for it (the driver runs its
//! entries), and starting the driver (`stratum_vm::background`); with a
//! `resumeRun`, starting a driver for a stored run (after a gate was decided,
//! or when its driver died).
//! Must never: drive the run itself.

use serde_json::Value;

use super::{FLOW, plan};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_flow_run_bg";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Run a flow in the background: the server starts the run (as stratum_plan does) and a driver process \
that hands every dispatch to its agent's configured connector (`[agents.NAME] connector` or `command` in stratum.toml) and outlives this session. \
Returns the envelope plus {background: true, driverPid, log}. Watch it with stratum_flow_poll {runId}; stop it with stratum_flow_cancel_bg {runId}. \
The driver stops at a gate: decide it with stratum_gate_resolve, then call stratum_flow_run_bg {resumeRun: runId} to start a driver again (also after a driver died: \
the new one takes the run over once the old one's lease lapsed).";

/// Request fields.
pub const FIELDS: &[Field] = &[
    Field::opt(
        "spec",
        Kind::StrOrObj,
        "The Stratum v1 spec (YAML text or the same document as an object); give it or `resumeRun`.",
    ),
    FLOW,
    Field::opt("input", Kind::Obj, "The flow's input object (default {})."),
    Field::opt(
        "workspaceRoot",
        Kind::Str,
        "The workspace root (default: the server's working directory).",
    ),
    Field::opt(
        "resumeRun",
        Kind::Str,
        "Instead of a spec: the id of a stored run to start a driver for.",
    ),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let (mut reply, run_id) = match (args.get("spec"), args.str("resumeRun")) {
        (Some(_), None) => {
            let reply = plan::call(state, args);
            let Reply::Ok(v) = &reply else {
                return reply;
            };
            let id = v["runId"].as_str().unwrap_or_default().to_owned();
            (reply, id)
        }
        (None, Some(id)) => {
            let id = id.to_owned();
            (super::on_run(state, &id, |e, h| e.poll(&id, h)), id)
        }
        _ => {
            return Reply::error(
                "invalid_request",
                "stratum_flow_run_bg takes `spec` (a new run) or `resumeRun` (a stored run's id), one of them",
            );
        }
    };
    // the driver runs the engine entries, not this server
    state.dispatches.forget(&run_id);
    let Reply::Ok(v) = &mut reply else {
        return reply;
    };
    if v["status"].as_str().is_some_and(is_terminal_status) {
        return reply;
    }
    let extra = ["--format".into(), "json".into()];
    match stratum_vm::background::spawn_driver(&run_id, &extra) {
        Ok(d) => {
            if let Some(m) = v.as_object_mut() {
                m.insert("background".into(), Value::from(true));
                m.insert("driverPid".into(), Value::from(d.pid));
                m.insert("log".into(), Value::from(d.log.display().to_string()));
            }
            reply
        }
        Err(e) => Reply::error("driver_unavailable", e),
    }
}

fn is_terminal_status(s: &str) -> bool {
    matches!(
        s,
        "completed" | "failed" | "killed" | "budget_exhausted" | "cancelled"
    )
}
