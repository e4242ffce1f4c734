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
use crate::syntax::ast::{Agent, Budget, CostHint, Dispatch, Isolation, Require, Stakes};
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
    /// `dispatch_timeout_ms` (X7): the lease of dispatches whose step or
    /// stage has no `timeout_ms` (folded into each one at lowering).
    pub dispatch_timeout_ms: Option<u64>,
    /// Carry variables (entry flow only).
    pub carry: Vec<CarryIr>,
    /// The region each back edge resets (every gate with an `on_revise`
    /// target, then every route `goto` of X9, in document order), computed
    /// once by the checker.
    pub resets: Vec<ResetIr>,
}

impl FlowIr {
    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<StepId> {
        self.steps.iter().position(|s| s.id == id)
    }

    /// What a revise of gate `gate` resets, when the gate has an `on_revise` target.
    pub fn reset_of(&self, gate: StepId) -> Option<&ResetIr> {
        self.resets.iter().find(|r| r.from == gate)
    }

    /// What a route of step `from` going back to `target` resets (X9).
    pub fn route_reset(&self, from: StepId, target: StepId) -> Option<&ResetIr> {
        self.resets
            .iter()
            .find(|r| r.from == from && r.target == target)
    }

    /// A reference written back as the text inside its `${…}`:
    /// `input.items`, `plan.output.files[0]`, `pending`. The one printer of
    /// references (cost notes, graph labels).
    pub fn reference_text(&self, target: &RefTarget, path: &[Segment]) -> String {
        let mut text = match *target {
            RefTarget::Input => "input".to_string(),
            RefTarget::Step(s) => format!("{}.output", self.steps[s].id),
            RefTarget::Item => "item".to_string(),
            RefTarget::Prev => "prev".to_string(),
            RefTarget::Carry(c) => self.carry[c].name.clone(),
            RefTarget::State(s, f) => format!("{}.{}", self.steps[s].id, f.name()),
        };
        for seg in path {
            match seg {
                Segment::Field(f) => {
                    text.push('.');
                    text.push_str(f);
                }
                Segment::Index(i) => {
                    text.push('[');
                    text.push_str(&i.to_string());
                    text.push(']');
                }
            }
        }
        text
    }
}

/// The steps a back edge resets: a gate's `on_revise`, or a route's
/// `goto` (X9). The target and every step reachable from it through any
/// forward edge (dependency or route) run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetIr {
    /// The step that goes back (the gate).
    pub from: StepId,
    /// The step it goes back to.
    pub target: StepId,
    /// Membership by step index (document order), `steps[target]` set.
    pub steps: Vec<bool>,
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
    /// `${step.status}`, `${step.failure...}`, `${step.note}` (X1): a
    /// finished step's state; reading it orders the reader after the step
    /// but never skips it.
    State(StepId, StateField),
}

/// A gate's checked `options` (X10).
#[derive(Debug, Clone)]
pub enum GateOptionsIr {
    /// The literal options.
    List(Vec<String>),
    /// A full-value template rendering to a list of strings.
    Template(TemplateIr),
}

/// Which part of a step's state a template reads (X1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateField {
    /// `succeeded`, `failed` or `skipped`.
    Status,
    /// `{reason, violations}` or `null`.
    Failure,
    /// A gate's note of its latest decision, or `null`.
    Note,
    /// A gate's choice of its latest decision (X10), or `null`.
    Choice,
}

impl StateField {
    /// The member name.
    pub fn name(self) -> &'static str {
        match self {
            StateField::Status => "status",
            StateField::Failure => "failure",
            StateField::Note => "note",
            StateField::Choice => "choice",
        }
    }
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
    /// `file_exists`: the path is a template of the step (language 1.1 X3).
    FileExists(TemplateIr),
    /// `file_contains`: the path is a template (X3), the text is literal.
    FileContains {
        /// Path template.
        path: TemplateIr,
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
    /// The scored form of `judged` (X5).
    Scored {
        /// The rubric template.
        rubric: TemplateIr,
        /// The pass mark in [0, 1].
        threshold: f64,
        /// `[judges.NAME]`; `None`: the default judge.
        judge: Option<String>,
        /// Input path templates.
        inputs: Vec<TemplateIr>,
    },
    /// `exec` (X12): a declared command; holds iff its exit is `expect_exit`.
    Exec {
        /// `[commands.NAME]`.
        run: String,
        /// Argument templates (a full reference to a list: one argument per element).
        args: Vec<TemplateIr>,
        /// The exit status that passes.
        expect_exit: i32,
        /// The spec's bound in ms.
        timeout_ms: Option<u64>,
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
    /// `cost` hints for `stratumc cost` (X6; the VM ignores them).
    pub cost: Option<CostHint>,
    /// The stage's own `timeout_ms` (X7).
    pub timeout_ms: Option<u64>,
    /// `artifacts` (X4), resolved in the item's worktree when it has one.
    pub artifacts: Vec<ArtifactIr>,
    /// `scope` (X11), resolved in the item's worktree when it has one.
    pub scope: Option<ScopeIr>,
    /// `on_fail` (X9): `Continue` and `Goto` entries only (S0345).
    pub on_fail: Vec<OnFailIr>,
}

/// A checked `scope` (X11): what a dispatch may change.
#[derive(Debug, Clone)]
pub struct ScopeIr {
    /// Paths and globs it may change or delete (empty: a write fence).
    pub files: Vec<ArtifactIr>,
    /// Paths and globs it may create.
    pub create: Vec<ArtifactIr>,
    /// Added plus removed bytes allowed.
    pub max_changed_bytes: Option<u64>,
}

/// One checked `artifacts` entry (X4).
#[derive(Debug, Clone)]
pub struct ArtifactIr {
    /// The path template; a full reference may render to a list of paths.
    pub template: TemplateIr,
    /// Its literal text has glob metacharacters (`*`, `?`, `[`): the
    /// rendered text is a pattern that must match at least one file.
    pub glob: bool,
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
        /// `prompt` (X4).
        prompt: Option<TemplateIr>,
        /// `show` path templates (X4).
        show: Vec<TemplateIr>,
        /// `options` (X10).
        options: Option<GateOptionsIr>,
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
        /// `iterate` (X9): the called flow runs again until `until` over
        /// its output holds.
        iterate: Option<IterateIr>,
    },
    /// `evaluate` (v1 §4.9, X12): a declared command whose stdout is the
    /// step's result object.
    Evaluate {
        /// `[commands.NAME]`.
        command: String,
        /// The spec's bound in ms.
        timeout_ms: u64,
        /// The stdin template (`in`).
        input: Option<TemplateIr>,
    },
}

/// One checked `route` entry (X9).
#[derive(Debug, Clone)]
pub struct RouteIr {
    /// The entry in the file.
    pub span: Span,
    /// The condition (`result` is the step's output).
    pub when: ExprIr,
    /// What it does.
    pub action: RouteActionIr,
    /// `rollback: STEP` (X11): a scoped `do` step, the routing step or an ancestor.
    pub rollback: Option<StepId>,
}

/// What a checked route does (X9).
#[derive(Debug, Clone)]
pub enum RouteActionIr {
    /// Back to a strict ancestor, at most `max` times in the run.
    Goto {
        /// The target.
        target: StepId,
        /// `max`.
        max: u64,
        /// `note`.
        note: Option<TemplateIr>,
    },
    /// The step fails with the rendered reason.
    Fail(TemplateIr),
}

/// One checked `on_fail` entry of X9's forms.
#[derive(Debug, Clone)]
pub struct OnFailIr {
    /// The entry in the file.
    pub span: Span,
    /// The condition over `failure` (`None`: every failure).
    pub when: Option<ExprIr>,
    /// What it does.
    pub action: OnFailActionIr,
    /// `rollback: STEP` (X11): a scoped `do` step, the failing step or an ancestor.
    pub rollback: Option<StepId>,
}

/// What a checked `on_fail` entry does.
#[derive(Debug, Clone)]
pub enum OnFailActionIr {
    /// Route the failure to a recovery step (v1).
    Step(StepId),
    /// The flow goes on (X2).
    Continue,
    /// Back to a strict ancestor, at most `max` times in the run.
    Goto {
        /// The target.
        target: StepId,
        /// `max`.
        max: u64,
        /// `note`.
        note: Option<TemplateIr>,
    },
    /// `{rollback}` alone: restore the tree (the entry's `rollback`), then
    /// the step fails for good.
    Fail,
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
    /// `cost` hints for `stratumc cost` (X6; the VM ignores them).
    pub cost: Option<CostHint>,
    /// The step's own `timeout_ms` (X7; `do` steps only).
    pub timeout_ms: Option<u64>,
    /// `artifacts` (X4; `do` steps only).
    pub artifacts: Vec<ArtifactIr>,
    /// `scope` (X11; `do` steps only).
    pub scope: Option<ScopeIr>,
    /// Failure route (the plain `on_fail: STEP`).
    pub on_fail: Option<StepId>,
    /// `on_fail` entries of X9 (a `goto`, a `when`, or several entries), in
    /// order; empty for the plain forms (`on_fail` and `continues`).
    pub on_fail_routes: Vec<OnFailIr>,
    /// `route` entries (X9), in order.
    pub routes: Vec<RouteIr>,
    /// `on_fail: continue` (X2): when attempts run out the step ends
    /// `failed`, the failure is handled and its dependents still run.
    pub continues: bool,
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
    /// A `${step.status}`, `${step.failure}` or `${step.note}` reference
    /// (X1): orders like `after`, never skips the reader.
    State,
}

impl EdgeKind {
    /// Dependency edges (order and data) gate readiness; the others are routes.
    pub fn is_dependency(self) -> bool {
        matches!(self, EdgeKind::Order | EdgeKind::Data | EdgeKind::State)
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

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"version: 1
contracts:
  Tasks: {tasks: "string[]"}
  Done: {summary: string}
flows:
  entry: main
  main:
    input: {goal: string}
    output: {from: "${execute.output}", contract: Done}
    max_rounds: 3
    carry:
      wave:
        initial: "${plan.output.tasks}"
        on_revise:
          assess_gate: "${assess.output.tasks}"
    steps:
      - id: plan
        do: "Plan ${input.goal}"
        out: Tasks
      - id: execute
        after: [plan]
        do: "Execute the wave ${wave}"
        out: Done
      - id: assess
        do: "Assess ${execute.output.summary}; list what is left"
        out: Tasks
      - id: assess_gate
        after: [assess]
        gate: {on_approve: null, on_revise: execute, on_kill: null}
"#;

    fn task_refs(f: &FlowIr) -> Vec<String> {
        let mut out = Vec::new();
        for s in &f.steps {
            if let StepKindIr::Do { task, .. } = &s.kind {
                for p in &task.pieces {
                    if let Piece::Ref(r) = p {
                        out.push(f.reference_text(&r.target, &r.path));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_checker_records_each_revise_region_once() {
        let ir = crate::analysis::analyze(SPEC)
            .ir
            .expect("the spec is valid");
        let f = &ir.flows[ir.entry];
        assert_eq!(
            f.resets,
            vec![ResetIr {
                from: 3,
                target: 1,
                steps: vec![false, true, true, true],
            }]
        );
        assert_eq!(f.reset_of(3), f.resets.first());
        assert_eq!(f.reset_of(1), None);
    }

    #[test]
    fn references_print_as_written() {
        let ir = crate::analysis::analyze(SPEC)
            .ir
            .expect("the spec is valid");
        let f = &ir.flows[ir.entry];
        assert_eq!(
            task_refs(f),
            vec!["input.goal", "wave", "execute.output.summary"]
        );
        let path = [
            Segment::Field("items".into()),
            Segment::Index(0),
            Segment::Field("name".into()),
        ];
        assert_eq!(
            f.reference_text(&RefTarget::Input, &path),
            "input.items[0].name"
        );
        assert_eq!(
            f.reference_text(&RefTarget::Prev, &path[1..]),
            "prev[0].name"
        );
        assert_eq!(f.reference_text(&RefTarget::Item, &[]), "item");
    }
}
