//! Why a `stratum.toml` was refused: [`ConfigError`] and the typed
//! [`Problem`] of one key, with the words the user reads.
//!
//! Owns: those types and their messages.
//! Must never: decide validity (the value rules in `fields` do).

use super::*;

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
    pub(super) fn in_run(mut self, run_id: &str) -> ConfigError {
        if let ConfigError::Syntax { file, .. } | ConfigError::Key { file, .. } = &mut self {
            *file = format!("the configuration frozen into run {run_id}");
        }
        self
    }

    /// The error as seen in the file at `path`.
    pub(super) fn in_file(mut self, path: &Path) -> ConfigError {
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
    pub(super) fn describe(&self, path: &str) -> String {
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

pub(super) fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(", line {l}")).unwrap_or_default()
}

pub(super) fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn mean(name: &str, expected: &[&str]) -> String {
    suggest(name, expected.iter().copied())
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}
