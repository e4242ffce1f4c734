//! The audit events a transition records: one closed enum, so the list of
//! kinds and their fields lives in one place (documented in
//! `docs/events.md`, which a test holds against [`EventKind::ALL`]).
//!
//! Owns: the event record, every kind with its typed detail, and their JSON
//! form (`{at, type, stepId?, detail?}`, detail field names in camelCase).
//! Must never: carry anything that is not plain data, or be read back to
//! decide what a run does (the step rows and the header are the state).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::host::FileEvidence;
use super::state::{Failure, RunStatus};

/// One audit event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the epoch.
    pub at: i64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Step id (`parent/child`, `fan/3`).
    #[serde(rename = "stepId", default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// Every kind of audit event, with its detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "detail", rename_all = "snake_case")]
pub enum EventKind {
    /// The run was created.
    Planned {
        #[serde(rename = "planHash")]
        plan_hash: String,
        flow: String,
    },
    /// A step was handed out.
    Ready { attempt: u32 },
    /// An attempt of a step ended.
    Result(AttemptResult),
    /// A file predicate or file function read a file.
    Evidence {
        #[serde(flatten)]
        file: FileEvidence,
        /// `worktree` when it read a fanout item's worktree (else the workspace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<String>,
    },
    /// A judged predicate was decided.
    Judged {
        statement: String,
        holds: bool,
        reason: String,
        stakes: String,
        model: String,
        usage: JudgeUsage,
    },
    /// A step was skipped.
    Skipped { reason: String },
    /// A failed step's `on_fail` chose its target.
    Routed { target: String, failure: Failure },
    /// A gate waits for a decision.
    GateWaiting { round: u32 },
    /// A gate was decided.
    GateResolved {
        decision: String,
        target: Option<String>,
        note: Option<String>,
        #[serde(rename = "resolvedBy")]
        resolved_by: String,
    },
    /// The run completed with its output.
    Completed { output: Value },
    /// The run failed.
    Failed(RunEnd),
    /// A gate killed the run.
    Killed(RunEnd),
    /// The entry flow's budget was exceeded.
    BudgetExhausted(RunEnd),
    /// An operator cancelled the run.
    FlowCancelled { by: String, burned: Burned },
    /// Usage of a step's dispatch, or of a usage receipt.
    UsageDebit(UsageDebit),
    /// Usage of a fanout item's dispatch, or of the judge that checked it.
    FanoutLedgerDebit {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        attempt: u32,
        amount: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    /// A fanout item was handed out.
    FanoutItemReady {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
        attempt: u32,
    },
    /// A fanout item's stage was skipped by its `when`.
    FanoutItemSkipped {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
    },
    /// An attempt of a fanout item ended.
    FanoutAttemptResult {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
        attempt: u32,
        success: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Failure>,
    },
    /// The patches of an isolated fanout's items were merged (or not).
    FanoutMerge {
        items: Vec<u32>,
        #[serde(rename = "preMerge")]
        pre_merge: Vec<String>,
        success: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A fanout item's git worktree was made.
    WorktreeCreated {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        path: String,
    },
    /// A fanout item's git worktree was removed.
    WorktreeRemoved {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A fanout item's changes were taken as a patch.
    WorktreePatch {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        bytes: usize,
    },
    /// A revise reset the steps of a gate's reset closure.
    StepReset {
        reason: String,
        reset: Vec<EpochChange>,
        #[serde(rename = "subflowsDropped")]
        subflows_dropped: Vec<String>,
    },
    /// A carry variable was written.
    CarryUpdated {
        name: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
    },
    /// A driver continued the run.
    Resumed,
    /// The run state was restored from a checkpoint.
    CheckpointReverted {
        label: String,
        #[serde(rename = "receiptsAtRevert")]
        receipts_at_revert: u64,
    },
}

impl EventKind {
    /// Every kind's `type`, in the order of `docs/events.md`.
    pub const ALL: &'static [&'static str] = &[
        "planned",
        "ready",
        "result",
        "evidence",
        "judged",
        "skipped",
        "routed",
        "gate_waiting",
        "gate_resolved",
        "completed",
        "failed",
        "killed",
        "budget_exhausted",
        "flow_cancelled",
        "usage_debit",
        "fanout_ledger_debit",
        "fanout_item_ready",
        "fanout_item_skipped",
        "fanout_attempt_result",
        "fanout_merge",
        "worktree_created",
        "worktree_removed",
        "worktree_patch",
        "step_reset",
        "carry_updated",
        "resumed",
        "checkpoint_reverted",
    ];

    /// The event ending a run with `status` (failed, killed, budget exhausted).
    pub fn run_end(status: RunStatus, failure: &Failure) -> EventKind {
        let end = RunEnd {
            attempt: failure.attempt,
            reason: failure.reason.clone(),
        };
        match status {
            RunStatus::Killed => EventKind::Killed(end),
            RunStatus::BudgetExhausted => EventKind::BudgetExhausted(end),
            _ => EventKind::Failed(end),
        }
    }
}

/// How an attempt of a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttemptResult {
    /// It succeeded with this output.
    Output { attempt: u32, output: Value },
    /// It failed; `iterate` when an `iterate` cycle asked for another try.
    Failure {
        attempt: u32,
        failure: Failure,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iterate: Option<Iteration>,
    },
}

/// An `iterate` cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iteration {
    pub iteration: u32,
    pub max: u32,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub attempt: u32,
    pub reason: String,
}

/// Tokens and dollars a judge spent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeUsage {
    pub tokens: f64,
    pub usd: f64,
}

/// What a cancel burned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Burned {
    pub steps: Vec<String>,
    pub items: usize,
}

/// A step's epoch before and after a reset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochChange {
    #[serde(rename = "stepId")]
    pub step_id: String,
    #[serde(rename = "fromEpoch")]
    pub from_epoch: u32,
    #[serde(rename = "toEpoch")]
    pub to_epoch: u32,
}

/// A usage debit: of a step's dispatch (`attempt`) or of a receipt
/// (`dispatchId`, `source`, `seq`, extras such as `telemetry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UsageDebit {
    /// A receipt (`stratum_usage_report`).
    Receipt {
        #[serde(rename = "dispatchId")]
        dispatch_id: String,
        source: String,
        seq: u64,
        amount: Value,
        #[serde(rename = "usdSource")]
        usd_source: Option<String>,
        #[serde(flatten)]
        extra: serde_json::Map<String, Value>,
    },
    /// A step report's usage.
    Dispatch { attempt: u32, amount: Value },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(e: &Event) -> Value {
        let v = serde_json::to_value(e).unwrap();
        let back: Event = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(&back, e);
        v
    }

    #[test]
    fn events_keep_their_json_form() {
        let e = Event {
            at: 5,
            kind: EventKind::Ready { attempt: 2 },
            step: Some("work".into()),
        };
        assert_eq!(
            round_trip(&e),
            json!({"at": 5, "type": "ready", "stepId": "work", "detail": {"attempt": 2}})
        );
        let e = Event {
            at: 1,
            kind: EventKind::Resumed,
            step: None,
        };
        assert_eq!(round_trip(&e), json!({"at": 1, "type": "resumed"}));
        let e = Event {
            at: 1,
            kind: EventKind::Result(AttemptResult::Failure {
                attempt: 1,
                failure: Failure::new(1, "no"),
                iterate: Some(Iteration {
                    iteration: 1,
                    max: 3,
                }),
            }),
            step: None,
        };
        assert_eq!(
            round_trip(&e)["detail"],
            json!({"attempt": 1, "failure": {"attempt": 1, "reason": "no"}, "iterate": {"iteration": 1, "max": 3}})
        );
    }

    #[test]
    fn all_lists_every_kind_once() {
        let mut seen = std::collections::BTreeSet::new();
        for k in EventKind::ALL {
            assert!(seen.insert(*k), "{k} listed twice");
        }
        // one sample per variant: its serialized type must be listed
        let samples = [
            EventKind::Resumed,
            EventKind::Failed(RunEnd {
                attempt: 0,
                reason: String::new(),
            }),
            EventKind::FanoutMerge {
                items: vec![],
                pre_merge: vec![],
                success: true,
                reason: None,
            },
        ];
        for s in samples {
            let v = serde_json::to_value(&s).unwrap();
            assert!(EventKind::ALL.contains(&v["type"].as_str().unwrap()));
        }
    }
}
