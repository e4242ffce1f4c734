//! The SQLite store's schema: the versioned migrations and the creation of a
//! fresh database file.
//!
//! Versions ([`SCHEMA_VERSION`] is the newest):
//! - v1: the initial tables.
//! - v2: a blake3 checksum with every record (`runs.meta_sum`,
//!   `runs.header_sum`, and `sum` in `plans`, `run_rows`, `events`,
//!   `checkpoints`; see `store::sum`) and each run's number of rows
//!   and checkpoints (`runs.row_count`, `runs.checkpoint_count`, under
//!   `meta_sum`). Migrating from v1 computes the
//!   checksums of the existing records once, in the migration's transaction:
//!   what v1 wrote is accepted as written, and from then on a record without
//!   a checksum is damage.
//! - v3: the STRAT-GUARD tables (`guards`: one record per guarded resource;
//!   `guard_ledger`: its append-only, hash-chained entries, looked up by
//!   hash and by idempotency key). Ledger rows carry no blake3 sum: the
//!   chain is their integrity check (`stratumc guard verify`).
//! - v4: the `agent_runs` table (durable agent-run records: pid, process
//!   group, host, bounded output, usage, linked flow step, cancellation id,
//!   owner) and the `leases` table (one per driven run: holder, heartbeat,
//!   expiry), each record checksummed (`sum`). Nothing existing changes.
//!
//! A fresh store is built in a private temporary file next to the target and
//! hard-linked into place, so `stratum.db` never exists as an empty file
//! written by stratumc: an empty `stratum.db` is always damage (truncated, or
//! made by something else), never mistaken for a new store.
//!
//! Must never: open a database without bringing it to [`SCHEMA_VERSION`] in
//! one immediate transaction, or replace an existing file.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::super::{StoreError, sum};
use super::map_err;

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i64 = 4;

type Migration = fn(&Connection) -> Result<(), StoreError>;

/// Migrations, in order: `MIGRATIONS[i]` takes schema `i` to `i + 1`; later
/// steps are blocks of their own in [`migrate`] (`if found < N`).
const MIGRATIONS: &[Migration] = &[v1_initial, v2_checksums];

const V1: &str = "CREATE TABLE plans (
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
     CREATE INDEX checkpoints_by_position ON checkpoints (run_id, position);";

fn v1_initial(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(V1).map_err(map_err)
}

const V2: &str = "ALTER TABLE plans ADD COLUMN sum BLOB;
     ALTER TABLE runs ADD COLUMN meta_sum BLOB;
     ALTER TABLE runs ADD COLUMN header_sum BLOB;
     ALTER TABLE runs ADD COLUMN row_count INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE runs ADD COLUMN checkpoint_count INTEGER NOT NULL DEFAULT 0;
     UPDATE runs SET row_count = (SELECT COUNT(*) FROM run_rows WHERE run_rows.run_id = runs.run_id),
                     checkpoint_count =
                         (SELECT COUNT(*) FROM checkpoints WHERE checkpoints.run_id = runs.run_id);
     ALTER TABLE run_rows ADD COLUMN sum BLOB;
     ALTER TABLE events ADD COLUMN sum BLOB;
     ALTER TABLE checkpoints ADD COLUMN sum BLOB;";

const V3: &str = "CREATE TABLE guards (
         resource_id TEXT PRIMARY KEY NOT NULL,
         policy TEXT NOT NULL,
         checksum TEXT NOT NULL,
         state TEXT NOT NULL,
         graph_version INTEGER NOT NULL,
         version INTEGER NOT NULL,
         ledger_len INTEGER NOT NULL,
         head TEXT NOT NULL
     );
     CREATE TABLE guard_ledger (
         resource_id TEXT NOT NULL,
         seq INTEGER NOT NULL,
         hash TEXT NOT NULL,
         idempotency_key TEXT,
         json TEXT NOT NULL,
         PRIMARY KEY (resource_id, seq)
     ) WITHOUT ROWID;
     CREATE INDEX guard_ledger_by_hash ON guard_ledger (hash);
     CREATE UNIQUE INDEX guard_ledger_by_key ON guard_ledger (resource_id, idempotency_key)
         WHERE idempotency_key IS NOT NULL;";

/// Schema 3: the STRAT-GUARD tables (issue 17).
fn v3_guard(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(V3).map_err(map_err)
}

/// Adds the checksum columns and computes them for what v1 wrote.
fn v2_checksums(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(V2).map_err(map_err)?;
    backfill(
        conn,
        "SELECT hash, bytes FROM plans",
        "UPDATE plans SET sum = ?2 WHERE hash = ?1",
        |r| {
            let (hash, bytes): (String, Vec<u8>) = (r.get(0)?, r.get(1)?);
            let s = sum::plan(&hash, &bytes);
            Ok((vec![hash.into()], s.to_vec()))
        },
    )?;
    backfill(
        conn,
        "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version, event_count, header,
                row_count, checkpoint_count
         FROM runs",
        "UPDATE runs SET meta_sum = ?2, header_sum = ?3 WHERE run_id = ?1",
        |r| {
            let meta = super::meta_columns(r)?;
            let header: Vec<u8> = r.get(8)?;
            let meta_sum = sum::run_meta(&meta, r.get(6)?, [r.get(7)?, r.get(9)?, r.get(10)?]);
            let header_sum = sum::header(&meta.run_id, &header);
            Ok((
                vec![meta.run_id.into(), meta_sum.to_vec().into()],
                header_sum.to_vec(),
            ))
        },
    )?;
    backfill(
        conn,
        "SELECT run_id, key, blob FROM run_rows",
        "UPDATE run_rows SET sum = ?3 WHERE run_id = ?1 AND key = ?2",
        |r| {
            let (run_id, key, blob): (String, i64, Vec<u8>) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let s = sum::row(&run_id, key, &blob);
            Ok((vec![run_id.into(), key.into()], s.to_vec()))
        },
    )?;
    backfill(
        conn,
        "SELECT run_id, seq, json FROM events",
        "UPDATE events SET sum = ?3 WHERE run_id = ?1 AND seq = ?2",
        |r| {
            let (run_id, seq, json): (String, i64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let s = sum::event(&run_id, seq, &json);
            Ok((vec![run_id.into(), seq.into()], s.to_vec()))
        },
    )?;
    backfill(
        conn,
        "SELECT run_id, label, position, blob FROM checkpoints",
        "UPDATE checkpoints SET sum = ?3 WHERE run_id = ?1 AND label = ?2",
        |r| {
            let (run_id, label, position, blob): (String, String, i64, Vec<u8>) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let s = sum::checkpoint(&run_id, &label, position, &blob);
            Ok((vec![run_id.into(), label.into()], s.to_vec()))
        },
    )
}

const V4: &str = "CREATE TABLE agent_runs (
         id TEXT PRIMARY KEY NOT NULL,
         agent TEXT NOT NULL,
         status TEXT NOT NULL,
         pid INTEGER,
         pgid INTEGER,
         host TEXT NOT NULL,
         started_ms INTEGER NOT NULL,
         updated_ms INTEGER NOT NULL,
         output TEXT,
         failure TEXT,
         usage_tokens INTEGER,
         usage_usd REAL,
         flow_run_id TEXT,
         flow_step_id TEXT,
         flow_item INTEGER,
         cancellation_id TEXT UNIQUE,
         owner TEXT NOT NULL,
         sum BLOB NOT NULL
     );
     CREATE INDEX agent_runs_by_flow ON agent_runs (flow_run_id, started_ms);
     CREATE TABLE leases (
         run_id TEXT PRIMARY KEY NOT NULL,
         holder TEXT NOT NULL,
         host TEXT NOT NULL,
         pid INTEGER NOT NULL,
         heartbeat_ms INTEGER NOT NULL,
         expires_ms INTEGER NOT NULL,
         sum BLOB NOT NULL
     );";

/// Adds the agent-run and lease tables (nothing to backfill).
fn v4_agent_runs(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(V4).map_err(map_err)
}

type Keyed = (Vec<rusqlite::types::Value>, Vec<u8>);

/// Computes a value for every record `select` returns and writes it with
/// `update` (its parameters: the record's key values, then the value).
/// Only keys and checksums are held in memory, not the records.
fn backfill(
    conn: &Connection,
    select: &str,
    update: &str,
    compute: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Keyed>,
) -> Result<(), StoreError> {
    let computed: Vec<Keyed> = {
        let mut stmt = conn.prepare(select).map_err(map_err)?;
        let rows = stmt.query_map([], |r| compute(r)).map_err(map_err)?;
        rows.collect::<Result<_, _>>().map_err(|e| {
            StoreError::Corrupt(format!(
                "a record written by schema 1 cannot be read to compute its checksum: {e}"
            ))
        })?
    };
    let mut stmt = conn.prepare(update).map_err(map_err)?;
    for (mut key, value) in computed {
        key.push(value.into());
        stmt.execute(rusqlite::params_from_iter(key))
            .map_err(map_err)?;
    }
    Ok(())
}

/// Brings the schema to [`SCHEMA_VERSION`] in one immediate transaction.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
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
    for (from, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        step(&tx).map_err(|e| match e {
            StoreError::Corrupt(m) => StoreError::Corrupt(m),
            other => StoreError::Io(format!("migration from schema {from} failed: {other}")),
        })?;
    }
    if found < 3 {
        v3_guard(&tx).map_err(|e| StoreError::Io(format!("migration to schema 3 failed: {e}")))?;
    }
    if found < 4 {
        v4_agent_runs(&tx)
            .map_err(|e| StoreError::Io(format!("migration to schema 4 failed: {e}")))?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            "UPDATE meta SET schema_version = ?1",
            params![SCHEMA_VERSION],
        )
        .map_err(map_err)?;
    }
    tx.commit().map_err(map_err)
}

/// Creates the store at `path` when no file is there: the schema is written
/// to a private temporary file (mode 0600) that is then hard-linked to
/// `path`. Another process that created `path` first wins; its file is kept.
pub(super) fn create_fresh(path: &Path) -> Result<(), StoreError> {
    let temp = temp_path(path);
    let result = build_and_link(&temp, path);
    // the link (or the failure) leaves the temporary name to remove
    let _ = std::fs::remove_file(&temp);
    let _ = std::fs::remove_file(sidecar(&temp, "-journal"));
    result
}

fn build_and_link(temp: &Path, path: &Path) -> Result<(), StoreError> {
    create_private_file(temp)?;
    let mut conn = Connection::open(temp)
        .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", temp.display())))?;
    migrate(&mut conn)?;
    conn.close().map_err(|(_, e)| map_err(e))?;
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Io(format!(
            "cannot create {} (from {}): {e}; the store needs a local filesystem with hard links",
            path.display(),
            temp.display()
        ))),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "stratum.db".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.new-{}-{n}", std::process::id()))
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(path)
        .map(drop)
        .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", path.display())))
}
