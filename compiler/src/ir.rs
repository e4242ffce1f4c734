//! The checked IR: the one complete description of a valid spec.
//!
//! Owns: plain data with everything resolved — contracts in a type table,
//! steps as indices, references as (target, path, static type), expressions
//! parsed and typed, edges classified as data / order / route, a topological
//! order per flow. Lowering to the plan (`build`) reads only this.
//! Must never: point back into YAML nodes or hold anything that needs the
//! source text to be interpreted (spans are kept only for messages).

use serde::Serialize;
use stratum_grammar::Expr;

use crate::source::Span;
use crate::syntax::ast::{Agent, Budget, Dispatch, Isolation, Require, Stakes};
use crate::types::{RecordId, Type, TypeTable};

/// Index of a flow in [`Ir::flows`].
pub type FlowId = usize;
/// Index of a step in [`FlowIr::steps`].
pub type StepId = usize;

/// A checked spec.
#[derive(Debug, Clone)]
pub struct Ir {
    /// Contracts and flow inputs.
    pub types: TypeTable,
    /// Contract name → record, in declaration order.
    pub contracts: Vec<(String, RecordId)>,
    /// Flows in document order (shared: the language server's database
    /// keeps each flow's IR and assembles the spec without copying them).
    pub flows: Vec<std::sync::Arc<FlowIr>>,
    /// The entry flow.
    pub entry: FlowId,
}

impl Ir {
    /// The flow with this name.
    pub fn flow(&self, name: &str) -> Option<(FlowId, &FlowIr)> {
        self.flows
            .iter()
            .enumerate()
            .find(|(_, f)| f.name == name)
            .map(|(i, f)| (i, &**f))
    }
}

/// A checked flow.
#[derive(Debug, Clone)]
pub struct FlowIr {
    /// Name.
    pub name: String,
    /// The record of its input.
    pub input: RecordId,
    /// Where the flow output comes from.
    pub output: OutputIr,
    /// Steps in document order.
    pub steps: Vec<StepIr>,
    /// Every edge of the step graph.
    pub edges: Vec<Edge>,
    /// Steps in a topological order of all forward edges (document order breaks ties).
    pub topo: Vec<StepId>,
    /// Flow budget.
    pub budget: Option<Budget>,
    /// Flow-wide cap on gate revisions.
    pub max_rounds: Option<u64>,
    /// Carry variables (entry flow only).
    pub carry: Vec<CarryIr>,
}

impl FlowIr {
    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<StepId> {
        self.steps.iter().position(|s| s.id == id)
    }
}

/// `output: {from, contract}` resolved.
#[derive(Debug, Clone)]
pub struct OutputIr {
    /// The producing step.
    pub step: StepId,
    /// Path into its output.
    pub path: Vec<Segment>,
    /// `output.contract`.
    pub contract: RecordId,
    /// Where `from` is written.
    pub span: Span,
}

/// One path segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Segment {
    /// `.name`.
    Field(String),
    /// `[n]`.
    Index(u64),
}

/// What a reference points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefTarget {
    /// `${input...}`.
    Input,
    /// `${step.output...}`.
    Step(StepId),
    /// `${item...}` (fanout stages).
    Item,
    /// `${prev...}` (fanout stages after the first).
    Prev,
    /// `${name...}` (a carry variable, by index in [`FlowIr::carry`]).
    Carry(usize),
}

/// A resolved `${...}` reference.
#[derive(Debug, Clone)]
pub struct RefIr {
    /// The target.
    pub target: RefTarget,
    /// Path after the target.
    pub path: Vec<Segment>,
    /// Static type of the referenced value.
    pub ty: Type,
    /// Where the `${...}` is written.
    pub span: Span,
}

/// A piece of a template.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// A reference to interpolate.
    Ref(RefIr),
}

/// A checked template (`do`, `with` string leaves, `over`).
#[derive(Debug, Clone)]
pub struct TemplateIr {
    /// Pieces in order.
    pub pieces: Vec<Piece>,
    /// True when the template is exactly one reference (its value keeps its type).
    pub full_value: bool,
    /// Where it is written.
    pub span: Span,
}

/// A checked expression.
#[derive(Debug, Clone)]
pub struct ExprIr {
    /// The source text.
    pub source: String,
    /// The syntax tree (spans relative to `source`), shared with the parse
    /// that produced it (the IDE database reuses parses across edits).
    pub ast: std::sync::Arc<Expr>,
    /// Its static type.
    pub ty: Type,
    /// Where it is written.
    pub span: Span,
}

/// An ensure predicate.
#[derive(Debug, Clone)]
pub enum PredicateIr {
    /// `expr`.
    Expr(ExprIr),
    /// `file_exists` (literal path).
    FileExists(String),
    /// `file_contains` (literal path and text).
    FileContains {
        /// Path.
        path: String,
        /// Text.
        text: String,
    },
    /// `judged`.
    Judged {
        /// Statement.
        statement: String,
        /// Stakes.
        stakes: Stakes,
    },
}

/// A fanout stage.
#[derive(Debug, Clone)]
pub struct StageIr {
    /// Task template.
    pub task: TemplateIr,
    /// Agent.
    pub agent: Agent,
    /// Output contract.
    pub out: Option<RecordId>,
    /// Predicates.
    pub ensure: Vec<PredicateIr>,
    /// Total attempts (stage, else fanout step, else 2).
    pub attempts: u64,
    /// Stage condition.
    pub when: Option<ExprIr>,
}

/// A value given in `with`.
#[derive(Debug, Clone)]
pub enum WithValue {
    /// A string leaf (a template).
    Template(TemplateIr),
    /// A non-string YAML value, passed through as JSON.
    Literal(serde_json::Value),
    /// A list whose leaves may be templates.
    List(Vec<WithValue>),
    /// A mapping whose leaves may be templates.
    Map(Vec<(String, WithValue)>),
}

/// The construct of a step.
#[derive(Debug, Clone)]
pub enum StepKindIr {
    /// An agent task.
    Do {
        /// The task template.
        task: TemplateIr,
        /// Agent.
        agent: Agent,
        /// Total attempts.
        attempts: u64,
        /// `iterate`.
        iterate: Option<IterateIr>,
    },
    /// A computed object.
    Set {
        /// Key → expression.
        fields: Vec<(String, ExprIr)>,
    },
    /// A human gate.
    Gate {
        /// `on_approve` target.
        on_approve: Option<StepId>,
        /// `on_revise` target.
        on_revise: Option<StepId>,
        /// `on_kill` target.
        on_kill: Option<StepId>,
        /// Per-gate revision cap.
        max_rounds: Option<u64>,
    },
    /// Fan-out over a list.
    Fanout {
        /// The list.
        over: RefIr,
        /// Stages.
        stages: Vec<StageIr>,
        /// Items in flight.
        concurrency: u64,
        /// Isolation.
        isolation: Isolation,
        /// Success requirement.
        require: Require,
        /// Commands before merging.
        pre_merge: Vec<String>,
        /// Who runs the items.
        dispatch: Dispatch,
        /// Default attempts of stages.
        attempts: u64,
    },
    /// A sub-flow call.
    Run {
        /// The callee.
        flow: FlowId,
        /// Input values, by callee input name.
        with: Vec<(String, WithValue)>,
    },
}

/// `iterate: {max, until}`.
#[derive(Debug, Clone)]
pub struct IterateIr {
    /// Most iterations.
    pub max: u64,
    /// Stop condition.
    pub until: ExprIr,
}

/// A checked step.
#[derive(Debug, Clone)]
pub struct StepIr {
    /// The id.
    pub id: String,
    /// The step in the file.
    pub span: Span,
    /// The construct.
    pub kind: StepKindIr,
    /// Output contract (do/set: `out`; fanout: element of the list; run: callee output).
    pub out: Option<RecordId>,
    /// Static type of the step's output (`None`: no output).
    pub output_type: Option<Type>,
    /// Condition.
    pub when: Option<ExprIr>,
    /// Predicates.
    pub ensure: Vec<PredicateIr>,
    /// Step budget.
    pub budget: Option<Budget>,
    /// Failure route.
    pub on_fail: Option<StepId>,
}

/// Why one step comes after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `after`.
    Order,
    /// A `${step.output}` reference.
    Data,
    /// `on_fail`.
    OnFail,
    /// `gate.on_approve`.
    Approve,
    /// `gate.on_kill`.
    Kill,
}

impl EdgeKind {
    /// Dependency edges (order and data) gate readiness; the others are routes.
    pub fn is_dependency(self) -> bool {
        matches!(self, EdgeKind::Order | EdgeKind::Data)
    }
}

/// An edge of the step graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Edge {
    /// Source step.
    pub from: StepId,
    /// Target step.
    pub to: StepId,
    /// Kind.
    pub kind: EdgeKind,
}

/// A carry variable.
#[derive(Debug, Clone)]
pub struct CarryIr {
    /// Name.
    pub name: String,
    /// Initial value.
    pub initial: RefIr,
    /// Gate → value written when that gate revises.
    pub on_revise: Vec<(StepId, RefIr)>,
}
