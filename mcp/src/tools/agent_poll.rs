//! `stratum_agent_poll {runId}`: the durable record of an agent run
//! (started by this server or any other process sharing the store).
//!
//! Owns: nothing but the lookup (by run id or cancellation id).
//! Must never: change the record.

use crate::agent_runs::{find, record_json};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_agent_poll";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Read an agent run started with stratum_agent_run (runId as it returned, or its cancellationId): \
{runId, agent, status: running|completed|failed|cancelled|lost, done, output, failure, usage {tokens, usd}, pid, pgid, host, startedAt, updatedAt, flow, cancellationId}. \
Poll a background run until `done` is true; `output` and `failure` are final then.";

/// Request fields.
pub const FIELDS: &[Field] = &[Field::req(
    "runId",
    Kind::Str,
    "The agent run's id (as stratum_agent_run returned it) or the cancellationId it was given.",
)];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    match find(state, args.req_str("runId")) {
        Ok(r) => Reply::Ok(record_json(&r)),
        Err(reply) => reply,
    }
}
