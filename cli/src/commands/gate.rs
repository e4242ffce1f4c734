//! `stratumc gate approve|reject|revise RUN STEP [--note TEXT] [--choice
//! TEXT] [--token T]`: an operator decides a waiting gate from the terminal
//! (a choice among the gate's options, X10, is checked by the engine).
//!
//! Owns: finding the gate's live token in the store (the operator does not
//! type it), explaining why a gate cannot be decided (unknown run, no such
//! step, not a gate, not waiting, stale), recording the decision through
//! `Engine::resolve_gate` with `resolved_by: "human"`, and the exit codes
//! (0 recorded; 1 the gate cannot be decided now — not waiting, run over or
//! cancelled, stale token; 2 unknown run, unknown step, not a gate, or store
//! error).
//! Must never: apply a decision itself (the engine does), or continue the
//! run (dispatching is `stratumc run --resume`'s or the MCP client's job).

use clap::ValueEnum;
use serde_json::json;
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::host::StdHost;
use stratum_vm::interp::{GateDecision, Outcome, RunStatus, StepStatus, VmError};
use stratum_vm::view::{GateView, RunView};

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

/// The host of a stored run: its recorded workspace and the configuration
/// frozen into it; each way the files on disk now differ is a warning on
/// stderr (they are ignored).
fn run_host(engine: &mut Engine, run: &str) -> Result<StdHost, String> {
    let root = engine
        .workspace_of(run)
        .map_err(|e| e.to_string())?
        .map(std::path::PathBuf::from);
    let frozen = engine.frozen_config(run).map_err(|e| e.to_string())?;
    let rc = stratum_vm::config::of_run(run, frozen.as_deref(), None, root.as_deref())
        .map_err(|e| e.to_string())?;
    for w in &rc.warnings {
        eprintln!("warning: {w}");
    }
    StdHost::with_config(root.as_deref(), &rc.config).map_err(|e| e.to_string())
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
    let gate = waiting_gate(&view, &args.run, &args.step)?;
    check_token(args, &gate)?;
    let mut host = host_for(&mut engine, &args.run)?;
    let outcome = resolve(&mut engine, args, &gate, &mut host)?;
    if args.format == Format::Json {
        super::emit(&json_report(args, &gate, &outcome));
    } else {
        super::emit(&human_report(args, &gate, &outcome));
    }
    Ok(Exit::Ok)
}

/// The gate `step` of the run when it waits for a decision; else says why
/// it cannot be decided (unknown step, not a gate, not waiting).
fn waiting_gate(view: &RunView, run: &str, step: &str) -> Result<GateView, Exit> {
    if let Some(g) = view.gate(step) {
        return Ok(g.clone());
    }
    let gates: Vec<&str> = view
        .steps
        .iter()
        .filter(|s| s.kind == "gate")
        .map(|s| s.id.as_str())
        .collect();
    let listed = if gates.is_empty() {
        "it has no gates".to_string()
    } else {
        format!("its gates: {}", gates.join(", "))
    };
    let Some(s) = view.step(step) else {
        eprintln!("error: run `{run}` has no step `{step}`; {listed}");
        return Err(Exit::Usage);
    };
    if s.kind != "gate" {
        eprintln!(
            "error: step `{step}` of run `{run}` is a `{}` step, not a gate; {listed}",
            s.kind
        );
        return Err(Exit::Usage);
    }
    let why = match (view.status, s.status) {
        (RunStatus::Running, StepStatus::Succeeded) => format!(
            "it was already decided ({})",
            s.decision.as_deref().unwrap_or("?")
        ),
        (RunStatus::Running, st) => {
            format!("it is {} (its predecessors are not done)", st.as_str())
        }
        (status, _) => format!("the run is {}", status.as_str()),
    };
    eprintln!(
        "error: gate `{step}` of run `{run}` is not waiting for a decision: {why}; see `stratumc query flow {run}`"
    );
    Err(Exit::Errors)
}

/// `--token`, when given, must be the gate's live token.
fn check_token(args: &GateArgs, gate: &GateView) -> Result<(), Exit> {
    if let Some(t) = args.token.as_deref()
        && t != gate.token
    {
        eprintln!(
            "error: stale gate token for `{}` of run `{}`: the gate now waits in round {} with another token; look again with `stratumc query gates`",
            args.step, args.run, gate.round
        );
        return Err(Exit::Errors);
    }
    Ok(())
}

/// The host of the run's own workspace and the judge frozen into it at
/// start: what the decision makes run next (`set` steps, their ensures) sees
/// them.
fn host_for(engine: &mut Engine, run: &str) -> Result<StdHost, Exit> {
    run_host(engine, run).map_err(|e| {
        eprintln!("error: run `{run}`: {e}; nothing was recorded");
        Exit::Usage
    })
}

/// Records the decision through the engine, with `resolved_by: "human"`.
fn resolve(
    engine: &mut Engine,
    args: &GateArgs,
    gate: &GateView,
    host: &mut StdHost,
) -> Result<Outcome, Exit> {
    let (run, step) = (args.run.as_str(), args.step.as_str());
    let answer = GateDecision {
        decision: args.action.decision(),
        note: args.note.as_deref(),
        choice: args.choice.as_deref(),
        tokenless: false,
    };
    match engine.resolve_gate(run, step, Some(&gate.token), &answer, "human", host) {
        Ok(o) => Ok(o),
        Err(EngineError::Vm(VmError::StaleToken(_) | VmError::NotAwaiting(_))) => {
            eprintln!(
                "error: gate `{step}` of run `{run}` changed while deciding (someone else decided it, or the run moved on); nothing was recorded; see `stratumc query flow {run}`"
            );
            Err(Exit::Errors)
        }
        Err(EngineError::Vm(e)) => {
            eprintln!("error: gate `{step}` of run `{run}`: {e}");
            Err(Exit::Errors)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(Exit::Usage)
        }
    }
}

/// The decision and what runs next, as one JSON document.
fn json_report(args: &GateArgs, gate: &GateView, outcome: &Outcome) -> String {
    let ready: Vec<&str> = outcome.ready.iter().map(|r| r.id.as_str()).collect();
    let gates: Vec<_> = outcome
        .gates
        .iter()
        .map(|g| json!({"stepId": g.step_id, "gateToken": g.gate_token, "round": g.round}))
        .collect();
    let mut doc = json!({
        "version": 1,
        "runId": args.run,
        "stepId": args.step,
        "action": format!("{:?}", args.action).to_lowercase(),
        "decision": args.action.decision(),
        "note": args.note,
        "resolvedBy": "human",
        "round": gate.round,
        "status": outcome.wire_status(),
        "ready": ready,
        "gates": gates,
    });
    // X10: the choice, after the note, only when one was given
    if let (Some(c), Some(obj)) = (&args.choice, doc.as_object_mut()) {
        obj.insert("choice".into(), json!(c));
    }
    format!("{doc}\n")
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
