//! The plan file: a fixed header and a postcard body, identified by the
//! blake3 hash of the body.
//!
//! Layout: `STRATUMP` (8 bytes) · format version (u16 LE) · reserved (u16, 0)
//! · body length (u32 LE) · blake3(body) (32 bytes) · body. The body is the
//! postcard encoding of the [`Plan`], compressed with LZ4 (block format with
//! the decompressed size prepended): plans repeat field names, paths and
//! bytecode shapes, and LZ4 decodes faster than the disk reads.
//! Owns: encoding, decoding and integrity of plan files; [`load`] verifies.
//!
//! Format versions: a file says which version wrote it. This binary writes
//! [`FORMAT_VERSION`] and reads every version from [`OLDEST_VERSION`] up to
//! it — an older body is decoded with that version's types and migrated to
//! the current ones in [`decode_raw`], so runs already in a store keep
//! running after an upgrade (their plan bytes and hash stay as stored). A
//! file newer than the binary is refused ([`LoadError::NewerVersion`]).
//! Must never: accept a body whose hash does not match, or trust any index
//! before [`super::verify`] has checked it.

use super::Plan;
use super::verify::{VerifyError, verify};

/// File magic.
pub const MAGIC: &[u8; 8] = b"STRATUMP";
/// Version of the plan format this binary writes (bump on any change to the
/// data types or opcodes, and teach [`decode_raw`] the previous one).
pub const FORMAT_VERSION: u16 = 5;
/// The oldest format version this binary still reads.
pub const OLDEST_VERSION: u16 = 1;
/// Bytes before the body.
pub const HEADER_LEN: usize = 8 + 2 + 2 + 4 + 32;
/// Largest body accepted when loading.
pub const MAX_BODY: usize = 256 * 1024 * 1024;

/// A plan's identity: blake3 of its encoded body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanHash(pub [u8; 32]);

impl PlanHash {
    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Display for PlanHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Why a plan file could not be loaded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LoadError {
    /// Not a plan file.
    #[error("not a stratumc plan file (bad magic bytes)")]
    BadMagic,
    /// Written by a newer stratumc.
    #[error(
        "plan format version {found} was written by a newer stratumc (this one reads versions {OLDEST_VERSION} to {FORMAT_VERSION}); upgrade stratumc, or rebuild the plan with this one"
    )]
    NewerVersion {
        /// Version in the file.
        found: u16,
    },
    /// A version this binary no longer reads (or never existed).
    #[error(
        "plan format version {found} is not supported (this stratumc reads versions {OLDEST_VERSION} to {FORMAT_VERSION}); rebuild the plan"
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u16,
    },
    /// Shorter than its header says.
    #[error("the plan file is truncated: expected {expected} bytes, found {found}")]
    Truncated {
        /// Bytes expected.
        expected: usize,
        /// Bytes present.
        found: usize,
    },
    /// Longer than its header says.
    #[error("the plan file has {extra} unexpected bytes after the plan")]
    TrailingBytes {
        /// Extra bytes.
        extra: usize,
    },
    /// Body does not match its hash.
    #[error("the plan file is corrupt: its content does not match its hash")]
    HashMismatch,
    /// Body does not decode.
    #[error("the plan file is corrupt: {0}")]
    Decode(String),
    /// Body decodes but fails verification.
    #[error("the plan is invalid: {0}")]
    Invalid(#[from] VerifyError),
}

/// Encodes a plan: the same plan always gives the same bytes.
pub fn encode(plan: &Plan) -> (Vec<u8>, PlanHash) {
    // Invariant: every plan type serializes (no maps with non-string keys, no unsupported types).
    let raw =
        postcard::to_stdvec(plan).expect("invariant: plan types always serialize with postcard");
    let body = lz4_flex::compress_prepend_size(&raw);
    let hash = PlanHash(*blake3::hash(&body).as_bytes());
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&hash.0);
    out.extend_from_slice(&body);
    (out, hash)
}

/// Reads the header and checks the hash, without decoding the body.
pub fn read_header(bytes: &[u8]) -> Result<(u16, PlanHash, &[u8]), LoadError> {
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(LoadError::BadMagic);
    }
    if bytes.len() < HEADER_LEN {
        return Err(LoadError::Truncated {
            expected: HEADER_LEN,
            found: bytes.len(),
        });
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version > FORMAT_VERSION {
        return Err(LoadError::NewerVersion { found: version });
    }
    if version < OLDEST_VERSION {
        return Err(LoadError::UnsupportedVersion { found: version });
    }
    let len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
    if len > MAX_BODY {
        return Err(LoadError::Decode(format!(
            "body of {len} bytes is larger than the limit of {MAX_BODY}"
        )));
    }
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&bytes[16..48]);
    let expected = HEADER_LEN + len;
    if bytes.len() < expected {
        return Err(LoadError::Truncated {
            expected,
            found: bytes.len(),
        });
    }
    if bytes.len() > expected {
        return Err(LoadError::TrailingBytes {
            extra: bytes.len() - expected,
        });
    }
    let body = &bytes[HEADER_LEN..];
    if blake3::hash(body).as_bytes() != &hash {
        return Err(LoadError::HashMismatch);
    }
    Ok((version, PlanHash(hash), body))
}

/// Decodes and verifies a plan file.
pub fn load(bytes: &[u8]) -> Result<(Plan, PlanHash), LoadError> {
    let (version, hash, body) = read_header(bytes)?;
    load_versioned(version, body).map(|p| (p, hash))
}

/// Decompresses, decodes and verifies a body of the current version (no
/// hash check): used by tests of the verifier.
pub fn load_body(body: &[u8]) -> Result<Plan, LoadError> {
    load_versioned(FORMAT_VERSION, body)
}

/// Decompresses, decodes (migrating an older version) and verifies a body.
fn load_versioned(version: u16, body: &[u8]) -> Result<Plan, LoadError> {
    let Some(size) = body
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return Err(LoadError::Decode(
            "the body is shorter than its size prefix".into(),
        ));
    };
    if size > MAX_BODY {
        return Err(LoadError::Decode(format!(
            "decompressed body of {size} bytes is larger than the limit of {MAX_BODY}"
        )));
    }
    let raw =
        lz4_flex::decompress_size_prepended(body).map_err(|e| LoadError::Decode(e.to_string()))?;
    let plan = decode_raw(version, &raw)?;
    verify(&plan)?;
    Ok(plan)
}

/// Decodes a decompressed body written by format `version` into the
/// current plan types. Each retired layout gets an arm here that decodes its
/// own (frozen) types and migrates them, one version at a time: version 1
/// ([`super::v1`], before X7's dispatch leases), version 2 ([`super::v2`],
/// before language 1.1 part one), version 3 ([`super::v3`], before part two),
/// version 4 ([`super::v4`], before `on_fail` on fanout stages) and version
/// 5, the current layout.
fn decode_raw(version: u16, raw: &[u8]) -> Result<Plan, LoadError> {
    match version {
        1 => decode_whole::<super::v1::Plan>(raw).map(|v1| v1.migrate().migrate().migrate()),
        2 => decode_whole::<super::v2::Plan>(raw).map(|v2| v2.migrate().migrate()),
        3 => decode_whole::<super::v3::Plan>(raw).map(super::v3::Plan::migrate),
        4 => decode_whole::<super::v4::Plan>(raw).map(super::v4::Plan::migrate),
        FORMAT_VERSION => decode_whole::<Plan>(raw),
        found => Err(LoadError::UnsupportedVersion { found }),
    }
}

/// Decodes a whole body as `T` (bytes left over are an error).
fn decode_whole<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<T, LoadError> {
    let (value, rest) =
        postcard::take_from_bytes::<T>(raw).map_err(|e| LoadError::Decode(e.to_string()))?;
    if !rest.is_empty() {
        return Err(LoadError::TrailingBytes { extra: rest.len() });
    }
    Ok(value)
}
