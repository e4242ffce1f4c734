//! Copying one run store into another (`stratumc store migrate`, issue 18
//! §3): every run with its plan, rows, events and checkpoints, the agent
//! runs linked to it, and every guarded resource with its whole ledger —
//! idempotent, and verified by counts and content digests on both sides.
//!
//! Owns: the copy order (plan, then the run with its rows and events in one
//! `create`, then checkpoints, then linked agent runs; guards with all their
//! ledger rows in one `guard_write`), the rule of a second copy (a record
//! already in the destination with the same content is skipped; one with
//! other content is a [`Mismatch`], never overwritten), and the digests
//! ([`run_digest`], [`guard_digest`]) that name a record's content
//! independently of the store it is in.
//! Must never: change the source, overwrite or delete anything in the
//! destination, or interpret a blob.
//!
//! What a copy does not carry: a run's store `version` (a copied run starts
//! at version 1 in its new store; versions only order writers of one store)
//! and a guard record's `version` likewise; leases (a driver of the new
//! store takes a fresh one); agent runs that belong to no flow run (the
//! store has no listing of them).

use super::{GuardRecord, GuardWrite, LedgerRow, RunMeta, RunStore, Snapshot, StoreError};

/// How many ledger rows are read at a time.
const LEDGER_PAGE: u64 = 1024;
/// How many events are read at a time.
const EVENT_PAGE: u64 = 4096;

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Runs written to the destination.
    pub runs_copied: u64,
    /// Runs the destination already held with the same content.
    pub runs_present: u64,
    /// Events of the source's runs.
    pub events: u64,
    /// Checkpoints written (absent before).
    pub checkpoints: u64,
    /// Agent runs written (absent before).
    pub agent_runs: u64,
    /// Guarded resources written.
    pub guards_copied: u64,
    /// Guarded resources the destination already held with the same content.
    pub guards_present: u64,
    /// Ledger rows of the source's resources.
    pub ledger_rows: u64,
    /// Records present in both stores with different content (not copied).
    pub mismatches: Vec<Mismatch>,
    /// The digest of everything the source holds (its runs and guards, in
    /// id order), equal to the destination's over the same records after a
    /// complete copy.
    pub digest: String,
}

/// A record the destination holds with other content than the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// `run`, `checkpoint`, `agent run` or `guard`.
    pub what: &'static str,
    /// Its id (`run/label` for a checkpoint).
    pub id: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} `{}` is in the destination with other content; it was left as it is",
            self.what, self.id
        )
    }
}

/// Copies everything of `from` into `to` (see the module docs), then reads
/// both back and compares digests.
pub fn copy_store(from: &dyn RunStore, to: &mut dyn RunStore) -> Result<CopyReport, StoreError> {
    let mut report = CopyReport::default();
    let mut digest = blake3::Hasher::new();
    let mut runs = from.list(None)?;
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    for meta in &runs {
        copy_run(from, to, meta, &mut report, &mut digest)?;
    }
    for id in from.guard_ids()? {
        copy_guard(from, to, &id, &mut report, &mut digest)?;
    }
    report.digest = digest.finalize().to_hex().to_string();
    Ok(report)
}

/// The digest of `from`'s records that `to` must match after a copy, read
/// from `to`: the same value as [`CopyReport::digest`] when every record
/// arrived intact.
pub fn verify_copy(from: &dyn RunStore, to: &dyn RunStore) -> Result<String, StoreError> {
    let mut digest = blake3::Hasher::new();
    let mut runs = from.list(None)?;
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    for meta in &runs {
        let run = read_run(to, &meta.run_id)?;
        digest.update(run_digest(&run).as_bytes());
    }
    for id in from.guard_ids()? {
        let (rec, rows) = read_guard(to, &id)?
            .ok_or_else(|| StoreError::NotFound(format!("guarded resource {id}")))?;
        digest.update(guard_digest(&rec, &rows).as_bytes());
    }
    Ok(digest.finalize().to_hex().to_string())
}

/// Everything of one run a copy carries.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub snapshot: Snapshot,
    pub events: Vec<String>,
    /// In label order.
    pub checkpoints: Vec<(String, Vec<u8>)>,
    pub agent_runs: Vec<super::AgentRun>,
}

fn read_run(store: &dyn RunStore, run_id: &str) -> Result<RunRecord, StoreError> {
    let snapshot = store.load(run_id)?;
    let events = read_events(store, run_id, snapshot.event_count)?;
    let mut checkpoints = Vec::new();
    for label in store.checkpoint_labels(run_id)? {
        if let Some(blob) = store.get_checkpoint(run_id, &label)? {
            checkpoints.push((label, blob));
        }
    }
    Ok(RunRecord {
        snapshot,
        events,
        checkpoints,
        agent_runs: store.agent_runs_of_flow(run_id)?,
    })
}

fn read_events(store: &dyn RunStore, run_id: &str, count: u64) -> Result<Vec<String>, StoreError> {
    let mut events = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
    while (events.len() as u64) < count {
        let page = store.events(run_id, events.len() as u64, EVENT_PAGE)?;
        if page.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "run `{run_id}` counts {count} events but only {} can be read",
                events.len()
            )));
        }
        events.extend(page);
    }
    Ok(events)
}

/// Feeds a length-prefixed field to the hasher, so that no two different
/// records frame to the same bytes.
fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The content digest of a run: its listing record (but the store's
/// `updated_ms` write time, which a copy keeps anyway), header, rows,
/// events, checkpoints and linked agent runs — not its store version.
pub fn run_digest(run: &RunRecord) -> String {
    let mut h = blake3::Hasher::new();
    meta_fields(&mut h, &run.snapshot.meta);
    field(&mut h, &run.snapshot.header);
    h.update(&(run.snapshot.rows.len() as u64).to_le_bytes());
    for (key, row) in &run.snapshot.rows {
        h.update(&key.to_le_bytes());
        field(&mut h, row);
    }
    h.update(&(run.events.len() as u64).to_le_bytes());
    for e in &run.events {
        field(&mut h, e.as_bytes());
    }
    h.update(&(run.checkpoints.len() as u64).to_le_bytes());
    for (label, blob) in &run.checkpoints {
        field(&mut h, label.as_bytes());
        field(&mut h, blob);
    }
    h.update(&(run.agent_runs.len() as u64).to_le_bytes());
    for a in &run.agent_runs {
        field(&mut h, format!("{a:?}").as_bytes());
    }
    h.finalize().to_hex().to_string()
}

fn meta_fields(h: &mut blake3::Hasher, m: &RunMeta) {
    for s in [&m.run_id, &m.plan_hash, &m.flow, &m.status] {
        field(h, s.as_bytes());
    }
    h.update(&m.created_ms.to_le_bytes());
    h.update(&m.updated_ms.to_le_bytes());
}

/// The content digest of a guarded resource and its ledger (not the
/// record's optimistic `version`).
pub fn guard_digest(rec: &GuardRecord, rows: &[LedgerRow]) -> String {
    let mut h = blake3::Hasher::new();
    for s in [
        &rec.resource_id,
        &rec.policy,
        &rec.checksum,
        &rec.state,
        &rec.head,
    ] {
        field(&mut h, s.as_bytes());
    }
    h.update(&rec.graph_version.to_le_bytes());
    h.update(&rec.ledger_len.to_le_bytes());
    for r in rows {
        h.update(&r.seq.to_le_bytes());
        field(&mut h, r.hash.as_bytes());
        field(
            &mut h,
            r.idempotency_key.as_deref().unwrap_or("\0").as_bytes(),
        );
        field(&mut h, r.json.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

fn copy_run(
    from: &dyn RunStore,
    to: &mut dyn RunStore,
    meta: &RunMeta,
    report: &mut CopyReport,
    digest: &mut blake3::Hasher,
) -> Result<(), StoreError> {
    let run = read_run(from, &meta.run_id)?;
    let id = meta.run_id.as_str();
    digest.update(run_digest(&run).as_bytes());
    report.events += run.events.len() as u64;
    let hash = &run.snapshot.meta.plan_hash;
    if let Some(plan) = from.get_plan(hash)? {
        to.put_plan(hash, &plan)?;
    }
    match to.load(id) {
        Err(StoreError::NotFound(_)) => {
            let s = &run.snapshot;
            to.create(&s.meta, &s.header, &s.rows, &run.events)?;
            report.runs_copied += 1;
        }
        Err(e) => return Err(e),
        Ok(there) => {
            let events = read_events(to, id, there.event_count)?;
            let same = there.meta == run.snapshot.meta
                && there.header == run.snapshot.header
                && there.rows == run.snapshot.rows
                && events == run.events;
            if !same {
                report.mismatches.push(Mismatch {
                    what: "run",
                    id: id.to_string(),
                });
                return Ok(());
            }
            report.runs_present += 1;
        }
    }
    for (label, blob) in &run.checkpoints {
        match to.get_checkpoint(id, label)? {
            None => {
                to.put_checkpoint(id, label, blob)?;
                report.checkpoints += 1;
            }
            Some(there) if &there == blob => {}
            Some(_) => report.mismatches.push(Mismatch {
                what: "checkpoint",
                id: format!("{id}/{label}"),
            }),
        }
    }
    for a in &run.agent_runs {
        match to.agent_run(&a.id)? {
            None => {
                to.create_agent_run(a)?;
                report.agent_runs += 1;
            }
            Some(there) if &there == a => {}
            Some(_) => report.mismatches.push(Mismatch {
                what: "agent run",
                id: a.id.clone(),
            }),
        }
    }
    Ok(())
}

fn read_guard(
    store: &dyn RunStore,
    id: &str,
) -> Result<Option<(GuardRecord, Vec<LedgerRow>)>, StoreError> {
    let Some(rec) = store.guard(id)? else {
        return Ok(None);
    };
    let mut rows = Vec::new();
    while (rows.len() as u64) < rec.ledger_len {
        let page = store.guard_ledger(id, rows.len() as u64, LEDGER_PAGE)?;
        if page.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "guarded resource `{id}` counts {} ledger rows but only {} can be read",
                rec.ledger_len,
                rows.len()
            )));
        }
        rows.extend(page);
    }
    Ok(Some((rec, rows)))
}

fn copy_guard(
    from: &dyn RunStore,
    to: &mut dyn RunStore,
    id: &str,
    report: &mut CopyReport,
    digest: &mut blake3::Hasher,
) -> Result<(), StoreError> {
    let Some((rec, rows)) = read_guard(from, id)? else {
        return Ok(());
    };
    digest.update(guard_digest(&rec, &rows).as_bytes());
    report.ledger_rows += rows.len() as u64;
    match read_guard(to, id)? {
        None => {
            to.guard_write(&GuardWrite {
                record: &rec,
                expected_version: None,
                entries: &rows,
            })?;
            report.guards_copied += 1;
        }
        Some((there, there_rows)) => {
            if guard_digest(&there, &there_rows) == guard_digest(&rec, &rows) {
                report.guards_present += 1;
            } else {
                report.mismatches.push(Mismatch {
                    what: "guard",
                    id: id.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{AgentRun, AgentRunStatus, FlowLink, MemoryStore, SqliteStore};

    fn meta(id: &str) -> RunMeta {
        RunMeta {
            run_id: id.into(),
            plan_hash: "p1".into(),
            flow: "main".into(),
            status: "running".into(),
            created_ms: 10,
            updated_ms: 20,
        }
    }

    fn fill(s: &mut dyn RunStore) {
        s.put_plan("p1", b"plan bytes").unwrap();
        for id in ["run-a", "run-b"] {
            s.create(
                &meta(id),
                b"header",
                &[(1, b"row1".to_vec()), (7, b"row7".to_vec())],
                &["{\"e\":0}".into(), "{\"e\":1}".into()],
            )
            .unwrap();
        }
        s.put_checkpoint("run-a", "start", b"cp").unwrap();
        s.put_checkpoint("run-a", "later", b"cp2").unwrap();
        s.create_agent_run(&AgentRun {
            id: "agent-1".into(),
            agent: "claude".into(),
            status: AgentRunStatus::Completed,
            pid: Some(5),
            pgid: Some(5),
            host: "h".into(),
            started_ms: 1,
            updated_ms: 2,
            output: Some("{}".into()),
            failure: None,
            usage: None,
            flow: Some(FlowLink {
                run_id: "run-a".into(),
                step_id: Some("s".into()),
                item_index: None,
            }),
            cancellation_id: None,
            owner: "h:5:1".into(),
        })
        .unwrap();
        let rec = GuardRecord {
            resource_id: "res".into(),
            policy: "{}".into(),
            checksum: "c".into(),
            state: "draft".into(),
            graph_version: 1,
            version: 0,
            ledger_len: 2,
            head: "h2".into(),
        };
        let rows = [
            LedgerRow {
                seq: 0,
                hash: "h1".into(),
                idempotency_key: None,
                json: "{\"n\":0}".into(),
            },
            LedgerRow {
                seq: 1,
                hash: "h2".into(),
                idempotency_key: Some("k".into()),
                json: "{\"n\":1}".into(),
            },
        ];
        s.guard_write(&GuardWrite {
            record: &rec,
            expected_version: None,
            entries: &rows,
        })
        .unwrap();
    }

    #[test]
    fn a_copy_carries_everything_and_a_second_copy_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut from = SqliteStore::open(dir.path().join("a.db")).unwrap();
        fill(&mut from);
        let mut to = MemoryStore::new();
        let first = copy_store(&from, &mut to).unwrap();
        assert_eq!(
            (
                first.runs_copied,
                first.events,
                first.checkpoints,
                first.agent_runs
            ),
            (2, 4, 2, 1)
        );
        assert_eq!((first.guards_copied, first.ledger_rows), (1, 2));
        assert!(first.mismatches.is_empty());
        assert_eq!(verify_copy(&from, &to).unwrap(), first.digest);
        assert_eq!(
            to.get_plan("p1").unwrap().as_deref(),
            Some(&b"plan bytes"[..])
        );
        assert_eq!(to.checkpoint_labels("run-a").unwrap(), ["start", "later"]);

        let second = copy_store(&from, &mut to).unwrap();
        assert_eq!((second.runs_copied, second.runs_present), (0, 2));
        assert_eq!((second.checkpoints, second.agent_runs), (0, 0));
        assert_eq!((second.guards_copied, second.guards_present), (0, 1));
        assert_eq!(second.digest, first.digest);
    }

    #[test]
    fn a_record_with_other_content_is_reported_and_left_alone() {
        let mut from = MemoryStore::new();
        fill(&mut from);
        let mut to = MemoryStore::new();
        to.create(&meta("run-b"), b"other header", &[], &[])
            .unwrap();
        let report = copy_store(&from, &mut to).unwrap();
        assert_eq!(
            report.mismatches,
            [Mismatch {
                what: "run",
                id: "run-b".into()
            }]
        );
        assert_eq!(to.load("run-b").unwrap().header, b"other header");
        assert_ne!(verify_copy(&from, &to).unwrap(), report.digest);
    }

    #[test]
    fn digests_see_every_field() {
        let run = RunRecord {
            snapshot: Snapshot {
                meta: meta("r"),
                version: 1,
                header: b"h".to_vec(),
                rows: vec![(1, b"x".to_vec())],
                event_count: 1,
            },
            events: vec!["e".into()],
            checkpoints: vec![],
            agent_runs: vec![],
        };
        let base = run_digest(&run);
        let mut other = run.clone();
        other.snapshot.version = 9;
        assert_eq!(run_digest(&other), base, "the store version is not content");
        other.events[0] = "f".into();
        assert_ne!(run_digest(&other), base);
        let mut other = run.clone();
        other.snapshot.rows[0].0 = 2;
        assert_ne!(run_digest(&other), base);
        let mut other = run;
        other.checkpoints.push(("l".into(), vec![]));
        assert_ne!(run_digest(&other), base);
    }
}
