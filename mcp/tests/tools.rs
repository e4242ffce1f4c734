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
        "agent_run" => (tools::agent_run::FIELDS, tools::agent_run::call),
        "agent_poll" => (tools::agent_poll::FIELDS, tools::agent_poll::call),
        "cancel_agent_run" => (
            tools::cancel_agent_run::FIELDS,
            tools::cancel_agent_run::call,
        ),
        "flow_run_bg" => (tools::flow_run_bg::FIELDS, tools::flow_run_bg::call),
        "gate_resolve" => (tools::gate_resolve::FIELDS, tools::gate_resolve::call),
        "commit" => (tools::commit::FIELDS, tools::commit::call),
        "revert" => (tools::revert::FIELDS, tools::revert::call),
        "flow_cancel" => (tools::flow_cancel::FIELDS, tools::flow_cancel::call),
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

// ----- issue 16 §3: the shapes the manual and reference v1-runtime §2.3 promise -----

/// The dispatch token of ready entry `id` in an envelope.
fn token_of(env: &Value, id: &str) -> String {
    env["ready"]
        .as_array()
        .and_then(|r| r.iter().find(|e| e["id"] == id))
        .and_then(|e| e["dispatchToken"].as_str())
        .unwrap_or_else(|| panic!("{id} is not ready: {env}"))
        .to_string()
}

fn done(s: &StratumServer, env: &Value, id: &str, result: Value) -> Value {
    ok(call(
        s,
        "step_done",
        json!({"runId": env["runId"], "stepId": id, "dispatchToken": token_of(env, id), "result": result}),
    ))
}

#[test]
fn validate_answers_valid_and_the_errors_as_a_list() {
    let s = server();
    let v = ok(call(&s, "validate", json!({"spec": SPEC})));
    assert_eq!(
        (&v["status"], &v["valid"], &v["errorCount"]),
        (&json!("valid"), &json!(true), &json!(0))
    );
    assert_eq!(v["errors"], json!([]));
    let bad = SPEC.replace("${b.output}", "${bb.output}");
    let v = ok(call(&s, "validate", json!({"spec": bad})));
    assert_eq!(v["valid"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len() as u64, v["errorCount"].as_u64().unwrap());
    assert!(!errors.is_empty() && errors.iter().all(|d| d["severity"] == "error"));
    assert!(
        errors
            .iter()
            .all(|d| d["code"].as_str().is_some_and(|c| c.starts_with('S')))
    );
}

/// A gate with a revise, a sub-flow, a carry: every audit record of the
/// manual and the reference.
const AUDITED: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: \"${finish.output}\", contract: R}
    max_rounds: 2
    carry:
      last:
        initial: \"${build.output.value}\"
    steps:
      - id: build
        do: \"build\"
        out: R
      - id: review
        after: [build]
        gate: {on_approve: null, on_revise: build, on_kill: null}
      - id: wrap
        after: [review]
        run: child
        with: {name: \"${build.output.value}\"}
      - id: finish
        after: [wrap]
        do: \"finish ${wrap.output.value}\"
        out: R
  child:
    input: {name: string}
    output: {from: \"${digest.output}\", contract: R}
    steps:
      - id: digest
        do: \"digest ${input.name}\"
        out: R
";

#[test]
fn audit_has_the_manuals_and_the_references_records() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": AUDITED})));
    let run = env["runId"].as_str().unwrap().to_string();
    let env = done(
        &s,
        &env,
        "build",
        json!({"output": {"value": "v1"}, "usage": {"tokens": 7}}),
    );
    // a waiting gate's token is in the audit's steps (reference §2.3)
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    assert_eq!(
        audit["steps"]["review"]["status"], "waiting_gate",
        "{audit}"
    );
    assert_eq!(
        audit["steps"]["review"]["gateToken"],
        env["gates"][0]["gateToken"]
    );
    assert_eq!(
        (
            audit["steps_completed"].as_u64(),
            audit["total_steps"].as_u64()
        ),
        (Some(1), Some(4))
    );
    // revise without a token (the manual's form), then approve with it
    let env = ok(call(
        &s,
        "gate_resolve",
        json!({"runId": run, "stepId": "review", "decision": "revise", "rationale": "again"}),
    ));
    let env = done(&s, &env, "build", json!({"value": "v2"}));
    let env = ok(call(
        &s,
        "gate_resolve",
        json!({"runId": run, "stepId": "review", "gateToken": env["gates"][0]["gateToken"], "decision": "approve"}),
    ));
    let env = done(&s, &env, "wrap/digest", json!({"value": "d"}));
    let env = done(&s, &env, "finish", json!({"value": "end"}));
    assert_eq!(env["status"], "completed", "{env}");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    assert_eq!(audit["flow_name"], "main");
    assert_eq!(
        (
            audit["steps_completed"].as_u64(),
            audit["total_steps"].as_u64()
        ),
        (Some(4), Some(4))
    );
    let build = &audit["steps"]["build"];
    assert_eq!(
        (&build["type"], &build["status"], &build["attempts"]),
        (&json!("do"), &json!("succeeded"), &json!(1))
    );
    assert_eq!(build["output"], json!({"value": "v2"}));
    assert_eq!(audit["steps"]["review"]["decision"], "approve");
    assert!(audit["steps"]["review"].get("gateToken").is_none());
    assert_eq!(audit["steps"]["wrap/digest"]["status"], "succeeded");
    assert_eq!(audit["flowSpent"]["tokens"], 7.0, "{audit}");
    assert_eq!(audit["carry"], json!({"last": "v2"}), "{audit}");
    assert_eq!(audit["round"], 1);
    let rounds: Vec<(&str, u64, &str, bool)> = audit["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["stepId"].as_str().unwrap(),
                r["round"].as_u64().unwrap(),
                r["decision"].as_str().unwrap(),
                r["tokenless"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        rounds,
        [
            ("review", 0, "revise", true),
            ("review", 1, "approve", false)
        ],
        "{audit}"
    );
    let trace: Vec<(&str, &str, &str, u64)> = audit["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert!(t["duration_ms"].as_i64().is_some_and(|d| d >= 0), "{t}");
            (
                t["step_id"].as_str().unwrap(),
                t["type"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
                t["round"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        trace,
        [
            ("build", "do", "succeeded", 0),
            ("review", "gate", "revise", 0),
            ("build", "do", "succeeded", 1),
            ("review", "gate", "approve", 1),
            ("wrap/digest", "do", "succeeded", 0),
            ("wrap", "run", "succeeded", 1),
            ("finish", "do", "succeeded", 1),
        ],
        "{audit}"
    );
    let child = &audit["child_audits"][0];
    assert_eq!(
        (&child["stepId"], &child["status"]),
        (&json!("wrap"), &json!("succeeded"))
    );
    assert_eq!(
        (
            child["steps_completed"].as_u64(),
            child["total_steps"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(
        child["steps"]["wrap/digest"]["output"],
        json!({"value": "d"})
    );
    assert!(audit["total_duration_ms"].as_i64().is_some_and(|d| d >= 0));
    // the decision without a token is marked in the event too
    let resolved: Vec<bool> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gate_resolved")
        .map(|e| e["detail"]["tokenless"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(resolved, [true, false]);
}

#[test]
fn a_gate_decision_without_a_token_needs_the_gate_waiting_and_a_given_token_is_checked() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": AUDITED})));
    let run = env["runId"].as_str().unwrap().to_string();
    // nothing waits yet: refused, saying what a tokenless decision needs
    let e = err(call(
        &s,
        "gate_resolve",
        json!({"runId": run, "stepId": "review", "decision": "approve"}),
    ));
    assert_eq!(e["error_type"], "not_awaiting", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("without `gateToken`"),
        "{e}"
    );
    let env = done(&s, &env, "build", json!({"value": "v1"}));
    let stale = env["gates"][0]["gateToken"].as_str().unwrap().to_string();
    let env = ok(call(
        &s,
        "gate_resolve",
        json!({"runId": run, "stepId": "review", "decision": "revise"}),
    ));
    let env = done(&s, &env, "build", json!({"value": "v2"}));
    // the first round's token is stale now
    let e = err(call(
        &s,
        "gate_resolve",
        json!({"runId": run, "stepId": "review", "gateToken": stale, "decision": "approve"}),
    ));
    assert_eq!(e["error_type"], "stale_token", "{e}");
    assert_eq!(env["gates"][0]["stepId"], "review");
}

#[test]
fn step_done_records_telemetry_without_checking_it() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": SPEC})));
    let run = env["runId"].as_str().unwrap().to_string();
    let telemetry = json!({"durationMs": 1200, "model": "claude-sonnet-4-5", "effort": "high"});
    let e = err(call(
        &s,
        "step_done",
        json!({"runId": run, "stepId": "a", "dispatchToken": token_of(&env, "a"),
               "result": {"output": {"value": "x"}, "telemetry": "fast"}}),
    ));
    assert_eq!(e["error_type"], "invalid_report", "{e}");
    let env = done(
        &s,
        &env,
        "a",
        json!({"output": {"value": "x"}, "telemetry": telemetry}),
    );
    assert_eq!(env["ready"][0]["id"], "b");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    let seen: Vec<&Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "telemetry")
        .collect();
    assert_eq!(seen.len(), 1, "{audit}");
    assert_eq!(seen[0]["stepId"], "a");
    assert_eq!(
        seen[0]["detail"],
        json!({"attempt": 1, "telemetry": telemetry})
    );
    // nothing was charged for it
    assert_eq!(audit["flowSpent"]["tokens"], 0.0);
}

#[test]
fn commit_says_where_the_run_stands_and_revert_lists_the_labels() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": SPEC})));
    let run = env["runId"].as_str().unwrap().to_string();
    let c = ok(call(
        &s,
        "commit",
        json!({"flow_id": run, "label": "start"}),
    ));
    assert_eq!(
        (&c["step_number"], &c["current_step_id"]),
        (&json!(1), &json!("a")),
        "{c}"
    );
    let env = done(&s, &env, "a", json!({"value": "x"}));
    let c = ok(call(
        &s,
        "commit",
        json!({"runId": run, "label": "after-a"}),
    ));
    assert_eq!(
        (&c["step_number"], &c["current_step_id"]),
        (&json!(2), &json!("b")),
        "{c}"
    );
    assert_eq!(c["checkpoints"], json!(["start", "after-a"]));
    let env = done(&s, &env, "b", json!({"value": "y"}));
    assert_eq!(env["status"], "completed");
    let c = ok(call(&s, "commit", json!({"runId": run, "label": "end"})));
    assert_eq!(
        (&c["step_number"], &c["current_step_id"]),
        (&json!(3), &Value::Null),
        "{c}"
    );
    let e = err(call(&s, "revert", json!({"runId": run, "label": "nope"})));
    assert_eq!(e["error_type"], "checkpoint_not_found");
    assert_eq!(e["available"], json!(["start", "after-a", "end"]), "{e}");
}

#[test]
fn flow_cancel_answers_settled_acknowledged_reason_and_agents() {
    let s = server();
    let env = ok(call(&s, "plan", json!({"spec": SPEC})));
    let run = env["runId"].as_str().unwrap().to_string();
    let c = ok(call(&s, "flow_cancel", json!({"runId": run})));
    assert_eq!(c["status"], "cancelled");
    assert_eq!(
        (&c["flowSettled"], &c["acknowledged"], &c["reason"]),
        (&json!(true), &json!(true), &Value::Null)
    );
    // no command of this server ran for the run
    assert_eq!(
        c["agents"],
        json!({"signalled": 0, "reaped": 0, "unreaped": 0})
    );
    let c = ok(call(&s, "flow_cancel", json!({"flow_id": run})));
    assert_eq!(
        (&c["flowSettled"], &c["acknowledged"], &c["reason"]),
        (&json!(true), &json!(false), &json!("already_cancelled"))
    );
    let e = err(call(&s, "flow_cancel", json!({})));
    assert_eq!(e["error_type"], "invalid_request");
}

/// `tools/list`: every input schema is an object schema whose `required`
/// names exactly the required fields by their current (camelCase) names,
/// lists no alias, and has no combinator at its top (Claude's tool API
/// refuses those).
#[test]
fn every_tool_schema_marks_its_required_fields_and_has_no_top_level_combinator() {
    assert!(tools::ALL.len() >= 13);
    for (name, fields) in tools::ALL {
        let schema = stratum_mcp::args::schema(fields);
        assert_eq!(schema["type"], "object", "{name}");
        for k in ["anyOf", "oneOf", "allOf"] {
            assert!(!schema.contains_key(k), "{name}: {k} at the top");
        }
        let want: Vec<&str> = fields
            .iter()
            .filter(|f| f.required)
            .map(|f| f.name)
            .collect();
        let got: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(got, want, "{name}");
        let props = schema["properties"].as_object().unwrap();
        for f in *fields {
            assert!(props.contains_key(f.name), "{name}: {}", f.name);
            if let Some(alias) = f.alias {
                assert!(
                    !props.contains_key(alias) && !got.contains(&alias),
                    "{name}: {alias}"
                );
            }
        }
    }
    // the tools on a run all require it (the manual's clients always send it)
    for name in [
        "stratum_audit",
        "stratum_resume",
        "stratum_flow_cancel",
        "stratum_commit",
    ] {
        let fields = tools::fields_of(name).unwrap();
        assert!(
            fields.iter().any(|f| f.name == "runId" && f.required),
            "{name}"
        );
    }
}

/// The README's tool reference matches the code: every tool of the server
/// has a section, and its input bullets (before `Result:`) are exactly the
/// tool's fields, each required one marked and each alias named.
#[test]
fn the_readme_tool_reference_lists_every_tool_and_its_fields() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let reference = readme
        .split("\n### Tool reference\n")
        .nth(1)
        .expect("the README has a `### Tool reference` section");
    let reference = reference.split("\n## ").next().unwrap_or(reference);
    assert_eq!(
        reference.matches("\n#### `stratum_").count(),
        tools::ALL.len(),
        "one section per tool, and no other"
    );
    for (name, fields) in tools::ALL {
        let head = format!("\n#### `{name}`\n");
        let body = reference
            .split(&head)
            .nth(1)
            .unwrap_or_else(|| panic!("no section for {name} in the README's tool reference"));
        let body = body.split("\n#### ").next().unwrap_or(body);
        let inputs = body.split("\nResult:").next().unwrap_or(body);
        let bullets: Vec<&str> = inputs.lines().filter(|l| l.starts_with("- `")).collect();
        assert_eq!(bullets.len(), fields.len(), "{name}: {bullets:?}");
        for f in *fields {
            let line = bullets
                .iter()
                .find(|l| l.starts_with(&format!("- `{}`", f.name)))
                .unwrap_or_else(|| panic!("{name}: `{}` is not in the README", f.name));
            assert_eq!(line.contains("(required)"), f.required, "{name}: {line}");
            if let Some(alias) = f.alias {
                assert!(line.contains(&format!("[`{alias}`]")), "{name}: {line}");
            }
        }
        assert!(body.contains("\nResult:"), "{name}: no result described");
    }
}

/// Fanout items are traced one record per ended attempt (`type: "item"`,
/// id `fan/N`), their fanout once it settles.
#[test]
fn audit_traces_fanout_items() {
    const FAN: &str = "version: 1
contracts:
  R: {value: string}
flows:
  entry: main
  main:
    input: {items: \"string[]\"}
    output: {from: \"${sum.output}\", contract: R}
    steps:
      - id: fan
        attempts: 2
        fanout:
          over: \"${input.items}\"
          concurrency: 2
          isolation: none
          require: all
          merge: sequential
          dispatch: consumer
          steps:
            - do: \"inspect ${item}\"
              out: R
              ensure:
                - expr: \"result.value == item\"
      - id: sum
        after: [fan]
        do: \"sum\"
        out: R
";
    let s = server();
    let env = ok(call(
        &s,
        "plan",
        json!({"spec": FAN, "input": {"items": ["a", "b"]}}),
    ));
    let run = env["runId"].as_str().unwrap().to_string();
    let env = done(&s, &env, "fan/1", json!({"value": "wrong"}));
    let env = done(&s, &env, "fan/0", json!({"value": "a"}));
    let env = done(&s, &env, "fan/1", json!({"value": "b"}));
    let env = done(&s, &env, "sum", json!({"value": "2"}));
    assert_eq!(env["status"], "completed", "{env}");
    let audit = ok(call(&s, "audit", json!({"runId": run})));
    let items: Vec<(&str, &str, u64)> = audit["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "item")
        .map(|t| {
            (
                t["step_id"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
                t["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [
            ("fan/1", "failed", 1),
            ("fan/0", "succeeded", 1),
            ("fan/1", "succeeded", 2)
        ],
        "{audit}"
    );
    assert_eq!(audit["steps"]["fan"]["type"], "fanout");
    assert_eq!(audit["steps"]["fan"]["status"], "succeeded");
    assert_eq!(
        (
            audit["steps_completed"].as_u64(),
            audit["total_steps"].as_u64()
        ),
        (Some(2), Some(2))
    );
}

/// A workspace whose `stratum.toml` gives `codex` a command agent.
fn agent_workspace(command: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!("[agents.codex]\ncommand = {}\n", Value::from(command));
    std::fs::write(dir.path().join("stratum.toml"), toml).unwrap();
    dir
}

#[test]
fn a_background_agent_run_is_recorded_polled_and_cancelled() {
    let s = server();
    let ws = agent_workspace(r#"printf '{"output": {"ok": true}}'"#);
    let cwd = ws.path().display().to_string();
    let r = ok(call(
        &s,
        "agent_run",
        json!({"agent": "codex", "prompt": "p", "cwd": cwd, "background": true}),
    ));
    assert_eq!(r["status"], "running", "{r}");
    let id = r["runId"].as_str().unwrap().to_owned();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let done = loop {
        let p = ok(call(&s, "agent_poll", json!({"runId": id})));
        if p["done"] == true {
            break p;
        }
        assert!(std::time::Instant::now() < end, "{p}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"ok": true}), "{done}");
    // a settled run is not cancelled again
    let x = ok(call(&s, "cancel_agent_run", json!({"runId": id})));
    assert_eq!(x["cancelled"], false, "{x}");
    assert_eq!(x["reason"], "already_completed", "{x}");
    assert_eq!(x["status"], "completed", "{x}");
}

#[test]
fn agent_and_background_requests_are_refused_saying_what_to_fix() {
    let s = server();
    let ws = agent_workspace("true");
    let cwd = ws.path().display().to_string();
    let e = err(call(
        &s,
        "agent_run",
        json!({"agent": "gpt", "prompt": "p", "cwd": cwd}),
    ));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("unknown agent `gpt`"),
        "{e}"
    );
    let e = err(call(
        &s,
        "agent_run",
        json!({"agent": "codex", "prompt": "p", "cwd": cwd, "flow": {"runId": "run-x"}}),
    ));
    assert!(
        e["message"].as_str().unwrap().contains("cancellationId"),
        "{e}"
    );
    let e = err(call(
        &s,
        "agent_run",
        json!({"agent": "codex", "prompt": "p", "cwd": cwd, "cancellationId": "c",
               "flow": {"runId": "run-x"}}),
    ));
    assert_eq!(e["error_type"], "not_found", "{e}");
    let e = err(call(
        &s,
        "agent_run",
        json!({"agent": "codex", "prompt": "p", "cwd": cwd, "cancellationId": "c",
               "flow": {"runId": "run-x", "itemIndex": -1}}),
    ));
    assert!(e["message"].as_str().unwrap().contains("itemIndex"), "{e}");
    let e = err(call(&s, "agent_poll", json!({"runId": "agent-none"})));
    assert_eq!(e["error_type"], "not_found", "{e}");
    let e = err(call(&s, "flow_run_bg", json!({})));
    assert!(e["message"].as_str().unwrap().contains("`spec`"), "{e}");
    let e = err(call(
        &s,
        "flow_run_bg",
        json!({"spec": SPEC, "resumeRun": "run-x"}),
    ));
    assert_eq!(e["error_type"], "invalid_request", "{e}");
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
