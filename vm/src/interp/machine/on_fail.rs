//! `on_fail`: what a step that failed for good does with its failure — v1's
//! recovery step, X2's `continue`, and X9's entries (a `goto` back to a
//! strict ancestor, at most `max` times in the run; `{rollback}` alone,
//! which restores the tree and fails; a list of entries, each with an
//! optional `when` over `failure`, tried in order).
//!
//! Fanout stages take the same entries (X9, issue 15): when an item's
//! attempts at a stage run out, the stage's `on_fail` is tried the same way;
//! `continue` ends the item failed-but-handled (its later stages do not run,
//! `require` counts it as met), a `goto` routes the whole fanout's failure
//! back to a strict ancestor of the fanout step (its reset closure holds
//! the fanout, so every item starts again).
//!
//! Owns: the on_fail routing rule, in one place — which entry takes the
//! failure (the plain forms first; then the X9 entries in order; a `when`
//! that does not hold, or a spent `goto`, passes to the next entry) and
//! what taking it does to the run, for steps and for fanout stages.
//! Must never: decide that a step failed (`attempt` does), fail the parent
//! or the run (`exhaust` does when no entry takes the failure), or give a
//! firing back (counters live in the run header, like routes').

use serde_json::{Value, json};

use super::Transition;
use super::routes::{ROUTE_ERROR, ROUTE_EXHAUSTED};
use super::values::ResultSel;
use crate::eval::value::type_name;
use crate::interp::{EventKind, Failure, PreviousRoute, StepAt, on_fail_key, stage_on_fail_key};
use crate::plan::{OnFailAction, OnFailDef, StepKindDef};

/// Which `on_fail` entry took a failure.
enum Taken {
    /// A recovery step (v1).
    Step(u32),
    /// The flow goes on (X2).
    Continue,
    /// Back to a strict ancestor (X9), counted already.
    Goto {
        /// 1-based index of the entry in `on_fail`.
        entry: u32,
        target: u32,
        count: u32,
        max: u32,
        note: Option<String>,
    },
}

impl Transition<'_> {
    /// Routes the failure of step `at` (failed for good, its row already
    /// says so) by its `on_fail`. `Err` gives the failure back when no entry
    /// takes it (reworded when a `goto` was spent or a `when` errored): the
    /// step then fails its parent or the run.
    pub(super) fn route_failure(&mut self, at: StepAt, failure: Failure) -> Result<(), Failure> {
        let (taken, failure) = self.take_failure(at, failure)?;
        match taken {
            Taken::Step(target) => {
                let target = at.sibling(target);
                self.st_mut(at).handled = true;
                self.st_mut(target).routed = Some(failure.clone());
                let kind = EventKind::Routed {
                    target: self.own_id(target).to_string(),
                    failure,
                };
                self.event(kind, Some(self.sid(at)));
                self.queue.push_back(target);
                self.enqueue_succ(at);
            }
            Taken::Continue => {
                // X2: the failure is handled and the flow goes on; dependents run
                let st = self.st_mut(at);
                st.handled = true;
                st.continued = true;
                self.event(EventKind::StepContinued { failure }, Some(self.sid(at)));
                self.enqueue_succ(at);
            }
            Taken::Goto {
                entry,
                target,
                count,
                max,
                note,
            } => self.go_back(at, (entry, target, count, max), note, failure),
        }
        Ok(())
    }

    /// A `goto` entry took the failure of step `at` (or of one of its
    /// items): `routed_back`, the reset of the target's closure (which holds
    /// `at`, so it runs again) and the target's `previousRoute`.
    fn go_back(
        &mut self,
        at: StepAt,
        (entry, target, count, max): (u32, u32, u32, u32),
        note: Option<String>,
        failure: Failure,
    ) {
        let kind = EventKind::RoutedBack {
            route: entry,
            from: self.own_id(at).to_string(),
            to: self.own_id(at.sibling(target)).to_string(),
            count,
            max,
            note: note.clone(),
            on_fail: true,
        };
        self.event(kind, Some(self.sid(at)));
        self.reset(at, target, "on_fail");
        let previous = PreviousRoute {
            from: self.own_id(at).to_string(),
            note,
            output: Value::Null,
            failure: Some(failure),
        };
        self.st_mut(at.sibling(target)).previous_route = Some(previous);
    }

    /// Routes the failure of item `k` of fanout `at` at its current stage
    /// (its attempts there ran out; the item's row says `failed`) by the
    /// stage's `on_fail`. `Ok(true)`: a `goto` took it and the fanout was
    /// reset (item `k` no longer exists); `Ok(false)`: `continue` took it.
    /// `Err` gives the failure back (reworded when a `goto` was spent or a
    /// `when` errored) when no entry takes it: the item stays failed.
    pub(super) fn route_item_failure(
        &mut self,
        at: StepAt,
        k: u32,
        failure: Failure,
    ) -> Result<bool, Failure> {
        let stage = self.item(at, k).stage;
        let entries: &[OnFailDef] = match &self.def(at).kind {
            StepKindDef::Fanout { stages, .. } => stages
                .get(stage as usize)
                .map_or(&[], |s| s.on_fail.as_slice()),
            _ => &[],
        };
        if entries.is_empty() {
            return Err(failure);
        }
        let flow = self.frame(at.frame).flow;
        let key = |e: u32| stage_on_fail_key(flow, at.step, stage, e);
        let (taken, failure) = self.take_entry(at, entries, key, failure)?;
        match taken {
            Taken::Continue => {
                let it = self.item_mut(at, k);
                it.continued = true;
                it.failure = Some(failure.clone());
                let kind = EventKind::FanoutItemContinued {
                    item_index: k,
                    stage,
                    failure,
                };
                self.event(kind, Some(self.sid(at)));
                Ok(false)
            }
            Taken::Goto {
                entry,
                target,
                count,
                max,
                note,
            } => {
                // the target reads which item failed, and where
                let failure = Failure {
                    reason: format!("item {k} (stage {stage}): {}", failure.reason),
                    ..failure
                };
                self.go_back(at, (entry, target, count, max), note, failure);
                Ok(true)
            }
            // the compiler and the verifier refuse `STEP` entries on stages
            Taken::Step(_) => Err(failure),
        }
    }

    /// The entry of step `at` that takes `failure`, counted when it is a `goto`.
    fn take_failure(&mut self, at: StepAt, failure: Failure) -> Result<(Taken, Failure), Failure> {
        let def = self.def(at);
        if let Some(t) = def.on_fail {
            return Ok((Taken::Step(t), failure));
        }
        if def.on_fail_continue {
            return Ok((Taken::Continue, failure));
        }
        let flow = self.frame(at.frame).flow;
        let key = |e: u32| on_fail_key(flow, at.step, e);
        self.take_entry(at, &def.on_fail_routes, key, failure)
    }

    /// The first of `entries` (of step `at`, or of one of its stages) that
    /// takes `failure`; `key` names an entry's counter in `routes_fired`.
    fn take_entry(
        &mut self,
        at: StepAt,
        entries: &[OnFailDef],
        key: impl Fn(u32) -> String,
        failure: Failure,
    ) -> Result<(Taken, Failure), Failure> {
        let mut spent: Option<String> = None;
        for (k, e) in entries.iter().enumerate() {
            let n = k as u32 + 1;
            if let Some(c) = e.when {
                match self.failure_holds(at, c, &failure) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(why) => return Err(self.on_fail_error(at, n, c, why, failure)),
                }
            }
            let (target, max, note) = match e.action {
                OnFailAction::Step(t) => return Ok((Taken::Step(t), failure)),
                OnFailAction::Continue => return Ok((Taken::Continue, failure)),
                OnFailAction::Goto { target, max, note } => (target, max, note),
                // X9/X11 `{rollback}` alone: the tree goes back, then the
                // step fails for good with its own failure (or the conflict)
                OnFailAction::Fail => {
                    if let Some(to) = e.rollback {
                        self.rollback(at, to, failure.attempt)?;
                    }
                    return Err(failure);
                }
            };
            let key = key(k as u32);
            let fired = self.run.header.routes_fired.get(&key).copied().unwrap_or(0);
            let to = self.own_id(at.sibling(target));
            if fired >= max {
                spent = Some(format!(
                    "on_fail entry {n} (goto `{to}`) has taken its max of {max} failures in this run"
                ));
                continue;
            }
            let note = match note
                .map(|t| self.render(at.frame, t, None, None))
                .transpose()
            {
                Ok(v) => v.map(|v| match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                }),
                Err(why) => {
                    let c = e.when;
                    return Err(self.on_fail_note_error(at, n, c, why, failure));
                }
            };
            // X11: the workspace goes back first; a conflict fails the step
            if let Some(to) = e.rollback
                && let Err(conflict) = self.rollback(at, to, failure.attempt)
            {
                return Err(conflict);
            }
            self.run.header.routes_fired.insert(key, fired + 1);
            let taken = Taken::Goto {
                entry: n,
                target,
                count: fired + 1,
                max,
                note,
            };
            return Ok((taken, failure));
        }
        Err(match spent {
            None => failure,
            Some(why) => {
                let mut violations = failure.violations.clone();
                violations.push(json!({"kind": ROUTE_EXHAUSTED, "on_fail": true, "reason": why}));
                Failure {
                    attempt: failure.attempt,
                    reason: format!("{ROUTE_EXHAUSTED}: {why}; the failure: {}", failure.reason),
                    violations,
                }
            }
        })
    }

    /// An entry's `when` with `failure` bound to `{reason, violations}`.
    fn failure_holds(&mut self, at: StepAt, c: u32, failure: &Failure) -> Result<bool, String> {
        let by = self.sid(at);
        let value = json!({"reason": failure.reason, "violations": failure.violations});
        match self.run_chunk(&by, at.frame, c, ResultSel::Value(&value), None, None)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "type_error: an `on_fail` condition must evaluate to boolean, received {}",
                type_name(&other)
            )),
        }
    }

    /// A `when` that errors: the step fails for good with `route_error`.
    fn on_fail_error(&self, at: StepAt, n: u32, c: u32, why: String, failure: Failure) -> Failure {
        let source = self
            .plan
            .str(self.flow(at.frame).chunks[c as usize].source)
            .to_string();
        let mut violations = failure.violations;
        violations.push(json!({"kind": ROUTE_ERROR, "on_fail": n, "expr": source, "reason": why}));
        Failure {
            attempt: failure.attempt,
            reason: format!(
                "{ROUTE_ERROR}: on_fail entry {n} ({source:?}): {why}; the failure: {}",
                failure.reason
            ),
            violations,
        }
    }

    /// A `note` that does not render: the step fails for good with `route_error`.
    fn on_fail_note_error(
        &self,
        at: StepAt,
        n: u32,
        when: Option<u32>,
        why: String,
        failure: Failure,
    ) -> Failure {
        match when {
            Some(c) => self.on_fail_error(at, n, c, why, failure),
            None => {
                let mut violations = failure.violations;
                violations.push(json!({"kind": ROUTE_ERROR, "on_fail": n, "reason": why}));
                Failure {
                    attempt: failure.attempt,
                    reason: format!(
                        "{ROUTE_ERROR}: on_fail entry {n}: its note: {why}; the failure: {}",
                        failure.reason
                    ),
                    violations,
                }
            }
        }
    }
}
