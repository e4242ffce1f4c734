//! The run lease of `stratumc run` (issue 16 §2): one driver at a time per
//! run, a heartbeat, and the takeover of a run whose driver went away.
//!
//! Owns: acquiring the run's lease before the driver loop (refusing while
//! another driver's heartbeat is fresh; taking over at once from a driver
//! on this host whose process is gone), the heartbeat thread (its own store
//! connection; it says when the lease was lost to another driver), the
//! takeover (the dead driver's recorded agent groups on this host killed,
//! every handed-out dispatch reissued with a new token through
//! `Engine::take_over`), the agent-run records of this driver's dispatches,
//! and releasing the lease when the driver ends.
//! Must never: drive the run (`run.rs` does), kill a group recorded on
//! another host, or keep driving once the lease is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use stratum_vm::agent::Answer;
use stratum_vm::agent_runs;
use stratum_vm::store::{AgentRun, AgentRunStatus, FlowLink, Lease, LeaseGrant, RunStore};

/// How long a lease lasts without a heartbeat (`STRATUM_LEASE_MS`
/// overrides it, at least 200 ms; the heartbeat beats at a third of it).
const DEFAULT_TTL: Duration = Duration::from_secs(15);

fn ttl() -> Duration {
    std::env::var("STRATUM_LEASE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TTL, |ms| Duration::from_millis(ms.max(200)))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Whether process `pid` of this host is alive (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
    }
}

/// The lease this driver holds, with its heartbeat.
pub struct Held {
    run_id: String,
    holder: String,
    /// The driver's own store connection for its agent records.
    store: Box<dyn RunStore>,
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    beat: Option<JoinHandle<()>>,
    /// This round's agent-run records, by dispatch token.
    records: Vec<(String, AgentRun)>,
}

/// What acquiring gave.
pub struct Acquired {
    /// The lease, held.
    pub held: Held,
    /// The lapsed lease of the driver this one took over from, and how many
    /// of its agents' groups were killed.
    pub taken_over: Option<(Lease, usize)>,
}

impl Held {
    /// Whether the lease was lost (another driver took the run over after
    /// a heartbeat failed): the driver must stop.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The flag the heartbeat sets when the lease is lost (for a watcher).
    pub fn lost_flag(&self) -> Arc<AtomicBool> {
        self.lost.clone()
    }

    /// Records a dispatch's agent as it starts: its pid and group, linked
    /// to the run and the step (and item), owned by this driver.
    pub fn started(&mut self, entry: &Value, pid: u32, agent: &str) {
        let step = entry["id"].as_str().unwrap_or_default().to_owned();
        let token = entry["dispatchToken"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let item = entry["item"]["itemIndex"]
            .as_u64()
            .and_then(|i| u32::try_from(i).ok());
        let now = now_ms();
        let mut record = AgentRun {
            id: agent_runs::new_id(),
            agent: agent.to_owned(),
            status: AgentRunStatus::Running,
            pid: Some(pid),
            pgid: Some(pid),
            host: agent_runs::this_host(),
            started_ms: now,
            updated_ms: now,
            output: None,
            failure: None,
            usage: None,
            flow: Some(FlowLink {
                run_id: self.run_id.clone(),
                step_id: Some(step),
                item_index: item,
            }),
            cancellation_id: None,
            owner: self.holder.clone(),
        };
        if self.store.create_agent_run(&record).is_ok() {
            record.updated_ms = now;
            self.records.push((token, record));
        }
    }

    /// Settles the records of this round's agents from their answers (an
    /// agent without an answer — interrupted — is `lost`); the output is
    /// left out (it is the run's, reported through the engine).
    pub fn ended(&mut self, answers: &[(Value, Answer)]) {
        for (token, record) in std::mem::take(&mut self.records) {
            let answer = answers
                .iter()
                .find(|(e, _)| e["dispatchToken"].as_str() == Some(token.as_str()));
            let settled = match answer {
                // the output is the run's (its report, in the audit): not kept twice
                Some((_, a)) => AgentRun {
                    output: None,
                    ..agent_runs::settled(record, a.clone(), now_ms())
                },
                None => AgentRun {
                    status: AgentRunStatus::Lost,
                    failure: Some("its driver was interrupted; the dispatch stays live".into()),
                    updated_ms: now_ms(),
                    ..record
                },
            };
            let _ = self.store.update_agent_run(&settled);
        }
    }
}

/// The driver ends (any return): the heartbeat stops and the lease is
/// given up. (A process that exits at once — a second signal — leaves its
/// lease to lapse.)
impl Drop for Held {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(b) = self.beat.take() {
            let _ = b.join();
        }
        let _ = self.store.release_lease(&self.run_id, &self.holder);
    }
}

/// Acquires the lease of `run_id` for this process. Another driver's fresh
/// lease is refused (saying who holds it), unless it is on this host and
/// its process is gone: then it is void at once. A lapsed (or void) lease is
/// taken over: the dead driver's running agents on this host are killed
/// (their records settled as `lost`); the caller then reissues the run's
/// dispatches (`Engine::take_over`).
pub fn acquire(run_id: &str) -> Result<Acquired, String> {
    let mut store = stratum_vm::store::open_default().map_err(|e| e.to_string())?;
    let started = now_ms();
    let holder = agent_runs::owner_id(started);
    let ttl = ttl();
    let host = agent_runs::this_host();
    let ask = |now: i64| Lease {
        run_id: run_id.to_owned(),
        holder: holder.clone(),
        host: host.clone(),
        pid: std::process::id(),
        heartbeat_ms: now,
        expires_ms: now.saturating_add(ms(ttl)),
    };
    // the lease of a driver on this host whose process is gone is void at
    // once (a reused pid looks alive: that lease is waited out instead)
    let mut voided = None;
    let taken = loop {
        match store
            .acquire_lease(&ask(now_ms()))
            .map_err(|e| e.to_string())?
        {
            LeaseGrant::Granted | LeaseGrant::Renewed => break voided,
            LeaseGrant::TakenOver(prev) => break Some(prev),
            LeaseGrant::Held(other)
                if other.host == host && !alive(other.pid) && voided.is_none() =>
            {
                store
                    .release_lease(run_id, &other.holder)
                    .map_err(|e| e.to_string())?;
                voided = Some(other);
            }
            LeaseGrant::Held(other) => {
                return Err(format!(
                    "run {run_id} is being driven by pid {} on host `{}` (its lease runs until {} ms since the epoch, renewed every few seconds); watch it with `stratumc watch {run_id}`, or stop it with `stratumc flow cancel {run_id}`",
                    other.pid, other.host, other.expires_ms
                ));
            }
        }
    };
    let taken_over = taken.map(|prev| {
        let killed = reap(store.as_mut(), run_id, &prev);
        (prev, killed)
    });
    let stop = Arc::new(AtomicBool::new(false));
    let lost = Arc::new(AtomicBool::new(false));
    let beat = heartbeat(ask(now_ms()), ttl, stop.clone(), lost.clone());
    Ok(Acquired {
        held: Held {
            run_id: run_id.to_owned(),
            holder,
            store,
            stop,
            lost,
            beat,
            records: Vec::new(),
        },
        taken_over,
    })
}

/// Kills the running agents of the driver whose lease `prev` lapsed (on
/// this host), settling their records as `lost`; how many groups were killed.
fn reap(store: &mut dyn RunStore, run_id: &str, prev: &Lease) -> usize {
    let Ok(records) = store.agent_runs_of_flow(run_id) else {
        return 0;
    };
    let why = format!(
        "lost: its driver (pid {} on `{}`) stopped beating and the run was taken over",
        prev.pid, prev.host
    );
    let mut killed = 0;
    for r in records {
        if r.is_settled() || r.owner != prev.holder {
            continue;
        }
        let stopped = agent_runs::stop(store, r, (AgentRunStatus::Lost, &why), now_ms());
        if let Ok(c) = stopped
            && c.teardown == Some(stratum_vm::agent::Teardown::Reaped)
        {
            killed += 1;
        }
    }
    killed
}

/// Renews the lease every third of its life on a thread with its own store
/// connection; sets `lost` when another driver holds it now.
fn heartbeat(
    mut lease: Lease,
    ttl: Duration,
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
) -> Option<JoinHandle<()>> {
    let every = ttl / 3;
    std::thread::Builder::new()
        .name("stratum-lease".into())
        .spawn(move || {
            let Ok(mut store) = stratum_vm::store::open_default() else {
                return;
            };
            let tick = Duration::from_millis(50).min(every);
            let mut since = Duration::ZERO;
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(tick);
                since += tick;
                if since < every {
                    continue;
                }
                since = Duration::ZERO;
                let now = now_ms();
                lease.heartbeat_ms = now;
                lease.expires_ms = now.saturating_add(ms(ttl));
                match store.acquire_lease(&lease) {
                    Ok(LeaseGrant::Renewed) | Err(_) => {}
                    // not ours any more when we beat: another driver has the run
                    Ok(_) => {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        })
        .ok()
}
