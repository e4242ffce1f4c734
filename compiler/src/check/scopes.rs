//! X11 `scope` on `do` steps and fanout stages: its `files` and `create`
//! entries (templates and globs, a full reference may be a list of paths),
//! `max_changed_bytes`, and where `changes()` may be called.
//!
//! Owns: S0340 (an entry that does not render to a path or a list of paths),
//! S0341 (literal text that leaves the workspace, a glob that does not
//! parse), S0342 (`changes()` outside the ensures of a scoped step or
//! stage), S0343 (`max_changed_bytes` on a write fence that creates
//! nothing), S0344 (a `rollback` target that is not a scoped `do` step
//! finishing before the routing step, or the step itself).
//! Must never: check anything that needs the workspace (is it a git
//! repository): that is the run's start, not `check`.

use super::steps::PathList;
use super::template::StageScope;
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{self, StepId};
use crate::source::Span;
use crate::syntax::ast;

impl<'a> Checker<'a> {
    /// A step's or a stage's `scope` (X11): `Some(None)` without one,
    /// `None` when something in it is wrong (reported).
    pub(super) fn scope(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        scope: Option<&ast::Scope>,
        stage: &StageScope,
    ) -> Option<Option<ir::ScopeIr>> {
        let Some(sc) = scope else {
            return Some(None);
        };
        let files = self.path_entries(fc, i, &sc.files, stage, PathList::Scope("files"));
        let create = self.path_entries(fc, i, &sc.create, stage, PathList::Scope("create"));
        if let Some(m) = sc.max_changed_bytes
            && sc.files.is_empty()
            && sc.create.is_empty()
        {
            self.fenced_budget(sc.span, m.span);
        }
        Some(Some(ir::ScopeIr {
            files: files?,
            create: create?,
            max_changed_bytes: sc.max_changed_bytes.map(|m| m.value),
        }))
    }

    /// S0343: a byte cap on a dispatch that may change nothing.
    fn fenced_budget(&mut self, scope: Span, at: Span) {
        self.sink.push(
            Diagnostic::new(
                Code::FencedChangeBudget,
                at,
                "`max_changed_bytes` can never matter: `files: []` with no `create` lets the dispatch change nothing",
            )
            .with_label(scope, "this scope is a write fence")
            .with_note("any change under a write fence is a `scope_violation`, whatever its size")
            .with_help("remove `max_changed_bytes`, or list the files the step may change"),
        );
    }

    /// `rollback: STEP` on a route or an `on_fail` entry of step `i`: a
    /// `do` step with `scope`, or a fanout with scoped stages in the
    /// workspace tree, that is `i` itself or always finishes before it.
    pub(super) fn rollback_target(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        name: &ast::Name,
    ) -> Option<StepId> {
        let t = self.target(fc, name, "`rollback`")?;
        let step = &fc.flow.steps[t];
        // a scoped `do` step, or a fanout in the workspace tree whose stages
        // are scoped (its items' patches are in the log; worktree items' are not)
        let scoped = match &step.kind {
            ast::StepKind::Do(_) => step.scope.is_some(),
            ast::StepKind::Fanout(f) => {
                !matches!(f.isolation, Some((ast::Isolation::Worktree, _)))
                    && f.stages.iter().any(|s| s.scope.is_some())
            }
            _ => false,
        };
        let before = t == i || fc.graph.reaches(t, i, false);
        if scoped && before {
            return Some(t);
        }
        let why = if scoped {
            format!(
                "`{}` does not finish before this step, so nothing it did can be undone here",
                name.text
            )
        } else {
            format!(
                "`{}` is neither a `do` step with `scope` nor a fanout with scoped stages in the workspace tree, so it has no snapshot to roll back to",
                name.text
            )
        };
        self.sink.push(
            Diagnostic::new(Code::RollbackTarget, name.span, format!("this `rollback` cannot be done: {why}"))
                .with_span_label("the rollback target")
                .with_note("a rollback restores the files changed by the accepted dispatches from the target's latest entry on to that entry's snapshot; only scoped steps take snapshots")
                .with_help("name the routing step itself or a scoped `do` step (or fanout of scoped stages) it comes after, e.g. the step that applied the patch"),
        );
        None
    }

    /// S0342: `changes()` where no dispatch's changes are known.
    pub(super) fn changes_outside_scope(&mut self, at: Span, field: &str) {
        self.sink.push(
            Diagnostic::new(
                Code::ChangesOutsideScope,
                at,
                if field == "ensure" {
                    "`changes()` is only known in the `ensure` of a step or stage with `scope`, and this one has no `scope`".to_string()
                } else {
                    format!("`changes()` is only known in the `ensure` of a step or stage with `scope`, not in `{field}`")
                },
            )
            .with_span_label("no dispatch's changes are recorded here")
            .with_note("`changes()` lists the files a dispatch changed since its snapshot, which is taken only for scoped dispatches")
            .with_help("add `scope: {files: [...]}` to the step and call `changes()` in its `ensure`"),
        );
    }
}
