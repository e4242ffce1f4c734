//! Background flows through the built binary (issue 16 §2): `stratumc run
//! --detach` starts a run and a driver process that outlives the caller;
//! the run is polled to completion. A driver SIGKILLed mid-run leaves its
//! lease to lapse; `stratumc run --resume` takes the run over (the dead
//! driver's agent is killed, the dispatch reissued), completes it, and the
//! audit shows each step done once, and the dead driver's token is refused
//! as stale while the new driver works. A second driver is refused while the
//! first one's lease is fresh.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::Ran;
use support::mcp_client::Client;

/// The agent: records its start (entry and pid) in `AGENT_DIR`, sleeps
/// `AGENT_SLEEP` seconds, answers `x + 1` for the task's number.
const AGENT: &str = r#"import json, os, re, sys, time
e = json.load(sys.stdin)
d = os.environ["AGENT_DIR"]
open(os.path.join(d, "%s.%d.start" % (e["id"], os.getpid())), "w").write(json.dumps(e))
n = int(re.search(r"increment (-?\d+)", e["do"]).group(1))
time.sleep(float(os.environ.get("AGENT_SLEEP", "0")))
print(json.dumps({"output": {"x": n + 1}}))
"#;

struct Lab(PathBuf);

impl Lab {
    fn new(tag: &str) -> Lab {
        let dir = support::scratch("background", tag);
        std::fs::write(dir.join("chain.stratum.yaml"), support::chain_spec(3)).unwrap();
        std::fs::write(dir.join("agent.py"), AGENT).unwrap();
        std::fs::create_dir_all(dir.join("marks")).unwrap();
        Lab(dir)
    }

    fn cmd(&self, args: &[&str], sleep: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.args(args)
            .current_dir(&self.0)
            .env("STRATUM_HOME", self.0.join("home"))
            .env("STRATUM_LEASE_MS", "1000")
            .env("AGENT_DIR", self.0.join("marks"))
            .env("AGENT_SLEEP", sleep)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    fn agent(&self) -> String {
        format!("python3 {}", self.0.join("agent.py").display())
    }

    fn detach(&self, sleep: &str) -> Value {
        let agent = self.agent();
        let args = [
            "run",
            "chain.stratum.yaml",
            "--inputs",
            r#"{"start": 1}"#,
            "--agent",
            &agent,
            "--detach",
            "--format",
            "json",
        ];
        let r = Ran::of(&mut self.cmd(&args, sleep));
        assert_eq!(r.code, 0, "{}", r.context());
        r.doc()
    }

    fn status(&self, run: &str) -> String {
        let r = Ran::of(&mut self.cmd(&["query", "flow", run, "--format", "json"], "0"));
        assert_eq!(r.code, 0, "{}", r.context());
        r.doc()["run"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn wait_status(&self, run: &str, want: &str) {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.status(run);
            if got == want {
                return;
            }
            assert!(Instant::now() < end, "run {run} is {got}, never {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The agents started for `step` so far: their pids.
    fn starts(&self, step: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = std::fs::read_dir(self.0.join("marks"))
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix(&format!("{step}."))?;
                rest.strip_suffix(".start")?.parse().ok()
            })
            .collect();
        pids.sort_unstable();
        pids
    }

    fn events(&self, run: &str, kind: &str) -> Vec<Value> {
        let args = ["query", "events", run, "--type", kind, "--format", "json"];
        let r = Ran::of(&mut self.cmd(&args, "0"));
        assert_eq!(r.code, 0, "{}", r.context());
        r.doc()["events"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_detached_run_is_driven_to_completion_by_its_driver() {
    let lab = Lab::new("detach");
    let doc = lab.detach("0");
    assert_eq!(doc["status"], "running", "{doc}");
    assert_eq!(doc["detached"], true, "{doc}");
    let run = doc["runId"].as_str().unwrap().to_owned();
    assert!(doc["driverPid"].as_u64().is_some(), "{doc}");
    assert!(
        Path::new(doc["log"].as_str().unwrap()).starts_with(lab.0.join("home")),
        "{doc}"
    );
    lab.wait_status(&run, "completed");
    for step in ["s0", "s1", "s2"] {
        assert_eq!(lab.starts(step).len(), 1, "{step}");
    }
    // the driver's dispatches were recorded with their processes, and it let go of the lease
    let store = rusqlite::Connection::open(lab.0.join("home/stratum.db")).unwrap();
    let records: i64 = store
        .query_row(
            "SELECT COUNT(*) FROM agent_runs WHERE flow_run_id = ?1 AND status = 'completed' AND pgid IS NOT NULL",
            [&run],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(records, 3);
    wait_until("the driver to release its lease", || {
        store
            .query_row(
                "SELECT COUNT(*) FROM leases WHERE run_id = ?1",
                [&run],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == 0
    });
}

#[test]
fn a_killed_driver_is_taken_over_and_each_step_is_done_once() {
    let lab = Lab::new("takeover");
    let doc = lab.detach("2");
    let run = doc["runId"].as_str().unwrap().to_owned();
    let driver = i32::try_from(doc["driverPid"].as_u64().unwrap()).unwrap();
    // s0 done, s1's agent running: kill the driver (its agent lives on, in its own group)
    wait_until("s1's agent to start", || !lab.starts("s1").is_empty());
    let old_agent = lab.starts("s1")[0];
    // while the driver's lease is fresh, another driver is refused
    let agent = lab.agent();
    let refused = Ran::of(&mut lab.cmd(&["run", "--resume", &run, "--agent", &agent], "0"));
    assert_eq!(refused.code, 2, "{}", refused.context());
    assert!(
        refused.stderr.contains("is being driven by pid"),
        "{}",
        refused.context()
    );
    let _ = Command::new("kill")
        .args(["-KILL", &driver.to_string()])
        .status();
    wait_until("the driver to die", || dead(driver));
    assert!(!dead(old_agent), "the agent died with its driver");
    let old_entry: Value = serde_json::from_str(
        &std::fs::read_to_string(lab.0.join(format!("marks/s1.{old_agent}.start"))).unwrap(),
    )
    .unwrap();
    // the resume waits out the lapsed lease, takes the run over and completes it
    let resumed = lab
        .cmd(
            &[
                "run", "--resume", &run, "--agent", &agent, "--format", "json",
            ],
            "1",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // while the new driver's s1 agent works, the dead driver's token is stale
    wait_until("the new s1 agent", || lab.starts("s1").len() == 2);
    let mut mcp = Client::start(
        Command::new(env!("CARGO_BIN_EXE_stratumc"))
            .arg("mcp")
            .current_dir(&lab.0)
            .env("STRATUM_HOME", lab.0.join("home")),
    );
    let late = mcp.call(
        "stratum_step_done",
        json!({"runId": run, "stepId": "s1", "dispatchToken": old_entry["dispatchToken"],
               "result": {"output": {"x": 3}}}),
    );
    assert_eq!(late["error_type"], "stale_token", "{late}");
    mcp.close();
    let out = resumed.wait_with_output().unwrap();
    let r = Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(
        r.stderr.contains("taken over from driver pid"),
        "{}",
        r.context()
    );
    assert_eq!(r.doc()["status"], "completed", "{}", r.context());
    assert!(dead(old_agent), "the dead driver's agent was not killed");
    // each step reported once; s1 handed out twice, with a new token the second time
    let results = lab.events(&run, "result");
    for step in ["s0", "s1", "s2"] {
        let n = results.iter().filter(|e| e["stepId"] == step).count();
        assert_eq!(n, 1, "{step}: {results:?}");
    }
    let s1 = lab.starts("s1");
    assert_eq!(s1.len(), 2, "{s1:?}");
    let new_agent = s1.iter().copied().find(|&p| p != old_agent).unwrap();
    let new_entry: Value = serde_json::from_str(
        &std::fs::read_to_string(lab.0.join(format!("marks/s1.{new_agent}.start"))).unwrap(),
    )
    .unwrap();
    assert_ne!(old_entry["dispatchToken"], new_entry["dispatchToken"]);
    let takeovers = lab.events(&run, "driver_interrupted");
    assert!(
        takeovers
            .iter()
            .any(|e| e["detail"]["signal"] == "lease_lapsed" && e["detail"]["killed"] == 1),
        "{takeovers:?}"
    );
}
