//! `stratum_step_done {runId, stepId, dispatchToken, result}`: report the
//! result of one ready entry.
//!
//! Owns: reading `result` (`{output?, failure?, usage?}`, or a bare output
//! object) with `Report::from_json` and handing it to `Engine::report`.
//! Must never: judge the result itself; the engine checks the contract, the
//! ensures and the token, and refuses (changing nothing) when the entry is
//! not awaiting this report.

use serde_json::Value;
use stratum_vm::interp::Report;

use super::{RUN_ID, STEP_ID, on_run};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_step_done";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Report the result of one ready entry from stratum_plan (or an earlier call). Send the entry's `id` as stepId and its \
`dispatchToken` unchanged; `result` is {output: <JSON matching the entry's contract>} (optionally `usage`: {tokens, usd, ms}), \
or {failure: \"why\"} if you could not do it. Returns the engine envelope: do the new `ready` entries, resolve waiting `gates`. \
If the output broke the contract or an ensure, the same step comes back in `ready` with attempt+1 and a fresh dispatchToken: \
read `previousFailure.reason` and `previousFailure.violations` and fix exactly those problems. \
A stale or reused token, or a step that is not awaiting a result, is refused and the run does not change. \
When the step's checks (declared commands, a judge) are still running after a few seconds the answer is {status: \"checking\"}: \
the verdict comes under `checked` with the next response on the run (call stratum_resume in a moment).";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    STEP_ID,
    Field::req(
        "dispatchToken",
        Kind::Str,
        "The `dispatchToken` of the ready entry, unchanged.",
    ),
    Field::req(
        "result",
        Kind::Any,
        "{output, usage?} on success, {failure: \"reason\"} when the task could not be done; a bare object is taken as the output.",
    ),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let report = match Report::from_json(args.get("result").unwrap_or(&Value::Null)) {
        Ok(r) => r,
        Err(e) => return Reply::error("invalid_report", e.to_string()),
    };
    let (run, step, token) = (
        args.req_str("runId"),
        args.req_str("stepId"),
        args.req_str("dispatchToken"),
    );
    // a report whose checks may take long runs off the request path
    if let Some(checking) = crate::checks::offload(state, run, step, token, &report) {
        return checking;
    }
    on_run(state, run, |engine, host| {
        engine.report(run, step, Some(token), &report, host)
    })
}
