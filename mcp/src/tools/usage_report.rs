//! `stratum_usage_report {runId, receipt}`: settle usage spent outside a step
//! report (a sub-agent, a tool, a judge the client ran) into the run's
//! ledgers.
//!
//! Owns: reading the receipt (`Receipt::from_json`), calling
//! `Engine::usage_report`, and the `ok` / `duplicate` answer of reference
//! v1-runtime §2.
//! Must never: charge dispatches (the engine counts those) or change a run
//! for a duplicate `dispatchId`.

use serde_json::{Value, json};
use stratum_vm::interp::Receipt;

use super::RUN_ID;
use crate::args::{Args, Field, Kind};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_usage_report";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Report tokens, dollars or time you spent outside a step result (a sub-agent, a tool, a review) so the run's budgets see it. \
Send {runId, receipt: {dispatchId: a unique id you choose, stepId?: the step it was for (omit to charge the flow), source: who spent it, \
usage: {tokens?, usd?, ms?}, usdSource: \"reported\"|\"estimated\" (required with usd)}}. Sending the same dispatchId again is safe: it returns \
status \"duplicate\" and changes nothing. Returns {status: \"ok\", runId, seq, budget?, ledger}; budget \"flow_exhausted\" means the run just ended \
budget_exhausted; \"task_exhausted\"/\"subflow_exhausted\" are warnings only.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    Field::req(
        "receipt",
        Kind::Obj,
        "{dispatchId, stepId?, source, usage: {tokens?, usd?, ms?}, usdSource?, telemetry?, split?, at?}",
    ),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let receipt = match Receipt::from_json(args.get("receipt").unwrap_or(&Value::Null)) {
        Ok(r) => r,
        Err(e) => return Reply::error("invalid_receipt", e.to_string()),
    };
    let access = match state.run(run) {
        Ok(a) => a,
        Err(r) => return r,
    };
    match access.engine.usage_report(run, &receipt, access.host) {
        Ok((r, outcome)) => {
            let mut v = json!({
                "status": if r.duplicate { "duplicate" } else { "ok" },
                "runId": run,
                "seq": r.seq,
                "ledger": outcome.ledger,
                "runStatus": outcome.status.as_str(),
            });
            if let Some(b) = r.budget {
                v["budget"] = Value::from(b);
            }
            Reply::Ok(v)
        }
        Err(e) => engine_error(&e),
    }
}
