//! STRAT-GUARD through the built binary: `stratumc mcp` driven over stdio
//! (JSON-RPC lines), `stratumc guard history/verify/authorize/descriptors`,
//! tamper detection on the SQLite file, judged edges with the loopback fake
//! judge, and signed operations through a copy of the binary installed in
//! a temporary prefix with a trust root of its own.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_stratumc"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `stratumc mcp` on a store, spoken to in JSON-RPC lines.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl Mcp {
    fn start(bin: &Path, home: &Path, env: &[(&str, &str)]) -> Mcp {
        let mut cmd = Command::new(bin);
        cmd.arg("mcp")
            .env("STRATUM_HOME", home)
            .env_remove("STRATUM_GUARD_UPGRADE_DESCRIPTORS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("stratumc mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp {
            child,
            stdin,
            stdout,
            id: 0,
        };
        m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "guard-test", "version": "0"}}),
        );
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the server closed"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// A tool call: (isError, structuredContent).
    fn call(&mut self, tool: &str, args: Value) -> (bool, Value) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let result = &r["result"];
        (
            result["isError"].as_bool().unwrap_or(false),
            result["structuredContent"].clone(),
        )
    }

    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let (err, v) = self.call(tool, args);
        assert!(!err, "{tool} refused: {v}");
        v
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A workspace: a git repository with one commit; `toml` as its stratum.toml.
fn workspace(dir: &Path, toml: &str) -> (PathBuf, String) {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("stratum.toml"), toml).unwrap();
    std::fs::write(root.join("NOTES.md"), "notes\n").unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "NOTES.md"]);
    git(&root, &["commit", "-q", "-m", "first"]);
    let sha = git(&root, &["rev-parse", "HEAD"]);
    (root, sha)
}

/// The README's feature tracker.
fn tracker(root: &Path, sha: &str) -> Value {
    json!({
        "resourceId": "feat:1",
        "graph": {"planned": ["in_progress"], "in_progress": ["review"], "review": ["done", "in_progress"]},
        "edgePredicates": {
            "in_progress->review": [{"id": "committed", "type": "deterministic", "statement": format!("git_commit_exists('{sha}')")}],
            "review->done": [{"id": "tests", "type": "deterministic", "statement": "command_exit_zero(['true'])"}]
        },
        "initial": "planned",
        "terminal": ["done"],
        "stakes": {"review->done": "paranoid"},
        "workspaceRoot": root.display().to_string()
    })
}

fn stratumc(bin: &Path, home: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(bin)
        .args(args)
        .env("STRATUM_HOME", home)
        .env_remove("STRATUM_GUARD_UPGRADE_DESCRIPTORS")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let (Some(text), Some(mut s)) = (stdin, child.stdin.take()) {
        s.write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn transition(m: &mut Mcp, from: &str, to: &str) -> Value {
    m.ok(
        "stratum_guard_transition",
        json!({"resource_id": "feat:1", "from_state": from, "to_state": to, "resolved_by": "agent"}),
    )
}

/// A store holding the tracker moved to `review` (ledger: registered,
/// planned->in_progress, a refused review->done, in_progress->review... ).
fn tracked_home(dir: &Path) -> PathBuf {
    let (root, sha) = workspace(dir, "[commands.ok]\nargv = [\"true\"]\n");
    let home = dir.join("home");
    let mut m = Mcp::start(&binary(), &home, &[]);
    let r = m.ok("stratum_guard_register", tracker(&root, &sha));
    assert_eq!(r["status"], "registered");
    assert_eq!(
        transition(&mut m, "planned", "in_progress")["status"],
        "applied"
    );
    assert_eq!(transition(&mut m, "review", "done")["status"], "refused");
    assert_eq!(
        transition(&mut m, "in_progress", "review")["status"],
        "applied"
    );
    home
}

fn copy_home(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn history_and_verify_read_the_ledger_and_every_tampering_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let home = tracked_home(dir.path());
    let (code, out, err) = stratumc(&binary(), &home, &["guard", "verify", "feat:1"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("feat:1: ok (4 entries)"), "{out}");
    let (code, out, _) = stratumc(
        &binary(),
        &home,
        &["guard", "history", "feat:1", "--format", "json"],
        None,
    );
    assert_eq!(code, 0);
    let h: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h["current_state"], "review");
    let ledger = h["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 4);
    assert_eq!(ledger[2]["refusal"]["code"], "wrong_state");
    assert_eq!(ledger[3]["prev"], ledger[2]["hash"]);
    assert_eq!(h["ledger_head"], ledger[3]["hash"]);
    let (code, out, _) = stratumc(&binary(), &home, &["guard", "history", "feat:1"], None);
    assert_eq!(code, 0);
    assert!(out.starts_with("feat:1: review (graph version 1"), "{out}");
    let (code, _, err) = stratumc(&binary(), &home, &["guard", "history", "feat:nope"], None);
    assert_eq!(code, 2);
    assert!(err.contains("no guarded resource `feat:nope`"), "{err}");

    let cases: [(&str, &str, &str); 6] = [
        (
            "insert",
            "INSERT INTO guard_ledger (resource_id, seq, hash, idempotency_key, json)
                 SELECT resource_id, 4, hash, NULL, json FROM guard_ledger WHERE seq = 3",
            "BROKEN at entry 4 of 5: it is stored at position 4 but says it is entry 3",
        ),
        (
            "edit",
            "UPDATE guard_ledger SET json = replace(json, '\"resolved_by\":\"agent\"', '\"resolved_by\":\"human\"') WHERE seq = 2",
            "BROKEN at entry 2 of 4: its content hashes to",
        ),
        (
            "delete",
            "DELETE FROM guard_ledger WHERE seq = 1",
            "BROKEN at entry 1 of 3",
        ),
        (
            "reorder",
            "UPDATE guard_ledger SET seq = -1 WHERE seq = 1; UPDATE guard_ledger SET seq = 1 WHERE seq = 2; UPDATE guard_ledger SET seq = 2 WHERE seq = -1",
            "BROKEN at entry 1 of 4",
        ),
        (
            "state",
            "UPDATE guards SET state = 'done'",
            "BROKEN at entry 4 of 4: the resource record says the current state is done, but the ledger says review",
        ),
        (
            "truncate",
            "DELETE FROM guard_ledger WHERE seq = 3",
            "BROKEN at entry 3 of 3: the resource record says the ledger length is 4",
        ),
    ];
    for (name, sql, needle) in cases {
        let copy = dir.path().join(format!("home-{name}"));
        copy_home(&home, &copy);
        let conn = rusqlite::Connection::open(copy.join("stratum.db")).unwrap();
        conn.execute_batch(sql).unwrap();
        drop(conn);
        let (code, out, err) = stratumc(&binary(), &copy, &["guard", "verify", "feat:1"], None);
        assert_eq!(code, 1, "{name}: {out}{err}");
        assert!(out.contains(needle), "{name}: {needle:?} not in {out}");
        let (code, out, _) = stratumc(
            &binary(),
            &copy,
            &["guard", "verify", "--all", "--format", "json"],
            None,
        );
        assert_eq!(code, 1, "{name}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ok"], false);
        // a broken ledger refuses history and every write
        let (code, _, err) = stratumc(&binary(), &copy, &["guard", "history", "feat:1"], None);
        assert_eq!(code, 2, "{name}");
        assert!(err.contains("ledger_broken"), "{name}: {err}");
        let mut m = Mcp::start(&binary(), &copy, &[]);
        let (refused, v) = m.call(
            "stratum_guard_transition",
            json!({"resourceId": "feat:1", "fromState": "review", "toState": "done", "resolvedBy": "agent"}),
        );
        assert!(refused && v["error_type"] == "ledger_broken", "{name}: {v}");
        // and `store check` counts a broken chain as damage
        let (code, out, err) = stratumc(&binary(), &copy, &["store", "check"], None);
        assert_eq!(code, 1, "{name}: {out}{err}");
        assert!(
            out.contains("damaged: the ledger of guarded resource `feat:1`"),
            "{name}: {out}"
        );
    }
    let (code, out, err) = stratumc(&binary(), &home, &["store", "check"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("and 1 guard ledgers checked"), "{out}");
}

const ONE_STEP: &str = r#"version: 1
contracts:
  Out:
    result: string
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${work.output}"
      contract: Out
    steps:
      - id: work
        do: "Do ${input.text}"
        out: Out
"#;

#[test]
fn store_migrate_copies_runs_and_ledgers_verifies_them_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let home = tracked_home(dir.path());
    let spec = dir.path().join("one.stratum.yaml");
    std::fs::write(&spec, ONE_STEP).unwrap();
    let (code, out, err) = stratumc(
        &binary(),
        &home,
        &[
            "run",
            spec.to_str().unwrap(),
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            r#"echo '{"output": {"result": "done"}}'"#,
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let run = serde_json::from_str::<Value>(&out).unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_string();

    let dest_home = dir.path().join("dest");
    std::fs::create_dir_all(&dest_home).unwrap();
    let dest = dest_home.join("stratum.db");
    let to = dest.to_str().unwrap();
    let migrate = |format: &str| {
        stratumc(
            &binary(),
            &home,
            &["store", "migrate", "--to", to, "--format", format],
            None,
        )
    };
    let (code, out, err) = migrate("json");
    assert_eq!(code, 0, "{out}{err}");
    let first: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(first["runsCopied"], 1, "{first}");
    assert_eq!(first["guardsCopied"], 1);
    assert_eq!(first["ledgerRows"], 4);
    assert_eq!(first["verified"], true);
    assert_eq!(first["sourceDigest"], first["destinationDigest"]);
    assert!(first["events"].as_u64().unwrap() > 2, "{first}");

    // a second copy writes nothing and verifies the same digest
    let (code, out, _) = migrate("human");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 runs written, 1 already there"), "{out}");
    assert!(
        out.contains("verified: the destination holds every record"),
        "{out}"
    );

    // the copy is a working store: the run, its audit and the ledger read back
    let (code, out, err) = stratumc(&binary(), &dest_home, &["query", "flow", &run], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("completed"), "{out}");
    let (code, out, _) = stratumc(&binary(), &dest_home, &["guard", "verify", "feat:1"], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("feat:1: ok (4 entries)"), "{out}");
    let (code, out, _) = stratumc(&binary(), &dest_home, &["store", "check"], None);
    assert_eq!(code, 0, "{out}");

    // a record changed in the destination is named, not overwritten
    let conn = rusqlite::Connection::open(&dest).unwrap();
    conn.execute_batch("UPDATE guards SET state = 'done'")
        .unwrap();
    drop(conn);
    let (code, out, _) = migrate("human");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("differs: guard `feat:1` is in the destination with other content"),
        "{out}"
    );
    assert!(
        out.contains("failed: the destination does not match"),
        "{out}"
    );

    // the source itself, a directory and a missing source are refused
    let src = home.join("stratum.db");
    let (code, _, err) = stratumc(
        &binary(),
        &home,
        &["store", "migrate", "--to", src.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("is the source store itself"), "{err}");
    let (code, _, err) = stratumc(
        &binary(),
        &home,
        &["store", "migrate", "--to", dest_home.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("is a directory; name the database file"),
        "{err}"
    );
}

#[test]
fn authorize_prints_the_exact_payload_with_the_ledger_head() {
    let dir = tempfile::tempdir().unwrap();
    let home = tracked_home(dir.path());
    let request = r#"{"kind":"override","resource_id":"feat:1","from_state":"review","to_state":"done","rationale":"CI is down"}"#;
    let (code, out, err) = stratumc(&binary(), &home, &["guard", "authorize"], Some(request));
    assert_eq!(code, 0, "{err}");
    let (_, h, _) = stratumc(
        &binary(),
        &home,
        &["guard", "history", "feat:1", "--format", "json"],
        None,
    );
    let head = serde_json::from_str::<Value>(&h).unwrap()["ledger_head"].clone();
    let expected = format!(
        "{{\"action\":\"override\",\"from_state\":\"review\",\"ledger_head\":{head},\"rationale\":\"CI is down\",\"resource_id\":\"feat:1\",\"to_state\":\"done\"}}"
    );
    assert_eq!(out, expected);
    assert!(err.contains("-n stratum-guard-override"), "{err}");
    let (code, _, err) = stratumc(
        &binary(),
        &home,
        &["guard", "authorize"],
        Some("{\"kind\":\"force\"}"),
    );
    assert_eq!(code, 2);
    assert!(err.contains("not an authorization request"), "{err}");
}

#[test]
fn deterministic_and_judged_edges_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("judge.log");
    let mut judge = Command::new("python3")
        .arg(repo().join("examples/agents/fake-judge.py"))
        .args(["0", "--reject", "1", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the fake judge");
    let mut line = String::new();
    BufReader::new(judge.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let toml = format!(
        "[judge]\nurl = \"http://127.0.0.1:{port}/v1\"\nmodel = \"fake\"\ntimeout_ms = 10000\n[commands.fail]\nargv = [\"false\"]\n[commands.ok]\nargv = [\"true\"]\n"
    );
    let (root, sha) = workspace(dir.path(), &toml);
    let home = dir.path().join("home");
    let mut m = Mcp::start(&binary(), &home, &[]);
    let mut p = tracker(&root, &sha);
    p["edgePredicates"]["planned->in_progress"] = json!([
        {"id": "notes", "type": "deterministic", "statement": "server_file_exists('NOTES.md')"},
        {"id": "scoped", "type": "judged", "statement": "the plan names the files it will touch"}
    ]);
    p["stakes"]["planned->in_progress"] = json!("cheap");
    p["edgePredicates"]["review->done"] =
        json!([{"id": "t", "type": "deterministic", "statement": "command_exit_zero(['false'])"}]);
    // snake_case names are accepted too
    let mut snake = serde_json::Map::new();
    for (k, v) in p.as_object().unwrap() {
        let k = match k.as_str() {
            "resourceId" => "resource_id",
            "edgePredicates" => "edge_predicates",
            "workspaceRoot" => "workspace_root",
            other => other,
        };
        snake.insert(k.to_owned(), v.clone());
    }
    assert_eq!(
        m.ok("stratum_guard_register", Value::Object(snake))["status"],
        "registered"
    );
    let args = json!({
        "resourceId": "feat:1", "fromState": "planned", "toState": "in_progress", "resolvedBy": "agent",
        "artifacts": {"plan": "touch src/a.rs"}, "modifiedFiles": ["src/a.rs"], "idempotencyKey": "try-1"
    });
    // the judge says no the first time
    let r = m.ok("stratum_guard_transition", args.clone());
    assert_eq!(r["status"], "refused", "{r}");
    let preds = r["verdict"]["predicates"].as_array().unwrap();
    assert_eq!(
        (preds[0]["met"].clone(), preds[1]["met"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(preds[1]["evidence"]["kind"], "judge");
    assert_eq!(preds[1]["evidence"]["stakes"], "cheap");
    // the same key replays the refusal without asking the judge again
    let again = m.ok("stratum_guard_transition", args.clone());
    assert_eq!(
        (again["status"].clone(), again["ledger_ref"].clone()),
        (json!("replayed"), r["ledger_ref"].clone())
    );
    let mut fresh = args.clone();
    fresh["idempotencyKey"] = json!("try-2");
    let r = m.ok("stratum_guard_transition", fresh);
    assert_eq!(
        (r["status"].clone(), r["current_state"].clone()),
        (json!("applied"), json!("in_progress"))
    );
    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["stakes"], "cheap");
    assert_eq!(
        calls[0]["statement"],
        "the plan names the files it will touch"
    );
    // git_commit_exists on the real commit, then a command that fails
    let r = m.ok("stratum_guard_transition", json!({"resourceId": "feat:1", "fromState": "in_progress", "toState": "review", "resolvedBy": "agent"}));
    assert_eq!(r["status"], "applied", "{r}");
    let r = m.ok("stratum_guard_transition", json!({"resourceId": "feat:1", "fromState": "review", "toState": "done", "resolvedBy": "agent"}));
    assert_eq!(r["status"], "refused");
    assert_eq!(r["verdict"]["predicates"][0]["evidence"]["exit"], 1);
    let h = m.ok("stratum_guard_history", json!({"resource_id": "feat:1"}));
    assert_eq!(h["ledger"].as_array().unwrap().len(), 5);
    // requests are validated like the flow tools'
    let (refused, v) = m.call(
        "stratum_guard_history",
        json!({"resourceId": "feat:1", "epoch": 1}),
    );
    assert!(refused && v["error_type"] == "invalid_request", "{v}");
    let (refused, v) = m.call(
        "stratum_guard_override",
        json!({
            "resourceId": "feat:1", "fromState": "review", "toState": "done", "resolvedBy": "human",
            "rationale": "x", "authorization": "-----BEGIN SSH SIGNATURE-----"
        }),
    );
    // the test binary has no trust root beside it
    assert!(
        refused && v["error_type"] == "signatures_unavailable",
        "{v}"
    );
    let _ = judge.kill();
    let _ = judge.wait();
}

/// `ssh-keygen -t ed25519` in `dir`: (private key, public line).
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        key.clone(),
        std::fs::read_to_string(key.with_extension("pub"))
            .unwrap()
            .trim()
            .to_owned(),
    )
}

fn sign_file(key: &Path, namespace: &str, file: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut sig = file.as_os_str().to_owned();
    sig.push(".sig");
    std::fs::read_to_string(PathBuf::from(sig)).unwrap()
}

/// A copy of the binary in `prefix/bin` with `prefix/share/stratumc/guard-signers.allowed`.
fn install(prefix: &Path, allowed: &str) -> PathBuf {
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("share/stratumc")).unwrap();
    let bin = prefix.join("bin/stratumc");
    std::fs::copy(binary(), &bin).unwrap();
    std::fs::write(prefix.join("share/stratumc/guard-signers.allowed"), allowed).unwrap();
    bin
}

#[test]
fn signed_operations_through_an_installed_binary_with_its_own_trust_root() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, alice_pub) = keygen(dir.path(), "alice");
    let (mallory, _) = keygen(dir.path(), "mallory");
    let prefix = dir.path().join("prefix");
    let bin = install(&prefix, &format!("alice@example.com {alice_pub}\n"));
    let home = dir.path().join("home");
    let (root, sha) = workspace(dir.path(), "[commands.ok]\nargv = [\"true\"]\n");

    // descriptors: the trust root beside the binary, a signed file verified
    let reg_policy = tracker(&root, &sha);
    let mut m = Mcp::start(&bin, &home, &[]);
    let reg = m.ok("stratum_guard_register", reg_policy.clone());
    drop(m);
    let mut to = reg_policy.clone();
    to.as_object_mut().unwrap().remove("resourceId");
    let to: Value = serde_json::from_str(
        &serde_json::to_string(&to)
            .unwrap()
            .replace("edgePredicates", "edge_predicates")
            .replace("workspaceRoot", "workspace_root"),
    )
    .unwrap();
    let mut to = to;
    to["graph"]["review"] = json!(["done"]);
    let desc = dir.path().join("upgrades.json");
    std::fs::write(&desc, json!([{"id": "no-rework", "rationale": "reviewed by the team", "from_checksum": reg["checksum"], "to_policy": to}]).to_string()).unwrap();
    let sig = sign_file(&alice, "stratum-guard-descriptors", &desc);
    std::fs::write(dir.path().join("upgrades.json.sig"), &sig).unwrap();
    let desc_env = desc.display().to_string();
    let out = Command::new(&bin)
        .args(["guard", "descriptors", "--format", "json"])
        .env("STRATUM_HOME", &home)
        .env("STRATUM_GUARD_UPGRADE_DESCRIPTORS", &desc_env)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected_root = prefix.join("bin/../share/stratumc/guard-signers.allowed");
    assert_eq!(
        v["trust_root"],
        json!(expected_root.display().to_string()),
        "{v}"
    );
    assert_eq!(v["descriptors"][0]["verified"], true, "{v}");
    assert_eq!(
        v["descriptors"][0]["signer"]["principal"],
        "alice@example.com"
    );
    assert_eq!(v["descriptors"][0]["descriptors"][0]["id"], "no-rework");
    // the default binary has no trust root: nothing verifies
    let out = Command::new(binary())
        .args(["guard", "descriptors", "--format", "json"])
        .env("STRATUM_HOME", &home)
        .env("STRATUM_GUARD_UPGRADE_DESCRIPTORS", &desc_env)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trust_root"], Value::Null, "{v}");
    assert_eq!(v["descriptors"][0]["verified"], false);

    // override: authorize, sign, apply; wrong namespace, wrong key, replay
    let mut m = Mcp::start(
        &bin,
        &home,
        &[("STRATUM_GUARD_UPGRADE_DESCRIPTORS", &desc_env)],
    );
    assert_eq!(
        transition(&mut m, "planned", "in_progress")["status"],
        "applied"
    );
    let request = r#"{"kind":"override","resource_id":"feat:1","from_state":"in_progress","to_state":"review","rationale":"pairing session"}"#;
    let (code, payload, err) = stratumc(&bin, &home, &["guard", "authorize"], Some(request));
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join("override.json");
    std::fs::write(&file, &payload).unwrap();
    let override_args = |auth: &str| {
        json!({"resourceId": "feat:1", "fromState": "in_progress", "toState": "review", "resolvedBy": "human",
               "rationale": "pairing session", "authorization": auth})
    };
    let wrong_ns = sign_file(&alice, "stratum-guard-migrate", &file);
    let (refused, v) = m.call("stratum_guard_override", override_args(&wrong_ns));
    assert!(
        refused && v["message"].as_str().unwrap().contains("namespace"),
        "{v}"
    );
    std::fs::remove_file(dir.path().join("override.json.sig")).unwrap();
    let wrong_key = sign_file(&mallory, "stratum-guard-override", &file);
    let (refused, v) = m.call("stratum_guard_override", override_args(&wrong_key));
    assert!(
        refused
            && v["message"]
                .as_str()
                .unwrap()
                .contains("not in the trust root"),
        "{v}"
    );
    std::fs::remove_file(dir.path().join("override.json.sig")).unwrap();
    let good = sign_file(&alice, "stratum-guard-override", &file);
    let r = m.ok("stratum_guard_override", override_args(&good));
    assert_eq!(r["current_state"], "review");
    assert_eq!(r["authorized_by"]["principal"], "alice@example.com");
    // the head moved: the same signature is no good any more
    let (refused, v) = m.call("stratum_guard_override", override_args(&good));
    assert!(refused && v["error_type"] == "invalid_request", "{v}");
    let h = m.ok("stratum_guard_history", json!({"resourceId": "feat:1"}));
    let last = h["ledger"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["kind"].clone(),
            last["authorized_by"]["principal"].clone()
        ),
        (json!("deviation"), json!("alice@example.com"))
    );

    // apply_upgrade: the signed descriptor, idempotent
    let r = m.ok(
        "stratum_guard_apply_upgrade",
        json!({"resourceId": "feat:1", "descriptorId": "no-rework"}),
    );
    assert_eq!(
        (r["status"].clone(), r["graph_version"].clone()),
        (json!("applied"), json!(2)),
        "{r}"
    );
    let r = m.ok(
        "stratum_guard_apply_upgrade",
        json!({"resource_id": "feat:1", "descriptor_id": "no-rework"}),
    );
    assert_eq!(r["status"], "unchanged");
    let (refused, v) = m.call(
        "stratum_guard_apply_upgrade",
        json!({"resourceId": "feat:1", "descriptorId": "nope"}),
    );
    assert!(refused, "{v}");

    // migrate: signed over the new policy's checksum at the current head
    let request = json!({"kind": "migrate", "resource_id": "feat:1", "rationale": "drop review",
        "new_graph": {"planned": ["in_progress"], "in_progress": ["review"], "review": ["done"]}, "new_terminal": ["done"]});
    let (code, payload, err) = stratumc(
        &bin,
        &home,
        &["guard", "authorize"],
        Some(&request.to_string()),
    );
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join("migrate.json");
    std::fs::write(&file, &payload).unwrap();
    let sig = sign_file(&alice, "stratum-guard-migrate", &file);
    let margs = json!({"resourceId": "feat:1", "newGraph": request["new_graph"], "newTerminal": ["done"],
        "rationale": "drop review", "authorization": sig});
    let r = m.ok("stratum_guard_migrate", margs.clone());
    assert_eq!(
        (r["status"].clone(), r["graph_version"].clone()),
        (json!("migrated"), json!(3)),
        "{r}"
    );
    let (refused, v) = m.call("stratum_guard_migrate", margs);
    assert!(refused && v["error_type"] == "authorization_refused", "{v}");
    drop(m);
    let (code, out, _) = stratumc(&bin, &home, &["guard", "verify", "--all"], None);
    assert_eq!(code, 0, "{out}");

    // an empty trust root beside the binary: signed operations are unavailable
    let empty = install(&dir.path().join("empty"), "# nobody\n");
    let mut m = Mcp::start(
        &empty,
        &home,
        &[("STRATUM_GUARD_UPGRADE_DESCRIPTORS", &desc_env)],
    );
    let (refused, v) = m.call(
        "stratum_guard_apply_upgrade",
        json!({"resourceId": "feat:1", "descriptorId": "no-rework"}),
    );
    assert!(
        refused && v["error_type"] == "signatures_unavailable",
        "{v}"
    );
}
