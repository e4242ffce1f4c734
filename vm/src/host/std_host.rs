//! The standard host: the system clock, file predicates jailed to the
//! workspace root (or an item's worktree), the configured judge, and git
//! worktrees for isolated fanout items.
//!
//! Owns: wiring the interpreter's [`Host`] seam to the effects of this
//! module's parent (`Workspace`, `judge`, the git helpers), and the one
//! mapping of their typed errors to [`HostError`] kinds (`From` impls, each a
//! `match`: jail refusals and files over the limit are `Refused`, the root or
//! a read failing is `Io`, git is `Git`, the judge is `Judge`).
//! Must never: decide what an answer means (the interpreter does), or
//! recover an error's kind from its text.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{GitError, JailError, JudgeConfig, JudgeError, Workspace};
use crate::config::ConfigError;
use crate::interp::{FileEvidence, FileRoot, Host, HostError, Verdict};

/// Why a standard host could not be made for a run.
#[derive(Debug, thiserror::Error)]
pub enum HostSetupError {
    /// The `stratum.toml` that applies cannot be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The workspace root is not usable.
    #[error("workspace {}: {source}", root.display())]
    Workspace { root: PathBuf, source: JailError },
}

impl From<JailError> for HostError {
    fn from(e: JailError) -> Self {
        let message = e.to_string();
        match e {
            JailError::Refused { .. } | JailError::TooLarge { .. } => HostError::Refused(message),
            JailError::RootUnusable { .. }
            | JailError::RootNotADirectory { .. }
            | JailError::Resolve { .. }
            | JailError::Read { .. } => HostError::Io(message),
        }
    }
}

impl From<GitError> for HostError {
    fn from(e: GitError) -> Self {
        match e {
            GitError::Spawn { .. }
            | GitError::Wait { .. }
            | GitError::Exit { .. }
            | GitError::NotARepository { .. }
            | GitError::NoCommit
            | GitError::CreateDir { .. }
            | GitError::RemoveDir { .. }
            | GitError::PatchTooLarge { .. }
            | GitError::PatchNotUtf8
            | GitError::DoesNotApply { .. } => HostError::Git(e.to_string()),
        }
    }
}

impl From<JudgeError> for HostError {
    fn from(e: JudgeError) -> Self {
        match e {
            JudgeError::Encode { .. }
            | JudgeError::MissingApiKey { .. }
            | JudgeError::Timeout { .. }
            | JudgeError::Request { .. }
            | JudgeError::ReadReply { .. }
            | JudgeError::Status { .. }
            | JudgeError::NotJson { .. }
            | JudgeError::NoContent { .. }
            | JudgeError::MalformedVerdict { .. } => HostError::Judge(e.to_string()),
        }
    }
}

/// The standard host: a workspace root for file predicates, a judge, the system clock.
pub struct StdHost {
    /// Jail for `file_exists` / `file_contains`.
    pub workspace: Option<Workspace>,
    /// Judge endpoint.
    pub judge: Option<JudgeConfig>,
}

/// Why a file predicate has no root to look in.
const NO_ROOT: &str = "file function requires a workspace root";

impl StdHost {
    /// The host of a run whose workspace root is `root` (`None`: file
    /// predicates are refused), with the judge of the `stratum.toml` that
    /// applies to it ([`crate::config::load_near`]).
    pub fn for_root(root: Option<&Path>) -> Result<StdHost, HostSetupError> {
        let config = crate::config::load_near(root)?;
        StdHost::with_config(root, &config)
    }

    /// The host of a run whose workspace root is `root`, with the judge of
    /// an already read `config`.
    pub fn with_config(
        root: Option<&Path>,
        config: &crate::config::Config,
    ) -> Result<StdHost, HostSetupError> {
        let workspace = root
            .map(|r| {
                Workspace::new(r).map_err(|source| HostSetupError::Workspace {
                    root: r.to_owned(),
                    source,
                })
            })
            .transpose()?;
        Ok(StdHost {
            workspace,
            judge: config.judge_runner(),
        })
    }

    fn root(&self) -> Result<&Path, HostError> {
        self.workspace.as_ref().map(Workspace::root).ok_or_else(|| {
            HostError::Unsupported("`isolation: worktree` needs a workspace root".to_owned())
        })
    }

    /// The jail a file predicate at `root` uses.
    fn jail(&self, root: FileRoot<'_>) -> Result<Workspace, HostError> {
        match root {
            FileRoot::Workspace => self
                .workspace
                .clone()
                .ok_or_else(|| HostError::Unsupported(NO_ROOT.to_owned())),
            FileRoot::Worktree(dir) => Ok(Workspace::new(dir)?),
        }
    }
}

impl Host for StdHost {
    fn now_ms(&mut self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    fn file_exists(&mut self, root: FileRoot<'_>, path: &str) -> Result<FileEvidence, HostError> {
        self.jail(root)?.file_exists(path).map_err(HostError::from)
    }

    fn file_contains(
        &mut self,
        root: FileRoot<'_>,
        path: &str,
        text: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        self.jail(root)?
            .file_contains(path, text)
            .map_err(HostError::from)
    }

    fn judge(
        &mut self,
        statement: &str,
        stakes: &str,
        context: &Value,
    ) -> Result<Verdict, HostError> {
        let cfg = self.judge.as_ref().ok_or_else(|| {
            HostError::Judge(
                "judged predicate requires a configured judge runner ([judge] in stratum.toml)"
                    .to_owned(),
            )
        })?;
        let o = super::judge(cfg, statement, stakes, context)?;
        Ok(Verdict {
            holds: o.holds,
            reason: o.reason,
            model: o.model,
            tokens: o.tokens.unwrap_or(0) as f64,
            usd: 0.0,
        })
    }

    fn supports_worktrees(&self) -> bool {
        true
    }

    fn worktree_create(&mut self, run_id: &str, name: &str) -> Result<String, HostError> {
        let dir = super::worktree_create(self.root()?, run_id, name).map_err(HostError::from)?;
        Ok(dir.to_string_lossy().into_owned())
    }

    fn worktree_patch(&mut self, dir: &str) -> Result<String, HostError> {
        super::worktree_patch(Path::new(dir)).map_err(HostError::from)
    }

    fn worktree_remove(&mut self, dir: &str) -> Result<(), HostError> {
        super::worktree_remove(self.root()?, Path::new(dir)).map_err(HostError::from)
    }

    fn worktree_merge(
        &mut self,
        pre_merge: &[String],
        patches: &[(u32, String)],
    ) -> Result<(), HostError> {
        super::merge_patches(self.root()?, pre_merge, patches).map_err(HostError::from)
    }
}
