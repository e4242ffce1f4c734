//! [`GuardStore`] on SQLite: the `guards` and `guard_ledger` tables of
//! schema 3.
//!
//! Owns: the SQL of guarded resources; [`GuardStore::guard_write`] runs in
//! one `BEGIN IMMEDIATE` transaction (version check, record upsert, rows
//! appended), so a resource's state and its ledger never disagree after a
//! crash and two racing writers resolve to one winner.
//! Must never: update or delete a ledger row, or check the chain (rows are
//! handed out as stored; the guard crate verifies them).

use rusqlite::{OptionalExtension, params};

use super::super::StoreError;
use super::super::guard::{GuardRecord, GuardStore, GuardWrite, LedgerRow, check_write};
use super::{SqliteStore, map_err, to_i64, to_u64};

const RECORD_COLUMNS: &str =
    "resource_id, policy, checksum, state, graph_version, version, ledger_len, head";

fn record(r: &rusqlite::Row<'_>) -> rusqlite::Result<(GuardRecord, [i64; 3])> {
    Ok((
        GuardRecord {
            resource_id: r.get(0)?,
            policy: r.get(1)?,
            checksum: r.get(2)?,
            state: r.get(3)?,
            graph_version: 0,
            version: 0,
            ledger_len: 0,
            head: r.get(7)?,
        },
        [r.get(4)?, r.get(5)?, r.get(6)?],
    ))
}

fn numbered((mut rec, [g, v, l]): (GuardRecord, [i64; 3])) -> Result<GuardRecord, StoreError> {
    rec.graph_version = to_u64(g, "graph version")?;
    rec.version = to_u64(v, "guard version")?;
    rec.ledger_len = to_u64(l, "ledger length")?;
    Ok(rec)
}

fn read_record(
    conn: &rusqlite::Connection,
    resource_id: &str,
) -> Result<Option<GuardRecord>, StoreError> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM guards WHERE resource_id = ?1");
    let mut stmt = conn.prepare_cached(&sql).map_err(map_err)?;
    stmt.query_row([resource_id], record)
        .optional()
        .map_err(map_err)?
        .map(numbered)
        .transpose()
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, LedgerRow)> {
    Ok((
        r.get(0)?,
        LedgerRow {
            seq: 0,
            hash: r.get(1)?,
            idempotency_key: r.get(2)?,
            json: r.get(3)?,
        },
    ))
}

fn seqd((seq, mut row): (i64, LedgerRow)) -> Result<LedgerRow, StoreError> {
    row.seq = to_u64(seq, "ledger seq")?;
    Ok(row)
}

impl GuardStore for SqliteStore {
    fn guard(&self, resource_id: &str) -> Result<Option<GuardRecord>, StoreError> {
        read_record(&self.conn, resource_id)
    }

    fn guard_write(&mut self, write: &GuardWrite<'_>) -> Result<u64, StoreError> {
        let rec = write.record;
        let tx = self.write_tx()?;
        let stored = read_record(&tx, &rec.resource_id)?;
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
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO guards (resource_id, policy, checksum, state, graph_version,
                         version, ledger_len, head) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (resource_id) DO UPDATE SET policy = excluded.policy,
                         checksum = excluded.checksum, state = excluded.state,
                         graph_version = excluded.graph_version, version = excluded.version,
                         ledger_len = excluded.ledger_len, head = excluded.head",
                )
                .map_err(map_err)?;
            stmt.execute(params![
                rec.resource_id,
                rec.policy,
                rec.checksum,
                rec.state,
                to_i64(rec.graph_version, "graph version")?,
                to_i64(new_version, "guard version")?,
                to_i64(rec.ledger_len, "ledger length")?,
                rec.head
            ])
            .map_err(map_err)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO guard_ledger (resource_id, seq, hash, idempotency_key, json)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(map_err)?;
            for e in write.entries {
                insert
                    .execute(params![
                        rec.resource_id,
                        to_i64(e.seq, "ledger seq")?,
                        e.hash,
                        e.idempotency_key,
                        e.json
                    ])
                    .map_err(|err| match err.sqlite_error_code() {
                        Some(rusqlite::ErrorCode::ConstraintViolation) => {
                            StoreError::Invalid(format!(
                                "ledger row {} of `{}` collides with a stored row (seq or idempotency key)",
                                e.seq, rec.resource_id
                            ))
                        }
                        _ => map_err(err),
                    })?;
            }
        }
        tx.commit().map_err(map_err)?;
        Ok(new_version)
    }

    fn guard_ledger(
        &self,
        resource_id: &str,
        from: u64,
        limit: u64,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, hash, idempotency_key, json FROM guard_ledger
                 WHERE resource_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            )
            .map_err(map_err)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![resource_id, from, limit], row)
            .map_err(map_err)?;
        rows.map(|r| r.map_err(map_err).and_then(seqd)).collect()
    }

    fn guard_entry(&self, hash: &str) -> Result<Option<(String, LedgerRow)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, hash, idempotency_key, json, resource_id FROM guard_ledger
                 WHERE hash = ?1 ORDER BY resource_id, seq LIMIT 1",
            )
            .map_err(map_err)?;
        let found = stmt
            .query_row([hash], |r| Ok((r.get::<_, String>(4)?, row(r)?)))
            .optional()
            .map_err(map_err)?;
        found.map(|(id, r)| Ok((id, seqd(r)?))).transpose()
    }

    fn guard_by_key(&self, resource_id: &str, key: &str) -> Result<Option<LedgerRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, hash, idempotency_key, json FROM guard_ledger
                 WHERE resource_id = ?1 AND idempotency_key = ?2",
            )
            .map_err(map_err)?;
        stmt.query_row([resource_id, key], row)
            .optional()
            .map_err(map_err)?
            .map(seqd)
            .transpose()
    }

    fn guard_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT resource_id FROM guards ORDER BY resource_id")
            .map_err(map_err)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(map_err)?;
        rows.map(|r| r.map_err(map_err)).collect()
    }
}
