//! Upgrade descriptors: server-managed, human-reviewed policy changes, each
//! `{id, rationale, from_checksum, to_policy}`, in JSON files located by
//! `STRATUM_GUARD_UPGRADE_DESCRIPTORS` (a `:`-separated list of files), each
//! authorized by a detached sshsig at `<path>.sig` in namespace
//! `stratum-guard-descriptors` from a key of the trust root.
//!
//! Owns: locating, reading (bounded) and verifying descriptor files, and
//! the read-only inspection `stratumc guard descriptors` prints.
//! Must never: treat a file's location as its authorization (the variable
//! only says where to look; the signature authorizes), or apply anything
//! (the service does, from the MCP server only).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::authz::{self, AuthzError, TrustRoot};
use crate::canon;
use crate::error::GuardError;
use crate::ledger::Signer;
use crate::policy::PolicyInput;

/// The variable that locates the descriptor files.
pub const ENV: &str = "STRATUM_GUARD_UPGRADE_DESCRIPTORS";

/// One descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    pub id: String,
    pub rationale: String,
    pub from_checksum: String,
    pub to_policy: PolicyInput,
}

/// A verified descriptor file.
#[derive(Debug, Clone)]
pub struct DescriptorFile {
    pub path: PathBuf,
    pub sha256: String,
    pub signer: Signer,
    pub descriptors: Vec<Descriptor>,
}

/// The descriptor files `value` (the variable's value) names.
pub fn paths(value: Option<&str>) -> Vec<PathBuf> {
    value
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<Descriptor>),
    One(Box<Descriptor>),
}

/// Reads and verifies one descriptor file.
pub fn load(path: &Path, trust: &TrustRoot) -> Result<DescriptorFile, GuardError> {
    let bad =
        |m: String| GuardError::InvalidRequest(format!("descriptor file {}: {m}", path.display()));
    let text = authz::read_capped(path).map_err(bad)?;
    let sig_path = sig_path(path);
    let sig = authz::read_capped(&sig_path)
        .map_err(|m| bad(format!("its signature {}: {m}", sig_path.display())))?;
    let signer = authz::verify(trust, authz::NS_DESCRIPTORS, text.as_bytes(), &sig)?;
    let parsed: OneOrMany = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not a descriptor or a list of descriptors: {e}")))?;
    let descriptors = match parsed {
        OneOrMany::Many(v) => v,
        OneOrMany::One(d) => vec![*d],
    };
    Ok(DescriptorFile {
        path: path.to_path_buf(),
        sha256: canon::sha256_hex(text.as_bytes()),
        signer,
        descriptors,
    })
}

/// `<path>.sig`.
pub fn sig_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sig");
    PathBuf::from(s)
}

/// The descriptor `id` in the first verified file that has it.
pub fn find(
    files: &[PathBuf],
    trust: &TrustRoot,
    id: &str,
) -> Result<(Descriptor, DescriptorFile), GuardError> {
    if trust.signers.is_empty() {
        return Err(AuthzError::Unavailable {
            path: trust.path.clone(),
        }
        .into());
    }
    let mut last = None;
    for p in files {
        match load(p, trust) {
            Ok(f) => {
                if let Some(d) = f.descriptors.iter().find(|d| d.id == id) {
                    return Ok((d.clone(), f));
                }
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        GuardError::InvalidRequest(format!(
            "no installed descriptor has id `{id}` ({ENV} names {} file(s); `stratumc guard descriptors` lists them)",
            files.len()
        ))
    }))
}

/// What `stratumc guard descriptors` shows of one file.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub path: String,
    pub verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<Signer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub descriptors: Vec<Shown>,
}

/// One descriptor as listed.
#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    pub id: String,
    pub rationale: String,
    pub from_checksum: String,
}

/// Inspects every file (grants nothing).
pub fn inspect(files: &[PathBuf], trust: &TrustRoot) -> Vec<Inspection> {
    files
        .iter()
        .map(|p| match load(p, trust) {
            Ok(f) => Inspection {
                path: p.display().to_string(),
                verified: true,
                signer: Some(f.signer),
                sha256: Some(f.sha256),
                error: None,
                descriptors: f
                    .descriptors
                    .iter()
                    .map(|d| Shown {
                        id: d.id.clone(),
                        rationale: d.rationale.clone(),
                        from_checksum: d.from_checksum.clone(),
                    })
                    .collect(),
            },
            Err(e) => Inspection {
                path: p.display().to_string(),
                verified: false,
                signer: None,
                sha256: None,
                error: Some(e.to_string()),
                descriptors: Vec::new(),
            },
        })
        .collect()
}
