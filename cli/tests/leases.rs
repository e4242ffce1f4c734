//! Dispatch leases (language 1.1, X7) through `stratumc run`: an agent that
//! never answers is killed when its `timeout_ms` runs out, the dispatch is
//! orphaned and handed out again with a new token and the same attempt, and
//! the second agent's answer completes the run.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SPEC: &str = r#"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${work.output}", contract: Out}
    steps:
      - id: work
        do: "Write a text"
        out: Out
        attempts: 1
        timeout_ms: 700
"#;

/// The first call logs its entry and hangs; later calls log and answer.
const AGENT: &str = r#"entry=$(cat)
printf '%s\n' "$entry" >> calls.log
if [ ! -e hung ]; then
  touch hung
  sleep 60
fi
echo '{"output": {"text": "second try"}}'
"#;

fn stratumc(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    c.current_dir(dir)
        .env("STRATUM_HOME", dir.join("home"))
        .env("NO_COLOR", "1");
    c
}

#[test]
fn an_agent_that_never_answers_is_orphaned_and_dispatched_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("spec.stratum.yaml"), SPEC).unwrap();
    std::fs::write(d.join("agent.sh"), AGENT).unwrap();
    let out = stratumc(d)
        .args([
            "run",
            "spec.stratum.yaml",
            "--inputs",
            "{}",
            "--agent",
            "sh agent.sh",
        ])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no report within its lease of 700 ms"),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["output"]["text"], "second try", "{doc}");
    // two dispatches of the same attempt, each with its own token and the lease
    let log = std::fs::read_to_string(d.join("calls.log")).unwrap();
    let calls: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls.len(), 2, "{log}");
    assert_eq!(calls[0]["attempt"], 1);
    assert_eq!(calls[1]["attempt"], 1);
    assert_eq!(calls[0]["timeoutMs"], 700);
    assert_ne!(calls[0]["dispatchToken"], calls[1]["dispatchToken"]);
    // the audit has the orphan
    let run = doc["runId"]
        .as_str()
        .expect("the document names the run")
        .to_string();
    let q = stratumc(d)
        .args(["query", "flow", &run, "--format", "json"])
        .output()
        .unwrap();
    let view: Value = serde_json::from_slice(&q.stdout).unwrap();
    assert_eq!(view["run"]["status"], "completed", "{view}");
    assert!(view["run"].get("overdue").is_none(), "{view}");
    let db = rusqlite::Connection::open(d.join("home/stratum.db")).unwrap();
    let orphaned: i64 = db
        .query_row(
            "SELECT count(*) FROM events WHERE run_id = ?1 AND json LIKE '%dispatch_orphaned%'",
            [&run],
            |r| r.get(0),
        )
        .unwrap_or(-1);
    assert_eq!(orphaned, 1);
}
