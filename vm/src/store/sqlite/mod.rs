//! [`SqliteStore`]: the default [`RunStore`], an embedded SQLite database at
//! `$STRATUM_HOME/stratum.db` (default `~/.stratum/stratum.db`).
//!
//! Durability and sharing:
//! - WAL journal with `synchronous=FULL`: a commit returns only after the
//!   write-ahead log is synced, so an acknowledged transition survives a
//!   process crash *and* a power loss (`NORMAL` would only survive the former).
//!   WAL needs a local filesystem; do not put the store on NFS.
//!   `STRATUM_SYNC=normal` ([`Durability::Process`]) trades the power-loss
//!   guarantee for speed: commits skip the disk flush and survive a process
//!   crash (SIGKILL), not an operating-system crash or a power loss.
//! - Every write runs in `BEGIN IMMEDIATE`, so it takes the write lock before
//!   reading and waits (busy timeout 5 s) instead of failing on an upgrade.
//!   Several processes may share the file; version checks inside the write
//!   transaction make concurrent commits on one run resolve to one winner.
//! - A transition touches only its own rows and appends its own events
//!   (primary-key upserts and inserts), so its cost does not grow with the
//!   size of the run.
//!
//! Schema: the `meta` table holds `schema_version`; [`SCHEMA_VERSION`] is the
//! newest this binary knows. Opening migrates older files forward and refuses
//! newer ones with [`StoreError::SchemaTooNew`] (the versions: `schema`).
//!
//! Integrity: every record carries a blake3 checksum (`store::sum`) written
//! with it and verified on every read, so a damaged record is a
//! [`StoreError::Corrupt`] naming it, never a silently different value; event
//! pages are checked against the run's event count. A missing file is a new
//! store; an existing empty file is refused (`schema` explains why that is
//! never a store stratumc made). [`SqliteStore::check`] scans everything
//! (`stratumc store check`).
//!
//! Must never: hold a transaction open across calls, write outside a
//! `BEGIN IMMEDIATE` transaction, or hand out a record whose checksum does
//! not match.

mod agents;
mod guard;
mod scan;
mod schema;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use super::{
    AgentRun, AgentUpdate, Delta, Lease, LeaseGrant, RunMeta, RunStore, Snapshot, StoreError,
    check_delta, check_run_id, sum,
};
pub use scan::{Damage, Place, Problem, StoreCheck};
pub use schema::SCHEMA_VERSION;

const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The state directory an embedding host chose for this process, in place
/// of `$STRATUM_HOME` ([`set_home`]).
static HOME: std::sync::RwLock<Option<PathBuf>> = std::sync::RwLock::new(None);

/// Sets (with `None`: clears) the state directory [`default_home`] returns
/// for the whole process instead of `$STRATUM_HOME` — every store
/// connection, lease heartbeat, driver log and operator configuration
/// then uses it — and returns the one it replaces. For a host that
/// embeds the toolchain (the Python package's `store=`); the command line
/// never sets it.
pub fn set_home(dir: Option<PathBuf>) -> Option<PathBuf> {
    let mut home = HOME
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    std::mem::replace(&mut *home, dir)
}

/// The state directory: the one [`set_home`] chose, else `$STRATUM_HOME`,
/// else `~/.stratum`.
pub fn default_home() -> Result<PathBuf, StoreError> {
    let chosen = HOME
        .read()
        .map_or_else(|e| e.into_inner().clone(), |h| h.clone());
    if let Some(home) = chosen {
        return Ok(home);
    }
    if let Some(home) = std::env::var_os("STRATUM_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let user_home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            StoreError::Io("cannot find the state directory: set STRATUM_HOME (or HOME)".to_owned())
        })?;
    Ok(PathBuf::from(user_home).join(".stratum"))
}

/// A [`RunStore`] on one SQLite connection. Open one per thread or process.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

/// What an acknowledged commit survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A power loss or an operating-system crash: every commit is flushed to
    /// disk before it returns (`synchronous=FULL`, the default).
    PowerLoss,
    /// A crash of the process only (`synchronous=NORMAL`: the write-ahead log
    /// is flushed at checkpoints, not at every commit).
    Process,
}

impl Durability {
    /// Reads `STRATUM_SYNC`: unset or `full` → [`Durability::PowerLoss`],
    /// `normal` → [`Durability::Process`]; anything else is refused.
    pub fn from_env(value: Option<&str>) -> Result<Durability, StoreError> {
        match value.map(str::trim) {
            None | Some("" | "full") => Ok(Durability::PowerLoss),
            Some("normal") => Ok(Durability::Process),
            Some(other) => Err(StoreError::Io(format!(
                "STRATUM_SYNC={other:?} is not a durability: use `full` (the default: commits survive a power loss) or `normal` (commits survive a process crash, faster)"
            ))),
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `$STRATUM_HOME/stratum.db`,
    /// creating the state directory with mode 0700, with the durability that
    /// `STRATUM_SYNC` asks for (default `full`).
    pub fn open_default() -> Result<Self, StoreError> {
        let home = default_home()?;
        let durability = Durability::from_env(std::env::var("STRATUM_SYNC").ok().as_deref())?;
        Self::open_with(home.join("stratum.db"), durability)
    }

    /// Opens (creating if needed) the store at `path`, creating a missing
    /// parent directory with mode 0700 and a new database file with mode 0600.
    /// Migrates an older schema; refuses a newer one and an existing empty
    /// file. Commits are flushed to disk ([`Durability::PowerLoss`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::PowerLoss)
    }

    /// [`SqliteStore::open`] with a chosen durability.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if !existing_store(&path)? {
            prepare_parent(&path)?;
            schema::create_fresh(&path)?;
        }
        Self::connect(path, durability)
    }

    /// Opens the store at `path` only if the file exists (for `stratumc
    /// store check`, which must not create one).
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if !existing_store(&path)? {
            return Err(StoreError::Io(format!(
                "there is no run store at {} (set STRATUM_HOME to the directory that holds stratum.db)",
                path.display()
            )));
        }
        Self::connect(path, Durability::PowerLoss)
    }

    fn connect(path: PathBuf, durability: Durability) -> Result<Self, StoreError> {
        let conn = Connection::open(&path)
            .map_err(|e| StoreError::Io(format!("cannot open {}: {e}", path.display())))?;
        let mut store = SqliteStore { conn, path };
        store.configure(durability)?;
        schema::migrate(&mut store.conn)?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability this connection commits with (read back from SQLite).
    pub fn durability(&self) -> Result<Durability, StoreError> {
        let level: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(map_err)?;
        // SQLite's levels: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
        Ok(if level >= 2 {
            Durability::PowerLoss
        } else {
            Durability::Process
        })
    }

    fn configure(&self, durability: Durability) -> Result<(), StoreError> {
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(map_err)?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(map_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Io(format!(
                "cannot switch {} to WAL mode (got `{mode}`); the store needs a local filesystem",
                self.path.display()
            )));
        }
        self.conn
            .pragma_update(
                None,
                "synchronous",
                match durability {
                    Durability::PowerLoss => "FULL",
                    Durability::Process => "NORMAL",
                },
            )
            .map_err(map_err)?;
        self.conn
            .pragma_update(None, "foreign_keys", "OFF")
            .map_err(map_err)?;
        self.conn.set_prepared_statement_cache_capacity(32);
        Ok(())
    }

    fn write_tx(&mut self) -> Result<rusqlite::Transaction<'_>, StoreError> {
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_err)
    }

    fn run_exists(conn: &Connection, run_id: &str) -> Result<bool, StoreError> {
        let mut stmt = conn
            .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
            .map_err(map_err)?;
        stmt.exists([run_id]).map_err(map_err)
    }

    fn require_run(conn: &Connection, run_id: &str) -> Result<(), StoreError> {
        if Self::run_exists(conn, run_id)? {
            Ok(())
        } else {
            Err(StoreError::NotFound(run_id.to_owned()))
        }
    }
}

/// Whether `path` holds a store: `false` when there is no file (a new store
/// is made), `true` for a non-empty file; an empty file is refused.
fn existing_store(path: &Path) -> Result<bool, StoreError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => Err(StoreError::Corrupt(format!(
            "{} exists but is empty (0 bytes); stratumc never leaves a store empty, so it was truncated or made by another program. Restore it from a backup, or move it away to start a new store",
            path.display()
        ))),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io(format!(
            "cannot open {}: {e}",
            path.display()
        ))),
    }
}

/// Creates the parent directory (0700) if missing.
fn prepare_parent(path: &Path) -> Result<(), StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(parent)
            .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", parent.display())))?;
    }
    Ok(())
}

fn map_err(e: rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    if matches!(
        e,
        E::InvalidColumnType(..) | E::FromSqlConversionFailure(..) | E::IntegralValueOutOfRange(..)
    ) {
        // a column holds a value of another type than the schema writes: damage
        return StoreError::Corrupt(format!("a stored value has the wrong type: {e}"));
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            StoreError::Corrupt(e.to_string())
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Io(format!(
            "the store stayed locked by another process for over {} s: {e}",
            BUSY_TIMEOUT.as_secs()
        )),
        _ => StoreError::Io(e.to_string()),
    }
}

fn to_i64(v: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Invalid(format!("{what} {v} is out of range")))
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative {what} {v}")))
}

/// The `runs` columns [`MetaRecord`] reads, in its order.
const META_COLUMNS: &str = "run_id, plan_hash, flow, status, created_ms, updated_ms, version,
                             event_count, meta_sum, row_count, checkpoint_count";

/// A run's listing record as stored, with what its checksum covers.
struct MetaRecord {
    meta: RunMeta,
    version: i64,
    event_count: i64,
    sum: Option<Vec<u8>>,
    /// How many rows the run has (each commit adds the rows it inserted).
    row_count: i64,
    /// How many checkpoint labels the run has.
    checkpoint_count: i64,
}

impl MetaRecord {
    /// Reads the [`META_COLUMNS`] starting at column 0.
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MetaRecord> {
        Ok(MetaRecord {
            meta: meta_columns(r)?,
            version: r.get(6)?,
            event_count: r.get(7)?,
            sum: r.get(8)?,
            row_count: r.get(9)?,
            checkpoint_count: r.get(10)?,
        })
    }

    fn counts(&self) -> [i64; 3] {
        [self.event_count, self.row_count, self.checkpoint_count]
    }

    /// Writes the record back (a new meta, version or counts).
    fn write(&self, conn: &Connection) -> Result<(), StoreError> {
        let meta_sum = sum::run_meta(&self.meta, self.version, self.counts());
        let mut stmt = conn
            .prepare_cached(
                "UPDATE runs SET plan_hash = ?2, flow = ?3, status = ?4, updated_ms = ?5,
                     version = ?6, event_count = ?7, row_count = ?8, checkpoint_count = ?9,
                     meta_sum = ?10
                 WHERE run_id = ?1",
            )
            .map_err(map_err)?;
        stmt.execute(params![
            self.meta.run_id,
            self.meta.plan_hash,
            self.meta.flow,
            self.meta.status,
            self.meta.updated_ms,
            self.version,
            self.event_count,
            self.row_count,
            self.checkpoint_count,
            &meta_sum[..]
        ])
        .map_err(map_err)?;
        Ok(())
    }

    /// The record, once its checksum matched.
    fn verified(self) -> Result<MetaRecord, StoreError> {
        let computed = sum::run_meta(&self.meta, self.version, self.counts());
        sum::verify(self.sum.as_deref(), &computed, || {
            format!("the listing record of run `{}`", self.meta.run_id)
        })?;
        Ok(self)
    }
}

fn read_meta(conn: &Connection, run_id: &str) -> Result<MetaRecord, StoreError> {
    let sql = format!("SELECT {META_COLUMNS} FROM runs WHERE run_id = ?1");
    let mut stmt = conn.prepare_cached(&sql).map_err(map_err)?;
    stmt.query_row([run_id], MetaRecord::from_row)
        .optional()
        .map_err(map_err)?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?
        .verified()
}

/// Writes rows (replacing those with the same key); returns how many were
/// new, for the run's row count.
fn upsert_rows(
    conn: &Connection,
    run_id: &str,
    rows: &[(u64, Vec<u8>)],
) -> Result<i64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let mut update = conn
        .prepare_cached("UPDATE run_rows SET blob = ?3, sum = ?4 WHERE run_id = ?1 AND key = ?2")
        .map_err(map_err)?;
    let mut insert = conn
        .prepare_cached("INSERT INTO run_rows (run_id, key, blob, sum) VALUES (?1, ?2, ?3, ?4)")
        .map_err(map_err)?;
    let mut inserted = 0;
    for (key, blob) in rows {
        let key = i64::try_from(*key)
            .map_err(|_| StoreError::Invalid(format!("row key {key} is out of range")))?;
        let s = sum::row(run_id, key, blob);
        let args = params![run_id, key, blob, &s[..]];
        if update.execute(args).map_err(map_err)? == 0 {
            insert.execute(args).map_err(map_err)?;
            inserted += 1;
        }
    }
    Ok(inserted)
}

fn append_events(
    conn: &Connection,
    run_id: &str,
    first_seq: i64,
    events: &[String],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut stmt = conn
        .prepare_cached("INSERT INTO events (run_id, seq, json, sum) VALUES (?1, ?2, ?3, ?4)")
        .map_err(map_err)?;
    for (i, json) in events.iter().enumerate() {
        let seq = first_seq
            .checked_add(i as i64)
            .ok_or_else(|| StoreError::Corrupt("event sequence overflow".to_owned()))?;
        let s = sum::event(run_id, seq, json);
        stmt.execute(params![run_id, seq, json, &s[..]])
            .map_err(map_err)?;
    }
    Ok(())
}

/// Inserts a new run's listing record and header.
fn write_run(
    conn: &Connection,
    meta: &RunMeta,
    version: i64,
    counts: (i64, i64),
    header: &[u8],
) -> Result<(), StoreError> {
    let (event_count, row_count) = counts;
    let meta_sum = sum::run_meta(meta, version, [event_count, row_count, 0]);
    let header_sum = sum::header(&meta.run_id, header);
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO runs (run_id, plan_hash, flow, status, created_ms, updated_ms,
                               version, header, event_count, meta_sum, header_sum, row_count,
                               checkpoint_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0)",
        )
        .map_err(map_err)?;
    stmt.execute(params![
        meta.run_id,
        meta.plan_hash,
        meta.flow,
        meta.status,
        meta.created_ms,
        meta.updated_ms,
        version,
        header,
        event_count,
        &meta_sum[..],
        &header_sum[..],
        row_count
    ])
    .map_err(map_err)?;
    Ok(())
}

fn write_header(conn: &Connection, run_id: &str, header: &[u8]) -> Result<(), StoreError> {
    let s = sum::header(run_id, header);
    let mut stmt = conn
        .prepare_cached("UPDATE runs SET header = ?2, header_sum = ?3 WHERE run_id = ?1")
        .map_err(map_err)?;
    stmt.execute(params![run_id, header, &s[..]])
        .map_err(map_err)?;
    Ok(())
}

/// A run's header, verified.
fn read_header(conn: &Connection, run_id: &str) -> Result<Vec<u8>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT header, header_sum FROM runs WHERE run_id = ?1")
        .map_err(map_err)?;
    let (header, stored): (Vec<u8>, Option<Vec<u8>>) = stmt
        .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(map_err)?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    sum::verify(stored.as_deref(), &sum::header(run_id, &header), || {
        format!("the header of run `{run_id}`")
    })?;
    Ok(header)
}

/// A run's rows in key order, each verified.
fn read_rows(conn: &Connection, run_id: &str) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT key, blob, sum FROM run_rows WHERE run_id = ?1 ORDER BY key")
        .map_err(map_err)?;
    let iter = stmt
        .query_map([run_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, Option<Vec<u8>>>(2)?,
            ))
        })
        .map_err(map_err)?;
    let mut rows: Vec<(u64, Vec<u8>)> = Vec::new();
    for row in iter {
        let (key, blob, stored) = row.map_err(map_err)?;
        sum::verify(stored.as_deref(), &sum::row(run_id, key, &blob), || {
            format!("row {key} of run `{run_id}`")
        })?;
        let key = u64::try_from(key)
            .map_err(|_| StoreError::Corrupt(format!("row key {key} of run `{run_id}`")))?;
        if rows.last().is_some_and(|(last, _)| *last >= key) {
            return Err(StoreError::Corrupt(format!(
                "the rows of run `{run_id}` are out of key order at row {key} (a damaged index)"
            )));
        }
        rows.push((key, blob));
    }
    Ok(rows)
}

impl RunStore for SqliteStore {
    fn reopen(&self) -> Option<Result<Box<dyn RunStore>, StoreError>> {
        let opened = self
            .durability()
            .and_then(|d| SqliteStore::connect(self.path.clone(), d));
        Some(opened.map(|s| Box::new(s) as Box<dyn RunStore>))
    }

    fn put_plan(&mut self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let s = sum::plan(hash, bytes);
        let tx = self.write_tx()?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO plans (hash, bytes, sum) VALUES (?1, ?2, ?3)",
                )
                .map_err(map_err)?;
            stmt.execute(params![hash, bytes, &s[..]])
                .map_err(map_err)?;
        }
        tx.commit().map_err(map_err)
    }

    fn get_plan(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT bytes, sum FROM plans WHERE hash = ?1")
            .map_err(map_err)?;
        let found: Option<(Vec<u8>, Option<Vec<u8>>)> = stmt
            .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(map_err)?;
        let Some((bytes, stored)) = found else {
            return Ok(None);
        };
        sum::verify(stored.as_deref(), &sum::plan(hash, &bytes), || {
            format!("plan {hash}")
        })?;
        Ok(Some(bytes))
    }

    fn create(
        &mut self,
        meta: &RunMeta,
        header: &[u8],
        rows: &[(u64, Vec<u8>)],
        events: &[String],
    ) -> Result<(), StoreError> {
        check_run_id(&meta.run_id)?;
        let event_count = to_i64(events.len() as u64, "event count")?;
        let tx = self.write_tx()?;
        if Self::run_exists(&tx, &meta.run_id)? {
            return Err(StoreError::Exists(meta.run_id.clone()));
        }
        let row_count = upsert_rows(&tx, &meta.run_id, rows)?;
        append_events(&tx, &meta.run_id, 0, events)?;
        write_run(&tx, meta, 1, (event_count, row_count), header)?;
        tx.commit().map_err(map_err)
    }

    fn version(&self, run_id: &str) -> Result<u64, StoreError> {
        to_u64(read_meta(&self.conn, run_id)?.version, "version")
    }

    fn load(&self, run_id: &str) -> Result<Snapshot, StoreError> {
        // One read transaction, so the run row and its rows are consistent.
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let record = read_meta(&tx, run_id)?;
        let header = read_header(&tx, run_id)?;
        let rows = read_rows(&tx, run_id)?;
        tx.finish().map_err(map_err)?;
        if rows.len() as u64 != to_u64(record.row_count, "row count")? {
            return Err(StoreError::Corrupt(format!(
                "run `{run_id}` has {} rows, but {} are stored; rows were lost or moved",
                record.row_count,
                rows.len()
            )));
        }
        Ok(Snapshot {
            meta: record.meta,
            version: to_u64(record.version, "version")?,
            header,
            rows,
            event_count: to_u64(record.event_count, "event count")?,
        })
    }

    fn commit(&mut self, delta: &Delta<'_>) -> Result<u64, StoreError> {
        check_delta(delta)?;
        let expected = to_i64(delta.expected_version, "expected version")?;
        let tx = self.write_tx()?;
        let current = read_meta(&tx, delta.run_id)?;
        if current.version != expected {
            return Err(StoreError::Conflict {
                expected: delta.expected_version,
                current: to_u64(current.version, "version")?,
            });
        }
        let new_version = current
            .version
            .checked_add(1)
            .ok_or_else(|| StoreError::Corrupt("version overflow".to_owned()))?;
        let new_count = current
            .event_count
            .checked_add(to_i64(delta.events.len() as u64, "event count")?)
            .ok_or_else(|| StoreError::Corrupt("event count overflow".to_owned()))?;
        let inserted = upsert_rows(&tx, delta.run_id, delta.rows)?;
        append_events(&tx, delta.run_id, current.event_count, delta.events)?;
        let next = MetaRecord {
            meta: RunMeta {
                created_ms: current.meta.created_ms,
                ..delta.meta.clone()
            },
            version: new_version,
            event_count: new_count,
            row_count: current
                .row_count
                .checked_add(inserted)
                .ok_or_else(|| StoreError::Corrupt("row count overflow".to_owned()))?,
            checkpoint_count: current.checkpoint_count,
            sum: None,
        };
        next.write(&tx)?;
        write_header(&tx, delta.run_id, delta.header)?;
        tx.commit().map_err(map_err)?;
        to_u64(new_version, "version")
    }

    fn events(&self, run_id: &str, from: u64, limit: u64) -> Result<Vec<String>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let record = read_meta(&tx, run_id)?;
        let count = to_u64(record.event_count, "event count")?;
        let expected = count.saturating_sub(from).min(limit);
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let out = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT seq, json, sum FROM events WHERE run_id = ?1 AND seq >= ?2
                     ORDER BY seq LIMIT ?3",
                )
                .map_err(map_err)?;
            let iter = stmt
                .query_map(params![run_id, from, limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<Vec<u8>>>(2)?,
                    ))
                })
                .map_err(map_err)?;
            let mut out = Vec::new();
            for (i, item) in iter.enumerate() {
                let (seq, json, stored) = item.map_err(map_err)?;
                sum::verify(stored.as_deref(), &sum::event(run_id, seq, &json), || {
                    format!("event {seq} of run `{run_id}`")
                })?;
                let want = from.saturating_add(i as i64);
                if seq != want {
                    return Err(StoreError::Corrupt(format!(
                        "event {want} of run `{run_id}` is missing (the next stored one is {seq})"
                    )));
                }
                out.push(json);
            }
            out
        };
        tx.finish().map_err(map_err)?;
        if out.len() as u64 != expected {
            return Err(StoreError::Corrupt(format!(
                "run `{run_id}` records {count} events, but only {} of the {expected} asked for from {from} are stored",
                out.len()
            )));
        }
        Ok(out)
    }

    fn list(&self, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError> {
        // NOT INDEXED: the listing comes from the checksummed table records, so
        // a damaged secondary index cannot hide a run from it. The status
        // filter applies after each record's checksum is verified: a damaged
        // status must be an error, not a run that silently drops out of a
        // filtered listing.
        let sql = format!(
            "SELECT {META_COLUMNS} FROM runs NOT INDEXED ORDER BY created_ms DESC, run_id DESC"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_err)?;
        let rows = stmt.query_map([], MetaRecord::from_row).map_err(map_err)?;
        let mut out = Vec::new();
        for row in rows {
            let meta = row.map_err(map_err)?.verified()?.meta;
            if status.is_none_or(|s| meta.status == s) {
                out.push(meta);
            }
        }
        Ok(out)
    }

    fn list_page(
        &self,
        status: Option<&str>,
        limit: u64,
        before: Option<&str>,
    ) -> Result<Vec<RunMeta>, StoreError> {
        // Unlike `list`, a page is read through an index (`runs_by_created`,
        // or `runs_by_status` with a status), so its cost does not grow with
        // the store; each record is still verified, and a record whose
        // verified status is not the one its index entry promised is damage.
        // A damaged index can leave a run out of a page: `store check` and
        // the unpaged `list` read the table itself.
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let cursor = before.map(|id| read_meta(&tx, id)).transpose()?;
        let index = if status.is_some() {
            "runs_by_status"
        } else {
            "runs_by_created"
        };
        let mut filters = Vec::new();
        if status.is_some() {
            filters.push("status = :status");
        }
        if cursor.is_some() {
            filters.push("(created_ms, run_id) < (:created, :run)");
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", filters.join(" AND "))
        };
        let sql = format!(
            "SELECT {META_COLUMNS} FROM runs INDEXED BY {index} {filter}
             ORDER BY created_ms DESC, run_id DESC LIMIT :limit"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let out = {
            let mut stmt = tx.prepare_cached(&sql).map_err(map_err)?;
            let mut args: Vec<(&str, &dyn rusqlite::ToSql)> = vec![(":limit", &limit)];
            if let Some(s) = &status {
                args.push((":status", s));
            }
            if let Some(c) = &cursor {
                args.push((":created", &c.meta.created_ms));
                args.push((":run", &c.meta.run_id));
            }
            let rows = stmt
                .query_map(args.as_slice(), MetaRecord::from_row)
                .map_err(map_err)?;
            let mut out = Vec::new();
            for row in rows {
                let meta = row.map_err(map_err)?.verified()?.meta;
                if let Some(s) = status
                    && meta.status != s
                {
                    return Err(StoreError::Corrupt(format!(
                        "run `{}` is listed under status `{s}` but its record says `{}` (a damaged index)",
                        meta.run_id, meta.status
                    )));
                }
                out.push(meta);
            }
            out
        };
        tx.finish().map_err(map_err)?;
        Ok(out)
    }

    fn meta(&self, run_id: &str) -> Result<RunMeta, StoreError> {
        Ok(read_meta(&self.conn, run_id)?.meta)
    }

    fn put_checkpoint(&mut self, run_id: &str, label: &str, blob: &[u8]) -> Result<(), StoreError> {
        let tx = self.write_tx()?;
        let mut record = read_meta(&tx, run_id)?;
        let position: i64 = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT COALESCE(
                         (SELECT position FROM checkpoints WHERE run_id = ?1 AND label = ?2),
                         (SELECT COALESCE(MAX(position) + 1, 0) FROM checkpoints WHERE run_id = ?1))",
                )
                .map_err(map_err)?;
            stmt.query_row([run_id, label], |r| r.get(0))
                .map_err(map_err)?
        };
        let s = sum::checkpoint(run_id, label, position, blob);
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO checkpoints (run_id, label, position, blob, sum)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (run_id, label) DO UPDATE SET
                         blob = excluded.blob, sum = excluded.sum",
                )
                .map_err(map_err)?;
            stmt.execute(params![run_id, label, position, blob, &s[..]])
                .map_err(map_err)?;
        }
        if position >= record.checkpoint_count {
            record.checkpoint_count = position + 1;
            record.write(&tx)?;
        }
        tx.commit().map_err(map_err)
    }

    fn get_checkpoint(&self, run_id: &str, label: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        Self::require_run(&tx, run_id)?;
        let found: Option<(i64, Vec<u8>, Option<Vec<u8>>)> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT position, blob, sum FROM checkpoints WHERE run_id = ?1 AND label = ?2",
                )
                .map_err(map_err)?;
            stmt.query_row([run_id, label], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
                .map_err(map_err)?
        };
        tx.finish().map_err(map_err)?;
        let Some((position, blob, stored)) = found else {
            // a damaged label or index reads as absent: the run's checkpoints,
            // each verified, must agree that `label` is not one of them
            if self.checkpoint_labels(run_id)?.iter().any(|l| l == label) {
                return Err(StoreError::Corrupt(format!(
                    "checkpoint `{label}` of run `{run_id}` is listed but cannot be looked up (a damaged index)"
                )));
            }
            return Ok(None);
        };
        let computed = sum::checkpoint(run_id, label, position, &blob);
        sum::verify(stored.as_deref(), &computed, || {
            format!("checkpoint `{label}` of run `{run_id}`")
        })?;
        Ok(Some(blob))
    }

    fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let record = read_meta(&tx, run_id)?;
        let labels = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT label, position, blob, sum FROM checkpoints WHERE run_id = ?1
                     ORDER BY position",
                )
                .map_err(map_err)?;
            let iter = stmt
                .query_map([run_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, Option<Vec<u8>>>(3)?,
                    ))
                })
                .map_err(map_err)?;
            let mut labels = Vec::new();
            for item in iter {
                let (label, position, blob, stored) = item.map_err(map_err)?;
                let computed = sum::checkpoint(run_id, &label, position, &blob);
                sum::verify(stored.as_deref(), &computed, || {
                    format!("checkpoint `{label}` of run `{run_id}`")
                })?;
                if position != labels.len() as i64 {
                    return Err(StoreError::Corrupt(format!(
                        "checkpoint {} of run `{run_id}` is missing (the next stored one is `{label}`)",
                        labels.len()
                    )));
                }
                labels.push(label);
            }
            labels
        };
        tx.finish().map_err(map_err)?;
        if labels.len() as i64 != record.checkpoint_count {
            return Err(StoreError::Corrupt(format!(
                "run `{run_id}` has {} checkpoints, but {} are stored",
                record.checkpoint_count,
                labels.len()
            )));
        }
        Ok(labels)
    }

    fn create_agent_run(&mut self, run: &AgentRun) -> Result<(), StoreError> {
        self.create_agent_run_impl(run)
    }

    fn update_agent_run(&mut self, run: &AgentRun) -> Result<AgentUpdate, StoreError> {
        self.update_agent_run_impl(run)
    }

    fn agent_run(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        self.agent_run_impl(id)
    }

    fn agent_run_by_cancellation(&self, id: &str) -> Result<Option<AgentRun>, StoreError> {
        self.agent_run_by_cancellation_impl(id)
    }

    fn agent_runs_of_flow(&self, run_id: &str) -> Result<Vec<AgentRun>, StoreError> {
        self.agent_runs_of_flow_impl(run_id)
    }

    fn acquire_lease(&mut self, asked: &Lease) -> Result<LeaseGrant, StoreError> {
        self.acquire_lease_impl(asked)
    }

    fn release_lease(&mut self, run_id: &str, holder: &str) -> Result<bool, StoreError> {
        self.release_lease_impl(run_id, holder)
    }

    fn lease(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
        self.lease_impl(run_id)
    }
}

/// The listing record in columns 0–5 of a row (`run_id, plan_hash, flow,
/// status, created_ms, updated_ms`: every query of `runs` starts so).
fn meta_columns(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunMeta> {
    Ok(RunMeta {
        run_id: r.get(0)?,
        plan_hash: r.get(1)?,
        flow: r.get(2)?,
        status: r.get(3)?,
        created_ms: r.get(4)?,
        updated_ms: r.get(5)?,
    })
}
