//! StratumCode (seed 002) end to end through the built binary:
//! `examples/stratumcode/` driving its scripted agent over a real git
//! repository (`examples/stratumcode/project/`, a small Python package
//! whose unit tests fail), with real edits, real snapshots and the
//! project's real tests run through `[commands.test]`:
//!
//! - the clarify gate's three options, answered with `--choice`, reach the
//!   re-run investigation pass and, through its output, the design;
//! - an implementation attempt that edits a file outside its scope: the
//!   violation is reported, the stray edit put back, the retry passes;
//! - the first implementation leaves a test failing, validation's `exec`
//!   fails, `on_fail` rolls the patch back and routes to implementation
//!   (within `max`), the second passes; the final diff is the expected one;
//! - a route whose `max` is spent fails the step with `route_exhausted`;
//! - a failing implementation rolls the tree back to the snapshot (`git
//!   status` clean), and a file changed by someone else in between is
//!   reported as a conflict, not overwritten;
//! - the audit holds transitions, receipts and patch records; the user's
//!   HEAD and index are untouched and no `refs/stratum` ref is left.
//!
//! Needs `python3` and `git`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const CHOICE: &str = "fold case and strip surrounding punctuation";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/stratumcode")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// A scratch git repository of the example's project (with the example's
/// `stratum.toml` committed at its root), its own store and agent knobs.
struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    log: PathBuf,
    knobs: PathBuf,
    head: String,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.email=t@example.org", "-c", "user.name=t"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

impl Repo {
    fn new(knobs: Value) -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        copy_dir(&example().join("project"), &root);
        std::fs::copy(example().join("stratum.toml"), root.join("stratum.toml")).unwrap();
        git(&root, &["init", "-q"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "textstats with failing tests"]);
        let head = git(&root, &["rev-parse", "HEAD"]);
        let knobs_path = dir.path().join("knobs.json");
        std::fs::write(&knobs_path, knobs.to_string()).unwrap();
        Repo {
            home: dir.path().join("home"),
            log: dir.path().join("agent-log.jsonl"),
            knobs: knobs_path,
            root,
            head,
            _dir: dir,
        }
    }

    fn stratumc(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
        c.current_dir(&self.root)
            .env("STRATUM_HOME", &self.home)
            .env("STRATUMCODE_AGENT_LOG", &self.log)
            .env("STRATUMCODE_AGENT_CONFIG", &self.knobs)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    fn out(&self, args: &[&str]) -> Output {
        self.stratumc().args(args).output().expect("stratumc runs")
    }

    fn agent() -> String {
        format!(
            "python3 {}",
            example().join("agents/stratumcode-agent.py").display()
        )
    }

    /// `stratumc run` of the example with `inputs`; the run's JSON document.
    fn run(&self, inputs: Value, extra: &[&str]) -> (Option<i32>, Value) {
        let spec = example().join("stratumcode.stratum.yaml");
        let inputs = inputs.to_string();
        let agent = Repo::agent();
        let mut args = vec![
            "run",
            spec.to_str().unwrap(),
            "--inputs",
            &inputs,
            "--agent",
            &agent,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = self.out(&args);
        (out.status.code(), doc(&out))
    }

    fn resume(&self, run: &str) -> (Option<i32>, Value) {
        let agent = Repo::agent();
        let out = self.out(&[
            "run", "--resume", run, "--agent", &agent, "--format", "json",
        ]);
        (out.status.code(), doc(&out))
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.out(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    }

    /// The run's audit events of kind `kind` (`query events`).
    fn events(&self, run: &str, kind: &str) -> Vec<Value> {
        let v = self.json(&["query", "events", run, "--type", kind, "--format", "json"]);
        v["events"]
            .as_array()
            .unwrap_or_else(|| panic!("events in {v}"))
            .iter()
            .map(|e| e["detail"].clone())
            .collect()
    }

    fn dispatches(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root.join(path)).unwrap()
    }

    fn status(&self) -> String {
        git(&self.root, &["status", "--porcelain"])
    }

    /// The user's branch, index and stash are as they were, and the run
    /// left no snapshot refs behind.
    fn untouched(&self) {
        assert_eq!(git(&self.root, &["rev-parse", "HEAD"]), self.head);
        assert_eq!(git(&self.root, &["diff", "--cached", "--name-only"]), "");
        assert_eq!(git(&self.root, &["stash", "list"]), "");
        assert_eq!(git(&self.root, &["for-each-ref", "refs/stratum"]), "");
    }
}

fn doc(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not one JSON document: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn run_id(v: &Value) -> String {
    v["runId"].as_str().expect("a run id").to_owned()
}

fn inputs(review: bool) -> Value {
    json!({"request": "count_words must ignore case and surrounding punctuation", "review": review})
}

fn project_tests_pass(root: &Path) -> bool {
    Command::new("python3")
        .args(["-m", "unittest", "-q"])
        .current_dir(root)
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn the_whole_machine_runs_with_a_choice_a_scope_violation_and_a_route_back() {
    let repo =
        Repo::new(json!({"implement": {"stray_edit_first": true, "partial_fix_first": true}}));
    assert!(!project_tests_pass(&repo.root), "the project starts broken");
    // the investigation asks the user: the run waits at the clarify gate
    let (code, v) = repo.run(inputs(false), &[]);
    assert_ne!(code, Some(0), "{v}");
    let run = run_id(&v);
    let gates = repo.json(&["query", "gates", "--format", "json"]);
    let text = gates.to_string();
    for option in [CHOICE, "fold case only", "keep words exactly as written"] {
        assert!(text.contains(option), "the gate offers `{option}`: {gates}");
    }
    // a choice outside the options is refused
    let bad = repo.out(&[
        "gate",
        "revise",
        &run,
        "investigation/clarify",
        "--choice",
        "nonsense",
    ]);
    assert!(!bad.status.success(), "{bad:?}");
    let ok = repo.out(&[
        "gate",
        "revise",
        &run,
        "investigation/clarify",
        "--choice",
        CHOICE,
    ]);
    assert!(ok.status.success(), "{ok:?}");
    let (code, v) = repo.resume(&run);
    assert_eq!(code, Some(0), "the run completes: {v}");
    assert_eq!(v["status"], "completed", "{v}");

    // the choice reached the re-run pass (and through its output the design)
    let passes: Vec<Value> = repo
        .dispatches()
        .into_iter()
        .filter(|d| d["id"] == "investigation/pass")
        .collect();
    assert_eq!(passes[1]["previousRevise"]["choice"], CHOICE, "{passes:?}");

    // the stray edit of README.md was a violation, put back, then retried
    let restored = repo.events(&run, "scope_restored");
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(restored[0]["paths"], json!(["README.md"]));
    assert_eq!(
        repo.read("README.md"),
        std::fs::read_to_string(example().join("project/README.md")).unwrap()
    );

    // validation ran the project's real tests: failing, then passing
    let exits: Vec<Value> = repo
        .events(&run, "command_ran")
        .iter()
        .map(|e| e["exit"].clone())
        .collect();
    assert_eq!(exits, [json!(1), json!(0)], "the receipts");
    let routed = repo.events(&run, "routed_back");
    assert_eq!(routed.len(), 1, "{routed:?}");
    assert_eq!(routed[0]["to"], "implement");
    assert_eq!(repo.events(&run, "rolled_back").len(), 1);
    // the re-entered implementation heard why
    let second_is1 = repo
        .dispatches()
        .into_iter()
        .rfind(|d| d["id"] == "implement/0")
        .unwrap();
    assert!(
        second_is1["previousRoute"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("tests failed")),
        "{second_is1}"
    );

    // the final diff of the repository is exactly the expected one
    assert_eq!(
        repo.status(),
        " M textstats/wordcount.py\n?? CHANGELOG.md\n"
    );
    assert!(project_tests_pass(&repo.root));
    assert!(
        repo.read("textstats/wordcount.py")
            .contains("def normalize(word):")
    );
    assert!(
        repo.read("CHANGELOG.md")
            .contains("count_words ignores case")
    );

    // every accepted scoped dispatch has a patch record with its hashes
    let patches = repo.json(&["query", "flow", &run, "--patches", "--format", "json"]);
    let list = patches["patches"].as_array().unwrap();
    assert!(list.len() >= 4, "{patches}");
    let last_is1 = list
        .iter()
        .rev()
        .find(|p| p["files"][0]["path"] == "textstats/wordcount.py")
        .expect("a patch of wordcount.py");
    assert!(
        last_is1["files"][0]["before"]
            .as_str()
            .is_some_and(|h| h.len() == 64)
    );
    assert!(
        last_is1["diff"]
            .as_str()
            .unwrap()
            .contains("+def normalize(word):"),
        "{last_is1}"
    );
    repo.untouched();
}

#[test]
fn a_spent_route_fails_the_step_with_route_exhausted() {
    let repo = Repo::new(json!({"design": {"gap": "always"}}));
    let rule = format!("investigation/clarify=revise:{CHOICE}");
    let (code, v) = repo.run(inputs(false), &["--gate", &rule]);
    assert_ne!(code, Some(0), "{v}");
    let reason = v.to_string();
    assert!(reason.contains("route_exhausted"), "{v}");
    let designs = repo
        .dispatches()
        .iter()
        .filter(|d| d["id"] == "design")
        .count();
    assert_eq!(designs, 2, "the route fired once (max 1), then was spent");
    assert_eq!(repo.status(), "", "read-only states changed nothing");
    repo.untouched();
}

#[test]
fn a_failing_implementation_rolls_the_tree_back_to_its_snapshot() {
    let repo = Repo::new(json!({
        "implement": {"fail_is2": true},
        "plan": {"refuse_when_routed": true}
    }));
    let rule = format!("investigation/clarify=revise:{CHOICE}");
    let (code, v) = repo.run(inputs(false), &["--gate", &rule]);
    assert_ne!(code, Some(0), "{v}");
    let run = run_id(&v);
    // IS1 was applied and accepted, IS2 failed: the patch was undone
    let rolled = repo.events(&run, "rolled_back");
    assert_eq!(rolled.len(), 1, "{rolled:?}");
    assert_eq!(rolled[0]["paths"], json!(["textstats/wordcount.py"]));
    assert_eq!(repo.status(), "", "git status is clean after the rollback");
    assert_eq!(git(&repo.root, &["diff"]), "");
    repo.untouched();
}

#[test]
fn a_second_failing_implementation_rolls_back_and_fails_for_good() {
    let repo = Repo::new(json!({"implement": {"fail_is2": true}}));
    let rule = format!("investigation/clarify=revise:{CHOICE}");
    let (code, v) = repo.run(inputs(false), &["--gate", &rule]);
    assert_ne!(code, Some(0), "{v}");
    let run = run_id(&v);
    // the goto back to planning is taken once; the second failure takes
    // `{rollback: implement}` alone: the tree goes back, the run fails
    assert_eq!(repo.events(&run, "routed_back").len(), 1);
    let rolled = repo.events(&run, "rolled_back");
    assert_eq!(rolled.len(), 2, "{rolled:?}");
    assert!(v.to_string().contains("fanout require all not met"), "{v}");
    assert_eq!(
        repo.status(),
        "",
        "git status is clean after the last rollback"
    );
    repo.untouched();
}

#[test]
fn a_rollback_leaves_a_file_changed_by_someone_else_and_reports_the_conflict() {
    let repo = Repo::new(json!({"implement": {"partial_fix_first": true}}));
    let rule = format!("investigation/clarify=revise:{CHOICE}");
    // with review on, the run waits at the review gate after implementing
    let (code, v) = repo.run(inputs(true), &["--gate", &rule]);
    assert_ne!(code, Some(0), "{v}");
    let run = run_id(&v);
    assert!(repo.read("CHANGELOG.md").contains("count_words"));
    // someone else edits a patched file while the gate waits
    let theirs = "# edited by hand\n";
    std::fs::write(repo.root.join("textstats/wordcount.py"), theirs).unwrap();
    let ok = repo.out(&["gate", "approve", &run, "review"]);
    assert!(ok.status.success(), "{ok:?}");
    let (code, v) = repo.resume(&run);
    assert_ne!(code, Some(0), "{v}");
    let text = v.to_string();
    assert!(text.contains("rollback_conflict"), "{v}");
    assert!(text.contains("textstats/wordcount.py"), "{v}");
    // the other person's edit is not overwritten; the changelog was undone
    assert_eq!(repo.read("textstats/wordcount.py"), theirs);
    assert!(!repo.root.join("CHANGELOG.md").exists());
    repo.untouched();
}

#[test]
fn the_loop_bounds_are_compile_time_facts() {
    let spec = example().join("stratumcode.stratum.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
        .args(["cost", spec.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v.to_string();
    assert!(!text.contains("unbounded"), "{v}");
    // the same spec without a route's `max` is rejected
    let source = std::fs::read_to_string(&spec).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.stratum.yaml");
    std::fs::write(
        &broken,
        source.replacen(
            "            max: 1\n            note: \"design",
            "            note: \"design",
            1,
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stratumc"))
        .args(["check", broken.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("S0326"),
        "{out:?}"
    );
}
