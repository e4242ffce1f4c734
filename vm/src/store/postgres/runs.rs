//! The PostgreSQL store's plans, runs, rows, events and checkpoints — the
//! same records and checksums as the SQLite store's (`store::sum`), each
//! write one transaction.
//!
//! Owns: the SQL of those tables. A write that decides on a run's stored
//! state first locks the run's row (`SELECT … FOR UPDATE`), so two writers
//! on different connections (or machines) are serialized on it: the second
//! waits for the first to commit, then reads the new version and gets
//! [`StoreError::Conflict`] with nothing changed. Every transition also
//! sends `NOTIFY stratum_changes` with the run id, delivered when (and only
//! if) the transaction commits. Rows and events go in one statement each
//! (`unnest` of arrays), so a transition's cost does not grow with the run.
//! Must never: write outside a transaction, or hand out a record whose
//! checksum does not match.

use std::collections::BTreeMap;

use super::super::{Delta, RunMeta, Snapshot, StoreError, check_delta, check_run_id, sum};
use super::conn::{CHANGES, Db, column};
use tokio_postgres::Row;

/// The `runs` columns [`Record::from_row`] reads, in its order (the SQL
/// strings spell them out: statements are `&'static str`).
struct Record {
    meta: RunMeta,
    version: i64,
    event_count: i64,
    row_count: i64,
    checkpoint_count: i64,
    sum: Option<Vec<u8>>,
}

const SELECT_META: &str = "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
         event_count, row_count, checkpoint_count, meta_sum
     FROM runs WHERE run_id = $1";
const LOCK_META: &str = "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
         event_count, row_count, checkpoint_count, meta_sum
     FROM runs WHERE run_id = $1 FOR UPDATE";

impl Record {
    fn from_row(r: &Row) -> Result<Record, StoreError> {
        Ok(Record {
            meta: RunMeta {
                run_id: column(r, 0)?,
                plan_hash: column(r, 1)?,
                flow: column(r, 2)?,
                status: column(r, 3)?,
                created_ms: column(r, 4)?,
                updated_ms: column(r, 5)?,
            },
            version: column(r, 6)?,
            event_count: column(r, 7)?,
            row_count: column(r, 8)?,
            checkpoint_count: column(r, 9)?,
            sum: column(r, 10)?,
        })
    }

    fn counts(&self) -> [i64; 3] {
        [self.event_count, self.row_count, self.checkpoint_count]
    }

    fn verified(self) -> Result<Record, StoreError> {
        let computed = sum::run_meta(&self.meta, self.version, self.counts());
        sum::verify(self.sum.as_deref(), &computed, || {
            format!("the listing record of run `{}`", self.meta.run_id)
        })?;
        Ok(self)
    }
}

fn read_record(db: &mut Db, sql: &'static str, run_id: &str) -> Result<Record, StoreError> {
    db.query_opt(sql, &[&run_id])?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))
        .and_then(|r| Record::from_row(&r))?
        .verified()
}

fn to_i64(v: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Invalid(format!("{what} {v} is out of range")))
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative {what} {v}")))
}

fn notify(db: &mut Db, run_id: &str) -> Result<(), StoreError> {
    const SQL: &str = "SELECT pg_notify($1, $2)";
    db.execute(SQL, &[&CHANGES, &run_id]).map(drop)
}

pub(super) fn put_plan(db: &mut Db, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let s = sum::plan(hash, bytes).to_vec();
    db.write(|db| {
        db.execute(
            "INSERT INTO plans (hash, bytes, sum) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING",
            &[&hash, &bytes, &s],
        )
        .map(drop)
    })
}

pub(super) fn get_plan(db: &mut Db, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(row) = db.query_opt("SELECT bytes, sum FROM plans WHERE hash = $1", &[&hash])? else {
        return Ok(None);
    };
    let bytes: Vec<u8> = column(&row, 0)?;
    let stored: Option<Vec<u8>> = column(&row, 1)?;
    sum::verify(stored.as_deref(), &sum::plan(hash, &bytes), || {
        format!("plan {hash}")
    })?;
    Ok(Some(bytes))
}

/// Rows with one entry per key (the last one given wins, as when they are
/// written one after the other).
fn unique_rows(rows: &[(u64, Vec<u8>)]) -> Result<BTreeMap<i64, &[u8]>, StoreError> {
    let mut out = BTreeMap::new();
    for (key, blob) in rows {
        out.insert(to_i64(*key, "row key")?, blob.as_slice());
    }
    Ok(out)
}

/// Writes rows (replacing those with the same key); returns how many were
/// new. The caller holds the run's row lock.
fn upsert_rows(db: &mut Db, run_id: &str, rows: &[(u64, Vec<u8>)]) -> Result<i64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let rows = unique_rows(rows)?;
    let keys: Vec<i64> = rows.keys().copied().collect();
    let blobs: Vec<&[u8]> = rows.values().copied().collect();
    let sums: Vec<Vec<u8>> = rows
        .iter()
        .map(|(k, b)| sum::row(run_id, *k, b).to_vec())
        .collect();
    let existing = db.query_opt(
        "SELECT count(*) FROM run_rows WHERE run_id = $1 AND key = ANY($2)",
        &[&run_id, &keys],
    )?;
    let existing: i64 = existing.map_or(Ok(0), |r| column(&r, 0))?;
    db.execute(
        "INSERT INTO run_rows (run_id, key, blob, sum)
         SELECT $1, k, b, s FROM unnest($2::int8[], $3::bytea[], $4::bytea[]) AS t(k, b, s)
         ON CONFLICT (run_id, key) DO UPDATE SET blob = EXCLUDED.blob, sum = EXCLUDED.sum",
        &[&run_id, &keys, &blobs, &sums],
    )?;
    Ok(keys.len() as i64 - existing)
}

fn append_events(
    db: &mut Db,
    run_id: &str,
    first_seq: i64,
    events: &[String],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut seqs = Vec::with_capacity(events.len());
    let mut sums = Vec::with_capacity(events.len());
    for (i, json) in events.iter().enumerate() {
        let seq = first_seq
            .checked_add(i as i64)
            .ok_or_else(|| StoreError::Corrupt("event sequence overflow".to_owned()))?;
        seqs.push(seq);
        sums.push(sum::event(run_id, seq, json).to_vec());
    }
    db.execute(
        "INSERT INTO events (run_id, seq, json, sum)
         SELECT $1, q, j, s FROM unnest($2::int8[], $3::text[], $4::bytea[]) AS t(q, j, s)",
        &[&run_id, &seqs, &events, &sums],
    )
    .map(drop)
}

pub(super) fn create(
    db: &mut Db,
    meta: &RunMeta,
    header: &[u8],
    rows: &[(u64, Vec<u8>)],
    events: &[String],
) -> Result<(), StoreError> {
    check_run_id(&meta.run_id)?;
    let event_count = to_i64(events.len() as u64, "event count")?;
    let row_count = unique_rows(rows)?.len() as i64;
    let meta_sum = sum::run_meta(meta, 1, [event_count, row_count, 0]).to_vec();
    let header_sum = sum::header(&meta.run_id, header).to_vec();
    db.write(|db| {
        // a concurrent create of the same id waits on the key, then finds it taken
        let inserted = db.execute(
            "INSERT INTO runs (run_id, plan_hash, flow, status, created_ms, updated_ms, version,
                 header, event_count, row_count, checkpoint_count, meta_sum, header_sum)
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9, 0, $10, $11)
             ON CONFLICT (run_id) DO NOTHING",
            &[
                &meta.run_id,
                &meta.plan_hash,
                &meta.flow,
                &meta.status,
                &meta.created_ms,
                &meta.updated_ms,
                &header,
                &event_count,
                &row_count,
                &meta_sum,
                &header_sum,
            ],
        )?;
        if inserted == 0 {
            return Err(StoreError::Exists(meta.run_id.clone()));
        }
        upsert_rows(db, &meta.run_id, rows)?;
        append_events(db, &meta.run_id, 0, events)?;
        notify(db, &meta.run_id)
    })
}

pub(super) fn version(db: &mut Db, run_id: &str) -> Result<u64, StoreError> {
    to_u64(read_record(db, SELECT_META, run_id)?.version, "version")
}

pub(super) fn meta(db: &mut Db, run_id: &str) -> Result<RunMeta, StoreError> {
    Ok(read_record(db, SELECT_META, run_id)?.meta)
}

pub(super) fn load(db: &mut Db, run_id: &str) -> Result<Snapshot, StoreError> {
    let (record, header, rows) = db.read(|db| {
        let record = read_record(db, SELECT_META, run_id)?;
        let row = db
            .query_opt(
                "SELECT header, header_sum FROM runs WHERE run_id = $1",
                &[&run_id],
            )?
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        let header: Vec<u8> = column(&row, 0)?;
        let stored: Option<Vec<u8>> = column(&row, 1)?;
        sum::verify(stored.as_deref(), &sum::header(run_id, &header), || {
            format!("the header of run `{run_id}`")
        })?;
        let rows = read_rows(db, run_id)?;
        Ok((record, header, rows))
    })?;
    if rows.len() as i64 != record.row_count {
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

fn read_rows(db: &mut Db, run_id: &str) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let found = db.query(
        "SELECT key, blob, sum FROM run_rows WHERE run_id = $1 ORDER BY key",
        &[&run_id],
    )?;
    let mut rows: Vec<(u64, Vec<u8>)> = Vec::with_capacity(found.len());
    for r in &found {
        let key: i64 = column(r, 0)?;
        let blob: Vec<u8> = column(r, 1)?;
        let stored: Option<Vec<u8>> = column(r, 2)?;
        sum::verify(stored.as_deref(), &sum::row(run_id, key, &blob), || {
            format!("row {key} of run `{run_id}`")
        })?;
        let key = u64::try_from(key)
            .map_err(|_| StoreError::Corrupt(format!("row key {key} of run `{run_id}`")))?;
        rows.push((key, blob));
    }
    Ok(rows)
}

pub(super) fn commit(db: &mut Db, delta: &Delta<'_>) -> Result<u64, StoreError> {
    check_delta(delta)?;
    let expected = to_i64(delta.expected_version, "expected version")?;
    let added_events = to_i64(delta.events.len() as u64, "event count")?;
    let header_sum = sum::header(delta.run_id, delta.header).to_vec();
    db.write(|db| {
        let current = read_record(db, LOCK_META, delta.run_id)?;
        if current.version != expected {
            return Err(StoreError::Conflict {
                expected: delta.expected_version,
                current: to_u64(current.version, "version")?,
            });
        }
        let overflow = |what: &str| StoreError::Corrupt(format!("{what} overflow"));
        let version = current
            .version
            .checked_add(1)
            .ok_or_else(|| overflow("version"))?;
        let event_count = current
            .event_count
            .checked_add(added_events)
            .ok_or_else(|| overflow("event count"))?;
        let inserted = upsert_rows(db, delta.run_id, delta.rows)?;
        append_events(db, delta.run_id, current.event_count, delta.events)?;
        let meta = RunMeta {
            created_ms: current.meta.created_ms,
            ..delta.meta.clone()
        };
        let row_count = current
            .row_count
            .checked_add(inserted)
            .ok_or_else(|| overflow("row count"))?;
        let meta_sum = sum::run_meta(
            &meta,
            version,
            [event_count, row_count, current.checkpoint_count],
        )
        .to_vec();
        db.execute(
            "UPDATE runs SET plan_hash = $2, flow = $3, status = $4, updated_ms = $5,
                 version = $6, event_count = $7, row_count = $8, meta_sum = $9,
                 header = $10, header_sum = $11
             WHERE run_id = $1",
            &[
                &delta.run_id,
                &meta.plan_hash,
                &meta.flow,
                &meta.status,
                &meta.updated_ms,
                &version,
                &event_count,
                &row_count,
                &meta_sum,
                &delta.header,
                &header_sum,
            ],
        )?;
        notify(db, delta.run_id)?;
        to_u64(version, "version")
    })
}

pub(super) fn events(
    db: &mut Db,
    run_id: &str,
    from: u64,
    limit: u64,
) -> Result<Vec<String>, StoreError> {
    let from_i = i64::try_from(from).unwrap_or(i64::MAX);
    let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
    let (count, found) = db.read(|db| {
        let record = read_record(db, SELECT_META, run_id)?;
        let found = db.query(
            "SELECT seq, json, sum FROM events WHERE run_id = $1 AND seq >= $2
             ORDER BY seq LIMIT $3",
            &[&run_id, &from_i, &limit_i],
        )?;
        Ok((to_u64(record.event_count, "event count")?, found))
    })?;
    let expected = count.saturating_sub(from).min(limit);
    let mut out = Vec::with_capacity(found.len());
    for (i, r) in found.iter().enumerate() {
        let seq: i64 = column(r, 0)?;
        let json: String = column(r, 1)?;
        let stored: Option<Vec<u8>> = column(r, 2)?;
        sum::verify(stored.as_deref(), &sum::event(run_id, seq, &json), || {
            format!("event {seq} of run `{run_id}`")
        })?;
        let want = from_i.saturating_add(i as i64);
        if seq != want {
            return Err(StoreError::Corrupt(format!(
                "event {want} of run `{run_id}` is missing (the next stored one is {seq})"
            )));
        }
        out.push(json);
    }
    if out.len() as u64 != expected {
        return Err(StoreError::Corrupt(format!(
            "run `{run_id}` records {count} events, but only {} of the {expected} asked for from {from} are stored",
            out.len()
        )));
    }
    Ok(out)
}

/// One page of the listing, newest first, after the run `before` (read
/// through `runs_by_created`, or `runs_by_status` with a status, so its
/// cost does not grow with the store). Each record is verified; one whose
/// verified status is not the one asked for is damage.
pub(super) fn list_page(
    db: &mut Db,
    status: Option<&str>,
    limit: u64,
    before: Option<&str>,
) -> Result<Vec<RunMeta>, StoreError> {
    let cursor = before.map(|id| meta(db, id)).transpose()?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (created, after) = cursor
        .as_ref()
        .map_or((i64::MAX, ""), |m| (m.created_ms, m.run_id.as_str()));
    let bounded = cursor.is_some();
    let by_status = "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
             event_count, row_count, checkpoint_count, meta_sum
         FROM runs WHERE status = $1 AND (NOT $2 OR (created_ms, run_id) < ($3, $4))
         ORDER BY created_ms DESC, run_id DESC LIMIT $5";
    let all = "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
             event_count, row_count, checkpoint_count, meta_sum
         FROM runs WHERE (NOT $1 OR (created_ms, run_id) < ($2, $3))
         ORDER BY created_ms DESC, run_id DESC LIMIT $4";
    let found = match status {
        Some(s) => db.query(by_status, &[&s, &bounded, &created, &after, &limit])?,
        None => db.query(all, &[&bounded, &created, &after, &limit])?,
    };
    let mut page = Vec::with_capacity(found.len());
    for r in &found {
        let meta = Record::from_row(r)?.verified()?.meta;
        if let Some(s) = status
            && meta.status != s
        {
            return Err(StoreError::Corrupt(format!(
                "run `{}` is listed as {s} but its verified record says {}",
                meta.run_id, meta.status
            )));
        }
        page.push(meta);
    }
    Ok(page)
}

pub(super) fn list(db: &mut Db, status: Option<&str>) -> Result<Vec<RunMeta>, StoreError> {
    // the status filter applies after each record's checksum is verified (a
    // damaged status must be an error, not a run missing from the listing)
    let found = db.query(
        "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
             event_count, row_count, checkpoint_count, meta_sum
         FROM runs ORDER BY created_ms DESC, run_id DESC",
        &[],
    )?;
    let mut out = Vec::new();
    for r in &found {
        let meta = Record::from_row(r)?.verified()?.meta;
        if status.is_none_or(|s| meta.status == s) {
            out.push(meta);
        }
    }
    Ok(out)
}

pub(super) fn put_checkpoint(
    db: &mut Db,
    run_id: &str,
    label: &str,
    blob: &[u8],
) -> Result<(), StoreError> {
    db.write(|db| {
        let mut record = read_record(db, LOCK_META, run_id)?;
        let position = db
            .query_opt(
                "SELECT COALESCE(
                     (SELECT position FROM checkpoints WHERE run_id = $1 AND label = $2),
                     (SELECT COALESCE(MAX(position) + 1, 0) FROM checkpoints WHERE run_id = $1))",
                &[&run_id, &label],
            )?
            .map_or(Ok(0), |r| column::<i64>(&r, 0))?;
        let s = sum::checkpoint(run_id, label, position, blob).to_vec();
        db.execute(
            "INSERT INTO checkpoints (run_id, label, position, blob, sum)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, label) DO UPDATE SET blob = EXCLUDED.blob, sum = EXCLUDED.sum",
            &[&run_id, &label, &position, &blob, &s],
        )?;
        if position >= record.checkpoint_count {
            record.checkpoint_count = position + 1;
            let meta_sum = sum::run_meta(&record.meta, record.version, record.counts()).to_vec();
            db.execute(
                "UPDATE runs SET checkpoint_count = $2, meta_sum = $3 WHERE run_id = $1",
                &[&run_id, &record.checkpoint_count, &meta_sum],
            )?;
        }
        notify(db, run_id)
    })
}

pub(super) fn get_checkpoint(
    db: &mut Db,
    run_id: &str,
    label: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let found = db.read(|db| {
        read_record(db, SELECT_META, run_id)?;
        db.query_opt(
            "SELECT position, blob, sum FROM checkpoints WHERE run_id = $1 AND label = $2",
            &[&run_id, &label],
        )
    })?;
    let Some(row) = found else {
        // a damaged label or index reads as absent: the run's checkpoints,
        // each verified, must agree that `label` is not one of them
        if checkpoint_labels(db, run_id)?.iter().any(|l| l == label) {
            return Err(StoreError::Corrupt(format!(
                "checkpoint `{label}` of run `{run_id}` is listed but cannot be looked up (a damaged index)"
            )));
        }
        return Ok(None);
    };
    let position: i64 = column(&row, 0)?;
    let blob: Vec<u8> = column(&row, 1)?;
    let stored: Option<Vec<u8>> = column(&row, 2)?;
    let computed = sum::checkpoint(run_id, label, position, &blob);
    sum::verify(stored.as_deref(), &computed, || {
        format!("checkpoint `{label}` of run `{run_id}`")
    })?;
    Ok(Some(blob))
}

pub(super) fn checkpoint_labels(db: &mut Db, run_id: &str) -> Result<Vec<String>, StoreError> {
    let (record, found) = db.read(|db| {
        let record = read_record(db, SELECT_META, run_id)?;
        let found = db.query(
            "SELECT label, position, blob, sum FROM checkpoints WHERE run_id = $1
             ORDER BY position",
            &[&run_id],
        )?;
        Ok((record, found))
    })?;
    let mut labels = Vec::with_capacity(found.len());
    for r in &found {
        let label: String = column(r, 0)?;
        let position: i64 = column(r, 1)?;
        let blob: Vec<u8> = column(r, 2)?;
        let stored: Option<Vec<u8>> = column(r, 3)?;
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
    if labels.len() as i64 != record.checkpoint_count {
        return Err(StoreError::Corrupt(format!(
            "run `{run_id}` has {} checkpoints, but {} are stored",
            record.checkpoint_count,
            labels.len()
        )));
    }
    Ok(labels)
}
