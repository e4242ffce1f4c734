//! What every driver of a run in a host process shares: `stratumc run`'s
//! loop (agent commands and connector CLIs) and the Python package's
//! `stratumc.run` (Python callables as agents).
//!
//! Owns: a ready entry as the JSON an agent reads, and reporting one round
//! of results to the engine in order, then the driver's touch (dispatches
//! whose lease ran out are orphaned and handed out again, X7).
//! Must never: run an agent or decide a gate (the drivers do), apply an
//! execution rule (the engine does), or print (lines go to the caller's
//! `log`).

use serde_json::Value;

use crate::engine::Engine;
use crate::interp::{Host, Outcome, ReadyEntry, Report};

/// A ready entry as an agent reads it (a command on stdin, a Python
/// callable as a dict).
pub fn entry_json(e: &ReadyEntry) -> Value {
    // Invariant: ready entries are plain data; they always serialize.
    serde_json::to_value(e).expect("invariant: ready entries always serialize")
}

/// Reports each result to the engine, in order, then touches the run; the
/// latest outcome after them (`None`: nothing was accepted and the touch
/// failed). A refused report (a stale token: the run moved on) is a line
/// for `log`, like each accepted one.
pub fn report_all(
    engine: &mut Engine,
    host: &mut dyn Host,
    run_id: &str,
    results: Vec<(&ReadyEntry, Report)>,
    log: &mut dyn FnMut(String),
) -> Option<Outcome> {
    let mut last = None;
    for (entry, report) in results {
        let (id, token) = (entry.id.as_str(), Some(entry.dispatch_token.as_str()));
        let what = if report.failure.is_some() {
            "failed"
        } else {
            "reported"
        };
        // an item's attempts count over all its stages: say which stage this is
        let which = match &entry.item {
            Some(it) => format!(" stage {} (item attempt", it.stage + 1),
            None => " (attempt".to_string(),
        };
        log(format!("  {id}{which} {}): {what}", entry.attempt));
        match engine.report(run_id, id, token, &report, host) {
            Ok(o) => last = Some(o),
            Err(e) => log(format!("  {id}: refused: {e}")),
        }
    }
    // a driver's touch: dispatches whose lease ran out (an agent killed at
    // it reports nothing) are orphaned here and handed out again (X7)
    if let Ok(o) = engine.touch(run_id, host) {
        last = Some(o);
    }
    last
}
