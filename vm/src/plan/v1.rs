//! Plan format version 1, frozen: the types whose postcard layout changed
//! in version 2, and their migration to the version-2 types.
//!
//! Version 2 (language 1.1, X7) added `timeout_ms` to steps and stages;
//! postcard is not self-describing, so every type that holds one of them
//! (steps, their kinds, flows, the plan) is copied here as version 1 wrote
//! it. A version-1 body is migrated to [`super::v2`] (no dispatch leases,
//! `timeout_ms: None`) and from there to the current types: each retired
//! version migrates only to the next one.
//!
//! Owns: decoding version-1 bodies and migrating them to version 2.
//! Must never: change: these structs are what version-1 files hold. A new
//! format version freezes its own copies in its own module.

use serde::Deserialize;

use super::v2::{self, PredDef};
use super::{
    Agent, Bound, BudgetDef, CarryDef, Chunk, ClosureDef, EdgeDef, OutputDef, Pos, RecordDef,
    Require, StrId, TemplateDef, WithNode,
};

/// [`v2::Plan`] as version 1 wrote it.
#[derive(Deserialize)]
pub(super) struct Plan {
    strings: Vec<String>,
    records: Vec<RecordDef>,
    flows: Vec<FlowDef>,
    entry: u32,
}

/// [`v2::FlowDef`] as version 1 wrote it.
#[derive(Deserialize)]
struct FlowDef {
    name: StrId,
    input: u32,
    output: OutputDef,
    steps: Vec<StepDef>,
    edges: Vec<EdgeDef>,
    budget: Option<BudgetDef>,
    max_rounds: Option<u32>,
    carry: Vec<CarryDef>,
    chunks: Vec<Chunk>,
    templates: Vec<TemplateDef>,
    with_nodes: Vec<WithNode>,
    closures: Vec<ClosureDef>,
    worst_dispatches: Bound,
}

/// [`v2::StepDef`] as version 1 wrote it (no `timeout_ms`).
#[derive(Deserialize)]
struct StepDef {
    id: StrId,
    pos: Pos,
    kind: StepKindDef,
    when: Option<u32>,
    ensure: Vec<PredDef>,
    out: Option<u32>,
    budget: Option<BudgetDef>,
    on_fail: Option<u32>,
    entries: u32,
    worst_dispatches: Bound,
}

/// [`v2::StepKindDef`] as version 1 wrote it (variants in the same order).
#[derive(Deserialize)]
enum StepKindDef {
    Do {
        task: u32,
        agent: Agent,
        attempts: u32,
        iterate: Option<(u32, u32)>,
    },
    Set {
        fields: Vec<(StrId, u32)>,
    },
    Gate {
        on_approve: Option<u32>,
        on_revise: Option<u32>,
        on_kill: Option<u32>,
        max_rounds: Option<u32>,
    },
    Fanout {
        over: u32,
        stages: Vec<StageDef>,
        concurrency: u32,
        worktree: bool,
        require: Require,
        pre_merge: Vec<StrId>,
        consumer: bool,
    },
    Run {
        flow: u32,
        with: Vec<(StrId, u32)>,
    },
}

/// [`v2::StageDef`] as version 1 wrote it (no `timeout_ms`).
#[derive(Deserialize)]
struct StageDef {
    task: u32,
    agent: Agent,
    out: Option<u32>,
    ensure: Vec<PredDef>,
    attempts: u32,
    when: Option<u32>,
}

impl Plan {
    /// The version-2 plan with the same meaning: no step has a lease
    /// ([`v2::Plan::migrate`] then brings it to the current types).
    pub(super) fn migrate(self) -> v2::Plan {
        v2::Plan {
            strings: self.strings,
            records: self.records,
            flows: self.flows.into_iter().map(FlowDef::migrate).collect(),
            entry: self.entry,
        }
    }
}

impl FlowDef {
    fn migrate(self) -> v2::FlowDef {
        v2::FlowDef {
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
    fn migrate(self) -> v2::StepDef {
        v2::StepDef {
            id: self.id,
            pos: self.pos,
            kind: self.kind.migrate(),
            when: self.when,
            ensure: self.ensure,
            out: self.out,
            budget: self.budget,
            on_fail: self.on_fail,
            timeout_ms: None,
            entries: self.entries,
            worst_dispatches: self.worst_dispatches,
        }
    }
}

impl StepKindDef {
    fn migrate(self) -> v2::StepKindDef {
        use v2::StepKindDef as K;
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
            } => K::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
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
            StepKindDef::Run { flow, with } => K::Run { flow, with },
        }
    }
}

impl StageDef {
    fn migrate(self) -> v2::StageDef {
        v2::StageDef {
            task: self.task,
            agent: self.agent,
            out: self.out,
            ensure: self.ensure,
            attempts: self.attempts,
            when: self.when,
            timeout_ms: None,
        }
    }
}
