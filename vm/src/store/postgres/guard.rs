//! The PostgreSQL store's guarded resources and ledgers (the tables
//! `guards` and `guard_ledger`, as in SQLite's schema 3).
//!
//! Owns: their SQL. [`guard_write`] runs in one transaction that locks the
//! stored record (`FOR UPDATE`) before the version check, so a resource's
//! state and its ledger never disagree and two racing writers resolve to
//! one winner; a create that races another create of the same resource
//! waits on the key and then finds it taken ([`StoreError::Exists`]).
//! Must never: update or delete a ledger row, or check the chain (rows are
//! handed out as stored; the guard crate verifies them).

use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use super::super::StoreError;
use super::super::guard::{GuardRecord, GuardWrite, LedgerRow, check_write};
use super::conn::{Db, column};

fn to_i64(v: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Invalid(format!("{what} {v} is out of range")))
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative {what} {v}")))
}

fn record(r: &Row) -> Result<GuardRecord, StoreError> {
    Ok(GuardRecord {
        resource_id: column(r, 0)?,
        policy: column(r, 1)?,
        checksum: column(r, 2)?,
        state: column(r, 3)?,
        graph_version: to_u64(column(r, 4)?, "graph version")?,
        version: to_u64(column(r, 5)?, "guard version")?,
        ledger_len: to_u64(column(r, 6)?, "ledger length")?,
        head: column(r, 7)?,
    })
}

fn row(r: &Row) -> Result<LedgerRow, StoreError> {
    Ok(LedgerRow {
        seq: to_u64(column(r, 0)?, "ledger seq")?,
        hash: column(r, 1)?,
        idempotency_key: column(r, 2)?,
        json: column(r, 3)?,
    })
}

pub(super) fn guard(db: &mut Db, resource_id: &str) -> Result<Option<GuardRecord>, StoreError> {
    db.query_opt(
        "SELECT resource_id, policy, checksum, state, graph_version, version, ledger_len, head
         FROM guards WHERE resource_id = $1",
        &[&resource_id],
    )?
    .map(|r| record(&r))
    .transpose()
}

pub(super) fn guard_write(db: &mut Db, write: &GuardWrite<'_>) -> Result<u64, StoreError> {
    let rec = write.record;
    db.write(|db| {
        let stored = db
            .query_opt(
                "SELECT resource_id, policy, checksum, state, graph_version, version,
                     ledger_len, head
                 FROM guards WHERE resource_id = $1 FOR UPDATE",
                &[&rec.resource_id],
            )?
            .map(|r| record(&r))
            .transpose()?;
        let (version, len) = match (&stored, write.expected_version) {
            (Some(_), None) => return Err(StoreError::Exists(rec.resource_id.clone())),
            (None, Some(_)) => return Err(StoreError::NotFound(rec.resource_id.clone())),
            (None, None) => (0, 0),
            (Some(s), Some(expected)) if s.version != expected => {
                return Err(StoreError::Conflict {
                    expected,
                    current: s.version,
                });
            }
            (Some(s), Some(_)) => (s.version, s.ledger_len),
        };
        check_write(write, len)?;
        let new_version = version + 1;
        let graph_version = to_i64(rec.graph_version, "graph version")?;
        let version_i = to_i64(new_version, "guard version")?;
        let ledger_len = to_i64(rec.ledger_len, "ledger length")?;
        let params: [super::conn::Param<'_>; 8] = [
            &rec.resource_id,
            &rec.policy,
            &rec.checksum,
            &rec.state,
            &graph_version,
            &version_i,
            &ledger_len,
            &rec.head,
        ];
        if stored.is_none() {
            // a concurrent create of the same resource waits on the key,
            // then inserts nothing
            let n = db.execute(
                "INSERT INTO guards (resource_id, policy, checksum, state, graph_version, version,
                     ledger_len, head) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (resource_id) DO NOTHING",
                &params,
            )?;
            if n == 0 {
                return Err(StoreError::Exists(rec.resource_id.clone()));
            }
        } else {
            db.execute(
                "UPDATE guards SET policy = $2, checksum = $3, state = $4, graph_version = $5,
                     version = $6, ledger_len = $7, head = $8
                 WHERE resource_id = $1",
                &params,
            )?;
        }
        let seqs = write
            .entries
            .iter()
            .map(|e| to_i64(e.seq, "ledger seq"))
            .collect::<Result<Vec<_>, _>>()?;
        let hashes: Vec<&str> = write.entries.iter().map(|e| e.hash.as_str()).collect();
        let keys: Vec<Option<&str>> = write
            .entries
            .iter()
            .map(|e| e.idempotency_key.as_deref())
            .collect();
        let jsons: Vec<&str> = write.entries.iter().map(|e| e.json.as_str()).collect();
        if !seqs.is_empty() {
            let appended = db.execute_raw(
                "INSERT INTO guard_ledger (resource_id, seq, hash, idempotency_key, json)
                 SELECT $1, q, h, k, j
                 FROM unnest($2::int8[], $3::text[], $4::text[], $5::text[]) AS t(q, h, k, j)",
                &[&rec.resource_id, &seqs, &hashes, &keys, &jsons],
            )?;
            appended.map_err(|e| {
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    StoreError::Invalid(format!(
                        "a ledger row of `{}` collides with a stored row (seq or idempotency key)",
                        rec.resource_id
                    ))
                } else {
                    db.error(e)
                }
            })?;
        }
        Ok(new_version)
    })
}

pub(super) fn guard_ledger(
    db: &mut Db,
    resource_id: &str,
    from: u64,
    limit: u64,
) -> Result<Vec<LedgerRow>, StoreError> {
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.query(
        "SELECT seq, hash, idempotency_key, json FROM guard_ledger
         WHERE resource_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
        &[&resource_id, &from, &limit],
    )?
    .iter()
    .map(row)
    .collect()
}

pub(super) fn guard_entry(
    db: &mut Db,
    hash: &str,
) -> Result<Option<(String, LedgerRow)>, StoreError> {
    let found = db.query_opt(
        "SELECT seq, hash, idempotency_key, json, resource_id FROM guard_ledger
         WHERE hash = $1 ORDER BY resource_id, seq LIMIT 1",
        &[&hash],
    )?;
    found.map(|r| Ok((column(&r, 4)?, row(&r)?))).transpose()
}

pub(super) fn guard_by_key(
    db: &mut Db,
    resource_id: &str,
    key: &str,
) -> Result<Option<LedgerRow>, StoreError> {
    db.query_opt(
        "SELECT seq, hash, idempotency_key, json FROM guard_ledger
         WHERE resource_id = $1 AND idempotency_key = $2",
        &[&resource_id, &key],
    )?
    .map(|r| row(&r))
    .transpose()
}

pub(super) fn guard_ids(db: &mut Db) -> Result<Vec<String>, StoreError> {
    db.query("SELECT resource_id FROM guards ORDER BY resource_id", &[])?
        .iter()
        .map(|r| column(r, 0))
        .collect()
}
