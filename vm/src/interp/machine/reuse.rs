//! Retrying a finished run (language 1.1 X8): which steps of the old run a
//! new run takes over instead of running them.
//!
//! Owns: the one reuse rule. Up front ([`prior`]): only a finished run can
//! be retried; the candidates are the old run's entry-flow `do`, `fanout`
//! and gate steps that succeeded (a gate: approved), minus `--from` and
//! everything downstream of it in the new plan, each with its step hash,
//! the digest of the inputs it read and the evidence its checks read. When
//! a candidate would become ready in the new run ([`Transition::try_reuse`],
//! called by `schedule` after routes, dependencies and `when`): it is
//! reused iff its step hash in the new plan is the same, the digest of its
//! inputs (flow input, the status and output of every step it depends on,
//! the carry values) in the new run is the same, and every evidence record
//! verifies again through the host; a step reset or revised in the new run
//! always runs. A reused step is `succeeded` with the old output (a gate:
//! approved, routed as an approval), its row says `reused`, an audit event
//! `step_reused` records it, nothing is dispatched or spent.
//! Must never: read the host for anything but re-checking evidence, or
//! reuse a step whose inputs are not yet known (it runs at ready time).
//!
//! Decisions (docs/language-1.1.md X8): `set` steps are recomputed (they are
//! deterministic and free); `run` steps and everything inside sub-flows run
//! again; a fanout is reused whole or not at all; a step with evidence read
//! in a fanout item's worktree is not reusable (the worktree is gone).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::Transition;
use crate::eval::canonical_digest;
use crate::interp::event::{Event, EventKind};
use crate::interp::host::{FileRoot, Host};
use crate::interp::index::PlanIndex;
use crate::interp::outcome::Outcome;
use crate::interp::state::*;
use crate::interp::{Failure, VmError};
use crate::plan::hash::step_hash;
use crate::plan::{Plan, StepKindDef};

/// Why a run cannot be retried as asked. Nothing was created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryRefused {
    /// The run is still going.
    #[error(
        "run `{run}` is {status}; only a finished run (completed, failed, killed, budget_exhausted or cancelled) can be retried: let it finish, or cancel it first"
    )]
    NotFinished {
        /// The run.
        run: String,
        /// Its status.
        status: &'static str,
    },
    /// `--from` names no step of the flow.
    #[error("--from `{step}`: flow `{flow}` has no such step{hint}")]
    UnknownFrom {
        /// What was given.
        step: String,
        /// The flow retried.
        flow: String,
        /// ` (did you mean `x`?)` or the list of steps.
        hint: String,
    },
    /// The new plan lacks the flow the old run ran.
    #[error(
        "the spec has no flow `{0}`, which the retried run ran; a retry runs the same flow (restore it or retry with the old spec)"
    )]
    FlowMissing(String),
}

impl RetryRefused {
    /// The stable code of the kind.
    pub fn code(&self) -> &'static str {
        match self {
            RetryRefused::NotFinished { .. } => "run_not_finished",
            RetryRefused::UnknownFrom { .. } => "invalid_step",
            RetryRefused::FlowMissing(_) => "unknown_flow",
        }
    }
}

/// What a retry starts from: the link with its candidates, and the flow
/// (its index in the new plan) and input of the new run.
#[derive(Debug, Clone, PartialEq)]
pub struct Prior {
    /// The header's link.
    pub retry: RetryOf,
    /// The flow to run, in the new plan.
    pub flow: u32,
    /// Its name.
    pub flow_name: String,
    /// The old run's flow input.
    pub input: Value,
    /// The old run's workspace root.
    pub workspace: Option<String>,
}

/// The reuse candidates of a finished run `old` (on `old_plan`, with its
/// audit `old_events`) for a new run of `new_plan`; see the module docs.
pub fn prior(
    old: &Run,
    old_plan: &Plan,
    old_index: &PlanIndex,
    old_events: &[Event],
    new_plan: &Plan,
    new_index: &PlanIndex,
    from: Option<&str>,
) -> Result<Prior, RetryRefused> {
    let h = &old.header;
    if !h.status.is_terminal() {
        return Err(RetryRefused::NotFinished {
            run: h.id.clone(),
            status: h.status.as_str(),
        });
    }
    let old_flow = h.frames[0].flow;
    let flow_name = old_plan
        .str(old_plan.flows[old_flow as usize].name)
        .to_string();
    let flow = *new_index
        .flow_ids
        .get(&flow_name)
        .ok_or_else(|| RetryRefused::FlowMissing(flow_name.clone()))?;
    let again = from_closure(new_plan, new_index, flow, from)?;
    let mut candidates = BTreeMap::new();
    for (s, st) in old.steps[0].iter().enumerate() {
        let def = &old_plan.flows[old_flow as usize].steps[s];
        let id = old_plan.str(def.id);
        if again.contains(id) || !reusable_kind(&def.kind, st) {
            continue;
        }
        let (Some(hash), Some(evidence)) = (
            step_hash(old_plan, old_flow, s as u32),
            evidence_of(old_events, id),
        ) else {
            continue;
        };
        let inputs = inputs_digest(old_plan, old_index, old_flow, s as u32, h, &old.steps[0]);
        let attempt = st.reused.as_ref().map_or(st.attempts, |r| r.attempt);
        let output = st.output.clone();
        let c = Candidate {
            hash,
            inputs,
            attempt,
            output,
            evidence,
        };
        candidates.insert(id.to_string(), c);
    }
    Ok(Prior {
        retry: RetryOf {
            run: h.id.clone(),
            from: from.map(str::to_string),
            candidates,
        },
        flow,
        flow_name,
        input: h.frames[0].input.clone(),
        workspace: h.workspace.clone(),
    })
}

/// `do` and fanout steps that succeeded, gates that were approved.
fn reusable_kind(kind: &StepKindDef, st: &StepState) -> bool {
    if st.status != StepStatus::Succeeded {
        return false;
    }
    match kind {
        StepKindDef::Do { .. } | StepKindDef::Fanout { .. } => true,
        StepKindDef::Gate { .. } => st.decision.as_deref() == Some("approve"),
        StepKindDef::Set { .. } | StepKindDef::Run { .. } => false,
    }
}

/// The ids of `from` and every step downstream of it in flow `flow`.
fn from_closure(
    plan: &Plan,
    index: &PlanIndex,
    flow: u32,
    from: Option<&str>,
) -> Result<BTreeSet<String>, RetryRefused> {
    let Some(from) = from else {
        return Ok(BTreeSet::new());
    };
    let fd = &plan.flows[flow as usize];
    let fidx = &index.flows[flow as usize];
    let Some(&start) = fidx.ids.get(from) else {
        let names: Vec<&str> = fd.steps.iter().map(|s| plan.str(s.id)).collect();
        let hint = match crate::suggest::suggest(from, names.iter().copied()) {
            Some(s) => format!(" (did you mean `{s}`?)"),
            None => format!("; its steps are {}", names.join(", ")),
        };
        return Err(RetryRefused::UnknownFrom {
            step: from.to_string(),
            flow: plan.str(fd.name).to_string(),
            hint,
        });
    };
    let mut seen = BTreeSet::from([start]);
    let mut work = vec![start];
    while let Some(s) = work.pop() {
        for &(t, _) in &fidx.succ[s as usize] {
            if seen.insert(t) {
                work.push(t);
            }
        }
    }
    Ok(seen
        .into_iter()
        .map(|s| plan.str(fd.steps[s as usize].id).to_string())
        .collect())
}

/// The digest of what step `step` of flow `flow` reads: the frame's input,
/// the status and output of every step it depends on (by id), the carry
/// values.
fn inputs_digest(
    plan: &Plan,
    index: &PlanIndex,
    flow: u32,
    step: u32,
    header: &Header,
    steps: &[StepState],
) -> String {
    let fd = &plan.flows[flow as usize];
    let deps: serde_json::Map<String, Value> = index.flows[flow as usize].deps[step as usize]
        .iter()
        .map(|&(d, _)| {
            let st = &steps[d as usize];
            let id = plan.str(fd.steps[d as usize].id).to_string();
            (
                id,
                json!({"status": st.status.as_str(), "output": st.output}),
            )
        })
        .collect();
    let carry: serde_json::Map<String, Value> = header
        .carry
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    canonical_digest(&json!({
        "input": header.frames[0].input,
        "deps": deps,
        "carry": carry,
    }))
}

/// The evidence the checks of step `id` (and of its fanout items, `id/k`)
/// read, the latest record per path; `None` when some of it was read in a
/// worktree, which cannot be checked again.
fn evidence_of(events: &[Event], id: &str) -> Option<Vec<EvidenceRecord>> {
    let mut latest = BTreeMap::new();
    for e in events {
        let Some(step) = e.step.as_deref() else {
            continue;
        };
        let mine = step == id || step.strip_prefix(id).is_some_and(|r| r.starts_with('/'));
        let EventKind::Evidence { file, root } = &e.kind else {
            continue;
        };
        if !mine {
            continue;
        }
        if root.is_some() {
            return None;
        }
        let record = EvidenceRecord::File {
            path: file.path.clone(),
            exists: file.exists,
            blake3: file.blake3.clone(),
        };
        latest.insert(file.path.clone(), record);
    }
    Some(latest.into_values().collect())
}

/// Checks one evidence record again through the host: `Some(evidence)`
/// (to record) when it is unchanged.
fn recheck(
    host: &mut dyn Host,
    record: &EvidenceRecord,
) -> Option<crate::interp::host::FileEvidence> {
    match record {
        EvidenceRecord::File {
            path,
            exists,
            blake3,
        } => {
            let now = host.file_exists(FileRoot::Workspace, path).ok()?;
            (now.exists == *exists && now.blake3 == *blake3).then_some(now)
        }
    }
}

impl Transition<'_> {
    /// Reuses step `at` from the old run if the rule allows (module docs);
    /// true when it did (the step is then succeeded and nothing else happens).
    pub(super) fn try_reuse(&mut self, at: StepAt) -> bool {
        let Some(cand) = self.candidate(at) else {
            return false;
        };
        let flow = self.frame(at.frame).flow;
        if step_hash(self.plan, flow, at.step).as_deref() != Some(cand.hash.as_str()) {
            return false;
        }
        let inputs = inputs_digest(
            self.plan,
            self.index,
            flow,
            at.step,
            &self.run.header,
            &self.run.steps[0],
        );
        if inputs != cand.inputs {
            return false;
        }
        let mut seen = Vec::with_capacity(cand.evidence.len());
        for record in &cand.evidence {
            match recheck(self.host, record) {
                Some(ev) => seen.push(ev),
                None => return false,
            }
        }
        let id = self.sid(at);
        for ev in seen {
            self.evidence(ev, false, Some(&id));
        }
        self.take_over(at, cand);
        true
    }

    /// The old run's candidate for `at`, if `at` is an entry-flow step that
    /// has not been reset, revised or reused in this run.
    fn candidate(&self, at: StepAt) -> Option<Candidate> {
        let retry = self.run.header.retry.as_ref()?;
        let st = self.st(at);
        if at.frame != FrameIx::ENTRY || st.epoch > 0 || st.revised.is_some() {
            return None;
        }
        retry.candidates.get(self.own_id(at)).cloned()
    }

    /// Marks `at` succeeded with the old run's result.
    fn take_over(&mut self, at: StepAt, cand: Candidate) {
        let from_run = self
            .run
            .header
            .retry
            .as_ref()
            .map(|r| r.run.clone())
            .unwrap_or_default();
        let reused = Reused {
            from_run: from_run.clone(),
            attempt: cand.attempt,
        };
        let gate = match self.def(at).kind {
            StepKindDef::Gate { on_approve, .. } => Some(on_approve),
            _ => None,
        };
        let st = self.st_mut(at);
        st.reused = Some(reused);
        st.output = cand.output;
        st.failure = None;
        if gate.is_some() {
            st.decision = Some("approve".into());
        }
        self.set_status(at, StepStatus::Succeeded);
        let kind = EventKind::StepReused {
            from_run,
            attempt: cand.attempt,
        };
        self.event(kind, Some(self.sid(at)));
        if let Some(Some(t)) = gate {
            // an approval routes to its target as the decision did (gates.rs)
            let t = at.sibling(t);
            self.st_mut(t).routed = Some(Failure::new(0, "gate approve"));
            self.queue.push_back(t);
        }
        self.enqueue_succ(at);
        if at.frame == FrameIx::ENTRY {
            self.materialize_carry();
        }
    }
}

/// Starts the run that retries `prior.retry.run` (see [`prior`]).
pub fn start_retry(
    plan: &Plan,
    index: &PlanIndex,
    plan_hash: &str,
    run_id: &str,
    prior: Prior,
    host: &mut dyn Host,
) -> Result<(Run, Outcome), VmError> {
    super::begin(
        plan,
        index,
        plan_hash,
        run_id,
        Some(&prior.flow_name),
        prior.input,
        prior.workspace,
        Some(Box::new(prior.retry)),
        host,
    )
}

/// Records in a finished run that `new_run` retries it (its status is unchanged).
pub fn retried(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    new_run: &str,
    from: Option<&str>,
    host: &mut dyn Host,
) -> Outcome {
    let mut t = Transition::new(plan, index, run, host);
    let kind = EventKind::Retried {
        run: new_run.to_string(),
        from: from.map(str::to_string),
    };
    t.event(kind, None);
    t.outcome()
}
