//! Sub-flows: a `run` step opens a frame for the called flow with its
//! `with` input; the frame's end completes or fails the step (settled by
//! the scheduler), or, with `iterate` (X9), opens a fresh frame until
//! `until` over the flow's output holds, at most `max` runs.
//!
//! Owns: opening frames (input contract, frame limit), a run step's
//! iterations, and closing a step's frame when the step fails or is reset.
//! Must never: reuse a closed frame (a re-run opens a fresh one).

use serde_json::{Value, json};

use super::Transition;
use super::values::ResultSel;
use crate::eval::contract::check_record;
use crate::eval::value::type_name;
use crate::interp::event::{AttemptResult, EventKind, Iteration};
use crate::interp::state::*;
use crate::plan::{StepKindDef, StrId};

impl Transition<'_> {
    pub(super) fn start_subflow(&mut self, at: StepAt, callee: u32, with: &[(StrId, u32)]) {
        self.st_mut(at).attempts = 1;
        let mut input = serde_json::Map::new();
        for (k, node) in with {
            match self.with_value(at.frame, *node) {
                Ok(val) => {
                    input.insert(self.plan.str(*k).to_string(), val);
                }
                Err(reason) => return self.fail_forced(at, reason),
            }
        }
        let input = serde_json::Value::Object(input);
        let callee_flow = &self.plan.flows[callee as usize];
        if let Err(e) = check_record(self.plan, callee_flow.input, &input) {
            let name = self.plan.str(callee_flow.name);
            return self.fail_forced(at, format!("input of sub-flow `{name}` is invalid: {e}"));
        }
        if self.run.header.frames.len() >= MAX_FRAMES {
            return self.fail_forced(at, "too many sub-flow invocations in one run".into());
        }
        let n = callee_flow.steps.len() as u32;
        let child = FrameIx(self.run.header.frames.len() as u32);
        self.run
            .header
            .frames
            .push(FrameMeta::new(callee, Some(at), input, n));
        self.run.steps.push(vec![StepState::default(); n as usize]);
        for s in 0..n {
            let step = StepAt::new(child, s);
            self.run.dirty.insert(RowKey::step(step));
            self.queue.push_back(step);
        }
        self.st_mut(at).child = Some(child);
        self.set_status(at, StepStatus::Running);
    }

    /// The flow called by `run` step `at` finished with `output`: the step
    /// succeeds, unless its `iterate` (X9) does not hold yet — then the flow
    /// runs again in a fresh frame (the run's `iterations` counts the
    /// passes), and fails the step once `max` passes did not satisfy it.
    pub(super) fn subflow_done(&mut self, at: StepAt, output: Value) {
        let StepKindDef::Run {
            flow,
            with,
            iterate: Some((max, until)),
        } = &self.def(at).kind
        else {
            return self.succeed(at, output);
        };
        let by = self.sid(at);
        let r = self.run_chunk(&by, at.frame, *until, ResultSel::Value(&output), None, None);
        if matches!(r, Ok(Value::Bool(true))) {
            return self.succeed(at, output);
        }
        let source = self
            .plan
            .str(self.flow(at.frame).chunks[*until as usize].source)
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
        let reason = format!("iterate until {source:?} failed: {why}");
        if iteration >= *max {
            return self.fail_forced(at, reason);
        }
        let failure = Failure {
            attempt: 1,
            reason,
            violations: vec![
                json!({"kind": "iterate", "expr": source, "reason": why, "iteration": iteration, "max": max}),
            ],
        };
        self.st_mut(at).last_output = Some(output);
        let result = AttemptResult::Failure {
            attempt: 1,
            failure,
            iterate: Some(Iteration {
                iteration,
                max: *max,
            }),
        };
        self.event(EventKind::Result(result), Some(by));
        // the finished frame stays closed (history); the next pass is fresh
        self.st_mut(at).child = None;
        self.start_subflow(at, *flow, with);
    }

    /// Closes a running step's sub-flow (when the step fails or is reset).
    pub(super) fn drop_child(&mut self, at: StepAt) -> Option<FrameIx> {
        let child = self.st_mut(at).child.take()?;
        self.frame_mut(child).closed = true;
        self.burn_frame(child);
        Some(child)
    }

    pub(super) fn burn_frame(&mut self, f: FrameIx) {
        self.burn_where(|fr| fr == f);
    }
}
