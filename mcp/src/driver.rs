//! Engine-dispatched entries (LANGUAGE.md E8): the server runs them itself
//! with the agent command that `stratum.toml` configures for their agent, and
//! hands the rest to the client marked `"dispatch": "engine-fallback"`.
//!
//! Owns: the loop that runs configured commands for every engine entry of an
//! outcome and reports their results, until none is left.
//! Must never: run a consumer or step entry (those are the client's), or
//! loop without a bound.

use stratum_vm::agent::{self, Job, Watch};
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::host::StdHost;
use stratum_vm::interp::{Dispatch, Outcome, ReadyEntry};

use crate::state::Agents;

/// Most rounds of engine work done inside one tool call.
const MAX_ROUNDS: usize = 10_000;

/// Runs every engine entry whose agent has a command, reports the results,
/// and returns the outcome the client should see.
pub fn drive(
    engine: &mut Engine,
    host: &mut StdHost,
    agents: &Agents,
    run_id: &str,
    mut outcome: Outcome,
) -> Result<Outcome, EngineError> {
    if agents.commands.is_empty() {
        return Ok(outcome);
    }
    for _ in 0..MAX_ROUNDS {
        if outcome.status.is_terminal() {
            break;
        }
        let (entries, jobs): (Vec<&ReadyEntry>, Vec<_>) = outcome
            .ready
            .iter()
            .filter(|e| e.dispatch == Dispatch::Engine)
            .filter_map(|e| {
                let cmd = agents.commands.get(&e.agent)?;
                let timeout = agents
                    .timeouts
                    .get(&e.agent)
                    .copied()
                    .unwrap_or(agent::DEFAULT_TIMEOUT);
                Some((e, Job::new(cmd.clone(), entry_json(e), timeout)))
            })
            .unzip();
        if jobs.is_empty() {
            break;
        }
        // a cancel from another process stops the commands still running
        let watched = agent::run_batch_watched(
            jobs,
            run_id,
            &agents.root,
            std::time::Duration::from_millis(250),
            || {
                let cancelled = engine
                    .poll(run_id, host)
                    .is_ok_and(|o| o.status == stratum_vm::interp::RunStatus::Cancelled);
                if cancelled { Watch::Cancel } else { Watch::Go }
            },
        );
        // this watcher never interrupts, so every batch ends with its results
        let Ok(results) = watched else { break };
        let reports: Vec<_> = entries
            .into_iter()
            .zip(results)
            .map(|(e, (_, report))| (e.id.clone(), e.dispatch_token.clone(), report))
            .collect();
        for (id, token, report) in reports {
            // a refusal (the run moved on meanwhile, e.g. cancelled by another process) changes nothing
            let _ = engine.report(run_id, &id, Some(&token), &report, host);
        }
        outcome = engine.poll(run_id, host)?;
    }
    Ok(outcome)
}

/// A ready entry as the agent command reads it on stdin.
fn entry_json(e: &ReadyEntry) -> serde_json::Value {
    // Invariant: ready entries are plain data; they always serialize.
    serde_json::to_value(e).expect("invariant: ready entries always serialize")
}
