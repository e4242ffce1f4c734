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
//! inputs (flow input, the status, output and manifest digest of every step
//! it depends on, the carry values) in the new run is the same, and every
//! evidence record (file predicates, `file()` reads, its manifests' files,
//! a gate's shown files) verifies again through the host; a step reset or
//! revised in the new run always runs. A reused step is `succeeded` with the old output (a gate:
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
use crate::interp::event::{Event, EventKind, Manifest, ShownFile};
use crate::interp::host::{FileEvidence, FileRoot, Host};
use crate::interp::index::PlanIndex;
use crate::interp::outcome::Outcome;
use crate::interp::state::*;
use crate::interp::{Failure, VmError};
use crate::plan::hash::step_hash;
use crate::plan::{Plan, PredDef, StepKindDef};

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
        if again.contains(id) || !reusable_kind(&def.kind, st) || runs_commands(def) {
            continue;
        }
        let (Some(hash), Some(audit)) = (
            step_hash(old_plan, old_flow, s as u32),
            audit_of(old, st, old_events, id),
        ) else {
            continue;
        };
        let inputs = inputs_digest(old_plan, old_index, old_flow, s as u32, h, &old.steps[0]);
        let attempt = st.reused.as_ref().map_or(st.attempts, |r| r.attempt);
        let c = Candidate {
            hash,
            inputs,
            attempt,
            output: st.output.clone(),
            evidence: audit.evidence,
            manifest: dep_manifest(h, id, st),
            manifests: audit.manifests,
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
        input: (*h.frames[0].input).clone(),
        workspace: h.workspace.clone(),
    })
}

/// Whether a step's checks run declared commands (X12 `exec`, its own or
/// its stages'): such a step is never reused, since its commands' verdict
/// depends on the whole workspace, which no recorded evidence captures; a
/// retry runs it (and its commands) again.
fn runs_commands(def: &crate::plan::StepDef) -> bool {
    let exec = |ps: &[PredDef]| ps.iter().any(|p| matches!(p, PredDef::Exec { .. }));
    exec(&def.ensure)
        || matches!(&def.kind, StepKindDef::Fanout { stages, .. } if stages.iter().any(|st| exec(&st.ensure)))
}

/// `do` and fanout steps that succeeded, gates that were approved.
fn reusable_kind(kind: &StepKindDef, st: &StepState) -> bool {
    if st.status != StepStatus::Succeeded {
        return false;
    }
    match kind {
        StepKindDef::Do { .. } | StepKindDef::Fanout { .. } => true,
        StepKindDef::Gate { .. } => st.decision.as_deref() == Some("approve"),
        StepKindDef::Set { .. } | StepKindDef::Run { .. } | StepKindDef::Evaluate { .. } => false,
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
/// the status, output and manifest ([`dep_manifest`], when it has one) of
/// every step it depends on (by id), the carry values.
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
            let id = plan.str(fd.steps[d as usize].id);
            let mut dep = json!({"status": st.status.as_str(), "output": st.output});
            if let Some(m) = dep_manifest(header, id, st) {
                dep["manifest"] = Value::String(m);
            }
            (id.to_string(), dep)
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

/// What a step's manifests are to its dependants: the digest of its own
/// manifest, or for a fanout the digest of its items' manifest digests in
/// item order (`null` for an item without one); `None` when it has none.
/// A step the run took over reads as it did in the run it came from.
fn dep_manifest(header: &Header, id: &str, st: &StepState) -> Option<String> {
    if st.reused.is_some() {
        let retry = header.retry.as_ref()?;
        return retry.candidates.get(id)?.manifest.clone();
    }
    if st.manifest.is_some() {
        return st.manifest.clone();
    }
    let items: Vec<Option<&String>> = st.items.iter().map(|i| i.manifest.as_ref()).collect();
    items
        .iter()
        .any(Option::is_some)
        .then(|| canonical_digest(&json!(items)))
}

/// What a candidate's record says it read and produced in the old run.
struct Audit {
    /// Its evidence, to check again.
    evidence: Vec<EvidenceRecord>,
    /// Its latest manifests (the step's, or one per fanout item).
    manifests: Vec<Manifest>,
}

/// The audit of step `id` (row `st`) of the finished run `old`: a step
/// `old` itself took over keeps the evidence it was reused on (its
/// candidate in `old`'s header), any other is read from `old`'s events
/// ([`evidence_of`]).
fn audit_of(old: &Run, st: &StepState, events: &[Event], id: &str) -> Option<Audit> {
    let taken = st.reused.as_ref().and_then(|_| {
        let retry = old.header.retry.as_ref()?;
        retry.candidates.get(id)
    });
    match taken {
        Some(c) => Some(Audit {
            evidence: c.evidence.clone(),
            manifests: c.manifests.clone(),
        }),
        None => evidence_of(events, id),
    }
}

/// The evidence of step `id` in the audit `events`: the latest record per
/// path and kind of what its checks (and its fanout items', `id/k`) read,
/// each file of its latest manifest per item, and for a gate the files its
/// latest approval was shown. `None` when some of it was read in a
/// worktree, which cannot be checked again.
fn evidence_of(events: &[Event], id: &str) -> Option<Audit> {
    let mut latest = BTreeMap::new();
    let mut manifests = BTreeMap::new();
    let mut shown: &[ShownFile] = &[];
    for e in events {
        let Some(step) = e.step.as_deref() else {
            continue;
        };
        if step != id && !step.strip_prefix(id).is_some_and(|r| r.starts_with('/')) {
            continue;
        }
        match &e.kind {
            EventKind::Evidence { root: Some(_), .. } => return None,
            EventKind::Evidence { file, root: None } => {
                let record = file_record(file);
                latest.insert((record_kind(&record), file.path.clone()), record);
            }
            EventKind::ArtifactsRecorded(m) if m.step == id => {
                manifests.insert(m.item_index, m.clone());
            }
            EventKind::GateResolved {
                decision, shown: s, ..
            } if decision == "approve" => shown = s,
            _ => {}
        }
    }
    let mut evidence: Vec<EvidenceRecord> = latest.into_values().collect();
    for m in manifests.values() {
        evidence.extend(m.files.iter().map(|f| EvidenceRecord::Artifact {
            path: f.path.clone(),
            sha256: f.sha256.clone(),
        }));
    }
    evidence.extend(shown.iter().map(|f| EvidenceRecord::Shown {
        path: f.path.clone(),
        sha256: f.sha256.clone(),
    }));
    let manifests = manifests.into_values().collect();
    Some(Audit {
        evidence,
        manifests,
    })
}

/// The record of one `evidence` event: a `file()` read (only those carry a
/// sha256) or a file predicate's check.
fn file_record(file: &FileEvidence) -> EvidenceRecord {
    if file.sha256.is_some() {
        return EvidenceRecord::Read {
            path: file.path.clone(),
            exists: file.exists,
            sha256: file.sha256.clone(),
        };
    }
    EvidenceRecord::File {
        path: file.path.clone(),
        exists: file.exists,
        blake3: file.blake3.clone(),
    }
}

/// Orders the kinds of records that share a path.
fn record_kind(r: &EvidenceRecord) -> u8 {
    match r {
        EvidenceRecord::File { .. } => 0,
        EvidenceRecord::Artifact { .. } => 1,
        EvidenceRecord::Read { .. } => 2,
        EvidenceRecord::Shown { .. } => 3,
    }
}

/// A record that verified again: what to record of it in the new run.
enum Seen {
    /// A file check's evidence, recorded as an `evidence` event.
    File(FileEvidence),
    /// An artifact or a shown file (its manifest or gate says it already).
    Hashed,
}

/// Checks one evidence record again through the host (workspace root):
/// `Some` when it is unchanged.
fn recheck(host: &mut dyn Host, record: &EvidenceRecord) -> Option<Seen> {
    match record {
        EvidenceRecord::File {
            path,
            exists,
            blake3,
        } => {
            if *exists && blake3.is_none() {
                return None; // not hashed (above 16 MiB): cannot be shown unchanged
            }
            let now = host.file_exists(FileRoot::Workspace, path).ok()?;
            (now.exists == *exists && now.blake3 == *blake3).then_some(Seen::File(now))
        }
        EvidenceRecord::Artifact { path, sha256 } => {
            let now = host.hash_file(FileRoot::Workspace, path).ok()??;
            (now.sha256 == *sha256).then_some(Seen::Hashed)
        }
        EvidenceRecord::Read {
            path,
            exists,
            sha256,
        } => {
            if *exists && sha256.is_none() {
                return None; // not hashed: cannot be shown unchanged
            }
            let (_, now) = host.read_file(FileRoot::Workspace, path).ok()?;
            (now.exists == *exists && now.sha256 == *sha256).then_some(Seen::File(now))
        }
        EvidenceRecord::Shown { path, sha256 } => {
            // a file that could not be hashed then (missing, refused) must still not be
            let now = match host.hash_file(FileRoot::Workspace, path) {
                Ok(h) => h.map(|h| h.sha256),
                Err(_) => None,
            };
            (now == *sha256).then_some(Seen::Hashed)
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
                Some(Seen::File(ev)) => seen.push(ev),
                Some(Seen::Hashed) => {}
                None => return false,
            }
        }
        let id = self.sid(at);
        for ev in seen {
            self.evidence(ev, false, Some(&id));
        }
        for m in &cand.manifests {
            self.event(EventKind::ArtifactsRecorded(m.clone()), Some(id.clone()));
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
        st.manifest = cand
            .manifests
            .iter()
            .find(|m| m.item_index.is_none())
            .map(|m| m.digest.clone());
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
