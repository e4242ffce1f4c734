//! Tests of the run store: every `RunStore` method on both implementations
//! (written once over `&mut dyn RunStore`), SQLite specifics (persistence,
//! schema versions, damaged files, the state directory), and concurrent
//! commits from separate threads and separate OS processes.
//!
//! Child processes are this test binary re-run on `zz_child_process_entry`
//! with `STORE_TEST_CHILD` set; without it that test does nothing.
//!
//! The tests written over `&mut dyn RunStore` and the concurrency tests also
//! run on PostgreSQL when `STRATUM_TEST_PG` names a server (`scripts/test.sh`
//! starts one): each store gets a schema of its own in that database. When
//! it is unset they skip PostgreSQL with a printed note, and fail under
//! `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use stratum_vm::store::{
    AgentRun, AgentRunStatus, AgentUpdate, AgentUsage, Delta, FlowLink, Lease, LeaseGrant,
    MAX_AGENT_OUTPUT, MemoryStore, RunMeta, RunStore, SCHEMA_VERSION, SqliteStore, StoreError,
    StoreLocation,
};

fn tmpdir() -> tempfile::TempDir {
    // The target directory is on a real disk (not tmpfs), so fsync is real.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

fn meta(run_id: &str, created_ms: i64, status: &str) -> RunMeta {
    RunMeta {
        run_id: run_id.to_owned(),
        plan_hash: "blake3:plan".to_owned(),
        flow: "main".to_owned(),
        status: status.to_owned(),
        created_ms,
        updated_ms: created_ms,
    }
}

fn ev(s: &str) -> String {
    format!("{{\"type\":\"{s}\"}}")
}

/// The URL of a new, empty schema on the test server (`STRATUM_TEST_PG`),
/// or `None` when no server is configured (a printed note; under `CI=true`
/// a failure, so CI cannot skip PostgreSQL by accident).
fn pg_url() -> Option<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let Some(base) = std::env::var("STRATUM_TEST_PG")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "STRATUM_TEST_PG is unset under CI=true: scripts/test.sh starts a PostgreSQL server and sets it"
        );
        eprintln!(
            "note: STRATUM_TEST_PG is unset; skipping the PostgreSQL store (scripts/test.sh sets it)"
        );
        return None;
    };
    let schema = format!(
        "store_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    psql(&base, &format!("CREATE SCHEMA {schema}"));
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}options=-csearch_path%3D{schema}"))
}

/// Runs SQL on the test server with `psql` (`STRATUM_TEST_PSQL`, else from PATH).
fn psql(url: &str, sql: &str) -> String {
    let psql = std::env::var("STRATUM_TEST_PSQL").unwrap_or_else(|_| "psql".to_owned());
    let out = Command::new(psql)
        .args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("run psql (install postgresql-client, or set STRATUM_TEST_PSQL)");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Opens the PostgreSQL store of `url`.
fn open_pg(url: &str) -> Box<dyn RunStore> {
    StoreLocation::Postgres(url.to_owned())
        .open()
        .expect("open the PostgreSQL store")
}

/// Runs `check` on a fresh `MemoryStore`, a fresh `SqliteStore` and, when a
/// test server is configured, a fresh PostgreSQL store.
fn on_both(check: impl Fn(&mut dyn RunStore)) {
    let mut memory = MemoryStore::new();
    check(&mut memory);
    let dir = tmpdir();
    let mut sqlite = SqliteStore::open(dir.path().join("stratum.db")).expect("open sqlite");
    check(&mut sqlite);
    if let Some(url) = pg_url() {
        check(open_pg(&url).as_mut());
    }
}

/// The durable stores to run a concurrency test on: SQLite in `dir`, and
/// PostgreSQL when configured (as locations, so that threads and child
/// processes open their own connections).
fn durable_locations(dir: &Path) -> Vec<StoreLocation> {
    let mut out = vec![StoreLocation::Sqlite(dir.join("stratum.db"))];
    out.extend(pg_url().map(StoreLocation::Postgres));
    out
}

fn create_simple(s: &mut dyn RunStore, id: &str) {
    s.create(
        &meta(id, 10, "running"),
        b"h1",
        &[(3, b"c".to_vec()), (1, b"a".to_vec())],
        &[ev("start")],
    )
    .expect("create");
}

// --- every method, both stores ---------------------------------------------

#[test]
fn plans_are_stored_idempotently() {
    on_both(|s| {
        assert_eq!(s.get_plan("h").unwrap(), None);
        s.put_plan("h", b"plan bytes").unwrap();
        s.put_plan("h", b"plan bytes").unwrap();
        s.put_plan("h", b"other bytes").unwrap(); // first bytes win
        assert_eq!(
            s.get_plan("h").unwrap().as_deref(),
            Some(&b"plan bytes"[..])
        );
        s.put_plan("empty", b"").unwrap();
        assert_eq!(s.get_plan("empty").unwrap(), Some(Vec::new()));
    });
}

#[test]
fn create_then_load() {
    on_both(|s| {
        create_simple(s, "r1");
        let snap = s.load("r1").unwrap();
        assert_eq!(snap.meta, meta("r1", 10, "running"));
        assert_eq!(snap.version, 1);
        assert_eq!(snap.header, b"h1");
        assert_eq!(snap.rows, vec![(1, b"a".to_vec()), (3, b"c".to_vec())]);
        assert_eq!(snap.event_count, 1);
        assert_eq!(s.events("r1", 0, 10).unwrap(), vec![ev("start")]);
    });
}

#[test]
fn create_refuses_existing_and_empty_ids() {
    on_both(|s| {
        create_simple(s, "r1");
        let err = s
            .create(&meta("r1", 99, "running"), b"x", &[], &[])
            .unwrap_err();
        assert_eq!(err, StoreError::Exists("r1".into()));
        assert_eq!(s.load("r1").unwrap().header, b"h1", "nothing changed");
        let err = s
            .create(&meta("", 1, "running"), b"x", &[], &[])
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    });
}

#[test]
fn load_missing_is_not_found() {
    on_both(|s| {
        assert_eq!(
            s.load("nope").unwrap_err(),
            StoreError::NotFound("nope".into())
        );
    });
}

#[test]
fn commit_applies_a_delta() {
    on_both(|s| {
        create_simple(s, "r1");
        let mut m = meta("r1", 12345, "completed");
        m.updated_ms = 20;
        let v = s
            .commit(&Delta {
                run_id: "r1",
                expected_version: 1,
                meta: &m,
                header: b"h2",
                rows: &[(3, b"C".to_vec()), (2, b"b".to_vec())],
                events: &[ev("a"), ev("b")],
            })
            .unwrap();
        assert_eq!(v, 2);
        let snap = s.load("r1").unwrap();
        assert_eq!(snap.version, 2);
        assert_eq!(snap.meta.status, "completed");
        assert_eq!(snap.meta.updated_ms, 20);
        assert_eq!(snap.meta.created_ms, 10, "created_ms is fixed at creation");
        assert_eq!(snap.header, b"h2");
        assert_eq!(
            snap.rows,
            vec![(1, b"a".to_vec()), (2, b"b".to_vec()), (3, b"C".to_vec())]
        );
        assert_eq!(snap.event_count, 3);
        assert_eq!(
            s.events("r1", 0, 100).unwrap(),
            vec![ev("start"), ev("a"), ev("b")]
        );
        // An empty delta still bumps the version.
        let v = s
            .commit(&Delta {
                run_id: "r1",
                expected_version: 2,
                meta: &m,
                header: b"h3",
                rows: &[],
                events: &[],
            })
            .unwrap();
        assert_eq!(v, 3);
        assert_eq!(s.load("r1").unwrap().event_count, 3);
    });
}

#[test]
fn stale_commit_is_a_conflict_and_changes_nothing() {
    on_both(|s| {
        create_simple(s, "r1");
        let m = meta("r1", 10, "running");
        let delta = |expected| Delta {
            run_id: "r1",
            expected_version: expected,
            meta: &m,
            header: b"new",
            rows: &[],
            events: &[],
        };
        s.commit(&delta(1)).unwrap();
        let before = s.load("r1").unwrap();
        let mut m2 = meta("r1", 10, "failed");
        m2.updated_ms = 999;
        let err = s
            .commit(&Delta {
                run_id: "r1",
                expected_version: 1,
                meta: &m2,
                header: b"loser",
                rows: &[(7, b"x".to_vec())],
                events: &[ev("loser")],
            })
            .unwrap_err();
        assert_eq!(
            err,
            StoreError::Conflict {
                expected: 1,
                current: 2
            }
        );
        assert_eq!(s.load("r1").unwrap(), before);
        assert_eq!(s.events("r1", 0, 100).unwrap().len(), 1);
        assert!(matches!(
            s.commit(&delta(3)).unwrap_err(),
            StoreError::Conflict { current: 2, .. }
        ));
    });
}

#[test]
fn commit_on_missing_run_or_with_foreign_meta_is_refused() {
    on_both(|s| {
        let m = meta("ghost", 1, "running");
        let err = s
            .commit(&Delta {
                run_id: "ghost",
                expected_version: 1,
                meta: &m,
                header: b"",
                rows: &[],
                events: &[],
            })
            .unwrap_err();
        assert_eq!(err, StoreError::NotFound("ghost".into()));
        create_simple(s, "r1");
        let err = s
            .commit(&Delta {
                run_id: "r1",
                expected_version: 1,
                meta: &m,
                header: b"",
                rows: &[],
                events: &[],
            })
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
        assert_eq!(s.load("r1").unwrap().version, 1);
    });
}

#[test]
fn events_are_paged_by_sequence() {
    on_both(|s| {
        let events: Vec<String> = (0..10).map(|i| ev(&format!("e{i}"))).collect();
        s.create(&meta("r1", 1, "running"), b"", &[], &events[..4])
            .unwrap();
        let m = meta("r1", 1, "running");
        s.commit(&Delta {
            run_id: "r1",
            expected_version: 1,
            meta: &m,
            header: b"",
            rows: &[],
            events: &events[4..],
        })
        .unwrap();
        assert_eq!(s.events("r1", 0, u64::MAX).unwrap(), events);
        assert_eq!(s.events("r1", 3, 2).unwrap(), events[3..5].to_vec());
        assert_eq!(s.events("r1", 8, 100).unwrap(), events[8..].to_vec());
        assert!(s.events("r1", 10, 5).unwrap().is_empty());
        assert!(s.events("r1", u64::MAX, 5).unwrap().is_empty());
        assert!(s.events("r1", 0, 0).unwrap().is_empty());
        assert_eq!(
            s.events("nope", 0, 1).unwrap_err(),
            StoreError::NotFound("nope".into())
        );
    });
}

#[test]
fn list_is_newest_first_and_filters_by_status() {
    on_both(|s| {
        assert!(s.list(None).unwrap().is_empty());
        s.create(&meta("a", 100, "running"), b"", &[], &[]).unwrap();
        s.create(&meta("b", 300, "completed"), b"", &[], &[])
            .unwrap();
        s.create(&meta("c", 200, "running"), b"", &[], &[]).unwrap();
        s.create(&meta("d", 200, "running"), b"", &[], &[]).unwrap();
        let ids = |v: Vec<RunMeta>| v.into_iter().map(|m| m.run_id).collect::<Vec<_>>();
        assert_eq!(ids(s.list(None).unwrap()), ["b", "d", "c", "a"]);
        assert_eq!(ids(s.list(Some("running")).unwrap()), ["d", "c", "a"]);
        assert_eq!(ids(s.list(Some("completed")).unwrap()), ["b"]);
        assert!(s.list(Some("killed")).unwrap().is_empty());
        // A commit that changes the status moves the run between lists.
        let m = meta("a", 100, "failed");
        s.commit(&Delta {
            run_id: "a",
            expected_version: 1,
            meta: &m,
            header: b"",
            rows: &[],
            events: &[],
        })
        .unwrap();
        assert_eq!(ids(s.list(Some("running")).unwrap()), ["d", "c"]);
        assert_eq!(s.list(Some("failed")).unwrap(), vec![m]);
    });
}

#[test]
fn pages_walk_the_listing_in_order_and_filter_by_status() {
    on_both(|s| {
        let ids = |v: Vec<RunMeta>| v.into_iter().map(|m| m.run_id).collect::<Vec<_>>();
        assert!(s.list_page(None, 10, None).unwrap().is_empty());
        // equal creation times are ordered by run id, as in `list`
        for (id, at, status) in [
            ("a", 100, "running"),
            ("b", 300, "completed"),
            ("c", 200, "running"),
            ("d", 200, "running"),
            ("e", 50, "completed"),
        ] {
            s.create(&meta(id, at, status), b"", &[], &[]).unwrap();
        }
        let mut walked = Vec::new();
        let mut before: Option<String> = None;
        loop {
            let page = ids(s.list_page(None, 2, before.as_deref()).unwrap());
            assert!(page.len() <= 2, "{page:?}");
            let Some(last) = page.last().cloned() else {
                break;
            };
            walked.extend(page);
            before = Some(last);
        }
        assert_eq!(walked, ids(s.list(None).unwrap()));
        assert_eq!(walked, ["b", "d", "c", "a", "e"]);
        assert_eq!(
            ids(s.list_page(Some("running"), 2, None).unwrap()),
            ["d", "c"]
        );
        assert_eq!(
            ids(s.list_page(Some("running"), 2, Some("c")).unwrap()),
            ["a"]
        );
        // the cursor may be a run of another status: its place in the order counts
        assert_eq!(
            ids(s.list_page(Some("completed"), 5, Some("d")).unwrap()),
            ["e"]
        );
        assert_eq!(
            ids(s.list_page(None, 0, None).unwrap()),
            Vec::<String>::new()
        );
        assert_eq!(
            s.list_page(None, 2, Some("nope")).unwrap_err(),
            StoreError::NotFound("nope".into())
        );
    });
}

#[test]
fn checkpoints_keep_insertion_order_on_overwrite() {
    on_both(|s| {
        create_simple(s, "r1");
        create_simple(s, "r2");
        assert!(s.checkpoint_labels("r1").unwrap().is_empty());
        assert_eq!(s.get_checkpoint("r1", "x").unwrap(), None);
        s.put_checkpoint("r1", "zeta", b"1").unwrap();
        s.put_checkpoint("r1", "alpha", b"2").unwrap();
        s.put_checkpoint("r1", "mid", b"3").unwrap();
        s.put_checkpoint("r1", "zeta", b"1b").unwrap();
        s.put_checkpoint("r2", "alpha", b"other run").unwrap();
        assert_eq!(s.checkpoint_labels("r1").unwrap(), ["zeta", "alpha", "mid"]);
        assert_eq!(s.get_checkpoint("r1", "zeta").unwrap().unwrap(), b"1b");
        assert_eq!(s.get_checkpoint("r1", "alpha").unwrap().unwrap(), b"2");
        assert_eq!(
            s.get_checkpoint("r2", "alpha").unwrap().unwrap(),
            b"other run"
        );
        assert_eq!(s.checkpoint_labels("r2").unwrap(), ["alpha"]);
        for err in [
            s.put_checkpoint("nope", "x", b"").unwrap_err(),
            s.get_checkpoint("nope", "x").unwrap_err(),
            s.checkpoint_labels("nope").unwrap_err(),
        ] {
            assert_eq!(err, StoreError::NotFound("nope".into()));
        }
        // Checkpoints do not touch the run's version.
        assert_eq!(s.load("r1").unwrap().version, 1);
    });
}

#[test]
fn many_commits_keep_every_row_and_event() {
    on_both(|s| {
        s.create(&meta("r", 1, "running"), b"0", &[], &[]).unwrap();
        let m = meta("r", 1, "running");
        for i in 0..300u32 {
            let v = s
                .commit(&Delta {
                    run_id: "r",
                    expected_version: u64::from(i) + 1,
                    meta: &m,
                    header: i.to_string().as_bytes(),
                    rows: &[(u64::from(i), i.to_le_bytes().to_vec()), (0, vec![i as u8])],
                    events: &[ev(&i.to_string())],
                })
                .unwrap();
            assert_eq!(v, u64::from(i) + 2);
        }
        let snap = s.load("r").unwrap();
        assert_eq!(snap.rows.len(), 300);
        assert_eq!(snap.rows[0], (0, vec![(299u32 % 256) as u8]));
        assert_eq!(snap.rows[299], (299, 299u32.to_le_bytes().to_vec()));
        assert_eq!(snap.event_count, 300);
        assert_eq!(s.events("r", 299, 1).unwrap(), vec![ev("299")]);
    });
}

#[test]
fn stores_are_object_safe_and_send() {
    fn assert_send<T: Send>(_: &T) {}
    let boxed: Vec<Box<dyn RunStore>> = vec![Box::new(MemoryStore::new())];
    assert_send(&boxed);
}

// --- agent runs and leases (schema 4), both stores ----------------------------

fn agent_run(id: &str, flow: Option<(&str, &str)>, started_ms: i64) -> AgentRun {
    AgentRun {
        id: id.to_owned(),
        agent: "claude".to_owned(),
        status: AgentRunStatus::Running,
        pid: None,
        pgid: None,
        host: "box".to_owned(),
        started_ms,
        updated_ms: started_ms,
        output: None,
        failure: None,
        usage: None,
        flow: flow.map(|(run, step)| FlowLink {
            run_id: run.to_owned(),
            step_id: Some(step.to_owned()),
            item_index: Some(2),
        }),
        cancellation_id: None,
        owner: "box:1:0".to_owned(),
    }
}

#[test]
fn agent_runs_are_created_read_and_listed_by_flow() {
    on_both(|s| {
        let a = agent_run("agent-a", Some(("r1", "draft")), 20);
        let b = agent_run("agent-b", None, 10);
        let c = AgentRun {
            cancellation_id: Some("c-1".into()),
            ..agent_run("agent-c", Some(("r1", "review")), 5)
        };
        for r in [&a, &b, &c] {
            s.create_agent_run(r).unwrap();
        }
        assert_eq!(s.agent_run("agent-a").unwrap(), Some(a.clone()));
        assert_eq!(s.agent_run("agent-x").unwrap(), None);
        assert_eq!(s.agent_run_by_cancellation("c-1").unwrap(), Some(c.clone()));
        assert_eq!(s.agent_run_by_cancellation("c-2").unwrap(), None);
        // oldest first, only the flow's
        assert_eq!(
            s.agent_runs_of_flow("r1").unwrap(),
            vec![c.clone(), a.clone()]
        );
        assert!(s.agent_runs_of_flow("r2").unwrap().is_empty());
        // an id or a cancellation id is taken once
        assert_eq!(
            s.create_agent_run(&a),
            Err(StoreError::Exists("agent-a".into()))
        );
        let again = AgentRun {
            cancellation_id: Some("c-1".into()),
            ..agent_run("agent-d", None, 1)
        };
        assert_eq!(
            s.create_agent_run(&again),
            Err(StoreError::Exists("agent-c".into()))
        );
        assert_eq!(s.agent_run("agent-d").unwrap(), None);
    });
}

#[test]
fn a_settled_agent_run_never_changes_again() {
    on_both(|s| {
        let mut r = agent_run("agent-a", Some(("r1", "draft")), 1);
        s.create_agent_run(&r).unwrap();
        r.pid = Some(4242);
        r.pgid = Some(4242);
        assert_eq!(s.update_agent_run(&r).unwrap(), AgentUpdate::Written);
        let cancelled = AgentRun {
            status: AgentRunStatus::Cancelled,
            failure: Some("cancelled".into()),
            updated_ms: 5,
            ..r.clone()
        };
        assert_eq!(
            s.update_agent_run(&cancelled).unwrap(),
            AgentUpdate::Written
        );
        // the run's own end, written after the cancel, is refused: the cancel is kept
        let completed = AgentRun {
            status: AgentRunStatus::Completed,
            output: Some("{\"x\":1}".into()),
            usage: Some(AgentUsage {
                tokens: 12,
                usd: Some(0.25),
            }),
            ..r.clone()
        };
        assert_eq!(
            s.update_agent_run(&completed).unwrap(),
            AgentUpdate::Settled(Box::new(cancelled.clone()))
        );
        assert_eq!(s.agent_run("agent-a").unwrap(), Some(cancelled));
        assert_eq!(
            s.update_agent_run(&agent_run("agent-none", None, 1)),
            Err(StoreError::NotFound("agent-none".into()))
        );
    });
}

#[test]
fn agent_run_output_usage_and_bounds_round_trip() {
    on_both(|s| {
        let done = AgentRun {
            status: AgentRunStatus::Completed,
            pid: Some(7),
            pgid: Some(7),
            output: Some("{\"answer\": \"ok\"}".into()),
            usage: Some(AgentUsage {
                tokens: 1_000,
                usd: None,
            }),
            ..agent_run("agent-a", None, 3)
        };
        s.create_agent_run(&done).unwrap();
        assert_eq!(s.agent_run("agent-a").unwrap(), Some(done));
        let big = AgentRun {
            output: Some("x".repeat(MAX_AGENT_OUTPUT + 1)),
            ..agent_run("agent-big", None, 3)
        };
        assert!(
            matches!(s.create_agent_run(&big), Err(StoreError::Invalid(m)) if m.contains("cut it first"))
        );
        assert_eq!(s.agent_run("agent-big").unwrap(), None);
    });
}

fn lease(holder: &str, now: i64, ttl: i64) -> Lease {
    Lease {
        run_id: "r1".into(),
        holder: holder.into(),
        host: "box".into(),
        pid: 9,
        heartbeat_ms: now,
        expires_ms: now + ttl,
    }
}

#[test]
fn a_lease_is_held_renewed_taken_over_when_lapsed_and_released() {
    on_both(|s| {
        assert_eq!(s.lease("r1").unwrap(), None);
        assert_eq!(
            s.acquire_lease(&lease("a", 0, 100)).unwrap(),
            LeaseGrant::Granted
        );
        assert_eq!(
            s.acquire_lease(&lease("a", 50, 100)).unwrap(),
            LeaseGrant::Renewed
        );
        // b is refused while a's heartbeat is fresh, and nothing changes
        assert_eq!(
            s.acquire_lease(&lease("b", 149, 100)).unwrap(),
            LeaseGrant::Held(lease("a", 50, 100))
        );
        assert_eq!(s.lease("r1").unwrap(), Some(lease("a", 50, 100)));
        // a stopped beating: b takes the run over and is told whose lease lapsed
        assert_eq!(
            s.acquire_lease(&lease("b", 150, 100)).unwrap(),
            LeaseGrant::TakenOver(lease("a", 50, 100))
        );
        assert!(!s.release_lease("r1", "a").unwrap(), "a no longer holds it");
        assert_eq!(s.lease("r1").unwrap(), Some(lease("b", 150, 100)));
        assert!(s.release_lease("r1", "b").unwrap());
        assert_eq!(s.lease("r1").unwrap(), None);
    });
}

#[test]
fn sqlite_keeps_agent_runs_and_leases_across_processes_and_checks_them() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    {
        let mut s = SqliteStore::open(&path).unwrap();
        s.create_agent_run(&agent_run("agent-a", Some(("r1", "draft")), 1))
            .unwrap();
        s.acquire_lease(&lease("a", 0, 100)).unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.agent_runs_of_flow("r1").unwrap().len(), 1);
    assert_eq!(s.lease("r1").unwrap(), Some(lease("a", 0, 100)));
    drop(s);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE agent_runs SET pgid = 1 WHERE id = 'agent-a'", [])
            .unwrap();
        conn.execute("UPDATE leases SET expires_ms = 999999", [])
            .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    let e = s.agent_run("agent-a").unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("agent run `agent-a` does not match its checksum")),
        "{e}"
    );
    let e = s.lease("r1").unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("the lease of run `r1`")),
        "{e}"
    );
    // `stratumc store check` names both
    let found: Vec<String> = s
        .check()
        .unwrap()
        .damage
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        found.contains(&"agent run `agent-a` does not match its checksum".to_string()),
        "{found:?}"
    );
    assert!(
        found.contains(&"run `r1`: lease does not match its checksum".to_string()),
        "{found:?}"
    );
}

// --- SQLite specifics --------------------------------------------------------

#[test]
fn sqlite_persists_across_reopen() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    {
        let mut s = SqliteStore::open(&path).unwrap();
        s.put_plan("h", b"plan").unwrap();
        create_simple(&mut s, "r1");
        s.put_checkpoint("r1", "cp", b"state").unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.get_plan("h").unwrap().unwrap(), b"plan");
    assert_eq!(s.load("r1").unwrap().rows.len(), 2);
    assert_eq!(s.get_checkpoint("r1", "cp").unwrap().unwrap(), b"state");
}

#[test]
fn sqlite_uses_wal_full_sync_and_records_the_schema_version() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let v: i64 = conn
        .query_row("SELECT schema_version FROM meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "reopening does not add schema rows");
    let indexes: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'runs_by_status'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 1);
}

#[test]
fn sqlite_refuses_a_newer_schema() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    drop(SqliteStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE meta SET schema_version = 99", [])
            .unwrap();
    }
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: 99,
            supported: SCHEMA_VERSION
        }
    );
    assert!(err.to_string().contains("upgrade stratumc"), "{err}");
}

#[test]
fn sqlite_reports_a_file_that_is_not_a_database() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}

#[cfg(unix)]
#[test]
fn sqlite_creates_private_directory_and_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmpdir();
    let path = dir.path().join("home/nested/stratum.db");
    drop(SqliteStore::open(&path).unwrap());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("home/nested")), 0o700);
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn open_default_honours_stratum_home() {
    let dir = tmpdir();
    let home = dir.path().join("state");
    let out = run_child("default_home", &[("STRATUM_HOME", home.as_os_str())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(home.join("stratum.db").is_file());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
    let s = SqliteStore::open(home.join("stratum.db")).unwrap();
    assert_eq!(s.load("from-child").unwrap().version, 1);
}

// --- concurrency ---------------------------------------------------------------

#[test]
fn threads_with_separate_connections_resolve_to_one_winner() {
    let dir = tmpdir();
    for location in durable_locations(dir.path()) {
        threads_race(&location);
    }
}

fn threads_race(location: &StoreLocation) {
    let mut s = location.open().unwrap();
    s.create(&meta("r", 1, "running"), b"", &[], &[]).unwrap();
    drop(s);
    const THREADS: usize = 4;
    const ROUNDS: u64 = 20;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            let location = location.clone();
            std::thread::spawn(move || {
                let mut s = location.open().unwrap();
                let mut wins = 0u64;
                for round in 0..ROUNDS {
                    // Everyone loads the same version, then everyone commits.
                    barrier.wait();
                    let snap = s.load("r").unwrap();
                    assert_eq!(snap.version, round + 1);
                    barrier.wait();
                    let res = s.commit(&Delta {
                        run_id: "r",
                        expected_version: snap.version,
                        meta: &snap.meta,
                        header: b"",
                        rows: &[(t as u64, round.to_le_bytes().to_vec())],
                        events: &[ev(&format!("t{t} r{round}"))],
                    });
                    match res {
                        Ok(v) => {
                            assert_eq!(v, snap.version + 1);
                            wins += 1;
                        }
                        Err(StoreError::Conflict { current, .. }) => {
                            assert_eq!(current, snap.version + 1)
                        }
                        Err(e) => panic!("thread {t}: {e}"),
                    }
                    barrier.wait();
                }
                wins
            })
        })
        .collect();
    let wins: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(wins, ROUNDS, "{location}: exactly one winner per round");
    let s = location.open().unwrap();
    let snap = s.load("r").unwrap();
    assert_eq!(snap.version, ROUNDS + 1);
    assert_eq!(snap.event_count, ROUNDS);
}

#[test]
fn two_processes_commit_the_same_version_and_exactly_one_wins() {
    let dir = tmpdir();
    for (i, location) in durable_locations(dir.path()).into_iter().enumerate() {
        let sync = dir.path().join(format!("store{i}"));
        std::fs::create_dir(&sync).unwrap();
        processes_race(&location, &sync);
    }
}

fn processes_race(location: &StoreLocation, dir: &Path) {
    let db = match location {
        StoreLocation::Sqlite(path) => format!("sqlite:{}", path.display()),
        StoreLocation::Postgres(url) => url.clone(),
    };
    let mut s = location.open().unwrap();
    s.create(&meta("race", 1, "running"), b"", &[], &[])
        .unwrap();
    drop(s);
    const ROUNDS: u64 = 3;
    for round in 0..ROUNDS {
        let sync = dir.join(format!("round{round}"));
        std::fs::create_dir(&sync).unwrap();
        let children: Vec<_> = ["a", "b"]
            .iter()
            .map(|name| {
                let mut cmd = child_command("race");
                cmd.env("STORE_DB", &db)
                    .env("STORE_SYNC", &sync)
                    .env("STORE_NAME", name);
                (name, cmd.spawn().expect("spawn child"))
            })
            .collect();
        // Both have loaded the same version before either commits.
        wait_for(&sync.join("a.ready"));
        wait_for(&sync.join("b.ready"));
        std::fs::write(sync.join("go"), b"").unwrap();
        let mut results = Vec::new();
        for (name, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "child {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            results.push(std::fs::read_to_string(sync.join(format!("{name}.out"))).unwrap());
        }
        let loaded = round + 1;
        let won = format!("ok {}", loaded + 1);
        let lost = format!("conflict {}", loaded + 1);
        results.sort();
        assert_eq!(results, vec![lost, won], "{location}: round {round}");
    }
    let s = location.open().unwrap();
    let snap = s.load("race").unwrap();
    assert_eq!(snap.version, ROUNDS + 1);
    assert_eq!(
        snap.event_count, ROUNDS,
        "one event per round, from the winner"
    );
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn child_command(role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
    cmd.args([
        "zz_child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("STORE_TEST_CHILD", role)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

fn run_child(role: &str, env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let mut cmd = child_command(role);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run child")
}

/// The child side of the process tests; a no-op in a normal run.
#[test]
fn zz_child_process_entry() {
    let Ok(role) = std::env::var("STORE_TEST_CHILD") else {
        return;
    };
    let var = |k: &str| PathBuf::from(std::env::var_os(k).unwrap_or_default());
    match role.as_str() {
        "race" => {
            let sync = var("STORE_SYNC");
            let name = std::env::var("STORE_NAME").unwrap();
            let db = std::env::var("STORE_DB").unwrap();
            let mut s = StoreLocation::parse(&db, "STORE_DB")
                .and_then(|l| l.open())
                .unwrap();
            let snap = s.load("race").unwrap();
            std::fs::write(sync.join(format!("{name}.ready")), b"").unwrap();
            wait_for(&sync.join("go"));
            let res = s.commit(&Delta {
                run_id: "race",
                expected_version: snap.version,
                meta: &snap.meta,
                header: name.as_bytes(),
                rows: &[(1, name.as_bytes().to_vec())],
                events: &[ev(&name)],
            });
            let out = match res {
                Ok(v) => format!("ok {v}"),
                Err(StoreError::Conflict { current, .. }) => format!("conflict {current}"),
                Err(e) => format!("error {e}"),
            };
            std::fs::write(sync.join(format!("{name}.out")), out).unwrap();
        }
        "default_home" => {
            let mut s = SqliteStore::open_default().unwrap();
            s.create(&meta("from-child", 1, "running"), b"", &[], &[])
                .unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}

// --- commit latency (printed, never asserted) ---

/// Many commits on one run, each upserting a new row plus one fixed row and
/// appending two events; prints µs per commit at the start and the end.
/// `STORE_LATENCY_N=10000 cargo test --release -p stratum-vm --test store
/// commit_latency -- --nocapture` gives the README's figures; by default it
/// runs 600 commits (a smoke test that the store takes many commits).
#[test]
fn commit_latency_is_flat() {
    fn measure(name: &str, s: &mut dyn RunStore) {
        let n: u32 = std::env::var("STORE_LATENCY_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(600)
            .max(200);
        const WINDOW: u32 = 100;
        s.create(&meta("r", 1, "running"), &[0u8; 256], &[], &[])
            .unwrap();
        let m = meta("r", 1, "running");
        let header = vec![7u8; 256];
        let row = vec![9u8; 300];
        let mut first = Duration::ZERO;
        let mut last = Duration::ZERO;
        let total = Instant::now();
        for i in 0..n {
            let rows = [
                (u64::from(i) + 1, row.clone()),
                (0, i.to_le_bytes().to_vec()),
            ];
            let events = [
                format!("{{\"type\":\"step_done\",\"step\":\"s{i}\",\"seq\":{i}}}"),
                format!("{{\"type\":\"dispatch\",\"step\":\"s{}\"}}", i + 1),
            ];
            let t = Instant::now();
            s.commit(&Delta {
                run_id: "r",
                expected_version: u64::from(i) + 1,
                meta: &m,
                header: &header,
                rows: &rows,
                events: &events,
            })
            .unwrap();
            let d = t.elapsed();
            if i < WINDOW {
                first += d;
            }
            if i >= n - WINDOW {
                last += d;
            }
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(WINDOW);
        println!(
            "{name}: first {WINDOW} commits {:.1} µs/commit, last {WINDOW} {:.1} µs/commit, \
             all {n} in {:.2} s",
            us(first),
            us(last),
            total.elapsed().as_secs_f64()
        );
        let snap = s.load("r").unwrap();
        assert_eq!(snap.rows.len(), n as usize + 1);
        assert_eq!(snap.event_count, 2 * u64::from(n));
    }
    measure("memory", &mut MemoryStore::new());
    if let Some(url) = pg_url() {
        measure("postgresql (the test server)", open_pg(&url).as_mut());
    }
    let dir = tmpdir();
    measure(
        "sqlite on disk (WAL, synchronous=FULL)",
        &mut SqliteStore::open(dir.path().join("stratum.db")).unwrap(),
    );
    // On tmpfs fsync is nearly free: this shows the SQL cost alone.
    if Path::new("/dev/shm").is_dir() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        measure(
            "sqlite on tmpfs (fsync nearly free)",
            &mut SqliteStore::open(dir.path().join("stratum.db")).unwrap(),
        );
    }
}

#[test]
fn durability_comes_from_stratum_sync_and_is_applied() {
    use stratum_vm::store::Durability;
    assert_eq!(Durability::from_env(None).unwrap(), Durability::PowerLoss);
    assert_eq!(
        Durability::from_env(Some("full")).unwrap(),
        Durability::PowerLoss
    );
    assert_eq!(
        Durability::from_env(Some("normal")).unwrap(),
        Durability::Process
    );
    let e = Durability::from_env(Some("fast")).unwrap_err().to_string();
    assert!(e.contains("STRATUM_SYNC") && e.contains("`normal`"), "{e}");
    let dir = tmpdir();
    for d in [Durability::PowerLoss, Durability::Process] {
        let path = dir.path().join(format!("{d:?}.db"));
        let mut s = SqliteStore::open_with(&path, d).unwrap();
        assert_eq!(s.durability().unwrap(), d);
        create_simple(&mut s, "run-1");
        drop(s);
        let s = SqliteStore::open(&path).unwrap();
        assert!(
            s.load("run-1").is_ok(),
            "{d:?}: the committed run is there after reopening"
        );
    }
}

#[test]
fn meta_reads_one_runs_listing_record() {
    on_both(|s| {
        create_simple(s, "run-a");
        let listed = s.list(None).unwrap();
        assert_eq!(s.meta("run-a").unwrap(), listed[0]);
        assert!(matches!(
            s.meta("run-missing"),
            Err(StoreError::NotFound(_))
        ));
    });
}

// --- damaged files: the right view or an error, never a wrong view ---------

/// A store with three runs (rows rewritten by commits, events, checkpoints)
/// and a plan; returns the file's bytes once every connection is closed (so
/// the write-ahead log is folded into the file).
fn damaged_fixture(path: &Path) -> Vec<u8> {
    let mut s = SqliteStore::open(path).unwrap();
    s.put_plan("p", &vec![7u8; 3000]).unwrap();
    for (n, run) in ["r1", "r2", "r3"].iter().enumerate() {
        let rows: Vec<(u64, Vec<u8>)> = (0..60u64)
            .map(|k| (k, format!(r#"{{"status":"pending","k":{k}}}"#).into_bytes()))
            .collect();
        s.create(
            &meta(run, n as i64, "running"),
            b"header-0",
            &rows,
            &[ev("start")],
        )
        .unwrap();
        for v in 1..30u64 {
            let done: Vec<(u64, Vec<u8>)> = (0..2)
                .map(|i| {
                    let k = (v * 2 + i) % 60;
                    (
                        k,
                        format!(r#"{{"status":"succeeded","k":{k},"v":{v}}}"#).into_bytes(),
                    )
                })
                .collect();
            let status = if v == 29 { "completed" } else { "running" };
            let header = format!("header-{v}").into_bytes();
            s.commit(&Delta {
                run_id: run,
                expected_version: v,
                meta: &meta(run, n as i64, status),
                header: &header,
                rows: &done,
                events: &[ev(&format!("step-{v}"))],
            })
            .unwrap();
        }
        s.put_checkpoint(run, "cp", format!("checkpoint of {run}").as_bytes())
            .unwrap();
        s.put_checkpoint(run, "cp2", b"second").unwrap();
    }
    drop(s);
    assert!(
        !path.with_extension("db-wal").exists()
            || std::fs::metadata(path.with_extension("db-wal"))
                .unwrap()
                .len()
                == 0
    );
    std::fs::read(path).unwrap()
}

/// Every read an operator view makes, each as its Debug text or its error.
fn views(s: &SqliteStore) -> Vec<Result<String, StoreError>> {
    let mut out = vec![
        s.list(None).map(|v| format!("{v:?}")),
        s.list(Some("completed")).map(|v| format!("{v:?}")),
        s.get_plan("p").map(|v| format!("{v:?}")),
    ];
    for run in ["r1", "r2", "r3"] {
        out.push(s.load(run).map(|v| format!("{v:?}")));
        out.push(s.events(run, 0, u64::MAX).map(|v| format!("{v:?}")));
        out.push(s.events(run, 5, 10).map(|v| format!("{v:?}")));
        out.push(s.meta(run).map(|v| format!("{v:?}")));
        out.push(s.version(run).map(|v| format!("{v:?}")));
        out.push(s.checkpoint_labels(run).map(|v| format!("{v:?}")));
        out.push(s.get_checkpoint(run, "cp").map(|v| format!("{v:?}")));
    }
    out
}

/// Opens the damaged `bytes` and checks every view against `good`: equal,
/// or an error. Returns how many views were errors (`None`: the open failed).
fn check_damaged(
    dir: &Path,
    bytes: &[u8],
    good: &[Result<String, StoreError>],
    what: &str,
) -> Option<usize> {
    let path = dir.join(format!("damaged-{}.db", what.replace(' ', "-")));
    std::fs::write(&path, bytes).unwrap();
    let store = match SqliteStore::open(&path) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return None;
        }
    };
    let got = views(&store);
    let mut errors = 0;
    for (i, (g, want)) in got.iter().zip(good).enumerate() {
        match g {
            Ok(v) if Some(v) == want.as_ref().ok() => {}
            Ok(v) => {
                // A flip inside a record's key leaves the record unreachable
                // under its old key: a lookup finds nothing — never other
                // data — and the whole-store scan (`stratumc store check`)
                // reports the damage.
                assert_eq!(
                    v, "None",
                    "{what}: view {i} differs from the undamaged store without an error"
                );
                let scan = store.check();
                assert!(
                    scan.as_ref().map_or(true, |c| !c.healthy()),
                    "{what}: view {i} lost its record and `store check` calls the store healthy: {scan:?}"
                );
                errors += 1;
            }
            Err(_) => errors += 1,
        }
    }
    drop(store);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("db-wal"));
    let _ = std::fs::remove_file(path.with_extension("db-shm"));
    Some(errors)
}

#[test]
fn damaged_stores_give_the_right_view_or_an_error() {
    let dir = tmpdir();
    let bytes = damaged_fixture(&dir.path().join("stratum.db"));
    let good = views(&SqliteStore::open(dir.path().join("stratum.db")).unwrap());
    assert!(good.iter().all(Result::is_ok), "{good:?}");
    // truncations
    let mut cut = 0;
    for k in 1..24 {
        let len = bytes.len() * k / 24;
        if check_damaged(
            dir.path(),
            &bytes[..len],
            &good,
            &format!("truncated to {len}"),
        ) != Some(0)
        {
            cut += 1;
        }
    }
    assert!(cut > 0, "some truncation must be noticed");
    // random bit flips (xorshift; the seed is printed to replay a failure)
    let seed = std::env::var("STORE_FLIP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("flip seed: STORE_FLIP_SEED={seed}");
    let mut x: u64 = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut noticed, mut opened) = (0, 0);
    for trial in 0..150 {
        let mut damaged = bytes.clone();
        for _ in 0..(1 + next() % 3) {
            let at = (next() % damaged.len() as u64) as usize;
            damaged[at] ^= 1 << (next() % 8);
        }
        match check_damaged(dir.path(), &damaged, &good, &format!("flip {trial}")) {
            None => noticed += 1,
            Some(errors) => {
                opened += 1;
                noticed += usize::from(errors > 0);
            }
        }
    }
    eprintln!("bit flips: {noticed} of 150 noticed, {opened} opened");
}

#[test]
fn an_existing_empty_store_file_is_an_error_not_a_new_store() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    std::fs::write(&path, b"").unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("is empty (0 bytes)")),
        "{err}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "the file is left as it was"
    );
    // a missing file is a new store, created complete (never seen empty)
    std::fs::remove_file(&path).unwrap();
    drop(SqliteStore::open(&path).unwrap());
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".new-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// What [`views`] returns.
type Views = Vec<Result<String, StoreError>>;

/// Runs `sql` on a copy of the fixture; returns the views before and after.
fn tampered(sql: &str) -> (Views, Views) {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    damaged_fixture(&path);
    let good = views(&SqliteStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(sql).unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    (good, views(&s))
}

/// The index of `load(r1)` in [`views`].
const LOAD_R1: usize = 3;

#[test]
fn a_deleted_row_is_an_error() {
    let (good, got) = tampered("DELETE FROM run_rows WHERE run_id = 'r1' AND key = 30");
    let err = got[LOAD_R1].as_ref().unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt(m) if m.contains("run `r1` has 60 rows, but 59 are stored")),
        "{err}"
    );
    for (i, (g, w)) in got.iter().zip(&good).enumerate() {
        if i != LOAD_R1 {
            assert_eq!(g, w, "view {i}");
        }
    }
}

#[test]
fn swapped_rows_are_an_error() {
    // blobs swapped, checksums kept: neither matches its key any more
    let (_, got) = tampered(
        "UPDATE run_rows SET blob = CASE key WHEN 4 THEN (SELECT blob FROM run_rows WHERE run_id = 'r2' AND key = 5)
                                           ELSE (SELECT blob FROM run_rows WHERE run_id = 'r2' AND key = 4) END
         WHERE run_id = 'r2' AND key IN (4, 5)",
    );
    let err = got[LOAD_R1 + 7].as_ref().unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt(m) if m.contains("row 4 of run `r2` does not match its checksum")),
        "{err}"
    );
    // blobs and checksums swapped together: the checksum binds the key
    let (_, got) = tampered(
        "UPDATE run_rows SET (blob, sum) = (SELECT blob, sum FROM run_rows AS o WHERE o.run_id = 'r2' AND o.key = 9 - run_rows.key)
         WHERE run_id = 'r2' AND key IN (4, 5)",
    );
    assert!(got[LOAD_R1 + 7].is_err(), "{:?}", got[LOAD_R1 + 7]);
    // a row moved to another run
    let (_, got) =
        tampered("UPDATE run_rows SET run_id = 'r3', key = 60 WHERE run_id = 'r2' AND key = 59");
    assert!(got[LOAD_R1 + 7].is_err());
    assert!(got[LOAD_R1 + 14].is_err());
}

#[test]
fn a_schema_1_store_opens_with_checksums_computed_once() {
    let dir = tmpdir();
    let path = dir.path().join("stratum.db");
    {
        // what stratumc with schema 1 wrote
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (schema_version INTEGER NOT NULL);
             INSERT INTO meta VALUES (1);
             CREATE TABLE plans (hash TEXT PRIMARY KEY NOT NULL, bytes BLOB NOT NULL);
             CREATE TABLE runs (run_id TEXT PRIMARY KEY NOT NULL, plan_hash TEXT NOT NULL,
                 flow TEXT NOT NULL, status TEXT NOT NULL, created_ms INTEGER NOT NULL,
                 updated_ms INTEGER NOT NULL, version INTEGER NOT NULL, header BLOB NOT NULL,
                 event_count INTEGER NOT NULL);
             CREATE INDEX runs_by_created ON runs (created_ms DESC, run_id DESC);
             CREATE INDEX runs_by_status ON runs (status, created_ms DESC, run_id DESC);
             CREATE TABLE run_rows (run_id TEXT NOT NULL, key INTEGER NOT NULL, blob BLOB NOT NULL,
                 PRIMARY KEY (run_id, key)) WITHOUT ROWID;
             CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, json TEXT NOT NULL,
                 PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
             CREATE TABLE checkpoints (run_id TEXT NOT NULL, label TEXT NOT NULL,
                 position INTEGER NOT NULL, blob BLOB NOT NULL, PRIMARY KEY (run_id, label));
             CREATE INDEX checkpoints_by_position ON checkpoints (run_id, position);
             INSERT INTO plans VALUES ('p', x'0102');
             INSERT INTO runs VALUES ('old', 'p', 'main', 'running', 5, 6, 3, x'68', 1);
             INSERT INTO run_rows VALUES ('old', 0, x'61'), ('old', 1, x'62');
             INSERT INTO events VALUES ('old', 0, '{\"type\":\"start\"}');
             INSERT INTO checkpoints VALUES ('old', 'cp', 0, x'63');",
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&path).unwrap();
    let snap = s.load("old").unwrap();
    assert_eq!(snap.version, 3);
    assert_eq!(snap.rows, vec![(0, b"a".to_vec()), (1, b"b".to_vec())]);
    assert_eq!(s.events("old", 0, 10).unwrap(), vec![ev("start")]);
    assert_eq!(s.get_plan("p").unwrap().unwrap(), vec![1, 2]);
    assert_eq!(s.get_checkpoint("old", "cp").unwrap().unwrap(), b"c");
    let report = s.check().unwrap();
    assert!(report.healthy(), "{report:?}");
    // it keeps working as a schema 2 store
    s.commit(&Delta {
        run_id: "old",
        expected_version: 3,
        meta: &meta("old", 5, "completed"),
        header: b"h2",
        rows: &[(2, b"c".to_vec())],
        events: &[ev("done")],
    })
    .unwrap();
    assert_eq!(s.load("old").unwrap().rows.len(), 3);
    drop(s);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("SELECT schema_version FROM meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    // from now on a record without a checksum is damage
    conn.execute("UPDATE run_rows SET sum = NULL WHERE key = 0", [])
        .unwrap();
    drop(conn);
    let s = SqliteStore::open(&path).unwrap();
    let err = s.load("old").unwrap_err();
    assert!(
        err.to_string()
            .contains("row 0 of run `old` has no checksum"),
        "{err}"
    );
    let report = s.check().unwrap();
    assert!(!report.healthy());
    assert_eq!(report.damage.len(), 1, "{report:?}");
    assert_eq!(
        report.damage[0].to_string(),
        "run `old`: row 0 has no checksum (every record of schema 2 carries one)"
    );
}

// --- PostgreSQL specifics ------------------------------------------------------

#[test]
fn postgres_persists_across_reopen_and_records_the_schema_version() {
    let Some(url) = pg_url() else { return };
    {
        let mut s = open_pg(&url);
        s.put_plan("h", b"plan").unwrap();
        create_simple(s.as_mut(), "r1");
        s.put_checkpoint("r1", "cp", b"state").unwrap();
    }
    let s = open_pg(&url);
    assert_eq!(s.get_plan("h").unwrap().unwrap(), b"plan");
    assert_eq!(s.load("r1").unwrap().rows.len(), 2);
    assert_eq!(s.get_checkpoint("r1", "cp").unwrap().unwrap(), b"state");
    drop(s);
    assert_eq!(
        psql(&url, "SELECT version FROM stratum_schema"),
        SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        psql(&url, "SELECT count(*) FROM stratum_schema"),
        "1",
        "reopening does not add schema rows"
    );
}

#[test]
fn postgres_refuses_a_newer_schema() {
    let Some(url) = pg_url() else { return };
    drop(open_pg(&url));
    psql(&url, "UPDATE stratum_schema SET version = 99");
    let Err(err) = StoreLocation::Postgres(url).open() else {
        panic!("opened a store of a newer schema")
    };
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: 99,
            supported: SCHEMA_VERSION
        }
    );
}

#[test]
fn postgres_damaged_records_are_corrupt_errors_naming_them() {
    let Some(url) = pg_url() else { return };
    {
        let mut s = open_pg(&url);
        create_simple(s.as_mut(), "r1");
        s.create_agent_run(&agent_run("agent-a", Some(("r1", "draft")), 1))
            .unwrap();
        s.acquire_lease(&lease("a", 0, 100)).unwrap();
    }
    psql(&url, "UPDATE run_rows SET blob = 'x'::bytea WHERE key = 3");
    psql(&url, "UPDATE agent_runs SET pgid = 1");
    psql(&url, "UPDATE leases SET expires_ms = 999999");
    let s = open_pg(&url);
    let e = s.load("r1").unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("row 3 of run `r1` does not match its checksum")),
        "{e}"
    );
    let e = s.agent_run("agent-a").unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("agent run `agent-a`")),
        "{e}"
    );
    let e = s.lease("r1").unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("the lease of run `r1`")),
        "{e}"
    );
    psql(&url, "DELETE FROM events WHERE seq = 0");
    let e = s.events("r1", 0, 10).unwrap_err();
    assert!(matches!(&e, StoreError::Corrupt(_)), "{e}");
}

#[test]
fn postgres_unreachable_is_an_io_error_naming_the_server() {
    // a port nothing listens on: bind one, then close it
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://nobody@127.0.0.1:{port}/runs");
    match StoreLocation::Postgres(url).open() {
        Err(StoreError::Io(m)) => {
            assert!(m.contains(&format!("127.0.0.1:{port}/runs")), "{m}")
        }
        Err(e) => panic!("not an i/o error: {e:?}"),
        Ok(_) => panic!("opened a store on a closed port"),
    }
}

#[test]
fn postgres_wakes_a_waiter_when_another_connection_commits() {
    let Some(url) = pg_url() else { return };
    let watcher = open_pg(&url);
    assert!(watcher.pushes_changes());
    let mut writer = open_pg(&url);
    create_simple(writer.as_mut(), "r1");
    // the first wait starts listening and returns at once
    assert!(
        watcher
            .wait_for_change(Some("r1"), Duration::from_secs(60))
            .unwrap()
    );
    let seen = watcher.version("r1").unwrap();
    let commit = std::thread::spawn(move || {
        let snap = writer.load("r1").unwrap();
        writer
            .commit(&Delta {
                run_id: "r1",
                expected_version: snap.version,
                meta: &snap.meta,
                header: b"h2",
                rows: &[],
                events: &[ev("next")],
            })
            .unwrap()
    });
    // woken by the commit's NOTIFY (a timeout would return false)
    assert!(
        watcher
            .wait_for_change(Some("r1"), Duration::from_secs(120))
            .unwrap(),
        "no notification"
    );
    let committed = commit.join().unwrap();
    assert_eq!(watcher.version("r1").unwrap(), committed);
    assert!(committed > seen);
}

#[test]
fn a_store_that_cannot_push_sleeps_and_reports_no_change() {
    let dir = tmpdir();
    let s = SqliteStore::open(dir.path().join("stratum.db")).unwrap();
    assert!(!s.pushes_changes());
    assert!(!s.wait_for_change(None, Duration::from_millis(1)).unwrap());
}

#[test]
fn two_connections_asking_for_one_lease_at_once_get_it_once() {
    let dir = tmpdir();
    for location in durable_locations(dir.path()) {
        for round in 0..5 {
            let run = format!("lease-{round}");
            let barrier = Arc::new(Barrier::new(2));
            let askers: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|holder| {
                    let (location, barrier, run) =
                        (location.clone(), Arc::clone(&barrier), run.clone());
                    std::thread::spawn(move || {
                        let mut s = location.open().unwrap();
                        let mut asked = lease(holder, 0, 1000);
                        asked.run_id = run;
                        barrier.wait();
                        s.acquire_lease(&asked).unwrap()
                    })
                })
                .collect();
            let mut grants: Vec<String> = askers
                .into_iter()
                .map(|h| match h.join().unwrap() {
                    LeaseGrant::Granted => "granted".to_owned(),
                    LeaseGrant::Held(_) => "held".to_owned(),
                    other => format!("{other:?}"),
                })
                .collect();
            grants.sort();
            assert_eq!(grants, ["granted", "held"], "{location}, round {round}");
        }
    }
}

#[test]
fn postgres_a_lost_connection_fails_the_call_and_the_next_call_reconnects() {
    let Some(url) = pg_url() else { return };
    let name = format!("stratum_reconnect_{}", std::process::id());
    let url = format!("{url}&application_name={name}");
    let mut s = open_pg(&url);
    create_simple(s.as_mut(), "r1");
    // the server ends the store's connection (as a restart or a network cut would)
    psql(
        &url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}' AND pid <> pg_backend_pid()"
        ),
    );
    let snap = loop {
        // the call that finds the connection gone is an error, never a success
        match s.load("r1") {
            Ok(snap) => break snap,
            Err(StoreError::Io(m)) => {
                assert!(m.contains("127.0.0.1") || m.contains("localhost"), "{m}")
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(snap.version, 1);
    let v = s
        .commit(&Delta {
            run_id: "r1",
            expected_version: 1,
            meta: &snap.meta,
            header: b"h2",
            rows: &[],
            events: &[ev("after")],
        })
        .unwrap();
    assert_eq!(v, 2);
}

/// `stratumc store migrate`'s copier into every store: a SQLite store with
/// runs, events, checkpoints and a guard ledger arrives whole (digests read
/// back from the destination equal the source's), and a second copy skips
/// everything.
#[test]
fn a_sqlite_store_copies_into_each_store_and_verifies() {
    use stratum_vm::store::{
        GuardRecord, GuardStore, GuardWrite, LedgerRow, copy_store, verify_copy,
    };
    let dir = tmpdir();
    let mut src = SqliteStore::open(dir.path().join("source.db")).expect("open sqlite");
    src.put_plan("blake3:plan", b"plan").unwrap();
    for (i, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        src.create(
            &meta(id, 10 + i as i64, "running"),
            b"header",
            &[(1, b"a".to_vec()), (2, b"b".to_vec())],
            &[ev("start"), ev("step")],
        )
        .unwrap();
    }
    src.put_checkpoint("r2", "before", b"cp").unwrap();
    src.guard_write(&GuardWrite {
        record: &GuardRecord {
            resource_id: "res".into(),
            policy: "{}".into(),
            checksum: "c".into(),
            state: "s".into(),
            graph_version: 1,
            version: 0,
            ledger_len: 1,
            head: "h0".into(),
        },
        expected_version: None,
        entries: &[LedgerRow {
            seq: 0,
            hash: "h0".into(),
            idempotency_key: Some("k".into()),
            json: "{}".into(),
        }],
    })
    .unwrap();
    on_both(|dest| {
        let first = copy_store(&src, dest).unwrap();
        assert_eq!(
            (first.runs_copied, first.events, first.checkpoints),
            (3, 6, 1)
        );
        assert_eq!((first.guards_copied, first.ledger_rows), (1, 1));
        assert!(first.mismatches.is_empty(), "{:?}", first.mismatches);
        assert_eq!(verify_copy(&src, dest).unwrap(), first.digest);
        assert_eq!(
            dest.get_plan("blake3:plan").unwrap().as_deref(),
            Some(&b"plan"[..])
        );
        let again = copy_store(&src, dest).unwrap();
        assert_eq!((again.runs_copied, again.runs_present), (0, 3));
        assert_eq!(again.guards_present, 1);
        assert_eq!(again.digest, first.digest);
    });
}
