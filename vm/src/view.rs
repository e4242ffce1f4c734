//! Read-only views of stored runs for operators (`stratumc query`, `gate`,
//! `watch`): what each step is doing, which gates wait with which token, and
//! what the run has spent against its budget.
//!
//! Owns: turning a stored run (its header, step rows and plan) into plain
//! [`RunView`] records, and the compact one-line summary of a JSON value.
//! Also the manifests a run recorded (X4) and their re-hashing for
//! `stratumc verify` (through the `Host`, which does the hashing).
//!
//! Must never: write to the store, change a run, or decide anything (gate
//! decisions and cancellation go through [`Engine`]); it reads the state the
//! interpreter wrote and interprets no execution rule.

pub mod audit;
pub mod wire;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::{Engine, EngineError};
use crate::interp::{
    Event, EventKind, FileHash, FileRoot, Host, Manifest, PatchRecord, Run, RunStatus, Spend,
    StepStatus,
};
use crate::plan::{BudgetDef, Plan, StepKindDef};
use crate::store::RunMeta;

/// A run as an operator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// Listing record (flow, status, plan hash, created and updated times).
    pub meta: RunMeta,
    /// Run status (from the run header, the authority).
    pub status: RunStatus,
    /// Store version the view was read at.
    pub version: u64,
    /// Gate revision rounds used by the entry flow.
    pub round: u32,
    /// The entry flow's `max_rounds`.
    pub max_rounds: Option<u32>,
    /// Every step of the entry flow in plan order, each followed by the
    /// steps of the sub-flow it runs (if it started one).
    pub steps: Vec<StepView>,
    /// Gates waiting for a decision.
    pub gates: Vec<GateView>,
    /// The entry flow's spend.
    pub spent: Spend,
    /// The entry flow's budget.
    pub budget: Option<BudgetDef>,
    /// The flow output, when completed.
    pub output: Option<Value>,
    /// Why the run ended, if it did not complete.
    pub failure: Option<String>,
    /// Dispatches past their lease (X7) when the view was read: the next
    /// driver to touch the run orphans them; the view changes nothing.
    pub overdue: Vec<OverdueView>,
    /// The run this one retries (X8): its id and `--from` step.
    pub retry_of: Option<(String, Option<String>)>,
    /// The runs that retry this one (X8, from its `retried` audit events;
    /// filled by [`load`]).
    pub retried_by: Vec<String>,
    /// The entry flow's carry variables, by name.
    pub carry: BTreeMap<String, Value>,
}

/// A dispatch past its lease (X7), as of the view's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueView {
    /// The dispatch id: `step`, `parent/child`, `fanout/3`.
    pub id: String,
    /// Its attempt number.
    pub attempt: u32,
    /// Its lease.
    pub timeout_ms: u64,
    /// How long past the lease it is.
    pub late_ms: i64,
}

/// One step of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    /// The id clients see: `step`, `parent/child`.
    pub id: String,
    /// 0 for the entry flow, 1 for a sub-flow's steps, …
    pub depth: u32,
    /// `do`, `set`, `gate`, `fanout` or `run`.
    pub kind: &'static str,
    /// Status.
    pub status: StepStatus,
    /// Attempts since the last reset.
    pub attempts: u32,
    /// `iterate` cycles since the last reset.
    pub iterations: u32,
    /// Times a gate revise reset this step.
    pub resets: u32,
    /// For gates: revisions this gate made, and its own `max_rounds`.
    pub gate_rounds: Option<(u32, Option<u32>)>,
    /// The gate decision taken.
    pub decision: Option<String>,
    /// The output, when succeeded.
    pub output: Option<Value>,
    /// The latest failure reason.
    pub failure: Option<String>,
    /// The step's own ledger.
    pub spent: Spend,
    /// For fanouts: item counts.
    pub items: Option<ItemCounts>,
    /// Taken over from this run instead of being run (X8).
    pub reused_from: Option<String>,
}

/// Fanout items by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ItemCounts {
    /// All items.
    pub total: u32,
    /// Succeeded.
    pub succeeded: u32,
    /// Failed.
    pub failed: u32,
    /// Handed out, waiting for a result.
    pub in_flight: u32,
}

/// A gate waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateView {
    /// The gate's step id.
    pub step_id: String,
    /// The live gate token a decision must carry.
    pub token: String,
    /// Revision rounds used by the gate's flow.
    pub round: u32,
    /// That flow's `max_rounds`.
    pub max_rounds: Option<u32>,
    /// Revisions this gate made.
    pub gate_rounds: u32,
    /// This gate's own `max_rounds`.
    pub gate_max_rounds: Option<u32>,
    /// Targets of approve, revise, kill (`None`: continue / end the run).
    pub routes: [Option<String>; 3],
    /// The options a decision's `choice` may take (X10), as rendered when
    /// the gate started waiting.
    pub options: Option<Vec<String>>,
}

impl RunView {
    /// Steps of the entry flow that are done (succeeded, failed or skipped),
    /// and how many steps the entry flow has.
    pub fn progress(&self) -> (usize, usize) {
        let top = self.steps.iter().filter(|s| s.depth == 0);
        let total = top.clone().count();
        (top.filter(|s| s.status.is_terminal()).count(), total)
    }

    /// Where the entry flow stands (reference v1-runtime §6, the commit's
    /// `step_number` and `current_step_id`): the 1-based position of its
    /// first step that is not done, and that step; the step count + 1 and
    /// `None` when every step is done.
    pub fn position(&self) -> (usize, Option<&str>) {
        let mut top = self.steps.iter().filter(|s| s.depth == 0);
        match top.clone().position(|s| !s.status.is_terminal()) {
            Some(i) => (i + 1, top.nth(i).map(|s| s.id.as_str())),
            None => (top.count() + 1, None),
        }
    }

    /// A step by the id clients see.
    pub fn step(&self, id: &str) -> Option<&StepView> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// The waiting gate with this step id.
    pub fn gate(&self, id: &str) -> Option<&GateView> {
        self.gates.iter().find(|g| g.step_id == id)
    }
}

/// A gate waiting in some running run, as `stratumc query gates` and the
/// operator UI list them.
#[derive(Debug, Clone, PartialEq)]
pub struct RunGate {
    /// The run.
    pub run_id: String,
    /// Its flow.
    pub flow: String,
    /// The gate.
    pub gate: GateView,
}

/// The gates [`waiting_gates`] found, and the runs it could not read.
pub type GatesFound = (Vec<RunGate>, Vec<(String, EngineError)>);

/// Every gate waiting in a running run, oldest run first; the runs that
/// cannot be read are returned beside them (each with why), so a listing
/// still shows the others.
pub fn waiting_gates(engine: &mut Engine) -> Result<GatesFound, EngineError> {
    let runs = engine.store().list(Some("running"))?;
    let (mut found, mut unreadable) = (Vec::new(), Vec::new());
    for m in runs.iter().rev() {
        match load(engine, &m.run_id) {
            Ok(v) => found.extend(v.gates.into_iter().map(|gate| RunGate {
                run_id: m.run_id.clone(),
                flow: m.flow.clone(),
                gate,
            })),
            Err(e) => unreadable.push((m.run_id.clone(), e)),
        }
    }
    Ok((found, unreadable))
}

/// Reads a run: [`crate::store::StoreError::NotFound`] (inside
/// [`EngineError::Store`]) when the run does not exist. Overdue dispatches
/// are computed at the system clock's time.
pub fn load(engine: &mut Engine, run_id: &str) -> Result<RunView, EngineError> {
    let meta = engine.store().meta(run_id)?;
    let (run, plan) = engine.load(run_id)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut view = of_run(meta, &run, &plan.plan, now);
    view.retried_by = retried_by(engine, run_id)?;
    Ok(view)
}

/// The runs that retry `run_id`, oldest first (its `retried` audit events).
fn retried_by(engine: &Engine, run_id: &str) -> Result<Vec<String>, EngineError> {
    let events = engine.audit(run_id)?;
    Ok(events
        .iter()
        .filter(|e| e["type"] == "retried")
        .filter_map(|e| e["detail"]["run"].as_str().map(str::to_string))
        .collect())
}

/// The run `run_id` retries, with its `--from` step (X8; `None` for an
/// ordinary run).
pub fn retry_link(
    engine: &mut Engine,
    run_id: &str,
) -> Result<Option<(String, Option<String>)>, EngineError> {
    let (run, _) = engine.load(run_id)?;
    Ok(run
        .header
        .retry
        .as_ref()
        .map(|r| (r.run.clone(), r.from.clone())))
}

/// The dispatches past their lease at `now` (computed; nothing is written).
fn overdue_views(run: &Run, plan: &Plan, now: i64) -> Vec<OverdueView> {
    crate::interp::overdue(plan, run, now)
        .into_iter()
        .map(|o| {
            let f = o.slot.at.frame.0;
            let own = run
                .header
                .frames
                .get(f as usize)
                .and_then(|fr| plan.flows.get(fr.flow as usize))
                .and_then(|fl| fl.steps.get(o.slot.at.ix()))
                .map_or("?", |d| plan.str(d.id));
            let step = client_id(run, plan, f, own);
            OverdueView {
                id: match o.slot.item {
                    Some(k) => format!("{step}/{k}"),
                    None => step,
                },
                attempt: o.attempt,
                timeout_ms: o.timeout_ms,
                late_ms: o.late_ms(now),
            }
        })
        .collect()
}

fn kind_name(kind: &StepKindDef) -> &'static str {
    match kind {
        StepKindDef::Do { .. } => "do",
        StepKindDef::Set { .. } => "set",
        StepKindDef::Gate { .. } => "gate",
        StepKindDef::Fanout { .. } => "fanout",
        StepKindDef::Run { .. } => "run",
        StepKindDef::Evaluate { .. } => "evaluate",
    }
}

/// The view of a decoded run and its plan, at `now` (ms since the epoch:
/// which dispatches are overdue).
pub fn of_run(meta: RunMeta, run: &Run, plan: &Plan, now: i64) -> RunView {
    let h = &run.header;
    let flow_of = |f: usize| {
        h.frames
            .get(f)
            .and_then(|fr| plan.flows.get(fr.flow as usize))
    };
    let mut steps = Vec::new();
    // (frame, id prefix, depth); frames are walked depth-first without recursion
    let mut stack: Vec<(usize, String, u32, usize)> = vec![(0, String::new(), 0, 0)];
    while let Some((f, prefix, depth, next)) = stack.pop() {
        let (Some(flow), Some(rows)) = (flow_of(f), run.steps.get(f)) else {
            continue;
        };
        let Some((def, st)) = flow.steps.get(next).zip(rows.get(next)) else {
            continue;
        };
        stack.push((f, prefix.clone(), depth, next + 1));
        let id = format!("{prefix}{}", plan.str(def.id));
        let gate_rounds = match def.kind {
            StepKindDef::Gate { max_rounds, .. } => Some((st.gate_rounds, max_rounds)),
            _ => None,
        };
        let items = matches!(def.kind, StepKindDef::Fanout { .. }).then(|| {
            let mut c = ItemCounts {
                total: st.items.len() as u32,
                ..ItemCounts::default()
            };
            for it in &st.items {
                match it.status {
                    StepStatus::Succeeded => c.succeeded += 1,
                    StepStatus::Failed => c.failed += 1,
                    StepStatus::Ready | StepStatus::Running => c.in_flight += 1,
                    _ => {}
                }
            }
            c
        });
        steps.push(StepView {
            id: id.clone(),
            depth,
            kind: kind_name(&def.kind),
            status: st.status,
            attempts: st.attempts,
            iterations: st.iterations,
            resets: st.epoch,
            gate_rounds,
            decision: st.decision.clone(),
            output: st.output.clone(),
            failure: st.failure.as_ref().map(|f| f.reason.clone()),
            spent: st.spent,
            items,
            reused_from: st.reused.as_ref().map(|r| r.from_run.clone()),
        });
        if let Some(child) = st.child
            && child.ix() < h.frames.len()
        {
            stack.push((child.ix(), format!("{id}/"), depth + 1, 0));
        }
    }
    let gates = h
        .gates
        .iter()
        .filter_map(|&at| {
            let (f, i) = (at.frame.0, at.step);
            let flow = flow_of(f as usize)?;
            let def = flow.steps.get(i as usize)?;
            let st = run.steps.get(f as usize)?.get(i as usize)?;
            let StepKindDef::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                ..
            } = def.kind
            else {
                return None;
            };
            let name = |t: Option<u32>| {
                t.and_then(|t| flow.steps.get(t as usize))
                    .map(|d| plan.str(d.id).to_string())
            };
            Some(GateView {
                step_id: client_id(run, plan, f, plan.str(def.id)),
                token: st.token.clone().unwrap_or_default(),
                round: h.frames[f as usize].rounds,
                max_rounds: flow.max_rounds,
                gate_rounds: st.gate_rounds,
                gate_max_rounds: max_rounds,
                routes: [name(on_approve), name(on_revise), name(on_kill)],
                options: st.options.clone(),
            })
        })
        .collect();
    let entry = flow_of(0);
    RunView {
        status: h.status,
        version: run.version,
        round: h.frames.first().map_or(0, |f| f.rounds),
        max_rounds: entry.and_then(|f| f.max_rounds),
        steps,
        gates,
        spent: h.frames.first().map(|f| f.spent).unwrap_or_default(),
        budget: entry.and_then(|f| f.budget.clone()),
        output: h.output.clone(),
        failure: h.failure.as_ref().map(|f| f.reason.clone()),
        overdue: overdue_views(run, plan, now),
        retry_of: h.retry.as_ref().map(|r| (r.run.clone(), r.from.clone())),
        retried_by: Vec::new(),
        carry: h
            .carry
            .iter()
            .map(|(k, c)| (k.clone(), c.value.clone()))
            .collect(),
        meta,
    }
}

/// The id clients see of step `own` in frame `f` (`parent/child` for sub-flows).
fn client_id(run: &Run, plan: &Plan, f: u32, own: &str) -> String {
    let mut parts = vec![own.to_string()];
    let mut frame = f as usize;
    // parents form a chain towards frame 0; bounded by the frame count
    for _ in 0..run.header.frames.len() {
        let Some(parent) = run.header.frames.get(frame).and_then(|fr| fr.parent) else {
            break;
        };
        let name = run
            .header
            .frames
            .get(parent.frame.ix())
            .and_then(|fr| plan.flows.get(fr.flow as usize))
            .and_then(|fl| fl.steps.get(parent.ix()))
            .map_or("?", |d| plan.str(d.id));
        parts.push(name.to_string());
        frame = parent.frame.ix();
    }
    parts.reverse();
    parts.join("/")
}

/// Compact JSON of `v` on one line, cut to at most `max` characters (with `…`).
pub fn summarize(v: &Value, max: usize) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_are_one_line_and_bounded() {
        assert_eq!(summarize(&json!({"a": 1}), 20), r#"{"a":1}"#);
        assert_eq!(summarize(&json!("line\nbreak"), 20), "line break");
        let long = summarize(&json!("x".repeat(50)), 10);
        assert_eq!(long.chars().count(), 10);
        assert!(long.ends_with('…'));
    }
}

/// The manifests a run recorded (X4 `artifacts_recorded` events), in order.
pub fn manifests(engine: &Engine, run_id: &str) -> Result<Vec<Manifest>, EngineError> {
    let lines = engine.store().events(run_id, 0, u64::MAX)?;
    Ok(lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .filter_map(|e| match e.kind {
            EventKind::ArtifactsRecorded(m) => Some(m),
            _ => None,
        })
        .collect())
}

/// A declared command's run (X12) as the audit recorded it: the checked
/// step (or item, `fan/2`) and its receipt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptView {
    /// The step or item whose `exec` check or `evaluate` ran it.
    pub step: Option<String>,
    /// When it was recorded (ms since the epoch).
    pub at: i64,
    /// The receipt.
    #[serde(flatten)]
    pub receipt: crate::interp::CommandReceipt,
}

/// The receipts of the declared commands (X12) of run `run_id`, in order
/// (`stratumc query flow RUN --receipts`).
pub fn receipts(engine: &Engine, run_id: &str) -> Result<Vec<ReceiptView>, EngineError> {
    let lines = engine.store().events(run_id, 0, u64::MAX)?;
    Ok(lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .filter_map(|e| match e.kind {
            EventKind::CommandRan(receipt) => Some(ReceiptView {
                step: e.step,
                at: e.at,
                receipt,
            }),
            _ => None,
        })
        .collect())
}

/// The patch records a run recorded (X11 `patch_recorded` events), in order.
pub fn patches(engine: &Engine, run_id: &str) -> Result<Vec<PatchRecord>, EngineError> {
    let lines = engine.store().events(run_id, 0, u64::MAX)?;
    Ok(lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .filter_map(|e| match e.kind {
            EventKind::PatchRecorded(p) => Some(p),
            _ => None,
        })
        .collect())
}

/// The full unified diff of a patch record (X11): the inline diff when it
/// was not cut, else the run's blob under the record's `diff_sha256`
/// (checked against it). `None` when the diff was cut and no full diff was
/// kept (a record written before full diffs were, or a lost blob).
pub fn full_diff(
    engine: &Engine,
    run_id: &str,
    record: &PatchRecord,
) -> Result<Option<String>, EngineError> {
    if !record.diff_truncated {
        return Ok(Some(record.diff.clone()));
    }
    let Some(sha) = &record.diff_sha256 else {
        return Ok(None);
    };
    Ok(engine
        .blob(run_id, sha)?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// How a recorded file compares with the workspace now (`stratumc verify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileCheck {
    /// Same sha256 as recorded.
    Same,
    /// A regular file with other contents.
    Changed {
        /// Its sha256 now.
        sha256: String,
        /// Its size now.
        size: u64,
    },
    /// No regular file is there any more.
    Missing,
    /// The host could not hash it (refused path, too large, unreadable).
    Unreadable(String),
}

/// One recorded file, re-hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedFile {
    /// The manifest's step (`fan` for items, with `item`).
    pub step: String,
    /// The fanout item, for an item's manifest.
    pub item: Option<u32>,
    /// The attempt that recorded it.
    pub attempt: u32,
    /// The recorded file.
    pub recorded: FileHash,
    /// What is there now.
    pub check: FileCheck,
}

impl VerifiedFile {
    /// Whether the file still matches its manifest.
    pub fn matches(&self) -> bool {
        self.check == FileCheck::Same
    }
}

/// Re-hashes every file of every manifest of `run_id` through `host`
/// (relative to the run's workspace; items' worktree files too, which a
/// merge put there). Reads the store only; hashing is the host's.
pub fn verify(
    engine: &Engine,
    run_id: &str,
    host: &mut dyn Host,
) -> Result<Vec<VerifiedFile>, EngineError> {
    let mut out = Vec::new();
    for m in manifests(engine, run_id)? {
        for f in m.files {
            let check = match host.hash_file(FileRoot::Workspace, &f.path) {
                Ok(Some(now)) if now.sha256 == f.sha256 => FileCheck::Same,
                Ok(Some(now)) => FileCheck::Changed {
                    sha256: now.sha256,
                    size: now.size,
                },
                Ok(None) => FileCheck::Missing,
                Err(e) => FileCheck::Unreadable(e.to_string()),
            };
            out.push(VerifiedFile {
                step: m.step.clone(),
                item: m.item_index,
                attempt: m.attempt,
                recorded: f,
                check,
            });
        }
    }
    Ok(out)
}
