//! Cost flat in the store's size (issue 18 §5): each measured operation at
//! two sizes, printed as a table for the README's "Scale" section.
//!
//! - `step_done`: `Engine::report` (what `stratum_step_done` runs: load,
//!   transition, one store commit) on runs in a store that already holds
//!   N finished runs, reporting on a different run each time, as a server
//!   with many runs in flight does (the engine's one-run cache misses);
//! - `resume`: `Engine::resume` on those runs, and the whole
//!   `stratumc run --resume RUN` process (lease, agent command, commits);
//! - `query flows --limit 50` (and the unpaged listing beside it): the
//!   `stratumc` binary on that store;
//! - a fanout of N items: each item's report, on one run (cache hit), and
//!   the load of the run from the store (cache miss).
//!
//! `cargo bench -p stratumc --bench scale` runs the default sizes (1,000 and
//! 100,000 finished runs; fanouts of 100 and 10,000 items); `SCALE_RUNS` and
//! `SCALE_ITEMS` (comma-separated) choose others, `SCALE_SAMPLES` how many
//! timed operations per figure (default 300). Stores are built under the
//! cargo target directory (a real disk); the populating connection commits
//! with `STRATUM_SYNC=normal`, the measured ones with the durability
//! `STRATUM_SYNC` asks for (default `full`).
//!
//! Owns: timing only; every operation's result is checked.
//! Must never: assert on time (figures go to the README).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stratum_compiler::analyze;
use stratum_compiler::build::build_plan;
use stratum_vm::engine::{Engine, LoadedPlan};
use stratum_vm::interp::{FileEvidence, FileRoot, Host, HostError, Outcome, Report, Verdict};
use stratum_vm::plan::file;
use stratum_vm::store::{Durability, RunStore, SqliteStore};

/// A flow of two `do` steps: runs are started, then reported on.
const TWO_STEPS: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${second.output}\", contract: R}
    steps:
      - id: first
        do: \"first\"
        out: R
      - id: second
        after: [first]
        do: \"second\"
        out: R
";

/// One `do` step: the finished runs that fill the store.
const ONE_STEP: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${only.output}\", contract: R}
    steps:
      - id: only
        do: \"only\"
        out: R
";

/// A fanout over `input.items`, eight in flight.
const FANOUT: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {items: \"string[]\"}
    output: {from: \"${sum.output}\", contract: R}
    steps:
      - id: fan
        fanout:
          over: \"${input.items}\"
          concurrency: 8
          isolation: none
          require: all
          merge: sequential
          dispatch: consumer
          steps:
            - do: \"inspect ${item}\"
              out: R
      - id: sum
        after: [fan]
        do: \"summarise\"
        out: R
";

/// The clock, and no files or judge (the specs use none).
struct Clock;

impl Host for Clock {
    fn now_ms(&mut self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
    fn file_exists(&mut self, _: FileRoot<'_>, _: &str) -> Result<FileEvidence, HostError> {
        Err(HostError::Unsupported("no files".into()))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        _: &str,
        _: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Err(HostError::Unsupported("no files".into()))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Err(HostError::Judge("no judge".into()))
    }
}

fn sizes(var: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(var).map_or_else(
        |_| default.to_vec(),
        |v| {
            // empty: skip that table
            v.split(',')
                .filter(|n| !n.trim().is_empty())
                .map(|n| {
                    n.trim()
                        .replace('_', "")
                        .parse()
                        .expect("sizes are numbers")
                })
                .collect()
        },
    )
}

fn samples() -> usize {
    std::env::var("SCALE_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// The store of a benchmark. The one place that opens one: the store the
/// binary uses (`$STRATUM_HOME/stratum.db`) at `home`.
fn open_store(home: &Path, durability: Durability) -> Box<dyn RunStore> {
    Box::new(SqliteStore::open_with(home.join("stratum.db"), durability).expect("store opens"))
}

fn measured_durability() -> Durability {
    Durability::from_env(std::env::var("STRATUM_SYNC").ok().as_deref()).expect("STRATUM_SYNC")
}

fn plan(engine: &mut Engine, spec: &str) -> LoadedPlan {
    let a = analyze(spec);
    assert!(
        a.ir.is_some(),
        "the benchmark spec checks: {:?}",
        a.diagnostics
    );
    let (bytes, _) = file::encode(&build_plan(&a).expect("the benchmark spec builds"));
    engine.add_plan(&bytes).expect("plan stored")
}

fn value(v: &str) -> Report {
    Report::from_json(&json!({"output": {"value": v}})).expect("a report")
}

/// Reports the one ready entry of `out` (the first, when several).
fn report_first(engine: &mut Engine, run: &str, out: &Outcome, host: &mut Clock) -> Outcome {
    let e = out.ready.first().expect("an entry is ready");
    let (id, token) = (e.id.clone(), e.dispatch_token.clone());
    engine
        .report(run, &id, Some(&token), &value("x"), host)
        .expect("report accepted")
}

/// Timings in microseconds, sorted.
struct Figure(Vec<f64>);

impl Figure {
    fn new(mut v: Vec<Duration>) -> Figure {
        v.sort();
        Figure(v.iter().map(|d| d.as_secs_f64() * 1e6).collect())
    }
    fn pct(&self, p: f64) -> f64 {
        let n = self.0.len();
        if n == 0 {
            return f64::NAN;
        }
        let i = ((p / 100.0) * (n as f64 - 1.0)).round() as usize;
        self.0[i.min(n - 1)]
    }
    fn cell(&self) -> String {
        format!(
            "{} / {}",
            human_us(self.pct(50.0)),
            human_us(self.pct(99.0))
        )
    }
}

fn human_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn scratch(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("scale-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Fills the store at `home` with `n` finished runs of ONE_STEP.
fn populate(home: &Path, n: u64) {
    let started = Instant::now();
    let mut engine = Engine::new(open_store(home, Durability::Process));
    let lp = plan(&mut engine, ONE_STEP);
    let mut host = Clock;
    for _ in 0..n {
        let (run, out) = engine
            .start(&lp, None, json!({}), &mut host, None)
            .expect("run starts");
        let done = report_first(&mut engine, &run, &out, &mut host);
        assert_eq!(done.wire_status(), "completed");
    }
    eprintln!(
        "  populated {n} finished runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// `stratumc ARGS` with `STRATUM_HOME=home`: its wall time, checked to succeed.
fn stratumc(home: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
        .env("STRATUM_HOME", home)
        .current_dir(home)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("stratumc runs");
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "stratumc {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// Rows of the runs table: (what, figure at each size).
type Rows = Vec<(String, Vec<String>)>;

fn push(rows: &mut Rows, what: &str, col: usize, cell: String) {
    match rows.iter_mut().find(|(w, _)| w == what) {
        Some((_, cells)) => {
            cells.resize(col + 1, String::new());
            cells[col] = cell;
        }
        None => {
            let mut cells = vec![String::new(); col + 1];
            cells[col] = cell;
            rows.push((what.to_string(), cells));
        }
    }
}

fn store_size(rows: &mut Rows, col: usize, n: u64) {
    eprintln!("store with {n} finished runs:");
    let home = scratch(&format!("runs-{n}"));
    populate(&home, n);
    let m = samples();
    let mut engine = Engine::new(open_store(&home, measured_durability()));
    let lp = plan(&mut engine, TWO_STEPS);
    let mut host = Clock;
    let runs: Vec<(String, Outcome)> = (0..m)
        .map(|_| {
            engine
                .start(&lp, None, json!({}), &mut host, None)
                .expect("run starts")
        })
        .collect();
    // each report is on another run than the last: the engine reloads it
    let mut times = Vec::new();
    for (run, out) in &runs {
        let t = Instant::now();
        let next = report_first(&mut engine, run, out, &mut host);
        times.push(t.elapsed());
        assert_eq!(next.ready.len(), 1, "`second` is ready");
    }
    push(
        rows,
        "step_done (engine report + commit)",
        col,
        Figure::new(times).cell(),
    );

    let mut times = Vec::new();
    for (run, _) in &runs {
        let t = Instant::now();
        let (out, _) = engine.resume(run, None, &mut host).expect("resumes");
        times.push(t.elapsed());
        assert_eq!(out.ready.len(), 1);
    }
    push(rows, "resume (engine)", col, Figure::new(times).cell());
    drop(engine);

    let agent = r#"printf '{"output": {"value": "done"}}'"#;
    let times: Vec<Duration> = runs
        .iter()
        .take(20)
        .map(|(run, _)| {
            stratumc(
                &home,
                &["run", "--resume", run, "--agent", agent, "--format", "json"],
            )
        })
        .collect();
    push(
        rows,
        "`stratumc run --resume RUN` (process, to completion)",
        col,
        Figure::new(times).cell(),
    );

    let store = open_store(&home, measured_durability());
    let times: Vec<Duration> = (0..m.min(200))
        .map(|_| {
            let t = Instant::now();
            let page = store.list_page(None, 50, None).expect("a page");
            let d = t.elapsed();
            assert_eq!(page.len(), 50);
            d
        })
        .collect();
    push(
        rows,
        "list_page(50) (store)",
        col,
        Figure::new(times).cell(),
    );
    let times: Vec<Duration> = (0..10)
        .map(|_| {
            stratumc(
                &home,
                &["query", "flows", "--limit", "50", "--format", "json"],
            )
        })
        .collect();
    push(
        rows,
        "`stratumc query flows --limit 50` (process)",
        col,
        Figure::new(times).cell(),
    );
    let times: Vec<Duration> = (0..3)
        .map(|_| stratumc(&home, &["query", "flows", "--format", "json"]))
        .collect();
    push(
        rows,
        "`stratumc query flows` unpaged (process)",
        col,
        Figure::new(times).cell(),
    );
    let _ = std::fs::remove_dir_all(&home);
}

fn fanout_size(rows: &mut Rows, col: usize, n: u64) {
    eprintln!("fanout of {n} items:");
    let home = scratch(&format!("items-{n}"));
    let mut engine = Engine::new(open_store(&home, measured_durability()));
    let lp = plan(&mut engine, FANOUT);
    let mut host = Clock;
    let items: Vec<String> = (0..n).map(|k| format!("item-{k}")).collect();
    let t = Instant::now();
    let (run, mut out) = engine
        .start(&lp, None, json!({ "items": items }), &mut host, None)
        .expect("run starts");
    let start = t.elapsed();
    let m = samples().min(usize::try_from(n).unwrap_or(usize::MAX));
    let mut times = Vec::new();
    let mut bytes_after = 0;
    for i in 0..m {
        let t = Instant::now();
        out = report_first(&mut engine, &run, &out, &mut host);
        times.push(t.elapsed());
        if i + 1 == m {
            bytes_after = stored_bytes(&home, &run);
        }
    }
    push(
        rows,
        "start the run (fanout of N items)",
        col,
        human_us(start.as_secs_f64() * 1e6),
    );
    push(
        rows,
        "item report (engine report + commit)",
        col,
        Figure::new(times).cell(),
    );
    push(
        rows,
        "bytes stored for the run (rows + header)",
        col,
        format!("{:.1} MB after {m} reports", bytes_after as f64 / 1e6),
    );
    // a cold engine: what a server pays when it touches the run after another
    let times: Vec<Duration> = (0..20)
        .map(|_| {
            let mut cold = Engine::new(open_store(&home, measured_durability()));
            let t = Instant::now();
            let o = cold.poll(&run, &mut host).expect("poll");
            let d = t.elapsed();
            assert!(!o.ready.is_empty());
            d
        })
        .collect();
    push(
        rows,
        "load the run (cache miss)",
        col,
        Figure::new(times).cell(),
    );
    drop(engine);
    let _ = std::fs::remove_dir_all(&home);
}

/// The bytes of the run's rows and header in the store.
fn stored_bytes(home: &Path, run: &str) -> u64 {
    let store = open_store(home, Durability::Process);
    let snap = store.load(run).expect("the run loads");
    (snap.header.len() + snap.rows.iter().map(|(_, b)| b.len()).sum::<usize>()) as u64
}

fn print_table(title: &str, sizes: &[u64], rows: &Rows) {
    println!("\n{title}\n");
    let head: Vec<String> = sizes.iter().map(|n| format!("N = {n}")).collect();
    println!("| p50 / p99 | {} |", head.join(" | "));
    println!("| --- |{}", " --- |".repeat(sizes.len()));
    for (what, cells) in rows {
        println!("| {what} | {} |", cells.join(" | "));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments
    let runs = sizes("SCALE_RUNS", &[1_000, 100_000]);
    let items = sizes("SCALE_ITEMS", &[100, 10_000]);
    let mut rows = Rows::new();
    for (col, &n) in runs.iter().enumerate() {
        store_size(&mut rows, col, n);
    }
    print_table("finished runs in the store (N):", &runs, &rows);
    let mut rows = Rows::new();
    for (col, &n) in items.iter().enumerate() {
        fanout_size(&mut rows, col, n);
    }
    print_table(
        &format!("a fanout of N items (first {} reports):", samples()),
        &items,
        &rows,
    );
}
