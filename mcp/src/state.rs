//! The server's state: one engine on one run store for the whole process,
//! and the host (workspace jail + judge) of every run this process touched.
//!
//! Owns: choosing a run's host and agent commands — a new run's from the
//! operator's configuration (`--config FILE`, else
//! `$STRATUM_HOME/stratum.toml`) merged with the `stratum.toml` of its
//! workspace root (or of the server's directory), frozen into the run; a
//! stored run's from its frozen copy, whatever the files now say (each
//! difference is logged on stderr and ignored) —
//! turning a `spec` argument (YAML text or an object) into source text.
//! Must never: open a second store connection (the long checks of
//! `crate::checks` open their own), or cache run state (every
//! engine call loads the run from the store, so another server process
//! that advanced the run is always seen), or keep more than
//! [`MAX_HOSTS`] runs' hosts (a long-lived server touches runs without
//! end; a host is rebuilt from the run's frozen configuration when needed).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde_json::Value;
use stratum_vm::config::{self, Config, Frozen};
use stratum_vm::connector::{ConnectorKind, Settings};
use stratum_vm::engine::Engine;
use stratum_vm::host::StdHost;
use stratum_vm::plan::Agent;

use crate::reply::{Reply, engine_error};

/// How many runs' hosts a server keeps; the oldest is dropped beyond it.
pub const MAX_HOSTS: usize = 256;

/// Everything a tool call may touch.
pub struct State {
    /// The engine (and through it the one store connection).
    pub engine: Engine,
    runs: HashMap<String, RunCtx>,
    /// The keys of `runs`, oldest first.
    order: VecDeque<String>,
    /// The operator's configuration file (`--config FILE`; `None`:
    /// `$STRATUM_HOME/stratum.toml` when it exists).
    operator: Option<PathBuf>,
    /// The runs whose engine entries a worker is running (crate::driver).
    pub dispatches: crate::driver::Dispatches,
    /// The agent runs this server started (crate::agent_runs).
    pub agent_runs: crate::agent_runs::AgentRuns,
    /// The stops asked of the runs' declared commands, read without this
    /// state's lock (crate::stops).
    pub stops: std::sync::Arc<crate::stops::Stops>,
    /// The reports whose checks run off the request path (crate::checks).
    pub checks: crate::checks::Checks,
}

/// What this process keeps about a run besides its state: its host and the
/// hash of its plan (both fixed for the run's life).
struct RunCtx {
    host: StdHost,
    plan_hash: String,
    agents: Agents,
}

/// Who runs engine-dispatched entries of a run (LANGUAGE.md E8): the agent
/// commands of `stratum.toml` and the directory they run in.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    /// Agent → command line (`[agents.NAME] command`).
    pub commands: BTreeMap<Agent, String>,
    /// Agent → its connector and settings (`[agents.NAME] connector`, issue
    /// 16); an agent has a command or a connector, never both.
    pub connectors: BTreeMap<Agent, (ConnectorKind, Settings)>,
    /// Agent → how long one command may run (`[agents.NAME] timeout_ms`).
    pub timeouts: BTreeMap<Agent, std::time::Duration>,
    /// The workspace root (the commands' working directory).
    pub root: PathBuf,
}

/// The engine, a run's host and its plan hash, borrowed together.
pub struct RunAccess<'a> {
    /// The engine.
    pub engine: &'a mut Engine,
    /// The run's host.
    pub host: &'a mut StdHost,
    /// The run's plan hash.
    pub plan_hash: String,
    /// Who runs the run's engine-dispatched entries.
    pub agents: &'a Agents,
}

/// The agent commands a new run rooted at `root` gets (no `--config`).
pub fn agents_for_root(root: Option<&Path>) -> Result<Agents, String> {
    let resolved = config::for_run(None, root).map_err(|e| e.to_string())?;
    agents_of(root, &resolved.config)
}

/// The host and the agent commands a new run rooted at `root` gets (no
/// `--config`), from one read of its configuration.
pub fn host_and_agents(root: Option<&Path>) -> Result<(StdHost, Agents), String> {
    let resolved = config::for_run(None, root).map_err(|e| e.to_string())?;
    context_of(root, &resolved.config)
}

/// The host and the agent commands of a run rooted at `root` with `config`.
fn context_of(root: Option<&Path>, config: &Config) -> Result<(StdHost, Agents), String> {
    Ok((
        StdHost::with_config(root, config).map_err(|e| e.to_string())?,
        agents_of(root, config)?,
    ))
}

/// What a stored run is run with: its host and agent commands, built from
/// its recorded workspace and frozen configuration (the operator's file
/// `operator` only for what the run did not freeze), and its plan hash.
pub struct StoredContext {
    /// The run's host.
    pub host: StdHost,
    /// Who runs its engine-dispatched entries.
    pub agents: Agents,
    /// Its plan hash.
    pub plan_hash: String,
}

/// The [`StoredContext`] of `run_id` read through `engine` (the one way a
/// stored run gets its host: [`State::run`] and the long checks of
/// `crate::checks`, which run on an engine of their own).
pub fn stored_context(
    engine: &mut Engine,
    run_id: &str,
    operator: Option<&Path>,
) -> Result<StoredContext, Reply> {
    let (run, _) = engine.load(run_id).map_err(|e| engine_error(&e))?;
    let root = run.header.workspace.as_deref().map(Path::new);
    let frozen = run.header.config.as_deref();
    let unavailable = |e: String| Reply::error("host_unavailable", e);
    let rc =
        config::of_run(run_id, frozen, operator, root).map_err(|e| unavailable(e.to_string()))?;
    log_warnings(&rc.warnings);
    let (host, agents) = context_of(root, &rc.config).map_err(unavailable)?;
    Ok(StoredContext {
        host,
        agents,
        plan_hash: run.header.plan_hash.clone(),
    })
}

/// Logs the warnings about a stored run's configuration (stderr: never the
/// protocol channel).
#[allow(clippy::print_stderr)]
fn log_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("stratumc mcp: warning: {w}");
    }
}

fn agents_of(root: Option<&Path>, config: &Config) -> Result<Agents, String> {
    let root = match root {
        Some(r) => r.to_path_buf(),
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    let timeouts = Agent::ALL
        .iter()
        .map(|a| (*a, config.agent_timeout(*a)))
        .collect();
    let connectors = config
        .agents
        .iter()
        .filter_map(|(a, t)| Some((*a, t.connector_settings()?)))
        .collect();
    Ok(Agents {
        commands: config.commands(),
        connectors,
        timeouts,
        root,
    })
}

/// Source text of a `spec` argument: YAML as given, or an object as JSON
/// (JSON is YAML, so the same front end reads it; positions then refer to
/// this pretty-printed text).
pub fn spec_text(spec: &Value) -> String {
    match spec {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

impl State {
    /// A state around an engine.
    pub fn new(engine: Engine) -> State {
        State::with_operator_config(engine, None)
    }

    /// A state around an engine, with the operator's configuration file
    /// (`--config FILE`; `None`: `$STRATUM_HOME/stratum.toml` when it exists).
    pub fn with_operator_config(engine: Engine, operator: Option<PathBuf>) -> State {
        State {
            engine,
            runs: HashMap::new(),
            order: VecDeque::new(),
            operator,
            dispatches: crate::driver::Dispatches::default(),
            agent_runs: crate::agent_runs::AgentRuns::default(),
            stops: Default::default(),
            checks: Default::default(),
        }
    }

    /// The operator's configuration file, when one was given (`--config`).
    pub fn operator(&self) -> Option<&Path> {
        self.operator.as_deref()
    }

    /// The host, the agent commands and the configuration to freeze of a new
    /// run rooted at `root`: the operator's file merged with the
    /// workspace's (a workspace file that widens it is refused).
    pub fn new_run(&self, root: &Path) -> Result<(StdHost, Agents, Frozen), String> {
        let resolved =
            config::for_run(self.operator.as_deref(), Some(root)).map_err(|e| e.to_string())?;
        let (host, agents) = context_of(Some(root), &resolved.config)?;
        Ok((host, agents, resolved.freeze()))
    }

    /// Remembers the host of a run this process just started (its declared
    /// commands stop when a cancel or a disconnect asks, crate::stops).
    pub fn remember(&mut self, run_id: &str, mut host: StdHost, plan_hash: &str, agents: Agents) {
        host.stop = Some(self.stops.probe(run_id));
        let ctx = RunCtx {
            host,
            plan_hash: plan_hash.to_string(),
            agents,
        };
        if self.runs.insert(run_id.to_string(), ctx).is_none() {
            self.order.push_back(run_id.to_string());
        }
        while self.runs.len() > MAX_HOSTS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.runs.remove(&oldest);
        }
    }

    /// How many runs' hosts this server keeps now.
    pub fn hosts_kept(&self) -> usize {
        self.runs.len()
    }

    /// The engine with the host and plan hash of a stored run (built from the
    /// run's recorded workspace and frozen configuration the first time this
    /// process sees the run).
    pub fn run(&mut self, run_id: &str) -> Result<RunAccess<'_>, Reply> {
        if !self.runs.contains_key(run_id) {
            let ctx = stored_context(&mut self.engine, run_id, self.operator.as_deref())?;
            self.remember(run_id, ctx.host, &ctx.plan_hash, ctx.agents);
        }
        let ctx = self
            .runs
            .get_mut(run_id)
            .ok_or_else(|| Reply::error("host_unavailable", "no host for the run"))?;
        Ok(RunAccess {
            engine: &mut self.engine,
            host: &mut ctx.host,
            plan_hash: ctx.plan_hash.clone(),
            agents: &ctx.agents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch workspace holding `toml` as its `stratum.toml`.
    fn workspace(name: &str, toml: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stratum-mcp-state-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stratum.toml"), toml).unwrap();
        dir
    }

    #[test]
    fn a_server_keeps_a_bounded_number_of_hosts() {
        let dir = workspace("bound", "");
        let mut state = State::new(Engine::new(Box::new(stratum_vm::store::MemoryStore::new())));
        for k in 0..MAX_HOSTS + 40 {
            let (host, agents) = host_and_agents(Some(&dir)).unwrap();
            state.remember(&format!("run-{k}"), host, "h", agents);
        }
        assert_eq!(state.hosts_kept(), MAX_HOSTS);
        assert!(!state.runs.contains_key("run-0"), "the oldest went first");
        assert!(state.runs.contains_key(&format!("run-{}", MAX_HOSTS + 39)));
        // remembering a kept run again does not count it twice
        let (host, agents) = host_and_agents(Some(&dir)).unwrap();
        state.remember(&format!("run-{}", MAX_HOSTS + 39), host, "h", agents);
        assert_eq!(state.order.len(), MAX_HOSTS);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn agent_commands_and_host_come_from_one_reading() {
        let dir = workspace("ok", "[agents.codex]\ncommand = \"codex exec\"\nusd = 1\n");
        let (host, agents) = host_and_agents(Some(&dir)).unwrap();
        assert_eq!(agents.commands[&Agent::Codex], "codex exec");
        assert_eq!(agents.commands.len(), 1);
        assert!(host.judge.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unknown_agent_is_refused_like_the_cost_model_refuses_it() {
        // before the one reader, the runner took any agent name (and never used it)
        let dir = workspace("gpt", "[agents.gpt]\ncommand = \"x\"\n");
        let e = agents_for_root(Some(&dir)).unwrap_err();
        assert!(
            e.contains("unknown agent `gpt`") && e.contains("`claude`, `codex`"),
            "{e}"
        );
        assert!(host_and_agents(Some(&dir)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stored_run_keeps_the_commands_frozen_at_its_start() {
        let dir = workspace("frozen", "[agents.codex]\ncommand = \"codex exec\"\n");
        let spec = "version: 1\ncontracts:\n  W:\n    r: string\nflows:\n  entry: main\n  main:\n    input: {}\n    \
                    output:\n      from: \"${a.output}\"\n      contract: W\n    steps:\n      - id: a\n        \
                    do: \"x\"\n        out: W\n";
        let analysis = stratum_compiler::analysis::analyze(spec);
        let plan = stratum_compiler::build::build_plan(&analysis)
            .unwrap_or_else(|| panic!("{:?}", analysis.diagnostics));
        let (bytes, _) = stratum_vm::plan::file::encode(&plan);
        let mut state = State::new(Engine::new(Box::new(stratum_vm::store::MemoryStore::new())));
        let loaded = state.engine.add_plan(&bytes).unwrap();
        let (mut host, _, frozen) = state.new_run(&dir).unwrap();
        let root = Some(dir.display().to_string());
        let (id, _) = state
            .engine
            .start_frozen(
                &loaded,
                None,
                serde_json::json!({}),
                &mut host,
                root,
                &frozen,
            )
            .unwrap();
        // the agent rewrites the workspace's file; a process that meets the run later
        std::fs::write(
            dir.join("stratum.toml"),
            "[agents.codex]\ncommand = \"evil\"\n",
        )
        .unwrap();
        let mut later = State::new(state.engine);
        let access = later.run(&id).unwrap();
        assert_eq!(access.agents.commands[&Agent::Codex], "codex exec");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
