//! `stratumc mcp` end to end: runs `mcp/tests/e2e.py`, which drives the
//! binary cargo built for this test through the official Python MCP SDK
//! (a client nobody here wrote). Needs `python3` with the `mcp` package
//! (`python3 -m pip install mcp`; CI installs it).

use std::path::Path;
use std::process::Command;

mod support;

#[test]
fn python_sdk_drives_every_construct() {
    e2e(None);
}

/// The same script with every server's runs in one PostgreSQL database
/// (`STRATUM_STORE`; `STRATUM_TEST_PG`, a schema of its own).
#[test]
fn python_sdk_drives_every_construct_on_postgres() {
    if let Some(url) = support::pg_url() {
        e2e(Some(&url));
    }
}

fn e2e(store: Option<&str>) {
    let binary = env!("CARGO_BIN_EXE_stratumc");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the cli crate sits in the workspace");
    let script = root.join("mcp/tests/e2e.py");
    let probe = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .expect("python3 must be installed to run the MCP end-to-end tests");
    assert!(
        probe.status.success(),
        "the Python MCP SDK is missing: run `python3 -m pip install mcp` (CI installs it)\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(binary).current_dir(root);
    match store {
        Some(url) => cmd.env("STRATUM_STORE", url),
        None => cmd.env_remove("STRATUM_STORE"),
    };
    let out = cmd.output().expect("python3 runs the e2e script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp/tests/e2e.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "unexpected e2e output:\n{stdout}"
    );
}

// ----- raw JSON lines: framing errors and engine dispatch (issue 13, items 11 and 12) -----
//
// These drive `stratumc mcp` with bytes no SDK would send, each read bounded
// by a timeout so a server that does not answer fails the test instead of
// hanging it.

mod raw {
    use std::io::{BufRead, BufReader, Write};
    use std::path::{Path, PathBuf};
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::mpsc::{Receiver, channel};
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    /// How long any one answer may take (generous: a debug build on a busy machine).
    const ANSWER: Duration = Duration::from_secs(20);

    const ENGINE_FANOUT: &str = "version: 1
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
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          dispatch: engine
          steps:
            - do: \"inspect ${item}\"
              out: R
      - id: sum
        after: [fan]
        do: \"summarise\"
        out: R
";

    /// One `stratumc mcp` process, its stdin, and its stdout lines.
    struct Server {
        child: Child,
        stdin: Option<ChildStdin>,
        lines: Receiver<String>,
        _home: tempfile::TempDir,
    }

    impl Server {
        fn start(cwd: &Path) -> Server {
            let home = tempfile::tempdir().expect("a scratch STRATUM_HOME");
            let mut child = Command::new(env!("CARGO_BIN_EXE_stratumc"))
                .arg("mcp")
                .current_dir(cwd)
                .env("STRATUM_HOME", home.path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("stratumc mcp starts");
            let stdout = child.stdout.take().expect("piped stdout");
            let (tx, lines) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            let stdin = child.stdin.take();
            let mut s = Server {
                child,
                stdin,
                lines,
                _home: home,
            };
            s.send(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            );
            assert!(s.answer().get("result").is_some());
            s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            s
        }

        fn write(&mut self, bytes: &[u8]) {
            let stdin = self.stdin.as_mut().expect("stdin is open");
            stdin.write_all(bytes).expect("the server reads its stdin");
            stdin.flush().expect("flush");
        }

        fn send(&mut self, v: &Value) {
            let mut line = serde_json::to_vec(v).expect("json");
            line.push(b'\n');
            self.write(&line);
        }

        fn answer_within(&mut self, limit: Duration) -> Value {
            let line = self
                .lines
                .recv_timeout(limit)
                .unwrap_or_else(|e| panic!("no answer from the server within {limit:?} ({e})"));
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
        }

        fn answer(&mut self) -> Value {
            self.answer_within(ANSWER)
        }

        fn ping(&mut self, id: u64) -> Duration {
            let asked = Instant::now();
            self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
            let a = self.answer();
            assert_eq!(a["id"], id, "{a}");
            assert!(a.get("result").is_some(), "{a}");
            asked.elapsed()
        }

        fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
            self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": tool, "arguments": arguments}}));
            let a = self.answer();
            assert_eq!(a["id"], id, "{a}");
            a["result"]["structuredContent"].clone()
        }

        /// Closes stdin and waits for the process to exit.
        fn close_and_wait(&mut self, limit: Duration) -> bool {
            drop(self.stdin.take());
            let until = Instant::now() + limit;
            while Instant::now() < until {
                if self.child.try_wait().expect("wait").is_some() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        }
    }

    impl Server {
        /// Sends `signal` (e.g. `TERM`) with stdin still open; the exit code
        /// once the server has exited within `limit`.
        fn signal_and_wait(&mut self, signal: &str, limit: Duration) -> Option<i32> {
            let sent = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(self.child.id().to_string())
                .status()
                .expect("kill runs");
            assert!(sent.success());
            let until = Instant::now() + limit;
            while Instant::now() < until {
                if let Some(status) = self.child.try_wait().expect("wait") {
                    return status.code();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn error_of(a: &Value) -> (i64, Value) {
        let code = a["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("expected an error answer, got {a}"));
        (code, a["id"].clone())
    }

    #[test]
    fn every_bad_line_gets_a_json_rpc_error_and_serving_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Server::start(dir.path());
        // over 16 MiB in one line: an error, and the next request is served
        let pad = "x".repeat(17 * 1024 * 1024);
        s.write(
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"_meta":{{"p":"{pad}"}}}}}}"#
            )
            .as_bytes(),
        );
        s.write(b"\n");
        let a = s.answer();
        assert_eq!(error_of(&a), (-32600, Value::Null), "{a}");
        assert!(a["error"]["message"].as_str().unwrap().contains("16 MiB"));
        s.ping(2);
        s.write(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\n");
        assert_eq!(error_of(&s.answer()), (-32700, Value::Null));
        s.write(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"p\xffng\"}\n");
        assert_eq!(error_of(&s.answer()), (-32700, Value::Null));
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{{"_meta":{{"a":{}{}}}}}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        s.write(format!("{deep}\n").as_bytes());
        assert_eq!(error_of(&s.answer()), (-32600, json!(5)));
        s.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                       "params": {"name": "stratum_validate", "arguments": "spec"}}));
        assert_eq!(error_of(&s.answer()), (-32602, json!(6)));
        s.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": 5}}));
        assert_eq!(error_of(&s.answer()), (-32602, json!(7)));
        s.ping(8);
        let v = s.call(9, "stratum_validate", json!({"spec": ENGINE_FANOUT}));
        assert_eq!(v["status"], "valid", "{v}");
        assert!(
            s.close_and_wait(ANSWER),
            "the server exits when stdin closes"
        );
    }

    /// A workspace whose `[agents.claude]` command is `command`.
    fn workspace(command: &str) -> tempfile::TempDir {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(
            ws.path().join("stratum.toml"),
            format!("[agents.claude]\ncommand = {command:?}\n"),
        )
        .unwrap();
        ws
    }

    fn plan(s: &mut Server, ws: &Path, items: &[&str]) -> Value {
        let env = s.call(
            100,
            "stratum_plan",
            json!({"spec": ENGINE_FANOUT, "input": {"items": items},
                   "workspaceRoot": ws.display().to_string()}),
        );
        assert_eq!(env["status"], "running", "{env}");
        env
    }

    #[test]
    fn the_server_answers_while_an_engine_command_runs() {
        let ws = workspace("sleep 30");
        let mut s = Server::start(ws.path());
        let asked = Instant::now();
        let env = plan(&mut s, ws.path(), &["a"]);
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "plan waited for the command"
        );
        assert_eq!(env["ready"], json!([]), "{env}");
        assert_eq!(env["running"][0]["id"], "fan/0", "{env}");
        assert!(env["running"][0].get("dispatchToken").is_none());
        for id in 1..=3 {
            let took = s.ping(id);
            assert!(took < Duration::from_secs(1), "ping took {took:?}");
        }
        let v = s.call(4, "stratum_validate", json!({"spec": ENGINE_FANOUT}));
        assert_eq!(v["status"], "valid", "{v}");
        let audit = s.call(5, "stratum_audit", json!({"runId": env["runId"]}));
        assert_eq!(audit["running"][0]["id"], "fan/0", "{audit}");
        assert!(
            s.close_and_wait(ANSWER),
            "the server exits when stdin closes"
        );
    }

    /// `stratum_plan` records the cost model's per-step estimate in the
    /// run's audit (`estimated`: expected and worst per dimension, the step
    /// hash, fanout lengths from the given input).
    #[test]
    fn stratum_plan_records_the_estimate_in_the_audit() {
        let ws = tempfile::tempdir().unwrap();
        let mut s = Server::start(ws.path());
        let env = s.call(
            1,
            "stratum_plan",
            json!({"spec": ENGINE_FANOUT, "input": {"items": ["a", "b", "c"]},
                   "workspaceRoot": ws.path().display().to_string()}),
        );
        assert_eq!(env["status"], "ready", "{env}");
        let audit = s.call(2, "stratum_audit", json!({"runId": env["runId"]}));
        let events = audit["events"].as_array().expect("events");
        let est = events
            .iter()
            .find(|e| e["type"] == "estimated")
            .unwrap_or_else(|| panic!("no estimated event: {audit}"));
        let steps = est["detail"]["steps"].as_array().unwrap();
        let ids: Vec<&str> = steps.iter().filter_map(|s| s["id"].as_str()).collect();
        assert_eq!(ids, ["fan", "sum"], "{est}");
        // 3 items × 2 attempts (the default) of the built-in claude profile
        assert_eq!(steps[0]["dispatches"]["worst"], 6.0, "{est}");
        assert_eq!(steps[0]["tokens"]["worst"], 120_000.0, "{est}");
        assert!(
            steps[1]["stepHash"].as_str().is_some_and(|h| h.len() == 64),
            "{est}"
        );
        assert!(
            s.close_and_wait(ANSWER),
            "the server exits when stdin closes"
        );
    }

    fn alive(pid: &str) -> bool {
        // a zombie is dead (it only waits to be reaped)
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    fn wait_for_file(path: &PathBuf, limit: Duration) -> String {
        let until = Instant::now() + limit;
        loop {
            if let Ok(t) = std::fs::read_to_string(path)
                && t.ends_with('\n')
            {
                return t.trim().to_string();
            }
            assert!(Instant::now() < until, "{} never appeared", path.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn closing_stdin_kills_the_running_command_and_the_server_exits() {
        let ws = workspace("echo $$ > pid; exec sleep 1006");
        let mut s = Server::start(ws.path());
        plan(&mut s, ws.path(), &["a"]);
        let pid = wait_for_file(&ws.path().join("pid"), ANSWER);
        assert!(alive(&pid), "the command runs");
        assert!(
            s.close_and_wait(ANSWER),
            "the server did not exit after stdin closed"
        );
        let until = Instant::now() + Duration::from_secs(5);
        while alive(&pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(&pid), "sleep 1006 (pid {pid}) outlived the server");
    }

    #[test]
    fn sigterm_kills_the_running_command_and_the_server_exits_143() {
        let ws = workspace("echo $$ > pid; exec sleep 1007");
        let mut s = Server::start(ws.path());
        plan(&mut s, ws.path(), &["a"]);
        let pid = wait_for_file(&ws.path().join("pid"), ANSWER);
        assert!(alive(&pid), "the command runs");
        assert_eq!(
            s.signal_and_wait("TERM", ANSWER),
            Some(143),
            "the server exits 143 on SIGTERM with stdin still open"
        );
        let until = Instant::now() + Duration::from_secs(5);
        while alive(&pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(&pid), "sleep 1007 (pid {pid}) outlived the server");
    }

    #[test]
    fn sigint_stops_an_idle_server_with_130() {
        let ws = tempfile::tempdir().unwrap();
        let mut s = Server::start(ws.path());
        assert_eq!(s.signal_and_wait("INT", ANSWER), Some(130));
    }
}
