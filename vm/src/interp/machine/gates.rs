//! Gates: decisions (approve, revise, kill), rounds, and the resets a revise
//! makes (the reset closure precomputed in the plan).
//!
//! Owns: validating a decision (its `choice` against the options, X10), the
//! gate's options when it starts waiting, the round limits of the flow and
//! the gate, routing approve/kill, resetting a revise's closure and
//! re-entering its target, and scope failures (a whole frame fails).
//! Must never: change anything before every check that can refuse has run
//! (an unresolvable carry refuses the revise with nothing changed).

use serde_json::Value;

use super::Transition;
use crate::interp::VmError;
use crate::interp::event::{EpochChange, EventKind};
use crate::interp::state::*;
use crate::plan::{GateOptionsDef, StepKindDef};

/// What a person decided at a gate: the decision (`approve`, `revise`,
/// `kill`), an optional note and an optional choice among the gate's
/// options (X10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateDecision<'a> {
    /// `approve`, `revise` or `kill`.
    pub decision: &'a str,
    /// The note for the step that acts on it.
    pub note: Option<&'a str>,
    /// One of the gate's options (X10).
    pub choice: Option<&'a str>,
    /// Sent without a token on purpose (the manual's MCP form): taken while
    /// the gate waits its one round. Without it a missing token is refused
    /// like a stale one (reference §8.2 #30).
    pub tokenless: bool,
}

/// A decision being applied.
struct Decision<'d> {
    id: &'d str,
    decision: &'d str,
    note: Option<&'d str>,
    choice: Option<&'d str>,
    by: &'d str,
    target: Option<u32>,
    /// Decided without a token (one round was waiting).
    tokenless: bool,
}

/// A refusal of a decision sent without a token says what such a decision
/// needs (the gate waiting now, one round).
fn tokenless_context(e: VmError, tokenless: bool) -> VmError {
    match (e, tokenless) {
        (VmError::NotAwaiting(m), true) => VmError::NotAwaiting(format!(
            "{m}; a decision without `gateToken` is taken only while exactly one round of the gate is waiting"
        )),
        (e, _) => e,
    }
}

impl Transition<'_> {
    pub(super) fn resolve_gate(
        &mut self,
        id: &str,
        token: Option<&str>,
        answer: &GateDecision<'_>,
        by: &str,
    ) -> Result<(), VmError> {
        let GateDecision {
            decision,
            note,
            choice,
            tokenless,
        } = *answer;
        // a token given is checked even when the caller also said tokenless
        let tokenless = tokenless && token.is_none();
        if !["approve", "revise", "kill"].contains(&decision) {
            return Err(VmError::InvalidDecision(decision.to_string()));
        }
        if self.status() == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        let at = self
            .waiting_gate(id)
            .map_err(|e| tokenless_context(e, tokenless))?;
        // a tokenless decision is taken while the gate waits: a step id names
        // one gate, which waits one round at a time, so it cannot be meant
        // for another round; otherwise the token is checked (missing, stale)
        if !tokenless {
            super::ops::check_token(self.st(at).token.as_ref(), token, "gate decision")?;
        }
        let StepKindDef::Gate {
            on_approve,
            on_revise,
            on_kill,
            max_rounds,
            ..
        } = self.def(at).kind
        else {
            return Err(VmError::NotAwaiting(format!("`{id}` is not a gate")));
        };
        if decision == "kill" && choice.is_some() {
            return Err(VmError::InvalidChoice {
                gate: id.to_string(),
                choice: choice.unwrap_or_default().to_string(),
                options: Vec::new(),
                kill: true,
            });
        }
        self.check_choice(at, id, choice)?;
        let target = match decision {
            "approve" => on_approve,
            "kill" => on_kill,
            _ => on_revise,
        };
        let d = Decision {
            id,
            decision,
            note,
            choice,
            by,
            target,
            tokenless,
        };
        if decision == "revise" {
            return self.revise(at, &d, max_rounds);
        }
        self.close_gate(at, &d);
        match target {
            Some(t) => {
                let t = at.sibling(t);
                self.st_mut(t).routed = Some(Failure::new(0, format!("gate {decision}")));
                self.queue.push_back(t);
                self.enqueue_succ(at);
            }
            None if decision == "kill" => {
                let failure = Failure::new(0, format!("gate `{id}` killed the flow"));
                self.scope_failure(at.frame, failure, RunStatus::Killed);
            }
            // E3: approve with no target completes the gate; its successors go on
            None => self.enqueue_succ(at),
        }
        Ok(())
    }

    /// A decision's `choice` must be one of the options the gate offers
    /// since it started waiting (X10; a kill carries none, refused before).
    fn check_choice(&self, at: StepAt, id: &str, choice: Option<&str>) -> Result<(), VmError> {
        let Some(choice) = choice else {
            return Ok(());
        };
        let options = self.st(at).options.clone().unwrap_or_default();
        if options.iter().any(|o| o == choice) {
            return Ok(());
        }
        Err(VmError::InvalidChoice {
            gate: id.to_string(),
            choice: choice.to_string(),
            options,
            kill: false,
        })
    }

    /// The options a gate offers, fixed when it starts waiting (X10): the
    /// literal list, or its template rendered now. `Err` says why a
    /// template does not render to a list of strings.
    pub(super) fn gate_options(&self, at: StepAt) -> Result<Option<Vec<String>>, String> {
        let StepKindDef::Gate { options, .. } = &self.def(at).kind else {
            return Ok(None);
        };
        match options {
            None => Ok(None),
            Some(GateOptionsDef::List(list)) => Ok(Some(
                list.iter().map(|s| self.plan.str(*s).to_string()).collect(),
            )),
            Some(GateOptionsDef::Template(t)) => {
                let value = self.render(at.frame, *t, None, None)?;
                options_of(value).map(Some)
            }
        }
    }

    /// The gate `id` names, if it waits for a decision.
    fn waiting_gate(&self, id: &str) -> Result<StepAt, VmError> {
        let Some(super::ops::Target::Step(at)) = self.locate(id) else {
            return Err(VmError::NotAwaiting(format!(
                "gate `{id}` is not awaiting a decision: no such gate in this run"
            )));
        };
        if !matches!(self.def(at).kind, StepKindDef::Gate { .. }) {
            return Err(VmError::NotAwaiting(format!("`{id}` is not a gate")));
        }
        let st = self.st(at);
        if st.status != StepStatus::WaitingGate || self.ended() {
            return Err(VmError::NotAwaiting(format!(
                "gate `{id}` is not awaiting a decision: it is {}",
                st.status.as_str()
            )));
        }
        Ok(at)
    }

    /// The gate is decided for good (approve, kill, or a revise without rounds left).
    fn close_gate(&mut self, at: StepAt, d: &Decision<'_>) {
        let st = self.st_mut(at);
        st.token = None;
        st.decision = Some(d.decision.to_string());
        st.note = d.note.map(str::to_string);
        st.choice = d.choice.map(str::to_string);
        self.set_status(at, StepStatus::Succeeded);
        self.gate_resolved(at, d);
    }

    fn gate_resolved(&mut self, at: StepAt, d: &Decision<'_>) {
        let kind = EventKind::GateResolved {
            decision: d.decision.to_string(),
            target: d.target.map(|t| self.own_id(at.sibling(t)).to_string()),
            note: d.note.map(str::to_string),
            choice: d.choice.map(str::to_string),
            resolved_by: d.by.to_string(),
            tokenless: d.tokenless,
            shown: self
                .st(at)
                .shown
                .as_ref()
                .map(|s| s.files.clone())
                .unwrap_or_default(),
        };
        self.event(kind, Some(d.id.to_string()));
    }

    /// A revise: with rounds left, carry writes, the reset of the closure and
    /// the target re-entered; without, the gate's scope fails.
    fn revise(
        &mut self,
        at: StepAt,
        d: &Decision<'_>,
        gate_max: Option<u32>,
    ) -> Result<(), VmError> {
        let total = self.frame(at.frame).rounds + 1;
        let gate_rounds = self.st(at).gate_rounds + 1;
        let exhausted = d.target.is_none()
            || self.flow(at.frame).max_rounds.is_none_or(|m| total > m)
            || gate_max.is_some_and(|m| gate_rounds > m);
        if exhausted {
            self.close_gate(at, d);
            let failure = Failure::new(
                0,
                format!("gate `{}`: gate revision rounds exhausted", d.id),
            );
            self.scope_failure(at.frame, failure, RunStatus::Failed);
            return Ok(());
        }
        // carry values written by this revise must resolve first (nothing changes otherwise)
        let writes = self.revise_carry_writes(at)?;
        let st = self.st_mut(at);
        st.token = None;
        st.note = d.note.map(str::to_string);
        st.choice = d.choice.map(str::to_string);
        self.gate_resolved(at, d);
        self.frame_mut(at.frame).rounds = total;
        self.write_revise_carry(writes, d.id, total);
        if let Some(t) = d.target {
            let members = self.reset(at, t, "revise");
            let revised = Revised {
                gate: d.id.to_string(),
                round: total,
                note: d.note.map(str::to_string),
                choice: d.choice.map(str::to_string),
            };
            // X10: every step of the closure hears the answer on its first
            // dispatch; the gate itself asks again instead
            for s in members.into_iter().filter(|&s| s != t && s != at.step) {
                self.st_mut(at.sibling(s)).revise_context = Some(revised.clone());
            }
            // the revise routes to its target: it runs again even when it is
            // also a route target that no route chose this time
            self.st_mut(at.sibling(t)).revised = Some(revised);
        }
        self.st_mut(at).gate_rounds = gate_rounds;
        Ok(())
    }

    /// A failure of a whole frame: the run (entry flow) or the calling `run` step.
    pub(super) fn scope_failure(&mut self, f: FrameIx, failure: Failure, status: RunStatus) {
        match self.frame(f).parent {
            None => self.end_run(status, failure),
            Some(parent) => {
                self.frame_mut(f).closed = true;
                self.burn_frame(f);
                self.st_mut(parent).child = None;
                self.fail_forced(parent, failure.reason);
            }
        }
    }

    /// Resets the reset closure of gate `gate` revising to `target`, or of a
    /// step's route going back to it (X9; `reason` `route` or `on_fail`):
    /// precomputed in the plan; returns the steps reset.
    pub(super) fn reset(&mut self, gate: StepAt, target: u32, reason: &str) -> Vec<u32> {
        let flow = self.flow(gate.frame);
        let members: Vec<u32> = match flow
            .closures
            .iter()
            .find(|c| c.gate == gate.step && c.target == target)
        {
            Some(c) => (0..flow.steps.len() as u32)
                .filter(|&s| c.contains(s))
                .collect(),
            None => vec![target],
        };
        let mut reset = Vec::new();
        let mut dropped = Vec::new();
        for &s in &members {
            let at = gate.sibling(s);
            // items in flight are dropped with their step, and their worktrees removed
            self.drop_worktrees(at);
            for k in 0..self.st(at).items.len() as u32 {
                self.run.header.ready.remove(&Slot::item(at, k));
            }
            if self.drop_child(at).is_some() {
                dropped.push(self.sid(at));
            }
            self.set_status(at, StepStatus::Pending);
            let st = self.st_mut(at);
            let from = st.epoch;
            *st = StepState {
                epoch: from + 1,
                gate_rounds: st.gate_rounds,
                // `${gate.note}` and `${gate.choice}` (X10) are the latest
                // decision's, even once reset
                note: st.note.take(),
                choice: st.choice.take(),
                ..StepState::default()
            };
            reset.push(EpochChange {
                step_id: self.own_id(at).to_string(),
                from_epoch: from,
                to_epoch: from + 1,
            });
            self.queue.push_back(at);
        }
        let kind = EventKind::StepReset {
            reason: reason.into(),
            reset,
            subflows_dropped: dropped,
        };
        self.event(kind, Some(self.sid(gate.sibling(target))));
        members
    }
}

/// A rendered `options` template as a list of strings (X10), each option
/// once in its first place (an agent's candidates may repeat); an empty
/// list offers no choice.
fn options_of(value: Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "the gate's options must render to a list of strings, not {value}"
        ));
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for v in items {
        let Value::String(s) = v else {
            return Err(format!("a gate option must be a string, not {v}"));
        };
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}
