//! The one attempt path, for `do` steps and fanout items alike: a report is
//! checked (usage, the reported failure, the output's contract and ensures,
//! the judge's usage), then the attempt succeeds, is retried, or exhausts.
//!
//! Owns: settling a report, the identical-evidence stop, retry versus
//! exhaustion, success (with `iterate` and the flow-output check for steps,
//! stage advance and the worktree patch for items), and what an exhausted
//! step does (route by `on_fail`, fail the calling `run` step, end the run).
//! Must never: be bypassed: every report of a step or item goes through
//! [`Transition::attempt_done`].

use serde_json::{Value, json};

use super::Transition;
use super::routes::Routed;
use super::values::{ResultSel, walk};
use crate::eval::contract::check_record;
use crate::eval::value::type_name;
use crate::interp::Report;
use crate::interp::event::{AttemptResult, EventKind, Iteration, UsageDebit};
use crate::interp::state::*;
use crate::plan::StepKindDef;

/// Whether a failed attempt may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// While attempts remain (and the evidence changed).
    Allowed,
    /// Never (deterministic failures, exhausted iterations, lost patches).
    Never,
}

/// What checking a report decided.
enum Checked {
    /// The run ended while settling (a flow budget); nothing more to do.
    RunEnded,
    /// The attempt failed, with the output it produced (if it got that far)
    /// and whether it may be retried (not after `judge_unavailable`).
    Failed(Failure, Option<Value>, Retry),
    /// The output passed its contract and ensures.
    Passed(Value),
}

impl Transition<'_> {
    /// A report arrived for a live dispatch (its token was checked).
    pub(super) fn attempt_done(&mut self, slot: Slot, report: &Report, usage: Spend) {
        let attempt = self.take_dispatch(slot);
        let tree = self.take_snapshot_tree(slot);
        let shared = tree.is_some() && self.slot_root_is_workspace(slot);
        match self.check_report(slot, attempt, report, usage, tree) {
            Checked::RunEnded => return,
            Checked::Failed(failure, output, retry) => {
                self.attempt_failed(slot, failure, output, retry)
            }
            Checked::Passed(output) => match slot.item {
                None => self.step_passed(slot.at, attempt, output),
                Some(k) => self.item_passed(slot.at, k, attempt, output),
            },
        }
        self.changes_seen = None;
        self.diff_seen = None;
        if let Some(k) = slot.item {
            // an item's stage `on_fail` `goto` (X9) may have reset the fanout
            if self.item_ended(slot.at, k) {
                self.drop_worktree(slot.at, k);
            }
            self.pump(slot.at);
        }
        if shared {
            self.wake_scoped();
        }
    }

    /// Whether item `k` of `at` exists and has ended (a stage `on_fail`
    /// `goto` resets the fanout, and its items are gone).
    pub(super) fn item_ended(&self, at: StepAt, k: u32) -> bool {
        self.st(at)
            .items
            .get(k as usize)
            .is_some_and(|it| it.status.is_terminal())
    }

    /// The snapshot of the dispatch that reported (X11), cleared from its row.
    fn take_snapshot_tree(&mut self, slot: Slot) -> Option<String> {
        match slot.item {
            None => self.st_mut(slot.at).snapshot.take(),
            Some(k) => self.item_mut(slot.at, k).snapshot.take(),
        }
    }

    fn slot_root_is_workspace(&self, slot: Slot) -> bool {
        slot.item
            .is_none_or(|k| self.item(slot.at, k).worktree.is_none())
    }

    /// The dispatch leaves the ready set (decided below); its attempt number.
    fn take_dispatch(&mut self, slot: Slot) -> u32 {
        self.end_lease(slot);
        match slot.item {
            None => {
                self.set_status(slot.at, StepStatus::Pending);
                self.st_mut(slot.at).token = None;
                self.st(slot.at).attempts
            }
            Some(k) => {
                self.set_item_status(slot.at, k, StepStatus::Pending);
                self.item_mut(slot.at, k).token = None;
                self.item(slot.at, k).attempts
            }
        }
    }

    /// Usage, the reported failure, the output checks and the judge's usage, in that order.
    fn check_report(
        &mut self,
        slot: Slot,
        attempt: u32,
        report: &Report,
        usage: Spend,
        tree: Option<String>,
    ) -> Checked {
        if let Some(telemetry) = &report.telemetry {
            let kind = EventKind::Telemetry {
                attempt,
                telemetry: Value::clone(telemetry),
            };
            let id = self.slot_id(slot);
            self.event(kind, Some(id));
        }
        if usage != Spend::default() {
            self.record_usage(slot, attempt, usage);
            let task_breach = self.settle_breach(slot.at, &usage, "");
            if task_breach {
                let failure = Failure::new(attempt, "task budget exhausted");
                return Checked::Failed(failure, report.output.clone(), Retry::Allowed);
            }
            if self.ended() {
                return Checked::RunEnded;
            }
        }
        // X11: what the dispatch changed, against its scope (put back when outside)
        if let Err(failure) = self.check_scope(slot, attempt, tree) {
            return Checked::Failed(failure, report.output.clone(), Retry::Allowed);
        }
        if let Some(reason) = &report.failure {
            let failure = Failure::new(attempt, reason.clone());
            return Checked::Failed(failure, None, Retry::Allowed);
        }
        let output = report.output.clone().unwrap_or(Value::Null);
        let (checked, judge_usage) = self.check_slot_output(slot, attempt, &output);
        if judge_usage != Spend::default()
            && self.settle_breach(slot.at, &judge_usage, " (judged predicate)")
        {
            let failure = Failure::new(attempt, "task budget exhausted (judged predicate)");
            return Checked::Failed(failure, Some(output), Retry::Allowed);
        }
        if self.ended() {
            return Checked::RunEnded;
        }
        match checked {
            Err((failure, retry)) => Checked::Failed(failure, Some(output), retry),
            Ok(()) => Checked::Passed(output),
        }
    }

    /// Settles `amount` into the ledgers of step `at`; true when the step's
    /// own budget broke (the attempt fails). Other breaches end the run or
    /// fail the calling `run` step.
    fn settle_breach(&mut self, at: StepAt, amount: &Spend, what: &str) -> bool {
        match self.settle(at, amount) {
            Some(b) => self.apply_breach(b, what),
            None => false,
        }
    }

    fn record_usage(&mut self, slot: Slot, attempt: u32, usage: Spend) {
        let amount = usage.to_json();
        let kind = match slot.item {
            None => EventKind::UsageDebit(UsageDebit::Dispatch { attempt, amount }),
            Some(k) => EventKind::FanoutLedgerDebit {
                item_index: k,
                attempt,
                amount,
                source: None,
            },
        };
        let id = self.slot_id(slot);
        self.event(kind, Some(id));
    }

    /// The output's contract and ensures, for a step or an item's stage
    /// (items bind `item`/`prev` and read files in their worktree).
    fn check_slot_output(
        &mut self,
        slot: Slot,
        attempt: u32,
        output: &Value,
    ) -> (Result<(), (Failure, Retry)>, Spend) {
        let id = self.slot_id(slot);
        let Some(k) = slot.item else {
            let def = self.def(slot.at);
            return self.check_output(
                slot.at.frame,
                def.out,
                (&def.ensure, &def.artifacts),
                output,
                attempt,
                None,
                &id,
            );
        };
        let Some((stages, _, _)) = self.fanout_def(slot.at) else {
            return (Ok(()), Spend::default());
        };
        let it = self.item(slot.at, k);
        let Some(stage) = stages.get(it.stage as usize) else {
            return (Ok(()), Spend::default());
        };
        let (value, prev) = (it.value.clone(), it.output.clone());
        self.file_root = it.worktree.clone();
        let r = self.check_output(
            slot.at.frame,
            stage.out,
            (&stage.ensure, &stage.artifacts),
            output,
            attempt,
            Some((&value, prev.as_ref())),
            &id,
        );
        self.file_root = None;
        r
    }

    /// A failed attempt: recorded, then retried while attempts remain and the
    /// evidence changed, else the step (or item) fails for good.
    pub(super) fn attempt_failed(
        &mut self,
        slot: Slot,
        mut failure: Failure,
        output: Option<Value>,
        retry: Retry,
    ) {
        let (last, used, max) = self.attempt_counts(slot);
        let identical = output.is_some() && output == last;
        if identical {
            failure.reason.push_str(" (no retry: identical evidence)");
        }
        let again = retry == Retry::Allowed && !identical && used < max && !self.ended();
        match slot.item {
            None => {
                let st = self.st_mut(slot.at);
                st.token = None;
                st.last_output = output;
                st.failure = Some(failure.clone());
                let result = AttemptResult::Failure {
                    attempt: failure.attempt,
                    failure: failure.clone(),
                    iterate: None,
                };
                self.event(EventKind::Result(result), Some(self.sid(slot.at)));
                if again {
                    self.set_status(slot.at, StepStatus::Pending);
                    self.queue.push_back(slot.at);
                } else {
                    self.exhaust(slot.at, failure);
                }
            }
            Some(k) => {
                let stage = self.item(slot.at, k).stage;
                let kind = EventKind::FanoutAttemptResult {
                    item_index: k,
                    stage,
                    attempt: failure.attempt,
                    success: false,
                    failure: Some(failure.clone()),
                };
                self.event(kind, Some(self.sid(slot.at)));
                let it = self.item_mut(slot.at, k);
                it.token = None;
                it.last_output = output;
                it.failure = Some(failure.clone());
                if again {
                    self.set_item_status(slot.at, k, StepStatus::Pending);
                    return;
                }
                self.set_item_status(slot.at, k, StepStatus::Failed);
                // X9: the stage's `on_fail` (a `goto` resets the whole fanout)
                if let Err(failure) = self.route_item_failure(slot.at, k, failure) {
                    self.item_mut(slot.at, k).failure = Some(failure);
                }
            }
        }
    }

    /// The previous failed attempt's output, attempts used and allowed.
    fn attempt_counts(&self, slot: Slot) -> (Option<Value>, u32, u32) {
        match slot.item {
            None => {
                let st = self.st(slot.at);
                let max = match self.def(slot.at).kind {
                    StepKindDef::Do { attempts, .. } => attempts,
                    _ => 1,
                };
                (st.last_output.clone(), st.attempts, max)
            }
            Some(k) => {
                let it = self.item(slot.at, k);
                let max = self
                    .fanout_def(slot.at)
                    .and_then(|(stages, _, _)| stages.get(it.stage as usize))
                    .map_or(1, |s| s.attempts);
                (it.last_output.clone(), it.stage_attempts, max)
            }
        }
    }

    /// A step's output passed: `iterate`, then the flow output, then success.
    fn step_passed(&mut self, at: StepAt, attempt: u32, output: Value) {
        let artifacts = self.artifacts_seen.take();
        if !self.iteration_done(at, attempt, &output) {
            return;
        }
        if let Some(failure) = self.flow_output_problem(at, attempt, &output) {
            return self.attempt_failed(Slot::step(at), failure, Some(output), Retry::Allowed);
        }
        self.succeed(at, output);
        if let Some(files) = artifacts {
            self.record_manifest(at, None, attempt, files);
        }
        self.record_patch(Slot::step(at), attempt);
    }

    /// `iterate … until`: true when the step is done iterating (or has no
    /// `iterate`); otherwise it was re-dispatched with feedback, or failed
    /// when the iterations are used up or the output did not change.
    fn iteration_done(&mut self, at: StepAt, attempt: u32, output: &Value) -> bool {
        let StepKindDef::Do {
            iterate: Some((max, until)),
            ..
        } = self.def(at).kind
        else {
            return true;
        };
        let by = self.sid(at);
        let r = self.run_chunk(&by, at.frame, until, ResultSel::Value(output), None, None);
        if matches!(r, Ok(Value::Bool(true))) {
            return true;
        }
        let source = self
            .plan
            .str(self.flow(at.frame).chunks[until as usize].source)
            .to_string();
        let why = match r {
            Ok(Value::Bool(false)) => "predicate evaluated to false".to_string(),
            Ok(other) => format!(
                "type_error: predicate must evaluate to boolean, received {}",
                type_name(&other)
            ),
            Err(e) => e,
        };
        let iteration = self.st(at).iterations + 1;
        self.st_mut(at).iterations = iteration;
        let failure = Failure {
            attempt,
            reason: format!("iterate until {source:?} failed: {why}"),
            violations: vec![
                json!({"kind": "iterate", "expr": source, "reason": why, "iteration": iteration, "max": max}),
            ],
        };
        let same = Some(output) == self.st(at).last_output.as_ref();
        if iteration >= max || same {
            self.attempt_failed(Slot::step(at), failure, Some(output.clone()), Retry::Never);
            return false;
        }
        // an iteration is not a failed attempt: re-dispatch with feedback
        let st = self.st_mut(at);
        st.last_output = Some(output.clone());
        st.failure = Some(failure.clone());
        let result = AttemptResult::Failure {
            attempt,
            failure,
            iterate: Some(Iteration { iteration, max }),
        };
        let id = self.sid(at);
        self.event(EventKind::Result(result), Some(id));
        self.queue.push_back(at);
        false
    }

    /// The flow output is checked as soon as its source step succeeds.
    fn flow_output_problem(&self, at: StepAt, attempt: u32, output: &Value) -> Option<Failure> {
        let o = &self.flow(at.frame).output;
        if o.step != at.step {
            return None;
        }
        let problem = match walk(output, &o.path, self.plan) {
            None => "the flow output path is missing from this output".to_string(),
            Some(val) => check_record(self.plan, o.contract, val).err()?.to_string(),
        };
        Some(Failure {
            attempt,
            reason: format!("flow output does not satisfy its contract: {problem}"),
            violations: vec![json!({"kind": "flow_output", "message": problem})],
        })
    }

    /// An item's stage passed: the next stage, or (last stage) the item
    /// succeeds with its patch taken.
    fn item_passed(&mut self, at: StepAt, k: u32, attempt: u32, output: Value) {
        let artifacts = self.artifacts_seen.take();
        let Some((stages, _, _)) = self.fanout_def(at) else {
            return;
        };
        let stage = self.item(at, k).stage;
        let last = stage as usize + 1 == stages.len();
        let mut patch = None;
        if last && self.isolated(at) {
            match self.take_patch(at, k) {
                Ok(p) => patch = p,
                Err(reason) => {
                    let failure = Failure::new(attempt, reason);
                    return self.attempt_failed(Slot::item(at, k), failure, None, Retry::Never);
                }
            }
        }
        let kind = EventKind::FanoutAttemptResult {
            item_index: k,
            stage,
            attempt,
            success: true,
            failure: None,
        };
        self.event(kind, Some(self.sid(at)));
        let it = self.item_mut(at, k);
        it.output = Some(output);
        it.last_output = None;
        it.failure = None;
        if last {
            it.patch = patch;
            self.set_item_status(at, k, StepStatus::Succeeded);
        } else {
            it.stage += 1;
            it.stage_attempts = 0;
            self.set_item_status(at, k, StepStatus::Pending);
        }
        // every passed stage with artifacts records its manifest (the row keeps the latest)
        if let Some(files) = artifacts {
            self.record_manifest(at, Some(k), attempt, files);
        }
        self.record_patch(Slot::item(at, k), attempt);
    }

    pub(super) fn succeed(&mut self, at: StepAt, output: Value) {
        let attempt = self.st(at).attempts.max(1);
        // X9: the routes read the output, templates through the row as the
        // step's success; the status is put back before it is decided
        let was = self.st(at).status;
        let st = self.st_mut(at);
        st.output = Some(output.clone());
        st.status = StepStatus::Succeeded;
        let routed = self.route_after(at, &output);
        self.st_mut(at).status = was;
        let back = match routed {
            Routed::Through => None,
            Routed::Back(back) => Some(back),
            Routed::Fail(failure) => {
                self.st_mut(at).output = None;
                return self.attempt_failed(Slot::step(at), failure, None, Retry::Never);
            }
        };
        let st = self.st_mut(at);
        st.output = Some(output.clone());
        st.token = None;
        st.failure = None;
        st.attempts = attempt;
        self.set_status(at, StepStatus::Succeeded);
        let id = self.sid(at);
        let routed_output = back.as_ref().map(|_| output.clone());
        self.event(
            EventKind::Result(AttemptResult::Output { attempt, output }),
            Some(id),
        );
        self.enqueue_succ(at);
        if at.frame == FrameIx::ENTRY {
            self.materialize_carry();
        }
        if let (Some(back), Some(output)) = (back, routed_output) {
            self.route_back(at, back, output);
        }
    }

    /// A failure that is never retried (set, run, fanout settlement, `when` errors).
    pub(super) fn fail_forced(&mut self, at: StepAt, reason: String) {
        let attempt = self.st(at).attempts.max(1);
        self.attempt_failed(
            Slot::step(at),
            Failure::new(attempt, reason),
            None,
            Retry::Never,
        );
    }

    /// The step failed for good: route it, fail the parent, or fail the run.
    fn exhaust(&mut self, at: StepAt, failure: Failure) {
        self.set_status(at, StepStatus::Failed);
        self.st_mut(at).failure = Some(failure.clone());
        self.drop_child(at);
        let failure = match self.route_failure(at, failure) {
            Ok(()) => return,
            Err(failure) => failure,
        };
        // unhandled: the row keeps the failure as reworded (a spent `goto`)
        self.st_mut(at).failure = Some(failure.clone());
        match self.frame(at.frame).parent {
            Some(parent) => {
                let id = self.own_id(at);
                self.frame_mut(at.frame).closed = true;
                self.burn_frame(at.frame);
                let reason = format!("step `{id}` of the sub-flow failed: {}", failure.reason);
                self.fail_forced(parent, reason);
            }
            None => self.end_run(RunStatus::Failed, failure),
        }
    }
}
