//! Cost from history and the estimate a run records, through the binary:
//! a spec run twice with a scripted agent that reports usage (the first
//! attempt of `draft` fails in each run, `write` reports huge usage);
//! `stratumc cost --history` then shows the observed pass rate and usage of
//! `draft` resting on 2 runs, and a changed step (another task text) has
//! no history; the run's audit has its `estimated` event; `stratumc
//! report` flags `write` as over 2× its expected estimate, and a run from a
//! plan file has no estimate.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

mod support;
use support::Ran;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(support::scratch("history", tag))
    }

    fn stratumc(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.0.join("home"))
            .env("NO_COLOR", "1")
            .current_dir(&self.0)
            .stdin(Stdio::null());
        c
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn json(&self, args: &[&str]) -> Value {
        let r = Ran::of(self.stratumc().args(args).args(["--format", "json"]));
        assert_eq!(r.code, 0, "{}", r.context());
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.context()))
    }

    /// Runs `spec` to completion; the run id.
    fn run(&self, spec: &str) -> String {
        let r = Ran::of(
            self.stratumc()
                .args(["run", spec, "--agent", "python3 agent.py"]),
        );
        assert_eq!(r.code, 0, "{}", r.context());
        r.run_id()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SPEC: &str = r#"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${write.output}", contract: Out}
    steps:
      - id: draft
        do: "Draft the notes"
        out: Out
        attempts: 2
      - id: write
        after: [draft]
        do: "Write the text"
        out: Out
"#;

/// The first attempt of `draft` fails; every dispatch reports usage, and
/// `write` reports ten million tokens.
const AGENT: &str = r#"import json, sys
entry = json.load(sys.stdin)
tokens = 10000000 if entry["id"] == "write" else 100
usage = {"tokens": tokens, "usd": 0.1, "ms": 40}
if entry["id"] == "draft" and entry["attempt"] == 1:
    print(json.dumps({"failure": "not yet", "usage": usage}))
else:
    print(json.dumps({"output": {"text": "done"}, "usage": usage}))
"#;

fn step<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step {id} in {doc}"))
}

#[test]
fn cost_history_estimate_event_and_report_flags() {
    let s = Scratch::new("e2e");
    s.write("spec.stratum.yaml", SPEC);
    s.write("agent.py", AGENT);

    // before any run: no history, every step on its profile
    let before = s.json(&["cost", "spec.stratum.yaml", "--history"]);
    assert_eq!(before["history"]["runs_scanned"], 0);
    assert_eq!(step(&before, "draft")["basis"], Value::Null);

    let first = s.run("spec.stratum.yaml");
    s.run("spec.stratum.yaml");

    // draft: 2 dispatches per run, half of the attempts passed, 100 tokens,
    // $0.10 and 40 ms per dispatch
    let cost = s.json(&["cost", "spec.stratum.yaml", "--history"]);
    assert_eq!(cost["history"]["runs_scanned"], 2);
    let draft = step(&cost, "draft");
    assert_eq!(draft["basis"]["runs"], 2, "{draft}");
    assert_eq!(draft["basis"]["dispatches"], 4, "{draft}");
    // 2 attempts at p = 0.5: 1.5 dispatches expected, 2 at worst
    assert_eq!(draft["dispatches"]["expected"], 1.5, "{draft}");
    assert_eq!(draft["tokens"]["expected"], 150, "{draft}");
    assert_eq!(draft["tokens"]["worst"], 200, "{draft}");
    assert_eq!(draft["usd"]["worst"], 0.2, "{draft}");
    assert_eq!(draft["ms"]["worst"], 80, "{draft}");
    let write = step(&cost, "write");
    assert_eq!(write["basis"]["runs"], 2);
    // every attempt of write passed: one dispatch of 10M tokens expected
    assert_eq!(write["tokens"]["expected"], 10_000_000, "{write}");

    let human = Ran::of(
        s.stratumc()
            .args(["cost", "spec.stratum.yaml", "--history"]),
    );
    assert_eq!(human.code, 0, "{}", human.context());
    assert!(
        human.stdout.contains("history: 2 runs, 4 dispatches"),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains("150 / 200"), "{}", human.stdout);

    // another task text is another compiled step: no history, the profile
    s.write(
        "changed.stratum.yaml",
        &SPEC.replace("Draft the notes", "Draft the notes again"),
    );
    let changed = s.json(&["cost", "changed.stratum.yaml", "--history"]);
    let draft = step(&changed, "draft");
    assert_eq!(draft["basis"], Value::Null, "{draft}");
    assert_eq!(
        draft["tokens"]["worst"], 40_000,
        "built-in claude profile: {draft}"
    );
    assert_eq!(step(&changed, "write")["basis"]["runs"], 2);
    let human = Ran::of(
        s.stratumc()
            .args(["cost", "changed.stratum.yaml", "--history"]),
    );
    assert!(
        human.stdout.contains("profile (no history)"),
        "{}",
        human.stdout
    );

    // the run's audit has the estimate it was started with
    let report = s.json(&["report", &first]);
    let report = &report["report"];
    let timeline = report["timeline"].as_array().unwrap();
    assert!(
        timeline.iter().any(|e| e["kind"] == "estimated"),
        "{report}"
    );
    let est = &step(report, "draft")["estimate"];
    assert_eq!(est["tokens"]["worst"].as_f64(), Some(40_000.0), "{est}");
    assert!(
        est["stepHash"].as_str().is_some_and(|h| h.len() == 64),
        "{est}"
    );

    // write spent 10M tokens against ~23.5k expected: flagged; draft not
    let flags = report["flags"].as_array().unwrap();
    assert!(
        flags
            .iter()
            .any(|f| f["step"] == "write" && f["dimension"] == "tokens"),
        "{flags:?}"
    );
    assert!(flags.iter().all(|f| f["step"] != "draft"), "{flags:?}");
    let md = Ran::of(s.stratumc().args(["report", &first]));
    assert_eq!(md.code, 0, "{}", md.context());
    assert!(md.stdout.contains("⚠ over 2×"), "{}", md.stdout);
    assert!(
        md.stdout.contains("Spend against the estimate"),
        "{}",
        md.stdout
    );
}

#[test]
fn a_run_from_a_plan_file_records_no_estimate() {
    let s = Scratch::new("plan-file");
    s.write("spec.stratum.yaml", SPEC);
    s.write("agent.py", AGENT);
    let built = Ran::of(
        s.stratumc()
            .args(["build", "spec.stratum.yaml", "-o", "spec.stratumc"]),
    );
    assert_eq!(built.code, 0, "{}", built.context());
    let id = s.run("spec.stratumc");
    let report = s.json(&["report", &id]);
    let report = &report["report"];
    let timeline = report["timeline"].as_array().unwrap();
    assert!(
        timeline.iter().all(|e| e["kind"] != "estimated"),
        "{report}"
    );
    assert_eq!(report["flags"], serde_json::json!([]));
    assert_eq!(step(report, "write")["estimate"], Value::Null);
}
