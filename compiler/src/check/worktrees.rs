//! Consumer-dispatched worktree fanouts: no file predicates and no `exec`
//! checks (X12) in their stages (the engine cannot read the client's
//! worktrees) and a person's gate
//! right after them before anything is merged.
//!
//! Owns: reference v1-language §6.2 items 28–29.
//! Must never: check fanouts of the engine (nothing here applies to them).

use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;
use crate::syntax::ast::{self, PredicateKind, StepKind};

impl<'a> Checker<'a> {
    pub(super) fn consumer_worktrees(&mut self, fc: &mut FlowCtx<'a>) {
        for (i, s) in fc.flow.steps.iter().enumerate() {
            let StepKind::Fanout(f) = &s.kind else {
                continue;
            };
            let Some((ast::Isolation::Worktree, iso_span)) = f.isolation else {
                continue;
            };
            if f.dispatch != ast::Dispatch::Consumer || !fc.is_entry {
                continue;
            }
            for st in &f.stages {
                for p in &st.ensure {
                    let uses_fs = match &p.kind {
                        Some(PredicateKind::FileExists(_) | PredicateKind::FileContains { .. }) => {
                            true
                        }
                        Some(PredicateKind::Expr(e)) => calls_file_fn(&e.text),
                        _ => false,
                    };
                    if let Some(PredicateKind::Exec(ex)) = &p.kind {
                        self.sink.push(consumer_exec(ex.key));
                    } else if uses_fs {
                        self.sink.push(consumer_fs(p.span));
                    }
                }
                if let Some(w) = &st.when
                    && calls_file_fn(&w.text)
                {
                    self.sink.push(consumer_fs(w.span));
                }
            }
            let has_gate = fc.flow.steps.iter().enumerate().any(|(g, gs)| {
                matches!(gs.kind, StepKind::Gate(_))
                    && gs.when.is_none()
                    && !fc.graph.is_route_target(g)
                    && fc.graph.dependencies(g).any(|d| d == i)
            });
            if !has_gate {
                let id =
                    s.id.as_ref()
                        .map_or("this fanout", |n| n.text.as_str())
                        .to_string();
                self.sink.push(
                    Diagnostic::new(Code::ConsumerWorktreeGate, iso_span, format!("consumer-dispatched worktree fanout `{id}` needs a gate right after it"))
                        .with_note("the client's worktree changes are merged only after a person reviews them")
                        .with_help(format!("add a step `- {{id: review, after: [{id}], gate: {{on_approve: null, on_revise: null, on_kill: null}}}}`")),
                );
            }
        }
    }
}

fn consumer_fs(span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::ConsumerWorktreeFilesystem,
        span,
        "file predicates cannot be checked in a consumer-dispatched worktree fanout",
    )
    .with_note("the items run in the client's worktrees, which the engine cannot read")
    .with_help("check the result fields instead, or use `dispatch: engine`")
}

/// S0313 for an `exec` check (X12): like a file predicate, it reads the
/// item's worktree, which the engine does not have.
fn consumer_exec(span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::ConsumerWorktreeFilesystem,
        span,
        "an `exec` check cannot run in a consumer-dispatched worktree fanout",
    )
    .with_note("the items run in the client's worktrees; the engine would run the command on a tree the item did not change")
    .with_help("run the command after the fanout's merge, in a step of its own, or use `dispatch: engine`")
}

fn calls_file_fn(text: &str) -> bool {
    let (ast, errors) = stratum_grammar::parse_expr(text);
    if !errors.is_empty() {
        return false;
    }
    let mut found = false;
    if let Some(ast) = ast {
        stratum_grammar::walk(&ast, &mut |e| {
            if let stratum_grammar::ExprKind::Call { callee, .. } = &e.kind
                && matches!(
                    callee.as_str(),
                    "file_exists" | "file_contains" | "file" | "glob"
                )
            {
                found = true;
            }
        });
    }
    found
}
