//! Bounded input, end to end (issue 13, items 1–4): every file a command
//! reads stops at its limit with an error naming it (exit 2), FIFOs do not
//! hang `check`, YAML aliases cannot multiply bytes past their budget
//! (S0010, also through the MCP server), and the evaluator cannot build a
//! value past its limit at run time.
//!
//! Every case runs the binary under an address-space limit (`ulimit -v`, so
//! an unbounded allocation aborts instead of taking the machine down) and a
//! deadline (so an unbounded read or a blocking open fails the test instead
//! of hanging it). The limits themselves are listed in `docs/limits.md`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Address space of every `stratumc` run here, in KiB (`ulimit -v`).
const ADDRESS_SPACE_KIB: u64 = 2_000_000;
/// How long one run may take before the test calls it a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// What the run reads on stdin.
enum Stdin {
    /// `/dev/null`.
    Null,
    /// This text, then end of file.
    Text(String),
    /// Bytes without end (until the process stops reading).
    Endless,
}

/// A finished run: `code` is `None` when a signal ended it.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn scratch(name: &str) -> PathBuf {
    support::scratch("limits", name)
}

/// `sh -c 'ulimit -v …; exec stratumc ARGS'` in `dir`, with `STRATUM_HOME`
/// there too.
fn limited(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_stratumc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("STRATUM_HOME", dir.join("home"));
    cmd
}

/// Waits for `child` until [`DEADLINE`]; kills it and panics past it.
fn wait_bounded(child: &mut Child, what: &str) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return status.code();
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`{what}` did not finish within {DEADLINE:?}: an unbounded read or a blocking open"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn drain(stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stream).read_to_string(&mut text);
        text
    })
}

/// Runs `stratumc ARGS` in `dir` with `stdin`, bounded in memory and time.
fn run(dir: &Path, args: &[&str], stdin: Stdin) -> Out {
    let mut cmd = limited(dir, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(match stdin {
        Stdin::Null => Stdio::null(),
        _ => Stdio::piped(),
    });
    let mut child = cmd.spawn().expect("sh starts");
    let feeder = child.stdin.take().map(|mut pipe| {
        std::thread::spawn(move || match stdin {
            Stdin::Text(text) => {
                let _ = pipe.write_all(text.as_bytes());
            }
            // ends when the reader closes the pipe (or is killed)
            Stdin::Endless => {
                let block = vec![b'#'; 1 << 16];
                while pipe.write_all(&block).is_ok() {}
            }
            Stdin::Null => {}
        })
    });
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let code = wait_bounded(&mut child, &args.join(" "));
    if let Some(f) = feeder {
        let _ = f.join();
    }
    Out {
        code,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Asserts an I/O-type refusal: exit 2, a `cannot read` line naming the
/// file, its kind and the limit (`error: ` first, except from `run`, which
/// prints its reasons bare).
fn assert_refused(out: &Out, file: &str, kind: &str, limit: &str) {
    assert_eq!(out.code, Some(2), "{out:#?}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.trim_start_matches("error: ").starts_with("cannot read "))
        .unwrap_or_else(|| panic!("no `cannot read` line: {out:#?}"));
    assert!(line.contains(file), "{line}");
    assert!(
        line.contains(&format!("{kind} is limited to {limit}")),
        "{line}"
    );
}

fn example(name: &str) -> String {
    support::root()
        .join("examples")
        .join(name)
        .display()
        .to_string()
}

// ----- 1. every read is bounded -------------------------------------------------

#[test]
fn spec_readers_stop_at_the_spec_limit_on_an_endless_device() {
    let dir = scratch("zero-spec");
    for args in [
        &["check", "/dev/zero"][..],
        &["build", "/dev/zero"],
        &["graph", "/dev/zero"],
        &["migrate", "--check", "/dev/zero"],
        &["cost", "/dev/zero"],
    ] {
        let out = run(&dir, args, Stdin::Null);
        assert_refused(&out, "/dev/zero", "a spec", "16 MiB (16777216 bytes)");
    }
}

#[test]
fn inspect_stops_at_the_plan_limit() {
    let dir = scratch("zero-plan");
    let out = run(&dir, &["inspect", "/dev/zero"], Stdin::Null);
    assert_refused(&out, "/dev/zero", "a plan file", "64 MiB (67108864 bytes)");
    // `run` reads a spec or a plan, under the plan limit
    let out = run(&dir, &["run", "/dev/zero", "--agent", "true"], Stdin::Null);
    assert_refused(
        &out,
        "/dev/zero",
        "a spec or plan file",
        "64 MiB (67108864 bytes)",
    );
}

#[test]
fn inputs_files_stop_at_the_inputs_limit() {
    let dir = scratch("zero-inputs");
    let spec = example("minimal-classifier.stratum.yaml");
    let out = run(
        &dir,
        &["cost", &spec, "--inputs", "@/dev/zero"],
        Stdin::Null,
    );
    assert_refused(
        &out,
        "/dev/zero",
        "an inputs file",
        "16 MiB (16777216 bytes)",
    );
    let out = run(
        &dir,
        &["run", &spec, "--inputs", "@/dev/zero", "--agent", "true"],
        Stdin::Null,
    );
    assert_refused(
        &out,
        "/dev/zero",
        "an inputs file",
        "16 MiB (16777216 bytes)",
    );
}

#[test]
fn configuration_files_stop_at_the_config_limit() {
    let dir = scratch("zero-config");
    let spec = example("minimal-classifier.stratum.yaml");
    // a device is refused without reading it (the configuration reader
    // takes regular files only, checked on the opened descriptor)
    let out = run(&dir, &["cost", &spec, "--config", "/dev/zero"], Stdin::Null);
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr.contains("/dev/zero") && out.stderr.contains("not a regular file"),
        "{out:#?}"
    );
    // a regular file one byte over 1 MiB is refused by its size
    let big = dir.join("big.toml");
    std::fs::write(&big, vec![b'#'; 1024 * 1024 + 1]).unwrap();
    let out = run(
        &dir,
        &["cost", &spec, "--config", big.to_str().unwrap()],
        Stdin::Null,
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr
            .contains("larger than the limit of 1048576 bytes"),
        "{out:#?}"
    );
}

#[test]
fn a_regular_file_over_the_limit_is_refused_by_its_size() {
    let dir = scratch("sparse");
    let spec = dir.join("big.stratum.yaml");
    let plan = dir.join("big.stratumc");
    std::fs::File::create(&spec)
        .and_then(|f| f.set_len(16 * 1024 * 1024 + 1))
        .expect("a sparse spec");
    std::fs::File::create(&plan)
        .and_then(|f| f.set_len(64 * 1024 * 1024 + 1))
        .expect("a sparse plan");
    let out = run(&dir, &["check", "big.stratum.yaml"], Stdin::Null);
    assert_refused(&out, "big.stratum.yaml", "a spec", "16 MiB");
    assert!(out.stderr.contains("it is 16777217 bytes"), "{out:#?}");
    assert!(out.stderr.contains("stratumc explain S0009"), "{out:#?}");
    let out = run(&dir, &["inspect", "big.stratumc"], Stdin::Null);
    assert_refused(&out, "big.stratumc", "a plan file", "64 MiB");
    assert!(out.stderr.contains("it is 67108865 bytes"), "{out:#?}");
}

#[test]
fn an_endless_pipe_on_dev_stdin_stops_at_the_limit() {
    let dir = scratch("stdin-endless");
    let out = run(&dir, &["check", "/dev/stdin"], Stdin::Endless);
    assert_refused(&out, "/dev/stdin", "a spec", "16 MiB");
    assert!(
        out.stderr.contains("holds more than 16777216 bytes"),
        "{out:#?}"
    );
}

#[test]
fn a_spec_piped_to_dev_stdin_is_still_checked() {
    let dir = scratch("stdin-spec");
    let text = std::fs::read_to_string(example("minimal-classifier.stratum.yaml"))
        .expect("the example exists");
    let out = run(&dir, &["check", "/dev/stdin"], Stdin::Text(text));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stderr.contains("ok: 1 file checked, 0 errors"),
        "{out:#?}"
    );
    // and an error in it is reported against /dev/stdin
    let out = run(
        &dir,
        &["check", "/dev/stdin"],
        Stdin::Text("version: 2\n".into()),
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stdout.contains("/dev/stdin"), "{out:#?}");
}

#[test]
fn a_task_file_past_the_spec_limit_is_refused_by_compile_speckit() {
    let dir = scratch("speckit");
    let tasks = dir.join("tasks");
    std::fs::create_dir_all(&tasks).expect("tasks dir");
    std::fs::write(tasks.join("a.md"), "# Task: a\n").expect("a task");
    std::fs::File::create(tasks.join("b.md"))
        .and_then(|f| f.set_len(16 * 1024 * 1024 + 1))
        .expect("a sparse task file");
    let out = run(&dir, &["compile-speckit", "tasks"], Stdin::Null);
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("b.md") && out.stderr.contains("limited to 16 MiB"),
        "{out:#?}"
    );
}

// ----- 2. FIFOs ---------------------------------------------------------------

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_met_in_a_directory_is_skipped_with_a_warning() {
    let dir = scratch("fifo-dir");
    let specs = dir.join("specs");
    std::fs::create_dir_all(&specs).expect("specs dir");
    mkfifo(&specs.join("x.stratum.yaml"));
    std::fs::copy(
        example("minimal-classifier.stratum.yaml"),
        specs.join("ok.stratum.yaml"),
    )
    .expect("copy");
    let out = run(&dir, &["check", "specs"], Stdin::Null);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stderr
            .contains("warning: skipped specs/x.stratum.yaml: it is a FIFO, not a regular file"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("ok: 1 file checked"), "{out:#?}");
}

#[test]
fn a_fifo_given_directly_does_not_block_the_open() {
    // opened without blocking; with no writer it reads as empty (an empty spec)
    let dir = scratch("fifo-direct");
    mkfifo(&dir.join("x.stratum.yaml"));
    let out = run(&dir, &["check", "x.stratum.yaml"], Stdin::Null);
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stdout.contains("empty document"), "{out:#?}");
    let out = run(&dir, &["inspect", "x.stratum.yaml"], Stdin::Null);
    assert_eq!(out.code, Some(1), "{out:#?}");
}

#[test]
fn a_directory_given_as_a_plan_is_refused() {
    let dir = scratch("dir-plan");
    let out = run(&dir, &["inspect", "."], Stdin::Null);
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains("it is a directory"), "{out:#?}");
}

// ----- 3. aliases that multiply bytes -----------------------------------------

/// A YAML document with one anchored scalar of `len` bytes and `uses` aliases of it.
fn alias_bomb(len: usize, uses: usize) -> String {
    format!(
        "big: &a {}\nuse: [{}]\n",
        "a".repeat(len),
        vec!["*a"; uses].join(", ")
    )
}

#[test]
fn a_large_anchor_used_thousands_of_times_is_s0010_not_an_abort() {
    let dir = scratch("alias-check");
    std::fs::write(
        dir.join("bomb.stratum.yaml"),
        alias_bomb(10 * 1024 * 1024, 5_000),
    )
    .expect("write");
    let out = run(
        &dir,
        &["check", "--format", "json", "bomb.stratum.yaml"],
        Stdin::Null,
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    let codes: Vec<&str> = doc["files"][0]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect();
    assert_eq!(codes, ["S0010"]);
    // the 10 MiB file is not left behind
    let _ = std::fs::remove_dir_all(&dir);
}

/// One JSON-RPC message to the server, one line.
fn send(stdin: &mut impl Write, message: &Value) {
    writeln!(stdin, "{message}").expect("the server reads");
    stdin.flush().expect("flush");
}

/// The next message with this `id`.
fn answer(lines: &mut impl Iterator<Item = std::io::Result<String>>, id: u64) -> Value {
    for line in lines {
        let line = line.expect("the server writes lines");
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg["id"] == json!(id) {
            return msg;
        }
    }
    panic!("the server closed its output before answering request {id}");
}

#[test]
fn the_mcp_server_answers_an_alias_bomb_with_s0010_and_keeps_serving() {
    let dir = scratch("alias-mcp");
    let mut child = limited(&dir, &["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    // the conversation runs on a thread so the deadline below bounds it
    let talk = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        send(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "limits", "version": "0"}}}),
        );
        answer(&mut lines, 1);
        send(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        // 1 MiB anchored, 4,000 uses: a 1 MB request that would expand to 4 GiB
        let spec = alias_bomb(1024 * 1024, 4_000);
        send(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "stratum_validate", "arguments": {"spec": spec}}}),
        );
        let validated = answer(&mut lines, 2);
        send(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        );
        let pong = answer(&mut lines, 3);
        drop(stdin);
        (validated, pong)
    });
    let start = Instant::now();
    while !talk.is_finished() {
        if start.elapsed() > DEADLINE || child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = talk.is_finished();
    let _ = child.kill();
    let status = child.wait().expect("wait");
    assert!(
        finished,
        "the server stopped answering (exit: {status:?}) within {DEADLINE:?}"
    );
    let (validated, pong) = talk.join().expect("the conversation completes");
    let text = validated.to_string();
    assert!(text.contains("S0010"), "{}", &text[..text.len().min(2000)]);
    assert!(pong.get("result").is_some(), "{pong}");
}

// ----- 4. values the evaluator builds ------------------------------------------

/// `(t + t) + (t + t) …` over `n` terms `t`, balanced.
fn balanced_sum(term: &str, n: usize) -> String {
    if n == 1 {
        return term.to_string();
    }
    let h = n / 2;
    format!(
        "({} + {})",
        balanced_sum(term, h),
        balanced_sum(term, n - h)
    )
}

#[test]
fn a_balanced_sum_over_a_large_step_output_fails_the_run_instead_of_aborting_it() {
    let dir = scratch("eval-grow");
    let expr = format!("len({}) > 0", balanced_sum("result.text", 1024));
    let spec = format!(
        "version: 1
contracts:
  Out: {{text: string}}
flows:
  entry: main
  main:
    input: {{}}
    output: {{from: \"${{work.output}}\", contract: Out}}
    steps:
      - id: work
        do: \"Write the text\"
        out: Out
        ensure:
          - expr: \"{expr}\"
        attempts: 1
"
    );
    std::fs::write(dir.join("grow.stratum.yaml"), spec).expect("write spec");
    // a 4 MB string field: 1,024 terms of it would be 4 GB
    let output = json!({"output": {"text": "x".repeat(4_000_000)}});
    std::fs::write(dir.join("out.json"), output.to_string()).expect("write output");
    let check = run(&dir, &["check", "grow.stratum.yaml"], Stdin::Null);
    assert_eq!(check.code, Some(0), "{check:#?}");
    let out = run(
        &dir,
        &[
            "run",
            "grow.stratum.yaml",
            "--agent",
            "cat out.json",
            "--workspace",
            ".",
            "--format",
            "json",
        ],
        Stdin::Null,
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(doc["status"], "failed", "{doc}");
    let reason = doc["failure"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("resource_limit: `+` would build a string of")
            && reason.contains("values are limited to 16 MiB"),
        "{}",
        &reason[reason.len().saturating_sub(400)..]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
