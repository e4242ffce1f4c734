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
//! sees it) — or, when the run's plan may run declared commands or a judge
//! in its checks, through an engine on a store connection of its own,
//! without the lock (`crate::checks::report_on_side`) — and ends when the
//! run has no such entry left. When the client
//! goes away ([`Dispatches::stop`]), every batch is interrupted: the commands
//! are killed with their process groups, nothing is reported for them (their
//! dispatches stay outstanding for `stratum_resume`), and the run's audit
//! records a `driver_interrupted` event. When `stratum_flow_cancel` cancels
//! a run of this server, it asks the run's worker to stop its batch
//! ([`Dispatches::reap`]) and waits, bounded, until the commands' process
//! groups are gone (the worker sees the cancel without the state lock).
//!
//! Owns: which runs have a worker, the worker loop, and the split of an
//! outcome's engine entries into running (a command) and fallback (none).
//! Must never: run a consumer or step entry (those are the client's), hold
//! the state lock while a command runs, or loop without a bound.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
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

/// How long `stratum_flow_cancel` waits for the commands it stopped to be
/// reaped (their groups are killed at the worker's next poll, then get the
/// agent runner's kill grace).
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(5);

/// Which runs have a worker, and the flag that stops them all.
#[derive(Debug, Default)]
pub struct Dispatches {
    live: BTreeSet<String>,
    starts: Vec<String>,
    stop: Arc<AtomicBool>,
    teardowns: Arc<Teardowns>,
}

/// The batches in flight and their cancels, shared by the workers and
/// `stratum_flow_cancel` outside the state lock: a worker sees a cancel and
/// reaps its commands without the lock the cancelling call holds.
#[derive(Debug, Default)]
struct Teardowns {
    runs: Mutex<BTreeMap<String, Teardown>>,
    changed: Condvar,
}

/// One run's batch in flight.
#[derive(Debug, Default, Clone, Copy)]
struct Teardown {
    /// Commands in the batch.
    commands: usize,
    /// A cancel asked the worker to stop them.
    cancel: bool,
    /// The batch ended (every command's process group is gone).
    ended: bool,
    /// Commands the cancel stopped (still running when it came).
    stopped: usize,
}

/// What a cancel did to the commands this server runs for the run
/// (`stratum_flow_cancel`'s `agents`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reaped {
    /// Commands of the batch in flight that the cancel stopped.
    pub signalled: usize,
    /// Of those, the ones whose process groups are gone.
    pub reaped: usize,
    /// Of those, the ones not confirmed gone within [`TEARDOWN_WAIT`].
    pub unreaped: usize,
}

impl Teardowns {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Teardown>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin(&self, run_id: &str, commands: usize) {
        let t = Teardown {
            commands,
            ..Teardown::default()
        };
        self.lock().insert(run_id.to_string(), t);
    }

    fn cancelled(&self, run_id: &str) -> bool {
        self.lock().get(run_id).is_some_and(|t| t.cancel)
    }

    fn end(&self, run_id: &str, stopped: usize) {
        if let Some(t) = self.lock().get_mut(run_id) {
            t.ended = true;
            t.stopped = stopped;
        }
        self.changed.notify_all();
    }

    /// Asks the batch of `run_id` (if one is in flight) to stop and waits
    /// up to `wait` for its end.
    fn cancel_and_wait(&self, run_id: &str, wait: Duration) -> Reaped {
        let mut runs = self.lock();
        let Some(t) = runs.get_mut(run_id).filter(|t| !t.ended) else {
            return Reaped::default();
        };
        t.cancel = true;
        let commands = t.commands;
        let (runs, _) = self
            .changed
            .wait_timeout_while(runs, wait, |r| r.get(run_id).is_some_and(|t| !t.ended))
            .unwrap_or_else(PoisonError::into_inner);
        match runs.get(run_id) {
            // the batch ended: the commands it stopped are gone with their groups
            Some(t) if t.ended => Reaped {
                signalled: t.stopped,
                reaped: t.stopped,
                unreaped: 0,
            },
            // released meanwhile (the worker finished): nothing is left running
            None => Reaped::default(),
            // not confirmed in time: every command of the batch may still run
            Some(_) => Reaped {
                signalled: commands,
                reaped: 0,
                unreaped: commands,
            },
        }
    }
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

    /// Stops the commands the worker of `run_id` is running (the run was
    /// just cancelled) and waits up to `wait` for their process groups to
    /// be gone. Called under the state lock: the worker notices and reaps
    /// without it.
    pub fn reap(&self, run_id: &str, wait: Duration) -> Reaped {
        if !self.is_live(run_id) {
            return Reaped::default();
        }
        self.teardowns.cancel_and_wait(run_id, wait)
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
        self.teardowns.lock().remove(run_id);
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
    let (stop, teardowns) = {
        let state = lock(shared);
        (
            state.dispatches.stopping(),
            state.dispatches.teardowns.clone(),
        )
    };
    for _ in 0..MAX_ROUNDS {
        let Some(batch) = next_batch(&mut lock(shared), run_id) else {
            return;
        };
        let entries = batch.entries;
        teardowns.begin(run_id, batch.jobs.len());
        let watched =
            agent::run_batch_counted(batch.jobs, run_id, &batch.root, WATCH_EVERY, || {
                // a cancel by this server is seen without the state lock it holds
                if teardowns.cancelled(run_id) {
                    return Watch::Cancel;
                }
                watch(shared, run_id, &stop)
            });
        // every command's process group is gone once the batch returns
        let stopped = watched.as_ref().map_or(0, |(_, n)| *n);
        teardowns.end(run_id, stopped);
        let watched = watched.map(|(results, _)| results);
        let mut state = lock(shared);
        match watched {
            Ok(results) => {
                let reports: Vec<Reported> = entries
                    .into_iter()
                    .zip(results)
                    // an orphan (killed at its lease) reports nothing: the next touch orphans it
                    .filter_map(|((_, id, token), (_, a))| match a {
                        // a connector's argv and usage go into the audit first (a usage receipt)
                        Answer::Connected(c) => {
                            let receipt = c.receipt(&id, &token);
                            Some((id, token, c.report, Some(receipt)))
                        }
                        a => a.report().map(|r| (id, token, r, None)),
                    })
                    .collect();
                // reports whose checks may take long are made on a connection
                // of their own, without the state lock (crate::checks)
                let first = reports.first().map_or("", |r| r.0.as_str()).to_owned();
                let side = crate::checks::side_store(&mut state, run_id);
                if let Some(store) = side.filter(|_| state.checks.begin_worker(run_id, &first)) {
                    let operator = state.operator().map(std::path::Path::to_path_buf);
                    let probe = state.stops.probe(run_id);
                    drop(state);
                    let made = crate::checks::report_on_side(
                        store,
                        run_id,
                        operator.as_deref(),
                        probe,
                        &reports,
                    );
                    state = lock(shared);
                    state.checks.end_worker(run_id);
                    if made {
                        continue;
                    }
                }
                report_all(&mut state, run_id, reports);
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
pub type Reported = (String, String, Report, Option<Receipt>);

fn report_all(state: &mut State, run_id: &str, reports: Vec<Reported>) {
    let Ok(access) = state.run(run_id) else {
        return;
    };
    report_each(access.engine, access.host, run_id, &reports);
}

/// The worker's results, one report each (a connector run's usage receipt
/// first), through `engine`: the state's, or one on a connection of its
/// own (`crate::checks::report_on_side`). A refusal (the run moved on
/// meanwhile: cancelled, reverted) changes nothing.
pub fn report_each(
    engine: &mut stratum_vm::engine::Engine,
    host: &mut stratum_vm::host::StdHost,
    run_id: &str,
    reports: &[Reported],
) {
    for (id, token, report, receipt) in reports {
        if let Some(receipt) = receipt {
            // the report decides; a refused receipt changes nothing
            let _ = engine.usage_report(run_id, receipt, host);
        }
        let _ = engine.report(run_id, id, Some(token), report, host);
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
