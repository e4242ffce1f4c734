//! Run state: plain data that the interpreter transforms and the store
//! persists (a small header plus one row per step, so a transition writes
//! only what it changed).
//!
//! Owns: the run, frame, step and fanout-item records, spend ledgers, the
//! audit event type, and row keys.
//! Must never: do I/O or hold anything that cannot be serialized.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Work remains.
    Running,
    /// The flow output was produced.
    Completed,
    /// An unhandled failure, exhausted rounds, or a bad output.
    Failed,
    /// A gate decided `kill` with no target.
    Killed,
    /// A flow budget was exceeded.
    BudgetExhausted,
    /// Cancelled by an operator.
    Cancelled,
}

impl RunStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Killed => "killed",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        self != RunStatus::Running
    }
}

/// Status of a step (or fanout item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    #[default]
    Pending,
    /// Handed out; waiting for a report.
    Ready,
    /// A fanout or sub-flow in progress.
    Running,
    /// A gate waiting for a decision.
    WaitingGate,
    /// Done.
    Succeeded,
    /// Failed for good.
    Failed,
    /// Will not run.
    Skipped,
}

impl StepStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Ready => "ready",
            StepStatus::Running => "running",
            StepStatus::WaitingGate => "waiting_gate",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }

    /// Succeeded, failed or skipped.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded | StepStatus::Failed | StepStatus::Skipped
        )
    }
}

/// Why an attempt or a step failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The attempt number (0 for scope-level failures).
    pub attempt: u32,
    /// Human-readable reason.
    pub reason: String,
    /// Structured violations (contract errors, failed ensures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Value>,
}

impl Failure {
    /// A failure without structured violations.
    pub fn new(attempt: u32, reason: impl Into<String>) -> Failure {
        Failure {
            attempt,
            reason: reason.into(),
            violations: Vec::new(),
        }
    }
}

/// Spend on one ledger.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spend {
    /// Dollars.
    pub usd: f64,
    /// Tokens.
    pub tokens: f64,
    /// Dispatches (engine-counted).
    pub dispatches: f64,
    /// Milliseconds (client-reported).
    pub ms: f64,
}

impl Spend {
    /// Adds another spend.
    pub fn add(&mut self, o: &Spend) {
        self.usd += o.usd;
        self.tokens += o.tokens;
        self.dispatches += o.dispatches;
        self.ms += o.ms;
    }

    /// As a JSON object with only the non-zero keys.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("usd", self.usd),
            ("tokens", self.tokens),
            ("dispatches", self.dispatches),
            ("ms", self.ms),
        ] {
            if v != 0.0 {
                m.insert(
                    k.into(),
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                );
            }
        }
        Value::Object(m)
    }
}

/// A fanout item.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ItemState {
    /// Status.
    pub status: StepStatus,
    /// The element of `over`.
    pub value: Value,
    /// Current stage.
    pub stage: u32,
    /// Attempts over all stages.
    pub attempts: u32,
    /// Attempts of the current stage.
    pub stage_attempts: u32,
    /// Output of the last completed stage (`prev`), or the final output.
    pub output: Option<Value>,
    /// Output of the previous failed attempt (identical-evidence rule).
    pub last_output: Option<Value>,
    /// Live dispatch token.
    pub token: Option<String>,
    /// Last failure.
    pub failure: Option<Failure>,
    /// The item's git worktree while it lives (`isolation: worktree`, engine dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The item's changes (`git diff --binary HEAD` of its worktree), taken
    /// when its final stage succeeded and merged when the fanout settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// A step of a frame.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepState {
    /// Status.
    pub status: StepStatus,
    /// Attempts made since the last reset (iterations included).
    pub attempts: u32,
    /// `iterate` cycles since the last reset.
    pub iterations: u32,
    /// Revisions this gate made (survives resets).
    pub gate_rounds: u32,
    /// Reset count.
    pub epoch: u32,
    /// Live dispatch or gate token.
    pub token: Option<String>,
    /// Output when succeeded.
    pub output: Option<Value>,
    /// Output of the previous failed attempt (identical-evidence rule).
    pub last_output: Option<Value>,
    /// Latest failure.
    pub failure: Option<Failure>,
    /// The failure was routed by `on_fail`: dependants are skipped, the run goes on (E2).
    pub handled: bool,
    /// Activated by a route (on_fail, approve, kill), with what activated it.
    pub routed: Option<Failure>,
    /// The gate decision taken (`approve`, `revise`, `kill`).
    pub decision: Option<String>,
    /// Task or sub-flow ledger.
    pub spent: Spend,
    /// Fanout items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ItemState>,
    /// Frame of a running sub-flow.
    pub child: Option<u32>,
}

/// One flow invocation: the entry flow (frame 0) or a sub-flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameMeta {
    /// Flow index in the plan.
    pub flow: u32,
    /// The run step that called it.
    pub parent: Option<(u32, u32)>,
    /// The flow input.
    pub input: Value,
    /// Gate revisions in this frame.
    pub rounds: u32,
    /// The flow's ledger.
    pub spent: Spend,
    /// Number of steps.
    pub len: u32,
    /// No longer live (finished or dropped by a reset).
    pub closed: bool,
    /// Steps not yet terminal.
    pub live: u32,
}

/// A carry variable's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarryValue {
    /// The value.
    pub value: Value,
    /// Epoch of the source step when written (step-sourced values).
    pub source_epoch: Option<u32>,
    /// `initial` or `revise`.
    pub kind: String,
}

/// The run header (everything but the step rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Run id.
    pub id: String,
    /// Hash of the plan executed (E6).
    pub plan_hash: String,
    /// Status.
    pub status: RunStatus,
    /// Flow output when completed.
    pub output: Option<Value>,
    /// Why the run ended, if it failed.
    pub failure: Option<Failure>,
    /// Frames (index 0 is the entry flow).
    pub frames: Vec<FrameMeta>,
    /// Carry variables.
    pub carry: BTreeMap<String, CarryValue>,
    /// Token counter (tokens are unique per run).
    pub issued: u64,
    /// Workspace root for file predicates.
    pub workspace: Option<String>,
    /// Handed-out dispatches: (frame, step, item + 1 or 0 for the step itself).
    pub ready: BTreeSet<(u32, u32, u32)>,
    /// Waiting gates: (frame, step).
    pub gates: BTreeSet<(u32, u32)>,
    /// Milliseconds since the epoch when created.
    pub created_ms: i64,
    /// Usage receipts settled so far: `dispatchId` → sequence number
    /// (idempotency of `stratum_usage_report`; survives checkpoint reverts).
    #[serde(default)]
    pub receipts: BTreeMap<String, u64>,
    /// Last receipt sequence number (monotonic, never rolled back).
    #[serde(default)]
    pub receipt_seq: u64,
}

/// A whole run in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The header.
    pub header: Header,
    /// Steps per frame.
    pub steps: Vec<Vec<StepState>>,
    /// Store version this state was loaded at.
    pub version: u64,
    /// Rows changed since the last commit.
    pub dirty: BTreeSet<u32>,
    /// Events since the last commit.
    pub events: Vec<Event>,
}

/// Row key of a step: frame in the high half, step in the low half.
pub fn row_key(frame: u32, step: u32) -> u32 {
    (frame << 16) | (step & 0xffff)
}

/// Most steps a flow may have in a run (row keys hold 16 bits).
pub const MAX_STEPS: usize = 0xffff;
/// Most frames a run may have.
pub const MAX_FRAMES: usize = 0xffff;

/// One audit event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the epoch.
    pub at: i64,
    /// Kind (`planned`, `ready`, `result`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Step id (`parent/child`, `fan/3`).
    #[serde(rename = "stepId", skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Details.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}
