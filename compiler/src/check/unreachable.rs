//! Unreachable steps: a step that reads the output of a step whose `when` is
//! always false can never run (warned once per step, transitively).
//!
//! Owns: the unreachable-step warning.
//! Must never: decide which conditions are constant (the expression checker
//! records them in [`FlowCtx::never_runs`]).

use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::StepId;

impl<'a> Checker<'a> {
    pub(super) fn unreachable(&mut self, fc: &mut FlowCtx<'a>) {
        let mut dead = vec![false; fc.flow.steps.len()];
        let mut stack = fc.never_runs.clone();
        for &s in &stack {
            dead[s] = true;
        }
        let origins = stack.clone();
        while let Some(v) = stack.pop() {
            let next: Vec<StepId> = fc.graph.data_successors(v).collect();
            for t in next {
                if !dead[t] {
                    dead[t] = true;
                    stack.push(t);
                    if let Some(id) = &fc.flow.steps[t].id {
                        self.sink.push(
                            Diagnostic::new(Code::UnreachableStep, id.span, format!("step `{}` can never run", id.text))
                                .with_note("it reads the output of a step whose `when` is always false, so it is always skipped"),
                        );
                    }
                }
            }
        }
        let _ = origins;
    }
}
