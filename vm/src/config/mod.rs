//! `stratum.toml`: the one typed reader of the toolchain's configuration
//! file (docs/configuration.md lists every key).
//!
//! Owns: finding the files that apply to a run — the operator's
//! (`--config FILE`, else `$STRATUM_HOME/stratum.toml`) and the workspace's
//! ([`load_near`]) — and merging them ([`merge`]: the operator's judge,
//! commands and timeouts win, the workspace may only narrow them); the
//! canonical text a run freezes ([`Config::to_toml`], [`Frozen`]) and what a
//! later process makes of it ([`of_run`]: the frozen copy, a warning naming
//! each key the files on disk now change); reading a file into a [`Config`] (serde over toml's spanned parse, through a
//! small deserializer of this module so that every error is typed and
//! carries the key's dotted path and line), and every rule about its values:
//! unknown tables, keys, agents and stakes are refused (with did-you-mean),
//! numbers are range-checked, strings that name something must not be empty,
//! the judge's URL must be http(s), and a `[judge]` that configures a runner
//! names both `url` and `model`. A [`Config`] that exists is valid: its
//! consumers (the cost model, the judge, the agent runner) never re-check it.
//! Must never: interpret the values (what a cost figure or a command means
//! belongs to its consumer), read anything but those two files, let a
//! workspace file widen the operator's, or panic on any text.
//!
//! The module's parts: this file holds the sections' types and finding,
//! reading and resolving the files; `merge` the operator/workspace merge;
//! `canonical` the frozen text; `fields` the value rules; `value_de` the
//! spanned deserializer; `error` the refusals; `tests` the unit tests.
//!
//! A section of a later issue (`[judges.NAME]`, `[commands.NAME]`, `[store]`)
//! is a new field of [`Config`] with its own struct here; everything else
//! keeps working because unknown sections are refused until they exist.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::connector::{Choice, ConnectorKind, Effort, PermissionMode, Sandbox};
use crate::plan::{Agent, Stakes};
use crate::suggest::suggest;

mod canonical;
mod error;
mod fields;
mod merge;
#[cfg(test)]
mod tests;
mod value_de;

use canonical::*;
use error::*;
pub use error::{ConfigError, Problem};
use fields::*;
pub use fields::{is_env_name, is_judge_name};
pub use merge::{Widening, merge};
use value_de::*;

/// The file's name.
pub const FILE_NAME: &str = "stratum.toml";
/// The judge's timeout when `[judge] timeout_ms` is left out: 60 s.
pub const DEFAULT_JUDGE_TIMEOUT_MS: u64 = 60_000;
/// The largest `[judge] timeout_ms`: 10 minutes.
pub const MAX_JUDGE_TIMEOUT_MS: u64 = 600_000;

// ---------------------------------------------------------------------------
// The sections

/// A whole `stratum.toml`. `Config::default()` is the empty file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[agents.NAME]`, one per agent of the language that is configured.
    #[serde(default, deserialize_with = "by_name")]
    pub agents: BTreeMap<Agent, AgentConfig>,
    /// `[judge]`: the default judge.
    #[serde(default)]
    pub judge: Option<JudgeSection>,
    /// `[judges.NAME]`: judges a `judged` predicate names with `judge: NAME`
    /// (language 1.1 X5); the same keys as `[judge]`.
    #[serde(default, deserialize_with = "judge_tables")]
    pub judges: BTreeMap<String, JudgeSection>,
    /// `[commands.NAME]`: the commands an `exec` check or an `evaluate`
    /// step may run (language 1.1 X12); a spec names them, never a shell
    /// string.
    #[serde(default, deserialize_with = "command_tables")]
    pub commands: BTreeMap<String, CommandSection>,
    /// `[store]`: where the run store is (read from the operator's file
    /// only; `STRATUM_STORE` wins over it).
    #[serde(default)]
    pub store: Option<StoreSection>,
}

/// `[store]`: the run store every command, server and UI of this operator
/// opens (`crate::store::StoreLocation`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `postgres://USER@HOST:PORT/DATABASE` (no password: `PGPASSWORD` or a
    /// `PGPASSFILE` gives it) or `sqlite:PATH`.
    #[serde(deserialize_with = "store_url")]
    pub url: String,
}

/// A command's timeout when `[commands.NAME] timeout_ms` is left out: 10 min.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 600_000;
/// The largest `[commands.NAME] timeout_ms`: 1 hour.
pub const MAX_COMMAND_TIMEOUT_MS: u64 = 3_600_000;
/// A command's output bound when `max_output_bytes` is left out: 1 MiB.
pub const DEFAULT_COMMAND_OUTPUT_BYTES: u64 = 1024 * 1024;
/// The largest `[commands.NAME] max_output_bytes`: 64 MiB.
pub const MAX_COMMAND_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;
/// The environment variables every command gets (when the runner has them),
/// besides the names its table lists.
pub const COMMAND_BASE_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];

/// `[commands.NAME]`: one command a spec may run by name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSection {
    /// The program and its fixed arguments (no shell): a non-empty array
    /// whose first element is a non-empty string.
    #[serde(deserialize_with = "command_argv")]
    pub argv: Vec<String>,
    /// How long one run may take, in ms (1..=3600000, default 600000).
    #[serde(default, deserialize_with = "command_timeout")]
    pub timeout_ms: Option<u64>,
    /// Environment variable names passed through besides `PATH`, `HOME`
    /// and `LANG`.
    #[serde(default, deserialize_with = "env_names")]
    pub env: Vec<String>,
    /// How many bytes of stdout (and, separately, stderr) are kept
    /// (1..=67108864, default 1048576); the rest is read and dropped.
    #[serde(default, deserialize_with = "output_bytes")]
    pub max_output_bytes: Option<u64>,
}

/// A declared command as the host runs it: `[commands.NAME]` with its
/// defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandConfig {
    /// The program and its fixed arguments.
    pub argv: Vec<String>,
    /// The config's bound on one run.
    pub timeout_ms: u64,
    /// Every variable name passed through: [`COMMAND_BASE_ENV`] and the
    /// table's `env`, sorted, without repeats.
    pub env: Vec<String>,
    /// The bound on stdout and on stderr.
    pub max_output_bytes: u64,
}

impl CommandSection {
    /// The command with its defaults applied.
    pub fn runner(&self) -> CommandConfig {
        let mut env: Vec<String> = COMMAND_BASE_ENV.iter().map(|s| (*s).to_owned()).collect();
        env.extend(self.env.iter().cloned());
        env.sort();
        env.dedup();
        CommandConfig {
            argv: self.argv.clone(),
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_COMMAND_TIMEOUT_MS),
            env,
            max_output_bytes: self
                .max_output_bytes
                .unwrap_or(DEFAULT_COMMAND_OUTPUT_BYTES),
        }
    }
}

/// What a cost figure of `stratum.toml` overrides (any left out keeps the
/// cost model's built-in value).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Figures {
    /// Probability that one attempt passes (0..=1).
    pub p_success: Option<f64>,
    /// Tokens per call (≥ 0).
    pub tokens: Option<f64>,
    /// Dollars per call (≥ 0).
    pub usd: Option<f64>,
    /// Milliseconds per call (≥ 0).
    pub ms: Option<f64>,
}

/// `[agents.NAME]`: the agent runner's command and the cost model's profile.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The command that runs a dispatch of this agent (`sh -c`, LANGUAGE.md
    /// E8); non-empty.
    #[serde(default, deserialize_with = "non_empty")]
    pub command: Option<String>,
    /// How long one run of `command` may take, in ms (≥ 1).
    #[serde(default, deserialize_with = "positive")]
    pub timeout_ms: Option<u64>,
    /// The CLI that runs a dispatch of this agent instead of `command`
    /// (issue 16: `claude-code` or `codex`, see [`crate::connector`]).
    #[serde(default, deserialize_with = "choice")]
    pub connector: Option<ConnectorKind>,
    /// Connector: the model (`--model`).
    #[serde(default, deserialize_with = "non_empty")]
    pub model: Option<String>,
    /// Connector `claude-code`: the tools allowed without asking (`--allowedTools`).
    #[serde(default, deserialize_with = "tool_list")]
    pub allowed_tools: Option<Vec<String>>,
    /// Connector `claude-code`: `--permission-mode`.
    #[serde(default, deserialize_with = "choice")]
    pub permission_mode: Option<PermissionMode>,
    /// Connector `claude-code`: `--max-turns` (≥ 1).
    #[serde(default, deserialize_with = "positive")]
    pub max_turns: Option<u64>,
    /// Connector `codex`: `--sandbox` (default `read-only`).
    #[serde(default, deserialize_with = "choice")]
    pub sandbox: Option<Sandbox>,
    /// Connector `codex`: the model's reasoning effort.
    #[serde(default, deserialize_with = "choice")]
    pub reasoning_effort: Option<Effort>,
    /// Cost model: probability that one attempt passes.
    #[serde(default, deserialize_with = "probability")]
    pub p_success: Option<f64>,
    /// Cost model: tokens per dispatch.
    #[serde(default, deserialize_with = "non_negative")]
    pub tokens: Option<f64>,
    /// Cost model: dollars per dispatch.
    #[serde(default, deserialize_with = "non_negative")]
    pub usd: Option<f64>,
    /// Cost model: milliseconds per dispatch.
    #[serde(default, deserialize_with = "non_negative")]
    pub ms: Option<f64>,
}

/// The keys only one connector takes: (key, connector, present?).
fn connector_keys(a: &AgentConfig) -> [(&'static str, ConnectorKind, bool); 5] {
    use ConnectorKind::{ClaudeCode, Codex};
    [
        ("allowed_tools", ClaudeCode, a.allowed_tools.is_some()),
        ("permission_mode", ClaudeCode, a.permission_mode.is_some()),
        ("max_turns", ClaudeCode, a.max_turns.is_some()),
        ("sandbox", Codex, a.sandbox.is_some()),
        ("reasoning_effort", Codex, a.reasoning_effort.is_some()),
    ]
}

impl AgentConfig {
    /// Why the table's keys do not fit together (`connector` with
    /// `command`, a connector's key without that connector), if they do not:
    /// (the key, the problem).
    fn misfit(&self) -> Option<(&'static str, String)> {
        if self.connector.is_some() && self.command.is_some() {
            return Some((
                "command",
                "a table has `command` (a shell command) or `connector` (a CLI), not both".into(),
            ));
        }
        if self.model.is_some() && self.connector.is_none() {
            return Some((
                "model",
                "`model` is a connector setting; add `connector = \"claude-code\"` or `\"codex\"` (a `command` chooses its model itself)".into(),
            ));
        }
        connector_keys(self)
            .into_iter()
            .find(|(_, kind, present)| *present && self.connector != Some(*kind))
            .map(|(key, kind, _)| {
                (
                    key,
                    format!(
                        "`{key}` is a setting of `connector = \"{}\"`{}",
                        kind.as_str(),
                        self.connector
                            .map(|c| format!(", not of `{}`", c.as_str()))
                            .unwrap_or_default()
                    ),
                )
            })
    }

    /// The connector and its settings, when the table names one.
    pub fn connector_settings(&self) -> Option<(ConnectorKind, crate::connector::Settings)> {
        let kind = self.connector?;
        Some((
            kind,
            crate::connector::Settings {
                model: self.model.clone(),
                allowed_tools: self.allowed_tools.clone().unwrap_or_default(),
                permission_mode: self.permission_mode,
                max_turns: self.max_turns,
                sandbox: self.sandbox,
                reasoning_effort: self.reasoning_effort,
                profile_usd: self.usd,
                profile_tokens: self.tokens,
            },
        ))
    }

    /// The cost figures of the table.
    pub fn figures(&self) -> Figures {
        Figures {
            p_success: self.p_success,
            tokens: self.tokens,
            usd: self.usd,
            ms: self.ms,
        }
    }
}

/// `[judge]`: the judge runner (`url`, `model`, ...) and the cost model's
/// figures for one judge call. A table with cost figures only configures no
/// runner (judged predicates then fail closed).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSection {
    /// OpenAI-compatible base URL (`http://` or `https://`).
    #[serde(default, deserialize_with = "http_url")]
    pub url: Option<String>,
    /// Model name.
    #[serde(default, deserialize_with = "non_empty")]
    pub model: Option<String>,
    /// Environment variable holding a bearer token.
    #[serde(default, deserialize_with = "non_empty")]
    pub api_key_env: Option<String>,
    /// Timeout of one call in ms (1..=600000, default 60000).
    #[serde(default, deserialize_with = "judge_timeout")]
    pub timeout_ms: Option<u64>,
    /// `[judge.stakes.TIER]` overrides.
    #[serde(default, deserialize_with = "by_name")]
    pub stakes: BTreeMap<Stakes, StakesConfig>,
    /// Cost model: probability that the judge agrees with a passing attempt.
    #[serde(default, deserialize_with = "probability")]
    pub p_success: Option<f64>,
    /// Cost model: tokens per judge call.
    #[serde(default, deserialize_with = "non_negative")]
    pub tokens: Option<f64>,
    /// Cost model: dollars per judge call.
    #[serde(default, deserialize_with = "non_negative")]
    pub usd: Option<f64>,
    /// Cost model: milliseconds per judge call.
    #[serde(default, deserialize_with = "non_negative")]
    pub ms: Option<f64>,
}

impl JudgeSection {
    /// The cost figures of the table.
    pub fn figures(&self) -> Figures {
        Figures {
            p_success: self.p_success,
            tokens: self.tokens,
            usd: self.usd,
            ms: self.ms,
        }
    }

    /// The runner with its defaults applied, when the table configures one.
    fn runner(&self) -> Option<JudgeConfig> {
        Some(JudgeConfig {
            url: self.url.clone()?,
            model: self.model.clone()?,
            api_key_env: self.api_key_env.clone(),
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_JUDGE_TIMEOUT_MS),
            per_stakes: self.stakes.clone(),
        })
    }

    /// Whether any key of the runner is present (then `url` and `model` are
    /// required).
    fn configures_runner(&self) -> bool {
        self.url.is_some()
            || self.model.is_some()
            || self.api_key_env.is_some()
            || self.timeout_ms.is_some()
            || !self.stakes.is_empty()
    }
}

/// Per-stakes overrides (`[judge.stakes.paranoid]`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StakesConfig {
    /// The model for this tier (non-empty).
    #[serde(default, deserialize_with = "non_empty")]
    pub model: Option<String>,
    /// The temperature for this tier (0..=2).
    #[serde(default, deserialize_with = "temperature")]
    pub temperature: Option<f64>,
}

/// The judge runner as the host calls it: `[judge]` with its defaults
/// applied.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeConfig {
    /// OpenAI-compatible base URL.
    pub url: String,
    /// Default model.
    pub model: String,
    /// Environment variable holding a bearer token.
    pub api_key_env: Option<String>,
    /// Timeout of one call.
    pub timeout_ms: u64,
    /// Per-stakes overrides.
    pub per_stakes: BTreeMap<Stakes, StakesConfig>,
}

impl Config {
    /// Reads the text of a `stratum.toml`.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let doc = DeTable::parse(text).map_err(|e| ConfigError::Syntax {
            file: FILE_NAME.to_owned(),
            line: e.span().map(|s| line_of(text, s.start)),
            message: e.message().trim_end().to_owned(),
        })?;
        let value = Spanned::new(doc.span(), DeValue::Table(doc.into_inner()));
        let config = Config::deserialize(ValueDe(&value)).map_err(|e| e.located(text))?;
        for (agent, a) in &config.agents {
            if let Some((key, problem)) = a.misfit() {
                return Err(ConfigError::Key {
                    file: FILE_NAME.to_owned(),
                    path: format!("agents.{}.{key}", agent.as_str()),
                    line: None,
                    problem: Problem::Other(problem),
                });
            }
        }
        let named = config
            .judges
            .iter()
            .map(|(n, j)| (format!("judges.{n}"), j));
        for (path, j) in config
            .judge
            .iter()
            .map(|j| ("judge".to_owned(), j))
            .chain(named)
        {
            if !j.configures_runner() {
                continue;
            }
            for (key, present) in [("url", j.url.is_some()), ("model", j.model.is_some())] {
                if !present {
                    return Err(ConfigError::Key {
                        file: FILE_NAME.to_owned(),
                        path,
                        line: None,
                        problem: Problem::RunnerNeeds(key),
                    });
                }
            }
        }
        Ok(config)
    }

    /// The default judge runner, when `[judge]` configures one (`None`:
    /// judged predicates without `judge:` fail closed).
    pub fn judge_runner(&self) -> Option<JudgeConfig> {
        self.judge.as_ref().and_then(JudgeSection::runner)
    }

    /// The runner of the judge named `name` (`[judges.NAME]`), when that
    /// table configures one.
    pub fn named_judge_runner(&self, name: &str) -> Option<JudgeConfig> {
        self.judges.get(name).and_then(JudgeSection::runner)
    }

    /// Every judge runner: `None` is the default (`[judge]`), `Some(NAME)`
    /// a `[judges.NAME]` table.
    pub fn judge_runners(&self) -> BTreeMap<Option<String>, JudgeConfig> {
        let named = self.judges.keys().map(|n| Some(n.clone()));
        std::iter::once(None)
            .chain(named)
            .filter_map(|n| {
                let r = match &n {
                    None => self.judge_runner(),
                    Some(name) => self.named_judge_runner(name),
                };
                Some((n, r?))
            })
            .collect()
    }

    /// The judge table a predicate's judge name reads its cost figures
    /// from: `[judges.NAME]`, else (no name, or a name not configured) `[judge]`.
    pub fn judge_section(&self, name: Option<&str>) -> Option<&JudgeSection> {
        name.and_then(|n| self.judges.get(n))
            .or(self.judge.as_ref())
    }

    /// The declared command `name` (`[commands.NAME]`) with its defaults.
    pub fn command(&self, name: &str) -> Option<CommandConfig> {
        self.commands.get(name).map(CommandSection::runner)
    }

    /// The agent commands: agent → command line (`[agents.NAME] command`).
    pub fn commands(&self) -> BTreeMap<Agent, String> {
        self.agents
            .iter()
            .filter_map(|(a, c)| Some((*a, c.command.clone()?)))
            .collect()
    }

    /// How long one command of `agent` may run (`[agents.NAME] timeout_ms`,
    /// else [`crate::agent::DEFAULT_TIMEOUT`]).
    pub fn agent_timeout(&self, agent: Agent) -> std::time::Duration {
        self.agents.get(&agent).and_then(|c| c.timeout_ms).map_or(
            crate::agent::DEFAULT_TIMEOUT,
            std::time::Duration::from_millis,
        )
    }
}

/// Reads the file at `path`.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = read_bounded(path).map_err(|message| ConfigError::Io {
        path: path.to_path_buf(),
        message,
    })?;
    Config::from_toml(&text).map_err(|e| e.in_file(path))
}

/// The largest configuration file read: 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Reads a configuration file: a regular file (checked on the opened
/// descriptor, which is opened without blocking, so a FIFO cannot hang the
/// reader) of at most [`MAX_CONFIG_BYTES`] of UTF-8.
fn read_bounded(path: &Path) -> Result<String, String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| e.to_string())?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "the file is larger than the limit of {MAX_CONFIG_BYTES} bytes for a configuration file"
        ));
    }
    String::from_utf8(bytes)
        .map_err(|e| format!("not valid UTF-8 (at byte {})", e.utf8_error().valid_up_to()))
}

/// The configuration that applies to a workspace: `stratum.toml` in `root`,
/// else in the current directory, else the empty configuration.
/// (The workspace's file alone: a run's configuration is [`for_run`].)
pub fn load_near(root: Option<&Path>) -> Result<Config, ConfigError> {
    workspace_path(root).map_or(Ok(Config::default()), |p| load_file(&p))
}

/// The workspace's file as [`load_near`] finds it, or `None` when there is
/// no `stratum.toml` there (the checker's environment input tells "no file"
/// from "an empty file").
pub fn near(root: Option<&Path>) -> Result<Option<Config>, ConfigError> {
    workspace_path(root).map(|p| load_file(&p)).transpose()
}

/// The workspace's file of a spec file, as [`near`] finds it from the
/// spec's directory (`stratumc check`, the language server and MCP share
/// this: the `stratum.toml` beside the spec, else in the current directory).
pub fn near_spec(spec: &Path) -> Result<Option<Config>, ConfigError> {
    near(spec.parent().filter(|d| !d.as_os_str().is_empty()))
}

// ---------------------------------------------------------------------------
// The operator's file, the workspace's file, and the configuration frozen
// into a run

/// Where an operator's `stratum.toml` is looked for when no `--config FILE`
/// is given: `$STRATUM_HOME/stratum.toml` (the state directory of the run
/// store, `~/.stratum` by default).
pub fn operator_path(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => crate::store::default_home()
            .ok()
            .map(|h| h.join(FILE_NAME))
            .filter(|p| p.is_file()),
    }
}

/// The operator's configuration: `explicit` (`--config FILE`, which must
/// exist), else `$STRATUM_HOME/stratum.toml` when it exists, else none.
pub fn load_operator(explicit: Option<&Path>) -> Result<Option<(PathBuf, Config)>, ConfigError> {
    operator_path(explicit)
        .map(|p| load_file(&p).map(|c| (p, c)))
        .transpose()
}

/// The workspace's file: `stratum.toml` in `root`, else in the current
/// directory.
fn workspace_path(root: Option<&Path>) -> Option<PathBuf> {
    root.map(|r| r.join(FILE_NAME))
        .into_iter()
        .chain(std::iter::once(PathBuf::from(FILE_NAME)))
        .find(|p| p.is_file())
}

/// Whether two paths name one file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The configuration of a run, with the files it was read from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolved {
    /// The operator's and the workspace's files merged ([`merge`]).
    pub config: Config,
    /// The operator's file, if any.
    pub operator: Option<PathBuf>,
    /// The workspace's file, if any (and not the operator's own).
    pub workspace: Option<PathBuf>,
}

/// What a run records of its configuration at start: the canonical text
/// ([`Config::to_toml`]), its blake3 hash, and the files it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Frozen {
    /// Canonical `stratum.toml` text of the merged configuration.
    pub text: String,
    /// blake3 of `text`, hex.
    pub hash: String,
    /// The files read (operator first), as shown.
    pub sources: Vec<String>,
}

impl Resolved {
    /// The configuration as a run records it.
    pub fn freeze(&self) -> Frozen {
        let text = self.config.to_toml();
        Frozen {
            hash: hash_of(&text),
            text,
            sources: self.sources(),
        }
    }

    /// The files read, operator first, as shown in messages.
    pub fn sources(&self) -> Vec<String> {
        [&self.operator, &self.workspace]
            .into_iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect()
    }
}

/// The blake3 hash (hex) of a frozen configuration's text.
pub fn hash_of(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// The configuration a new run gets: the operator's file (`operator`, else
/// `$STRATUM_HOME/stratum.toml`) merged with the workspace's
/// (`stratum.toml` in `root`, else in the current directory). A workspace
/// file that would widen the operator's is refused ([`ConfigError::Widens`]).
pub fn for_run(operator: Option<&Path>, root: Option<&Path>) -> Result<Resolved, ConfigError> {
    let op = load_operator(operator)?;
    let ws_path =
        workspace_path(root).filter(|w| op.as_ref().is_none_or(|(o, _)| !same_file(o, w)));
    let ws = ws_path.map(|p| load_file(&p).map(|c| (p, c))).transpose()?;
    Ok(match (op, ws) {
        (None, None) => Resolved::default(),
        (None, Some((w, c))) => Resolved {
            config: c,
            operator: None,
            workspace: Some(w),
        },
        (Some((o, c)), None) => Resolved {
            config: c,
            operator: Some(o),
            workspace: None,
        },
        (Some((o, oc)), Some((w, wc))) => {
            let config = merge(&oc, &wc).map_err(|widenings| ConfigError::Widens {
                operator: o.clone(),
                workspace: w.clone(),
                widenings,
            })?;
            Resolved {
                config,
                operator: Some(o),
                workspace: Some(w),
            }
        }
    })
}

/// The configuration of a stored run, and what to warn about.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The configuration the run's host and agent commands are built from.
    pub config: Config,
    /// Warnings for the operator: the files on disk differ from the frozen
    /// copy (naming each key that changed), or the run predates freezing.
    pub warnings: Vec<String>,
}

/// The configuration of a stored run: its `frozen` copy (the run header's
/// text), whatever the files on disk now say. Each way the files now differ
/// from it is named in a warning; they are ignored. A run started before
/// configurations were frozen (`frozen` is `None`) uses the files as they
/// are now ([`for_run`]), with a warning saying so.
pub fn of_run(
    run_id: &str,
    frozen: Option<&str>,
    operator: Option<&Path>,
    root: Option<&Path>,
) -> Result<RunConfig, ConfigError> {
    let Some(text) = frozen else {
        let now = for_run(operator, root)?;
        let warning = format!(
            "run {run_id} was started before configurations were frozen into runs; it uses {} as it is now",
            shown_sources(&now.sources())
        );
        return Ok(RunConfig {
            config: now.config,
            warnings: vec![warning],
        });
    };
    let config = Config::from_toml(text).map_err(|e| e.in_run(run_id))?;
    let keep = format!(
        "ignored: the run keeps the configuration frozen at its start (configHash {})",
        &hash_of(text)[..16]
    );
    let warnings = match for_run(operator, root) {
        Ok(now) if now.config == config => Vec::new(),
        Ok(now) => vec![format!(
            "run {run_id}: {} differs from the configuration the run started with ({}); {keep}",
            shown_sources(&now.sources()),
            config.differences(&now.config).join("; ")
        )],
        Err(e) => vec![format!(
            "run {run_id}: the configuration on disk is now refused ({e}); {keep}"
        )],
    };
    Ok(RunConfig { config, warnings })
}

fn shown_sources(sources: &[String]) -> String {
    match sources {
        [] => "no stratum.toml".to_owned(),
        files => files.join(" and "),
    }
}
