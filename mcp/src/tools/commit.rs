//! `stratum_commit {runId|flow_id, label}`: save a run's state under a label.
//!
//! Owns: calling `Engine::commit_checkpoint`, echoing `flow_id`, and where
//! the run stands (reference v1-runtime §6: `step_number`,
//! `current_step_id`, from `stratum_vm::view::RunView::position`).
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
Returns {status: \"committed\", flow_id, runId, label, step_number, current_step_id, checkpoints: [labels]}: step_number is the 1-based \
position of the entry flow's first step that is not done (the step count + 1 when all are), current_step_id that step (null when all are done).";

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
    let committed = match state.engine.commit_checkpoint(run, label) {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let view = match stratum_vm::view::load(&mut state.engine, run) {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let (step_number, current) = view.position();
    Reply::Ok(json!({
        "status": "committed",
        "flow_id": run,
        "runId": run,
        "label": committed.label,
        "step_number": step_number,
        "current_step_id": current,
        "checkpoints": committed.checkpoints,
    }))
}
