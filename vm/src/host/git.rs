//! Git worktrees of `isolation: worktree` fanout items (reference
//! v1-runtime §4.12): [`worktree_create`] (a detached checkout of HEAD in the
//! system temp directory), [`worktree_patch`] (everything staged, `git diff
//! --binary`), [`worktree_remove`], and [`merge_patches`] (`pre_merge`
//! commands in the root, then a 3-way `git apply --index` per patch, in
//! order), with the typed [`GitError`].
//!
//! Owns: running the `git` program (and `pre_merge` commands) with captured
//! output, and the patch limit ([`MAX_PATCH_BYTES`]).
//! Must never: touch a directory other than the root's repository, the
//! worktrees it made under the temp directory, and their run's folder; or
//! prompt (`GIT_TERMINAL_PROMPT=0`).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Why a git operation (or a `pre_merge` command) failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The command could not be started.
    #[error("cannot run `{what}`: {source}")]
    Spawn { what: String, source: io::Error },
    /// Waiting for the command failed.
    #[error("`{what}` failed: {source}")]
    Wait { what: String, source: io::Error },
    /// The command exited unsuccessfully; `tail` is the end of what it printed.
    #[error("`{what}` exited with {status}: {tail}")]
    Exit {
        what: String,
        status: ExitStatus,
        tail: String,
    },
    /// The workspace root is not inside a git repository.
    #[error("the workspace root is not inside a git repository ({source})")]
    NotARepository { source: Box<GitError> },
    /// The repository has no commit for items to start from.
    #[error(
        "the workspace repository has no commit yet; items start from HEAD, so commit once first"
    )]
    NoCommit,
    /// A directory for the worktrees could not be made.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    /// A worktree's directory could not be removed.
    #[error("cannot remove {}: {source}", path.display())]
    RemoveDir { path: PathBuf, source: io::Error },
    /// An item's patch is over [`MAX_PATCH_BYTES`].
    #[error("the item's changes are {size} bytes as a patch; the limit is {MAX_PATCH_BYTES}")]
    PatchTooLarge { size: usize },
    /// An item's patch is not UTF-8 (it is stored as text).
    #[error(
        "the item's patch is not valid UTF-8 (a text file in a legacy encoding?); mark such files binary in .gitattributes"
    )]
    PatchNotUtf8,
    /// An item's patch does not apply to the root.
    #[error("item {item}'s patch does not apply: {source}")]
    DoesNotApply { item: u32, source: Box<GitError> },
}

/// Most bytes of an item's patch (it is stored in the run state).
pub const MAX_PATCH_BYTES: usize = 16 * 1024 * 1024;

/// Runs `git -C dir ARGS` (with `input` on stdin) and returns its stdout; a
/// failure says which command failed and the end of what git printed.
pub(super) fn git(dir: &Path, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
    run_captured(
        Command::new("git").arg("-C").arg(dir).args(args),
        &format!("git {}", args.join(" ")),
        input,
    )
}

/// [`git`] with `GIT_INDEX_FILE=index`: a temporary index, so the user's
/// index is never read for writing nor changed (X11 snapshots).
pub(super) fn git_with_index(dir: &Path, index: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
    run_captured(
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_INDEX_FILE", index),
        &format!("git {}", args.join(" ")),
        None,
    )
}

pub(super) fn run_captured(
    cmd: &mut Command,
    what: &str,
    input: Option<&[u8]>,
) -> Result<Vec<u8>, GitError> {
    let mut child = cmd
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| GitError::Spawn {
            what: what.to_owned(),
            source,
        })?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // written on its own thread: the command may fill its output pipes before reading all of it
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let out = child.wait_with_output().map_err(|source| GitError::Wait {
        what: what.to_owned(),
        source,
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let text = if err.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        err.into_owned()
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(6)..].join("; ");
    Err(GitError::Exit {
        what: what.to_owned(),
        status: out.status,
        tail,
    })
}

pub(super) fn trimmed(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// A file name made of safe characters only (`fan/3` → `fan_3`).
pub(super) fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether `sha` (hexadecimal, 4 to 64 digits) names a commit object in the
/// repository holding `root` (STRAT-GUARD's `git_commit_exists`): `git
/// cat-file -t` must answer `commit`, so a tree, a blob or an unknown or
/// ambiguous name is `false`. `Err` when `root` is not in a repository.
pub fn commit_exists(root: &Path, sha: &str) -> Result<bool, GitError> {
    if !(4..=64).contains(&sha.len()) || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(false);
    }
    git(root, &["rev-parse", "--git-dir"], None).map_err(|e| GitError::NotARepository {
        source: Box::new(e),
    })?;
    match git(root, &["cat-file", "-t", sha], None) {
        Ok(kind) => Ok(trimmed(kind) == "commit"),
        Err(GitError::Exit { .. }) => Ok(false),
        Err(other) => Err(other),
    }
}

/// Creates (or finds) the worktree `name` of run `run_id`: a detached
/// checkout of HEAD of the repository holding `root`, under the system temp
/// directory. Returns the directory that corresponds to `root` inside it (the
/// worktree itself when `root` is the repository's top level).
pub fn worktree_create(root: &Path, run_id: &str, name: &str) -> Result<PathBuf, GitError> {
    let top = PathBuf::from(trimmed(
        git(root, &["rev-parse", "--show-toplevel"], None).map_err(|e| {
            GitError::NotARepository {
                source: Box::new(e),
            }
        })?,
    ));
    let prefix = trimmed(git(root, &["rev-parse", "--show-prefix"], None)?);
    git(&top, &["rev-parse", "--verify", "--quiet", "HEAD"], None)
        .map_err(|_| GitError::NoCommit)?;
    let dir = std::env::temp_dir()
        .join("stratum-worktrees")
        .join(safe_name(run_id))
        .join(safe_name(name));
    if !dir.join(".git").exists() {
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent).map_err(|source| GitError::CreateDir {
                path: parent.to_owned(),
                source,
            })?;
        }
        // a leftover directory of a worktree that was half made
        if dir.exists() {
            let _ = fs::remove_dir_all(&dir);
            let _ = git(&top, &["worktree", "prune"], None);
        }
        let d = dir.to_string_lossy().into_owned();
        git(&top, &["worktree", "add", "--detach", &d, "HEAD"], None)?;
    }
    Ok(if prefix.is_empty() {
        dir
    } else {
        dir.join(prefix.trim_end_matches('/'))
    })
}

/// Stages everything in the worktree holding `dir` (new files included,
/// ignored files excluded) and returns `git diff --binary --cached HEAD`.
pub fn worktree_patch(dir: &Path) -> Result<String, GitError> {
    let top = PathBuf::from(trimmed(git(dir, &["rev-parse", "--show-toplevel"], None)?));
    git(&top, &["add", "--all"], None)?;
    let patch = git(
        &top,
        &[
            "diff",
            "--cached",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "HEAD",
        ],
        None,
    )?;
    if patch.len() > MAX_PATCH_BYTES {
        return Err(GitError::PatchTooLarge { size: patch.len() });
    }
    String::from_utf8(patch).map_err(|_| GitError::PatchNotUtf8)
}

/// Removes the worktree holding `dir` from the repository holding `root`;
/// one already gone is not an error.
pub fn worktree_remove(root: &Path, dir: &Path) -> Result<(), GitError> {
    if !dir.exists() {
        let _ = git(root, &["worktree", "prune"], None);
        return Ok(());
    }
    let top = PathBuf::from(trimmed(git(dir, &["rev-parse", "--show-toplevel"], None)?));
    let t = top.to_string_lossy().into_owned();
    let removed = git(root, &["worktree", "remove", "--force", &t], None);
    if removed.is_err() {
        // not a registered worktree any more: remove the directory, forget the record
        fs::remove_dir_all(&top).map_err(|source| GitError::RemoveDir {
            path: top.clone(),
            source,
        })?;
        let _ = git(root, &["worktree", "prune"], None);
    }
    // the run's folder goes with its last worktree
    if let Some(parent) = top.parent() {
        let _ = fs::remove_dir(parent);
    }
    Ok(())
}

/// Runs each `pre_merge` command (`sh -c`) in `root`, then applies the
/// patches in the order given with a 3-way `git apply --index` at the
/// repository's top level, skipping a patch that is already applied (so a
/// re-run settlement merges nothing twice). Stops at the first error.
pub fn merge_patches(
    root: &Path,
    pre_merge: &[String],
    patches: &[(u32, String)],
) -> Result<(), GitError> {
    for cmd in pre_merge {
        run_captured(
            Command::new("sh").arg("-c").arg(cmd).current_dir(root),
            &format!("pre_merge {cmd}"),
            None,
        )?;
    }
    if patches.is_empty() {
        return Ok(());
    }
    let top = PathBuf::from(trimmed(git(root, &["rev-parse", "--show-toplevel"], None)?));
    for (k, patch) in patches {
        // already applied (a settlement re-run after a crash or a commit
        // conflict): its reverse applies cleanly, so it is skipped
        let applied = git(
            &top,
            &["apply", "--reverse", "--check", "--index", "-"],
            Some(patch.as_bytes()),
        )
        .is_ok();
        if applied {
            continue;
        }
        git(
            &top,
            &["apply", "--3way", "--index", "--whitespace=nowarn", "-"],
            Some(patch.as_bytes()),
        )
        .map_err(|e| GitError::DoesNotApply {
            item: *k,
            source: Box::new(e),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_ok(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn commit_exists_names_commit_objects_only() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        assert!(matches!(
            commit_exists(outside.path(), "abcd"),
            Err(GitError::NotARepository { .. })
        ));
        fs::write(repo.path().join("a.txt"), "a\n").unwrap();
        git_ok(repo.path(), &["init", "-q"]);
        git_ok(repo.path(), &["add", "a.txt"]);
        git_ok(repo.path(), &["commit", "-q", "-m", "one"]);
        let head = trimmed(git(repo.path(), &["rev-parse", "HEAD"], None).unwrap());
        let tree = trimmed(git(repo.path(), &["rev-parse", "HEAD^{tree}"], None).unwrap());
        assert!(commit_exists(repo.path(), &head).unwrap());
        assert!(commit_exists(repo.path(), &head[..8]).unwrap());
        // a tree, an unknown name, a revision expression, an option: not commits
        assert!(!commit_exists(repo.path(), &tree).unwrap());
        assert!(!commit_exists(repo.path(), &"0".repeat(40)).unwrap());
        assert!(!commit_exists(repo.path(), "HEAD").unwrap());
        assert!(!commit_exists(repo.path(), "--all").unwrap());
    }

    #[test]
    fn worktrees_start_at_head_and_merge_their_patches_in_order() {
        let repo = tempfile::tempdir().unwrap();
        let root = repo.path().join("sub");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("a.txt"), "a\n").unwrap();
        git_ok(repo.path(), &["init", "-q"]);
        // no commit yet: items cannot start from HEAD
        let e = worktree_create(&root, "run-t", "fan-e0-0").unwrap_err();
        assert!(matches!(e, GitError::NoCommit), "{e}");
        assert!(e.to_string().contains("no commit yet"), "{e}");
        git_ok(repo.path(), &["add", "-A"]);
        git_ok(repo.path(), &["commit", "-q", "-m", "init"]);
        let run = format!("run-host-test-{}", std::process::id());
        // the item works in the worktree's copy of the workspace subdirectory
        let w0 = worktree_create(&root, &run, "fan-e0-0").unwrap();
        let w1 = worktree_create(&root, &run, "fan/e0/1").unwrap();
        let w2 = worktree_create(&root, &run, "fan-e0-2").unwrap();
        assert!(w0.ends_with("fan-e0-0/sub"), "{}", w0.display());
        assert_eq!(fs::read_to_string(w0.join("a.txt")).unwrap(), "a\n");
        // creating it again finds the same one
        assert_eq!(worktree_create(&root, &run, "fan-e0-0").unwrap(), w0);
        fs::write(w0.join("new.bin"), [0u8, 1, 2, 255]).unwrap();
        fs::write(w1.join("a.txt"), "a\nb\n").unwrap();
        fs::write(w2.join("a.txt"), "a\nc\n").unwrap();
        let p2 = worktree_patch(&w2).unwrap();
        let (p0, p1) = (worktree_patch(&w0).unwrap(), worktree_patch(&w1).unwrap());
        assert!(
            p0.contains("sub/new.bin") && p0.contains("GIT binary patch"),
            "{p0}"
        );
        assert!(p1.contains("+b"), "{p1}");
        for w in [&w0, &w1, &w2] {
            worktree_remove(&root, w).unwrap();
            assert!(!w.exists());
            // a second removal is not an error
            worktree_remove(&root, w).unwrap();
        }
        merge_patches(
            &root,
            &["echo ran > pre.txt".to_owned()],
            &[(0, p0.clone()), (1, p1)],
        )
        .unwrap();
        assert_eq!(fs::read(root.join("new.bin")).unwrap(), [0u8, 1, 2, 255]);
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a\nb\n");
        assert_eq!(fs::read_to_string(root.join("pre.txt")).unwrap(), "ran\n");
        // merging the same patches again (a re-run settlement) changes nothing
        merge_patches(&root, &[], &[(0, p0.clone())]).unwrap();
        assert_eq!(fs::read(root.join("new.bin")).unwrap(), [0u8, 1, 2, 255]);
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a\nb\n");
        // a patch of the same lines conflicts; a failing pre_merge stops before any patch
        let e = merge_patches(&root, &[], &[(2, p2)]).unwrap_err();
        assert!(matches!(e, GitError::DoesNotApply { item: 2, .. }), "{e}");
        assert!(
            e.to_string().starts_with("item 2's patch does not apply"),
            "{e}"
        );
        let e = merge_patches(&root, &["exit 4".to_owned()], &[(0, p0)]).unwrap_err();
        assert!(matches!(e, GitError::Exit { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("pre_merge exit 4") && e.contains("exit status: 4"),
            "{e}"
        );
    }
}
