//! What `stratumc run` shows of a run's progress while it drives it: before
//! each batch of dispatches, the steps done of total, what is being
//! dispatched and what the run has spent. On a terminal the line stays at
//! the bottom and counts the batch's seconds until its results are printed;
//! piped, it is one plain line per batch (as `stratumc watch` prints one
//! line per change).
//!
//! Owns: the wording of that line and the terminal's redraw (carriage
//! return, clear to the end of the line).
//! Must never: change the run — it reads the view `stratumc query` reads —
//! or write anything to stdout (the run's JSON document goes there).

use std::cell::Cell;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use stratum_vm::engine::Engine;
use stratum_vm::interp::ReadyEntry;
use stratum_vm::view;

/// The progress line of one driver.
pub struct Progress {
    tty: bool,
    line: Option<String>,
    started: Instant,
    drawn: Cell<bool>,
}

impl Progress {
    /// A progress line on stderr: redrawn when stderr is a terminal.
    pub fn new() -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            line: None,
            started: Instant::now(),
            drawn: Cell::new(false),
        }
    }

    /// The line of a batch about to be dispatched: `progress: 1/3 steps
    /// done; dispatching work, review; spent $0.12, 2 dispatches, 3400
    /// tokens`. A run the view cannot read shows no line.
    pub fn batch(&mut self, engine: &mut Engine, run_id: &str, ready: &[ReadyEntry]) {
        let Ok(v) = view::load(engine, run_id) else {
            return;
        };
        let (done, total) = v.progress();
        let ids: Vec<&str> = ready.iter().map(|r| r.id.as_str()).collect();
        let s = &v.spent;
        let plural = |n: f64, one: &str, many: &str| match n == 1.0 {
            true => format!("1 {one}"),
            false => format!("{n} {many}"),
        };
        let text = format!(
            "progress: {done}/{total} steps done; dispatching {}; spent ${:.2}, {}, {}",
            ids.join(", "),
            s.usd,
            plural(s.dispatches, "dispatch", "dispatches"),
            plural(s.tokens, "token", "tokens")
        );
        if self.tty {
            self.started = Instant::now();
            self.line = Some(text);
            self.tick();
        } else {
            eprintln!("{text}");
        }
    }

    /// Redraws the terminal line with the batch's seconds so far.
    pub fn tick(&self) {
        if let Some(text) = &self.line {
            let secs = self.started.elapsed().as_secs();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K{text} ({secs} s)");
            let _ = err.flush();
            self.drawn.set(true);
        }
    }

    /// Takes the terminal line away before other lines are printed.
    pub fn clear(&self) {
        if self.drawn.replace(false) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
