//! End-to-end tests of `stratumc migrate --check`: every fixture under
//! `cli/tests/fixtures/migrate/` (together they hit every finding of
//! reference §9, plus a v1 spec, a file that is not YAML, a list root and a
//! missing version) gives the snapshotted report with exit 0; `--format
//! json`; and the usage errors (no `--check`, missing file: exit 2).
//!
//! Snapshots: regenerate with `INSTA_UPDATE=always cargo test -p stratumc --test migrate`
//! and review the diff.

use std::collections::BTreeSet;
use std::path::PathBuf;

mod support;
use support::{root, stratumc_in};

fn fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("cli/tests/fixtures/migrate"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn stratumc(args: &[&str]) -> (i32, String, String) {
    stratumc_in(&root().join("cli/tests/fixtures/migrate"), None, args)
}

#[test]
fn every_fixture_is_reported_with_exit_0() {
    let files = fixtures();
    assert!(files.len() >= 13);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (code, stdout, stderr) = stratumc(&["migrate", "--check", &name]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(stderr.is_empty(), "{name}: {stderr}");
        assert!(
            stdout.contains("\nreport-only: no YAML was emitted or translated\n"),
            "{stdout}"
        );
        insta::assert_snapshot!(format!("text__{name}"), stdout);
    }
}

#[test]
fn the_fixtures_hit_every_finding() {
    let mut seen = BTreeSet::new();
    for f in fixtures() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (code, stdout, _) = stratumc(&["migrate", "--check", "--format", "json", &name]);
        assert_eq!(code, 0);
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(doc["version"], 1);
        for finding in doc["findings"].as_array().unwrap() {
            for key in ["id", "status", "python", "v1", "note"] {
                assert!(finding[key].is_string(), "{name}: {finding}");
            }
            assert!(!finding["paths"].as_array().unwrap().is_empty());
            seen.insert(finding["id"].as_str().unwrap().to_string());
        }
    }
    let all: BTreeSet<String> = stratum_compiler::migrate::FINDINGS
        .iter()
        .map(|r| r.0.to_string())
        .collect();
    let missing: Vec<&String> = all.difference(&seen).collect();
    assert!(missing.is_empty(), "no fixture hits {missing:?}");
}

#[test]
fn json_report() {
    let (code, stdout, _) = stratumc(&["migrate", "--check", "--format", "json", "functions.yaml"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["source_version"], "0.3");
    let ids: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "contracts",
            "function-infer",
            "ensure-expressions",
            "function-compute",
            "function-gate"
        ]
    );
    assert_eq!(doc["findings"][1]["status"], "supported");
    assert_eq!(doc["findings"][1]["paths"][0], "functions.classify.mode");
    // a v1 spec says so, and no version is shown for a file that is not YAML
    let (_, stdout, _) = stratumc(&["migrate", "--check", "--format", "json", "v1-spec.yaml"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["findings"][0]["id"], "unreadable");
    assert!(
        doc["findings"][0]["note"]
            .as_str()
            .unwrap()
            .contains("stratumc check")
    );
    let (_, stdout, _) = stratumc(&["migrate", "--check", "--format", "json", "not-yaml.txt"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["source_version"], serde_json::Value::Null);
    assert_eq!(doc["findings"][0]["paths"][0], "root");
}

#[test]
fn usage_errors_exit_2() {
    let (code, stdout, stderr) = stratumc(&["migrate", "functions.yaml"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(
        stderr.contains("stratumc migrate --check functions.yaml"),
        "{stderr}"
    );
    let (code, _, stderr) = stratumc(&["migrate", "--check", "no-such-file.yaml"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read no-such-file.yaml"), "{stderr}");
    let (code, _, _) = stratumc(&["migrate", "--check"]);
    assert_eq!(code, 2);
    // a file that is not UTF-8 is a report, not an error
    let dir = std::env::temp_dir().join(format!("stratumc-migrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("x.yaml");
    std::fs::write(&bin, b"version: 0.3\nname: caf\xe9\n").unwrap();
    let (code, stdout, _) = stratumc(&["migrate", "--check", &bin.to_string_lossy()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("not UTF-8"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
