//! The workspace jail: `file_exists` / `file_contains` under a workspace
//! root, with the evidence the audit records.
//!
//! Owns: the jail's path rules (reference v1-language §8.3: relative,
//! non-empty, no NUL, `..` resolved lexically and never above the root),
//! the descriptor of the root held for the jail's lifetime, reading a file
//! (at most [`MAX_FILE_BYTES`]) from the descriptor [`super::beneath`]
//! opened, the [`FileEvidence`] of each call and the typed [`JailError`].
//! `file(path)` (X3) reads through the same lookup (its text up to
//! [`MAX_TEXT_BYTES`], its hash up to [`MAX_HASH_BYTES`]); `glob(pattern)`
//! walks beneath the same descriptor (`super::glob`).
//! Must never: open a path by its text (every lookup goes through
//! `beneath::open_beneath` from the root's descriptor), read a file that
//! is not regular, or read more than [`MAX_FILE_BYTES`] + 1 bytes for a
//! predicate ([`MAX_HASH_BYTES`] + 1 for `file()`).

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, openat};

use super::beneath::{Found, LookupError, open_beneath};
use crate::eval::sha256_hex;
use crate::interp::{FileEvidence, FileHash, FileRead, MAX_HASH_BYTES, MAX_TEXT_BYTES};

/// The largest file `file_contains` reads (and `file_exists` hashes): 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The largest artifact (X4) the host hashes: 1 GiB.
pub const MAX_ARTIFACT_BYTES: u64 = 1024 * 1024 * 1024;

/// A workspace root that file predicates are jailed to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical (real) path of the root.
    root: PathBuf,
    /// The root directory, opened once: every lookup starts from it.
    dir: Arc<OwnedFd>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

/// Why the jail refused a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The path is the empty string.
    Empty,
    /// The path contains a NUL character.
    Nul,
    /// The path is absolute (`/x`, `\x`, `C:x`).
    Absolute,
    /// Lexically, the path climbs above the root (`../x`).
    LeavesRoot,
    /// The path leads outside the root through a symlink.
    Outside,
}

impl Refusal {
    /// The sentence for a refused `path`.
    fn message(self, path: &str) -> String {
        match self {
            Refusal::Empty => "file path is empty".to_owned(),
            Refusal::Nul => format!("file path {path:?} contains a NUL character"),
            Refusal::Absolute => {
                format!("file path {path:?} is absolute; paths are relative to the workspace root")
            }
            Refusal::LeavesRoot => format!("file path {path:?} leaves the workspace root"),
            Refusal::Outside => format!(
                "file path {path:?} resolves outside the workspace root (through a symlink)"
            ),
        }
    }
}

/// Why a jailed file predicate (or the jail itself) has no answer.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// The root cannot be resolved or opened.
    #[error("workspace root {} is not usable: {source}", root.display())]
    RootUnusable { root: PathBuf, source: io::Error },
    /// The root is not a directory.
    #[error("workspace root {} is not a directory", root.display())]
    RootNotADirectory { root: PathBuf },
    /// The path (as written) is refused by the jail's rules.
    #[error("{}", .why.message(.path))]
    Refused { path: String, why: Refusal },
    /// Looking the path (as written) up failed: permissions, a symlink loop.
    #[error("cannot resolve file path {path:?}: {source}")]
    Resolve { path: String, source: io::Error },
    /// The file (its normalized path) could not be read.
    #[error("cannot read {path:?}: {source}")]
    Read { path: String, source: io::Error },
    /// The file (its normalized path) is over [`MAX_FILE_BYTES`].
    #[error("file {path:?} is {size} bytes, over the 16 MiB limit of file predicates")]
    TooLarge { path: String, size: u64 },
    /// An artifact (its normalized path) is over [`MAX_ARTIFACT_BYTES`].
    #[error("artifact {path:?} is {size} bytes, over the 1 GiB limit of artifact hashing")]
    ArtifactTooLarge { path: String, size: u64 },
    /// A `glob` pattern that is not a relative glob.
    #[error("glob pattern {pattern:?} is invalid: {why}")]
    BadGlob { pattern: String, why: String },
    /// A `glob` matched more than [`crate::interp::MAX_GLOB_MATCHES`] files
    /// (or its walk met more than [`super::glob::MAX_VISITED`] entries).
    #[error("glob pattern {pattern:?} {what}; narrow the pattern")]
    TooMany { pattern: String, what: String },
}

/// What [`Workspace::read_capped`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capped {
    /// The file's bytes.
    File(Vec<u8>),
    /// No regular file is there.
    Missing,
    /// A file of this many bytes, over the cap: not read.
    Over(u64),
}

/// What a path leads to, with its normalized relative form.
struct Looked {
    rel: String,
    found: Found,
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, JailError> {
        let root = root.as_ref();
        let unusable = |source| JailError::RootUnusable {
            root: root.to_owned(),
            source,
        };
        let real = std::fs::canonicalize(root).map_err(unusable)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = match openat(rustix::fs::CWD, &real, flags, Mode::empty()) {
            Ok(dir) => dir,
            Err(rustix::io::Errno::NOTDIR) => {
                return Err(JailError::RootNotADirectory {
                    root: root.to_owned(),
                });
            }
            Err(e) => return Err(unusable(e.into())),
        };
        Ok(Workspace {
            root: real,
            dir: Arc::new(dir),
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root's descriptor, for walks that start from it (`glob.rs`).
    pub(super) fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The sha256 of a regular file (X4 artifacts), read in a streaming way
    /// from the descriptor the jail opened: `None` when no regular file is
    /// there; a file over [`MAX_ARTIFACT_BYTES`] is refused.
    pub fn sha256(&self, path: &str) -> Result<Option<FileHash>, JailError> {
        let Looked { rel, found } = self.look(path)?;
        let (fd, size) = match found {
            Found::File(fd, size) => (fd, size),
            Found::NotRegular | Found::Missing => return Ok(None),
        };
        if size > MAX_ARTIFACT_BYTES {
            return Err(JailError::ArtifactTooLarge { path: rel, size });
        }
        let read_err = |source| JailError::Read {
            path: rel.clone(),
            source,
        };
        let mut hasher = sha2::Sha256::new();
        let mut reader = std::fs::File::from(fd).take(MAX_ARTIFACT_BYTES + 1);
        let mut buf = vec![0u8; 64 * 1024];
        let mut total: u64 = 0;
        loop {
            let n = reader.read(&mut buf).map_err(read_err)?;
            if n == 0 {
                break;
            }
            total += n as u64;
            hasher.update(&buf[..n]);
        }
        if total > MAX_ARTIFACT_BYTES {
            return Err(JailError::ArtifactTooLarge {
                path: rel,
                size: total,
            });
        }
        let sha256 = hasher
            .finalize()
            .iter()
            .fold(String::with_capacity(64), |mut s, b| {
                use std::fmt::Write;
                let _ = write!(s, "{b:02x}");
                s
            });
        Ok(Some(FileHash {
            path: rel,
            size: total,
            sha256,
        }))
    }

    /// `file_exists(path)`: `exists` is true iff the path resolves to a
    /// regular file inside the root. `Err` for paths the jail refuses.
    pub fn file_exists(&self, path: &str) -> Result<FileEvidence, JailError> {
        let Looked { rel, found } = self.look(path)?;
        let (fd, size) = match found {
            Found::File(fd, size) => (fd, size),
            Found::NotRegular => return Ok(FileEvidence::missing(rel, "not a regular file")),
            Found::Missing => return Ok(FileEvidence::missing(rel, "no such file")),
        };
        if size > MAX_FILE_BYTES {
            return Ok(FileEvidence {
                path: rel,
                exists: true,
                size: Some(size),
                blake3: None,
                note: Some("larger than 16 MiB, not hashed".to_owned()),
                sha256: None,
            });
        }
        let bytes = read_bounded(fd, &rel)?;
        Ok(read_evidence(rel, &bytes))
    }

    /// `file_contains(path, text)`: true iff the path is a regular file whose
    /// contents are valid UTF-8 and contain `text` (case-sensitive). False
    /// for missing files, non-regular files and invalid UTF-8 (with a note in
    /// the evidence). `Err` for refused paths and files over 16 MiB.
    pub fn file_contains(&self, path: &str, text: &str) -> Result<(bool, FileEvidence), JailError> {
        let Looked { rel, found } = self.look(path)?;
        let (fd, size) = match found {
            Found::File(fd, size) => (fd, size),
            Found::NotRegular => {
                return Ok((false, FileEvidence::missing(rel, "not a regular file")));
            }
            Found::Missing => return Ok((false, FileEvidence::missing(rel, "no such file"))),
        };
        if size > MAX_FILE_BYTES {
            return Err(JailError::TooLarge { path: rel, size });
        }
        let bytes = read_bounded(fd, &rel)?;
        let mut evidence = read_evidence(rel, &bytes);
        match std::str::from_utf8(&bytes) {
            Ok(content) => Ok((content.contains(text), evidence)),
            Err(e) => {
                evidence.note = Some(format!(
                    "not valid UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ));
                Ok((false, evidence))
            }
        }
    }

    /// Reads a whole regular file of at most `cap` bytes (a judge's input
    /// file, X5): its normalized path and what was found. A larger file is
    /// not read.
    pub fn read_capped(&self, path: &str, cap: u64) -> Result<(String, Capped), JailError> {
        let Looked { rel, found } = self.look(path)?;
        let (fd, size) = match found {
            Found::File(fd, size) => (fd, size),
            Found::NotRegular | Found::Missing => return Ok((rel, Capped::Missing)),
        };
        if size > cap.min(MAX_FILE_BYTES) {
            return Ok((rel, Capped::Over(size)));
        }
        let bytes = read_bounded(fd, &rel)?;
        if bytes.len() as u64 > cap {
            return Ok((rel, Capped::Over(bytes.len() as u64)));
        }
        Ok((rel, Capped::File(bytes)))
    }

    /// `file(path)` (X3): what is at the path, its text (UTF-8, at most
    /// [`MAX_TEXT_BYTES`]) and SHA-256 (at most [`MAX_HASH_BYTES`]), with
    /// the evidence (blake3 and sha256 when hashed). `Err` only for refused
    /// paths and read failures.
    pub fn read_file(&self, path: &str) -> Result<(FileRead, FileEvidence), JailError> {
        let Looked { rel, found } = self.look(path)?;
        let absent = |rel: String, note: &str| {
            let read = FileRead {
                path: rel.clone(),
                ..FileRead::default()
            };
            (read, FileEvidence::missing(rel, note))
        };
        let (fd, size) = match found {
            Found::File(fd, size) => (fd, size),
            Found::NotRegular => return Ok(absent(rel, "not a regular file")),
            Found::Missing => return Ok(absent(rel, "no such file")),
        };
        let bytes = if size > MAX_HASH_BYTES {
            None
        } else {
            read_limited(fd, &rel, MAX_HASH_BYTES)?
        };
        let Some(bytes) = bytes else {
            let read = FileRead {
                path: rel.clone(),
                exists: true,
                size,
                text: None,
                sha256: None,
            };
            let mut evidence = FileEvidence::missing(rel, "larger than 64 MiB, not hashed");
            (evidence.exists, evidence.size) = (true, Some(size));
            return Ok((read, evidence));
        };
        let mut evidence = read_evidence(rel.clone(), &bytes);
        let sha256 = sha256_hex(&bytes);
        evidence.sha256 = Some(sha256.clone());
        let size = bytes.len() as u64;
        let text = if size <= MAX_TEXT_BYTES {
            String::from_utf8(bytes).ok()
        } else {
            None
        };
        if text.is_none() {
            evidence.note = Some("no text: not UTF-8 or larger than 8 MiB".to_owned());
        }
        let read = FileRead {
            path: rel,
            exists: true,
            size,
            text,
            sha256: Some(sha256),
        };
        Ok((read, evidence))
    }

    /// The sorted workspace-relative paths of the regular files that the
    /// glob `pattern` matches (X3 `glob()`, X4 `artifacts`): the walk of
    /// [`super::glob`], at most [`crate::interp::MAX_GLOB_MATCHES`] paths.
    pub fn glob(&self, pattern: &str) -> Result<Vec<String>, JailError> {
        use super::glob::{GlobError, MAX_VISITED};
        let cap = crate::interp::MAX_GLOB_MATCHES;
        super::glob::glob(self, pattern, cap).map_err(|e| match e {
            GlobError::Syntax { pattern, reason } => JailError::BadGlob {
                pattern,
                why: reason,
            },
            GlobError::LeavesRoot { pattern } => JailError::BadGlob {
                pattern,
                why: "globs are relative to the workspace and have no `..` or `\\`".into(),
            },
            GlobError::TooMany { pattern, cap } => JailError::TooMany {
                pattern,
                what: format!("matches more than {cap} files"),
            },
            GlobError::TooBig { pattern } => JailError::TooMany {
                pattern,
                what: format!("looked at more than {MAX_VISITED} directory entries"),
            },
            GlobError::Io {
                pattern,
                dir,
                reason,
            } => JailError::Read {
                path: format!("{dir} (walking glob {pattern:?})"),
                source: io::Error::other(reason),
            },
        })
    }

    /// Applies the jail: the path's syntax and lexical containment, then a
    /// lookup beneath the root's descriptor.
    fn look(&self, path: &str) -> Result<Looked, JailError> {
        let parts = lexical_parts(path)?;
        let rel = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        match open_beneath(self.dir.as_fd(), &self.root, &parts) {
            Ok(found) => Ok(Looked { rel, found }),
            Err(LookupError::Outside) => Err(refused(path, Refusal::Outside)),
            Err(LookupError::Io(source)) => Err(JailError::Resolve {
                path: path.to_owned(),
                source,
            }),
        }
    }
}

fn refused(path: &str, why: Refusal) -> JailError {
    JailError::Refused {
        path: path.to_owned(),
        why,
    }
}

/// The evidence of a file that was read.
fn read_evidence(rel: String, bytes: &[u8]) -> FileEvidence {
    FileEvidence {
        path: rel,
        exists: true,
        size: Some(bytes.len() as u64),
        blake3: Some(blake3::hash(bytes).to_hex().to_string()),
        note: None,
        sha256: None,
    }
}

/// Reads at most [`MAX_FILE_BYTES`]; a file that grew past it is refused.
fn read_bounded(fd: OwnedFd, rel: &str) -> Result<Vec<u8>, JailError> {
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| JailError::Read {
            path: rel.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(JailError::TooLarge {
            path: rel.to_owned(),
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Reads at most `limit` bytes; `None` when the file holds more (it grew
/// past the limit after its size was read).
fn read_limited(fd: OwnedFd, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, JailError> {
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| JailError::Read {
            path: rel.to_owned(),
            source,
        })?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// Checks the syntax of a jailed path and normalizes it lexically. Both `/`
/// and `\` separate components, so `..\x` is refused on every platform.
fn lexical_parts(path: &str) -> Result<Vec<&str>, JailError> {
    if path.is_empty() {
        return Err(refused(path, Refusal::Empty));
    }
    if path.contains('\0') {
        return Err(refused(path, Refusal::Nul));
    }
    let b = path.as_bytes();
    let drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
    if path.starts_with('/') || path.starts_with('\\') || drive {
        return Err(refused(path, Refusal::Absolute));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(refused(path, Refusal::LeavesRoot));
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts)
}
