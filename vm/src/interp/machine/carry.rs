//! Carry variables of the entry flow: their initial values (materialized as
//! soon as their source resolves, again after the source re-ran) and the
//! values a revise writes.
//!
//! Owns: when a carry value is (re)written, and the `carry_updated` events.
//! Must never: write a value that does not resolve (the run fails with
//! `carry_initial_unresolved`, or the revise is refused).

use serde_json::Value;

use super::Transition;
use crate::interp::VmError;
use crate::interp::event::EventKind;
use crate::interp::state::*;
use crate::plan::RefTarget;

/// A value a revise writes: the variable, the value, and its initial source.
pub(super) type CarryWrite = (String, Value, RefTarget);

impl Transition<'_> {
    pub(super) fn materialize_carry(&mut self) {
        let flow = self.flow(FrameIx::ENTRY);
        for c in &flow.carry {
            let name = self.plan.str(c.name).to_string();
            let epoch = match c.initial.target {
                RefTarget::Step(s) => {
                    let st = self.st(StepAt::new(FrameIx::ENTRY, s));
                    let current = self
                        .run
                        .header
                        .carry
                        .get(&name)
                        .is_some_and(|cv| cv.source_epoch == Some(st.epoch));
                    if st.status != StepStatus::Succeeded || current {
                        continue;
                    }
                    Some(st.epoch)
                }
                _ if self.run.header.carry.contains_key(&name) => continue,
                _ => None,
            };
            let Some(value) = self.resolve(FrameIx::ENTRY, &c.initial, None, None) else {
                let reason = format!("carry_initial_unresolved: `{name}`");
                self.end_run(RunStatus::Failed, Failure::new(0, reason));
                return;
            };
            let cv = CarryValue {
                value,
                source_epoch: epoch,
                kind: "initial".into(),
            };
            self.run.header.carry.insert(name.clone(), cv);
            let kind = EventKind::CarryUpdated {
                name,
                reason: "initial".into(),
                round: None,
            };
            self.event(kind, None);
        }
    }

    /// The carry values gate `at` writes when it revises; refused (nothing
    /// changed) while one cannot be resolved yet.
    pub(super) fn revise_carry_writes(&self, at: StepAt) -> Result<Vec<CarryWrite>, VmError> {
        let mut writes = Vec::new();
        if at.frame != FrameIx::ENTRY {
            return Ok(writes);
        }
        for c in &self.flow(FrameIx::ENTRY).carry {
            for (g, r) in &c.on_revise {
                if *g != at.step {
                    continue;
                }
                let name = self.plan.str(c.name).to_string();
                let value = self.resolve(FrameIx::ENTRY, r, None, None).ok_or_else(|| {
                    VmError::CarryUnresolved(format!(
                        "`{name}` cannot be resolved yet; finish its source step, then decide again with the same token"
                    ))
                })?;
                writes.push((name, value, c.initial.target));
            }
        }
        Ok(writes)
    }

    /// Writes a revise's carry values (round `round`, by gate `gate_id`).
    pub(super) fn write_revise_carry(
        &mut self,
        writes: Vec<CarryWrite>,
        gate_id: &str,
        round: u32,
    ) {
        for (name, value, initial) in writes {
            let source_epoch = match initial {
                RefTarget::Step(s) => Some(self.st(StepAt::new(FrameIx::ENTRY, s)).epoch),
                _ => None,
            };
            let cv = CarryValue {
                value,
                source_epoch,
                kind: "revise".into(),
            };
            self.run.header.carry.insert(name.clone(), cv);
            let kind = EventKind::CarryUpdated {
                name,
                reason: "revise".into(),
                round: Some(round),
            };
            self.event(kind, Some(gate_id.to_string()));
        }
    }
}
