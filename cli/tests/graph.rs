//! End-to-end tests of `stratumc graph`: golden DOT and Mermaid for every
//! example, SVG through Graphviz (or the clear error when `dot` is missing),
//! colours from a run driven by `stratumc run`, and the error cases (spec
//! errors: exit 1; unknown flow, unknown run, missing file, wrong flow for
//! the run: exit 2).
//!
//! Snapshots: regenerate with `INSTA_UPDATE=always cargo test -p stratumc --test graph`
//! and review the diff.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;
use support::{example_name, examples, root, stratumc_in};

/// Runs `stratumc ARGS` with `STRATUM_HOME=home`; returns (exit, stdout, stderr).
fn stratumc(home: &Path, args: &[&str]) -> (i32, String, String) {
    stratumc_in(&root(), Some(home), args)
}

fn scratch(name: &str) -> PathBuf {
    support::scratch("graph", name)
}

fn has_graphviz() -> bool {
    Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_example_as_dot_and_mermaid() {
    let home = scratch("golden");
    let files = examples();
    assert!(files.len() >= 7);
    for f in &files {
        let name = example_name(f);
        let path = f.to_string_lossy();
        let (code, dot, stderr) = stratumc(&home, &["graph", &path]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(dot.contains("digraph stratum {"), "{dot}");
        // deterministic: a second run gives the same bytes
        assert_eq!(stratumc(&home, &["graph", &path]).1, dot);
        insta::assert_snapshot!(format!("dot__{name}"), dot);
        let (code, mermaid, stderr) = stratumc(&home, &["graph", &path, "--format", "mermaid"]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(mermaid.contains("\nflowchart TD\n"), "{mermaid}");
        insta::assert_snapshot!(format!("mermaid__{name}"), mermaid);
        if has_graphviz() {
            // Graphviz accepts the DOT (an invalid file exits non-zero)
            let (code, svg, stderr) = stratumc(&home, &["graph", &path, "--format", "svg"]);
            assert_eq!(code, 0, "{name}: {stderr}");
            assert!(svg.contains("<svg"), "{name}: {svg}");
            assert!(svg.contains("</svg>"), "{name}");
        }
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn every_flow_of_a_spec_can_be_drawn() {
    let home = scratch("flows");
    let spec = "examples/flow-composition.stratum.yaml";
    let text = std::fs::read_to_string(root().join(spec)).unwrap();
    let analysis = stratum_compiler::analyze(&text);
    let ir = analysis.ir.expect("the example is valid");
    for f in &ir.flows {
        let (code, dot, stderr) = stratumc(&home, &["graph", spec, "--flow", &f.name]);
        assert_eq!(code, 0, "{}: {stderr}", f.name);
        assert!(dot.contains(&format!("label=\"flow {}\"", f.name)), "{dot}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn edges_are_drawn_by_kind() {
    let home = scratch("kinds");
    let (code, dot, _) = stratumc(&home, &["graph", "examples/on-fail-routing.stratum.yaml"]);
    assert_eq!(code, 0);
    assert!(dot.contains("label=\"on_fail\""), "{dot}");
    assert!(dot.contains("style=dashed"), "{dot}");
    let (_, dot, _) = stratumc(
        &home,
        &["graph", "examples/reviewed-work-gate.stratum.yaml"],
    );
    assert!(dot.contains("style=dotted"), "{dot}");
    assert!(dot.contains("revise ↺ resets"), "{dot}");
    let (_, dot, _) = stratumc(&home, &["graph", "examples/five-constructs.stratum.yaml"]);
    // fanout and sub-flow boxes, entered and left at their borders
    assert!(dot.contains("subgraph cluster_0 {"), "{dot}");
    assert!(
        dot.contains("label=\"run child → flow summarize\""),
        "{dot}"
    );
    assert!(dot.contains("lhead=cluster_1"), "{dot}");
    assert!(dot.contains("shape=diamond"), "{dot}");
    assert!(dot.contains("shape=parallelogram"), "{dot}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn continue_and_state_edges_are_drawn_distinctly() {
    // X2: the edges out of an `on_fail: continue` step are labelled
    // `continue`; X1: a `${gate.note}` read is a `status` edge
    let home = scratch("continue");
    let spec = "tests/conformance/ext/x2-escalate.stratum.yaml";
    let (code, dot, err) = stratumc(&home, &["graph", spec]);
    assert_eq!(code, 0, "{err}");
    assert!(dot.contains("label=\"continue\""), "{dot}");
    insta::assert_snapshot!("dot__x2-escalate", dot);
    let (_, mermaid, _) = stratumc(&home, &["graph", spec, "--format", "mermaid"]);
    insta::assert_snapshot!("mermaid__x2-escalate", mermaid);
    let (_, dot, _) = stratumc(
        &home,
        &[
            "graph",
            "tests/conformance/ext/x1-template-state-ok.stratum.yaml",
        ],
    );
    assert!(dot.contains("label=\"status\""), "{dot}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn svg_without_graphviz_says_what_to_do() {
    let home = scratch("nodot");
    // an empty PATH: no `dot` can be found
    let empty = home.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
        .args(["graph", "examples/iterate.stratum.yaml", "--format", "svg"])
        .current_dir(root())
        .env("PATH", &empty)
        .env("STRATUM_HOME", &home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("install graphviz"), "{stderr}");
    assert!(stderr.contains("--format dot"), "{stderr}");
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_run_colours_the_steps() {
    let home = scratch("run");
    let ws = home.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let agent = format!(
        "python3 {}",
        root()
            .join("examples/agents/on-fail-routing.py")
            .to_string_lossy()
    );
    let (code, _, stderr) = stratumc(
        &home,
        &[
            "run",
            "examples/on-fail-routing.stratum.yaml",
            "--inputs",
            "@examples/inputs/on-fail-routing.json",
            "--agent",
            &agent,
            "--workspace",
            &ws.to_string_lossy(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let run_id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .expect("`run: <id>` on stderr")
        .trim()
        .to_string();
    let spec = "examples/on-fail-routing.stratum.yaml";
    let (code, dot, stderr) = stratumc(&home, &["graph", spec, "--run", &run_id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "same plan, no warning: {stderr}");
    let dot = dot.replace(&run_id, "RUN");
    insta::assert_snapshot!("dot__on-fail-routing-run", dot);
    let (code, mermaid, _) = stratumc(
        &home,
        &["graph", spec, "--run", &run_id, "--format", "mermaid"],
    );
    assert_eq!(code, 0);
    insta::assert_snapshot!(
        "mermaid__on-fail-routing-run",
        mermaid.replace(&run_id, "RUN")
    );

    // the run's flow is `build`; another flow is refused
    let (code, _, stderr) = stratumc(&home, &["graph", spec, "--run", &run_id, "--flow", "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no flow `nope`"), "{stderr}");
    // an unknown run
    let (code, out, stderr) = stratumc(&home, &["graph", spec, "--run", "run-0000"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(stderr.contains("no run `run-0000`"), "{stderr}");
    // no store at all: nothing is created
    let empty = home.join("no-store");
    let (code, _, stderr) = stratumc(&empty, &["graph", spec, "--run", &run_id]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no run store"), "{stderr}");
    assert!(!empty.exists());
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn the_research_pipeline_shows_leases_artifacts_show_files_and_judges() {
    // language 1.1 part one on the nodes: X7 leases, X4 artifacts and gate
    // `show` files, X5 scored judges, X2 continue edges
    let home = scratch("research");
    let spec = "examples/research-pipeline/research.stratum.yaml";
    let (code, dot, err) = stratumc(&home, &["graph", spec]);
    assert_eq!(code, 0, "{err}");
    for label in [
        "label=\"flow research\\ndispatch lease ⏱ 30 min\"",
        "attempts 3 · ⏱ 10 min\\nartifacts: 2\\n",
        "⏱ 20 min\\nartifacts: 3 · figures/*.png\\nensure ×6\\njudge local ≥ 0.75\"",
        "ensure ×7\\njudge local ≥ 0.7\"",
        "show: 2 files",
        "label=\"continue\"",
    ] {
        assert!(dot.contains(label), "{label}\n{dot}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_run_colours_a_step_with_a_lease_and_artifacts() {
    let home = scratch("lease-run");
    let ws = home.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let spec = home.join("lease.stratum.yaml");
    std::fs::write(
        &spec,
        "version: 1
contracts:
  R: {v: string}
flows:
  entry: a
  a:
    input: {}
    output: {from: \"${x.output}\", contract: R}
    steps:
      - id: x
        do: \"write out.txt\"
        out: R
        timeout_ms: 90000
        artifacts: [\"out.txt\"]
",
    )
    .unwrap();
    let spec = spec.to_string_lossy().to_string();
    let agent = "echo hi > out.txt; echo '{\"output\": {\"v\": \"ok\"}}'";
    let (code, _, stderr) = stratumc(
        &home,
        &[
            "run",
            &spec,
            "--agent",
            agent,
            "--workspace",
            &ws.to_string_lossy(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let run_id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .expect("`run: <id>` on stderr")
        .trim()
        .to_string();
    let (code, dot, stderr) = stratumc(&home, &["graph", &spec, "--run", &run_id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        dot.contains("label=\"x\\ndo · claude\\n→ R\\n⏱ 90 s\\nartifacts: 1\\n● succeeded\", fillcolor=\"#c8f0c8\""),
        "{dot}"
    );
    let (code, mermaid, _) = stratumc(
        &home,
        &["graph", &spec, "--run", &run_id, "--format", "mermaid"],
    );
    assert_eq!(code, 0);
    assert!(
        mermaid.contains(
            "(\"x<br/>do · claude<br/>→ R<br/>⏱ 90 s<br/>artifacts: 1<br/>● succeeded\")"
        ),
        "{mermaid}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_run_of_another_flow_is_refused() {
    let home = scratch("otherflow");
    let dir = home.join("spec");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("two.stratum.yaml");
    std::fs::write(
        &spec,
        "version: 1
contracts:
  R: {v: string}
flows:
  entry: a
  a:
    input: {}
    output: {from: \"${x.output}\", contract: R}
    steps:
      - id: x
        do: \"x\"
        out: R
  b:
    input: {}
    output: {from: \"${y.output}\", contract: R}
    steps:
      - id: y
        do: \"y\"
        out: R
",
    )
    .unwrap();
    let spec = spec.to_string_lossy().to_string();
    let agent = "echo '{\"output\": {\"v\": \"ok\"}}'";
    let (code, _, stderr) = stratumc(&home, &["run", &spec, "--agent", agent]);
    assert_eq!(code, 0, "{stderr}");
    let run_id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap()
        .trim()
        .to_string();
    let (code, _, stderr) = stratumc(&home, &["graph", &spec, "--run", &run_id, "--flow", "b"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("runs flow `a`, not `b`"), "{stderr}");
    let (code, dot, _) = stratumc(&home, &["graph", &spec, "--run", &run_id]);
    assert_eq!(code, 0);
    assert!(dot.contains("● succeeded"), "{dot}");
    assert!(dot.contains("fillcolor=\"#c8f0c8\""), "{dot}");
    // the spec changed since the run: a warning, steps matched by id
    std::fs::write(
        &spec,
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("do: \"x\"", "do: \"x2\""),
    )
    .unwrap();
    let (code, dot, stderr) = stratumc(&home, &["graph", &spec, "--run", &run_id]);
    assert_eq!(code, 0);
    assert!(stderr.contains("different plan"), "{stderr}");
    assert!(dot.contains("● succeeded"), "{dot}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn errors_and_exit_codes() {
    let home = scratch("errors");
    // spec errors: diagnostics on stderr, exit 1, nothing on stdout
    let (code, out, stderr) = stratumc(
        &home,
        &["graph", "cli/tests/fixtures/bad-types.stratum.yaml"],
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(stderr.contains("no graph drawn"), "{stderr}");
    // unknown flow
    let (code, _, stderr) = stratumc(
        &home,
        &["graph", "examples/iterate.stratum.yaml", "--flow", "nope"],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no flow `nope`") && stderr.contains("its flows are"),
        "{stderr}"
    );
    // missing file
    let (code, _, stderr) = stratumc(&home, &["graph", "no/such.stratum.yaml"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read"), "{stderr}");
    // unknown format
    let (code, _, _) = stratumc(
        &home,
        &["graph", "examples/iterate.stratum.yaml", "--format", "png"],
    );
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&home);
}

/// X9: a route's `goto` and an `on_fail` `goto` are drawn as back edges
/// labelled with what they reset; a recovery step of an `on_fail` list is
/// an ordinary `on_fail` edge.
#[test]
fn route_and_on_fail_goto_back_edges() {
    let home = scratch("x9");
    let (code, dot, err) = stratumc(
        &home,
        &["graph", "tests/conformance/ext/x9-on-fail-ok.stratum.yaml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(dot.contains("on_fail ↺ resets plan, impl"), "{dot}");
    assert!(dot.contains("on_fail ↺ resets impl"), "{dot}");
    assert!(dot.contains("label=\"on_fail\""), "{dot}");
    let (code, dot, err) = stratumc(
        &home,
        &["graph", "tests/conformance/ext/x9-route-ok.stratum.yaml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(dot.contains("route ↺ resets"), "{dot}");
    let _ = std::fs::remove_dir_all(&home);
}
