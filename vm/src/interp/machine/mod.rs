//! The transitions of a run: start, report, resolve a gate, cancel, revert,
//! view. One [`Transition`] is made per operation; its rooms (the
//! submodules) each own one concern of the execution semantics.
//!
//! Owns: the shared state of a transition (the worklist, the current file
//! root) and the primitives every room uses: step status changes (which keep
//! the header's ready and gate sets), tokens, events, ending the run.
//! Must never: do I/O except through [`Host`], or leave a run half-changed
//! when it returns an error (every check that can refuse runs before any
//! write).
//!
//! Rooms: `schedule` (the worklist, `when`, dependencies, routes, issuing),
//! `attempt` (the one attempt path of steps and fanout items), `checks`
//! (contracts and ensures of an output), `ledger` (budgets, receipts),
//! `gates` (decisions, resets), `carry`, `fanout` (items, stages, worktree
//! merges), `subflow` (frames), `values` (references, templates,
//! expressions), `ops` (locating ids, tokens, cancel, checkpoints), `leases`
//! (X7: overdue dispatches, orphans, re-dispatch), `reuse` (X8: steps a
//! retried run takes over from the old run), `views` (the outcome handed
//! back).

mod artifacts;
mod attempt;
mod carry;
mod checks;
mod evaluate;
mod fanout;
mod gates;
mod leases;
mod ledger;
mod on_fail;
mod ops;
mod reuse;
mod routes;
mod schedule;
mod scopes;
mod subflow;
mod values;
mod views;

use std::collections::VecDeque;

use serde_json::Value;

pub use checks::{JUDGE_BACKOFF_MS, JUDGE_TRIES, JUDGE_UNAVAILABLE};
pub use gates::GateDecision;
pub use leases::{MAX_ORPHANS, ORPHANED, Overdue, expire, overdue, take_over};
pub use ops::{Saved, checkpoint_allowed, checkpoint_label};
pub use reuse::{Prior, RetryRefused, prior, retried, start_retry};

use super::event::{Event, EventKind, StepEstimate};
use super::host::Host;
use super::index::{FlowIndex, PlanIndex};
use super::outcome::Outcome;
use super::state::*;
use super::{Receipt, ReceiptOutcome, Report, VmError};
use crate::plan::{FlowDef, Plan, StepDef};

/// One operation on a run in progress.
struct Transition<'a> {
    plan: &'a Plan,
    index: &'a PlanIndex,
    run: &'a mut Run,
    host: &'a mut dyn Host,
    /// Steps to look at, in order.
    queue: VecDeque<StepAt>,
    /// Root of file predicates while an item of a worktree fanout is checked
    /// (its worktree); `None`: the workspace root.
    file_root: Option<String>,
    /// The artifacts (X4) of the output being checked, hashed by its check;
    /// taken by the success that records their manifest.
    artifacts_seen: Option<Vec<super::host::FileHash>>,
    /// The receipts of the `exec` checks (X12) of the output being checked,
    /// in order: what `receipts()` in its ensures answers. `None` outside an
    /// output's checks.
    receipts: Option<Vec<super::host::CommandReceipt>>,
    /// `changes()` of the scoped dispatch being checked (X11).
    changes_seen: Option<Value>,
    /// The snapshot and the diff of the scoped dispatch being checked (X11),
    /// taken by the success that records its patch.
    diff_seen: Option<(String, super::host::TreeDiff)>,
    /// Set when the host stopped a declared command this transition ran
    /// (the driver's cancel or signal): the transition is then refused
    /// with [`VmError::Stopped`] and the engine records none of it.
    stopped: Option<String>,
}

impl<'a> Transition<'a> {
    fn new(plan: &'a Plan, index: &'a PlanIndex, run: &'a mut Run, host: &'a mut dyn Host) -> Self {
        Transition {
            plan,
            index,
            run,
            host,
            queue: VecDeque::new(),
            file_root: None,
            artifacts_seen: None,
            receipts: None,
            changes_seen: None,
            diff_seen: None,
            stopped: None,
        }
    }

    /// [`VmError::Stopped`] when a command of this transition was stopped
    /// (then the caller drops the run state it changed).
    fn refuse_if_stopped(&mut self) -> Result<(), VmError> {
        match self.stopped.take() {
            Some(why) => Err(VmError::Stopped(why)),
            None => Ok(()),
        }
    }

    // ----- accessors --------------------------------------------------------

    fn frame(&self, f: FrameIx) -> &FrameMeta {
        &self.run.header.frames[f.ix()]
    }

    fn frame_mut(&mut self, f: FrameIx) -> &mut FrameMeta {
        &mut self.run.header.frames[f.ix()]
    }

    /// The flow a frame runs.
    fn flow(&self, f: FrameIx) -> &'a FlowDef {
        &self.plan.flows[self.run.header.frames[f.ix()].flow as usize]
    }

    fn def(&self, at: StepAt) -> &'a StepDef {
        &self.flow(at.frame).steps[at.ix()]
    }

    fn st(&self, at: StepAt) -> &StepState {
        &self.run.steps[at.frame.ix()][at.ix()]
    }

    fn st_mut(&mut self, at: StepAt) -> &mut StepState {
        self.run.dirty.insert(RowKey::step(at));
        &mut self.run.steps[at.frame.ix()][at.ix()]
    }

    fn item(&self, at: StepAt, k: u32) -> &ItemState {
        &self.st(at).items[k as usize]
    }

    fn item_mut(&mut self, at: StepAt, k: u32) -> &mut ItemState {
        self.st_mut(at)
            .items
            .get_mut(k as usize)
            .expect("invariant: item indices come from the fanout's own list")
    }

    fn fidx(&self, f: FrameIx) -> &'a FlowIndex {
        &self.index.flows[self.run.header.frames[f.ix()].flow as usize]
    }

    /// A step's own id (without its frame's path).
    fn own_id(&self, at: StepAt) -> &'a str {
        self.plan.str(self.def(at).id)
    }

    /// The id clients see: `step`, `parent/child`.
    fn sid(&self, at: StepAt) -> String {
        let own = self.own_id(at);
        match self.frame(at.frame).parent {
            Some(parent) => format!("{}/{own}", self.sid(parent)),
            None => own.to_string(),
        }
    }

    /// The id clients see of a dispatch: a step's, or `fanout/3` for an item.
    fn slot_id(&self, slot: Slot) -> String {
        match slot.item {
            None => self.sid(slot.at),
            Some(k) => format!("{}/{k}", self.sid(slot.at)),
        }
    }

    fn status(&self) -> RunStatus {
        self.run.header.status
    }

    fn ended(&self) -> bool {
        self.status().is_terminal()
    }

    // ----- primitives -------------------------------------------------------

    fn event(&mut self, kind: EventKind, step: Option<String>) {
        let at = self.host.now_ms();
        self.run.events.push(Event { at, kind, step });
    }

    /// A fresh token (`d…` dispatches, `g…` gates), unique within the run.
    fn mint(&mut self, prefix: &str) -> String {
        let h = &mut self.run.header;
        h.issued += 1;
        let n = h.issued;
        let hash = blake3::hash(format!("{}:{}:{}", h.id, n, h.created_ms).as_bytes());
        format!("{prefix}{n}-{}", &hash.to_hex()[..12])
    }

    /// Changes a step's status, keeping the frame's live count and the
    /// header's ready and gate sets in step with it.
    fn set_status(&mut self, at: StepAt, status: StepStatus) {
        let old = self.st(at).status;
        if old == status {
            return;
        }
        let frame = self.frame_mut(at.frame);
        if old.is_terminal() && !status.is_terminal() {
            frame.live += 1;
        } else if !old.is_terminal() && status.is_terminal() {
            frame.live = frame.live.saturating_sub(1);
        }
        let h = &mut self.run.header;
        if old == StepStatus::Ready {
            h.ready.remove(&Slot::step(at));
        }
        if status == StepStatus::Ready {
            h.ready.insert(Slot::step(at));
        }
        if old == StepStatus::WaitingGate {
            h.gates.remove(&at);
        }
        if status == StepStatus::WaitingGate {
            h.gates.insert(at);
        }
        self.st_mut(at).status = status;
    }

    /// Changes a fanout item's status, keeping the header's ready set.
    fn set_item_status(&mut self, at: StepAt, k: u32, status: StepStatus) {
        let slot = Slot::item(at, k);
        if status == StepStatus::Ready {
            self.run.header.ready.insert(slot);
        } else {
            self.run.header.ready.remove(&slot);
        }
        self.item_mut(at, k).status = status;
    }

    fn enqueue_succ(&mut self, at: StepAt) {
        for &(t, _) in &self.fidx(at.frame).succ[at.ix()] {
            self.queue.push_back(at.sibling(t));
        }
    }

    /// Ends a running run otherwise than completed.
    fn end_run(&mut self, status: RunStatus, failure: Failure) {
        if self.ended() {
            return;
        }
        self.run.header.status = status;
        self.run.header.failure = Some(failure.clone());
        self.event(EventKind::run_end(status, &failure), None);
        self.burn_tokens();
        self.drop_all_worktrees();
        self.drop_snapshots();
    }

    /// The run completed with `output`.
    fn complete(&mut self, output: Value) {
        self.run.header.output = Some(output.clone());
        self.run.header.status = RunStatus::Completed;
        self.event(EventKind::Completed { output }, None);
        self.burn_tokens();
        self.drop_snapshots();
    }

    /// Drops every live token (terminal runs hand nothing out).
    fn burn_tokens(&mut self) {
        self.burn_where(|_| true);
    }

    /// Drops the live tokens of the frames `frame` selects (steps, fanout items and gates).
    fn burn_where(&mut self, frame: impl Fn(FrameIx) -> bool) {
        let ready: Vec<Slot> = self
            .run
            .header
            .ready
            .iter()
            .copied()
            .filter(|s| frame(s.at.frame))
            .collect();
        for slot in ready {
            self.run.header.ready.remove(&slot);
            match slot.item {
                None => self.st_mut(slot.at).token = None,
                Some(k) => {
                    if let Some(it) = self.st_mut(slot.at).items.get_mut(k as usize) {
                        it.token = None;
                    }
                }
            }
        }
        let gates: Vec<StepAt> = self
            .run
            .header
            .gates
            .iter()
            .copied()
            .filter(|g| frame(g.frame))
            .collect();
        for at in gates {
            self.run.header.gates.remove(&at);
            self.st_mut(at).token = None;
        }
    }
}

// ----- public API ----------------------------------------------------------------

/// Starts a run of `flow` (default: the entry flow) with `input`.
#[allow(clippy::too_many_arguments)]
pub fn start(
    plan: &Plan,
    index: &PlanIndex,
    plan_hash: &str,
    run_id: &str,
    flow: Option<&str>,
    input: Value,
    workspace: Option<String>,
    host: &mut dyn Host,
) -> Result<(Run, Outcome), VmError> {
    begin(
        plan, index, plan_hash, run_id, flow, input, workspace, None, host,
    )
}

/// Starts a run, a retry when `retry` is given (its link is in the header
/// before the first step is looked at).
#[allow(clippy::too_many_arguments)]
fn begin(
    plan: &Plan,
    index: &PlanIndex,
    plan_hash: &str,
    run_id: &str,
    flow: Option<&str>,
    input: Value,
    workspace: Option<String>,
    retry: Option<Box<RetryOf>>,
    host: &mut dyn Host,
) -> Result<(Run, Outcome), VmError> {
    let flow_i = ops::entry_flow(plan, index, flow)?;
    ops::check_startable(plan, flow_i, workspace.as_deref(), host)?;
    let fd = &plan.flows[flow_i as usize];
    crate::eval::contract::check_record_at(plan, fd.input, &input, "input")
        .map_err(|e| VmError::InvalidInput(e.to_string()))?;
    let mut run = ops::new_run(
        plan_hash,
        run_id,
        flow_i,
        fd,
        input,
        workspace,
        host.now_ms(),
    );
    run.header.retry = retry;
    let mut t = Transition::new(plan, index, &mut run, host);
    t.event(
        EventKind::Planned {
            plan_hash: plan_hash.to_string(),
            flow: plan.str(fd.name).to_string(),
        },
        None,
    );
    let n = fd.steps.len() as u32;
    t.queue
        .extend((0..n).map(|s| StepAt::new(FrameIx::ENTRY, s)));
    t.advance();
    t.refuse_if_stopped()?;
    let out = t.outcome();
    Ok((run, out))
}

/// Reports the result of a dispatch (`step`, `parent/child` or `fanout/3`).
pub fn report(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    step_id: &str,
    token: Option<&str>,
    result: &Report,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    let mut t = Transition::new(plan, index, run, host);
    t.report(step_id, token, result)?;
    t.advance();
    t.refuse_if_stopped()?;
    Ok(t.outcome())
}

/// Decides a waiting gate (`approve`, `revise`, `kill`).
#[allow(clippy::too_many_arguments)]
pub fn resolve_gate(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    step_id: &str,
    token: Option<&str>,
    decision: &GateDecision<'_>,
    resolved_by: &str,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    let mut t = Transition::new(plan, index, run, host);
    t.resolve_gate(step_id, token, decision, resolved_by)?;
    t.advance();
    t.refuse_if_stopped()?;
    Ok(t.outcome())
}

/// Cancels a run: every live token is burned; later reports are refused.
pub fn cancel(plan: &Plan, index: &PlanIndex, run: &mut Run, host: &mut dyn Host) -> Outcome {
    let mut t = Transition::new(plan, index, run, host);
    t.cancel();
    t.outcome()
}

/// Records that a driver continues the run (tokens unchanged); cancelled runs are refused.
pub fn resume(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    if run.header.status == RunStatus::Cancelled {
        return Err(VmError::Cancelled(run.header.id.clone()));
    }
    let mut t = Transition::new(plan, index, run, host);
    t.event(EventKind::Resumed, None);
    Ok(t.outcome())
}

/// Records that a driver was stopped by `signal` with `killed` agent
/// commands killed (their dispatches stay live: a resume hands them out again).
pub fn interrupted(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    signal: &str,
    killed: usize,
    host: &mut dyn Host,
) -> Outcome {
    let mut t = Transition::new(plan, index, run, host);
    let kind = EventKind::DriverInterrupted {
        signal: signal.to_string(),
        killed,
    };
    t.event(kind, None);
    t.outcome()
}

/// Records the cost model's estimate of the run's steps (the `estimated`
/// event): each step of the entry flow that the plan has gets its step
/// hash; an id the plan lacks keeps none. Changes nothing else.
pub fn record_estimate(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    mut steps: Vec<StepEstimate>,
    host: &mut dyn Host,
) -> Outcome {
    let flow = run.header.frames.first().map(|f| f.flow);
    for s in &mut steps {
        s.step_hash = flow.and_then(|flow| {
            let at = *index.flows.get(flow as usize)?.ids.get(&s.id)?;
            crate::plan::hash::step_hash(plan, flow, at)
        });
    }
    let mut t = Transition::new(plan, index, run, host);
    t.event(EventKind::Estimated { steps }, None);
    t.outcome()
}

/// Restores the state saved in a checkpoint under `label`. Live tokens are
/// replaced, spend is never given back, receipts survive.
pub fn revert(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    saved: &Saved,
    label: &str,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    let mut t = Transition::new(plan, index, run, host);
    t.revert(saved, label)?;
    t.refuse_if_stopped()?;
    Ok(t.outcome())
}

/// Settles a usage receipt; see [`Receipt`].
pub fn usage_report(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    receipt: &Receipt,
    host: &mut dyn Host,
) -> Result<(ReceiptOutcome, Outcome), VmError> {
    let mut t = Transition::new(plan, index, run, host);
    let r = t.usage_report(receipt)?;
    t.refuse_if_stopped()?;
    Ok((r, t.outcome()))
}

/// The current outcome without changing anything (resume, poll).
pub fn view(plan: &Plan, index: &PlanIndex, run: &mut Run, host: &mut dyn Host) -> Outcome {
    Transition::new(plan, index, run, host).outcome()
}
