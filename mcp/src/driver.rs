//! Engine-dispatched entries (LANGUAGE.md E8): the server runs them itself
//! with the agent command that `stratum.toml` configures for their agent, and
//! hands the rest to the client marked `"dispatch": "engine-fallback"`.
//!
//! Owns: the loop that runs configured commands for every engine entry of an
//! outcome and reports their results, until none is left.
//! Must never: run a consumer or step entry (those are the client's), or
//! loop without a bound.

use stratum_vm::agent::{self, Job, Watch};
use stratum_vm::engine::{Engine, EngineError, StdHost};
use stratum_vm::interp::Outcome;

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
        let jobs: Vec<_> = outcome
            .ready
            .iter()
            .filter(|e| e["dispatch"] == "engine")
            .filter_map(|e| {
                let cmd = agents.commands.get(e["agent"].as_str()?)?;
                // `[agents.NAME] timeout_ms` takes this place once the configuration carries it
                Some(Job::new(cmd.clone(), e.clone(), agent::DEFAULT_TIMEOUT))
            })
            .collect();
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
        for (entry, report) in results {
            let id = entry["id"].as_str().unwrap_or("");
            // a refusal (the run moved on meanwhile, e.g. cancelled by another process) changes nothing
            let token = entry["dispatchToken"].as_str();
            let _ = engine.report(run_id, id, token, &report, host);
        }
        outcome = engine.poll(run_id, host)?;
    }
    Ok(outcome)
}
