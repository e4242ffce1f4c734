//! `stratum_resume {runId}`: continue a stored run in this server process
//! (after a restart, or a run started elsewhere on the same store).
//!
//! Owns: calling `Engine::resume`, which records a `resumed` event and
//! returns the outstanding entries with their tokens unchanged.
//! Must never: mint new tokens or re-debit anything; cancelled runs are refused.

use super::{RUN_ID, envelope};
use crate::args::{Args, Field};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_resume";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Pick up an existing run (after a restart of the server or of your session, or one started by another process). \
Returns the engine envelope with the outstanding `ready` entries and `gates`, tokens unchanged: continue with stratum_step_done / \
stratum_gate_resolve. A finished run returns its final status; a cancelled run is refused.";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let access = match state.run(run) {
        Ok(a) => a,
        Err(r) => return r,
    };
    match access.engine.resume(run, None, access.host) {
        Ok((o, plan)) => {
            let v = envelope(&o, run, &plan.hash, access.agents);
            if crate::driver::has_work(&o, access.agents) {
                state.dispatches.want(run);
            }
            Reply::Ok(v)
        }
        Err(e) => engine_error(&e),
    }
}
