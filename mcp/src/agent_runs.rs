//! The server's agent runs (issue 16 §2: `stratum_agent_run`,
//! `stratum_agent_poll`, `stratum_cancel_agent_run`, and
//! `stratum_flow_cancel` reaching the agent runs linked to a flow).
//!
//! Every agent run, foreground or background, runs on a thread of its own
//! (started after the call that asked for it, like the engine workers of
//! [`crate::driver`]); the thread records the pid and process group as soon
//! as the process runs, and the settled result when it ends, each under
//! the state lock, in the run store's durable [`AgentRun`] record. A
//! foreground call waits (off the lock) for its thread to end and answers
//! with the record; a background call answers at once. A cancel — from
//! this process or any other on the same host, through the record — settles
//! the record first, then kills the recorded group and waits for it to be
//! gone ([`stratum_vm::agent_runs::cancel`]).
//!
//! Owns: which agent runs this server started and has not seen end, the
//! threads' loop, the JSON shape of a record (`record_json`), and stopping
//! them all when the client goes away (settled as `lost`, groups killed).
//! Must never: run an agent on the request path, hold the state lock while
//! an agent runs, or decide what a cancel means (`stratum_vm::agent_runs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use stratum_vm::agent::{self, Job};
use stratum_vm::agent_runs;
use stratum_vm::store::{AgentRun, AgentRunStatus, AgentUpdate};
use tokio::sync::oneshot;

use crate::reply::Reply;
use crate::state::State;

/// How long a group that was cancelled before its pid was recorded gets to
/// be gone.
const LATE_KILL_WAIT: Duration = Duration::from_secs(2);

/// One agent run to start: its record (already stored), its job, where it runs.
pub struct Start {
    /// The stored record.
    pub record: AgentRun,
    /// The supervised job.
    pub job: Job,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Told when the run has ended (a foreground call waits on it).
    pub done: Option<oneshot::Sender<()>>,
}

/// The agent runs of this server.
#[derive(Default)]
pub struct AgentRuns {
    starts: Vec<Start>,
    live: BTreeSet<String>,
    /// Foreground calls' waits, by agent run id (taken by the call's handler).
    waits: BTreeMap<String, oneshot::Receiver<()>>,
    owner: Option<String>,
}

impl AgentRuns {
    /// This server's owner id (`host:pid:start`), fixed at first use.
    pub fn owner(&mut self) -> String {
        self.owner
            .get_or_insert_with(|| agent_runs::owner_id(now_ms()))
            .clone()
    }

    /// Queues `start` (its thread starts after the call); a foreground one
    /// leaves its wait for [`AgentRuns::take_wait`].
    pub fn want(&mut self, mut start: Start, foreground: bool) {
        if foreground {
            let (tx, rx) = oneshot::channel();
            start.done = Some(tx);
            self.waits.insert(start.record.id.clone(), rx);
        }
        self.live.insert(start.record.id.clone());
        self.starts.push(start);
    }

    /// The runs to start now.
    pub fn take_starts(&mut self) -> Vec<Start> {
        std::mem::take(&mut self.starts)
    }

    /// The wait of foreground run `id`.
    pub fn take_wait(&mut self, id: &str) -> Option<oneshot::Receiver<()>> {
        self.waits.remove(id)
    }

    /// Whether this server runs agent run `id`.
    pub fn is_live(&self, id: &str) -> bool {
        self.live.contains(id)
    }

    fn finish(&mut self, id: &str) {
        self.live.remove(id);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn lock(shared: &Mutex<State>) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the thread of one agent run.
pub fn start(shared: &Arc<Mutex<State>>, s: Start) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    let name = format!("stratum-agent-{}", s.record.id);
    std::thread::Builder::new()
        .name(name)
        .spawn(move || work(&shared, s))
}

/// A run whose thread could not be started (the [`Start`] went with the
/// failed spawn): its record is settled as failed.
pub fn not_started(state: &mut State, id: &str, e: &std::io::Error) {
    if let Ok(Some(record)) = state.engine.store().agent_run(id) {
        let failed = AgentRun {
            status: AgentRunStatus::Failed,
            failure: Some(format!("the server could not start a thread for it: {e}")),
            updated_ms: now_ms(),
            ..record
        };
        let _ = state.engine.store_mut().update_agent_run(&failed);
    }
    state.agent_runs.finish(id);
}

fn work(shared: &Mutex<State>, s: Start) {
    let id = s.record.id.clone();
    let mut record = s.record.clone();
    let answer = agent::run_command_observed(&s.job, &id, &s.cwd, |pid| {
        record.pid = Some(pid);
        record.pgid = Some(pid);
        record.updated_ms = now_ms();
        let mut state = lock(shared);
        // cancelled before it ran: nobody knew the group to kill, so kill it now
        if let Ok(AgentUpdate::Settled(_)) = state.engine.store_mut().update_agent_run(&record) {
            drop(state);
            agent::kill_group(pid, LATE_KILL_WAIT);
        }
    });
    let done = agent_runs::settled(record, answer, now_ms());
    let mut state = lock(shared);
    // settled meanwhile (a cancel): that is kept, this end is dropped
    let _ = state.engine.store_mut().update_agent_run(&done);
    state.agent_runs.finish(&id);
    drop(state);
    if let Some(tx) = s.done {
        let _ = tx.send(());
    }
}

/// Stops every agent run this server runs (the client went away): each is
/// settled as `lost` and its group killed. The threads then end on their own.
pub fn stop_all(state: &mut State) {
    let live: Vec<String> = state.agent_runs.live.iter().cloned().collect();
    for id in live {
        let Ok(Some(record)) = state.engine.store().agent_run(&id) else {
            continue;
        };
        let why = (
            AgentRunStatus::Lost,
            "lost: the MCP server that ran it ended (its client went away)",
        );
        let _ = agent_runs::stop(state.engine.store_mut(), record, why, now_ms());
    }
}

/// An agent run as the tools report it.
pub fn record_json(r: &AgentRun) -> Value {
    let output = r
        .output
        .as_deref()
        .map(|o| serde_json::from_str::<Value>(o).unwrap_or_else(|_| Value::String(o.into())));
    json!({
        "runId": r.id,
        "agent": r.agent,
        "status": r.status.as_str(),
        "done": r.is_settled(),
        "pid": r.pid,
        "pgid": r.pgid,
        "host": r.host,
        "startedAt": r.started_ms,
        "updatedAt": r.updated_ms,
        "output": output,
        "failure": r.failure,
        "usage": r.usage.map(|u| json!({"tokens": u.tokens, "usd": u.usd})),
        "flow": r.flow.as_ref().map(|f| json!({"runId": f.run_id, "stepId": f.step_id, "itemIndex": f.item_index})),
        "cancellationId": r.cancellation_id,
    })
}

/// The record named `id`: an agent run id, or a cancellation id.
pub fn find(state: &State, id: &str) -> Result<AgentRun, Reply> {
    let store = state.engine.store();
    let found = match store.agent_run(id) {
        Ok(None) => store.agent_run_by_cancellation(id),
        other => other,
    };
    match found {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(Reply::error(
            "not_found",
            format!(
                "no agent run `{id}`: give the runId stratum_agent_run returned, or the cancellationId it was given"
            ),
        )),
        Err(e) => Err(Reply::error("store_error", e.to_string())),
    }
}

/// What a cancel answers: the record, `cancelled` (this call settled it),
/// `reason` (`already_<status>`), `teardown` (`reaped`, `gone`,
/// `unconfirmed`, or null: no process to kill), `teardownConfirmed`.
/// A teardown that is not confirmed is an error carrying the same fields.
pub fn cancel_reply(c: &agent_runs::Cancel) -> Reply {
    let mut v = record_json(&c.record);
    if let Some(m) = v.as_object_mut() {
        m.insert("cancelled".into(), Value::from(!c.already));
        let reason = c
            .already
            .then(|| format!("already_{}", c.record.status.as_str()));
        m.insert("reason".into(), reason.map_or(Value::Null, Value::from));
        let teardown = c.teardown.map(agent::Teardown::as_str);
        m.insert("teardown".into(), teardown.map_or(Value::Null, Value::from));
        m.insert("teardownConfirmed".into(), Value::from(c.confirmed()));
    }
    if c.confirmed() {
        return Reply::Ok(v);
    }
    let (kind, why) = if c.other_host {
        (
            "cancellation_unconfirmed",
            format!(
                "agent run `{}` runs on host `{}`, not this one: it is settled as cancelled, but its process group was not signalled; cancel it from that host",
                c.record.id, c.record.host
            ),
        )
    } else {
        (
            "cancellation_teardown_timeout",
            format!(
                "agent run `{}` is settled as cancelled and its process group {} was killed, but a process of it was still alive after {} s",
                c.record.id,
                c.record.pgid.unwrap_or_default(),
                agent_runs::TEARDOWN_WAIT.as_secs()
            ),
        )
    };
    Reply::error_with(kind, why, v)
}

/// `stratum_flow_cancel`'s reach into agent runs: every running agent run
/// linked to flow run `run_id` (started by any process on this host) is
/// cancelled and its group killed; the reply `v` gets `agentRuns`, one
/// entry per run (`{runId, status, teardown, teardownConfirmed}`).
pub fn cancel_linked(state: &mut State, run_id: &str, v: &mut Value) {
    let cancels = agent_runs::cancel_linked(state.engine.store_mut(), run_id, now_ms());
    let entries: Vec<Value> = match cancels {
        Ok(list) => list
            .iter()
            .map(|c| {
                json!({
                    "runId": c.record.id,
                    "status": c.record.status.as_str(),
                    "teardown": c.teardown.map(agent::Teardown::as_str),
                    "teardownConfirmed": c.confirmed(),
                })
            })
            .collect(),
        Err(e) => vec![json!({"error": e.to_string()})],
    };
    if let Some(m) = v.as_object_mut() {
        m.insert("agentRuns".into(), Value::from(entries));
    }
}
