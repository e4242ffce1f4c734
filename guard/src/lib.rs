//! stratum-guard: STRAT-GUARD (issue 17), guarded resources outside flows.
//! A client registers a transition graph with evidence predicates per edge;
//! a transition is applied only when its edge is legal and its predicates
//! hold on evidence the server reads itself; every attempt is appended to
//! a hash-chained ledger in the run store; the strong policy changes need
//! SSH signatures from a trust root fixed beside the installed binary.
//!
//! Owns: the policy model and validation (`policy`), canonical JSON and
//! checksums (`canon`), the deterministic built-ins' parser (`builtin`),
//! predicate evaluation through the VM's host interfaces (`evidence`), the
//! ledger format and chain (`ledger`), signed payloads, the trust root and
//! sshsig verification (`authz`), upgrade descriptors (`descriptors`), and
//! the operations (`service`). Errors: `error`.
//! Must never: be depended on by `stratum-vm` (it depends on the VM's store,
//! host and configuration, not the other way), print, or read the trust
//! root's location from the environment.

pub mod authz;
pub mod builtin;
pub mod canon;
pub mod descriptors;
pub mod error;
pub mod evidence;
pub mod ledger;
pub mod policy;
pub mod service;

pub use error::GuardError;
pub use service::{Guard, Hosts};

/// A host factory on the configuration files: the operator's file
/// (`--config`, else `$STRATUM_HOME/stratum.toml`) merged with the
/// workspace root's `stratum.toml`, as runs read them.
pub struct ConfigHosts {
    pub operator: Option<std::path::PathBuf>,
}

impl Hosts for ConfigHosts {
    fn host(&self, root: &std::path::Path) -> Result<evidence::Host, GuardError> {
        let resolved =
            stratum_vm::config::for_run(self.operator.as_deref(), Some(root)).map_err(|e| {
                GuardError::Config {
                    root: root.display().to_string(),
                    message: e.to_string(),
                }
            })?;
        Ok(evidence::Host::new(root, &resolved.config))
    }
}

/// Milliseconds since the Unix epoch (the ledger's clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
