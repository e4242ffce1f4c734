//! `stratum_commit {runId|flow_id, label}`: save a run's state under a label.
//!
//! Owns: calling `Engine::commit_checkpoint` and echoing `flow_id`.
//! Must never: touch files: checkpoints are run state only; undoing file
//! changes is the caller's job.

use serde_json::json;

use super::RUN_ID;
use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_commit";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Save the run's current state under a label (a checkpoint) so stratum_revert can return to it. State only: \
files you changed are not saved (commit them with git yourself). Committing a label again replaces it. \
Returns {status: \"committed\", flow_id, label, checkpoints: [labels]}.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    Field::req("label", Kind::Str, "The checkpoint's name."),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let (run, label) = (args.req_str("runId"), args.req_str("label"));
    if let Err(r) = state.run(run) {
        return r;
    }
    match state.engine.commit_checkpoint(run, label) {
        Ok(v) => Reply::Ok(json!({
            "status": "committed",
            "flow_id": run,
            "runId": run,
            "label": v.label,
            "checkpoints": v.checkpoints,
        })),
        Err(e) => engine_error(&e),
    }
}
