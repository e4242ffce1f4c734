//! `stratumc run --agent` against agents that hang, hold their pipes or are
//! interrupted, through the binary, each test with its own `STRATUM_HOME`:
//!
//! - `--agent-timeout MS`: a hanging agent fails its attempts with the
//!   timeout failure, and the run ends;
//! - a grandchild holding the agent's stdout does not hold up the run;
//! - SIGINT / SIGTERM to `stratumc run` while an agent sleeps: the agent's
//!   process group is gone, the exit status is 130 / 143, and `--resume`
//!   hands the same dispatch out again and completes.
//!
//! Every wait is bounded by [`HARNESS`], so a regression fails instead of
//! hanging the suite.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

mod support;
use support::Ran;

/// Generous: every run here ends in about a second when the runner works,
/// and would take 30 s (the agents' `sleep 30`) or forever when it does not.
const HARNESS: Duration = Duration::from_secs(20);

/// One step `s` whose agent must print `{"output": {"x": N}}`.
const SPEC: &str = r#"version: 1
contracts:
  V:
    x: integer
flows:
  entry: one
  one:
    input: {}
    output:
      from: "${s.output}"
      contract: V
    steps:
      - id: s
        do: "produce x"
        out: V
"#;

const OK_AGENT: &str = r#"echo '{"output": {"x": 7}}'"#;

/// A scratch directory with `STRATUM_HOME` (`home/`) and the spec; removed
/// on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = support::scratch("agents", tag);
        std::fs::write(dir.join("one.stratum.yaml"), SPEC).expect("the scratch dir is writable");
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `stratumc ARGS` with this `STRATUM_HOME`, in the scratch dir, stdin
    /// not a terminal, outputs piped.
    fn stratumc(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.args(args)
            .env("STRATUM_HOME", self.0.join("home"))
            .env("NO_COLOR", "1")
            .current_dir(&self.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `stratumc ARGS` to its end within [`HARNESS`].
    fn run(&self, args: &[&str]) -> Ran {
        let mut child = self.stratumc(args).spawn().expect("stratumc starts");
        let status = wait_for(&mut child, HARNESS);
        let out = child
            .wait_with_output()
            .expect("stratumc's outputs are readable");
        let status = status.expect("stratumc run did not end within the harness limit (it hangs)");
        Ran {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits up to `d` for the child to exit; kills it past that (and says None).
fn wait_for(child: &mut Child, d: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + d;
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return Some(status);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid a command wrote to `path`, once the file is complete (bounded).
fn pid_in(path: &Path) -> i32 {
    let end = Instant::now() + HARNESS;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(pid) = text.strip_suffix('\n').and_then(|t| t.parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < end, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` runs: `kill(pid, 0)` succeeds and it is not a zombie (an
/// init that does not reap orphans can leave killed ones as zombies).
fn alive(pid: i32) -> bool {
    let Some(p) = Pid::from_raw(pid) else {
        return false;
    };
    if rustix::process::test_kill_process(p).is_err() {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        != Some("Z")
}

/// True once `pid` is gone (waits a little: a SIGKILL takes a moment).
fn gone(pid: i32) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The run id from the `run: <id>` line.
fn run_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap_or_else(|| panic!("no `run:` line in:\n{stderr}"))
        .to_string()
}

#[test]
fn a_hanging_agent_times_out_and_the_run_fails() {
    let s = Scratch::new("timeout");
    let r = s.run(&[
        "run",
        "one.stratum.yaml",
        "--agent",
        "sleep 30",
        "--agent-timeout",
        "300",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(doc["status"], "failed", "{doc}");
    let reason = doc["failure"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("agent command timed out after 300 ms"),
        "{reason}"
    );
}

#[test]
fn agent_timeout_must_be_a_positive_number_of_ms() {
    let s = Scratch::new("timeout-arg");
    for bad in ["0", "-5", "soon"] {
        let flag = format!("--agent-timeout={bad}");
        let r = s.run(&["run", "one.stratum.yaml", "--agent", OK_AGENT, &flag]);
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert!(r.stderr.contains("--agent-timeout"), "{bad}: {}", r.stderr);
    }
}

#[test]
fn a_grandchild_holding_stdout_does_not_hold_the_run() {
    let s = Scratch::new("grandchild");
    let kid = s.file("kid");
    let agent = format!(
        r#"(sleep 30 & echo $! > {}); echo '{{"output": {{"x": 3}}}}'"#,
        kid.display()
    );
    let r = s.run(&[
        "run",
        "one.stratum.yaml",
        "--agent",
        &agent,
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(doc["output"]["x"], 3, "{doc}");
    assert!(
        gone(pid_in(&kid)),
        "the agent's grandchild outlived the run"
    );
}

/// Starts a run whose agent sleeps, sends `sig` once the agent and its
/// child are up, and checks the exit status, that the agent's group is
/// gone, and that `--resume` runs the same dispatch again to completion.
fn interrupt_then_resume(sig: Signal, name: &str, want: i32) {
    let s = Scratch::new(name);
    let (me, kid) = (s.file("me"), s.file("kid"));
    let agent = format!(
        "echo $$ > {}; sleep 30 & echo $! > {}; wait",
        me.display(),
        kid.display()
    );
    let mut child = s
        .stratumc(&["run", "one.stratum.yaml", "--agent", &agent])
        .spawn()
        .expect("stratumc starts");
    let (agent_pid, kid_pid) = (pid_in(&me), pid_in(&kid));
    rustix::process::kill_process(Pid::from_child(&child), sig).expect("stratumc can be signalled");
    let status = wait_for(&mut child, HARNESS);
    let out = child
        .wait_with_output()
        .expect("stratumc's outputs are readable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = status.expect("stratumc run did not end after the signal");
    assert_eq!(status.code(), Some(want), "{name}: {stderr}");
    assert!(
        stderr.contains(&format!("interrupted by {name}")),
        "{stderr}"
    );
    assert!(gone(agent_pid), "{name}: the agent survived stratumc");
    assert!(gone(kid_pid), "{name}: the agent's child survived stratumc");

    let id = run_id(&stderr);
    // the audit says who stopped the driver and what it killed
    let audit = audit_types(&s.file("home").join("stratum.db"), &id);
    let last = audit.last().map(|(t, d)| (t.as_str(), d.clone()));
    assert_eq!(
        last,
        Some((
            "driver_interrupted",
            serde_json::json!({"signal": name, "killed": 1})
        )),
        "{audit:?}"
    );
    let r = s.run(&[
        "run", "--resume", &id, "--agent", OK_AGENT, "--format", "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // the interrupted attempt was never reported: the same attempt runs again
    assert!(r.stderr.contains("s (attempt 1): reported"), "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(doc["output"]["x"], 7, "{doc}");
}

#[test]
fn sigterm_kills_the_agents_group_exits_143_and_the_run_resumes() {
    interrupt_then_resume(Signal::TERM, "SIGTERM", 143);
}

#[test]
fn sigint_kills_the_agents_group_exits_130_and_the_run_resumes() {
    interrupt_then_resume(Signal::INT, "SIGINT", 130);
}

/// The audit of a run in a store: each event's type and detail.
fn audit_types(db: &std::path::Path, run_id: &str) -> Vec<(String, serde_json::Value)> {
    let conn = rusqlite::Connection::open(db).expect("the store opens");
    let mut stmt = conn
        .prepare("SELECT json FROM events WHERE run_id = ?1 ORDER BY seq")
        .expect("the events table exists");
    stmt.query_map([run_id], |r| r.get::<_, String>(0))
        .expect("events are readable")
        .map(|j| {
            let v: serde_json::Value = serde_json::from_str(&j.expect("a row")).expect("JSON");
            (
                v["type"].as_str().unwrap_or("").to_string(),
                v["detail"].clone(),
            )
        })
        .collect()
}

/// One step `s` checked by `exec: {run: slow}`: the declared command writes
/// its pid and its child's, sleeps, and marks that it ran to its end.
const EXEC_SPEC: &str = r#"version: 1
contracts:
  V:
    x: integer
flows:
  entry: one
  one:
    input: {}
    output:
      from: "${s.output}"
      contract: V
    steps:
      - id: s
        do: "produce x"
        out: V
        ensure:
          - exec: {run: slow}
"#;

/// A scratch dir whose `stratum.toml` declares `slow` (a 60 s timeout).
fn exec_scratch(tag: &str) -> Scratch {
    let s = Scratch::new(tag);
    std::fs::write(s.file("one.stratum.yaml"), EXEC_SPEC).unwrap();
    let script = format!(
        "echo $$ > {}; sleep 30 & echo $! > {}; wait; touch {}",
        s.file("me").display(),
        s.file("kid").display(),
        s.file("finished").display()
    );
    let toml =
        format!("[commands.slow]\nargv = [\"sh\", \"-c\", {script:?}]\ntimeout_ms = 60000\n");
    std::fs::write(s.file("stratum.toml"), toml).unwrap();
    s
}

/// The id of the one run in the scratch store.
fn only_run(s: &Scratch) -> String {
    let conn =
        rusqlite::Connection::open(s.file("home").join("stratum.db")).expect("the store opens");
    conn.query_row("SELECT run_id FROM runs", [], |r| r.get(0))
        .expect("one run")
}

#[test]
fn a_cancel_kills_a_running_exec_check_at_once_and_records_nothing_of_it() {
    let s = exec_scratch("exec-cancel");
    let mut child = s
        .stratumc(&[
            "run",
            "one.stratum.yaml",
            "--agent",
            OK_AGENT,
            "--format",
            "json",
        ])
        .spawn()
        .expect("stratumc starts");
    let (cmd_pid, kid_pid) = (pid_in(&s.file("me")), pid_in(&s.file("kid")));
    let id = only_run(&s);
    let cancel = s.run(&["flow", "cancel", &id]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let status = wait_for(&mut child, HARNESS);
    let out = child
        .wait_with_output()
        .expect("stratumc's outputs are readable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = status.expect("stratumc run did not end after the cancel");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["status"], "cancelled", "{doc}");
    assert!(stderr.contains("command `slow` was stopped"), "{stderr}");
    assert!(!s.file("finished").exists(), "the command ran to its end");
    assert!(gone(cmd_pid), "the command survived the cancel");
    assert!(gone(kid_pid), "the command's child survived the cancel");
    // the report whose check was stopped is not in the audit
    let audit = audit_types(&s.file("home").join("stratum.db"), &id);
    let kinds: Vec<&str> = audit.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        !kinds.contains(&"command_ran") && !kinds.contains(&"result"),
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"flow_cancelled"), "{kinds:?}");
}

#[test]
fn sigint_kills_a_running_exec_check_and_the_report_stays_outstanding() {
    let s = exec_scratch("exec-sigint");
    let mut child = s
        .stratumc(&["run", "one.stratum.yaml", "--agent", OK_AGENT])
        .spawn()
        .expect("stratumc starts");
    let (cmd_pid, kid_pid) = (pid_in(&s.file("me")), pid_in(&s.file("kid")));
    rustix::process::kill_process(Pid::from_child(&child), Signal::INT)
        .expect("stratumc can be signalled");
    let status = wait_for(&mut child, HARNESS);
    let out = child
        .wait_with_output()
        .expect("stratumc's outputs are readable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = status.expect("stratumc run did not end after the signal");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!s.file("finished").exists(), "the command ran to its end");
    assert!(gone(cmd_pid), "the command survived SIGINT");
    assert!(gone(kid_pid), "the command's child survived SIGINT");
    let id = run_id(&stderr);
    let audit = audit_types(&s.file("home").join("stratum.db"), &id);
    let kinds: Vec<&str> = audit.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        !kinds.contains(&"result"),
        "the report was not recorded: {kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"driver_interrupted"), "{kinds:?}");
}
