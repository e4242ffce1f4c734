//! The syntax tree of a v1 spec: the shape of the schema, every name and
//! value with its span, nothing resolved.
//!
//! Owns: plain data types produced by the structural decoder.
//! Must never: contain resolution results (indices, types) — those live in
//! the checked IR.

use crate::source::Span;
use crate::yaml::{Node, Str};

/// A name (key or scalar value) with its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The text.
    pub text: String,
    /// Where.
    pub span: Span,
}

/// A positive integer with its span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int {
    /// The value (≥ 1).
    pub value: u64,
    /// Where.
    pub span: Span,
}

/// A whole spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spec {
    /// Declared contracts, in document order.
    pub contracts: Vec<Contract>,
    /// `flows.entry`, when it is a string.
    pub entry: Option<Name>,
    /// Flows in document order.
    pub flows: Vec<Flow>,
    /// The span of the root mapping.
    pub span: Span,
    /// `contracts` is missing or not a mapping (already reported): unknown
    /// contract names are then not reported again.
    pub contracts_broken: bool,
}

/// A field declaration `name: type` of a contract or flow input.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Field name.
    pub name: Name,
    /// The type string; `None` when it was not a string (already reported).
    pub ty: Option<Str>,
}

/// A named contract.
#[derive(Debug, Clone, PartialEq)]
pub struct Contract {
    /// The contract name.
    pub name: Name,
    /// Its fields.
    pub fields: Vec<Field>,
    /// False when the body was broken (already reported); uses are then not checked.
    pub ok: bool,
}

/// A budget block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// `usd`.
    pub usd: Option<f64>,
    /// `tokens`.
    pub tokens: Option<u64>,
    /// `dispatches`.
    pub dispatches: Option<u64>,
    /// `ms`.
    pub ms: Option<u64>,
    /// The budget mapping.
    pub span: Span,
}

/// `scope: {files, create?, max_changed_bytes?}` (X11): the paths a
/// dispatch may change (`files`), the ones it may create (`create`), and a
/// cap on the bytes it may change. `files: []` is a write fence.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    /// The `scope` key (where its diagnostics point when no entry does).
    pub span: Span,
    /// `files`: templates and globs of paths the dispatch may change or delete.
    pub files: Vec<Str>,
    /// `create`: templates and globs of paths the dispatch may create.
    pub create: Vec<Str>,
    /// `max_changed_bytes`: added plus removed bytes allowed.
    pub max_changed_bytes: Option<Int>,
}

/// `cost: {tokens?, usd?, ms?, p?, judge_tokens?}` on a `do` step or a
/// fanout stage (language 1.1, EXTENSIONS.md X6): figures that replace the
/// agent profile's (and the judge's tokens) for this step in `stratumc cost`
/// and the budget warnings. The VM ignores them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CostHint {
    /// Tokens per dispatch.
    pub tokens: Option<f64>,
    /// Dollars per dispatch.
    pub usd: Option<f64>,
    /// Milliseconds per dispatch.
    pub ms: Option<f64>,
    /// Probability that one attempt passes (0..=1).
    pub p: Option<f64>,
    /// Tokens per judge call of the step's `judged` ensures.
    pub judge_tokens: Option<f64>,
    /// The `cost` mapping.
    pub span: Span,
}

/// `output: {from, contract}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The `from` template.
    pub from: Option<Str>,
    /// The contract name.
    pub contract: Option<Name>,
    /// The `output` key.
    pub key_span: Span,
}

/// A flow.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// Its name (the key under `flows`).
    pub name: Name,
    /// Input fields; `None` when missing or broken.
    pub input: Option<Vec<Field>>,
    /// The flow output.
    pub output: Option<Output>,
    /// Steps in document order.
    pub steps: Vec<Step>,
    /// Flow budget.
    pub budget: Option<Budget>,
    /// `max_rounds`.
    pub max_rounds: Option<Int>,
    /// `carry` block.
    pub carry: Option<Carry>,
    /// `dispatch_timeout_ms`: the lease of every dispatch of the flow whose
    /// step or stage gives none (X7).
    pub dispatch_timeout_ms: Option<Int>,
    /// `steps` is missing or not a list (already reported).
    pub steps_broken: bool,
}

impl Flow {
    /// A flow with a name and nothing else yet.
    pub fn named(name: Name) -> Flow {
        Flow {
            name,
            input: None,
            output: None,
            steps: Vec::new(),
            budget: None,
            max_rounds: None,
            carry: None,
            dispatch_timeout_ms: None,
            steps_broken: false,
        }
    }
}

/// A carry block.
#[derive(Debug, Clone, PartialEq)]
pub struct Carry {
    /// The `carry` key.
    pub key_span: Span,
    /// Variables in declaration order.
    pub vars: Vec<CarryVar>,
}

/// One carry variable.
#[derive(Debug, Clone, PartialEq)]
pub struct CarryVar {
    /// Its name.
    pub name: Name,
    /// `initial` reference.
    pub initial: Option<Str>,
    /// `on_revise` gate → reference.
    pub on_revise: Vec<(Name, Str)>,
}

/// The agent of a `do` step or stage (`claude` by default), and judge
/// stakes: the plan's own enums, so that every name of the language comes
/// from one table (`stratum_vm::plan`).
pub use stratum_vm::plan::{Agent, Stakes};

/// One ensure predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum PredicateKind {
    /// `expr: ...`.
    Expr(Str),
    /// `file_exists: path`.
    FileExists(Str),
    /// `file_contains: {path, text}`.
    FileContains {
        /// The path.
        path: Str,
        /// The text.
        text: Str,
    },
    /// `judged: {statement, stakes}`.
    Judged {
        /// The statement.
        statement: Str,
        /// The stakes.
        stakes: Stakes,
    },
    /// `judged: {rubric, threshold, judge?, inputs?}` (language 1.1 X5).
    Scored(Scored),
    /// `exec: {run, args?, expect_exit?, timeout_ms?}` (language 1.1 X12).
    Exec(Exec),
}

/// An `exec` check (X12): runs the declared command `run` with `args`;
/// holds iff its exit status is `expect_exit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Exec {
    /// `[commands.NAME]` of stratum.toml.
    pub run: Str,
    /// Argument templates: each renders to one argument (a list: one per element).
    pub args: Vec<Str>,
    /// The exit status that passes (0..=255, default 0).
    pub expect_exit: i32,
    /// The spec's bound in ms (the smaller of it and the config's applies).
    pub timeout_ms: Option<Int>,
    /// The `exec` key (for `check --portable`).
    pub key: Span,
}

/// The scored form of `judged` (X5): the judge scores the result against
/// the rubric; the predicate holds iff `score >= threshold`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The rubric: a template.
    pub rubric: Str,
    /// The pass mark in [0, 1].
    pub threshold: f64,
    /// `judge: NAME` (`[judges.NAME]` in stratum.toml); `None`: the default judge.
    pub judge: Option<Str>,
    /// `inputs`: file path templates the host reads and sends with the rubric.
    pub inputs: Vec<Str>,
    /// The `judged` key (for `check --portable`).
    pub key: Span,
}

/// An ensure entry with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicate {
    /// What it checks; `None` when broken (already reported).
    pub kind: Option<PredicateKind>,
    /// The list item.
    pub span: Span,
}

/// `iterate: {max, until}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Iterate {
    /// `max`.
    pub max: Option<Int>,
    /// `until` expression.
    pub until: Option<Str>,
}

/// A gate route value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Absent or broken (already reported).
    Missing,
    /// `null`.
    Null(Span),
    /// A step id.
    Step(Name),
}

impl Route {
    /// The step named, if any.
    pub fn step(&self) -> Option<&Name> {
        match self {
            Route::Step(n) => Some(n),
            _ => None,
        }
    }
}

/// `gate: {...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// `on_approve`.
    pub on_approve: Route,
    /// `on_revise`.
    pub on_revise: Route,
    /// `on_kill`.
    pub on_kill: Route,
    /// Per-gate revision cap.
    pub max_rounds: Option<Int>,
    /// `prompt`: a template shown to the person deciding (X4).
    pub prompt: Option<Str>,
    /// `show`: template paths of files shown with their sha256 (X4).
    pub show: Vec<Str>,
    /// `options`: the choices a decision may carry (X10).
    pub options: Option<GateOptions>,
}

/// A gate's `options` (X10).
#[derive(Debug, Clone, PartialEq)]
pub enum GateOptions {
    /// A literal list of strings.
    List(Vec<Str>),
    /// A template rendering to a list of strings when the gate starts waiting.
    Template(Str),
}

/// Fanout isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// `none`.
    None,
    /// `worktree`.
    Worktree,
}

/// How many fanout items must succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Require {
    /// `all`.
    All,
    /// `any`.
    Any,
    /// At least N.
    AtLeast(u64),
}

/// Who runs fanout items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// `engine` (default).
    #[default]
    Engine,
    /// `consumer`.
    Consumer,
}

/// A fanout stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// The list item.
    pub span: Span,
    /// `do` template.
    pub task: Option<Str>,
    /// `agent`.
    pub agent: Option<Agent>,
    /// `out` contract name.
    pub out: Option<Name>,
    /// Predicates.
    pub ensure: Vec<Predicate>,
    /// `attempts`.
    pub attempts: Option<Int>,
    /// `when` expression.
    pub when: Option<Str>,
    /// `cost` hints (X6).
    pub cost: Option<CostHint>,
    /// `timeout_ms`: the dispatch lease of this stage's dispatches (X7).
    pub timeout_ms: Option<Int>,
    /// `artifacts`: template paths and globs the stage must leave (X4).
    pub artifacts: Vec<Str>,
    /// `scope`: what the stage's dispatch may change (X11).
    pub scope: Option<Scope>,
    /// `on_fail` (X9): what an item does when its attempts at this stage
    /// run out (empty: the item fails).
    pub on_fail: Vec<OnFailEntry>,
}

/// `fanout: {...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fanout {
    /// `over` template.
    pub over: Option<Str>,
    /// Stages.
    pub stages: Vec<Stage>,
    /// `concurrency`.
    pub concurrency: Option<Int>,
    /// `isolation` and its value span.
    pub isolation: Option<(Isolation, Span)>,
    /// `require`.
    pub require: Option<Require>,
    /// `pre_merge` commands.
    pub pre_merge: Vec<Str>,
    /// `dispatch`.
    pub dispatch: Dispatch,
}

/// One `with` entry: key and raw YAML value (string leaves are templates).
#[derive(Debug, Clone, PartialEq)]
pub struct WithEntry {
    /// The callee input name.
    pub key: Name,
    /// The value.
    pub value: Node,
}

/// The construct of a step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// `do: task`.
    Do(Str),
    /// `set: {key: expr}`.
    Set(Vec<(Name, Option<Str>)>),
    /// `gate: {...}`.
    Gate(Gate),
    /// `fanout: {...}`.
    Fanout(Fanout),
    /// `run: flow` with `with`.
    Run {
        /// The callee.
        flow: Name,
        /// `with` entries; `None` when missing.
        with: Option<Vec<WithEntry>>,
        /// The `with` key.
        with_span: Option<Span>,
    },
    /// `evaluate: {command, timeout_ms, in?}` (v1 §4.9, language 1.1 X12).
    Evaluate(Evaluate),
    /// No usable construct (already reported); the step still has an id.
    Broken,
}

/// An `evaluate` step (X12): runs the declared command `command` with `in`
/// on its stdin and takes its stdout as the result object of v1 §4.9.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluate {
    /// `[commands.NAME]` of stratum.toml.
    pub command: Str,
    /// The spec's bound in ms (the smaller of it and the config's applies).
    pub timeout_ms: Int,
    /// The stdin template (`in`); `None`: empty stdin.
    pub input: Option<Str>,
    /// The `evaluate` key.
    pub key: Span,
}

impl StepKind {
    /// The construct keyword.
    pub fn keyword(&self) -> &'static str {
        match self {
            StepKind::Do(_) => "do",
            StepKind::Set(_) => "set",
            StepKind::Gate(_) => "gate",
            StepKind::Fanout(_) => "fanout",
            StepKind::Run { .. } => "run",
            StepKind::Evaluate(_) => "evaluate",
            StepKind::Broken => "?",
        }
    }
}

/// A step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The list item.
    pub span: Span,
    /// `id`.
    pub id: Option<Name>,
    /// The construct key.
    pub construct_span: Span,
    /// The construct.
    pub kind: StepKind,
    /// `after`.
    pub after: Vec<Name>,
    /// `when`.
    pub when: Option<Str>,
    /// `agent`.
    pub agent: Option<Agent>,
    /// `out`.
    pub out: Option<Name>,
    /// `ensure`.
    pub ensure: Vec<Predicate>,
    /// `attempts`.
    pub attempts: Option<Int>,
    /// `iterate`.
    pub iterate: Option<Iterate>,
    /// `budget`.
    pub budget: Option<Budget>,
    /// `cost` hints (X6).
    pub cost: Option<CostHint>,
    /// `timeout_ms`: the dispatch lease of a `do` step (X7).
    pub timeout_ms: Option<Int>,
    /// `artifacts`: template paths and globs a `do` step must leave (X4).
    pub artifacts: Vec<Str>,
    /// `scope`: what a `do` step's dispatch may change (X11).
    pub scope: Option<Scope>,
    /// `on_fail`: v1's `STEP`, X2's `continue`, X9's `{goto, max, note?}`,
    /// or a list of such entries (X9), in order; empty when absent.
    pub on_fail: Vec<OnFailEntry>,
    /// `on_fail` was written as a list (X9).
    pub on_fail_list: bool,
    /// `route` entries (X9), in order.
    pub routes: Vec<RouteEntry>,
    /// `out` was given but is not a string (already reported).
    pub out_broken: bool,
}

/// One `route` entry (X9): `{when, goto, max, note?}` or `{when, fail}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteEntry {
    /// The entry in the file.
    pub span: Span,
    /// `when`.
    pub when: Str,
    /// What it does.
    pub action: RouteEntryAction,
    /// `rollback: STEP` (X11): restore the workspace first.
    pub rollback: Option<Name>,
}

/// What a `route` entry does (X9).
#[derive(Debug, Clone, PartialEq)]
pub enum RouteEntryAction {
    /// `goto: STEP, max: N, note?: template`.
    Goto {
        /// The target.
        target: Name,
        /// `max`.
        max: Int,
        /// `note`.
        note: Option<Str>,
    },
    /// `fail: template`.
    Fail(Str),
}

/// One `on_fail` entry: the whole scalar or object value, or one element
/// of a list (X9).
#[derive(Debug, Clone, PartialEq)]
pub struct OnFailEntry {
    /// The entry in the file.
    pub span: Span,
    /// `when` over `failure` (X9; only in `{…}` entries of a list).
    pub when: Option<Str>,
    /// What it does.
    pub action: OnFailAction,
    /// `rollback: STEP` (X11): restore the workspace first.
    pub rollback: Option<Name>,
}

/// What an `on_fail` entry does.
#[derive(Debug, Clone, PartialEq)]
pub enum OnFailAction {
    /// `STEP` (v1: route the failure to a recovery step) or `continue` (X2;
    /// a name, since v1 let a step be called so).
    Step(Name),
    /// `{goto: STEP, max: N, note?}` (X9): back to a strict ancestor.
    Goto {
        /// The target.
        target: Name,
        /// `max`.
        max: Int,
        /// `note`.
        note: Option<Str>,
    },
    /// `{when?, rollback: STEP}` without `goto` (X9/X11): restore the tree
    /// to STEP's snapshot, then the step fails for good.
    Fail,
}

impl Step {
    /// The step names of `on_fail` (`STEP` and `continue` entries), in order.
    pub fn on_fail_names(&self) -> impl Iterator<Item = &Name> {
        self.on_fail.iter().filter_map(|e| match &e.action {
            OnFailAction::Step(n) => Some(n),
            OnFailAction::Goto { .. } | OnFailAction::Fail => None,
        })
    }

    /// The one plain `on_fail: STEP` (or `continue`): a single entry
    /// without `when` (the v1 and X2 forms, also written as a list of one).
    pub fn plain_on_fail(&self) -> Option<&Name> {
        match self.on_fail.as_slice() {
            [
                OnFailEntry {
                    when: None,
                    action: OnFailAction::Step(n),
                    ..
                },
            ] => Some(n),
            _ => None,
        }
    }
}
