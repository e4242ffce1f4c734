//! `stratumc flow cancel RUN`: an operator stops a run (seed 000, `stratum
//! flow cancel`).
//!
//! Owns: settling a run as `cancelled` through `Engine::cancel` (every live
//! dispatch and gate token is burned; later reports, decisions and resumes
//! are refused), reading the stored state first so a finished run is never
//! changed, the result document and the exit codes of the seed: 0 the run is
//! settled as cancelled (also when it already was), 1 unconfirmed (the run
//! had already ended otherwise, or the cancel could not be committed), 2
//! unknown run (or no readable store).
//! Must never: kill processes (agents started by `stratumc run` finish their
//! current dispatch; the engine refuses their reports and the driver stops).

use clap::Subcommand;
use serde_json::{Value, json};
use stratum_vm::host::StdHost;
use stratum_vm::interp::RunStatus;

use super::query;
use crate::{Exit, Format};

/// Arguments of `stratumc flow`: the operation.
#[derive(clap::Args, Debug)]
pub struct FlowArgs {
    /// The operation.
    #[command(subcommand)]
    pub what: Cmd,
}

/// Flow operations.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Cancel a run (exit 0: settled as cancelled; 1: unconfirmed — it had already ended otherwise, or the store refused; 2: unknown run).
    Cancel {
        /// The run id (`run-…`).
        run: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

/// Runs the command.
pub fn run(args: &FlowArgs) -> Exit {
    let Cmd::Cancel { run, format } = &args.what;
    let mut engine = match query::open() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let before = match query::load(&mut engine, run) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let mut host = StdHost {
        workspace: None,
        judge: None,
        judges: Default::default(),
        commands: Default::default(),
        stop: None,
    };
    let (status, settled, reason) = match engine.cancel_flow(run, &mut host) {
        Ok(c) => (c.outcome.status, c.settled(), c.reason()),
        Err(e) => {
            eprintln!("error: cancelling run `{run}` was not confirmed: {e}");
            return emit(
                *format,
                run,
                RunStatus::Running,
                false,
                Some("store_refused".into()),
                Value::Null,
            );
        }
    };
    // a cancel spends nothing: the ledger read before is current
    let ledger = query::ledger_json(&before);
    emit(*format, run, status, settled, reason, ledger)
}

fn emit(
    format: Format,
    run: &str,
    status: RunStatus,
    settled: bool,
    reason: Option<String>,
    ledger: Value,
) -> Exit {
    if format == Format::Json {
        let mut doc = json!({"version": 1, "runId": run, "status": status.as_str(), "flowSettled": settled, "ledger": ledger});
        if let Some(r) = &reason {
            doc["reason"] = Value::from(r.as_str());
        }
        super::emit(&format!("{doc}\n"));
    } else {
        let text = match (settled, reason.as_deref()) {
            (true, None) => format!(
                "run {run} cancelled; outstanding dispatches and gates can no longer be reported or decided\n"
            ),
            (true, Some(_)) => format!("run {run} was already cancelled\n"),
            (false, Some("store_refused")) => {
                format!(
                    "run {run}: cancellation not confirmed; check it with `stratumc query flow {run}`\n"
                )
            }
            (false, _) => format!(
                "run {run} had already ended ({}); nothing was cancelled\n",
                status.as_str()
            ),
        };
        super::emit(&text);
    }
    if settled { Exit::Ok } else { Exit::Errors }
}
