//! Revise gates: `on_revise` needs the flow's `max_rounds`, names a step of
//! the flow other than the gate, and that step comes before the gate.
//!
//! Owns: reference v1-language §6.2 items 43–46.
//! Must never: compute the region a revise resets (`graph` does, once).

use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::StepKind;

impl<'a> Checker<'a> {
    pub(super) fn revise_gates(&mut self, fc: &mut FlowCtx<'a>) {
        let mut reported_rounds = false;
        for (g, s) in fc.flow.steps.iter().enumerate() {
            let StepKind::Gate(gate) = &s.kind else {
                continue;
            };
            let Some(target) = gate.on_revise.step() else {
                continue;
            };
            if fc.flow.max_rounds.is_none() && !reported_rounds {
                reported_rounds = true;
                self.sink.push(
                    Diagnostic::new(Code::ReviseNeedsMaxRounds, target.span, format!("gate revises to `{}`, but flow `{}` has no `max_rounds`", target.text, fc.flow.name.text))
                        .with_note("`max_rounds` bounds the revisions of the whole flow, even when the gate has its own")
                        .with_help("add `max_rounds: 3` to the flow"),
                );
            }
            let Some(t) = self.target(fc, target, "`on_revise`") else {
                continue;
            };
            if t == g {
                self.sink.push(
                    Diagnostic::new(
                        Code::SelfReference,
                        target.span,
                        "a gate cannot revise to itself",
                    )
                    .with_help("revise to the step whose work the gate reviews"),
                );
                continue;
            }
            if !fc.graph.reaches(t, g, false) {
                let gid =
                    s.id.as_ref()
                        .map_or("this gate", |n| n.text.as_str())
                        .to_string();
                self.sink.push(
                    Diagnostic::new(Code::ReviseNotAncestor, target.span, format!("`{}` does not come before gate `{gid}`, so the gate cannot revise to it", target.text))
                        .with_note("a revise goes back to an earlier step and runs it and everything after it again")
                        .with_help(format!("add `{}` to the `after` list of `{gid}`, or revise to a step that does come before it", target.text)),
                );
            }
        }
    }
}
