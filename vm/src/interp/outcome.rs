//! What a transition answers: the run status, the dispatches to hand out,
//! the gates that wait, and the entry flow's ledger — typed, so adapters
//! (MCP, CLI) read fields, never JSON keys. JSON exists only when an adapter
//! serializes these for its wire (the shapes of LANGUAGE.md E4/E5).
//!
//! Owns: [`Outcome`], [`ReadyEntry`], [`WaitingGate`], [`LedgerView`] and
//! their wire form.
//! Must never: decide anything (the interpreter builds them from the run).

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::state::{Failure, RunStatus, Spend};
use crate::plan::{Agent, BudgetDef};

/// What happens next, after an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The run status.
    pub status: RunStatus,
    /// Dispatches to hand out (E4, E5).
    pub ready: Vec<ReadyEntry>,
    /// Gates waiting now, with their tokens.
    pub gates: Vec<WaitingGate>,
    /// The flow output when completed.
    pub output: Option<Value>,
    /// Why the run ended, if it did not complete.
    pub failure: Option<Failure>,
    /// Spend and budget of the entry flow.
    pub ledger: LedgerView,
}

impl Outcome {
    /// The response status: `ready` when there are dispatches, `running` when only gates wait.
    pub fn wire_status(&self) -> &'static str {
        match self.status {
            RunStatus::Running if !self.ready.is_empty() => "ready",
            other => other.as_str(),
        }
    }

    /// The engine response envelope `{status, runId, planHash, ready, gates, output?, failure?, ledger}`.
    pub fn to_json(&self, run_id: &str, plan_hash: &str) -> Value {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Envelope<'a> {
            status: &'static str,
            run_id: &'a str,
            plan_hash: &'a str,
            ready: &'a [ReadyEntry],
            gates: &'a [WaitingGate],
            #[serde(skip_serializing_if = "Option::is_none")]
            output: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            failure: Option<&'a Failure>,
            ledger: &'a LedgerView,
        }
        let envelope = Envelope {
            status: self.wire_status(),
            run_id,
            plan_hash,
            ready: &self.ready,
            gates: &self.gates,
            output: self.output.as_ref(),
            failure: self.failure.as_ref(),
            ledger: &self.ledger,
        };
        // Invariant: every field is plain data with string keys; it always serializes.
        serde_json::to_value(envelope).expect("invariant: outcomes always serialize")
    }
}

/// Who runs a dispatch (E8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dispatch {
    /// A `do` step: the client runs it.
    Step,
    /// A fanout item the client runs (`dispatch: consumer`).
    Consumer,
    /// A fanout item the engine runs (`dispatch: engine`).
    Engine,
    /// An engine item handed to the client because no command is configured.
    EngineFallback,
}

/// One dispatch to hand out: a `do` step or a fanout item's stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyEntry {
    /// The id to report on: `step`, `parent/child`, `fanout/3`.
    pub id: String,
    /// The rendered task.
    #[serde(rename = "do")]
    pub task: String,
    /// The agent that should do it.
    #[serde(serialize_with = "agent_name")]
    pub agent: Agent,
    /// This attempt's number (over all stages for items).
    pub attempt: u32,
    /// Attempts left after this one.
    pub attempts_left: u32,
    /// The token the report must carry.
    pub dispatch_token: String,
    /// Who runs it.
    pub dispatch: Dispatch,
    /// The output contract, when there is one.
    pub contract: Option<ContractView>,
    /// The ensures the output is checked against.
    pub ensure: Vec<EnsureView>,
    /// Why the previous attempt failed, or what routed this step.
    pub previous_failure: Option<Failure>,
    /// The gate revise that re-entered this step (`{gate, round, note,
    /// choice}`, `choice` from X10): how a reviewer's note and choice reach
    /// the agent asked to act on it. Left out when the step was not revised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_revise: Option<crate::interp::Revised>,
    /// The route that re-entered this step (X9: `{from, note, output}`);
    /// for a fanout target, its items' first dispatches carry it. Left out
    /// when no route did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_route: Option<crate::interp::PreviousRoute>,
    /// For fanout items: the item, its index, the stage and the previous stage's output.
    #[serde(flatten)]
    pub item: Option<ItemEntry>,
    /// The directory the agent works in (an isolated item's worktree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The dispatch's lease in milliseconds (X7): unreported after it, the
    /// dispatch is an orphan and its token is revoked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the dispatch may change (X11), rendered: a change outside is a
    /// `scope_violation` and is put back. Left out for unscoped dispatches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeView>,
}

/// A dispatch's `scope` as its agent reads it (X11).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeView {
    /// Paths and globs it may change or delete (`[]` with no `create`: it
    /// may change nothing).
    pub files: Vec<String>,
    /// Paths and globs it may create.
    pub create: Vec<String>,
    /// Most bytes it may change (added plus removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_changed_bytes: Option<u64>,
}

/// The fanout part of a ready entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemEntry {
    /// The element of `over`.
    pub item: Value,
    /// Its index.
    pub item_index: u32,
    /// The stage.
    pub stage: u32,
    /// The previous stage's output (`null` at stage 0).
    pub prev: Option<Value>,
}

fn agent_name<S: Serializer>(a: &Agent, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.as_str())
}

/// A contract as an agent reads it: the root record and every record it
/// reaches, each with its fields' types.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContractView {
    /// The root record's name.
    pub root: String,
    /// Records by name, in the order they were reached; fields in order.
    pub contracts: Ordered<Ordered<String>>,
}

/// Pairs serialized as a JSON object in their order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ordered<V>(pub Vec<(String, V)>);

impl<V: Serialize> Serialize for Ordered<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// An ensure as an agent reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnsureView {
    /// An expression, as written.
    Expr(String),
    /// `file_exists: path`.
    FileExists(String),
    /// `file_contains: {path, text}`.
    FileContains { path: String, text: String },
    /// `judged: {statement, stakes}`.
    Judged { statement: String, stakes: String },
    /// `judged: {rubric, threshold, judge?, inputs?}` (X5), rendered for
    /// this dispatch: the agent sees what it will be scored against.
    #[serde(rename = "judged")]
    Scored {
        rubric: String,
        threshold: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        judge: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<String>,
    },
    /// `exec: {run, args, expect_exit}` (X12), its arguments rendered for
    /// this dispatch (an argument not renderable yet is shown as a note):
    /// the agent sees which declared command will check its work.
    Exec {
        run: String,
        args: Vec<String>,
        expect_exit: i32,
    },
}

/// A gate waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingGate {
    /// The gate's id (`gate`, `parent/gate`).
    pub step_id: String,
    /// The token a decision must carry.
    pub gate_token: String,
    /// Revision rounds used by the gate's flow.
    pub round: u32,
    /// That flow's `max_rounds`.
    pub max_rounds: Option<u32>,
    /// This gate's own `max_rounds`.
    pub gate_max_rounds: Option<u32>,
    /// Where each decision goes.
    pub routes: GateRoutes,
    /// The gate's rendered `prompt` (X4), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Its `show` files with the sha256 they had when it started waiting
    /// (X4; a missing file has no hash and a note).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub show: Vec<crate::interp::event::ShownFile>,
    /// The options a decision's `choice` may take (X10), fixed when the
    /// gate started waiting; left out when the gate has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
}

/// A gate's targets (`None`: approve continues, kill ends the flow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateRoutes {
    pub approve: Option<String>,
    pub revise: Option<String>,
    pub kill: Option<String>,
}

/// The entry flow's spend and budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerView {
    /// What was spent (only the non-zero amounts appear on the wire).
    #[serde(serialize_with = "nonzero_spend")]
    pub spent: Spend,
    /// The flow's budget; `null` when it has none.
    pub budget: Option<BudgetView>,
}

/// A budget on the wire: every limit, `null` when not limited.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetView {
    pub usd: Option<f64>,
    pub tokens: Option<u64>,
    pub dispatches: Option<u64>,
    pub ms: Option<u64>,
}

impl From<&BudgetDef> for BudgetView {
    fn from(b: &BudgetDef) -> BudgetView {
        BudgetView {
            usd: b.usd,
            tokens: b.tokens,
            dispatches: b.dispatches,
            ms: b.ms,
        }
    }
}

fn nonzero_spend<S: Serializer>(spend: &Spend, s: S) -> Result<S::Ok, S::Error> {
    let parts = [
        ("usd", spend.usd),
        ("tokens", spend.tokens),
        ("dispatches", spend.dispatches),
        ("ms", spend.ms),
    ];
    s.collect_map(parts.into_iter().filter(|(_, v)| *v != 0.0))
}
