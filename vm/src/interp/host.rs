//! What the interpreter asks of its environment: the [`Host`] trait, the
//! data it answers with, and its error type.
//!
//! Owns: the seam between the pure interpreter and side effects (files,
//! the judge, git worktrees, declared commands, the clock).
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

/// The sha256 of one regular file (X4: manifests, gate `show`), as the
/// audit records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHash {
    /// The path relative to the root after lexical normalization.
    pub path: String,
    /// Bytes hashed.
    pub size: u64,
    /// Lowercase hex sha256 of the contents.
    pub sha256: String,
}

/// How a file changed since a snapshot (X11 `changes()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeStatus {
    /// Not in the snapshot.
    Added,
    /// In the snapshot with other contents (or mode).
    Modified,
    /// In the snapshot, gone now.
    Deleted,
}

impl ChangeStatus {
    /// `added`, `modified`, `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeStatus::Added => "added",
            ChangeStatus::Modified => "modified",
            ChangeStatus::Deleted => "deleted",
        }
    }
}

/// One file a dispatch changed (X11), as its patch record holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the dispatch's root (workspace or worktree).
    pub path: String,
    /// How it changed.
    pub status: ChangeStatus,
    /// Bytes of the lines added plus the lines removed (a binary file: its
    /// old plus its new size).
    pub bytes: u64,
    /// sha256 of the contents in the snapshot (`None`: added).
    pub before: Option<String>,
    /// sha256 of the contents at report (`None`: deleted).
    pub after: Option<String>,
}

/// What changed under a root since a snapshot (X11).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeDiff {
    /// The tree id of the working tree now (the "after" snapshot).
    pub tree: String,
    /// The changed files, sorted by path.
    pub files: Vec<FileChange>,
    /// The unified diff (`git diff --binary` of the two trees), whole.
    pub patch: String,
}

/// One path a restore puts back (X11): for a rollback, with the sha256 it
/// must still have (`Some(None)`: it must be absent) to be overwritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// Relative to the root.
    pub path: String,
    /// `None`: put back whatever is there (a scope violation).
    pub expect: Option<Option<String>>,
}

/// What a host without snapshots answers.
pub const NO_SNAPSHOTS: &str =
    "this host takes no workspace snapshots (`scope` needs a git workspace)";

/// What a host without artifact support answers.
pub const NO_ARTIFACTS: &str = "this host hashes no artifacts";

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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Whether the statement holds (scored form: `score >= threshold`).
    pub holds: bool,
    /// Why (scored form: the reasons joined with `; `).
    pub reason: String,
    /// Model that judged.
    pub model: String,
    /// Tokens it used.
    pub tokens: f64,
    /// Dollars it cost.
    pub usd: f64,
    /// The score in [0, 1] (scored form only).
    pub score: Option<f64>,
    /// The judge's reasons (scored form only).
    pub reasons: Vec<String>,
    /// The input files sent with the rubric, as read.
    pub inputs: Vec<InputDigest>,
}

/// An input file the judge was sent (scored form), recorded in the audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputDigest {
    /// The path as rendered, relative to the root.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The sha256 hex digest of the bytes sent.
    pub sha256: String,
}

/// What a judged predicate asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JudgeAsk<'a> {
    /// v1: does `statement` hold? (`stakes`: the tier's name)
    Statement {
        /// The statement.
        statement: &'a str,
        /// The stakes tier.
        stakes: &'a str,
    },
    /// Language 1.1 X5: score the result against `rubric`; holds iff
    /// `score >= threshold`.
    Rubric {
        /// The rendered rubric.
        rubric: &'a str,
        /// The pass mark in [0, 1].
        threshold: f64,
    },
}

/// One call of the judge: which judge, what it is asked, the context
/// (`{result, input}`) and the input files (scored form) under `root`.
#[derive(Debug, Clone, Copy)]
pub struct JudgeRequest<'a> {
    /// `None`: the default judge (`[judge]`); else `[judges.NAME]`.
    pub judge: Option<&'a str>,
    /// The question.
    pub ask: JudgeAsk<'a>,
    /// `{result, input}` as JSON.
    pub context: &'a Value,
    /// Input file paths as rendered (scored form; empty otherwise).
    pub inputs: &'a [String],
    /// Where the input files are read.
    pub root: FileRoot<'a>,
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
    /// The judge failed: transport, timeout, HTTP status, malformed answer
    /// (never a verdict; the interpreter asks again, X5).
    #[error("{0}")]
    Judge(String),
    /// A git operation failed.
    #[error("{0}")]
    Git(String),
    /// No judge is configured (at all, or under the name asked for): the
    /// predicate fails closed at once, it is not asked again.
    #[error("{0}")]
    NoJudge(String),
    /// A declared command (X12) could not be run: not declared in
    /// stratum.toml, or its program could not be started.
    #[error("{0}")]
    Command(String),
    /// A declared command was stopped before it ended because the run's
    /// driver asked (a cancel, a signal): the transition that ran it is
    /// abandoned, nothing of it is recorded ([`crate::interp::VmError::Stopped`]).
    #[error("{0}")]
    Stopped(String),
}

/// One run of a declared command (language 1.1 X12): an `exec` check or an
/// `evaluate` step.
#[derive(Debug, Clone, Copy)]
pub struct CommandRequest<'a> {
    /// The `[commands.NAME]` to run.
    pub command: &'a str,
    /// The rendered arguments, appended to the declared `argv`, one
    /// argument each (no shell, no splitting, no globbing).
    pub args: &'a [String],
    /// The spec's bound; the host runs for the smaller of it and the
    /// config's `timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// What the command gets on stdin (`evaluate.in`); empty otherwise.
    pub stdin: &'a str,
    /// Its working directory: the workspace, or an item's worktree.
    pub root: FileRoot<'a>,
}

/// The most bytes of a command's output a receipt's `tail` keeps.
pub const RECEIPT_TAIL_BYTES: usize = 2048;

/// What the audit keeps of one run of a declared command (X12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandReceipt {
    /// The `[commands.NAME]` run.
    pub command: String,
    /// Every argument it ran with: the declared `argv`, then the rendered `args`.
    pub argv: Vec<String>,
    /// Its exit code; `None` when it was killed (timeout, a signal).
    pub exit: Option<i32>,
    /// How long it ran, in ms.
    pub ms: u64,
    /// Lowercase hex sha256 of the stdout kept (at most the command's
    /// `max_output_bytes`).
    pub stdout_sha256: String,
    /// The last [`RECEIPT_TAIL_BYTES`] of its stdout then stderr (lossy UTF-8).
    pub tail: String,
    /// It ran past its timeout; its process group was killed.
    #[serde(default)]
    pub timed_out: bool,
    /// More stdout arrived than `max_output_bytes`; the rest was dropped.
    #[serde(default)]
    pub truncated: bool,
}

/// A finished command: its receipt and the stdout kept (for `evaluate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    /// What the audit keeps.
    pub receipt: CommandReceipt,
    /// The head of its stdout (at most `max_output_bytes`).
    pub stdout: Vec<u8>,
}

/// What a host that runs no commands answers.
pub const NO_COMMANDS: &str = "this host runs no declared commands";

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
    /// A v1 `judged` predicate (statement form, default judge).
    fn judge(
        &mut self,
        statement: &str,
        stakes: &str,
        context: &Value,
    ) -> Result<Verdict, HostError>;

    /// Any `judged` predicate: the interpreter calls this one. The default
    /// serves the v1 statement form through [`Host::judge`] and refuses the
    /// rest (a host that knows no named judges or input files).
    fn judge_request(&mut self, req: &JudgeRequest<'_>) -> Result<Verdict, HostError> {
        match (req.ask, req.judge) {
            (JudgeAsk::Statement { statement, stakes }, None) if req.inputs.is_empty() => {
                self.judge(statement, stakes, req.context)
            }
            _ => Err(HostError::Unsupported(
                "this host has no named judges and no scored judge".into(),
            )),
        }
    }

    /// Waits `ms` milliseconds between judge tries (the standard host
    /// sleeps; a scripted host records it and does not).
    fn pause_ms(&mut self, _ms: u64) {}

    /// Runs a declared command (X12) in `req.root` and waits for it within
    /// its bounds; `HostError::Command` when it is not declared or cannot
    /// start (a non-zero exit or a timeout is a receipt, not an error).
    fn run_command(&mut self, _req: &CommandRequest<'_>) -> Result<CommandRun, HostError> {
        Err(HostError::Command(NO_COMMANDS.into()))
    }

    // ----- X4 artifacts: jailed like the file predicates -----

    /// The sha256 of the regular file at `path` under `root` (streaming,
    /// bounded); `None` when no regular file is there.
    fn hash_file(
        &mut self,
        _root: FileRoot<'_>,
        _path: &str,
    ) -> Result<Option<FileHash>, HostError> {
        Err(HostError::Unsupported(NO_ARTIFACTS.into()))
    }
    /// The sorted relative paths of the regular files under `root` that the
    /// glob `pattern` matches (at most 10,000; more is an error).
    fn glob(&mut self, _root: FileRoot<'_>, _pattern: &str) -> Result<Vec<String>, HostError> {
        Err(HostError::Unsupported(NO_ARTIFACTS.into()))
    }

    // ----- X11 scopes: snapshots of the git working tree -----

    /// Whether `root` is inside a git working tree (a run with scoped steps
    /// refuses to start otherwise).
    fn snapshots_ready(&self, _root: FileRoot<'_>) -> Result<(), HostError> {
        Err(HostError::Unsupported(NO_SNAPSHOTS.into()))
    }
    /// Snapshots the working tree under `root` as a git tree, kept under
    /// `refs/stratum/<run_id>/<name>`; the tree id.
    fn snapshot(
        &mut self,
        _root: FileRoot<'_>,
        _run_id: &str,
        _name: &str,
    ) -> Result<String, HostError> {
        Err(HostError::Unsupported(NO_SNAPSHOTS.into()))
    }
    /// What changed under `root` since snapshot `tree` (the after tree is
    /// kept under `refs/stratum/<run_id>/<name>`).
    fn snapshot_diff(
        &mut self,
        _root: FileRoot<'_>,
        _tree: &str,
        _run_id: &str,
        _name: &str,
    ) -> Result<TreeDiff, HostError> {
        Err(HostError::Unsupported(NO_SNAPSHOTS.into()))
    }
    /// Puts `paths` under `root` back to snapshot `tree`; the paths left
    /// alone because they were not what was expected (conflicts).
    fn snapshot_restore(
        &mut self,
        _root: FileRoot<'_>,
        _tree: &str,
        _paths: &[Restore],
    ) -> Result<Vec<String>, HostError> {
        Err(HostError::Unsupported(NO_SNAPSHOTS.into()))
    }
    /// Removes the run's `refs/stratum/<run_id>/` refs (the run ended).
    fn snapshots_drop(&mut self, _run_id: &str) -> Result<(), HostError> {
        Ok(())
    }

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
