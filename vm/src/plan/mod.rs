//! The plan: the compiled, immutable form of one spec that the VM executes.
//!
//! Owns: the plan data types (this file), the instruction set ([`op`]), the
//! file format with its hash ([`file`]), verification on load ([`verify`])
//! and the listing ([`disasm`]).
//! Must never: hold recursive data types (a hostile file could nest them
//! deeply enough to overflow the decoder's stack): lists of lists are a
//! `list_depth`, `with` trees are index-linked nodes.
//!
//! All indices are `u32` into the tables of the plan or of its flow; the
//! verifier checks every one before anything else reads them.

pub mod disasm;
pub mod file;
pub mod hash;
pub mod op;
mod v1;
mod v2;
mod v3;
mod v4;
pub mod verify;

use serde::{Deserialize, Serialize};

/// A name of the language that is not one of an enum's names (`FromStr` of
/// [`Agent`] and [`Stakes`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{given}`; expected one of {}", quoted(.expected))]
pub struct UnknownName {
    /// What was named (`agent`, `stakes`).
    pub what: &'static str,
    /// The name given.
    pub given: String,
    /// Every name of the enum, in declaration order.
    pub expected: &'static [&'static str],
}

/// `a`, `b` as `` `a`, `b` ``.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one spelling of each variant of a named enum of the language: gives
/// it `ALL`, `NAMES` and `NAMED` (in declaration order), `as_str`,
/// `from_name`, `FromStr` and `Display`. The names are written once, here.
macro_rules! names {
    ($ty:ident, $what:literal: $($variant:ident => $name:literal),+ $(,)?) => {
        impl $ty {
            /// What a name of this enum names (`agent`, `stakes`).
            pub const WHAT: &'static str = $what;
            /// Every variant, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
            /// Every name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];
            /// (name, variant) pairs, in declaration order.
            pub const NAMED: &'static [(&'static str, $ty)] = &[$(($name, $ty::$variant)),+];

            /// The spelling in specs and in `stratum.toml`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            /// The variant spelled `name`, if any.
            pub fn from_name(name: &str) -> Option<$ty> {
                Self::NAMED.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
            }
        }

        impl std::str::FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, UnknownName> {
                $ty::from_name(s).ok_or_else(|| UnknownName {
                    what: $ty::WHAT,
                    given: s.to_owned(),
                    expected: $ty::NAMES,
                })
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// Index into [`Plan::strings`].
pub type StrId = u32;

/// A compiled spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Interned strings (ids, names, task text, field names).
    pub strings: Vec<String>,
    /// Contracts and flow inputs.
    pub records: Vec<RecordDef>,
    /// Flows in document order.
    pub flows: Vec<FlowDef>,
    /// The entry flow.
    pub entry: u32,
}

impl Plan {
    /// The string with this id ("?" when out of range; verified plans never are).
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id as usize).map_or("?", String::as_str)
    }

    /// Whether a transition of a run of this plan may run a declared
    /// command or ask a judge — an `exec`, `judged` or scored ensure, an
    /// `evaluate` step, a fanout's `pre_merge` — and so take long (the
    /// checks an MCP server runs off its request path, X12 `checking`).
    pub fn may_run_checks(&self) -> bool {
        let slow = |p: &PredDef| {
            matches!(
                p,
                PredDef::Exec { .. } | PredDef::Judged(..) | PredDef::Scored { .. }
            )
        };
        self.flows.iter().flat_map(|f| &f.steps).any(|st| {
            st.ensure.iter().any(slow)
                || match &st.kind {
                    StepKindDef::Evaluate { .. } => true,
                    StepKindDef::Fanout {
                        stages, pre_merge, ..
                    } => !pre_merge.is_empty() || stages.iter().flat_map(|s| &s.ensure).any(slow),
                    _ => false,
                }
        })
    }
}

/// A record type: the fields of a contract or of a flow's input (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordDef {
    /// Contract name or `input of <flow>`.
    pub name: StrId,
    /// Fields in declaration order.
    pub fields: Vec<FieldDef>,
}

/// One field of a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldDef {
    /// Field name.
    pub name: StrId,
    /// Its type.
    pub ty: TypeDef,
    /// `T?`.
    pub optional: bool,
}

/// A contract type: `list_depth` list levels around a base type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeDef {
    /// The innermost type.
    pub base: BaseType,
    /// `T[]` levels (`string[][]` is 2).
    pub list_depth: u8,
}

/// A non-list type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BaseType {
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// Enum of literal strings.
    Enum(Vec<StrId>),
    /// A record.
    Record(u32),
}

/// A path segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seg {
    /// `.name`.
    Field(StrId),
    /// `[n]`.
    Index(u32),
}

/// A budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetDef {
    /// `usd`.
    pub usd: Option<f64>,
    /// `tokens`.
    pub tokens: Option<u64>,
    /// `dispatches`.
    pub dispatches: Option<u64>,
    /// `ms`.
    pub ms: Option<u64>,
}

/// A position in the spec (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Pos {
    /// Line.
    pub line: u32,
    /// Column (Unicode scalar values).
    pub col: u32,
}

/// A compiled flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowDef {
    /// Name.
    pub name: StrId,
    /// Input record.
    pub input: u32,
    /// Output.
    pub output: OutputDef,
    /// Steps in topological order (every edge goes from a lower to a higher index).
    pub steps: Vec<StepDef>,
    /// Edges of the step graph.
    pub edges: Vec<EdgeDef>,
    /// Flow budget.
    pub budget: Option<BudgetDef>,
    /// Flow-wide revision cap.
    pub max_rounds: Option<u32>,
    /// Carry variables.
    pub carry: Vec<CarryDef>,
    /// Compiled expressions.
    pub chunks: Vec<Chunk>,
    /// Compiled templates.
    pub templates: Vec<TemplateDef>,
    /// `with` value nodes (children always have lower indices).
    pub with_nodes: Vec<WithNode>,
    /// Reset closures of revising gates and of route `goto`s (X9).
    pub closures: Vec<ClosureDef>,
    /// Worst-case dispatches of one run of this flow.
    pub worst_dispatches: Bound,
}

/// `output: {from, contract}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputDef {
    /// Producing step.
    pub step: u32,
    /// Path into its output.
    pub path: Vec<Seg>,
    /// Output contract.
    pub contract: u32,
    /// Where `from` is written.
    pub pos: Pos,
}

/// Edge kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EdgeKind {
    /// `after`.
    Order,
    /// A data reference.
    Data,
    /// `on_fail`.
    OnFail,
    /// `on_approve`.
    Approve,
    /// `on_kill`.
    Kill,
    /// A read of a step's state (X1: `${step.status}`, …): orders like
    /// `Order` (a skipped or failed source never skips the reader).
    State,
}

/// An edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeDef {
    /// Source step.
    pub from: u32,
    /// Target step.
    pub to: u32,
    /// Kind.
    pub kind: EdgeKind,
}

/// A cost bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bound {
    /// A number known at build time.
    Finite(u64),
    /// Known only once inputs are given: the bound as text, e.g. `2 + 3 × len(input.items)`.
    Symbolic(StrId),
}

/// Agent of a dispatch (the default of a `do` step is `claude`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum Agent {
    /// `claude`.
    #[default]
    Claude,
    /// `codex`.
    Codex,
}

names! { Agent, "agent": Claude => "claude", Codex => "codex" }

/// A step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDef {
    /// Id.
    pub id: StrId,
    /// Where the step starts in the spec.
    pub pos: Pos,
    /// The construct.
    pub kind: StepKindDef,
    /// `when` chunk.
    pub when: Option<u32>,
    /// Predicates.
    pub ensure: Vec<PredDef>,
    /// Output contract.
    pub out: Option<u32>,
    /// Step budget.
    pub budget: Option<BudgetDef>,
    /// `on_fail` target.
    pub on_fail: Option<u32>,
    /// `on_fail: continue` (X2): when attempts run out the step ends
    /// `failed`, the failure is handled and its dependents run (its output
    /// reads as `null`). False in plans of format 2 and older.
    pub on_fail_continue: bool,
    /// The dispatch lease of a `do` step in milliseconds (X7: its own
    /// `timeout_ms`, else the flow's `dispatch_timeout_ms`); `None` for other
    /// constructs and for steps without one.
    pub timeout_ms: Option<u64>,
    /// `artifacts` of a `do` step (X4; empty for other constructs).
    pub artifacts: Vec<ArtifactDef>,
    /// `scope` of a `do` step (X11; `None` for other constructs).
    pub scope: Option<ScopeDef>,
    /// `route` entries (X9), tried in order after the step succeeded;
    /// empty in plans of format 3 and older.
    pub routes: Vec<RouteDef>,
    /// X9 `on_fail` entries (a `goto`, a `when`, several entries), tried in
    /// order once the step failed for good; empty for the plain forms
    /// (`on_fail`, `on_fail_continue`) and in plans of format 3 and older.
    pub on_fail_routes: Vec<OnFailDef>,
    /// Most times the step can be entered in one run of its flow.
    pub entries: u32,
    /// Worst-case dispatches of this step over the whole run of its flow.
    pub worst_dispatches: Bound,
}

/// The construct of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StepKindDef {
    /// Agent task.
    Do {
        /// Task template.
        task: u32,
        /// Agent.
        agent: Agent,
        /// Total attempts.
        attempts: u32,
        /// `iterate`: (max, until chunk).
        iterate: Option<(u32, u32)>,
    },
    /// Computed object: key → chunk.
    Set {
        /// Fields.
        fields: Vec<(StrId, u32)>,
    },
    /// Gate.
    Gate {
        /// `on_approve`.
        on_approve: Option<u32>,
        /// `on_revise`.
        on_revise: Option<u32>,
        /// `on_kill`.
        on_kill: Option<u32>,
        /// Per-gate revision cap.
        max_rounds: Option<u32>,
        /// `prompt` template (X4), rendered when the gate starts waiting.
        prompt: Option<u32>,
        /// `show` path templates (X4): files hashed when the gate waits.
        show: Vec<u32>,
        /// `options` (X10): what a decision's `choice` may be.
        options: Option<GateOptionsDef>,
    },
    /// Fanout.
    Fanout {
        /// The `over` template (full value).
        over: u32,
        /// Stages.
        stages: Vec<StageDef>,
        /// Items in flight.
        concurrency: u32,
        /// Git worktree per item.
        worktree: bool,
        /// Success requirement.
        require: Require,
        /// Commands before merging.
        pre_merge: Vec<StrId>,
        /// The client runs the items.
        consumer: bool,
    },
    /// Sub-flow call.
    Run {
        /// Callee flow.
        flow: u32,
        /// Input name → `with` node.
        with: Vec<(StrId, u32)>,
        /// `iterate` (X9): (`max`, `until` chunk over the called flow's
        /// output); the flow runs again in a fresh frame until it holds.
        /// `None` in plans of format 3 and older.
        iterate: Option<(u32, u32)>,
    },
    /// `evaluate` (v1 §4.9, language 1.1 X12): the host runs the declared
    /// command with `input` rendered on its stdin; its stdout is the
    /// step's result object. Every failure is terminal.
    Evaluate {
        /// `[commands.NAME]` of the run's configuration.
        command: StrId,
        /// The spec's bound in ms (the smaller of it and the config's applies).
        timeout_ms: u64,
        /// The stdin template (full value: a string as is, else its JSON).
        input: Option<u32>,
    },
}

/// One `route` entry of a step (X9): its condition over the step's
/// output (`result`), `input` and `steps`, and what it does when true.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteDef {
    /// The `when` chunk (evaluated with `result` = the step's output).
    pub when: u32,
    /// What firing does.
    pub action: RouteAction,
    /// `rollback: STEP` (X11): the step whose latest entry's snapshot the
    /// workspace is restored to before the route fires.
    pub rollback: Option<u32>,
}

/// What a route does when its `when` is true (X9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RouteAction {
    /// Back to a strict ancestor: its reset closure (a [`ClosureDef`] whose
    /// `gate` is the routing step) runs again.
    Goto {
        /// The target step.
        target: u32,
        /// How often this route may fire in the whole run.
        max: u32,
        /// The `note` template.
        note: Option<u32>,
    },
    /// The step fails with the rendered reason.
    Fail {
        /// The `fail` template.
        reason: u32,
    },
}

/// One X9 `on_fail` entry: its condition over `failure` (a chunk of
/// context [`Context::Failure`]; `None`: every failure) and what it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnFailDef {
    /// The `when` chunk.
    pub when: Option<u32>,
    /// What taking the failure does.
    pub action: OnFailAction,
    /// `rollback: STEP` (X11), as on a route.
    pub rollback: Option<u32>,
}

/// What an `on_fail` entry does with the failure (X9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OnFailAction {
    /// Route it to a recovery step (v1's `on_fail: STEP`).
    Step(u32),
    /// The flow goes on (X2's `continue`).
    Continue,
    /// Back to a strict ancestor: its reset closure (a [`ClosureDef`] whose
    /// `gate` is the failing step) runs again, at most `max` times in the run.
    Goto {
        /// The target step.
        target: u32,
        /// How often this entry may take a failure in the whole run.
        max: u32,
        /// The `note` template.
        note: Option<u32>,
    },
    /// `{rollback: STEP}` alone (X9/X11): the tree is restored (the
    /// entry's `rollback`), then the step fails for good.
    Fail,
}

/// `require`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Require {
    /// Every item.
    All,
    /// At least one.
    Any,
    /// At least N.
    AtLeast(u32),
}

/// A fanout stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageDef {
    /// Task template.
    pub task: u32,
    /// Agent.
    pub agent: Agent,
    /// Output contract.
    pub out: Option<u32>,
    /// Predicates.
    pub ensure: Vec<PredDef>,
    /// Attempts.
    pub attempts: u32,
    /// Condition chunk.
    pub when: Option<u32>,
    /// The dispatch lease of this stage's dispatches in milliseconds (X7: the
    /// stage's `timeout_ms`, else the flow's `dispatch_timeout_ms`).
    pub timeout_ms: Option<u64>,
    /// `artifacts` of the stage (X4), resolved in the item's worktree.
    pub artifacts: Vec<ArtifactDef>,
    /// `scope` of the stage (X11), resolved in the item's worktree.
    pub scope: Option<ScopeDef>,
    /// `on_fail` of the stage (X9), tried in order once an item's attempts
    /// at this stage run out: `Continue` and `Goto` entries, each with an
    /// optional `when` over `failure` (never `Step` or `Fail`: the compiler
    /// refuses them on stages). Empty in plans of format 4 and older.
    pub on_fail: Vec<OnFailDef>,
}

/// A `scope` (X11): what one dispatch may change in its git working tree.
/// Its entries render like `artifacts` entries (a path, a list of paths
/// from a full reference, or a glob).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeDef {
    /// Paths and globs the dispatch may change or delete (empty: a write
    /// fence).
    pub files: Vec<ArtifactDef>,
    /// Paths and globs the dispatch may create.
    pub create: Vec<ArtifactDef>,
    /// Added plus removed bytes allowed, summed over the changed files.
    pub max_changed_bytes: Option<u64>,
}

/// One `artifacts` entry (X4): a template rendering to a path (or, for a
/// full reference, a list of paths), or a glob pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactDef {
    /// The template (its rendering mode says whether it is a full value).
    pub template: u32,
    /// The entry's literal text has glob metacharacters: the rendered text is
    /// a pattern that must match at least one regular file.
    pub glob: bool,
}

/// Judge stakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stakes {
    /// `cheap`.
    Cheap,
    /// `default`.
    Default,
    /// `paranoid`.
    Paranoid,
}

names! { Stakes, "stakes": Cheap => "cheap", Default => "default", Paranoid => "paranoid" }

/// An ensure predicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PredDef {
    /// A chunk that must yield `true`.
    Expr(u32),
    /// `file_exists` (literal path): plans of format 2 and older, and format
    /// 3 plans written before X3's templated paths; the compiler writes
    /// [`PredDef::FileExistsAt`].
    FileExists(StrId),
    /// `file_contains` (literal path, text), as [`PredDef::FileExists`];
    /// the compiler writes [`PredDef::FileContainsAt`].
    FileContains(StrId, StrId),
    /// `judged`.
    Judged(StrId, Stakes),
    /// `judged: {rubric, threshold, judge?, inputs?}` (language 1.1 X5): the
    /// judge scores the result against the rendered rubric (and the input
    /// files); holds iff `score >= threshold`.
    Scored {
        /// The rubric: a template of the flow.
        rubric: u32,
        /// The pass mark in [0, 1].
        threshold: f64,
        /// `[judges.NAME]` to ask; `None`: the default judge.
        judge: Option<StrId>,
        /// Input file paths: templates of the flow.
        inputs: Vec<u32>,
    },
    /// `file_exists` whose path is a template of the flow (language 1.1 X3):
    /// rendered in the step's context (an item's too), then checked like a
    /// literal path. The compiler lowers every `file_exists` to this form.
    FileExistsAt(u32),
    /// `file_contains` whose path is a template (X3); the text is literal.
    FileContainsAt(u32, StrId),
    /// `exec: {run, args?, expect_exit?, timeout_ms?}` (language 1.1 X12):
    /// the host runs the declared command `[commands.NAME]` with the
    /// rendered arguments (no shell; a list renders one argument per
    /// element); holds iff the exit status is `expect_exit`.
    Exec {
        /// `[commands.NAME]` of the run's configuration.
        run: StrId,
        /// Argument templates of the flow.
        args: Vec<u32>,
        /// The exit status that passes (0..=255).
        expect_exit: i32,
        /// The spec's bound in ms (the smaller of it and the config's applies).
        timeout_ms: Option<u64>,
    },
}

/// How a template renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TemplateMode {
    /// String interpolation.
    Interpolate,
    /// One reference: its value keeps its type (`with`, `over`, `output.from`).
    FullValue,
    /// One reference in a `do` task: must be a string.
    FullValueString,
}

/// A template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateDef {
    /// Pieces.
    pub pieces: Vec<PieceDef>,
    /// Type-preservation rule (reference v1-language §5.6), precomputed.
    pub mode: TemplateMode,
    /// Where it is written.
    pub pos: Pos,
}

/// A template piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PieceDef {
    /// Literal text.
    Text(StrId),
    /// A reference.
    Ref(RefDef),
}

/// A reference target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefTarget {
    /// `${input...}`.
    Input,
    /// `${step.output...}`.
    Step(u32),
    /// `${item...}`.
    Item,
    /// `${prev...}`.
    Prev,
    /// A carry variable.
    Carry(u32),
    /// `${step.status}` (X1).
    Status(u32),
    /// `${step.failure...}` (X1): `{reason, violations}` or `null`.
    Failure(u32),
    /// `${gate.note}` (X1): the note of the gate's latest decision, or `null`.
    Note(u32),
    /// `${gate.choice}` (X10): the choice of the gate's latest decision, or `null`.
    Choice(u32),
}

/// A gate's `options` (X10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GateOptionsDef {
    /// A literal list of options.
    List(Vec<StrId>),
    /// A template (full value) rendered to a list of strings when the gate
    /// starts waiting; the rendered list is kept in the gate's row.
    Template(u32),
}

/// A reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefDef {
    /// Target.
    pub target: RefTarget,
    /// Path.
    pub path: Vec<Seg>,
}

/// A `with` value node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WithNode {
    /// A string leaf: a template.
    Template(u32),
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A list of nodes.
    List(Vec<u32>),
    /// A mapping of nodes.
    Map(Vec<(StrId, u32)>),
}

/// A carry variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarryDef {
    /// Name.
    pub name: StrId,
    /// Initial value.
    pub initial: RefDef,
    /// Gate → value written when that gate revises.
    pub on_revise: Vec<(u32, RefDef)>,
}

/// The steps a gate's revise (or a route's `goto`, X9) resets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosureDef {
    /// The gate (or the routing step).
    pub gate: u32,
    /// Its revise target.
    pub target: u32,
    /// Bitset over the flow's steps (64 per word).
    pub steps: Vec<u64>,
}

impl ClosureDef {
    /// Whether step `i` is in the closure.
    pub fn contains(&self, i: u32) -> bool {
        self.steps
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }
}

/// A constant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ConstDef {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string.
    Str(StrId),
}

/// What an expression is for, which decides its bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Context {
    /// Step `when` / `set`: `result` maps step ids to outputs.
    Steps,
    /// `ensure` / `iterate.until`: `result` is the output under test.
    Output,
    /// Fanout stage `when`: step map plus `item` and `prev`.
    StageWhen,
    /// Fanout stage `ensure`: stage output plus `item` and `prev`.
    StageOutput,
    /// An `on_fail` entry's `when` (X9): `failure` is the failure
    /// `{reason, violations}`, read through the `result` register.
    Failure,
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// The expression text.
    pub source: StrId,
    /// Bindings.
    pub context: Context,
    /// Bytecode.
    pub code: Vec<u8>,
    /// Constants.
    pub consts: Vec<ConstDef>,
    /// Deepest stack the code reaches.
    pub max_stack: u16,
    /// Where the expression text starts in the spec.
    pub pos: Pos,
    /// Runs `(pc, byte offset into source)`: the instruction at `pc` and after
    /// it come from that offset, until the next run.
    pub spans: Vec<(u32, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for a in Agent::ALL {
            assert_eq!(a.as_str().parse::<Agent>(), Ok(*a));
            assert_eq!(a.to_string(), a.as_str());
        }
        for s in Stakes::ALL {
            assert_eq!(Stakes::from_name(s.as_str()), Some(*s));
        }
        assert_eq!(Agent::NAMES, ["claude", "codex"]);
        assert_eq!(Stakes::NAMES, ["cheap", "default", "paranoid"]);
        let e = "gpt".parse::<Agent>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown agent `gpt`; expected one of `claude`, `codex`"
        );
        // the name order is the variant order (a BTreeMap keyed by the enum lists them by name)
        let mut sorted = Stakes::NAMES.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, Stakes::NAMES);
    }
}
