//! The staged research pipeline (seed 001) end to end through the built
//! binary: `examples/research-pipeline/` copied to a scratch workspace, its
//! scripted agent writing real artifacts (a seeded simulation, results
//! JSON, PNG figures, a LaTeX source) and its loopback fake judge speaking
//! the OpenAI chat API in place of ollama. Each test drives one of the
//! seed's user stories with the agent's knobs (`agent-config.json`) and
//! asserts from the run store, `verify`, `report`, `query` and the agent's
//! own dispatch log:
//!
//! - US1: the plan fails its rule gate, is retried with the violation fed
//!   back, and passes;
//! - US2: the simulation fails and the run stops; the stage's artifacts are
//!   listed, the configuration fixed, and `run --retry` finishes the run
//!   with plan and literature reused, not dispatched;
//! - US3: `verify` passes, then fails after one artifact is edited; the
//!   report lists every file and verdict;
//! - escalate: literature fails its judge twice, the escalation gate is
//!   revised with a note, the stage re-runs with the note and passes;
//! - skip: the analysis fails and the paper goes on without it;
//! - a SIGKILL in the middle of a stage, then `--resume`; an agent that
//!   never answers is orphaned after its lease and dispatched again.
//!
//! Needs `python3` (standard library only).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const AGENT: &str = "python3 agents/research-agent.py";

/// A scratch copy of the example with its own store and a running fake judge.
struct Lab {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    judge: Child,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.judge.kill();
        let _ = self.judge.wait();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

impl Lab {
    /// The example in a scratch workspace, the judge started and
    /// `[judges.local]` pointed at it, `knobs` as the agent's configuration.
    fn new(knobs: Value) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/research-pipeline");
        copy_dir(&example, &ws);
        for leftover in ["runs", "agent-log.jsonl"] {
            let _ = std::fs::remove_dir_all(ws.join(leftover));
            let _ = std::fs::remove_file(ws.join(leftover));
        }
        std::fs::write(ws.join("agent-config.json"), knobs.to_string()).unwrap();
        let port_file = dir.path().join("judge.port");
        let mut judge = Command::new("python3")
            .arg(ws.join("judge/fake-openai-judge.py"))
            .arg("0")
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(dir.path().join("judge.log"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the fake judge starts");
        let mut line = String::new();
        BufReader::new(judge.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the judge prints its port");
        let toml = std::fs::read_to_string(ws.join("stratum.toml")).unwrap();
        let toml = toml.replace(
            "http://127.0.0.1:11434/v1",
            &format!("http://127.0.0.1:{port}/v1"),
        );
        assert!(
            toml.contains(&port.to_string()),
            "[judges.local] points at the judge"
        );
        std::fs::write(ws.join("stratum.toml"), toml).unwrap();
        let home = dir.path().join("home");
        Lab {
            _dir: dir,
            ws,
            home,
            judge,
        }
    }

    fn stratumc(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.current_dir(&self.ws)
            .env("STRATUM_HOME", &self.home)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    fn out(&self, args: &[&str]) -> Output {
        self.stratumc().args(args).output().expect("stratumc runs")
    }

    /// `stratumc run` of the pipeline; the run's JSON document.
    fn run(&self, extra: &[&str]) -> (Option<i32>, Value) {
        let mut args = vec![
            "run",
            "research.stratum.yaml",
            "--inputs",
            "@inputs.json",
            "--agent",
            AGENT,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = self.out(&args);
        (out.status.code(), doc(&out))
    }

    /// `stratumc run ARGS --agent AGENT --format json` (resume, retry).
    fn drive(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--agent", AGENT, "--format", "json"]);
        let out = self.out(&all);
        (out.status.code(), doc(&out))
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.out(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    }

    /// The agent's dispatch log: one entry per dispatch.
    fn dispatches(&self) -> Vec<Value> {
        std::fs::read_to_string(self.ws.join("agent-log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    fn ids(&self) -> Vec<String> {
        self.dispatches()
            .iter()
            .map(|d| d["id"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    fn set_knobs(&self, knobs: Value) {
        std::fs::write(self.ws.join("agent-config.json"), knobs.to_string()).unwrap();
    }

    /// A step of the run as `query flow --format json` shows it.
    fn step(&self, run: &str, id: &str) -> Value {
        let v = self.json(&["query", "flow", run, "--format", "json"]);
        v["run"]["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["id"] == id).cloned())
            .unwrap_or_else(|| panic!("no step {id} in {v}"))
    }
}

fn doc(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not one JSON document: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn run_id(v: &Value) -> String {
    v["runId"].as_str().expect("a run id").to_owned()
}

const STAGES: [&str; 5] = ["plan", "literature", "simulation", "analysis", "paper"];

#[test]
fn us3_a_completed_run_verifies_and_its_report_lists_every_file_and_verdict() {
    let lab = Lab::new(json!({}));
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["status"], "completed");
    let run = run_id(&v);
    assert_eq!(lab.ids(), STAGES, "each stage dispatched once");

    let ok = lab.out(&["verify", &run]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");

    let report = lab.json(&["report", &run, "--format", "json"]);
    let steps = report["report"]["steps"].as_array().unwrap();
    for stage in STAGES {
        let s = steps.iter().find(|s| s["id"] == stage).unwrap();
        let files = s["manifests"][0]["files"].as_array().unwrap();
        assert!(!files.is_empty(), "{stage} has a manifest");
        for f in files {
            assert_eq!(f["sha256"].as_str().map(str::len), Some(64), "{f}");
        }
    }
    for judged in ["literature", "analysis"] {
        let s = steps.iter().find(|s| s["id"] == judged).unwrap();
        let verdict = &s["verdicts"][0];
        assert_eq!(verdict["holds"], true, "{verdict}");
        assert_eq!(verdict["judge"], "local");
        assert!(verdict["score"].as_f64().unwrap() >= verdict["threshold"].as_f64().unwrap());
        assert!(
            !verdict["inputs"].as_array().unwrap().is_empty(),
            "input digests: {verdict}"
        );
    }
    // the figures are real PNG pictures
    let figures = steps.iter().find(|s| s["id"] == "analysis").unwrap()["manifests"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().ends_with(".png"))
        .count();
    assert!(figures >= 2, "{figures} figures");

    // edit one artifact: verify names it and exits 1
    let plan_md = lab.ws.join("runs/demo/plan/plan.md");
    let mut text = std::fs::read_to_string(&plan_md).unwrap();
    text.push_str("\nedited after the run\n");
    std::fs::write(&plan_md, text).unwrap();
    let changed = lab.out(&["verify", &run]);
    assert_eq!(changed.status.code(), Some(1), "{changed:?}");
    let said = String::from_utf8_lossy(&changed.stdout);
    assert!(said.contains("runs/demo/plan/plan.md"), "{said}");

    let md = lab.out(&["report", &run, "--format", "md"]);
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("runs/demo/analysis/report.md") && md.contains("pass mark"),
        "{md}"
    );
}

#[test]
fn us1_the_plan_fails_its_rule_gate_and_the_retry_sees_the_violation() {
    let lab = Lab::new(json!({"plan": {"omit_hypotheses_first": true}}));
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(0), "{v}");
    let plans: Vec<Value> = lab
        .dispatches()
        .into_iter()
        .filter(|d| d["id"] == "plan")
        .collect();
    assert_eq!(plans.len(), 2, "{plans:?}");
    assert!(plans[0].get("previousFailure").is_none());
    let fed_back = plans[1]["previousFailure"].to_string();
    assert!(
        fed_back.contains("Hypothes"),
        "the violation is fed back: {fed_back}"
    );
    assert_eq!(lab.step(&run_id(&v), "plan")["attempts"], 2);
}

#[test]
fn us2_a_failed_simulation_is_fixed_and_retried_without_redoing_plan_and_literature() {
    let lab = Lab::new(json!({"simulation": {"broken": true}}));
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["status"], "failed");
    let run = run_id(&v);
    // the stages before it left their artifacts, listed with digests
    let listed = lab.json(&["query", "flow", &run, "--artifacts", "--format", "json"]);
    let steps: Vec<&str> = listed["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["plan", "literature"], "{listed}");
    assert_eq!(lab.step(&run, "simulation")["status"], "failed");

    lab.set_knobs(json!({}));
    let before = lab.dispatches().len();
    let (code, retried) = lab.drive(&["run", "--retry", &run]);
    assert_eq!(code, Some(0), "{retried}");
    assert_eq!(retried["status"], "completed");
    let again: Vec<String> = lab.ids().split_off(before);
    assert_eq!(
        again,
        ["simulation", "analysis", "paper"],
        "plan and literature reused"
    );
    let new = run_id(&retried);
    assert_ne!(new, run);
    assert!(lab.step(&new, "plan")["reusedFrom"].as_str().is_some());
}

#[test]
fn escalate_a_literature_stage_failed_by_its_judge_is_revised_with_a_note() {
    let lab = Lab::new(json!({"literature": {"weak_notes_until_revised": true}}));
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(1), "paused at the escalation gate: {v}");
    let run = run_id(&v);
    assert_eq!(lab.step(&run, "literature")["status"], "failed");
    let gates = lab.json(&["query", "gates", "--format", "json"]);
    assert!(gates.to_string().contains("escalate_literature"), "{gates}");

    let note = "cover every question and state the gap";
    let decided = lab.out(&[
        "gate",
        "revise",
        &run,
        "escalate_literature",
        "--note",
        note,
    ]);
    assert!(decided.status.success(), "{decided:?}");
    let (code, done) = lab.drive(&["run", "--resume", &run]);
    assert_eq!(code, Some(0), "{done}");
    assert_eq!(done["status"], "completed");
    let lits: Vec<Value> = lab
        .dispatches()
        .into_iter()
        .filter(|d| d["id"] == "literature")
        .collect();
    assert_eq!(lits.len(), 3, "two judged attempts, then the revised one");
    assert_eq!(lits[2]["previousRevise"]["note"], note, "{}", lits[2]);
    assert_eq!(lab.step(&run, "literature")["status"], "succeeded");
}

#[test]
fn skip_a_failed_analysis_does_not_stop_the_paper() {
    let lab = Lab::new(json!({"analysis": {"fail": true}}));
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["status"], "completed");
    let run = run_id(&v);
    assert_eq!(lab.step(&run, "analysis")["status"], "failed");
    assert!(lab.ids().contains(&"paper".to_owned()));
    let tex = std::fs::read_to_string(lab.ws.join("runs/demo/paper/main.tex")).unwrap();
    assert!(tex.contains("\\begin{abstract}"));
}

/// Waits until the agent log shows a dispatch of `id`; its entry.
fn wait_for_dispatch(lab: &Lab, id: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(d) = lab.dispatches().into_iter().find(|d| d["id"] == id) {
            return d;
        }
        assert!(Instant::now() < until, "{id} was never dispatched");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sigkill_in_the_middle_of_a_stage_resumes_without_redoing_earlier_stages() {
    let lab = Lab::new(json!({"simulation": {"hang_first": true}}));
    let mut driver = lab
        .stratumc()
        .args(["run", "research.stratum.yaml", "--inputs", "@inputs.json"])
        .args(["--agent", AGENT])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hung = wait_for_dispatch(&lab, "simulation");
    driver.kill().unwrap(); // SIGKILL: nothing is cleaned up
    let _ = driver.wait();
    // the hung agent outlives the driver (its own process group): stop it
    let pid = hung["pid"]
        .as_i64()
        .expect("the agent logs its pid")
        .to_string();
    let _ = Command::new("kill").args(["-9", &pid]).status();
    let runs = lab.json(&["query", "flows", "--format", "json"]);
    let run = runs["runs"][0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(runs["runs"][0]["status"], "running");

    let (code, done) = lab.drive(&["run", "--resume", &run]);
    assert_eq!(code, Some(0), "{done}");
    assert_eq!(done["status"], "completed");
    assert_eq!(
        lab.ids(),
        [
            "plan",
            "literature",
            "simulation",
            "simulation",
            "analysis",
            "paper"
        ],
        "only the interrupted stage ran again"
    );
}

#[test]
fn an_agent_that_never_answers_is_orphaned_after_its_lease_and_dispatched_again() {
    let lab = Lab::new(json!({"analysis": {"hang_first": true}}));
    // a short lease for the analysis stage (the example's is 20 minutes)
    let spec = lab.ws.join("research.stratum.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains("timeout_ms: 1200000"));
    std::fs::write(
        &spec,
        text.replace("timeout_ms: 1200000", "timeout_ms: 3000"),
    )
    .unwrap();
    let (code, v) = lab.run(&[]);
    assert_eq!(code, Some(0), "{v}");
    let analyses: Vec<Value> = lab
        .dispatches()
        .into_iter()
        .filter(|d| d["id"] == "analysis")
        .collect();
    assert_eq!(analyses.len(), 2, "{analyses:?}");
    assert_eq!(
        analyses[0]["attempt"], analyses[1]["attempt"],
        "an orphan uses no attempt"
    );
    assert_ne!(analyses[0]["dispatchToken"], analyses[1]["dispatchToken"]);
    let audit = lab.json(&["report", &run_id(&v), "--format", "json"]);
    let analysis = audit["report"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "analysis")
        .unwrap()
        .clone();
    assert_eq!(analysis["orphans"], 1, "{analysis}");
}
