//! Run state: plain data that the interpreter transforms and the store
//! persists (a small header plus one row per step and one per fanout item,
//! so a transition writes only what it changed).
//!
//! Owns: the run, frame, step and fanout-item records, spend ledgers, and
//! the index types that address them ([`FrameIx`], [`StepAt`], [`Slot`],
//! [`RowKey`]: the one place that knows the row-key layout).
//! Must never: do I/O or hold anything that cannot be serialized.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::event::Event;

/// Status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Work remains.
    Running,
    /// The flow output was produced.
    Completed,
    /// An unhandled failure, exhausted rounds, or a bad output.
    Failed,
    /// A gate decided `kill` with no target.
    Killed,
    /// A flow budget was exceeded.
    BudgetExhausted,
    /// Cancelled by an operator.
    Cancelled,
}

impl RunStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Killed => "killed",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        self != RunStatus::Running
    }
}

/// Status of a step (or fanout item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    #[default]
    Pending,
    /// Handed out; waiting for a report.
    Ready,
    /// A fanout or sub-flow in progress.
    Running,
    /// A gate waiting for a decision.
    WaitingGate,
    /// Done.
    Succeeded,
    /// Failed for good.
    Failed,
    /// Will not run.
    Skipped,
}

impl StepStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Ready => "ready",
            StepStatus::Running => "running",
            StepStatus::WaitingGate => "waiting_gate",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }

    /// Succeeded, failed or skipped.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded | StepStatus::Failed | StepStatus::Skipped
        )
    }
}

/// Why an attempt or a step failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The attempt number (0 for scope-level failures).
    pub attempt: u32,
    /// Human-readable reason.
    pub reason: String,
    /// Structured violations (contract errors, failed ensures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Value>,
}

impl Failure {
    /// A failure without structured violations.
    pub fn new(attempt: u32, reason: impl Into<String>) -> Failure {
        Failure {
            attempt,
            reason: reason.into(),
            violations: Vec::new(),
        }
    }
}

/// Spend on one ledger.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spend {
    /// Dollars.
    pub usd: f64,
    /// Tokens.
    pub tokens: f64,
    /// Dispatches (engine-counted).
    pub dispatches: f64,
    /// Milliseconds (client-reported).
    pub ms: f64,
}

impl Spend {
    /// Adds another spend.
    pub fn add(&mut self, o: &Spend) {
        self.usd += o.usd;
        self.tokens += o.tokens;
        self.dispatches += o.dispatches;
        self.ms += o.ms;
    }

    /// As a JSON object with only the non-zero keys.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("usd", self.usd),
            ("tokens", self.tokens),
            ("dispatches", self.dispatches),
            ("ms", self.ms),
        ] {
            if v != 0.0 {
                m.insert(
                    k.into(),
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                );
            }
        }
        Value::Object(m)
    }
}

/// A fanout item.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ItemState {
    /// Status.
    pub status: StepStatus,
    /// The element of `over`.
    pub value: Value,
    /// Current stage.
    pub stage: u32,
    /// Attempts over all stages.
    pub attempts: u32,
    /// Attempts of the current stage.
    pub stage_attempts: u32,
    /// Output of the last completed stage (`prev`), or the final output.
    pub output: Option<Value>,
    /// Output of the previous failed attempt (identical-evidence rule).
    pub last_output: Option<Value>,
    /// Live dispatch token.
    pub token: Option<String>,
    /// When the live dispatch was issued, for dispatches with a lease (X7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_ms: Option<i64>,
    /// Consecutive orphaned dispatches since the last report (X7).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub orphans: u32,
    /// Last failure.
    pub failure: Option<Failure>,
    /// The item's git worktree while it lives (`isolation: worktree`, engine dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The item's changes (`git diff --binary HEAD` of its worktree), taken
    /// when its final stage succeeded and merged when the fanout settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The digest of the manifest of its final stage's artifacts (X4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The snapshot (a git tree id) of the live scoped dispatch (X11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The snapshot of this entry's first scoped dispatch (X11): what the
    /// patch record of the accepted attempt is diffed against, so in-scope
    /// work a failed attempt left for its retry is in the record (and in
    /// what a rollback undoes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_snapshot: Option<String>,
    /// The item's stage failed for good and its `on_fail: continue` (X9)
    /// handled it: the item is failed, and `require` counts it as met.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continued: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn no_items(items: &Items) -> bool {
    items.is_empty()
}

/// A fanout step's items, with what changed since the last commit.
///
/// Items are stored as rows of their own ([`RowKey::item`]) so that a
/// report on one item writes that item, not all of them. Reading goes
/// through the slice ([`std::ops::Deref`]); every change goes through
/// [`Items::get_mut`] (marks that item) or [`Items::set`] (marks all), so
/// the commit writes exactly the item rows that changed. Serialized as the
/// plain list (checkpoints and rows of stores written before items had
/// rows of their own embed it); a deserialized list counts as wholly
/// changed, so its first commit writes every item as a row.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Items {
    list: Vec<ItemState>,
    #[serde(skip)]
    changed: ItemsChanged,
}

/// Which items changed since the last commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum ItemsChanged {
    /// Every item (a new list, or one that did not come from item rows).
    #[default]
    All,
    /// These items.
    Some(BTreeSet<u32>),
}

impl Items {
    /// Items as loaded from their own rows: nothing changed yet.
    pub fn stored(list: Vec<ItemState>) -> Items {
        Items {
            list,
            changed: ItemsChanged::Some(BTreeSet::new()),
        }
    }

    /// Replaces the list (every item counts as changed).
    pub fn set(&mut self, list: Vec<ItemState>) {
        self.list = list;
        self.changed = ItemsChanged::All;
    }

    /// Item `k` to change (marked as changed).
    pub fn get_mut(&mut self, k: usize) -> Option<&mut ItemState> {
        let it = self.list.get_mut(k)?;
        if let ItemsChanged::Some(set) = &mut self.changed {
            // k < len ≤ u32::MAX: fanout lists are bounded by the value limits
            set.insert(u32::try_from(k).unwrap_or(u32::MAX));
        }
        Some(it)
    }

    /// The indices of the items that changed since [`Items::committed`].
    pub fn changed(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match &self.changed {
            ItemsChanged::All => Box::new(0..self.list.len() as u32),
            ItemsChanged::Some(set) => Box::new(set.iter().copied()),
        }
    }

    /// Marks every item as changed (a state restored from a checkpoint is
    /// written back whole).
    pub fn all_changed(&mut self) {
        self.changed = ItemsChanged::All;
    }

    /// Marks the items as stored.
    pub fn committed(&mut self) {
        self.changed = ItemsChanged::Some(BTreeSet::new());
    }

    /// Takes the list out (for encoding the step row without it), leaving
    /// an empty one; [`Items::put_back`] restores it.
    pub fn take_list(&mut self) -> Vec<ItemState> {
        std::mem::take(&mut self.list)
    }

    /// Restores a list taken by [`Items::take_list`] (the changes stay).
    pub fn put_back(&mut self, list: Vec<ItemState>) {
        self.list = list;
    }
}

impl std::ops::Deref for Items {
    type Target = [ItemState];

    fn deref(&self) -> &[ItemState] {
        &self.list
    }
}

impl<'a> IntoIterator for &'a Items {
    type Item = &'a ItemState;
    type IntoIter = std::slice::Iter<'a, ItemState>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// Items are equal when their lists are (what changed is bookkeeping).
impl PartialEq for Items {
    fn eq(&self, other: &Items) -> bool {
        self.list == other.list
    }
}

/// A step of a frame.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepState {
    /// Status.
    pub status: StepStatus,
    /// Attempts made since the last reset (iterations included).
    pub attempts: u32,
    /// `iterate` cycles since the last reset.
    pub iterations: u32,
    /// Revisions this gate made (survives resets).
    pub gate_rounds: u32,
    /// Reset count.
    pub epoch: u32,
    /// Live dispatch or gate token.
    pub token: Option<String>,
    /// When the live dispatch was issued, for dispatches with a lease (X7;
    /// absent in rows written before leases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_ms: Option<i64>,
    /// Consecutive orphaned dispatches since the last report (X7).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub orphans: u32,
    /// Output when succeeded.
    pub output: Option<Value>,
    /// Output of the previous failed attempt (identical-evidence rule).
    pub last_output: Option<Value>,
    /// Latest failure.
    pub failure: Option<Failure>,
    /// The failure was routed by `on_fail`: dependants are skipped, the run goes on (E2).
    pub handled: bool,
    /// Activated by a route (on_fail, approve, kill), with what activated it.
    pub routed: Option<Failure>,
    /// Re-entered by a gate's revise: the gate and the round (a route
    /// target runs again although no route chose it this time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revised: Option<Revised>,
    /// Reset by a gate's revise without being its target (X10): the revise
    /// its first dispatch (attempt 1, or a fanout item's first stage)
    /// carries as `previousRevise`. Unlike `revised` it never makes a route
    /// target run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revise_context: Option<Revised>,
    /// An `on_fail` `continue` entry took this step's failure (X2 through
    /// an X9 list; the plain `on_fail: continue` is in the plan).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continued: bool,
    /// The route that re-entered this step (X9), until it is reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_route: Option<PreviousRoute>,
    /// The gate decision taken (`approve`, `revise`, `kill`).
    pub decision: Option<String>,
    /// The note of the gate's latest decision (X1: `${gate.note}`; absent in
    /// rows written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The choice of the gate's latest decision (X10: `${gate.choice}`),
    /// kept across resets like the note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    /// A waiting gate's options (X10), fixed (a template rendered) when it
    /// started waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    /// Task or sub-flow ledger.
    pub spent: Spend,
    /// Fanout items (stored as rows of their own; see [`Items`]).
    #[serde(default, skip_serializing_if = "no_items")]
    pub items: Items,
    /// Only in a stored step row: how many item rows ([`RowKey::item`])
    /// belong to it (`None`: the items are embedded, as in checkpoints and
    /// in rows written before items had rows of their own). Always `None`
    /// in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_rows: Option<u32>,
    /// Frame of a running sub-flow.
    pub child: Option<FrameIx>,
    /// Taken over from the run this one retries instead of being run (X8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused: Option<Reused>,
    /// The digest of the manifest of its artifacts, once it succeeded (X4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// What a waiting gate shows (X4 `prompt`/`show`), fixed when it
    /// started waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<GateShown>,
    /// The snapshot (a git tree id) of the live scoped dispatch (X11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The snapshot of this entry's first scoped dispatch (X11): what the
    /// patch record of the accepted attempt is diffed against, so in-scope
    /// work a failed attempt left for its retry is in the record (and in
    /// what a rollback undoes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_snapshot: Option<String>,
    /// The length of the run's patch log when this step's latest entry was
    /// first dispatched (X11: where a `rollback` to it starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_mark: Option<u32>,
}

/// A step a retried run took over from the old run (X8): its output (or a
/// gate's approval) is the old run's, nothing was dispatched or spent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reused {
    /// The run it was taken from.
    pub from_run: String,
    /// The attempt of the old run whose result it is.
    pub attempt: u32,
}

/// What a retried run knows of the run it retries (X8), in its header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryOf {
    /// The old run's id.
    pub run: String,
    /// `--from STEP`: that step and everything downstream of it run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The entry-flow steps of the old run that may be reused, by id
    /// (the `--from` closure already left out); whether one is reused is
    /// decided when it would become ready (`machine/reuse.rs`).
    #[serde(default)]
    pub candidates: BTreeMap<String, Candidate>,
}

/// A step of the old run that may be reused, with what it was computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Its step hash in the old plan ([`crate::plan::hash::step_hash`]).
    pub hash: String,
    /// The canonical digest of the inputs it read in the old run.
    pub inputs: String,
    /// The attempt that succeeded.
    pub attempt: u32,
    /// Its output (`None` for a gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The evidence its checks read, to verify again before reuse.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceRecord>,
    /// The digest of its manifest in the old run (its row's `manifest`),
    /// given to the reused step so its dependants' inputs read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// Its latest manifests in the old run (the step's, or one per fanout
    /// item), recorded again in the new run when it is reused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<super::event::Manifest>,
}

/// One piece of evidence a step's checks read in the old run; reuse
/// requires each to verify again, through the host, unchanged. A closed
/// enum: each kind has its own collection (`evidence_of`) and re-check
/// (`recheck`) in `machine/reuse.rs`; new kinds are new variants at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EvidenceRecord {
    /// A file predicate's file in the workspace: whether it existed and its blake3.
    File {
        /// Path relative to the workspace root.
        path: String,
        /// A regular file was there.
        exists: bool,
        /// Its blake3 hex digest, when it was read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blake3: Option<String>,
    },
    /// A file of the step's manifest (X4; a fanout's: of any item's),
    /// looked for in the workspace like `stratumc verify` does.
    Artifact {
        /// Path relative to the root, as the manifest lists it.
        path: String,
        /// Its sha256 hex digest.
        sha256: String,
    },
    /// A file a `file()` read saw (X3) in the workspace.
    Read {
        /// Path relative to the workspace root.
        path: String,
        /// A regular file was there.
        exists: bool,
        /// Its sha256 hex digest (absent when missing, or above 64 MiB:
        /// such a read never verifies).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
    /// A file an approved gate showed (X4 `show`), hashed in the workspace
    /// when it started waiting.
    Shown {
        /// The rendered path.
        path: String,
        /// Its sha256 hex digest; absent when it was missing or not hashed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
}

/// A gate's rendered `prompt` and its `show` files with their hashes (X4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GateShown {
    /// The rendered prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The files, in `show` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<super::event::ShownFile>,
}

/// The route that re-entered a step (X9): the routing step, the rendered
/// `note`, and the output the routing step produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviousRoute {
    /// The routing step's id.
    pub from: String,
    /// The route's rendered `note`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The routing step's output when the route fired (`null` when an
    /// `on_fail` `goto` took its failure).
    pub output: Value,
    /// The failure an `on_fail` `goto` took (X9); absent for a `route`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// The revise that re-entered a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revised {
    /// The gate's id.
    pub gate: String,
    /// The flow's round after the revise.
    pub round: u32,
    /// The decision's note (`null` when none).
    #[serde(default)]
    pub note: Option<String>,
    /// The decision's choice (X10; `null` when none).
    #[serde(default)]
    pub choice: Option<String>,
}

/// One flow invocation: the entry flow (frame 0) or a sub-flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameMeta {
    /// Flow index in the plan.
    pub flow: u32,
    /// The run step that called it.
    pub parent: Option<StepAt>,
    /// The flow input: stored as a row of its own ([`RowKey::frame_input`],
    /// written once), not in the header that every transition rewrites;
    /// headers written before that embed it (and still load).
    #[serde(default, skip_serializing)]
    pub input: FrameInput,
    /// Gate revisions in this frame.
    pub rounds: u32,
    /// The flow's ledger.
    pub spent: Spend,
    /// Number of steps.
    pub len: u32,
    /// No longer live (finished or dropped by a reset).
    pub closed: bool,
    /// Steps not yet terminal.
    pub live: u32,
}

/// A frame's input, and whether its row holds it already.
#[derive(Debug, Clone, Default)]
pub struct FrameInput {
    value: Value,
    stored: bool,
}

impl FrameInput {
    /// An input not stored yet (a new frame, or one read from a header
    /// that embedded it): the next commit writes its row.
    pub fn new(value: Value) -> FrameInput {
        FrameInput {
            value,
            stored: false,
        }
    }

    /// An input read from its own row.
    pub fn stored(value: Value) -> FrameInput {
        FrameInput {
            value,
            stored: true,
        }
    }

    /// Whether its row must be written with the next commit.
    pub fn unstored(&self) -> bool {
        !self.stored
    }

    /// Marks it as written (after a commit) or to be written again
    /// (a state restored from a checkpoint is written back whole).
    pub fn set_stored(&mut self, stored: bool) {
        self.stored = stored;
    }
}

impl std::ops::Deref for FrameInput {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

/// Inputs are equal when their values are.
impl PartialEq for FrameInput {
    fn eq(&self, other: &FrameInput) -> bool {
        self.value == other.value
    }
}

impl Serialize for FrameInput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for FrameInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FrameInput, D::Error> {
        Value::deserialize(d).map(FrameInput::new)
    }
}

impl FrameMeta {
    /// A fresh frame of `len` steps running flow `flow` with `input`.
    pub fn new(flow: u32, parent: Option<StepAt>, input: Value, len: u32) -> FrameMeta {
        FrameMeta {
            flow,
            parent,
            input: FrameInput::new(input),
            rounds: 0,
            spent: Spend::default(),
            len,
            closed: false,
            live: len,
        }
    }
}

/// A carry variable's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarryValue {
    /// The value.
    pub value: Value,
    /// Epoch of the source step when written (step-sourced values).
    pub source_epoch: Option<u32>,
    /// `initial` or `revise`.
    pub kind: String,
}

/// The run header (everything but the step rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Run id.
    pub id: String,
    /// The frames' inputs are rows of their own ([`RowKey::frame_input`]);
    /// false in headers that embed them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inputs_apart: bool,
    /// Hash of the plan executed (E6).
    pub plan_hash: String,
    /// Status.
    pub status: RunStatus,
    /// Flow output when completed.
    pub output: Option<Value>,
    /// Why the run ended, if it failed.
    pub failure: Option<Failure>,
    /// Frames (index 0 is the entry flow).
    pub frames: Vec<FrameMeta>,
    /// Carry variables.
    pub carry: BTreeMap<String, CarryValue>,
    /// Token counter (tokens are unique per run).
    pub issued: u64,
    /// Workspace root for file predicates.
    pub workspace: Option<String>,
    /// Handed-out dispatches.
    pub ready: BTreeSet<Slot>,
    /// Waiting gates.
    pub gates: BTreeSet<StepAt>,
    /// Milliseconds since the epoch when created.
    pub created_ms: i64,
    /// Usage receipts settled so far: `dispatchId` → sequence number
    /// (idempotency of `stratum_usage_report`; survives checkpoint reverts).
    #[serde(default)]
    pub receipts: BTreeMap<String, u64>,
    /// Last receipt sequence number (monotonic, never rolled back).
    #[serde(default)]
    pub receipt_seq: u64,
    /// The configuration frozen into the run at start: canonical
    /// `stratum.toml` text (`config::Config::to_toml`; its blake3 is the
    /// `config_frozen` event's `configHash`). Every later process builds the
    /// run's host and agent commands from it. `None`: a run started before
    /// configurations were frozen, or by an embedder that gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The run this one retries, with its reusable steps (X8; `None` for
    /// ordinary runs and runs stored before retries existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Box<RetryOf>>,
    /// How often each `route` entry has fired in the run (X9), keyed by
    /// [`route_key`]: run-wide, so a reset, a sub-flow call or a checkpoint
    /// revert never gives a firing back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes_fired: BTreeMap<String, u32>,
    /// The accepted scoped dispatches in the workspace tree (X11), oldest
    /// first: what a `rollback` restores. Rolled-back entries are removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch_log: Vec<PatchRef>,
}

/// One accepted scoped dispatch in the workspace (X11): the snapshot it
/// started from and each changed path with its sha256 at report (`None`:
/// deleted), checked before a rollback overwrites it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRef {
    /// The step id (`parent/child`).
    pub step: String,
    /// The attempt.
    pub attempt: u32,
    /// The snapshot (git tree id) the dispatch started from.
    pub tree_before: String,
    /// The tree at report.
    pub tree_after: String,
    /// `(path, sha256 after)`.
    pub files: Vec<(String, Option<String>)>,
}

/// The key of a `route` entry's counter in [`Header::routes_fired`]:
/// `flow/step/route` by plan index (one counter per entry of the plan,
/// whichever frame runs it).
pub fn route_key(flow: u32, step: u32, route: u32) -> String {
    format!("{flow}/{step}/{route}")
}

/// The key of an `on_fail` entry's counter in [`Header::routes_fired`]
/// (X9): `flow/step/on_fail/entry` by plan index.
pub fn on_fail_key(flow: u32, step: u32, entry: u32) -> String {
    format!("{flow}/{step}/on_fail/{entry}")
}

/// The `routes_fired` key of `on_fail` entry `entry` of stage `stage` of
/// fanout step `step` (X9; one counter per plan entry, whichever item takes it).
pub fn stage_on_fail_key(flow: u32, step: u32, stage: u32, entry: u32) -> String {
    format!("{flow}/{step}/stage/{stage}/on_fail/{entry}")
}

/// A whole run in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The header.
    pub header: Header,
    /// Steps per frame.
    pub steps: Vec<Vec<StepState>>,
    /// Store version this state was loaded at.
    pub version: u64,
    /// Rows changed since the last commit.
    pub dirty: BTreeSet<RowKey>,
    /// Events since the last commit.
    pub events: Vec<Event>,
    /// Content-addressed blobs (a patch record's full diff, X11) to keep in
    /// the store with the next commit, under [`super::event::blob_label`]
    /// of their sha256.
    pub blobs: Vec<Blob>,
}

/// A blob to keep with a commit: its sha256 (hex) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// Most steps a flow may have in a run (row keys hold 16 bits of step).
pub const MAX_STEPS: usize = 0xffff;
/// Most frames a run may have (row keys hold 16 bits of frame).
pub const MAX_FRAMES: usize = 0xffff;

// ----- indices --------------------------------------------------------------

/// A frame of a run: 0 is the entry flow, later ones are sub-flow calls.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct FrameIx(pub u32);

impl FrameIx {
    /// The entry flow's frame.
    pub const ENTRY: FrameIx = FrameIx(0);

    /// As a vector index.
    pub fn ix(self) -> usize {
        self.0 as usize
    }
}

/// A step of a frame: the frame and the step's index in its flow's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepAt {
    /// The frame.
    pub frame: FrameIx,
    /// The step's index in the frame's flow.
    pub step: u32,
}

impl StepAt {
    /// Step `step` of frame `frame`.
    pub fn new(frame: FrameIx, step: u32) -> StepAt {
        StepAt { frame, step }
    }

    /// Another step of the same frame.
    pub fn sibling(self, step: u32) -> StepAt {
        StepAt { step, ..self }
    }

    /// The step as a vector index.
    pub fn ix(self) -> usize {
        self.step as usize
    }
}

/// What a dispatch is for: a step, or one item of a fanout step.
/// Ordered by step, then the step itself before its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    /// The step.
    pub at: StepAt,
    /// The fanout item, if the dispatch is for one.
    pub item: Option<u32>,
}

impl Slot {
    /// The step itself.
    pub fn step(at: StepAt) -> Slot {
        Slot { at, item: None }
    }

    /// Item `k` of fanout step `at`.
    pub fn item(at: StepAt, k: u32) -> Slot {
        Slot { at, item: Some(k) }
    }
}

// The stored header keeps the encodings of format 1: a step as `[frame,
// step]`, a dispatch as `[frame, step, item + 1 or 0]`.

impl Serialize for StepAt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.frame.0, self.step).serialize(s)
    }
}

impl<'de> Deserialize<'de> for StepAt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StepAt, D::Error> {
        let (f, s) = <(u32, u32)>::deserialize(d)?;
        Ok(StepAt::new(FrameIx(f), s))
    }
}

impl Serialize for Slot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let item = self.item.map_or(0, |k| k.saturating_add(1));
        (self.at.frame.0, self.at.step, item).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Slot, D::Error> {
        let (f, s, item) = <(u32, u32, u32)>::deserialize(d)?;
        let at = StepAt::new(FrameIx(f), s);
        Ok(Slot {
            at,
            item: item.checked_sub(1),
        })
    }
}

/// The key of a stored row: bits 0–15 the step, 16–31 the frame, 32–63 a
/// fanout item + 1 (0: the step's own row); step bits all ones (and no
/// item) is the frame's input row. Step rows keep the keys of
/// format 1; item keys let items become rows of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowKey(u64);

impl RowKey {
    /// The row of a step.
    pub fn step(at: StepAt) -> RowKey {
        RowKey((u64::from(at.frame.0 & 0xffff) << 16) | u64::from(at.step & 0xffff))
    }

    /// The row of a fanout item.
    pub fn item(at: StepAt, k: u32) -> RowKey {
        RowKey(RowKey::step(at).0 | (u64::from(k.saturating_add(1)) << 32))
    }

    /// The row of frame `frame`'s input (the step bits all ones: no step
    /// has that index, [`MAX_STEPS`]).
    pub fn frame_input(frame: FrameIx) -> RowKey {
        RowKey((u64::from(frame.0 & 0xffff) << 16) | 0xffff)
    }

    /// The frame whose input this row holds, if it is an input row.
    pub fn input_of(self) -> Option<FrameIx> {
        (self.0 >> 32 == 0 && self.0 & 0xffff == 0xffff)
            .then_some(FrameIx(((self.0 >> 16) & 0xffff) as u32))
    }

    /// What the row holds.
    pub fn slot(self) -> Slot {
        let at = StepAt::new(
            FrameIx(((self.0 >> 16) & 0xffff) as u32),
            (self.0 & 0xffff) as u32,
        );
        Slot {
            at,
            item: ((self.0 >> 32) as u32).checked_sub(1),
        }
    }

    /// The stored form.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// A stored key.
    pub fn from_raw(raw: u64) -> RowKey {
        RowKey(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_of_steps_keep_the_format_1_layout() {
        let at = StepAt::new(FrameIx(3), 7);
        assert_eq!(RowKey::step(at).raw(), (3 << 16) | 7);
        assert_eq!(RowKey::step(at).slot(), Slot::step(at));
        let item = RowKey::item(at, 41);
        assert_eq!(item.slot(), Slot::item(at, 41));
        assert_ne!(item, RowKey::step(at));
    }

    #[test]
    fn slots_serialize_as_format_1_tuples_and_order_steps_before_items() {
        let at = StepAt::new(FrameIx(1), 2);
        let v = serde_json::to_value([Slot::step(at), Slot::item(at, 0)]).unwrap();
        assert_eq!(v, serde_json::json!([[1, 2, 0], [1, 2, 1]]));
        let back: Vec<Slot> = serde_json::from_value(v).unwrap();
        assert_eq!(back, vec![Slot::step(at), Slot::item(at, 0)]);
        assert!(Slot::step(at) < Slot::item(at, 0));
        assert!(Slot::item(at, 5) < Slot::step(at.sibling(3)));
        assert_eq!(serde_json::to_value(at).unwrap(), serde_json::json!([1, 2]));
    }
}
