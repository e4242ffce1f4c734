//! What the interpreter asks of its environment: the [`Host`] trait, the
//! data it answers with, and its error type.
//!
//! Owns: the seam between the pure interpreter and side effects (files,
//! the judge, git worktrees, the clock).
//! Must never: perform an effect itself (the standard implementation is
//! `crate::host::StdHost`; tests script their own).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a file predicate looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRoot<'a> {
    /// The run's workspace root.
    Workspace,
    /// A fanout item's git worktree (`isolation: worktree`).
    Worktree(&'a str),
}

/// What a file predicate saw, recorded in the audit (the evidence chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEvidence {
    /// The path relative to the root after lexical normalization
    /// (`a/../x` → `x`; the root itself is `.`), with `/` separators.
    pub path: String,
    /// A regular file was found at the path.
    pub exists: bool,
    /// Its size in bytes, when it exists.
    #[serde(default)]
    pub size: Option<u64>,
    /// The blake3 hex digest of its contents, when it was read.
    #[serde(default)]
    pub blake3: Option<String>,
    /// Why the predicate is false or the hash is missing, when not obvious
    /// ("not a regular file", "not valid UTF-8", ...).
    #[serde(default)]
    pub note: Option<String>,
    /// The SHA-256 hex digest of its contents, when `file()` (X3) read it
    /// (absent for the v1 predicates and above [`MAX_HASH_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl FileEvidence {
    /// Evidence of a path where no usable file is.
    pub fn missing(path: String, note: &str) -> Self {
        FileEvidence {
            path,
            exists: false,
            size: None,
            blake3: None,
            note: Some(note.to_owned()),
            sha256: None,
        }
    }
}

/// The largest file whose text `file(path).text` gives (8 MiB); a larger
/// file has `text: null` (and so no `json`).
pub const MAX_TEXT_BYTES: u64 = 8 * 1024 * 1024;
/// The largest file `file(path)` hashes (64 MiB); a larger one has
/// `sha256: null`.
pub const MAX_HASH_BYTES: u64 = 64 * 1024 * 1024;
/// The most paths one `glob(pattern)` may match; more is an evaluation error.
pub const MAX_GLOB_MATCHES: usize = 10_000;

/// What `file(path)` (X3) read under the jail.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileRead {
    /// The path relative to the root after lexical normalization (as in
    /// [`FileEvidence::path`]).
    pub path: String,
    /// A regular file is at the path.
    pub exists: bool,
    /// Its size in bytes (0 when missing).
    pub size: u64,
    /// Its contents when they are UTF-8 and at most [`MAX_TEXT_BYTES`].
    pub text: Option<String>,
    /// The SHA-256 hex digest of its contents, up to [`MAX_HASH_BYTES`].
    pub sha256: Option<String>,
}

/// What a host without `file()`/`glob()` support answers.
pub const NO_FILE_READS: &str = "this host does not read files for `file()` and `glob()`";

/// A judge's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the statement holds.
    pub holds: bool,
    /// Why.
    pub reason: String,
    /// Model that judged.
    pub model: String,
    /// Tokens it used.
    pub tokens: f64,
    /// Dollars it cost.
    pub usd: f64,
}

/// Why the host could not do what was asked. The message is meant for a
/// violation reason (the interpreter quotes it); the kind says what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The host cannot do this at all (no git worktrees, no workspace root).
    #[error("{0}")]
    Unsupported(String),
    /// The workspace jail refused the path.
    #[error("{0}")]
    Refused(String),
    /// A file could not be read.
    #[error("{0}")]
    Io(String),
    /// The judge is missing or failed (never a verdict).
    #[error("{0}")]
    Judge(String),
    /// A git operation failed.
    #[error("{0}")]
    Git(String),
}

/// What a host without git worktrees answers.
pub const NO_WORKTREES: &str = "this host makes no git worktrees";

fn no_worktrees<T>() -> Result<T, HostError> {
    Err(HostError::Unsupported(NO_WORKTREES.into()))
}

/// What the interpreter asks of its environment.
pub trait Host {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&mut self) -> i64;
    /// `file_exists(path)` under `root`: the evidence (`exists` is the answer).
    fn file_exists(&mut self, root: FileRoot<'_>, path: &str) -> Result<FileEvidence, HostError>;
    /// `file_contains(path, text)` under `root`, with the evidence.
    fn file_contains(
        &mut self,
        root: FileRoot<'_>,
        path: &str,
        text: &str,
    ) -> Result<(bool, FileEvidence), HostError>;
    /// `file(path)` (X3) under `root`, jailed like `file_exists`: what was
    /// read (text and hash within their limits) and its evidence (with the
    /// sha256 when hashed).
    fn read_file(
        &mut self,
        _root: FileRoot<'_>,
        _path: &str,
    ) -> Result<(FileRead, FileEvidence), HostError> {
        Err(HostError::Unsupported(NO_FILE_READS.into()))
    }
    /// `glob(pattern)` (X3) under `root`: the sorted root-relative paths
    /// (`/` separators) of the regular files matching, never leaving the
    /// root nor following a symbolic link; more than [`MAX_GLOB_MATCHES`]
    /// is an error.
    fn glob(&mut self, _root: FileRoot<'_>, _pattern: &str) -> Result<Vec<String>, HostError> {
        Err(HostError::Unsupported(NO_FILE_READS.into()))
    }
    /// A `judged` predicate.
    fn judge(
        &mut self,
        statement: &str,
        stakes: &str,
        context: &Value,
    ) -> Result<Verdict, HostError>;

    // ----- `isolation: worktree` with engine dispatch (reference v1-runtime §4.12) -----
    // A host that makes no git worktrees keeps the defaults: runs with such a
    // fanout are then refused when they start.

    /// Whether this host makes git worktrees for engine-dispatched fanout items.
    fn supports_worktrees(&self) -> bool {
        false
    }
    /// Creates a detached git worktree at HEAD of the workspace root for one
    /// fanout item (`name` is unique within the run; an existing one is
    /// reused) and returns the directory the item works in: its agent's
    /// working directory and the root of its file predicates.
    fn worktree_create(&mut self, _run_id: &str, _name: &str) -> Result<String, HostError> {
        no_worktrees()
    }
    /// The changes made in a worktree, everything staged (new files
    /// included), as `git diff --binary HEAD`; empty when nothing changed.
    fn worktree_patch(&mut self, _dir: &str) -> Result<String, HostError> {
        no_worktrees()
    }
    /// Removes a worktree; one already gone is not an error.
    fn worktree_remove(&mut self, _dir: &str) -> Result<(), HostError> {
        no_worktrees()
    }
    /// Runs each `pre_merge` command in the workspace root, then applies the
    /// patches `(item index, patch)` in the order given; the first error.
    fn worktree_merge(
        &mut self,
        _pre_merge: &[String],
        _patches: &[(u32, String)],
    ) -> Result<(), HostError> {
        no_worktrees()
    }
}
