//! End-to-end tests of `stratumc cost`: every example in both formats, JSON
//! snapshots of two examples (one symbolic, one with inputs) and both formats
//! of the research pipeline, the inputs and
//! config options, and the exit codes (0 ok — also over budget —, 1 spec
//! errors, 2 usage or I/O errors).
//!
//! Snapshots: regenerate with `INSTA_UPDATE=always cargo test -p stratumc --test cost`
//! and review the diff.

use std::path::{Path, PathBuf};

mod support;
use support::{examples, root, stratumc_in};

/// Runs `stratumc cost ARGS` in `dir`; returns (exit, stdout, stderr).
fn cost_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&str> = std::iter::once("cost")
        .chain(args.iter().copied())
        .collect();
    stratumc_in(dir, None, &args)
}

/// Runs `stratumc cost ARGS` from the repository root.
fn cost(args: &[&str]) -> (i32, String, String) {
    cost_in(&root(), args)
}

/// A fresh directory under the system temp dir.
fn scratch(name: &str) -> PathBuf {
    support::scratch("cost", name)
}

#[test]
fn every_example_costs_in_both_formats() {
    let files = examples();
    assert!(files.len() >= 7);
    for f in &files {
        let path = f.to_string_lossy();
        let (code, stdout, stderr) = cost(&[&path]);
        assert_eq!(code, 0, "{path}: {stderr}");
        assert!(stdout.starts_with("cost of flow `"), "{stdout}");
        assert!(stdout.contains("\ndispatches "), "{stdout}");

        let (code, stdout, stderr) = cost(&[&path, "--format", "json"]);
        assert_eq!(code, 0, "{path}: {stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(doc["version"], 1);
        for dim in ["dispatches", "tokens", "usd", "ms", "agent_ms"] {
            let e = &doc[dim];
            assert!(e["min"].is_number() && e["expected"].is_number(), "{e}");
            // worst is null exactly when it is symbolic
            assert_eq!(e["worst"].is_null(), e["worst_symbolic"].is_string(), "{e}");
        }
        for step in doc["steps"].as_array().unwrap() {
            assert!(step["id"].is_string() && step["entries"].as_u64().unwrap() >= 1);
            assert!(step["dispatches"].get("worst").is_some());
        }
        assert!(doc["budget"]["exceeded"].is_array());
    }
}

#[test]
fn json_snapshot_with_a_gate() {
    let (code, stdout, _) = cost(&[
        "examples/reviewed-work-gate.stratum.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("json__reviewed-work-gate", stdout);
}

#[test]
fn snapshots_of_the_research_pipeline_with_its_inputs() {
    // a project directory: run from it, so its stratum.toml (agents, the
    // `local` judge's cost model) and inputs.json are the ones read
    let dir = root().join("examples/research-pipeline");
    let spec = "research.stratum.yaml";
    let (code, human, err) = cost_in(&dir, &[spec, "--inputs", "@inputs.json"]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("human__research", human);
    let (code, json, err) = cost_in(
        &dir,
        &[spec, "--inputs", "@inputs.json", "--format", "json"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(human.contains("(profiles: stratum.toml)"), "{human}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    // one row per stage, gate and set step; the worst case fits the budget
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(7), "{doc}");
    assert_eq!(doc["budget"]["exceeded"], serde_json::json!([]), "{doc}");
    insta::assert_snapshot!("json__research", json);
}

#[test]
fn json_snapshot_with_inputs_and_without() {
    let spec = "examples/five-constructs.stratum.yaml";
    let (code, symbolic, _) = cost(&[spec, "--format", "json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&symbolic).unwrap();
    assert_eq!(doc["dispatches"]["worst"], serde_json::Value::Null);
    assert_eq!(
        doc["dispatches"]["worst_symbolic"],
        "6 + 2 * len(input.items)"
    );

    let (code, stdout, _) = cost(&[
        spec,
        "--format",
        "json",
        "--inputs",
        r#"{"topic": "PR 7", "items": ["a.rs", "b.rs", "c.rs"]}"#,
    ]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["dispatches"]["worst"], 12);
    insta::assert_snapshot!("json__five-constructs-with-inputs", stdout);
}

#[test]
fn human_output_names_steps_totals_and_the_budget_verdict() {
    // the iterate example with a budget below its worst case (15 × $0.30)
    let dir = scratch("human");
    let text = std::fs::read_to_string(root().join("examples/iterate.stratum.yaml"))
        .unwrap()
        .replace("      usd: 6\n", "      usd: 4\n");
    assert!(text.contains("usd: 4\n"));
    std::fs::write(dir.join("tight.stratum.yaml"), text).unwrap();
    let (code, stdout, _) = cost_in(&dir, &["tight.stratum.yaml"]);
    assert_eq!(code, 0, "a budget exceeded is reported, not an error");
    assert!(stdout.contains("improve  "), "{stdout}");
    assert!(
        stdout
            .contains("exceeded: flow budget usd: worst 4.5 > 4; step `improve` contributes 100%"),
        "{stdout}"
    );
    let (_, stdout, _) = cost(&["examples/iterate.stratum.yaml"]);
    assert!(stdout.contains("within: the worst case fits"), "{stdout}");
    let (_, stdout, _) = cost(&["examples/code-review.stratum.yaml"]);
    assert!(stdout.contains("12 * len(pending)"), "{stdout}");
    assert!(stdout.contains("not checked: flow budget usd"), "{stdout}");
    let (_, stdout, _) = cost(&["examples/on-fail-routing.stratum.yaml"]);
    assert!(stdout.contains("within: the worst case fits"), "{stdout}");
}

#[test]
fn inputs_from_a_file_and_another_flow() {
    let dir = scratch("inputs");
    std::fs::write(dir.join("in.json"), r#"{"topic": "x", "items": ["a"]}"#).unwrap();
    let spec = root().join("examples/five-constructs.stratum.yaml");
    let spec = spec.to_string_lossy();
    let (code, stdout, stderr) =
        cost_in(&dir, &[&spec, "--inputs", "@in.json", "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["dispatches"]["worst"], 8);

    let (code, stdout, _) = cost_in(&dir, &[&spec, "--flow", "summarize", "--format", "json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["flow"], "summarize");
    assert_eq!(doc["dispatches"]["worst"], 2);
}

#[test]
fn stratum_toml_is_read_from_the_working_directory_or_given() {
    let dir = scratch("config");
    let spec = root().join("examples/minimal-classifier.stratum.yaml");
    let spec = spec.to_string_lossy();
    let usd = |args: &[&str]| {
        let mut all = vec![&*spec, "--format", "json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = cost_in(&dir, &all);
        assert_eq!(code, 0, "{stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        doc["usd"]["worst"].as_f64().unwrap()
    };
    // built-in: 2 attempts × $0.30
    assert_eq!(usd(&[]), 0.6);
    std::fs::write(dir.join("stratum.toml"), "[agents.claude]\nusd = 1\n").unwrap();
    assert_eq!(usd(&[]), 2.0);
    std::fs::write(dir.join("other.toml"), "[agents.claude]\nusd = 2\n").unwrap();
    assert_eq!(usd(&["--config", "other.toml"]), 4.0);
    let (_, stdout, _) = cost_in(&dir, &[&spec]);
    assert!(stdout.contains("(profiles: stratum.toml)"), "{stdout}");
}

#[test]
fn exit_codes() {
    // spec errors: printed like `check`, exit 1
    let bad = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-types.stratum.yaml");
    let bad = bad.to_string_lossy();
    let (code, stdout, stderr) = cost(&[&bad]);
    assert_eq!(code, 1);
    assert!(stdout.contains("error["), "{stdout}");
    assert!(stderr.contains("no cost computed"), "{stderr}");
    let (code, stdout, stderr) = cost(&[&bad, "--format", "json"]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty() && stderr.contains("error["), "{stderr}");

    let spec = "examples/five-constructs.stratum.yaml";
    for (args, needle) in [
        (
            vec!["missing.stratum.yaml"],
            "cannot read missing.stratum.yaml",
        ),
        (
            vec![spec, "--inputs", "{not json"],
            "--inputs is not valid JSON",
        ),
        (vec![spec, "--inputs", "[1, 2]"], "must be a JSON object"),
        (
            vec![spec, "--inputs", "@nowhere.json"],
            "cannot read inputs file nowhere.json",
        ),
        // a file named without `@`: the hint says how
        (
            vec![spec, "--inputs", spec],
            "to read the input from it, write `--inputs @",
        ),
        (vec![spec, "--flow", "nope"], "no flow `nope`"),
        (
            vec![spec, "--config", "nowhere.toml"],
            "cannot read nowhere.toml",
        ),
        (vec![spec, "--format", "xml"], "invalid value 'xml'"),
    ] {
        let (code, _, stderr) = cost(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }

    let dir = scratch("exit");
    std::fs::write(
        dir.join("stratum.toml"),
        "[agents.claude]\np_sucess = 0.9\n",
    )
    .unwrap();
    let spec = root().join(spec);
    let (code, _, stderr) = cost_in(&dir, &[&spec.to_string_lossy()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown key `agents.claude.p_sucess`")
            && stderr.contains("did you mean `p_success`"),
        "{stderr}"
    );
}
