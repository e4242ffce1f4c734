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
//! newest this binary knows. Opening migrates older files forward (v1 is the
//! initial schema) and refuses newer ones with [`StoreError::SchemaTooNew`].
//!
//! Must never: hold a transaction open across calls, or write outside a
//! `BEGIN IMMEDIATE` transaction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use super::{Delta, RunMeta, RunStore, Snapshot, StoreError, check_delta, check_run_id};

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// Migrations, in order: `MIGRATIONS[i]` takes schema `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // v1: the initial schema.
    "CREATE TABLE plans (
         hash TEXT PRIMARY KEY NOT NULL,
         bytes BLOB NOT NULL
     );
     CREATE TABLE runs (
         run_id TEXT PRIMARY KEY NOT NULL,
         plan_hash TEXT NOT NULL,
         flow TEXT NOT NULL,
         status TEXT NOT NULL,
         created_ms INTEGER NOT NULL,
         updated_ms INTEGER NOT NULL,
         version INTEGER NOT NULL,
         header BLOB NOT NULL,
         event_count INTEGER NOT NULL
     );
     CREATE INDEX runs_by_created ON runs (created_ms DESC, run_id DESC);
     CREATE INDEX runs_by_status ON runs (status, created_ms DESC, run_id DESC);
     CREATE TABLE run_rows (
         run_id TEXT NOT NULL,
         key INTEGER NOT NULL,
         blob BLOB NOT NULL,
         PRIMARY KEY (run_id, key)
     ) WITHOUT ROWID;
     CREATE TABLE events (
         run_id TEXT NOT NULL,
         seq INTEGER NOT NULL,
         json TEXT NOT NULL,
         PRIMARY KEY (run_id, seq)
     ) WITHOUT ROWID;
     CREATE TABLE checkpoints (
         run_id TEXT NOT NULL,
         label TEXT NOT NULL,
         position INTEGER NOT NULL,
         blob BLOB NOT NULL,
         PRIMARY KEY (run_id, label)
     );
     CREATE INDEX checkpoints_by_position ON checkpoints (run_id, position);",
];

const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The state directory: `$STRATUM_HOME`, else `~/.stratum`.
pub fn default_home() -> Result<PathBuf, StoreError> {
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
    /// Migrates an older schema; refuses a newer one. Commits are flushed to
    /// disk ([`Durability::PowerLoss`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::PowerLoss)
    }

    /// [`SqliteStore::open`] with a chosen durability.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        prepare_location(&path)?;
        let conn = Connection::open(&path)
            .map_err(|e| StoreError::Io(format!("cannot open {}: {e}", path.display())))?;
        let mut store = SqliteStore { conn, path };
        store.configure(durability)?;
        store.migrate()?;
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

    /// Brings the schema to [`SCHEMA_VERSION`] in one immediate transaction.
    fn migrate(&mut self) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_err)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS meta (schema_version INTEGER NOT NULL)")
            .map_err(map_err)?;
        let found: Option<i64> = tx
            .query_row("SELECT schema_version FROM meta", [], |r| r.get(0))
            .optional()
            .map_err(map_err)?;
        let found = match found {
            Some(v) => v,
            None => {
                tx.execute("INSERT INTO meta (schema_version) VALUES (0)", [])
                    .map_err(map_err)?;
                0
            }
        };
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < 0 {
            return Err(StoreError::Corrupt(format!(
                "schema version {found} in the meta table"
            )));
        }
        for (from, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(sql)
                .map_err(|e| StoreError::Io(format!("migration from schema {from} failed: {e}")))?;
        }
        if found < SCHEMA_VERSION {
            tx.execute("UPDATE meta SET schema_version = ?1", [SCHEMA_VERSION])
                .map_err(map_err)?;
        }
        tx.commit().map_err(map_err)
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

/// Creates the parent directory (0700) and the file (0600) if missing.
fn prepare_location(path: &Path) -> Result<(), StoreError> {
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
    if !path.exists() {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        options
            .open(path)
            .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", path.display())))?;
    }
    Ok(())
}

fn map_err(e: rusqlite::Error) -> StoreError {
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

fn meta_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunMeta> {
    Ok(RunMeta {
        run_id: r.get(0)?,
        plan_hash: r.get(1)?,
        flow: r.get(2)?,
        status: r.get(3)?,
        created_ms: r.get(4)?,
        updated_ms: r.get(5)?,
    })
}

fn upsert_rows(conn: &Connection, run_id: &str, rows: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO run_rows (run_id, key, blob) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id, key) DO UPDATE SET blob = excluded.blob",
        )
        .map_err(map_err)?;
    for (key, blob) in rows {
        let key = i64::try_from(*key)
            .map_err(|_| StoreError::Invalid(format!("row key {key} is out of range")))?;
        stmt.execute(params![run_id, key, blob]).map_err(map_err)?;
    }
    Ok(())
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
        .prepare_cached("INSERT INTO events (run_id, seq, json) VALUES (?1, ?2, ?3)")
        .map_err(map_err)?;
    for (i, json) in events.iter().enumerate() {
        let seq = first_seq
            .checked_add(i as i64)
            .ok_or_else(|| StoreError::Corrupt("event sequence overflow".to_owned()))?;
        stmt.execute(params![run_id, seq, json]).map_err(map_err)?;
    }
    Ok(())
}

impl RunStore for SqliteStore {
    fn put_plan(&mut self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let tx = self.write_tx()?;
        {
            let mut stmt = tx
                .prepare_cached("INSERT OR IGNORE INTO plans (hash, bytes) VALUES (?1, ?2)")
                .map_err(map_err)?;
            stmt.execute(params![hash, bytes]).map_err(map_err)?;
        }
        tx.commit().map_err(map_err)
    }

    fn get_plan(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT bytes FROM plans WHERE hash = ?1")
            .map_err(map_err)?;
        stmt.query_row([hash], |r| r.get(0))
            .optional()
            .map_err(map_err)
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
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO runs (run_id, plan_hash, flow, status, created_ms, updated_ms,
                                       version, header, event_count)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8)",
                )
                .map_err(map_err)?;
            stmt.execute(params![
                meta.run_id,
                meta.plan_hash,
                meta.flow,
                meta.status,
                meta.created_ms,
                meta.updated_ms,
                header,
                event_count
            ])
            .map_err(map_err)?;
        }
        upsert_rows(&tx, &meta.run_id, rows)?;
        append_events(&tx, &meta.run_id, 0, events)?;
        tx.commit().map_err(map_err)
    }

    fn version(&self, run_id: &str) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT version FROM runs WHERE run_id = ?1")
            .map_err(map_err)?;
        let v: Option<i64> = stmt
            .query_row([run_id], |r| r.get(0))
            .optional()
            .map_err(map_err)?;
        v.map(|v| v as u64)
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))
    }

    fn load(&self, run_id: &str) -> Result<Snapshot, StoreError> {
        // One read transaction, so the run row and its rows are consistent.
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let head = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms,
                            version, header, event_count
                     FROM runs WHERE run_id = ?1",
                )
                .map_err(map_err)?;
            stmt.query_row([run_id], |r| {
                Ok((
                    meta_from_row(r)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, Vec<u8>>(7)?,
                    r.get::<_, i64>(8)?,
                ))
            })
            .optional()
            .map_err(map_err)?
        };
        let Some((meta, version, header, event_count)) = head else {
            return Err(StoreError::NotFound(run_id.to_owned()));
        };
        let rows = {
            let mut stmt = tx
                .prepare_cached("SELECT key, blob FROM run_rows WHERE run_id = ?1 ORDER BY key")
                .map_err(map_err)?;
            let iter = stmt
                .query_map([run_id], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(map_err)?;
            let mut rows = Vec::new();
            for row in iter {
                let (key, blob) = row.map_err(map_err)?;
                let key = u64::try_from(key)
                    .map_err(|_| StoreError::Corrupt(format!("row key {key} of run `{run_id}`")))?;
                rows.push((key, blob));
            }
            rows
        };
        tx.finish().map_err(map_err)?;
        Ok(Snapshot {
            meta,
            version: to_u64(version, "version")?,
            header,
            rows,
            event_count: to_u64(event_count, "event count")?,
        })
    }

    fn commit(&mut self, delta: &Delta<'_>) -> Result<u64, StoreError> {
        check_delta(delta)?;
        let expected = to_i64(delta.expected_version, "expected version")?;
        let tx = self.write_tx()?;
        let current: Option<(i64, i64)> = {
            let mut stmt = tx
                .prepare_cached("SELECT version, event_count FROM runs WHERE run_id = ?1")
                .map_err(map_err)?;
            stmt.query_row([delta.run_id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(map_err)?
        };
        let Some((version, event_count)) = current else {
            return Err(StoreError::NotFound(delta.run_id.to_owned()));
        };
        if version != expected {
            return Err(StoreError::Conflict {
                expected: delta.expected_version,
                current: to_u64(version, "version")?,
            });
        }
        let new_version = version
            .checked_add(1)
            .ok_or_else(|| StoreError::Corrupt("version overflow".to_owned()))?;
        let new_count = event_count
            .checked_add(to_i64(delta.events.len() as u64, "event count")?)
            .ok_or_else(|| StoreError::Corrupt("event count overflow".to_owned()))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "UPDATE runs SET plan_hash = ?2, flow = ?3, status = ?4, updated_ms = ?5,
                                     version = ?6, header = ?7, event_count = ?8
                     WHERE run_id = ?1",
                )
                .map_err(map_err)?;
            stmt.execute(params![
                delta.run_id,
                delta.meta.plan_hash,
                delta.meta.flow,
                delta.meta.status,
                delta.meta.updated_ms,
                new_version,
                delta.header,
                new_count
            ])
            .map_err(map_err)?;
        }
        upsert_rows(&tx, delta.run_id, delta.rows)?;
        append_events(&tx, delta.run_id, event_count, delta.events)?;
        tx.commit().map_err(map_err)?;
        to_u64(new_version, "version")
    }

    fn events(&self, run_id: &str, from: u64, limit: u64) -> Result<Vec<String>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        Self::require_run(&tx, run_id)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let out = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT json FROM events WHERE run_id = ?1 AND seq >= ?2
                     ORDER BY seq LIMIT ?3",
                )
                .map_err(map_err)?;
            let iter = stmt
                .query_map(params![run_id, from, limit], |r| r.get::<_, String>(0))
                .map_err(map_err)?;
            iter.collect::<Result<Vec<_>, _>>().map_err(map_err)?
        };
        tx.finish().map_err(map_err)?;
        Ok(out)
    }

    fn list(&self, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError> {
        let sql = match status {
            Some(_) => {
                "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms FROM runs
                 WHERE status = ?1 ORDER BY created_ms DESC, run_id DESC"
            }
            None => {
                "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms FROM runs
                 ORDER BY created_ms DESC, run_id DESC"
            }
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(map_err)?;
        let rows = match status {
            Some(s) => stmt.query_map([s], meta_from_row),
            None => stmt.query_map([], meta_from_row),
        }
        .map_err(map_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(map_err)
    }

    fn meta(&self, run_id: &str) -> Result<RunMeta, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms FROM runs
                 WHERE run_id = ?1",
            )
            .map_err(map_err)?;
        stmt.query_row([run_id], meta_from_row)
            .optional()
            .map_err(map_err)?
            .ok_or_else(|| StoreError::NotFound(run_id.to_string()))
    }

    fn put_checkpoint(&mut self, run_id: &str, label: &str, blob: &[u8]) -> Result<(), StoreError> {
        let tx = self.write_tx()?;
        Self::require_run(&tx, run_id)?;
        let updated = {
            let mut stmt = tx
                .prepare_cached("UPDATE checkpoints SET blob = ?3 WHERE run_id = ?1 AND label = ?2")
                .map_err(map_err)?;
            stmt.execute(params![run_id, label, blob])
                .map_err(map_err)?
        };
        if updated == 0 {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO checkpoints (run_id, label, position, blob)
                     VALUES (?1, ?2,
                             (SELECT COALESCE(MAX(position) + 1, 0) FROM checkpoints
                              WHERE run_id = ?1),
                             ?3)",
                )
                .map_err(map_err)?;
            stmt.execute(params![run_id, label, blob])
                .map_err(map_err)?;
        }
        tx.commit().map_err(map_err)
    }

    fn get_checkpoint(&self, run_id: &str, label: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        Self::require_run(&tx, run_id)?;
        let blob = {
            let mut stmt = tx
                .prepare_cached("SELECT blob FROM checkpoints WHERE run_id = ?1 AND label = ?2")
                .map_err(map_err)?;
            stmt.query_row([run_id, label], |r| r.get(0))
                .optional()
                .map_err(map_err)?
        };
        tx.finish().map_err(map_err)?;
        Ok(blob)
    }

    fn checkpoint_labels(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        Self::require_run(&tx, run_id)?;
        let labels = {
            let mut stmt = tx
                .prepare_cached("SELECT label FROM checkpoints WHERE run_id = ?1 ORDER BY position")
                .map_err(map_err)?;
            let iter = stmt
                .query_map([run_id], |r| r.get::<_, String>(0))
                .map_err(map_err)?;
            iter.collect::<Result<Vec<_>, _>>().map_err(map_err)?
        };
        tx.finish().map_err(map_err)?;
        Ok(labels)
    }
}
