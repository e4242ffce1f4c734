//! `build`: the whole pipeline from an analysed spec to a verified plan.
//!
//! Owns: running the cost analysis (without inputs, with the built-in agent
//! profiles) and handing its worst-case bounds to lowering.
//! Must never: re-check the spec; it builds only when the analysis has no error.

use stratum_vm::plan::Plan;

use crate::analysis::Analysis;
use crate::cost::{CostConfig, Estimate, analyze_cost};
use crate::lower::{CostBound, lower};

fn bound(e: &Estimate) -> CostBound {
    match (&e.worst, &e.worst_symbolic) {
        (Some(w), _) => CostBound::Finite(w.max(0.0).round() as u64),
        (None, Some(text)) => CostBound::Symbolic(text.clone()),
        (None, None) => CostBound::Symbolic("unbounded".into()),
    }
}

/// Builds the plan of an analysed spec; `None` when the spec has errors.
pub fn build_plan(analysis: &Analysis) -> Option<Plan> {
    let ir = analysis.ir.as_ref()?;
    let config = CostConfig::default();
    let mut bounds = Vec::with_capacity(ir.flows.len());
    let mut flow_bounds = Vec::with_capacity(ir.flows.len());
    for (fi, flow) in ir.flows.iter().enumerate() {
        let cost = analyze_cost(ir, fi, None, &config);
        // the cost analysis lists the flow's steps in IR order
        let per_step = flow
            .steps
            .iter()
            .enumerate()
            .map(
                |(si, s)| match cost.steps.get(si).filter(|c| c.id == s.id) {
                    Some(c) => (
                        u32::try_from(c.entries).unwrap_or(u32::MAX),
                        bound(&c.dispatches),
                    ),
                    None => (1, CostBound::Finite(0)),
                },
            )
            .collect();
        bounds.push(per_step);
        flow_bounds.push(bound(&cost.dispatches));
    }
    lower(analysis, &bounds, &flow_bounds)
}
