//! The rmcp server: one `#[tool]` per MCP tool, each a thin wrapper that
//! validates the raw arguments against the tool's field list, runs the tool
//! module under the state lock, and returns structured content plus text.
//!
//! The tool router (every tool's name, description and input schema) is
//! built once per server and kept in the server: rmcp's default would build
//! it again for every request, which was about a third of the server's time
//! per `tools/call`.
//!
//! Owns: the tool router, the server identity (`stratumc` and its version,
//! passed to `#[tool_handler]`), the instructions sent at `initialize`, the
//! lock around the synchronous engine, turning a panic inside a tool
//! into an error result instead of a lost request, and the threads of the
//! engine workers a call asked for ([`crate::driver`]): started after the
//! call, stopped and joined by [`StratumServer::shutdown`].
//! Must never: print (stdout is the protocol), hold the state lock across
//! an `.await`, or run an agent command on the request path.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use stratum_vm::engine::Engine;

use serde_json::Value;

use crate::args::{self, Field};
use crate::checks::Before;
use crate::reply::Reply;
use crate::state::State;
use crate::tools::{self, Call};

/// The MCP server. Cloning shares the state and the tool router.
#[derive(Clone)]
pub struct StratumServer {
    state: Arc<Mutex<State>>,
    /// Built once (see the module doc); routes `tools/call` and answers `tools/list`.
    router: Arc<ToolRouter<StratumServer>>,
    /// The engine workers started so far (finished ones are pruned).
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The state's stops, reached without its lock (crate::stops).
    stops: Arc<crate::stops::Stops>,
}

impl StratumServer {
    /// A server around an engine (normally on `stratum_vm::store::open_default()`).
    pub fn new(engine: Engine) -> StratumServer {
        StratumServer::with_state(State::new(engine))
    }

    /// A server around a state (an engine and the operator's configuration).
    pub fn with_state(state: State) -> StratumServer {
        StratumServer {
            stops: state.stops.clone(),
            state: Arc::new(Mutex::new(state)),
            router: Arc::new(Self::tool_router()),
            workers: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Validates `raw` and runs `call` under the lock (without awaiting),
    /// then starts the engine workers the call asked for.
    pub fn dispatch(&self, tool: &str, fields: &[Field], raw: JsonObject, call: Call) -> Reply {
        let parsed = match args::parse(tool, fields, &raw) {
            Ok(a) => a,
            Err(m) => return Reply::bad_request(m),
        };
        let mut state = self.lock();
        // a run whose report is under check (crate::checks)
        let run = parsed
            .get("runId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let verdict = match run.as_deref().map(|r| state.checks.before(tool, r)) {
            Some(Before::Checking(reply)) => return reply,
            Some(Before::Verdict(v)) => Some(v),
            Some(Before::Free) | None => None,
        };
        let reply = catch_unwind(AssertUnwindSafe(|| call(&mut state, &parsed))).unwrap_or_else(|_| {
            Reply::error(
                "internal_error",
                format!(
                    "{tool} failed inside the server (a bug); the run was not changed by this call"
                ),
            )
        });
        let reply = match verdict {
            Some(v) => crate::checks::with_verdict(reply, v),
            None => reply,
        };
        let starts = state.dispatches.take_starts();
        let agent_starts = state.agent_runs.take_starts();
        let check_starts = state.checks.take_starts();
        drop(state);
        self.start_workers(starts);
        self.start_agent_runs(agent_starts);
        self.start_checks(check_starts);
        reply
    }

    fn start_checks(&self, starts: Vec<crate::checks::Start>) {
        if starts.is_empty() {
            return;
        }
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.retain(|w| !w.is_finished());
        for s in starts {
            let run = s.run().to_owned();
            match crate::checks::start(&self.state, s) {
                Ok(w) => workers.push(w),
                Err(e) => self.lock().checks.not_started(&run, &e.to_string()),
            }
        }
    }

    /// Waits, at most `bound`, until no check of `run` is running.
    async fn wait_for_checks(&self, run: &str, bound: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        while self.lock().checks.running(run) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `stratum_step_done`: a report whose checks run off the request path
    /// (crate::checks) is waited for, without the state lock, up to
    /// [`crate::checks::check_wait`]; then answered with its verdict, or
    /// `checking` when the checks still run.
    async fn step_done(&self, raw: JsonObject) -> CallToolResult {
        use tools::step_done as t;
        let reply = self.dispatch(t::NAME, t::FIELDS, raw, t::call);
        let checking = match &reply {
            Reply::Ok(v) if v["status"] == "checking" => v["runId"].as_str().map(str::to_owned),
            _ => None,
        };
        let Some(run) = checking else {
            return reply.into_result();
        };
        let Some(done) = self.lock().checks.waiter(&run) else {
            return reply.into_result();
        };
        let _ = tokio::time::timeout(crate::checks::check_wait(), done.notified()).await;
        let mut state = self.lock();
        let Some(verdict) = state.checks.take_verdict(&run) else {
            return reply.into_result();
        };
        let starts = state.dispatches.take_starts();
        drop(state);
        self.start_workers(starts);
        verdict.into_result()
    }

    fn start_agent_runs(&self, starts: Vec<crate::agent_runs::Start>) {
        if starts.is_empty() {
            return;
        }
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.retain(|w| !w.is_finished());
        for s in starts {
            let id = s.record.id.clone();
            match crate::agent_runs::start(&self.state, s) {
                Ok(w) => workers.push(w),
                Err(e) => crate::agent_runs::not_started(&mut self.lock(), &id, &e),
            }
        }
    }

    /// `stratum_agent_run`: the call stores the record and queues the run;
    /// a foreground run is then waited for off the state lock (a dropped
    /// request — the client cancelled it — cancels the run) and answered
    /// with its settled record.
    async fn agent_run(&self, raw: JsonObject) -> CallToolResult {
        use tools::agent_run as t;
        let reply = self.dispatch(t::NAME, t::FIELDS, raw, t::call);
        let Reply::Ok(v) = &reply else {
            return reply.into_result();
        };
        let id = v["runId"].as_str().unwrap_or_default().to_owned();
        let Some(wait) = self.lock().agent_runs.take_wait(&id) else {
            return reply.into_result();
        };
        let mut guard = CancelOnDrop {
            state: self.state.clone(),
            id: Some(id.clone()),
        };
        let _ = wait.await;
        guard.id = None;
        let state = self.lock();
        match crate::agent_runs::find(&state, &id) {
            Ok(r) => Reply::Ok(crate::agent_runs::record_json(&r)),
            Err(r) => r,
        }
        .into_result()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start_workers(&self, runs: Vec<String>) {
        if runs.is_empty() {
            return;
        }
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.retain(|w| !w.is_finished());
        for run in runs {
            match crate::driver::start(&self.state, run.clone()) {
                Ok(w) => workers.push(w),
                // no thread: the run keeps its entries outstanding; a later call asks again
                Err(_) => self.lock().dispatches.finish_failed(&run),
            }
        }
    }

    /// Stops the engine workers (their commands are killed with their
    /// process groups, nothing is reported for them) and the agent runs
    /// (settled as `lost`, their groups killed), and waits for them.
    /// Called when the client has gone away.
    pub fn shutdown(&self) {
        // a declared command running under the lock stops first
        self.stops.stop_all();
        self.lock().dispatches.stop();
        crate::agent_runs::stop_all(&mut self.lock());
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for w in workers {
            let _ = w.join();
        }
    }

    /// Whether a worker is running the engine entries of `run_id`.
    pub fn is_dispatching(&self, run_id: &str) -> bool {
        self.lock().dispatches.is_live(run_id)
    }

    fn run(&self, tool: &str, fields: &[Field], raw: JsonObject, call: Call) -> CallToolResult {
        self.dispatch(tool, fields, raw, call).into_result()
    }
}

/// Cancels a foreground agent run whose request went away before it ended
/// (on a thread of its own: the cancel waits for the group to be gone).
struct CancelOnDrop {
    state: Arc<Mutex<State>>,
    id: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let state = self.state.clone();
        std::thread::spawn(move || {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Ok(record) = crate::agent_runs::find(&state, &id) {
                let why = "cancelled: the client cancelled the stratum_agent_run request";
                let now = crate::agent_runs::now_ms();
                let _ = stratum_vm::agent_runs::cancel(state.engine.store_mut(), record, why, now);
            }
        });
    }
}

#[tool_router]
impl StratumServer {
    #[tool(name = "stratum_agent_run", description = tools::agent_run::DESCRIPTION, input_schema = args::schema(tools::agent_run::FIELDS))]
    async fn stratum_agent_run(&self, raw: JsonObject) -> CallToolResult {
        self.agent_run(raw).await
    }

    #[tool(name = "stratum_agent_poll", description = tools::agent_poll::DESCRIPTION, input_schema = args::schema(tools::agent_poll::FIELDS))]
    async fn stratum_agent_poll(&self, raw: JsonObject) -> CallToolResult {
        use tools::agent_poll as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_cancel_agent_run", description = tools::cancel_agent_run::DESCRIPTION, input_schema = args::schema(tools::cancel_agent_run::FIELDS))]
    async fn stratum_cancel_agent_run(&self, raw: JsonObject) -> CallToolResult {
        use tools::cancel_agent_run as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_validate", description = tools::validate::DESCRIPTION, input_schema = args::schema(tools::validate::FIELDS))]
    async fn stratum_validate(&self, raw: JsonObject) -> CallToolResult {
        use tools::validate as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_register", description = tools::guard::register::DESCRIPTION, input_schema = args::schema(tools::guard::register::FIELDS))]
    async fn stratum_guard_register(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::register as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_transition", description = tools::guard::transition::DESCRIPTION, input_schema = args::schema(tools::guard::transition::FIELDS))]
    async fn stratum_guard_transition(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::transition as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_history", description = tools::guard::history::DESCRIPTION, input_schema = args::schema(tools::guard::history::FIELDS))]
    async fn stratum_guard_history(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::history as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_upgrade", description = tools::guard::upgrade::DESCRIPTION, input_schema = args::schema(tools::guard::upgrade::FIELDS))]
    async fn stratum_guard_upgrade(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::upgrade as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_override", description = tools::guard::override_edge::DESCRIPTION, input_schema = args::schema(tools::guard::override_edge::FIELDS))]
    async fn stratum_guard_override(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::override_edge as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_migrate", description = tools::guard::migrate::DESCRIPTION, input_schema = args::schema(tools::guard::migrate::FIELDS))]
    async fn stratum_guard_migrate(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::migrate as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_guard_apply_upgrade", description = tools::guard::apply_upgrade::DESCRIPTION, input_schema = args::schema(tools::guard::apply_upgrade::FIELDS))]
    async fn stratum_guard_apply_upgrade(&self, raw: JsonObject) -> CallToolResult {
        use tools::guard::apply_upgrade as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_plan", description = tools::plan::DESCRIPTION, input_schema = args::schema(tools::plan::FIELDS))]
    async fn stratum_plan(&self, raw: JsonObject) -> CallToolResult {
        use tools::plan as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_step_done", description = tools::step_done::DESCRIPTION, input_schema = args::schema(tools::step_done::FIELDS))]
    async fn stratum_step_done(&self, raw: JsonObject) -> CallToolResult {
        self.step_done(raw).await
    }

    #[tool(name = "stratum_gate_resolve", description = tools::gate_resolve::DESCRIPTION, input_schema = args::schema(tools::gate_resolve::FIELDS))]
    async fn stratum_gate_resolve(&self, raw: JsonObject) -> CallToolResult {
        use tools::gate_resolve as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_audit", description = tools::audit::DESCRIPTION, input_schema = args::schema(tools::audit::FIELDS))]
    async fn stratum_audit(&self, raw: JsonObject) -> CallToolResult {
        use tools::audit as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_commit", description = tools::commit::DESCRIPTION, input_schema = args::schema(tools::commit::FIELDS))]
    async fn stratum_commit(&self, raw: JsonObject) -> CallToolResult {
        use tools::commit as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_revert", description = tools::revert::DESCRIPTION, input_schema = args::schema(tools::revert::FIELDS))]
    async fn stratum_revert(&self, raw: JsonObject) -> CallToolResult {
        use tools::revert as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_resume", description = tools::resume::DESCRIPTION, input_schema = args::schema(tools::resume::FIELDS))]
    async fn stratum_resume(&self, raw: JsonObject) -> CallToolResult {
        use tools::resume as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_retry", description = tools::retry::DESCRIPTION, input_schema = args::schema(tools::retry::FIELDS))]
    async fn stratum_retry(&self, raw: JsonObject) -> CallToolResult {
        use tools::retry as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_flow_cancel", description = tools::flow_cancel::DESCRIPTION, input_schema = args::schema(tools::flow_cancel::FIELDS))]
    async fn stratum_flow_cancel(&self, raw: JsonObject) -> CallToolResult {
        use tools::flow_cancel as t;
        // a declared command of the run that holds the lock now stops first
        // (its transition is dropped), then the cancel takes the lock
        let run = ["runId", "run_id"]
            .iter()
            .find_map(|k| raw.get(*k).and_then(|v| v.as_str()))
            .map(str::to_owned);
        if let Some(run) = &run {
            self.stops.ask(run);
            // a report under check off the request path (crate::checks)
            // sees the stop at its command's next poll: wait for it to end
            self.wait_for_checks(run, crate::driver::TEARDOWN_WAIT)
                .await;
        }
        let reply = self.run(t::NAME, t::FIELDS, raw, t::call);
        if let Some(run) = &run {
            self.stops.done(run);
        }
        reply
    }

    #[tool(name = "stratum_flow_run_bg", description = tools::flow_run_bg::DESCRIPTION, input_schema = args::schema(tools::flow_run_bg::FIELDS))]
    async fn stratum_flow_run_bg(&self, raw: JsonObject) -> CallToolResult {
        use tools::flow_run_bg as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_flow_poll", description = tools::flow_poll::DESCRIPTION, input_schema = args::schema(tools::flow_poll::FIELDS))]
    async fn stratum_flow_poll(&self, raw: JsonObject) -> CallToolResult {
        use tools::flow_poll as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_flow_cancel_bg", description = tools::flow_cancel_bg::DESCRIPTION, input_schema = args::schema(tools::flow_cancel_bg::FIELDS))]
    async fn stratum_flow_cancel_bg(&self, raw: JsonObject) -> CallToolResult {
        use tools::flow_cancel_bg as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_usage_report", description = tools::usage_report::DESCRIPTION, input_schema = args::schema(tools::usage_report::FIELDS))]
    async fn stratum_usage_report(&self, raw: JsonObject) -> CallToolResult {
        use tools::usage_report as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_cost", description = tools::cost::DESCRIPTION, input_schema = args::schema(tools::cost::FIELDS))]
    async fn stratum_cost(&self, raw: JsonObject) -> CallToolResult {
        use tools::cost as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }

    #[tool(name = "stratum_compile_speckit", description = tools::compile_speckit::DESCRIPTION, input_schema = args::schema(tools::compile_speckit::FIELDS))]
    async fn stratum_compile_speckit(&self, raw: JsonObject) -> CallToolResult {
        use tools::compile_speckit as t;
        self.run(t::NAME, t::FIELDS, raw, t::call)
    }
}

#[tool_handler(
    router = self.router,
    name = "stratumc",
    version = "0.1.0",
    instructions = "Stratum runs workflow specs (.stratum.yaml) step by step while you do the work. Loop: stratum_validate the spec; \
stratum_plan it (returns runId, ready entries and gates); for every ready entry, do its `do` task yourself and return JSON matching its \
`contract` and `ensure` with stratum_step_done (echo `id` and `dispatchToken`); on a retry read previousFailure.violations and fix them; an entry with previousRoute was sent back by a later step (its note, output or failure say why): redo the work accordingly; \
for every waiting gate ask the human and call stratum_gate_resolve with its gateToken; stop at completed, failed, killed, budget_exhausted \
or cancelled. Entries listed under `running` are run by the server itself (engine dispatch): do not do them; call stratum_audit or \
stratum_resume later to see their results. After a restart, stratum_resume the runId."
)]
impl ServerHandler for StratumServer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_follows_the_crate_version() {
        let server =
            StratumServer::new(Engine::new(Box::new(stratum_vm::store::MemoryStore::new())));
        let info = server.get_info();
        assert_eq!(info.server_info.name, "stratumc");
        // `#[tool_handler]` takes a literal: keep it equal to the workspace version
        assert_eq!(info.server_info.version, env!("CARGO_PKG_VERSION"));
        assert!(info.capabilities.tools.is_some());
    }

    #[test]
    fn every_tool_is_listed_with_a_closed_schema() {
        let tools = StratumServer::tool_router().list_all();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "stratum_agent_poll",
                "stratum_agent_run",
                "stratum_audit",
                "stratum_cancel_agent_run",
                "stratum_commit",
                "stratum_compile_speckit",
                "stratum_cost",
                "stratum_flow_cancel",
                "stratum_flow_cancel_bg",
                "stratum_flow_poll",
                "stratum_flow_run_bg",
                "stratum_gate_resolve",
                "stratum_guard_apply_upgrade",
                "stratum_guard_history",
                "stratum_guard_migrate",
                "stratum_guard_override",
                "stratum_guard_register",
                "stratum_guard_transition",
                "stratum_guard_upgrade",
                "stratum_plan",
                "stratum_resume",
                "stratum_retry",
                "stratum_revert",
                "stratum_step_done",
                "stratum_usage_report",
                "stratum_validate"
            ]
        );
        let table: Vec<&str> = tools::ALL.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, table, "tools::ALL lists every routed tool");
        for t in &tools {
            assert_eq!(t.input_schema["additionalProperties"], false, "{}", t.name);
            assert!(t.description.as_deref().is_some_and(|d| d.len() > 80));
            // some clients refuse combinators at the top of an input schema
            for k in ["anyOf", "oneOf", "allOf"] {
                assert!(!t.input_schema.contains_key(k), "{}: {k}", t.name);
            }
            // the older aliases are accepted but not advertised, and every
            // tool on a run requires its run id
            let props = t.input_schema["properties"].as_object().unwrap();
            for alias in ["flow_id", "step_id", "user_id", "outcome"] {
                assert!(!props.contains_key(alias), "{}: {alias}", t.name);
            }
            if props.contains_key("runId") {
                let required = t.input_schema["required"].as_array().unwrap();
                assert!(required.iter().any(|r| r == "runId"), "{}", t.name);
            }
        }
    }
}
