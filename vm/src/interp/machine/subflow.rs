//! Sub-flows: a `run` step opens a frame for the called flow with its
//! `with` input; the frame's end completes or fails the step (settled by
//! the scheduler).
//!
//! Owns: opening frames (input contract, frame limit) and closing a step's
//! frame when the step fails or is reset.
//! Must never: reuse a closed frame (a re-run opens a fresh one).

use super::Transition;
use crate::eval::contract::check_record;
use crate::interp::state::*;
use crate::plan::StrId;

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
