//! The evidence chain of one run as plain data (`stratumc report`): per
//! step its status and attempts, what its checks read (files with their
//! digests), every verdict (rules that failed, the judge's answers, human
//! decisions with their notes), the receipts of the declared commands it
//! ran (X12), what it spent, and the run's timeline.
//!
//! Owns: gathering a stored run's [`RunView`] and its typed audit events
//! into a [`RunReport`], and the one rule of its own: a step whose actual
//! spend exceeded [`OVER_FACTOR`] times its expected estimate (the
//! `estimated` event the run was started with) in any dimension is
//! flagged ([`Flag`]); a dimension estimated at zero is never flagged, and
//! a run without an estimate (started from a plan file) has no flags.
//! Rendering (Markdown, HTML, JSON) is the CLI's.
//! Must never: write to the store, change a run, or decide anything: it
//! arranges what the interpreter already recorded, and interprets no
//! execution rule (a step's status is its row's; a verdict is its event's).

use serde::Serialize;
use serde_json::Value;

use crate::engine::{Engine, EngineError};
use crate::interp::event::{AttemptResult, EstimateFigure, StepEstimate, UsageDebit};
use crate::interp::host::InputDigest;
use crate::interp::{Event, EventKind, FileEvidence, Manifest, ShownFile, Spend};
use crate::view::{self, RunView, StepView};

/// The evidence chain of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// Run id.
    pub run_id: String,
    /// The flow it runs.
    pub flow: String,
    /// The blake3 hash of its plan.
    pub plan_hash: String,
    /// Its status (`completed`, `failed`, ...).
    pub status: String,
    /// When it was created and last changed (ms since the epoch).
    pub created_ms: i64,
    /// Last change.
    pub updated_ms: i64,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Its output, when it completed.
    pub output: Option<Value>,
    /// What the whole run spent.
    pub spent: SpendRecord,
    /// The flow's budget, when it has one.
    pub budget: Option<BudgetRecord>,
    /// Every step in plan order (children of `run` steps after their caller).
    pub steps: Vec<StepReport>,
    /// Steps whose spend exceeded [`OVER_FACTOR`] × their expected estimate.
    pub flags: Vec<Flag>,
    /// Every audit event, oldest first, as one line each.
    pub timeline: Vec<TimelineEntry>,
}

/// One step's part of the chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// Step id (`step`, `parent/child`).
    pub id: String,
    /// Nesting depth (0 for the entry flow's steps).
    pub depth: u32,
    /// Construct (`do`, `gate`, ...).
    pub kind: String,
    /// Status from its row (`succeeded`, `failed`, `skipped`, ...).
    pub status: String,
    /// Attempts used.
    pub attempts: u32,
    /// How each attempt ended, in order.
    pub tries: Vec<TryRecord>,
    /// Dispatches whose lease ran out (X7).
    pub orphans: u32,
    /// Files its checks read, the latest read of each path last.
    pub evidence: Vec<FileEvidence>,
    /// The manifests of its artifacts (X4), one per successful attempt
    /// (per item for a fanout): every file with its size and sha256.
    pub manifests: Vec<Manifest>,
    /// The patch records of its accepted scoped dispatches (X11): each
    /// changed file with its sha256 before and after, and the diff.
    pub patches: Vec<crate::interp::PatchRecord>,
    /// The judge's verdicts on its `judged` ensures.
    pub verdicts: Vec<VerdictRecord>,
    /// Judge calls that erred (transport, timeout, malformed answer): not
    /// verdicts, retried (X5).
    pub judge_errors: u32,
    /// The receipts of the declared commands its `exec` checks and its
    /// `evaluate` ran (X12), in order, with when each was recorded.
    pub receipts: Vec<ReceiptRecord>,
    /// Gate decisions (for a gate).
    pub decisions: Vec<DecisionRecord>,
    /// Why it was skipped, when it was.
    pub skipped: Option<String>,
    /// What it spent.
    pub spent: SpendRecord,
    /// The cost model's estimate of it, recorded when the run started
    /// (`None`: a run from a plan file, or a sub-flow's step).
    pub estimate: Option<StepEstimate>,
    /// Its output (succeeded steps).
    pub output: Option<Value>,
}

/// How many times its expected estimate a step may spend before the
/// report flags it.
pub const OVER_FACTOR: f64 = 2.0;

/// A step that spent more than [`OVER_FACTOR`] × its expected estimate in
/// one dimension.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flag {
    /// Step id.
    pub step: String,
    /// `dispatches`, `tokens`, `usd` or `ms`.
    pub dimension: String,
    /// What it spent.
    pub actual: f64,
    /// Its expected estimate.
    pub expected: f64,
    /// Its worst-case estimate (`None`: unknown fanout length).
    pub worst: Option<f64>,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TryRecord {
    /// Attempt number.
    pub attempt: u32,
    /// When the result was recorded.
    pub at: i64,
    /// Whether it passed every check.
    pub passed: bool,
    /// Why it failed.
    pub reason: Option<String>,
    /// The structured violations of a failure (contract errors, ensures).
    pub violations: Vec<Value>,
}

/// A declared command's run (X12).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptRecord {
    /// When the command's run was recorded (ms since the epoch).
    pub at: i64,
    /// What the audit keeps of it: `{command, argv, exit, ms,
    /// stdout_sha256, tail, timed_out, truncated}`.
    #[serde(flatten)]
    pub receipt: crate::interp::CommandReceipt,
}

/// A judge's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictRecord {
    /// When it was given.
    pub at: i64,
    /// What the judge was asked.
    pub statement: String,
    /// Whether it holds.
    pub holds: bool,
    /// The judge's reason.
    pub reason: String,
    /// The stakes tier.
    pub stakes: String,
    /// The model that judged.
    pub model: String,
    /// Tokens the judge used.
    pub tokens: f64,
    /// Dollars it cost.
    pub usd: f64,
    /// The named judge (`[judges.NAME]`); `None` for the default judge.
    pub judge: Option<String>,
    /// The score of a scored verdict (X5), and its pass mark.
    pub score: Option<f64>,
    /// The pass mark of a scored verdict.
    pub threshold: Option<f64>,
    /// The judge's reasons (scored form).
    pub reasons: Vec<String>,
    /// The files the judge was sent, with their sha256.
    pub inputs: Vec<InputDigest>,
}

/// A gate decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// When it was made.
    pub at: i64,
    /// `approve`, `revise` or `kill`.
    pub decision: String,
    /// The step it routed to.
    pub target: Option<String>,
    /// The decider's note.
    pub note: Option<String>,
    /// The option chosen (X10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    /// Who decided (`human`, `agent`, ...).
    pub resolved_by: String,
    /// The files the gate showed, with the digests the decision was made on (X4).
    pub shown: Vec<ShownFile>,
}

/// Spend in every dimension.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SpendRecord {
    /// Dispatches.
    pub dispatches: f64,
    /// Tokens.
    pub tokens: f64,
    /// Dollars.
    pub usd: f64,
    /// Milliseconds (client-reported).
    pub ms: f64,
}

impl From<Spend> for SpendRecord {
    fn from(s: Spend) -> Self {
        SpendRecord {
            dispatches: s.dispatches,
            tokens: s.tokens,
            usd: s.usd,
            ms: s.ms,
        }
    }
}

/// A declared budget (absent dimensions are unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRecord {
    /// Dispatches.
    pub dispatches: Option<u64>,
    /// Tokens.
    pub tokens: Option<u64>,
    /// Dollars.
    pub usd: Option<f64>,
    /// Milliseconds.
    pub ms: Option<u64>,
}

/// One audit event on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    /// When.
    pub at: i64,
    /// The step it is about.
    pub step: Option<String>,
    /// Its kind (`ready`, `result`, ...; docs/events.md).
    pub kind: String,
    /// A one-line summary of its detail.
    pub summary: String,
}

/// Longest detail summary on a timeline line, in characters.
const SUMMARY_CHARS: usize = 160;

/// The report of `run_id` as the store holds it now.
pub fn load(engine: &mut Engine, run_id: &str) -> Result<RunReport, EngineError> {
    let view = view::load(engine, run_id)?;
    let events = engine.events(run_id)?;
    Ok(build(&view, &events))
}

/// The report of a run from its view and its audit events.
pub fn build(view: &RunView, events: &[Event]) -> RunReport {
    let mut steps: Vec<StepReport> = view.steps.iter().map(step_of).collect();
    for event in events {
        let Some(id) = event.step.as_deref() else {
            continue;
        };
        if let Some(step) = steps.iter_mut().find(|s| s.id == id) {
            record(step, event);
        }
    }
    attach_estimates(&mut steps, events);
    let flags = steps.iter().flat_map(flags_of).collect();
    RunReport {
        run_id: view.meta.run_id.clone(),
        flow: view.meta.flow.clone(),
        plan_hash: view.meta.plan_hash.clone(),
        status: view.status.as_str().to_owned(),
        created_ms: view.meta.created_ms,
        updated_ms: view.meta.updated_ms,
        failure: view.failure.clone(),
        output: view.output.clone(),
        spent: view.spent.into(),
        budget: view.budget.as_ref().map(|b| BudgetRecord {
            dispatches: b.dispatches,
            tokens: b.tokens,
            usd: b.usd,
            ms: b.ms,
        }),
        steps,
        flags,
        timeline: events.iter().map(timeline_entry).collect(),
    }
}

/// Gives each step its part of the run's (last) `estimated` event.
fn attach_estimates(steps: &mut [StepReport], events: &[Event]) {
    let Some(estimates) = events.iter().rev().find_map(|e| match &e.kind {
        EventKind::Estimated { steps } => Some(steps),
        _ => None,
    }) else {
        return;
    };
    for est in estimates {
        if let Some(step) = steps.iter_mut().find(|s| s.depth == 0 && s.id == est.id) {
            step.estimate = Some(est.clone());
        }
    }
}

/// The dimensions in which a step spent more than [`OVER_FACTOR`] × its
/// expected estimate.
fn flags_of(step: &StepReport) -> Vec<Flag> {
    let Some(est) = &step.estimate else {
        return Vec::new();
    };
    let s = &step.spent;
    let dims: [(&str, f64, &EstimateFigure); 4] = [
        ("dispatches", s.dispatches, &est.dispatches),
        ("tokens", s.tokens, &est.tokens),
        ("usd", s.usd, &est.usd),
        ("ms", s.ms, &est.ms),
    ];
    dims.into_iter()
        .filter(|(_, actual, fig)| fig.expected > 0.0 && *actual > OVER_FACTOR * fig.expected)
        .map(|(dim, actual, fig)| Flag {
            step: step.id.clone(),
            dimension: dim.to_owned(),
            actual,
            expected: fig.expected,
            worst: fig.worst,
        })
        .collect()
}

fn step_of(s: &StepView) -> StepReport {
    StepReport {
        id: s.id.clone(),
        depth: s.depth,
        kind: s.kind.to_owned(),
        status: s.status.as_str().to_owned(),
        attempts: s.attempts,
        tries: Vec::new(),
        orphans: 0,
        evidence: Vec::new(),
        manifests: Vec::new(),
        patches: Vec::new(),
        verdicts: Vec::new(),
        judge_errors: 0,
        receipts: Vec::new(),
        decisions: Vec::new(),
        skipped: None,
        spent: s.spent.into(),
        estimate: None,
        output: s.output.clone(),
    }
}

/// Adds what one event of the step says to its report.
fn record(step: &mut StepReport, event: &Event) {
    match &event.kind {
        EventKind::Result(AttemptResult::Output { attempt, .. }) => step.tries.push(TryRecord {
            attempt: *attempt,
            at: event.at,
            passed: true,
            reason: None,
            violations: Vec::new(),
        }),
        EventKind::Result(AttemptResult::Failure {
            attempt, failure, ..
        }) => step.tries.push(TryRecord {
            attempt: *attempt,
            at: event.at,
            passed: false,
            reason: Some(failure.reason.clone()),
            violations: failure.violations.clone(),
        }),
        EventKind::DispatchOrphaned { .. } => step.orphans += 1,
        EventKind::Evidence { file, .. } => {
            step.evidence.retain(|e| e.path != file.path);
            step.evidence.push(file.clone());
        }
        EventKind::Judged {
            statement,
            holds,
            reason,
            stakes,
            model,
            usage,
            judge,
            score,
            threshold,
            reasons,
            inputs,
        } => step.verdicts.push(VerdictRecord {
            at: event.at,
            statement: statement.clone(),
            holds: *holds,
            reason: reason.clone(),
            stakes: stakes.clone(),
            model: model.clone(),
            tokens: usage.tokens,
            usd: usage.usd,
            judge: judge.clone(),
            score: *score,
            threshold: *threshold,
            reasons: reasons.clone(),
            inputs: inputs.clone(),
        }),
        EventKind::JudgeError { .. } => step.judge_errors += 1,
        EventKind::CommandRan(receipt) => step.receipts.push(ReceiptRecord {
            at: event.at,
            receipt: receipt.clone(),
        }),
        EventKind::ArtifactsRecorded(m) => step.manifests.push(m.clone()),
        EventKind::PatchRecorded(p) => step.patches.push(p.clone()),
        EventKind::GateResolved {
            decision,
            target,
            note,
            choice,
            resolved_by,
            shown,
            ..
        } => step.decisions.push(DecisionRecord {
            at: event.at,
            decision: decision.clone(),
            target: target.clone(),
            note: note.clone(),
            choice: choice.clone(),
            resolved_by: resolved_by.clone(),
            shown: shown.clone(),
        }),
        EventKind::Skipped { reason } => step.skipped = Some(reason.clone()),
        _ => {}
    }
}

fn timeline_entry(event: &Event) -> TimelineEntry {
    TimelineEntry {
        at: event.at,
        step: event.step.clone(),
        kind: event.kind.name().to_owned(),
        summary: summary(&event.kind),
    }
}

/// A short line for the timeline: the detail's salient field, else its JSON.
fn summary(kind: &EventKind) -> String {
    match kind {
        EventKind::Result(AttemptResult::Output { attempt, .. }) => {
            format!("attempt {attempt} passed")
        }
        EventKind::Result(AttemptResult::Failure {
            attempt, failure, ..
        }) => clip(&format!("attempt {attempt} failed: {}", failure.reason)),
        EventKind::Judged { holds, reason, .. } => clip(&format!(
            "{}: {reason}",
            if *holds { "holds" } else { "does not hold" }
        )),
        EventKind::CommandRan(r) => clip(&format!(
            "`{}` {} in {} ms: {}",
            r.command,
            match (r.exit, r.timed_out) {
                (_, true) => "timed out".to_owned(),
                (Some(c), _) => format!("exited {c}"),
                (None, false) => "was killed".to_owned(),
            },
            r.ms,
            r.argv.join(" ")
        )),
        EventKind::GateResolved { decision, note, .. } => match note {
            Some(n) => clip(&format!("{decision}: {n}")),
            None => decision.clone(),
        },
        EventKind::UsageDebit(UsageDebit::Dispatch { amount, .. }) => {
            view::summarize(amount, SUMMARY_CHARS)
        }
        other => {
            // the detail of the event's own JSON form (`{type, detail?}`)
            #[derive(serde::Deserialize)]
            struct Detail {
                detail: Option<Value>,
            }
            serde_json::to_value(other)
                .and_then(serde_json::from_value::<Detail>)
                .ok()
                .and_then(|d| d.detail)
                .map_or_else(String::new, |d| view::summarize(&d, SUMMARY_CHARS))
        }
    }
}

fn clip(text: &str) -> String {
    if text.chars().count() <= SUMMARY_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(SUMMARY_CHARS - 1).collect();
    out.push('…');
    out
}
