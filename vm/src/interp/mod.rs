//! The interpreter: a pure state machine over [`state::Run`].
//!
//! Owns: the execution semantics of reference v1-runtime §3–4 with the
//! decisions E1–E8 of LANGUAGE.md: scheduling, `when`, `set`, contracts,
//! ensures, attempts and the identical-evidence stop, `iterate`, `on_fail`
//! routes with handled failures, gates with rounds and reset closures,
//! carry, fanout items, sub-flows, budgets on every flow, output, tokens.
//! Must never: do I/O. Files, judges and the clock go through [`Host`];
//! persistence is the caller's (it commits `run.dirty` rows and `run.events`).
//!
//! Rooms: `state` (run records and their indices), `event` (the audit
//! event kinds), `outcome` (what a transition answers), `error`, `host`
//! (the effects seam), `index` (per-plan lookup tables), and `machine/`
//! (the transitions, one room per concern; see its module docs).

pub mod error;
pub mod event;
pub mod host;
pub mod index;
mod machine;
pub mod outcome;
pub mod state;

use serde_json::Value;

pub use error::{CheckpointError, VmError};
pub use event::{Event, EventKind, Manifest, PatchRecord, ShownFile};
pub use host::{
    ChangeStatus, CommandReceipt, CommandRequest, CommandRun, FileChange, FileEvidence, FileHash,
    FileRead, FileRoot, Host, HostError, InputDigest, JudgeAsk, JudgeRequest, MAX_GLOB_MATCHES,
    MAX_HASH_BYTES, MAX_TEXT_BYTES, NO_ARTIFACTS, NO_COMMANDS, NO_SNAPSHOTS, NO_WORKTREES,
    RECEIPT_TAIL_BYTES, Restore, TreeDiff, Verdict,
};
pub use index::PlanIndex;
pub use machine::{
    GateDecision, JUDGE_BACKOFF_MS, JUDGE_TRIES, JUDGE_UNAVAILABLE, MAX_ORPHANS, ORPHANED, Overdue,
    Prior, RetryRefused, Saved, cancel, checkpoint_allowed, checkpoint_label, expire, interrupted,
    overdue, prior, record_estimate, report, resolve_gate, resume, retried, revert, start,
    start_retry, take_over, usage_report, view,
};
pub use outcome::{Dispatch, Outcome, ReadyEntry, WaitingGate};
pub use state::*;

/// A step report: `{output?, failure?, usage?, telemetry?}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// The output.
    pub output: Option<Value>,
    /// A failure text.
    pub failure: Option<String>,
    /// Usage `{tokens?, usd?, ms?}`.
    pub usage: Option<Value>,
    /// What the client says about the dispatch (`{durationMs, model,
    /// effort?}` in the reference; any object): recorded in the audit as a
    /// `telemetry` event, never checked or charged (boxed: reports travel
    /// in the agent runner's answers, kept small).
    pub telemetry: Option<Box<Value>>,
}

/// Largest `telemetry` accepted in one report (serialized JSON).
pub const MAX_TELEMETRY_BYTES: usize = 64 * 1024;

/// The keys of a report in its envelope form.
const REPORT_FIELDS: [&str; 4] = ["output", "failure", "usage", "telemetry"];

/// Largest output accepted in one report (serialized JSON).
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

impl Report {
    /// Reads `{output?, failure?, usage?, telemetry?}`; an object without any
    /// of the keys `output`, `failure`, `usage` is the output itself (so an
    /// output with a field named `telemetry` stays an output).
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
        if let Some(k) = obj.keys().find(|k| !REPORT_FIELDS.contains(&k.as_str())) {
            return Err(VmError::InvalidReport(format!(
                "unknown field `{k}`; a report has `output`, `failure`, `usage` and `telemetry`"
            )));
        }
        let telemetry = match obj.get("telemetry") {
            None | Some(Value::Null) => None,
            Some(t @ Value::Object(_)) => Some(Box::new(t.clone())),
            Some(_) => {
                return Err(VmError::InvalidReport(
                    "`telemetry` must be an object (e.g. `{durationMs, model, effort?}`)".into(),
                ));
            }
        };
        let telemetry_size = telemetry
            .as_ref()
            .and_then(|t| serde_json::to_vec(t).ok())
            .map_or(0, |b| b.len());
        if telemetry_size > MAX_TELEMETRY_BYTES {
            return Err(VmError::InvalidReport(format!(
                "`telemetry` is {telemetry_size} bytes; the limit is {MAX_TELEMETRY_BYTES}"
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
            telemetry,
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

#[cfg(test)]
mod report_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn telemetry_is_taken_as_sent_and_never_turns_an_output_into_a_report() {
        let t = json!({"durationMs": 5, "model": "m"});
        let r = Report::from_json(&json!({"output": {"v": 1}, "telemetry": t})).unwrap();
        assert_eq!(r.telemetry.as_deref(), Some(&t));
        assert_eq!(r.output, Some(json!({"v": 1})));
        // a bare output with a field named `telemetry` stays an output
        let r = Report::from_json(&json!({"telemetry": 3})).unwrap();
        assert_eq!(r.output, Some(json!({"telemetry": 3})));
        assert!(r.telemetry.is_none());
        let e = Report::from_json(&json!({"failure": "x", "telemetry": [1]})).unwrap_err();
        assert!(e.to_string().contains("must be an object"), "{e}");
        let big = json!({"output": {}, "telemetry": {"x": "y".repeat(MAX_TELEMETRY_BYTES)}});
        let e = Report::from_json(&big).unwrap_err();
        assert!(e.to_string().contains("the limit is 65536"), "{e}");
    }
}
