//! Plan format version 3, frozen: the types whose postcard layout changed
//! in version 4, and their migration to the current ones.
//!
//! Version 4 (language 1.1 part two: X9-X12) changes steps (routes, the X9
//! `on_fail` entries, scopes), their kinds (gate options, `iterate` on `run`
//! steps, `evaluate` steps) and fanout stages (scopes); postcard is not
//! self-describing, so every type that holds one of them (stages, step
//! kinds, steps, flows, the plan) is copied here as version 3 wrote it.
//! Types whose layout did not change are the current ones (enums that only
//! gained variants at their end, such as predicates, decode as before).
//! Version 2 migrates to these types ([`super::v2`]) and from here to the
//! current ones.
//!
//! Owns: decoding version-3 bodies and migrating them to the current types.
//! Must never: change the structs (they are what version-3 files hold); only
//! the migration functions learn the defaults of fields added later. A new
//! format version freezes its own copies in its own module.

use serde::Deserialize;

use super::{
    Agent, ArtifactDef, Bound, BudgetDef, CarryDef, Chunk, ClosureDef, EdgeDef, OutputDef, Pos,
    PredDef, RecordDef, Require, StrId, TemplateDef, WithNode,
};

/// [`super::Plan`] as version 3 wrote it.
#[derive(Deserialize)]
pub(super) struct Plan {
    /// Interned strings (ids, names, task text, field names).
    pub(super) strings: Vec<String>,
    /// Contracts and flow inputs.
    pub(super) records: Vec<RecordDef>,
    /// Flows in document order.
    pub(super) flows: Vec<FlowDef>,
    /// The entry flow.
    pub(super) entry: u32,
}

/// [`super::FlowDef`] as version 3 wrote it.
#[derive(Deserialize)]
pub(super) struct FlowDef {
    /// Name.
    pub(super) name: StrId,
    /// Input record.
    pub(super) input: u32,
    /// Output.
    pub(super) output: OutputDef,
    /// Steps in topological order (every edge goes from a lower to a higher index).
    pub(super) steps: Vec<StepDef>,
    /// Edges of the step graph.
    pub(super) edges: Vec<EdgeDef>,
    /// Flow budget.
    pub(super) budget: Option<BudgetDef>,
    /// Flow-wide revision cap.
    pub(super) max_rounds: Option<u32>,
    /// Carry variables.
    pub(super) carry: Vec<CarryDef>,
    /// Compiled expressions.
    pub(super) chunks: Vec<Chunk>,
    /// Compiled templates.
    pub(super) templates: Vec<TemplateDef>,
    /// `with` value nodes (children always have lower indices).
    pub(super) with_nodes: Vec<WithNode>,
    /// Reset closures of revising gates.
    pub(super) closures: Vec<ClosureDef>,
    /// Worst-case dispatches of one run of this flow.
    pub(super) worst_dispatches: Bound,
}

/// [`super::StepDef`] as version 3 wrote it.
#[derive(Deserialize)]
pub(super) struct StepDef {
    /// Id.
    pub(super) id: StrId,
    /// Where the step starts in the spec.
    pub(super) pos: Pos,
    /// The construct.
    pub(super) kind: StepKindDef,
    /// `when` chunk.
    pub(super) when: Option<u32>,
    /// Predicates.
    pub(super) ensure: Vec<PredDef>,
    /// Output contract.
    pub(super) out: Option<u32>,
    /// Step budget.
    pub(super) budget: Option<BudgetDef>,
    /// `on_fail` target.
    pub(super) on_fail: Option<u32>,
    /// `on_fail: continue` (X2): when attempts run out the step ends
    /// `failed`, the failure is handled and its dependents run (its output
    /// reads as `null`). False in plans of format 2 and older.
    pub(super) on_fail_continue: bool,
    /// The dispatch lease of a `do` step in milliseconds (X7: its own
    /// `timeout_ms`, else the flow's `dispatch_timeout_ms`); `None` for other
    /// constructs and for steps without one.
    pub(super) timeout_ms: Option<u64>,
    /// `artifacts` of a `do` step (X4; empty for other constructs).
    pub(super) artifacts: Vec<ArtifactDef>,
    /// Most times the step can be entered in one run of its flow.
    pub(super) entries: u32,
    /// Worst-case dispatches of this step over the whole run of its flow.
    pub(super) worst_dispatches: Bound,
}

/// [`super::StepKindDef`] as version 3 wrote it.
#[derive(Deserialize)]
pub(super) enum StepKindDef {
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
    },
}

/// [`super::StageDef`] as version 3 wrote it.
#[derive(Deserialize)]
pub(super) struct StageDef {
    /// Task template.
    pub(super) task: u32,
    /// Agent.
    pub(super) agent: Agent,
    /// Output contract.
    pub(super) out: Option<u32>,
    /// Predicates.
    pub(super) ensure: Vec<PredDef>,
    /// Attempts.
    pub(super) attempts: u32,
    /// Condition chunk.
    pub(super) when: Option<u32>,
    /// The dispatch lease of this stage's dispatches in milliseconds (X7: the
    /// stage's `timeout_ms`, else the flow's `dispatch_timeout_ms`).
    pub(super) timeout_ms: Option<u64>,
    /// `artifacts` of the stage (X4), resolved in the item's worktree.
    pub(super) artifacts: Vec<ArtifactDef>,
}

impl Plan {
    /// The current plan with the same meaning.
    pub(super) fn migrate(self) -> super::Plan {
        super::Plan {
            strings: self.strings,
            records: self.records,
            flows: self.flows.into_iter().map(FlowDef::migrate).collect(),
            entry: self.entry,
        }
    }
}

impl FlowDef {
    fn migrate(self) -> super::FlowDef {
        super::FlowDef {
            name: self.name,
            input: self.input,
            output: self.output,
            steps: self.steps.into_iter().map(StepDef::migrate).collect(),
            edges: self.edges,
            budget: self.budget,
            max_rounds: self.max_rounds,
            carry: self.carry,
            chunks: self.chunks,
            templates: self.templates,
            with_nodes: self.with_nodes,
            closures: self.closures,
            worst_dispatches: self.worst_dispatches,
        }
    }
}

impl StepDef {
    fn migrate(self) -> super::StepDef {
        super::StepDef {
            id: self.id,
            pos: self.pos,
            kind: self.kind.migrate(),
            when: self.when,
            ensure: self.ensure,
            out: self.out,
            budget: self.budget,
            on_fail: self.on_fail,
            on_fail_continue: self.on_fail_continue,
            timeout_ms: self.timeout_ms,
            artifacts: self.artifacts,
            scope: None,
            routes: Vec::new(),
            on_fail_routes: Vec::new(),
            entries: self.entries,
            worst_dispatches: self.worst_dispatches,
        }
    }
}

impl StepKindDef {
    fn migrate(self) -> super::StepKindDef {
        use super::StepKindDef as K;
        match self {
            StepKindDef::Do {
                task,
                agent,
                attempts,
                iterate,
            } => K::Do {
                task,
                agent,
                attempts,
                iterate,
            },
            StepKindDef::Set { fields } => K::Set { fields },
            StepKindDef::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                prompt,
                show,
            } => K::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                prompt,
                show,
                options: None,
            },
            StepKindDef::Fanout {
                over,
                stages,
                concurrency,
                worktree,
                require,
                pre_merge,
                consumer,
            } => K::Fanout {
                over,
                stages: stages.into_iter().map(StageDef::migrate).collect(),
                concurrency,
                worktree,
                require,
                pre_merge,
                consumer,
            },
            StepKindDef::Run { flow, with } => K::Run {
                flow,
                with,
                iterate: None,
            },
        }
    }
}

impl StageDef {
    pub(super) fn migrate(self) -> super::StageDef {
        super::StageDef {
            task: self.task,
            agent: self.agent,
            out: self.out,
            ensure: self.ensure,
            attempts: self.attempts,
            when: self.when,
            timeout_ms: self.timeout_ms,
            artifacts: self.artifacts,
            scope: None,
            on_fail: Vec::new(),
        }
    }
}
