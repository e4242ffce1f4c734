//! The audit events a transition records: one closed enum, so the list of
//! kinds and their fields lives in one place (documented in
//! `docs/events.md`, whose table a tidy test regenerates from [`EventKind::examples`]).
//!
//! Owns: the event record, every kind with its typed detail, and their JSON
//! form (`{at, type, stepId?, detail?}`, detail field names in camelCase).
//! Must never: carry anything that is not plain data, or be read back to
//! decide what a run does (the step rows and the header are the state).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::host::{FileEvidence, FileHash, InputDigest};
use super::state::{Failure, RunStatus};

/// One audit event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the epoch.
    pub at: i64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Step id (`parent/child`, `fan/3`).
    #[serde(rename = "stepId", default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// Every kind of audit event, with its detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "detail", rename_all = "snake_case")]
pub enum EventKind {
    /// The run was created.
    Planned {
        #[serde(rename = "planHash")]
        plan_hash: String,
        flow: String,
    },
    /// The configuration the run uses was frozen into it (its judge, agent
    /// commands and timeouts, whatever the files later say): the blake3 of
    /// its canonical text and the files it was merged from, operator first.
    ConfigFrozen {
        #[serde(rename = "configHash")]
        config_hash: String,
        sources: Vec<String>,
    },
    /// A step was handed out.
    Ready { attempt: u32 },
    /// A dispatch was not reported within its lease (X7 `timeout_ms`): its
    /// token was revoked and, unless this was the third orphan in a row, the
    /// same attempt was handed out again with a new token.
    DispatchOrphaned {
        attempt: u32,
        #[serde(rename = "timeoutMs")]
        timeout_ms: u64,
        /// Consecutive orphans of this dispatch, this one included (3 fails it).
        orphans: u32,
        /// The fanout item, for an item's dispatch.
        #[serde(rename = "itemIndex", default, skip_serializing_if = "Option::is_none")]
        item_index: Option<u32>,
    },
    /// An attempt of a step ended.
    Result(AttemptResult),
    /// A file predicate or file function read a file.
    Evidence {
        #[serde(flatten)]
        file: FileEvidence,
        /// `worktree` when it read a fanout item's worktree (else the workspace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<String>,
    },
    /// A judged predicate was decided (`statement`: the statement, or the
    /// rendered rubric of the scored form; `stakes` is `scored` there).
    Judged {
        statement: String,
        holds: bool,
        reason: String,
        stakes: String,
        model: String,
        usage: JudgeUsage,
        /// `[judges.NAME]` that judged; absent for the default judge.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        judge: Option<String>,
        /// The score (scored form, X5).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        score: Option<f64>,
        /// The pass mark (scored form).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        threshold: Option<f64>,
        /// The judge's reasons (scored form).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasons: Vec<String>,
        /// The input files sent, with their sha256 (scored form).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<InputDigest>,
    },
    /// A step was skipped.
    Skipped { reason: String },
    /// A failed step's `on_fail` chose its target.
    Routed { target: String, failure: Failure },
    /// A gate waits for a decision.
    GateWaiting { round: u32 },
    /// A gate was decided.
    GateResolved {
        decision: String,
        target: Option<String>,
        note: Option<String>,
        /// The decision's choice among the gate's options (X10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        choice: Option<String>,
        #[serde(rename = "resolvedBy")]
        resolved_by: String,
        /// The files the gate showed (X4 `show`), as hashed when it started
        /// waiting: what the decision was made on.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        shown: Vec<ShownFile>,
        /// Decided without the gate token (the manual's MCP form): taken
        /// because exactly one round of the gate was waiting.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tokenless: bool,
    },
    /// The run completed with its output.
    Completed { output: Value },
    /// The run failed.
    Failed(RunEnd),
    /// A gate killed the run.
    Killed(RunEnd),
    /// The entry flow's budget was exceeded.
    BudgetExhausted(RunEnd),
    /// An operator cancelled the run.
    FlowCancelled { by: String, burned: Burned },
    /// Usage of a step's dispatch, or of a usage receipt.
    UsageDebit(UsageDebit),
    /// What a report said about its dispatch (`result.telemetry`: duration,
    /// model, effort, ...), kept as sent: recorded, never checked or charged.
    Telemetry { attempt: u32, telemetry: Value },
    /// Usage of a fanout item's dispatch, or of the judge that checked it.
    FanoutLedgerDebit {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        attempt: u32,
        amount: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    /// A fanout item was handed out.
    FanoutItemReady {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
        attempt: u32,
    },
    /// A fanout item's stage was skipped by its `when`.
    FanoutItemSkipped {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
    },
    /// A fanout item's stage failed for good and its `on_fail: continue`
    /// (X9) handled the failure: the item ends failed without running its
    /// later stages, and `require` counts it as met.
    FanoutItemContinued {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
        failure: Failure,
    },
    /// An attempt of a fanout item ended.
    FanoutAttemptResult {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        stage: u32,
        attempt: u32,
        success: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Failure>,
    },
    /// The patches of an isolated fanout's items were merged (or not).
    FanoutMerge {
        items: Vec<u32>,
        #[serde(rename = "preMerge")]
        pre_merge: Vec<String>,
        success: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A fanout item's git worktree was made.
    WorktreeCreated {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        path: String,
    },
    /// A fanout item's git worktree was removed.
    WorktreeRemoved {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A fanout item's changes were taken as a patch.
    WorktreePatch {
        #[serde(rename = "itemIndex")]
        item_index: u32,
        bytes: usize,
    },
    /// A revise (reason `revise`) or a route's `goto` (reason `route`, X9)
    /// reset the steps of a reset closure.
    StepReset {
        reason: String,
        reset: Vec<EpochChange>,
        #[serde(rename = "subflowsDropped")]
        subflows_dropped: Vec<String>,
    },
    /// A carry variable was written.
    CarryUpdated {
        name: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
    },
    /// A driver continued the run.
    Resumed,
    /// A driver was stopped by a signal; the agent commands it was waiting
    /// for were killed with their process groups (their dispatches stay
    /// live and are handed out again on resume).
    DriverInterrupted { signal: String, killed: usize },
    /// The run state was restored from a checkpoint.
    CheckpointReverted {
        label: String,
        #[serde(rename = "receiptsAtRevert")]
        receipts_at_revert: u64,
    },
    /// A judge call erred (transport, timeout, HTTP status, malformed
    /// answer): not a verdict. The same report is judged again after a
    /// pause; the third error in a row fails the step `judge_unavailable`.
    JudgeError {
        /// The judge's name (`default` for `[judge]`).
        judge: String,
        /// Which try of this predicate erred (1..=3).
        #[serde(rename = "try")]
        try_no: u32,
        /// The error.
        error: String,
    },
    /// A step failed for good and `on_fail: continue` let the flow go on
    /// past it (X2): the failure is handled, its dependents run.
    StepContinued { failure: Failure },
    /// A retried run took this step over from the old run (X8): nothing was
    /// dispatched or spent; the step's row says `reused` too.
    StepReused {
        #[serde(rename = "fromRun")]
        from_run: String,
        attempt: u32,
    },
    /// This (finished) run was retried by a new run; its status is unchanged.
    Retried {
        run: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// A step (or a fanout item's last stage) succeeded with `artifacts`
    /// (X4): the manifest of the files it left.
    ArtifactsRecorded(Manifest),
    /// A scoped dispatch (X11) was accepted: its patch record (the files it
    /// changed with their sha256 before and after, the trees, the diff).
    PatchRecorded(PatchRecord),
    /// Changes of a scoped dispatch outside its scope (X11) were put back
    /// to the dispatch's snapshot before the retry.
    ScopeRestored {
        attempt: u32,
        #[serde(rename = "itemIndex", default, skip_serializing_if = "Option::is_none")]
        item_index: Option<u32>,
        /// The snapshot the paths were restored to.
        tree: String,
        paths: Vec<String>,
    },
    /// A `rollback: STEP` (X11) restored the workspace before a route or an
    /// `on_fail` goto: the patch records undone (newest first, their
    /// snapshot trees), the paths restored, and the paths left alone
    /// because they changed since their patch was recorded.
    RolledBack {
        to: String,
        trees: Vec<String>,
        paths: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        conflicts: Vec<String>,
    },
    /// The cost model's estimate of each step of the entry flow, recorded
    /// when the run was started from a spec (`stratumc run SPEC`, MCP
    /// `stratum_plan`); `stratumc report` compares the spend with it. A run
    /// started from a prebuilt plan file has none (the plan holds no IR to
    /// estimate from).
    Estimated { steps: Vec<StepEstimate> },
    /// A declared command ran for an `exec` check (X12): its receipt (the
    /// same one the violation carries when the check does not hold).
    CommandRan(super::host::CommandReceipt),
    /// A step's `route` entry fired a `goto` (X9): `route` is the entry's
    /// number (1-based), `count` how often it has fired in the run (this
    /// time included, never given back), `max` its cap; the reset of the
    /// target's closure follows as `step_reset` (reason `route`).
    RoutedBack {
        route: u32,
        from: String,
        to: String,
        count: u32,
        max: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// An `on_fail` entry (`route` is then its 1-based index in
        /// `on_fail`) took the step's failure, rather than a `route` entry
        /// after success.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        on_fail: bool,
    },
}

/// The patch record of an accepted scoped dispatch (X11): what `stratumc
/// report`, `query flow` and `stratum_audit` show, and what a rollback
/// restores (each file checked against its `after` hash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRecord {
    /// The step id (`fan` for a fanout's items).
    pub step: String,
    /// The attempt whose changes these are.
    pub attempt: u32,
    /// The fanout item, for an item's stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_index: Option<u32>,
    /// `worktree` when the changes were made in the item's worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The snapshot taken at dispatch (a git tree id).
    pub tree_before: String,
    /// The working tree at report (a git tree id).
    pub tree_after: String,
    /// The changed files, sorted by path.
    pub files: Vec<super::host::FileChange>,
    /// The unified diff, cut at a line end after 64 KiB.
    pub diff: String,
    /// Whether `diff` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diff_truncated: bool,
    /// The sha256 (hex) of the full unified diff; when `diff` was cut, the
    /// full diff is a blob of the run under this hash ([`blob_label`],
    /// `stratumc report RUN --diff STEP`). `None` in records written before
    /// full diffs were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_sha256: Option<String>,
    /// The length of the full unified diff in bytes (`None` as above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_bytes: Option<u64>,
}

/// The prefix of the store labels that hold a run's content-addressed blobs
/// (beside its checkpoints): `blob:sha256:<hex>`. Checkpoint labels may not
/// start with it.
pub const BLOB_LABEL_PREFIX: &str = "blob:";

/// The store label of the blob whose sha256 is `sha256` (hex).
pub fn blob_label(sha256: &str) -> String {
    format!("{BLOB_LABEL_PREFIX}sha256:{sha256}")
}

/// Whether a stored label names a blob, not a checkpoint.
pub fn is_blob_label(label: &str) -> bool {
    label.starts_with(BLOB_LABEL_PREFIX)
}

/// The manifest of an attempt's artifacts (X4): what `stratumc verify`
/// re-hashes. `digest` is the sha256 of the canonical JSON of `files`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The step id (`fan` for a fanout's items).
    pub step: String,
    /// The attempt that produced the files.
    pub attempt: u32,
    /// The fanout item, for an item's stage.
    #[serde(rename = "itemIndex", default, skip_serializing_if = "Option::is_none")]
    pub item_index: Option<u32>,
    /// `worktree` when the files are in the item's worktree (else the
    /// workspace; a merged worktree's files are in the workspace after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The files, sorted by path, each once.
    pub files: Vec<FileHash>,
    /// `canonical_digest` of `files`.
    pub digest: String,
}

impl Manifest {
    /// A manifest of `files` (sorted by path and deduplicated here), with
    /// its digest: the one place that computes it.
    pub fn new(
        step: String,
        attempt: u32,
        item_index: Option<u32>,
        root: Option<String>,
        mut files: Vec<FileHash>,
    ) -> Manifest {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files.dedup_by(|a, b| a.path == b.path);
        let digest = Self::digest_of(&files);
        Manifest {
            step,
            attempt,
            item_index,
            root,
            files,
            digest,
        }
    }

    /// `canonical_digest` of the JSON of `files`.
    pub fn digest_of(files: &[FileHash]) -> String {
        let json = serde_json::to_value(files).unwrap_or(Value::Null);
        crate::eval::canonical_digest(&json)
    }
}

/// A file a gate showed (X4 `show`): its current hash, or missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownFile {
    /// The rendered path (normalized when the file exists).
    pub path: String,
    /// Its size, when it is a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its sha256, when it is a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why there is no hash (`missing`, or the host's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One step's estimate (expected and worst) in the `estimated` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEstimate {
    /// Step id in the entry flow.
    pub id: String,
    /// Its step hash ([`crate::plan::hash::step_hash`]), when the plan has
    /// the step.
    #[serde(rename = "stepHash", default, skip_serializing_if = "Option::is_none")]
    pub step_hash: Option<String>,
    /// Dispatches.
    pub dispatches: EstimateFigure,
    /// Tokens (judge calls included).
    pub tokens: EstimateFigure,
    /// Dollars (judge calls included).
    pub usd: EstimateFigure,
    /// Milliseconds of its dispatches and judge calls added up.
    pub ms: EstimateFigure,
}

/// An expected and a worst figure; `worst` is `None` when it depends on a
/// fanout length the inputs did not give.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EstimateFigure {
    pub expected: f64,
    pub worst: Option<f64>,
}

impl EventKind {
    /// The kind's `type` on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Planned { .. } => "planned",
            EventKind::ConfigFrozen { .. } => "config_frozen",
            EventKind::Ready { .. } => "ready",
            EventKind::DispatchOrphaned { .. } => "dispatch_orphaned",
            EventKind::Result(_) => "result",
            EventKind::Evidence { .. } => "evidence",
            EventKind::Judged { .. } => "judged",
            EventKind::Skipped { .. } => "skipped",
            EventKind::Routed { .. } => "routed",
            EventKind::GateWaiting { .. } => "gate_waiting",
            EventKind::GateResolved { .. } => "gate_resolved",
            EventKind::Completed { .. } => "completed",
            EventKind::Failed(_) => "failed",
            EventKind::Killed(_) => "killed",
            EventKind::BudgetExhausted(_) => "budget_exhausted",
            EventKind::FlowCancelled { .. } => "flow_cancelled",
            EventKind::UsageDebit(_) => "usage_debit",
            EventKind::Telemetry { .. } => "telemetry",
            EventKind::FanoutLedgerDebit { .. } => "fanout_ledger_debit",
            EventKind::FanoutItemReady { .. } => "fanout_item_ready",
            EventKind::FanoutItemSkipped { .. } => "fanout_item_skipped",
            EventKind::FanoutItemContinued { .. } => "fanout_item_continued",
            EventKind::FanoutAttemptResult { .. } => "fanout_attempt_result",
            EventKind::FanoutMerge { .. } => "fanout_merge",
            EventKind::WorktreeCreated { .. } => "worktree_created",
            EventKind::WorktreeRemoved { .. } => "worktree_removed",
            EventKind::WorktreePatch { .. } => "worktree_patch",
            EventKind::StepReset { .. } => "step_reset",
            EventKind::CarryUpdated { .. } => "carry_updated",
            EventKind::Resumed => "resumed",
            EventKind::DriverInterrupted { .. } => "driver_interrupted",
            EventKind::CheckpointReverted { .. } => "checkpoint_reverted",
            EventKind::JudgeError { .. } => "judge_error",
            EventKind::StepContinued { .. } => "step_continued",
            EventKind::StepReused { .. } => "step_reused",
            EventKind::Retried { .. } => "retried",
            EventKind::ArtifactsRecorded(_) => "artifacts_recorded",
            EventKind::PatchRecorded(_) => "patch_recorded",
            EventKind::ScopeRestored { .. } => "scope_restored",
            EventKind::RolledBack { .. } => "rolled_back",
            EventKind::Estimated { .. } => "estimated",
            EventKind::CommandRan(_) => "command_ran",
            EventKind::RoutedBack { .. } => "routed_back",
        }
    }

    /// Which step id the event carries.
    fn step_of(&self) -> &'static str {
        match self {
            EventKind::Planned { .. }
            | EventKind::ConfigFrozen { .. }
            | EventKind::Completed { .. }
            | EventKind::Failed(_)
            | EventKind::Killed(_)
            | EventKind::BudgetExhausted(_)
            | EventKind::FlowCancelled { .. }
            | EventKind::Resumed
            | EventKind::DriverInterrupted { .. }
            | EventKind::CheckpointReverted { .. }
            | EventKind::Retried { .. }
            | EventKind::Estimated { .. } => "—",
            EventKind::StepReused { .. } => "step",
            EventKind::Ready { .. } | EventKind::Result(_) | EventKind::Skipped { .. } => "step",
            EventKind::ArtifactsRecorded(_)
            | EventKind::PatchRecorded(_)
            | EventKind::ScopeRestored { .. } => "step, or fanout (for an item)",
            EventKind::RolledBack { .. } => "the routing or failing step",
            EventKind::DispatchOrphaned { .. } => "step, or fanout (for an item)",
            EventKind::Evidence { .. } => {
                "the checked step or item (`when`, `set`, `until` and stage `when` expressions: their step or item)"
            }
            EventKind::Judged { .. } | EventKind::JudgeError { .. } | EventKind::CommandRan(_) => {
                "the checked step or item"
            }
            EventKind::Routed { .. } | EventKind::StepContinued { .. } => "the failed step",
            EventKind::GateWaiting { .. } | EventKind::GateResolved { .. } => "gate",
            EventKind::UsageDebit(_) => "step (a receipt: its `stepId`, or none)",
            EventKind::Telemetry { .. } => "the reported step or item (`fan/3`)",
            EventKind::FanoutLedgerDebit { .. } => "item (`fan/3`)",
            EventKind::FanoutItemReady { .. }
            | EventKind::FanoutItemSkipped { .. }
            | EventKind::FanoutItemContinued { .. }
            | EventKind::FanoutAttemptResult { .. }
            | EventKind::FanoutMerge { .. }
            | EventKind::WorktreeCreated { .. }
            | EventKind::WorktreeRemoved { .. }
            | EventKind::WorktreePatch { .. } => "fanout",
            EventKind::StepReset { .. } => "the revise or route target",
            EventKind::RoutedBack { .. } => "the routing step",
            EventKind::CarryUpdated { .. } => "the deciding gate (revise), or none (initial)",
        }
    }

    /// One example of every kind, in the order of `docs/events.md`.
    pub fn examples() -> Vec<EventKind> {
        let mut all = Self::step_examples();
        all.extend(Self::run_examples());
        all.extend(Self::fanout_examples());
        all.extend(Self::revision_examples());
        all.extend(Self::retry_examples());
        all.push(Self::estimate_example());
        all.push(EventKind::CommandRan(super::host::CommandReceipt {
            command: "test".into(),
            argv: vec![
                "python3".into(),
                "-m".into(),
                "pytest".into(),
                "-q".into(),
                "tests/test_calc.py".into(),
            ],
            exit: Some(1),
            ms: 840,
            stdout_sha256: "5d41402abc4b2a76b9719d911017c592…".into(),
            tail: "FAILED tests/test_calc.py::test_add - assert 3 == 4\n1 failed in 0.05s\n".into(),
            timed_out: false,
            truncated: false,
        }));
        all.extend(Self::scope_examples());
        all
    }

    fn scope_examples() -> Vec<EventKind> {
        let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        vec![
            EventKind::PatchRecorded(PatchRecord {
                step: "patch".into(),
                attempt: 1,
                item_index: None,
                root: None,
                tree_before: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
                tree_after: "d8329fc1cc938780ffdd9f94e0d364e0ea74f579".into(),
                files: vec![super::host::FileChange {
                    path: "src/lib.rs".into(),
                    status: super::host::ChangeStatus::Modified,
                    bytes: 42,
                    before: Some(sha.into()),
                    after: Some(sha.into()),
                }],
                diff: "diff --git a/src/lib.rs b/src/lib.rs\n…".into(),
                diff_truncated: false,
                diff_sha256: Some(sha.into()),
                diff_bytes: Some(1234),
            }),
            EventKind::ScopeRestored {
                attempt: 1,
                item_index: None,
                tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
                paths: vec!["Cargo.toml".into()],
            },
            EventKind::RolledBack {
                to: "patch".into(),
                trees: vec!["4b825dc642cb6eb9a060e54bf8d69288fbee4904".into()],
                paths: vec!["src/lib.rs".into()],
                conflicts: vec![],
            },
        ]
    }

    fn estimate_example() -> EventKind {
        let fig = |expected, worst| EstimateFigure { expected, worst };
        EventKind::Estimated {
            steps: vec![StepEstimate {
                id: "draft".into(),
                step_hash: Some("3f2a91c0…".into()),
                dispatches: fig(1.18, Some(3.0)),
                tokens: fig(23_600.0, Some(60_000.0)),
                usd: fig(0.35, Some(0.9)),
                ms: fig(141_600.0, Some(360_000.0)),
            }],
        }
    }

    fn retry_examples() -> Vec<EventKind> {
        vec![
            EventKind::StepReused {
                from_run: "run-5b0c7f3a9e21d4c8".into(),
                attempt: 1,
            },
            EventKind::Retried {
                run: "run-a41d09e7c3b25f61".into(),
                from: Some("simulate".into()),
            },
        ]
    }

    fn failure_example() -> Failure {
        Failure::new(
            1,
            "ensure \"len(result.items) > 0\" failed: predicate evaluated to false",
        )
    }

    fn step_examples() -> Vec<EventKind> {
        let failure = Self::failure_example();
        let file = FileEvidence {
            path: "notes.md".into(),
            exists: true,
            size: Some(12),
            blake3: Some("af1349b9…".into()),
            note: None,
            sha256: None,
        };
        vec![
            EventKind::Planned {
                plan_hash: "cc76835a…".into(),
                flow: "main".into(),
            },
            EventKind::ConfigFrozen {
                config_hash: "5d1f09ab…".into(),
                sources: vec![
                    "/home/op/.stratum/stratum.toml".into(),
                    "/work/repo/stratum.toml".into(),
                ],
            },
            EventKind::Ready { attempt: 1 },
            EventKind::DispatchOrphaned {
                attempt: 1,
                timeout_ms: 600_000,
                orphans: 1,
                item_index: None,
            },
            EventKind::Result(AttemptResult::Output {
                attempt: 1,
                output: serde_json::json!({"summary": "done"}),
            }),
            EventKind::Result(AttemptResult::Failure {
                attempt: 1,
                failure: failure.clone(),
                iterate: Some(Iteration {
                    iteration: 1,
                    max: 3,
                }),
            }),
            EventKind::Telemetry {
                attempt: 1,
                telemetry: serde_json::json!({"durationMs": 41_200, "model": "claude-sonnet-4-5", "effort": "high"}),
            },
            EventKind::Evidence { file, root: None },
            EventKind::Judged {
                statement: "Score how well the summary covers the sources.".into(),
                holds: false,
                reason: "misses source 3".into(),
                stakes: "scored".into(),
                model: "qwen2.5:7b".into(),
                usage: JudgeUsage {
                    tokens: 900.0,
                    usd: 0.0,
                },
                judge: Some("local".into()),
                score: Some(0.6),
                threshold: Some(0.8),
                reasons: vec!["misses source 3".into()],
                inputs: vec![InputDigest {
                    path: "draft.md".into(),
                    size: 2048,
                    sha256: "9f86d081…".into(),
                }],
            },
            EventKind::JudgeError {
                judge: "local".into(),
                try_no: 1,
                error: "judge timed out after 60000 ms".into(),
            },
            EventKind::Skipped {
                reason: "`when` is not true".into(),
            },
            EventKind::Routed {
                target: "fallback".into(),
                failure: failure.clone(),
            },
            EventKind::StepContinued { failure },
            EventKind::GateWaiting { round: 0 },
            EventKind::GateResolved {
                decision: "revise".into(),
                target: Some("draft".into()),
                note: Some("tighten section 2".into()),
                choice: Some("rework".into()),
                resolved_by: "human".into(),
                shown: vec![ShownFile {
                    path: "paper/draft.md".into(),
                    size: Some(5120),
                    sha256: Some(
                        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
                    ),
                    note: None,
                }],
                tokenless: true,
            },
            EventKind::ArtifactsRecorded(Manifest::new(
                "write".into(),
                1,
                None,
                None,
                vec![FileHash {
                    path: "paper/draft.md".into(),
                    size: 5120,
                    sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                        .into(),
                }],
            )),
        ]
    }

    fn run_examples() -> Vec<EventKind> {
        vec![
            EventKind::Completed {
                output: serde_json::json!({"summary": "done"}),
            },
            EventKind::Failed(RunEnd {
                attempt: 1,
                reason: "no runnable steps remain".into(),
            }),
            EventKind::Killed(RunEnd {
                attempt: 0,
                reason: "gate `review` killed the flow".into(),
            }),
            EventKind::BudgetExhausted(RunEnd {
                attempt: 0,
                reason: "flow budget exhausted".into(),
            }),
            EventKind::FlowCancelled {
                by: "operator".into(),
                burned: Burned {
                    steps: vec!["work".into()],
                    items: 2,
                },
            },
            EventKind::UsageDebit(UsageDebit::Dispatch {
                attempt: 1,
                amount: serde_json::json!({"tokens": 1200, "usd": 0.02}),
            }),
        ]
    }

    fn fanout_examples() -> Vec<EventKind> {
        let path = "/tmp/stratum-wt/run-…/fan-e0-0".to_string();
        vec![
            EventKind::FanoutLedgerDebit {
                item_index: 3,
                attempt: 1,
                amount: serde_json::json!({"tokens": 800}),
                source: None,
            },
            EventKind::FanoutItemReady {
                item_index: 3,
                stage: 0,
                attempt: 1,
            },
            EventKind::FanoutItemSkipped {
                item_index: 3,
                stage: 1,
            },
            EventKind::FanoutItemContinued {
                item_index: 3,
                stage: 0,
                failure: Self::failure_example(),
            },
            EventKind::FanoutAttemptResult {
                item_index: 3,
                stage: 0,
                attempt: 1,
                success: false,
                failure: Some(Self::failure_example()),
            },
            EventKind::FanoutMerge {
                items: vec![0, 1, 2],
                pre_merge: vec!["make lint".into()],
                success: true,
                reason: None,
            },
            EventKind::WorktreeCreated {
                item_index: 0,
                path: path.clone(),
            },
            EventKind::WorktreeRemoved {
                item_index: 0,
                path,
                error: None,
            },
            EventKind::WorktreePatch {
                item_index: 0,
                bytes: 418,
            },
        ]
    }

    fn revision_examples() -> Vec<EventKind> {
        vec![
            EventKind::StepReset {
                reason: "revise".into(),
                reset: vec![EpochChange {
                    step_id: "draft".into(),
                    from_epoch: 0,
                    to_epoch: 1,
                }],
                subflows_dropped: vec![],
            },
            EventKind::CarryUpdated {
                name: "feedback".into(),
                reason: "revise".into(),
                round: Some(1),
            },
            EventKind::Resumed,
            EventKind::DriverInterrupted {
                signal: "SIGTERM".into(),
                killed: 1,
            },
            EventKind::CheckpointReverted {
                label: "before-review".into(),
                receipts_at_revert: 2,
            },
            EventKind::RoutedBack {
                route: 1,
                from: "review".into(),
                to: "draft".into(),
                count: 1,
                max: 2,
                note: Some("the review asks for another pass".into()),
                on_fail: false,
            },
        ]
    }

    /// The generated part of `docs/events.md`: every kind, its step id and
    /// an example of its detail.
    pub fn catalogue_markdown() -> String {
        let mut out = String::from("| type | stepId | detail (example) |\n| --- | --- | --- |\n");
        for e in EventKind::examples() {
            // Invariant: examples are plain data; they always serialize.
            let v = serde_json::to_value(&e).expect("invariant: event examples serialize");
            let detail = v
                .get("detail")
                .map_or("—".to_string(), |d| format!("`{d}`"));
            out.push_str(&format!(
                "| `{}` | {} | {detail} |\n",
                e.name(),
                e.step_of()
            ));
        }
        out
    }

    /// The event ending a run with `status` (failed, killed, budget exhausted).
    pub fn run_end(status: RunStatus, failure: &Failure) -> EventKind {
        let end = RunEnd {
            attempt: failure.attempt,
            reason: failure.reason.clone(),
        };
        match status {
            RunStatus::Killed => EventKind::Killed(end),
            RunStatus::BudgetExhausted => EventKind::BudgetExhausted(end),
            _ => EventKind::Failed(end),
        }
    }
}

/// How an attempt of a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttemptResult {
    /// It succeeded with this output.
    Output { attempt: u32, output: Value },
    /// It failed; `iterate` when an `iterate` cycle asked for another try.
    Failure {
        attempt: u32,
        failure: Failure,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iterate: Option<Iteration>,
    },
}

/// An `iterate` cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iteration {
    pub iteration: u32,
    pub max: u32,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub attempt: u32,
    pub reason: String,
}

/// Tokens and dollars a judge spent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeUsage {
    pub tokens: f64,
    pub usd: f64,
}

/// What a cancel burned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Burned {
    pub steps: Vec<String>,
    pub items: usize,
}

/// A step's epoch before and after a reset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochChange {
    #[serde(rename = "stepId")]
    pub step_id: String,
    #[serde(rename = "fromEpoch")]
    pub from_epoch: u32,
    #[serde(rename = "toEpoch")]
    pub to_epoch: u32,
}

/// A usage debit: of a step's dispatch (`attempt`) or of a receipt
/// (`dispatchId`, `source`, `seq`, extras such as `telemetry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UsageDebit {
    /// A receipt (`stratum_usage_report`).
    Receipt {
        #[serde(rename = "dispatchId")]
        dispatch_id: String,
        source: String,
        seq: u64,
        amount: Value,
        #[serde(rename = "usdSource")]
        usd_source: Option<String>,
        #[serde(flatten)]
        extra: serde_json::Map<String, Value>,
    },
    /// A step report's usage.
    Dispatch { attempt: u32, amount: Value },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(e: &Event) -> Value {
        let v = serde_json::to_value(e).unwrap();
        let back: Event = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(&back, e);
        v
    }

    #[test]
    fn events_keep_their_json_form() {
        let e = Event {
            at: 5,
            kind: EventKind::Ready { attempt: 2 },
            step: Some("work".into()),
        };
        assert_eq!(
            round_trip(&e),
            json!({"at": 5, "type": "ready", "stepId": "work", "detail": {"attempt": 2}})
        );
        let e = Event {
            at: 1,
            kind: EventKind::Resumed,
            step: None,
        };
        assert_eq!(round_trip(&e), json!({"at": 1, "type": "resumed"}));
        let e = Event {
            at: 1,
            kind: EventKind::Result(AttemptResult::Failure {
                attempt: 1,
                failure: Failure::new(1, "no"),
                iterate: Some(Iteration {
                    iteration: 1,
                    max: 3,
                }),
            }),
            step: None,
        };
        assert_eq!(
            round_trip(&e)["detail"],
            json!({"attempt": 1, "failure": {"attempt": 1, "reason": "no"}, "iterate": {"iteration": 1, "max": 3}})
        );
    }

    #[test]
    fn every_kind_has_one_example_whose_type_is_its_name() {
        let mut seen = std::collections::BTreeSet::new();
        for e in EventKind::examples() {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["type"], e.name());
            seen.insert(e.name());
            let back: EventKind = serde_json::from_value(v).unwrap();
            assert_eq!(back, e);
        }
        // `result` has two examples (success, failure)
        assert_eq!(seen.len() + 1, EventKind::examples().len());
    }
}
