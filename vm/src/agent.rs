//! Agent commands: who runs a dispatch when the host runs it itself
//! (LANGUAGE.md E8).
//!
//! Owns: running one command (an `[agents.NAME] command` of `stratum.toml`,
//! read by [`crate::config`], or `stratumc run --agent`) for one ready entry: `sh -c CMD` in the workspace
//! root (or the entry's `cwd`: an isolated fanout item's worktree), the entry as one JSON object on stdin, `STRATUM_RUN_ID` and
//! `STRATUM_STEP_ID` in the environment, the result JSON (`{"output": ..}` or
//! `{"failure": ".."}`) on stdout. Every way a command can go wrong becomes a
//! failure report, so the run's retry rules apply.
//! Must never: touch run state (the caller reports the result through the
//! engine), or wait on a command's output without a size bound.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::interp::Report;

/// Largest result read from a command's stdout.
const MAX_STDOUT: u64 = 8 * 1024 * 1024;
/// How much of a command's stderr is kept for a failure message.
const MAX_STDERR: u64 = 64 * 1024;

fn failure(text: String) -> Report {
    Report {
        failure: Some(text),
        ..Report::default()
    }
}

/// Starts `command` for one ready entry, in a process group of its own (so
/// that stopping it also stops what it started).
fn spawn(command: &str, entry: &Value, run_id: &str, cwd: &Path) -> std::io::Result<Child> {
    let step = entry["id"].as_str().unwrap_or("");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env("STRATUM_RUN_ID", run_id)
        .env("STRATUM_STEP_ID", step)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
}

/// Feeds a started command its entry and reads its result.
fn finish(mut child: Child, entry: &Value) -> Report {
    if let Some(mut stdin) = child.stdin.take() {
        // a command that does not read its input closes the pipe early: not an error
        let _ = stdin.write_all(entry.to_string().as_bytes());
    }
    // stderr is drained on its own thread so a chatty command cannot block on a full pipe
    let stderr = child.stderr.take().map(|s| {
        std::thread::spawn(move || {
            let mut err = String::new();
            let _ = s.take(MAX_STDERR).read_to_string(&mut err);
            err
        })
    });
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(MAX_STDOUT).read_to_string(&mut out);
    }
    let err = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    match child.wait() {
        Ok(s) if s.success() => match serde_json::from_str::<Value>(out.trim()) {
            Ok(v) => Report::from_json(&v)
                .unwrap_or_else(|e| failure(format!("the agent's result is malformed: {e}"))),
            Err(e) => failure(format!("the agent printed no valid JSON: {e}")),
        },
        Ok(s) => {
            let lines: Vec<&str> = err.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n");
            failure(format!("the agent command exited with {s}: {tail}"))
        }
        Err(e) => failure(format!("the agent command failed: {e}")),
    }
}

/// Runs `command` for one ready entry and reads its result.
pub fn run_command(command: &str, entry: &Value, run_id: &str, cwd: &Path) -> Report {
    match spawn(command, entry, run_id, cwd) {
        Ok(child) => finish(child, entry),
        Err(e) => failure(format!("cannot start the agent command: {e}")),
    }
}

/// Runs several (command, entry) pairs at once, one thread each; results in
/// the order given. A command runs in its entry's `cwd` when it has one (the
/// git worktree of an isolated fanout item), else in `cwd`.
pub fn run_batch(jobs: Vec<(String, Value)>, run_id: &str, cwd: &Path) -> Vec<(Value, Report)> {
    run_batch_watched(jobs, run_id, cwd, Duration::from_secs(3600), || false)
}

/// [`run_batch`], asking `stop` every `every` while commands run: when it
/// answers true (the run was cancelled), every command still running is
/// killed with its process group and reported as stopped.
pub fn run_batch_watched(
    jobs: Vec<(String, Value)>,
    run_id: &str,
    cwd: &Path,
    every: Duration,
    mut stop: impl FnMut() -> bool,
) -> Vec<(Value, Report)> {
    let n = jobs.len();
    let mut results: Vec<Option<Report>> = (0..n).map(|_| None).collect();
    let mut entries = Vec::with_capacity(n);
    let mut running: Vec<Option<u32>> = vec![None; n];
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for (k, (cmd, entry)) in jobs.into_iter().enumerate() {
            let dir = entry["cwd"].as_str().map_or(cwd, Path::new);
            match spawn(&cmd, &entry, run_id, dir) {
                Ok(child) => {
                    running[k] = Some(child.id());
                    let (tx, entry) = (tx.clone(), entry.clone());
                    s.spawn(move || {
                        let _ = tx.send((k, finish(child, &entry)));
                    });
                }
                Err(e) => {
                    results[k] = Some(failure(format!("cannot start the agent command: {e}")))
                }
            }
            entries.push(entry);
        }
        drop(tx);
        let mut stopped = false;
        loop {
            match rx.recv_timeout(every) {
                Ok((k, report)) => {
                    running[k] = None;
                    results[k] = Some(if stopped {
                        failure("the agent command was stopped: the run was cancelled".into())
                    } else {
                        report
                    });
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if !stopped && stop() {
                        stopped = true;
                        for pid in running.iter().flatten() {
                            kill_group(*pid);
                        }
                    }
                }
            }
        }
    });
    entries
        .into_iter()
        .zip(results)
        .map(|(e, r)| {
            let r = r.unwrap_or_else(|| failure("the agent command vanished".into()));
            (e, r)
        })
        .collect()
}

/// Kills the process group `pgid` (the command and everything it started),
/// through kill(1) so that no unsafe code is needed.
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_command_gets_the_entry_and_its_result_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let entry = json!({"id": "fan/2", "do": "x"});
        let r = run_command(
            r#"read line; printf '{"output": {"step": "%s", "run": "%s", "len": %d}}' "$STRATUM_STEP_ID" "$STRATUM_RUN_ID" ${#line}"#,
            &entry,
            "run-1",
            dir.path(),
        );
        let len = entry.to_string().len();
        assert_eq!(
            r.output,
            Some(json!({"step": "fan/2", "run": "run-1", "len": len}))
        );
    }

    #[test]
    fn every_failure_of_a_command_is_a_failure_report() {
        let dir = tempfile::tempdir().unwrap();
        let e = json!({"id": "a"});
        let cases = [
            ("echo oops >&2; exit 3", "exited with"),
            ("echo not json", "no valid JSON"),
            ("echo '{\"output\": 1, \"extra\": 2}'", "malformed"),
        ];
        for (cmd, want) in cases {
            let r = run_command(cmd, &e, "r", dir.path());
            let f = r.failure.unwrap_or_default();
            assert!(f.contains(want), "{cmd}: {f}");
        }
        let r = run_command("echo oops >&2; exit 3", &e, "r", dir.path());
        assert!(r.failure.unwrap().contains("oops"));
    }

    #[test]
    fn a_batch_keeps_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = (0..4)
            .map(|k| {
                (
                    format!("sleep 0.0{}; echo '{{\"output\": {k}}}'", 4 - k),
                    json!({"id": format!("f/{k}")}),
                )
            })
            .collect();
        let out = run_batch(jobs, "r", dir.path());
        let got: Vec<Value> = out.into_iter().map(|(_, r)| r.output.unwrap()).collect();
        assert_eq!(got, vec![json!(0), json!(1), json!(2), json!(3)]);
    }

    #[test]
    fn an_entry_with_a_cwd_runs_there() {
        let (root, wt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cmd = r#"printf '{"output": "%s"}' "$(pwd -P)""#.to_string();
        let jobs = vec![
            (
                cmd.clone(),
                json!({"id": "f/0", "cwd": wt.path().to_str().unwrap()}),
            ),
            (cmd, json!({"id": "s"})),
        ];
        let out = run_batch(jobs, "r", root.path());
        let real = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
        assert_eq!(out[0].1.output, Some(json!(real(wt.path()))));
        assert_eq!(out[1].1.output, Some(json!(real(root.path()))));
    }

    #[test]
    fn a_stopped_batch_kills_its_commands_and_what_they_started() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        // the command starts a grandchild that would write the marker much later
        let cmd = format!("sh -c 'sleep 30; touch {}' & wait", marker.display());
        let jobs = vec![
            (cmd, json!({"id": "slow"})),
            ("echo '{\"output\": 1}'".to_string(), json!({"id": "fast"})),
        ];
        let mut polls = 0;
        let out = run_batch_watched(jobs, "r", dir.path(), Duration::from_millis(20), || {
            polls += 1;
            polls >= 3
        });
        assert_eq!(out[1].1.output, Some(json!(1)));
        let f = out[0].1.failure.clone().unwrap_or_default();
        assert!(f.contains("stopped"), "{f}");
        // the whole group is gone: no `sleep 30` of this test is left to write the marker
        let ps = Command::new("pgrep")
            .args(["-f", &marker.display().to_string()])
            .output();
        if let Ok(ps) = ps {
            assert!(
                ps.stdout.is_empty(),
                "still running: {}",
                String::from_utf8_lossy(&ps.stdout)
            );
        }
    }
}
