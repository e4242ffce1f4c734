//! Declared commands (language 1.1 X12): running one `[commands.NAME]` of
//! the run's configuration for an `exec` check or an `evaluate` step.
//!
//! Owns: looking the name up, the argv (the declared one, then the rendered
//! arguments, each one argument), the working directory (the workspace or
//! an item's worktree, which must be a directory), the environment (only
//! `PATH`, `HOME`, `LANG` and the names the table lists, from this
//! process's environment, when set), the smaller of the spec's and the
//! config's timeout, and the receipt (sha256 of the stdout kept, a bounded
//! tail). The process itself runs under `crate::agent::run_program` (no
//! shell, its own process group, killed on timeout or when the driver's
//! stop probe says stop: a cancel or a signal).
//! Must never: run anything through a shell, pass any other variable of
//! this process's environment, or decide whether the exit status passes
//! (the interpreter does).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::agent::{Program, StopProbe, run_program};
use crate::config::CommandConfig;
use crate::eval::sha256_hex;
use crate::interp::{CommandReceipt, CommandRequest, CommandRun, HostError, RECEIPT_TAIL_BYTES};

/// Runs `req` with the declared commands `commands` in `cwd`.
pub fn run(
    commands: &BTreeMap<String, CommandConfig>,
    req: &CommandRequest<'_>,
    cwd: &Path,
) -> Result<CommandRun, HostError> {
    run_stoppable(commands, req, cwd, None)
}

/// [`run`], asking `stop` while the command runs: when it says stop, the
/// command's process group is killed at once and the answer is
/// [`HostError::Stopped`] (no receipt: the command did not finish).
pub fn run_stoppable(
    commands: &BTreeMap<String, CommandConfig>,
    req: &CommandRequest<'_>,
    cwd: &Path,
    stop: Option<&StopProbe>,
) -> Result<CommandRun, HostError> {
    let cfg = commands
        .get(req.command)
        .ok_or_else(|| undeclared(commands, req.command))?;
    if !cwd.is_dir() {
        return Err(HostError::Command(format!(
            "command `{}` cannot run in {}: not a directory",
            req.command,
            cwd.display()
        )));
    }
    let mut argv = cfg.argv.clone();
    argv.extend(req.args.iter().cloned());
    let env: Vec<(String, String)> = cfg
        .env
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
        .collect();
    let timeout_ms = req
        .timeout_ms
        .map_or(cfg.timeout_ms, |t| t.min(cfg.timeout_ms));
    let program = Program {
        argv: &argv,
        cwd,
        env: &env,
        stdin: req.stdin.as_bytes().to_vec(),
        timeout: Duration::from_millis(timeout_ms),
        max_output: usize::try_from(cfg.max_output_bytes).unwrap_or(usize::MAX),
        stop,
    };
    let started = Instant::now();
    let end = run_program(&program).map_err(|e| {
        HostError::Command(format!(
            "command `{}` could not start {:?}: {e}; check `[commands.{}] argv` in stratum.toml",
            req.command, argv[0], req.command
        ))
    })?;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if end.stopped {
        return Err(HostError::Stopped(format!(
            "command `{}` was stopped after {ms} ms (the run was cancelled or its driver stopped); its process group was killed",
            req.command
        )));
    }
    let receipt = CommandReceipt {
        command: req.command.to_owned(),
        argv,
        exit: end.exit,
        ms,
        stdout_sha256: sha256_hex(&end.stdout),
        tail: tail(&end.stdout, &end.stderr),
        timed_out: end.timed_out,
        truncated: end.stdout_over,
    };
    Ok(CommandRun {
        receipt,
        stdout: end.stdout,
    })
}

fn undeclared(commands: &BTreeMap<String, CommandConfig>, name: &str) -> HostError {
    let hint = crate::suggest::suggest(name, commands.keys().map(String::as_str))
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    HostError::Command(format!(
        "command `{name}` is not declared in stratum.toml{hint}; add `[commands.{name}]` with `argv = [...]`, or name a declared command"
    ))
}

/// The last [`RECEIPT_TAIL_BYTES`] of stdout followed by stderr, cut at a
/// character boundary.
fn tail(stdout: &[u8], stderr: &[u8]) -> String {
    let mut all = stdout.to_vec();
    all.extend_from_slice(stderr);
    let cut = all.len().saturating_sub(RECEIPT_TAIL_BYTES);
    let text = String::from_utf8_lossy(&all[cut..]).into_owned();
    text.trim_start_matches('\u{FFFD}').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::FileRoot;

    fn declared(text: &str) -> BTreeMap<String, CommandConfig> {
        let c = crate::config::Config::from_toml(text).expect("a valid stratum.toml");
        c.commands
            .keys()
            .filter_map(|n| Some((n.clone(), c.command(n)?)))
            .collect()
    }

    fn req<'a>(
        command: &'a str,
        args: &'a [String],
        timeout_ms: Option<u64>,
    ) -> CommandRequest<'a> {
        CommandRequest {
            command,
            args,
            timeout_ms,
            stdin: "",
            root: FileRoot::Workspace,
        }
    }

    #[test]
    fn true_and_false_give_their_exit_in_a_receipt() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cmds =
            declared("[commands.ok]\nargv = [\"true\"]\n[commands.no]\nargv = [\"false\"]\n");
        let ok = run(&cmds, &req("ok", &[], None), dir.path()).unwrap();
        assert_eq!((ok.receipt.exit, ok.receipt.timed_out), (Some(0), false));
        assert_eq!(ok.receipt.stdout_sha256, sha256_hex(b""));
        let no = run(&cmds, &req("no", &[], None), dir.path()).unwrap();
        assert_eq!(no.receipt.exit, Some(1));
        assert_eq!(no.receipt.argv, ["false"]);
        let e = run(&cmds, &req("nok", &[], None), dir.path()).unwrap_err();
        assert!(
            matches!(&e, HostError::Command(m) if m.contains("`nok` is not declared") && m.contains("did you mean `no`?")),
            "{e:?}"
        );
        let cmds = declared("[commands.x]\nargv = [\"/no/such/program\"]\n");
        let e = run(&cmds, &req("x", &[], None), dir.path()).unwrap_err();
        assert!(
            matches!(&e, HostError::Command(m) if m.contains("could not start")),
            "{e:?}"
        );
    }

    #[test]
    fn args_are_single_arguments_run_in_the_root_without_a_shell() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cmds = declared("[commands.echo]\nargv = [\"printf\", \"%s|\"]\n");
        let args = vec![
            "a b".to_owned(),
            "$(touch pwned)".to_owned(),
            "*".to_owned(),
        ];
        let r = run(&cmds, &req("echo", &args, None), dir.path()).unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "a b|$(touch pwned)|*|");
        assert_eq!(
            r.receipt.stdout_sha256,
            sha256_hex(b"a b|$(touch pwned)|*|")
        );
        assert!(!dir.path().join("pwned").exists());
        let cmds = declared("[commands.pwd]\nargv = [\"pwd\"]\n");
        let r = run(&cmds, &req("pwd", &[], None), dir.path()).unwrap();
        let shown = String::from_utf8_lossy(&r.stdout).trim().to_owned();
        assert_eq!(
            Path::new(&shown).canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
    }

    #[test]
    fn only_the_base_and_listed_variables_reach_the_command() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cmds = declared("[commands.env]\nargv = [\"env\"]\nenv = [\"X12_LISTED\"]\n");
        let vars = std::process::Command::new("env").output().unwrap().stdout;
        assert!(!vars.is_empty());
        let r = run(&cmds, &req("env", &[], None), dir.path()).unwrap();
        let seen = String::from_utf8_lossy(&r.stdout);
        let names: Vec<&str> = seen.lines().filter_map(|l| l.split('=').next()).collect();
        for n in &names {
            assert!(
                ["PATH", "HOME", "LANG", "X12_LISTED"].contains(n),
                "{n} leaked: {seen}"
            );
        }
        // this test process has variables the command does not get
        assert!(String::from_utf8_lossy(&vars).lines().count() > names.len());
    }

    #[test]
    fn a_sleeping_command_is_killed_with_its_group_at_the_smaller_timeout() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let pidfile = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let toml =
            format!("[commands.slow]\nargv = [\"sh\", \"-c\", {script:?}]\ntimeout_ms = 60000\n");
        let cmds = declared(&toml);
        let started = Instant::now();
        let r = run(&cmds, &req("slow", &[], Some(300)), dir.path()).unwrap();
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!((r.receipt.exit, r.receipt.timed_out), (None, true));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // the grandchild `sleep` was in the command's group and is gone
        // (a killed process may take a moment to finish exiting)
        assert!(gone_soon(pid), "sleep {pid} outlived its command");
    }

    #[test]
    fn a_stop_kills_the_command_group_at_once_and_gives_no_receipt() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let pidfile = dir.path().join("pid");
        let marker = dir.path().join("finished");
        let script = format!(
            "sleep 60 & echo $! > {}; wait; touch {}",
            pidfile.display(),
            marker.display()
        );
        let toml =
            format!("[commands.slow]\nargv = [\"sh\", \"-c\", {script:?}]\ntimeout_ms = 120000\n");
        let cmds = declared(&toml);
        // the probe says stop once the command has started its grandchild
        let probe = {
            let pidfile = pidfile.clone();
            move || pidfile.exists()
        };
        let e =
            run_stoppable(&cmds, &req("slow", &[], None), dir.path(), Some(&probe)).unwrap_err();
        assert!(
            matches!(&e, HostError::Stopped(m) if m.contains("command `slow` was stopped")),
            "{e:?}"
        );
        assert!(!marker.exists(), "the command did not run to its end");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(gone_soon(pid), "sleep {pid} outlived the stop");
    }

    /// Whether process `pid` is gone or a zombie, waiting up to 5 s (a killed
    /// process may take a moment to finish exiting).
    fn gone_soon(pid: i32) -> bool {
        let stat = format!("/proc/{pid}/stat");
        let gone = || {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            let state = state
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .to_owned();
            state.is_empty() || state.starts_with('Z') || state.starts_with('X')
        };
        let by = Instant::now() + Duration::from_secs(5);
        while !gone() && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(20));
        }
        gone()
    }

    #[test]
    fn output_past_the_bound_is_dropped_and_marked() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cmds = declared(
            "[commands.flood]\nargv = [\"head\", \"-c\", \"100000\", \"/dev/zero\"]\nmax_output_bytes = 1000\n",
        );
        let r = run(&cmds, &req("flood", &[], None), dir.path()).unwrap();
        assert_eq!(
            (r.stdout.len(), r.receipt.truncated, r.receipt.exit),
            (1000, true, Some(0))
        );
        assert!(r.receipt.tail.len() <= RECEIPT_TAIL_BYTES);
    }
}
