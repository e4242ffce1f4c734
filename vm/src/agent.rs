//! Agent commands: who runs a dispatch when the host runs it itself
//! (LANGUAGE.md E8).
//!
//! Owns: running one command for one ready entry: `sh -c CMD` in the workspace
//! root (or the entry's `cwd`: an isolated fanout item's worktree), in a
//! process group of its own, the entry as one JSON object on stdin,
//! `STRATUM_RUN_ID` and `STRATUM_STEP_ID` in the environment, the result
//! JSON (`{"output": ..}` or `{"failure": ".."}`) on stdout. Every way a
//! command can go wrong becomes a failure report, so the run's retry rules
//! apply.
//!
//! The life of a command: stdin is written and stdout/stderr are drained on
//! threads of their own, all at once (a command may write before it reads);
//! the command gets its job's timeout, after which its group is killed and
//! the dispatch fails; once it exits, its pipes get a short grace (a
//! grandchild may hold them), then its process group is killed — always, so
//! nothing a command started outlives it — and what was read is its result.
//! A batch's watcher can stop every command (cancel: reported as stopped;
//! interrupt: no report at all).
//!
//! Dispatch leases (language 1.1, X7): an entry with `timeoutMs` runs for
//! at most that long (or the job's own timeout, if smaller); a command
//! killed when its lease ran out is [`Answer::Orphaned`]: the driver reports
//! nothing, the lease has expired, and the engine's next transition orphans
//! the dispatch and hands it out again with a new token (no attempt is
//! consumed). A command killed by the job's own, smaller timeout is a failed
//! attempt as before (the operator's limit, not the spec's). Groups are signalled through `rustix`,
//! and a command's pid is reaped only after its group's last kill, so a
//! group id is never reused under us.
//! A connector's CLI (issue 16, [`crate::connector`]) runs under the same
//! supervision: its argv without a shell, stdin closed, the environment
//! inherited (its login), its stdout read by the connector, its argv and
//! usage handed back for the audit ([`Connected`]).
//! The same supervision runs a declared command of language 1.1 X12
//! ([`run_program`]: an `exec` check or an `evaluate` step, through the
//! host): no shell, argv as given, only the environment given, the
//! caller's output bound.
//! Must never: touch run state (the caller reports the result through the
//! engine), wait on a command's output without a size or time bound, or
//! leave a command's process group alive when it returns.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process_group, waitid};
use serde_json::Value;

use crate::connector::{Call, Choice, ConnectorKind, Usage};
use crate::interp::Report;

/// How long an agent command may run when its caller sets no timeout
/// (`stratumc run --agent-timeout`, `[agents.NAME] timeout_ms`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Largest result read from a command's stdout.
const MAX_STDOUT: usize = 8 * 1024 * 1024;
/// How much of a command's stderr (its tail) is kept for a failure message.
const MAX_STDERR: usize = 64 * 1024;
/// How long a command's pipes may stay open after it exited (held by
/// something it started) before its group is killed.
const PIPE_GRACE: Duration = Duration::from_millis(250);
/// How long a killed group gets to exit and let go of the pipes before
/// what was read is taken.
const KILL_GRACE: Duration = Duration::from_secs(2);

fn failure(text: String) -> Report {
    Report {
        failure: Some(text),
        ..Report::default()
    }
}

/// One agent command to run for one ready entry.
#[derive(Debug, Clone)]
pub struct Job {
    /// The command line, run through `sh -c`.
    pub command: String,
    /// The ready entry, written to the command's stdin as JSON.
    pub entry: Value,
    /// How long the command may run before its process group is killed and
    /// the dispatch fails ([`DEFAULT_TIMEOUT`] unless the caller knows better).
    pub timeout: Duration,
    /// The entry's dispatch lease (`timeoutMs`) when it is what bounds the
    /// command (not longer than `timeout`): a kill at it is an orphan.
    pub lease: Option<Duration>,
    /// A connector's CLI runs instead of `command` (issue 16): its argv
    /// without a shell, stdin closed, its output read by
    /// [`crate::connector::read`].
    pub connector: Option<Call>,
}

impl Job {
    /// A job for `entry` run by `command`, stopped after `timeout`, or after
    /// the entry's dispatch lease (`timeoutMs`, X7) when that is shorter.
    pub fn new(command: impl Into<String>, entry: Value, timeout: Duration) -> Job {
        let lease = entry
            .get("timeoutMs")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .filter(|l| *l <= timeout);
        Job {
            command: command.into(),
            entry,
            timeout: lease.unwrap_or(timeout),
            lease,
            connector: None,
        }
    }

    /// A job for `entry` run by a connector's CLI (`call`), bounded like
    /// [`Job::new`]; its `command` is the argv, for messages.
    pub fn connected(call: Call, entry: Value, timeout: Duration) -> Job {
        let mut job = Job::new(call.argv.join(" "), entry, timeout);
        job.connector = Some(call);
        job
    }
}

/// The largest argv element kept whole in the audit (the prompt beyond it
/// is cut, with its size noted: the prompt is rebuilt from the ready entry).
const AUDIT_ARG: usize = 16 * 1024;

impl Connected {
    /// The usage receipt that puts this run in the audit: the exact argv
    /// (a prompt past [`AUDIT_ARG`] cut, its size noted) and the CLI's usage,
    /// settled into the step's ledgers. Its id is the dispatch token's, so a
    /// replay is a duplicate, never spent twice.
    pub fn receipt(&self, step_id: &str, dispatch_token: &str) -> crate::interp::Receipt {
        let argv: Vec<Value> = self
            .argv
            .iter()
            .map(|a| match a.char_indices().nth(AUDIT_ARG) {
                Some((cut, _)) => {
                    Value::String(format!("{}… [{} bytes in all]", &a[..cut], a.len()))
                }
                None => Value::String(a.clone()),
            })
            .collect();
        let mut usage = serde_json::Map::new();
        let mut telemetry = serde_json::json!({"connector": self.kind.as_str(), "argv": argv});
        let mut usd_source = None;
        if let Some(u) = &self.usage {
            usage.insert("tokens".into(), u.tokens.into());
            if let Some(usd) = u.usd {
                usage.insert("usd".into(), usd.into());
                usd_source = u.usd_source.map(str::to_owned);
            }
            if let Some(ms) = u.ms {
                usage.insert("ms".into(), ms.into());
            }
            telemetry["reported"] = u.raw.clone();
        }
        crate::interp::Receipt {
            dispatch_id: format!("{}:{dispatch_token}", self.kind.as_str()),
            step_id: Some(step_id.to_owned()),
            source: self.kind.as_str().to_owned(),
            usage: Value::Object(usage),
            usd_source,
            extra: [("telemetry".to_owned(), telemetry)].into_iter().collect(),
        }
    }
}

/// What a connector run leaves for the run's audit: the exact argv and the
/// usage its CLI reported (recorded as a usage receipt).
#[derive(Debug, Clone, PartialEq)]
pub struct Connected {
    /// The report for the dispatch.
    pub report: Report,
    /// The CLI.
    pub kind: ConnectorKind,
    /// The exact argv.
    pub argv: Vec<String>,
    /// The usage the CLI reported, when it did.
    pub usage: Option<Usage>,
}

/// What running one job gives its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The result to report (every failure of the command is one).
    Report(Report),
    /// A connector's result, with what its run leaves for the audit.
    Connected(Box<Connected>),
    /// The command was killed when the dispatch's lease ran out: nothing is
    /// reported, the engine orphans the dispatch (X7).
    Orphaned,
}

impl Answer {
    /// The report, if there is one to send.
    pub fn report(self) -> Option<Report> {
        match self {
            Answer::Report(r) => Some(r),
            Answer::Connected(c) => Some(c.report),
            Answer::Orphaned => None,
        }
    }
}

/// What a batch's watcher says at each poll while commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Let the commands run.
    Go,
    /// The run was cancelled: kill the commands, report them as stopped.
    Cancel,
    /// The driver is going away (a signal): kill the commands and give no
    /// result for them, so that their dispatches stay outstanding for
    /// `--resume` (see [`Interrupted`]).
    Interrupt,
}

/// A batch ended by [`Watch::Interrupt`]: every command still running was
/// killed with its process group and gives no result.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupted {
    /// How many commands were still running (and were killed).
    pub killed: usize,
    /// The results of the commands that had ended before the interrupt
    /// (safe to report: they ended on their own), in the order given.
    pub finished: Vec<(Value, Report)>,
}

/// What reaches the thread that supervises one command.
enum Event {
    /// The command (the group's leader) exited; it is not reaped yet.
    Exited,
    /// One of the command's output pipes reached its end.
    Closed,
    /// The batch was stopped (cancel or interrupt).
    Stop,
}

/// The process group of a started command (its id is the leader's pid).
/// The leader is reaped only after the last kill, so until then the id
/// cannot be reused for another group.
struct Group(Pid);

impl Group {
    /// SIGKILL to every process of the group; a group already gone is fine.
    fn kill(&self) {
        let _ = kill_process_group(self.0, Signal::KILL);
    }
}

/// Starts `command` for one ready entry, in a process group of its own (so
/// that stopping it also stops what it started).
fn spawn(job: &Job, run_id: &str, cwd: &Path) -> std::io::Result<Child> {
    let step = job.entry["id"].as_str().unwrap_or("");
    let mut cmd = match &job.connector {
        // a connector's CLI: its argv as given, no shell, stdin closed
        Some(call) => {
            let Some((program, args)) = call.argv.split_first() else {
                return Err(std::io::Error::other("a connector call needs a program"));
            };
            let mut cmd = Command::new(program);
            cmd.args(args).stdin(Stdio::null());
            cmd
        }
        None => {
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(&job.command).stdin(Stdio::piped());
            cmd
        }
    };
    cmd.current_dir(cwd)
        .env("STRATUM_RUN_ID", run_id)
        .env("STRATUM_STEP_ID", step)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
}

/// Why a job could not be started, for its failure report: a connector's
/// CLI that is not on `PATH` says what to install.
fn not_started(job: &Job, e: &std::io::Error) -> Report {
    match &job.connector {
        Some(call) if e.kind() == std::io::ErrorKind::NotFound => failure(format!(
            "cannot start the `{}` connector: `{}` is not found on PATH; {}",
            call.kind.as_str(),
            call.kind.program(),
            call.kind.install()
        )),
        Some(call) => failure(format!(
            "cannot start the `{}` connector (`{}`): {e}",
            call.kind.as_str(),
            call.kind.program()
        )),
        None => failure(format!("cannot start the agent command: {e}")),
    }
}

/// Which part of a pipe's bytes past its limit is kept.
#[derive(Clone, Copy)]
enum Keep {
    /// The first `limit` bytes (a result: more is an error).
    Head,
    /// The last `limit` bytes (stderr: its tail explains a failure).
    Tail,
}

/// What a reader thread took from one pipe so far.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    /// More than the limit arrived (the rest was read and dropped).
    over: bool,
}

type Shared = Arc<Mutex<Capture>>;

fn take(shared: &Shared) -> Capture {
    std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Reads `pipe` to its end on a thread of its own, keeping at most `limit`
/// bytes (reading on past it, so the writer never blocks on a full pipe),
/// and says [`Event::Closed`] at the end. The thread is detached: a pipe
/// held open by a process outside the group must not hold up the caller,
/// who takes what was read so far.
fn drain(
    mut pipe: impl Read + Send + 'static,
    limit: usize,
    keep: Keep,
    done: Sender<Event>,
) -> Shared {
    let shared = Shared::default();
    let into = Arc::clone(&shared);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut c = into.lock().unwrap_or_else(PoisonError::into_inner);
            let room = limit.saturating_sub(c.bytes.len());
            match keep {
                Keep::Head => c.bytes.extend_from_slice(&buf[..n.min(room)]),
                Keep::Tail => {
                    c.bytes.extend_from_slice(&buf[..n]);
                    if c.bytes.len() > 2 * limit {
                        let cut = c.bytes.len() - limit;
                        c.bytes.drain(..cut);
                    }
                }
            }
            c.over |= n > room;
        }
        let _ = done.send(Event::Closed);
    });
    shared
}

/// Writes the entry to the command's stdin on a thread of its own (while the
/// outputs are drained, so a command that writes before it reads cannot
/// deadlock with us), then closes it. A command that does not read its input
/// closes the pipe early: not an error.
fn feed(mut stdin: ChildStdin, bytes: Vec<u8>) {
    std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
}

/// Says [`Event::Exited`] when the command exits, leaving it unreaped (a
/// zombie keeps its pid, hence its group id, from being reused).
fn watch_exit(pid: Pid, done: Sender<Event>) {
    std::thread::spawn(move || {
        while let Err(rustix::io::Errno::INTR) = waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {}
        let _ = done.send(Event::Exited);
    });
}

/// The events seen so far for one command.
struct Pending {
    exited: bool,
    open: usize,
    stopped: bool,
}

impl Pending {
    /// Takes events until `done` holds (true) or `by` passes (false).
    fn until(&mut self, rx: &Receiver<Event>, by: Instant, done: fn(&Pending) -> bool) -> bool {
        while !done(self) {
            match rx.recv_timeout(by.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited) => self.exited = true,
                Ok(Event::Closed) => self.open = self.open.saturating_sub(1),
                Ok(Event::Stop) => self.stopped = true,
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => return done(self),
            }
        }
        true
    }
}

/// How a supervised command ended.
enum End {
    /// It exited (with this status when it could be reaped).
    Exited(Option<ExitStatus>),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// The batch was stopped and it was killed.
    Stopped,
}

/// `now + d`, or a year from now when that does not fit an [`Instant`].
fn deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Feeds a started command its entry, drains its outputs, and waits for it
/// within its timeout (or until `rx` says stop). Whatever happens, its
/// process group is killed before this returns, so nothing it started
/// outlives it; the pipes get [`PIPE_GRACE`] after it exits, then what was
/// read is taken.
fn supervise(
    child: Child,
    job: &Job,
    tx: Sender<Event>,
    rx: Receiver<Event>,
) -> (End, Capture, Capture) {
    let stdin = job.entry.to_string().into_bytes();
    supervise_bounded(
        child,
        (job.timeout, stdin),
        (MAX_STDOUT, MAX_STDERR),
        tx,
        rx,
    )
}

/// [`supervise`] for any started command: `input` is its timeout and the
/// bytes for its stdin, `limits` the bytes kept of stdout (its head) and of
/// stderr (its tail).
fn supervise_bounded(
    mut child: Child,
    (timeout, input): (Duration, Vec<u8>),
    (out_limit, err_limit): (usize, usize),
    tx: Sender<Event>,
    rx: Receiver<Event>,
) -> (End, Capture, Capture) {
    let by = deadline(timeout);
    let group = Group(Pid::from_child(&child));
    if let Some(stdin) = child.stdin.take() {
        feed(stdin, input);
    }
    let out = child
        .stdout
        .take()
        .map(|p| drain(p, out_limit, Keep::Head, tx.clone()));
    let err = child
        .stderr
        .take()
        .map(|p| drain(p, err_limit, Keep::Tail, tx.clone()));
    let open = usize::from(out.is_some()) + usize::from(err.is_some());
    watch_exit(group.0, tx);
    let mut seen = Pending {
        exited: false,
        open,
        stopped: false,
    };
    let ran = seen.until(&rx, by, |p| p.exited || p.stopped);
    let mut end = match (ran, seen.stopped) {
        (_, true) => End::Stopped,
        (false, _) => End::TimedOut,
        (true, false) => End::Exited(None),
    };
    if matches!(end, End::Exited(_)) {
        // the command is done; a grandchild holding its pipes gets a short grace
        // (a stop now only ends the grace: the command finished)
        seen.until(&rx, deadline(PIPE_GRACE), |p| p.open == 0 || p.stopped);
    }
    group.kill();
    seen.until(&rx, deadline(KILL_GRACE), |p| p.exited && p.open == 0);
    if let End::Exited(status) = &mut end {
        *status = child.wait().ok();
    } else if seen.exited {
        let _ = child.wait();
    }
    let take_all = |c: Option<Shared>| c.as_ref().map(take).unwrap_or_default();
    (end, take_all(out), take_all(err))
}

/// What a command that ended as `end` with these outputs answers.
fn answer(job: &Job, end: End, out: Capture, err: Capture) -> Answer {
    match (end, job.lease, &job.connector) {
        (End::TimedOut, Some(_), _) => Answer::Orphaned,
        (End::Exited(Some(status)), _, Some(call)) => {
            Answer::Connected(Box::new(connected(call, status, out, err)))
        }
        // timed out, stopped: the failure as for a command, the argv still audited
        (end, _, Some(call)) => unread(call, report(job, end, out, err)),
        (end, _, None) => Answer::Report(report(job, end, out, err)),
    }
}

/// A connector run that ended without a reading (it timed out, was
/// stopped, or could not start): `report`, with its argv for the audit.
fn unread(call: &Call, report: Report) -> Answer {
    Answer::Connected(Box::new(Connected {
        report,
        kind: call.kind,
        argv: call.argv.clone(),
        usage: None,
    }))
}

/// The answer of a job that could not be started.
fn never_started(job: &Job, e: &std::io::Error) -> Answer {
    let report = not_started(job, e);
    match &job.connector {
        Some(call) => unread(call, report),
        None => Answer::Report(report),
    }
}

/// What a connector's CLI that exited with `status` answers: its result
/// read from stdout (a failure when it failed, with its stderr's tail), and
/// its usage whenever it reported any.
fn connected(call: &Call, status: ExitStatus, out: Capture, err: Capture) -> Connected {
    let mut reading = if out.over {
        crate::connector::Reading {
            report: failure(format!(
                "the `{}` CLI printed more than {} MiB on stdout",
                call.kind.program(),
                MAX_STDOUT / (1024 * 1024)
            )),
            usage: None,
        }
    } else {
        crate::connector::read(call, &out.bytes, status.success())
    };
    if !status.success()
        && let Some(f) = reading.report.failure.as_mut()
    {
        let err = String::from_utf8_lossy(&err.bytes);
        let lines: Vec<&str> = err.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        *f = format!("{f} (exited with {status}): {tail}");
    }
    Connected {
        report: reading.report,
        kind: call.kind,
        argv: call.argv.clone(),
        usage: reading.usage,
    }
}

/// The report for a command that ended as `end` with these outputs.
fn report(job: &Job, end: End, out: Capture, err: Capture) -> Report {
    let status = match end {
        End::TimedOut => {
            return failure(format!(
                "agent command timed out after {} ms; its process group was killed (raise the limit with `--agent-timeout MS` or `[agents.NAME] timeout_ms`)",
                job.timeout.as_millis()
            ));
        }
        End::Stopped => {
            return failure("the agent command was stopped: the run was cancelled".into());
        }
        End::Exited(None) => {
            return failure("the agent command exited but could not be waited for".into());
        }
        End::Exited(Some(s)) => s,
    };
    if !status.success() {
        let err = String::from_utf8_lossy(&err.bytes);
        let lines: Vec<&str> = err.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        return failure(format!("the agent command exited with {status}: {tail}"));
    }
    if out.over {
        return failure(format!(
            "the agent printed more than {} MiB on stdout; a result must be smaller (write large data to files)",
            MAX_STDOUT / (1024 * 1024)
        ));
    }
    match serde_json::from_slice::<Value>(&out.bytes) {
        Ok(v) => Report::from_json(&v)
            .unwrap_or_else(|e| failure(format!("the agent's result is malformed: {e}"))),
        Err(e) => failure(format!("the agent printed no valid JSON: {e}")),
    }
}

/// Runs a started command to its end and reads its result.
fn finish(child: Child, job: &Job, tx: Sender<Event>, rx: Receiver<Event>) -> Answer {
    let (end, out, err) = supervise(child, job, tx, rx);
    answer(job, end, out, err)
}

/// Runs one job and reads its result.
pub fn run_command(job: &Job, run_id: &str, cwd: &Path) -> Answer {
    run_command_observed(job, run_id, cwd, |_| {})
}

/// [`run_command`], telling `started` the pid of the command once it runs
/// (it leads its own process group: the pid is the group id), before it is
/// waited for — so a durable record can name the group another process
/// may kill ([`kill_group`]). `run_id` is the `STRATUM_RUN_ID` it sees.
pub fn run_command_observed(
    job: &Job,
    run_id: &str,
    cwd: &Path,
    started: impl FnOnce(u32),
) -> Answer {
    match spawn(job, run_id, cwd) {
        Ok(child) => {
            started(child.id());
            let (tx, rx) = channel();
            finish(child, job, tx, rx)
        }
        Err(e) => never_started(job, &e),
    }
}

/// How a [`kill_group`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    /// The group was signalled and no live process is left in it.
    Reaped,
    /// There was no live process in the group before the signal.
    Gone,
    /// The group was signalled but a process of it was still alive at the
    /// deadline.
    Unconfirmed,
}

impl Teardown {
    /// Whether no live process of the group is left.
    pub fn confirmed(self) -> bool {
        self != Teardown::Unconfirmed
    }

    /// Its name, as the MCP tools report it.
    pub fn as_str(self) -> &'static str {
        match self {
            Teardown::Reaped => "reaped",
            Teardown::Gone => "gone",
            Teardown::Unconfirmed => "unconfirmed",
        }
    }
}

/// Sends SIGKILL to process group `pgid` (one a command of this module
/// leads, possibly started by another process on this host) and waits up
/// to `within` until no live process is left in it (a zombie, waiting for
/// its parent, is not alive).
pub fn kill_group(pgid: u32, within: Duration) -> Teardown {
    // group 1 (init's) and no group at all are never a command's
    let Some(pid) = i32::try_from(pgid)
        .ok()
        .filter(|&g| g > 1)
        .and_then(Pid::from_raw)
    else {
        return Teardown::Gone;
    };
    if !group_alive(pid) {
        return Teardown::Gone;
    }
    let _ = kill_process_group(pid, Signal::KILL);
    let by = deadline(within);
    loop {
        if !group_alive(pid) {
            return Teardown::Reaped;
        }
        if Instant::now() >= by {
            return Teardown::Unconfirmed;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether group `pgid` has a live member: signal 0 reaches it, and (on
/// Linux, where a zombie still takes signal 0) one of its processes is not
/// a zombie.
fn group_alive(pgid: Pid) -> bool {
    // any other answer (EPERM: alive, but not ours to signal) means it is there
    if let Err(rustix::io::Errno::SRCH) = rustix::process::test_kill_process_group(pgid) {
        return false;
    }
    live_member_in_proc(pgid).unwrap_or(true)
}

/// Whether `/proc` lists a process of group `pgid` that is not a zombie;
/// `None` where there is no `/proc`.
fn live_member_in_proc(pgid: Pid) -> Option<bool> {
    let want = pgid.as_raw_nonzero().get();
    let dir = std::fs::read_dir("/proc").ok()?;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // a stat line is short; 1 KiB holds it whole
        let mut buf = [0u8; 1024];
        let Ok(n) =
            std::fs::File::open(entry.path().join("stat")).and_then(|mut f| f.read(&mut buf))
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        // `PID (COMM) STATE PPID PGRP ...`: COMM may hold spaces and parens
        let Some((_, rest)) = text.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (state, _ppid, pgrp) = (fields.next(), fields.next(), fields.next());
        if pgrp.and_then(|g| g.parse::<i32>().ok()) == Some(want) && state != Some("Z") {
            return Some(true);
        }
    }
    Some(false)
}

/// A declared command (language 1.1 X12) to run without a shell: the
/// program and its arguments, where, with which environment (nothing else
/// of the caller's is passed), what goes to its stdin, and its bounds.
#[derive(Clone)]
pub struct Program<'a> {
    /// The program and its arguments, each one argument as given.
    pub argv: &'a [String],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Its whole environment.
    pub env: &'a [(String, String)],
    /// The bytes written to its stdin (then closed).
    pub stdin: Vec<u8>,
    /// How long it may run before its process group is killed.
    pub timeout: Duration,
    /// How many bytes of stdout (its head) and of stderr (its tail) are kept.
    pub max_output: usize,
    /// Asked every [`STOP_POLL`] while it runs: `true` stops it (its group
    /// is killed at once, [`ProgramEnd::stopped`]): the run was cancelled or
    /// its driver is going away.
    pub stop: Option<&'a StopProbe>,
}

/// What a driver says while a declared command runs: whether to stop it now
/// (the run was cancelled, or the driver got a signal). Called from another
/// thread than the driver's.
pub type StopProbe = dyn Fn() -> bool + Send + Sync;

/// How often a [`Program`]'s stop probe is asked.
pub const STOP_POLL: Duration = Duration::from_millis(100);

/// How a [`Program`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramEnd {
    /// Its exit code; `None` when it was killed (timeout, a signal) or
    /// could not be waited for.
    pub exit: Option<i32>,
    /// It ran past its timeout and its group was killed.
    pub timed_out: bool,
    /// The head of its stdout, at most `max_output` bytes.
    pub stdout: Vec<u8>,
    /// More stdout arrived than was kept.
    pub stdout_over: bool,
    /// The tail of its stderr, at most `max_output` bytes.
    pub stderr: Vec<u8>,
    /// Its stop probe said stop: its group was killed before it ended.
    pub stopped: bool,
}

/// Runs a [`Program`] in a process group of its own, like an agent command
/// (the same supervision: bounded time and output, the group killed when
/// it returns), but with no shell and only the environment given.
pub fn run_program(p: &Program<'_>) -> std::io::Result<ProgramEnd> {
    let Some((program, args)) = p.argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a command needs a program",
        ));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(p.cwd)
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn()?;
    let (tx, rx) = channel();
    let input = (p.timeout, p.stdin.clone());
    let limits = (p.max_output, p.max_output);
    let (end, out, err) = match p.stop {
        None => supervise_bounded(child, input, limits, tx, rx),
        Some(stop) => std::thread::scope(|s| {
            let (done, ended) = channel::<()>();
            let asker = tx.clone();
            s.spawn(move || ask_stop(stop, &ended, &asker));
            let end = supervise_bounded(child, input, limits, tx, rx);
            drop(done);
            end
        }),
    };
    let (exit, timed_out, stopped) = match end {
        End::Exited(status) => (status.and_then(|s| s.code()), false, false),
        End::TimedOut => (None, true, false),
        End::Stopped => (None, false, true),
    };
    Ok(ProgramEnd {
        exit,
        timed_out,
        stdout: out.bytes,
        stdout_over: out.over,
        stderr: err.bytes,
        stopped,
    })
}

/// Asks `stop` every [`STOP_POLL`] until the program ended (`ended`
/// disconnects); when it says stop, the supervisor gets [`Event::Stop`]
/// (it kills the group: the one place that does) and the asking ends.
fn ask_stop(stop: &StopProbe, ended: &Receiver<()>, tx: &Sender<Event>) {
    loop {
        if stop() {
            let _ = tx.send(Event::Stop);
            return;
        }
        match ended.recv_timeout(STOP_POLL) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Runs several jobs at once, one thread each; results in the order given.
/// A command runs in its entry's `cwd` when it has one (the git worktree of
/// an isolated fanout item), else in `cwd`.
pub fn run_batch(jobs: Vec<Job>, run_id: &str, cwd: &Path) -> Vec<(Value, Answer)> {
    run_batch_watched(jobs, run_id, cwd, Duration::from_secs(3600), || Watch::Go)
        .unwrap_or_else(|_| unreachable!("a watcher that always says Go never interrupts"))
}

/// [`run_batch`], asking `watch` every `every` while commands run. On
/// [`Watch::Cancel`] every command still running is killed with its process
/// group and reported as stopped; on [`Watch::Interrupt`] they are killed
/// and give no result (their dispatches stay outstanding, so the run can be
/// resumed); only the results of commands that had ended are returned.
pub fn run_batch_watched(
    jobs: Vec<Job>,
    run_id: &str,
    cwd: &Path,
    every: Duration,
    watch: impl FnMut() -> Watch,
) -> Result<Vec<(Value, Answer)>, Interrupted> {
    run_batch_observed(jobs, run_id, cwd, (every, watch), |_, _| {})
}

/// [`run_batch_watched`], telling `started` each command's entry and pid
/// (its process group id) as soon as it runs, so that a durable record can
/// name the groups another process may kill.
pub fn run_batch_observed(
    jobs: Vec<Job>,
    run_id: &str,
    cwd: &Path,
    watching: (Duration, impl FnMut() -> Watch),
    started: impl FnMut(&Value, u32),
) -> Result<Vec<(Value, Answer)>, Interrupted> {
    run_batch_core(jobs, run_id, cwd, watching, started).map(|(results, _)| results)
}

/// [`run_batch_watched`], also saying how many commands a
/// [`Watch::Cancel`] stopped (were still running and were killed with their
/// process groups, all gone when it returns; 0 without a cancel).
pub fn run_batch_counted(
    jobs: Vec<Job>,
    run_id: &str,
    cwd: &Path,
    every: Duration,
    watch: impl FnMut() -> Watch,
) -> Result<(Vec<(Value, Answer)>, usize), Interrupted> {
    run_batch_core(jobs, run_id, cwd, (every, watch), |_, _| {})
}

/// The one batch runner behind the three above: the results and how many
/// commands a cancel stopped.
fn run_batch_core(
    jobs: Vec<Job>,
    run_id: &str,
    cwd: &Path,
    (every, mut watch): (Duration, impl FnMut() -> Watch),
    mut started: impl FnMut(&Value, u32),
) -> Result<(Vec<(Value, Answer)>, usize), Interrupted> {
    let n = jobs.len();
    let mut results: Vec<Option<Answer>> = (0..n).map(|_| None).collect();
    let mut entries = Vec::with_capacity(n);
    let mut running: Vec<Option<Sender<Event>>> = (0..n).map(|_| None).collect();
    let (tx, rx) = channel();
    let mut said = Watch::Go;
    let mut stopped = vec![false; n];
    std::thread::scope(|s| {
        for (k, job) in jobs.into_iter().enumerate() {
            let dir = job.entry["cwd"].as_str().map_or(cwd, Path::new);
            entries.push(job.entry.clone());
            match spawn(&job, run_id, dir) {
                Ok(child) => {
                    started(&job.entry, child.id());
                    let (etx, erx) = channel();
                    running[k] = Some(etx.clone());
                    let tx = tx.clone();
                    s.spawn(move || {
                        let _ = tx.send((k, finish(child, &job, etx, erx)));
                    });
                }
                Err(e) => {
                    results[k] = Some(never_started(&job, &e));
                }
            }
        }
        drop(tx);
        loop {
            match rx.recv_timeout(every) {
                Ok((k, report)) => {
                    running[k] = None;
                    results[k] = Some(report);
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) if said == Watch::Go => {
                    said = watch();
                    if said != Watch::Go {
                        for (k, stop) in running.iter().enumerate() {
                            if let Some(stop) = stop {
                                stopped[k] = true;
                                let _ = stop.send(Event::Stop);
                            }
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    });
    if said == Watch::Interrupt {
        let finished = entries
            .into_iter()
            .zip(results)
            .zip(&stopped)
            .filter_map(|((e, r), &stop)| {
                r.filter(|_| !stop).and_then(Answer::report).map(|r| (e, r))
            })
            .collect();
        let killed = stopped.iter().filter(|&&s| s).count();
        return Err(Interrupted { killed, finished });
    }
    let stopped = stopped.iter().filter(|&&s| s).count();
    let results = entries
        .into_iter()
        .zip(results)
        .map(|(e, r)| {
            let r =
                r.unwrap_or_else(|| Answer::Report(failure("the agent command vanished".into())));
            (e, r)
        })
        .collect();
    Ok((results, stopped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A job with the default timeout.
    fn job(cmd: &str, entry: Value) -> Job {
        Job::new(cmd, entry, DEFAULT_TIMEOUT)
    }

    /// The report of a job without a lease (it always has one).
    fn rep(a: Answer) -> Report {
        a.report().expect("a job without a lease always reports")
    }

    #[test]
    fn a_command_gets_the_entry_and_its_result_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let entry = json!({"id": "fan/2", "do": "x"});
        let r = rep(run_command(
            &job(
                r#"read line; printf '{"output": {"step": "%s", "run": "%s", "len": %d}}' "$STRATUM_STEP_ID" "$STRATUM_RUN_ID" ${#line}"#,
                entry.clone(),
            ),
            "run-1",
            dir.path(),
        ));
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
            let r = rep(run_command(&job(cmd, e.clone()), "r", dir.path()));
            let f = r.failure.unwrap_or_default();
            assert!(f.contains(want), "{cmd}: {f}");
        }
        let r = rep(run_command(
            &job("echo oops >&2; exit 3", e),
            "r",
            dir.path(),
        ));
        assert!(r.failure.unwrap().contains("oops"));
    }

    #[test]
    fn a_batch_keeps_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = (0..4)
            .map(|k| {
                job(
                    &format!("sleep 0.0{}; echo '{{\"output\": {k}}}'", 4 - k),
                    json!({"id": format!("f/{k}")}),
                )
            })
            .collect();
        let out = run_batch(jobs, "r", dir.path());
        let got: Vec<Value> = out
            .into_iter()
            .map(|(_, r)| rep(r).output.unwrap())
            .collect();
        assert_eq!(got, vec![json!(0), json!(1), json!(2), json!(3)]);
    }

    #[test]
    fn an_entry_with_a_cwd_runs_there() {
        let (root, wt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cmd = r#"printf '{"output": "%s"}' "$(pwd -P)""#.to_string();
        let jobs = vec![
            job(
                &cmd,
                json!({"id": "f/0", "cwd": wt.path().to_str().unwrap()}),
            ),
            job(&cmd, json!({"id": "s"})),
        ];
        let out: Vec<(Value, Report)> = run_batch(jobs, "r", root.path())
            .into_iter()
            .map(|(e, a)| (e, rep(a)))
            .collect();
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
            job(&cmd, json!({"id": "slow"})),
            job("echo '{\"output\": 1}'", json!({"id": "fast"})),
        ];
        let mut polls = 0;
        let (out, stopped) =
            run_batch_counted(jobs, "r", dir.path(), Duration::from_millis(20), || {
                polls += 1;
                if polls >= 3 { Watch::Cancel } else { Watch::Go }
            })
            .unwrap();
        // the fast command had ended on its own: only the slow one was stopped
        assert_eq!(stopped, 1);
        let out: Vec<(Value, Report)> = out.into_iter().map(|(e, a)| (e, rep(a))).collect();
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

/// The runner against commands that hang, hold pipes, flood them or leave
/// processes behind. Each test runs the runner under [`within`], so a
/// regression fails instead of hanging the suite.
#[cfg(test)]
mod hardening {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    /// Generous: every command here ends in well under a second when the
    /// runner works, and would block for 30 s or forever when it does not.
    const HARNESS: Duration = Duration::from_secs(20);

    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(HARNESS)
            .expect("the agent runner did not return within the harness limit (it hangs)")
    }

    fn run(cmd: String, entry: Value, timeout: Duration, dir: PathBuf) -> Report {
        within(move || run_command(&Job::new(cmd, entry, timeout), "r", &dir))
            .report()
            .expect("these jobs have no lease: they always report")
    }

    /// Whether `pid` names a running process. A zombie is not running (this
    /// machine's init may not reap orphans, so a killed one can linger).
    fn alive(pid: i32) -> bool {
        let Some(p) = Pid::from_raw(pid) else {
            return false;
        };
        if rustix::process::test_kill_process(p).is_err() {
            return false;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    }

    fn pid_in(path: &Path) -> i32 {
        let text = std::fs::read_to_string(path).expect("the command wrote its pid file");
        text.trim().parse().expect("a pid file holds a number")
    }

    /// Waits briefly for SIGKILLed processes to be gone (the kernel takes a
    /// moment to tear them down).
    fn gone(pid: i32) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while alive(pid) {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    #[test]
    fn a_command_killed_at_its_dispatch_lease_is_an_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let me = dir.path().join("me");
        let cmd = format!("echo $$ > {}; sleep 30", me.display());
        // the lease (300 ms) is shorter than the agent timeout: it bounds the command
        let leased = json!({"id": "a", "timeoutMs": 300});
        let job = Job::new(cmd.clone(), leased.clone(), DEFAULT_TIMEOUT);
        assert_eq!(job.timeout, Duration::from_millis(300));
        let d = dir.path().to_path_buf();
        let started = Instant::now();
        let answer = within(move || run_command(&job, "r", &d));
        assert_eq!(answer, Answer::Orphaned);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(gone(pid_in(&me)), "the orphaned command survived");
        // a smaller agent timeout is the operator's limit: a failed attempt, as before
        let r = run(cmd, leased, Duration::from_millis(200), dir.path().into());
        let f = r.failure.unwrap_or_default();
        assert!(f.starts_with("agent command timed out after 200 ms"), "{f}");
    }

    #[test]
    fn a_hanging_command_times_out_and_its_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let (me, kid) = (dir.path().join("me"), dir.path().join("kid"));
        let cmd = format!(
            "echo $$ > {}; sleep 30 & echo $! > {}; wait",
            me.display(),
            kid.display()
        );
        let r = run(
            cmd,
            json!({"id": "a"}),
            Duration::from_millis(300),
            dir.path().into(),
        );
        let f = r.failure.unwrap_or_default();
        assert!(f.starts_with("agent command timed out after 300 ms"), "{f}");
        assert!(gone(pid_in(&me)), "the command survived its timeout");
        assert!(
            gone(pid_in(&kid)),
            "what the command started survived its timeout"
        );
    }

    #[test]
    fn a_grandchild_holding_stdout_does_not_hold_the_result() {
        let dir = tempfile::tempdir().unwrap();
        let kid = dir.path().join("kid");
        let cmd = format!(
            r#"(sleep 30 & echo $! > {}); echo '{{"output": 1}}'"#,
            kid.display()
        );
        let r = run(cmd, json!({"id": "a"}), DEFAULT_TIMEOUT, dir.path().into());
        assert_eq!(r.output, Some(json!(1)), "{:?}", r.failure);
        assert!(gone(pid_in(&kid)), "the grandchild survived the command");
    }

    #[test]
    fn descendants_do_not_outlive_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let kid = dir.path().join("kid");
        // detached from the pipes: only the group kill can stop it
        let cmd = format!(
            r#"sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}; echo '{{"output": 2}}'"#,
            kid.display()
        );
        let r = run(cmd, json!({"id": "a"}), DEFAULT_TIMEOUT, dir.path().into());
        assert_eq!(r.output, Some(json!(2)), "{:?}", r.failure);
        assert!(gone(pid_in(&kid)), "a descendant outlived the command");
    }

    #[test]
    fn a_large_entry_and_large_early_output_do_not_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let entry = json!({"id": "big", "blob": "y".repeat(200 * 1024)});
        let len = entry.to_string().len();
        // 200 KB on stdout (JSON whitespace) and on stderr before reading stdin
        let cmd = r#"head -c 204800 /dev/zero | tr '\0' ' '; head -c 204800 /dev/zero | tr '\0' e >&2; n=$(wc -c); printf '{"output": %d}' $n"#;
        let r = run(cmd.into(), entry, DEFAULT_TIMEOUT, dir.path().into());
        assert_eq!(r.output, Some(json!(len)), "{:?}", r.failure);
    }

    #[test]
    fn floods_past_the_limits_are_drained_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let e = json!({"id": "a"});
        // more stdout than a result may have
        let r = run(
            "head -c 9000000 /dev/zero".into(),
            e.clone(),
            DEFAULT_TIMEOUT,
            dir.path().into(),
        );
        let f = r.failure.unwrap_or_default();
        assert!(f.contains("more than 8 MiB on stdout"), "{f}");
        // a chatty failure: its last lines are kept, not its first
        let r = run(
            "head -c 300000 /dev/zero | tr '\\0' x >&2; echo >&2; echo the-last-line >&2; exit 3"
                .into(),
            e,
            DEFAULT_TIMEOUT,
            dir.path().into(),
        );
        let f = r.failure.unwrap_or_default();
        assert!(
            f.contains("exited with") && f.contains("the-last-line"),
            "{f}"
        );
    }

    #[test]
    fn an_interrupted_batch_kills_its_commands_and_reports_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let me = dir.path().join("me");
        let cmd = format!("echo $$ > {}; sleep 30", me.display());
        let (root, marker) = (dir.path().to_path_buf(), me.clone());
        let out = within(move || {
            let jobs = vec![
                Job::new(cmd, json!({"id": "slow"}), DEFAULT_TIMEOUT),
                Job::new(
                    "echo '{\"output\": 5}'",
                    json!({"id": "fast"}),
                    DEFAULT_TIMEOUT,
                ),
            ];
            // interrupt a second after the slow command is up: long after the fast one ended
            let mut up: Option<Instant> = None;
            run_batch_watched(jobs, "r", &root, Duration::from_millis(20), || {
                if marker.exists() {
                    let since = *up.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(1) {
                        return Watch::Interrupt;
                    }
                }
                Watch::Go
            })
        });
        let stop = out.unwrap_err();
        assert_eq!(stop.killed, 1);
        // only what ended on its own is given back; the killed command gives nothing
        let finished: Vec<_> = stop
            .finished
            .iter()
            .map(|(e, r)| (e["id"].clone(), r.output.clone()))
            .collect();
        assert_eq!(finished, vec![(json!("fast"), Some(json!(5)))]);
        assert!(gone(pid_in(&me)), "the interrupted command survived");
    }
}
