//! The standard host: the system clock, file predicates jailed to the
//! workspace root (or an item's worktree), the configured judge, and git
//! worktrees for isolated fanout items, declared commands (X12).
//!
//! Owns: wiring the interpreter's [`Host`] seam to the effects of this
//! module's parent (`Workspace`, `judge`, the git helpers), and the one
//! mapping of their typed errors to [`HostError`] kinds (`From` impls, each a
//! `match`: jail refusals and files over the limit are `Refused`, the root or
//! a read failing is `Io`, git is `Git`, the judge is `Judge`).
//! Must never: decide what an answer means (the interpreter does), or
//! recover an error's kind from its text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    Capped, GitError, JailError, JudgeConfig, JudgeError, JudgeInput, MAX_INPUT_BYTES,
    MAX_INPUTS_TOTAL_BYTES, Workspace,
};
use crate::config::ConfigError;
use crate::eval::sha256_hex;
use crate::interp::{
    CommandRequest, CommandRun, FileEvidence, FileHash, FileRead, FileRoot, Host, HostError,
    InputDigest, JudgeAsk, JudgeRequest, Restore, TreeDiff, Verdict,
};

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
            JailError::Refused { .. }
            | JailError::TooLarge { .. }
            | JailError::ArtifactTooLarge { .. }
            | JailError::BadGlob { .. }
            | JailError::TooMany { .. } => HostError::Refused(message),
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
            | JudgeError::MalformedVerdict { .. }
            | JudgeError::MalformedScore { .. } => HostError::Judge(e.to_string()),
        }
    }
}

/// The standard host: a workspace root for file predicates, a judge, the system clock.
pub struct StdHost {
    /// Jail for `file_exists` / `file_contains`.
    pub workspace: Option<Workspace>,
    /// The default judge (`[judge]`).
    pub judge: Option<JudgeConfig>,
    /// The named judges (`[judges.NAME]` that configure a runner).
    pub judges: BTreeMap<String, JudgeConfig>,
    /// The declared commands (`[commands.NAME]`, X12).
    pub commands: BTreeMap<String, crate::config::CommandConfig>,
    /// Asked while a declared command runs (the driver's: the run was
    /// cancelled, a signal came); `None`: commands run to their end or
    /// their timeout.
    pub stop: Option<std::sync::Arc<crate::agent::StopProbe>>,
}

/// Why a file predicate has no root to look in.
const NO_ROOT: &str = "file function requires a workspace root";

impl StdHost {
    /// The host of a new run whose workspace root is `root` (`None`: file
    /// predicates are refused), with the judge of the configuration a new
    /// run there gets ([`crate::config::for_run`]: the operator's
    /// `$STRATUM_HOME/stratum.toml` merged with the workspace's).
    pub fn for_root(root: Option<&Path>) -> Result<StdHost, HostSetupError> {
        let resolved = crate::config::for_run(None, root)?;
        StdHost::with_config(root, &resolved.config)
    }

    /// The host of a run whose workspace root is `root`, with the judge of
    /// an already read `config`: a new run's ([`crate::config::for_run`]) or
    /// a stored run's frozen copy ([`crate::config::of_run`]).
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
        let judges = config
            .judge_runners()
            .into_iter()
            .filter_map(|(name, cfg)| Some((name?, cfg)))
            .collect();
        let commands = config
            .commands
            .keys()
            .filter_map(|n| Some((n.clone(), config.command(n)?)))
            .collect();
        Ok(StdHost {
            workspace,
            judge: config.judge_runner(),
            judges,
            commands,
            stop: None,
        })
    }

    /// The runner a request names: `[judges.NAME]`, else the default.
    fn runner(&self, name: Option<&str>) -> Result<&JudgeConfig, HostError> {
        match name {
            None => self.judge.as_ref().ok_or_else(|| {
                HostError::NoJudge(super::NO_JUDGE_REASON.to_owned())
            }),
            Some(n) => self.judges.get(n).ok_or_else(|| {
                let known: Vec<&str> = self.judges.keys().map(String::as_str).collect();
                let hint = crate::suggest::suggest(n, known.iter().copied())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                HostError::NoJudge(format!(
                    "judged predicate names judge `{n}`, but stratum.toml configures no runner under [judges.{n}]{hint}; add [judges.{n}] with url and model, or name a configured judge"
                ))
            }),
        }
    }

    fn root(&self) -> Result<&Path, HostError> {
        self.workspace.as_ref().map(Workspace::root).ok_or_else(|| {
            HostError::Unsupported("`isolation: worktree` needs a workspace root".to_owned())
        })
    }

    /// The directory git runs in for a snapshot at `root` (X11).
    fn git_root(&self, root: FileRoot<'_>) -> Result<std::path::PathBuf, HostError> {
        match root {
            FileRoot::Workspace => self
                .workspace
                .as_ref()
                .map(|w| w.root().to_path_buf())
                .ok_or_else(|| HostError::Unsupported("`scope` needs a workspace root".to_owned())),
            FileRoot::Worktree(dir) => Ok(std::path::PathBuf::from(dir)),
        }
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

/// Reads the input files of a scored judge call through `jail`: each a
/// regular UTF-8 file of at most [`MAX_INPUT_BYTES`], [`MAX_INPUTS_TOTAL_BYTES`]
/// in all; what is sent and the digests the audit records. A missing, large
/// or binary input is refused (the predicate fails; it is not a judge error).
pub fn read_judge_inputs(
    jail: &Workspace,
    paths: &[String],
) -> Result<(Vec<JudgeInput>, Vec<InputDigest>), HostError> {
    let (mut sent, mut digests, mut total) = (Vec::new(), Vec::new(), 0u64);
    for p in paths {
        let (rel, found) = jail.read_capped(p, MAX_INPUT_BYTES)?;
        let bytes = match found {
            Capped::File(b) => b,
            Capped::Missing => {
                return Err(HostError::Refused(format!(
                    "judge input {rel:?} is not a regular file in the workspace"
                )));
            }
            Capped::Over(size) => {
                return Err(HostError::Refused(format!(
                    "judge input {rel:?} is {size} bytes, over the limit of {MAX_INPUT_BYTES} bytes per input file"
                )));
            }
        };
        total += bytes.len() as u64;
        if total > MAX_INPUTS_TOTAL_BYTES {
            return Err(HostError::Refused(format!(
                "judge inputs are over the limit of {MAX_INPUTS_TOTAL_BYTES} bytes in all (at {rel:?})"
            )));
        }
        digests.push(InputDigest {
            path: rel.clone(),
            size: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
        });
        let text = String::from_utf8(bytes).map_err(|e| {
            HostError::Refused(format!(
                "judge input {rel:?} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        })?;
        sent.push(JudgeInput { path: rel, text });
    }
    Ok((sent, digests))
}

impl Host for StdHost {
    fn run_command(&mut self, req: &CommandRequest<'_>) -> Result<CommandRun, HostError> {
        let cwd = match req.root {
            FileRoot::Workspace => self
                .workspace
                .as_ref()
                .map(|w| w.root().to_path_buf())
                .ok_or_else(|| {
                    HostError::Command("a declared command needs a workspace root".to_owned())
                })?,
            FileRoot::Worktree(dir) => PathBuf::from(dir),
        };
        super::commands::run_stoppable(&self.commands, req, &cwd, self.stop.as_deref())
    }

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

    fn read_file(
        &mut self,
        root: FileRoot<'_>,
        path: &str,
    ) -> Result<(FileRead, FileEvidence), HostError> {
        self.jail(root)?.read_file(path).map_err(HostError::from)
    }

    fn hash_file(&mut self, root: FileRoot<'_>, path: &str) -> Result<Option<FileHash>, HostError> {
        self.jail(root)?.sha256(path).map_err(HostError::from)
    }

    fn glob(&mut self, root: FileRoot<'_>, pattern: &str) -> Result<Vec<String>, HostError> {
        self.jail(root)?.glob(pattern).map_err(HostError::from)
    }

    fn judge(
        &mut self,
        statement: &str,
        stakes: &str,
        context: &Value,
    ) -> Result<Verdict, HostError> {
        let req = JudgeRequest {
            judge: None,
            ask: JudgeAsk::Statement { statement, stakes },
            context,
            inputs: &[],
            root: FileRoot::Workspace,
        };
        self.judge_request(&req)
    }

    fn judge_request(&mut self, req: &JudgeRequest<'_>) -> Result<Verdict, HostError> {
        let cfg = self.runner(req.judge)?;
        match req.ask {
            JudgeAsk::Statement { statement, stakes } => {
                let o = super::judge(cfg, statement, stakes, req.context)?;
                Ok(Verdict {
                    holds: o.holds,
                    reason: o.reason,
                    model: o.model,
                    tokens: o.tokens.unwrap_or(0) as f64,
                    ..Verdict::default()
                })
            }
            JudgeAsk::Rubric { rubric, threshold } => {
                let (sent, digests) = read_judge_inputs(&self.jail(req.root)?, req.inputs)?;
                let cfg = self.runner(req.judge)?;
                let o = super::judge_scored(cfg, rubric, req.context, &sent)?;
                Ok(Verdict {
                    holds: o.score >= threshold,
                    reason: o.reasons.join("; "),
                    model: o.model,
                    tokens: o.tokens.unwrap_or(0) as f64,
                    usd: 0.0,
                    score: Some(o.score),
                    reasons: o.reasons,
                    inputs: digests,
                })
            }
        }
    }

    fn pause_ms(&mut self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }

    fn snapshots_ready(&self, root: FileRoot<'_>) -> Result<(), HostError> {
        super::snapshot::is_repository(&self.git_root(root)?).map_err(HostError::from)
    }

    fn snapshot(
        &mut self,
        root: FileRoot<'_>,
        run_id: &str,
        name: &str,
    ) -> Result<String, HostError> {
        super::snapshot::snapshot(&self.git_root(root)?, run_id, name).map_err(HostError::from)
    }

    fn snapshot_diff(
        &mut self,
        root: FileRoot<'_>,
        tree: &str,
        run_id: &str,
        name: &str,
    ) -> Result<TreeDiff, HostError> {
        super::snapshot::diff(&self.git_root(root)?, tree, run_id, name).map_err(HostError::from)
    }

    fn snapshot_restore(
        &mut self,
        root: FileRoot<'_>,
        tree: &str,
        paths: &[Restore],
    ) -> Result<Vec<String>, HostError> {
        super::snapshot::restore(&self.git_root(root)?, tree, paths).map_err(HostError::from)
    }

    fn snapshots_drop(&mut self, run_id: &str) -> Result<(), HostError> {
        match self.workspace.as_ref() {
            Some(w) if super::snapshot::is_repository(w.root()).is_ok() => {
                super::snapshot::drop_refs(w.root(), run_id).map_err(HostError::from)
            }
            _ => Ok(()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A host rooted at `ws/` inside a fresh temp dir, with no judge.
    fn host() -> (tempfile::TempDir, StdHost) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).expect("the root is made");
        let host = StdHost::with_config(Some(&root), &Config::default()).expect("a usable root");
        (dir, host)
    }

    #[test]
    fn jail_errors_map_to_their_host_error_kinds() {
        let (dir, mut host) = host();
        let root = dir.path().join("ws");
        let refused = host.file_exists(FileRoot::Workspace, "../x").unwrap_err();
        assert!(
            matches!(&refused, HostError::Refused(m) if m.contains("leaves the workspace root")),
            "{refused:?}"
        );
        std::os::unix::fs::symlink(dir.path(), root.join("out")).unwrap();
        let outside = host.file_contains(FileRoot::Workspace, "out/x", "x");
        assert!(
            matches!(&outside, Err(HostError::Refused(m)) if m.contains("outside the workspace root")),
            "{outside:?}"
        );
        let big = std::fs::File::create(root.join("big")).unwrap();
        big.set_len(super::super::MAX_FILE_BYTES + 1).unwrap();
        let too_large = host.file_contains(FileRoot::Workspace, "big", "x");
        assert!(
            matches!(&too_large, Err(HostError::Refused(m)) if m.contains("over the 16 MiB limit")),
            "{too_large:?}"
        );
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        let looped = host.file_exists(FileRoot::Workspace, "loop");
        assert!(
            matches!(&looped, Err(HostError::Io(m)) if m.starts_with("cannot resolve file path \"loop\"")),
            "{looped:?}"
        );
        let gone = dir.path().join("gone").to_string_lossy().into_owned();
        let no_root = host.file_exists(FileRoot::Worktree(&gone), "x");
        assert!(
            matches!(&no_root, Err(HostError::Io(m)) if m.contains("is not usable")),
            "{no_root:?}"
        );
    }

    #[test]
    fn git_judge_and_setup_errors_keep_their_kind_and_message() {
        let (dir, mut host) = host();
        // the temp dir is no git repository
        let git = host.worktree_create("run", "item").unwrap_err();
        assert!(
            matches!(&git, HostError::Git(m) if m.contains("not inside a git repository")),
            "{git:?}"
        );
        let judge = HostError::from(JudgeError::Timeout { ms: 300 });
        assert_eq!(
            judge,
            HostError::Judge("judge timed out after 300 ms".into())
        );
        let missing = dir.path().join("missing");
        let setup = StdHost::with_config(Some(&missing), &Config::default())
            .err()
            .expect("a missing root is refused");
        assert!(
            matches!(&setup, HostSetupError::Workspace { root, source: JailError::RootUnusable { .. } } if root == &missing),
            "{setup:?}"
        );
        assert!(
            setup.to_string().starts_with(&format!(
                "workspace {}: workspace root {} is not usable: ",
                missing.display(),
                missing.display()
            )),
            "{setup}"
        );
    }
}
