//! `stratumc run --retry RUN [--from STEP]` through the binary (X8): a run
//! whose second step fails is retried with a fixed agent; the first step is
//! reused, not dispatched (the agent's own log says so), the run completes,
//! and `query` shows the link both ways.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

mod support;
use support::Ran;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(support::scratch("retry", tag))
    }

    fn stratumc(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.0.join("home"))
            .current_dir(&self.0)
            .stdin(Stdio::null());
        c
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.0.join("agent.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SPEC: &str = r#"version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {topic: string}
    output: {from: "${write.output}", contract: R}
    steps:
      - id: plan
        do: "plan ${input.topic}"
        out: R
      - id: write
        do: "write ${plan.output.value}"
        out: R
        attempts: 1
"#;

/// An agent that logs every dispatch's id to `agent.log`; with `broken` it
/// reports a failure for `write`.
const AGENT: &str = r#"import json, sys
entry = json.load(sys.stdin)
step = entry["id"]
with open("agent.log", "a") as log:
    log.write(step + "\n")
if step == "write" and sys.argv[1:] == ["broken"]:
    print(json.dumps({"failure": "the writer is misconfigured"}))
else:
    print(json.dumps({"output": {"value": step + " of " + json.dumps(entry.get("do", ""))}}))
"#;

fn agent(s: &Scratch, mode: &str) -> String {
    let script = s.write("agent.py", AGENT);
    format!("python3 {} {mode}", script.display())
}

fn query(s: &Scratch, args: &[&str]) -> Value {
    let r = Ran::of(
        s.stratumc()
            .arg("query")
            .args(args)
            .args(["--format", "json"]),
    );
    assert_eq!(r.code, 0, "{}", r.context());
    serde_json::from_str(&r.stdout).unwrap()
}

fn step<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap()
}

#[test]
fn retry_reuses_the_succeeded_step_and_completes_with_a_fixed_agent() {
    let s = Scratch::new("reuse");
    let spec = s.write("two.stratum.yaml", SPEC);
    let ws = s.0.display().to_string();
    let first = Ran::of(s.stratumc().arg("run").arg(&spec).args([
        "--inputs",
        r#"{"topic": "owls"}"#,
        "--workspace",
        &ws,
        "--agent",
        &agent(&s, "broken"),
        "--format",
        "json",
    ]));
    assert_eq!(first.code, 1, "{}", first.context());
    let old = first.run_id();
    assert_eq!(first.doc()["status"], "failed");
    assert_eq!(s.log(), ["plan", "write"]);
    std::fs::remove_file(s.0.join("agent.log")).unwrap();

    let second = Ran::of(s.stratumc().args(["run", "--retry", &old]).args([
        "--agent",
        &agent(&s, "fixed"),
        "--format",
        "json",
    ]));
    assert_eq!(second.code, 0, "{}", second.context());
    let new = second.run_id();
    assert_ne!(new, old);
    assert!(
        second
            .stderr
            .contains(&format!("retry of {old}: reused steps are not dispatched")),
        "{}",
        second.context()
    );
    // the first step was not dispatched again: only `write` reached the agent
    assert_eq!(s.log(), ["write"]);
    assert_eq!(
        second.completed(),
        json!({"value": "write of \"write plan of \\\"plan owls\\\"\""})
    );

    let new_view = query(&s, &["flow", &new])["run"].clone();
    assert_eq!(new_view["retryOf"], json!(old));
    assert_eq!(new_view["from"], Value::Null);
    assert_eq!(step(&new_view, "plan")["reusedFrom"], json!(old));
    assert_eq!(step(&new_view, "plan")["status"], "succeeded");
    assert_eq!(step(&new_view, "write").get("reusedFrom"), None);
    let old_view = query(&s, &["flow", &old])["run"].clone();
    assert_eq!(
        old_view["status"], "failed",
        "the old run's status is unchanged"
    );
    assert_eq!(old_view["retriedBy"], json!([new]));
    let listed = query(&s, &["flows"]);
    let row = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == new.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["retryOf"], json!(old));

    // the human view says it too
    let r = Ran::of(s.stratumc().args(["query", "flow", &new]));
    assert!(
        r.stdout.contains(&format!("retry of {old}")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(&format!("reused from {old}")),
        "{}",
        r.stdout
    );
}

#[test]
fn retry_from_a_step_runs_it_again_and_refusals_exit_2() {
    let s = Scratch::new("from");
    let spec = s.write("two.stratum.yaml", SPEC);
    let ws = s.0.display().to_string();
    let first = Ran::of(s.stratumc().arg("run").arg(&spec).args([
        "--inputs",
        r#"{"topic": "owls"}"#,
        "--workspace",
        &ws,
        "--agent",
        &agent(&s, "fixed"),
    ]));
    assert_eq!(first.code, 0, "{}", first.context());
    let old = first.run_id();
    std::fs::remove_file(s.0.join("agent.log")).unwrap();

    let again = Ran::of(
        s.stratumc()
            .args(["run", "--retry", &old, "--from", "plan"])
            .args(["--agent", &agent(&s, "fixed")]),
    );
    assert_eq!(again.code, 0, "{}", again.context());
    assert_eq!(s.log(), ["plan", "write"]);

    let bad = Ran::of(
        s.stratumc()
            .args(["run", "--retry", &old, "--from", "plna"])
            .args(["--agent", &agent(&s, "fixed")]),
    );
    bad.fails(
        2,
        "--from `plna`: flow `main` has no such step (did you mean `plan`?)",
    );
    let missing = Ran::of(
        s.stratumc()
            .args(["run", "--retry", "run-nope", "--agent", "true"]),
    );
    assert_eq!(missing.code, 2, "{}", missing.context());
    let no_retry = Ran::of(
        s.stratumc()
            .args(["run", "--from", "plan", "--agent", "true"]),
    );
    assert_eq!(no_retry.code, 2, "{}", no_retry.context());
    assert!(Path::new(&s.0).exists());
}

#[test]
fn retry_after_an_artifact_was_edited_dispatches_its_step_again() {
    let s = Scratch::new("artifact");
    let spec = SPEC.replace(
        "        do: \"plan ${input.topic}\"\n        out: R\n",
        "        do: \"plan ${input.topic}\"\n        out: R\n        artifacts: [\"plan.md\"]\n",
    );
    assert!(spec.contains("artifacts"), "the spec carries an artifact");
    let spec = s.write("two.stratum.yaml", &spec);
    s.write("plan.md", "the plan");
    let ws = s.0.display().to_string();
    let first = Ran::of(s.stratumc().arg("run").arg(&spec).args([
        "--inputs",
        r#"{"topic": "owls"}"#,
        "--workspace",
        &ws,
        "--agent",
        &agent(&s, "broken"),
        "--format",
        "json",
    ]));
    assert_eq!(first.code, 1, "{}", first.context());
    let old = first.run_id();
    assert_eq!(s.log(), ["plan", "write"]);
    std::fs::remove_file(s.0.join("agent.log")).unwrap();

    // the plan's artifact changes between the runs: its manifest no longer verifies
    s.write("plan.md", "the plan, edited by hand");
    let second = Ran::of(s.stratumc().args(["run", "--retry", &old]).args([
        "--agent",
        &agent(&s, "fixed"),
        "--format",
        "json",
    ]));
    assert_eq!(second.code, 0, "{}", second.context());
    assert_eq!(s.log(), ["plan", "write"], "`plan` was dispatched again");
    let new_view = query(&s, &["flow", &second.run_id()])["run"].clone();
    assert_eq!(step(&new_view, "plan").get("reusedFrom"), None);
}
