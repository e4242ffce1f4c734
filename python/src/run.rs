//! `stratumc.run`: a run driven in this process, its agents and gate
//! decisions Python callables, durable in the same store as `stratumc run`
//! (the CLI can watch, query and resume it).
//!
//! Owns: the two threads of a call. A driver thread of its own starts or
//! resumes the run (the CLI's host, workspace, estimate and lease
//! functions), hands each ready entry to the calling thread and reports the
//! answers (`stratum_vm::drive::report_all`), asks it for each gate's
//! decision, and at the end writes the result document. The calling thread
//! holds the GIL only to run a callable; between them it waits without it
//! and checks for signals, so Ctrl-C (KeyboardInterrupt) stops the run
//! durably: the answers already given are reported, the run's audit
//! records the interruption, the lease is released, and the exception is
//! raised again (`stratumc run --resume RUN` continues it).
//! Must never: apply an execution rule (the engine does), call Python
//! without the GIL or hold it while Rust works, or keep driving once the
//! lease is lost.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use serde_json::{Value, json};
use stratum_vm::drive::{entry_json, report_all};
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::interp::{GateDecision, Outcome, Report};
use stratumc::commands::{lease, run as cli_run};
use stratumc::input::Kind;

use crate::{Home, Source, StratumError, analyse, diagnostics_json, parse_inputs};

/// How often the calling thread, waiting for the driver, checks for signals.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Who decided a gate, in the audit.
const DECIDED_BY: &str = "python";

/// What the driver thread asks the calling thread.
enum Ask {
    /// Run agent `agent`'s callable on this ready entry (JSON); the answer
    /// is its report as JSON.
    Dispatch { agent: String, entry: String },
    /// Decide this waiting gate (JSON); the answer is the decision as JSON,
    /// or none to leave the gate waiting.
    Gate { gate: String },
}

/// The calling thread's answer.
enum Reply {
    /// What the Python layer returned.
    Answer(Option<String>),
    /// A callable raised (KeyboardInterrupt, or an exception in `on_gate`),
    /// or a signal came: stop the run, resumable.
    Stop,
}

/// The driver thread's side of the conversation.
struct Asker<'a> {
    tx: Sender<(Ask, Sender<Reply>)>,
    stop: &'a AtomicBool,
}

impl Asker<'_> {
    fn ask(&self, ask: Ask) -> Reply {
        let (tx, rx) = channel();
        if self.tx.send((ask, tx)).is_err() {
            return Reply::Stop;
        }
        rx.recv().unwrap_or(Reply::Stop)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// What to run.
struct Options {
    source: Option<Source>,
    inputs: Value,
    flow: Option<String>,
    workspace: Option<PathBuf>,
    config: Option<PathBuf>,
    resume: Option<String>,
    /// Whether gates are decided (`on_gate` given); else the run stops at
    /// the first waiting gate.
    decides: bool,
}

/// Runs (or, with `resume`, continues) a flow; `dispatch(agent, entry_json)`
/// answers each ready entry with its report's JSON, `decide(gate_json)` each
/// waiting gate with a decision's JSON or `None`. Returns the result
/// document (JSON): `{runId, status, output, failure, gates, audit,
/// interrupted, warnings, log}`, or `{diagnostics}` for a spec with errors.
#[pyfunction]
#[pyo3(signature = (dispatch, path=None, text=None, inputs=None, decide=None, store=None, flow=None, workspace=None, config=None, resume=None))]
#[allow(clippy::too_many_arguments)] // the keyword arguments of `stratumc.run`
pub fn run(
    py: Python<'_>,
    dispatch: Bound<'_, PyAny>,
    path: Option<PathBuf>,
    text: Option<String>,
    inputs: Option<String>,
    decide: Option<Bound<'_, PyAny>>,
    store: Option<PathBuf>,
    flow: Option<String>,
    workspace: Option<PathBuf>,
    config: Option<PathBuf>,
    resume: Option<String>,
) -> PyResult<String> {
    let source = match (&resume, path, text) {
        (Some(_), None, None) => None,
        (Some(_), _, _) => {
            return Err(StratumError::new_err(
                "`resume` continues a run on its own plan: give no spec with it",
            ));
        }
        (None, path, text) => Some(Source::of(path, text)?),
    };
    let inputs = match inputs.as_deref().map(parse_inputs).transpose() {
        Ok(v) => v.unwrap_or_else(|| json!({})),
        Err(e) => return Err(StratumError::new_err(e)),
    };
    let options = Options {
        source,
        inputs,
        flow,
        workspace,
        config,
        resume,
        decides: decide.is_some(),
    };
    let _home = Home::choose(store.as_deref()).map_err(StratumError::new_err)?;
    let stop = AtomicBool::new(false);
    let (tx, rx) = channel();
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        let stop = &stop;
        let driver = s.spawn(move || drive(options, &Asker { tx, stop }));
        let raised = serve(py, &rx, stop, &dispatch, decide.as_ref());
        let ended = py.detach(|| driver.join());
        match (raised, ended) {
            (Some(e), _) => Err(e),
            (None, Ok(Ok(doc))) => Ok(doc),
            (None, Ok(Err(message))) => Err(StratumError::new_err(message)),
            (None, Err(_)) => Err(StratumError::new_err(
                "the run's driver thread panicked; the run is in the store as far as it was committed: continue it with `stratumc run --resume RUN`",
            )),
        }
    })
}

/// The calling thread's loop: runs each callable the driver asks for, with
/// the GIL; waits without it. Returns the exception that stopped the run
/// (raised again by the caller) once the driver has ended.
fn serve(
    py: Python<'_>,
    rx: &Mutex<Receiver<(Ask, Sender<Reply>)>>,
    stop: &AtomicBool,
    dispatch: &Bound<'_, PyAny>,
    decide: Option<&Bound<'_, PyAny>>,
) -> Option<PyErr> {
    let mut raised: Option<PyErr> = None;
    loop {
        let next = py.detach(|| {
            rx.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv_timeout(SIGNAL_CHECK)
        });
        let (ask, reply) = match next {
            Ok(asked) => asked,
            Err(RecvTimeoutError::Timeout) => {
                if raised.is_none()
                    && let Err(e) = py.check_signals()
                {
                    stop.store(true, Ordering::SeqCst);
                    raised = Some(e);
                }
                continue;
            }
            // the driver ended (its sender is gone)
            Err(RecvTimeoutError::Disconnected) => return raised,
        };
        if raised.is_some() {
            let _ = reply.send(Reply::Stop);
            continue;
        }
        let called = match (&ask, decide) {
            (Ask::Dispatch { agent, entry }, _) => dispatch.call1((agent, entry)),
            (Ask::Gate { gate }, Some(decide)) => decide.call1((gate,)),
            (Ask::Gate { .. }, None) => Ok(py.None().into_bound(py)),
        };
        match called.and_then(|v| v.extract::<Option<String>>()) {
            Ok(answer) => {
                let _ = reply.send(Reply::Answer(answer));
            }
            Err(e) => {
                stop.store(true, Ordering::SeqCst);
                raised = Some(e);
                let _ = reply.send(Reply::Stop);
            }
        }
    }
}

/// The plan of a new run, with the spec's analysis (`None` for a plan
/// file), or the spec's diagnostics when it has errors.
enum Planned {
    Plan(Vec<u8>, Option<Box<stratum_compiler::analysis::Analysis>>),
    Errors(Vec<Value>),
}

fn plan_of(source: &Source) -> Result<Planned, String> {
    let bytes = source.bytes(Kind::SpecOrPlan)?;
    if bytes.starts_with(stratum_vm::plan::file::MAGIC) {
        return Ok(Planned::Plan(bytes, None));
    }
    let analysis = analyse(source, false)?.analysis;
    match stratum_compiler::build::build_plan(&analysis) {
        Some(plan) => {
            let (encoded, _) = stratum_vm::plan::file::encode(&plan);
            Ok(Planned::Plan(encoded, Some(Box::new(analysis))))
        }
        None => Ok(Planned::Errors(diagnostics_json(
            &analysis,
            source.shown().as_deref(),
        ))),
    }
}

/// The driver thread: the run from start (or resume) to its end, a gate
/// left waiting, or a stop. Returns the result document.
fn drive(options: Options, asker: &Asker<'_>) -> Result<String, String> {
    let store = stratum_vm::store::open_default().map_err(|e| e.to_string())?;
    let mut engine = Engine::new(store);
    let resume = options.resume.as_deref();
    let workspace = cli_run::workspace_dir(&mut engine, resume, options.workspace.as_deref());
    let cli_run::RunHost {
        mut host,
        frozen,
        warnings,
        ..
    } = cli_run::run_host(&mut engine, resume, options.config.as_deref(), &workspace)?;
    let (run_id, mut outcome) = match (resume, &options.source) {
        (Some(id), _) => {
            let (o, _) = engine
                .resume(id, None, &mut host)
                .map_err(|e| e.to_string())?;
            (id.to_string(), o)
        }
        (None, None) => return Err("give a spec or plan to run, or `resume`".into()),
        (None, Some(source)) => {
            let (bytes, analysis) = match plan_of(source)? {
                Planned::Plan(b, a) => (b, a),
                Planned::Errors(diagnostics) => {
                    return Ok(json!({ "diagnostics": diagnostics }).to_string());
                }
            };
            let frozen =
                frozen.ok_or("invariant: run_host freezes the configuration of a new run")?;
            let plan = engine.add_plan(&bytes).map_err(|e| e.to_string())?;
            let flow = options.flow.as_deref();
            let (id, o) = engine
                .start_frozen(
                    &plan,
                    flow,
                    options.inputs.clone(),
                    &mut host,
                    Some(workspace.display().to_string()),
                    &frozen,
                )
                .map_err(|e| e.to_string())?;
            if let Some(a) = &analysis {
                let what = (&**a, flow, &options.inputs);
                cli_run::record_estimate(&mut engine, &id, what, &frozen, &mut host);
            }
            (id, o)
        }
    };
    let acquired = lease::acquire(&run_id)?;
    if let Some((_, killed)) = &acquired.taken_over {
        outcome = engine
            .take_over(&run_id, *killed, &mut host)
            .map_err(|e| e.to_string())?;
    }
    let held = acquired.held;
    let mut log = Vec::new();
    let mut interrupted = false;
    loop {
        if outcome.status.is_terminal() {
            break;
        }
        if held.lost() {
            return Err(format!(
                "run {run_id}: this driver lost its lease (its heartbeat could not be renewed in time) and another driver took the run over; stopped"
            ));
        }
        if asker.stopped() {
            interrupted = true;
            break;
        }
        if !outcome.ready.is_empty() {
            let ready = outcome.ready.clone();
            let mut answered = Vec::new();
            for entry in &ready {
                let ask = Ask::Dispatch {
                    agent: entry.agent.to_string(),
                    entry: entry_json(entry).to_string(),
                };
                match asker.ask(ask) {
                    Reply::Answer(answer) => answered.push((entry, report_of(answer))),
                    Reply::Stop => break,
                }
            }
            let reported = report_all(&mut engine, &mut host, &run_id, answered, &mut |l| {
                log.push(l.trim_start().to_string())
            });
            if let Some(o) = reported {
                outcome = o;
            }
            continue;
        }
        let Some(gate) = outcome.gates.first().cloned() else {
            break;
        };
        if !options.decides {
            break;
        }
        let ask = Ask::Gate {
            gate: serde_json::to_string(&gate).map_err(|e| e.to_string())?,
        };
        let answer = match asker.ask(ask) {
            Reply::Stop => continue,
            Reply::Answer(None) => break,
            Reply::Answer(Some(text)) => decision_of(&text)?,
        };
        let decision = GateDecision {
            decision: &answer.decision,
            note: answer.note.as_deref(),
            choice: answer.choice.as_deref(),
            tokenless: false,
        };
        let id = gate.step_id.as_str();
        let token = Some(gate.gate_token.as_str());
        outcome = engine
            .resolve_gate(&run_id, id, token, &decision, DECIDED_BY, &mut host)
            .map_err(|e| match e {
                EngineError::Vm(e) => format!("gate `{id}` refused the decision: {e}"),
                e => e.to_string(),
            })?;
        log.push(format!("gate {id}: {}", answer.decision));
    }
    if interrupted && let Ok(o) = engine.interrupted(&run_id, "SIGINT", 0, &mut host) {
        outcome = o;
    }
    drop(held);
    let audit = engine.audit(&run_id).map_err(|e| e.to_string())?;
    Ok(result_doc(&run_id, &outcome, audit, interrupted, warnings, log).to_string())
}

/// An agent callable's answer as the engine takes it: the same reading as a
/// command agent's stdout; anything else is a failure report (the run's
/// retry rules apply).
fn report_of(answer: Option<String>) -> Report {
    let failure = |text: String| Report {
        failure: Some(text),
        ..Report::default()
    };
    let Some(text) = answer else {
        return failure("the agent callable returned nothing".into());
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => Report::from_json(&v)
            .unwrap_or_else(|e| failure(format!("the agent's result is malformed: {e}"))),
        Err(e) => failure(format!("the agent's result is not JSON: {e}")),
    }
}

/// A gate decision as the Python layer writes it.
struct Decision {
    decision: String,
    note: Option<String>,
    choice: Option<String>,
}

fn decision_of(text: &str) -> Result<Decision, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the gate decision is not JSON: {e}"))?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let decision = field("decision").ok_or(
        "a gate decision needs `decision`: \"approve\", \"revise\" or \"kill\"".to_string(),
    )?;
    Ok(Decision {
        decision,
        note: field("note"),
        choice: field("choice"),
    })
}

/// The document `stratumc.run` returns.
fn result_doc(
    run_id: &str,
    outcome: &Outcome,
    audit: Vec<Value>,
    interrupted: bool,
    warnings: Vec<String>,
    log: Vec<String>,
) -> Value {
    let failure = outcome
        .failure
        .as_ref()
        .map(|f| json!({"attempt": f.attempt, "reason": f.reason}));
    json!({
        "runId": run_id,
        "status": outcome.wire_status(),
        "output": outcome.output,
        "failure": failure,
        "gates": outcome.gates,
        "audit": audit,
        "interrupted": interrupted,
        "warnings": warnings,
        "log": log,
    })
}
