//! End-to-end tests of the `stratumc` binary: exit codes, human and JSON
//! output (insta snapshots), directories, explain, and hostile input.

use std::path::{Path, PathBuf};
use std::process::Command;

fn stratumc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stratumc"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file()) // subfolders hold other commands' fixtures
        .collect();
    files.sort();
    files
}

/// Runs stratumc in the fixtures directory; returns (exit, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = stratumc()
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn examples_are_clean() {
    let out = stratumc()
        .arg("check")
        .arg(root().join("examples"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("ok: "), "{stderr}");
}

#[test]
fn human_output_snapshots() {
    for f in fixtures() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (code, stdout, stderr) = run(&["check", "--color", "never", &name]);
        let expected = if name.starts_with("warnings") { 0 } else { 1 };
        assert_eq!(
            code, expected,
            "{name}: warnings alone exit 0, errors exit 1"
        );
        insta::assert_snapshot!(
            format!("human__{name}"),
            format!("exit: {code}\n--- stdout\n{stdout}--- stderr\n{stderr}")
        );
    }
}

#[test]
fn json_output_snapshots() {
    for f in fixtures() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (code, stdout, _) = run(&["check", "--format", "json", &name]);
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(doc["version"], 1);
        let errors = doc["files"][0]["errors"].as_u64().unwrap();
        assert_eq!(code, if errors > 0 { 1 } else { 0 });
        assert!(errors + doc["files"][0]["warnings"].as_u64().unwrap() >= 1);
        insta::assert_snapshot!(
            format!("json__{name}"),
            serde_json::to_string_pretty(&doc).unwrap()
        );
    }
}

#[test]
fn json_shape_is_documented() {
    let (code, stdout, _) = run(&["check", "--format", "json", "unknown-field.stratum.yaml"]);
    assert_eq!(code, 1);
    assert!(
        stdout.starts_with("{\"version\":1,\"files\":[{\"path\":"),
        "{stdout}"
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let d = &doc["files"][0]["diagnostics"][0];
    for key in [
        "code",
        "severity",
        "message",
        "line",
        "column",
        "end_line",
        "end_column",
        "labels",
        "notes",
        "help",
    ] {
        assert!(d.get(key).is_some(), "missing {key}");
    }
    assert_eq!(d["code"], "S0101");
    assert_eq!(d["line"], 13);
    assert_eq!(d["column"], 9);
}

#[test]
fn directory_and_mixed_exit_codes() {
    // a directory of fixtures: errors → 1
    let (code, _, stderr) = run(&["check", "--color", "never", "."]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("{} files checked", fixtures().len())),
        "{stderr}"
    );
    // a missing file → 2, and the other files are still checked
    let (code, stdout, stderr) = run(&[
        "check",
        "--format",
        "json",
        "nope.stratum.yaml",
        "graph.stratum.yaml",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read nope.stratum.yaml"), "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["files"].as_array().unwrap().len(), 1);
    // no arguments → usage, 2
    let (code, _, _) = run(&["check"]);
    assert_eq!(code, 2);
    // an empty directory → 2
    let empty = std::env::temp_dir().join(format!("stratumc-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let (code, _, stderr) = run(&["check", empty.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn hostile_input_never_crashes() {
    let dir = std::env::temp_dir().join(format!("stratumc-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("binary", (0..=255u8).cycle().take(4096).collect()),
        ("empty", Vec::new()),
        ("deep", format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes()),
        ("deep-map", b"a:\n".iter().copied().chain((0..2000).flat_map(|i| format!("{}b:\n", " ".repeat(i + 1)).into_bytes())).collect()),
        ("expr", format!("version: 1\ncontracts: {{}}\nflows:\n  entry: m\n  m:\n    input: {{}}\n    output: {{from: \"${{a.output}}\", contract: X}}\n    steps:\n      - id: a\n        do: x\n        when: \"{}true{}\"\n", "(".repeat(50_000), ")".repeat(50_000)).into_bytes()),
        ("multi-doc", b"a: 1\n---\nb: 2\n".to_vec()),
        ("scalar", b"42\n".to_vec()),
    ];
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{}", i - 1); 10].join(", ")
        ));
    }
    cases.push(("bomb", bomb.into_bytes()));
    for (name, bytes) in cases {
        let path = dir.join(format!("{name}.stratum.yaml"));
        std::fs::write(&path, &bytes).unwrap();
        let out = stratumc()
            .args(["check", "--format", "json"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(doc["files"][0]["errors"].as_u64().unwrap() >= 1, "{name}");
    }
}

#[test]
fn explain() {
    let (code, stdout, _) = run(&["explain", "S0305"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("# S0305"), "{stdout}");
    let (code, stdout, _) = run(&["explain", "s0101"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("# S0101"));
    let (code, _, stderr) = run(&["explain", "S9999"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a stratumc diagnostic code"));
    let (code, stdout, _) = run(&["explain", "--list"]);
    assert_eq!(code, 0);
    assert!(stdout.lines().count() > 60);
}

#[test]
fn portable_warns_once_per_addition_and_changes_nothing_else() {
    let spec = root().join("tests/conformance/ext/cost-hint-ok.stratum.yaml");
    let spec = spec.to_str().unwrap();
    let (code, stdout, _) = run(&["check", "--format", "json", spec]);
    assert_eq!(code, 0);
    assert!(!stdout.contains("S0906"), "{stdout}");
    let (code, stdout, _) = run(&["check", "--portable", "--format", "json", spec]);
    // warnings only: the spec stays valid
    assert_eq!(code, 0, "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let codes: Vec<&str> = doc["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    // one per use: a fanout stage's hint and a step's
    assert_eq!(codes, ["S0906", "S0906"]);
    // a v1 spec has nothing to report
    let v1 = root().join("examples/minimal-classifier.stratum.yaml");
    let (code, stdout, _) = run(&[
        "check",
        "--portable",
        "--format",
        "json",
        v1.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(!stdout.contains("S09"), "{stdout}");
}

#[test]
fn an_unreadable_file_is_never_summed_up_as_ok_and_validate_is_check() {
    let (code, _, stderr) = run(&["check", "missing.stratum.yaml"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("cannot read missing.stratum.yaml"),
        "{stderr}"
    );
    let summary = stderr.lines().last().unwrap_or("");
    assert!(summary.starts_with("failed: 0 files checked"), "{stderr}");
    // `validate` is the manual's name for `check`
    let spec = root().join("examples/minimal-classifier.stratum.yaml");
    let (code, _, stderr) = run(&["validate", spec.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("ok: 1 file checked"), "{stderr}");
}

#[test]
fn a_contract_cycle_names_the_field_it_goes_through() {
    let dir = std::env::temp_dir().join(format!("stratumc-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("cycle.stratum.yaml");
    std::fs::write(
        &spec,
        "version: 1\ncontracts:\n  A: {b: B}\n  B: {a: \"A[]\"}\nflows:\n  entry: main\n  main:\n    input: {}\n    output: {from: \"${w.output}\", contract: A}\n    steps:\n      - {id: w, do: \"x\", out: A}\n",
    )
    .unwrap();
    let (code, stdout, _) = run(&["check", "--color", "never", spec.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("contract `B` refers back to `A` through field `a`"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// X9: `--portable` warns (S0909) about routes, the `on_fail` forms of 1.1
/// and `iterate` on `run` steps, once per step; the specs stay valid.
#[test]
fn portable_warns_about_x9_routes_and_on_fail_forms() {
    for (name, want) in [("x9-on-fail-ok", 3usize), ("x9-iterate-run", 3usize)] {
        let spec = root().join(format!("tests/conformance/ext/{name}.stratum.yaml"));
        let (_, stdout, _) = run(&[
            "check",
            "--portable",
            "--format",
            "json",
            spec.to_str().unwrap(),
        ]);
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let n = doc["files"][0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["code"] == "S0909")
            .count();
        assert_eq!(n, want, "{name}: {stdout}");
    }
}
