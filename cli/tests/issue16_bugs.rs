//! The bugs of issue 16 §4, through the built binary: a `check` of a file
//! that cannot be read is never summed up as `ok`; S0203 names the field a
//! contract cycle goes through for every shape of cycle; a templated file
//! path (`file_exists: "${item}.txt"`) is checked and rendered per item.

use serde_json::Value;

mod support;

fn spec_with(contracts: &str) -> String {
    format!(
        "version: 1\ncontracts:\n{contracts}flows:\n  entry: main\n  main:\n    input: {{}}\n    output: {{from: \"${{w.output}}\", contract: A}}\n    steps:\n      - {{id: w, do: \"x\", out: A}}\n"
    )
}

#[test]
fn a_missing_file_is_an_error_and_never_an_ok_summary() {
    let dir = support::scratch("issue16", "missing");
    let (code, stdout, stderr) = support::stratumc_in(&dir, None, &["check", "missing.yaml"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read missing.yaml"), "{stderr}");
    assert!(
        !stderr.contains("ok:") && !stdout.contains("ok:"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_contract_cycle_names_its_field() {
    let dir = support::scratch("issue16", "cycles");
    let cases = [
        (
            "  A: {a: A}\n",
            "contract `A` refers back to `A` through field `a`",
        ),
        (
            "  A: {b: \"B?\"}\n  B: {a: \"A[][]\"}\n",
            "contract `B` refers back to `A` through field `a`",
        ),
        (
            "  A: {b: B}\n  B: {c: \"C[]\"}\n  C: {back: \"A?\"}\n",
            "contract `C` refers back to `A` through field `back`",
        ),
    ];
    for (contracts, want) in cases {
        let path = dir.join("c.stratum.yaml");
        std::fs::write(&path, spec_with(contracts)).unwrap();
        let (code, stdout, _) =
            support::stratumc_in(&dir, None, &["check", "--color", "never", "c.stratum.yaml"]);
        assert_eq!(code, 1, "{stdout}");
        assert!(stdout.contains(want), "{contracts}: {stdout}");
        assert!(!stdout.contains("through field ``"), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Fixed by templated paths (X3): `${item}` in a file predicate is a path
/// template, rendered for each item, not a literal name never rendered.
#[test]
fn an_item_templated_file_path_is_rendered_per_item() {
    let dir = support::scratch("issue16", "item-path");
    let spec = r#"version: 1
contracts:
  R: {ok: boolean}
flows:
  entry: main
  main:
    input: {names: "string[]"}
    output: {from: "${last.output}", contract: R}
    steps:
      - id: each
        fanout:
          over: "${input.names}"
          concurrency: 1
          isolation: none
          require: all
          merge: sequential
          steps:
            - do: "write ${item}.txt"
              attempts: 1
              ensure:
                - file_exists: "${item}.txt"
      - {id: last, after: [each], do: "sum up", out: R}
"#;
    std::fs::write(dir.join("f.stratum.yaml"), spec).unwrap();
    let (code, _, stderr) = support::stratumc_in(&dir, None, &["check", "f.stratum.yaml"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("0 warnings"), "{stderr}");
    // the agent writes only the first item's file: the second item fails on its own path
    let agent = r#"python3 -c 'import json,sys; e=json.load(sys.stdin); e["item"]=="a" and open("a.txt","w").write("x"); print(json.dumps({"output": {}}))'"#;
    let home = dir.join("home");
    let (code, stdout, stderr) = support::stratumc_in(
        &dir,
        Some(&home),
        &[
            "run",
            "f.stratum.yaml",
            "--inputs",
            r#"{"names": ["a", "b"]}"#,
            "--agent",
            agent,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["status"], "failed", "{doc}");
    assert!(dir.join("a.txt").exists());
    let run = doc["runId"].as_str().unwrap();
    let (_, report, _) =
        support::stratumc_in(&dir, Some(&home), &["report", run, "--format", "json"]);
    assert!(
        report.contains("b.txt") && report.contains("a.txt"),
        "{report}"
    );
    assert!(!report.contains("${item}"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
