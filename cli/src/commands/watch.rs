//! `stratumc watch RUN [--interval MS]`: follow a run live until it ends.
//!
//! Owns: following the store's version of the run (one indexed read per
//! wake-up; the run is read again only when it changed) — on a store that
//! pushes changes (PostgreSQL's `LISTEN/NOTIFY`) it wakes when a commit is
//! announced (and at least every [`PUSHED_WAIT`]), on the others it polls
//! every `--interval` — redrawing the
//! run summary in place on a terminal (ANSI: cursor up, clear below), or
//! printing one line per change when stdout is not a terminal, and the exit
//! codes (0 the run completed; 1 it ended otherwise; 2 unknown run or store
//! error).
//! Must never: change the run; it only reads.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use stratum_vm::view::{RunView, StepView};

use super::query;
use crate::Exit;

/// Arguments of `stratumc watch`.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The run id (`run-…`).
    pub run: String,
    /// How often to look at the store, in milliseconds (a store that pushes
    /// changes, PostgreSQL, wakes the watch on each commit instead).
    #[arg(long, default_value_t = 200)]
    pub interval: u64,
}

/// The longest wait on a store that pushes changes: a missed notification
/// (a reconnect) delays a redraw by at most this.
const PUSHED_WAIT: Duration = Duration::from_secs(30);

/// Runs the command.
pub fn run(args: &WatchArgs) -> Exit {
    let (run, interval_ms) = (args.run.as_str(), args.interval);
    let mut engine = match query::open() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let interval = if engine.store().pushes_changes() {
        PUSHED_WAIT
    } else {
        Duration::from_millis(interval_ms.max(10))
    };
    let tty = std::io::stdout().is_terminal();
    let mut plain = Plain::default();
    let mut drawn_lines = 0usize;
    let mut seen: Option<u64> = None;
    loop {
        let version = match engine.store().version(run) {
            Ok(v) => v,
            Err(e) => {
                let e = stratum_vm::engine::EngineError::Store(e);
                if query::is_unknown_run(&e) {
                    eprintln!("{}", query::unknown_run(run));
                } else {
                    eprintln!("error: run `{run}`: {e}");
                }
                return Exit::Usage;
            }
        };
        if seen != Some(version) {
            let view = match query::load(&mut engine, run) {
                Ok(v) => v,
                Err(code) => return code,
            };
            seen = Some(version);
            if tty {
                let frame = query::summary(&view, false);
                // move to the start of the previous frame and clear everything below it
                let up = if drawn_lines > 0 {
                    format!("\x1b[{drawn_lines}F\x1b[J")
                } else {
                    String::new()
                };
                drawn_lines = frame.lines().count();
                super::emit(&format!("{up}{frame}"));
            } else {
                super::emit(&plain.changes(&view));
            }
            if view.status.is_terminal() {
                return if view.status == stratum_vm::interp::RunStatus::Completed {
                    Exit::Ok
                } else {
                    Exit::Errors
                };
            }
        }
        if let Err(e) = engine.store().wait_for_change(Some(run), interval) {
            eprintln!("error: run `{run}`: {e}");
            return Exit::Usage;
        }
    }
}

/// What the plain output has printed so far.
#[derive(Default)]
struct Plain {
    started: bool,
    steps: HashMap<String, String>,
    gates: HashMap<String, String>,
    progress: String,
}

fn step_line(s: &StepView) -> String {
    let mut t = format!("step {}: {}", s.id, s.status.as_str());
    let mut extra = Vec::new();
    if s.attempts > 0 {
        extra.push(format!("attempt {}", s.attempts));
    }
    if let Some((n, max)) = s.gate_rounds
        && n > 0
    {
        extra.push(format!("gate rounds {}", query::rounds(n, max)));
    }
    if s.resets > 0 {
        extra.push(format!("reset {}", s.resets));
    }
    if let Some(c) = s.items {
        extra.push(format!("{}/{} items done", c.succeeded, c.total));
    }
    if let Some(d) = &s.decision {
        extra.push(format!("decided {d}"));
    }
    if !extra.is_empty() {
        t.push_str(&format!(" ({})", extra.join(", ")));
    }
    if s.status == stratum_vm::interp::StepStatus::Failed
        && let Some(f) = &s.failure
    {
        t.push_str(&format!(": {f}"));
    }
    t
}

impl Plain {
    /// Lines for what changed since the last call (everything on the first).
    fn changes(&mut self, v: &RunView) -> String {
        let mut out = String::new();
        if !self.started {
            self.started = true;
            out.push_str(&format!(
                "watching run {} (flow {}): {}\n",
                v.meta.run_id,
                v.meta.flow,
                v.status.as_str()
            ));
        }
        for s in &v.steps {
            let line = step_line(s);
            if self.steps.get(&s.id) != Some(&line) {
                out.push_str(&line);
                out.push('\n');
                self.steps.insert(s.id.clone(), line);
            }
        }
        let mut live = HashMap::new();
        for g in &v.gates {
            let line = format!(
                "gate {}: waiting for a decision (round {}, token {})",
                g.step_id,
                query::rounds(g.round, g.max_rounds),
                g.token
            );
            if self.gates.get(&g.step_id) != Some(&line) {
                out.push_str(&line);
                out.push('\n');
            }
            live.insert(g.step_id.clone(), line);
        }
        self.gates = live;
        let progress = format!("{}  {}", query::progress_bar(v), query::spend_line(v));
        if progress != self.progress {
            out.push_str(&progress);
            out.push('\n');
            self.progress = progress;
        }
        if v.status.is_terminal() {
            out.push_str(&format!("run {}: {}", v.meta.run_id, v.status.as_str()));
            if let Some(f) = &v.failure {
                out.push_str(&format!(": {f}"));
            }
            out.push('\n');
        }
        out
    }
}
