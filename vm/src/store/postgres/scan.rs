//! `PostgresStore::check`: the whole-store scan behind `stratumc store
//! check` on PostgreSQL — every record's checksum and every run's events
//! against its event count, reported in the SQLite scan's types
//! ([`StoreCheck`], [`Damage`]).
//!
//! Owns: the scan's SQL. It runs in one REPEATABLE READ READ ONLY
//! transaction, so it sees one moment of a store others keep writing.
//! Must never: change the database, or stop at the first damaged record (a
//! record whose columns do not read is one entry, a table that does not
//! read is one entry).

use std::collections::BTreeMap;

use tokio_postgres::Row;

use super::super::sum::{self, Sum};
use super::super::{
    Damage, Lease, Place, Problem, RunMeta, SCHEMA_VERSION, StoreCheck, StoreError,
};
use super::conn::{Db, column};

/// One record as the scan sees it.
struct Seen {
    run: Option<String>,
    place: Place,
    stored: Option<Vec<u8>>,
    computed: Sum,
}

struct Scan<'a> {
    db: &'a mut Db,
    damage: Vec<Damage>,
}

impl Scan<'_> {
    /// Checks every record `sql` returns through `seen` (`by_run`: column
    /// 0 is a run id, named when the record does not read).
    fn each(
        &mut self,
        table: &'static str,
        by_run: bool,
        sql: &'static str,
        mut seen: impl FnMut(&Row) -> Result<Vec<Seen>, StoreError>,
    ) {
        let rows = match self.db.query(sql, &[]) {
            Ok(rows) => rows,
            Err(e) => {
                self.damage.push(Damage {
                    run: None,
                    place: Place::Table(table),
                    problem: Problem::Unreadable(e.to_string()),
                });
                return;
            }
        };
        for r in &rows {
            match seen(r) {
                Ok(all) => {
                    for s in all {
                        if let Some(p) = sum::problem(s.stored.as_deref(), &s.computed) {
                            self.damage.push(Damage {
                                run: s.run,
                                place: s.place,
                                problem: Problem::Sum(p),
                            });
                        }
                    }
                }
                Err(e) => self.damage.push(Damage {
                    run: if by_run { r.try_get(0).ok() } else { None },
                    place: Place::Table(table),
                    problem: Problem::Unreadable(e.to_string()),
                }),
            }
        }
    }
}

pub(super) fn check(db: &mut Db) -> Result<StoreCheck, StoreError> {
    db.read(|db| {
        let mut scan = Scan {
            db,
            damage: Vec::new(),
        };
        scan.each("plans", false, "SELECT hash, bytes, sum FROM plans", |r| {
            let hash: String = column(r, 0)?;
            let bytes: Vec<u8> = column(r, 1)?;
            Ok(vec![Seen {
                run: None,
                computed: sum::plan(&hash, &bytes),
                place: Place::Plan(hash),
                stored: column(r, 2)?,
            }])
        });
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        scan.each(
            "runs",
            true,
            "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
                 event_count, meta_sum, header, header_sum, row_count, checkpoint_count
             FROM runs",
            |r| {
                let meta = RunMeta {
                    run_id: column(r, 0)?,
                    plan_hash: column(r, 1)?,
                    flow: column(r, 2)?,
                    status: column(r, 3)?,
                    created_ms: column(r, 4)?,
                    updated_ms: column(r, 5)?,
                };
                let (version, event_count): (i64, i64) = (column(r, 6)?, column(r, 7)?);
                counts.insert(meta.run_id.clone(), event_count);
                let header: Vec<u8> = column(r, 9)?;
                let counted = [event_count, column(r, 11)?, column(r, 12)?];
                Ok(vec![
                    Seen {
                        run: Some(meta.run_id.clone()),
                        place: Place::Listing,
                        stored: column(r, 8)?,
                        computed: sum::run_meta(&meta, version, counted),
                    },
                    Seen {
                        run: Some(meta.run_id.clone()),
                        place: Place::Header,
                        stored: column(r, 10)?,
                        computed: sum::header(&meta.run_id, &header),
                    },
                ])
            },
        );
        scan.each(
            "run_rows",
            true,
            "SELECT run_id, key, blob, sum FROM run_rows",
            |r| {
                let (run, key, blob): (String, i64, Vec<u8>) =
                    (column(r, 0)?, column(r, 1)?, column(r, 2)?);
                Ok(vec![Seen {
                    computed: sum::row(&run, key, &blob),
                    run: Some(run),
                    place: Place::Row(key),
                    stored: column(r, 3)?,
                }])
            },
        );
        let mut found: BTreeMap<String, (i64, bool)> = BTreeMap::new();
        scan.each(
            "events",
            true,
            "SELECT run_id, seq, json, sum FROM events ORDER BY run_id, seq",
            |r| {
                let (run, seq, json): (String, i64, String) =
                    (column(r, 0)?, column(r, 1)?, column(r, 2)?);
                let entry = found.entry(run.clone()).or_insert((0, true));
                entry.1 &= seq == entry.0;
                entry.0 += 1;
                Ok(vec![Seen {
                    computed: sum::event(&run, seq, &json),
                    run: Some(run),
                    place: Place::Event(seq),
                    stored: column(r, 3)?,
                }])
            },
        );
        for (run, &expected) in &counts {
            let (n, in_sequence) = found.get(run).copied().unwrap_or((0, true));
            if n != expected || !in_sequence {
                scan.damage.push(Damage {
                    run: Some(run.clone()),
                    place: Place::Events,
                    problem: Problem::EventCount { expected, found: n },
                });
            }
        }
        for run in found.keys().filter(|r| !counts.contains_key(*r)) {
            scan.damage.push(Damage {
                run: Some(run.clone()),
                place: Place::Events,
                problem: Problem::Orphan,
            });
        }
        scan.each(
            "checkpoints",
            true,
            "SELECT run_id, label, position, blob, sum FROM checkpoints",
            |r| {
                let (run, label, position, blob): (String, String, i64, Vec<u8>) =
                    (column(r, 0)?, column(r, 1)?, column(r, 2)?, column(r, 3)?);
                Ok(vec![Seen {
                    computed: sum::checkpoint(&run, &label, position, &blob),
                    run: Some(run),
                    place: Place::Checkpoint(label),
                    stored: column(r, 4)?,
                }])
            },
        );
        scan.each(
            "agent_runs",
            false,
            "SELECT id, agent, status, pid, pgid, host, started_ms, updated_ms, output,
                 failure, usage_tokens, usage_usd, flow_run_id, flow_step_id, flow_item,
                 cancellation_id, owner, sum
             FROM agent_runs",
            |r| {
                let (record, stored) = super::agents::agent_record(r)?;
                Ok(vec![Seen {
                    run: None,
                    computed: sum::agent_run(&record),
                    place: Place::AgentRun(record.id),
                    stored,
                }])
            },
        );
        scan.each(
            "leases",
            true,
            "SELECT run_id, holder, host, pid, heartbeat_ms, expires_ms, sum FROM leases",
            |r| {
                let pid: i64 = column(r, 3)?;
                let lease = Lease {
                    run_id: column(r, 0)?,
                    holder: column(r, 1)?,
                    host: column(r, 2)?,
                    pid: u32::try_from(pid)
                        .map_err(|_| StoreError::Corrupt(format!("pid {pid} out of range")))?,
                    heartbeat_ms: column(r, 4)?,
                    expires_ms: column(r, 5)?,
                };
                Ok(vec![Seen {
                    computed: sum::lease(&lease),
                    run: Some(lease.run_id),
                    place: Place::Lease,
                    stored: column(r, 6)?,
                }])
            },
        );
        let Scan { damage, .. } = scan;
        Ok(StoreCheck {
            schema_version: SCHEMA_VERSION,
            integrity: Vec::new(),
            damage,
            runs: counts.into_keys().collect(),
        })
    })
}
