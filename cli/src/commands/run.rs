//! `stratumc run SPEC|PLAN --inputs JSON|@file --agent CMD` and
//! `stratumc run --resume RUN --agent CMD`: the headless driver.
//!
//! Owns: handing every ready dispatch to a fresh `sh -c CMD` process (the
//! ready entry as JSON on stdin, the result JSON on stdout), asking or
//! deciding gates, progress on stderr, the final JSON, exit codes.
//! Must never: apply an execution rule itself — every decision is the
//! engine's; this only moves JSON between the engine and the agent.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stratum_vm::engine::{Engine, EngineError, StdHost};
use stratum_vm::interp::{Outcome, RunStatus};
use stratum_vm::store::SqliteStore;

use crate::{Exit, Format};

/// Options of `run`.
pub struct Args<'a> {
    /// Spec or plan (absent with `--resume`).
    pub source: Option<&'a Path>,
    /// Run to resume.
    pub resume: Option<&'a str>,
    /// Flow input (`JSON` or `@file`).
    pub inputs: Option<&'a str>,
    /// Flow to run.
    pub flow: Option<&'a str>,
    /// Agent command.
    pub agent: &'a str,
    /// Workspace root.
    pub workspace: Option<&'a Path>,
    /// Scripted gate decision.
    pub gate: Option<&'a str>,
    /// Output format.
    pub format: Format,
}

fn read_inputs(arg: Option<&str>) -> Result<Value, String> {
    let text = match arg {
        None => return Ok(json!({})),
        Some(a) => match a.strip_prefix('@') {
            Some(path) => crate::input::read_text(Path::new(path), crate::input::Kind::Inputs)
                .map_err(|e| match e {
                    crate::input::ReadError::Io { error, .. } => {
                        format!("cannot read inputs file {path}: {error}")
                    }
                    other => other.to_string(),
                })?,
            None => a.to_string(),
        },
    };
    serde_json::from_str(&text).map_err(|e| format!("--inputs is not valid JSON: {e}"))
}

fn plan_bytes(source: &Path) -> Result<Vec<u8>, (Exit, String)> {
    let bytes = crate::input::read(source, crate::input::Kind::SpecOrPlan)
        .map_err(|e| (Exit::Usage, e.to_string()))?;
    if bytes.starts_with(stratum_vm::plan::file::MAGIC) {
        return Ok(bytes);
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
    Ok(stratum_vm::plan::file::encode(&plan).0)
}

fn ask_gate(gate: &Value) -> Option<(String, Option<String>)> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let id = gate["stepId"].as_str().unwrap_or("?");
    loop {
        eprint!(
            "gate `{id}` (round {}): [a]pprove, [r]evise, [k]ill? ",
            gate["round"]
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
        eprint!("note (optional): ");
        let _ = std::io::stderr().flush();
        let mut note = String::new();
        let _ = stdin.lock().read_line(&mut note);
        let note = note.trim();
        return Some((
            decision.to_string(),
            (!note.is_empty()).then(|| note.to_string()),
        ));
    }
}

/// Runs the command.
pub fn run(args: &Args<'_>) -> Exit {
    let store = match SqliteStore::open_default() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let mut engine = Engine::new(Box::new(store));
    // a resumed run keeps the workspace it was started with, unless told otherwise
    let recorded = match (args.resume, args.workspace) {
        (Some(id), None) => engine.workspace_of(id).ok().flatten().map(PathBuf::from),
        _ => None,
    };
    let workspace_dir: PathBuf = match (args.workspace, recorded) {
        (Some(w), _) => w.to_path_buf(),
        (None, Some(r)) => r,
        (None, None) => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let mut host = match StdHost::for_root(Some(&workspace_dir)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let (run_id, mut outcome) = match (args.resume, args.source) {
        (Some(id), _) => match engine.resume(id, None, &mut host) {
            Ok((o, _)) => (id.to_string(), o),
            Err(e) => {
                eprintln!("error: {e}");
                return Exit::Usage;
            }
        },
        (None, Some(source)) => {
            let bytes = match plan_bytes(source) {
                Ok(b) => b,
                Err((code, msg)) => {
                    eprintln!("{msg}");
                    return code;
                }
            };
            let input = match read_inputs(args.inputs) {
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
            match engine.start(
                &plan,
                args.flow,
                input,
                &mut host,
                Some(workspace_dir.display().to_string()),
            ) {
                Ok(x) => x,
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
    loop {
        if outcome.status.is_terminal() {
            break;
        }
        if !outcome.ready.is_empty() {
            // every ready dispatch runs at once (the VM already bounds fanout concurrency)
            let jobs = outcome
                .ready
                .iter()
                .map(|entry| (args.agent.to_string(), entry.clone()))
                .collect();
            // an operator's `stratumc flow cancel` (another process) stops the agents still running
            let results = stratum_vm::agent::run_batch_watched(
                jobs,
                &run_id,
                &workspace_dir,
                std::time::Duration::from_millis(250),
                || {
                    engine
                        .poll(&run_id, &mut host)
                        .is_ok_and(|o| o.status == RunStatus::Cancelled)
                },
            );
            for (entry, report) in results {
                let id = entry["id"].as_str().unwrap_or("");
                let token = entry["dispatchToken"].as_str();
                eprintln!(
                    "  {id} (attempt {}): {}",
                    entry["attempt"],
                    if report.failure.is_some() {
                        "failed"
                    } else {
                        "reported"
                    }
                );
                match engine.report(&run_id, id, token, &report, &mut host) {
                    Ok(o) => outcome = o,
                    Err(e) => eprintln!("  {id}: refused: {e}"),
                }
            }
            if let Ok(o) = engine.poll(&run_id, &mut host) {
                outcome = o;
            }
            continue;
        }
        if let Some(gate) = outcome.gates.first().cloned() {
            let id = gate["stepId"].as_str().unwrap_or("").to_string();
            let token = gate["gateToken"].as_str().map(str::to_string);
            let decision = match args.gate {
                Some(d) => Some((d.to_string(), None)),
                None => ask_gate(&gate),
            };
            let Some((decision, note)) = decision else {
                eprintln!(
                    "run {run_id} is waiting at gate `{id}`; decide with `--gate approve|revise|kill` and `--resume {run_id}`"
                );
                return finish(args.format, &run_id, &outcome);
            };
            eprintln!("  gate {id}: {decision}");
            match engine.resolve_gate(
                &run_id,
                &id,
                token.as_deref(),
                &decision,
                note.as_deref(),
                "human",
                &mut host,
            ) {
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
