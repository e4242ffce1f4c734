//! `on_fail: continue` (language 1.1 X2): which steps continue past their
//! failure, the name clash with a step called `continue`, and reads of a
//! continuing step's output that do not check its status.
//!
//! Owns: S0317 (a step named `continue` beside `on_fail: continue`) and
//! S0412 (an unguarded read of a continuing step's output); the one
//! definition of "this `on_fail` means continue" ([`is_continue`]).
//! Must never: resolve routes or type references (`mod.rs`, `template`,
//! `expr` record the reads this module judges), or refuse a spec for an
//! unguarded read (it is a warning).

use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
use crate::ir::StepId;
use crate::source::Span;
use crate::syntax::ast;

/// A read of a step's output by a later step (a `${<id>.output}`
/// reference, `result.<id>` or `steps.<id>.output`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutputRead {
    /// The reading step.
    pub reader: StepId,
    /// The step whose output is read.
    pub step: StepId,
    /// Where.
    pub span: Span,
    /// Inside `coalesce(...)`, which handles `null`.
    pub guarded: bool,
}

/// The keyword.
pub(crate) const CONTINUE: &str = "continue";

/// Whether `on_fail: <name>` means "continue" in this flow: the name is
/// `continue` and no step of the flow is called so (that clash is S0317).
pub(super) fn is_continue(fc: &FlowCtx<'_>, name: &ast::Name) -> bool {
    name.text == CONTINUE && !fc.index.contains_key(CONTINUE)
}

/// Whether step `s` says `on_fail: continue` (whatever the clash).
pub(super) fn says_continue(s: &ast::Step) -> bool {
    s.on_fail_names().any(|n| n.text == CONTINUE)
}

impl Checker<'_> {
    /// The X2 checks of one flow, once its steps are checked.
    pub(super) fn continues(&mut self, fc: &FlowCtx<'_>) {
        let users: Vec<&ast::Step> = fc.flow.steps.iter().filter(|s| says_continue(s)).collect();
        if users.is_empty() {
            return;
        }
        if let Some(&named) = fc.index.get(CONTINUE) {
            let id = fc.flow.steps[named]
                .id
                .as_ref()
                .map_or(fc.flow.steps[named].span, |n| n.span);
            let mut d = Diagnostic::new(
                Code::ContinueStepName,
                id,
                format!("flow `{}` has a step named `continue` and uses `on_fail: continue`", fc.flow.name.text),
            )
            .with_span_label("this step")
            .with_note("since language 1.1, `on_fail: continue` lets the flow go on after a failure; it no longer names a step")
            .with_help("rename this step (for example `recover`) and the routes that name it");
            for u in &users {
                for n in u.on_fail_names().filter(|n| n.text == CONTINUE) {
                    d = d.with_label(n.span, "`on_fail: continue` here");
                }
            }
            self.sink.push(d);
            return;
        }
        for read in &fc.output_reads {
            if read.guarded || !says_continue(&fc.flow.steps[read.step]) {
                continue;
            }
            if fc.status_guards.contains(&(read.reader, read.step)) {
                continue;
            }
            let id = fc.flow.steps[read.step]
                .id
                .as_ref()
                .map_or("", |n| n.text.as_str());
            let reader = fc.flow.steps[read.reader]
                .id
                .as_ref()
                .map_or("this step", |n| n.text.as_str());
            self.sink.push(
                Diagnostic::new(
                    Code::UnguardedContinueOutput,
                    read.span,
                    format!("`{reader}` reads the output of `{id}`, which may have failed (`on_fail: continue`): it is then `null`"),
                )
                .with_note(format!("`{id}` ends `failed` when its attempts run out, and the steps after it still run"))
                .with_help(format!("guard `{reader}` with `when: \"steps.{id}.status == 'succeeded'\"`, or handle `null` with `coalesce(...)`")),
            );
        }
    }
}
