//! X4 artifacts through the binary: a run whose agent writes its artifacts,
//! `stratumc query flow RUN --artifacts` (table and JSON), and `stratumc
//! verify RUN` (0 while the files are unchanged, 1 after one is edited or
//! removed, 2 for an unknown run).

use std::path::PathBuf;
use std::process::{Command, Stdio};

mod support;
use support::Ran;

const SPEC: &str = r#"version: 1
contracts:
  Report:
    title: string
flows:
  entry: main
  main:
    input:
      text: string
    output:
      from: "${write.output}"
      contract: Report
    steps:
      - id: write
        do: "Write the report on ${input.text}"
        out: Report
        artifacts: ["out/report.md", "out/figs/*.png"]
"#;

/// Writes the artifacts, then answers.
const AGENT: &str = r#"mkdir -p out/figs && printf 'the report' > out/report.md && printf A > out/figs/a.png && printf '{"output": {"title": "done"}}'"#;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = support::scratch("artifacts", tag);
        std::fs::write(dir.join("spec.stratum.yaml"), SPEC).unwrap();
        Scratch(dir)
    }

    fn ran(&self, args: &[&str]) -> Ran {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.0.join("home"))
            .env_remove("STRATUM_SCENARIO")
            .current_dir(&self.0)
            .stdin(Stdio::null())
            .args(args);
        Ran::of(&mut c)
    }

    fn completed_run(&self) -> String {
        let r = self.ran(&[
            "run",
            "spec.stratum.yaml",
            "--inputs",
            r#"{"text": "x"}"#,
            "--agent",
            AGENT,
            "--format",
            "json",
        ]);
        r.completed();
        r.run_id()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn query_flow_artifacts_lists_the_manifest() {
    let s = Scratch::new("query");
    let id = s.completed_run();
    let doc = s
        .ran(&["query", "flow", &id, "--artifacts", "--format", "json"])
        .doc();
    let m = &doc["manifests"][0];
    assert_eq!(m["step"], "write");
    assert_eq!(m["attempt"], 1);
    let paths: Vec<&str> = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["out/figs/a.png", "out/report.md"]);
    assert_eq!(
        m["files"][1]["sha256"], "14e4cce86788499d03144f70ab24ca83d1abe97d55153c71ee1df55c5296c1f9",
        "sha256 of `the report`"
    );
    assert_eq!(m["digest"].as_str().map(str::len), Some(64));
    let human = s.ran(&["query", "flow", &id, "--artifacts"]);
    assert_eq!(human.code, 0, "{}", human.context());
    assert!(
        human.stdout.contains("write attempt 1: 2 files, digest ")
            && human.stdout.contains("out/report.md"),
        "{}",
        human.context()
    );
}

#[test]
fn verify_is_0_unchanged_1_after_an_edit_or_removal_2_for_an_unknown_run() {
    let s = Scratch::new("verify");
    let id = s.completed_run();
    let ok = s.ran(&["verify", &id]);
    assert_eq!(ok.code, 0, "{}", ok.context());
    assert!(
        ok.stdout.contains("all 2 recorded files"),
        "{}",
        ok.context()
    );

    std::fs::write(s.0.join("out/report.md"), "edited").unwrap();
    std::fs::remove_file(s.0.join("out/figs/a.png")).unwrap();
    let changed = s.ran(&["verify", &id, "--format", "json"]);
    assert_eq!(changed.code, 1, "{}", changed.context());
    let doc = changed.doc();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["differences"], 2);
    let status: Vec<(&str, &str)> = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        status,
        [("out/figs/a.png", "missing"), ("out/report.md", "changed")]
    );
    let human = s.ran(&["verify", &id]);
    assert_eq!(human.code, 1, "{}", human.context());
    assert!(
        human.stdout.contains("2 of 2 recorded files"),
        "{}",
        human.context()
    );

    s.ran(&["verify", "run-nope"]).fails(2, "no run `run-nope`");
}
