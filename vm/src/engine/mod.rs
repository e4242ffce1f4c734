//! The engine: the pure interpreter plus a run store. Every operation loads
//! the run, applies one transition, and commits it (header, changed step
//! rows, new events) in one store transaction before returning: nothing is
//! acknowledged that is not durable. A concurrent writer makes the commit
//! fail with a conflict; the engine then reloads and re-applies, so of two
//! reports with the same token exactly one wins and the other is told its
//! token is stale.
//!
//! Owns: run ids, (de)serialization of run state and checkpoints, plan
//! caching, the commit loop, and the stable codes of its errors.
//! Must never: contain execution rules (those live in `interp`: what a
//! revert restores, when a checkpoint may be taken, …).

use std::collections::HashMap;
use std::sync::Arc;

mod rows;

use serde_json::Value;

use crate::interp::{
    self, CheckpointError, Event, EventKind, Header, Host, Outcome, PlanIndex, Report, RowKey, Run,
    RunStatus, Saved, VmError,
};
use crate::plan::Plan;
use crate::plan::file::{self, LoadError};
use crate::store::{Delta, RunMeta, RunStore, StoreError};

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Refused by the interpreter; nothing changed.
    #[error("{0}")]
    Vm(#[from] VmError),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The stored plan is unusable.
    #[error("{0}")]
    Plan(#[from] LoadError),
    /// Resuming against another plan (E6).
    #[error("run `{run}` executes plan {stored}, not {given}; resume it with its own plan")]
    PlanMismatch {
        /// Run id.
        run: String,
        /// Hash recorded by the run.
        stored: String,
        /// Hash offered.
        given: String,
    },
    /// Stored run state does not decode.
    #[error("run state is corrupt: {0}")]
    Corrupt(String),
    /// A retry refused (X8); nothing was created.
    #[error("{0}")]
    Retry(#[from] interp::RetryRefused),
}

impl EngineError {
    /// The stable code of the kind (MCP's `error_type`).
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Vm(v) => v.code(),
            EngineError::Store(StoreError::NotFound(_)) => "flow_not_found",
            EngineError::Store(_) => "store_error",
            EngineError::Plan(_) => "plan_invalid",
            EngineError::PlanMismatch { .. } => "plan_mismatch",
            EngineError::Corrupt(_) => "run_corrupt",
            EngineError::Retry(r) => r.code(),
        }
    }
}

/// A loaded plan with its lookup tables.
#[derive(Clone)]
pub struct LoadedPlan {
    /// The plan.
    pub plan: Arc<Plan>,
    /// Its tables.
    pub index: Arc<PlanIndex>,
    /// Its hash.
    pub hash: String,
}

/// Runs on a store.
pub struct Engine {
    store: Box<dyn RunStore>,
    plans: HashMap<String, LoadedPlan>,
    /// The run this engine touched last, as committed; reused while the
    /// store's version matches, so a transition costs what it changes, not
    /// the size of the run.
    cached: Option<Run>,
}

/// How many times a conflicting commit is retried before giving up.
const MAX_RETRIES: usize = 8;

impl Engine {
    /// An engine on a store.
    pub fn new(store: Box<dyn RunStore>) -> Engine {
        Engine {
            store,
            plans: HashMap::new(),
            cached: None,
        }
    }

    /// The store (for listings).
    pub fn store(&self) -> &dyn RunStore {
        &*self.store
    }

    /// The store, for the records that are not a run's state (agent runs and
    /// leases: `crate::agent_runs`; the guarded resources of STRAT-GUARD,
    /// which share the run store's connection); a run's state changes only
    /// through the engine's operations.
    pub fn store_mut(&mut self) -> &mut dyn RunStore {
        &mut *self.store
    }

    /// Stores a plan file and returns it loaded and verified.
    pub fn add_plan(&mut self, bytes: &[u8]) -> Result<LoadedPlan, EngineError> {
        let (plan, hash) = file::load(bytes)?;
        let hex = hash.to_hex();
        self.store.put_plan(&hex, bytes)?;
        let lp = LoadedPlan {
            index: Arc::new(PlanIndex::new(&plan)),
            plan: Arc::new(plan),
            hash: hex.clone(),
        };
        self.plans.insert(hex, lp.clone());
        Ok(lp)
    }

    /// A stored plan by hash.
    pub fn plan(&mut self, hash: &str) -> Result<LoadedPlan, EngineError> {
        if let Some(p) = self.plans.get(hash) {
            return Ok(p.clone());
        }
        let bytes = self.store.get_plan(hash)?.ok_or_else(|| {
            EngineError::Corrupt(format!("plan {hash} is missing from the store"))
        })?;
        self.add_plan(&bytes)
    }

    fn new_run_id(&self) -> String {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let h = blake3::hash(format!("{nanos}:{}:{n}", std::process::id()).as_bytes());
        format!("run-{}", &h.to_hex()[..16])
    }

    /// Loads a run's state.
    pub fn load(&mut self, run_id: &str) -> Result<(Run, LoadedPlan), EngineError> {
        if let Some(c) = self.cached.take()
            && c.header.id == run_id
            && self.store.version(run_id)? == c.version
        {
            let plan = self.plan(&c.header.plan_hash)?;
            return Ok((c, plan));
        }
        let snap = self.store.load(run_id)?;
        let (header, steps) = rows::decode_run(
            &format!("run `{run_id}`"),
            &snap.header,
            snap.rows.iter().map(|(k, b)| (*k, b.as_slice())),
        )
        .map_err(EngineError::Corrupt)?;
        let plan = self.plan(&header.plan_hash)?;
        frames_match_plan(run_id, &header, &plan.plan)?;
        Ok((
            Run {
                header,
                steps,
                version: snap.version,
                dirty: Default::default(),
                events: Vec::new(),
                blobs: Vec::new(),
            },
            plan,
        ))
    }

    fn meta(run: &Run, plan: &Plan, now: i64) -> RunMeta {
        let flow = plan
            .flows
            .get(run.header.frames[0].flow as usize)
            .map_or("?", |f| plan.str(f.name))
            .to_string();
        RunMeta {
            run_id: run.header.id.clone(),
            plan_hash: run.header.plan_hash.clone(),
            flow,
            status: run.header.status.as_str().into(),
            created_ms: run.header.created_ms,
            updated_ms: now,
        }
    }

    fn events_json(run: &Run) -> Vec<String> {
        run.events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .collect()
    }

    /// Starts a run: plans are stored, the initial state is committed before anything is handed out.
    pub fn start(
        &mut self,
        plan: &LoadedPlan,
        flow: Option<&str>,
        input: Value,
        host: &mut dyn Host,
        workspace: Option<String>,
    ) -> Result<(String, Outcome), EngineError> {
        let id = self.new_run_id();
        let started = interp::start(
            &plan.plan,
            &plan.index,
            &plan.hash,
            &id,
            flow,
            input,
            workspace,
            host,
        )?;
        self.create_run(plan, started, host, None)
    }

    /// Starts a run with its configuration frozen into it: the canonical
    /// text in the header ([`Header::config`]), its hash and sources in a
    /// `config_frozen` event right after `planned`, in the run's first
    /// commit. Later processes build the run's host from that copy
    /// ([`Engine::frozen_config`], [`crate::config::of_run`]).
    pub fn start_frozen(
        &mut self,
        plan: &LoadedPlan,
        flow: Option<&str>,
        input: Value,
        host: &mut dyn Host,
        workspace: Option<String>,
        config: &crate::config::Frozen,
    ) -> Result<(String, Outcome), EngineError> {
        let id = self.new_run_id();
        let started = interp::start(
            &plan.plan,
            &plan.index,
            &plan.hash,
            &id,
            flow,
            input,
            workspace,
            host,
        )?;
        self.create_run(plan, started, host, Some(config))
    }

    /// Retries a finished run (X8): a new run (new id) of the same flow and
    /// input on `plan` (default: the old run's own plan; a changed spec's
    /// plan must have been added with [`Engine::add_plan`]), which takes
    /// over the old run's steps that the reuse rule allows
    /// ([`interp::prior`]) and runs the rest; `from` and everything
    /// downstream of it always run. The new run's header links the old one
    /// (`retry`), and the old run gets a `retried` event; its status is
    /// unchanged. With `config`, the new run freezes it as
    /// [`Engine::start_frozen`] does.
    pub fn retry(
        &mut self,
        old_id: &str,
        from: Option<&str>,
        plan: Option<&LoadedPlan>,
        host: &mut dyn Host,
        config: Option<&crate::config::Frozen>,
    ) -> Result<(String, Outcome), EngineError> {
        let (old, old_plan) = self.load(old_id)?;
        let plan = plan.cloned().unwrap_or_else(|| old_plan.clone());
        let events = self.typed_events(old_id)?;
        let prior = interp::prior(
            &old,
            &old_plan.plan,
            &old_plan.index,
            &events,
            &plan.plan,
            &plan.index,
            from,
        )?;
        self.cached = Some(old);
        let id = self.new_run_id();
        let started = interp::start_retry(&plan.plan, &plan.index, &plan.hash, &id, prior, host)?;
        let out = self.create_run(&plan, started, host, config)?;
        self.transition(old_id, host, |p, i, r, h| {
            Ok(interp::retried(p, i, r, &id, from, h))
        })?;
        Ok(out)
    }

    /// A run's audit as typed events (a line that does not decode is damage).
    fn typed_events(&self, run_id: &str) -> Result<Vec<Event>, EngineError> {
        let lines = self.store.events(run_id, 0, u64::MAX)?;
        lines
            .iter()
            .map(|l| {
                serde_json::from_str(l).map_err(|e| {
                    EngineError::Corrupt(format!(
                        "run `{run_id}`: an audit event does not decode: {e}"
                    ))
                })
            })
            .collect()
    }

    /// Commits a started run (with its configuration frozen into it, when given).
    fn create_run(
        &mut self,
        plan: &LoadedPlan,
        started: (Run, Outcome),
        host: &mut dyn Host,
        config: Option<&crate::config::Frozen>,
    ) -> Result<(String, Outcome), EngineError> {
        let (mut run, outcome) = started;
        let id = run.header.id.clone();
        if let Some(frozen) = config {
            run.header.config = Some(frozen.text.clone());
            let at = run.events.first().map_or_else(|| host.now_ms(), |e| e.at);
            let kind = EventKind::ConfigFrozen {
                config_hash: frozen.hash.clone(),
                sources: frozen.sources.clone(),
            };
            // right after `planned`, before anything was handed out
            let after_planned = run.events.len().min(1);
            run.events.insert(
                after_planned,
                Event {
                    at,
                    kind,
                    step: None,
                },
            );
        }
        let rows = rows::dirty_rows(&mut run);
        let now = host.now_ms();
        self.store.create(
            &Self::meta(&run, &plan.plan, now),
            &rows::encode_header(&mut run.header),
            &rows,
            &Self::events_json(&run),
        )?;
        self.keep_blobs(&id, &run)?;
        rows::committed(&mut run);
        run.events.clear();
        run.blobs.clear();
        run.version = self.store.version(&id)?;
        self.cached = Some(run);
        Ok((id, outcome))
    }

    /// Applies `op` to the stored run and commits it; retries on concurrent
    /// commits. Every mutating operation first orphans the dispatches whose
    /// lease ran out ([`interp::expire`], X7); when `op` then refuses (it
    /// writes nothing before refusing), the orphans are still committed and
    /// the refusal returned, so a late report with a revoked token is told
    /// its token is stale and the run has moved on.
    fn transition<T>(
        &mut self,
        run_id: &str,
        host: &mut dyn Host,
        mut op: impl FnMut(&Plan, &PlanIndex, &mut Run, &mut dyn Host) -> Result<T, VmError>,
    ) -> Result<T, EngineError> {
        let mut last = None;
        for _ in 0..MAX_RETRIES {
            let (mut run, plan) = self.load(run_id)?;
            let orphaned = interp::expire(&plan.plan, &plan.index, &mut run, host);
            let out = match op(&plan.plan, &plan.index, &mut run, host) {
                Ok(out) => Ok(out),
                // a stopped command (a cancel, a signal): nothing of this
                // transition is recorded, the orphans are found again later
                Err(e) if orphaned == 0 || matches!(e, VmError::Stopped(_)) => {
                    return Err(e.into());
                }
                Err(e) => Err(e),
            };
            let rows = rows::dirty_rows(&mut run);
            let now = host.now_ms();
            let meta = Self::meta(&run, &plan.plan, now);
            let header = rows::encode_header(&mut run.header);
            let events = Self::events_json(&run);
            // content-addressed and idempotent: kept before the commit that
            // names them (a commit that loses a race leaves an unnamed blob)
            self.keep_blobs(run_id, &run)?;
            let delta = Delta {
                run_id,
                expected_version: run.version,
                meta: &meta,
                header: &header,
                rows: &rows,
                events: &events,
            };
            match self.store.commit(&delta) {
                Ok(version) => {
                    run.version = version;
                    rows::committed(&mut run);
                    run.events.clear();
                    run.blobs.clear();
                    self.cached = Some(run);
                    return out.map_err(EngineError::Vm);
                }
                Err(StoreError::Conflict { .. }) => {
                    last = Some(StoreError::Conflict {
                        expected: run.version,
                        current: 0,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.map_or_else(
            || EngineError::Corrupt("commit retries exhausted".into()),
            EngineError::Store,
        ))
    }

    /// Reports a dispatch result.
    pub fn report(
        &mut self,
        run_id: &str,
        step_id: &str,
        token: Option<&str>,
        report: &Report,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| {
            interp::report(p, i, r, step_id, token, report, h)
        })
    }

    /// Decides a gate (the decision, its note and its choice, X10). A
    /// `token` is checked (a stale or missing one is refused), unless the
    /// decision is `tokenless` and sends none: then it is taken while the
    /// gate waits (its one round) and recorded as `tokenless`.
    pub fn resolve_gate(
        &mut self,
        run_id: &str,
        step_id: &str,
        token: Option<&str>,
        decision: &interp::GateDecision<'_>,
        by: &str,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| {
            interp::resolve_gate(p, i, r, step_id, token, decision, by, h)
        })
    }

    /// Settles a usage receipt (`stratum_usage_report`). A duplicate
    /// `dispatchId` returns the original sequence number and commits nothing.
    pub fn usage_report(
        &mut self,
        run_id: &str,
        receipt: &interp::Receipt,
        host: &mut dyn Host,
    ) -> Result<(interp::ReceiptOutcome, Outcome), EngineError> {
        let (mut run, plan) = self.load(run_id)?;
        if let Some(&seq) = run.header.receipts.get(&receipt.dispatch_id) {
            let outcome = interp::view(&plan.plan, &plan.index, &mut run, host);
            self.cached = Some(run);
            let dup = interp::ReceiptOutcome {
                duplicate: true,
                seq,
                budget: None,
            };
            return Ok((dup, outcome));
        }
        self.cached = Some(run);
        self.transition(run_id, host, |p, i, r, h| {
            interp::usage_report(p, i, r, receipt, h)
        })
    }

    /// Cancels a run (no-op on a finished run).
    pub fn cancel(&mut self, run_id: &str, host: &mut dyn Host) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| Ok(interp::cancel(p, i, r, h)))
    }

    /// Cancels a run as an operator asks it (`stratumc flow cancel`, MCP
    /// `stratum_flow_cancel`): the one home of the rule that a run which
    /// has already ended is never modified — it is read, not transitioned,
    /// and the answer says how it had ended.
    pub fn cancel_flow(
        &mut self,
        run_id: &str,
        host: &mut dyn Host,
    ) -> Result<Cancelled, EngineError> {
        let before = self.poll(run_id, host)?;
        if before.status.is_terminal() {
            return Ok(Cancelled {
                already: Some(before.status),
                acknowledged: false,
                outcome: before,
            });
        }
        let outcome = self.cancel(run_id, host)?;
        // a run that ended between the read and the commit was not cancelled by this call
        let acknowledged = outcome.status == RunStatus::Cancelled;
        Ok(Cancelled {
            already: (!acknowledged).then_some(outcome.status),
            acknowledged,
            outcome,
        })
    }

    /// Continues a run in this process: records a `resumed` event and returns
    /// the current outcome (tokens unchanged). `plan_hash`, when given, must
    /// match the run's (E6). Cancelled runs are refused.
    pub fn resume(
        &mut self,
        run_id: &str,
        plan_hash: Option<&str>,
        host: &mut dyn Host,
    ) -> Result<(Outcome, LoadedPlan), EngineError> {
        let (run, plan) = self.load(run_id)?;
        if let Some(given) = plan_hash
            && given != run.header.plan_hash
        {
            return Err(EngineError::PlanMismatch {
                run: run_id.into(),
                stored: run.header.plan_hash.clone(),
                given: given.into(),
            });
        }
        let outcome = self.transition(run_id, host, interp::resume)?;
        Ok((outcome, plan))
    }

    /// Records in the run's audit that its driver was stopped by `signal`
    /// with `killed` agent commands killed.
    pub fn interrupted(
        &mut self,
        run_id: &str,
        signal: &str,
        killed: usize,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| {
            Ok(interp::interrupted(p, i, r, signal, killed, h))
        })
    }

    /// Takes over a run whose driver went away (its run lease lapsed): every
    /// handed-out dispatch gets a new token (the dead driver's agents are
    /// refused as stale), recorded as `driver_interrupted` (`lease_lapsed`,
    /// `killed` of its agents reaped). Cancelled runs are refused.
    pub fn take_over(
        &mut self,
        run_id: &str,
        killed: usize,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| {
            if r.header.status == RunStatus::Cancelled {
                return Err(VmError::Cancelled(r.header.id.clone()));
            }
            interp::take_over(p, i, r, killed, h);
            Ok(interp::view(p, i, r, h))
        })
    }

    /// Records the cost model's estimate of the run's steps in its audit
    /// (the `estimated` event, step hashes filled in from the plan): what
    /// `stratumc report` compares the spend with. Drivers call it right
    /// after starting a run from a spec.
    pub fn record_estimate(
        &mut self,
        run_id: &str,
        steps: Vec<crate::interp::event::StepEstimate>,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        self.transition(run_id, host, |p, i, r, h| {
            Ok(interp::record_estimate(p, i, r, steps.clone(), h))
        })
    }

    /// The workspace root a run was started with.
    pub fn workspace_of(&mut self, run_id: &str) -> Result<Option<String>, EngineError> {
        Ok(self.load(run_id)?.0.header.workspace)
    }

    /// The configuration frozen into a run at start (canonical
    /// `stratum.toml` text; `None` for a run started without one).
    pub fn frozen_config(&mut self, run_id: &str) -> Result<Option<String>, EngineError> {
        Ok(self.load(run_id)?.0.header.config)
    }

    /// The current outcome as a driver sees it: the dispatches whose lease
    /// ran out are orphaned first (X7, [`interp::expire`]) and committed;
    /// when there are none, nothing is written (the same as [`Engine::poll`]).
    /// Drivers call it between rounds; read-only callers use `poll`.
    pub fn touch(&mut self, run_id: &str, host: &mut dyn Host) -> Result<Outcome, EngineError> {
        let (mut run, plan) = self.load(run_id)?;
        let due = !interp::overdue(&plan.plan, &run, host.now_ms()).is_empty();
        if !due {
            let outcome = interp::view(&plan.plan, &plan.index, &mut run, host);
            self.cached = Some(run);
            return Ok(outcome);
        }
        self.cached = Some(run);
        self.transition(run_id, host, |p, i, r, h| Ok(interp::view(p, i, r, h)))
    }

    /// The current outcome without recording anything (polling).
    pub fn poll(&mut self, run_id: &str, host: &mut dyn Host) -> Result<Outcome, EngineError> {
        let (mut run, plan) = self.load(run_id)?;
        let outcome = interp::view(&plan.plan, &plan.index, &mut run, host);
        self.cached = Some(run);
        Ok(outcome)
    }

    /// The audit events of a run.
    pub fn audit(&self, run_id: &str) -> Result<Vec<Value>, EngineError> {
        let lines = self.store.events(run_id, 0, u64::MAX)?;
        Ok(lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect())
    }

    /// The run's audit events, typed (read-only). A stored line that is not
    /// an event of this binary's kinds is a corrupt store.
    pub fn events(&self, run_id: &str) -> Result<Vec<Event>, EngineError> {
        let lines = self.store.events(run_id, 0, u64::MAX)?;
        lines
            .iter()
            .map(|l| {
                serde_json::from_str(l)
                    .map_err(|e| EngineError::Corrupt(format!("audit event of run {run_id}: {e}")))
            })
            .collect()
    }

    /// Writes the run's pending blobs beside its checkpoints (one already
    /// kept is written again with the same bytes: a no-op in effect).
    fn keep_blobs(&mut self, run_id: &str, run: &Run) -> Result<(), EngineError> {
        for b in &run.blobs {
            self.store
                .put_checkpoint(run_id, &interp::event::blob_label(&b.sha256), &b.bytes)?;
        }
        Ok(())
    }

    /// The blob of run `run_id` with this sha256 (hex), checked against it;
    /// `None` when the run has none.
    pub fn blob(&self, run_id: &str, sha256: &str) -> Result<Option<Vec<u8>>, EngineError> {
        let Some(bytes) = self
            .store
            .get_checkpoint(run_id, &interp::event::blob_label(sha256))?
        else {
            return Ok(None);
        };
        let found = crate::eval::value::sha256_hex(&bytes);
        if found != sha256 {
            return Err(EngineError::Corrupt(format!(
                "run `{run_id}`: the blob stored as sha256 {sha256} hashes to {found}"
            )));
        }
        Ok(Some(bytes))
    }

    /// The run's checkpoint labels, in the order they were first taken (its
    /// blobs, kept in the same store space, are not listed).
    pub fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, EngineError> {
        let mut labels = self.store.checkpoint_labels(run_id)?;
        labels.retain(|l| !interp::event::is_blob_label(l));
        Ok(labels)
    }

    /// Saves the run state under `label` (state only; files are the caller's).
    pub fn commit_checkpoint(
        &mut self,
        run_id: &str,
        label: &str,
    ) -> Result<Committed, EngineError> {
        let label = interp::checkpoint_label(label)?;
        // one read: the stored rows are the checkpoint, the header says whether it may be taken
        let snap = self.store.load(run_id)?;
        let header: Header = serde_json::from_slice(&snap.header)
            .map_err(|e| EngineError::Corrupt(e.to_string()))?;
        interp::checkpoint_allowed(&header)?;
        let saved = StoredCheckpoint {
            header: String::from_utf8_lossy(&snap.header).into_owned(),
            rows: snap
                .rows
                .iter()
                .map(|(k, b)| (*k, String::from_utf8_lossy(b).into_owned()))
                .collect(),
        };
        let blob = serde_json::to_vec(&saved).map_err(|e| EngineError::Corrupt(e.to_string()))?;
        self.store.put_checkpoint(run_id, label, &blob)?;
        Ok(Committed {
            label: label.to_string(),
            checkpoints: self.checkpoint_labels(run_id)?,
        })
    }

    /// Restores the run state saved under `label` (what is restored is the
    /// interpreter's rule: [`interp::revert`]).
    pub fn revert(
        &mut self,
        run_id: &str,
        label: &str,
        host: &mut dyn Host,
    ) -> Result<Outcome, EngineError> {
        let label = label.trim();
        let stored = if interp::event::is_blob_label(label) {
            None
        } else {
            self.store.get_checkpoint(run_id, label)?
        };
        let Some(blob) = stored else {
            let available = self.checkpoint_labels(run_id)?;
            let missing = CheckpointError::NotFound {
                label: label.to_string(),
                available,
            };
            return Err(VmError::from(missing).into());
        };
        let saved = decode_checkpoint(&blob)?;
        self.transition(run_id, host, |p, i, r, h| {
            interp::revert(p, i, r, &saved, label, h)
        })
    }
}

/// A checkpoint taken: its label and every label the run has now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Committed {
    /// The label, trimmed.
    pub label: String,
    /// Every checkpoint label of the run.
    pub checkpoints: Vec<String>,
}

/// Every frame of a loaded header names a flow of the plan and has as many
/// steps as that flow.
fn frames_match_plan(run_id: &str, header: &Header, plan: &Plan) -> Result<(), EngineError> {
    for (f, frame) in header.frames.iter().enumerate() {
        let steps = plan.flows.get(frame.flow as usize).map(|fd| fd.steps.len());
        if steps != Some(frame.len as usize) {
            return Err(EngineError::Corrupt(format!(
                "run `{run_id}`: frame {f} lists flow {} with {} steps, which plan {} does not have",
                frame.flow, frame.len, header.plan_hash
            )));
        }
    }
    Ok(())
}

/// A checkpoint as stored: the header and the rows as JSON text.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredCheckpoint {
    header: String,
    rows: Vec<(u64, String)>,
}

fn decode_checkpoint(blob: &[u8]) -> Result<Saved, EngineError> {
    let corrupt = |e: serde_json::Error| EngineError::Corrupt(format!("checkpoint: {e}"));
    let stored: StoredCheckpoint = serde_json::from_slice(blob).map_err(corrupt)?;
    let (header, steps) = rows::decode_run(
        "checkpoint",
        stored.header.as_bytes(),
        stored.rows.iter().map(|(k, t)| (*k, t.as_bytes())),
    )
    .map_err(EngineError::Corrupt)?;
    let rows = steps
        .into_iter()
        .enumerate()
        .flat_map(|(f, frame)| {
            frame.into_iter().enumerate().map(move |(s, st)| {
                let at = crate::interp::StepAt::new(crate::interp::FrameIx(f as u32), s as u32);
                (RowKey::step(at), st)
            })
        })
        .collect();
    Ok(Saved { header, rows })
}

/// What [`Engine::cancel_flow`] did.
#[derive(Debug, Clone)]
pub struct Cancelled {
    /// The run after the call.
    pub outcome: Outcome,
    /// This call cancelled the run.
    pub acknowledged: bool,
    /// How the run had ended when it was not running any more.
    pub already: Option<RunStatus>,
}

impl Cancelled {
    /// The run is cancelled now (by this call or an earlier one).
    pub fn settled(&self) -> bool {
        self.outcome.status == RunStatus::Cancelled
    }

    /// `already_<status>` when the run had ended before this call.
    pub fn reason(&self) -> Option<String> {
        self.already.map(|s| format!("already_{}", s.as_str()))
    }
}
