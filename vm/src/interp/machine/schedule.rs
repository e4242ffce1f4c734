//! Scheduling: the worklist, and what a pending step does when it is looked
//! at (routes, dependencies, `when`, then its construct).
//!
//! Owns: the worklist loop, frame settlement (a finished frame completes the
//! run or its `run` step), the flow output, skips, issuing `do` steps and
//! opening gates.
//! Must never: look at steps the transition cannot have affected (the cost
//! of a transition must not grow with the steps already done).

use serde_json::Value;

use super::Transition;
use super::attempt::Retry;
use super::values::{ResultSel, continued, walk};
use crate::eval::contract::check_record;
use crate::interp::event::EventKind;
use crate::interp::state::*;
use crate::plan::{EdgeKind, StepKindDef, StrId};

impl Transition<'_> {
    /// Works the queue until nothing more can move, then ends a run that is stuck.
    pub(super) fn advance(&mut self) {
        self.materialize_carry();
        loop {
            while let Some(at) = self.queue.pop_front() {
                if self.ended() {
                    self.queue.clear();
                    break;
                }
                if self.frame(at.frame).closed {
                    continue;
                }
                if self.st(at).status == StepStatus::Pending {
                    self.try_step(at);
                }
            }
            // finishing a frame makes its `run` step succeed, which queues its successors
            self.settle_frames();
            if self.queue.is_empty() || self.ended() {
                break;
            }
        }
        let h = &self.run.header;
        if h.status == RunStatus::Running
            && h.ready.is_empty()
            && h.gates.is_empty()
            && h.frames[0].live > 0
        {
            self.end_run(
                RunStatus::Failed,
                Failure::new(0, "no runnable steps remain"),
            );
        }
    }

    /// Finishes frames whose steps are all terminal (sub-flows first, then the entry flow).
    fn settle_frames(&mut self) {
        for f in (0..self.run.header.frames.len() as u32).rev().map(FrameIx) {
            if self.ended() {
                return;
            }
            let frame = self.frame(f);
            if frame.closed || frame.live > 0 {
                continue;
            }
            let result = self.frame_output(f);
            self.frame_mut(f).closed = true;
            match (self.frame(f).parent, result) {
                (None, Ok(out)) => self.complete(out),
                (None, Err(reason)) => self.end_run(RunStatus::Failed, Failure::new(0, reason)),
                (Some(parent), Ok(out)) => self.subflow_done(parent, out),
                (Some(parent), Err(reason)) => {
                    self.fail_forced(parent, format!("sub-flow failed: {reason}"))
                }
            }
        }
    }

    /// The output of a finished frame, checked against the flow's output contract.
    fn frame_output(&self, f: FrameIx) -> Result<Value, String> {
        let o = &self.flow(f).output;
        let at = StepAt::new(f, o.step);
        let src = self.st(at);
        if src.status != StepStatus::Succeeded {
            return Err(format!(
                "the flow output comes from step `{}`, which {}",
                self.own_id(at),
                match src.status {
                    StepStatus::Skipped => "was skipped",
                    _ => "did not succeed",
                }
            ));
        }
        let value = src
            .output
            .as_ref()
            .and_then(|out| walk(out, &o.path, self.plan))
            .cloned()
            .ok_or_else(|| {
                "reference output is unavailable (the source may have been skipped)".to_string()
            })?;
        check_record(self.plan, o.contract, &value)
            .map_err(|e| format!("flow output does not satisfy its contract: {e}"))?;
        Ok(value)
    }

    /// Decides what a pending step does now.
    fn try_step(&mut self, at: StepAt) {
        if !self.routed_in(at) || !self.dependencies_met(at) {
            return;
        }
        // X11: one scoped dispatch at a time in the shared working tree
        if self.scoped_step_waits(at) {
            return;
        }
        let def = self.def(at);
        if let Some(c) = def.when {
            let by = self.sid(at);
            match self.run_chunk(&by, at.frame, c, ResultSel::Steps, None, None) {
                Ok(Value::Bool(true)) => {}
                Ok(_) => return self.skip(at, "`when` is not true"),
                // E1: a `when` that errors fails the step (its on_fail may route it)
                Err(e) => return self.fail_forced(at, format!("when_error: {e}")),
            }
        }
        // X8: a retried run takes over what the old run did, when it still holds
        if self.try_reuse(at) {
            return;
        }
        match &def.kind {
            StepKindDef::Do { .. } => self.issue(at),
            StepKindDef::Set { fields } => self.run_set(at, fields),
            StepKindDef::Gate { .. } => self.open_gate(at),
            StepKindDef::Fanout { over, .. } => self.start_fanout(at, *over),
            StepKindDef::Run { flow, with, .. } => self.start_subflow(at, *flow, with),
            StepKindDef::Evaluate {
                command,
                timeout_ms,
                input,
            } => self.run_evaluate(at, *command, *timeout_ms, *input),
        }
    }

    /// A route target runs only once a route chose it; when every router is
    /// done and none did, it is skipped (E2). False: not now.
    fn routed_in(&mut self, at: StepAt) -> bool {
        let routers = &self.fidx(at.frame).routers[at.ix()];
        let st = self.st(at);
        if routers.is_empty()
            || st.routed.is_some()
            || st.revised.is_some()
            || st.previous_route.is_some()
        {
            return true;
        }
        if routers
            .iter()
            .all(|&(r, _)| self.st(at.sibling(r)).status.is_terminal())
        {
            self.skip(at, "no route chose this step");
        }
        false
    }

    /// Dependencies: skipped ones satisfy order edges; a skipped data source
    /// or a handled failure skips the step (E2). A state read (X1: `${id.status}`)
    /// only waits for its source to finish; a failure continued past
    /// (X2: `on_fail: continue`) satisfies every edge. False: not now (or skipped).
    fn dependencies_met(&mut self, at: StepAt) -> bool {
        for &(d, kind) in &self.fidx(at.frame).deps[at.ix()] {
            let dep = at.sibling(d);
            let st = self.st(dep);
            if kind == EdgeKind::State && st.status.is_terminal() {
                continue;
            }
            if continued(self.flow(at.frame), d, st) {
                continue;
            }
            let reason = match st.status {
                StepStatus::Succeeded => continue,
                StepStatus::Skipped if kind == EdgeKind::Order => continue,
                StepStatus::Skipped => format!(
                    "it reads the output of `{}`, which was skipped",
                    self.own_id(dep)
                ),
                StepStatus::Failed => {
                    format!("`{}` failed and its failure was routed", self.own_id(dep))
                }
                _ => return false,
            };
            self.skip(at, &reason);
            return false;
        }
        true
    }

    pub(super) fn skip(&mut self, at: StepAt, reason: &str) {
        self.set_status(at, StepStatus::Skipped);
        let id = self.sid(at);
        self.event(
            EventKind::Skipped {
                reason: reason.to_string(),
            },
            Some(id),
        );
        self.enqueue_succ(at);
    }

    /// Makes a `do` step ready: render, reserve a dispatch, mint a token.
    pub(super) fn issue(&mut self, at: StepAt) {
        let StepKindDef::Do { task, .. } = self.def(at).kind else {
            return;
        };
        let attempt = self.st(at).attempts + 1;
        if let Err(reason) = self.render(at.frame, task, None, None) {
            self.st_mut(at).attempts = attempt;
            let failure = Failure::new(attempt, reason);
            return self.attempt_failed(Slot::step(at), failure, None, Retry::Allowed);
        }
        if let Err(b) = self.reserve(at) {
            if self.apply_breach(b, "") {
                self.st_mut(at).attempts = attempt;
                let failure = Failure::new(attempt, "task budget exhausted");
                self.attempt_failed(Slot::step(at), failure, None, Retry::Never);
            }
            return;
        }
        if let Err(reason) = self.take_snapshot(Slot::step(at), attempt) {
            self.st_mut(at).attempts = attempt;
            let failure = Failure::new(attempt, reason);
            return self.attempt_failed(Slot::step(at), failure, None, Retry::Never);
        }
        self.mark_entry(at, attempt);
        let token = self.mint("d");
        let st = self.st_mut(at);
        st.attempts = attempt;
        st.token = Some(token);
        self.set_status(at, StepStatus::Ready);
        self.start_lease(Slot::step(at));
        let id = self.sid(at);
        self.event(EventKind::Ready { attempt }, Some(id));
    }

    /// A gate step waits for a decision with a fresh token (its options
    /// fixed now, X10: a template that does not render fails the gate).
    fn open_gate(&mut self, at: StepAt) {
        match self.gate_options(at) {
            Ok(options) => self.st_mut(at).options = options,
            Err(e) => {
                let id = self.sid(at);
                self.fail_forced(at, format!("gate `{id}`: {e}"));
                return;
            }
        }
        let token = self.mint("g");
        self.st_mut(at).token = Some(token);
        self.set_status(at, StepStatus::WaitingGate);
        let id = self.sid(at);
        let round = self.frame(at.frame).rounds;
        self.event(EventKind::GateWaiting { round }, Some(id));
        let shown = self.gate_shown(at);
        self.st_mut(at).shown = shown;
    }

    /// A `set` step: its fields' expressions, then its contract and ensures
    /// (deterministic: E1, never retried).
    fn run_set(&mut self, at: StepAt, fields: &[(StrId, u32)]) {
        self.st_mut(at).attempts = 1;
        let mut obj = serde_json::Map::new();
        let by = self.sid(at);
        for (k, c) in fields {
            match self.run_chunk(&by, at.frame, *c, ResultSel::Steps, None, None) {
                Ok(val) => {
                    obj.insert(self.plan.str(*k).to_string(), val);
                }
                Err(e) => {
                    let key = self.plan.str(*k);
                    return self.fail_forced(at, format!("set `{key}` failed: {e}"));
                }
            }
        }
        let output = Value::Object(obj);
        let def = self.def(at);
        let id = self.sid(at);
        match self
            .check_output(at.frame, def.out, (&def.ensure, &[]), &output, 1, None, &id)
            .0
        {
            Ok(()) => self.succeed(at, output),
            Err((failure, _)) => {
                self.attempt_failed(Slot::step(at), failure, Some(output), Retry::Never)
            }
        }
    }
}
