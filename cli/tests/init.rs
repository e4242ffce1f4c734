//! `stratumc init` through the binary: the project it writes passes
//! `stratumc check` as written, and a second init never overwrites it.

use std::process::Command;

fn stratumc(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    c.current_dir(dir).env("NO_COLOR", "1");
    c
}

#[test]
fn init_writes_a_starter_project_that_checks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = stratumc(d).args(["init", "proj"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wrote proj/spec.stratum.yaml"), "{stderr}");
    let check = stratumc(d)
        .args(["check", "proj/spec.stratum.yaml"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let cost = stratumc(d)
        .args([
            "cost",
            "proj/spec.stratum.yaml",
            "--inputs",
            "@proj/inputs.json",
        ])
        .output()
        .unwrap();
    assert!(cost.status.success(), "{cost:?}");
}

#[test]
fn init_refuses_to_overwrite_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("spec.stratum.yaml"), "mine\n").unwrap();
    let out = stratumc(d).arg("init").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already exist") && stderr.contains("spec.stratum.yaml"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("spec.stratum.yaml")).unwrap(),
        "mine\n"
    );
    assert!(!d.join("inputs.json").exists(), "nothing else was written");
}

#[test]
fn init_research_writes_the_pipeline_that_checks_and_costs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = stratumc(d)
        .args(["init", "lab", "--preset", "research"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for f in [
        "research.stratum.yaml",
        "stratum.toml",
        "inputs.json",
        "agent-config.json",
        "agents/research-agent.py",
        "judge/fake-openai-judge.py",
        "README.md",
    ] {
        assert!(d.join("lab").join(f).is_file(), "{f} was written");
    }
    let lab = d.join("lab");
    let check = stratumc(&lab)
        .args(["check", "research.stratum.yaml"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // a finite worst case and an expected figure per dimension, before any run
    let cost = stratumc(&lab)
        .args([
            "cost",
            "research.stratum.yaml",
            "--inputs",
            "@inputs.json",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(cost.status.success(), "{cost:?}");
    let doc: serde_json::Value = serde_json::from_slice(&cost.stdout).unwrap();
    for dim in ["dispatches", "tokens", "usd", "ms"] {
        assert!(
            doc[dim]["worst"].as_f64().is_some_and(|w| w > 0.0),
            "{dim}: {doc}"
        );
        assert!(
            doc[dim]["expected"].as_f64().is_some_and(|e| e > 0.0),
            "{dim}: {doc}"
        );
    }
    assert_eq!(doc["budget"]["exceeded"], serde_json::json!([]), "{doc}");
}
