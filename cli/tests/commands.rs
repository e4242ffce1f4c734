//! X12 declared commands through the binary: a run whose `evaluate` step
//! runs `[commands.triage]` (stdin from `in`, its stdout the result) and
//! whose `do` step is checked by `exec` on `[commands.made]`;
//! `stratumc query flow RUN --receipts` (table and JSON) and `stratumc
//! report` show the receipts; `build --emit asm` and `graph` list the new
//! forms.

use std::path::PathBuf;
use std::process::{Command, Stdio};

mod support;
use support::Ran;

const SPEC: &str = r#"version: 1
contracts:
  Triage: {status: "closed|open|failed", children: "string[]", reason: string}
  Done: {ok: boolean}
flows:
  entry: main
  main:
    input: {why: string}
    output: {from: "${build.output}", contract: Done}
    steps:
      - id: triage
        evaluate:
          command: triage
          timeout_ms: 5000
          in: '{"status": "open", "children": ["t1"], "reason": "${input.why}"}'
        out: Triage
      - id: build
        do: "Fix ${triage.output.children}"
        out: Done
        ensure:
          - exec: {run: made, args: ["made.txt"]}
          - expr: "len(receipts()) == 1 && receipts()[0].exit == 0"
"#;

const CONFIG: &str = r#"[commands.triage]
argv = ["cat"]
timeout_ms = 60000

[commands.made]
argv = ["test", "-f"]
"#;

/// Writes made.txt, then answers.
const AGENT: &str = r#"printf made > made.txt && printf '{"output": {"ok": true}}'"#;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = support::scratch("commands", tag);
        std::fs::write(dir.join("spec.stratum.yaml"), SPEC).unwrap();
        std::fs::write(dir.join("stratum.toml"), CONFIG).unwrap();
        Scratch(dir)
    }

    fn ran(&self, args: &[&str]) -> Ran {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.env("STRATUM_HOME", self.0.join("home"))
            .env("NO_COLOR", "1")
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
            r#"{"why": "a test fails"}"#,
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
fn query_flow_receipts_lists_every_command_the_run_ran() {
    let s = Scratch::new("query");
    let id = s.completed_run();
    let doc = s
        .ran(&["query", "flow", &id, "--receipts", "--format", "json"])
        .doc();
    let list = doc["receipts"].as_array().expect("a list of receipts");
    assert_eq!(list.len(), 2, "{doc}");
    assert_eq!(list[0]["step"], "triage");
    assert_eq!(list[0]["command"], "triage");
    assert_eq!(list[0]["argv"], serde_json::json!(["cat"]));
    assert_eq!(list[0]["exit"], 0);
    // `cat` echoed the rendered `in`
    assert!(
        list[0]["tail"]
            .as_str()
            .is_some_and(|t| t.contains(r#""reason": "a test fails""#)),
        "{doc}"
    );
    assert_eq!(list[1]["step"], "build");
    assert_eq!(
        list[1]["argv"],
        serde_json::json!(["test", "-f", "made.txt"])
    );
    assert_eq!(list[1]["stdout_sha256"].as_str().map(str::len), Some(64));
    let human = s.ran(&["query", "flow", &id, "--receipts"]);
    assert_eq!(human.code, 0, "{}", human.context());
    assert!(
        human.stdout.contains("COMMAND") && human.stdout.contains("test -f made.txt"),
        "{}",
        human.context()
    );
    let state = s.ran(&["query", "flow", &id, "--format", "json"]).doc();
    assert_eq!(state["run"]["steps"][0]["kind"], "evaluate", "{state}");
    assert!(
        state["run"]["steps"][0]["outputSummary"]
            .as_str()
            .is_some_and(|o| o.contains(r#""children":["t1"]"#)),
        "{state}"
    );
}

#[test]
fn report_shows_the_receipts_of_each_step() {
    let s = Scratch::new("report");
    let id = s.completed_run();
    let doc = s.ran(&["report", &id, "--format", "json"]).doc();
    let steps = doc["report"]["steps"].as_array().expect("steps");
    let build = steps
        .iter()
        .find(|st| st["id"] == "build")
        .expect("the build step");
    assert_eq!(build["receipts"][0]["command"], "made", "{doc}");
    assert_eq!(build["receipts"][0]["exit"], 0);
    let triage = steps.iter().find(|st| st["id"] == "triage").unwrap();
    assert_eq!(triage["kind"], "evaluate");
    assert_eq!(triage["receipts"][0]["command"], "triage");
    let md = s.ran(&["report", &id]);
    assert_eq!(md.code, 0, "{}", md.context());
    assert!(
        md.stdout.contains("stdout sha256") && md.stdout.contains("`test -f made.txt`"),
        "{}",
        md.stdout
    );
    let timeline = s.ran(&["report", &id]).stdout;
    assert!(timeline.contains("`made` exited 0"), "{timeline}");
}

#[test]
fn listings_show_evaluate_steps_and_exec_checks() {
    let s = Scratch::new("listings");
    let asm = s.ran(&["build", "--emit", "asm", "spec.stratum.yaml"]);
    assert_eq!(asm.code, 0, "{}", asm.context());
    assert!(
        asm.stdout.contains(r#"evaluate "triage" timeout 5000 ms"#)
            && asm
                .stdout
                .contains(r#"exec "made" args ["made.txt"] expect_exit 0"#),
        "{}",
        asm.stdout
    );
    let graph = s.ran(&["graph", "spec.stratum.yaml"]);
    assert_eq!(graph.code, 0, "{}", graph.context());
    assert!(
        graph.stdout.contains("evaluate · triage"),
        "{}",
        graph.stdout
    );
    let check = s.ran(&["check", "spec.stratum.yaml", "--portable"]);
    assert!(
        check.stdout.contains("S0912") || check.stderr.contains("S0912"),
        "{}",
        check.context()
    );
    std::fs::write(
        s.0.join("stratum.toml"),
        "[commands.made]\nargv = [\"true\"]\n",
    )
    .unwrap();
    let check = s.ran(&["check", "spec.stratum.yaml"]);
    assert!(
        check.stdout.contains("S0334") || check.stderr.contains("S0334"),
        "{}",
        check.context()
    );
}
