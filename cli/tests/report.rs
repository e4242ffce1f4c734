//! `stratumc report` through the binary: a run whose first attempt fails a
//! file rule, whose retry passes, and whose gate a human approves with a
//! note, reported as Markdown, JSON and HTML; the HTML opened in headless
//! Chromium as a reviewer would (its DOM and a screenshot).
//!
//! The Chromium part needs `/usr/bin/chromium` (or `$CHROMIUM`); CI installs
//! it and sets `STRATUM_REQUIRE_CHROMIUM=1`, which makes its absence a
//! failure instead of a skipped check.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SPEC: &str = r###"version: 1
contracts:
  Out: {text: string}
flows:
  entry: main
  main:
    input: {}
    output: {from: "${draft.output}", contract: Out}
    steps:
      - id: draft
        do: "Write notes.md with a Method section"
        out: Out
        attempts: 2
        ensure:
          - file_contains: {path: "notes.md", text: "## Method"}
      - id: review
        after: [draft]
        gate: {on_approve: null, on_revise: null, on_kill: null}
"###;

/// The first attempt writes notes without the section, the second with it.
const AGENT: &str = r###"entry=$(cat)
if [ ! -e tried ]; then
  touch tried
  printf '# Notes\n' > notes.md
else
  printf '# Notes\n## Method\nSimulate <it> & see.\n' > notes.md
fi
echo '{"output": {"text": "notes written"}, "usage": {"tokens": 120, "usd": 0.25, "ms": 40}}'
"###;

fn stratumc(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stratumc"));
    c.current_dir(dir)
        .env("STRATUM_HOME", dir.join("home"))
        .env("NO_COLOR", "1");
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().expect("stratumc runs");
    assert!(
        out.status.success(),
        "{:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs the spec to the gate, approves it with a note, resumes to the end.
fn finished_run(d: &Path) -> String {
    std::fs::write(d.join("spec.stratum.yaml"), SPEC).unwrap();
    std::fs::write(d.join("agent.sh"), AGENT).unwrap();
    let out = stratumc(d)
        .args([
            "run",
            "spec.stratum.yaml",
            "--inputs",
            "{}",
            "--agent",
            "sh agent.sh",
        ])
        .args(["--format", "json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "paused at the gate: {out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = doc["runId"].as_str().expect("a run id").to_owned();
    ok(stratumc(d).args(["gate", "approve", &run, "review", "--note", "method <ok>"]));
    ok(stratumc(d)
        .args(["run", "--resume", &run, "--agent", "sh agent.sh"])
        .stdin(std::process::Stdio::null()));
    run
}

#[test]
fn a_report_lists_attempts_files_decisions_spend_and_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = finished_run(d);

    let md = ok(stratumc(d).args(["report", &run]));
    assert!(md.starts_with(&format!("# Run {run}\n")), "{md}");
    assert!(md.contains("### draft (do, succeeded)"), "{md}");
    assert!(
        md.contains("| 1 |") && md.contains("failed") && md.contains("## Method"),
        "the failed first attempt and its reason: {md}"
    );
    assert!(
        md.contains("| `notes.md` | yes |"),
        "the file it read: {md}"
    );
    assert!(
        md.contains("| approve |") && md.contains("method &lt;ok>"),
        "{md}"
    );
    assert!(
        md.contains("| spent | 2 | 240 | 0.50 | 80 |"),
        "spend: {md}"
    );
    assert!(
        md.contains("## Timeline") && md.contains("`gate_resolved`"),
        "{md}"
    );

    let json: Value =
        serde_json::from_str(&ok(stratumc(d).args(["report", &run, "--format", "json"])))
            .expect("one JSON document");
    assert_eq!(json["version"], 1);
    let report = &json["report"];
    assert_eq!(report["status"], "completed");
    let draft = &report["steps"][0];
    assert_eq!(draft["id"], "draft");
    assert_eq!(draft["tries"].as_array().unwrap().len(), 2);
    assert_eq!(draft["tries"][0]["passed"], false);
    assert_eq!(draft["tries"][1]["passed"], true);
    let notes = std::fs::read(d.join("notes.md")).unwrap();
    assert_eq!(
        draft["evidence"][0]["blake3"],
        blake3::hash(&notes).to_hex().as_str(),
        "the digest of the file as it was read last"
    );
    assert_eq!(report["steps"][1]["decisions"][0]["note"], "method <ok>");
    assert_eq!(report["steps"][1]["decisions"][0]["resolvedBy"], "human");

    let code = stratumc(d).args(["report", "run-nope"]).output().unwrap();
    assert_eq!(code.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&code.stderr).contains("no run `run-nope`"));
}

/// Headless Chromium with the flags a closed network needs.
fn headless(browser: &Path, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,1600",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn the_html_report_is_one_file_that_a_browser_renders() {
    let Some(browser) = support::chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = finished_run(d);
    let page = d.join("report.html");
    let out = stratumc(d)
        .args(["report", &run, "--format", "html", "-o"])
        .arg(&page)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
    assert!(
        html.contains("Simulate") || html.contains("method &lt;ok&gt;"),
        "{html}"
    );

    let url = format!("file://{}", page.display());
    let dom = headless(&browser, &d.join("profile-dom"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains(&format!("<h1>Run {run}</h1>")),
        "the browser's DOM: {dom}"
    );
    assert!(dom.contains("<td class=\"ok\">approve</td>"), "{dom}");

    let shot = d.join("report.png");
    let status = headless(&browser, &d.join("profile-shot"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // a rendered page, not an empty canvas: a blank 1200x1600 PNG is a few KB
    assert!(png.len() > 20_000, "screenshot of {} bytes", png.len());
}
