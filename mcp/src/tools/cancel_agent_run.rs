//! `stratum_cancel_agent_run {runId}`: stops an agent run — a background
//! one, or a foreground one by its `cancellationId` — started by this
//! server or by any other process on this host.
//!
//! Owns: the lookup and the reply; the cancel itself (settle first, then
//! kill the recorded group and wait for it to be gone) is
//! `stratum_vm::agent_runs::cancel`'s.
//! Must never: signal a group recorded on another host.

use crate::agent_runs::{cancel_reply, find, now_ms};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_cancel_agent_run";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Cancel an agent run (runId from stratum_agent_run, or the cancellationId you gave it): the run is settled as `cancelled`, \
then its process group is killed and the call waits until it is gone. Returns the run with `cancelled` (this call settled it), \
`reason` (`already_<status>` when it had ended), `teardown` (`reaped`, `gone`, or null when no process had started) and `teardownConfirmed`. \
A group still alive after the wait is the error `cancellation_teardown_timeout`; a run on another host is `cancellation_unconfirmed`.";

/// Request fields.
pub const FIELDS: &[Field] = &[Field::req(
    "runId",
    Kind::Str,
    "The agent run's id (as stratum_agent_run returned it) or the cancellationId it was given.",
)];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let record = match find(state, args.req_str("runId")) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let why = "cancelled by stratum_cancel_agent_run";
    match stratum_vm::agent_runs::cancel(state.engine.store_mut(), record, why, now_ms()) {
        Ok(c) => cancel_reply(&c),
        Err(e) => Reply::error("store_error", e.to_string()),
    }
}
