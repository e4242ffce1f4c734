//! [`SqliteStore::check`]: the whole-store scan behind `stratumc store
//! check` — SQLite's `PRAGMA integrity_check`, then every record's checksum,
//! every run's event count against its events.
//!
//! Owns: the report types ([`StoreCheck`], [`Damage`]) and the scan.
//! Must never: change the database, or stop at the first damaged record
//! (the report lists all it can read; an unreadable table is one entry).
//! What the records mean (a header that decodes, rows that match it) is the
//! engine's to check, run by run.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::super::StoreError;
use super::super::sum::{self, SumProblem};
use super::{SCHEMA_VERSION, SqliteStore, map_err};

/// Most messages `PRAGMA integrity_check` is asked for.
const INTEGRITY_MESSAGES: u32 = 100;

/// What [`SqliteStore::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCheck {
    /// The schema version of the file (after opening: [`SCHEMA_VERSION`]).
    pub schema_version: i64,
    /// SQLite's `integrity_check` messages; empty when it said `ok`.
    pub integrity: Vec<String>,
    /// Damaged records, in table order.
    pub damage: Vec<Damage>,
    /// Every run id the `runs` table lists (damaged or not), sorted.
    pub runs: Vec<String>,
}

impl StoreCheck {
    /// Nothing damaged.
    pub fn healthy(&self) -> bool {
        self.integrity.is_empty() && self.damage.is_empty()
    }
}

/// One damaged record (or an unreadable table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The run the record belongs to, when known.
    pub run: Option<String>,
    /// Which record.
    pub place: Place,
    /// What is wrong with it.
    pub problem: Problem,
}

/// Where a damaged record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A stored plan, by hash.
    Plan(String),
    /// A run's listing record (status, flow, times, version, event count).
    Listing,
    /// A run's header.
    Header,
    /// A run's row, by key.
    Row(i64),
    /// A run's event, by sequence number.
    Event(i64),
    /// The run's events as a whole (count or sequence).
    Events,
    /// A run's checkpoint, by label.
    Checkpoint(String),
    /// A whole table (it could not be read to the end).
    Table(&'static str),
    /// A run as a whole (what the engine loads from its records).
    Run,
    /// An agent run record (schema 4), by id.
    AgentRun(String),
    /// A run's lease (schema 4).
    Lease,
}

/// What is wrong with a damaged record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Its checksum is missing or does not match.
    Sum(SumProblem),
    /// The run records `expected` events, `found` are stored (or their
    /// sequence numbers have a gap).
    EventCount { expected: i64, found: i64 },
    /// An event belongs to no run.
    Orphan,
    /// SQLite could not read it.
    Unreadable(String),
    /// The engine could not load the run from what is stored.
    Unloadable(String),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Plan(h) => write!(f, "plan {h}"),
            Place::Listing => f.write_str("listing record"),
            Place::Header => f.write_str("header"),
            Place::Row(k) => write!(f, "row {k}"),
            Place::Event(s) => write!(f, "event {s}"),
            Place::Events => f.write_str("events"),
            Place::Checkpoint(l) => write!(f, "checkpoint `{l}`"),
            Place::Table(t) => write!(f, "table `{t}`"),
            Place::Run => f.write_str("state"),
            Place::AgentRun(id) => write!(f, "agent run `{id}`"),
            Place::Lease => f.write_str("lease"),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Sum(p) => write!(f, "{p}"),
            Problem::EventCount { expected, found } => {
                write!(
                    f,
                    "{found} stored in sequence, but the run records {expected}"
                )
            }
            Problem::Orphan => f.write_str("belongs to no run"),
            Problem::Unreadable(e) => write!(f, "cannot be read: {e}"),
            Problem::Unloadable(e) => write!(f, "does not load: {e}"),
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.run {
            Some(run) => write!(f, "run `{run}`: {} {}", self.place, self.problem),
            None => write!(f, "{} {}", self.place, self.problem),
        }
    }
}

impl SqliteStore {
    /// Scans the whole store: SQLite's integrity check, then every record's
    /// checksum and every run's events against its event count. Damage is
    /// reported, not returned as an error; `Err` only when the database
    /// cannot be read at all.
    pub fn check(&self) -> Result<StoreCheck, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(map_err)?;
        let mut scan = Scan {
            conn: &tx,
            damage: Vec::new(),
        };
        let integrity = integrity_check(&tx);
        scan.plans();
        let counts = scan.runs();
        scan.rows();
        scan.events(&counts);
        scan.checkpoints();
        scan.agent_runs();
        scan.leases();
        let Scan { damage, .. } = scan;
        tx.finish().map_err(map_err)?;
        Ok(StoreCheck {
            schema_version: SCHEMA_VERSION,
            integrity,
            damage,
            runs: counts.into_keys().collect(),
        })
    }
}

fn integrity_check(conn: &Connection) -> Vec<String> {
    let sql = format!("PRAGMA integrity_check({INTEGRITY_MESSAGES})");
    let result = conn.prepare(&sql).and_then(|mut stmt| {
        stmt.query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
    });
    match result {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => Vec::new(),
        Ok(lines) => lines,
        Err(e) => vec![format!("the integrity check itself failed: {e}")],
    }
}

struct Scan<'a> {
    conn: &'a Connection,
    damage: Vec<Damage>,
}

/// One stored record as the scan sees it: its run, place, and checksums.
struct Seen {
    run: Option<String>,
    place: Place,
    stored: Option<Vec<u8>>,
    computed: sum::Sum,
}

impl Scan<'_> {
    /// Reads every record `sql` returns through `seen`, recording checksum
    /// problems, and a record or table that cannot be read as
    /// [`Place::Table`] (with the run of the record when `by_run`: its
    /// column 0 is a run id).
    fn each(
        &mut self,
        table: &'static str,
        by_run: bool,
        sql: &str,
        mut seen: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<Seen>,
    ) {
        let mut out = Vec::new();
        let result = self.conn.prepare(sql).and_then(|mut stmt| {
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                match seen(r) {
                    Ok(s) => out.push(Ok(s)),
                    // a value of the wrong type: this record is damaged, go on
                    Err(e) => {
                        let run = if by_run {
                            r.get::<_, String>(0).ok()
                        } else {
                            None
                        };
                        out.push(Err((run, e.to_string())));
                    }
                }
            }
            Ok(())
        });
        for s in out {
            match s {
                Ok(s) => {
                    if let Some(p) = sum::problem(s.stored.as_deref(), &s.computed) {
                        self.damage.push(Damage {
                            run: s.run,
                            place: s.place,
                            problem: Problem::Sum(p),
                        });
                    }
                }
                Err((run, e)) => self.damage.push(Damage {
                    run,
                    place: Place::Table(table),
                    problem: Problem::Unreadable(e),
                }),
            }
        }
        if let Err(e) = result {
            self.table_damage(table, e.to_string());
        }
    }

    fn table_damage(&mut self, table: &'static str, e: String) {
        self.damage.push(Damage {
            run: None,
            place: Place::Table(table),
            problem: Problem::Unreadable(e),
        });
    }

    fn agent_runs(&mut self) {
        let sql = format!("SELECT {} FROM agent_runs", super::agents::AGENT_COLUMNS);
        self.each("agent_runs", false, &sql, |r| {
            let (record, stored) = super::agents::agent_from_row(r)?;
            let record = record.map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    0,
                    rusqlite::types::Type::Text,
                    Box::new(std::io::Error::other(e)),
                )
            })?;
            Ok(Seen {
                run: None,
                computed: sum::agent_run(&record),
                place: Place::AgentRun(record.id),
                stored,
            })
        });
    }

    fn leases(&mut self) {
        let sql = "SELECT run_id, holder, host, pid, heartbeat_ms, expires_ms, sum FROM leases";
        self.each("leases", true, sql, |r| {
            let lease = crate::store::Lease {
                run_id: r.get(0)?,
                holder: r.get(1)?,
                host: r.get(2)?,
                pid: r.get(3)?,
                heartbeat_ms: r.get(4)?,
                expires_ms: r.get(5)?,
            };
            Ok(Seen {
                computed: sum::lease(&lease),
                run: Some(lease.run_id),
                place: Place::Lease,
                stored: r.get(6)?,
            })
        });
    }

    fn plans(&mut self) {
        self.each("plans", false, "SELECT hash, bytes, sum FROM plans", |r| {
            let hash: String = r.get(0)?;
            let bytes: Vec<u8> = r.get(1)?;
            Ok(Seen {
                run: None,
                computed: sum::plan(&hash, &bytes),
                place: Place::Plan(hash),
                stored: r.get(2)?,
            })
        });
    }

    /// Checks the runs table; returns each run's recorded event count.
    fn runs(&mut self) -> BTreeMap<String, i64> {
        let mut counts = BTreeMap::new();
        let sql = "SELECT run_id, plan_hash, flow, status, created_ms, updated_ms, version,
                          event_count, meta_sum, header, header_sum, row_count, checkpoint_count
                   FROM runs";
        let mut headers = Vec::new();
        self.each("runs", true, sql, |r| {
            let meta = super::meta_columns(r)?;
            let (version, event_count): (i64, i64) = (r.get(6)?, r.get(7)?);
            counts.insert(meta.run_id.clone(), event_count);
            let header: Vec<u8> = r.get(9)?;
            headers.push(Seen {
                run: Some(meta.run_id.clone()),
                place: Place::Header,
                stored: r.get(10)?,
                computed: sum::header(&meta.run_id, &header),
            });
            Ok(Seen {
                run: Some(meta.run_id.clone()),
                place: Place::Listing,
                stored: r.get(8)?,
                computed: sum::run_meta(&meta, version, [event_count, r.get(11)?, r.get(12)?]),
            })
        });
        for s in headers {
            if let Some(p) = sum::problem(s.stored.as_deref(), &s.computed) {
                self.damage.push(Damage {
                    run: s.run,
                    place: s.place,
                    problem: Problem::Sum(p),
                });
            }
        }
        counts
    }

    fn rows(&mut self) {
        self.each(
            "run_rows",
            true,
            "SELECT run_id, key, blob, sum FROM run_rows",
            |r| {
                let (run, key, blob): (String, i64, Vec<u8>) = (r.get(0)?, r.get(1)?, r.get(2)?);
                Ok(Seen {
                    computed: sum::row(&run, key, &blob),
                    run: Some(run),
                    place: Place::Row(key),
                    stored: r.get(3)?,
                })
            },
        );
    }

    /// Checks every event's checksum, and that each run's events are
    /// numbered 0.. without a gap up to its recorded count.
    fn events(&mut self, counts: &BTreeMap<String, i64>) {
        let mut found: BTreeMap<String, (i64, bool)> = BTreeMap::new();
        self.each(
            "events",
            true,
            "SELECT run_id, seq, json, sum FROM events ORDER BY run_id, seq",
            |r| {
                let (run, seq, json): (String, i64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
                let entry = found.entry(run.clone()).or_insert((0, true));
                entry.1 &= seq == entry.0;
                entry.0 += 1;
                Ok(Seen {
                    computed: sum::event(&run, seq, &json),
                    run: Some(run),
                    place: Place::Event(seq),
                    stored: r.get(3)?,
                })
            },
        );
        for (run, &expected) in counts {
            let (n, in_sequence) = found.get(run).copied().unwrap_or((0, true));
            if n != expected || !in_sequence {
                self.damage.push(Damage {
                    run: Some(run.clone()),
                    place: Place::Events,
                    problem: Problem::EventCount { expected, found: n },
                });
            }
        }
        for run in found.keys().filter(|r| !counts.contains_key(*r)) {
            self.damage.push(Damage {
                run: Some(run.clone()),
                place: Place::Events,
                problem: Problem::Orphan,
            });
        }
    }

    fn checkpoints(&mut self) {
        self.each(
            "checkpoints",
            true,
            "SELECT run_id, label, position, blob, sum FROM checkpoints",
            |r| {
                let (run, label, position, blob): (String, String, i64, Vec<u8>) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                Ok(Seen {
                    computed: sum::checkpoint(&run, &label, position, &blob),
                    run: Some(run),
                    place: Place::Checkpoint(label),
                    stored: r.get(4)?,
                })
            },
        );
    }
}
