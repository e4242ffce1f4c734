//! `glob(pattern)` (language 1.1, X3): the regular files beneath the
//! workspace root whose root-relative path matches a glob.
//!
//! Owns: what a pattern may be (relative: no leading `/`, no `..`
//! component, no NUL, not empty; `globset` syntax with `*` and `?` never
//! crossing a `/`, `**` any number of directories, `{a,b}`, `[...]`), the
//! walk (iterative, each directory opened component by component from the
//! root's descriptor with `O_NOFOLLOW | O_DIRECTORY`, so it never leaves the
//! root and never follows a symbolic link: a link is neither walked into nor
//! matched; the top-level `.git` directory is not walked), the caps (at most [`MAX_GLOB_MATCHES`] matches and
//! [`MAX_ENTRIES`] directory entries visited, either is an error) and the
//! order of the answer (sorted by byte, which is code point order).
//! Must never: open a path by its text from the working directory or `/`,
//! follow a symlink, read a file, or recurse.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use globset::{GlobBuilder, GlobMatcher};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};

use super::workspace::JailError;
use crate::interp::MAX_GLOB_MATCHES;

/// Most directory entries one `glob` looks at.
pub const MAX_ENTRIES: usize = 1_000_000;

/// The sorted relative paths of the regular files beneath `root` matching
/// `pattern`.
pub(super) fn glob(root: BorrowedFd<'_>, pattern: &str) -> Result<Vec<String>, JailError> {
    let matcher = compile(pattern)?;
    let too_many = |what: String| JailError::TooMany {
        pattern: pattern.to_owned(),
        what,
    };
    let mut found = Vec::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    let mut entries = 0usize;
    while let Some(parts) = pending.pop() {
        let Some(dir) = open_dir(root, &parts) else {
            // gone, replaced by a link, or unreadable meanwhile: nothing there
            continue;
        };
        for (name, kind) in list(&dir) {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(too_many(format!(
                    "walks more than {MAX_ENTRIES} directory entries"
                )));
            }
            let mut path = parts.clone();
            path.push(name);
            match kind {
                // the repository's own store is not workspace content
                FileType::Directory if path.len() == 1 && path[0] == ".git" => {}
                FileType::Directory => pending.push(path),
                FileType::RegularFile => {
                    let rel = path.join("/");
                    if matcher.is_match(&rel) {
                        found.push(rel);
                        if found.len() > MAX_GLOB_MATCHES {
                            return Err(too_many(format!(
                                "matches more than {MAX_GLOB_MATCHES} files"
                            )));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Compiles a relative pattern.
fn compile(pattern: &str) -> Result<GlobMatcher, JailError> {
    let bad = |why: &str| JailError::BadGlob {
        pattern: pattern.to_owned(),
        why: why.to_owned(),
    };
    if pattern.is_empty() {
        return Err(bad("it is empty"));
    }
    if pattern.contains('\0') {
        return Err(bad("it contains a NUL character"));
    }
    if pattern.starts_with('/') || pattern.starts_with('\\') {
        return Err(bad(
            "it is absolute; patterns are relative to the workspace root",
        ));
    }
    if pattern.split(['/', '\\']).any(|part| part == "..") {
        return Err(bad("`..` would leave the workspace root"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| bad(&e.kind().to_string()))
}

/// Opens the directory at `parts` beneath `root`, one component at a time,
/// never following a link.
fn open_dir(root: BorrowedFd<'_>, parts: &[String]) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = openat(root, ".", flags, Mode::empty()).ok()?;
    for part in parts {
        dir = openat(dir.as_fd(), part.as_str(), flags, Mode::empty()).ok()?;
    }
    Some(dir)
}

/// The entries of `dir` with UTF-8 names and their types (`lstat`: a link
/// is a link).
fn list(dir: &OwnedFd) -> Vec<(String, FileType)> {
    let Ok(entries) = Dir::read_from(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(_) => continue,
            },
            known => known,
        };
        out.push((name.to_owned(), kind));
    }
    out
}
