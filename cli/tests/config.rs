//! The configuration a run uses is frozen into it at start, and the
//! operator's configuration (`$STRATUM_HOME/stratum.toml`, `--config FILE`)
//! wins over the workspace's (issue 13 item 7; docs/threat-model.md).
//!
//! The judges are tiny HTTP servers on 127.0.0.1 inside the test process
//! (each request read with a timeout, so nothing here can hang), answering
//! a fixed verdict and counting the calls they get.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::Ran;

/// A step, a gate, then a step with a judged ensure.
const SPEC: &str = r#"version: 1
contracts:
  Work:
    result: string
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${check.output}"
      contract: Work
    max_rounds: 2
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
          max_rounds: 1
      - id: check
        after: [review]
        do: "Check ${work.output.result}"
        out: Work
        ensure:
          - judged:
              statement: "The work is done."
              stakes: default
        attempts: 1
"#;

/// An OpenAI-compatible judge on 127.0.0.1 answering every call with
/// `holds`; counts the calls.
struct Judge {
    port: u16,
    calls: Arc<AtomicUsize>,
}

impl Judge {
    fn start(holds: bool) -> Judge {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if answer(stream, holds).is_ok() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Judge { port, calls }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Reads one request (bounded by a timeout) and answers a verdict.
fn answer(stream: TcpStream, holds: bool) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length.min(1 << 20)];
    reader.read_exact(&mut body)?;
    let verdict = json!({"holds": holds, "reason": format!("this judge always says {holds}")});
    let reply = json!({
        "choices": [{"message": {"content": verdict.to_string()}}],
        "model": "fake",
        "usage": {"total_tokens": 7},
    })
    .to_string();
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    )?;
    out.flush()
}

fn judge_toml(url: &str) -> String {
    format!("[judge]\nurl = \"{url}\"\nmodel = \"m\"\ntimeout_ms = 5000\n")
}

/// A scratch directory: `home/` (`STRATUM_HOME`), `ws/` (the workspace,
/// holding the spec); removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = support::scratch("config", tag);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        std::fs::write(dir.join("ws/flow.stratum.yaml"), SPEC).unwrap();
        Scratch(dir)
    }

    fn ws(&self) -> PathBuf {
        self.0.join("ws")
    }

    fn home(&self) -> PathBuf {
        self.0.join("home")
    }

    /// `stratumc ARGS` in the workspace with this `STRATUM_HOME`.
    fn ran(&self, args: &[&str]) -> Ran {
        Ran::of(
            Command::new(env!("CARGO_BIN_EXE_stratumc"))
                .env("STRATUM_HOME", self.home())
                .env("NO_COLOR", "1")
                .current_dir(self.ws())
                .stdin(Stdio::null())
                .args(args),
        )
    }

    fn start(&self, agent: &str, extra: &[&str]) -> Ran {
        let mut args = vec![
            "run",
            "flow.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            agent,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        self.ran(&args)
    }

    /// The audit of a run: the `events` table of the store, in order.
    fn events(&self, run: &str) -> Vec<Value> {
        let conn = rusqlite::Connection::open(self.home().join("stratum.db")).unwrap();
        let mut stmt = conn
            .prepare("SELECT json FROM events WHERE run_id = ?1 ORDER BY seq")
            .unwrap();
        stmt.query_map([run], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|j| serde_json::from_str(&j.unwrap()).unwrap())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An agent that answers every step; in the `work` step it first rewrites
/// the workspace's `stratum.toml` to `rewrite` (a judge of its choosing).
fn rewriting_agent(rewrite: &Path) -> String {
    format!(
        r#"if [ "$STRATUM_STEP_ID" = work ]; then cp '{}' stratum.toml; fi; printf '{{"output": {{"result": "done %s"}}}}' "$STRATUM_STEP_ID""#,
        rewrite.display()
    )
}

#[test]
fn an_agent_that_re_points_the_judge_mid_run_is_ignored_on_resume() {
    let s = Scratch::new("repoint");
    let (frozen, agents) = (Judge::start(false), Judge::start(true));
    std::fs::write(s.ws().join("stratum.toml"), judge_toml(&frozen.url())).unwrap();
    let evil = s.0.join("evil.toml");
    std::fs::write(&evil, judge_toml(&agents.url())).unwrap();

    // the run pauses at the gate, after the agent rewrote the workspace file
    let r = s.start(&rewriting_agent(&evil), &[]);
    assert_eq!(r.code, 1, "{}", r.context());
    let run = r.run_id();
    assert!(
        std::fs::read_to_string(s.ws().join("stratum.toml"))
            .unwrap()
            .contains(&agents.url())
    );
    let ev = s.events(&run);
    let planned = ev.iter().position(|e| e["type"] == "planned").unwrap();
    let frozen_ev = &ev[planned + 1];
    assert_eq!(frozen_ev["type"], "config_frozen", "{ev:#?}");
    let hash = frozen_ev["detail"]["configHash"].as_str().unwrap();
    assert!(
        hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );

    // resumed: the frozen judge decides (it says no), the agent's is never asked
    let agent = rewriting_agent(&evil);
    let r = s.ran(&[
        "run", "--resume", &run, "--gate", "approve", "--agent", &agent, "--format", "json",
    ]);
    assert_eq!(r.code, 1, "{}", r.context());
    assert_eq!(r.doc()["status"], "failed", "{}", r.context());
    assert_eq!((frozen.calls(), agents.calls()), (1, 0), "{}", r.context());
    let warning = r
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: "))
        .unwrap_or_else(|| panic!("no warning: {}", r.context()));
    assert!(
        warning.contains(&format!("run {run}:"))
            && warning.contains(&format!(
                "`judge.url`: \"{}\" → \"{}\"",
                frozen.url(),
                agents.url()
            ))
            && warning.contains("ignored: the run keeps the configuration frozen at its start"),
        "{warning}"
    );
    let events = s.events(&run);
    let judged: Vec<&Value> = events.iter().filter(|e| e["type"] == "judged").collect();
    assert_eq!(judged.len(), 1);
    assert_eq!(judged[0]["detail"]["holds"], false);
    assert_eq!(
        judged[0]["detail"]["reason"],
        "this judge always says false"
    );
}

#[test]
fn the_operators_judge_wins_and_a_workspace_cannot_widen_it() {
    let s = Scratch::new("operator");
    let (operator, workspace) = (Judge::start(true), Judge::start(false));
    std::fs::write(s.home().join("stratum.toml"), judge_toml(&operator.url())).unwrap();
    let agent = r#"printf '{"output": {"result": "done"}}'"#;

    // a workspace file re-pointing the judge is refused before anything runs
    std::fs::write(s.ws().join("stratum.toml"), judge_toml(&workspace.url())).unwrap();
    let r = s.start(agent, &["--gate", "approve"]);
    r.fails(2, "may only narrow the operator's configuration");
    assert!(
        r.stderr.contains("`judge.url`") && r.stderr.contains("nothing was run"),
        "{}",
        r.context()
    );
    // so is one adding an agent command the operator does not give
    std::fs::write(
        s.ws().join("stratum.toml"),
        "[agents.codex]\ncommand = \"x\"\n",
    )
    .unwrap();
    s.start(agent, &["--gate", "approve"]).fails(
        2,
        "`agents.codex.command` = \"x\" (the operator's: none; it cannot add one)",
    );

    // one that only narrows (a shorter timeout) runs, on the operator's judge
    std::fs::write(
        s.ws().join("stratum.toml"),
        "[agents.claude]\ntimeout_ms = 4000\n",
    )
    .unwrap();
    let r = s.start(agent, &["--gate", "approve"]);
    assert_eq!(r.completed()["result"], "done", "{}", r.context());
    assert_eq!((operator.calls(), workspace.calls()), (1, 0));
    let ev = s.events(&r.run_id());
    let frozen = ev.iter().find(|e| e["type"] == "config_frozen").unwrap();
    let sources = frozen["detail"]["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{frozen}");
    assert!(
        sources[0]
            .as_str()
            .unwrap()
            .starts_with(s.home().to_str().unwrap())
    );

    // `--config FILE` is the operator's file instead of $STRATUM_HOME's
    let other = s.0.join("operator.toml");
    std::fs::write(&other, judge_toml(&workspace.url())).unwrap();
    std::fs::write(s.ws().join("stratum.toml"), "").unwrap();
    let r = s.start(
        agent,
        &["--gate", "approve", "--config", other.to_str().unwrap()],
    );
    assert_eq!(r.code, 1, "{}", r.context());
    assert_eq!((operator.calls(), workspace.calls()), (1, 1));
    let missing = s.0.join("missing.toml");
    s.start(agent, &["--config", missing.to_str().unwrap()])
        .fails(2, "cannot read");
}
