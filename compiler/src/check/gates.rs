//! Revise gates: `on_revise` needs the flow's `max_rounds`, names a step of
//! the flow other than the gate, and that step comes before the gate; what
//! a gate shows (X4): its `prompt` and `show` templates render to text.
//!
//! Owns: reference v1-language §6.2 items 43–46; X4's gate `show`/`prompt`.
//! Must never: compute the region a revise resets (`graph` does, once).

use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{Piece, StepId, TemplateIr};
use crate::syntax::ast::{self, StepKind};
use crate::types::Type;

/// A gate's checked `prompt` and `show` templates.
pub(super) type GateDisplay = (Option<TemplateIr>, Vec<TemplateIr>);

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

    /// A gate's `prompt` and `show` (X4): templates that render to text (a
    /// full reference must be a string; S0322 otherwise).
    pub(super) fn gate_display(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        g: &ast::Gate,
    ) -> Option<GateDisplay> {
        let mut ok = true;
        let mut one = |c: &mut Self, s: &crate::yaml::Str, what: &str| {
            let t = c.template(fc, Some(i), s, Leaf::Artifact, &StageScope::default());
            let t = t.filter(|t| c.gate_text_fits(t, what));
            ok &= t.is_some();
            t
        };
        let prompt = g.prompt.as_ref().and_then(|p| one(self, p, "`prompt`"));
        let show: Vec<TemplateIr> = g
            .show
            .iter()
            .filter_map(|s| one(self, s, "a `show` entry"))
            .collect();
        ok.then_some((prompt, show))
    }

    fn gate_text_fits(&mut self, t: &TemplateIr, what: &str) -> bool {
        let Some(Piece::Ref(r)) = t.pieces.first().filter(|_| t.full_value) else {
            return true;
        };
        if r.ty.is_stringy() || r.ty == Type::Any {
            return true;
        }
        let shown = self.types.display(&r.ty);
        self.sink.push(
            Diagnostic::new(
                Code::GateShowNotText,
                r.span,
                format!("a gate's {what} must render to text, but this reference is {shown}"),
            )
            .with_span_label(format!("this is {shown}"))
            .with_help("reference a string field, or embed the value in text to show it as JSON"),
        );
        false
    }
}
