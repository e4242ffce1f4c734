//! `stratumc build` and `stratumc inspect` through the binary: golden
//! listings of every example (regenerate with
//! `INSTA_UPDATE=always cargo test -p stratumc --test build`), plan files,
//! determinism, and corrupt plans.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;
use support::{example_name, examples};

fn stratumc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stratumc"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stratumc-build-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn example_listings() {
    for ex in examples() {
        let name = example_name(&ex);
        let out = stratumc()
            .args(["build", "--emit", "asm"])
            .arg(&ex)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        insta::assert_snapshot!(format!("asm__{name}"), String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn plans_are_written_deterministically_and_inspectable() {
    let dir = tmp("det");
    for ex in examples() {
        let a = dir.join("a.stratumc");
        let b = dir.join("b.stratumc");
        for p in [&a, &b] {
            let out = stratumc()
                .arg("build")
                .arg(&ex)
                .arg("-o")
                .arg(p)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0));
            let hash = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(hash.len(), 64, "the plan hash is printed: {hash}");
        }
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{}",
            ex.display()
        );
        let out = stratumc().arg("inspect").arg(&a).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("; plan "));
    }
}

#[test]
fn default_output_path_sits_next_to_the_spec() {
    let dir = tmp("default");
    let spec = dir.join("x.stratum.yaml");
    std::fs::copy(&examples()[0], &spec).unwrap();
    let out = stratumc().arg("build").arg(&spec).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(dir.join("x.stratumc").exists());
}

#[test]
fn bad_specs_and_corrupt_plans() {
    let dir = tmp("bad");
    let bad = dir.join("bad.stratum.yaml");
    std::fs::write(&bad, "version: 2\n").unwrap();
    let out = stratumc().arg("build").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plan was built"));
    let plan = dir.join("p.stratumc");
    assert_eq!(
        stratumc()
            .arg("build")
            .arg(&examples()[0])
            .arg("-o")
            .arg(&plan)
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    let bytes = std::fs::read(&plan).unwrap();
    for (name, data) in [
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("flipped", {
            let mut b = bytes.clone();
            let n = b.len();
            b[n - 3] ^= 0x55;
            b
        }),
        ("junk", b"hello".to_vec()),
    ] {
        let p = dir.join(format!("{name}.stratumc"));
        std::fs::write(&p, &data).unwrap();
        let out = stratumc().arg("inspect").arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{name}: {err}");
    }
    let out = stratumc()
        .arg("inspect")
        .arg(dir.join("missing.stratumc"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn inspect_says_the_format_a_plan_was_written_in() {
    // a format-1 plan (built by the stratumc before leases) loads and is shown as format 1
    let v1 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vm/tests/fixtures/v1-plan.stratumc");
    let out = stratumc().arg("inspect").arg(&v1).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().next().unwrap_or("").contains("format 1)"),
        "{text}"
    );
}

/// X9: the listing shows a step's `route` entries, its `on_fail` entries
/// and a run step's `iterate` (golden listing of the conformance specs).
#[test]
fn x9_route_and_on_fail_listing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/ext");
    for name in ["x9-route-ok", "x9-on-fail-ok"] {
        let out = stratumc()
            .args(["build", "--emit", "asm"])
            .arg(root.join(format!("{name}.stratum.yaml")))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        insta::assert_snapshot!(format!("asm__{name}"), text);
    }
    // the lines that say what the routes do
    let out = stratumc()
        .args(["build", "--emit", "asm"])
        .arg(root.join("x9-on-fail-ok.stratum.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("on_fail when chunk"), "{text}");
    assert!(text.contains("goto plan max 1"), "{text}");
    assert!(text.contains("on_fail rescue"), "{text}");
    assert!(text.contains("on_fail continue"), "{text}");
}
