//! Signed authorizations: the trust root (an allowed-signers file in
//! ssh-keygen's format), the canonical payloads a signature must cover, and
//! native sshsig verification with the `ssh-key` crate.
//!
//! Owns: where the trust root is ([`trust_root_path`]: only
//! `<dir of the running binary>/../share/stratumc/guard-signers.allowed`,
//! else [`SYSTEM_TRUST_ROOT`] — never an environment variable,
//! `STRATUM_HOME` or a request), reading it (bounded, every line checked),
//! the payloads of override and migrate (rebuilt by the server with the
//! resource's ledger head, so a signature is good at exactly one point of
//! one resource's history), the namespaces, and [`verify`].
//! Must never: run `ssh-keygen` or any other program (a program found
//! through PATH is the caller's to replace), trust a key that is not in the
//! trust root, treat an empty or missing trust root as anything but
//! "signed operations unavailable", or accept a signature made for another
//! namespace.

use std::path::{Path, PathBuf};

use serde_json::json;
use ssh_key::{HashAlg, PublicKey, SshSig};

use crate::canon;
use crate::ledger::Signer;

/// The namespace of override authorizations.
pub const NS_OVERRIDE: &str = "stratum-guard-override";
/// The namespace of migrate authorizations.
pub const NS_MIGRATE: &str = "stratum-guard-migrate";
/// The namespace of upgrade descriptor files' `.sig`.
pub const NS_DESCRIPTORS: &str = "stratum-guard-descriptors";
/// The trust root when none is installed beside the binary.
pub const SYSTEM_TRUST_ROOT: &str = "/etc/stratumc/guard-signers.allowed";
/// The trust root's path relative to the binary's directory.
pub const BESIDE_BINARY: &str = "../share/stratumc/guard-signers.allowed";
/// The largest trust root or signature read.
pub const MAX_TRUST_ROOT_BYTES: u64 = 1024 * 1024;

/// Why an authorization is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthzError {
    #[error(
        "signed operations are unavailable: the trust root {where_} holds no key (add an allowed-signers line there; see docs/guard.md)",
        where_ = .path.as_ref().map_or_else(|| format!("({} or {SYSTEM_TRUST_ROOT})", "<bin>/".to_owned() + BESIDE_BINARY), |p| p.display().to_string())
    )]
    Unavailable { path: Option<PathBuf> },
    #[error("the trust root {path}, line {line}: {message}")]
    TrustRoot {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(
        "the authorization is not an armored SSH signature (-----BEGIN SSH SIGNATURE-----): {0}"
    )]
    Malformed(String),
    #[error(
        "the signature is for namespace `{found}`, this operation needs `{expected}` (ssh-keygen -Y sign -n {expected})"
    )]
    WrongNamespace { expected: String, found: String },
    #[error("the signing key {fingerprint} is not in the trust root {path}")]
    NotTrusted { fingerprint: String, path: PathBuf },
    #[error(
        "the signing key {fingerprint} is trusted, but not for namespace `{namespace}` (its namespaces= option)"
    )]
    NamespaceNotAllowed {
        fingerprint: String,
        namespace: String,
    },
    #[error(
        "the signature by {fingerprint} does not cover this payload (it was made for another payload, or the ledger head moved since: run `stratumc guard authorize` again and sign what it prints)"
    )]
    BadSignature { fingerprint: String },
}

impl AuthzError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AuthzError::Unavailable { .. } => "signatures_unavailable",
            AuthzError::TrustRoot { .. } => "trust_root_invalid",
            _ => "authorization_refused",
        }
    }
}

/// One line of the trust root.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    pub principals: String,
    /// `namespaces="…"`, when the line restricts them.
    pub namespaces: Option<Vec<String>>,
    pub key: PublicKey,
}

/// The trust root as read.
#[derive(Debug, Clone, Default)]
pub struct TrustRoot {
    /// The file read (`None`: there is none).
    pub path: Option<PathBuf>,
    pub signers: Vec<AllowedSigner>,
}

/// The trust root's location: beside the running binary, else the system
/// path; `None` when neither file exists.
pub fn trust_root_path() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(BESIDE_BINARY)));
    beside
        .into_iter()
        .chain(std::iter::once(PathBuf::from(SYSTEM_TRUST_ROOT)))
        .find(|p| p.is_file())
}

/// Reads the trust root at [`trust_root_path`] (empty when there is none).
pub fn load_trust_root() -> Result<TrustRoot, AuthzError> {
    match trust_root_path() {
        None => Ok(TrustRoot::default()),
        Some(path) => read_trust_root(&path),
    }
}

/// Reads an allowed-signers file: `principals [options] keytype base64
/// [comment]` per line, `#` comments and blank lines skipped. Options:
/// `namespaces="a,b"`; any other option (`cert-authority`, validity
/// windows) is refused rather than ignored.
pub fn read_trust_root(path: &Path) -> Result<TrustRoot, AuthzError> {
    let bad = |line, message: String| AuthzError::TrustRoot {
        path: path.to_path_buf(),
        line,
        message,
    };
    let text = read_capped(path).map_err(|m| bad(0, m))?;
    let mut signers = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        signers.push(parse_line(line).map_err(|m| bad(i + 1, m))?);
    }
    Ok(TrustRoot {
        path: Some(path.to_path_buf()),
        signers,
    })
}

/// Reads a small file (trust roots, signatures): at most
/// [`MAX_TRUST_ROOT_BYTES`], UTF-8.
pub fn read_capped(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_TRUST_ROOT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_TRUST_ROOT_BYTES {
        return Err(format!("it is larger than {MAX_TRUST_ROOT_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

fn is_key_type(token: &str) -> bool {
    token.starts_with("ssh-") || token.starts_with("ecdsa-") || token.starts_with("sk-")
}

fn parse_line(line: &str) -> Result<AllowedSigner, String> {
    let mut parts = line.split_whitespace();
    let principals = parts.next().unwrap_or_default().to_owned();
    let mut next = parts.next().ok_or("no key after the principals")?;
    let mut namespaces = None;
    if !is_key_type(next) {
        namespaces = Some(parse_options(next)?);
        next = parts.next().ok_or("no key after the options")?;
    }
    let rest: Vec<&str> = std::iter::once(next).chain(parts).collect();
    let key = PublicKey::from_openssh(&rest.join(" ")).map_err(|e| {
        format!("not a supported public key ({e}); ed25519 and ecdsa-p256 keys are accepted")
    })?;
    Ok(AllowedSigner {
        principals,
        namespaces,
        key,
    })
}

/// `namespaces="a,b"` (the only option accepted).
fn parse_options(opts: &str) -> Result<Vec<String>, String> {
    let value = opts
        .strip_prefix("namespaces=\"")
        .and_then(|v| v.strip_suffix('"'))
        .ok_or_else(|| format!("option `{opts}` is not supported (only namespaces=\"…\" is)"))?;
    Ok(value.split(',').map(str::to_owned).collect())
}

/// Verifies `armored` (an sshsig) over `message` in `namespace` against
/// the trust root; the signer on success.
pub fn verify(
    root: &TrustRoot,
    namespace: &str,
    message: &[u8],
    armored: &str,
) -> Result<Signer, AuthzError> {
    if root.signers.is_empty() {
        return Err(AuthzError::Unavailable {
            path: root.path.clone(),
        });
    }
    let sig: SshSig = armored
        .trim()
        .parse()
        .map_err(|e: ssh_key::Error| AuthzError::Malformed(e.to_string()))?;
    if sig.namespace() != namespace {
        return Err(AuthzError::WrongNamespace {
            expected: namespace.to_owned(),
            found: sig.namespace().to_owned(),
        });
    }
    let fingerprint = PublicKey::from(sig.public_key().clone())
        .fingerprint(HashAlg::Sha256)
        .to_string();
    let Some(signer) = root
        .signers
        .iter()
        .find(|s| s.key.key_data() == sig.public_key())
    else {
        return Err(AuthzError::NotTrusted {
            fingerprint,
            path: root.path.clone().unwrap_or_default(),
        });
    };
    if let Some(ns) = &signer.namespaces
        && !ns.iter().any(|n| n == namespace)
    {
        return Err(AuthzError::NamespaceNotAllowed {
            fingerprint,
            namespace: namespace.to_owned(),
        });
    }
    signer
        .key
        .verify(namespace, message, &sig)
        .map_err(|_| AuthzError::BadSignature {
            fingerprint: fingerprint.clone(),
        })?;
    Ok(Signer {
        principal: signer.principals.clone(),
        fingerprint,
    })
}

/// The payload an override signature covers.
pub fn override_payload(
    resource_id: &str,
    from_state: &str,
    to_state: &str,
    rationale: &str,
    ledger_head: &str,
) -> String {
    canon::canonical(&json!({
        "action": "override",
        "resource_id": resource_id,
        "from_state": from_state,
        "to_state": to_state,
        "rationale": rationale,
        "ledger_head": ledger_head,
    }))
}

/// The payload a migrate signature covers.
pub fn migrate_payload(
    resource_id: &str,
    policy_checksum: &str,
    rationale: &str,
    ledger_head: &str,
) -> String {
    canon::canonical(&json!({
        "action": "migrate",
        "resource_id": resource_id,
        "policy_checksum": policy_checksum,
        "rationale": rationale,
        "ledger_head": ledger_head,
    }))
}
