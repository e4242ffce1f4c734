//! `stratumc run SPEC|PLAN --inputs JSON|@file [--agent CMD]` and
//! `stratumc run [SPEC|PLAN] --resume RUN [--agent CMD]`: the headless driver
//! (a resume given a spec or plan holds the run to that plan's hash, E6).
//!
//! Owns: handing every ready dispatch to a fresh `sh -c CMD` process (the
//! ready entry as JSON on stdin, the result JSON on stdout), or, without
//! `--agent`, to its agent's configured connector CLI or command (issue 16;
//! a connector's argv and usage go into the audit as a usage receipt), asking or
//! deciding gates, progress on stderr, the final JSON, exit codes.
//! A new run from a spec gets the cost model's per-step estimate recorded
//! in its audit (`estimated`); one from a prebuilt plan file gets none (a
//! plan holds no IR), nor does a retry.
//! Every driver holds the run's lease while it drives (`lease`: one driver
//! at a time, a heartbeat; a run whose driver died is taken over once its
//! lease lapses: the dead driver's agents are killed, the outstanding
//! dispatches get new tokens), and records each dispatch's agent (pid,
//! process group) in the store. `--detach` starts the run, then re-runs
//! this binary with `--resume RUN` as a background driver.
//! Must never: apply an execution rule itself — every decision is the
//! engine's; this only moves JSON between the engine and the agent.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use stratum_vm::agent::{self, Answer, Job, Watch};

use super::lease::{self, Held};
use super::progress::Progress;
use stratum_vm::config;
use stratum_vm::drive::entry_json;
use stratum_vm::engine::{Engine, EngineError};
use stratum_vm::host::StdHost;
use stratum_vm::interp::{GateDecision, Outcome, ReadyEntry, Report, RunStatus, WaitingGate};

use crate::{Exit, Format};

/// Arguments of `stratumc run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The spec (`.stratum.yaml`) or plan (`.stratumc`); not needed with `--resume`.
    pub source: Option<PathBuf>,
    /// Continue this run (after a crash, or to decide a gate).
    #[arg(long, conflicts_with = "retry")]
    pub resume: Option<String>,
    /// Start a new run of this finished run's flow and inputs (on SPEC when
    /// given, else on its own plan), reusing the steps that succeeded and
    /// whose step, inputs and evidence are unchanged (X8).
    #[arg(long, value_name = "RUN")]
    pub retry: Option<String>,
    /// With `--retry`: run this step and everything downstream of it again.
    #[arg(long, value_name = "STEP", requires = "retry")]
    pub from: Option<String>,
    /// The flow input: JSON text, or `@FILE`.
    #[arg(long)]
    pub inputs: Option<String>,
    /// The flow to run (default: the entry flow).
    #[arg(long)]
    pub flow: Option<String>,
    /// Command run through `sh -c` for every dispatch (ready entry on stdin, result JSON on stdout). Without it, each dispatch goes to its agent's `[agents.NAME]` table: its `connector` (`claude-code`, `codex`) or its `command`.
    #[arg(long)]
    pub agent: Option<String>,
    /// Milliseconds one agent command may run before its process group is killed and the dispatch fails (default: 30 minutes).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub agent_timeout: Option<u64>,
    /// Workspace root for file predicates and the agent's working directory (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The operator's configuration (default: `$STRATUM_HOME/stratum.toml` when it exists): its judge, agent commands and timeouts win over the workspace's `stratum.toml`, which may only narrow them. Frozen into the run at start; a resumed run keeps its frozen copy.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Decide gates without asking: `DECISION` (`approve`, `revise`, `kill`) decides every gate; `STEP=DECISION[:CHOICE]` decides gate STEP, with one of its options as the choice (repeatable; a gate's own rule wins over the bare one).
    #[arg(long, value_name = "[STEP=]DECISION[:CHOICE]", value_parser = parse_gate_rule)]
    pub gate: Vec<GateRule>,
    /// `json` prints one final JSON object on stdout.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Start the run, then drive it from a background driver process (this
    /// binary again, `--resume RUN`, in a process group of its own, its
    /// output in `$STRATUM_HOME/drivers/RUN.log`) that outlives this one;
    /// prints the run id and the driver's pid at once. Gates are decided
    /// by `--gate` rules, else the run waits at them.
    #[arg(long)]
    pub detach: bool,
}

/// One `--gate` rule: a decision for one gate (or, without a step, for
/// every gate) and the choice it carries (X10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRule {
    /// The gate's step id; `None`: every gate without its own rule.
    pub step: Option<String>,
    /// `approve`, `revise` or `kill`.
    pub decision: String,
    /// One of the gate's options.
    pub choice: Option<String>,
}

/// Parses `DECISION` or `STEP=DECISION[:CHOICE]`.
fn parse_gate_rule(text: &str) -> Result<GateRule, String> {
    let (step, rest) = match text.split_once('=') {
        Some((step, rest)) if !step.is_empty() => (Some(step.to_string()), rest),
        Some(_) => {
            return Err(format!(
                "`{text}` names no gate before `=`: write `STEP=DECISION[:CHOICE]`"
            ));
        }
        None => (None, text),
    };
    let (decision, choice) = match rest.split_once(':') {
        Some((d, c)) if step.is_some() && !c.is_empty() => (d, Some(c.to_string())),
        Some(_) if step.is_none() => {
            return Err(format!(
                "`{text}`: a choice needs the gate it is for: write `STEP={rest}`"
            ));
        }
        Some(_) => return Err(format!("`{text}` has an empty choice after `:`")),
        None => (rest, None),
    };
    if !["approve", "revise", "kill"].contains(&decision) {
        return Err(format!(
            "`{decision}` is not a gate decision: expected approve, revise or kill (as `DECISION` or `STEP=DECISION[:CHOICE]`)"
        ));
    }
    Ok(GateRule {
        step,
        decision: decision.to_string(),
        choice,
    })
}

/// The `--gate` rule for gate `id`: its own (the first naming it), else
/// the bare one.
fn gate_rule<'r>(rules: &'r [GateRule], id: &str) -> Option<&'r GateRule> {
    rules
        .iter()
        .find(|r| r.step.as_deref() == Some(id))
        .or_else(|| rules.iter().find(|r| r.step.is_none()))
}

/// `--inputs`, or `{}` without it.
fn read_inputs(arg: Option<&str>) -> Result<Value, String> {
    arg.map_or(Ok(json!({})), super::flow_inputs)
}

/// The plan file of a spec or plan, with the spec's analysis (`None` for a
/// prebuilt plan file).
type Built = (Vec<u8>, Option<stratum_compiler::analysis::Analysis>);

fn plan_bytes(source: &Path) -> Result<Built, (Exit, String)> {
    let bytes = crate::input::read(source, crate::input::Kind::SpecOrPlan)
        .map_err(|e| (Exit::Usage, e.to_string()))?;
    if bytes.starts_with(stratum_vm::plan::file::MAGIC) {
        return Ok((bytes, None));
    }
    let analysis = stratum_compiler::analysis::analyze_bytes(&bytes);
    if analysis.error_count() > 0 {
        let shown = source.display().to_string();
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let text = stratum_compiler::diagnostics::render::human(
            &shown,
            &analysis.text,
            &analysis.diagnostics,
            color,
        );
        return Err((
            Exit::Usage,
            format!("{text}{shown} has errors; nothing was run"),
        ));
    }
    let plan = stratum_compiler::build::build_plan(&analysis)
        .ok_or((Exit::Usage, "the spec could not be built".to_string()))?;
    Ok((stratum_vm::plan::file::encode(&plan).0, Some(analysis)))
}

/// Records the cost model's estimate (per step, for the run's input and
/// the run's frozen configuration) in a run started from a spec, for
/// `stratumc report`. A run from a prebuilt plan file gets none: the plan
/// holds no IR. A failure to record is a warning; the run goes on.
pub fn record_estimate(
    engine: &mut Engine,
    run_id: &str,
    (analysis, flow, input): (&stratum_compiler::analysis::Analysis, Option<&str>, &Value),
    frozen: &config::Frozen,
    host: &mut StdHost,
) {
    use stratum_compiler::cost::{CostConfig, run_estimate};
    let Some(ir) = analysis.ir.as_ref() else {
        return;
    };
    let config = CostConfig::from_toml(&frozen.text).unwrap_or_default();
    let Some(steps) = run_estimate(ir, flow, input, &config) else {
        return;
    };
    if let Err(e) = engine.record_estimate(run_id, steps, host) {
        eprintln!("warning: the cost estimate was not recorded in {run_id}: {e}");
    }
}

/// The signal (SIGINT or SIGTERM) that asked this process to stop; 0 until one came.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);
/// True while the driver waits at the gate prompt: no agent runs and
/// nothing is being written then, so a signal ends the process at once.
static AT_PROMPT: AtomicBool = AtomicBool::new(false);
/// How long the driver gets after a signal to kill its agents' process
/// groups and return before the process exits regardless.
const SIGNAL_BACKSTOP: Duration = Duration::from_secs(10);

/// The signal that asked this process to stop, if one came.
fn signalled() -> Option<i32> {
    Some(SIGNALLED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// The exit status for a signal: 130 for SIGINT, 143 for SIGTERM (128 + N).
fn exit_for(sig: i32) -> Exit {
    if sig == SIGINT {
        Exit::Interrupted
    } else {
        Exit::Terminated
    }
}

/// Routes SIGINT and SIGTERM to the driver loop (which kills the running
/// agents' process groups, reports nothing and exits 130/143), through a
/// thread of signal-hook's. A second signal, or one at the gate prompt,
/// exits at once; so does the backstop when the loop has not returned in
/// [`SIGNAL_BACKSTOP`]. The run stays resumable either way: the store
/// commits before anything is handed out, and an unreported dispatch is
/// handed out again by `--resume`.
fn watch_signals() -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let code = exit_for(sig) as i32;
            if SIGNALLED.swap(sig, Ordering::SeqCst) != 0 || AT_PROMPT.load(Ordering::SeqCst) {
                std::process::exit(code);
            }
            std::thread::spawn(move || {
                std::thread::sleep(SIGNAL_BACKSTOP);
                std::process::exit(code);
            });
        }
    });
    Ok(())
}

/// Ends an interrupted run: says what was stopped and how to continue,
/// prints the final document, exits 130/143.
fn interrupted(
    stop: Stopped<'_>,
    run_id: &str,
    outcome: &Outcome,
    sig: i32,
    killed: usize,
) -> Exit {
    let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
    // the audit says who stopped the driver and what it killed
    if let Err(e) = stop.engine.interrupted(run_id, name, killed, stop.host) {
        eprintln!("warning: the interruption is not in the run's audit: {e}");
    }
    let format = stop.format;
    eprintln!(
        "run {run_id} interrupted by {name}: {killed} agent command(s) killed with their process groups, nothing reported for them; continue with `stratumc run --resume {run_id}` (with the same `--agent CMD`, if one was given)"
    );
    let _ = finish(format, run_id, outcome);
    exit_for(sig)
}

/// What this driver's host asks while a declared command (an `exec` check,
/// an `evaluate` step) runs: stop it at once when a signal came, or when
/// `run_id` was cancelled (by `stratumc flow cancel` in another process:
/// the store says so, read through a connection of the probe's own). The
/// transition that ran it is then dropped (nothing recorded), and the loop
/// handles the signal or the cancel as it does between rounds.
fn stop_probe(run_id: Option<&str>) -> std::sync::Arc<agent::StopProbe> {
    let run_id = run_id.map(str::to_owned);
    let store: std::sync::Mutex<Option<Box<dyn stratum_vm::store::RunStore>>> =
        std::sync::Mutex::new(None);
    std::sync::Arc::new(move || {
        if signalled().is_some() {
            return true;
        }
        let Some(run_id) = &run_id else {
            return false;
        };
        let mut store = store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if store.is_none() {
            *store = stratum_vm::store::open_default().ok();
        }
        store.as_ref().is_some_and(|s| {
            s.meta(run_id)
                .is_ok_and(|m| m.status == RunStatus::Cancelled.as_str())
        })
    })
}

/// What an interrupted driver needs to record its end.
struct Stopped<'a> {
    engine: &'a mut Engine,
    host: &'a mut StdHost,
    format: Format,
}

/// Marks the gate prompt as open ([`AT_PROMPT`]) until dropped.
struct Prompt;

impl Prompt {
    fn enter() -> Prompt {
        AT_PROMPT.store(true, Ordering::SeqCst);
        if let Some(sig) = signalled() {
            std::process::exit(exit_for(sig) as i32);
        }
        Prompt
    }
}

impl Drop for Prompt {
    fn drop(&mut self) {
        AT_PROMPT.store(false, Ordering::SeqCst);
    }
}

/// A decision asked at the terminal: the decision, the note, the choice.
type Asked = (String, Option<String>, Option<String>);

fn ask_gate(gate: &WaitingGate) -> Option<Asked> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let _prompt = Prompt::enter();
    let id = &gate.step_id;
    loop {
        eprint!(
            "gate `{id}` (round {}): [a]pprove, [r]evise, [k]ill? ",
            gate.round
        );
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).ok()? == 0 {
            return None;
        }
        let decision = match line.trim() {
            "a" | "approve" => "approve",
            "r" | "revise" => "revise",
            "k" | "kill" => "kill",
            _ => continue,
        };
        let choice = match gate.options.as_deref() {
            Some(options) if decision != "kill" && !options.is_empty() => ask_choice(options)?,
            _ => None,
        };
        eprint!("note (optional): ");
        let _ = std::io::stderr().flush();
        let mut note = String::new();
        let _ = stdin.lock().read_line(&mut note);
        let note = note.trim();
        return Some((
            decision.to_string(),
            (!note.is_empty()).then(|| note.to_string()),
            choice,
        ));
    }
}

/// Offers a gate's options (X10): a number or the option's text, empty for
/// none; asks again until the answer is one of them.
fn ask_choice(options: &[String]) -> Option<Option<String>> {
    let stdin = std::io::stdin();
    let listed: Vec<String> = options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("[{}] {o}", i + 1))
        .collect();
    loop {
        eprint!("choice {} (optional): ", listed.join(", "));
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).ok()? == 0 {
            return None;
        }
        let answer = line.trim();
        if answer.is_empty() {
            return Some(None);
        }
        let by_number = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| options.get(i));
        if let Some(o) = by_number.or_else(|| options.iter().find(|o| o.as_str() == answer)) {
            return Some(Some(o.clone()));
        }
        eprintln!("`{answer}` is not one of the options");
    }
}

/// Continues run `id`. With a `source` (spec or plan file), the plan it
/// builds must be the run's own (E6): another plan is refused before
/// anything is recorded, naming both hashes. Errors are printed here.
fn resume(
    engine: &mut Engine,
    id: &str,
    source: Option<&Path>,
    host: &mut StdHost,
) -> Result<Outcome, Exit> {
    let given = match source.map(plan_hash).transpose() {
        Ok(h) => h,
        Err((code, msg)) => {
            eprintln!("{msg}");
            return Err(code);
        }
    };
    match engine.resume(id, given.as_deref(), host) {
        Ok((o, _)) => Ok(o),
        Err(e @ EngineError::PlanMismatch { .. }) => {
            eprintln!("error: {e}");
            if let Some(source) = source {
                eprintln!(
                    "help: {} is not the plan the run started from (did the spec change?); nothing was changed: give the run's own spec or plan, or none to continue on its stored plan",
                    source.display()
                );
            }
            Err(Exit::Usage)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(Exit::Usage)
        }
    }
}

/// `--retry RUN [--from STEP] [SPEC]`: the new run (X8), on the plan SPEC
/// builds when given. Errors are printed here.
fn retry(
    engine: &mut Engine,
    args: &RunArgs,
    source: Option<&Path>,
    host: &mut StdHost,
    frozen: &config::Frozen,
) -> Result<(String, Outcome), Exit> {
    let old = args.retry.as_deref().unwrap_or_default();
    let plan = match source {
        None => None,
        Some(source) => {
            let (bytes, _) = plan_bytes(source).map_err(|(code, msg)| {
                eprintln!("{msg}");
                code
            })?;
            Some(engine.add_plan(&bytes).map_err(|e| {
                eprintln!("error: {e}");
                Exit::Usage
            })?)
        }
    };
    if args.inputs.is_some() || args.flow.is_some() {
        eprintln!(
            "error: --retry runs the old run's flow with its inputs; drop --inputs and --flow"
        );
        return Err(Exit::Usage);
    }
    let started = engine
        .retry(old, args.from.as_deref(), plan.as_ref(), host, Some(frozen))
        .map_err(|e| {
            eprintln!("error: {e}; nothing was started");
            Exit::Usage
        })?;
    Ok(started)
}

/// The hash of the plan `source` builds (a spec) or holds (a plan file).
fn plan_hash(source: &Path) -> Result<String, (Exit, String)> {
    let (bytes, _) = plan_bytes(source)?;
    stratum_vm::plan::file::load(&bytes)
        .map(|(_, hash)| hash.to_hex())
        .map_err(|e| (Exit::Usage, format!("error: {}: {e}", source.display())))
}

/// How a round of dispatches ended.
struct Round {
    /// The latest outcome after the reports (None: nothing was reported).
    outcome: Option<Outcome>,
    /// Set when a signal stopped the round: how many agents were killed.
    interrupted: Option<usize>,
}

/// Runs every ready dispatch at once (the VM already bounds fanout
/// concurrency) and reports the results. An operator's `stratumc flow
/// cancel` (another process) stops the agents still running; a signal to
/// this process kills them and reports only the agents that had ended.
fn run_ready(
    (engine, held): (&mut Engine, &mut Held),
    host: &mut StdHost,
    (args, config, progress): (&RunArgs, &config::Config, &Progress),
    run_id: &str,
    workspace_dir: &Path,
    ready: &[ReadyEntry],
) -> Round {
    // an entry whose agent has no runner fails at once, saying how to configure one
    let mut unrun = Vec::new();
    let mut jobs = Vec::new();
    for entry in ready {
        match job_for(args, config, entry) {
            Ok(job) => jobs.push(job),
            Err(why) => unrun.push((
                entry,
                Report {
                    failure: Some(why),
                    ..Report::default()
                },
            )),
        }
    }
    let lost = held.lost_flag();
    let watch = || {
        progress.tick();
        if signalled().is_some() || lost.load(Ordering::SeqCst) {
            return Watch::Interrupt;
        }
        let cancelled = engine
            .poll(run_id, host)
            .is_ok_and(|o| o.status == RunStatus::Cancelled);
        if cancelled { Watch::Cancel } else { Watch::Go }
    };
    // each agent's pid and group go into the store as it starts (a driver
    // taking the run over kills them if this one dies)
    let started = |entry: &Value, pid: u32| {
        let agent = entry["agent"].as_str().unwrap_or_default().to_owned();
        held.started(entry, pid, &agent);
    };
    let every = Duration::from_millis(250);
    let watched = agent::run_batch_observed(jobs, run_id, workspace_dir, (every, watch), started);
    let (results, interrupted) = match watched {
        Ok(results) => (results, None),
        Err(stop) => {
            let finished = stop.finished.into_iter();
            let answers: Vec<(Value, Answer)> =
                finished.map(|(e, r)| (e, Answer::Report(r))).collect();
            (answers, Some(stop.killed))
        }
    };
    held.ended(&results);
    progress.clear();
    // results are the entries' in order; an interrupted batch gives back only
    // those that had ended, each with its entry; an agent killed at its
    // dispatch lease reports nothing (the lease expires: an orphan, X7)
    let reports = results
        .into_iter()
        .filter_map(|(entry, answer)| {
            let id = entry.get("id")?.as_str()?;
            let e = ready.iter().find(|e| e.id == id)?;
            match answer {
                Answer::Report(report) => Some((e, report)),
                Answer::Connected(c) => {
                    // the argv and the CLI's usage go into the audit first, as a
                    // usage receipt settled into the step (then the report)
                    let receipt = c.receipt(&e.id, &e.dispatch_token);
                    if let Err(err) = engine.usage_report(run_id, &receipt, host) {
                        eprintln!("  {id}: usage refused: {err}");
                    }
                    Some((e, c.report))
                }
                Answer::Orphaned => {
                    eprintln!(
                        "  {id} (attempt {}): no report within its lease of {} ms; killed (an orphan: dispatched again)",
                        e.attempt,
                        e.timeout_ms.unwrap_or_default()
                    );
                    None
                }
            }
        })
        .chain(unrun)
        .collect();
    Round {
        outcome: stratum_vm::drive::report_all(engine, host, run_id, reports, &mut |l| {
            eprintln!("{l}")
        }),
        interrupted,
    }
}

/// The job for one ready entry: `--agent CMD` when given, else the entry's
/// agent's `[agents.NAME]` connector or command. An agent with neither is
/// a job that fails at once, saying how to configure it.
fn job_for(args: &RunArgs, config: &config::Config, entry: &ReadyEntry) -> Result<Job, String> {
    let timeout = args
        .agent_timeout
        .map_or_else(|| config.agent_timeout(entry.agent), Duration::from_millis);
    if let Some(cmd) = &args.agent {
        return Ok(Job::new(cmd.as_str(), entry_json(entry), timeout));
    }
    let table = config.agents.get(&entry.agent);
    if let Some((kind, settings)) = table.and_then(|t| t.connector_settings()) {
        let call = stratum_vm::connector::Call::new(kind, &settings, entry);
        return Ok(Job::connected(call, entry_json(entry), timeout));
    }
    if let Some(cmd) = table.and_then(|t| t.command.as_deref()) {
        return Ok(Job::new(cmd, entry_json(entry), timeout));
    }
    let name = entry.agent.as_str();
    Err(format!(
        "no runner for agent `{name}`: pass `--agent CMD`, or set `[agents.{name}] connector = \"claude-code\"` (or `\"codex\"`, or a `command`) in stratum.toml"
    ))
}

/// The host of a run and the configuration it was built from.
pub struct RunHost {
    /// The host.
    pub host: StdHost,
    /// The run's configuration.
    pub config: config::Config,
    /// A new run's configuration, frozen for [`Engine::start_frozen`].
    pub frozen: Option<config::Frozen>,
    /// A resumed run's: each way the files on disk now differ from its
    /// frozen copy.
    pub warnings: Vec<String>,
}

/// The host of the run: a resumed run's from the configuration frozen into
/// it (with a warning for each way the files on disk now differ), a new
/// run's from the operator's file (`operator`, else the default) merged
/// with the workspace's, which it returns frozen. Shared with the Python
/// package's `stratumc.run`.
pub fn run_host(
    engine: &mut Engine,
    resume: Option<&str>,
    operator: Option<&Path>,
    workspace_dir: &Path,
) -> Result<RunHost, String> {
    let (config, frozen, warnings) = match resume {
        Some(id) => {
            let stored = engine.frozen_config(id).map_err(|e| e.to_string())?;
            let rc = config::of_run(id, stored.as_deref(), operator, Some(workspace_dir))
                .map_err(|e| e.to_string())?;
            (rc.config, None, rc.warnings)
        }
        None => {
            let resolved = config::for_run(operator, Some(workspace_dir))
                .map_err(|e| format!("{e}; nothing was run"))?;
            let frozen = resolved.freeze();
            (resolved.config, Some(frozen), Vec::new())
        }
    };
    let host = StdHost::with_config(Some(workspace_dir), &config).map_err(|e| e.to_string())?;
    Ok(RunHost {
        host,
        config,
        frozen,
        warnings,
    })
}

/// The workspace of a run: the one `given`, else the one the run being
/// resumed or retried (`old`) was started with, else the current directory.
pub fn workspace_dir(engine: &mut Engine, old: Option<&str>, given: Option<&Path>) -> PathBuf {
    let recorded = match (old, given) {
        (Some(id), None) => engine.workspace_of(id).ok().flatten().map(PathBuf::from),
        _ => None,
    };
    match (given, recorded) {
        (Some(w), _) => w.to_path_buf(),
        (None, Some(r)) => r,
        (None, None) => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    }
}

/// Runs the command.
pub fn run(args: &RunArgs) -> Exit {
    if let Err(e) = watch_signals() {
        eprintln!("warning: cannot watch SIGINT/SIGTERM ({e}); a signal will leave agents running");
    }
    let store = match stratum_vm::store::open_default() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let mut engine = Engine::new(store);
    // a resumed run keeps the workspace it was started with, unless told otherwise
    let old = args.resume.as_deref().or(args.retry.as_deref());
    let workspace_dir = workspace_dir(&mut engine, old, args.workspace.as_deref());
    let (resumed, operator) = (args.resume.as_deref(), args.config.as_deref());
    let (mut host, config, frozen) = match run_host(&mut engine, resumed, operator, &workspace_dir)
    {
        Ok(h) => {
            for w in &h.warnings {
                eprintln!("warning: {w}");
            }
            (h.host, h.config, h.frozen)
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    host.stop = Some(stop_probe(None));
    let (run_id, mut outcome) = match (args.resume.as_deref(), args.source.as_deref()) {
        (Some(id), source) => match resume(&mut engine, id, source, &mut host) {
            Ok(o) => (id.to_string(), o),
            Err(code) => return code,
        },
        (None, source) if args.retry.is_some() => {
            let frozen =
                frozen.expect("invariant: run_host freezes the configuration of a new run");
            match retry(&mut engine, args, source, &mut host, &frozen) {
                Ok(x) => x,
                Err(code) => return code,
            }
        }
        (None, Some(source)) => {
            let frozen =
                frozen.expect("invariant: run_host freezes the configuration of a new run");
            let (bytes, analysis) = match plan_bytes(source) {
                Ok(b) => b,
                Err((code, msg)) => {
                    eprintln!("{msg}");
                    return code;
                }
            };
            let input = match read_inputs(args.inputs.as_deref()) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Usage;
                }
            };
            let plan = match engine.add_plan(&bytes) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Usage;
                }
            };
            let given = input.clone();
            match engine.start_frozen(
                &plan,
                args.flow.as_deref(),
                input,
                &mut host,
                Some(workspace_dir.display().to_string()),
                &frozen,
            ) {
                Ok((id, outcome)) => {
                    if let Some(a) = &analysis {
                        let what = (a, args.flow.as_deref(), &given);
                        record_estimate(&mut engine, &id, what, &frozen, &mut host);
                    }
                    (id, outcome)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Usage;
                }
            }
        }
        (None, None) => {
            eprintln!("error: give a spec or plan to run, or --resume RUN");
            return Exit::Usage;
        }
    };
    eprintln!("run: {run_id}");
    host.stop = Some(stop_probe(Some(&run_id)));
    if args.detach {
        return detach(args, &run_id, &workspace_dir);
    }
    let mut held = match lease::acquire(&run_id) {
        Ok(acquired) => {
            if let Some((prev, killed)) = &acquired.taken_over {
                eprintln!(
                    "run {run_id}: taken over from driver pid {} on `{}` (its lease lapsed); {killed} of its agent(s) killed, outstanding dispatches reissued with new tokens",
                    prev.pid, prev.host
                );
                match engine.take_over(&run_id, *killed, &mut host) {
                    Ok(o) => outcome = o,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return Exit::Usage;
                    }
                }
            }
            acquired.held
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    if let Some(old) = &args.retry {
        let from = args
            .from
            .as_ref()
            .map(|s| format!(" from `{s}`"))
            .unwrap_or_default();
        eprintln!("retry of {old}{from}: reused steps are not dispatched");
    }
    let mut progress = Progress::new();
    loop {
        if outcome.status.is_terminal() {
            break;
        }
        if held.lost() {
            eprintln!(
                "error: run {run_id}: this driver lost its lease (its heartbeat could not be renewed in time) and another driver took the run over; stopping"
            );
            return Exit::Errors;
        }
        if let Some(sig) = signalled() {
            let stop = Stopped {
                engine: &mut engine,
                host: &mut host,
                format: args.format,
            };
            return interrupted(stop, &run_id, &outcome, sig, 0);
        }
        if !outcome.ready.is_empty() {
            let ready = &outcome.ready;
            progress.batch(&mut engine, &run_id, ready);
            let round = run_ready(
                (&mut engine, &mut held),
                &mut host,
                (args, &config, &progress),
                &run_id,
                &workspace_dir,
                ready,
            );
            if let Some(o) = round.outcome {
                outcome = o;
            }
            if round.interrupted.is_some() && signalled().is_none() && held.lost() {
                eprintln!(
                    "error: run {run_id}: this driver lost its lease (its heartbeat could not be renewed in time) and another driver took the run over; its agents were killed, nothing was reported for them"
                );
                return Exit::Errors;
            }
            if let Some(killed) = round.interrupted {
                let sig = signalled().unwrap_or(SIGTERM);
                let stop = Stopped {
                    engine: &mut engine,
                    host: &mut host,
                    format: args.format,
                };
                return interrupted(stop, &run_id, &outcome, sig, killed);
            }
            continue;
        }
        if let Some(gate) = outcome.gates.first().cloned() {
            let id = gate.step_id.clone();
            let token = Some(gate.gate_token.clone());
            let decision = match gate_rule(&args.gate, &id) {
                Some(r) => Some((r.decision.clone(), None, r.choice.clone())),
                None => ask_gate(&gate),
            };
            let Some((decision, note, choice)) = decision else {
                eprintln!(
                    "run {run_id} is waiting at gate `{id}`; decide with `--gate approve|revise|kill` and `--resume {run_id}` (this gate alone, with a choice: `--gate {id}=DECISION[:CHOICE]`)"
                );
                return finish(args.format, &run_id, &outcome);
            };
            match &choice {
                Some(c) => eprintln!("  gate {id}: {decision} (choice {c})"),
                None => eprintln!("  gate {id}: {decision}"),
            }
            let answer = GateDecision {
                decision: &decision,
                note: note.as_deref(),
                choice: choice.as_deref(),
                tokenless: false,
            };
            match engine.resolve_gate(&run_id, &id, token.as_deref(), &answer, "human", &mut host) {
                Ok(o) => outcome = o,
                Err(EngineError::Vm(e)) => {
                    eprintln!("  gate {id}: refused: {e}");
                    return finish(args.format, &run_id, &outcome);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Usage;
                }
            }
            continue;
        }
        eprintln!("run {run_id} has nothing to do");
        break;
    }
    finish(args.format, &run_id, &outcome)
}

/// `--detach`: the run is started; a driver process (this binary, `run
/// --resume RUN` with the same agent, gate, workspace and config options)
/// drives it in a process group of its own, stdin closed, its output in
/// `$STRATUM_HOME/drivers/RUN.log`. Prints the run id and the driver's pid.
fn detach(args: &RunArgs, run_id: &str, workspace_dir: &Path) -> Exit {
    let mut extra: Vec<std::ffi::OsString> = vec!["--format".into(), "json".into()];
    extra.push("--workspace".into());
    extra.push(workspace_dir.into());
    if let Some(a) = &args.agent {
        extra.extend(["--agent".into(), a.into()]);
    }
    if let Some(t) = args.agent_timeout {
        extra.extend(["--agent-timeout".into(), t.to_string().into()]);
    }
    if let Some(c) = &args.config {
        extra.extend(["--config".into(), c.into()]);
    }
    for g in &args.gate {
        let rule = match (&g.step, &g.choice) {
            (Some(s), Some(c)) => format!("{s}={}:{c}", g.decision),
            (Some(s), None) => format!("{s}={}", g.decision),
            (None, _) => g.decision.clone(),
        };
        extra.extend(["--gate".into(), rule.into()]);
    }
    let d = match stratum_vm::background::spawn_driver(run_id, &extra) {
        Ok(d) => d,
        Err(e) => return super::usage(e),
    };
    eprintln!(
        "run {run_id} is driven in the background by pid {} (log: {}); watch it with `stratumc watch {run_id}`, stop it with `stratumc flow cancel {run_id}`",
        d.pid,
        d.log.display()
    );
    if args.format == Format::Json {
        let doc = json!({"version": 1, "runId": run_id, "status": "running", "detached": true, "driverPid": d.pid, "log": d.log.display().to_string()});
        super::emit(&format!("{doc}\n"));
    }
    Exit::Ok
}

fn finish(format: Format, run_id: &str, outcome: &Outcome) -> Exit {
    let status = outcome.wire_status();
    match &outcome.failure {
        Some(f) => eprintln!("{status}: {}", f.reason),
        None => eprintln!("{status}"),
    }
    if format == Format::Json {
        let doc = json!({"version": 1, "runId": run_id, "status": status, "output": outcome.output, "failure": outcome.failure.as_ref().map(|f| json!({"attempt": f.attempt, "reason": f.reason}))});
        super::emit(&format!("{doc}\n"));
    } else if let Some(o) = &outcome.output {
        super::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(o).unwrap_or_default()
        ));
    }
    if outcome.status == RunStatus::Completed {
        Exit::Ok
    } else {
        Exit::Errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(step: Option<&str>, decision: &str, choice: Option<&str>) -> GateRule {
        GateRule {
            step: step.map(String::from),
            decision: decision.into(),
            choice: choice.map(String::from),
        }
    }

    #[test]
    fn gate_rules_parse_bare_decisions_and_per_gate_choices() {
        assert_eq!(parse_gate_rule("approve"), Ok(rule(None, "approve", None)));
        assert_eq!(
            parse_gate_rule("scope=revise"),
            Ok(rule(Some("scope"), "revise", None))
        );
        // the choice is everything after the first `:` (it may hold more)
        assert_eq!(
            parse_gate_rule("scope=approve:a:b c"),
            Ok(rule(Some("scope"), "approve", Some("a:b c")))
        );
        for (bad, says) in [
            ("approve:x", "a choice needs the gate it is for"),
            ("=approve", "names no gate"),
            ("scope=approve:", "empty choice"),
            ("scope=maybe", "not a gate decision"),
            ("maybe", "not a gate decision"),
        ] {
            let e = parse_gate_rule(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_gates_own_rule_wins_over_the_bare_one() {
        let rules = [
            rule(None, "approve", None),
            rule(Some("scope"), "revise", Some("broad")),
            rule(Some("scope"), "kill", None),
        ];
        assert_eq!(gate_rule(&rules, "scope"), Some(&rules[1]));
        assert_eq!(gate_rule(&rules, "other"), Some(&rules[0]));
        assert_eq!(gate_rule(&rules[1..], "other"), None);
    }
}
