//! Revise gates: `on_revise` needs the flow's `max_rounds`, names a step of
//! the flow other than the gate, and that step comes before the gate; what
//! a gate shows (X4): its `prompt` and `show` templates render to text; a
//! gate's `options` (X10): a template renders to a list of strings, and the
//! type a read of its `choice` has.
//!
//! Owns: reference v1-language §6.2 items 43–46; X4's gate `show`/`prompt`;
//! X10's `options` and the type of `choice` (one home for both the
//! expression and the template reader).
//! Must never: compute the region a revise resets (`graph` does, once).

use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{GateOptionsIr, Piece, StepId, TemplateIr};
use crate::source::Span;
use crate::syntax::ast::{self, GateOptions, StepKind};
use crate::types::Type;

/// A gate's checked `prompt` and `show` templates, and its `options` (X10).
pub(super) type GateDisplay = (Option<TemplateIr>, Vec<TemplateIr>, Option<GateOptionsIr>);

/// The type of a read of step `step`'s `choice` (X10): the union of a
/// gate's literal options, a string for templated options; `Err` with the
/// diagnostic when the step is not a gate or has no options (S0332).
pub(super) fn choice_type(
    flow: &ast::Flow,
    step: StepId,
    span: Span,
    shown: &str,
) -> Result<Type, Box<Diagnostic>> {
    let id = flow.steps[step]
        .id
        .as_ref()
        .map_or("this step", |n| n.text.as_str());
    let StepKind::Gate(g) = &flow.steps[step].kind else {
        return Err(Box::new(Diagnostic::new(
            Code::ChoiceWithoutOptions,
            span,
            format!("`{shown}`: step `{id}` is not a gate, so it has no `choice`"),
        )
        .with_note("`choice` is the option a gate's decision chose among its `options`")
        .with_help(
            "read the `choice` of a gate that has `options`, or this step's `status` or `output`",
        )));
    };
    match &g.options {
        Some(GateOptions::List(list)) => {
            Ok(Type::Enum(list.iter().map(|o| o.text.clone()).collect()))
        }
        Some(GateOptions::Template(_)) => Ok(Type::String),
        None => Err(Box::new(
            Diagnostic::new(
                Code::ChoiceWithoutOptions,
                span,
                format!(
                    "`{shown}`: gate `{id}` has no `options`, so its decisions carry no choice"
                ),
            )
            .with_span_label("this gate offers no options")
            .with_help(format!(
                "add `options: [..]` to gate `{id}`, or read `${{{id}.note}}` instead"
            )),
        )),
    }
}

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

    /// Whether `reader` reads gate `gate`'s answer from inside its reset
    /// closure (X10): it comes before the gate and the gate's revise target
    /// is `reader` or reaches it. Such a read is the latest round's note or
    /// choice (`null` before any); every other read orders `reader` after
    /// the gate like any state read (and a cycle is reported as usual).
    pub(super) fn in_answer_closure(&self, fc: &FlowCtx<'a>, gate: StepId, reader: StepId) -> bool {
        let StepKind::Gate(g) = &fc.flow.steps[gate].kind else {
            return false;
        };
        let Some(target) = g
            .on_revise
            .step()
            .and_then(|n| fc.index.get(n.text.as_str()).copied())
        else {
            return false;
        };
        reader != gate
            && fc.graph.reaches(reader, gate, false)
            && (target == reader || fc.graph.reaches(target, reader, false))
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
        let options = match &g.options {
            None => None,
            Some(GateOptions::List(list)) => Some(GateOptionsIr::List(
                list.iter().map(|o| o.text.clone()).collect(),
            )),
            Some(GateOptions::Template(s)) => {
                let t = self.template(fc, Some(i), s, Leaf::Artifact, &StageScope::default());
                let t = t.filter(|t| self.options_fit(s, t));
                ok &= t.is_some();
                t.map(GateOptionsIr::Template)
            }
        };
        ok.then_some((prompt, show, options))
    }

    /// A templated `options` (X10) is one full reference to a list of
    /// strings (or a value of unknown type); S0331 otherwise.
    fn options_fit(&mut self, s: &crate::yaml::Str, t: &TemplateIr) -> bool {
        let reference = t
            .pieces
            .first()
            .filter(|_| t.full_value && t.pieces.len() == 1);
        let Some(Piece::Ref(r)) = reference else {
            self.sink.push(
                Diagnostic::new(
                    Code::GateOptionNotString,
                    s.span,
                    "a templated `options` must be exactly one reference to a list of strings",
                )
                .with_note("text around a reference renders a string, not a list of options")
                .with_help("write `options: \"${plan.output.candidates}\"`, or list the options"),
            );
            return false;
        };
        let fits = match &r.ty {
            Type::Any => true,
            Type::List(inner) => inner.is_stringy() || **inner == Type::Any,
            _ => false,
        };
        if !fits {
            let shown = self.types.display(&r.ty);
            self.sink.push(
                Diagnostic::new(
                    Code::GateOptionNotString,
                    r.span,
                    format!("a gate's `options` must render to a list of strings, but this reference is {shown}"),
                )
                .with_span_label(format!("this is {shown}"))
                .with_help("reference a field of type `string[]`"),
            );
        }
        fits
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
