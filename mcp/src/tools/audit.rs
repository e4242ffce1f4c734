//! `stratum_audit {runId}`: a run's audit trail and where it stands now.
//!
//! Owns: combining the stored event log (`Engine::audit`), the current
//! outcome (`Engine::poll`, which records nothing), the checkpoint labels and
//! the manifests of the run's artifacts (X4, `stratum_vm::view::manifests`)
//! and the patch records of its scoped dispatches (X11,
//! `stratum_vm::view::patches`).
//! Must never: change the run (no event, no token, no commit).

use serde_json::Value;

use super::{RUN_ID, envelope};
use crate::args::{Args, Field};
use crate::reply::{Reply, engine_error};
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_audit";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Read a run's audit trail without changing it: {runId, planHash, status, events: [{at, type, stepId?, detail}], \
ready, gates, ledger, output?, failure?, checkpoints, manifests: [{step, attempt, itemIndex?, files: [{path, size, sha256}], digest}], \
patches: [{step, attempt, itemIndex?, treeBefore, treeAfter, files: [{path, status, bytes, before, after}], diff, diffTruncated?}], \
steps: {id: {type, status, attempts, iterations, output?, failure?, gateToken?, decision?}}, flowSpent, carry, flow_name, steps_completed, total_steps, \
trace: [{step_id, type, attempt, status, duration_ms, round, at}], round, rounds: [{stepId, round, decision, target, note?, choice?, resolvedBy, tokenless?, at}], \
child_audits: [{stepId, status, steps_completed, total_steps, steps}], total_duration_ms, \
receipts: [{step, at, command, argv, exit, ...}] (the declared commands that exec checks and evaluate steps ran)}. Use it to explain what happened (attempts, violations, gate decisions, \
routes, budget) or to recover the outstanding ready entries and gate tokens.";

/// Request fields.
pub const FIELDS: &[Field] = &[RUN_ID];

/// Runs the tool.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let run = args.req_str("runId");
    let access = match state.run(run) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let outcome = match access.engine.poll(run, access.host) {
        Ok(o) => o,
        Err(e) => return engine_error(&e),
    };
    let events = match access.engine.audit(run) {
        Ok(e) => e,
        Err(e) => return engine_error(&e),
    };
    let checkpoints = access.engine.checkpoint_labels(run).unwrap_or_default();
    let manifests = match stratum_vm::view::manifests(access.engine, run) {
        Ok(m) => serde_json::to_value(m).unwrap_or(Value::Null),
        Err(e) => return engine_error(&e),
    };
    let receipts = match stratum_vm::view::receipts(access.engine, run) {
        Ok(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Err(e) => return engine_error(&e),
    };
    let patches = match stratum_vm::view::patches(access.engine, run) {
        Ok(p) => serde_json::to_value(p).unwrap_or(Value::Null),
        Err(e) => return engine_error(&e),
    };
    let records = match stratum_vm::view::audit::load(access.engine, run) {
        Ok(a) => serde_json::to_value(a).unwrap_or(Value::Null),
        Err(e) => return engine_error(&e),
    };
    let mut v = envelope(&outcome, run, &access.plan_hash, access.agents);
    if crate::driver::has_work(&outcome, access.agents) {
        state.dispatches.want(run);
    }
    if let (Some(m), Value::Object(records)) = (v.as_object_mut(), records) {
        m.extend(records);
        m.insert("events".into(), Value::Array(events));
        m.insert("checkpoints".into(), checkpoints.into());
        m.insert("manifests".into(), manifests);
        m.insert("patches".into(), patches);
        m.insert("receipts".into(), receipts);
    }
    Reply::Ok(v)
}
