//! Routes (X9): a step's `route` entries, tried in order once it succeeded.
//! The first whose `when` holds fires: `goto` counts a run-wide firing,
//! resets the target's closure (precomputed in the plan) and re-enters the
//! target with `previousRoute`; `fail` fails the step with the rendered
//! reason. A spent `goto` fails the step `route_exhausted`, a `when` (or a
//! template) that errors fails it `route_error`; either failure is routed by
//! `on_fail` like any.
//!
//! Owns: evaluating a step's routes and what a firing does to the run.
//! Must never: decide anything about success itself (`attempt` does) or
//! give a firing back (counters live in the run header, outside what resets
//! and checkpoint reverts restore).

use serde_json::{Value, json};

use super::Transition;
use super::values::ResultSel;
use crate::eval::value::type_name;
use crate::interp::{EventKind, Failure, PreviousRoute, StepAt, route_key};
use crate::plan::RouteAction;

/// Reason of a failure when a `goto` route has fired its `max` times.
pub const ROUTE_EXHAUSTED: &str = "route_exhausted";
/// Reason of a failure when a route's `when` or template errors.
pub const ROUTE_ERROR: &str = "route_error";

/// What a step's routes decided after it succeeded.
pub(super) enum Routed {
    /// No route fired: the step just succeeded.
    Through,
    /// A `goto` fired (counted already): reset and re-enter once the
    /// success is recorded.
    Back(Back),
    /// The step fails instead (a `fail` route, `route_exhausted`, `route_error`).
    Fail(Failure),
}

/// A `goto` that fired.
pub(super) struct Back {
    route: u32,
    target: u32,
    count: u32,
    max: u32,
    note: Option<String>,
}

impl Transition<'_> {
    /// Tries the routes of step `at`, whose `output` is recorded in its
    /// row (templates read it). Counts the firing of a `goto`.
    pub(super) fn route_after(&mut self, at: StepAt, output: &Value) -> Routed {
        let routes = &self.def(at).routes;
        let attempt = self.st(at).attempts.max(1);
        for (k, r) in routes.iter().enumerate() {
            let n = k as u32 + 1;
            match self.route_holds(at, r.when, output) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(why) => return Routed::Fail(self.route_error(at, attempt, n, r.when, why)),
            }
            return match r.action {
                RouteAction::Fail { reason } => match self.route_text(at, reason) {
                    Ok(text) => Routed::Fail(Failure {
                        attempt,
                        reason: text,
                        violations: vec![json!({"kind": "route_fail", "route": n})],
                    }),
                    Err(why) => Routed::Fail(self.route_error(at, attempt, n, r.when, why)),
                },
                RouteAction::Goto { target, max, note } => {
                    self.goto(at, attempt, (k as u32, target, max, note))
                }
            };
        }
        Routed::Through
    }

    /// `goto` entry `k` (0-based) of step `at`: counted, unless spent.
    fn goto(&mut self, at: StepAt, attempt: u32, entry: (u32, u32, u32, Option<u32>)) -> Routed {
        let (k, target, max, note) = entry;
        let key = route_key(self.frame(at.frame).flow, at.step, k);
        let fired = self.run.header.routes_fired.get(&key).copied().unwrap_or(0);
        let to = self.own_id(at.sibling(target)).to_string();
        if fired >= max {
            let id = self.own_id(at);
            return Routed::Fail(Failure {
                attempt,
                reason: format!(
                    "{ROUTE_EXHAUSTED}: route {} of step `{id}` (goto `{to}`) has fired its max of {max} in this run",
                    k + 1
                ),
                violations: vec![
                    json!({"kind": ROUTE_EXHAUSTED, "route": k + 1, "goto": to, "max": max}),
                ],
            });
        }
        let note = match note.map(|t| self.route_text(at, t)).transpose() {
            Ok(n) => n,
            Err(why) => {
                let when = self.def(at).routes[k as usize].when;
                return Routed::Fail(self.route_error(at, attempt, k + 1, when, why));
            }
        };
        // X11: the workspace goes back first; a conflict fails the step instead
        if let Some(to) = self.def(at).routes[k as usize].rollback
            && let Err(f) = self.rollback(at, to, attempt)
        {
            return Routed::Fail(f);
        }
        self.run.header.routes_fired.insert(key, fired + 1);
        Routed::Back(Back {
            route: k + 1,
            target,
            count: fired + 1,
            max,
            note,
        })
    }

    /// Goes back: the event, the reset of the target's closure, and the
    /// target's `previousRoute`.
    pub(super) fn route_back(&mut self, at: StepAt, back: Back, output: Value) {
        let kind = EventKind::RoutedBack {
            route: back.route,
            from: self.own_id(at).to_string(),
            to: self.own_id(at.sibling(back.target)).to_string(),
            count: back.count,
            max: back.max,
            note: back.note.clone(),
            on_fail: false,
        };
        self.event(kind, Some(self.sid(at)));
        self.reset(at, back.target, "route");
        let previous = PreviousRoute {
            from: self.own_id(at).to_string(),
            note: back.note,
            output,
            failure: None,
        };
        self.st_mut(at.sibling(back.target)).previous_route = Some(previous);
    }

    fn route_holds(&mut self, at: StepAt, when: u32, output: &Value) -> Result<bool, String> {
        let by = self.sid(at);
        match self.run_chunk(&by, at.frame, when, ResultSel::Value(output), None, None)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "type_error: a route condition must evaluate to boolean, received {}",
                type_name(&other)
            )),
        }
    }

    /// A `note` or `fail` template rendered as text.
    fn route_text(&self, at: StepAt, t: u32) -> Result<String, String> {
        Ok(match self.render(at.frame, t, None, None)? {
            Value::String(s) => s,
            other => other.to_string(),
        })
    }

    fn route_error(&self, at: StepAt, attempt: u32, route: u32, when: u32, why: String) -> Failure {
        let source = self
            .plan
            .str(self.flow(at.frame).chunks[when as usize].source)
            .to_string();
        Failure {
            attempt,
            reason: format!("{ROUTE_ERROR}: route {route} ({source:?}): {why}"),
            violations: vec![
                json!({"kind": ROUTE_ERROR, "route": route, "expr": source, "reason": why}),
            ],
        }
    }
}
