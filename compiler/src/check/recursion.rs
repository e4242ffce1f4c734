//! Sub-flow recursion across flows: no flow may call itself, directly or
//! through other flows (an iterative walk over `run` steps).
//!
//! Owns: reference v1-language §6.2 item 53.
//! Must never: look inside the steps of a flow beyond their `run` targets.

use super::Checker;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::StepKind;

impl<'a> Checker<'a> {
    pub(super) fn subflow_recursion(&mut self) {
        let spec = self.spec;
        let n = spec.flows.len();
        let mut state = vec![0u8; n];
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            // iterative DFS: (flow, next step index)
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (f, ref mut next)) = stack.last_mut() {
                let steps = &spec.flows[f].steps;
                if *next >= steps.len() {
                    state[f] = 2;
                    stack.pop();
                    continue;
                }
                let s = &steps[*next];
                *next += 1;
                let StepKind::Run { flow, .. } = &s.kind else {
                    continue;
                };
                let Some(&callee) = self.flows.get(flow.text.as_str()) else {
                    continue;
                };
                match state[callee] {
                    1 => {
                        self.sink.push(
                            Diagnostic::new(Code::RecursiveSubflow, flow.span, format!("flow `{}` calls `{}`, which is already running in this chain of calls", spec.flows[f].name.text, flow.text))
                                .with_note("sub-flows cannot call themselves, directly or through other flows"),
                        );
                    }
                    0 => {
                        state[callee] = 1;
                        stack.push((callee, 0));
                    }
                    _ => {}
                }
            }
        }
    }
}
