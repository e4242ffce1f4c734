//! `stratumc run` through the binary, each test with its own `STRATUM_HOME`:
//!
//! - the examples run to completion with their scripted agents
//!   (`examples/agents/<example>.py`, inputs `examples/inputs/<example>.json`,
//!   a copy of `examples/workspaces/<example>/`, and the fake judge
//!   `examples/agents/fake-judge.py` when the workspace has a `stratum.toml`),
//!   the same setup as `scripts/run-examples.sh`;
//! - exit codes (0 completed, 1 failed or paused, 2 usage / invalid spec /
//!   invalid input), the `--format json` document, the `run: <id>` line;
//! - `--resume` after a gate pause, and refused against another plan (E6);
//! - crash safety: a 200-step chain killed with SIGKILL at random points and
//!   resumed until it completes, then checked against the audit in SQLite.
//!
//! The example tests need `python3` (agents and judge use the standard
//! library only). Set `PYTHON` to choose the interpreter, and
//! `STRATUM_CRASH_SEED` to replay the kill points of a crash-test run.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stratum_vm::store::StoreLocation;

mod support;
use support::Ran;

// ---------------------------------------------------------------------------
// Harness

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python interpreter for agents and the fake judge: `$PYTHON`, else the
/// real `python3` executable (not a version-manager shim; every dispatch
/// starts one, so a slow shim shows).
fn python() -> &'static str {
    static PY: OnceLock<String> = OnceLock::new();
    PY.get_or_init(|| {
        if let Some(p) = std::env::var("PYTHON").ok().filter(|p| !p.is_empty()) {
            return p;
        }
        Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "python3".to_string())
    })
}

/// A scratch directory holding `STRATUM_HOME` (`home/`) and workspaces,
/// removed on drop; its run store is `home/stratum.db`, or the PostgreSQL
/// database of `store` (`STRATUM_STORE`).
struct Scratch(PathBuf, Option<String>);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(support::scratch("run", tag), None)
    }

    fn on_postgres(tag: &str, url: String) -> Scratch {
        Scratch(support::scratch("run", tag), Some(url))
    }

    /// Every run in the store: (id, status), oldest first.
    fn runs(&self) -> Vec<(String, String)> {
        match &self.1 {
            None => runs(&self.db()),
            Some(url) => {
                let store = StoreLocation::Postgres(url.clone()).open().unwrap();
                let mut all: Vec<(String, String)> = store
                    .list(None)
                    .unwrap()
                    .into_iter()
                    .map(|m| (m.run_id, m.status))
                    .collect();
                all.reverse();
                all
            }
        }
    }

    /// The event log of a run, parsed.
    fn events(&self, run_id: &str) -> Vec<Value> {
        match &self.1 {
            None => events(&self.db(), run_id),
            Some(url) => StoreLocation::Postgres(url.clone())
                .open()
                .unwrap()
                .events(run_id, 0, u64::MAX)
                .unwrap()
                .iter()
                .map(|j| serde_json::from_str(j).unwrap())
                .collect(),
        }
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn home(&self) -> PathBuf {
        self.0.join("home")
    }

    fn db(&self) -> PathBuf {
        self.home().join("stratum.db")
    }

    /// `stratumc` with this `STRATUM_HOME`, run in the scratch dir (so no
    /// stray `stratum.toml` is found) with stdin not a terminal.
    fn stratumc(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.home());
        match &self.1 {
            Some(url) => c.env("STRATUM_STORE", url),
            None => c.env_remove("STRATUM_STORE"),
        };
        c.env_remove("STRATUM_SCENARIO")
            .env_remove("STRATUM_PREFER")
            .current_dir(&self.0)
            .stdin(Stdio::null());
        c
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Checks the `--format json` document: exactly
/// `{"version":1,"runId","status","output","failure"}`.
fn assert_doc_shape(doc: &Value, run_id: &str) {
    let keys: BTreeSet<&str> = doc
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["version", "runId", "status", "output", "failure"]),
        "{doc}"
    );
    assert_eq!(doc["version"], 1, "{doc}");
    assert_eq!(doc["runId"], run_id, "{doc}");
    assert!(doc["status"].is_string(), "{doc}");
    match &doc["failure"] {
        Value::Null => {}
        Value::Object(f) => {
            assert!(f["reason"].is_string() && f["attempt"].is_u64(), "{doc}");
        }
        other => panic!("failure must be null or an object, got {other}"),
    }
}

/// The audit of a run: the `events` table, in order.
fn events(db: &Path, run_id: &str) -> Vec<Value> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT json FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([run_id], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|j| serde_json::from_str(&j.unwrap()).unwrap())
        .collect()
}

/// Every run in the store: (id, status).
fn runs(db: &Path) -> Vec<(String, String)> {
    if !db.exists() {
        return Vec::new();
    }
    let conn = rusqlite::Connection::open(db).unwrap();
    // a process killed while creating the store leaves it without tables
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    if tables == 0 {
        return Vec::new();
    }
    let mut stmt = conn
        .prepare("SELECT run_id, status FROM runs ORDER BY created_ms")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The audit without `resumed` markers (one per process that continued the
/// run; see `uninterrupted_run_records_no_resumed_event`).
fn settled(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] != "resumed")
        .cloned()
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str, step: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind && e["stepId"] == step)
        .collect()
}

/// `result` events of a step that carry an output (accepted results).
fn accepted<'a>(events: &'a [Value], step: &str) -> Vec<&'a Value> {
    of_type(events, "result", step)
        .into_iter()
        .filter(|e| e["detail"].get("output").is_some() && e["detail"].get("failure").is_none())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `examples/agents/fake-judge.py` on a port the OS picks; killed on drop.
struct FakeJudge {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl FakeJudge {
    fn start(log: PathBuf) -> FakeJudge {
        let mut child = Command::new(python())
            .arg(root().join("examples/agents/fake-judge.py"))
            .arg("0")
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the fake judge");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        let Ok(port) = line.trim().parse() else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the fake judge did not report its port: {line:?}");
        };
        FakeJudge { child, port, log }
    }

    /// One entry per judge call: `{n, model, statement, stakes, holds}`.
    fn verdicts(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for FakeJudge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One example set up as scripts/run-examples.sh does: a fresh home, a copy
/// of its workspace, the fake judge wired into the copy's `stratum.toml`.
struct Example {
    name: String,
    ws: PathBuf,
    judge: Option<FakeJudge>,
    // dropped last: the judge's log lives in here
    scratch: Scratch,
}

impl Example {
    fn new(name: &str) -> Example {
        let scratch = Scratch::new(name);
        let ws = scratch.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let source = root().join("examples/workspaces").join(name);
        if source.is_dir() {
            copy_dir(&source, &ws);
        }
        let toml = ws.join("stratum.toml");
        let judge = toml.exists().then(|| {
            let judge = FakeJudge::start(scratch.path().join("judge.log"));
            let text = std::fs::read_to_string(&toml).unwrap();
            let text: String = text
                .lines()
                .map(|l| {
                    if l.trim_start().starts_with("url") {
                        format!("url = \"http://127.0.0.1:{}/v1\"\n", judge.port)
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            std::fs::write(&toml, text).unwrap();
            judge
        });
        Example {
            name: name.to_string(),
            ws,
            judge,
            scratch,
        }
    }

    fn spec(&self) -> PathBuf {
        root().join(format!("examples/{}.stratum.yaml", self.name))
    }

    fn agent(&self) -> String {
        let script = root().join(format!("examples/agents/{}.py", self.name));
        format!("'{}' '{}'", python(), script.display())
    }

    /// `stratumc run` (or `--resume`) with the example's agent and workspace,
    /// `--format json`, plus `extra`.
    fn command(&self, resume: Option<&str>, extra: &[&str]) -> Command {
        match resume {
            Some(id) => self.command_with(&["--resume", id], extra),
            None => {
                let inputs = format!(
                    "@{}",
                    root()
                        .join(format!("examples/inputs/{}.json", self.name))
                        .display()
                );
                self.start_with(&inputs, extra)
            }
        }
    }

    /// A new run of the example with these `--inputs`.
    fn start_with(&self, inputs: &str, extra: &[&str]) -> Command {
        let spec = self.spec().display().to_string();
        self.command_with(&[&spec, "--inputs", inputs], extra)
    }

    fn command_with(&self, head: &[&str], extra: &[&str]) -> Command {
        let mut c = self.scratch.stratumc();
        c.arg("run")
            .args(head)
            .args(["--agent", &self.agent()])
            .arg("--workspace")
            .arg(&self.ws)
            .args(["--format", "json"])
            .args(extra);
        c
    }

    fn run(&self, extra: &[&str]) -> Ran {
        Ran::of(&mut self.command(None, extra))
    }

    fn events(&self, run_id: &str) -> Vec<Value> {
        events(&self.scratch.db(), run_id)
    }

    fn verdicts(&self) -> Vec<Value> {
        self.judge
            .as_ref()
            .map(FakeJudge::verdicts)
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// The examples

#[test]
fn every_example_has_an_agent_and_inputs() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".stratum.yaml") {
            names.push(stem.to_string());
        }
    }
    assert!(names.len() >= 7, "{names:?}");
    for n in &names {
        for p in [
            format!("examples/agents/{n}.py"),
            format!("examples/inputs/{n}.json"),
        ] {
            assert!(root().join(&p).is_file(), "{p} is missing");
        }
        // every example with a judged ensure has a judge in its workspace
        let spec =
            std::fs::read_to_string(root().join(format!("examples/{n}.stratum.yaml"))).unwrap();
        if spec.contains("judged:") {
            let toml = root().join(format!("examples/workspaces/{n}/stratum.toml"));
            assert!(toml.is_file(), "{} is missing", toml.display());
        }
    }
    assert!(root().join("scripts/run-examples.sh").is_file());
    assert!(root().join("examples/agents/fake-judge.py").is_file());
}

#[test]
fn example_minimal_classifier() {
    let ex = Example::new("minimal-classifier");
    let r = ex.run(&["--gate", "approve"]);
    let output = r.completed();
    assert_eq!(output, json!({"label": "positive", "confidence": 0.92}));
    let ev = ex.events(&r.run_id());
    // attempt 1 breaks `result.confidence > 0.7`, attempt 2 is accepted
    let results = of_type(&ev, "result", "classify_text");
    assert_eq!(results.len(), 2, "{ev:#?}");
    assert!(
        results[0]["detail"]["failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("result.confidence > 0.7")
    );
    assert_eq!(accepted(&ev, "classify_text").len(), 1);
}

#[test]
fn example_on_fail_routing() {
    let ex = Example::new("on-fail-routing");
    let r = ex.run(&["--gate", "approve"]);
    assert_eq!(r.completed()["details"], "opened pull request #42");
    let ev = ex.events(&r.run_id());
    let routed = of_type(&ev, "routed", "generate");
    assert_eq!(routed.len(), 1, "{ev:#?}");
    assert_eq!(routed[0]["detail"]["target"], "recover");
    assert_eq!(of_type(&ev, "skipped", "verify").len(), 1, "{ev:#?}");
    assert_eq!(accepted(&ev, "recover").len(), 1);
    assert_eq!(accepted(&ev, "publish").len(), 1);

    // the happy path: generate succeeds, verify runs, recover never does
    let r = Ran::of(
        ex.command(None, &["--gate", "approve"])
            .env("STRATUM_SCENARIO", "happy"),
    );
    r.completed();
    let ev = ex.events(&r.run_id());
    assert!(of_type(&ev, "routed", "generate").is_empty());
    assert_eq!(accepted(&ev, "verify").len(), 1);
    assert!(of_type(&ev, "result", "recover").is_empty());
}

#[test]
fn example_reviewed_work_gate() {
    let ex = Example::new("reviewed-work-gate");
    let r = ex.run(&["--gate", "approve"]);
    let output = r.completed();
    assert_eq!(output["quality_score"], 0.9);
    let ev = ex.events(&r.run_id());
    assert_eq!(of_type(&ev, "result", "work").len(), 2, "{ev:#?}");
    assert_eq!(of_type(&ev, "judged", "work").len(), 1, "{ev:#?}");
    assert_eq!(of_type(&ev, "gate_resolved", "review").len(), 1);
    let verdicts = ex.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0]["stakes"], "default");
    assert_eq!(verdicts[0]["model"], "fake");
}

#[test]
fn example_iterate() {
    let ex = Example::new("iterate");
    let r = ex.run(&["--gate", "approve"]);
    let output = r.completed();
    assert_eq!(output["quality"], 0.96);
    assert_eq!(output["open_questions"], json!([]));
    let ev = ex.events(&r.run_id());
    let results = of_type(&ev, "result", "improve");
    assert_eq!(results.len(), 3, "{ev:#?}");
    assert_eq!(results[1]["detail"]["iterate"]["iteration"], 2);
    assert!(
        of_type(&ev, "evidence", "improve")
            .iter()
            .all(|e| e["detail"]["path"] == "docs/design.md" && e["detail"]["exists"] == true)
    );
}

#[test]
fn example_code_review() {
    let ex = Example::new("code-review");
    let r = ex.run(&["--gate", "approve"]);
    let output = r.completed();
    assert_eq!(output["verdict"], "approve");
    assert_eq!(output["blocking"], 0);
    let ev = ex.events(&r.run_id());
    // the quick review skips the audit
    assert_eq!(of_type(&ev, "skipped", "audit").len(), 1, "{ev:#?}");
    assert_eq!(of_type(&ev, "gate_resolved", "signoff").len(), 1);
    let verdicts = ex.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0]["stakes"], "paranoid");
}

#[test]
fn example_code_review_thorough_runs_the_audit() {
    let ex = Example::new("code-review");
    let r = Ran::of(&mut ex.start_with(
        r#"{"files": ["src/lib.rs", "src/main.rs", "src/util.rs"], "depth": "thorough"}"#,
        &["--gate", "approve"],
    ));
    r.completed();
    let ev = ex.events(&r.run_id());
    assert_eq!(accepted(&ev, "audit").len(), 1, "{ev:#?}");
    let evidence = of_type(&ev, "evidence", "audit");
    assert_eq!(evidence.len(), 2, "{evidence:#?}");
    assert!(
        evidence
            .iter()
            .all(|e| e["detail"]["path"] == "build/audit.md")
    );
    // three files: three items through both stages
    let reviews = of_type(&ev, "fanout_attempt_result", "review_files");
    assert_eq!(reviews.len(), 6, "{ev:#?}");
    assert!(reviews.iter().all(|e| e["detail"]["success"] == true));
}

#[test]
fn example_five_constructs() {
    let ex = Example::new("five-constructs");
    let r = ex.run(&["--gate", "approve"]);
    let output = r.completed();
    assert!(output["message"].is_string());
    let ev = ex.events(&r.run_id());
    // item 1 fails its first attempt and is retried; the merged output keeps the item order
    let item1: Vec<&Value> = of_type(&ev, "fanout_attempt_result", "inspect")
        .into_iter()
        .filter(|e| e["detail"]["itemIndex"] == 1)
        .collect();
    assert_eq!(item1.len(), 2, "{ev:#?}");
    assert_eq!(item1[0]["detail"]["success"], false);
    assert_eq!(item1[1]["detail"]["success"], true);
    let merged = &accepted(&ev, "inspect")[0]["detail"]["output"];
    assert_eq!(merged[0]["path"], "fix login");
    assert_eq!(merged[1]["path"], "faster search");
    assert_eq!(accepted(&ev, "child/write_summary").len(), 1, "{ev:#?}");
    assert_eq!(accepted(&ev, "child").len(), 1, "{ev:#?}");
    assert_eq!(ex.verdicts().len(), 1);
}

#[test]
fn example_flow_composition() {
    let ex = Example::new("flow-composition");
    let r = ex.run(&["--gate", "approve"]);
    assert_eq!(
        r.completed(),
        json!({"status": "deployed", "version": "v1.4.0"})
    );
    let ev = ex.events(&r.run_id());
    assert_eq!(accepted(&ev, "test/run_tests").len(), 1, "{ev:#?}");
    assert_eq!(of_type(&ev, "result", "release").len(), 2, "{ev:#?}");
}

/// Regression: `a` runs a one-step sub-flow and `b` comes after `a`. The
/// sub-flow finishes on the last report, so `a` succeeds only when the frames
/// settle after the scheduling loop; `b` must still start (it used to end the
/// run with "no runnable steps remain").
#[test]
fn run_step_successor_starts() {
    let s = Scratch::new("subflow");
    let spec = s.write("sub.stratum.yaml", SUBFLOW_SPEC);
    let r = Ran::of(s.stratumc().arg("run").arg(&spec).args([
        "--inputs",
        r#"{"q": "hi"}"#,
        "--agent",
        r#"echo '{"output": {"x": "ok"}}'"#,
        "--format",
        "json",
    ]));
    assert_eq!(r.completed(), json!({"x": "ok"}));
}

const SUBFLOW_SPEC: &str = r#"version: 1
contracts:
  R:
    x: string
flows:
  entry: main
  main:
    input:
      q: string
    output:
      from: "${b.output}"
      contract: R
    steps:
      - id: a
        run: sub
        with:
          q: "${input.q}"
      - id: b
        after: [a]
        do: "use ${a.output.x}"
        out: R
  sub:
    input:
      q: string
    output:
      from: "${s.output}"
      contract: R
    steps:
      - id: s
        do: "answer ${input.q}"
        out: R
"#;

// ---------------------------------------------------------------------------
// Exit codes, the JSON document, the run line

const CLASSIFIER_OK: &str = r#"echo '{"output": {"label": "positive", "confidence": 0.9}}'"#;

fn classifier(s: &Scratch, inputs: &str, agent: &str) -> Ran {
    Ran::of(
        s.stratumc()
            .arg("run")
            .arg(root().join("examples/minimal-classifier.stratum.yaml"))
            .args(["--inputs", inputs, "--agent", agent, "--format", "json"]),
    )
}

#[test]
fn completed_run_exits_0_with_the_json_document() {
    let s = Scratch::new("ok");
    let r = classifier(&s, r#"{"text": "fine"}"#, CLASSIFIER_OK);
    let id = r.run_id();
    let doc = r.doc();
    assert_doc_shape(&doc, &id);
    assert_eq!(
        r.completed(),
        json!({"label": "positive", "confidence": 0.9})
    );
    assert_eq!(runs(&s.db()), vec![(id.clone(), "completed".to_string())]);
    let ev = settled(&events(&s.db(), &id));
    assert_eq!(ev.first().unwrap()["type"], "planned");
    assert_eq!(ev.last().unwrap()["type"], "completed");

    // human format: the output, pretty-printed
    let r = Ran::of(
        s.stratumc()
            .arg("run")
            .arg(root().join("examples/minimal-classifier.stratum.yaml"))
            .args(["--inputs", r#"{"text": "fine"}"#, "--agent", CLASSIFIER_OK]),
    );
    assert_eq!(r.code, 0, "{}", r.context());
    r.run_id();
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["label"], "positive");
    assert!(r.stdout.lines().count() > 1, "{}", r.stdout);
}

#[test]
fn always_failing_agent_exits_1_with_status_failed() {
    let s = Scratch::new("fail");
    let r = classifier(
        &s,
        r#"{"text": "fine"}"#,
        r#"echo '{"failure": "model unavailable"}'"#,
    );
    let id = r.run_id();
    let doc = r.doc();
    assert_doc_shape(&doc, &id);
    assert_eq!((r.code, doc["status"].as_str()), (1, Some("failed")));
    assert_eq!(doc["output"], Value::Null);
    assert_eq!(doc["failure"]["attempt"], 2, "{doc}");
    assert!(
        doc["failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("model unavailable"),
        "{doc}"
    );
    assert_eq!(runs(&s.db()), vec![(id.clone(), "failed".to_string())]);
    // both attempts were dispatched and recorded as failures
    let ev = events(&s.db(), &id);
    assert_eq!(of_type(&ev, "result", "classify_text").len(), 2);
    assert!(accepted(&ev, "classify_text").is_empty());
}

#[test]
fn broken_agents_fail_the_step() {
    let s = Scratch::new("broken");
    for (agent, expect) in [
        ("echo oops >&2; exit 3", "oops"),
        ("echo not json", "no valid JSON"),
        (r#"echo '{"outptu": 1, "failure": 2}'"#, "malformed"),
        ("cat >/dev/null", "no valid JSON"),
    ] {
        let r = classifier(&s, r#"{"text": "fine"}"#, agent);
        let doc = r.doc();
        assert_doc_shape(&doc, &r.run_id());
        assert_eq!(
            (r.code, doc["status"].as_str()),
            (1, Some("failed")),
            "{agent}: {}",
            r.context()
        );
        let reason = doc["failure"]["reason"].as_str().unwrap();
        assert!(reason.contains(expect), "{agent}: {reason}");
    }
}

#[test]
fn invalid_spec_exits_2_and_runs_nothing() {
    let s = Scratch::new("badspec");
    let spec = s.write(
        "bad.stratum.yaml",
        "version: 1\nflows:\n  entry: main\n  main:\n    input:\n      goal: string\n    steps:\n      - id: a\n        do: \"Plan ${input.gaol}\"\n",
    );
    let r = Ran::of(s.stratumc().arg("run").arg(&spec).args([
        "--inputs",
        r#"{"goal": "x"}"#,
        "--agent",
        "exit 1",
        "--format",
        "json",
    ]));
    assert_eq!(r.code, 2, "{}", r.context());
    assert!(r.stdout.is_empty(), "{}", r.context());
    assert!(r.stderr.contains("nothing was run"), "{}", r.context());
    assert!(!r.stderr.starts_with("run: "), "{}", r.context());
    assert!(runs(&s.db()).is_empty());

    // a missing spec file
    let r = Ran::of(
        s.stratumc()
            .arg("run")
            .arg(s.path().join("nope.yaml"))
            .args(["--agent", "exit 1"]),
    );
    assert_eq!(r.code, 2, "{}", r.context());
}

#[test]
fn bad_inputs_json_exits_2() {
    let s = Scratch::new("badjson");
    for inputs in [r#"{"text": "#, "text: x", ""] {
        let r = classifier(&s, inputs, CLASSIFIER_OK);
        assert_eq!(r.code, 2, "{inputs:?}: {}", r.context());
        assert!(
            r.stderr.contains("--inputs is not valid JSON"),
            "{}",
            r.context()
        );
        assert!(r.stdout.is_empty());
    }
    let missing = format!("@{}", s.path().join("missing.json").display());
    let r = classifier(&s, &missing, CLASSIFIER_OK);
    assert_eq!(r.code, 2, "{}", r.context());
    assert!(
        r.stderr.contains("cannot read inputs file"),
        "{}",
        r.context()
    );
    assert!(runs(&s.db()).is_empty());
}

#[test]
fn inputs_violating_the_input_contract_exit_2() {
    let s = Scratch::new("badinput");
    for inputs in [r#"{"text": 5}"#, "{}", r#"["fine"]"#, r#"{"text": null}"#] {
        let r = classifier(&s, inputs, CLASSIFIER_OK);
        assert_eq!(r.code, 2, "{inputs}: {}", r.context());
        // not an object at all is refused before the contract is looked at
        let needle = match inputs.starts_with('[') {
            true => "--inputs must be a JSON object (the flow's input), found an array",
            false => "invalid flow input",
        };
        assert!(r.stderr.contains(needle), "{inputs}: {}", r.context());
        assert!(r.stdout.is_empty(), "{inputs}: {}", r.context());
    }
    assert!(runs(&s.db()).is_empty());
}

#[test]
fn other_usage_errors_exit_2() {
    let s = Scratch::new("usage");
    // --resume of an unknown run
    let r =
        Ran::of(
            s.stratumc()
                .args(["run", "--resume", "run-0000000000000000", "--agent", "true"]),
        );
    assert_eq!(r.code, 2, "{}", r.context());
    // neither a spec nor --resume
    let r = Ran::of(s.stratumc().args(["run", "--agent", "true"]));
    assert_eq!(r.code, 2, "{}", r.context());
    // an unknown flow
    let r = Ran::of(
        s.stratumc()
            .arg("run")
            .arg(root().join("examples/minimal-classifier.stratum.yaml"))
            .args([
                "--flow",
                "nope",
                "--inputs",
                r#"{"text": "x"}"#,
                "--agent",
                "true",
            ]),
    );
    assert_eq!(r.code, 2, "{}", r.context());
    // an invalid gate decision is refused by the argument parser
    let r = Ran::of(
        s.stratumc()
            .arg("run")
            .arg(root().join("examples/minimal-classifier.stratum.yaml"))
            .args(["--gate", "maybe", "--agent", "true"]),
    );
    assert_eq!(r.code, 2, "{}", r.context());
}

// ---------------------------------------------------------------------------
// Gates and --resume

#[test]
fn gate_pause_then_resume_with_approve() {
    let ex = Example::new("reviewed-work-gate");
    // no --gate and stdin not a terminal: the run pauses at the gate
    let r = ex.run(&[]);
    let id = r.run_id();
    let doc = r.doc();
    assert_doc_shape(&doc, &id);
    assert_eq!(
        (r.code, doc["status"].as_str()),
        (1, Some("running")),
        "{}",
        r.context()
    );
    assert_eq!(doc["output"], Value::Null);
    assert_eq!(doc["failure"], Value::Null);
    assert!(
        r.stderr.contains(&format!(
            "waiting at gate `review`; decide with `--gate approve|revise|kill` and `--resume {id}`"
        )),
        "{}",
        r.context()
    );
    assert_eq!(
        runs(&ex.scratch.db()),
        vec![(id.clone(), "running".to_string())]
    );
    let before = settled(&ex.events(&id)).len();

    // resuming without a decision pauses again and dispatches nothing; the
    // audit notes the resume
    let r = Ran::of(&mut ex.command(Some(&id), &[]));
    assert_eq!(r.run_id(), id);
    assert_eq!((r.code, r.doc()["status"].as_str()), (1, Some("running")));
    let ev = ex.events(&id);
    assert_eq!(settled(&ev).len(), before);
    assert_eq!(ev.last().unwrap()["type"], "resumed");
    assert_eq!(ev.len(), before + 1);

    // approve: completed with the work's output
    let r = Ran::of(&mut ex.command(Some(&id), &["--gate", "approve"]));
    assert_eq!(r.run_id(), id);
    let doc = r.doc();
    assert_doc_shape(&doc, &id);
    let output = r.completed();
    assert_eq!(output["quality_score"], 0.9);
    assert_eq!(
        runs(&ex.scratch.db()),
        vec![(id.clone(), "completed".to_string())]
    );
    let ev = settled(&ex.events(&id));
    let resolved = of_type(&ev, "gate_resolved", "review");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["detail"]["decision"], "approve");
    // `work` ran once (two attempts) across the three processes
    assert_eq!(of_type(&ev, "result", "work").len(), 2);

    // resuming a finished run reports it again and changes nothing
    let n = ev.len();
    let r = Ran::of(&mut ex.command(Some(&id), &["--gate", "kill"]));
    assert_eq!(r.completed(), output);
    assert_eq!(settled(&ex.events(&id)).len(), n);
}

#[test]
fn gate_kill_and_revise() {
    let ex = Example::new("reviewed-work-gate");
    let r = ex.run(&[]);
    let id = r.run_id();
    let r = Ran::of(&mut ex.command(Some(&id), &["--gate", "kill"]));
    let doc = r.doc();
    assert_doc_shape(&doc, &id);
    assert_eq!(
        (r.code, doc["status"].as_str()),
        (1, Some("killed")),
        "{}",
        r.context()
    );
    assert!(
        doc["failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("killed")
    );

    // always revising: the gate allows 2 revise rounds, then the run fails
    let r = ex.run(&["--gate", "revise"]);
    let doc = r.doc();
    assert_eq!(
        (r.code, doc["status"].as_str()),
        (1, Some("failed")),
        "{}",
        r.context()
    );
    assert!(
        doc["failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("rounds exhausted"),
        "{doc}"
    );
    let ev = ex.events(&r.run_id());
    assert_eq!(of_type(&ev, "step_reset", "work").len(), 2, "{ev:#?}");
    assert_eq!(accepted(&ev, "work").len(), 3);
}

/// `stratumc build SPEC -o OUT` in the example's scratch dir; the plan hash it prints.
fn build_plan(ex: &Example, spec: &Path, out: &Path) -> String {
    let mut cmd = ex.scratch.stratumc();
    cmd.arg("build").arg(spec).arg("-o").arg(out);
    let r = Ran::of(&mut cmd);
    assert_eq!(r.code, 0, "{}", r.context());
    let hash = r.stdout.trim().to_string();
    assert_eq!(hash.len(), 64, "{}", r.context());
    hash
}

/// E6: `run SPEC --resume RUN` with a spec (or a built plan) whose plan is
/// not the run's is refused, naming both hashes, and changes nothing; the
/// run still resumes with its own spec.
#[test]
fn resume_against_a_different_plan_is_refused() {
    let ex = Example::new("reviewed-work-gate");
    let r = ex.run(&[]);
    let id = r.run_id();
    assert_eq!((r.code, r.doc()["status"].as_str()), (1, Some("running")));
    let before = ex.events(&id);

    // the same flow with one reworded instruction: another plan
    let text = std::fs::read_to_string(ex.spec()).unwrap();
    let changed_text = text.replace("Summarise the diff", "Summarize the diff");
    assert_ne!(changed_text, text);
    let changed = ex.scratch.write("changed.stratum.yaml", &changed_text);
    let ours = build_plan(&ex, &ex.spec(), &ex.scratch.path().join("ours.stratumc"));
    let theirs_plan = ex.scratch.path().join("changed.stratumc");
    let theirs = build_plan(&ex, &changed, &theirs_plan);
    assert_ne!(ours, theirs);

    for source in [&changed, &theirs_plan] {
        let source = source.display().to_string();
        let r = Ran::of(&mut ex.command_with(&[&source, "--resume", &id], &["--gate", "approve"]));
        assert_eq!(r.code, 2, "{}", r.context());
        assert_eq!(r.stdout, "", "{}", r.context());
        assert!(
            r.stderr.contains(&format!(
                "error: run `{id}` executes plan {ours}, not {theirs}"
            )),
            "{}",
            r.context()
        );
        assert!(
            r.stderr.contains(&format!(
                "help: {source} is not the plan the run started from"
            )),
            "{}",
            r.context()
        );
        // nothing recorded: no `resumed` marker, no decision, still running
        assert_eq!(ex.events(&id), before);
        assert_eq!(
            runs(&ex.scratch.db()),
            vec![(id.clone(), "running".to_string())]
        );
    }

    // with its own spec the run resumes and the gate is decided
    let spec = ex.spec().display().to_string();
    let r = Ran::of(&mut ex.command_with(&[&spec, "--resume", &id], &["--gate", "approve"]));
    assert_eq!(r.run_id(), id);
    assert_eq!(r.completed()["quality_score"], 0.9);
    let ev = ex.events(&id);
    assert_eq!(ev[before.len()]["type"], "resumed", "{ev:#?}");
    assert_eq!(of_type(&ev, "gate_resolved", "review").len(), 1);
}

/// A resume given the run's own plan file (built from its spec) resumes.
#[test]
fn resume_with_the_runs_own_plan_file_resumes() {
    let ex = Example::new("reviewed-work-gate");
    let plan = ex.scratch.path().join("ours.stratumc");
    build_plan(&ex, &ex.spec(), &plan);
    let plan = plan.display().to_string();
    let inputs = format!(
        "@{}",
        root()
            .join("examples/inputs/reviewed-work-gate.json")
            .display()
    );
    let r = Ran::of(&mut ex.command_with(&[&plan, "--inputs", &inputs], &[]));
    let id = r.run_id();
    assert_eq!((r.code, r.doc()["status"].as_str()), (1, Some("running")));

    let r = Ran::of(&mut ex.command_with(&[&plan, "--resume", &id], &["--gate", "approve"]));
    assert_eq!(r.run_id(), id);
    assert_eq!(r.completed()["quality_score"], 0.9);
    assert_eq!(
        runs(&ex.scratch.db()),
        vec![(id.clone(), "completed".to_string())]
    );
}

/// `Engine::resume` records a `resumed` event (a process continued the run);
/// the run loop polls with `Engine::poll`, so a run that never stopped has
/// none.
#[test]
fn uninterrupted_run_records_no_resumed_event() {
    let s = Scratch::new("resumed");
    let r = classifier(&s, r#"{"text": "fine"}"#, CLASSIFIER_OK);
    r.completed();
    let ev = events(&s.db(), &r.run_id());
    let resumed: Vec<&Value> = ev.iter().filter(|e| e["type"] == "resumed").collect();
    assert!(resumed.is_empty(), "{ev:#?}");
    assert_eq!(ev.last().unwrap()["type"], "completed");
}

// ---------------------------------------------------------------------------
// Crash safety

/// xorshift64*, seeded from the clock or `STRATUM_CRASH_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn drain(r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Waits up to `d` for the child to exit.
fn wait_for(child: &mut Child, d: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + d;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn crash_safety_sigkill_and_resume() {
    crash_test(Scratch::new("crash"));
}

/// The crash test with the runs in PostgreSQL (`STRATUM_TEST_PG`).
#[test]
fn crash_safety_sigkill_and_resume_on_postgres() {
    if let Some(url) = support::pg_url() {
        crash_test(Scratch::on_postgres("crash-pg", url));
    }
}

fn crash_test(s: Scratch) {
    const STEPS: usize = 200;
    const START: i64 = 1000;
    const MIN_KILLS: usize = 15;
    let seed = std::env::var("STRATUM_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test seed: STRATUM_CRASH_SEED={seed}");
    let mut rng = Rng(seed);

    let spec = s.write("chain.stratum.yaml", &support::chain_spec(STEPS));
    // The agent reads the number after "increment" in the task text, sleeps
    // 25 ms and answers x = n + 1. 200 × 25 ms of agent time alone is more
    // than 15 × 300 ms, so the run cannot finish before the 15th kill.
    let agent = r#"n=$(sed -n 's/.*increment \([0-9][0-9]*\).*/\1/p'); sleep 0.025; printf '{"output": {"x": %d}}' $((n + 1))"#;
    let inputs = format!(r#"{{"start": {START}}}"#);

    let mut run_id: Option<String> = None;
    let mut kills = 0usize;
    let mut spawns = 0usize;
    let deadline = Instant::now() + Duration::from_secs(300);
    let final_doc = loop {
        assert!(
            Instant::now() < deadline,
            "no completion after {spawns} processes ({kills} kills)"
        );
        let mut cmd = s.stratumc();
        cmd.arg("run");
        match &run_id {
            Some(id) => cmd.args(["--resume", id]),
            None => cmd.arg(&spec).args(["--inputs", &inputs]),
        };
        cmd.args(["--agent", agent, "--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        spawns += 1;
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        let delay = Duration::from_millis(rng.range(20, 300));
        let exited = wait_for(&mut child, delay);
        if exited.is_none() {
            // SIGKILL on Unix
            child.kill().unwrap();
            let _ = child.wait();
            kills += 1;
        }
        let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
        // only a whole first line counts: a kill can cut `run: <id>` short
        if let Some((first, _)) = stderr.split_once('\n')
            && let Some(id) = first.strip_prefix("run: ")
        {
            match &run_id {
                Some(known) => assert_eq!(known, id),
                None => run_id = Some(id.to_string()),
            }
        }
        if run_id.is_none() {
            // killed after the run was created but before `run:` was printed?
            let all = s.runs();
            assert!(all.len() <= 1, "{all:?}");
            run_id = all.into_iter().next().map(|(id, _)| id);
        }
        if let Some(status) = exited {
            let ran = Ran {
                code: status.code().unwrap_or(-1),
                stdout,
                stderr,
            };
            let doc = ran.doc();
            assert_eq!(
                (ran.code, doc["status"].as_str()),
                (0, Some("completed")),
                "a run process ended on its own without completing (seed {seed}):\n{}",
                ran.context()
            );
            break doc;
        }
    };
    let run_id = run_id.unwrap();
    eprintln!("crash test: {spawns} processes, {kills} killed");
    assert!(kills >= MIN_KILLS, "only {kills} kills (seed {seed})");
    assert_doc_shape(&final_doc, &run_id);
    let expected = json!({"x": START + STEPS as i64});
    assert_eq!(final_doc["output"], expected);
    assert_eq!(s.runs(), vec![(run_id.clone(), "completed".to_string())]);

    // the audit: exactly one accepted result per step, with the right value
    let all = s.events(&run_id);
    let resumed = all.len() - settled(&all).len();
    eprintln!("crash test: {} events, {resumed} `resumed`", all.len());
    let ev = settled(&all);
    for i in 0..STEPS {
        let step = format!("s{i}");
        let ok = accepted(&ev, &step);
        assert_eq!(
            ok.len(),
            1,
            "step {step}: {} accepted results (seed {seed}): {ok:#?}",
            ok.len()
        );
        assert_eq!(
            ok[0]["detail"]["output"],
            json!({"x": START + i as i64 + 1}),
            "step {step} (seed {seed})"
        );
        let results = of_type(&ev, "result", &step);
        assert_eq!(
            results.len(),
            1,
            "step {step} has failed results (seed {seed}): {results:#?}"
        );
    }
    let done: Vec<&Value> = ev.iter().filter(|e| e["type"] == "completed").collect();
    assert_eq!(done.len(), 1, "seed {seed}");
    assert_eq!(done[0]["detail"]["output"], expected);
    assert_eq!(ev.last().unwrap()["type"], "completed");
    assert!(ev.iter().all(|e| e["type"] != "failed"), "seed {seed}");

    // resuming the finished run changes nothing
    let r = Ran::of(s.stratumc().args([
        "run", "--resume", &run_id, "--agent", "exit 1", "--format", "json",
    ]));
    assert_eq!(r.completed(), expected);
    assert_eq!(settled(&s.events(&run_id)).len(), ev.len());
}

// ---------------------------------------------------------------------------
// `isolation: worktree` with engine dispatch: a git worktree per item, patches
// merged into the workspace in item order (reference v1-runtime §4.12, §8.2 #40)

/// A worktree fanout over `${input.items}`; a `pre_merge` command records
/// that it ran (in the workspace root) before any patch is applied.
const WORKTREE_SPEC: &str = r#"version: 1
contracts:
  Done: {file: string}
flows:
  entry: main
  main:
    input: {items: "string[]"}
    output: {from: "${fan.output[2]}", contract: Done}
    steps:
      - id: fan
        fanout:
          over: "${input.items}"
          concurrency: 3
          isolation: worktree
          require: all
          merge: sequential
          pre_merge:
            - "test ! -e out && echo premerge > premerge.log"
          steps:
            - do: "write ${item}"
              out: Done
              attempts: 1
              ensure:
                - expr: "file_exists(result.file)"
"#;

/// The agent: in its working directory (the item's worktree) it writes
/// `out/<item>.txt` (or `shared.txt` when the item starts with `shared`),
/// records where it ran, and fails for items starting with `bad`.
const WORKTREE_AGENT: &str = r#"
import json, os, sys
entry = json.load(sys.stdin)
item = entry["item"]
with open(os.path.join(os.environ["WT_LOG"], entry["id"].replace("/", "_")), "w") as f:
    f.write(os.getcwd())
if item.startswith("bad"):
    print(json.dumps({"failure": "cannot do " + item}))
    sys.exit(0)
name = "shared.txt" if item.startswith("shared") else os.path.join("out", item + ".txt")
os.makedirs("out", exist_ok=True)
with open(name, "w") as f:
    f.write("written by " + item + "\n")
with open("out/" + item + ".txt", "w") as f:
    f.write(item + "\n")
print(json.dumps({"output": {"file": name}}))
"#;

fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository with one commit (`README.md`), the spec and the agent.
fn worktree_setup(tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let s = Scratch::new(tag);
    let repo = s.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git_in(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    git_in(&repo, &["add", "README.md"]);
    git_in(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    );
    std::fs::create_dir_all(s.path().join("log")).unwrap();
    s.write("wt.stratum.yaml", WORKTREE_SPEC);
    let agent = s.write("wt_agent.py", WORKTREE_AGENT);
    (s, repo, agent)
}

fn worktree_run(s: &Scratch, repo: &Path, agent: &Path, items: &[&str]) -> Ran {
    Ran::of(
        s.stratumc()
            .env("WT_LOG", s.path().join("log"))
            .arg("run")
            .arg(s.path().join("wt.stratum.yaml"))
            .args(["--inputs", &json!({"items": items}).to_string()])
            .args(["--agent", &format!("{} {}", python(), agent.display())])
            .arg("--workspace")
            .arg(repo)
            .args(["--format", "json"]),
    )
}

/// Where each item's agent ran, by item index.
fn agent_dirs(s: &Scratch, n: usize) -> Vec<String> {
    (0..n)
        .map(|k| std::fs::read_to_string(s.path().join("log").join(format!("fan_{k}"))).unwrap())
        .collect()
}

/// The worktrees git still knows of, besides the repository itself.
fn extra_worktrees(repo: &Path) -> usize {
    git_in(repo, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
        - 1
}

#[test]
fn worktree_fanout_merges_each_items_files_in_order() {
    let (s, repo, agent) = worktree_setup("wt-ok");
    let r = worktree_run(&s, &repo, &agent, &["a", "b", "c"]);
    let out = r.completed();
    assert_eq!(out, json!({"file": "out/c.txt"}));
    // every agent ran in its own worktree, none in the workspace root
    let dirs = agent_dirs(&s, 3);
    let real_repo = std::fs::canonicalize(&repo).unwrap();
    for d in &dirs {
        assert!(!Path::new(d).starts_with(&real_repo), "{d}");
    }
    assert_eq!(dirs.iter().collect::<BTreeSet<_>>().len(), 3, "{dirs:?}");
    // the merged files are in the root, staged; the worktrees are gone
    for item in ["a", "b", "c"] {
        assert_eq!(
            std::fs::read_to_string(repo.join(format!("out/{item}.txt"))).unwrap(),
            format!("{item}\n")
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("premerge.log")).unwrap(),
        "premerge\n"
    );
    let staged = git_in(&repo, &["diff", "--cached", "--name-only"]);
    assert_eq!(staged, "out/a.txt\nout/b.txt\nout/c.txt\n");
    for d in &dirs {
        assert!(!Path::new(d).exists(), "worktree {d} was not removed");
    }
    assert_eq!(extra_worktrees(&repo), 0);
    // the audit shows the patches merged in item order
    let ev = events(&s.db(), &r.run_id());
    let merged = of_type(&ev, "fanout_merge", "fan");
    assert_eq!(merged.len(), 1, "{ev:?}");
    assert_eq!(merged[0]["detail"]["items"], json!([0, 1, 2]));
    assert_eq!(of_type(&ev, "worktree_removed", "fan").len(), 3);
}

#[test]
fn worktree_fanout_with_conflicting_items_fails_the_merge() {
    let (s, repo, agent) = worktree_setup("wt-conflict");
    let r = worktree_run(&s, &repo, &agent, &["shared1", "shared2"]);
    let doc = r.doc();
    assert_eq!(
        (r.code, doc["status"].as_str()),
        (1, Some("failed")),
        "{}",
        r.context()
    );
    let reason = doc["failure"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("fanout merge failed: item 1"),
        "{reason}"
    );
    // the first item's patch was applied, then the second one conflicted
    assert_eq!(
        std::fs::read_to_string(repo.join("out/shared1.txt")).unwrap(),
        "shared1\n"
    );
    assert_eq!(extra_worktrees(&repo), 0);
    for d in agent_dirs(&s, 2) {
        assert!(!Path::new(&d).exists(), "worktree {d} was not removed");
    }
}

#[test]
fn worktree_fanout_with_a_failing_item_leaves_the_workspace_untouched() {
    let (s, repo, agent) = worktree_setup("wt-fail");
    let r = worktree_run(&s, &repo, &agent, &["a", "bad", "c"]);
    let doc = r.doc();
    assert_eq!(
        (r.code, doc["status"].as_str()),
        (1, Some("failed")),
        "{}",
        r.context()
    );
    let reason = doc["failure"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("fanout require all not met (2/3"),
        "{reason}"
    );
    // nothing merged, no pre_merge: the workspace is as committed
    assert_eq!(git_in(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join("out").exists());
    assert!(!repo.join("premerge.log").exists());
    assert_eq!(extra_worktrees(&repo), 0);
}

/// Piped, `run` prints one plain progress line per batch: the steps done
/// of total, what it dispatches and what the run has spent (no terminal
/// control codes; the terminal form is tested on a pseudo-terminal in
/// operator.rs).
#[test]
fn piped_progress_is_one_plain_line_per_batch() {
    let dir = support::scratch("run", "progress");
    std::fs::write(
        dir.join("two.stratum.yaml"),
        r#"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${b.output}", contract: Out}
    steps:
      - {id: a, do: "A", out: Out}
      - {id: b, do: "B ${a.output.text}", out: Out}
"#,
    )
    .unwrap();
    let agent = r#"printf '{"output": {"text": "x"}, "usage": {"tokens": 10, "usd": 0.5}}'"#;
    let home = dir.join("home");
    let (code, _, stderr) = support::stratumc_in(
        &dir,
        Some(&home),
        &["run", "two.stratum.yaml", "--agent", agent],
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("progress: 0/2 steps done; dispatching a; spent $0.00"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("progress: 1/2 steps done; dispatching b; spent $0.50"),
        "{stderr}"
    );
    assert!(lines[1].contains("10 tokens"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "no control codes when piped: {stderr:?}"
    );
}
