//! [`GuardError`]: every refusal of a guard operation, each with its stable
//! code ([`GuardError::code`], the one `match` the MCP `error_type` and the
//! CLI's messages come from).
//! Must never: carry a kind only in its message text.

use stratum_vm::store::StoreError;

use crate::authz::AuthzError;
use crate::ledger::Broken;
use crate::policy::PolicyError;

/// Why a guard operation refused (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("`workspace_root` {path}: {problem}")]
    WorkspaceRoot { path: String, problem: String },
    #[error("no guarded resource `{0}` (register it with stratum_guard_register)")]
    UnknownResource(String),
    #[error(
        "`{resource_id}` is already registered with another policy ({checksum}); a registered policy is immutable: use stratum_guard_upgrade for an additive change, stratum_guard_migrate (signed) for any other"
    )]
    PolicyExists {
        resource_id: String,
        checksum: String,
    },
    #[error(
        "incompatible policy upgrade: {0}; stratum_guard_upgrade only adds (stratum_guard_migrate, signed, makes other changes)"
    )]
    IncompatibleUpgrade(String),
    #[error(
        "idempotency key `{key}` was used for `{used}`, not `{asked}`; use a new key for a new transition"
    )]
    IdempotencyConflict {
        key: String,
        used: String,
        asked: String,
    },
    #[error(
        "the current state `{state}` is not a state of the new graph; a migration must keep it"
    )]
    StateNotInGraph { state: String },
    #[error("the ledger of `{resource_id}` is broken at entry {}: {}; nothing was written (`stratumc guard verify {resource_id}`)", .broken.seq, .broken.problem)]
    LedgerBroken { resource_id: String, broken: Broken },
    #[error("the configuration for {root}: {message}")]
    Config { root: String, message: String },
    #[error(transparent)]
    Authz(#[from] AuthzError),
    #[error("the store kept changing under `{0}`; try again")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GuardError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            GuardError::InvalidRequest(_) => "invalid_request",
            GuardError::Policy(p) => p.code(),
            GuardError::WorkspaceRoot { .. } => "invalid_policy",
            GuardError::UnknownResource(_) => "unknown_resource",
            GuardError::PolicyExists { .. } => "policy_exists",
            GuardError::IncompatibleUpgrade(_) => "incompatible_policy_upgrade",
            GuardError::IdempotencyConflict { .. } => "idempotency_conflict",
            GuardError::StateNotInGraph { .. } => "state_not_in_graph",
            GuardError::LedgerBroken { .. } => "ledger_broken",
            GuardError::Config { .. } => "config_error",
            GuardError::Authz(a) => a.code(),
            GuardError::Busy(_) => "store_busy",
            GuardError::Store(StoreError::Corrupt(_)) => "store_corrupt",
            GuardError::Store(_) => "store_error",
        }
    }
}
