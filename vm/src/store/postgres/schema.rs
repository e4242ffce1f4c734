//! The PostgreSQL store's schema: its versions and the ordered steps that
//! build and migrate it.
//!
//! Version numbers are the SQLite store's ([`SCHEMA_VERSION`]): the same
//! number means the same records in both stores (what a copier from one to
//! the other relies on). The PostgreSQL store starts at schema 4, whose
//! step creates every table of SQLite's schema 4 at once (checksums, guard
//! ledgers, agent runs and leases included); a later schema is one more
//! entry of [`STEPS`].
//!
//! The version lives in the one-row table `stratum_schema`. Opening runs
//! the missing steps in one transaction under an advisory lock (two
//! processes opening a new database at once do not both build it) and
//! refuses a database of a newer schema with [`StoreError::SchemaTooNew`].
//! Text keys are `COLLATE "C"`, so listings sort by bytes as SQLite's do.
//!
//! Must never: change a table outside a step, or run a step twice.

use super::super::{SCHEMA_VERSION, StoreError};
use super::conn::{Db, column};

/// The advisory lock key migrations hold ("stratum" in ASCII, as a number).
const MIGRATION_LOCK: i64 = 0x73_7472_6174_756d;

/// One schema step: the version it brings the database to, and its SQL.
struct Step {
    to: i64,
    sql: &'static str,
}

/// Every step, in order.
const STEPS: &[Step] = &[Step { to: 4, sql: V4 }];

const V4: &str = r#"
CREATE TABLE plans (
    hash TEXT COLLATE "C" PRIMARY KEY,
    bytes BYTEA NOT NULL,
    sum BYTEA
);
CREATE TABLE runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    plan_hash TEXT NOT NULL,
    flow TEXT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    version BIGINT NOT NULL,
    header BYTEA NOT NULL,
    event_count BIGINT NOT NULL,
    row_count BIGINT NOT NULL,
    checkpoint_count BIGINT NOT NULL,
    meta_sum BYTEA,
    header_sum BYTEA
);
CREATE INDEX runs_by_created ON runs (created_ms DESC, run_id DESC);
CREATE INDEX runs_by_status ON runs (status, created_ms DESC, run_id DESC);
CREATE TABLE run_rows (
    run_id TEXT COLLATE "C" NOT NULL,
    key BIGINT NOT NULL,
    blob BYTEA NOT NULL,
    sum BYTEA,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE events (
    run_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    json TEXT NOT NULL,
    sum BYTEA,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE checkpoints (
    run_id TEXT COLLATE "C" NOT NULL,
    label TEXT COLLATE "C" NOT NULL,
    position BIGINT NOT NULL,
    blob BYTEA NOT NULL,
    sum BYTEA,
    PRIMARY KEY (run_id, label)
);
CREATE INDEX checkpoints_by_position ON checkpoints (run_id, position);
CREATE TABLE guards (
    resource_id TEXT COLLATE "C" PRIMARY KEY,
    policy TEXT NOT NULL,
    checksum TEXT NOT NULL,
    state TEXT NOT NULL,
    graph_version BIGINT NOT NULL,
    version BIGINT NOT NULL,
    ledger_len BIGINT NOT NULL,
    head TEXT NOT NULL
);
CREATE TABLE guard_ledger (
    resource_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    hash TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT COLLATE "C",
    json TEXT NOT NULL,
    PRIMARY KEY (resource_id, seq)
);
CREATE INDEX guard_ledger_by_hash ON guard_ledger (hash);
CREATE UNIQUE INDEX guard_ledger_by_key ON guard_ledger (resource_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE agent_runs (
    id TEXT COLLATE "C" PRIMARY KEY,
    agent TEXT NOT NULL,
    status TEXT NOT NULL,
    pid BIGINT,
    pgid BIGINT,
    host TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    output TEXT,
    failure TEXT,
    usage_tokens BIGINT,
    usage_usd DOUBLE PRECISION,
    flow_run_id TEXT COLLATE "C",
    flow_step_id TEXT,
    flow_item BIGINT,
    cancellation_id TEXT COLLATE "C" UNIQUE,
    owner TEXT NOT NULL,
    sum BYTEA NOT NULL
);
CREATE INDEX agent_runs_by_flow ON agent_runs (flow_run_id, started_ms);
CREATE TABLE leases (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    holder TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    sum BYTEA NOT NULL
);
"#;

/// Brings the database to [`SCHEMA_VERSION`]; returns the version found
/// before (0: a new database).
pub(super) fn migrate(db: &mut Db) -> Result<i64, StoreError> {
    db.write(|db| {
        db.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        db.batch(
            "CREATE TABLE IF NOT EXISTS stratum_schema (
                 one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                 version BIGINT NOT NULL
             )",
        )?;
        let found = match db.query_opt("SELECT version FROM stratum_schema", &[])? {
            Some(row) => column::<i64>(&row, 0)?,
            None => {
                db.execute("INSERT INTO stratum_schema (version) VALUES (0)", &[])?;
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
                "schema version {found} in the stratum_schema table"
            )));
        }
        if found > 0 && found < STEPS[0].to {
            return Err(StoreError::Corrupt(format!(
                "schema version {found} in the stratum_schema table; the PostgreSQL store starts at schema {}",
                STEPS[0].to
            )));
        }
        for step in STEPS.iter().filter(|s| s.to > found) {
            db.batch(step.sql).map_err(|e| {
                StoreError::Io(format!("migration to schema {} failed: {e}", step.to))
            })?;
        }
        if found < SCHEMA_VERSION {
            db.execute(
                "UPDATE stratum_schema SET version = $1",
                &[&SCHEMA_VERSION],
            )?;
        }
        Ok(found)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_are_ordered_and_end_at_the_schema_version() {
        assert!(STEPS.windows(2).all(|w| w[0].to < w[1].to));
        assert_eq!(STEPS.last().map(|s| s.to), Some(SCHEMA_VERSION));
    }
}
