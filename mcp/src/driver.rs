//! Engine-dispatched entries (LANGUAGE.md E8): the server runs them itself
//! with the agent command or connector CLI (issue 16) that `stratum.toml`
//! configures for their agent (a connector run's argv and usage go into the
//! audit as a usage receipt before its report), and
//! hands the rest to the client marked `"dispatch": "engine-fallback"`.
//!
//! The commands run off the request path: a tool call whose outcome has
//! engine entries with a command asks for a worker for the run
//! ([`Dispatches::want`]), answers at once with those entries under
//! `running`, and the server starts one worker thread per run
//! ([`start`]). The worker runs batches of commands, reports each result
//! through the engine under the state lock (so every later call on the run
//! sees it), and ends when the run has no such entry left. When the client
//! goes away ([`Dispatches::stop`]), every batch is interrupted: the commands
//! are killed with their process groups, nothing is reported for them (their
//! dispatches stay outstanding for `stratum_resume`), and the run's audit
//! records a `driver_interrupted` event.
//!
//! Owns: which runs have a worker, the worker loop, and the split of an
//! outcome's engine entries into running (a command) and fallback (none).
//! Must never: run a consumer or step entry (those are the client's), hold
//! the state lock while a command runs, or loop without a bound.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use stratum_vm::agent::{self, Answer, Interrupted, Job, Watch};
use stratum_vm::interp::{Dispatch, Outcome, ReadyEntry, Receipt, Report, RunStatus};

use crate::state::{Agents, State};

/// Most batches one worker runs.
const MAX_ROUNDS: usize = 10_000;
/// How often a running batch checks for a cancel or a disconnect.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// The `signal` of the audit event written when the client disconnects.
const DISCONNECT: &str = "disconnect";

/// Which runs have a worker, and the flag that stops them all.
#[derive(Debug, Default)]
pub struct Dispatches {
    live: BTreeSet<String>,
    starts: Vec<String>,
    stop: Arc<AtomicBool>,
}

impl Dispatches {
    /// Asks for a worker for `run_id` unless it has one (or the server is stopping).
    pub fn want(&mut self, run_id: &str) {
        if !self.stop.load(Ordering::SeqCst) && self.live.insert(run_id.to_string()) {
            self.starts.push(run_id.to_string());
        }
    }

    /// The runs whose workers are to be started now.
    pub fn take_starts(&mut self) -> Vec<String> {
        std::mem::take(&mut self.starts)
    }

    /// Whether `run_id` has a worker.
    pub fn is_live(&self, run_id: &str) -> bool {
        self.live.contains(run_id)
    }

    /// Stops every worker: running batches are interrupted, no new ones start.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.starts.clear();
    }

    fn stopping(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    fn finish(&mut self, run_id: &str) {
        self.live.remove(run_id);
    }

    /// Withdraws a worker asked for `run_id` and not started yet (a
    /// background driver process drives the run instead).
    pub fn forget(&mut self, run_id: &str) {
        self.starts.retain(|r| r != run_id);
        self.live.remove(run_id);
    }

    /// Releases `run_id` when its worker could not be started.
    pub fn finish_failed(&mut self, run_id: &str) {
        self.finish(run_id);
    }
}

/// Whether the server runs `e` itself (an engine entry whose agent has a command).
pub fn runs_itself(e: &ReadyEntry, agents: &Agents) -> bool {
    e.dispatch == Dispatch::Engine
        && (agents.commands.contains_key(&e.agent) || agents.connectors.contains_key(&e.agent))
}

/// Whether the outcome has entries for a worker.
pub fn has_work(outcome: &Outcome, agents: &Agents) -> bool {
    !outcome.status.is_terminal() && outcome.ready.iter().any(|e| runs_itself(e, agents))
}

/// Starts the worker of `run_id` on a thread of its own.
pub fn start(shared: &Arc<Mutex<State>>, run_id: String) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(format!("stratum-engine-{run_id}"))
        .spawn(move || work(&shared, &run_id))
}

fn lock(shared: &Mutex<State>) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One batch: the commands to run and the entries they answer.
struct Batch {
    jobs: Vec<Job>,
    /// Per job: the entry as the command reads it, its id and its token.
    entries: Vec<(Value, String, String)>,
    root: std::path::PathBuf,
}

fn work(shared: &Arc<Mutex<State>>, run_id: &str) {
    let stop = lock(shared).dispatches.stopping();
    for _ in 0..MAX_ROUNDS {
        let Some(batch) = next_batch(&mut lock(shared), run_id) else {
            return;
        };
        let entries = batch.entries;
        let watched =
            agent::run_batch_watched(batch.jobs, run_id, &batch.root, WATCH_EVERY, || {
                watch(shared, run_id, &stop)
            });
        let mut state = lock(shared);
        match watched {
            Ok(results) => {
                let reports = entries.into_iter().zip(results);
                // an orphan (killed at its lease) reports nothing: the next touch orphans it
                let reports = reports.filter_map(|((_, id, token), (_, a))| match a {
                    // a connector's argv and usage go into the audit first (a usage receipt)
                    Answer::Connected(c) => {
                        let receipt = c.receipt(&id, &token);
                        Some((id, token, c.report, Some(receipt)))
                    }
                    a => a.report().map(|r| (id, token, r, None)),
                });
                report_all(&mut state, run_id, reports.collect());
            }
            Err(Interrupted { killed, finished }) => {
                let reports = finished
                    .into_iter()
                    .filter_map(|(json, r)| {
                        let (_, id, token) = entries.iter().find(|(e, _, _)| *e == json)?;
                        Some((id.clone(), token.clone(), r, None))
                    })
                    .collect();
                report_all(&mut state, run_id, reports);
                if let Ok(access) = state.run(run_id) {
                    // the audit says what was killed; a failure here changes nothing
                    let _ = access
                        .engine
                        .interrupted(run_id, DISCONNECT, killed, access.host);
                }
                state.dispatches.finish(run_id);
                return;
            }
        }
    }
    lock(shared).dispatches.finish(run_id);
}

/// The next batch of `run_id`, or `None` (and the worker is released, under
/// the same lock, so a call that makes new work ready starts a new one).
fn next_batch(state: &mut State, run_id: &str) -> Option<Batch> {
    let batch = state.run(run_id).ok().and_then(|access| {
        // the driver's loop touches the run: expired leases are orphaned (X7)
        let outcome = access.engine.touch(run_id, access.host).ok()?;
        batch_of(&outcome, access.agents)
    });
    if batch.is_none() || state.dispatches.stopping().load(Ordering::SeqCst) {
        state.dispatches.finish(run_id);
        return None;
    }
    batch
}

fn batch_of(outcome: &Outcome, agents: &Agents) -> Option<Batch> {
    if !has_work(outcome, agents) {
        return None;
    }
    let (jobs, entries) = outcome
        .ready
        .iter()
        .filter(|e| runs_itself(e, agents))
        .filter_map(|e| {
            let timeout = agents
                .timeouts
                .get(&e.agent)
                .copied()
                .unwrap_or(agent::DEFAULT_TIMEOUT);
            let json = entry_json(e);
            let entry = (json.clone(), e.id.clone(), e.dispatch_token.clone());
            // a connector's CLI (issue 16), else the agent's command
            let job = match agents.connectors.get(&e.agent) {
                Some((kind, settings)) => {
                    let call = stratum_vm::connector::Call::new(*kind, settings, e);
                    Job::connected(call, json, timeout)
                }
                None => Job::new(agents.commands.get(&e.agent)?.clone(), json, timeout),
            };
            Some((job, entry))
        })
        .unzip();
    Some(Batch {
        jobs,
        entries,
        root: agents.root.clone(),
    })
}

/// What a running batch is told at each poll: stop on a disconnect, cancel
/// when the run was cancelled (by this or another process).
fn watch(shared: &Mutex<State>, run_id: &str, stop: &AtomicBool) -> Watch {
    if stop.load(Ordering::SeqCst) {
        return Watch::Interrupt;
    }
    let mut state = lock(shared);
    let cancelled = state.run(run_id).is_ok_and(|access| {
        access
            .engine
            .poll(run_id, access.host)
            .is_ok_and(|o| o.status == RunStatus::Cancelled)
    });
    if cancelled { Watch::Cancel } else { Watch::Go }
}

/// One result for the engine: the step, its token, the report, and a
/// connector run's usage receipt.
type Reported = (String, String, Report, Option<Receipt>);

fn report_all(state: &mut State, run_id: &str, reports: Vec<Reported>) {
    let Ok(access) = state.run(run_id) else {
        return;
    };
    for (id, token, report, receipt) in reports {
        if let Some(receipt) = receipt {
            // a refusal (the run moved on) changes nothing; the report decides
            let _ = access.engine.usage_report(run_id, &receipt, access.host);
        }
        // a refusal (the run moved on meanwhile: cancelled, reverted) changes nothing
        let _ = access
            .engine
            .report(run_id, &id, Some(&token), &report, access.host);
    }
}

/// A ready entry as the agent command reads it on stdin.
fn entry_json(e: &ReadyEntry) -> Value {
    // Invariant: ready entries are plain data; they always serialize.
    serde_json::to_value(e).expect("invariant: ready entries always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_per_run_and_none_after_stop() {
        let mut d = Dispatches::default();
        d.want("r1");
        d.want("r1");
        d.want("r2");
        assert_eq!(d.take_starts(), ["r1", "r2"]);
        assert!(d.is_live("r1"));
        d.finish("r1");
        d.want("r1");
        assert_eq!(d.take_starts(), ["r1"]);
        d.finish("r1");
        d.stop();
        d.want("r1");
        assert!(d.take_starts().is_empty());
        assert!(!d.is_live("r1"));
    }
}
