//! Reading the files a user names: specs, plan files, `--inputs @FILE`,
//! configurations, legacy specs — every read of `stratumc` goes through
//! [`read`] or [`read_text`].
//!
//! Owns: the size limit of each kind of input ([`Kind::limit`]), opening
//! without ever blocking (`O_NONBLOCK`: a FIFO without a writer cannot hang
//! the open), deciding on the opened descriptor what may be read (regular
//! files; pipes, FIFOs and character devices as streams, so `/dev/stdin`
//! and `<(cmd)` work; anything else is refused), reading at most the limit
//! plus one byte (`Read::take`), and the error text of all of this.
//! Must never: parse what it reads, read a byte past `limit + 1`, or block
//! on an open.
//!
//! A regular file over the limit is refused from its size before a byte is
//! read; a stream is read until it passes the limit. A stream may still
//! wait for its writer (a silent pipe on `/dev/stdin` waits, as `cat` would);
//! a FIFO that nobody has opened for writing reads as empty.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One mebibyte.
const MIB: u64 = 1024 * 1024;

/// Largest spec (`.stratum.yaml`, and legacy v0.x specs): the S0009 limit
/// of the compiler.
pub const SPEC_LIMIT: u64 = stratum_compiler::analysis::MAX_FILE_SIZE as u64;
/// Largest plan file (`.stratumc`), and the largest source of `run` (a spec
/// or a plan).
pub const PLAN_LIMIT: u64 = 64 * MIB;
/// Largest `--inputs @FILE` (JSON).
pub const INPUTS_LIMIT: u64 = 16 * MIB;

/// What a file is read as; decides its limit and how errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A spec (`check`, `build`, `cost`, `graph`, `migrate`).
    Spec,
    /// A plan file (`inspect`).
    Plan,
    /// The source of `run`: a spec or a plan file.
    SpecOrPlan,
    /// A JSON inputs file (`--inputs @FILE`).
    Inputs,
}

impl Kind {
    /// The most bytes a file of this kind may hold.
    pub fn limit(self) -> u64 {
        match self {
            Kind::Spec => SPEC_LIMIT,
            Kind::Plan | Kind::SpecOrPlan => PLAN_LIMIT,
            Kind::Inputs => INPUTS_LIMIT,
        }
    }

    /// How an error names the file.
    fn noun(self) -> &'static str {
        match self {
            Kind::Spec => "a spec",
            Kind::Plan => "a plan file",
            Kind::SpecOrPlan => "a spec or plan file",
            Kind::Inputs => "an inputs file",
        }
    }

    /// What to do about a file over the limit.
    fn advice(self) -> &'static str {
        match self {
            Kind::Spec => {
                "move the data out of the spec into workspace files or flow inputs (`stratumc explain S0009`)"
            }
            Kind::Plan | Kind::SpecOrPlan => {
                "give a plan written by `stratumc build`, or the spec itself"
            }
            Kind::Inputs => "put large data in workspace files and pass their paths as inputs",
        }
    }
}

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The operating system refused (no such file, permission, …).
    Io {
        /// The file as named.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// Not a file or a stream (a directory, a block device, …).
    NotReadable {
        /// The file as named.
        path: PathBuf,
        /// What it is instead (`a directory`).
        what: &'static str,
    },
    /// Over the limit of its kind.
    TooLarge {
        /// The file as named.
        path: PathBuf,
        /// What it was read as.
        kind: Kind,
        /// Its size, when known (regular files); `None` for a stream.
        size: Option<u64>,
    },
    /// Not UTF-8 where text is needed ([`read_text`]).
    NotUtf8 {
        /// The file as named.
        path: PathBuf,
        /// What it was read as.
        kind: Kind,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            ReadError::NotReadable { path, what } => write!(
                f,
                "cannot read {}: it is {what}; give a file, or a pipe such as /dev/stdin",
                path.display()
            ),
            ReadError::TooLarge { path, kind, size } => {
                let limit = kind.limit();
                let held = match size {
                    Some(n) => format!("is {n} bytes"),
                    None => format!("holds more than {limit} bytes"),
                };
                write!(
                    f,
                    "cannot read {}: it {held}, but {} is limited to {} MiB ({limit} bytes); {}",
                    path.display(),
                    kind.noun(),
                    limit / MIB,
                    kind.advice()
                )
            }
            ReadError::NotUtf8 { path, kind } => write!(
                f,
                "cannot read {}: {} must be UTF-8 text",
                path.display(),
                kind.noun()
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads `path` as a `kind`: all of it, or an error once it passes the limit.
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, ReadError> {
    let io = |error| ReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let (file, size) = open(path, kind)?;
    let limit = kind.limit();
    let mut bytes = Vec::with_capacity(size.map_or(0, |n| n as usize));
    // one byte more than allowed tells a file at the limit from one past it
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            kind,
            size: None,
        });
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, kind: Kind) -> Result<String, ReadError> {
    String::from_utf8(read(path, kind)?).map_err(|_| ReadError::NotUtf8 {
        path: path.to_path_buf(),
        kind,
    })
}

/// Opens `path` without blocking and decides from the descriptor whether
/// it may be read: a regular file (its size, checked against the limit) or
/// a stream (no size; switched back to blocking reads).
fn open(path: &Path, kind: Kind) -> Result<(File, Option<u64>), ReadError> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::FileTypeExt;

    let io = |error: std::io::Error| ReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::open(path, flags, Mode::empty()).map_err(|e| io(e.into()))?);
    let meta = file.metadata().map_err(io)?;
    let ty = meta.file_type();
    if ty.is_file() {
        if meta.len() > kind.limit() {
            return Err(ReadError::TooLarge {
                path: path.to_path_buf(),
                kind,
                size: Some(meta.len()),
            });
        }
        return Ok((file, Some(meta.len())));
    }
    if ty.is_fifo() || ty.is_char_device() || ty.is_socket() {
        // the open could not block; the reads may wait for a writer, as a pipe's do
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| io(e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(|e| io(e.into()))?;
        return Ok((file, None));
    }
    let what = if ty.is_dir() {
        "a directory"
    } else if ty.is_block_device() {
        "a block device"
    } else {
        "not a file"
    };
    Err(ReadError::NotReadable {
        path: path.to_path_buf(),
        what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stratumc-input-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_at_the_limit_is_read_and_one_byte_more_is_refused() {
        let dir = scratch("limit");
        let at = dir.join("at.json");
        let over = dir.join("over.json");
        std::fs::write(&at, vec![b' '; INPUTS_LIMIT as usize]).unwrap();
        std::fs::write(&over, vec![b' '; INPUTS_LIMIT as usize + 1]).unwrap();
        assert_eq!(
            read(&at, Kind::Inputs).unwrap().len(),
            INPUTS_LIMIT as usize
        );
        let e = read(&over, Kind::Inputs).unwrap_err();
        assert!(
            matches!(e, ReadError::TooLarge { size: Some(n), .. } if n == INPUTS_LIMIT + 1),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("is 16777217 bytes"), "{text}");
        assert!(
            text.contains("limited to 16 MiB (16777216 bytes)"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sparse_plan_over_the_limit_is_refused_by_its_size() {
        let dir = scratch("sparse");
        let big = dir.join("big.stratumc");
        File::create(&big).unwrap().set_len(PLAN_LIMIT + 1).unwrap();
        let e = read(&big, Kind::Plan).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    size: Some(_),
                    kind: Kind::Plan,
                    ..
                }
            ),
            "{e:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_endless_stream_stops_after_the_limit() {
        let e = read(Path::new("/dev/zero"), Kind::Inputs).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { size: None, .. }), "{e:?}");
        assert!(
            e.to_string().contains("holds more than 16777216 bytes"),
            "{e}"
        );
    }

    #[test]
    fn directories_and_missing_files_are_errors_that_name_the_file() {
        let dir = scratch("dir");
        let e = read(&dir, Kind::Spec).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NotReadable {
                    what: "a directory",
                    ..
                }
            ),
            "{e:?}"
        );
        let missing = dir.join("missing.stratum.yaml");
        let e = read(&missing, Kind::Spec).unwrap_err();
        assert!(matches!(e, ReadError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("missing.stratum.yaml"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn text_must_be_utf8() {
        let dir = scratch("utf8");
        let bad = dir.join("inputs.json");
        std::fs::write(&bad, [b'"', 0xff, b'"']).unwrap();
        let e = read_text(&bad, Kind::Inputs).unwrap_err();
        assert!(
            e.to_string().contains("an inputs file must be UTF-8 text"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
