//! The standard host: the system clock, file predicates jailed to the
//! workspace root (or an item's worktree), the configured judge, and git
//! worktrees for isolated fanout items.
//!
//! Owns: wiring the interpreter's [`Host`] seam to the effects of this
//! module's parent (`Workspace`, `judge`, the git helpers).
//! Must never: decide what an answer means (the interpreter does).

use std::path::Path;

use serde_json::Value;

use super::{JudgeConfig, Workspace};
use crate::interp::{FileEvidence, FileRoot, Host, HostError, Verdict};

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
    /// The host of a new run whose workspace root is `root` (`None`: file
    /// predicates are refused), with the judge of the configuration a new
    /// run there gets ([`crate::config::for_run`]: the operator's
    /// `$STRATUM_HOME/stratum.toml` merged with the workspace's).
    pub fn for_root(root: Option<&Path>) -> Result<StdHost, String> {
        let resolved = crate::config::for_run(None, root).map_err(|e| e.to_string())?;
        StdHost::with_config(root, &resolved.config)
    }

    /// The host of a run whose workspace root is `root`, with the judge of
    /// an already read `config`: a new run's ([`crate::config::for_run`]) or
    /// a stored run's frozen copy ([`crate::config::of_run`]).
    pub fn with_config(
        root: Option<&Path>,
        config: &crate::config::Config,
    ) -> Result<StdHost, String> {
        let workspace = root
            .map(|r| Workspace::new(r).map_err(|e| format!("workspace {}: {e}", r.display())))
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
            FileRoot::Worktree(dir) => Workspace::new(dir).map_err(HostError::Io),
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
        self.jail(root)?
            .file_exists(path)
            .map_err(HostError::Refused)
    }

    fn file_contains(
        &mut self,
        root: FileRoot<'_>,
        path: &str,
        text: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        self.jail(root)?
            .file_contains(path, text)
            .map_err(HostError::Refused)
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
        let o = super::judge(cfg, statement, stakes, context).map_err(HostError::Judge)?;
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
        let dir = super::worktree_create(self.root()?, run_id, name).map_err(HostError::Git)?;
        Ok(dir.to_string_lossy().into_owned())
    }

    fn worktree_patch(&mut self, dir: &str) -> Result<String, HostError> {
        super::worktree_patch(Path::new(dir)).map_err(HostError::Git)
    }

    fn worktree_remove(&mut self, dir: &str) -> Result<(), HostError> {
        super::worktree_remove(self.root()?, Path::new(dir)).map_err(HostError::Git)
    }

    fn worktree_merge(
        &mut self,
        pre_merge: &[String],
        patches: &[(u32, String)],
    ) -> Result<(), HostError> {
        super::merge_patches(self.root()?, pre_merge, patches).map_err(HostError::Git)
    }
}
