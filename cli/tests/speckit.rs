//! End-to-end tests of `stratumc compile-speckit`: the fixtures under
//! `cli/tests/fixtures/speckit/` (sequential tasks, parallel groups, every
//! criterion form) compile to the snapshotted specs, every generated spec
//! passes the front end (`stratum_compiler::analysis::analyze`, no
//! diagnostic at all) and `stratumc check`; `--flow`, `-o FILE`; and the bad
//! directories (missing: exit 2; empty or unparseable tasks: exit 1, every
//! problem named).
//!
//! Snapshots: regenerate with `INSTA_UPDATE=always cargo test -p stratumc --test speckit`
//! and review the diff.

use std::path::PathBuf;

mod support;
use support::{root, stratumc_in};

/// A fixture path relative to the repository root (where the tests run
/// `stratumc`), so that messages naming it are the same on every machine.
fn fixture(name: &str) -> String {
    format!("cli/tests/fixtures/speckit/{name}")
}

fn stratumc(args: &[&str]) -> (i32, String, String) {
    stratumc_in(&root(), None, args)
}

fn scratch(name: &str) -> PathBuf {
    support::scratch("speckit", name)
}

fn assert_checks_clean(name: &str, yaml: &str) {
    let a = stratum_compiler::analysis::analyze(yaml);
    let messages: Vec<String> = a
        .diagnostics
        .iter()
        .map(|d| format!("{:?} {}", d.code, d.message))
        .collect();
    assert!(messages.is_empty(), "{name}: {messages:#?}\n{yaml}");
    assert!(a.ir.is_some(), "{name}");
}

#[test]
fn fixtures_compile_to_specs_that_check_clean() {
    for name in ["sequential", "parallel", "criteria"] {
        let (code, yaml, stderr) = stratumc(&["compile-speckit", &fixture(name)]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        assert_checks_clean(name, &yaml);
        insta::assert_snapshot!(format!("spec__{name}"), yaml);
    }
}

#[test]
fn sequential_tasks_form_a_chain() {
    let (_, yaml, _) = stratumc(&["compile-speckit", &fixture("sequential")]);
    assert!(
        yaml.contains("      - id: t001_setup\n        do:"),
        "{yaml}"
    );
    assert!(
        yaml.contains("      - id: t002_model\n        after: [t001_setup]"),
        "{yaml}"
    );
    assert!(
        yaml.contains("      - id: t003_api\n        after: [t002_model]"),
        "{yaml}"
    );
    assert!(yaml.contains("from: \"${t003_api.output}\""), "{yaml}");
}

#[test]
fn parallel_groups_share_a_predecessor_and_join() {
    let (_, yaml, _) = stratumc(&["compile-speckit", &fixture("parallel")]);
    let text = stratum_compiler::analysis::analyze(&yaml);
    let ir = text.ir.expect("valid");
    let flow = &ir.flows[0];
    let deps = |id: &str| -> Vec<String> {
        let s = flow.step(id).unwrap();
        let mut v: Vec<String> = flow
            .edges
            .iter()
            .filter(|e| e.to == s)
            .map(|e| flow.steps[e.from].id.clone())
            .collect();
        v.sort();
        v
    };
    for p in ["t_02_auth", "t_03_billing", "t_04_search"] {
        assert_eq!(deps(p), ["t_01_schema"], "{p}");
    }
    assert_eq!(
        deps("t_05_integrate"),
        ["t_02_auth", "t_03_billing", "t_04_search"]
    );
    // a final parallel group is joined by a generated `done` step
    assert_eq!(deps("done"), ["t_06_docs", "t_07_changelog"]);
    assert_eq!(flow.steps[flow.output.step].id, "done");
}

#[test]
fn every_criterion_form() {
    let (_, yaml, _) = stratumc(&["compile-speckit", &fixture("criteria")]);
    for want in [
        "- file_exists: \"src/auth/middleware.ts\"",
        "- file_contains: {path: \"src/auth/middleware.ts\", text: \"verifyToken\"}",
        "- expr: \"result.tests_pass == true\"",
        "- expr: \"result.lint_clean == true\"",
        "- file_exists: \"src/auth/tokens.ts\"",
        "- file_contains: {path: \"src/auth/tokens.ts\", text: \"export function sign\"}",
        "    tests_pass: boolean\n    lint_clean: boolean",
        "- Error messages are user-friendly",
    ] {
        assert!(yaml.contains(want), "missing {want:?}:\n{yaml}");
    }
    // `tests pass` twice gives one ensure
    assert_eq!(
        yaml.matches("result.tests_pass == true").count(),
        1,
        "{yaml}"
    );
}

#[test]
fn flow_name_and_output_file() {
    let dir = scratch("out");
    let out = dir.join("tasks.stratum.yaml");
    let out_s = out.to_string_lossy().to_string();
    let (code, stdout, stderr) = stratumc(&[
        "compile-speckit",
        &fixture("sequential"),
        "--flow",
        "build",
        "-o",
        &out_s,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("wrote ") && stderr.contains("flow `build`, 3 steps"),
        "{stderr}"
    );
    let yaml = std::fs::read_to_string(&out).unwrap();
    assert!(yaml.contains("  entry: build\n  build:\n"), "{yaml}");
    let (code, stdout, stderr) = stratumc(&["check", &out_s]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // a flow name that is not a name
    let (code, _, stderr) = stratumc(&["compile-speckit", &fixture("sequential"), "--flow", "a b"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("invalid flow name `a b`"), "{stderr}");
    // an output that cannot be written
    let bad = dir.join("no/such/dir/x.yaml");
    let (code, _, stderr) = stratumc(&[
        "compile-speckit",
        &fixture("sequential"),
        "-o",
        &bad.to_string_lossy(),
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot write"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_directories() {
    // missing
    let (code, out, stderr) = stratumc(&["compile-speckit", "no/such/tasks"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(stderr.contains("no directory no/such/tasks"), "{stderr}");
    // a file, not a directory
    let (code, _, stderr) = stratumc(&["compile-speckit", &fixture("sequential/T001-setup.md")]);
    assert_eq!(code, 2);
    assert!(stderr.contains("is not a directory"), "{stderr}");
    // empty (only a .gitkeep)
    let (code, out, stderr) = stratumc(&["compile-speckit", &fixture("bad-empty")]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        stderr.contains("error[no_tasks]: no task files"),
        "{stderr}"
    );
    // unparseable tasks: every problem is reported, nothing is written
    let (code, out, stderr) = stratumc(&["compile-speckit", &fixture("bad-unparseable")]);
    assert_eq!((code, out.as_str()), (1, ""));
    insta::assert_snapshot!("errors__bad-unparseable", stderr);
    // a task file that is not UTF-8
    let dir = scratch("utf8");
    std::fs::write(dir.join("a.md"), b"# Task: caf\xe9\n").unwrap();
    let (code, _, stderr) = stratumc(&["compile-speckit", &dir.to_string_lossy()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("a.md: the file is not UTF-8 text"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
