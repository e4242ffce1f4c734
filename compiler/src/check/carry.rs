//! Carry variables (reference v1-language §6.2 items 30–42): entry flow only,
//! names that clash with nothing, an initial value from a step that always
//! runs and comes before every reader, and `on_revise` values whose gate
//! re-runs every reader and comes after it.
//!
//! Owns: the carry rules and the carry IR.
//! Must never: compute a reset region (it reads the one the checker
//! recorded in [`FlowCtx::resets`]).

use stratum_grammar::RefKind;

use super::template::Leaf;
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::ir::{self, RefTarget, StepId};
use crate::source::Span;
use crate::syntax::ast::{self, StepKind};
use crate::yaml::Str;

impl<'a> Checker<'a> {
    pub(super) fn carry(&mut self, fc: &mut FlowCtx<'a>) -> Option<Vec<ir::CarryIr>> {
        let Some(carry) = &fc.flow.carry else {
            return Some(Vec::new());
        };
        if !fc.is_entry {
            self.sink.push(
                Diagnostic::new(
                    Code::CarryRootOnly,
                    carry.key_span,
                    format!(
                        "flow `{}` is not the entry flow, so it cannot declare `carry`",
                        fc.flow.name.text
                    ),
                )
                .with_help("move the carry block to the entry flow"),
            );
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (vi, v) in carry.vars.iter().enumerate() {
            match self.carry_var(fc, vi, v) {
                Some(c) => out.push(c),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// One carry variable (items 31–42); `None` when anything is wrong.
    fn carry_var(
        &mut self,
        fc: &mut FlowCtx<'a>,
        vi: usize,
        v: &ast::CarryVar,
    ) -> Option<ir::CarryIr> {
        let name = v.name.text.as_str();
        if !self.carry_name_free(fc, v) {
            return None;
        }
        let initial = self.carry_initial(fc, name, v.initial.as_ref()?)?;
        // uses before the initial value exists (rule 36)
        let mut ok = self.carry_read_after_initial(fc, vi, name, &initial);
        let mut revs = Vec::new();
        for (gate, value) in &v.on_revise {
            match self.carry_revise(fc, vi, name, gate, value) {
                Some(rev) => revs.push(rev),
                None => ok = false,
            }
        }
        ok.then(|| ir::CarryIr {
            name: name.to_string(),
            initial,
            on_revise: revs,
        })
    }

    /// Item 31: the name is not reserved and names no step.
    fn carry_name_free(&mut self, fc: &FlowCtx<'_>, v: &ast::CarryVar) -> bool {
        let name = v.name.text.as_str();
        if !["item", "prev", "input"].contains(&name) && !fc.index.contains_key(name) {
            return true;
        }
        let why = if fc.index.contains_key(name) {
            format!("a step of this flow is called `{name}`")
        } else {
            format!("`{name}` is a reserved reference name")
        };
        self.sink.push(
            Diagnostic::new(
                Code::CarryNameConflict,
                v.name.span,
                format!("carry variable `{name}` cannot have this name: {why}"),
            )
            .with_help("rename the carry variable"),
        );
        false
    }

    /// Items 32–34: the initial value comes from a step that always runs,
    /// then is typed as any reference.
    fn carry_initial(&mut self, fc: &mut FlowCtx<'a>, name: &str, init: &Str) -> Option<ir::RefIr> {
        // conditional source (rule 33) before typing (rule 34)
        let parsed = self.parses.template(&init.text);
        if let Some(r) = parsed.template.full_value()
            && r.kind == RefKind::StepOutput
            && let Some(&src) = fc.index.get(r.head.as_str())
        {
            let st = &fc.flow.steps[src];
            let why = if st.when.is_some() {
                Some("it has a `when`")
            } else if matches!(st.kind, StepKind::Gate(_)) {
                Some("it is a gate")
            } else if fc.graph.is_route_target(src) {
                Some("it runs only when a route chooses it")
            } else {
                None
            };
            if let Some(why) = why {
                self.sink.push(
                    Diagnostic::new(Code::CarryInitialConditional, init.span, format!("the initial value of `{name}` comes from step `{}`, which may not run: {why}", r.head))
                        .with_help("take the initial value from a step that always runs"),
                );
                return None;
            }
        }
        self.single_ref(
            fc,
            init,
            Leaf::Carry,
            true,
            Code::CarryInvalidReference,
            &format!("the initial value of carry `{name}`"),
        )
    }

    /// Item 36: every reader of a step-sourced variable comes after its source.
    fn carry_read_after_initial(
        &mut self,
        fc: &FlowCtx<'_>,
        vi: usize,
        name: &str,
        initial: &ir::RefIr,
    ) -> bool {
        let RefTarget::Step(src) = initial.target else {
            return true;
        };
        let mut ok = true;
        for (user, span) in carry_readers(fc, vi) {
            if user == src || !fc.graph.reaches(src, user, true) {
                let src_id = step_name(fc, src);
                self.sink.push(
                    Diagnostic::new(Code::CarryBeforeInitial, span, format!("`${{{name}}}` may be read before step `{src_id}` has produced its initial value"))
                        .with_help(format!("add `{src_id}` to this step's `after` list")),
                );
                ok = false;
            }
        }
        ok
    }

    /// Items 37–42: one `on_revise` entry; `None` when anything is wrong.
    fn carry_revise(
        &mut self,
        fc: &mut FlowCtx<'a>,
        vi: usize,
        name: &str,
        gate: &ast::Name,
        value: &Str,
    ) -> Option<(StepId, ir::RefIr)> {
        if !crate::syntax::decode::is_step_id(&gate.text) {
            return None; // already reported by the decoder
        }
        let Some(&g) = fc
            .index
            .get(gate.text.as_str())
            .filter(|&&g| matches!(fc.flow.steps[g].kind, StepKind::Gate(_)))
        else {
            self.unknown_carry_gate(fc, gate);
            return None;
        };
        let r = self.single_ref(
            fc,
            value,
            Leaf::Carry,
            true,
            Code::CarryInvalidReference,
            &format!("the `on_revise` value of carry `{name}`"),
        )?;
        let StepKind::Gate(gdef) = &fc.flow.steps[g].kind else {
            return None; // `g` was chosen among the gates
        };
        if gdef.on_revise.step().is_none() {
            self.sink.push(
                Diagnostic::new(
                    Code::CarryReviseTargetNull,
                    value.span,
                    format!(
                        "gate `{}` has `on_revise: null`, so this value is never written",
                        gate.text
                    ),
                )
                .with_help("give the gate an `on_revise` target, or remove this entry"),
            );
            return None;
        }
        let Some(reset) = fc.reset_of(g) else {
            // an unknown target, or a gate revising to itself: an error of
            // the revise gates (so no IR is built)
            return Some((g, r));
        };
        let ok = self.carry_revise_readers(fc, vi, name, gate, reset, value);
        ok.then_some((g, r))
    }

    /// Items 41–42: a revise of gate `g` re-runs every reader of the
    /// variable, and every reader comes before the gate.
    fn carry_revise_readers(
        &mut self,
        fc: &FlowCtx<'_>,
        vi: usize,
        name: &str,
        gate: &ast::Name,
        reset: &ir::ResetIr,
        value: &Str,
    ) -> bool {
        let (g, target) = (reset.from, step_name(fc, reset.target));
        let mut ok = true;
        for (user, span) in carry_readers(fc, vi) {
            let user_id = step_name(fc, user);
            if !reset.steps[user] {
                self.sink.push(
                    Diagnostic::new(Code::CarryReviseMissesConsumer, value.span, format!("step `{user_id}` reads `${{{name}}}`, but a revise of gate `{}` does not re-run it", gate.text))
                        .with_label(span, "read here")
                        .with_note(format!("a revise resets `{target}` and the steps after it")),
                );
                ok = false;
            } else if user != g && !fc.graph.reaches(user, g, true) {
                self.sink.push(
                    Diagnostic::new(Code::CarryGateNotAfterConsumer, value.span, format!("step `{user_id}` reads `${{{name}}}` but does not come before gate `{}`", gate.text))
                        .with_label(span, "read here")
                        .with_help(format!("add `{user_id}` to the `after` list of `{}`", gate.text)),
                );
                ok = false;
            }
        }
        ok
    }

    /// Item 37: an `on_revise` key that is not a gate of the flow.
    fn unknown_carry_gate(&mut self, fc: &FlowCtx<'_>, gate: &ast::Name) {
        let gates: Vec<&str> = fc
            .flow
            .steps
            .iter()
            .filter(|s| matches!(s.kind, StepKind::Gate(_)))
            .filter_map(|s| s.id.as_ref().map(|n| n.text.as_str()))
            .collect();
        self.sink.push(
            Diagnostic::new(
                Code::CarryUnknownGate,
                gate.span,
                format!(
                    "`{}` is not a gate of flow `{}`",
                    gate.text, fc.flow.name.text
                ),
            )
            .with_help_opt(did_you_mean(&gate.text, gates.iter().copied())),
        );
    }
}

/// The steps that read carry variable `vi`, with where they read it.
fn carry_readers(fc: &FlowCtx<'_>, vi: usize) -> Vec<(StepId, Span)> {
    fc.carry_uses
        .iter()
        .filter(|(c, _, _)| *c == vi)
        .map(|(_, s, sp)| (*s, *sp))
        .collect()
}

/// The id of step `s`, for messages.
fn step_name(fc: &FlowCtx<'_>, s: StepId) -> String {
    fc.flow.steps[s]
        .id
        .as_ref()
        .map_or("?", |n| n.text.as_str())
        .to_string()
}
