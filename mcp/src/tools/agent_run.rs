//! `stratum_agent_run {agent, prompt, contract?, cwd?, background?,
//! cancellationId?, flow?: {runId, stepId?, itemIndex?}}`: runs one
//! configured agent (its `[agents.NAME]` connector CLI or command) on a
//! prompt, outside any flow's dispatch loop (issue 16 §2).
//!
//! Owns: reading the request into a typed [`agent_runs::Request`] (the
//! agent's runner from the configuration of `cwd`, else the server's
//! directory), the rule that a `flow` link needs a `cancellationId` (no
//! owned process group, nothing to cancel) and names a stored run, storing
//! the record and queueing its thread ([`crate::agent_runs`]).
//! Must never: run the agent on the request path (the server's handler
//! waits for a foreground run off the state lock), or report to the flow
//! (the link only lets `stratum_flow_cancel` reach the process).

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use stratum_vm::agent_runs::{self, Request, Runner};
use stratum_vm::plan::Agent;
use stratum_vm::store::{FlowLink, StoreError};

use crate::agent_runs::{Start, now_ms, record_json};
use crate::args::{Args, Field, Kind};
use crate::reply::Reply;
use crate::state::State;

/// Tool name.
pub const NAME: &str = "stratum_agent_run";

/// What an agent reads in `tools/list`.
pub const DESCRIPTION: &str = "Run one configured agent (`claude` or `codex`: its `[agents.NAME]` connector CLI or command in stratum.toml) on a prompt. \
The answer is one JSON object: with `contract` (a JSON Schema) it must match it; it comes back as `output`. \
Foreground (default): the call returns when the agent has ended, with {runId, status: completed|failed|cancelled|lost, output, failure, usage, pid, host}. \
With `background: true` the call returns at once with status `running` and a durable runId: poll it with stratum_agent_poll until `done` is true, \
stop it with stratum_cancel_agent_run. Give a fresh `cancellationId` (a UUID) to be able to cancel a foreground run from another call: \
stratum_cancel_agent_run with that id as runId. `flow: {runId, stepId?, itemIndex?}` (needs cancellationId) links the run to a flow step, \
so that stratum_flow_cancel on that flow, from any process on this host, kills it.";

/// Request fields.
pub const FIELDS: &[Field] = &[
    Field::req(
        "agent",
        Kind::Str,
        "The agent: `claude` or `codex` (configured in stratum.toml `[agents.NAME]` with a `connector` or a `command`).",
    ),
    Field::req("prompt", Kind::Str, "The task for the agent."),
    Field::opt(
        "contract",
        Kind::Obj,
        "A JSON Schema the agent's answer must match (it is put in the prompt).",
    ),
    Field::opt(
        "cwd",
        Kind::Str,
        "The agent's working directory, whose stratum.toml configures it (default: the server's directory).",
    ),
    Field::opt(
        "background",
        Kind::Bool,
        "Return at once with a runId to poll (default false: wait for the agent).",
    ),
    Field::opt(
        "cancellationId",
        Kind::Str,
        "A fresh id (a UUID) naming this run for stratum_cancel_agent_run; unique.",
    ),
    Field::opt(
        "flow",
        Kind::Obj,
        "`{runId, stepId?, itemIndex?}`: the flow step this run works for (needs cancellationId).",
    ),
];

/// `flow` as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FlowArg {
    run_id: String,
    step_id: Option<String>,
    item_index: Option<u32>,
}

fn invalid(m: impl Into<String>) -> Reply {
    Reply::error("invalid_request", m)
}

/// The flow link, checked: well formed, with a cancellation id, on a stored run.
fn flow_link(state: &State, args: &Args) -> Result<Option<FlowLink>, Reply> {
    let Some(v) = args.get("flow") else {
        return Ok(None);
    };
    let f: FlowArg = serde_json::from_value(v.clone()).map_err(|e| {
        invalid(format!(
            "`flow` must be {{runId, stepId?, itemIndex?}} (itemIndex a whole number): {e}"
        ))
    })?;
    if args.str("cancellationId").is_none() {
        return Err(invalid(
            "`flow` needs a `cancellationId`: without one the run owns no process group that stratum_flow_cancel could stop",
        ));
    }
    match state.engine.store().meta(&f.run_id) {
        Ok(_) => {}
        Err(StoreError::NotFound(_)) => {
            return Err(Reply::error(
                "not_found",
                format!("`flow.runId`: no run `{}` in the store", f.run_id),
            ));
        }
        Err(e) => return Err(Reply::error("store_error", e.to_string())),
    }
    Ok(Some(FlowLink {
        run_id: f.run_id,
        step_id: f.step_id,
        item_index: f.item_index,
    }))
}

/// The request: the agent's runner and timeout from the configuration at `cwd`.
fn request(state: &State, args: &Args, cwd: &std::path::Path) -> Result<Request, Reply> {
    let name = args.req_str("agent");
    let agent = Agent::from_name(name).ok_or_else(|| {
        invalid(format!(
            "unknown agent `{name}`: expected `claude` or `codex`"
        ))
    })?;
    let (_, agents, _) = state
        .new_run(cwd)
        .map_err(|e| Reply::error("config_error", e))?;
    let runner = match (agents.connectors.get(&agent), agents.commands.get(&agent)) {
        (Some((kind, settings)), _) => Runner::Connector(*kind, settings.clone()),
        (None, Some(cmd)) => Runner::Command(cmd.clone()),
        (None, None) => {
            return Err(Reply::error(
                "no_runner",
                format!(
                    "no runner for agent `{name}`: set `[agents.{name}] connector = \"claude-code\"` (or `\"codex\"`, or a `command`) in the stratum.toml of {}",
                    cwd.display()
                ),
            ));
        }
    };
    let timeout = agents
        .timeouts
        .get(&agent)
        .copied()
        .unwrap_or(stratum_vm::agent::DEFAULT_TIMEOUT);
    Ok(Request {
        agent: name.to_owned(),
        runner,
        prompt: args.req_str("prompt").to_owned(),
        contract: args.get("contract").cloned(),
        timeout,
    })
}

/// Runs the tool: stores the record and queues the run.
pub fn call(state: &mut State, args: &Args) -> Reply {
    let cwd = match args.str("cwd") {
        Some(c) => PathBuf::from(c),
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => return Reply::error("host_unavailable", format!("current directory: {e}")),
        },
    };
    if !cwd.is_dir() {
        return invalid(format!("`cwd` {} is not a directory", cwd.display()));
    }
    let flow = match flow_link(state, args) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let req = match request(state, args, &cwd) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let id = agent_runs::new_id();
    let owner = state.agent_runs.owner();
    let cancellation = args.str("cancellationId").map(str::to_owned);
    let record = agent_runs::started(&id, &req, (now_ms(), &owner), flow, cancellation);
    match state.engine.store_mut().create_agent_run(&record) {
        Ok(()) => {}
        Err(StoreError::Exists(other)) => {
            return invalid(format!(
                "cancellationId `{}` already names agent run `{other}`; give a fresh one",
                record.cancellation_id.as_deref().unwrap_or_default()
            ));
        }
        Err(e) => return Reply::error("store_error", e.to_string()),
    }
    let background = args.flag("background");
    let start = Start {
        job: agent_runs::job(&id, &req),
        record: record.clone(),
        cwd,
        done: None,
    };
    state.agent_runs.want(start, !background);
    let mut v = record_json(&record);
    if let (true, Some(m)) = (background, v.as_object_mut()) {
        m.insert("background".into(), Value::from(true));
        m.insert(
            "completionInstructions".into(),
            Value::from(format!(
                "Agent run {id} is running in the background. Call stratum_agent_poll {{\"runId\": \"{id}\"}} until `done` is true (its `output` or `failure` is then final); stop it with stratum_cancel_agent_run {{\"runId\": \"{id}\"}}."
            )),
        );
    }
    Reply::Ok(v)
}
