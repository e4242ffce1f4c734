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

use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::{self, Piece, StepId};
use crate::source::Span;
use crate::syntax::ast;
use crate::types::Type;
use crate::yaml::Str;

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
        let files = self.scope_entries(fc, i, &sc.files, stage, "files");
        let create = self.scope_entries(fc, i, &sc.create, stage, "create");
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

    /// `files` or `create` entries: each a template that renders to a path
    /// (a full reference may be a list of paths), or a glob when its
    /// literal text has `*`, `?` or `[`.
    fn scope_entries(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        entries: &[Str],
        stage: &StageScope,
        key: &str,
    ) -> Option<Vec<ir::ArtifactIr>> {
        let leaf = if stage.item.is_some() {
            Leaf::StageArtifact
        } else {
            Leaf::Artifact
        };
        let mut out = Vec::new();
        let mut ok = true;
        for e in entries {
            let Some(template) = self.template(fc, Some(i), e, leaf, stage) else {
                ok = false;
                continue;
            };
            let literal: String = template
                .pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Text(t) => Some(t.as_str()),
                    Piece::Ref(_) => None,
                })
                .collect();
            let glob = stratum_vm::host::glob::is_glob(&literal);
            if !self.scope_entry_fits(e, &template, glob, key) {
                ok = false;
                continue;
            }
            out.push(ir::ArtifactIr { template, glob });
        }
        ok.then_some(out)
    }

    /// S0340 and S0341 for one entry; true when it is fine.
    fn scope_entry_fits(&mut self, e: &Str, t: &ir::TemplateIr, glob: bool, key: &str) -> bool {
        if t.full_value
            && let Some(Piece::Ref(r)) = t.pieces.first()
        {
            let fits = match &r.ty {
                Type::List(inner) => inner.is_stringy() || **inner == Type::Any,
                ty => ty.is_stringy() || *ty == Type::Any,
            };
            if !fits {
                let shown = self.types.display(&r.ty);
                self.sink.push(
                    Diagnostic::new(Code::ScopeNotPath, r.span, format!("a `scope.{key}` entry must render to a path or a list of paths, but this reference is {shown}"))
                        .with_span_label(format!("this is {shown}"))
                        .with_note("a full reference may be a string or a string list (`string[]`), e.g. the files a planning step named")
                        .with_help("reference a string or string-list field, e.g. `${patch_plan.output.files}`"),
                );
                return false;
            }
            return true;
        }
        let text: String = t
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Ref(_) => "x",
            })
            .collect();
        let leaves = text.starts_with('/') || text.split(['/', '\\']).any(|c| c == "..");
        let problem = if leaves {
            Some("it leaves the workspace (absolute, or with `..`)".to_string())
        } else if glob {
            stratum_vm::host::glob::compile(&text)
                .err()
                .map(|e| e.to_string())
        } else {
            None
        };
        let Some(problem) = problem else {
            return true;
        };
        self.sink.push(
            Diagnostic::new(Code::InvalidScopePath, e.span, format!("the `scope.{key}` entry `{}` is not usable: {problem}", e.text))
                .with_note("scope entries are paths or globs relative to the git working tree (or the item's worktree); `*` and `?` stay in one directory, `**` crosses directories")
                .with_help("write a relative path such as `src/lib.rs` or a glob such as `src/**/*.rs`"),
        );
        false
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
