//! An operator's decision on a waiting gate, as `stratumc gate` and the
//! operator UI take it: one home for finding the gate, checking a given
//! token, building the host of the run's own workspace and recording the
//! decision through [`Engine::resolve_gate`].
//!
//! Owns: why a gate cannot be decided ([`DecideError`], typed, with the
//! words the operator reads), and the host a decision runs with (the run's
//! recorded workspace and the configuration frozen into it).
//! Must never: apply a decision itself (the engine does), continue the run
//! (dispatching is `stratumc run --resume`'s or an MCP client's job), or
//! print.

use std::fmt;
use std::path::PathBuf;

use crate::engine::{Engine, EngineError};
use crate::host::StdHost;
use crate::interp::{GateDecision, Outcome, RunStatus, StepStatus, VmError};
use crate::view::{GateView, RunView};

/// Why a gate decision was not recorded. Nothing was recorded in any case.
#[derive(Debug)]
pub enum DecideError {
    /// The run has no step of that id.
    UnknownStep {
        run: String,
        step: String,
        gates: Vec<String>,
    },
    /// The step is not a gate.
    NotAGate {
        run: String,
        step: String,
        kind: String,
        gates: Vec<String>,
    },
    /// The gate does not wait for a decision now.
    NotWaiting {
        run: String,
        step: String,
        why: String,
    },
    /// A token was given and the gate waits with another one.
    StaleToken {
        run: String,
        step: String,
        round: u32,
    },
    /// The host of the run's workspace could not be built.
    Host { run: String, message: String },
    /// Someone else decided the gate, or the run moved on, while deciding.
    Changed { run: String, step: String },
    /// The engine refused the decision (an unknown choice, a kill without
    /// route where none is allowed, …).
    Refused {
        run: String,
        step: String,
        error: Box<VmError>,
    },
    /// The store failed.
    Store(Box<EngineError>),
}

impl DecideError {
    /// Whether the request itself is wrong (unknown step, not a gate, a
    /// broken workspace or store) rather than the gate's state now: exit 2
    /// for `stratumc gate`, 4xx/5xx other than 409 for the UI.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            DecideError::UnknownStep { .. }
                | DecideError::NotAGate { .. }
                | DecideError::Host { .. }
                | DecideError::Store(_)
        )
    }
}

fn listed(gates: &[String]) -> String {
    match gates.is_empty() {
        true => "it has no gates".to_string(),
        false => format!("its gates: {}", gates.join(", ")),
    }
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideError::UnknownStep { run, step, gates } => {
                write!(f, "run `{run}` has no step `{step}`; {}", listed(gates))
            }
            DecideError::NotAGate {
                run,
                step,
                kind,
                gates,
            } => write!(
                f,
                "step `{step}` of run `{run}` is a `{kind}` step, not a gate; {}",
                listed(gates)
            ),
            DecideError::NotWaiting { run, step, why } => write!(
                f,
                "gate `{step}` of run `{run}` is not waiting for a decision: {why}; see `stratumc query flow {run}`"
            ),
            DecideError::StaleToken { run, step, round } => write!(
                f,
                "stale gate token for `{step}` of run `{run}`: the gate now waits in round {round} with another token; look again with `stratumc query gates`"
            ),
            DecideError::Host { run, message } => {
                write!(f, "run `{run}`: {message}; nothing was recorded")
            }
            DecideError::Changed { run, step } => write!(
                f,
                "gate `{step}` of run `{run}` changed while deciding (someone else decided it, or the run moved on); nothing was recorded; see `stratumc query flow {run}`"
            ),
            DecideError::Refused { run, step, error } => {
                write!(f, "gate `{step}` of run `{run}`: {error}")
            }
            DecideError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DecideError {}

/// A recorded decision: the gate as it waited, what the run does next, and
/// the warnings about the run's workspace configuration (files on disk that
/// now differ from what the run froze; they were ignored).
#[derive(Debug)]
pub struct Decided {
    pub gate: GateView,
    pub outcome: Outcome,
    pub warnings: Vec<String>,
}

/// The gate `step` of the run in `view` when it waits for a decision; else
/// why it cannot be decided.
pub fn waiting_gate(view: &RunView, step: &str) -> Result<GateView, DecideError> {
    if let Some(g) = view.gate(step) {
        return Ok(g.clone());
    }
    let run = view.meta.run_id.clone();
    let gates: Vec<String> = view
        .steps
        .iter()
        .filter(|s| s.kind == "gate")
        .map(|s| s.id.clone())
        .collect();
    let Some(s) = view.step(step) else {
        return Err(DecideError::UnknownStep {
            run,
            step: step.to_string(),
            gates,
        });
    };
    if s.kind != "gate" {
        return Err(DecideError::NotAGate {
            run,
            step: step.to_string(),
            kind: s.kind.to_string(),
            gates,
        });
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
    Err(DecideError::NotWaiting {
        run,
        step: step.to_string(),
        why,
    })
}

/// The host of a stored run: its recorded workspace and the configuration
/// frozen into it, with a warning per way the files on disk now differ.
pub fn run_host(engine: &mut Engine, run: &str) -> Result<(StdHost, Vec<String>), String> {
    let root = engine
        .workspace_of(run)
        .map_err(|e| e.to_string())?
        .map(PathBuf::from);
    let frozen = engine.frozen_config(run).map_err(|e| e.to_string())?;
    let rc = crate::config::of_run(run, frozen.as_deref(), None, root.as_deref())
        .map_err(|e| e.to_string())?;
    let host = StdHost::with_config(root.as_deref(), &rc.config).map_err(|e| e.to_string())?;
    Ok((host, rc.warnings))
}

/// Decides the waiting gate `step` of the run in `view` (read just before):
/// checks `token` when given, builds the run's host, and records `answer`
/// with `resolved_by` through the engine.
pub fn decide_gate(
    engine: &mut Engine,
    view: &RunView,
    step: &str,
    token: Option<&str>,
    answer: &GateDecision<'_>,
    resolved_by: &str,
) -> Result<Decided, DecideError> {
    let run = view.meta.run_id.as_str();
    let gate = waiting_gate(view, step)?;
    if let Some(t) = token
        && t != gate.token
    {
        return Err(DecideError::StaleToken {
            run: run.to_string(),
            step: step.to_string(),
            round: gate.round,
        });
    }
    let (mut host, warnings) = run_host(engine, run).map_err(|message| DecideError::Host {
        run: run.to_string(),
        message,
    })?;
    match engine.resolve_gate(run, step, Some(&gate.token), answer, resolved_by, &mut host) {
        Ok(outcome) => Ok(Decided {
            gate,
            outcome,
            warnings,
        }),
        Err(EngineError::Vm(VmError::StaleToken(_) | VmError::NotAwaiting(_))) => {
            Err(DecideError::Changed {
                run: run.to_string(),
                step: step.to_string(),
            })
        }
        Err(EngineError::Vm(error)) => Err(DecideError::Refused {
            run: run.to_string(),
            step: step.to_string(),
            error: Box::new(error),
        }),
        Err(e) => Err(DecideError::Store(Box::new(e))),
    }
}
