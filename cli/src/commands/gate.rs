//! `stratumc gate approve|reject|revise RUN STEP [--note TEXT] [--choice
//! TEXT] [--token T]`: an operator decides a waiting gate from the terminal
//! (a choice among the gate's options, X10, is checked by the engine).
//!
//! Owns: the command line, the report and the exit codes; the decision
//! itself (the gate's live token, so the operator does not type it, why a
//! gate cannot be decided, the run's own host) is `stratum_vm::operator`'s,
//! which the operator UI shares, recorded with `resolved_by: "human"`; exit codes
//! (0 recorded; 1 the gate cannot be decided now — not waiting, run over or
//! cancelled, stale token; 2 unknown run, unknown step, not a gate, or store
//! error).
//! Must never: apply a decision itself (the engine does), or continue the
//! run (dispatching is `stratumc run --resume`'s or the MCP client's job).

use clap::ValueEnum;
use stratum_vm::interp::{GateDecision, Outcome, RunStatus};
use stratum_vm::operator;
use stratum_vm::view::{GateView, wire};

use super::query;
use crate::{Exit, Format};

/// The operator's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Continue to the gate's `on_approve` route.
    Approve,
    /// Kill: the gate's `on_kill` route, or end the run as killed.
    Reject,
    /// Send the work back to `on_revise` (uses a round).
    Revise,
}

impl Action {
    /// The engine's decision word.
    fn decision(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Reject => "kill",
            Action::Revise => "revise",
        }
    }

    fn past(self) -> &'static str {
        match self {
            Action::Approve => "approved",
            Action::Reject => "rejected (kill)",
            Action::Revise => "sent back for revision",
        }
    }
}

/// Arguments of `stratumc gate`.
#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// approve, reject (kill) or revise.
    #[arg(value_enum)]
    pub action: Action,
    /// The run id (`run-…`).
    pub run: String,
    /// The gate's step id (`review`, or `sub/review` inside a sub-flow).
    pub step: String,
    /// Why (recorded in the audit with the decision).
    #[arg(long)]
    pub note: Option<String>,
    /// One of the gate's options (language 1.1 X10), for approve or revise; a text that is not an option is refused with the options listed.
    #[arg(long)]
    pub choice: Option<String>,
    /// Decide only if the gate still waits with this token (as listed by `query gates`).
    #[arg(long)]
    pub token: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// Runs the command.
pub fn run(args: &GateArgs) -> Exit {
    match decide(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

/// Finds the waiting gate, records the decision, reports what runs next.
fn decide(args: &GateArgs) -> Result<Exit, Exit> {
    let mut engine = query::open()?;
    let view = query::load(&mut engine, &args.run)?;
    let answer = GateDecision {
        decision: args.action.decision(),
        note: args.note.as_deref(),
        choice: args.choice.as_deref(),
        tokenless: false,
    };
    let token = args.token.as_deref();
    let decided = operator::decide_gate(&mut engine, &view, &args.step, token, &answer, "human")
        .map_err(|e| {
            eprintln!("error: {e}");
            match e.is_usage() {
                true => Exit::Usage,
                false => Exit::Errors,
            }
        })?;
    for w in &decided.warnings {
        eprintln!("warning: {w}");
    }
    if args.format == Format::Json {
        super::emit(&json_report(args, &decided.gate, &decided.outcome));
    } else {
        super::emit(&human_report(args, &decided.gate, &decided.outcome));
    }
    Ok(Exit::Ok)
}

/// The decision and what runs next, as one JSON document.
fn json_report(args: &GateArgs, gate: &GateView, outcome: &Outcome) -> String {
    let answer = GateDecision {
        decision: args.action.decision(),
        note: args.note.as_deref(),
        choice: args.choice.as_deref(),
        tokenless: false,
    };
    let action = format!("{:?}", args.action).to_lowercase();
    let at = (args.run.as_str(), args.step.as_str(), Some(action.as_str()));
    format!(
        "{}\n",
        wire::decision_json(at, &answer, gate.round, outcome)
    )
}

/// The decision and what runs next, as text.
fn human_report(args: &GateArgs, gate: &GateView, outcome: &Outcome) -> String {
    let (run, step) = (args.run.as_str(), args.step.as_str());
    let ready: Vec<&str> = outcome.ready.iter().map(|r| r.id.as_str()).collect();
    let chose = args
        .choice
        .as_deref()
        .map(|c| format!(" choosing `{c}`"))
        .unwrap_or_default();
    let mut text = format!(
        "gate `{step}` of run {run}: {}{chose} (decided in round {})\n",
        args.action.past(),
        query::rounds(gate.round, gate.max_rounds)
    );
    text.push_str(&match outcome.status {
        RunStatus::Running if !ready.is_empty() => format!(
            "run {run} is running: ready {}; continue it with `stratumc run --resume {run} --agent CMD`\n",
            ready.join(", ")
        ),
        RunStatus::Running if !outcome.gates.is_empty() => {
            let ids: Vec<&str> = outcome.gates.iter().map(|g| g.step_id.as_str()).collect();
            format!("run {run} is waiting at gate {}\n", ids.join(", "))
        }
        other => {
            let mut t = format!("run {run} is {}", other.as_str());
            if let Some(f) = &outcome.failure {
                t.push_str(&format!(": {}", f.reason));
            }
            t.push('\n');
            t
        }
    });
    text
}
