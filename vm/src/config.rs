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

// ---------------------------------------------------------------------------
// The merge: the operator's file wins, the workspace's may only narrow it

/// One key by which a workspace file would widen the operator's.
#[derive(Debug, Clone, PartialEq)]
pub struct Widening {
    /// Dotted path of the key (`judge.url`, `agents.codex.command`).
    pub path: String,
    /// The workspace's value, as written in TOML.
    pub workspace: String,
    /// The operator's value (`None`: the operator configures none).
    pub operator: Option<String>,
    /// What the workspace may do with the key instead.
    pub rule: &'static str,
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.operator.as_deref().unwrap_or("none");
        write!(
            f,
            "`{}` = {} (the operator's: {op}; {})",
            self.path, self.workspace, self.rule
        )
    }
}

const SAME: &str = "it may only repeat the operator's value";
const NO_ADD: &str = "it cannot add one";
const SHORTER: &str = "it may only shorten it";

/// Merges the operator's configuration with a workspace's: the operator's
/// judge, agent commands and timeouts stand, and the workspace may only
/// narrow them — repeat a value unchanged, shorten a timeout, or name a
/// subset of the operator's commands (then only those agents keep one).
/// Any other judge or command key of the workspace is a [`Widening`]; all of
/// them are returned. Cost figures are estimates, not trust: the operator's
/// win, the workspace's fill the gaps.
pub fn merge(operator: &Config, workspace: &Config) -> Result<Config, Vec<Widening>> {
    let mut out = operator.clone();
    let mut widenings = Vec::new();
    merge_agents(&mut out, operator, workspace, &mut widenings);
    if let Some(w) = &workspace.judge {
        let judge = out.judge.get_or_insert_with(JudgeSection::default);
        merge_judge("judge", judge, operator.judge.as_ref(), w, &mut widenings);
    }
    for (name, w) in &workspace.judges {
        let judge = out.judges.entry(name.clone()).or_default();
        let prefix = format!("judges.{name}");
        merge_judge(&prefix, judge, operator.judges.get(name), w, &mut widenings);
    }
    for (name, w) in &workspace.commands {
        merge_command(
            &mut out,
            name,
            operator.commands.get(name),
            w,
            &mut widenings,
        );
    }
    if widenings.is_empty() {
        Ok(out)
    } else {
        Err(widenings)
    }
}

fn merge_agents(out: &mut Config, operator: &Config, workspace: &Config, bad: &mut Vec<Widening>) {
    let allowed = operator.commands();
    let named = workspace.commands();
    for (agent, command) in &named {
        if allowed.get(agent) != Some(command) {
            bad.push(Widening {
                path: format!("agents.{}.command", agent.as_str()),
                workspace: quote(command),
                operator: allowed.get(agent).map(|c| quote(c)),
                rule: if allowed.contains_key(agent) {
                    SAME
                } else {
                    NO_ADD
                },
            });
        }
    }
    for (agent, w) in &workspace.agents {
        let theirs = operator.agents.get(agent).cloned().unwrap_or_default();
        connector_widenings(agent.as_str(), w, &theirs, bad);
        let o = out.agents.entry(*agent).or_default();
        if let Some(t) = w.timeout_ms {
            let limit = operator.agent_timeout(*agent).as_millis() as u64;
            if t > limit {
                bad.push(Widening {
                    path: format!("agents.{}.timeout_ms", agent.as_str()),
                    workspace: t.to_string(),
                    operator: Some(limit.to_string()),
                    rule: SHORTER,
                });
            } else {
                o.timeout_ms = Some(t);
            }
        }
        fill_figures(o, w);
    }
    if !named.is_empty() {
        for (agent, o) in out.agents.iter_mut() {
            if !named.contains_key(agent) {
                o.command = None;
            }
        }
    }
}

/// A workspace's connector keys may only repeat the operator's (a
/// connector runs a CLI with the operator's credentials, like `command`).
fn connector_widenings(agent: &str, w: &AgentConfig, o: &AgentConfig, bad: &mut Vec<Widening>) {
    let (mut wk, mut ok) = (Vec::new(), Vec::new());
    for (c, keys) in [(w, &mut wk), (o, &mut ok)] {
        put(keys, "connector", &c.connector, |c| quote(c.as_str()));
        put(keys, "model", &c.model, |s| quote(s));
        put(keys, "allowed_tools", &c.allowed_tools, |t| {
            format!("{t:?}")
        });
        put(keys, "permission_mode", &c.permission_mode, |c| {
            quote(c.as_str())
        });
        put(keys, "max_turns", &c.max_turns, u64::to_string);
        put(keys, "sandbox", &c.sandbox, |c| quote(c.as_str()));
        put(keys, "reasoning_effort", &c.reasoning_effort, |c| {
            quote(c.as_str())
        });
    }
    for (key, value) in wk {
        let op = ok.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
        if op.as_ref() != Some(&value) {
            bad.push(Widening {
                path: format!("agents.{agent}.{key}"),
                workspace: value,
                rule: if op.is_some() { SAME } else { NO_ADD },
                operator: op,
            });
        }
    }
}

fn fill_figures(o: &mut AgentConfig, w: &AgentConfig) {
    o.p_success = o.p_success.or(w.p_success);
    o.tokens = o.tokens.or(w.tokens);
    o.usd = o.usd.or(w.usd);
    o.ms = o.ms.or(w.ms);
}

/// One judge table (`prefix`: `judge` or `judges.NAME`): the operator's
/// runner stands, the workspace may repeat it or shorten its timeout.
fn merge_judge(
    prefix: &str,
    out: &mut JudgeSection,
    operator: Option<&JudgeSection>,
    w: &JudgeSection,
    bad: &mut Vec<Widening>,
) {
    let empty = JudgeSection::default();
    let o = operator.unwrap_or(&empty);
    for (key, theirs, ours) in [
        ("url", &w.url, &o.url),
        ("model", &w.model, &o.model),
        ("api_key_env", &w.api_key_env, &o.api_key_env),
    ] {
        if let Some(v) = theirs
            && ours.as_ref() != Some(v)
        {
            bad.push(judge_widening(
                prefix,
                key,
                quote(v),
                ours.as_deref().map(quote),
                o,
            ));
        }
    }
    if let Some(t) = w.timeout_ms {
        let limit = o.timeout_ms.unwrap_or(DEFAULT_JUDGE_TIMEOUT_MS);
        if !o.configures_runner() || t > limit {
            let ours = o.configures_runner().then(|| limit.to_string());
            bad.push(judge_widening(prefix, "timeout_ms", t.to_string(), ours, o));
        } else {
            out.timeout_ms = Some(t);
        }
    }
    for (tier, ws) in &w.stakes {
        let os = o.stakes.get(tier);
        let model = os.and_then(|s| s.model.clone()).or_else(|| o.model.clone());
        let temp = os.and_then(|s| s.temperature).unwrap_or(0.0);
        let key = format!("stakes.{}", tier.as_str());
        if let Some(m) = &ws.model
            && model.as_ref() != Some(m)
        {
            let ours = model.as_deref().map(quote);
            bad.push(judge_widening(
                prefix,
                &format!("{key}.model"),
                quote(m),
                ours,
                o,
            ));
        }
        if let Some(t) = ws.temperature
            && (!o.configures_runner() || t != temp)
        {
            let ours = o.configures_runner().then(|| format!("{temp:?}"));
            bad.push(judge_widening(
                prefix,
                &format!("{key}.temperature"),
                format!("{t:?}"),
                ours,
                o,
            ));
        }
    }
    out.p_success = out.p_success.or(w.p_success);
    out.tokens = out.tokens.or(w.tokens);
    out.usd = out.usd.or(w.usd);
    out.ms = out.ms.or(w.ms);
}

/// One `[commands.NAME]` of the workspace: it must repeat the operator's
/// `argv` exactly; it may shorten `timeout_ms`, lower `max_output_bytes` and
/// pass a subset of the operator's `env` names. A command the operator does
/// not declare cannot be added. Commands the workspace leaves out stay as
/// the operator declares them.
fn merge_command(
    out: &mut Config,
    name: &str,
    operator: Option<&CommandSection>,
    w: &CommandSection,
    bad: &mut Vec<Widening>,
) {
    let prefix = format!("commands.{name}");
    let list = |v: &[String]| {
        toml::Value::Array(v.iter().map(|s| s.as_str().into()).collect()).to_string()
    };
    let Some(o) = operator else {
        bad.push(Widening {
            path: format!("{prefix}.argv"),
            workspace: list(&w.argv),
            operator: None,
            rule: "the operator declares no such command, so it cannot add one",
        });
        return;
    };
    let mut narrowed = o.clone();
    if w.argv != o.argv {
        bad.push(Widening {
            path: format!("{prefix}.argv"),
            workspace: list(&w.argv),
            operator: Some(list(&o.argv)),
            rule: SAME,
        });
    }
    let bounds = [
        (
            "timeout_ms",
            w.timeout_ms,
            o.timeout_ms.unwrap_or(DEFAULT_COMMAND_TIMEOUT_MS),
        ),
        (
            "max_output_bytes",
            w.max_output_bytes,
            o.max_output_bytes.unwrap_or(DEFAULT_COMMAND_OUTPUT_BYTES),
        ),
    ];
    for (key, theirs, limit) in bounds {
        match theirs {
            Some(t) if t > limit => bad.push(Widening {
                path: format!("{prefix}.{key}"),
                workspace: t.to_string(),
                operator: Some(limit.to_string()),
                rule: "it may only lower it",
            }),
            Some(t) if key == "timeout_ms" => narrowed.timeout_ms = Some(t),
            Some(t) => narrowed.max_output_bytes = Some(t),
            None => {}
        }
    }
    let extra: Vec<String> = w
        .env
        .iter()
        .filter(|n| !o.env.contains(n))
        .cloned()
        .collect();
    if extra.is_empty() {
        narrowed.env = w.env.clone();
    } else {
        bad.push(Widening {
            path: format!("{prefix}.env"),
            workspace: list(&extra),
            operator: Some(list(&o.env)),
            rule: "it may only pass a subset of the operator's names",
        });
    }
    out.commands.insert(name.to_owned(), narrowed);
}

fn judge_widening(
    prefix: &str,
    key: &str,
    workspace: String,
    operator: Option<String>,
    o: &JudgeSection,
) -> Widening {
    let rule = if !o.configures_runner() {
        "the operator configures no judge, so it cannot configure one"
    } else if key == "timeout_ms" {
        SHORTER
    } else {
        SAME
    };
    Widening {
        path: format!("{prefix}.{key}"),
        workspace,
        operator,
        rule,
    }
}

// ---------------------------------------------------------------------------
// The canonical text (what a run freezes) and differences between two files

/// A value as TOML writes it.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The file's tables in a fixed order: (table, [(key, TOML value)]).
type Tables = Vec<(String, Vec<(&'static str, String)>)>;

fn put<T>(
    keys: &mut Vec<(&'static str, String)>,
    key: &'static str,
    v: &Option<T>,
    f: impl Fn(&T) -> String,
) {
    if let Some(v) = v {
        keys.push((key, f(v)));
    }
}

fn float(f: &f64) -> String {
    format!("{f:?}")
}

/// The tables of one judge (`table`: `judge` or `judges.NAME`).
fn judge_tables_of(table: &str, j: &JudgeSection, out: &mut Tables) {
    let mut k = Vec::new();
    put(&mut k, "url", &j.url, |s| quote(s));
    put(&mut k, "model", &j.model, |s| quote(s));
    put(&mut k, "api_key_env", &j.api_key_env, |s| quote(s));
    put(&mut k, "timeout_ms", &j.timeout_ms, u64::to_string);
    put(&mut k, "p_success", &j.p_success, float);
    put(&mut k, "tokens", &j.tokens, float);
    put(&mut k, "usd", &j.usd, float);
    put(&mut k, "ms", &j.ms, float);
    out.push((table.to_owned(), k));
    for (tier, s) in &j.stakes {
        let mut k = Vec::new();
        put(&mut k, "model", &s.model, |s| quote(s));
        put(&mut k, "temperature", &s.temperature, float);
        out.push((format!("{table}.stakes.{}", tier.as_str()), k));
    }
}

impl Config {
    fn tables(&self) -> Tables {
        let mut out = Tables::new();
        for (agent, a) in &self.agents {
            let mut k = Vec::new();
            put(&mut k, "command", &a.command, |s| quote(s));
            put(&mut k, "timeout_ms", &a.timeout_ms, u64::to_string);
            put(&mut k, "connector", &a.connector, |c| quote(c.as_str()));
            put(&mut k, "model", &a.model, |s| quote(s));
            put(&mut k, "allowed_tools", &a.allowed_tools, |t| {
                let items: Vec<String> = t.iter().map(|s| quote(s)).collect();
                format!("[{}]", items.join(", "))
            });
            put(&mut k, "permission_mode", &a.permission_mode, |c| {
                quote(c.as_str())
            });
            put(&mut k, "max_turns", &a.max_turns, u64::to_string);
            put(&mut k, "sandbox", &a.sandbox, |c| quote(c.as_str()));
            put(&mut k, "reasoning_effort", &a.reasoning_effort, |c| {
                quote(c.as_str())
            });
            put(&mut k, "p_success", &a.p_success, float);
            put(&mut k, "tokens", &a.tokens, float);
            put(&mut k, "usd", &a.usd, float);
            put(&mut k, "ms", &a.ms, float);
            out.push((format!("agents.{}", agent.as_str()), k));
        }
        if let Some(j) = &self.judge {
            judge_tables_of("judge", j, &mut out);
        }
        for (name, j) in &self.judges {
            judge_tables_of(&format!("judges.{name}"), j, &mut out);
        }
        for (name, c) in &self.commands {
            let list = |v: &Vec<String>| {
                toml::Value::Array(v.iter().map(|s| s.as_str().into()).collect()).to_string()
            };
            let mut k = vec![("argv", list(&c.argv))];
            put(&mut k, "timeout_ms", &c.timeout_ms, u64::to_string);
            if !c.env.is_empty() {
                k.push(("env", list(&c.env)));
            }
            put(
                &mut k,
                "max_output_bytes",
                &c.max_output_bytes,
                u64::to_string,
            );
            out.push((format!("commands.{name}"), k));
        }
        out
    }

    /// The canonical `stratum.toml` text of this configuration (tables and
    /// keys in a fixed order): what a run freezes, and what its hash is
    /// taken of. [`Config::from_toml`] reads it back to an equal `Config`.
    pub fn to_toml(&self) -> String {
        let mut text = String::new();
        for (table, keys) in self.tables() {
            text.push_str(&format!("[{table}]\n"));
            for (k, v) in keys {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        text
    }

    /// Every key whose value differs between `self` and `now`, as
    /// `` `judge.url`: "a" → "b" `` (`none` where a side has no value).
    pub fn differences(&self, now: &Config) -> Vec<String> {
        let flat = |c: &Config| -> BTreeMap<String, String> {
            c.tables()
                .into_iter()
                .flat_map(|(t, keys)| keys.into_iter().map(move |(k, v)| (format!("{t}.{k}"), v)))
                .collect()
        };
        let (was, is) = (flat(self), flat(now));
        let keys: std::collections::BTreeSet<&String> = was.keys().chain(is.keys()).collect();
        keys.into_iter()
            .filter(|k| was.get(*k) != is.get(*k))
            .map(|k| {
                let side = |m: &BTreeMap<String, String>| {
                    m.get(k).cloned().unwrap_or_else(|| "none".into())
                };
                format!("`{k}`: {} → {}", side(&was), side(&is))
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Errors

/// Why a `stratum.toml` was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        message: String,
    },
    /// The text is not TOML.
    #[error("invalid TOML in {file}{}: {message}", at_line(*line))]
    Syntax {
        /// The file as shown (`stratum.toml` when read from text).
        file: String,
        /// 1-based line of the error, when known.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A key or value breaks a rule of the file.
    #[error("{file}{}: {}", at_line(*line), problem.describe(path))]
    Key {
        /// The file as shown (`stratum.toml` when read from text).
        file: String,
        /// Dotted path of the key (`agents.claude.p_success`).
        path: String,
        /// 1-based line of the key or value, when known.
        line: Option<usize>,
        /// What is wrong.
        problem: Problem,
    },
    /// A workspace file would widen the operator's configuration.
    #[error(
        "{} may only narrow the operator's configuration {}, but it widens it: {}; remove {} from {}, or change the operator's file",
        workspace.display(),
        operator.display(),
        widenings.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("; "),
        if widenings.len() == 1 { "that key" } else { "those keys" },
        workspace.display()
    )]
    Widens {
        /// The operator's file.
        operator: PathBuf,
        /// The workspace's file.
        workspace: PathBuf,
        /// Every key that widens.
        widenings: Vec<Widening>,
    },
}

impl ConfigError {
    /// The error as seen in a run's frozen configuration.
    fn in_run(mut self, run_id: &str) -> ConfigError {
        if let ConfigError::Syntax { file, .. } | ConfigError::Key { file, .. } = &mut self {
            *file = format!("the configuration frozen into run {run_id}");
        }
        self
    }

    /// The error as seen in the file at `path`.
    fn in_file(mut self, path: &Path) -> ConfigError {
        if let ConfigError::Syntax { file, .. } | ConfigError::Key { file, .. } = &mut self {
            *file = path.display().to_string();
        }
        self
    }
}

/// What is wrong with one key of `stratum.toml`.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// A table or key the file does not have.
    UnknownKey {
        /// The keys accepted there.
        expected: &'static [&'static str],
    },
    /// A table named after an agent or stakes tier that does not exist.
    UnknownName {
        /// What is named (`agent`, `stakes`).
        what: &'static str,
        /// The names of the language.
        expected: &'static [&'static str],
    },
    /// A value of the wrong type.
    WrongType {
        /// What the key takes (`a number`).
        expected: &'static str,
        /// What was found (`a string`).
        found: &'static str,
    },
    /// A value outside what the key accepts.
    Invalid {
        /// What the key accepts (`between 0 and 1`).
        expected: String,
        /// The value found.
        found: String,
    },
    /// A required key is missing.
    Missing(&'static str),
    /// A `[judge]` that configures a runner lacks `url` or `model`.
    RunnerNeeds(&'static str),
    /// Any other refusal of the reader.
    Other(String),
}

impl Problem {
    fn describe(&self, path: &str) -> String {
        let leaf = path.rsplit('.').next().unwrap_or(path);
        match self {
            Problem::UnknownKey { expected } => {
                let what = if path.contains('.') { "key" } else { "table" };
                format!(
                    "unknown {what} `{path}`; expected one of {}{}",
                    quoted(expected),
                    mean(leaf, expected)
                )
            }
            Problem::UnknownName { what, expected } => format!(
                "unknown {what} `{leaf}` in `[{path}]`; the {what} names are {}{}",
                quoted(expected),
                mean(leaf, expected)
            ),
            Problem::WrongType { expected, found } => {
                format!("`{path}` must be {expected}, found {found}")
            }
            Problem::Invalid { expected, found } => {
                format!("`{path}` must be {expected}, found {found}")
            }
            Problem::Missing(key) => format!("`{path}.{key}` is missing"),
            Problem::RunnerNeeds(key) => format!(
                "`[{path}]` configures a judge runner but has no `{key}`: give both `url` and `model`, or only cost figures"
            ),
            Problem::Other(text) => format!("`{path}`: {text}"),
        }
    }
}

fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(", line {l}")).unwrap_or_default()
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mean(name: &str, expected: &[&str]) -> String {
    suggest(name, expected.iter().copied())
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

// ---------------------------------------------------------------------------
// Value rules (one each)

/// A number the key's rule refuses.
fn refused<E: de::Error>(n: f64, expected: &str) -> E {
    E::invalid_value(de::Unexpected::Float(n), &expected)
}

fn number<'de, D: Deserializer<'de>>(
    d: D,
    ok: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<Option<f64>, D::Error> {
    let n = f64::deserialize(d)?;
    if ok(n) {
        Ok(Some(n))
    } else {
        Err(refused(n, expected))
    }
}

fn probability<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |p| (0.0..=1.0).contains(&p), "between 0 and 1")
}

fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, |n| n.is_finite() && n >= 0.0, "a finite number ≥ 0")
}

fn temperature<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(
        d,
        |t| t.is_finite() && (0.0..=2.0).contains(&t),
        "between 0 and 2",
    )
}

fn integer<'de, D: Deserializer<'de>>(
    d: D,
    range: RangeInclusive<u64>,
) -> Result<Option<u64>, D::Error> {
    let n = u64::deserialize(d)?;
    if range.contains(&n) {
        Ok(Some(n))
    } else {
        let expected = match range.end() {
            &u64::MAX => format!("at least {}", range.start()),
            end => format!("between {} and {end}", range.start()),
        };
        Err(de::Error::invalid_value(
            de::Unexpected::Unsigned(n),
            &expected.as_str(),
        ))
    }
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=u64::MAX)
}

fn judge_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_JUDGE_TIMEOUT_MS)
}

/// One of a [`Choice`]'s names.
fn choice<'de, D: Deserializer<'de>, T: Choice>(d: D) -> Result<Option<T>, D::Error> {
    let s = String::deserialize(d)?;
    T::from_name(&s).map(Some).ok_or_else(|| {
        let names = quoted(T::NAMES);
        de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &format!("a {} ({names}){}", T::WHAT, mean(&s, T::NAMES)).as_str(),
        )
    })
}

/// A list of non-empty tool names (`["Read", "Bash(git diff:*)"]`).
fn tool_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if let Some(bad) = v.iter().find(|t| t.trim().is_empty() || t.contains(',')) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(bad),
            &"a list of tool names, each non-empty and without a comma",
        ));
    }
    Ok(Some(v))
}

fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a non-empty string",
        ));
    }
    Ok(Some(s))
}

fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if !(s.starts_with("http://") || s.starts_with("https://")) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a URL that starts with http:// or https://",
        ));
    }
    Ok(Some(s))
}

/// Whether `name` can name a judge: a letter, then letters, digits, `_` or
/// `-` (a bare TOML key, and a name a spec can write).
pub fn is_judge_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn command_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_COMMAND_TIMEOUT_MS)
}

fn output_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d, 1..=MAX_COMMAND_OUTPUT_BYTES)
}

/// `argv`: a non-empty array of strings whose program is not empty.
fn command_argv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    match argv.first() {
        Some(program) if !program.trim().is_empty() => Ok(argv),
        _ => Err(de::Error::invalid_value(
            de::Unexpected::Seq,
            &"a non-empty array whose first element names the program, e.g. [\"python3\", \"-m\", \"pytest\"]",
        )),
    }
}

/// Whether `name` can name an environment variable passed to a command:
/// a letter or `_`, then letters, digits or `_`.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `env`: variable names.
fn env_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    if let Some(bad) = names.iter().find(|n| !is_env_name(n)) {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(bad),
            &"an environment variable name: a letter or `_`, then letters, digits or `_`",
        ));
    }
    Ok(names)
}

/// `[commands.NAME]`: a table of command tables keyed by command names
/// (the same names as judges).
fn command_tables<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, CommandSection>, D::Error> {
    struct Tables;
    impl<'de> Visitor<'de> for Tables {
        type Value = BTreeMap<String, CommandSection>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[commands.NAME]` tables")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if !is_judge_name(&k) {
                    return Err(de::Error::invalid_value(
                        de::Unexpected::Str(&k),
                        &"a command name: a letter, then letters, digits, `_` or `-`",
                    ));
                }
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables)
}

/// `[judges.NAME]`: a table of judge tables keyed by judge names.
fn judge_tables<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, JudgeSection>, D::Error> {
    struct Tables;
    impl<'de> Visitor<'de> for Tables {
        type Value = BTreeMap<String, JudgeSection>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[judges.NAME]` tables")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if !is_judge_name(&k) {
                    return Err(de::Error::invalid_value(
                        de::Unexpected::Str(&k),
                        &"a judge name: a letter, then letters, digits, `_` or `-`",
                    ));
                }
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables)
}

/// The enums whose tables are keyed by name.
trait Named: Sized + Copy + Ord {
    const WHAT: &'static str;
    const NAMES: &'static [&'static str];
    fn from_name(name: &str) -> Option<Self>;
}

impl Named for Agent {
    const WHAT: &'static str = Agent::WHAT;
    const NAMES: &'static [&'static str] = Agent::NAMES;
    fn from_name(name: &str) -> Option<Self> {
        Agent::from_name(name)
    }
}

impl Named for Stakes {
    const WHAT: &'static str = Stakes::WHAT;
    const NAMES: &'static [&'static str] = Stakes::NAMES;
    fn from_name(name: &str) -> Option<Self> {
        Stakes::from_name(name)
    }
}

/// A table of tables keyed by the names of `K`.
fn by_name<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Named,
    V: Deserialize<'de>,
{
    struct Tables<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K: Named, V: Deserialize<'de>> Visitor<'de> for Tables<K, V> {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table of `[{}.NAME]` tables", K::WHAT)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key_seed(NameSeed::<K>(std::marker::PhantomData))? {
                out.insert(k, map.next_value()?);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Tables(std::marker::PhantomData))
}

struct NameSeed<K>(std::marker::PhantomData<K>);

impl<'de, K: Named> DeserializeSeed<'de> for NameSeed<K> {
    type Value = K;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        let name = String::deserialize(d)?;
        K::from_name(&name).ok_or_else(|| de::Error::unknown_variant(&name, K::NAMES))
    }
}

// ---------------------------------------------------------------------------
// The deserializer: toml's spanned values, errors with path and span

/// An error while deserializing: the problem, the path (innermost key
/// first) and the byte span of the innermost key or value it concerns.
#[derive(Debug)]
struct DeError {
    problem: Problem,
    path: Vec<String>,
    span: Option<Range<usize>>,
}

impl DeError {
    fn new(problem: Problem) -> Self {
        DeError {
            problem,
            path: Vec::new(),
            span: None,
        }
    }

    /// The error seen from the table that holds `key`, at `span`.
    fn within(mut self, key: &str, span: Range<usize>) -> Self {
        self.path.push(key.to_owned());
        self.span.get_or_insert(span);
        self
    }

    fn located(mut self, text: &str) -> ConfigError {
        self.path.reverse();
        ConfigError::Key {
            file: FILE_NAME.to_owned(),
            path: self.path.join("."),
            line: self.span.map(|s| line_of(text, s.start)),
            problem: self.problem,
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.problem)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(Problem::Other(msg.to_string()))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        let found = match unexp {
            de::Unexpected::Float(f) => f.to_string(),
            de::Unexpected::Unsigned(u) => u.to_string(),
            de::Unexpected::Signed(i) => i.to_string(),
            de::Unexpected::Str(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        DeError::new(Problem::Invalid {
            expected: exp.to_string(),
            found,
        })
    }

    fn unknown_field(_field: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(Problem::UnknownKey { expected })
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        let what = if expected == Agent::NAMES {
            Agent::WHAT
        } else if expected == Stakes::NAMES {
            Stakes::WHAT
        } else {
            "name"
        };
        DeError::new(Problem::UnknownName { what, expected })
    }

    fn missing_field(field: &'static str) -> Self {
        DeError::new(Problem::Missing(field))
    }

    fn invalid_type(unexp: de::Unexpected<'_>, _exp: &dyn de::Expected) -> Self {
        DeError::new(Problem::Other(format!("unexpected {unexp}")))
    }
}

fn type_of(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// One spanned toml value.
struct ValueDe<'a, 'i>(&'a Spanned<DeValue<'i>>);

impl ValueDe<'_, '_> {
    fn wrong(&self, expected: &'static str) -> DeError {
        DeError::new(Problem::WrongType {
            expected,
            found: type_of(self.0.get_ref()),
        })
    }

    fn integer(&self) -> Option<i128> {
        match self.0.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        }
    }

    fn number(&self) -> Option<f64> {
        match self.0.get_ref() {
            DeValue::Float(f) => f.as_str().parse().ok(),
            DeValue::Integer(_) => self.integer().map(|i| i as f64),
            _ => None,
        }
    }
}

impl<'de> Deserializer<'de> for ValueDe<'_, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::String(s) => visitor.visit_str(s),
            DeValue::Integer(_) => match self.integer().and_then(|i| i64::try_from(i).ok()) {
                Some(i) => visitor.visit_i64(i),
                None => Err(self.wrong("an integer that fits in 64 bits")),
            },
            DeValue::Float(_) => visitor.visit_f64(self.number().unwrap_or(f64::NAN)),
            DeValue::Boolean(b) => visitor.visit_bool(*b),
            DeValue::Datetime(d) => visitor.visit_string(d.to_string()),
            DeValue::Array(a) => {
                let items = a.iter().map(ValueDe);
                visitor.visit_seq(de::value::SeqDeserializer::new(items))
            }
            DeValue::Table(t) => visitor.visit_map(TableAccess::new(t)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.number() {
            Some(n) => visitor.visit_f64(n),
            None => Err(self.wrong("a number")),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.integer().and_then(|i| u64::try_from(i).ok()) {
            Some(n) => visitor.visit_u64(n),
            None => Err(self.wrong("a non-negative integer")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::String(s) => visitor.visit_str(s),
            _ => Err(self.wrong("a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::Array(a) => {
                let items = a.iter().map(ValueDe);
                visitor.visit_seq(de::value::SeqDeserializer::new(items))
            }
            _ => Err(self.wrong("an array")),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.get_ref() {
            DeValue::Table(t) => visitor.visit_map(TableAccess::new(t)),
            _ => Err(self.wrong("a table")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit
        unit_struct newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, DeError> for ValueDe<'_, '_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// The entries of one table; every error below an entry gets the entry's key
/// prepended to its path.
struct TableAccess<'a, 'i> {
    entries: Vec<(
        &'a Spanned<toml::de::DeString<'i>>,
        &'a Spanned<DeValue<'i>>,
    )>,
    next: usize,
}

impl<'a, 'i> TableAccess<'a, 'i> {
    fn new(table: &'a DeTable<'i>) -> Self {
        TableAccess {
            entries: table.iter().collect(),
            next: 0,
        }
    }
}

impl<'de> MapAccess<'de> for TableAccess<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, _)) = self.entries.get(self.next) else {
            return Ok(None);
        };
        let name: &str = key.get_ref();
        seed.deserialize(de::value::StrDeserializer::<DeError>::new(name))
            .map(Some)
            .map_err(|e| e.within(name, key.span()))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.entries.get(self.next) else {
            return Err(DeError::new(Problem::Other(
                "a value was asked for past the table's end".to_owned(),
            )));
        };
        self.next += 1;
        seed.deserialize(ValueDe(value))
            .map_err(|e| e.within(key.get_ref(), value.span()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn one_file_serves_every_consumer() {
        let c = Config::from_toml(
            "[agents.codex]\ncommand = \"codex exec\"\ntimeout_ms = 90000\ntokens = 5\n\
             [agents.claude]\ntokens = 1\np_success = 1\n\
             [judge]\nurl = \"http://x\"\nmodel = \"m\"\nusd = 0.5\n\
             [judge.stakes.paranoid]\nmodel = \"big\"\n",
        )
        .unwrap();
        assert_eq!(
            c.commands(),
            BTreeMap::from([(Agent::Codex, "codex exec".to_owned())])
        );
        assert_eq!(c.agents[&Agent::Codex].timeout_ms, Some(90_000));
        assert_eq!(c.agents[&Agent::Claude].figures().tokens, Some(1.0));
        assert_eq!(c.agents[&Agent::Claude].figures().p_success, Some(1.0));
        let j = c.judge_runner().unwrap();
        assert_eq!((j.url.as_str(), j.model.as_str()), ("http://x", "m"));
        assert_eq!(j.timeout_ms, DEFAULT_JUDGE_TIMEOUT_MS);
        assert_eq!(
            j.per_stakes[&Stakes::Paranoid].model.as_deref(),
            Some("big")
        );
        assert_eq!(c.judge.unwrap().figures().usd, Some(0.5));
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        // cost figures only: no runner
        let c = Config::from_toml("[judge]\nusd = 0\n").unwrap();
        assert_eq!(c.judge_runner(), None);
    }

    #[test]
    fn unknown_agents_tables_and_keys_are_refused_with_the_line() {
        let e = err("# x\n[agents.cladue]\ncommand = \"c\"\n");
        assert_eq!(
            e,
            "stratum.toml, line 2: unknown agent `cladue` in `[agents.cladue]`; the agent names are `claude`, `codex` (did you mean `claude`?)"
        );
        let e = err("[agents.gpt]\nusd = 1\n");
        assert!(
            e.contains("unknown agent `gpt`") && !e.contains("did you mean"),
            "{e}"
        );
        let e = err("[agents.claude]\ncomand = \"x\"\n");
        assert!(
            e.starts_with("stratum.toml, line 2: unknown key `agents.claude.comand`; expected one of `command`, `timeout_ms`")
                && e.ends_with("(did you mean `command`?)"),
            "{e}"
        );
        assert!(err("[stroe]\n").contains("unknown table `stroe`"));
        let e = err("[judge.stakes.paranoi]\n");
        assert!(
            e.contains("unknown stakes `paranoi`") && e.contains("`paranoid`?"),
            "{e}"
        );
    }

    #[test]
    fn values_are_checked_once_here() {
        for (text, want) in [
            (
                "[agents.codex]\np_success = 2\n",
                "line 2: `agents.codex.p_success` must be between 0 and 1, found 2",
            ),
            (
                "[agents.codex]\nusd = -1\n",
                "`agents.codex.usd` must be a finite number ≥ 0, found -1",
            ),
            (
                "[agents.codex]\nms = \"slow\"\n",
                "`agents.codex.ms` must be a number, found a string",
            ),
            (
                "[agents.codex]\ncommand = \" \"\n",
                "`agents.codex.command` must be a non-empty string, found \" \"",
            ),
            (
                "[agents.codex]\ncommand = 3\n",
                "`agents.codex.command` must be a string, found an integer",
            ),
            (
                "[agents.codex]\ntimeout_ms = 0\n",
                "`agents.codex.timeout_ms` must be at least 1, found 0",
            ),
            (
                "[agents.codex]\ntimeout_ms = -5\n",
                "`agents.codex.timeout_ms` must be a non-negative integer",
            ),
            ("agents = 1", "`agents` must be a table, found an integer"),
            (
                "[judge]\nurl = \"ftp://x\"\nmodel = \"m\"\n",
                "`judge.url` must be a URL that starts with http:// or https://",
            ),
            (
                "[judge]\nmodel = \"m\"\n",
                "`[judge]` configures a judge runner but has no `url`",
            ),
            ("[judge]\nurl = \"http://x\"\n", "has no `model`"),
            (
                "[judge]\nurl = \"http://x\"\nmodel = \"m\"\ntimeout_ms = 600001\n",
                "between 1 and 600000, found 600001",
            ),
            (
                "[judge.stakes.cheap]\ntemperature = 9.5\n",
                "`judge.stakes.cheap.temperature` must be between 0 and 2, found 9.5",
            ),
            ("[judge\n", "invalid TOML in stratum.toml, line 1:"),
        ] {
            let e = err(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_file_near_a_root_wins_over_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE_NAME),
            "[agents.codex]\ncommand = \"x\"\n",
        )
        .unwrap();
        let c = load_near(Some(dir.path())).unwrap();
        assert_eq!(c.commands()[&Agent::Codex], "x");
        let e = load_file(&dir.path().join("nowhere.toml")).unwrap_err();
        assert!(matches!(e, ConfigError::Io { .. }), "{e}");
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "\n[agents.codex]\nusd = \"a lot\"\n").unwrap();
        let e = load_file(&other).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}, line 3: ", other.display())),
            "{e}"
        );
    }

    fn cfg(text: &str) -> Config {
        Config::from_toml(text).unwrap()
    }

    const OPERATOR: &str = "[agents.claude]\ncommand = \"claude -p\"\ntimeout_ms = 600000\n\
        [agents.codex]\ncommand = \"codex exec\"\n\
        [judge]\nurl = \"http://judge.op/v1\"\nmodel = \"m\"\ntimeout_ms = 30000\n";

    #[test]
    fn the_canonical_text_reads_back_to_the_same_config() {
        let c = cfg(
            "[agents.codex]\ncommand = \"a \\\"b\\\"\\n\"\ntimeout_ms = 5\nusd = 0.1\ntokens = 1\n\
             [agents.claude]\n\
             [judge]\nurl = \"http://x\"\nmodel = \"m\"\napi_key_env = \"K\"\np_success = 1e-7\n\
             [judge.stakes.paranoid]\nmodel = \"big\"\ntemperature = 0.5\n",
        );
        let text = c.to_toml();
        assert_eq!(cfg(&text), c, "{text}");
        assert_eq!(text, cfg(&text).to_toml(), "canonical: one text per config");
        assert!(
            text.starts_with("[agents.claude]\n[agents.codex]\ncommand = "),
            "{text}"
        );
        assert_eq!(cfg("").to_toml(), "");
        let frozen = Resolved {
            config: c,
            ..Resolved::default()
        }
        .freeze();
        assert_eq!(
            frozen.hash,
            blake3::hash(text.as_bytes()).to_hex().to_string()
        );
    }

    #[test]
    fn the_operator_wins_and_the_workspace_may_only_narrow() {
        let op = cfg(OPERATOR);
        // no judge and cost figures only: the operator's judge and commands stand
        let m = merge(&op, &cfg("[agents.codex]\nusd = 2\n[judge]\nusd = 0\n")).unwrap();
        assert_eq!(m.judge_runner(), op.judge_runner());
        assert_eq!(m.commands(), op.commands());
        assert_eq!(m.agents[&Agent::Codex].usd, Some(2.0));
        // narrowing: a subset of the commands (unchanged), shorter timeouts
        let m = merge(
            &op,
            &cfg(
                "[agents.codex]\ncommand = \"codex exec\"\ntimeout_ms = 1000\n\
                  [judge]\nurl = \"http://judge.op/v1\"\ntimeout_ms = 500\nmodel = \"m\"\n",
            ),
        )
        .unwrap();
        assert_eq!(
            m.commands(),
            BTreeMap::from([(Agent::Codex, "codex exec".to_owned())])
        );
        assert_eq!(m.agent_timeout(Agent::Codex).as_millis(), 1000);
        assert_eq!(m.judge_runner().unwrap().timeout_ms, 500);
        assert_eq!(m.judge_runner().unwrap().url, "http://judge.op/v1");
    }

    #[test]
    fn connector_keys_are_read_frozen_checked_and_only_repeated_by_a_workspace() {
        let text = "[agents.claude]\nconnector = \"claude-code\"\nmodel = \"opus\"\n\
                    allowed_tools = [\"Read\", \"Bash(git diff:*)\"]\npermission_mode = \"plan\"\nmax_turns = 3\n\
                    [agents.codex]\nconnector = \"codex\"\nsandbox = \"workspace-write\"\nreasoning_effort = \"high\"\n";
        let c = cfg(text);
        let (kind, s) = c.agents[&Agent::Claude].connector_settings().unwrap();
        assert_eq!(kind, ConnectorKind::ClaudeCode);
        assert_eq!(s.allowed_tools, ["Read", "Bash(git diff:*)"]);
        assert_eq!(s.permission_mode, Some(PermissionMode::Plan));
        assert_eq!(
            c.agents[&Agent::Codex].sandbox,
            Some(Sandbox::WorkspaceWrite)
        );
        // frozen into a run and read back unchanged
        assert_eq!(cfg(&c.to_toml()), c, "{}", c.to_toml());
        for (bad, want) in [
            ("[agents.claude]\nconnector = \"claude\"\n", "claude-code"),
            (
                "[agents.claude]\nconnector = \"codex\"\ncommand = \"x\"\n",
                "not both",
            ),
            ("[agents.claude]\nmodel = \"m\"\n", "connector setting"),
            (
                "[agents.codex]\nconnector = \"codex\"\nmax_turns = 2\n",
                "`max_turns` is a setting of `connector = \"claude-code\"`, not of `codex`",
            ),
            (
                "[agents.claude]\nconnector = \"claude-code\"\nsandbox = \"read-only\"\n",
                "setting of `connector = \"codex\"`",
            ),
            (
                "[agents.claude]\nconnector = \"claude-code\"\npermission_mode = \"yolo\"\n",
                "bypassPermissions",
            ),
            (
                "[agents.claude]\nconnector = \"claude-code\"\nallowed_tools = [\"A,B\"]\n",
                "without a comma",
            ),
        ] {
            let e = err(bad);
            assert!(e.contains(want), "{bad}: {e}");
        }
        // a workspace may repeat the operator's connector keys, not change or add one
        assert!(
            merge(
                &c,
                &cfg("[agents.claude]\nconnector = \"claude-code\"\nmodel = \"opus\"\n")
            )
            .is_ok()
        );
        let w = cfg(
            "[agents.claude]\nconnector = \"claude-code\"\nmodel = \"haiku\"\npermission_mode = \"bypassPermissions\"\n",
        );
        let bad = merge(&c, &w).unwrap_err();
        let paths: Vec<&str> = bad.iter().map(|b| b.path.as_str()).collect();
        assert_eq!(
            paths,
            ["agents.claude.model", "agents.claude.permission_mode"]
        );
        let bad = merge(&cfg(""), &cfg("[agents.codex]\nconnector = \"codex\"\n")).unwrap_err();
        assert_eq!(bad[0].path, "agents.codex.connector");
    }

    #[test]
    fn a_workspace_that_widens_is_refused_key_by_key() {
        let op = cfg(OPERATOR);
        let w = cfg("[agents.claude]\ncommand = \"evil\"\ntimeout_ms = 600001\n\
                     [judge]\nurl = \"http://judge.agent/v1\"\nmodel = \"m\"\ntimeout_ms = 60000\n\
                     [judge.stakes.cheap]\nmodel = \"tiny\"\n");
        let bad = merge(&op, &w).unwrap_err();
        let paths: Vec<&str> = bad.iter().map(|b| b.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "agents.claude.command",
                "agents.claude.timeout_ms",
                "judge.url",
                "judge.timeout_ms",
                "judge.stakes.cheap.model"
            ]
        );
        assert_eq!(
            bad[2].to_string(),
            "`judge.url` = \"http://judge.agent/v1\" (the operator's: \"http://judge.op/v1\"; it may only repeat the operator's value)"
        );
        // a command the operator does not give, a judge the operator does not configure
        let op = cfg("[agents.claude]\ncommand = \"claude -p\"\n");
        let bad = merge(
            &op,
            &cfg("[agents.codex]\ncommand = \"x\"\n[judge]\nurl = \"http://j\"\nmodel = \"m\"\n"),
        )
        .unwrap_err();
        assert_eq!(bad[0].path, "agents.codex.command");
        assert!(
            bad[0]
                .to_string()
                .contains("the operator's: none; it cannot add one"),
            "{}",
            bad[0]
        );
        assert!(
            bad[1]
                .to_string()
                .contains("the operator configures no judge"),
            "{}",
            bad[1]
        );
        // the default timeouts are the operator's limit when it names none
        let bad = merge(&op, &cfg("[agents.claude]\ntimeout_ms = 1800001\n")).unwrap_err();
        assert_eq!(bad[0].operator.as_deref(), Some("1800000"));
    }

    #[test]
    fn a_run_gets_the_merged_files_and_later_keeps_its_frozen_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (op_file, ws) = (dir.path().join("operator.toml"), dir.path().join("ws"));
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(&op_file, OPERATOR).unwrap();
        std::fs::write(
            ws.join(FILE_NAME),
            "[agents.codex]\ncommand = \"codex exec\"\n",
        )
        .unwrap();
        let r = for_run(Some(&op_file), Some(&ws)).unwrap();
        assert_eq!(r.config.commands().len(), 1);
        assert_eq!(
            r.sources(),
            [
                op_file.display().to_string(),
                ws.join(FILE_NAME).display().to_string()
            ]
        );
        let frozen = r.freeze();
        // unchanged files: no warning
        let now = of_run("run-1", Some(&frozen.text), Some(&op_file), Some(&ws)).unwrap();
        assert_eq!((now.config, now.warnings), (r.config.clone(), vec![]));
        // the agent re-points the judge: refused for a new run, ignored for this one
        std::fs::write(
            ws.join(FILE_NAME),
            "[judge]\nurl = \"http://judge.agent/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let e = for_run(Some(&op_file), Some(&ws)).unwrap_err().to_string();
        assert!(
            e.contains("may only narrow the operator's configuration") && e.contains("`judge.url`"),
            "{e}"
        );
        let later = of_run("run-1", Some(&frozen.text), Some(&op_file), Some(&ws)).unwrap();
        assert_eq!(later.config, r.config);
        assert_eq!(later.warnings.len(), 1);
        assert!(
            later.warnings[0].contains("refused") && later.warnings[0].contains("ignored"),
            "{:?}",
            later.warnings
        );
        // without an operator file the workspace's change is a difference, named
        let later = of_run("run-1", Some(&frozen.text), None, Some(&ws)).unwrap();
        assert_eq!(later.config, r.config);
        assert!(
            later.warnings[0]
                .contains("`judge.url`: \"http://judge.op/v1\" → \"http://judge.agent/v1\""),
            "{:?}",
            later.warnings
        );
        // a damaged frozen copy is an error naming the run
        let e = of_run("run-1", Some("[x"), None, Some(&ws))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the configuration frozen into run run-1"), "{e}");
    }

    #[test]
    fn named_judges_are_read_frozen_and_checked() {
        let c = Config::from_toml(
            "[judge]\nurl = \"http://d/v1\"\nmodel = \"m\"\n\
             [judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntokens = 500\n\
             [judges.cheap-one]\nusd = 0\n",
        )
        .unwrap();
        let local = c.named_judge_runner("local").unwrap();
        assert_eq!(
            (local.url.as_str(), local.model.as_str(), local.timeout_ms),
            (
                "http://127.0.0.1:11434/v1",
                "qwen",
                DEFAULT_JUDGE_TIMEOUT_MS
            )
        );
        // cost figures only: a known name without a runner
        assert_eq!(c.named_judge_runner("cheap-one"), None);
        assert_eq!(c.judge_section(Some("local")).unwrap().tokens, Some(500.0));
        assert_eq!(c.judge_section(Some("nope")), c.judge.as_ref());
        let runners: Vec<Option<String>> = c.judge_runners().into_keys().collect();
        assert_eq!(runners, [None, Some("local".to_owned())]);
        // frozen text reads back equal
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
        for (text, needle) in [
            (
                "[judges.local]\nmodel = \"m\"\n",
                "`[judges.local]` configures a judge runner but has no `url`",
            ),
            (
                "[judges.local]\nurl = \"ftp://x\"\nmodel = \"m\"\n",
                "`judges.local.url` must be a URL",
            ),
            ("[judges.\"9x\"]\nusd = 1\n", "a judge name"),
            ("[judges.local]\nmodle = \"m\"\n", "did you mean `model`?"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_workspace_may_only_narrow_each_named_judge() {
        let op = Config::from_toml(
            "[judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntimeout_ms = 30000\n",
        )
        .unwrap();
        // repeating the operator's judge and shortening its timeout narrows it
        let ws = Config::from_toml(
            "[judges.local]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\ntimeout_ms = 500\nusd = 0\n",
        )
        .unwrap();
        let m = merge(&op, &ws).unwrap();
        assert_eq!(m.named_judge_runner("local").unwrap().timeout_ms, 500);
        assert_eq!(m.judges["local"].usd, Some(0.0));
        // a URL the operator did not allow, and a judge the operator does not have
        let ws = Config::from_toml(
            "[judges.local]\nurl = \"http://evil/v1\"\nmodel = \"qwen\"\n\
             [judges.extra]\nurl = \"http://x/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let w = merge(&op, &ws).unwrap_err();
        let paths: Vec<&str> = w.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            ["judges.extra.url", "judges.extra.model", "judges.local.url"]
        );
        assert!(w[0].rule.contains("the operator configures no judge"));
        // the default judge does not allow a named one
        let op = Config::from_toml("[judge]\nurl = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
        let ws = Config::from_toml("[judges.x]\nurl = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
        assert!(merge(&op, &ws).is_err());
    }

    #[test]
    fn commands_are_read_with_defaults_frozen_and_checked() {
        let c = Config::from_toml(
            "[commands.test]\nargv = [\"python3\", \"-m\", \"pytest\", \"-q\"]\ntimeout_ms = 120000\nenv = [\"CI\", \"PATH\"]\n\
             [commands.lint]\nargv = [\"ruff\"]\nmax_output_bytes = 4096\n",
        )
        .unwrap();
        let test = c.command("test").unwrap();
        assert_eq!(test.argv, ["python3", "-m", "pytest", "-q"]);
        assert_eq!(test.timeout_ms, 120_000);
        assert_eq!(test.env, ["CI", "HOME", "LANG", "PATH"]);
        assert_eq!(test.max_output_bytes, DEFAULT_COMMAND_OUTPUT_BYTES);
        let lint = c.command("lint").unwrap();
        assert_eq!(
            (lint.timeout_ms, lint.max_output_bytes),
            (DEFAULT_COMMAND_TIMEOUT_MS, 4096)
        );
        assert_eq!(c.command("nope"), None);
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
        for (text, needle) in [
            (
                "[commands.t]\ntimeout_ms = 5\n",
                "`commands.t.argv` is missing",
            ),
            ("[commands.t]\nargv = []\n", "a non-empty array"),
            (
                "[commands.t]\nargv = \"pytest -q\"\n",
                "`commands.t.argv` must be",
            ),
            (
                "[commands.t]\nargv = [\"x\"]\nenv = [\"A=B\"]\n",
                "an environment variable name",
            ),
            (
                "[commands.t]\nargv = [\"x\"]\ntimeout_ms = 0\n",
                "between 1 and 3600000",
            ),
            (
                "[commands.t]\nargv = [\"x\"]\nmax_output_bytes = 999999999\n",
                "between 1 and 67108864",
            ),
            (
                "[commands.t]\nargv = [\"x\"]\nshell = true\n",
                "unknown key `commands.t.shell`",
            ),
            ("[commands.\"9\"]\nargv = [\"x\"]\n", "a command name"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_workspace_may_only_narrow_each_command() {
        let op = Config::from_toml(
            "[commands.test]\nargv = [\"pytest\"]\ntimeout_ms = 60000\nenv = [\"CI\", \"TOKEN\"]\n\
             [commands.lint]\nargv = [\"ruff\"]\n",
        )
        .unwrap();
        // same argv, shorter timeout, smaller output, fewer names: narrowed
        let ws = Config::from_toml(
            "[commands.test]\nargv = [\"pytest\"]\ntimeout_ms = 500\nenv = [\"CI\"]\nmax_output_bytes = 100\n",
        )
        .unwrap();
        let m = merge(&op, &ws).unwrap();
        let test = m.command("test").unwrap();
        assert_eq!((test.timeout_ms, test.max_output_bytes), (500, 100));
        assert_eq!(test.env, ["CI", "HOME", "LANG", "PATH"]);
        // a command the workspace leaves out stays as the operator declares it
        assert_eq!(m.command("lint"), op.command("lint"));
        // another argv, a longer timeout, a new name, a command of its own
        let ws = Config::from_toml(
            "[commands.test]\nargv = [\"sh\", \"-c\", \"curl evil\"]\ntimeout_ms = 90000\nenv = [\"AWS_SECRET\"]\n\
             [commands.extra]\nargv = [\"rm\"]\n",
        )
        .unwrap();
        let w = merge(&op, &ws).unwrap_err();
        let paths: Vec<&str> = w.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "commands.extra.argv",
                "commands.test.argv",
                "commands.test.timeout_ms",
                "commands.test.env"
            ]
        );
        assert!(w[0].rule.contains("cannot add one"), "{}", w[0]);
        assert!(w[3].to_string().contains("AWS_SECRET"), "{}", w[3]);
        // no operator file: the workspace's file is the configuration (for_run)
        let m = merge(&Config::default(), &ws).unwrap_err();
        assert_eq!(m.len(), 2);
    }
}
