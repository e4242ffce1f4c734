//! `stratum_agent_run`, `stratum_agent_poll`, `stratum_cancel_agent_run`
//! (issue 16 §2) through the built `stratumc mcp`, with the stand-in CLIs
//! of the connector tests (`support::standins`) first on `PATH`: a
//! foreground run of the claude connector answers with its output, usage
//! and pid; a command agent in the background is polled to its end; a
//! hanging CLI is cancelled (its process gone, the teardown confirmed),
//! in the background and in the foreground by its cancellationId; a
//! foreground run linked to a flow step is killed by `stratum_flow_cancel`
//! from another server process on the same store; the records outlive the
//! server that made them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::mcp_client::Client;

const TOML: &str = r#"[agents.claude]
connector = "claude-code"
timeout_ms = 30000

[agents.codex]
command = "read line; printf '{\"output\": {\"entry\": %s}, \"usage\": {\"tokens\": 5}}' \"$line\""
"#;

const SPEC: &str = "version: 1
contracts:
  V:
    x: integer
flows:
  entry: one
  one:
    input: {}
    output:
      from: \"${s.output}\"
      contract: V
    steps:
      - id: s
        agent: claude
        do: \"produce x\"
        out: V
";

/// The contract the stand-in claude checks for (a field `x`).
fn contract() -> Value {
    json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
}

/// A scratch workspace with the stand-ins in `bin/` and a `STRATUM_HOME`.
struct Lab(PathBuf);

impl Lab {
    fn new(tag: &str) -> Lab {
        let dir = support::scratch("agent_runs", tag);
        std::fs::write(dir.join("stratum.toml"), TOML).unwrap();
        support::standins::install(&dir.join("bin"));
        Lab(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `stratumc mcp` in the workspace, the stand-ins in `mode`.
    fn server(&self, mode: &str) -> Client {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.arg("mcp")
            .current_dir(&self.0)
            .env("STRATUM_HOME", self.path("home"))
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    self.path("bin").display()
                ),
            )
            .env("STANDIN_ARGV", self.path("argv.json"))
            .env("STANDIN_PID", self.path("pid"))
            .env("STANDIN_MODE", mode)
            .stderr(Stdio::null());
        Client::start(&mut c)
    }

    /// The pid the hanging stand-in wrote, once it wrote it.
    fn standin_pid(&self) -> i32 {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(pid) = std::fs::read_to_string(self.path("pid"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                return pid;
            }
            assert!(Instant::now() < end, "the stand-in never started");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn poll_until_done(c: &mut Client, id: &str) -> Value {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.call("stratum_agent_poll", json!({"runId": id}));
        if r["done"] == true {
            return r;
        }
        assert_eq!(r["status"], "running", "{r}");
        assert!(Instant::now() < end, "agent run {id} never ended: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_foreground_claude_run_answers_with_its_output_usage_and_process() {
    let lab = Lab::new("fg");
    let mut c = lab.server("ok");
    let r = c.call(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "contract": contract()}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["done"], true, "{r}");
    assert_eq!(r["output"], json!({"x": 7}), "{r}");
    assert_eq!(r["usage"]["tokens"], 150, "{r}");
    assert_eq!(r["usage"]["usd"], 0.125, "{r}");
    assert!(r["pid"].as_u64().is_some_and(|p| p > 1), "{r}");
    assert_eq!(r["pid"], r["pgid"], "{r}");
    assert!(r["runId"].as_str().unwrap().starts_with("agent-"), "{r}");
    let argv: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(lab.path("argv.json")).unwrap()).unwrap();
    assert_eq!(argv[0], "-p", "{argv:?}");
    assert!(
        argv[1].contains("produce x") && argv[1].contains("\"x\""),
        "{argv:?}"
    );
    // the record is durable: a poll answers the same
    let id = r["runId"].as_str().unwrap().to_owned();
    let p = c.call("stratum_agent_poll", json!({"runId": id}));
    assert_eq!(p["output"], r["output"], "{p}");
    c.close();
    // and outlives the server that ran it
    let mut later = lab.server("ok");
    let p = later.call("stratum_agent_poll", json!({"runId": id}));
    assert_eq!(p["status"], "completed", "{p}");
    // a failing CLI is a failed run with its reason
    let mut failing = lab.server("fail");
    let f = failing.call(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "contract": contract()}),
    );
    assert_eq!(f["status"], "failed", "{f}");
    assert!(
        f["failure"].as_str().unwrap().contains("error_max_turns"),
        "{f}"
    );
}

#[test]
fn a_background_command_run_is_polled_to_its_end() {
    let lab = Lab::new("bg");
    let mut c = lab.server("ok");
    let r = c.call(
        "stratum_agent_run",
        json!({"agent": "codex", "prompt": "list the files", "background": true,
               "cwd": lab.0.display().to_string()}),
    );
    assert_eq!(r["status"], "running", "{r}");
    assert_eq!(r["background"], true, "{r}");
    let id = r["runId"].as_str().unwrap().to_owned();
    assert!(
        r["completionInstructions"]
            .as_str()
            .unwrap()
            .contains(&format!("\"runId\": \"{id}\"")),
        "{r}"
    );
    let done = poll_until_done(&mut c, &id);
    assert_eq!(done["status"], "completed", "{done}");
    // the command read its entry on stdin
    let entry = &done["output"]["entry"];
    assert_eq!(entry["task"], "list the files", "{done}");
    assert_eq!(entry["dispatch"], "agent_run", "{done}");
    assert_eq!(entry["id"], id.as_str(), "{done}");
    assert_eq!(done["usage"]["tokens"], 5, "{done}");
    // unknown ids and agents without a runner are refused, saying what to do
    let e = c.call("stratum_agent_poll", json!({"runId": "agent-nope"}));
    assert_eq!(e["error_type"], "not_found", "{e}");
    std::fs::write(lab.path("stratum.toml"), "").unwrap();
    let e = c.call(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "p"}),
    );
    assert_eq!(e["error_type"], "no_runner", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("[agents.claude]"),
        "{e}"
    );
}

#[test]
fn a_hanging_background_run_is_cancelled_and_its_process_is_gone() {
    let lab = Lab::new("cancel");
    let mut c = lab.server("hang");
    let r = c.call(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "contract": contract(), "background": true}),
    );
    let id = r["runId"].as_str().unwrap().to_owned();
    let pid = lab.standin_pid();
    assert!(!dead(pid));
    let x = c.call("stratum_cancel_agent_run", json!({"runId": id}));
    assert_eq!(x["status"], "cancelled", "{x}");
    assert_eq!(x["cancelled"], true, "{x}");
    assert_eq!(x["teardown"], "reaped", "{x}");
    assert_eq!(x["teardownConfirmed"], true, "{x}");
    assert!(dead(pid), "the stand-in survived the cancel");
    // its own end (killed) does not overwrite the cancel
    std::thread::sleep(Duration::from_millis(500));
    let p = c.call("stratum_agent_poll", json!({"runId": id}));
    assert_eq!(p["status"], "cancelled", "{p}");
    let again = c.call("stratum_cancel_agent_run", json!({"runId": id}));
    assert_eq!(again["cancelled"], false, "{again}");
    assert_eq!(again["reason"], "already_cancelled", "{again}");
}

#[test]
fn a_foreground_run_is_cancelled_by_its_cancellation_id_while_the_call_waits() {
    let lab = Lab::new("fgcancel");
    let mut c = lab.server("hang");
    let waiting = c.call_async(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "contract": contract(),
               "cancellationId": "5b7f-cancel-me"}),
    );
    let pid = lab.standin_pid();
    // the same server answers other calls while the foreground run waits
    let x = c.call(
        "stratum_cancel_agent_run",
        json!({"runId": "5b7f-cancel-me"}),
    );
    assert_eq!(x["teardownConfirmed"], true, "{x}");
    assert_eq!(x["cancellationId"], "5b7f-cancel-me", "{x}");
    assert!(dead(pid));
    let answer = Client::result(c.wait(waiting, Duration::from_secs(30)));
    assert_eq!(answer["status"], "cancelled", "{answer}");
    assert!(
        answer["failure"].as_str().unwrap().contains("cancelled"),
        "{answer}"
    );
    // a cancellation id names one run
    let dup = c.call(
        "stratum_agent_run",
        json!({"agent": "codex", "prompt": "p", "cancellationId": "5b7f-cancel-me"}),
    );
    assert_eq!(dup["error_type"], "invalid_request", "{dup}");
}

#[test]
fn a_foreground_run_linked_to_a_flow_step_is_killed_by_flow_cancel_from_another_server() {
    let lab = Lab::new("flow");
    std::fs::write(lab.path("one.stratum.yaml"), SPEC).unwrap();
    let mut a = lab.server("hang");
    let plan = a.call(
        "stratum_plan",
        json!({"spec": SPEC, "input": {}, "workspaceRoot": lab.0.display().to_string()}),
    );
    let run = plan["runId"].as_str().unwrap().to_owned();
    // a flow link needs a cancellation id (else there is no group to own)
    let e = a.call(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "flow": {"runId": run, "stepId": "s"}}),
    );
    assert_eq!(e["error_type"], "invalid_request", "{e}");
    let waiting = a.call_async(
        "stratum_agent_run",
        json!({"agent": "claude", "prompt": "produce x", "contract": contract(),
               "cancellationId": "flow-linked-1",
               "flow": {"runId": run, "stepId": "s", "itemIndex": 0}}),
    );
    let pid = lab.standin_pid();
    // another server process, on the same store, cancels the flow
    let mut b = lab.server("ok");
    let cancel = b.call("stratum_flow_cancel", json!({"runId": run}));
    assert_eq!(cancel["status"], "cancelled", "{cancel}");
    let agents = cancel["agentRuns"].as_array().cloned().unwrap_or_default();
    assert_eq!(agents.len(), 1, "{cancel}");
    assert_eq!(agents[0]["teardown"], "reaped", "{cancel}");
    assert_eq!(agents[0]["teardownConfirmed"], true, "{cancel}");
    assert!(dead(pid), "the linked agent survived the flow's cancel");
    let answer = Client::result(a.wait(waiting, Duration::from_secs(30)));
    assert_eq!(answer["status"], "cancelled", "{answer}");
    assert_eq!(answer["flow"]["runId"], run.as_str(), "{answer}");
    assert_eq!(answer["flow"]["itemIndex"], 0, "{answer}");
}
