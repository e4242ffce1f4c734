//! The JSON documents of the operator views (version 1): a run as `stratumc
//! query flow --format json` prints it, its steps, gates, spend and ledger,
//! and a run's listing line. The CLI's `query`/`flow cancel` and the
//! operator UI's API (`/api/v1/…`) print exactly these, so a script reads
//! the same shapes from either.
//!
//! Owns: the key names and the rules of which keys appear (a key that is
//! there only when it has something to say, such as `options`, `overdue`,
//! `retryOf`).
//! Must never: read the store or decide anything — it renders a
//! [`RunView`](super::RunView) that [`super::load`] built.

use serde_json::{Value, json};

use super::{FileCheck, GateView, RunView, StepView, VerifiedFile};
use crate::interp::{GateDecision, Outcome, Spend};
use crate::store::RunMeta;

/// One run of a listing (`query flows`): its meta record and, for a retry
/// (X8), the run it retries and the step it started from.
pub fn listed_run_json(m: &RunMeta, link: Option<&(String, Option<String>)>) -> Value {
    let mut r = json!({"runId": m.run_id, "flow": m.flow, "status": m.status, "planHash": m.plan_hash,
           "startedMs": m.created_ms, "updatedMs": m.updated_ms});
    if let Some((old, from)) = link {
        r["retryOf"] = json!(old);
        r["from"] = json!(from);
    }
    r
}

/// A spend as JSON with every key.
pub fn spend_json(s: &Spend) -> Value {
    json!({"usd": s.usd, "tokens": s.tokens, "dispatches": s.dispatches, "ms": s.ms})
}

/// A waiting gate as JSON (`query gates`, `query flow`).
pub fn gate_json(run_id: &str, flow: &str, g: &GateView) -> Value {
    let mut gate = json!({
        "runId": run_id,
        "flow": flow,
        "stepId": g.step_id,
        "gateToken": g.token,
        "round": g.round,
        "maxRounds": g.max_rounds,
        "gateRounds": g.gate_rounds,
        "gateMaxRounds": g.gate_max_rounds,
        "routes": {"approve": g.routes[0], "revise": g.routes[1], "kill": g.routes[2]},
    });
    // X10: the options a `--choice` may take, only when the gate has any
    if let (Some(options), Some(obj)) = (&g.options, gate.as_object_mut()) {
        obj.insert("options".into(), json!(options));
    }
    gate
}

fn step_json(s: &StepView) -> Value {
    let mut step = json!({
        "id": s.id,
        "depth": s.depth,
        "kind": s.kind,
        "status": s.status.as_str(),
        "attempts": s.attempts,
        "iterations": s.iterations,
        "resets": s.resets,
        "gateRounds": s.gate_rounds.map(|g| g.0),
        "gateMaxRounds": s.gate_rounds.and_then(|g| g.1),
        "decision": s.decision,
        "outputSummary": s.output.as_ref().map(|o| super::summarize(o, 200)),
        "failure": s.failure,
        "spent": spend_json(&s.spent),
        "items": s.items.map(|c| json!({"total": c.total, "succeeded": c.succeeded, "failed": c.failed, "inFlight": c.in_flight})),
    });
    // X8: the key is there only for a reused step
    if let Some(from) = &s.reused_from {
        step["reusedFrom"] = json!(from);
    }
    step
}

/// `{spent, budget}` of the entry flow (budget `null` without one).
pub fn ledger_json(v: &RunView) -> Value {
    let budget = v
        .budget
        .as_ref()
        .map(|b| json!({"usd": b.usd, "tokens": b.tokens, "dispatches": b.dispatches, "ms": b.ms}));
    json!({"spent": spend_json(&v.spent), "budget": budget})
}

/// The full state of a run (`query flow --format json`).
pub fn run_json(v: &RunView) -> Value {
    let (done, total) = v.progress();
    let mut run = json!({
        "runId": v.meta.run_id,
        "flow": v.meta.flow,
        "planHash": v.meta.plan_hash,
        "status": v.status.as_str(),
        "startedMs": v.meta.created_ms,
        "updatedMs": v.meta.updated_ms,
        "storeVersion": v.version,
        "round": v.round,
        "maxRounds": v.max_rounds,
        "progress": {"done": done, "total": total},
        "steps": v.steps.iter().map(step_json).collect::<Vec<_>>(),
        "gates": v.gates.iter().map(|g| gate_json(&v.meta.run_id, &v.meta.flow, g)).collect::<Vec<_>>(),
        "ledger": ledger_json(v),
        "output": v.output,
        "failure": v.failure,
    });
    // dispatches past their lease (X7); the key is there only when some are
    if !v.overdue.is_empty() {
        run["overdue"] = v
            .overdue
            .iter()
            .map(|o| json!({"id": o.id, "attempt": o.attempt, "timeoutMs": o.timeout_ms, "lateMs": o.late_ms}))
            .collect();
    }
    // X8: the links, only when there are some
    if let Some((old, from)) = &v.retry_of {
        run["retryOf"] = json!(old);
        run["from"] = json!(from);
    }
    if !v.retried_by.is_empty() {
        run["retriedBy"] = json!(v.retried_by);
    }
    run
}

/// The status word of a re-hashed file (`stratumc verify`).
pub fn check_status(c: &FileCheck) -> &'static str {
    match c {
        FileCheck::Same => "ok",
        FileCheck::Changed { .. } => "changed",
        FileCheck::Missing => "missing",
        FileCheck::Unreadable(_) => "unreadable",
    }
}

/// `step` or `step/item` of a re-hashed file.
pub fn owner(f: &VerifiedFile) -> String {
    match f.item {
        Some(k) => format!("{}/{k}", f.step),
        None => f.step.clone(),
    }
}

/// The document of `stratumc verify RUN --format json`: every recorded
/// file with its status now (`ok`, `changed` with the new digest and size,
/// `missing`, `unreadable` with the reason).
pub fn verified_json(run: &str, root: &str, files: &[VerifiedFile]) -> Value {
    let files: Vec<Value> = files
        .iter()
        .map(|f| {
            let mut v = json!({
                "step": owner(f), "attempt": f.attempt, "path": f.recorded.path,
                "size": f.recorded.size, "sha256": f.recorded.sha256, "status": check_status(&f.check),
            });
            match &f.check {
                FileCheck::Changed { sha256, size } => {
                    v["nowSha256"] = json!(sha256);
                    v["nowSize"] = json!(size);
                }
                FileCheck::Unreadable(why) => v["reason"] = json!(why),
                FileCheck::Same | FileCheck::Missing => {}
            }
            v
        })
        .collect();
    let differences = files.iter().filter(|f| f["status"] != "ok").count();
    json!({"version": 1, "runId": run, "workspace": root, "ok": differences == 0,
           "differences": differences, "files": files})
}

/// A recorded gate decision and what the run does next (`stratumc gate
/// --format json`, the UI's decision reply): the gate's round when it was
/// decided, the run's status, its ready steps and waiting gates; `choice`
/// only when one was given (X10). `action` is the command's own word for
/// the decision (`stratumc gate reject` is the engine's `kill`), after the
/// step when given.
pub fn decision_json(
    (run, step, action): (&str, &str, Option<&str>),
    answer: &GateDecision<'_>,
    round: u32,
    outcome: &Outcome,
) -> Value {
    let ready: Vec<&str> = outcome.ready.iter().map(|r| r.id.as_str()).collect();
    let gates: Vec<Value> = outcome
        .gates
        .iter()
        .map(|g| json!({"stepId": g.step_id, "gateToken": g.gate_token, "round": g.round}))
        .collect();
    let mut doc = json!({"version": 1, "runId": run, "stepId": step});
    if let Some(a) = action {
        doc["action"] = json!(a);
    }
    let rest = json!({
        "decision": answer.decision,
        "note": answer.note,
        "resolvedBy": "human",
        "round": round,
        "status": outcome.wire_status(),
        "ready": ready,
        "gates": gates,
    });
    if let (Some(doc), Value::Object(rest)) = (doc.as_object_mut(), rest) {
        doc.extend(rest);
    }
    if let Some(c) = answer.choice {
        doc["choice"] = json!(c);
    }
    doc
}
