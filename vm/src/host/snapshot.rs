//! X11 workspace snapshots through git itself: [`snapshot`] (the working
//! tree as a git tree object, kept reachable under `refs/stratum/<run>/…`),
//! [`diff`] (what changed since a snapshot: status, changed bytes, sha256
//! before and after, the unified diff), [`restore`] (paths put back to a
//! snapshot, optionally only where the file is still what a patch record
//! says), [`drop_refs`] (the run's refs removed) and [`is_repository`].
//!
//! Owns: the temporary index (`GIT_INDEX_FILE`) every operation works
//! through, the ref names, and what "changed bytes" means (the bytes of the
//! lines added plus the lines removed; a binary file counts its old plus its
//! new size).
//! Must never: write the user's index, branches, HEAD or stash (only
//! `refs/stratum/` refs and the working-tree paths it is asked to restore),
//! or see `.gitignore`d files (git does not, and neither does a snapshot).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::git::{GitError, git, git_with_index, safe_name, trimmed};
use crate::interp::{ChangeStatus, FileChange, Restore, TreeDiff};

/// Most bytes of the unified diff kept inline in a patch record; the full
/// diff is a blob in the run store.
pub const MAX_INLINE_DIFF_BYTES: usize = 64 * 1024;

/// A temporary index file, removed when dropped. It starts as a copy of the
/// user's index (read, never written) so git reuses its stat cache.
struct TempIndex(PathBuf);

impl TempIndex {
    fn new(dir: &Path, seed: bool) -> Result<TempIndex, GitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "stratum-index-{}-{n}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        if seed {
            let real = PathBuf::from(trimmed(git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", "index"],
                None,
            )?));
            if real.is_file() {
                fs::copy(&real, &path).map_err(|source| GitError::CreateDir {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        Ok(TempIndex(path))
    }
}

impl Drop for TempIndex {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
        let _ = fs::remove_file(self.0.with_extension("lock"));
    }
}

/// Whether `dir` is inside a git working tree.
pub fn is_repository(dir: &Path) -> Result<(), GitError> {
    let inside = git(dir, &["rev-parse", "--is-inside-work-tree"], None).map_err(|e| {
        GitError::NotARepository {
            source: Box::new(e),
        }
    })?;
    if trimmed(inside) == "true" {
        Ok(())
    } else {
        Err(GitError::NotARepository {
            source: Box::new(GitError::NoCommit),
        })
    }
}

/// The ref a snapshot is kept under: `refs/stratum/<run>/<name>`.
fn ref_name(run_id: &str, name: &str) -> String {
    format!("refs/stratum/{}/{}", safe_name(run_id), safe_name(name))
}

/// The working tree under `dir` (everything git sees: tracked and untracked
/// files, not ignored ones) as a tree object; nothing is committed.
fn write_tree(dir: &Path) -> Result<String, GitError> {
    let index = TempIndex::new(dir, true)?;
    git_with_index(dir, &index.0, &["add", "--all", "--", "."])?;
    Ok(trimmed(git_with_index(dir, &index.0, &["write-tree"])?))
}

/// Snapshots the working tree under `dir` and keeps the tree reachable
/// under `refs/stratum/<run_id>/<name>`; returns the tree id.
pub fn snapshot(dir: &Path, run_id: &str, name: &str) -> Result<String, GitError> {
    let tree = write_tree(dir)?;
    git(dir, &["update-ref", &ref_name(run_id, name), &tree], None)?;
    Ok(tree)
}

/// Removes every `refs/stratum/<run_id>/…` ref (one already gone is fine).
pub fn drop_refs(dir: &Path, run_id: &str) -> Result<(), GitError> {
    let prefix = format!("refs/stratum/{}/", safe_name(run_id));
    let refs = git(dir, &["for-each-ref", "--format=%(refname)", &prefix], None)?;
    for r in String::from_utf8_lossy(&refs)
        .lines()
        .filter(|l| !l.is_empty())
    {
        git(dir, &["update-ref", "-d", r], None)?;
    }
    Ok(())
}

/// What changed under `dir` since the snapshot `tree`: a fresh snapshot of
/// the working tree (its id is the diff's `tree`, kept under
/// `refs/stratum/<run_id>/<name>` like the first) compared with it.
pub fn diff(dir: &Path, tree: &str, run_id: &str, name: &str) -> Result<TreeDiff, GitError> {
    let after = snapshot(dir, run_id, name)?;
    let base = ["-c", "core.quotePath=false", "diff-tree"];
    let opts = [
        "-r",
        "--no-renames",
        "--relative",
        "--no-color",
        "--no-ext-diff",
    ];
    let mut args: Vec<&str> = base.to_vec();
    args.extend(opts);
    args.extend(["-z", "--raw", tree, &after]);
    let raw = git(dir, &args, None)?;
    let mut files = parse_raw(&raw);
    let mut args: Vec<&str> = base.to_vec();
    args.extend(opts);
    args.extend(["-p", "-U0", tree, &after]);
    let zero = git(dir, &args, None)?;
    let sections = split_sections(&zero);
    for (f, section) in files.iter_mut().zip(sections) {
        f.bytes = match section_bytes(section) {
            Some(b) => b,
            // binary: the old size plus the new size
            None => blob_size(dir, f.before.as_deref()) + blob_size(dir, f.after.as_deref()),
        };
    }
    for f in &mut files {
        f.before = f
            .before
            .take()
            .map(|oid| blob_sha256(dir, &oid))
            .transpose()?;
        f.after = f
            .after
            .take()
            .map(|oid| blob_sha256(dir, &oid))
            .transpose()?;
    }
    let mut args: Vec<&str> = base.to_vec();
    args.extend(opts);
    args.extend(["-p", "--binary", tree, &after]);
    let patch = String::from_utf8_lossy(&git(dir, &args, None)?).into_owned();
    Ok(TreeDiff {
        tree: after,
        files,
        patch,
    })
}

/// `git diff-tree -z --raw`: `:old new oldsha newsha STATUS\0path\0`. The
/// blob ids go into `before`/`after` for now (hashed by the caller).
fn parse_raw(raw: &[u8]) -> Vec<FileChange> {
    let mut out = Vec::new();
    let mut parts = raw.split(|b| *b == 0).filter(|p| !p.is_empty());
    while let (Some(meta), Some(path)) = (parts.next(), parts.next()) {
        let meta = String::from_utf8_lossy(meta);
        let fields: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [_, _, old, new, status] = fields[..] else {
            continue;
        };
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        let status = match status.chars().next() {
            Some('A') => ChangeStatus::Added,
            Some('D') => ChangeStatus::Deleted,
            _ => ChangeStatus::Modified,
        };
        out.push(FileChange {
            path: String::from_utf8_lossy(path).into_owned(),
            status,
            bytes: 0,
            before: (!zero(old)).then(|| old.to_string()),
            after: (!zero(new)).then(|| new.to_string()),
        });
    }
    out
}

/// The per-file sections of a patch, in order (each from its `diff --git`).
fn split_sections(patch: &[u8]) -> Vec<&[u8]> {
    let text = patch;
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive(|b| *b == b'\n') {
        if line.starts_with(b"diff --git ") {
            starts.push(at);
        }
        at += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &s)| &text[s..starts.get(i + 1).copied().unwrap_or(text.len())])
        .collect()
}

/// Bytes of the added and removed lines of one `-U0` section (a newline
/// counts, except where git says there is none); `None` for a binary file.
fn section_bytes(section: &[u8]) -> Option<u64> {
    let mut bytes = 0u64;
    let mut in_hunk = false;
    for line in section.split(|b| *b == b'\n') {
        if line.starts_with(b"Binary files ") {
            return None;
        }
        if line.starts_with(b"@@") {
            in_hunk = true;
            continue;
        }
        if !in_hunk {
            continue;
        }
        match line.first() {
            Some(b'+' | b'-') => bytes += line.len() as u64, // the sign stands for the newline
            Some(b'\\') => bytes = bytes.saturating_sub(1),
            _ => {}
        }
    }
    Some(bytes)
}

fn blob_size(dir: &Path, oid: Option<&str>) -> u64 {
    oid.and_then(|o| git(dir, &["cat-file", "-s", o], None).ok())
        .and_then(|b| trimmed(b).parse().ok())
        .unwrap_or(0)
}

fn blob_sha256(dir: &Path, oid: &str) -> Result<String, GitError> {
    let bytes = git(dir, &["cat-file", "blob", oid], None)?;
    Ok(format!("{:x}", Sha256::digest(&bytes)))
}

/// The sha256 of the working-tree file `path` under `dir` now (`None`:
/// no file there).
fn current_sha256(dir: &Path, path: &str) -> Option<String> {
    fs::read(dir.join(path))
        .ok()
        .map(|b| format!("{:x}", Sha256::digest(&b)))
}

/// Puts each path back to what it is in `tree` (a path `tree` does not
/// hold is removed); returns the paths left alone because they were not
/// what the caller expected (conflicts). The user's index is not used.
pub fn restore(dir: &Path, tree: &str, paths: &[Restore]) -> Result<Vec<String>, GitError> {
    let mut conflicts = Vec::new();
    let mut checkout: Vec<&str> = Vec::new();
    let index = TempIndex::new(dir, false)?;
    git_with_index(dir, &index.0, &["read-tree", tree])?;
    for p in paths {
        if let Some(expected) = &p.expect
            && current_sha256(dir, &p.path) != *expected
        {
            conflicts.push(p.path.clone());
            continue;
        }
        // ls-files (like checkout-index) run in `dir` takes paths relative to it
        let held = git_with_index(dir, &index.0, &["ls-files", "--", &p.path])
            .map(|o| !trimmed(o).is_empty())
            .unwrap_or(false);
        if held {
            checkout.push(&p.path);
        } else {
            match fs::remove_file(dir.join(&p.path)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(GitError::RemoveDir {
                        path: dir.join(&p.path),
                        source,
                    });
                }
            }
        }
    }
    if !checkout.is_empty() {
        let mut args = vec!["checkout-index", "-f", "--"];
        args.extend(checkout);
        git_with_index(dir, &index.0, &args)?;
    }
    Ok(conflicts)
}

/// The unified diff cut to [`MAX_INLINE_DIFF_BYTES`] at a line end, and
/// whether it was cut.
pub fn bounded_diff(patch: &str) -> (String, bool) {
    if patch.len() <= MAX_INLINE_DIFF_BYTES {
        return (patch.to_string(), false);
    }
    let mut end = MAX_INLINE_DIFF_BYTES;
    while !patch.is_char_boundary(end) {
        end -= 1;
    }
    let cut = patch[..end].rfind('\n').map_or(end, |i| i + 1);
    (patch[..cut].to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git_ok(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().to_path_buf();
        git_ok(&root, &["init", "-q"]);
        fs::write(root.join("a.txt"), "one\ntwo\n").unwrap();
        fs::write(root.join("b.txt"), "bee\n").unwrap();
        fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        git_ok(&root, &["add", "-A"]);
        git_ok(&root, &["commit", "-q", "-m", "init"]);
        (t, root)
    }

    /// What the user sees of their repository: HEAD, the branches, the
    /// index, the stash.
    fn user_state(root: &Path) -> (String, String, String, String) {
        (
            git_ok(root, &["rev-parse", "HEAD"]),
            git_ok(root, &["branch", "-a"]),
            git_ok(root, &["diff", "--cached", "--name-status"]),
            git_ok(root, &["stash", "list"]),
        )
    }

    #[test]
    fn a_snapshot_diff_and_restore_leave_the_users_index_branches_and_stash_alone() {
        let (_t, root) = repo();
        // a staged change and an unstaged one before the snapshot
        fs::write(root.join("b.txt"), "bee\nstaged\n").unwrap();
        git_ok(&root, &["add", "b.txt"]);
        let before = user_state(&root);
        let tree = snapshot(&root, "run-1", "s-0").unwrap();
        assert_eq!(
            git_ok(&root, &["cat-file", "-t", &tree]).trim(),
            "tree",
            "a tree object, not a commit"
        );
        assert_eq!(
            git_ok(&root, &["rev-parse", "refs/stratum/run-1/s-0"]).trim(),
            tree
        );
        // the agent's work: modify, create, delete, and an ignored file
        fs::write(root.join("a.txt"), "one\nTWO\n").unwrap();
        fs::write(root.join("new.txt"), "hello\n").unwrap();
        fs::remove_file(root.join("b.txt")).unwrap();
        fs::create_dir_all(root.join("ignored")).unwrap();
        fs::write(root.join("ignored/x"), "not seen").unwrap();
        let d = diff(&root, &tree, "run-1", "s-0-report").unwrap();
        let got: Vec<(&str, ChangeStatus, u64)> = d
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status, f.bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("a.txt", ChangeStatus::Modified, 8), // "-two\n" + "+TWO\n"
                ("b.txt", ChangeStatus::Deleted, 11), // "bee\nstaged\n"
                ("new.txt", ChangeStatus::Added, 6),
            ]
        );
        let sha = |s: &str| format!("{:x}", Sha256::digest(s.as_bytes()));
        assert_eq!(
            d.files[0].before.as_deref(),
            Some(sha("one\ntwo\n").as_str())
        );
        assert_eq!(
            d.files[0].after.as_deref(),
            Some(sha("one\nTWO\n").as_str())
        );
        assert_eq!(d.files[1].after, None);
        assert_eq!(d.files[2].before, None);
        assert!(
            d.patch.contains("+TWO") && d.patch.contains("+hello"),
            "{}",
            d.patch
        );
        assert_eq!(user_state(&root), before);
        // put back two of them: the modified file and the created one
        let put = |p: &str| Restore {
            path: p.into(),
            expect: None,
        };
        let c = restore(&root, &tree, &[put("a.txt"), put("new.txt")]).unwrap();
        assert!(c.is_empty());
        assert_eq!(
            fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\ntwo\n"
        );
        assert!(!root.join("new.txt").exists());
        assert!(!root.join("b.txt").exists(), "not asked for: stays deleted");
        assert_eq!(user_state(&root), before);
        // a rollback checks what the file is now: b.txt was changed by someone else
        fs::write(root.join("b.txt"), "someone else\n").unwrap();
        let expect = Restore {
            path: "b.txt".into(),
            expect: Some(None),
        };
        let c = restore(&root, &tree, &[expect]).unwrap();
        assert_eq!(c, ["b.txt"]);
        assert_eq!(
            fs::read_to_string(root.join("b.txt")).unwrap(),
            "someone else\n"
        );
        let expect = Restore {
            path: "b.txt".into(),
            expect: Some(Some(sha("someone else\n"))),
        };
        assert!(restore(&root, &tree, &[expect]).unwrap().is_empty());
        assert_eq!(
            fs::read_to_string(root.join("b.txt")).unwrap(),
            "bee\nstaged\n"
        );
        assert_eq!(user_state(&root), before);
        // the run's refs go when the run ends; the trees then may be pruned
        drop_refs(&root, "run-1").unwrap();
        assert!(git_ok(&root, &["for-each-ref", "refs/stratum/"]).is_empty());
        drop_refs(&root, "run-1").unwrap();
    }

    #[test]
    fn a_workspace_below_the_top_level_sees_only_its_own_paths() {
        let (_t, top) = repo();
        let root = top.join("sub");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("in.txt"), "x\n").unwrap();
        let tree = snapshot(&root, "run-2", "s").unwrap();
        fs::write(root.join("in.txt"), "y\n").unwrap();
        fs::write(top.join("a.txt"), "outside\n").unwrap();
        let d = diff(&root, &tree, "run-2", "r").unwrap();
        let paths: Vec<&str> = d.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["in.txt"]);
        let put = Restore {
            path: "in.txt".into(),
            expect: None,
        };
        restore(&root, &tree, &[put]).unwrap();
        assert_eq!(fs::read_to_string(root.join("in.txt")).unwrap(), "x\n");
        drop_refs(&root, "run-2").unwrap();
    }

    #[test]
    fn binary_files_count_their_sizes_and_a_plain_directory_is_no_repository() {
        let (_t, root) = repo();
        let tree = snapshot(&root, "run-3", "s").unwrap();
        fs::write(root.join("img.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
        let d = diff(&root, &tree, "run-3", "r").unwrap();
        assert_eq!(d.files[0].bytes, 6);
        drop_refs(&root, "run-3").unwrap();
        let plain = tempfile::tempdir().unwrap();
        let e = is_repository(plain.path()).unwrap_err();
        assert!(e.to_string().contains("not inside a git repository"), "{e}");
        assert!(is_repository(&root).is_ok());
    }

    #[test]
    fn a_long_diff_is_cut_at_a_line_end() {
        let long = "+x\n".repeat(MAX_INLINE_DIFF_BYTES);
        let (cut, was) = bounded_diff(&long);
        assert!(was && cut.len() <= MAX_INLINE_DIFF_BYTES && cut.ends_with('\n'));
        assert_eq!(bounded_diff("short\n"), ("short\n".to_string(), false));
    }
}
