//! Operations on a run as a whole: starting one, locating the dispatch a
//! client names, tokens, reports, cancelling, and checkpoints.
//!
//! Owns: the rules that refuse an operation (unknown flow, hosts without
//! worktrees, stale tokens, cancelled runs, checkpoint labels, fanouts in
//! flight) and what a revert restores (never spend, never receipts).
//! Must never: refuse after it has changed something.

use serde_json::Value;

use super::Transition;
use super::ledger::parse_usage;
use crate::interp::error::CheckpointError;
use crate::interp::event::{Burned, EventKind};
use crate::interp::host::Host;
use crate::interp::index::PlanIndex;
use crate::interp::state::*;
use crate::interp::{Report, VmError};
use crate::plan::{FlowDef, Plan, StepKindDef};

/// Where a client step id points.
pub(super) enum Target {
    Step(StepAt),
    Item(StepAt, u32),
}

/// A checkpoint's saved state: the header and every step row.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// The run header when it was taken.
    pub header: Header,
    /// The step rows when it was taken.
    pub rows: Vec<(RowKey, StepState)>,
}

/// The flow a run starts: `flow` by name, else the plan's entry.
pub(super) fn entry_flow(
    plan: &Plan,
    index: &PlanIndex,
    flow: Option<&str>,
) -> Result<u32, VmError> {
    match flow {
        None => Ok(plan.entry),
        Some(name) => index
            .flow_ids
            .get(name)
            .copied()
            .ok_or_else(|| VmError::UnknownFlow(name.to_string())),
    }
}

/// Refuses runs this host or plan cannot carry: worktree fanouts without
/// git worktrees or a workspace root, flows over [`MAX_STEPS`].
pub(super) fn check_startable(
    plan: &Plan,
    flow: u32,
    workspace: Option<&str>,
    host: &dyn Host,
) -> Result<(), VmError> {
    let fd = &plan.flows[flow as usize];
    // engine-run worktree fanouts need a host that makes git worktrees, and a workspace root
    for s in &fd.steps {
        if let StepKindDef::Fanout {
            worktree: true,
            consumer: false,
            ..
        } = s.kind
        {
            if !host.supports_worktrees() {
                return Err(VmError::Limit(format!(
                    "step `{}`: `isolation: worktree` with `dispatch: engine` is not supported yet by this host (it makes no git worktrees); run it with `stratumc run` or the MCP server, use `isolation: none`, or `dispatch: consumer` (the client isolates each item)",
                    plan.str(s.id)
                )));
            }
            if workspace.is_none() {
                return Err(VmError::Limit(format!(
                    "step `{}`: `isolation: worktree` needs a workspace root (a git repository) to make the items' worktrees in; give the run one",
                    plan.str(s.id)
                )));
            }
        }
    }
    // X11: scoped steps snapshot the working tree through git (a run-time
    // check: `check` never looks at the workspace)
    if super::scopes::has_scopes(plan)
        && let Err(e) = host.snapshots_ready(crate::interp::host::FileRoot::Workspace)
    {
        return Err(VmError::Limit(format!(
            "this flow has steps with `scope`, which snapshot the workspace through git, but the workspace is not a git repository ({e}); run it in a git working tree (`git init` and commit once), or remove `scope`"
        )));
    }
    if fd.steps.len() > MAX_STEPS {
        return Err(VmError::Limit(format!(
            "flow has {} steps; a run supports at most {MAX_STEPS}",
            fd.steps.len()
        )));
    }
    Ok(())
}

/// A fresh run of flow `flow_i` with `input`, every step pending and dirty.
pub(super) fn new_run(
    plan_hash: &str,
    run_id: &str,
    flow_i: u32,
    fd: &FlowDef,
    input: Value,
    workspace: Option<String>,
    now: i64,
) -> Run {
    let n = fd.steps.len() as u32;
    let header = Header {
        id: run_id.to_string(),
        inputs_apart: true,
        plan_hash: plan_hash.to_string(),
        status: RunStatus::Running,
        output: None,
        failure: None,
        frames: vec![FrameMeta::new(flow_i, None, input, n)],
        carry: Default::default(),
        issued: 0,
        workspace,
        created_ms: now,
        ready: Default::default(),
        gates: Default::default(),
        receipts: Default::default(),
        receipt_seq: 0,
        config: None,
        retry: None,
        routes_fired: Default::default(),
        patch_log: Vec::new(),
    };
    Run {
        header,
        steps: vec![vec![StepState::default(); n as usize]],
        version: 0,
        dirty: (0..n)
            .map(|s| RowKey::step(StepAt::new(FrameIx::ENTRY, s)))
            .collect(),
        events: Vec::new(),
        blobs: Vec::new(),
    }
}

/// Refuses a token that is not the live one.
pub(super) fn check_token(
    live: Option<&String>,
    given: Option<&str>,
    what: &str,
) -> Result<(), VmError> {
    match (live, given) {
        (_, None) => Err(VmError::StaleToken(format!(
            "{what} is stale: missing token; send the token handed out with it"
        ))),
        (Some(l), Some(g)) if l == g => Ok(()),
        _ => Err(VmError::StaleToken(format!(
            "{what} is stale: the token was issued for a superseded issuance (a newer one was handed out, or the result was already accepted)"
        ))),
    }
}

/// A checkpoint label, trimmed; refused when empty.
pub fn checkpoint_label(label: &str) -> Result<&str, VmError> {
    let label = label.trim();
    if label.is_empty() {
        return Err(CheckpointError::InvalidLabel.into());
    }
    if crate::interp::event::is_blob_label(label) {
        return Err(CheckpointError::ReservedLabel.into());
    }
    Ok(label)
}

/// Whether a checkpoint of a run with this header may be taken.
pub fn checkpoint_allowed(header: &Header) -> Result<(), VmError> {
    if header.status == RunStatus::Cancelled {
        return Err(CheckpointError::Cancelled(header.id.clone()).into());
    }
    Ok(())
}

impl Transition<'_> {
    /// Resolves `a`, `a/b` (sub-flow child) or `a/3` (fanout item).
    pub(super) fn locate(&self, id: &str) -> Option<Target> {
        let mut parts = id.split('/');
        let first = parts.next()?;
        let mut at = StepAt::new(FrameIx::ENTRY, *self.fidx(FrameIx::ENTRY).ids.get(first)?);
        for part in parts {
            let st = self.st(at);
            if let Some(child) = st.child
                && !self.frame(child).closed
                && let Some(&ci) = self.fidx(child).ids.get(part)
            {
                at = StepAt::new(child, ci);
                continue;
            }
            if matches!(self.def(at).kind, StepKindDef::Fanout { .. })
                && let Ok(k) = part.parse::<u32>()
                && (k as usize) < st.items.len()
                && part == k.to_string()
            {
                return Some(Target::Item(at, k));
            }
            return None;
        }
        Some(Target::Step(at))
    }

    fn not_awaiting(&self, id: &str, why: &str) -> VmError {
        VmError::NotAwaiting(format!("step `{id}` is not awaiting a result: {why}"))
    }

    /// A report for the dispatch `id`: refused unless it waits with this token.
    pub(super) fn report(
        &mut self,
        id: &str,
        token: Option<&str>,
        report: &Report,
    ) -> Result<(), VmError> {
        if self.status() == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        if self.ended() {
            return Err(self.not_awaiting(id, &format!("the run is {}", self.status().as_str())));
        }
        let usage = parse_usage(report.usage.as_ref())?;
        let slot = match self.locate(id) {
            None => return Err(self.not_awaiting(id, "no such step in this run")),
            Some(Target::Step(at)) => {
                let st = self.st(at);
                if !matches!(self.def(at).kind, StepKindDef::Do { .. }) {
                    return Err(self.not_awaiting(id, "it is not an agent task"));
                }
                if st.status != StepStatus::Ready {
                    return Err(self.not_awaiting(id, &format!("it is {}", st.status.as_str())));
                }
                check_token(st.token.as_ref(), token, "step result")?;
                Slot::step(at)
            }
            Some(Target::Item(at, k)) => {
                let it = self.item(at, k);
                if it.status != StepStatus::Ready || self.st(at).status != StepStatus::Running {
                    return Err(
                        self.not_awaiting(id, &format!("the item is {}", it.status.as_str()))
                    );
                }
                check_token(it.token.as_ref(), token, "item result")?;
                Slot::item(at, k)
            }
        };
        self.attempt_done(slot, report, usage);
        Ok(())
    }

    pub(super) fn cancel(&mut self) {
        if self.ended() {
            return;
        }
        let h = &self.run.header;
        let steps: Vec<String> = h
            .ready
            .iter()
            .filter(|s| s.item.is_none())
            .map(|s| s.at)
            .chain(h.gates.iter().copied())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|at| self.sid(at))
            .collect();
        let items = h.ready.iter().filter(|s| s.item.is_some()).count();
        self.burn_tokens();
        self.drop_all_worktrees();
        self.drop_snapshots();
        self.run.header.status = RunStatus::Cancelled;
        let kind = EventKind::FlowCancelled {
            by: "operator".into(),
            burned: Burned { steps, items },
        };
        self.event(kind, None);
    }

    /// Restores a checkpoint's state: refused for cancelled runs and while a
    /// fanout has items out. Spend is never given back (every ledger keeps
    /// the larger of the live and the saved spend), receipts and the token
    /// counter survive, and every live token is replaced.
    pub(super) fn revert(&mut self, saved: &Saved, label: &str) -> Result<(), VmError> {
        if self.status() == RunStatus::Cancelled {
            return Err(CheckpointError::Cancelled(self.run.header.id.clone()).into());
        }
        self.no_fanout_in_flight()?;
        let live = &self.run.header;
        let mut restored = saved.header.clone();
        restored.issued = restored.issued.max(live.issued);
        // receipts are append-only: their ids and sequence survive a revert
        restored.receipts = live.receipts.clone();
        restored.receipt_seq = live.receipt_seq;
        // X9: route counters are run-wide; a revert never gives firings back
        restored.routes_fired = live.routes_fired.clone();
        // the configuration frozen at start is the run's for life
        restored.config = live.config.clone();
        for (fi, frame) in restored.frames.iter_mut().enumerate() {
            // every row of the restored state is written back, inputs too
            frame.input.set_stored(false);
            if let Some(l) = live.frames.get(fi) {
                let (a, b) = (&mut frame.spent, &l.spent);
                a.usd = a.usd.max(b.usd);
                a.tokens = a.tokens.max(b.tokens);
                a.dispatches = a.dispatches.max(b.dispatches);
                a.ms = a.ms.max(b.ms);
            }
        }
        let mut steps: Vec<Vec<StepState>> = restored
            .frames
            .iter()
            .map(|f| vec![StepState::default(); f.len as usize])
            .collect();
        for (k, s) in &saved.rows {
            let at = k.slot().at;
            if let Some(slot) = steps
                .get_mut(at.frame.ix())
                .and_then(|fr| fr.get_mut(at.ix()))
            {
                *slot = s.clone();
                slot.items.all_changed();
            }
        }
        // every row of the restored state is written back
        self.run.dirty = (0..steps.len() as u32)
            .flat_map(|f| {
                (0..steps[f as usize].len() as u32)
                    .map(move |s| RowKey::step(StepAt::new(FrameIx(f), s)))
            })
            .collect();
        let receipts_at_revert = restored.receipt_seq;
        self.run.header = restored;
        self.run.steps = steps;
        let kind = EventKind::CheckpointReverted {
            label: label.to_string(),
            receipts_at_revert,
        };
        self.event(kind, None);
        self.rotate();
        Ok(())
    }

    /// Refuses a revert while fanout items are out (their results would be lost).
    fn no_fanout_in_flight(&self) -> Result<(), VmError> {
        for (f, steps) in self.run.steps.iter().enumerate() {
            for (i, st) in steps.iter().enumerate() {
                let at = StepAt::new(FrameIx(f as u32), i as u32);
                if st.status == StepStatus::Running
                    && matches!(self.def(at).kind, StepKindDef::Fanout { .. })
                {
                    return Err(CheckpointError::FanoutInFlight(self.own_id(at).to_string()).into());
                }
            }
        }
        Ok(())
    }

    /// Every live token is replaced (after a checkpoint revert, older tokens must be stale).
    fn rotate(&mut self) {
        let ready: Vec<Slot> = self.run.header.ready.iter().copied().collect();
        for slot in ready {
            let t = self.mint("d");
            match slot.item {
                None => self.st_mut(slot.at).token = Some(t),
                Some(k) => {
                    if let Some(it) = self.st_mut(slot.at).items.get_mut(k as usize) {
                        it.token = Some(t);
                    }
                }
            }
            // a replaced token is a new dispatch: its lease starts again
            self.start_lease(slot);
        }
        let gates: Vec<StepAt> = self.run.header.gates.iter().copied().collect();
        for at in gates {
            let t = self.mint("g");
            self.st_mut(at).token = Some(t);
        }
    }
}
