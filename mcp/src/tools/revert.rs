//! `stratum_revert {runId|flow_id, label}`: return a run to a checkpoint.
//!
//! Owns: calling `Engine::revert` and adding `reverted_to` to the envelope.
//! Must never: touch files, or give back spend (the engine keeps the larger
//! ledger); tokens handed out before the revert become stale.

use serde_json::Value;

use super::{RUN_ID, on_run};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_revert";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Return a run to a checkpoint saved with stratum_commit (state only: restore your files yourself). Every \
token handed out before is now stale: continue from the `ready` entries and `gates` of the returned envelope (plus `reverted_to`). \
Spend is never given back. An unknown label is refused with the available labels.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    Field::req("label", Kind::Str, "The checkpoint to return to."),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let (run, label) = (args.req_str("runId"), args.req_str("label"));
    match on_run(state, run, |engine, host| engine.revert(run, label, host)) {
        Reply::Ok(mut v) => {
            if let Some(m) = v.as_object_mut() {
                m.insert("reverted_to".into(), Value::from(label.trim()));
            }
            Reply::Ok(v)
        }
        err => err,
    }
}
