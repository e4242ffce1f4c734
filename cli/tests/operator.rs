//! The operator commands through the binary, each test with its own
//! `STRATUM_HOME`: `query flows|flow|gates`, `gate approve|reject|revise`,
//! `flow cancel` and `watch`, on runs created by `stratumc run` (paused at a
//! gate when it cannot ask) and by `stratumc mcp` (driven over stdio with
//! raw JSON-RPC). Human tables are insta snapshots with run ids, plan
//! hashes, gate tokens and times redacted.
//!
//! Agents are `sh` one-liners; `SLOW` sleeps a little per dispatch so a
//! concurrent `watch` or `flow cancel` meets the run while it is live (the
//! assertions never depend on how long anything takes).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::Ran;

// ---------------------------------------------------------------------------
// Harness

/// A gated flow: `work`, the gate `review` (revise → work), then `publish`.
const GATED: &str = r#"version: 1
contracts:
  Work:
    result: string
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${publish.output}"
      contract: Work
    max_rounds: 3
    budget:
      usd: 5
      dispatches: 20
    steps:
      - id: work
        do: "Do ${input.text}"
        out: Work
      - id: review
        after: [work]
        gate:
          on_approve: null
          on_revise: work
          on_kill: null
          max_rounds: 2
      - id: publish
        after: [review]
        do: "Publish ${work.output.result}"
        out: Work
"#;

/// A flow calling a sub-flow that holds a gate (`call/check`).
const NESTED: &str = r#"version: 1
contracts:
  Work:
    result: string
flows:
  entry: outer
  inner:
    input:
      text: string
    output:
      from: "${draft.output}"
      contract: Work
    steps:
      - id: draft
        do: "Draft ${input.text}"
        out: Work
      - id: check
        after: [draft]
        gate:
          on_approve: null
          on_revise: null
          on_kill: null
  outer:
    input:
      text: string
    output:
      from: "${call.output}"
      contract: Work
    steps:
      - id: call
        run: inner
        with:
          text: "${input.text}"
"#;

/// Answers every dispatch with `{"result": "done <step>"}` and some usage.
const AGENT: &str = r#"printf '{"output": {"result": "done %s"}, "usage": {"usd": 0.01, "tokens": 100}}' "$STRATUM_STEP_ID""#;
/// The same, a little slower.
const SLOW: &str = r#"sleep 0.3; printf '{"output": {"result": "done %s"}, "usage": {"usd": 0.01, "tokens": 100}}' "$STRATUM_STEP_ID""#;

/// A scratch directory with `STRATUM_HOME` (`home/`) and the specs; removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = support::scratch("op", tag);
        std::fs::write(dir.join("gated.stratum.yaml"), GATED).unwrap();
        std::fs::write(dir.join("nested.stratum.yaml"), NESTED).unwrap();
        Scratch(dir)
    }

    /// A scratch whose home keeps its runs in the PostgreSQL store at
    /// `url` (`[store] url` in the home's `stratum.toml`).
    fn on_postgres(tag: &str, url: &str) -> Scratch {
        let s = Scratch::new(tag);
        support::home_on_store(&s.0.join("home"), url);
        s
    }

    fn db(&self) -> PathBuf {
        self.0.join("home").join("stratum.db")
    }

    /// `stratumc ARGS` with this `STRATUM_HOME`, stdin not a terminal.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.0.join("home"))
            .env_remove("STRATUM_SCENARIO")
            .current_dir(&self.0)
            .stdin(Stdio::null())
            .args(args);
        c
    }

    fn ran(&self, args: &[&str]) -> Ran {
        Ran::of(&mut self.cmd(args))
    }

    /// `stratumc run SPEC` with input `{"text": "x"}`; the run's id and result.
    fn start(&self, spec: &str, agent: &str, extra: &[&str]) -> (String, Ran) {
        let mut args = vec![
            "run",
            spec,
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            agent,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let r = self.ran(&args);
        (r.run_id(), r)
    }

    /// `stratumc run gated.stratum.yaml` with input `{"text": "x"}` in the
    /// background, stderr piped; the child, its stderr past the first line,
    /// and the run id that line announces.
    fn spawn_run(
        &self,
        agent: &str,
        extra: &[&str],
        stdout: Stdio,
    ) -> (Child, BufReader<ChildStderr>, String) {
        let mut args = vec![
            "run",
            "gated.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            agent,
        ];
        args.extend_from_slice(extra);
        let mut child = self
            .cmd(&args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        let id = first.trim().strip_prefix("run: ").unwrap().to_string();
        (child, err, id)
    }

    /// A run of GATED paused at `review` (no `--gate`, stdin not a terminal).
    fn paused(&self) -> String {
        let (id, r) = self.start("gated.stratum.yaml", AGENT, &[]);
        assert_eq!(r.code, 1, "{}", r.context());
        assert!(
            r.stderr.contains("waiting at gate `review`"),
            "{}",
            r.context()
        );
        id
    }

    /// `stratumc run --resume RUN`.
    fn resume(&self, id: &str, extra: &[&str]) -> Ran {
        let mut args = vec!["run", "--resume", id, "--agent", AGENT, "--format", "json"];
        args.extend_from_slice(extra);
        self.ran(&args)
    }

    /// The `--format json` document of a command that must exit 0.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--format", "json"]);
        let r = self.ran(&all);
        assert_eq!(r.code, 0, "{}", r.context());
        r.doc()
    }

    /// The audit of a run, read from SQLite.
    fn events(&self, run_id: &str) -> Vec<Value> {
        let conn = rusqlite::Connection::open(self.db()).unwrap();
        let mut stmt = conn
            .prepare("SELECT json FROM events WHERE run_id = ?1 ORDER BY seq")
            .unwrap();
        stmt.query_map([run_id], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|j| serde_json::from_str(&j.unwrap()).unwrap())
            .collect()
    }

    fn gate_token(&self, run_id: &str, step: &str) -> String {
        let doc = self.json(&["query", "gates"]);
        doc["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["runId"] == run_id && g["stepId"] == step)
            .unwrap_or_else(|| panic!("no waiting gate {step} in {doc}"))["gateToken"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run ids, gate tokens, times and plan hashes replaced by placeholders of
/// the same width (so table columns stay aligned).
fn redact(text: &str, plan_hashes: &[&str]) -> String {
    let mut t = text.to_string();
    for h in plan_hashes {
        t = t.replace(&h[..12], "[planhash12]");
    }
    let pats = [
        (r"run-[0-9a-f]{16}", "run-################"),
        (
            r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b",
            "YYYY-MM-DD hh:mm:ss",
        ),
        (r"\bg\d+-[0-9a-f]{12}\b", "[TOKEN]"),
    ];
    for (p, with) in pats {
        t = regex::Regex::new(p)
            .unwrap()
            .replace_all(&t, with)
            .into_owned();
    }
    t
}

fn plan_hash(s: &Scratch, run_id: &str) -> String {
    s.json(&["query", "flow", run_id])["run"]["planHash"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Reads lines from a child's stdout until one contains `needle`.
fn read_until(out: &mut BufReader<ChildStdout>, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "stream ended before {needle:?}:\n{seen}");
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

/// Waits for a child, killing it if it has not exited after `limit` (a
/// hang guard, not a timing assertion).
fn wait_or_kill(child: &mut Child, limit: Duration, what: &str) -> i32 {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const HANG: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// query

#[test]
fn query_flows_pages_with_limit_and_before() {
    let s = Scratch::new("pages");
    let (first, r) = s.start("gated.stratum.yaml", AGENT, &["--gate", "approve"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let second = s.paused();
    let (third, r) = s.start("gated.stratum.yaml", AGENT, &["--gate", "approve"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let ids = |doc: &Value| -> Vec<String> {
        doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap().to_string())
            .collect()
    };
    let (first, second, third) = (first.as_str(), second.as_str(), third.as_str());
    let all = s.json(&["query", "flows"]);
    assert_eq!(ids(&all), [third, second, first]);
    assert!(all.get("next").is_none(), "{all}");

    let page = s.json(&["query", "flows", "--limit", "2"]);
    assert_eq!(ids(&page), [third, second]);
    assert_eq!(page["next"], second);
    let rest = s.json(&["query", "flows", "--limit", "2", "--before", second]);
    assert_eq!(ids(&rest), [first]);
    assert_eq!(rest["next"], Value::Null);
    let done = s.json(&["query", "flows", "--status", "completed", "--limit", "1"]);
    assert_eq!(ids(&done), [third]);
    assert_eq!(done["next"], third);

    // the human table ends with the command that shows the next page
    let r = s.ran(&["query", "flows", "--status", "completed", "--limit", "1"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(
        r.stdout.ends_with(&format!(
            "next page: stratumc query flows --status completed --limit 1 --before {third}\n"
        )),
        "{}",
        r.context()
    );
    let r = s.ran(&["query", "flows", "--limit", "5"]);
    assert!(!r.stdout.contains("next page"), "{}", r.context());

    s.ran(&["query", "flows", "--limit", "2", "--before", "run-nope"])
        .fails(2, "no run `run-nope`");
    s.ran(&["query", "flows", "--limit", "0"])
        .fails(2, "--limit");
    s.ran(&["query", "flows", "--before", first])
        .fails(2, "--limit");
}

#[test]
fn query_flows_lists_runs_newest_first_and_filters_by_status() {
    let s = Scratch::new("flows");
    let r = s.ran(&["query", "flows"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "no runs\n"),
        "{}",
        r.context()
    );
    assert_eq!(
        s.json(&["query", "flows"]),
        json!({"version": 1, "runs": []})
    );

    let (done, r) = s.start("gated.stratum.yaml", AGENT, &["--gate", "approve"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let paused = s.paused();

    let doc = s.json(&["query", "flows"]);
    assert_eq!(doc["version"], 1);
    let runs = doc["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["runId"].as_str().unwrap()).collect();
    assert_eq!(ids, [paused.as_str(), done.as_str()]);
    assert_eq!(runs[0]["status"], "running");
    assert_eq!(runs[1]["status"], "completed");
    for r in runs {
        assert_eq!(r["flow"], "main");
        assert_eq!(r["planHash"].as_str().unwrap().len(), 64);
        let (started, updated) = (
            r["startedMs"].as_i64().unwrap(),
            r["updatedMs"].as_i64().unwrap(),
        );
        assert!(started > 0 && updated >= started, "{r}");
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "runId",
                "flow",
                "status",
                "planHash",
                "startedMs",
                "updatedMs"
            ]
        );
    }

    let only = s.json(&["query", "flows", "--status", "completed"]);
    assert_eq!(only["runs"].as_array().unwrap().len(), 1);
    assert_eq!(only["runs"][0]["runId"], done.as_str());
    let r = s.ran(&["query", "flows", "--status", "killed"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "no runs with status killed\n")
    );

    let hash = plan_hash(&s, &done);
    let r = s.ran(&["query", "flows"]);
    assert_eq!(r.code, 0, "{}", r.context());
    insta::assert_snapshot!("query_flows", redact(&r.stdout, &[&hash]));

    // a status that does not exist is a usage error naming the valid ones
    let r = s.ran(&["query", "flows", "--status", "paused"]);
    r.fails(2, "invalid value 'paused'");
    assert!(
        r.stderr
            .contains("running, completed, failed, killed, budget_exhausted, cancelled")
    );
}

#[test]
fn query_flow_shows_steps_gates_and_spend_against_budget() {
    let s = Scratch::new("flow");
    let id = s.paused();
    let hash = plan_hash(&s, &id);
    let r = s.ran(&["query", "flow", &id]);
    assert_eq!(r.code, 0, "{}", r.context());
    insta::assert_snapshot!("query_flow_paused", redact(&r.stdout, &[&hash]));

    let run = &s.json(&["query", "flow", &id])["run"];
    assert_eq!(run["runId"], id.as_str());
    assert_eq!(run["status"], "running");
    assert_eq!(
        (run["round"].clone(), run["maxRounds"].clone()),
        (json!(0), json!(3))
    );
    assert_eq!(run["progress"], json!({"done": 1, "total": 3}));
    let steps: Vec<(&str, &str, &str)> = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("work", "do", "succeeded"),
            ("review", "gate", "waiting_gate"),
            ("publish", "do", "pending")
        ]
    );
    let work = &run["steps"][0];
    assert_eq!(work["attempts"], 1);
    assert_eq!(work["outputSummary"], r#"{"result":"done work"}"#);
    assert_eq!(
        work["spent"],
        json!({"usd": 0.01, "tokens": 100.0, "dispatches": 1.0, "ms": 0.0})
    );
    assert_eq!(run["steps"][1]["gateMaxRounds"], 2);
    assert_eq!(run["gates"].as_array().unwrap().len(), 1);
    let gate = &run["gates"][0];
    assert_eq!(gate["stepId"], "review");
    assert_eq!(
        gate["routes"],
        json!({"approve": null, "revise": "work", "kill": null})
    );
    assert_eq!(
        run["ledger"],
        json!({"spent": {"usd": 0.01, "tokens": 100.0, "dispatches": 1.0, "ms": 0.0},
               "budget": {"usd": 5.0, "tokens": null, "dispatches": 20, "ms": null}})
    );
    assert_eq!(
        (run["output"].clone(), run["failure"].clone()),
        (Value::Null, Value::Null)
    );

    // after completion: every step done, the output shown
    let r = s.resume(&id, &["--gate", "approve"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let run = &s.json(&["query", "flow", &id])["run"];
    assert_eq!(run["status"], "completed");
    assert_eq!(run["progress"], json!({"done": 3, "total": 3}));
    assert_eq!(run["output"], json!({"result": "done publish"}));
    assert_eq!(run["steps"][1]["decision"], "approve");
    let r = s.ran(&["query", "flow", &id]);
    insta::assert_snapshot!("query_flow_completed", redact(&r.stdout, &[&hash]));

    // unknown run
    for format in ["human", "json"] {
        let r = s.ran(&["query", "flow", "run-0000000000000000", "--format", format]);
        r.fails(2, "no run `run-0000000000000000` in the run store");
        assert!(r.stdout.is_empty());
    }
}

#[test]
fn query_flow_shows_sub_flow_steps_by_their_path() {
    let s = Scratch::new("nested");
    let (id, r) = s.start("nested.stratum.yaml", AGENT, &[]);
    assert_eq!(r.code, 1, "{}", r.context());
    let run = &s.json(&["query", "flow", &id])["run"];
    let steps: Vec<(&str, u64, &str)> = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["depth"].as_u64().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("call", 0, "running"),
            ("call/draft", 1, "succeeded"),
            ("call/check", 1, "waiting_gate")
        ]
    );
    assert_eq!(run["gates"][0]["stepId"], "call/check");
    let hash = plan_hash(&s, &id);
    let r = s.ran(&["query", "flow", &id]);
    insta::assert_snapshot!("query_flow_nested", redact(&r.stdout, &[&hash]));

    // the nested gate is decided by its path
    let r = s.ran(&["gate", "approve", &id, "call/check"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(
        r.stdout.contains(&format!("run {id} is completed")),
        "{}",
        r.context()
    );
    assert_eq!(
        s.json(&["query", "flow", &id])["run"]["output"],
        json!({"result": "done call/draft"})
    );
}

#[test]
fn query_flow_counts_fanout_items() {
    let s = Scratch::new("fanout");
    let spec = r#"version: 1
contracts:
  R:
    path: string
  Done:
    n: integer
flows:
  entry: main
  main:
    input:
      items: "string[]"
    output:
      from: "${count.output}"
      contract: Done
    steps:
      - id: inspect
        fanout:
          over: "${input.items}"
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          steps:
            - do: "Inspect ${item}"
              out: R
      - id: count
        after: [inspect]
        set:
          n: "3"
        out: Done
"#;
    std::fs::write(s.0.join("fan.stratum.yaml"), spec).unwrap();
    // the item is the entry's `item` field; echo it back as the path
    let agent = r#"e=$(cat); i=$(printf '%s' "$e" | sed 's/.*"item":"\([^"]*\)".*/\1/'); printf '{"output": {"path": "%s"}}' "$i""#;
    let r = s.ran(&[
        "run",
        "fan.stratum.yaml",
        "--inputs",
        r#"{"items": ["a", "b", "c"]}"#,
        "--agent",
        agent,
    ]);
    assert_eq!(r.code, 0, "{}", r.context());
    let id = r.run_id();
    let run = &s.json(&["query", "flow", &id])["run"];
    assert_eq!(run["steps"][0]["kind"], "fanout");
    assert_eq!(
        run["steps"][0]["items"],
        json!({"total": 3, "succeeded": 3, "failed": 0, "inFlight": 0})
    );
    let r = s.ran(&["query", "flow", &id]);
    assert!(
        r.stdout
            .contains(r#"3/3 items done; [{"path":"a"},{"path":"b"},{"path":"c"}]"#),
        "{}",
        r.context()
    );
}

#[test]
fn query_gates_lists_waiting_gates_with_tokens_and_rounds() {
    let s = Scratch::new("gates");
    let r = s.ran(&["query", "gates"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "no gates waiting\n"));
    let first = s.paused();
    let second = s.paused();
    let (done, _) = s.start("gated.stratum.yaml", AGENT, &["--gate", "approve"]);

    let doc = s.json(&["query", "gates"]);
    assert_eq!(doc["version"], 1);
    let gates = doc["gates"].as_array().unwrap();
    // oldest run first; the completed run has none
    let runs: Vec<&str> = gates.iter().map(|g| g["runId"].as_str().unwrap()).collect();
    assert_eq!(runs, [first.as_str(), second.as_str()]);
    assert!(!runs.contains(&done.as_str()));
    for g in gates {
        let keys: Vec<&str> = g.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "runId",
                "flow",
                "stepId",
                "gateToken",
                "round",
                "maxRounds",
                "gateRounds",
                "gateMaxRounds",
                "routes"
            ]
        );
        assert_eq!(
            (g["stepId"].as_str(), g["round"].as_u64()),
            (Some("review"), Some(0))
        );
        assert!(!g["gateToken"].as_str().unwrap().is_empty());
    }
    // tokens are per run
    assert_ne!(gates[0]["gateToken"], gates[1]["gateToken"]);

    let r = s.ran(&["query", "gates"]);
    assert_eq!(r.code, 0, "{}", r.context());
    insta::assert_snapshot!("query_gates", redact(&r.stdout, &[]));

    // a revise starts a new round with a new token
    let old = s.gate_token(&first, "review");
    assert_eq!(s.ran(&["gate", "revise", &first, "review"]).code, 0);
    assert_eq!(s.resume(&first, &[]).code, 1);
    let doc = s.json(&["query", "gates"]);
    let g = doc["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["runId"] == first.as_str())
        .unwrap();
    assert_eq!(
        (g["round"].as_u64(), g["gateRounds"].as_u64()),
        (Some(1), Some(1))
    );
    assert_ne!(g["gateToken"].as_str().unwrap(), old);
}

// ---------------------------------------------------------------------------
// gate

#[test]
fn gate_approve_is_recorded_as_human_and_run_resume_continues() {
    let s = Scratch::new("approve");
    let id = s.paused();
    let r = s.ran(&["gate", "approve", &id, "review", "--note", "looks right"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(
        r.stdout,
        format!(
            "gate `review` of run {id}: approved (decided in round 0/3)\nrun {id} is running: ready publish; continue it with `stratumc run --resume {id} --agent CMD`\n"
        )
    );
    let ev = s.events(&id);
    let resolved: Vec<&Value> = ev.iter().filter(|e| e["type"] == "gate_resolved").collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(
        resolved[0]["detail"],
        json!({"decision": "approve", "target": null, "note": "looks right", "resolvedBy": "human"})
    );
    assert_eq!(resolved[0]["stepId"], "review");

    let r = s.resume(&id, &[]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(r.doc()["output"], json!({"result": "done publish"}));
}

/// After the gate a `set` step checks a file: the decision is evaluated in
/// the run's own workspace, not the operator's directory.
#[test]
fn gate_decision_checks_files_in_the_runs_workspace() {
    let s = Scratch::new("gate-ws");
    let spec = r#"version: 1
contracts:
  Work:
    result: string
  Done:
    ok: boolean
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${finish.output}"
      contract: Done
    steps:
      - id: work
        do: "Do ${input.text}"
        out: Work
      - id: review
        after: [work]
        gate:
          on_approve: null
          on_revise: null
          on_kill: null
      - id: finish
        after: [review]
        set:
          ok: "true"
        out: Done
        ensure:
          - file_exists: marker.txt
"#;
    std::fs::write(s.0.join("files.stratum.yaml"), spec).unwrap();
    let ws = s.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("marker.txt"), "here").unwrap();
    let (id, r) = s.start(
        "files.stratum.yaml",
        AGENT,
        &["--workspace", ws.to_str().unwrap()],
    );
    assert_eq!(r.code, 1, "{}", r.context());
    // the operator's directory (the scratch dir) has no marker.txt
    let doc = s.json(&["gate", "approve", &id, "review"]);
    assert_eq!(doc["status"], "completed", "{doc}");
    assert_eq!(
        s.json(&["query", "flow", &id])["run"]["output"],
        json!({"ok": true})
    );
}

#[test]
fn gate_reject_kills_the_run() {
    let s = Scratch::new("reject");
    let id = s.paused();
    let doc = s.json(&["gate", "reject", &id, "review", "--note", "wrong approach"]);
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["action"], "reject");
    assert_eq!(doc["decision"], "kill");
    assert_eq!(doc["resolvedBy"], "human");
    assert_eq!(doc["note"], "wrong approach");
    assert_eq!(doc["status"], "killed");
    assert_eq!(doc["ready"], json!([]));
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "version",
            "runId",
            "stepId",
            "action",
            "decision",
            "note",
            "resolvedBy",
            "round",
            "status",
            "ready",
            "gates"
        ]
    );
    let only = s.json(&["query", "flows", "--status", "killed"]);
    assert_eq!(only["runs"][0]["runId"], id.as_str());
    let resolved: Vec<Value> = s
        .events(&id)
        .into_iter()
        .filter(|e| e["type"] == "gate_resolved")
        .collect();
    assert_eq!(resolved[0]["detail"]["decision"], "kill");
    assert_eq!(resolved[0]["detail"]["resolvedBy"], "human");
}

#[test]
fn gate_revise_starts_a_round_and_an_old_token_is_stale() {
    let s = Scratch::new("revise");
    let id = s.paused();
    let old = s.gate_token(&id, "review");
    let r = s.ran(&["gate", "revise", &id, "review", "--note", "add figures"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(
        r.stdout.contains("sent back for revision"),
        "{}",
        r.context()
    );
    assert!(r.stdout.contains("ready work"), "{}", r.context());

    // the gate is pending again until `work` is redone: not waiting (exit 1)
    s.ran(&["gate", "approve", &id, "review"])
        .fails(1, "is not waiting for a decision: it is pending");

    // `stratumc run --resume` redoes `work` and pauses at the gate, round 1
    let r = s.resume(&id, &[]);
    assert_eq!(r.code, 1, "{}", r.context());
    let run = &s.json(&["query", "flow", &id])["run"];
    assert_eq!(run["round"], 1);
    assert_eq!(run["steps"][0]["resets"], 1);

    // a decision pinned to the old token is stale: nothing changes
    let before = s.events(&id).len();
    s.ran(&["gate", "approve", &id, "review", "--token", &old])
        .fails(1, "stale gate token");
    assert_eq!(s.events(&id).len(), before);

    // the live token works
    let live = s.gate_token(&id, "review");
    let r = s.ran(&["gate", "approve", &id, "review", "--token", &live]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(s.resume(&id, &[]).code, 0);
}

#[test]
fn gate_errors_say_what_is_wrong() {
    let s = Scratch::new("gate-errors");
    let id = s.paused();
    s.ran(&["gate", "approve", "run-0000000000000000", "review"])
        .fails(
            2,
            "no run `run-0000000000000000` in the run store; list runs with `stratumc query flows`",
        );
    s.ran(&["gate", "approve", &id, "reveiw"]).fails(
        2,
        &format!("run `{id}` has no step `reveiw`; its gates: review"),
    );
    s.ran(&["gate", "approve", &id, "work"])
        .fails(2, "step `work` of run");
    s.ran(&["gate", "approve", &id, "work"])
        .fails(2, "is a `do` step, not a gate");
    s.ran(&["gate", "maybe", &id, "review"])
        .fails(2, "invalid value 'maybe'");

    // decided already: not waiting (exit 1), and the audit is unchanged
    assert_eq!(s.ran(&["gate", "approve", &id, "review"]).code, 0);
    let before = s.events(&id).len();
    s.ran(&["gate", "revise", &id, "review"]).fails(
        1,
        "is not waiting for a decision: it was already decided (approve)",
    );
    assert_eq!(s.events(&id).len(), before);
    assert_eq!(s.resume(&id, &[]).code, 0);
    let before = s.events(&id).len();
    s.ran(&["gate", "approve", &id, "review"])
        .fails(1, "is not waiting for a decision: the run is completed");
    assert_eq!(s.events(&id).len(), before);

    // a cancelled run's gate cannot be decided
    let id = s.paused();
    assert_eq!(s.ran(&["flow", "cancel", &id]).code, 0);
    s.ran(&["gate", "approve", &id, "review"])
        .fails(1, "the run is cancelled");
}

// ---------------------------------------------------------------------------
// flow cancel

#[test]
fn flow_cancel_settles_a_run_and_reports_finished_ones() {
    let s = Scratch::new("cancel");
    let id = s.paused();
    let r = s.ran(&["flow", "cancel", &id, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let doc = r.doc();
    assert_eq!(
        (
            doc["version"].clone(),
            doc["status"].clone(),
            doc["flowSettled"].clone()
        ),
        (json!(1), json!("cancelled"), json!(true))
    );
    assert!(doc.get("reason").is_none(), "{doc}");
    assert_eq!(doc["ledger"]["spent"]["dispatches"], 1.0);
    assert_eq!(s.events(&id).last().unwrap()["type"], "flow_cancelled");
    assert_eq!(s.json(&["query", "gates"])["gates"], json!([]));

    // again: settled already (exit 0), nothing written
    let n = s.events(&id).len();
    let r = s.ran(&["flow", "cancel", &id, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(r.doc()["reason"], "already_cancelled");
    assert_eq!(r.doc()["flowSettled"], true);
    let r = s.ran(&["flow", "cancel", &id]);
    assert_eq!(r.stdout, format!("run {id} was already cancelled\n"));
    assert_eq!(s.events(&id).len(), n);

    // a cancelled run cannot be resumed
    s.resume(&id, &["--gate", "approve"])
        .fails(2, "is cancelled");

    // a completed run is left as it is: not settled (exit 1)
    let (done, _) = s.start("gated.stratum.yaml", AGENT, &["--gate", "approve"]);
    let n = s.events(&done).len();
    let r = s.ran(&["flow", "cancel", &done, "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.context());
    let doc = r.doc();
    assert_eq!(
        (
            doc["status"].clone(),
            doc["flowSettled"].clone(),
            doc["reason"].clone()
        ),
        (json!("completed"), json!(false), json!("already_completed"))
    );
    let r = s.ran(&["flow", "cancel", &done]);
    assert_eq!(
        (r.code, r.stdout.clone()),
        (
            1,
            format!("run {done} had already ended (completed); nothing was cancelled\n")
        )
    );
    assert_eq!(s.events(&done).len(), n);

    // unknown run
    s.ran(&["flow", "cancel", "run-0000000000000000"])
        .fails(2, "no run `run-0000000000000000`");
}

#[test]
fn flow_cancel_stops_a_run_that_stratumc_run_is_driving() {
    let s = Scratch::new("cancel-live");
    let (mut child, _err, id) = s.spawn_run(
        SLOW,
        &["--gate", "approve", "--format", "json"],
        Stdio::piped(),
    );
    let r = s.ran(&["flow", "cancel", &id]);
    // the driver may have finished already on a very slow machine; then the cancel reports that
    let code = wait_or_kill(&mut child, HANG, "stratumc run");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap();
    if r.code == 0 {
        assert_eq!(
            r.stdout.lines().next().unwrap(),
            format!(
                "run {id} cancelled; outstanding dispatches and gates can no longer be reported or decided"
            )
        );
        assert_eq!(
            (code, doc["status"].as_str()),
            (1, Some("cancelled")),
            "{out}"
        );
    } else {
        assert_eq!(
            (r.code, code, doc["status"].as_str()),
            (1, 0, Some("completed")),
            "{}",
            r.context()
        );
    }
}

#[test]
fn flow_cancel_kills_the_agents_a_driver_is_waiting_for() {
    let s = Scratch::new("cancel-kill");
    let dir = s.0.clone();
    // the agent says it started, then would work for a long time
    let agent = format!(
        "touch '{0}/started'; sleep 60; touch '{0}/finished'; echo '{{\"output\": {{\"result\": \"late\"}}}}'",
        dir.display()
    );
    let (mut child, mut err, id) = s.spawn_run(&agent, &["--format", "json"], Stdio::piped());
    let end = Instant::now() + HANG;
    while !dir.join("started").exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.ran(&["flow", "cancel", &id]);
    assert_eq!(r.code, 0, "{}", r.context());
    let code = wait_or_kill(&mut child, HANG, "stratumc run");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (code, doc["status"].as_str()),
        (1, Some("cancelled")),
        "{out}\n{rest}"
    );
    // the agent (and the `sleep` it started) was stopped, not waited for
    assert!(rest.contains("refused"), "{rest}");
    assert!(
        !dir.join("finished").exists(),
        "the agent ran to its end:\n{rest}"
    );
}

// ---------------------------------------------------------------------------
// watch

#[test]
fn watch_follows_a_run_driven_by_stratumc_run_to_the_end() {
    let s = Scratch::new("watch");
    let (mut runner, _err, id) = s.spawn_run(SLOW, &["--gate", "approve"], Stdio::null());
    let mut watch = s
        .cmd(&["watch", &id, "--interval", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let watch_code = wait_or_kill(&mut watch, HANG, "stratumc watch");
    let run_code = wait_or_kill(&mut runner, HANG, "stratumc run");
    let mut out = String::new();
    watch
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!((watch_code, run_code), (0, 0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    // `running` unless the run finished before watch started (a very loaded machine)
    assert!(
        lines[0].starts_with(&format!("watching run {id} (flow main): ")),
        "{out}"
    );
    for step in ["work", "publish"] {
        assert!(
            lines.contains(&format!("step {step}: succeeded (attempt 1)").as_str()),
            "{out}"
        );
    }
    assert!(
        lines.contains(&"step review: succeeded (decided approve)"),
        "{out}"
    );
    assert_eq!(
        lines[lines.len() - 2],
        "[####################] 3/3 steps done  spent: $0.02 of $5.00 · dispatches 2 of 20 · tokens 200"
    );
    assert_eq!(*lines.last().unwrap(), format!("run {id}: completed"));
    // one line per change: no line repeats
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), lines.len(), "{out}");
}

#[test]
fn watch_follows_a_gate_decided_by_an_operator() {
    watch_follows_a_gate(&Scratch::new("watch-gate"));
}

/// On PostgreSQL `watch` wakes on `LISTEN/NOTIFY` instead of polling; what
/// it shows is the same.
#[test]
fn watch_follows_a_gate_on_postgresql() {
    if let Some(url) = support::pg_url() {
        let s = Scratch::on_postgres("watch-gate-pg", &url);
        watch_follows_a_gate(&s);
        assert!(!s.db().exists(), "no SQLite store was made beside it");
    }
}

fn watch_follows_a_gate(s: &Scratch) {
    let id = s.paused();
    let mut watch = s
        .cmd(&["watch", &id, "--interval", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(watch.stdout.take().unwrap());
    let seen = read_until(
        &mut out,
        "gate review: waiting for a decision (round 0/3, token ",
    );
    assert!(seen.contains("step review: waiting_gate"), "{seen}");
    assert_eq!(s.ran(&["gate", "approve", &id, "review"]).code, 0);
    let seen = read_until(&mut out, "step review: succeeded (decided approve)");
    let r = s.resume(&id, &[]);
    assert_eq!(r.code, 0, "{}", r.context());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(
        wait_or_kill(&mut watch, HANG, "stratumc watch"),
        0,
        "{seen}{rest}"
    );
    assert!(
        rest.contains("step publish: succeeded (attempt 1)"),
        "{rest}"
    );
    assert!(rest.ends_with(&format!("run {id}: completed\n")), "{rest}");
}

#[test]
fn watch_exit_codes() {
    let s = Scratch::new("watch-exit");
    s.ran(&["watch", "run-0000000000000000"])
        .fails(2, "no run `run-0000000000000000`");
    // a run that already ended: one view, then exit 1 (not completed)
    let id = s.paused();
    assert_eq!(s.ran(&["gate", "reject", &id, "review"]).code, 0);
    let r = s.ran(&["watch", &id]);
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(
        r.stdout.ends_with(&format!(
            "run {id}: killed: gate `review` killed the flow\n"
        )),
        "{}",
        r.context()
    );
    let hash = plan_hash(&s, &id);
    insta::assert_snapshot!("watch_plain_killed", redact(&r.stdout, &[&hash]));
}

// ---------------------------------------------------------------------------
// runs created by the MCP server

/// A `stratumc mcp` process spoken to with newline-delimited JSON-RPC.
struct Mcp {
    child: Child,
    out: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(s: &Scratch) -> Mcp {
        let mut child = s
            .cmd(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp {
            child,
            out,
            next: 1,
        };
        m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "operator-test", "version": "0"}}),
        );
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "mcp closed stdout"
            );
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == id {
                assert!(msg.get("error").is_none(), "{msg}");
                return msg["result"].clone();
            }
        }
    }

    /// Calls a tool that must succeed; its structured result.
    fn tool(&mut self, name: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}));
        assert_ne!(r["isError"], true, "{name}: {r}");
        r["structuredContent"].clone()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn runs_started_by_the_mcp_server_are_queried_and_decided_here() {
    let s = Scratch::new("mcp");
    let mut mcp = Mcp::start(&s);
    let env = mcp.tool(
        "stratum_plan",
        json!({"spec": GATED, "input": {"text": "x"}}),
    );
    let id = env["runId"].as_str().unwrap().to_string();
    let work = &env["ready"][0];
    assert_eq!(work["id"], "work");
    let env = mcp.tool(
        "stratum_step_done",
        json!({"runId": id, "stepId": "work", "dispatchToken": work["dispatchToken"],
               "result": {"result": "from mcp"}}),
    );
    assert_eq!(env["gates"][0]["stepId"], "review");

    // the operator sees the run and its gate, with the token the server handed out
    let flows = s.json(&["query", "flows"]);
    assert_eq!(flows["runs"][0]["runId"], id.as_str());
    assert_eq!(
        s.gate_token(&id, "review"),
        env["gates"][0]["gateToken"].as_str().unwrap()
    );
    let run = &s.json(&["query", "flow", &id])["run"];
    assert_eq!(run["steps"][0]["outputSummary"], r#"{"result":"from mcp"}"#);

    // and decides it; the server's client continues the run
    let r = s.ran(&["gate", "approve", &id, "review", "--note", "ok"]);
    assert_eq!(r.code, 0, "{}", r.context());
    let env = mcp.tool("stratum_resume", json!({"runId": id}));
    let publish = &env["ready"][0];
    assert_eq!(publish["id"], "publish");
    let env = mcp.tool(
        "stratum_step_done",
        json!({"runId": id, "stepId": "publish", "dispatchToken": publish["dispatchToken"],
               "result": {"result": "published"}}),
    );
    assert_eq!(env["status"], "completed");
    assert_eq!(
        s.json(&["query", "flow", &id])["run"]["status"],
        "completed"
    );
    let resolved: Vec<Value> = s
        .events(&id)
        .into_iter()
        .filter(|e| e["type"] == "gate_resolved")
        .collect();
    assert_eq!(resolved[0]["detail"]["resolvedBy"], "human");

    // a second MCP run, cancelled by the operator: the server refuses further reports
    let env = mcp.tool(
        "stratum_plan",
        json!({"spec": GATED, "input": {"text": "y"}}),
    );
    let id = env["runId"].as_str().unwrap().to_string();
    let token = env["ready"][0]["dispatchToken"].clone();
    assert_eq!(s.ran(&["flow", "cancel", &id]).code, 0);
    let r = mcp.request(
        "tools/call",
        json!({"name": "stratum_step_done", "arguments": {"runId": id, "stepId": "work",
               "dispatchToken": token, "result": {"result": "late"}}}),
    );
    assert_eq!(r["isError"], true, "{r}");
}

// ---------------------------------------------------------------------------
// X10: gate options and choices

/// A gate with options (`scope`, revise → work) and a gate without (`sign`);
/// `publish` reads the choice.
const CHOOSING: &str = r#"version: 1
contracts:
  Work:
    result: string
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${publish.output}"
      contract: Work
    max_rounds: 3
    steps:
      - id: work
        do: "Do ${input.text} (scope ${scope.choice})"
        out: Work
      - id: scope
        after: [work]
        gate:
          on_approve: null
          on_revise: work
          on_kill: null
          options: [narrow, broad]
      - id: sign
        after: [scope]
        gate:
          on_approve: null
          on_revise: null
          on_kill: null
      - id: publish
        after: [sign]
        do: "Publish the ${scope.choice} one"
        out: Work
"#;

/// An agent that answers with its task (the entry on stdin), so the output
/// shows what it read.
const ECHO: &str = r#"python3 -c 'import json,sys; e=json.load(sys.stdin); print(json.dumps({"output": {"result": e["do"]}}))'"#;

/// `stratumc run --resume RUN --agent ECHO` with more arguments.
fn resume_echo(s: &Scratch, id: &str, extra: &[&str]) -> Ran {
    let mut args = vec!["run", "--resume", id, "--agent", ECHO, "--format", "json"];
    args.extend_from_slice(extra);
    s.ran(&args)
}

/// The `gate_resolved` details of a run, in order.
fn decisions(s: &Scratch, id: &str) -> Vec<Value> {
    s.events(id)
        .into_iter()
        .filter(|e| e["type"] == "gate_resolved")
        .map(|e| e["detail"].clone())
        .collect()
}

#[test]
fn gate_choice_is_checked_recorded_and_read_downstream() {
    let s = Scratch::new("choice");
    std::fs::write(s.0.join("choosing.stratum.yaml"), CHOOSING).unwrap();
    let (id, r) = s.start("choosing.stratum.yaml", ECHO, &[]);
    assert_eq!(r.code, 1, "{}", r.context());
    // the waiting gate lists its options
    let gates = s.json(&["query", "gates"]);
    assert_eq!(gates["gates"][0]["options"], json!(["narrow", "broad"]));
    let r = s.ran(&["query", "gates"]);
    assert!(
        r.stdout.contains("options of scope: narrow, broad"),
        "{}",
        r.context()
    );

    // a choice that is not an option is refused, listing the options; nothing changes
    let r = s.ran(&["gate", "revise", &id, "scope", "--choice", "wide"]);
    assert_ne!(r.code, 0, "{}", r.context());
    assert!(
        r.stderr
            .contains("`wide` is not an option of gate `scope`; choose one of: narrow, broad"),
        "{}",
        r.context()
    );
    assert!(decisions(&s, &id).is_empty());

    // revise with a choice: the re-entered task reads it
    let r = s.ran(&[
        "gate", "revise", &id, "scope", "--choice", "broad", "--note", "wider",
    ]);
    assert_eq!(r.code, 0, "{}", r.context());
    let r = resume_echo(
        &s,
        &id,
        &["--gate", "scope=approve:narrow", "--gate", "approve"],
    );
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(
        r.doc()["output"],
        json!({"result": "Publish the narrow one"})
    );
    let d = decisions(&s, &id);
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(d[0]["choice"], "broad");
    assert_eq!(d[0]["note"], "wider");
    assert_eq!(d[1]["choice"], "narrow");
    assert!(d[2].get("choice").is_none(), "{:?}", d[2]);

    // the report shows the choice with the decision
    let r = s.ran(&["report", &id]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert!(r.stdout.contains("choice"), "{}", r.stdout);
    assert!(r.stdout.contains("narrow"), "{}", r.stdout);
}

#[test]
fn run_gate_rules_decide_one_gate_with_a_choice() {
    let s = Scratch::new("gate-rule");
    std::fs::write(s.0.join("choosing.stratum.yaml"), CHOOSING).unwrap();
    // a rule for `scope` only: the run stops at `sign`, which has no rule
    let (id, r) = s.start(
        "choosing.stratum.yaml",
        ECHO,
        &["--gate", "scope=approve:broad"],
    );
    assert_eq!(r.code, 1, "{}", r.context());
    assert!(
        r.stderr.contains("waiting at gate `sign`"),
        "{}",
        r.context()
    );
    assert_eq!(decisions(&s, &id)[0]["choice"], "broad");
    // a choice for a gate without options is refused and the run stays at the gate
    let r = resume_echo(&s, &id, &["--gate", "sign=approve:yes"]);
    assert_ne!(r.code, 0, "{}", r.context());
    assert!(
        r.stderr.contains("gate `sign` has no options"),
        "{}",
        r.context()
    );
    let r = resume_echo(&s, &id, &["--gate", "sign=approve"]);
    assert_eq!(r.code, 0, "{}", r.context());
    assert_eq!(
        r.doc()["output"],
        json!({"result": "Publish the broad one"})
    );

    // a malformed rule is a usage error
    let r = s.ran(&["run", "choosing.stratum.yaml", "--gate", "approve:broad"]);
    assert_eq!(r.code, 2, "{}", r.context());
    assert!(
        r.stderr.contains("a choice needs the gate it is for"),
        "{}",
        r.context()
    );
    let r = s.ran(&["run", "choosing.stratum.yaml", "--gate", "scope=maybe"]);
    assert_eq!(r.code, 2, "{}", r.context());
    assert!(r.stderr.contains("not a gate decision"), "{}", r.context());
}

#[test]
fn mcp_gate_resolve_takes_a_choice_and_the_audit_has_it() {
    let s = Scratch::new("mcp-choice");
    let mut mcp = Mcp::start(&s);
    let env = mcp.tool(
        "stratum_plan",
        json!({"spec": CHOOSING, "input": {"text": "x"}}),
    );
    let id = env["runId"].as_str().unwrap().to_string();
    let work = &env["ready"][0];
    assert_eq!(work["do"], "Do x (scope )");
    let env = mcp.tool(
        "stratum_step_done",
        json!({"runId": id, "stepId": "work", "dispatchToken": work["dispatchToken"],
               "result": {"result": "w"}}),
    );
    let gate = env["gates"][0].clone();
    assert_eq!(gate["stepId"], "scope");
    assert_eq!(gate["options"], json!(["narrow", "broad"]));
    // a refused choice
    let r = mcp.request(
        "tools/call",
        json!({"name": "stratum_gate_resolve", "arguments": {"runId": id, "stepId": "scope",
               "gateToken": gate["gateToken"], "decision": "revise", "choice": "wide"}}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r.to_string().contains("choose one of: narrow, broad"),
        "{r}"
    );
    // revise with a choice: the target's ready entry carries previousRevise
    let env = mcp.tool(
        "stratum_gate_resolve",
        json!({"runId": id, "stepId": "scope", "gateToken": gate["gateToken"],
               "decision": "revise", "choice": "broad", "rationale": "wider"}),
    );
    let work = &env["ready"][0];
    assert_eq!(work["do"], "Do x (scope broad)");
    assert_eq!(
        work["previousRevise"],
        json!({"gate": "scope", "round": 1, "note": "wider", "choice": "broad"})
    );
    let audit = mcp.tool("stratum_audit", json!({"runId": id}));
    let resolved: Vec<&Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gate_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{audit}");
    assert_eq!(resolved[0]["detail"]["choice"], "broad");
    assert_eq!(resolved[0]["detail"]["note"], "wider");
}

/// Drives `stratumc ARGS` on a pseudo-terminal (Python's `pty`, as a user at
/// a terminal): each `(prompt, answer)` waits for the prompt text, then types
/// the answer and Enter. Returns the exit code and everything the terminal
/// showed.
fn on_terminal(s: &Scratch, args: &[&str], dialogue: &[(&str, &str)]) -> (i32, String) {
    const DRIVER: &str = r#"
import json, os, pty, select, sys, time
argv, dialogue = json.loads(sys.argv[1]), json.loads(sys.argv[2])
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen = b""
def read_until(needle, limit=60):
    global seen
    end = time.time() + limit
    while needle.encode() not in seen:
        if time.time() > end:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.exit("timed out waiting for %r" % needle)
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                sys.stdout.write(seen.decode(errors="replace"))
                sys.exit("the program ended before %r" % needle)
            seen += chunk
for prompt, answer in dialogue:
    read_until(prompt)
    consumed = seen.rindex(prompt.encode()) + len(prompt)
    sys.stdout.write(seen[:consumed].decode(errors="replace"))
    seen = seen[consumed:]
    os.write(fd, (answer + "\n").encode())
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
sys.stdout.write(seen.decode(errors="replace"))
_, status = os.waitpid(pid, 0)
print("\nEXIT %d" % os.waitstatus_to_exitcode(status))
"#;
    let mut argv = vec![env!("CARGO_BIN_EXE_stratumc").to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let dialogue: Vec<[&str; 2]> = dialogue.iter().map(|(p, a)| [*p, *a]).collect();
    let out = Command::new("python3")
        .args(["-c", DRIVER])
        .arg(serde_json::to_string(&argv).unwrap())
        .arg(serde_json::to_string(&dialogue).unwrap())
        .env("STRATUM_HOME", s.0.join("home"))
        .env("NO_COLOR", "1")
        .current_dir(&s.0)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the terminal driver failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = text
        .rsplit_once("EXIT ")
        .and_then(|(_, c)| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no exit status in {text}"));
    (code, text)
}

#[test]
fn a_gate_with_options_is_decided_at_the_terminal_by_number_or_name() {
    let s = Scratch::new("terminal-choice");
    std::fs::write(s.0.join("choosing.stratum.yaml"), CHOOSING).unwrap();
    let (code, shown) = on_terminal(
        &s,
        &[
            "run",
            "choosing.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            ECHO,
            "--format",
            "json",
        ],
        &[
            // scope: approve, a wrong answer is asked again, then option 2
            ("gate `scope` (round 0): [a]pprove, [r]evise, [k]ill? ", "a"),
            ("choice [1] narrow, [2] broad (optional): ", "wide"),
            ("choice [1] narrow, [2] broad (optional): ", "2"),
            ("note (optional): ", "the broad one"),
            // sign has no options: no choice is asked
            (
                "gate `sign` (round 0): [a]pprove, [r]evise, [k]ill? ",
                "approve",
            ),
            ("note (optional): ", ""),
        ],
    );
    assert_eq!(code, 0, "{shown}");
    // on a terminal the progress line is drawn, then cleared for the results
    assert!(
        shown.contains("\r\x1b[Kprogress: 0/4 steps done; dispatching work; spent $0.00, 1 dispatch, 0 tokens ("),
        "{shown:?}"
    );
    assert!(
        shown.contains("progress: 3/4 steps done; dispatching publish"),
        "{shown}"
    );
    assert!(
        shown.contains("`wide` is not one of the options"),
        "{shown}"
    );
    assert!(shown.contains("Publish the broad one"), "{shown}");
    let id = shown
        .split("run: ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .expect("the run id is announced")
        .to_string();
    let d = decisions(&s, &id);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[0]["choice"], "broad");
    assert_eq!(d[0]["note"], "the broad one");
    assert_eq!(d[0]["resolvedBy"], "human", "{:?}", d[0]);
    assert!(d[1].get("choice").is_none(), "{:?}", d[1]);

    // the option's name works as well as its number
    let s = Scratch::new("terminal-choice-name");
    std::fs::write(s.0.join("choosing.stratum.yaml"), CHOOSING).unwrap();
    let (code, shown) = on_terminal(
        &s,
        &[
            "run",
            "choosing.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            ECHO,
        ],
        &[
            ("[k]ill? ", "a"),
            ("(optional): ", "narrow"),
            ("note (optional): ", ""),
            ("[k]ill? ", "a"),
            ("note (optional): ", ""),
        ],
    );
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("Publish the narrow one"), "{shown}");
}
