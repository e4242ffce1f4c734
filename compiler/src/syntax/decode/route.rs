//! Decoding `route` (X9): a list of `{when, goto, max, note?}` and
//! `{when, fail}` entries on `do`, `set`, `run` and `fanout` steps.
//!
//! Owns: the shape of one entry (exactly one of `goto` and `fail`, `max`
//! with `goto`, and `rollback: STEP` (X11), checked in `check`).
//! Must never: resolve the `goto` target or type `when` (that is `check`).

use super::{Decoder, ROUTE_FIELDS};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{RouteEntry, RouteEntryAction};
use crate::yaml::{Node, Value};

impl Decoder<'_> {
    /// The entries of `route:`, each broken entry reported and left out.
    pub(super) fn routes(&mut self, node: &Node) -> Vec<RouteEntry> {
        let Value::Sequence(items) = &node.value else {
            self.wrong_type(node, "a list of route entries", "`route`");
            return Vec::new();
        };
        items.iter().filter_map(|i| self.route_entry(i)).collect()
    }

    fn route_entry(&mut self, item: &Node) -> Option<RouteEntry> {
        let obj = self.obj(item, "a `route` entry", None)?;
        self.strict(&obj, ROUTE_FIELDS, "a `route` entry");
        let rollback = obj
            .get("rollback")
            .and_then(|r| self.step_id(&r.value, "`route.rollback`"));
        let when = self
            .required(&obj, "when", "a `route` entry")
            .and_then(|w| self.string(&w.value, "`route.when`"));
        let goto = obj.get("goto");
        let fail = obj.get("fail");
        let action = match (goto, fail) {
            (Some(g), None) => {
                let target = self.step_id(&g.value, "`route.goto`");
                let max = match obj.get("max") {
                    Some(m) => self.positive_int(&m.value, "`route.max`"),
                    None => {
                        self.sink.push(
                            Diagnostic::new(Code::RouteNeedsMax, g.key.span, "a `goto` route without `max`")
                                .with_note("`max` bounds how often this route may fire in the whole run; a back edge without one could loop forever")
                                .with_help("add `max: 2` (or the number of rounds you can afford) to this entry"),
                        );
                        None
                    }
                };
                let note = obj
                    .get("note")
                    .and_then(|n| self.string(&n.value, "`route.note`"));
                RouteEntryAction::Goto {
                    target: target?,
                    max: max?,
                    note,
                }
            }
            (None, Some(f)) => {
                for k in ["max", "note"] {
                    if let Some(e) = obj.get(k) {
                        self.sink.push(
                            Diagnostic::new(
                                Code::RouteShape,
                                e.key.span,
                                format!("a `fail` route does not take `{k}`"),
                            )
                            .with_note("`max` and `note` belong to `goto` routes")
                            .with_help(format!("remove `{k}`")),
                        );
                    }
                }
                RouteEntryAction::Fail(self.string(&f.value, "`route.fail`")?)
            }
            (Some(g), Some(_)) => {
                self.sink.push(
                    Diagnostic::new(
                        Code::RouteShape,
                        g.key.span,
                        "a `route` entry has both `goto` and `fail`",
                    )
                    .with_help("split it into two entries: the first true `when` fires"),
                );
                return None;
            }
            (None, None) => {
                self.sink.push(
                    Diagnostic::new(
                        Code::RouteShape,
                        obj.owner,
                        "a `route` entry has neither `goto` nor `fail`",
                    )
                    .with_help("add `goto: <step>` with `max: N`, or `fail: \"<reason>\"`"),
                );
                return None;
            }
        };
        Some(RouteEntry {
            span: item.span,
            when: when?,
            action,
            rollback,
        })
    }
}
