//! The durable run store: plans by content hash, runs as opaque blobs, an
//! append-only event log and named checkpoints per run.
//!
//! Owns: the [`RunStore`] trait, its error type, where the store is
//! ([`StoreLocation`], [`open_default`]: `STRATUM_STORE`, else `[store]
//! url` in the operator's `stratum.toml`, else `$STRATUM_HOME/stratum.db`)
//! and three implementations — [`MemoryStore`] (tests, non-durable
//! benchmarks), [`SqliteStore`] (the default, an embedded SQLite database
//! shared by several processes on one machine) and, with the `postgres`
//! feature, `PostgresStore` (one PostgreSQL database shared by every
//! machine of a team; the same records, checksums, schema versions and
//! guarantees; it pushes changes to [`RunStore::wait_for_change`] with
//! `LISTEN/NOTIFY` where the others are polled).
//!
//! Beside the runs (schema 4): durable [`AgentRun`] records (an agent CLI
//! started by `stratum_agent_run` or a background driver: its pid, process
//! group, host, output, usage) and one [`Lease`] per driven run (the driver
//! that holds it, its heartbeat), so that another process can poll, cancel
//! or take over what it did not start.
//!
//! The store knows nothing of the interpreter's types. A run is stored as
//! - a small [`RunMeta`] record (indexed columns for listing),
//! - a `header` blob (the run-wide state, rewritten on every transition),
//! - keyed `rows` (per-step state; a transition upserts only the rows it
//!   changed, so its cost does not grow with the number of steps already done),
//! - an append-only log of JSON event lines (the audit), numbered from 0.
//!
//! Every write is one transaction. [`RunStore::commit`] is an optimistic
//! compare-and-swap on the run's `version`: of several writers that loaded the
//! same version, exactly one succeeds and the others get
//! [`StoreError::Conflict`] with nothing changed. That is how concurrent
//! reports on one run resolve to one winner across processes.
//!
//! The SQLite and PostgreSQL stores checksum every record they write and
//! verify it on every read (`sum`), so damage on disk is a
//! [`StoreError::Corrupt`] naming the record, never a silently different
//! blob.
//!
//! Must never: interpret the blobs or the event lines, panic on a damaged or
//! hostile database file, hand out a record that fails its checksum, or
//! acknowledge a write before it is durable (the SQLite store runs with
//! `synchronous=FULL`; the PostgreSQL store returns after the server
//! answered `COMMIT`).

use std::time::Duration;

mod agents;
mod copy;
mod guard;
mod location;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
mod sum;

pub use agents::{
    AgentRun, AgentRunStatus, AgentUpdate, AgentUsage, FlowLink, Lease, LeaseGrant,
    MAX_AGENT_FAILURE, MAX_AGENT_OUTPUT,
};
pub use copy::{
    CopyReport, Mismatch, RunRecord, copy_store, guard_digest, run_digest, verify_copy,
};
pub use guard::{GuardRecord, GuardStore, GuardWrite, LedgerRow};

pub use location::{STORE_ENV, StoreLocation, is_store_url, open_default, set_location};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use sqlite::{
    Damage, Durability, Place, Problem, SCHEMA_VERSION, SqliteStore, StoreCheck, default_home,
    set_home,
};
pub use sum::SumProblem;

/// The listing record of a run. `run_id` is the key; `created_ms` is fixed
/// when the run is created (a commit does not change it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMeta {
    pub run_id: String,
    pub plan_hash: String,
    pub flow: String,
    pub status: String,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// Everything stored about a run except its events and checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub meta: RunMeta,
    /// Starts at 1 on [`RunStore::create`]; each successful commit adds 1.
    pub version: u64,
    pub header: Vec<u8>,
    /// Sorted by key, one entry per key.
    pub rows: Vec<(u64, Vec<u8>)>,
    /// Number of events appended so far; the next event gets this sequence number.
    pub event_count: u64,
}

/// One transition of a run, applied atomically by [`RunStore::commit`].
#[derive(Debug, Clone, Copy)]
pub struct Delta<'a> {
    pub run_id: &'a str,
    /// The version the caller loaded; the commit fails with
    /// [`StoreError::Conflict`] if the stored version differs.
    pub expected_version: u64,
    /// Replaces the stored meta except `run_id` (must equal `run_id` above)
    /// and `created_ms` (kept from creation).
    pub meta: &'a RunMeta,
    /// Replaces the stored header.
    pub header: &'a [u8],
    /// Rows to insert or replace; rows not named here are left as they are.
    pub rows: &'a [(u64, Vec<u8>)],
    /// Event lines to append, in order.
    pub events: &'a [String],
}

/// Errors of a [`RunStore`]. Messages are lower-case and say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The run (or the plan, for operations that need it) does not exist.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// [`RunStore::create`] on an existing run id.
    #[error("run `{0}` already exists")]
    Exists(String),
    /// Another writer committed first; reload and retry (or refuse).
    #[error("run changed concurrently: expected version {expected}, found {current}")]
    Conflict { expected: u64, current: u64 },
    /// The caller passed something the store cannot accept.
    #[error("invalid store request: {0}")]
    Invalid(String),
    /// The stored data is damaged or not a stratum store.
    #[error(
        "the run store is corrupt: {0} (`stratumc store check` lists all damage; restore stratum.db from a backup)"
    )]
    Corrupt(String),
    /// The database could not be opened, read or written.
    #[error("run store i/o error: {0}")]
    Io(String),
    /// The database was written by a newer stratumc.
    #[error(
        "the run store has schema version {found}, but this stratumc supports up to {supported}; upgrade stratumc (or point STRATUM_HOME elsewhere)"
    )]
    SchemaTooNew { found: i64, supported: i64 },
}

/// Durable storage of plans and runs. See the module docs for the model.
///
/// Implementations are used from one thread at a time (`&mut self` for
/// writes); sharing between threads or processes is done by opening several
/// stores on the same database. Every run store also keeps the guarded
/// resources of STRAT-GUARD ([`GuardStore`]), so one connection serves both.
pub trait RunStore: GuardStore + Send {
    /// Stores plan bytes under their hash. Idempotent: storing the same hash
    /// again is a no-op (the first bytes are kept).
    fn put_plan(&mut self, hash: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// The plan bytes stored under `hash`, if any.
    fn get_plan(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Another connection to the same store (for work done on a thread of
    /// its own, such as an MCP server's long checks); `None` when the store
    /// cannot have a second connection (the in-memory store).
    fn reopen(&self) -> Option<Result<Box<dyn RunStore>, StoreError>> {
        None
    }

    /// Creates a run at version 1 with the given rows and first events.
    /// [`StoreError::Exists`] if the run id is taken.
    fn create(
        &mut self,
        meta: &RunMeta,
        header: &[u8],
        rows: &[(u64, Vec<u8>)],
        events: &[String],
    ) -> Result<(), StoreError>;

    /// The current state of a run; [`StoreError::NotFound`] when absent.
    fn load(&self, run_id: &str) -> Result<Snapshot, StoreError>;

    /// The current version of a run (cheap: lets an engine that holds a run
    /// in memory skip reloading it when nobody else committed).
    fn version(&self, run_id: &str) -> Result<u64, StoreError> {
        self.load(run_id).map(|s| s.version)
    }

    /// Atomically: checks that the stored version equals
    /// `delta.expected_version` (else [`StoreError::Conflict`] and nothing
    /// changes), writes meta and header, upserts rows, appends events, and
    /// increments the version. Returns the new version.
    fn commit(&mut self, delta: &Delta<'_>) -> Result<u64, StoreError>;

    /// Up to `limit` event lines starting at sequence number `from` (the
    /// first event is 0), in order.
    fn events(&self, run_id: &str, from: u64, limit: u64) -> Result<Vec<String>, StoreError>;

    /// Runs, newest first (by `created_ms`, then run id descending),
    /// optionally only those with the given status.
    fn list(&self, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError>;

    /// One page of [`RunStore::list`]: at most `limit` runs in its order
    /// (newest first), optionally only those with `status`, starting after
    /// run `before` (the last run of the previous page; `None`: the first
    /// page). [`StoreError::NotFound`] when `before` is not a run.
    ///
    /// Its cost is the page's, not the store's: stores read it from an
    /// index (the default, for stores without one, reads the whole listing).
    fn list_page(
        &self,
        status: Option<&str>,
        limit: u64,
        before: Option<&str>,
    ) -> Result<Vec<RunMeta>, StoreError> {
        let all = self.list(status)?;
        let start = match before {
            None => 0,
            Some(id) => {
                let cursor = self.meta(id)?;
                all.iter()
                    .position(|m| page_key(m) < page_key(&cursor))
                    .unwrap_or(all.len())
            }
        };
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(all.into_iter().skip(start).take(take).collect())
    }

    /// The listing record of one run. The default reads the whole run;
    /// stores override it with a one-row read.
    fn meta(&self, run_id: &str) -> Result<RunMeta, StoreError> {
        self.load(run_id).map(|s| s.meta)
    }

    /// Stores a checkpoint blob under a label. Overwriting a label replaces
    /// the blob but keeps the label's original position.
    fn put_checkpoint(&mut self, run_id: &str, label: &str, blob: &[u8]) -> Result<(), StoreError>;

    /// The checkpoint stored under `label`, if any.
    fn get_checkpoint(&self, run_id: &str, label: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The run's checkpoint labels in the order they were first stored.
    fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, StoreError>;

    /// Stores a new agent run record. [`StoreError::Exists`] when its id,
    /// or its cancellation id, is taken; [`StoreError::Invalid`] for an
    /// output or failure past its bound.
    fn create_agent_run(&mut self, run: &AgentRun) -> Result<(), StoreError>;

    /// Replaces a running agent run's record, in one transaction with the
    /// read of the stored one: a record that has settled is never changed
    /// ([`AgentUpdate::Settled`] hands it back), so of a cancel and the
    /// run's own end, whichever is written first is the one kept.
    /// [`StoreError::NotFound`] when absent.
    fn update_agent_run(&mut self, run: &AgentRun) -> Result<AgentUpdate, StoreError>;

    /// The agent run `id`, if stored.
    fn agent_run(&self, id: &str) -> Result<Option<AgentRun>, StoreError>;

    /// The agent run with cancellation id `id`, if any.
    fn agent_run_by_cancellation(&self, id: &str) -> Result<Option<AgentRun>, StoreError>;

    /// The agent runs linked to flow run `run_id`, oldest first.
    fn agent_runs_of_flow(&self, run_id: &str) -> Result<Vec<AgentRun>, StoreError>;

    /// Asks for the lease of `asked.run_id` as `asked.holder` at
    /// `asked.heartbeat_ms` (see [`LeaseGrant`]): written unless someone
    /// else holds a lease that has not lapsed, in one transaction with the
    /// read of the stored one, so of two askers exactly one gets it.
    fn acquire_lease(&mut self, asked: &Lease) -> Result<LeaseGrant, StoreError>;

    /// Gives up the lease of `run_id` if `holder` holds it (true), else
    /// changes nothing (false).
    fn release_lease(&mut self, run_id: &str, holder: &str) -> Result<bool, StoreError>;

    /// The stored lease of `run_id` (lapsed or not), if any.
    fn lease(&self, run_id: &str) -> Result<Option<Lease>, StoreError>;

    /// Waits until run `run` (any run when `None`) may have changed, or
    /// `timeout` has passed; `true` when woken by a change. Callers read
    /// the store again either way (a wake-up can be spurious). The default
    /// sleeps the whole `timeout` (the caller polls); a store that
    /// [pushes changes](RunStore::pushes_changes) returns as soon as a
    /// change commits.
    fn wait_for_change(&self, run: Option<&str>, timeout: Duration) -> Result<bool, StoreError> {
        let _ = run;
        std::thread::sleep(timeout);
        Ok(false)
    }

    /// Whether [`RunStore::wait_for_change`] wakes on commits (PostgreSQL's
    /// `LISTEN/NOTIFY`), so that a caller may wait long instead of polling.
    fn pushes_changes(&self) -> bool {
        false
    }
}

/// The listing's sort key: [`RunStore::list`] is descending by it.
fn page_key(m: &RunMeta) -> (i64, &str) {
    (m.created_ms, m.run_id.as_str())
}

/// Checks a delta against itself before any store work.
fn check_delta(delta: &Delta<'_>) -> Result<(), StoreError> {
    if delta.meta.run_id != delta.run_id {
        return Err(StoreError::Invalid(format!(
            "delta for run `{}` carries meta of run `{}`",
            delta.run_id, delta.meta.run_id
        )));
    }
    Ok(())
}

fn check_run_id(run_id: &str) -> Result<(), StoreError> {
    if run_id.is_empty() {
        return Err(StoreError::Invalid("run id is empty".to_owned()));
    }
    Ok(())
}
