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
