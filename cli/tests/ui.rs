//! `stratumc ui` through the built binary: the JSON API over a real run
//! store (list, run detail, graph, gates, a decision, cancel), its
//! refusals (a stale token, a gate no longer waiting, an ended run, an
//! unknown run, a foreign Host or Origin, a non-JSON POST, a missing
//! token off loopback), and the run moving on under `stratumc run
//! --resume` after a decision taken in the UI.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

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
          options: [ship, hold]
      - id: publish
        after: [review]
        do: "Publish ${review.choice}"
        out: Work
"#;

/// Answers with its task, so the output shows what it read.
const ECHO: &str = r#"python3 -c 'import json,sys; e=json.load(sys.stdin); print(json.dumps({"output": {"result": e["do"]}}))'"#;

/// Where requests go, and the token they carry.
struct Client {
    base: String,
    token: Option<String>,
}

/// A running `stratumc ui`, killed when dropped.
struct Server {
    child: Child,
    client: Client,
}

impl std::ops::Deref for Server {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(home: &Path, listen: &str, env: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    cmd.args(["ui", "--listen", listen])
        .env("STRATUM_HOME", home)
        .env_remove("STRATUM_UI_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("stratumc ui starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped"))
        .read_line(&mut line)
        .expect("the announcement line");
    let url = line
        .trim()
        .strip_prefix("ui: ")
        .unwrap_or_else(|| panic!("not an announcement: {line}"))
        .to_string();
    let (base, token) = match url.split_once("/?token=") {
        Some((b, t)) => (b.to_string(), Some(t.to_string())),
        None => (url.trim_end_matches('/').to_string(), None),
    };
    Server {
        child,
        client: Client { base, token },
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn get(s: &Client, path: &str) -> (u16, String) {
    let mut req = agent().get(&format!("{}{path}", s.base));
    if let Some(t) = &s.token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = req.call().expect("the server answers");
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

fn get_json(s: &Client, path: &str) -> (u16, Value) {
    let (code, body) = get(s, path);
    (
        code,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("JSON from {path}: {body}")),
    )
}

fn post(s: &Client, path: &str, body: &Value) -> (u16, Value) {
    let mut r = agent()
        .post(&format!("{}{path}", s.base))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("the server answers");
    let text = r.body_mut().read_to_string().unwrap();
    (r.status().as_u16(), serde_json::from_str(&text).unwrap())
}

/// A raw HTTP/1.1 request (to send the headers a browser of another site
/// would): the status code and body.
fn raw(s: &Client, request: &str) -> (u16, String) {
    let addr = s.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).expect("connects");
    tcp.write_all(request.replace("{ADDR}", addr).as_bytes())
        .unwrap();
    let mut text = String::new();
    let _ = tcp.read_to_string(&mut text);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// A run paused at its gate `review`: (scratch dir, home, run id).
fn paused_run(name: &str) -> (PathBuf, PathBuf, String) {
    paused_run_in(name, None)
}

/// [`paused_run`] in the store at `url` (`[store] url` in the home's
/// `stratum.toml`, which every command with that home then uses).
fn paused_run_in(name: &str, url: Option<&str>) -> (PathBuf, PathBuf, String) {
    let dir = support::scratch("ui", name);
    let home = dir.join("home");
    if let Some(url) = url {
        support::home_on_store(&home, url);
    }
    std::fs::write(dir.join("gated.stratum.yaml"), GATED).unwrap();
    let (code, stdout, stderr) = support::stratumc_in(
        &dir,
        Some(&home),
        &[
            "run",
            "gated.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            ECHO,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1, "paused at the gate: {stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    (dir, home, doc["runId"].as_str().unwrap().to_string())
}

#[test]
fn the_api_lists_shows_decides_and_follows_a_run() {
    the_api_on(None);
}

/// The same on the PostgreSQL store (`STRATUM_TEST_PG`, which
/// `scripts/test.sh` sets): the UI serves either store.
#[test]
fn the_api_serves_a_postgresql_store_too() {
    if let Some(url) = support::pg_url() {
        the_api_on(Some(&url));
    }
}

fn the_api_on(url: Option<&str>) {
    let (dir, home, id) = paused_run_in("api", url);
    assert_eq!(
        home.join("stratum.db").exists(),
        url.is_none(),
        "the run is in the store the home names"
    );
    let s = serve(&home, "127.0.0.1:0", &[]);
    assert!(s.token.is_none(), "no token on loopback");

    let (code, page) = get(&s, "/");
    assert_eq!(code, 200);
    assert!(page.contains("<script src=\"/app.js\">"), "{page}");
    let (code, js) = get(&s, "/app.js");
    assert_eq!(code, 200);
    assert!(js.contains("/api/v1"));

    let (code, list) = get_json(&s, "/api/v1/runs");
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["runs"][0]["runId"], id.as_str());
    assert_eq!(list["runs"][0]["waitingGates"], json!(["review"]));
    assert_eq!(list["runs"][0]["progress"], json!({"done": 1, "total": 3}));
    let (_, none) = get_json(&s, "/api/v1/runs?status=completed");
    assert_eq!(none["runs"], json!([]));

    let (code, run) = get_json(&s, &format!("/api/v1/runs/{id}"));
    assert_eq!(code, 200);
    assert_eq!(run["run"]["status"], "running");
    assert_eq!(run["run"]["gates"][0]["options"], json!(["ship", "hold"]));
    let version = run["run"]["storeVersion"].as_u64().unwrap();
    assert!(
        run["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "gate_waiting")
    );

    // the same document as `stratumc query flow --format json`
    let (_, q, _) = support::stratumc_in(
        &dir,
        Some(&home),
        &["query", "flow", &id, "--format", "json"],
    );
    let q: Value = serde_json::from_str(&q).unwrap();
    assert_eq!(q["run"], run["run"]);

    let (code, svg) = get(&s, &format!("/api/v1/runs/{id}/graph.svg"));
    assert_eq!(code, 200);
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(
        svg.contains(r#"data-step="review" data-status="waiting_gate""#),
        "{svg}"
    );
    assert!(
        svg.contains(r#"data-step="work" data-status="succeeded""#),
        "{svg}"
    );
    assert!(
        svg.contains(r#"data-step="publish" data-status="pending""#),
        "{svg}"
    );

    let (_, gates) = get_json(&s, "/api/v1/gates");
    let token = gates["gates"][0]["gateToken"].as_str().unwrap().to_string();
    assert_eq!(gates["gates"][0]["runId"], id.as_str());

    // refusals change nothing
    let path = format!("/api/v1/runs/{id}/gates/review");
    let (code, e) = post(
        &s,
        &path,
        &json!({"decision": "approve", "token": "g9-stale"}),
    );
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (409, Some("stale_token")),
        "{e}"
    );
    let (code, e) = post(
        &s,
        &path,
        &json!({"decision": "approve", "choice": "later"}),
    );
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (400, Some("refused")),
        "{e}"
    );
    let (code, e) = post(&s, &path, &json!({"decision": "maybe"}));
    assert_eq!(code, 400, "{e}");
    let (code, e) = post(
        &s,
        &format!("/api/v1/runs/{id}/gates/work"),
        &json!({"decision": "approve"}),
    );
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (400, Some("not_a_gate")),
        "{e}"
    );
    let (code, e) = post(
        &s,
        "/api/v1/runs/run-nope/gates/review",
        &json!({"decision": "approve"}),
    );
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (404, Some("unknown_run")),
        "{e}"
    );
    let (code, text) = raw(
        &s,
        "POST /api/v1/runs/x/cancel HTTP/1.1\r\nHost: {ADDR}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(code, 415, "a form post is refused: {text}");
    let (code, text) = raw(
        &s,
        "POST /api/v1/runs/x/cancel HTTP/1.1\r\nHost: {ADDR}\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(code, 403, "another site's page is refused: {text}");
    let (code, text) = raw(
        &s,
        "GET /api/v1/runs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(code, 403, "a rebound name is refused: {text}");
    let (_, again) = get_json(&s, &format!("/api/v1/runs/{id}/version"));
    assert_eq!(
        again["storeVersion"].as_u64(),
        Some(version),
        "nothing was recorded"
    );

    // the decision, as a human, with a note and a choice
    let (code, d) = post(
        &s,
        &path,
        &json!({"decision": "approve", "note": "looks right", "choice": "ship", "token": token}),
    );
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["resolvedBy"], "human");
    assert_eq!(d["ready"], json!(["publish"]));
    let (code, e) = post(&s, &path, &json!({"decision": "approve"}));
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (409, Some("not_waiting")),
        "{e}"
    );
    let (_, run) = get_json(&s, &format!("/api/v1/runs/{id}"));
    let resolved: Vec<&Value> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gate_resolved")
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["detail"]["note"], "looks right");
    assert_eq!(resolved[0]["detail"]["choice"], "ship");
    assert_eq!(resolved[0]["detail"]["resolvedBy"], "human");

    // the run moves on under `run --resume`, and the version moves with it
    let (code, out, err) = support::stratumc_in(
        &dir,
        Some(&home),
        &["run", "--resume", &id, "--agent", ECHO, "--format", "json"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Publish ship"), "{out}");
    let (_, after) = get_json(&s, &format!("/api/v1/runs/{id}/version"));
    assert!(after["storeVersion"].as_u64().unwrap() > version);
    let (_, run) = get_json(&s, &format!("/api/v1/runs/{id}"));
    assert_eq!(run["run"]["status"], "completed");
    assert_eq!(run["run"]["output"], json!({"result": "Publish ship"}));

    // an ended run cannot be cancelled; an unknown one is not found
    let (code, c) = post(&s, &format!("/api/v1/runs/{id}/cancel"), &json!({}));
    assert_eq!(
        (code, c["reason"].as_str()),
        (409, Some("already_completed")),
        "{c}"
    );
    let (code, e) = get_json(&s, "/api/v1/runs/run-nope");
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (404, Some("unknown_run"))
    );
}

#[test]
fn cancel_settles_a_running_run() {
    let (_dir, home, id) = paused_run("cancel");
    let s = serve(&home, "127.0.0.1:0", &[]);
    let (code, c) = post(&s, &format!("/api/v1/runs/{id}/cancel"), &json!({}));
    assert_eq!(code, 200, "{c}");
    assert_eq!(c["flowSettled"], true);
    assert_eq!(c["status"], "cancelled");
    let (_, gates) = get_json(&s, "/api/v1/gates");
    assert_eq!(
        gates["gates"],
        json!([]),
        "a cancelled run's gate no longer waits"
    );
}

#[test]
fn off_loopback_every_request_needs_the_token() {
    let (_dir, home, _id) = paused_run("token");
    let s = serve(&home, "0.0.0.0:0", &[]);
    let token = s.token.clone().expect("a token is printed off loopback");
    assert_eq!(token.len(), 32);
    let port = s.base.rsplit(':').next().unwrap().to_string();
    let bare = Client {
        base: format!("http://127.0.0.1:{port}"),
        token: None,
    };
    let (code, e) = get_json(&bare, "/api/v1/runs");
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (401, Some("token_required")),
        "{e}"
    );
    let (code, _) = get(&bare, "/");
    assert_eq!(code, 401);
    let with = Client {
        base: bare.base.clone(),
        token: Some(token.clone()),
    };
    let (code, list) = get_json(&with, "/api/v1/runs");
    assert_eq!(code, 200, "{list}");
    // opening the printed URL sets the cookie the page's requests carry
    let (code, text) = raw(
        &bare,
        &format!("GET /?token={token} HTTP/1.1\r\nHost: {{ADDR}}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(code, 200);
    assert!(
        text.contains(&format!(
            "stratum_ui_token={token}; HttpOnly; SameSite=Strict"
        )),
        "{text}"
    );
    let (code, _) = raw(
        &bare,
        &format!(
            "GET /api/v1/gates HTTP/1.1\r\nHost: {{ADDR}}\r\nCookie: stratum_ui_token={token}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(code, 200);
    // a token from the environment is used as given
    let s2 = serve(
        &home,
        "0.0.0.0:0",
        &[("STRATUM_UI_TOKEN", "a-fixed-token-for-tests")],
    );
    assert_eq!(s2.token.as_deref(), Some("a-fixed-token-for-tests"));
    let s3 = {
        let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
            .args(["ui", "--listen", "0.0.0.0:0"])
            .env("STRATUM_HOME", &home)
            .env("STRATUM_UI_TOKEN", "short")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(s3.0, Some(2), "{}", s3.1);
    assert!(
        s3.1.contains("STRATUM_UI_TOKEN must be at least 16 characters"),
        "{}",
        s3.1
    );
}

fn playwright() -> bool {
    Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The pages in headless Chromium: open the runs page, open the run,
/// approve its gate with a note and a choice, watch it complete live as
/// `stratumc run --resume` drives it; then a run an MCP client starts and
/// finishes through `stratumc mcp` shows up and moves on live. The screenshots are kept in the
/// scratch directory (`ui-browser-*`) for a person to look at.
#[test]
fn the_pages_work_in_chromium() {
    let Some(browser) = support::chromium() else {
        return;
    };
    if !playwright() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but the Python package playwright is missing (scripts/test.sh installs it)"
        );
        eprintln!("skipped: the Python package playwright is not installed");
        return;
    }
    let (dir, home, id) = paused_run("browser");
    let s = serve(&home, "127.0.0.1:0", &[]);
    let resume = json!([
        "env",
        format!("STRATUM_HOME={}", home.display()),
        env!("CARGO_BIN_EXE_stratumc"),
        "run",
        "--resume",
        id,
        "--agent",
        ECHO,
    ]);
    let shots = dir.join("shots");
    std::fs::create_dir_all(&shots).unwrap();
    let out = Command::new("python3")
        .arg(support::root().join("cli/tests/scripts/ui_browser.py"))
        .arg(&s.base)
        .arg(&id)
        .arg(&shots)
        .arg(&browser)
        .arg(resume.to_string())
        .arg(env!("CARGO_BIN_EXE_stratumc"))
        .env("STRATUM_HOME", &home)
        .current_dir(&dir)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser session failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert!(
        seen["runs_row"].as_str().unwrap().contains("review"),
        "{seen}"
    );
    assert!(seen["graph_width"].as_u64().unwrap() > 100, "{seen}");
    assert_eq!(seen["status_before"], "running");
    assert!(
        seen["decision"]
            .as_str()
            .unwrap()
            .contains("recorded: approve (ship)"),
        "{seen}"
    );
    assert_eq!(seen["status_after"], "completed");
    assert_eq!(seen["timeline_has_decision"], 1);
    assert!(
        seen["output"].as_str().unwrap().contains("Publish ship"),
        "{seen}"
    );
    assert_eq!(seen["mcp_before"], "running");
    assert_eq!(seen["mcp_after"], "completed");
    assert!(
        seen["mcp_output"]
            .as_str()
            .unwrap()
            .contains("from the MCP client"),
        "{seen}"
    );
    assert!(seen["violations"].as_u64().unwrap() >= 1, "{seen}");
    assert!(
        seen["violation_text"].as_str().unwrap().contains("text"),
        "{seen}"
    );
    assert_eq!(seen["errors"], json!([]), "no script errors on the pages");
    for shot in [
        "runs.png",
        "run-waiting.png",
        "run-completed.png",
        "mcp-run-completed.png",
    ] {
        let size = std::fs::metadata(shots.join(shot)).map_or(0, |m| m.len());
        assert!(size > 10_000, "{shot}: {size} bytes");
    }
}

/// A run's artifacts are shown with their status now: `ok` while the file
/// is as recorded, `changed` once it was edited (the same re-hash as
/// `stratumc verify`).
#[test]
fn a_runs_artifacts_are_verified_as_stratumc_verify_does() {
    const SPEC: &str = r#"version: 1
contracts:
  Report:
    title: string
flows:
  entry: main
  main:
    input: {}
    output:
      from: "${write.output}"
      contract: Report
    steps:
      - id: write
        do: "Write the report"
        out: Report
        artifacts: ["out/report.md"]
"#;
    const AGENT: &str = r#"mkdir -p out && printf 'the report' > out/report.md && printf '{"output": {"title": "done"}}'"#;
    let dir = support::scratch("ui", "verify");
    let home = dir.join("home");
    std::fs::write(dir.join("report.stratum.yaml"), SPEC).unwrap();
    let (code, stdout, stderr) = support::stratumc_in(
        &dir,
        Some(&home),
        &[
            "run",
            "report.stratum.yaml",
            "--agent",
            AGENT,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let id = serde_json::from_str::<Value>(&stdout).unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let s = serve(&home, "127.0.0.1:0", &[]);
    let (_, run) = get_json(&s, &format!("/api/v1/runs/{id}"));
    assert_eq!(run["verify"]["ok"], true, "{}", run["verify"]);
    assert_eq!(run["verify"]["files"][0]["status"], "ok");
    std::fs::write(dir.join("out/report.md"), "edited").unwrap();
    let (_, run) = get_json(&s, &format!("/api/v1/runs/{id}"));
    assert_eq!(
        run["verify"]["files"][0]["status"], "changed",
        "{}",
        run["verify"]
    );
    // the same document as the CLI's
    let (code, cli, _) =
        support::stratumc_in(&dir, Some(&home), &["verify", &id, "--format", "json"]);
    assert_eq!(code, 1);
    assert_eq!(serde_json::from_str::<Value>(&cli).unwrap(), run["verify"]);
}

/// A fanout with two stages and a sub-flow paused at its own gate.
const NESTED: &str = r#"version: 1
contracts:
  Work:
    result: string
flows:
  entry: main
  main:
    input:
      items: string[]
    output:
      from: "${child.output}"
      contract: Work
    steps:
      - id: fan
        fanout:
          over: "${input.items}"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          steps:
            - do: "Look at ${item}"
              out: Work
            - do: "Fix ${item}"
              out: Work
      - id: child
        after: [fan]
        run: sub
        with:
          text: "${input.items}"
  sub:
    input:
      text: string[]
    output:
      from: "${inner.output}"
      contract: Work
    max_rounds: 2
    steps:
      - id: inner
        do: "Work on ${input.text}"
        out: Work
      - id: check
        after: [inner]
        gate:
          on_approve: null
          on_revise: inner
          on_kill: null
"#;

#[test]
fn the_graph_draws_fanout_stages_and_sub_flow_steps_by_status() {
    let dir = support::scratch("ui", "nested");
    let home = dir.join("home");
    std::fs::write(dir.join("nested.stratum.yaml"), NESTED).unwrap();
    let (code, stdout, stderr) = support::stratumc_in(
        &dir,
        Some(&home),
        &[
            "run",
            "nested.stratum.yaml",
            "--inputs",
            r#"{"items": ["a", "b"]}"#,
            "--agent",
            ECHO,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1, "paused at the sub-flow's gate: {stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let id = doc["runId"].as_str().unwrap();
    let s = serve(&home, "127.0.0.1:0", &[]);
    let (code, svg) = get(&s, &format!("/api/v1/runs/{id}/graph.svg"));
    assert_eq!(code, 200);
    for (step, status) in [
        ("fan", "succeeded"),
        ("child", "running"),
        ("child/inner", "succeeded"),
        ("child/check", "waiting_gate"),
    ] {
        assert!(
            svg.contains(&format!(r#"data-step="{step}" data-status="{status}""#)),
            "{step} {status}: {svg}"
        );
    }
    // the fanout and the run are boxes around what they hold
    assert!(
        svg.contains(r#"<g class="step group" data-step="fan""#),
        "{svg}"
    );
    assert!(svg.contains(r#"data-step="fan#1""#) && svg.contains(r#"data-step="fan#2""#));
    assert!(svg.contains("2/2 items"), "{svg}");
    assert!(svg.contains("run child → flow sub"), "{svg}");
    // the sub-flow's revise arc is drawn inside it
    assert_eq!(svg.matches("class=\"edge revise\"").count(), 1, "{svg}");
    let _ = std::fs::remove_dir_all(&dir);
}
