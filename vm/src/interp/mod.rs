//! The interpreter: a pure state machine over [`state::Run`].
//!
//! Owns: the execution semantics of reference v1-runtime §3–4 with the
//! decisions E1–E8 of LANGUAGE.md: scheduling, `when`, `set`, contracts,
//! ensures, attempts and the identical-evidence stop, `iterate`, `on_fail`
//! routes with handled failures, gates with rounds and reset closures,
//! carry, fanout items, sub-flows, budgets on every flow, output, tokens.
//! Must never: do I/O. Files, judges and the clock go through [`Host`];
//! persistence is the caller's (it commits `run.dirty` rows and `run.events`).

pub mod index;
mod machine;
pub mod state;

use serde_json::Value;

pub use index::PlanIndex;
pub use machine::{cancel, report, resolve_gate, rotate_tokens, start, usage_report, view};
pub use state::*;

/// What the interpreter asks of its environment.
pub trait Host {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&mut self) -> i64;
    /// `file_exists(path)`: whether a regular file exists, plus evidence for the audit.
    fn file_exists(&mut self, path: &str) -> Result<(bool, Value), String>;
    /// `file_contains(path, text)`, plus evidence for the audit.
    fn file_contains(&mut self, path: &str, text: &str) -> Result<(bool, Value), String>;
    /// A `judged` predicate.
    fn judge(&mut self, statement: &str, stakes: &str, context: &Value) -> Result<Verdict, String>;

    // ----- `isolation: worktree` with engine dispatch (reference v1-runtime §4.12) -----
    // A host that makes no git worktrees keeps the defaults: runs with such a
    // fanout are then refused when they start.

    /// Whether this host makes git worktrees for engine-dispatched fanout items.
    fn supports_worktrees(&self) -> bool {
        false
    }
    /// Creates a detached git worktree at HEAD of the workspace root for one
    /// fanout item (`name` is unique within the run; an existing one is
    /// reused) and returns the directory the item works in: its agent's
    /// working directory and the root of its file predicates.
    fn worktree_create(&mut self, _run_id: &str, _name: &str) -> Result<String, String> {
        Err(NO_WORKTREES.into())
    }
    /// The changes made in a worktree, everything staged (new files
    /// included), as `git diff --binary HEAD`; empty when nothing changed.
    fn worktree_patch(&mut self, _dir: &str) -> Result<String, String> {
        Err(NO_WORKTREES.into())
    }
    /// Removes a worktree; one already gone is not an error.
    fn worktree_remove(&mut self, _dir: &str) -> Result<(), String> {
        Err(NO_WORKTREES.into())
    }
    /// Runs each `pre_merge` command in the workspace root, then applies the
    /// patches `(item index, patch)` in the order given; the first error.
    fn worktree_merge(
        &mut self,
        _pre_merge: &[String],
        _patches: &[(u32, String)],
    ) -> Result<(), String> {
        Err(NO_WORKTREES.into())
    }
    /// `file_exists(path)` jailed to `root` (an item's worktree) instead of the workspace root.
    fn file_exists_in(&mut self, _root: &str, _path: &str) -> Result<(bool, Value), String> {
        Err(NO_WORKTREES.into())
    }
    /// `file_contains(path, text)` jailed to `root` (an item's worktree).
    fn file_contains_in(
        &mut self,
        _root: &str,
        _path: &str,
        _text: &str,
    ) -> Result<(bool, Value), String> {
        Err(NO_WORKTREES.into())
    }
}

/// What a host without git worktrees answers.
pub const NO_WORKTREES: &str = "this host makes no git worktrees";

/// A judge's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the statement holds.
    pub holds: bool,
    /// Why.
    pub reason: String,
    /// Model that judged.
    pub model: String,
    /// Tokens it used.
    pub tokens: f64,
    /// Dollars it cost.
    pub usd: f64,
}

/// Why an operation was refused. Nothing in the run changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    /// The step is not waiting for this report.
    #[error("{0}")]
    NotAwaiting(String),
    /// The token does not match the live issuance.
    #[error("{0}")]
    StaleToken(String),
    /// The run was cancelled.
    #[error("run {0} is cancelled; outstanding issuances cannot be resolved")]
    Cancelled(String),
    /// A gate decision other than approve, revise, kill.
    #[error("invalid gate decision `{0}`: expected approve, revise or kill")]
    InvalidDecision(String),
    /// The flow input does not satisfy the input contract.
    #[error("invalid flow input: {0}")]
    InvalidInput(String),
    /// A report that is malformed.
    #[error("invalid report: {0}")]
    InvalidReport(String),
    /// A flow name that does not exist.
    #[error("unknown flow `{0}`")]
    UnknownFlow(String),
    /// A carry value for a revise cannot be resolved yet.
    #[error("carry_revise_unresolved: {0}")]
    CarryUnresolved(String),
    /// The plan is too large for a run.
    #[error("{0}")]
    Limit(String),
    /// A receipt names a step that the run does not have.
    #[error("invalid_step: {0}")]
    InvalidStep(String),
    /// A usage receipt that is malformed.
    #[error("invalid receipt: {0}")]
    InvalidReceipt(String),
}

/// A step report: `{output?, failure?, usage?}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// The output.
    pub output: Option<Value>,
    /// A failure text.
    pub failure: Option<String>,
    /// Usage `{tokens?, usd?, ms?}`.
    pub usage: Option<Value>,
}

/// Largest output accepted in one report (serialized JSON).
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

impl Report {
    /// Reads `{output?, failure?, usage?}`; an object without any of those keys is the output itself.
    pub fn from_json(v: &Value) -> Result<Report, VmError> {
        let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
        if size > MAX_OUTPUT_BYTES {
            return Err(VmError::InvalidReport(format!(
                "the report is {size} bytes; the limit is {MAX_OUTPUT_BYTES}"
            )));
        }
        let Some(obj) = v.as_object() else {
            return Err(VmError::InvalidReport(
                "expected an object `{output?, failure?, usage?}`".into(),
            ));
        };
        if !["output", "failure", "usage"]
            .iter()
            .any(|k| obj.contains_key(*k))
        {
            return Ok(Report {
                output: Some(v.clone()),
                ..Report::default()
            });
        }
        if let Some(k) = obj
            .keys()
            .find(|k| !["output", "failure", "usage"].contains(&k.as_str()))
        {
            return Err(VmError::InvalidReport(format!(
                "unknown field `{k}`; a report has `output`, `failure` and `usage`"
            )));
        }
        let failure = match obj.get("failure") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(VmError::InvalidReport("`failure` must be a string".into())),
        };
        if failure.is_none() && !obj.contains_key("output") {
            return Err(VmError::InvalidReport(
                "a report needs `output` or `failure`".into(),
            ));
        }
        Ok(Report {
            output: obj.get("output").cloned(),
            failure,
            usage: obj.get("usage").cloned(),
        })
    }
}

/// A usage receipt (`stratum_usage_report`): usage spent outside a step
/// report (a sub-agent, a tool call, a judge run by the client), settled into
/// the ledgers after the fact. Idempotent by `dispatch_id`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Receipt {
    /// Client-chosen identity of the spending; a second receipt with the same id is a duplicate.
    pub dispatch_id: String,
    /// The step (or `parent/child`, `fanout/3`) whose ledgers it settles into; none = the flow only.
    pub step_id: Option<String>,
    /// Who reports it (free text, e.g. `claude-code`).
    pub source: String,
    /// `{tokens?, usd?, ms?}`.
    pub usage: Value,
    /// `reported` or `estimated`; required when `usage.usd` is given.
    pub usd_source: Option<String>,
    /// Opaque extras kept in the audit (`telemetry`, `split`, `at`).
    pub extra: serde_json::Map<String, Value>,
}

/// Fields a receipt may carry.
pub const RECEIPT_FIELDS: [&str; 8] = [
    "dispatchId",
    "stepId",
    "source",
    "usage",
    "telemetry",
    "split",
    "usdSource",
    "at",
];

impl Receipt {
    /// Reads and validates a receipt object (reference v1-runtime §4.13).
    pub fn from_json(v: &Value) -> Result<Receipt, VmError> {
        let bad = |m: String| VmError::InvalidReceipt(m);
        let obj = v
            .as_object()
            .ok_or_else(|| bad("expected an object `{dispatchId, source, usage, ...}`".into()))?;
        if let Some(k) = obj.keys().find(|k| !RECEIPT_FIELDS.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown field `{k}`; a receipt has {}",
                RECEIPT_FIELDS.join(", ")
            )));
        }
        let text = |k: &str, required: bool| -> Result<Option<String>, VmError> {
            match obj.get(k) {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => Ok(Some(s.clone())),
                None | Some(Value::Null) => Err(bad(format!("`{k}` is required"))),
                Some(_) => Err(bad(format!(
                    "`{k}` must be a non-empty string of at most 256 bytes"
                ))),
            }
        };
        let dispatch_id = text("dispatchId", true)?.unwrap_or_default();
        if dispatch_id.starts_with("legacy:") || dispatch_id.starts_with("engine:") {
            return Err(bad(format!(
                "`dispatchId` `{dispatch_id}`: the prefixes `legacy:` and `engine:` are reserved for the engine; choose another id"
            )));
        }
        let source = text("source", true)?.unwrap_or_default();
        let step_id = text("stepId", false)?;
        let usd_source = text("usdSource", false)?;
        let usage = obj
            .get("usage")
            .cloned()
            .ok_or_else(|| bad("`usage` is required: `{tokens?, usd?, ms?}`".into()))?;
        let has_usd = usage.get("usd").is_some_and(|u| !u.is_null());
        match usd_source.as_deref() {
            None if has_usd => {
                return Err(bad(
                    "`usage.usd` needs `usdSource`: `reported` (the provider's bill) or `estimated`"
                        .into(),
                ));
            }
            None | Some("reported" | "estimated") => {}
            Some("legacy") => {
                return Err(bad("`usdSource: legacy` is reserved for the engine".into()));
            }
            Some(other) => {
                return Err(bad(format!(
                    "`usdSource` `{other}`: expected `reported` or `estimated`"
                )));
            }
        }
        let extra = obj
            .iter()
            .filter(|(k, _)| ["telemetry", "split", "at"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
        if size > 64 * 1024 {
            return Err(bad(format!(
                "the receipt is {size} bytes; the limit is 65536"
            )));
        }
        Ok(Receipt {
            dispatch_id,
            step_id,
            source,
            usage,
            usd_source,
            extra,
        })
    }
}

/// The answer to a usage receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptOutcome {
    /// True when this `dispatchId` was settled before (nothing changed).
    pub duplicate: bool,
    /// The receipt's sequence number (the original one for a duplicate).
    pub seq: u64,
    /// A breach it caused: `flow_exhausted`, `flow_exhausted_after_terminal`,
    /// `subflow_exhausted` or `task_exhausted`.
    pub budget: Option<&'static str>,
}

/// What happens next, after an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The run status.
    pub status: RunStatus,
    /// Dispatches to hand out (E4, E5).
    pub ready: Vec<Value>,
    /// Gates waiting now, with their tokens.
    pub gates: Vec<Value>,
    /// The flow output when completed.
    pub output: Option<Value>,
    /// Why the run ended, if it did not complete.
    pub failure: Option<Failure>,
    /// `{spent, budget}` of the entry flow.
    pub ledger: Value,
}

impl Outcome {
    /// The response status: `ready` when there are dispatches, `running` when only gates wait.
    pub fn wire_status(&self) -> &'static str {
        match self.status {
            RunStatus::Running if !self.ready.is_empty() => "ready",
            other => other.as_str(),
        }
    }

    /// The engine response envelope.
    pub fn to_json(&self, run_id: &str, plan_hash: &str) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("status".into(), Value::from(self.wire_status()));
        m.insert("runId".into(), Value::from(run_id));
        m.insert("planHash".into(), Value::from(plan_hash));
        m.insert("ready".into(), Value::Array(self.ready.clone()));
        m.insert("gates".into(), Value::Array(self.gates.clone()));
        if let Some(o) = &self.output {
            m.insert("output".into(), o.clone());
        }
        if let Some(f) = &self.failure {
            m.insert(
                "failure".into(),
                serde_json::to_value(f).unwrap_or(Value::Null),
            );
        }
        m.insert("ledger".into(), self.ledger.clone());
        Value::Object(m)
    }
}
