//! The audit of a run as the manual and reference v1-runtime §2.3 give it to
//! clients (`stratum_audit`): every step's state, the entry flow's spend
//! and carry, progress, a trace of attempts and gate decisions, the gate
//! rounds, the sub-flows' own audits and the run's duration.
//!
//! Owns: deriving those records from the typed run view ([`RunView`]) and
//! the typed audit events ([`Event`]): the one home of what `trace`,
//! `rounds`, `child_audits` and `total_duration_ms` mean.
//! Must never: read the store itself beyond [`load`], change a run, or read
//! JSON back by key (events are decoded into [`EventKind`] first).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{RunView, StepView};
use crate::engine::{Engine, EngineError};
use crate::interp::event::AttemptResult;
use crate::interp::{Event, EventKind, Spend, StepStatus};

/// The audit records of a run (their JSON names are the wire names).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    /// The entry flow's name.
    pub flow_name: String,
    /// Every step (sub-flow steps as `parent/child`), by the id clients see.
    pub steps: BTreeMap<String, AuditStep>,
    /// The entry flow's spend.
    #[serde(rename = "flowSpent")]
    pub flow_spent: Spend,
    /// The carry variables of the entry flow, by name.
    pub carry: BTreeMap<String, Value>,
    /// Steps of the entry flow that are done (succeeded, failed or skipped).
    pub steps_completed: usize,
    /// Steps of the entry flow.
    pub total_steps: usize,
    /// Every ended attempt and every gate decision, in order.
    pub trace: Vec<TraceEntry>,
    /// Revision rounds the entry flow has used.
    pub round: u32,
    /// Every gate decision, in order, with the round it was made in.
    pub rounds: Vec<RoundRecord>,
    /// One audit per sub-flow a `run` step started.
    pub child_audits: Vec<ChildAudit>,
    /// From the first audit event to the last (ms; a running run: so far).
    pub total_duration_ms: i64,
}

/// One step in [`Audit::steps`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditStep {
    /// `do`, `set`, `gate`, `fanout`, `run` or `evaluate`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Its status.
    pub status: StepStatus,
    /// Attempts since its last reset.
    pub attempts: u32,
    /// `iterate` cycles that asked for another try since its last reset
    /// (the manual's `iterations`).
    pub iterations: u32,
    /// Its output, when it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its latest failure reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// A waiting gate's live token (reference §2.3: where a client that lost
    /// the envelope finds it).
    #[serde(rename = "gateToken", skip_serializing_if = "Option::is_none")]
    pub gate_token: Option<String>,
    /// A decided gate's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
}

/// One record of [`Audit::trace`]: an attempt that ended, or a gate decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEntry {
    /// The step (`parent/child`) or fanout item (`fan/3`).
    pub step_id: String,
    /// The step's kind (`do`, `set`, `evaluate`, `gate`, `run`), or `item`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The attempt (0 for a gate decision).
    pub attempt: u32,
    /// `succeeded` or `failed`; a gate's decision (`approve`, `revise`, `kill`).
    pub status: String,
    /// From the attempt's hand-out to its end (0 when it was not handed
    /// out: `set` steps, sub-flow ends; a gate: from waiting to decided).
    pub duration_ms: i64,
    /// Revision rounds the step's flow had used when it ended.
    pub round: u32,
    /// When it ended (ms since the epoch).
    pub at: i64,
}

/// One gate decision in [`Audit::rounds`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundRecord {
    /// The gate.
    #[serde(rename = "stepId")]
    pub step_id: String,
    /// The round the gate was waiting in.
    pub round: u32,
    /// `approve`, `revise` or `kill`.
    pub decision: String,
    /// Where it routed (none: continue or end).
    pub target: Option<String>,
    /// The decision's note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Its choice among the gate's options (X10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    /// Who decided.
    #[serde(rename = "resolvedBy")]
    pub resolved_by: String,
    /// Decided without the gate token.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tokenless: bool,
    /// When (ms since the epoch).
    pub at: i64,
}

/// The audit of one sub-flow (a `run` step's child).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildAudit {
    /// The `run` step that started it.
    #[serde(rename = "stepId")]
    pub step_id: String,
    /// The `run` step's status.
    pub status: StepStatus,
    /// Its steps that are done.
    pub steps_completed: usize,
    /// Its steps.
    pub total_steps: usize,
    /// Its steps, by the id clients see (`parent/child`).
    pub steps: BTreeMap<String, AuditStep>,
}

/// Reads run `run_id` and its events and derives its [`Audit`]. An event
/// line this binary cannot decode is left out (as the manifests and patches
/// leave it out): the audit of an old run still answers.
pub fn load(engine: &mut Engine, run_id: &str) -> Result<Audit, EngineError> {
    let view = super::load(engine, run_id)?;
    let lines = engine.store().events(run_id, 0, u64::MAX)?;
    let events: Vec<Event> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(of(&view, &events))
}

fn step_record(s: &StepView, view: &RunView) -> AuditStep {
    let waiting = view.gate(&s.id);
    AuditStep {
        kind: s.kind,
        status: s.status,
        attempts: s.attempts,
        iterations: s.iterations,
        output: s.output.clone(),
        failure: s.failure.clone(),
        gate_token: waiting.map(|g| g.token.clone()),
        decision: s.decision.clone(),
    }
}

/// The prefix of the flow a step id belongs to (`wrap/` for `wrap/digest`,
/// empty for an entry-flow step): the key of its flow's rounds.
fn flow_prefix(step_id: &str) -> &str {
    step_id.rfind('/').map_or("", |i| &step_id[..=i])
}

/// What [`of`] accumulates while it walks the events.
#[derive(Default)]
struct Walk {
    /// When each step or item (`fan/3`) was last handed out or started waiting.
    started: BTreeMap<String, i64>,
    /// The round each waiting gate waits in.
    waiting_round: BTreeMap<String, u32>,
    /// Revise decisions taken so far, per flow prefix.
    revises: BTreeMap<String, u32>,
    trace: Vec<TraceEntry>,
    rounds: Vec<RoundRecord>,
}

impl Walk {
    fn round_of(&self, step_id: &str) -> u32 {
        self.revises.get(flow_prefix(step_id)).copied().unwrap_or(0)
    }

    fn ended(&mut self, step_id: String, kind: &'static str, attempt: u32, ok: bool, at: i64) {
        let started = self.started.remove(&step_id).unwrap_or(at);
        // an item's round is its fanout's flow's
        let round = match kind {
            "item" => self.round_of(flow_prefix(&step_id).trim_end_matches('/')),
            _ => self.round_of(&step_id),
        };
        self.trace.push(TraceEntry {
            step_id,
            kind,
            attempt,
            status: if ok { "succeeded" } else { "failed" }.into(),
            duration_ms: at - started,
            round,
            at,
        });
    }

    fn event(&mut self, e: &Event, kind_of: &dyn Fn(&str) -> &'static str) {
        let Some(step) = e.step.clone() else {
            return;
        };
        match &e.kind {
            EventKind::Ready { .. } => {
                self.started.insert(step, e.at);
            }
            EventKind::GateWaiting { round } => {
                self.started.insert(step.clone(), e.at);
                self.waiting_round.insert(step, *round);
            }
            EventKind::FanoutItemReady { item_index, .. } => {
                self.started.insert(format!("{step}/{item_index}"), e.at);
            }
            EventKind::Result(r) => {
                let (attempt, ok) = match r {
                    AttemptResult::Output { attempt, .. } => (*attempt, true),
                    AttemptResult::Failure { attempt, .. } => (*attempt, false),
                };
                let kind = kind_of(&step);
                self.ended(step, kind, attempt, ok, e.at);
            }
            EventKind::FanoutAttemptResult {
                item_index,
                attempt,
                success,
                ..
            } => self.ended(
                format!("{step}/{item_index}"),
                "item",
                *attempt,
                *success,
                e.at,
            ),
            EventKind::GateResolved {
                decision,
                target,
                note,
                choice,
                resolved_by,
                tokenless,
                ..
            } => {
                let round = self.waiting_round.remove(&step).unwrap_or(0);
                let started = self.started.remove(&step).unwrap_or(e.at);
                self.trace.push(TraceEntry {
                    step_id: step.clone(),
                    kind: "gate",
                    attempt: 0,
                    status: decision.clone(),
                    duration_ms: e.at - started,
                    round: self.round_of(&step),
                    at: e.at,
                });
                if decision == "revise" {
                    *self.revises.entry(flow_prefix(&step).into()).or_default() += 1;
                }
                self.rounds.push(RoundRecord {
                    step_id: step,
                    round,
                    decision: decision.clone(),
                    target: target.clone(),
                    note: note.clone(),
                    choice: choice.clone(),
                    resolved_by: resolved_by.clone(),
                    tokenless: *tokenless,
                    at: e.at,
                });
            }
            _ => {}
        }
    }
}

/// The audit of a run from its view and its events (a pure function).
pub fn of(view: &RunView, events: &[Event]) -> Audit {
    let steps: BTreeMap<String, AuditStep> = view
        .steps
        .iter()
        .map(|s| (s.id.clone(), step_record(s, view)))
        .collect();
    let kind_of = |id: &str| view.step(id).map_or("do", |s| s.kind);
    let mut walk = Walk::default();
    for e in events {
        walk.event(e, &kind_of);
    }
    let (steps_completed, total_steps) = view.progress();
    let total_duration_ms = match (events.first(), events.last()) {
        (Some(a), Some(b)) => (b.at - a.at).max(0),
        _ => 0,
    };
    Audit {
        flow_name: view.meta.flow.clone(),
        steps,
        flow_spent: view.spent,
        carry: view.carry.clone(),
        steps_completed,
        total_steps,
        trace: walk.trace,
        round: view.round,
        rounds: walk.rounds,
        child_audits: child_audits(view),
        total_duration_ms,
    }
}

/// One [`ChildAudit`] per `run` step whose sub-flow started (at any depth).
fn child_audits(view: &RunView) -> Vec<ChildAudit> {
    view.steps
        .iter()
        .filter(|s| s.kind == "run")
        .filter_map(|parent| {
            let prefix = format!("{}/", parent.id);
            let children: Vec<&StepView> = view
                .steps
                .iter()
                .filter(|s| s.depth == parent.depth + 1 && s.id.starts_with(&prefix))
                .collect();
            if children.is_empty() {
                return None;
            }
            Some(ChildAudit {
                step_id: parent.id.clone(),
                status: parent.status,
                steps_completed: children.iter().filter(|s| s.status.is_terminal()).count(),
                total_steps: children.len(),
                steps: children
                    .iter()
                    .map(|s| (s.id.clone(), step_record(s, view)))
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_prefixes_key_the_rounds() {
        assert_eq!(flow_prefix("draft"), "");
        assert_eq!(flow_prefix("wrap/digest"), "wrap/");
        assert_eq!(flow_prefix("a/b/c"), "a/b/");
    }
}
