//! The tool layer without a transport: `StratumServer::dispatch` on an
//! in-memory store, for fast checks of request validation and replies. The
//! real client tests are `e2e.py` (run from `cli/tests/mcp.rs`).

use serde_json::{Value, json};
use stratum_mcp::StratumServer;
use stratum_mcp::reply::Reply;
use stratum_mcp::tools;
use stratum_vm::engine::Engine;
use stratum_vm::store::MemoryStore;

const SPEC: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${b.output}\", contract: R}
    steps:
      - id: a
        do: \"a\"
        out: R
      - id: b
        after: [a]
        do: \"b\"
        out: R
";

fn server() -> StratumServer {
    StratumServer::new(Engine::new(Box::new(MemoryStore::new())))
}

fn call(s: &StratumServer, tool: &str, args: Value) -> Reply {
    let raw = args.as_object().cloned().unwrap_or_default();
    let (fields, f): (&[stratum_mcp::args::Field], tools::Call) = match tool {
        "plan" => (tools::plan::FIELDS, tools::plan::call),
        "step_done" => (tools::step_done::FIELDS, tools::step_done::call),
        "validate" => (tools::validate::FIELDS, tools::validate::call),
        "audit" => (tools::audit::FIELDS, tools::audit::call),
        "guard_register" => (tools::guard::register::FIELDS, tools::guard::register::call),
        "guard_transition" => (
            tools::guard::transition::FIELDS,
            tools::guard::transition::call,
        ),
        "guard_history" => (tools::guard::history::FIELDS, tools::guard::history::call),
        "guard_upgrade" => (tools::guard::upgrade::FIELDS, tools::guard::upgrade::call),
        other => panic!("no tool {other}"),
    };
    s.dispatch(tool, fields, raw, f)
}

fn ok(r: Reply) -> Value {
    match r {
        Reply::Ok(v) => v,
        Reply::Err(e) => panic!("unexpected refusal: {e}"),
    }
}

fn err(r: Reply) -> Value {
    match r {
        Reply::Err(e) => e,
        Reply::Ok(v) => panic!("unexpected success: {v}"),
    }
}

#[test]
fn a_flow_runs_through_the_tools() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": SPEC})));
    let run = env["runId"].as_str().unwrap().to_string();
    let token = env["ready"][0]["dispatchToken"]
        .as_str()
        .unwrap()
        .to_string();
    let e = err(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "a", "dispatchToken": "nope", "result": {"value": "x"}}),
    ));
    assert_eq!(e["error_type"], "stale_token");
    let env = ok(call(
        &s,
        "step_done",
        json!({"flow_id": run, "step_id": "a", "dispatchToken": token, "result": {"value": "x"}}),
    ));
    assert_eq!(env["ready"][0]["id"], "b");
    let token = env["ready"][0]["dispatchToken"]
        .as_str()
        .unwrap()
        .to_string();
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "b", "dispatchToken": token, "result": {"output": {"value": "y"}}}),
    ));
    assert_eq!(env["status"], "completed");
    assert_eq!(env["output"], json!({"value": "y"}));
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    assert_eq!(audit["events"][0]["type"], "planned");
}

#[test]
fn requests_are_validated_before_any_work() {
    let s = server();
    let e = err(call(&s, "plan", json!({"spec": SPEC, "policy_bundle": {}})));
    assert_eq!(e["error_type"], "invalid_request");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("accepted fields: `spec`, `flow`, `input` (or `inputs`), `workspaceRoot`")
    );
    let e = err(call(&s, "step_done", json!({"runId": "r"})));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("missing required fields")
    );
    let e = err(call(&s, "plan", json!({"spec": "version: 2\n"})));
    assert_eq!(e["error_type"], "spec_validation_failed");
    assert!(e["diagnostics"].as_array().is_some_and(|d| !d.is_empty()));
}

#[test]
fn validate_renders_like_check() {
    let s = server();
    // `bb` has one nearest step (`b`): with a tie the front end's suggestion
    // depends on hash order (a separate front-end issue)
    let text = SPEC.replace("${b.output}", "${bb.output}");
    let v = ok(call(&s, "validate", json!({"spec": text})));
    let analysis = stratum_compiler::analyze(&text);
    let want: Vec<Value> = analysis
        .diagnostics
        .iter()
        .map(|d| {
            stratum_compiler::diagnostics::render::json_diagnostic(
                &analysis.text,
                &analysis.lines,
                d,
            )
        })
        .collect();
    assert_eq!(v["status"], "invalid");
    assert_eq!(v["diagnostics"], Value::Array(want));
}

#[test]
fn audit_carries_the_manifest_of_a_steps_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("report.md"), "the report").unwrap();
    let spec = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: R}
    steps:
      - id: a
        do: \"a\"
        out: R
        artifacts: [\"report.md\"]
";
    let s = server();
    let root = dir.path().display().to_string();
    let env = ok(call(
        &s,
        "plan",
        json!({"spec": spec, "workspaceRoot": root}),
    ));
    let run = env["runId"].as_str().unwrap().to_string();
    let token = env["ready"][0]["dispatchToken"]
        .as_str()
        .unwrap()
        .to_string();
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "a", "dispatchToken": token, "result": {"value": "x"}}),
    ));
    assert_eq!(env["status"], "completed", "{env}");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    let m = &audit["manifests"][0];
    assert_eq!(m["step"], "a");
    assert_eq!(m["files"][0]["path"], "report.md");
    assert_eq!(
        m["files"][0]["sha256"],
        "14e4cce86788499d03144f70ab24ca83d1abe97d55153c71ee1df55c5296c1f9"
    );
    assert!(
        audit["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "artifacts_recorded" && e["detail"]["digest"] == m["digest"])
    );
}

#[test]
fn audit_carries_the_receipts_of_exec_checks_and_evaluate_steps() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stratum.toml"),
        "[commands.made]\nargv = [\"test\", \"-f\"]\n[commands.triage]\nargv = [\"cat\"]\n",
    )
    .unwrap();
    let spec = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${a.output}\", contract: R}
    steps:
      - id: triage
        evaluate: {command: triage, timeout_ms: 5000, in: '{\"status\": \"closed\", \"children\": [], \"reason\": \"ok\"}'}
      - id: a
        after: [triage]
        do: \"write report.md\"
        out: R
        ensure:
          - exec: {run: made, args: [\"report.md\"]}
";
    let s = server();
    let root = dir.path().display().to_string();
    let env = ok(call(
        &s,
        "plan",
        json!({"spec": spec, "workspaceRoot": root}),
    ));
    let run = env["runId"].as_str().unwrap().to_string();
    // the engine ran the evaluate step itself; the agent sees which command checks it
    let entry = &env["ready"][0];
    assert_eq!(entry["id"], "a", "{env}");
    assert_eq!(
        entry["ensure"][0]["exec"],
        json!({"run": "made", "args": ["report.md"], "expect_exit": 0})
    );
    let token = entry["dispatchToken"].as_str().unwrap().to_string();
    // report.md is missing: the check fails with its receipt, the step is retried
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "a", "dispatchToken": token, "result": {"value": "x"}}),
    ));
    let entry = &env["ready"][0];
    let violation = &entry["previousFailure"]["violations"][0];
    assert_eq!(violation["kind"], "exec", "{env}");
    assert_eq!(violation["receipt"]["exit"], 1);
    std::fs::write(dir.path().join("report.md"), "the report").unwrap();
    let token = entry["dispatchToken"].as_str().unwrap().to_string();
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "a", "dispatchToken": token, "result": {"value": "y"}}),
    ));
    assert_eq!(env["status"], "completed", "{env}");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    let ran: Vec<(&str, &str, i64)> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "command_ran")
        .map(|e| {
            (
                e["stepId"].as_str().unwrap_or("?"),
                e["detail"]["command"].as_str().unwrap_or("?"),
                e["detail"]["exit"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        ran,
        [("triage", "triage", 0), ("a", "made", 1), ("a", "made", 0)],
        "{audit}"
    );
}

/// X9: a route back re-enters its target, and the ready entry the MCP
/// client gets carries `previousRoute {from, note, output}`; an `on_fail`
/// `goto` carries the failure there too.
#[test]
fn ready_entries_carry_previous_route() {
    const ROUTED: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${b.output}\", contract: R}
    steps:
      - id: a
        do: \"a\"
        out: R
      - id: b
        after: [a]
        do: \"b\"
        out: R
        attempts: 1
        route:
          - {when: \"result.value == 'again'\", goto: a, max: 1, note: \"b said ${b.output.value}\"}
        on_fail: {goto: a, max: 1, note: \"b failed\"}
";
    let s = server();
    let token = |env: &Value| {
        env["ready"][0]["dispatchToken"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let env = ok(call(&s, "plan", json!({"spec": ROUTED})));
    let run = env["runId"].as_str().unwrap().to_string();
    let step = |id: &str, tok: String, result: Value| {
        ok(call(
            &s,
            "step_done",
            json!({"runId": run, "stepId": id, "dispatchToken": tok, "result": result}),
        ))
    };
    let env = step("a", token(&env), json!({"value": "x"}));
    let env = step("b", token(&env), json!({"value": "again"}));
    assert_eq!(env["ready"][0]["id"], "a");
    assert_eq!(
        env["ready"][0]["previousRoute"],
        json!({"from": "b", "note": "b said again", "output": {"value": "again"}})
    );
    let env = step("a", token(&env), json!({"value": "y"}));
    assert!(env["ready"][0].get("previousRoute").is_none(), "{env}");
    // a failed report: the on_fail goto takes it back to `a`
    let env = step("b", token(&env), json!({"value": 3}));
    assert_eq!(env["ready"][0]["id"], "a", "{env}");
    let back = &env["ready"][0]["previousRoute"];
    assert_eq!(back["from"], "b");
    assert_eq!(back["note"], "b failed");
    assert_eq!(back["output"], Value::Null);
    assert!(back["failure"]["reason"].is_string(), "{back}");
}

/// X11 through the MCP server on a real git repository: the ready entry
/// carries the rendered scope; a report whose dispatch edited a file
/// outside it is refused with a `scope_violation` naming the path (put
/// back), the retry's entry says why, and the accepted patch is in
/// `stratum_audit`'s `patches` with its hashes.
#[test]
fn scope_violations_reach_the_ready_entry_and_patches_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(root)
            .args(["-c", "user.email=t@example.org", "-c", "user.name=t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "readme\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    let spec = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${patch.output}\", contract: R}
    steps:
      - id: patch
        do: \"fix src/lib.rs\"
        out: R
        attempts: 2
        scope: {files: [\"src/**\"]}
        ensure:
          - expr: \"len(changes()) == 1\"
";
    let s = server();
    let env = ok(call(
        &s,
        "plan",
        json!({"spec": spec, "workspaceRoot": root.display().to_string()}),
    ));
    let run = env["runId"].as_str().unwrap().to_string();
    let entry = &env["ready"][0];
    assert_eq!(entry["scope"]["files"], json!(["src/**"]), "{env}");
    // the agent edits in scope and, wrongly, README.md
    std::fs::write(root.join("src/lib.rs"), "fn a() { fixed }\n").unwrap();
    std::fs::write(root.join("README.md"), "changed\n").unwrap();
    let token = entry["dispatchToken"].as_str().unwrap().to_string();
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "patch", "dispatchToken": token, "result": {"value": "x"}}),
    ));
    let entry = &env["ready"][0];
    let violation = &entry["previousFailure"]["violations"][0];
    assert_eq!(violation["kind"], "scope_violation", "{env}");
    assert_eq!(violation["path"], "README.md", "{env}");
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "readme\n",
        "the stray edit was put back"
    );
    // the retry changes the file again (`changes()` is this dispatch's)
    std::fs::write(root.join("src/lib.rs"), "fn a() { fixed again }\n").unwrap();
    let token = entry["dispatchToken"].as_str().unwrap().to_string();
    let env = ok(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "patch", "dispatchToken": token, "result": {"value": "y"}}),
    ));
    assert_eq!(env["status"], "completed", "{env}");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    let patches = audit["patches"].as_array().unwrap();
    assert_eq!(patches.len(), 1, "{audit}");
    assert_eq!(patches[0]["files"][0]["path"], "src/lib.rs");
    assert!(
        patches[0]["files"][0]["after"]
            .as_str()
            .is_some_and(|h| h.len() == 64)
    );
    assert!(
        audit["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "scope_restored"),
        "{audit}"
    );
}

#[test]
fn guard_tools_take_both_name_styles_and_refuse_unknown_fields() {
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let policy = json!({
        "resource_id": "t:1",
        "graph": {"open": ["closed"]},
        "edge_predicates": {"open->closed": [{"id": "f", "type": "deterministic", "statement": "server_file_exists('a.txt')"}]},
        "initial": "open",
        "terminal": ["closed"],
        "workspace_root": dir.path().display().to_string()
    });
    let r = ok(call(&s, "guard_register", policy.clone()));
    assert_eq!(r["status"], "registered");
    let mut camel = policy.clone();
    let m = camel.as_object_mut().unwrap();
    let id = m.remove("resource_id").unwrap();
    m.insert("resourceId".into(), id);
    assert_eq!(ok(call(&s, "guard_register", camel))["status"], "unchanged");
    let e = err(call(
        &s,
        "guard_register",
        json!({"resourceId": "t:2", "graph": {}, "initial": "x", "workspaceRoot": "/", "force": true}),
    ));
    assert_eq!(e["error_type"], "invalid_request");
    let e = err(call(
        &s,
        "guard_register",
        json!({"resourceId": "t:2", "graph": {"a": "b"}, "initial": "a", "workspaceRoot": "/"}),
    ));
    assert_eq!(e["error_type"], "invalid_policy", "{e}");
    let t = ok(call(
        &s,
        "guard_transition",
        json!({"resourceId": "t:1", "fromState": "open", "toState": "closed", "resolvedBy": "agent"}),
    ));
    assert_eq!(t["status"], "applied", "{t}");
    assert_eq!(t["verdict"]["predicates"][0]["evidence"]["kind"], "file");
    let e = err(call(
        &s,
        "guard_transition",
        json!({"resourceId": "t:9", "fromState": "a", "toState": "b", "resolvedBy": "x"}),
    ));
    assert_eq!(e["error_type"], "unknown_resource");
    let h = ok(call(&s, "guard_history", json!({"resourceId": "t:1"})));
    assert_eq!(
        (
            h["current_state"].clone(),
            h["ledger"].as_array().unwrap().len()
        ),
        (json!("closed"), 2)
    );
    let e = err(call(
        &s,
        "guard_upgrade",
        json!({"resourceId": "t:1", "newGraph": {"open": [], "closed": []}, "newTerminal": ["closed"], "rationale": "x"}),
    ));
    assert_eq!(e["error_type"], "incompatible_policy_upgrade", "{e}");
}
