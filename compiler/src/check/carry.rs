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
use crate::syntax::ast::StepKind;

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
            let name = v.name.text.as_str();
            if ["item", "prev", "input"].contains(&name) || fc.index.contains_key(name) {
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
                ok = false;
                continue;
            }
            let Some(init) = &v.initial else {
                ok = false;
                continue;
            };
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
                    ok = false;
                    continue;
                }
            }
            let Some(initial) = self.single_ref(
                fc,
                init,
                Leaf::Carry,
                true,
                Code::CarryInvalidReference,
                &format!("the initial value of carry `{name}`"),
            ) else {
                ok = false;
                continue;
            };
            // uses before the initial value exists (rule 36)
            if let RefTarget::Step(src) = initial.target {
                let uses: Vec<(StepId, Span)> = fc
                    .carry_uses
                    .iter()
                    .filter(|(c, _, _)| *c == vi)
                    .map(|(_, s, sp)| (*s, *sp))
                    .collect();
                for (user, span) in uses {
                    if user == src || !fc.graph.reaches(src, user, true) {
                        let src_id = fc.flow.steps[src]
                            .id
                            .as_ref()
                            .map_or("?", |n| n.text.as_str())
                            .to_string();
                        self.sink.push(
                            Diagnostic::new(Code::CarryBeforeInitial, span, format!("`${{{name}}}` may be read before step `{src_id}` has produced its initial value"))
                                .with_help(format!("add `{src_id}` to this step's `after` list")),
                        );
                        ok = false;
                    }
                }
            }
            let mut revs = Vec::new();
            for (gate, value) in &v.on_revise {
                if !crate::syntax::decode::is_step_id(&gate.text) {
                    ok = false;
                    continue; // already reported by the decoder
                }
                let Some(&g) = fc
                    .index
                    .get(gate.text.as_str())
                    .filter(|&&g| matches!(fc.flow.steps[g].kind, StepKind::Gate(_)))
                else {
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
                    ok = false;
                    continue;
                };
                let Some(r) = self.single_ref(
                    fc,
                    value,
                    Leaf::Carry,
                    true,
                    Code::CarryInvalidReference,
                    &format!("the `on_revise` value of carry `{name}`"),
                ) else {
                    ok = false;
                    continue;
                };
                let StepKind::Gate(gdef) = &fc.flow.steps[g].kind else {
                    continue;
                };
                let Some(target) = gdef.on_revise.step() else {
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
                    ok = false;
                    continue;
                };
                // an unknown target, or a gate revising to itself, is reported
                // with the revise gates
                let Some(reset) = fc.reset_of(g) else {
                    continue;
                };
                let closure = &reset.steps;
                let uses: Vec<(StepId, Span)> = fc
                    .carry_uses
                    .iter()
                    .filter(|(c, _, _)| *c == vi)
                    .map(|(_, s, sp)| (*s, *sp))
                    .collect();
                for (user, span) in uses {
                    let user_id = fc.flow.steps[user]
                        .id
                        .as_ref()
                        .map_or("?", |n| n.text.as_str())
                        .to_string();
                    if !closure[user] {
                        self.sink.push(
                            Diagnostic::new(Code::CarryReviseMissesConsumer, value.span, format!("step `{user_id}` reads `${{{name}}}`, but a revise of gate `{}` does not re-run it", gate.text))
                                .with_label(span, "read here")
                                .with_note(format!("a revise resets `{}` and the steps after it", target.text)),
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
                revs.push((g, r));
            }
            out.push(ir::CarryIr {
                name: name.to_string(),
                initial,
                on_revise: revs,
            });
        }
        ok.then_some(out)
    }
}
