//! `build`: the whole pipeline from an analysed spec to a verified plan.
//!
//! Owns: running the cost analysis and handing its bounds to lowering.
//! Must never: re-check the spec; it builds only when the analysis has no error.

use stratum_vm::plan::Plan;

use crate::analysis::Analysis;
use crate::lower::{CostBound, lower};

/// Builds the plan of an analysed spec; `None` when the spec has errors.
pub fn build_plan(analysis: &Analysis) -> Option<Plan> {
    let ir = analysis.ir.as_ref()?;
    // FIXME(cost): bounds come from the cost analysis once it lands.
    let bounds = ir
        .flows
        .iter()
        .map(|f| vec![(1, CostBound::Finite(0)); f.steps.len()])
        .collect::<Vec<_>>();
    let flow_bounds = vec![CostBound::Finite(0); ir.flows.len()];
    lower(analysis, &bounds, &flow_bounds)
}
