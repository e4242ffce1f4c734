//! X11 scopes through the binary on a real git repository: a dispatch that
//! changes files outside its scope fails with `scope_violation`, the
//! out-of-scope changes are put back and the retry's in-scope patch is
//! recorded (`query flow --patches`, `report`); a write fence; `changes()`;
//! a workspace that is not a git repository is refused when the run starts.
//! Every test checks with git itself that the user's HEAD, branches, index
//! and stash are untouched and that no `refs/stratum/` ref outlives the run.

use std::path::{Path, PathBuf};
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
    input: {}
    output:
      from: "${patch.output}"
      contract: Report
    steps:
      - id: patch
        do: "Fix the bug"
        out: Report
        SCOPE
        ensure:
          - expr: "len(changes()) > 0"
          - expr: "all(changes(), c -> c.status == 'modified')"
"#;

/// First dispatch: an in-scope edit, an edit of `Cargo.toml` and a new
/// `stray.txt` (both outside); second: only the in-scope fix. The marker
/// lives in `.git/`, which no snapshot sees.
const AGENT: &str = r#"if [ -f .git/x11-seen ]; then printf 'fn a() { fixed }\n' > src/lib.rs; else touch .git/x11-seen; printf 'evil\n' > Cargo.toml; printf 'fn a() { in scope }\n' > src/lib.rs; printf new > stray.txt; fi; printf '{"output": {"title": "done"}}'"#;

struct Repo(PathBuf);

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {:?}", out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Repo {
    /// A repository with one commit, a stash entry, a staged change and an
    /// unstaged one (the user's state that a run must not touch).
    fn new(tag: &str, scope: &str) -> Repo {
        let dir = support::scratch("scopes", tag);
        std::fs::write(dir.join("spec.stratum.yaml"), SPEC.replace("SCOPE", scope)).unwrap();
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "fn a() {}\n").unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[package]\n").unwrap();
        std::fs::write(dir.join("README.md"), "readme\n").unwrap();
        std::fs::write(dir.join(".gitignore"), "home/\n").unwrap();
        git(&dir, &["init", "-q"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "init"]);
        std::fs::write(dir.join("README.md"), "stashed\n").unwrap();
        git(&dir, &["stash", "-q"]);
        std::fs::write(dir.join("README.md"), "staged\n").unwrap();
        git(&dir, &["add", "README.md"]);
        Repo(dir)
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

    fn run(&self, agent: &str) -> Ran {
        self.ran(&[
            "run",
            "spec.stratum.yaml",
            "--inputs",
            "{}",
            "--agent",
            agent,
            "--format",
            "json",
        ])
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(path)).ok()
    }

    /// HEAD, branches, the index (staged names and blob ids), the stash.
    fn user_state(&self) -> Vec<String> {
        vec![
            git(&self.0, &["rev-parse", "HEAD"]),
            git(&self.0, &["branch", "-a"]),
            git(&self.0, &["ls-files", "--stage"]),
            git(&self.0, &["stash", "list"]),
            git(&self.0, &["rev-parse", "stash@{0}"]),
        ]
    }

    fn stratum_refs(&self) -> String {
        git(&self.0, &["for-each-ref", "refs/stratum/"])
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn out_of_scope_changes_are_put_back_and_the_retry_is_recorded_as_a_patch() {
    let r = Repo::new("violation", r#"scope: {files: ["src/**"]}"#);
    let before = r.user_state();
    let ran = r.run(AGENT);
    ran.completed();
    let id = ran.run_id();
    assert_eq!(r.read("Cargo.toml").as_deref(), Some("[package]\n"));
    assert_eq!(
        r.read("stray.txt"),
        None,
        "a created file outside `create` is removed"
    );
    assert_eq!(r.read("src/lib.rs").as_deref(), Some("fn a() { fixed }\n"));
    assert_eq!(
        r.user_state(),
        before,
        "HEAD, branches, index and stash untouched"
    );
    assert_eq!(r.read("README.md").as_deref(), Some("staged\n"));
    assert_eq!(
        r.stratum_refs(),
        "",
        "the run's snapshot refs go when it ends"
    );
    // git sees only the agent's in-scope edit besides the user's own staged change
    assert_eq!(
        git(&r.0, &["status", "--porcelain"]),
        "M  README.md\n M src/lib.rs\n"
    );

    let doc = r
        .ran(&["query", "flow", &id, "--patches", "--format", "json"])
        .doc();
    let patches = doc["patches"].as_array().unwrap();
    assert_eq!(patches.len(), 1, "only the accepted dispatch: {doc}");
    let p = &patches[0];
    assert_eq!(
        (p["step"].as_str(), p["attempt"].as_u64()),
        (Some("patch"), Some(2))
    );
    assert_eq!(p["files"][0]["path"], "src/lib.rs");
    assert_eq!(p["files"][0]["status"], "modified");
    assert_eq!(
        p["files"][0]["after"], "916139899f49e00280ef9977798cc5488113d693156f8a33860a88da0aa576a8",
        "sha256 of the fixed file"
    );
    assert!(
        p["diff"].as_str().unwrap().contains("+fn a() { fixed }"),
        "{p}"
    );
    let report = r.ran(&["report", &id]);
    assert_eq!(report.code, 0, "{}", report.context());
    assert!(
        report.stdout.contains(
            "scope_violation: the dispatch changed 2 paths outside its scope: Cargo.toml, stray.txt"
        ) && report.stdout.contains("| `src/lib.rs` | modified |"),
        "{}",
        report.context()
    );
}

#[test]
fn a_write_fence_puts_every_change_back_and_fails_the_step() {
    let r = Repo::new("fence", "scope: {files: []}");
    let before = r.user_state();
    let ran = r.run(r#"printf 'touched\n' > src/lib.rs; printf '{"output": {"title": "x"}}'"#);
    assert_eq!(ran.code, 1, "{}", ran.context());
    let doc = ran.doc();
    assert_eq!(doc["status"], "failed", "{}", ran.context());
    assert!(
        doc["failure"]["reason"].as_str().unwrap().starts_with(
            "scope_violation: the dispatch changed 1 path outside its scope: src/lib.rs"
        ),
        "{doc}"
    );
    assert_eq!(r.read("src/lib.rs").as_deref(), Some("fn a() {}\n"));
    assert_eq!(r.user_state(), before);
    assert_eq!(r.stratum_refs(), "");
}

#[test]
fn changes_sees_nothing_when_the_agent_changed_nothing() {
    let r = Repo::new("zero-diff", r#"scope: {files: ["src/**"]}"#);
    let ran = r.run(r#"printf '{"output": {"title": "x"}}'"#);
    assert_eq!(ran.code, 1, "{}", ran.context());
    let doc = ran.doc();
    assert!(
        doc["failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("len(changes()) > 0"),
        "the zero-diff check fails: {doc}"
    );
}

#[test]
fn a_byte_cap_over_the_in_scope_changes_is_a_violation_that_keeps_them() {
    let r = Repo::new(
        "bytes",
        r#"scope: {files: ["src/**"], max_changed_bytes: 8}"#,
    );
    let ran = r.run(
        r#"printf 'a much longer line than eight bytes\n' > src/lib.rs; printf '{"output": {"title": "x"}}'"#,
    );
    assert_eq!(ran.code, 1, "{}", ran.context());
    // attempt 1 is over the cap (10 bytes removed, 36 added); attempt 2 (the
    // same write) changes nothing new
    let report = r.ran(&["report", &ran.run_id()]);
    assert!(
        report.stdout.contains(
            "scope_violation: the dispatch changed 46 bytes, more than `max_changed_bytes` 8"
        ),
        "{}",
        report.context()
    );
    assert_eq!(
        r.read("src/lib.rs").as_deref(),
        Some("a much longer line than eight bytes\n"),
        "in-scope changes stay"
    );
}

#[test]
fn a_scoped_run_refuses_a_workspace_that_is_not_a_git_repository() {
    let dir = support::scratch("scopes", "no-git");
    std::fs::write(
        dir.join("spec.stratum.yaml"),
        SPEC.replace("SCOPE", r#"scope: {files: ["src/**"]}"#),
    )
    .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    c.env("STRATUM_HOME", dir.join("home"))
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .env_remove("STRATUM_SCENARIO")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .args([
            "run",
            "spec.stratum.yaml",
            "--inputs",
            "{}",
            "--agent",
            "true",
        ]);
    let ran = Ran::of(&mut c);
    assert_ne!(ran.code, 0, "{}", ran.context());
    assert!(
        ran.stderr.contains("steps with `scope`") && ran.stderr.contains("not a git repository"),
        "{}",
        ran.context()
    );
    // `check` does not look at the workspace
    let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    c.current_dir(&dir).args(["check", "spec.stratum.yaml"]);
    let checked = Ran::of(&mut c);
    assert_eq!(checked.code, 0, "{}", checked.context());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `patch` (scoped) then `verify`, whose route goes back to `patch` with
/// `rollback: patch` when the tests fail.
const ROLLBACK_SPEC: &str = r#"version: 1
contracts:
  Report:
    ok: boolean
flows:
  entry: main
  main:
    input: {}
    output:
      from: "${verify.output}"
      contract: Report
    steps:
      - id: patch
        do: "Fix the bug"
        out: Report
        scope:
          files: ["src/**"]
          create: ["src/*.rs"]
      - id: verify
        after: [patch]
        do: "Run the tests"
        out: Report
        route:
          - {when: "!result.ok", goto: patch, max: 1, rollback: patch}
"#;

/// `patch` records what it found, then edits `src/lib.rs` and creates
/// `src/new.rs`; `verify` fails the first round (after `VERIFY_EDIT`, a
/// command that may touch the tree itself) and passes the second.
fn rollback_agent(verify_edit: &str) -> String {
    format!(
        r#"n=$(cat .git/n 2>/dev/null || echo 0); if [ "$STRATUM_STEP_ID" = patch ]; then n=$((n+1)); echo $n > .git/n; cat src/lib.rs > .git/found$n; ls src > .git/ls$n; printf 'fn a() {{ try %s }}\n' $n > src/lib.rs; printf 'new\n' > src/new.rs; printf '{{"output": {{"ok": true}}}}'; elif [ "$n" = 1 ]; then {verify_edit}; printf '{{"output": {{"ok": false}}}}'; else printf '{{"output": {{"ok": true}}}}'; fi"#
    )
}

#[test]
fn rollback_restores_the_patch_before_the_route_goes_back() {
    let r = Repo::new("rollback", "");
    std::fs::write(r.0.join("spec.stratum.yaml"), ROLLBACK_SPEC).unwrap();
    let before = r.user_state();
    let ran = r.run(&rollback_agent("true"));
    ran.completed();
    // the second dispatch of `patch` started from the first one's snapshot
    assert_eq!(r.read(".git/found2").as_deref(), Some("fn a() {}\n"));
    assert_eq!(
        r.read(".git/ls2").as_deref(),
        Some("lib.rs\n"),
        "the created file was removed"
    );
    assert_eq!(r.read("src/lib.rs").as_deref(), Some("fn a() { try 2 }\n"));
    assert_eq!(r.user_state(), before);
    assert_eq!(r.stratum_refs(), "");
    let report = r.ran(&["report", &ran.run_id()]);
    assert!(
        report.stdout.contains("`rolled_back`") && report.stdout.contains(r#""to":"patch""#),
        "{}",
        report.context()
    );
}

#[test]
fn a_file_changed_since_its_patch_is_a_rollback_conflict_and_is_left_alone() {
    let r = Repo::new("conflict", "");
    std::fs::write(r.0.join("spec.stratum.yaml"), ROLLBACK_SPEC).unwrap();
    let ran = r.run(&rollback_agent("printf 'someone else\\n' > src/lib.rs"));
    assert_eq!(ran.code, 1, "{}", ran.context());
    let reason = ran.doc()["failure"]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("rollback_conflict: rolling back to `patch` left 1 path alone")
            && reason.ends_with("src/lib.rs"),
        "{reason}"
    );
    assert_eq!(
        r.read("src/lib.rs").as_deref(),
        Some("someone else\n"),
        "not overwritten"
    );
    assert_eq!(
        r.read("src/new.rs"),
        None,
        "the unchanged created file was rolled back"
    );
    assert_eq!(r.stratum_refs(), "");
}

#[test]
fn a_diff_over_the_inline_bound_is_kept_whole_and_report_diff_prints_it() {
    let r = Repo::new("whole-diff", r#"scope: {files: ["src/**"]}"#);
    // 20,000 numbered lines: a diff of about 130 KiB, twice the inline bound
    let ran = r.run(
        r#"seq 1 20000 | sed 's/^/line /' > src/lib.rs; printf '{"output": {"title": "big"}}'"#,
    );
    let id = ran.run_id();
    let doc = r
        .ran(&["query", "flow", &id, "--patches", "--format", "json"])
        .doc();
    let p = &doc["patches"][0];
    assert_eq!(p["diffTruncated"], true, "{p}");
    let inline = p["diff"].as_str().unwrap();
    assert!(inline.len() <= 64 * 1024, "the inline diff is bounded");

    let whole = r.ran(&["report", &id, "--diff", "patch"]);
    assert_eq!(whole.code, 0, "{}", whole.context());
    assert!(
        whole.stdout.starts_with(inline),
        "the inline diff is its head"
    );
    assert_eq!(Some(whole.stdout.len() as u64), p["diffBytes"].as_u64());
    // it is the patch git itself would apply: reversed, it undoes the edit
    let patch = r.0.join(".git/whole.patch");
    std::fs::write(&patch, &whole.stdout).unwrap();
    let sum = Command::new("sha256sum").arg(&patch).output().unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert_eq!(sum.split(' ').next(), p["diffSha256"].as_str());
    git(&r.0, &["apply", "-R", patch.to_str().unwrap()]);
    assert_eq!(r.read("src/lib.rs").as_deref(), Some("fn a() {}\n"));

    // the report names the command; a step without a patch record is an error
    let report = r.ran(&["report", &id]);
    assert!(
        report
            .stdout
            .contains(&format!("`stratumc report {id} --diff patch --attempt 1`")),
        "{}",
        report.context()
    );
    let none = r.ran(&["report", &id, "--diff", "nope"]);
    assert_eq!(none.code, 2, "{}", none.context());
    assert!(
        none.stderr.contains("has no patch record of step `nope`"),
        "{}",
        none.context()
    );
}

/// `patch` (scoped), then `fan` (a worktree fanout whose item creates
/// `src/<item>.rs`, merged into the workspace), then `verify`, whose route
/// goes back to `patch` with `rollback: patch` when the tests fail.
const WORKTREE_ROLLBACK_SPEC: &str = r#"version: 1
contracts:
  Report:
    ok: boolean
  Plan:
    ok: boolean
    items: "string[]"
flows:
  entry: main
  main:
    input: {}
    output:
      from: "${verify.output}"
      contract: Report
    steps:
      - id: patch
        do: "Fix the bug"
        out: Plan
        scope:
          files: ["src/**"]
          create: ["src/*.rs"]
      - id: fan
        after: [patch]
        fanout:
          over: '${patch.output.items}'
          concurrency: 1
          isolation: worktree
          require: all
          merge: sequential
          steps:
            - do: "Write ${item}"
              out: Report
      - id: verify
        after: [fan]
        do: "Run the tests"
        out: Report
        route:
          - {when: "!result.ok", goto: patch, max: 1, rollback: patch}
"#;

/// `patch` records what `src` held, edits `src/lib.rs`; each item writes
/// `src/<n>.rs` in its worktree; `verify` fails the first round (after
/// `VERIFY_EDIT`) and passes the second.
fn worktree_rollback_agent(verify_edit: &str) -> String {
    format!(
        r#"n=$(cat .git/n 2>/dev/null || echo 0); case "$STRATUM_STEP_ID" in patch) n=$((n+1)); echo $n > .git/n; ls src > .git/ls$n; printf 'fn a() {{ try %s }}\n' $n > src/lib.rs; printf '{{"output": {{"ok": true, "items": ["x"]}}}}';; fan*) printf 'item\n' > src/item.rs; printf '{{"output": {{"ok": true}}}}';; *) if [ "$n" = 1 ]; then {verify_edit}; printf '{{"output": {{"ok": false}}}}'; else printf '{{"output": {{"ok": true}}}}'; fi;; esac"#
    )
}

#[test]
fn rollback_restores_the_files_a_worktree_fanout_merged() {
    let r = Repo::new("wt-rollback", "");
    std::fs::write(r.0.join("spec.stratum.yaml"), WORKTREE_ROLLBACK_SPEC).unwrap();
    let ran = r.run(&worktree_rollback_agent("true"));
    ran.completed();
    // the second dispatch of `patch` found neither its first edit's file
    // nor the file the fanout merged
    assert_eq!(
        r.read(".git/ls2").as_deref(),
        Some("lib.rs\n"),
        "the merged file was rolled back"
    );
    assert_eq!(
        r.read("src/item.rs").as_deref(),
        Some("item\n"),
        "merged again"
    );
    assert_eq!(r.stratum_refs(), "");
}

#[test]
fn a_merged_file_changed_since_the_merge_is_a_rollback_conflict() {
    let r = Repo::new("wt-conflict", "");
    std::fs::write(r.0.join("spec.stratum.yaml"), WORKTREE_ROLLBACK_SPEC).unwrap();
    let ran = r.run(&worktree_rollback_agent(
        "printf 'someone else\\n' > src/item.rs",
    ));
    assert_eq!(ran.code, 1, "{}", ran.context());
    let reason = ran.doc()["failure"]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("rollback_conflict: rolling back to `patch` left 1 path alone")
            && reason.ends_with("src/item.rs"),
        "{reason}"
    );
    assert_eq!(
        r.read("src/item.rs").as_deref(),
        Some("someone else\n"),
        "not overwritten"
    );
    assert_eq!(
        r.read("src/lib.rs").as_deref(),
        Some("fn a() {}\n"),
        "the patch was rolled back"
    );
    // a rollback puts back the working tree only: the merge's staging stays
    let staged = git(&r.0, &["diff", "--cached", "--name-only"]);
    assert!(staged.contains("src/item.rs"), "{staged}");
    assert_eq!(r.stratum_refs(), "");
}
