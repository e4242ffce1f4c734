//! Opening a file beneath a directory descriptor without a race: the lookup
//! of a jailed path.
//!
//! Owns: turning the components of a lexically clean relative path into an
//! open descriptor of what is there, resolved strictly beneath the root's
//! descriptor. On Linux one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! does it: the kernel follows symlinks only while they stay beneath the root
//! and answers `EXDEV` for any that leaves it (or that is absolute). When the
//! kernel refuses (`EXDEV`, `EAGAIN` after a concurrent rename, `ENOSYS` on an
//! old kernel or under seccomp, ...) the lookup walks the components itself:
//! each one opened with `O_NOFOLLOW` relative to the descriptor of its parent.
//! A symlink met on the way is read with `readlinkat`; its target is resolved
//! lexically against the real path of the link's directory (the root's real
//! path and the names the walk entered), must name a place under the root's
//! real path, and is then walked again from the root's descriptor. So a link
//! is followed exactly when its target, as text, stays inside (`../ws/src`
//! from the root `…/ws` is fine, `/etc` and `../../x` are not), and whatever
//! is swapped in meanwhile is met by the walk, never by the kernel. The final
//! file is opened `O_NONBLOCK | O_NOCTTY` and its type is checked on the
//! descriptor (`fstat`), so a FIFO, socket or device swapped in is reported,
//! never waited on.
//!
//! Must never: resolve a path by its text from the process's working
//! directory or from `/` (every lookup is relative to a held descriptor),
//! follow a symlink with the kernel outside `openat2`'s `RESOLVE_BENEATH`,
//! block in `open`, or read anything (the caller reads the descriptor).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, fstat, openat, readlinkat};

/// What a lookup beneath the root found.
#[derive(Debug)]
pub(super) enum Found {
    /// A regular file, open for reading, with its size when it was opened.
    File(OwnedFd, u64),
    /// Something that is not a regular file: a directory (the root
    /// included), a FIFO, a socket, a device.
    NotRegular,
    /// Nothing is there, or a component on the way is not a directory.
    Missing,
}

/// Why a lookup gave no answer.
#[derive(Debug)]
pub(super) enum LookupError {
    /// The path leads outside the root (through a symlink).
    Outside,
    /// The file system refused (permissions, too many symlinks, ...).
    Io(io::Error),
}

/// Most symlinks one lookup follows (Linux's own limit).
const MAX_LINKS: usize = 40;

/// How the final component is opened: read-only, never waiting (a FIFO
/// opens at once), never becoming a controlling terminal.
fn file_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// Looks `parts` (lexically clean components: no `..`, `.` or empty ones)
/// up beneath `root`, whose real path is `root_path`.
pub(super) fn open_beneath(
    root: BorrowedFd<'_>,
    root_path: &Path,
    parts: &[&str],
) -> Result<Found, LookupError> {
    if parts.is_empty() {
        return Ok(Found::NotRegular);
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(found) = by_openat2(root, parts)? {
        return Ok(found);
    }
    walk(root, root_path, parts)
}

/// The kernel's answer, or `None` when the walk must decide.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn by_openat2(root: BorrowedFd<'_>, parts: &[&str]) -> Result<Option<Found>, LookupError> {
    use rustix::fs::{ResolveFlags, openat2};
    use rustix::io::Errno;
    let path = parts.join("/");
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    match openat2(root, path.as_str(), file_flags(), Mode::empty(), resolve) {
        Ok(fd) => classify(fd).map(Some),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(Some(Found::Missing)),
        Err(Errno::NXIO) => Ok(Some(Found::NotRegular)),
        // EXDEV (leaves the root, or an absolute symlink), EAGAIN (a
        // concurrent rename), ENOSYS/EPERM (no openat2 here), ELOOP, EACCES:
        // the walk gives the answer and the error
        Err(_) => Ok(None),
    }
}

/// A step of the walk: go up (a `..` of a symlink target) or into a name.
enum Step {
    Up,
    Into(OsString),
}

/// Resolves `parts` component by component from `root` (see the module doc).
fn walk(root: BorrowedFd<'_>, root_path: &Path, parts: &[&str]) -> Result<Found, LookupError> {
    use rustix::io::Errno;
    let mut pending: VecDeque<Step> = steps(Path::new(&parts.join("/"))).collect();
    // the directories entered below the root (the last one is the current)
    // and their names: the real path of the current directory below the root
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut names: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(step) = pending.pop_front() {
        let name = match step {
            Step::Up => {
                stack.pop().ok_or(LookupError::Outside)?;
                names.pop();
                continue;
            }
            Step::Into(name) => name,
        };
        let dir = stack.last().map_or(root, |fd| fd.as_fd());
        let last = pending.is_empty();
        let flags = if last {
            file_flags() | OFlags::NOFOLLOW
        } else {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        match openat(dir, name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) if last => return classify(fd),
            Ok(fd) => {
                stack.push(fd);
                names.push(name);
            }
            Err(Errno::NOENT) => return Ok(Found::Missing),
            Err(Errno::NXIO) => return Ok(Found::NotRegular),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let Some(target) = link_target(dir, &name)? else {
                    return Ok(Found::Missing); // a file where a directory is needed
                };
                links += 1;
                if links > MAX_LINKS {
                    return Err(LookupError::Io(Errno::LOOP.into()));
                }
                let rest = target_below_root(&target, root_path, &names)?;
                // walked again from the root
                stack.clear();
                names.clear();
                for s in steps(&rest).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(s);
                }
            }
            Err(e) => return Err(LookupError::Io(e.into())),
        }
    }
    // the last step went up (`link -> ..`): a directory
    Ok(Found::NotRegular)
}

/// The target of the symlink `name` in `dir`; `None` when it is not a
/// symlink (or is gone: it changed under the walk, and nothing is there now).
fn link_target(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<OsString>, LookupError> {
    use rustix::io::Errno;
    match readlinkat(dir, name, Vec::new()) {
        Ok(target) => Ok(Some(OsStr::from_bytes(target.as_bytes()).to_owned())),
        Err(Errno::INVAL | Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(LookupError::Io(e.into())),
    }
}

/// Where a symlink target leads, relative to the root: the target joined
/// to the real path of the link's directory (`root_path` and `names`),
/// normalized lexically (`..` removes a component), which must lie under
/// `root_path`.
fn target_below_root(
    target: &OsStr,
    root_path: &Path,
    names: &[OsString],
) -> Result<PathBuf, LookupError> {
    let mut here: PathBuf = root_path
        .iter()
        .chain(names.iter().map(|n| n.as_os_str()))
        .collect();
    here.push(target); // an absolute target replaces `here`
    let mut full = PathBuf::new();
    for c in here.components() {
        match c {
            Component::ParentDir => {
                full.pop();
            }
            Component::CurDir => {}
            other => full.push(other),
        }
    }
    full.strip_prefix(root_path)
        .map(Path::to_path_buf)
        .map_err(|_| LookupError::Outside)
}

/// The steps of a relative path: `..` goes up (on the walk's stack, never
/// through the kernel), `.` and empty components are nothing.
fn steps(path: &Path) -> impl Iterator<Item = Step> + '_ {
    path.components().filter_map(|c| match c {
        Component::ParentDir => Some(Step::Up),
        Component::Normal(n) => Some(Step::Into(n.to_owned())),
        Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
    })
}

/// The type of what was opened, read from its descriptor.
fn classify(fd: OwnedFd) -> Result<Found, LookupError> {
    let stat = fstat(&fd).map_err(|e| LookupError::Io(e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile {
        Ok(Found::File(fd, u64::try_from(stat.st_size).unwrap_or(0)))
    } else {
        Ok(Found::NotRegular)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A root with `src/x.ts`, links in and out, and a FIFO.
    fn fixture() -> (tempfile::TempDir, std::path::PathBuf, OwnedFd) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/x.ts"), "x").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        symlink(root.join("src/x.ts"), root.join("abs-in")).unwrap();
        symlink("src/x.ts", root.join("rel-in")).unwrap();
        symlink("src/../src", root.join("rel-dir")).unwrap();
        symlink("..", root.join("src/up")).unwrap();
        symlink("../ws/src", root.join("back")).unwrap();
        symlink("../ws-other", root.join("sibling")).unwrap();
        symlink("../secret", root.join("rel-out")).unwrap();
        symlink(dir.path().join("secret"), root.join("abs-out")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        symlink("nowhere", root.join("dangling")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let fd = openat(
            rustix::fs::CWD,
            &root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        (dir, root, fd)
    }

    fn answer(r: Result<Found, LookupError>) -> &'static str {
        match r {
            Ok(Found::File(..)) => "file",
            Ok(Found::NotRegular) => "not regular",
            Ok(Found::Missing) => "missing",
            Err(LookupError::Outside) => "outside",
            Err(LookupError::Io(_)) => "io",
        }
    }

    #[test]
    fn the_kernel_and_the_walk_give_the_same_answers() {
        let (_dir, root, fd) = fixture();
        for (path, expected) in [
            ("src/x.ts", "file"),
            ("abs-in", "file"),
            ("rel-in", "file"),
            ("rel-dir/x.ts", "file"),
            ("src/up/src/x.ts", "file"),
            ("back/x.ts", "file"),
            ("sibling", "outside"),
            ("src/up", "not regular"),
            ("src", "not regular"),
            ("pipe", "not regular"),
            ("rel-out", "outside"),
            ("abs-out", "outside"),
            ("src/up/../secret", "outside"),
            ("dangling", "missing"),
            ("src/nope", "missing"),
            ("src/x.ts/inner", "missing"),
            ("loop", "io"),
        ] {
            let parts: Vec<&str> = path.split('/').collect();
            let walked = answer(walk(fd.as_fd(), &root, &parts));
            assert_eq!(walked, expected, "walk: {path}");
            let opened = answer(open_beneath(fd.as_fd(), &root, &parts));
            assert_eq!(opened, expected, "open_beneath: {path}");
        }
    }
}
