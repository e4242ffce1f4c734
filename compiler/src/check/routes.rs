//! Routes (X9): `route` entries on `do`, `set`, `run` and `fanout` steps —
//! the `goto` target is a strict ancestor of the routing step, `when` is a
//! condition over the step's own output (`result`), `input` and `steps`, and
//! the `note`/`fail` templates may read the step's own output (without
//! making an edge) and steps that finish before it.
//!
//! The same back edge on failure: an `on_fail` entry `{when?, goto, max,
//! note?}` (its `when` reads `failure`), besides the plain `STEP` and
//! `continue` entries a list of them may hold.
//!
//! Owns: the rules of one step's `route` list and `on_fail` entries, and
//! their IR.
//! Must never: compute the region a `goto` resets (`graph` does, once, into
//! `FlowCtx::resets`) or add graph edges (a route is a back edge).

use super::expr::{Role, Scope};
use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{self, Piece, RefTarget, StepId, TemplateIr};
use crate::syntax::ast::{OnFailAction, OnFailEntry, RouteEntry, RouteEntryAction};
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
            failure: false,
        };
        let when = self.expr(fc, &e.when, &scope);
        let action = match &e.action {
            RouteEntryAction::Goto { target, max, note } => {
                let t = self.goto_target(fc, i, target);
                let note = note.as_ref().map(|n| self.route_text(fc, i, n, "`note`"));
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
        let rollback = match &e.rollback {
            Some(r) => Some(self.rollback_target(fc, i, r)?),
            None => None,
        };
        Some(ir::RouteIr {
            span: e.span,
            when: when?,
            action,
            rollback,
        })
    }

    /// The checked X9 `on_fail` entries of step `i` (empty for the plain
    /// `on_fail: STEP` / `continue`, which the IR keeps apart); `None`
    /// when any is wrong. The names of `STEP` entries were resolved (and
    /// reported) with the graph's edges.
    pub(super) fn on_fail_routes(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
    ) -> Option<Vec<ir::OnFailIr>> {
        let step = &fc.flow.steps[i];
        if step.on_fail.is_empty() || step.plain_on_fail().is_some() {
            return Some(Vec::new());
        }
        let entries: &'a [OnFailEntry] = &fc.flow.steps[i].on_fail;
        let mut out = Vec::new();
        let mut ok = true;
        for e in entries {
            match self.on_fail_entry(fc, i, e) {
                Some(r) => out.push(r),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// The checked `on_fail` entries of a stage of fanout step `i` (X9):
    /// the step's rules (a `goto` names a strict ancestor of the fanout
    /// step), and only `continue` and `goto` entries (S0345).
    pub(super) fn stage_on_fail(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        entries: &'a [OnFailEntry],
    ) -> Option<Vec<ir::OnFailIr>> {
        let mut out = Vec::new();
        let mut ok = true;
        for e in entries {
            let refused = match (&e.action, &e.rollback) {
                (_, Some(r)) => Some((
                    r.span,
                    "`rollback` in a fanout stage's `on_fail`".to_string(),
                )),
                (OnFailAction::Step(n), None) if !super::continues::is_continue(fc, n) => Some((
                    n.span,
                    format!(
                        "a fanout stage's `on_fail` names the recovery step `{}`",
                        n.text
                    ),
                )),
                _ => None,
            };
            if let Some((span, what)) = refused {
                self.sink.push(
                    Diagnostic::new(Code::StageOnFailForm, span, what)
                        .with_note("a stage's `on_fail` is tried for one item: it takes `continue` and `{goto: STEP, max: N}` entries (a recovery step runs once for the flow, and rolling back from a stage is not built)")
                        .with_help("put the recovery step (or the rollback) on the fanout step's own `on_fail`, or write `continue` or a `goto` here"),
                );
                ok = false;
                continue;
            }
            match self.on_fail_entry(fc, i, e) {
                Some(r) => out.push(r),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn on_fail_entry(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        e: &'a OnFailEntry,
    ) -> Option<ir::OnFailIr> {
        let scope = Scope {
            field: "on_fail.when",
            role: Role::Condition,
            result: Type::Any,
            item: None,
            prev: None,
            reader: i,
            failure: true,
        };
        let when = e.when.as_ref().map(|w| self.expr(fc, w, &scope));
        let action = match &e.action {
            OnFailAction::Step(n) if super::continues::is_continue(fc, n) => {
                ir::OnFailActionIr::Continue
            }
            OnFailAction::Step(n) => ir::OnFailActionIr::Step(*fc.index.get(n.text.as_str())?),
            OnFailAction::Goto { target, max, note } => {
                let t = self.goto_target(fc, i, target);
                let note = match note {
                    Some(n) => Some(self.route_text(fc, i, n, "`note`")?),
                    None => None,
                };
                ir::OnFailActionIr::Goto {
                    target: t?,
                    max: max.value,
                    note,
                }
            }
            OnFailAction::Fail => ir::OnFailActionIr::Fail,
        };
        let rollback = match &e.rollback {
            Some(r) => Some(self.rollback_target(fc, i, r)?),
            None => None,
        };
        Some(ir::OnFailIr {
            rollback,
            span: e.span,
            when: match when {
                Some(w) => Some(w?),
                None => None,
            },
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
