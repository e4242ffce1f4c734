//! `stratum_gate_resolve {runId, stepId, gateToken?, decision, rationale?,
//! choice?, resolved_by?}`: decide a waiting gate.
//!
//! Owns: mapping the request onto `Engine::resolve_gate` (`rationale` is the
//! decision's note, `choice` one of the gate's `options` (X10), `resolved_by`
//! who decided, default `agent`). Without `gateToken` (the manual's form)
//! the engine takes the decision while the gate waits and records it as
//! `tokenless` in the audit.
//! Must never: decide for the human; it applies the decision it was sent,
//! and the engine refuses stale gate tokens and unknown decisions.

use stratum_vm::interp::GateDecision;

use super::{RUN_ID, STEP_ID, on_run};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_gate_resolve";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Decide a gate listed in an envelope's `gates` ({stepId, gateToken, round, maxRounds, routes, options?}). Gates are human \
review points: ask the user, then send their decision: `approve` (continue to routes.approve), `revise` (reset and redo the steps \
up to routes.revise; uses a round) or `kill` (routes.kill, or end the run). Echo the gate's `gateToken` (without it the decision is taken only while the gate is waiting, and the audit marks it \
`tokenless`); add the user's words as `rationale`. A gate with `options` lists them: send the user's pick as `choice` (one of them exactly; another text is refused \
with the options listed). Returns the engine envelope. A stale token (an older round, or after a revert) is refused and nothing changes.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    RUN_ID,
    STEP_ID,
    Field::opt(
        "gateToken",
        Kind::Str,
        "The `gateToken` of the waiting gate, unchanged (recommended: without it the decision applies to whatever round of the gate waits now, and is recorded as tokenless).",
    ),
    Field::req("decision", Kind::Str, "approve, revise or kill.").or("outcome"),
    Field::opt("rationale", Kind::Str, "Why (recorded in the audit trail).").or("note"),
    Field::opt(
        "choice",
        Kind::Str,
        "One of the gate's `options` (approve or revise), as the user picked it.",
    ),
    Field::opt("resolved_by", Kind::Str, "Who decided (default `agent`).").or("user_id"),
];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let (run, step, token, decision) = (
        args.req_str("runId"),
        args.req_str("stepId"),
        args.str("gateToken"),
        args.req_str("decision"),
    );
    let answer = GateDecision {
        decision,
        note: args.str("rationale"),
        choice: args.str("choice"),
        // the manual's form: no gateToken sent
        tokenless: token.is_none(),
    };
    let by = args.str("resolved_by").unwrap_or("agent");
    on_run(state, run, |engine, host| {
        engine.resolve_gate(run, step, token, &answer, by, host)
    })
}
