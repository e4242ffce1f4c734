//! The durable records of agent runs and of run leases (issue 16 §2): what
//! the store keeps so that another process can find, poll, cancel and take
//! over work it did not start.
//!
//! Owns: the typed [`AgentRun`] record (who runs, where: pid, process group
//! and host; since when; its bounded output, usage and failure; the flow
//! step it works for; its cancellation id and its owner), its statuses and
//! the one rule of its life — a settled record (not `running`) never
//! changes again ([`AgentRun::is_settled`], enforced by the stores) — and
//! the [`Lease`] a driver holds on a run with its heartbeat, with the rule
//! of who gets it ([`grant`]).
//! Must never: start, signal or wait for a process (`crate::agent` and the
//! callers do), or read the clock (times are handed in).

/// The most bytes of an agent run's output (its result JSON) the store
/// keeps; a caller cuts a longer output and says so in the failure.
pub const MAX_AGENT_OUTPUT: usize = 1024 * 1024;
/// The most bytes of an agent run's failure text the store keeps.
pub const MAX_AGENT_FAILURE: usize = 64 * 1024;

/// Where an agent run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentRunStatus {
    /// Started (or about to be); its process may be alive.
    Running,
    /// Ended with a result.
    Completed,
    /// Ended with a failure (the CLI failed, timed out, printed no result).
    Failed,
    /// Stopped by a cancel; its process group was killed.
    Cancelled,
    /// Its owner (a server or driver) went away before it ended; a process
    /// that took the work over killed what was left of it.
    Lost,
}

impl AgentRunStatus {
    /// Every status, in the order above.
    pub const ALL: [AgentRunStatus; 5] = [
        AgentRunStatus::Running,
        AgentRunStatus::Completed,
        AgentRunStatus::Failed,
        AgentRunStatus::Cancelled,
        AgentRunStatus::Lost,
    ];

    /// Its name, as stored and as the MCP tools report it.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentRunStatus::Running => "running",
            AgentRunStatus::Completed => "completed",
            AgentRunStatus::Failed => "failed",
            AgentRunStatus::Cancelled => "cancelled",
            AgentRunStatus::Lost => "lost",
        }
    }

    /// The status called `name`.
    pub fn from_name(name: &str) -> Option<AgentRunStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The flow step an agent run works for (`stratum_agent_run`'s `flow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowLink {
    /// The flow run.
    pub run_id: String,
    /// The step (a ready entry's id), when given.
    pub step_id: Option<String>,
    /// The fanout item, when given.
    pub item_index: Option<u32>,
}

/// What an agent run spent, as its CLI reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentUsage {
    /// Tokens in all.
    pub tokens: u64,
    /// Dollars, when known.
    pub usd: Option<f64>,
}

/// One agent run, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    /// Its id (`agent-…`); the key.
    pub id: String,
    /// The configured agent (`claude`, `codex`) it runs.
    pub agent: String,
    /// Where it is.
    pub status: AgentRunStatus,
    /// The pid of its process (the leader of its group), once started.
    pub pid: Option<u32>,
    /// Its process group id, once started (the one a cancel kills).
    pub pgid: Option<u32>,
    /// The host name of the machine it runs on: a group is only killed by
    /// a process on the same host.
    pub host: String,
    /// When it was started, in milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// When the record last changed.
    pub updated_ms: i64,
    /// Its result (JSON text), at most [`MAX_AGENT_OUTPUT`] bytes.
    pub output: Option<String>,
    /// Why it failed (or was cancelled), at most [`MAX_AGENT_FAILURE`] bytes.
    pub failure: Option<String>,
    /// What it spent, when its CLI reported it.
    pub usage: Option<AgentUsage>,
    /// The flow step it works for.
    pub flow: Option<FlowLink>,
    /// The caller's cancellation id (`cancellationId`), unique when given.
    pub cancellation_id: Option<String>,
    /// Who runs it: the process (`host:pid:start`) that supervises it.
    pub owner: String,
}

impl AgentRun {
    /// Whether it has ended (any status but `running`): a settled record
    /// is never changed again.
    pub fn is_settled(&self) -> bool {
        self.status != AgentRunStatus::Running
    }

    /// Refuses a record the store must not keep: an empty id, an output or
    /// failure past its bound.
    pub(crate) fn check(&self) -> Result<(), super::StoreError> {
        let invalid = |m: String| Err(super::StoreError::Invalid(m));
        if self.id.is_empty() {
            return invalid("agent run id is empty".into());
        }
        if self
            .output
            .as_ref()
            .is_some_and(|o| o.len() > MAX_AGENT_OUTPUT)
        {
            return invalid(format!(
                "the output of agent run `{}` is over {MAX_AGENT_OUTPUT} bytes; cut it first",
                self.id
            ));
        }
        if self
            .failure
            .as_ref()
            .is_some_and(|f| f.len() > MAX_AGENT_FAILURE)
        {
            return invalid(format!(
                "the failure of agent run `{}` is over {MAX_AGENT_FAILURE} bytes; cut it first",
                self.id
            ));
        }
        Ok(())
    }
}

/// What [`super::RunStore::update_agent_run`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentUpdate {
    /// The record was written.
    Written,
    /// The stored record had already settled: nothing changed; this is it.
    Settled(Box<AgentRun>),
}

/// A driver's hold on a run: while it is not expired, only its holder
/// drives the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// Who holds it (`host:pid:start`, unique per driver process).
    pub holder: String,
    /// The holder's host name.
    pub host: String,
    /// The holder's pid.
    pub pid: u32,
    /// Its last heartbeat, in milliseconds since the Unix epoch.
    pub heartbeat_ms: i64,
    /// When it lapses unless renewed.
    pub expires_ms: i64,
}

/// What asking for a lease gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// Nobody held it; now the asker does.
    Granted,
    /// The asker held it; its heartbeat is renewed.
    Renewed,
    /// Its holder's lease had lapsed; the asker holds it now. This is the
    /// lapsed lease (whose agents the new holder must reap).
    TakenOver(Lease),
    /// Someone else holds it and it has not lapsed; nothing changed.
    Held(Lease),
}

/// The one rule of a lease: what `asked` gets at `asked.heartbeat_ms` when
/// `current` is stored (and whether it is written: all but `Held`).
pub(crate) fn grant(current: Option<&Lease>, asked: &Lease) -> LeaseGrant {
    match current {
        None => LeaseGrant::Granted,
        Some(c) if c.holder == asked.holder => LeaseGrant::Renewed,
        Some(c) if c.expires_ms <= asked.heartbeat_ms => LeaseGrant::TakenOver(c.clone()),
        Some(c) => LeaseGrant::Held(c.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, now: i64) -> Lease {
        Lease {
            run_id: "r".into(),
            holder: holder.into(),
            host: "h".into(),
            pid: 1,
            heartbeat_ms: now,
            expires_ms: now + 100,
        }
    }

    #[test]
    fn a_lease_goes_to_its_holder_or_to_anyone_once_it_lapsed() {
        assert_eq!(grant(None, &lease("a", 0)), LeaseGrant::Granted);
        let held = lease("a", 0);
        assert_eq!(grant(Some(&held), &lease("a", 50)), LeaseGrant::Renewed);
        assert_eq!(
            grant(Some(&held), &lease("b", 99)),
            LeaseGrant::Held(held.clone())
        );
        assert_eq!(
            grant(Some(&held), &lease("b", 100)),
            LeaseGrant::TakenOver(held)
        );
    }

    #[test]
    fn statuses_round_trip_by_name() {
        for s in AgentRunStatus::ALL {
            assert_eq!(AgentRunStatus::from_name(s.as_str()), Some(s));
        }
        assert_eq!(AgentRunStatus::from_name("done"), None);
    }
}
