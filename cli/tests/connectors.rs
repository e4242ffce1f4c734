//! `stratumc run` without `--agent`, through the configured connectors
//! (issue 16 §1), against stand-in `claude` and `codex` executables placed
//! first on `PATH` that behave like the real CLIs: they check their
//! arguments (print mode, JSON output, the settings, the prompt's contract
//! schema), print the documented JSON with usage, exit non-zero, answer in
//! prose (then the retry's prompt must say why) or hang on demand (killed
//! at the timeout, or by `stratumc flow cancel` from another process). And
//! `stratumc models`. One opt-in live test runs the real
//! Claude Code CLI (`STRATUM_LIVE_CLAUDE=1`, never in CI).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

mod support;
use support::Ran;

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
        agent: AGENT
        do: "produce x"
        out: V
        attempts: 2
"#;

/// A scratch workspace with the spec, a `stratum.toml`, a `bin/` of
/// stand-ins and a `STRATUM_HOME`.
struct Lab(PathBuf);

impl Lab {
    fn new(tag: &str, agent: &str, toml: &str) -> Lab {
        let dir = support::scratch("connectors", tag);
        std::fs::write(dir.join("one.stratum.yaml"), SPEC.replace("AGENT", agent)).unwrap();
        std::fs::write(dir.join("stratum.toml"), toml).unwrap();
        support::standins::install(&dir.join("bin"));
        Lab(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `stratumc ARGS` in the workspace with the stand-ins first on `PATH`
    /// (or, `with_bin` false, a `PATH` without them).
    fn cmd(&self, args: &[&str], with_bin: bool) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        let sys = "/usr/local/bin:/usr/bin:/bin";
        let path = if with_bin {
            format!("{}:{sys}", self.path("bin").display())
        } else {
            sys.to_string()
        };
        c.args(args)
            .current_dir(&self.0)
            .env("STRATUM_HOME", self.path("home"))
            .env("NO_COLOR", "1")
            .env("PATH", path)
            .env("STANDIN_ARGV", self.path("argv.json"))
            .env("STANDIN_PID", self.path("pid"))
            .stdin(Stdio::null());
        c
    }

    fn run(&self, mode: &str) -> Ran {
        Ran::of(
            self.cmd(&["run", "one.stratum.yaml", "--format", "json"], true)
                .env("STANDIN_MODE", mode),
        )
    }

    fn argv(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.path("argv.json")).expect("the stand-in ran");
        serde_json::from_str(&text).unwrap()
    }

    /// The summaries of step `s`'s `usage_debit` events (the connector's
    /// receipts) in `stratumc report RUN --format json`.
    fn debits(&self, run: &str) -> Vec<String> {
        let r = Ran::of(&mut self.cmd(&["report", run, "--format", "json"], true));
        assert_eq!(r.code, 0, "{}", r.context());
        let doc: Value = serde_json::from_str(&r.stdout).unwrap();
        let timeline = doc["report"]["timeline"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        timeline
            .iter()
            .filter(|e| e["kind"] == "usage_debit" && e["step"] == "s")
            .map(|e| e["summary"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The step's spend in `stratumc report RUN --format json`, and the
    /// summary of the run's one `usage_debit` (the connector's receipt).
    fn spend(&self, run: &str) -> (Value, String) {
        let r = Ran::of(&mut self.cmd(&["report", run, "--format", "json"], true));
        assert_eq!(r.code, 0, "{}", r.context());
        let doc: Value = serde_json::from_str(&r.stdout).unwrap();
        let report = &doc["report"];
        let steps = report["steps"].as_array().cloned().unwrap_or_default();
        let s = steps
            .iter()
            .find(|s| s["id"] == "s")
            .unwrap_or_else(|| panic!("no step s in {doc}"));
        let timeline = report["timeline"].as_array().cloned().unwrap_or_default();
        let debits: Vec<String> = timeline
            .iter()
            .filter(|e| e["kind"] == "usage_debit" && e["step"] == "s")
            .map(|e| e["summary"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(debits.len(), 1, "{doc}");
        (s["spent"].clone(), debits[0].clone())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CLAUDE_TOML: &str = r#"[agents.claude]
connector = "claude-code"
model = "sonnet-test"
permission_mode = "acceptEdits"
max_turns = 4
allowed_tools = ["Read", "Edit", "Bash(git diff:*)"]
timeout_ms = 20000
"#;

#[test]
fn claude_code_runs_a_flow_headless_with_its_settings_and_its_bill() {
    let lab = Lab::new("claude", "claude", CLAUDE_TOML);
    let r = lab.run("ok");
    assert_eq!(r.completed(), json!({"x": 7}), "{}", r.context());
    let argv = lab.argv();
    assert_eq!(argv[0], "-p");
    assert!(argv[1].contains("produce x") && argv[1].contains("\"required\""));
    assert_eq!(
        argv[2..],
        [
            "--output-format",
            "json",
            "--model",
            "sonnet-test",
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "4",
            "--allowedTools",
            "Read",
            "Edit",
            "Bash(git diff:*)"
        ]
    );
    // it ran in the workspace
    let cwd = std::fs::read_to_string(lab.path("argv.json.cwd")).unwrap();
    assert_eq!(
        std::fs::canonicalize(cwd).unwrap(),
        std::fs::canonicalize(&lab.0).unwrap()
    );
    // the CLI's own bill is the step's spend, recorded as the connector's receipt
    let (spend, debit) = lab.spend(&r.run_id());
    assert_eq!(spend["tokens"], json!(150.0), "{spend}");
    assert_eq!(spend["usd"], json!(0.125), "{spend}");
    assert_eq!(spend["ms"], json!(900.0), "{spend}");
    assert!(
        debit.contains("\"source\":\"claude-code\"")
            && debit.contains("\"usdSource\":\"reported\""),
        "{debit}"
    );
}

#[test]
fn codex_runs_read_only_and_its_dollars_are_estimated_from_the_profile() {
    let toml = "[agents.codex]\nconnector = \"codex\"\nreasoning_effort = \"low\"\nusd = 0.5\ntokens = 1000\n";
    let lab = Lab::new("codex", "codex", toml);
    let r = lab.run("ok");
    assert_eq!(r.completed(), json!({"x": 9}), "{}", r.context());
    let argv = lab.argv();
    assert_eq!(
        argv[..6],
        [
            "exec",
            "--json",
            "--sandbox",
            "read-only",
            "-c",
            "model_reasoning_effort=\"low\""
        ]
    );
    let (spend, debit) = lab.spend(&r.run_id());
    assert_eq!(spend["tokens"], json!(2000.0), "{spend}");
    assert_eq!(spend["usd"], json!(1.0), "{spend}");
    assert!(debit.contains("\"usdSource\":\"estimated\""), "{debit}");
}

#[test]
fn a_failing_cli_is_a_failed_attempt_with_its_reason() {
    let lab = Lab::new("fail", "claude", CLAUDE_TOML);
    let r = lab.run("fail");
    assert_eq!(r.code, 1, "{}", r.context());
    let doc = r.doc();
    let reason = doc["failure"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("error_max_turns") && reason.contains("reached the turn limit"),
        "{}",
        r.context()
    );
    // prose instead of the JSON answer is a failure too
    let r = lab.run("prose");
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(r.stdout.contains("not one JSON object"), "{}", r.context());
}

#[test]
fn a_retry_is_told_why_the_previous_attempt_failed() {
    let lab = Lab::new("retry", "claude", CLAUDE_TOML);
    let r = lab.run("retry");
    assert_eq!(r.completed(), json!({"x": 7}), "{}", r.context());
    assert!(
        r.stderr.contains("s (attempt 2): reported"),
        "{}",
        r.context()
    );
}

#[test]
fn a_cancelled_run_kills_the_cli() {
    use std::io::BufRead;
    let lab = Lab::new("cancel", "claude", CLAUDE_TOML);
    let mut child = lab
        .cmd(&["run", "one.stratum.yaml", "--format", "json"], true)
        .env("STANDIN_MODE", "hang")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    let run = first.trim().strip_prefix("run: ").unwrap().to_string();
    let pid_file = lab.path("pid");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_to_string(&pid_file)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < end,
            "the stand-in never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let c = Ran::of(&mut lab.cmd(&["flow", "cancel", &run], true));
    assert_eq!(c.code, 0, "{}", c.context());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("stratumc run did not stop after the cancel");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    assert!(dead(pid), "the CLI {pid} survived the cancel");
    // the stopped attempt's argv is refused like its report: the run is over
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(rest.contains("s: usage refused: run"), "{rest}");
}

/// Whether `pid` is gone (or a zombie), waiting up to 5 s.
fn dead(pid: i32) -> bool {
    (0..100).any(|_| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let dead = stat.is_empty()
            || stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if !dead {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        dead
    })
}

#[test]
fn a_hanging_cli_is_killed_at_its_timeout() {
    let toml = CLAUDE_TOML.replace("timeout_ms = 20000", "timeout_ms = 500");
    let lab = Lab::new("hang", "claude", &toml);
    let started = std::time::Instant::now();
    let r = lab.run("hang");
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(
        r.stdout.contains("timed out after 500 ms"),
        "{}",
        r.context()
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let pid: i32 = std::fs::read_to_string(lab.path("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = dead(pid);
    assert!(gone, "the hanging CLI {pid} survived its timeout");
}

#[test]
fn a_missing_cli_says_what_to_install() {
    let lab = Lab::new("missing", "claude", CLAUDE_TOML);
    let r = Ran::of(&mut lab.cmd(&["run", "one.stratum.yaml", "--format", "json"], false));
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(
        r.stdout.contains("`claude` is not found on PATH")
            && r.stdout
                .contains("npm install -g @anthropic-ai/claude-code"),
        "{}",
        r.context()
    );
    // each attempt's argv is in the audit although the CLI never started
    let debits = lab.debits(&r.run_id());
    assert_eq!(debits.len(), 2, "{debits:?}");
    assert!(
        debits[0].contains("\"source\":\"claude-code\""),
        "{debits:?}"
    );
}

#[test]
fn an_agent_without_a_runner_fails_saying_how_to_configure_one() {
    let lab = Lab::new("none", "claude", "");
    let r = lab.run("ok");
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(
        r.stdout.contains("no runner for agent `claude`"),
        "{}",
        r.context()
    );
}

#[test]
fn connector_keys_that_do_not_fit_are_refused_at_start() {
    let lab = Lab::new(
        "misfit",
        "claude",
        "[agents.claude]\nconnector = \"claude-code\"\nsandbox = \"read-only\"\n",
    );
    let r = lab.run("ok");
    r.fails(2, "`sandbox` is a setting of `connector = \"codex\"`");
    let lab = Lab::new(
        "badname",
        "claude",
        "[agents.claude]\nconnector = \"claude\"\n",
    );
    let r = lab.run("ok");
    r.fails(2, "claude-code");
}

#[test]
fn models_lists_agents_connectors_judges_and_what_is_on_path() {
    let toml = format!(
        "{CLAUDE_TOML}usd = 0.2\n[agents.codex]\ncommand = \"my-codex\"\n[judge]\nurl = \"http://localhost:1\"\nmodel = \"j\"\nusd = 0.01\n"
    );
    let lab = Lab::new("models", "claude", &toml);
    let r = Ran::of(&mut lab.cmd(&["models", "--format", "json"], true));
    assert_eq!(r.code, 0, "{}", r.context());
    let doc = r.doc();
    let claude = &doc["agents"]["claude"];
    assert_eq!(claude["connector"], "claude-code", "{doc}");
    assert_eq!(claude["program"], "claude", "{doc}");
    assert_eq!(claude["found"], json!(true), "{doc}");
    assert!(claude["path"].as_str().unwrap().ends_with("bin/claude"));
    assert_eq!(claude["profile"]["usd"], json!(0.2), "{doc}");
    assert_eq!(claude["profile"]["configured"], json!(["usd"]), "{doc}");
    // a figure left out is the cost model's built-in one
    assert_eq!(
        doc["agents"]["codex"]["profile"]["p_success"],
        json!(0.8),
        "{doc}"
    );
    assert_eq!(doc["judges"][0]["profile"]["usd"], json!(0.01), "{doc}");
    assert_eq!(doc["agents"]["codex"]["command"], "my-codex", "{doc}");
    assert_eq!(doc["judges"][0]["model"], "j", "{doc}");
    // without the stand-ins on PATH the CLI is reported missing, with what to install
    let r = Ran::of(&mut lab.cmd(&["models"], false));
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(r.stdout.contains("not found on PATH"), "{}", r.context());
}

/// The real Claude Code CLI, when installed and logged in: opt in with
/// `STRATUM_LIVE_CLAUDE=1 cargo test -p stratumc --test connectors live`
/// (never in CI: it costs money and needs a login). Without the variable it
/// only says it did not run.
#[test]
fn live_claude_code_when_opted_in() {
    if std::env::var_os("STRATUM_LIVE_CLAUDE").is_none() {
        eprintln!("not run: set STRATUM_LIVE_CLAUDE=1 to run the real claude CLI");
        return;
    }
    let dir = support::scratch("connectors", "live");
    std::fs::write(
        dir.join("one.stratum.yaml"),
        SPEC.replace("AGENT", "claude"),
    )
    .unwrap();
    std::fs::write(
        dir.join("stratum.toml"),
        "[agents.claude]\nconnector = \"claude-code\"\nmax_turns = 3\npermission_mode = \"plan\"\n",
    )
    .unwrap();
    let r = Ran::of(
        Command::new(env!("CARGO_BIN_EXE_stratumc"))
            .args(["run", "one.stratum.yaml", "--format", "json"])
            .current_dir(&dir)
            .env("STRATUM_HOME", dir.join("home")),
    );
    let out = r.completed();
    assert!(out["x"].is_i64(), "{}", r.context());
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// `stratumc mcp` runs `dispatch: engine` entries through the agent's
/// connector too, and its audit holds each run's exact argv and usage.
#[test]
fn the_mcp_server_runs_engine_entries_through_the_connector() {
    use std::io::{BufRead, BufReader, Write};
    const FANOUT: &str = "version: 1
contracts:
  V: {x: integer}
flows:
  entry: main
  main:
    input: {items: \"string[]\"}
    output: {from: \"${sum.output}\", contract: V}
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
            - do: \"produce x for ${item}\"
              out: V
      - id: sum
        after: [fan]
        do: \"summarise\"
        out: V
";
    let lab = Lab::new("mcp", "claude", CLAUDE_TOML);
    let mut child = lab
        .cmd(&["mcp"], true)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut call = |id: u64, msg: Value| -> Value {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
        if id == 0 {
            return Value::Null;
        }
        let a: Value = serde_json::from_str(
            &lines
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("the server answers"),
        )
        .unwrap();
        assert_eq!(a["id"], id, "{a}");
        a["result"]["structuredContent"].clone()
    };
    call(
        1,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "connectors", "version": "1"}}}),
    );
    call(
        0,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let tool = |id: u64, name: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": args}})
    };
    let env = call(
        2,
        tool(
            2,
            "stratum_plan",
            json!({"spec": FANOUT, "input": {"items": ["a", "b"]},
                   "workspaceRoot": lab.0.display().to_string()}),
        ),
    );
    let run = env["runId"].clone();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut id = 3;
    let debits = loop {
        let audit = call(id, tool(id, "stratum_audit", json!({"runId": run})));
        id += 1;
        let events = audit["events"].as_array().cloned().unwrap_or_default();
        let debits: Vec<Value> = events
            .into_iter()
            .filter(|e| e["type"] == "usage_debit")
            .collect();
        if debits.len() == 2 {
            break debits;
        }
        assert!(
            std::time::Instant::now() < end,
            "no connector receipts: {audit}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for d in &debits {
        let detail = &d["detail"];
        assert_eq!(detail["source"], "claude-code", "{d}");
        assert_eq!(detail["usdSource"], "reported", "{d}");
        let argv = &detail["telemetry"]["argv"];
        assert_eq!(argv[0], "claude", "{d}");
        assert_eq!(argv[1], "-p", "{d}");
        assert!(argv[2].as_str().unwrap().contains("produce x for"), "{d}");
        assert_eq!(
            detail["telemetry"]["reported"]["total_cost_usd"], 0.125,
            "{d}"
        );
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}
