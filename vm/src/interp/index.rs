//! Per-plan lookup tables the interpreter needs on every transition: step
//! ids, successors, dependencies and routers per flow. Built once per plan
//! (callers cache it), so a transition never scans the whole edge list.
//!
//! Owns: derived, read-only views of a verified plan.
//! Must never: be persisted (it is recomputed from the plan).

use std::collections::HashMap;

use crate::plan::{EdgeKind, Plan};

/// Lookup tables of one flow.
#[derive(Debug, Clone, Default)]
pub struct FlowIndex {
    /// Step id → index.
    pub ids: HashMap<String, u32>,
    /// Out-edges per step: (target, kind).
    pub succ: Vec<Vec<(u32, EdgeKind)>>,
    /// Dependency in-edges per step: (source, kind) with kind Order or Data.
    pub deps: Vec<Vec<(u32, EdgeKind)>>,
    /// Route in-edges per step: (router, kind) with kind OnFail, Approve or Kill.
    pub routers: Vec<Vec<(u32, EdgeKind)>>,
}

/// Lookup tables of a plan.
#[derive(Debug, Clone, Default)]
pub struct PlanIndex {
    /// Per flow.
    pub flows: Vec<FlowIndex>,
    /// Flow name → index.
    pub flow_ids: HashMap<String, u32>,
}

impl PlanIndex {
    /// Builds the tables of a verified plan.
    pub fn new(plan: &Plan) -> PlanIndex {
        let flows = plan
            .flows
            .iter()
            .map(|f| {
                let n = f.steps.len();
                let mut fi = FlowIndex {
                    ids: f
                        .steps
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (plan.str(s.id).to_string(), i as u32))
                        .collect(),
                    succ: vec![Vec::new(); n],
                    deps: vec![Vec::new(); n],
                    routers: vec![Vec::new(); n],
                };
                for e in &f.edges {
                    let (from, to) = (e.from as usize, e.to as usize);
                    if from >= n || to >= n {
                        continue; // verified plans never have these
                    }
                    fi.succ[from].push((e.to, e.kind));
                    match e.kind {
                        EdgeKind::Order | EdgeKind::Data | EdgeKind::State => {
                            fi.deps[to].push((e.from, e.kind))
                        }
                        _ => fi.routers[to].push((e.from, e.kind)),
                    }
                }
                fi
            })
            .collect();
        let flow_ids = plan
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| (plan.str(f.name).to_string(), i as u32))
            .collect();
        PlanIndex { flows, flow_ids }
    }
}
