//! Routes (X9): `route` entries on `do`, `set`, `run` and `fanout` steps —
//! the `goto` target is a strict ancestor of the routing step, `when` is a
//! condition over the step's own output (`result`), `input` and `steps`, and
//! the `note`/`fail` templates may read the step's own output (without
//! making an edge) and steps that finish before it.
//!
//! Owns: the rules of one step's `route` list and its IR.
//! Must never: compute the region a `goto` resets (`graph` does, once, into
//! `FlowCtx::resets`) or add graph edges (a route is a back edge).

use super::expr::{Role, Scope};
use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{self, Piece, RefTarget, StepId, TemplateIr};
use crate::syntax::ast::{RouteEntry, RouteEntryAction};
use crate::types::Type;
use crate::yaml::Str;

impl<'a> Checker<'a> {
    /// The checked `route` entries of step `i`; `None` when any is wrong.
    pub(super) fn routes(&mut self, fc: &mut FlowCtx<'a>, i: StepId) -> Option<Vec<ir::RouteIr>> {
        let entries: &'a [RouteEntry] = &fc.flow.steps[i].routes;
        let mut out = Vec::new();
        let mut ok = true;
        for e in entries {
            match self.route(fc, i, e) {
                Some(r) => out.push(r),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn route(&mut self, fc: &mut FlowCtx<'a>, i: StepId, e: &'a RouteEntry) -> Option<ir::RouteIr> {
        let result = match &fc.outputs[i] {
            StepOut::Known(t) => t.clone(),
            _ => Type::Any,
        };
        let scope = Scope {
            field: "route.when",
            role: Role::Condition,
            result,
            item: None,
            prev: None,
            reader: i,
        };
        let when = self.expr(fc, &e.when, &scope);
        let action = match &e.action {
            RouteEntryAction::Goto { target, max, note } => {
                let t = self.goto_target(fc, i, target);
                let note = match note {
                    Some(n) => Some(self.route_text(fc, i, n, "`note`")),
                    None => None,
                };
                let note = match note {
                    Some(n) => Some(n?),
                    None => None,
                };
                ir::RouteActionIr::Goto {
                    target: t?,
                    max: max.value,
                    note,
                }
            }
            RouteEntryAction::Fail(reason) => {
                ir::RouteActionIr::Fail(self.route_text(fc, i, reason, "`fail`")?)
            }
        };
        Some(ir::RouteIr {
            span: e.span,
            when: when?,
            action,
        })
    }

    /// `goto`: a step of the flow that always comes before step `i`.
    fn goto_target(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        target: &crate::syntax::ast::Name,
    ) -> Option<StepId> {
        let t = self.target(fc, target, "`route.goto`")?;
        let id = fc.flow.steps[i]
            .id
            .as_ref()
            .map_or("this step", |n| n.text.as_str())
            .to_string();
        if t == i {
            self.sink.push(
                Diagnostic::new(Code::RouteNotAncestor, target.span, format!("step `{id}` routes back to itself"))
                    .with_note("a route goes back to an earlier step; to run one step again until its output is right, use `iterate`")
                    .with_help("go back to the step whose work this step judges"),
            );
            return None;
        }
        if !fc.graph.reaches(t, i, false) {
            self.sink.push(
                Diagnostic::new(Code::RouteNotAncestor, target.span, format!("`{}` does not come before step `{id}`, so its route cannot go back to it", target.text))
                    .with_note("a route goes back to a strict ancestor and runs it and everything after it again")
                    .with_help(format!("add `{}` to the `after` list of `{id}`, or go back to a step that does come before it", target.text)),
            );
            return None;
        }
        Some(t)
    }

    /// A `note` or `fail` template: rendered as text; it may read the
    /// step's own output, and other steps only when they finish before it.
    fn route_text(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        s: &Str,
        what: &str,
    ) -> Option<TemplateIr> {
        let t = self.template(fc, None, s, Leaf::Task, &StageScope::default())?;
        let mut ok = true;
        for p in &t.pieces {
            let Piece::Ref(r) = p else { continue };
            let src = match r.target {
                RefTarget::Step(src) | RefTarget::State(src, _) => src,
                _ => continue,
            };
            if src == i || fc.is_dependency_ancestor(src, i) {
                continue;
            }
            ok = false;
            let name = fc.flow.steps[src]
                .id
                .as_ref()
                .map_or("?", |n| n.text.as_str())
                .to_string();
            let id = fc.flow.steps[i]
                .id
                .as_ref()
                .map_or("this step", |n| n.text.as_str())
                .to_string();
            self.sink.push(
                Diagnostic::new(Code::UnorderedStepRead, r.span, format!("a route's {what} reads `{name}`, but `{name}` may not have finished when `{id}` routes"))
                    .with_note("a route's templates may read the step's own output, `input`, and the steps it comes after")
                    .with_help(format!("add `{name}` to the `after` list of `{id}`")),
            );
        }
        ok.then_some(t)
    }
}
