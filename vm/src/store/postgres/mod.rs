//! [`PostgresStore`]: the [`RunStore`] for teams — one PostgreSQL database
//! shared by every machine (`STRATUM_STORE=postgres://USER@HOST:PORT/DB`,
//! or `[store] url` in the operator's `stratum.toml`), with the SQLite
//! store's guarantees: one transaction per transition (the run's listing
//! record and header, the changed rows and the new events), the optimistic
//! version check (two writers on different machines resolve to one winner:
//! the second waits on the run's row lock and then gets
//! [`StoreError::Conflict`] with nothing changed), the same checksums
//! (`store::sum`) written with every record and verified on every read,
//! and schema versions with ordered migration steps (`schema`) and refusal
//! of a newer schema.
//!
//! Threading: the trait is synchronous and is called from inside tokio
//! runtimes (the MCP server, the UI), where blocking on a runtime of one's
//! own panics. So each store has a thread of its own that owns the
//! connection and a current-thread runtime (`conn`); the store's methods
//! send it a job over a channel and wait for the answer. Like a SQLite
//! connection, a store serves one caller at a time; open one per thread.
//!
//! Durability and isolation: a method returns only after PostgreSQL
//! answered its `COMMIT` (with the server's `synchronous_commit`, by
//! default: flushed to the server's disk). Writes run at READ COMMITTED and
//! lock what they decide on (`SELECT … FOR UPDATE`, advisory locks for
//! leases), so no write is refused for a serialization failure; reads of
//! several tables (a run and its rows, a page of events) run in one
//! REPEATABLE READ READ ONLY transaction and see one moment. When the
//! server cannot be reached, every call is a [`StoreError::Io`] naming the
//! host and port; a connection lost mid-request makes that request an
//! error (never a success), and the next request reconnects.
//!
//! Changes are announced with `NOTIFY stratum_changes` (payload: the run
//! id) inside each transition's transaction, so they are delivered when it
//! commits; [`RunStore::wait_for_change`] `LISTEN`s for them.
//!
//! Must never: acknowledge a write whose `COMMIT` did not succeed, hand out
//! a record that fails its checksum, or show a password.

mod agents;
mod conn;
mod guard;
mod runs;
mod scan;
mod schema;

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::guard::{GuardRecord, GuardStore, GuardWrite, LedgerRow};
use super::{
    AgentRun, AgentUpdate, Delta, Lease, LeaseGrant, RunMeta, RunStore, Snapshot, StoreError,
};
use conn::{Db, Target};

type Job = Box<dyn FnOnce(&mut Db) + Send>;

/// A [`RunStore`] on one PostgreSQL connection, served by a thread of its own.
pub struct PostgresStore {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    shown: String,
    /// The URL it was opened with (never a password: those come from the
    /// environment), for [`RunStore::reopen`].
    url: String,
    /// The schema version the database had when opened (0: it was new).
    found_schema: i64,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("at", &self.shown)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database of `url` (`postgres://USER@HOST:PORT/DB`,
    /// TLS per its `sslmode`), creating or migrating the schema; refuses a
    /// URL with a password (it comes from `PGPASSWORD` or a `PGPASSFILE`)
    /// and a database of a newer schema.
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let target = Target::parse(url)?;
        let shown = target.shown().to_owned();
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, opened) = mpsc::sync_channel(1);
        let worker = std::thread::Builder::new()
            .name("stratum-postgres".to_owned())
            .spawn(move || {
                let mut db = match Db::connect(target) {
                    Ok(db) => db,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                match schema::migrate(&mut db) {
                    Ok(found) => {
                        let _ = ready.send(Ok(found));
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                }
                for job in inbox {
                    job(&mut db);
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start the store's thread: {e}")))?;
        let found_schema = match opened.recv() {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => {
                let _ = worker.join();
                return Err(StoreError::Io(format!(
                    "the connection to the PostgreSQL store at {shown} stopped while opening"
                )));
            }
        };
        Ok(PostgresStore {
            jobs: Some(jobs),
            worker: Some(worker),
            shown,
            url: url.to_owned(),
            found_schema,
        })
    }

    /// `host:port/database` (never a password), for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The schema version the database had before this store opened it
    /// (0: it was empty and this store created the tables).
    pub fn found_schema(&self) -> i64 {
        self.found_schema
    }

    /// Scans the whole store: every record's checksum and every run's
    /// events against its event count (`stratumc store check`). Damage is
    /// reported, not returned as an error.
    pub fn check(&self) -> Result<super::StoreCheck, StoreError> {
        self.call(scan::check)
    }

    /// Runs `job` on the store's thread (reconnecting first when the
    /// connection was lost) and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Db) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let stopped = || {
            StoreError::Io(format!(
                "the connection thread of the PostgreSQL store at {} stopped; nothing more was written",
                self.shown
            ))
        };
        let (answer, answered) = mpsc::sync_channel(1);
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        jobs.send(Box::new(move |db: &mut Db| {
            let result = db.ensure_open().and_then(|()| job(db));
            let _ = answer.send(result);
        }))
        .map_err(|_| stopped())?;
        answered.recv().map_err(|_| stopped())?
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // closing the channel ends the thread's loop; it closes the connection
        drop(self.jobs.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// A [`Delta`] that can be sent to the store's thread.
struct OwnedDelta {
    run_id: String,
    expected_version: u64,
    meta: RunMeta,
    header: Vec<u8>,
    rows: Vec<(u64, Vec<u8>)>,
    events: Vec<String>,
}

impl OwnedDelta {
    fn of(d: &Delta<'_>) -> OwnedDelta {
        OwnedDelta {
            run_id: d.run_id.to_owned(),
            expected_version: d.expected_version,
            meta: d.meta.clone(),
            header: d.header.to_vec(),
            rows: d.rows.to_vec(),
            events: d.events.to_vec(),
        }
    }

    fn delta(&self) -> Delta<'_> {
        Delta {
            run_id: &self.run_id,
            expected_version: self.expected_version,
            meta: &self.meta,
            header: &self.header,
            rows: &self.rows,
            events: &self.events,
        }
    }
}

impl RunStore for PostgresStore {
    fn reopen(&self) -> Option<Result<Box<dyn RunStore>, StoreError>> {
        Some(PostgresStore::open(&self.url).map(|s| Box::new(s) as Box<dyn RunStore>))
    }

    fn put_plan(&mut self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let (hash, bytes) = (hash.to_owned(), bytes.to_vec());
        self.call(move |db| runs::put_plan(db, &hash, &bytes))
    }

    fn get_plan(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let hash = hash.to_owned();
        self.call(move |db| runs::get_plan(db, &hash))
    }

    fn create(
        &mut self,
        meta: &RunMeta,
        header: &[u8],
        rows: &[(u64, Vec<u8>)],
        events: &[String],
    ) -> Result<(), StoreError> {
        let (meta, header, rows, events) = (
            meta.clone(),
            header.to_vec(),
            rows.to_vec(),
            events.to_vec(),
        );
        self.call(move |db| runs::create(db, &meta, &header, &rows, &events))
    }

    fn load(&self, run_id: &str) -> Result<Snapshot, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| runs::load(db, &run_id))
    }

    fn version(&self, run_id: &str) -> Result<u64, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| runs::version(db, &run_id))
    }

    fn commit(&mut self, delta: &Delta<'_>) -> Result<u64, StoreError> {
        let owned = OwnedDelta::of(delta);
        self.call(move |db| runs::commit(db, &owned.delta()))
    }

    fn events(&self, run_id: &str, from: u64, limit: u64) -> Result<Vec<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| runs::events(db, &run_id, from, limit))
    }

    fn list(&self, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError> {
        let status = status.map(str::to_owned);
        self.call(move |db| runs::list(db, status.as_deref()))
    }

    fn list_page(
        &self,
        status: Option<&str>,
        limit: u64,
        before: Option<&str>,
    ) -> Result<Vec<RunMeta>, StoreError> {
        let (status, before) = (status.map(str::to_owned), before.map(str::to_owned));
        self.call(move |db| runs::list_page(db, status.as_deref(), limit, before.as_deref()))
    }

    fn meta(&self, run_id: &str) -> Result<RunMeta, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| runs::meta(db, &run_id))
    }

    fn put_checkpoint(&mut self, run_id: &str, label: &str, blob: &[u8]) -> Result<(), StoreError> {
        let (run_id, label, blob) = (run_id.to_owned(), label.to_owned(), blob.to_vec());
        self.call(move |db| runs::put_checkpoint(db, &run_id, &label, &blob))
    }

    fn get_checkpoint(&self, run_id: &str, label: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (run_id, label) = (run_id.to_owned(), label.to_owned());
        self.call(move |db| runs::get_checkpoint(db, &run_id, &label))
    }

    fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| runs::checkpoint_labels(db, &run_id))
    }

    fn create_agent_run(&mut self, run: &AgentRun) -> Result<(), StoreError> {
        let run = run.clone();
        self.call(move |db| agents::create_agent_run(db, &run))
    }

    fn update_agent_run(&mut self, run: &AgentRun) -> Result<AgentUpdate, StoreError> {
        let run = run.clone();
        self.call(move |db| agents::update_agent_run(db, &run))
    }

    fn agent_run(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        let id = id.to_owned();
        self.call(move |db| agents::agent_run(db, &id))
    }

    fn agent_run_by_cancellation(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        let id = id.to_owned();
        self.call(move |db| agents::agent_run_by_cancellation(db, &id))
    }

    fn agent_runs_of_flow(&self, run_id: &str) -> Result<Vec<AgentRun>, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| agents::agent_runs_of_flow(db, &run_id))
    }

    fn acquire_lease(&mut self, asked: &Lease) -> Result<LeaseGrant, StoreError> {
        let asked = asked.clone();
        self.call(move |db| agents::acquire_lease(db, &asked))
    }

    fn release_lease(&mut self, run_id: &str, holder: &str) -> Result<bool, StoreError> {
        let (run_id, holder) = (run_id.to_owned(), holder.to_owned());
        self.call(move |db| agents::release_lease(db, &run_id, &holder))
    }

    fn lease(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |db| agents::lease(db, &run_id))
    }

    fn wait_for_change(&self, run: Option<&str>, timeout: Duration) -> Result<bool, StoreError> {
        let run = run.map(str::to_owned);
        self.call(move |db| db.wait_for_change(run.as_deref(), timeout))
    }

    fn pushes_changes(&self) -> bool {
        true
    }
}

impl GuardStore for PostgresStore {
    fn guard(&self, resource_id: &str) -> Result<Option<GuardRecord>, StoreError> {
        let id = resource_id.to_owned();
        self.call(move |db| guard::guard(db, &id))
    }

    fn guard_write(&mut self, write: &GuardWrite<'_>) -> Result<u64, StoreError> {
        let record = write.record.clone();
        let expected_version = write.expected_version;
        let entries = write.entries.to_vec();
        self.call(move |db| {
            guard::guard_write(
                db,
                &GuardWrite {
                    record: &record,
                    expected_version,
                    entries: &entries,
                },
            )
        })
    }

    fn guard_ledger(
        &self,
        resource_id: &str,
        from: u64,
        limit: u64,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        let id = resource_id.to_owned();
        self.call(move |db| guard::guard_ledger(db, &id, from, limit))
    }

    fn guard_entry(&self, hash: &str) -> Result<Option<(String, LedgerRow)>, StoreError> {
        let hash = hash.to_owned();
        self.call(move |db| guard::guard_entry(db, &hash))
    }

    fn guard_by_key(&self, resource_id: &str, key: &str) -> Result<Option<LedgerRow>, StoreError> {
        let (id, key) = (resource_id.to_owned(), key.to_owned());
        self.call(move |db| guard::guard_by_key(db, &id, &key))
    }

    fn guard_ids(&self) -> Result<Vec<String>, StoreError> {
        self.call(guard::guard_ids)
    }
}
