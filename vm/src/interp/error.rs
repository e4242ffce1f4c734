//! Why the interpreter refused an operation. Nothing in the run changed.
//!
//! Owns: [`VmError`] and [`CheckpointError`], each kind with its stable code
//! ([`VmError::code`]: the one exhaustive match adapters take their wire
//! error types from) and a message meant for people.
//! Must never: put a code into a message, or be recovered from its text.

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    /// The step is not waiting for this report.
    #[error("{0}")]
    NotAwaiting(String),
    /// The token does not match the live issuance.
    #[error("{0}")]
    StaleToken(String),
    /// The run was cancelled (the run id).
    #[error("run {0} is cancelled; outstanding issuances cannot be resolved")]
    Cancelled(String),
    /// A gate decision other than approve, revise, kill.
    #[error("invalid gate decision `{0}`: expected approve, revise or kill")]
    InvalidDecision(String),
    /// The flow input does not satisfy the input contract.
    #[error("invalid flow input: {0}")]
    InvalidInput(String),
    /// A report that is malformed.
    #[error("invalid report: {0}")]
    InvalidReport(String),
    /// A flow name that does not exist.
    #[error("unknown flow `{0}`")]
    UnknownFlow(String),
    /// A carry value for a revise cannot be resolved yet.
    #[error("{0}")]
    CarryUnresolved(String),
    /// The plan or the host cannot run this (too large, no worktrees).
    #[error("{0}")]
    Limit(String),
    /// A receipt names a step that the run does not have.
    #[error("{0}")]
    InvalidStep(String),
    /// A usage receipt that is malformed.
    #[error("invalid receipt: {0}")]
    InvalidReceipt(String),
    /// A declared command this transition ran was stopped by the run's
    /// driver (a cancel, a signal): the transition is abandoned and nothing
    /// of it is recorded (the engine never commits it).
    #[error("{0}; nothing was recorded")]
    Stopped(String),
    /// A checkpoint cannot be taken or restored.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A gate decision's `choice` that is not one of the gate's options (X10).
    #[error("{}", invalid_choice(gate, choice, options, *kill))]
    InvalidChoice {
        /// The gate's id.
        gate: String,
        /// The choice given.
        choice: String,
        /// The gate's options (empty: the gate has none).
        options: Vec<String>,
        /// The decision was a kill, which carries no choice.
        kill: bool,
    },
}

fn invalid_choice(gate: &str, choice: &str, options: &[String], kill: bool) -> String {
    if kill {
        return format!(
            "a kill of gate `{gate}` carries no choice (`{choice}` given); a choice goes with approve or revise"
        );
    }
    if options.is_empty() {
        return format!(
            "gate `{gate}` has no options, so a decision cannot carry the choice `{choice}`; decide without a choice"
        );
    }
    format!(
        "`{choice}` is not an option of gate `{gate}`; choose one of: {}",
        options.join(", ")
    )
}

impl VmError {
    /// The stable code of the kind (MCP's `error_type`).
    pub fn code(&self) -> &'static str {
        match self {
            VmError::NotAwaiting(_) => "not_awaiting",
            VmError::StaleToken(_) => "stale_token",
            VmError::Cancelled(_) => "flow_cancelled",
            VmError::InvalidDecision(_) => "invalid_decision",
            VmError::InvalidInput(_) => "input_validation_failed",
            VmError::InvalidReport(_) => "invalid_report",
            VmError::UnknownFlow(_) => "unknown_flow",
            VmError::CarryUnresolved(_) => "carry_revise_unresolved",
            VmError::Limit(_) => "limit_exceeded",
            VmError::InvalidStep(_) => "invalid_step",
            VmError::InvalidReceipt(_) => "invalid_receipt",
            VmError::Stopped(_) => "stopped",
            VmError::Checkpoint(c) => c.code(),
            VmError::InvalidChoice { .. } => "invalid_choice",
        }
    }
}

/// Why a checkpoint cannot be taken or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// An empty label.
    #[error("a checkpoint label must not be empty")]
    InvalidLabel,
    /// A label in the store's reserved `blob:` space (a run's kept diffs).
    #[error(
        "checkpoint labels starting with `blob:` are reserved for the run's kept diffs; pick another label"
    )]
    ReservedLabel,
    /// No checkpoint has this label.
    #[error("no checkpoint `{label}`; available: {}", available.join(", "))]
    NotFound {
        /// The label asked for.
        label: String,
        /// The labels there are.
        available: Vec<String>,
    },
    /// The run was cancelled (the run id).
    #[error("run {0} is cancelled")]
    Cancelled(String),
    /// A fanout has items out (the step id): their results would be lost.
    #[error("in-flight fanout: step `{0}` has items out; checkpoint after it settles")]
    FanoutInFlight(String),
}

impl CheckpointError {
    /// The stable code of the kind.
    pub fn code(&self) -> &'static str {
        match self {
            CheckpointError::InvalidLabel | CheckpointError::ReservedLabel => "invalid_label",
            CheckpointError::NotFound { .. } => "checkpoint_not_found",
            CheckpointError::Cancelled(_) => "flow_cancelled",
            CheckpointError::FanoutInFlight(_) => "fanout_in_flight",
        }
    }
}
