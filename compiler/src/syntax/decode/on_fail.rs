//! Decoding `on_fail`: v1's `STEP`, X2's `continue`, X9's `{goto: STEP,
//! max: N, note?}` (a back edge on failure), or a list of such entries,
//! each `{…}` entry with an optional `when` over `failure`, tried in order.
//!
//! Owns: the shape of `on_fail` and of each entry (`max` with `goto`,
//! `rollback: STEP` (X11) beside `goto`, or alone: restore then fail), and the rule that nothing
//! follows an entry that always handles the failure.
//! Must never: resolve names (whether `continue` names a step, whether the
//! `goto` target is an ancestor) or type `when` (that is `check`).

use super::{Decoder, ON_FAIL_FIELDS};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{OnFailAction, OnFailEntry};
use crate::yaml::{Node, Value};

impl Decoder<'_> {
    /// The entries of `on_fail` and whether it was written as a list; each
    /// broken entry is reported and left out.
    pub(super) fn on_fail(&mut self, node: &Node) -> (Vec<OnFailEntry>, bool) {
        let Value::Sequence(items) = &node.value else {
            return (self.on_fail_entry(node).into_iter().collect(), false);
        };
        if items.is_empty() {
            self.sink.push(
                Diagnostic::new(Code::OnFailShape, node.span, "`on_fail` is an empty list")
                    .with_help("leave `on_fail` out (a failure then fails the flow), or list at least one entry"),
            );
        }
        let mut out: Vec<OnFailEntry> = Vec::new();
        for item in items {
            let Some(e) = self.on_fail_entry(item) else {
                continue;
            };
            if let Some(prev) = out.iter().find(|p| always_handles(p)) {
                let OnFailAction::Step(n) = &prev.action else {
                    continue;
                };
                self.sink.push(
                    Diagnostic::new(Code::OnFailShape, e.span, "this `on_fail` entry is never tried")
                        .with_label(prev.span, format!("`{}` always handles the failure", n.text))
                        .with_note("entries are tried in order and a `STEP` or `continue` entry takes every failure that reaches it")
                        .with_help("move this entry before it, or remove it"),
                );
                continue;
            }
            out.push(e);
        }
        (out, true)
    }

    fn on_fail_entry(&mut self, node: &Node) -> Option<OnFailEntry> {
        match &node.value {
            Value::String(_) => {
                let n = self.step_id(node, "`on_fail`")?;
                Some(OnFailEntry {
                    span: node.span,
                    when: None,
                    action: OnFailAction::Step(n),
                    rollback: None,
                })
            }
            Value::Mapping(_) => self.on_fail_goto(node),
            _ => {
                self.wrong_type(
                    node,
                    "a step id, `continue`, `{goto, max}` or a list of them",
                    "`on_fail`",
                );
                None
            }
        }
    }

    /// `{when?, goto, max, note?}`.
    fn on_fail_goto(&mut self, node: &Node) -> Option<OnFailEntry> {
        let obj = self.obj(node, "an `on_fail` entry", None)?;
        self.strict(&obj, ON_FAIL_FIELDS, "an `on_fail` entry");
        let rollback = obj.get("rollback");
        let rollback_step = rollback.and_then(|r| self.step_id(&r.value, "`on_fail.rollback`"));
        let when = obj
            .get("when")
            .and_then(|w| self.string(&w.value, "`on_fail.when`"));
        let Some(g) = obj.get("goto") else {
            if rollback.is_none() {
                self.sink.push(
                    Diagnostic::new(Code::OnFailShape, obj.owner, "an `on_fail` entry without `goto`")
                        .with_note("an `on_fail` mapping goes back to an earlier step (`{goto: STEP, max: N, note?}`) or restores the tree and fails (`{rollback: STEP}`)")
                        .with_help("add `goto: <step>` with `max: N`, or write the recovery step's id (or `continue`) as a plain string"),
                );
                return None;
            }
            if let Some(m) = obj.get("max").or(obj.get("note")) {
                self.sink.push(
                    Diagnostic::new(Code::OnFailShape, m.key.span, "`max` and `note` belong to a `goto`")
                        .with_note("`{rollback: STEP}` alone restores the tree and fails the step; nothing is re-entered")
                        .with_help("add `goto: <step>` to go back after the rollback, or remove this key"),
                );
            }
            // X9/X11: `{rollback}` alone restores the tree, then fails
            return Some(OnFailEntry {
                span: node.span,
                when,
                action: OnFailAction::Fail,
                rollback: Some(rollback_step?),
            });
        };
        let target = self.step_id(&g.value, "`on_fail.goto`");
        let max = match obj.get("max") {
            Some(m) => self.positive_int(&m.value, "`on_fail.max`"),
            None => {
                self.sink.push(
                    Diagnostic::new(Code::RouteNeedsMax, g.key.span, "an `on_fail` `goto` without `max`")
                        .with_note("`max` bounds how often this failure may go back in the whole run; a back edge without one could loop forever")
                        .with_help("add `max: 2` (or the number of rounds you can afford) to this entry"),
                );
                None
            }
        };
        let note = obj
            .get("note")
            .and_then(|n| self.string(&n.value, "`on_fail.note`"));
        Some(OnFailEntry {
            span: node.span,
            when,
            action: OnFailAction::Goto {
                target: target?,
                max: max?,
                note,
            },
            rollback: rollback_step,
        })
    }
}

/// Whether entry `e` takes every failure that reaches it: a `STEP`,
/// `continue` or `{rollback}` entry (a `goto` may be spent, and then the
/// next is tried).
fn always_handles(e: &OnFailEntry) -> bool {
    e.when.is_none() && matches!(e.action, OnFailAction::Step(_) | OnFailAction::Fail)
}
