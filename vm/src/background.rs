//! Background drivers (issue 16 §2): `stratumc run --detach` and MCP
//! `stratum_flow_run_bg` start this binary again as `stratumc run --resume
//! RUN …`, a driver process that outlives its caller.
//!
//! Owns: starting that process — this executable (or the command an
//! embedding host set: the Python package's interpreter), stdin closed, stdout and
//! stderr appended to `$STRATUM_HOME/drivers/RUN.log`, in a process group
//! of its own (a Ctrl-C at the caller's terminal does not reach it), never
//! waited for by the caller (a thread reaps it when it ends) — and where
//! its log is.
//! Must never: drive the run (the driver is `stratumc run`'s loop, with
//! its lease), or make the caller wait for the driver.

use std::ffi::OsString;
use std::path::PathBuf;

/// A started driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// Its pid.
    pub pid: u32,
    /// Its log file.
    pub log: PathBuf,
}

/// The log of run `run_id`'s background driver.
pub fn log_path(run_id: &str) -> Result<PathBuf, String> {
    let home = crate::store::default_home().map_err(|e| e.to_string())?;
    Ok(home.join("drivers").join(format!("{run_id}.log")))
}

/// How to start this program again when it is not its own executable: the
/// Python package's `stratumc` runs inside the Python interpreter, so it
/// sets `[python, -m, stratumc]` ([`set_program`]).
static PROGRAM: std::sync::OnceLock<Vec<OsString>> = std::sync::OnceLock::new();

/// Sets, once per process, the command line (program and leading
/// arguments) that starts this program again, for a host in which it is
/// not the executable itself; later calls are ignored.
pub fn set_program(argv: Vec<OsString>) {
    let _ = PROGRAM.set(argv);
}

/// Starts `this-program run --resume RUN EXTRA…` as run `run_id`'s
/// background driver (this executable, or the command [`set_program`] set).
pub fn spawn_driver(run_id: &str, extra: &[OsString]) -> Result<Detached, String> {
    let log = log_path(run_id)?;
    let out = log
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
        })
        .map_err(|e| format!("cannot open the driver log {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("cannot share the driver log {}: {e}", log.display()))?;
    let mut cmd = match PROGRAM.get().and_then(|argv| argv.split_first()) {
        Some((program, leading)) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(leading);
            cmd
        }
        None => std::process::Command::new(
            std::env::current_exe()
                .map_err(|e| format!("cannot find this binary to start the driver: {e}"))?,
        ),
    };
    cmd.args(["run", "--resume", run_id])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the driver: {e}"))?;
    let pid = child.id();
    // reaped by a thread of the caller while it lives (a long-lived MCP
    // server collects no zombies); when the caller exits first, by init
    let _ = std::thread::Builder::new()
        .name("stratum-driver-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        });
    Ok(Detached { pid, log })
}
