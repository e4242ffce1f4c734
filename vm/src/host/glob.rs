//! Globs over a jailed workspace (X4 `artifacts` entries; X3's `glob()`
//! built-in is meant to share [`glob`]).
//!
//! Owns: the pattern rules ([`compile`]: `globset` syntax, relative, `/`
//! separated, `*` and `?` never cross a `/`, `**` matches any number of
//! directories, no `..` or absolute patterns) and the walk that lists the
//! workspace-relative paths of regular files a pattern matches, sorted, at
//! most `cap` of them ([`glob`]). The compiler calls [`compile`] too, so a
//! pattern that `check` accepts is one the walk accepts.
//! Must never: open a path by its text or follow a symlink (every directory
//! is opened relative to its parent's descriptor with `O_NOFOLLOW |
//! O_DIRECTORY`; a symlink is neither listed nor entered, whatever it points
//! at), list anything but regular files, enter `.git`, or return more than
//! `cap` paths (more is [`GlobError::TooMany`]).

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use globset::{GlobBuilder, GlobMatcher};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};

use super::workspace::Workspace;

/// The most paths one glob may match (more is an error, never a truncation).
pub const MAX_MATCHES: usize = crate::interp::MAX_GLOB_MATCHES;
/// The deepest directory a walk enters (below the root).
pub const MAX_DEPTH: usize = 64;
/// The most directory entries one walk looks at.
pub const MAX_VISITED: usize = 1_000_000;

/// Why a glob has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The pattern is not a glob (`globset`'s reason).
    #[error("glob {pattern:?} does not parse: {reason}")]
    Syntax { pattern: String, reason: String },
    /// The pattern is absolute or climbs with `..`.
    #[error("glob {pattern:?} leaves the workspace: globs are relative and have no `..`")]
    LeavesRoot { pattern: String },
    /// More files match than the cap allows.
    #[error("glob {pattern:?} matches more than {cap} files; narrow it")]
    TooMany { pattern: String, cap: usize },
    /// The walk looked at more entries than [`MAX_VISITED`].
    #[error("glob {pattern:?} looked at more than {MAX_VISITED} directory entries; narrow it")]
    TooBig { pattern: String },
    /// A directory could not be read.
    #[error("glob {pattern:?}: cannot read directory {dir:?}: {reason}")]
    Io {
        pattern: String,
        dir: String,
        reason: String,
    },
}

/// Whether `text` has glob metacharacters (`*`, `?`, `[`; `**` included):
/// the rule that makes an `artifacts` entry a glob.
pub fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Compiles a pattern by the rules of this module.
pub fn compile(pattern: &str) -> Result<GlobMatcher, GlobError> {
    if pattern.is_empty() {
        return Err(GlobError::Syntax {
            pattern: String::new(),
            reason: "the pattern is empty".into(),
        });
    }
    let leaves =
        pattern.starts_with('/') || pattern.contains('\\') || pattern.split('/').any(|c| c == "..");
    if leaves {
        return Err(GlobError::LeavesRoot {
            pattern: pattern.to_owned(),
        });
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(false)
        .empty_alternates(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| GlobError::Syntax {
            pattern: pattern.to_owned(),
            reason: e.kind().to_string(),
        })
}

/// The regular files under `root` that `pattern` matches, as sorted
/// workspace-relative paths with `/` separators; more than `cap` is an error.
pub fn glob(root: &Workspace, pattern: &str, cap: usize) -> Result<Vec<String>, GlobError> {
    let matcher = compile(pattern)?;
    let prefix: Vec<&str> = pattern
        .trim_start_matches("./")
        .split('/')
        .take_while(|c| !is_glob(c) && !c.contains('{'))
        .collect();
    let mut walk = Walk {
        pattern,
        matcher,
        prefix,
        cap,
        visited: 0,
        found: Vec::new(),
    };
    walk.dir(root.dir(), "", 0)?;
    walk.found.sort();
    Ok(walk.found)
}

struct Walk<'p> {
    pattern: &'p str,
    matcher: GlobMatcher,
    /// The pattern's literal leading components (a directory outside them
    /// cannot hold a match; the last one may be the file name itself).
    prefix: Vec<&'p str>,
    cap: usize,
    visited: usize,
    found: Vec<String>,
}

impl Walk<'_> {
    fn io(&self, dir: &str, e: impl std::fmt::Display) -> GlobError {
        GlobError::Io {
            pattern: self.pattern.to_owned(),
            dir: if dir.is_empty() {
                ".".into()
            } else {
                dir.into()
            },
            reason: e.to_string(),
        }
    }

    /// Lists the directory `fd` (at `rel`, `depth` below the root).
    fn dir(&mut self, fd: BorrowedFd<'_>, rel: &str, depth: usize) -> Result<(), GlobError> {
        let mut entries = Dir::read_from(fd).map_err(|e| self.io(rel, e))?;
        let mut subdirs: Vec<String> = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| self.io(rel, e))?;
            let Some(name) = plain_name(entry.file_name()) else {
                continue;
            };
            self.visited += 1;
            if self.visited > MAX_VISITED {
                return Err(GlobError::TooBig {
                    pattern: self.pattern.to_owned(),
                });
            }
            let path = if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            };
            let kind = match entry.file_type() {
                FileType::Unknown => statat(fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
                    .map_err(|e| self.io(rel, e))?,
                known => known,
            };
            match kind {
                FileType::RegularFile if self.matcher.is_match(&path) => {
                    if self.found.len() == self.cap {
                        return Err(GlobError::TooMany {
                            pattern: self.pattern.to_owned(),
                            cap: self.cap,
                        });
                    }
                    self.found.push(path);
                }
                FileType::Directory if name != ".git" && self.may_hold(depth, name) => {
                    subdirs.push(name.to_owned());
                }
                _ => {}
            }
        }
        if depth + 1 > MAX_DEPTH {
            return Ok(());
        }
        for name in subdirs {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            // a directory swapped for a symlink or a file since the listing is skipped
            let Ok(sub): Result<OwnedFd, _> = openat(fd, name.as_str(), flags, Mode::empty())
            else {
                continue;
            };
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            self.dir(sub.as_fd(), &path, depth + 1)?;
        }
        Ok(())
    }

    /// Whether directory `name` at `depth` can hold a match: it must equal
    /// the pattern's literal component there, when there is one.
    fn may_hold(&self, depth: usize, name: &str) -> bool {
        self.prefix.get(depth).is_none_or(|lit| *lit == name)
    }
}

/// A directory entry's name as UTF-8, without `.` and `..` (names that are
/// not UTF-8 cannot be written in a pattern and are skipped).
fn plain_name(name: &CStr) -> Option<&str> {
    match name.to_str() {
        Ok("." | "..") | Err(_) => None,
        Ok(s) => Some(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> (tempfile::TempDir, Workspace) {
        let d = tempfile::tempdir().expect("a temporary directory");
        let r = d.path();
        fs::create_dir_all(r.join("out/figs")).expect("mkdir");
        fs::create_dir_all(r.join(".git")).expect("mkdir");
        fs::write(r.join("out/a.md"), "a").expect("write");
        fs::write(r.join("out/b.md"), "b").expect("write");
        fs::write(r.join("out/figs/c.png"), "c").expect("write");
        fs::write(r.join("out/figs/d.md"), "d").expect("write");
        fs::write(r.join(".git/x.md"), "x").expect("write");
        fs::write(r.join("top.md"), "t").expect("write");
        let ws = Workspace::new(r).expect("a workspace");
        (d, ws)
    }

    #[test]
    fn star_stays_in_its_directory_and_double_star_descends() {
        let (_d, ws) = tree();
        assert_eq!(
            glob(&ws, "out/*.md", MAX_MATCHES).expect("globs"),
            ["out/a.md", "out/b.md"]
        );
        assert_eq!(
            glob(&ws, "out/**/*.md", MAX_MATCHES).expect("globs"),
            ["out/a.md", "out/b.md", "out/figs/d.md"]
        );
        assert_eq!(
            glob(&ws, "**/*.md", MAX_MATCHES).expect("globs"),
            ["out/a.md", "out/b.md", "out/figs/d.md", "top.md"],
            "`.git` is never entered"
        );
        assert_eq!(
            glob(&ws, "out/figs/?.png", MAX_MATCHES).expect("globs"),
            ["out/figs/c.png"]
        );
        assert!(
            glob(&ws, "none/*.md", MAX_MATCHES)
                .expect("globs")
                .is_empty()
        );
    }

    #[test]
    fn more_than_the_cap_is_an_error() {
        let (_d, ws) = tree();
        assert_eq!(
            glob(&ws, "**/*.md", 2),
            Err(GlobError::TooMany {
                pattern: "**/*.md".into(),
                cap: 2
            })
        );
    }

    #[test]
    fn symlinks_are_neither_listed_nor_entered() {
        let (d, ws) = tree();
        let outside = tempfile::tempdir().expect("a temporary directory");
        fs::write(outside.path().join("secret.md"), "s").expect("write");
        std::os::unix::fs::symlink(outside.path(), d.path().join("out/escape")).expect("link");
        std::os::unix::fs::symlink(d.path().join("top.md"), d.path().join("out/inner.md"))
            .expect("link");
        let all = glob(&ws, "**/*.md", MAX_MATCHES).expect("globs");
        assert!(
            !all.iter()
                .any(|p| p.contains("secret") || p.contains("inner"))
        );
    }

    #[test]
    fn patterns_that_leave_the_root_or_do_not_parse_are_refused() {
        assert!(matches!(
            compile("../x/*"),
            Err(GlobError::LeavesRoot { .. })
        ));
        assert!(matches!(
            compile("/etc/*"),
            Err(GlobError::LeavesRoot { .. })
        ));
        assert!(matches!(
            compile("out/[a.md"),
            Err(GlobError::Syntax { .. })
        ));
        assert!(is_glob("a/**/b") && is_glob("a?") && is_glob("[ab]") && !is_glob("a/b.md"));
    }
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn artifacts_hash_as_sha256sum_and_missing_or_outside_files_are_told_apart() {
        let d = tempfile::tempdir().expect("a temporary directory");
        let body = vec![b'x'; 200_000]; // more than one read buffer
        std::fs::write(d.path().join("big.bin"), &body).expect("write");
        std::fs::create_dir(d.path().join("dir")).expect("mkdir");
        let ws = Workspace::new(d.path()).expect("a workspace");
        let h = ws.sha256("./big.bin").expect("hashes").expect("a file");
        assert_eq!(h.path, "big.bin");
        assert_eq!(h.size, 200_000);
        assert_eq!(h.sha256, crate::eval::sha256_hex(&body));
        assert_eq!(ws.sha256("nope.md").expect("no error"), None);
        assert_eq!(
            ws.sha256("dir").expect("no error"),
            None,
            "not a regular file"
        );
        assert!(
            ws.sha256("../x").is_err(),
            "the jail refuses paths above the root"
        );
    }
}
