//! Dispatch leases (language 1.1, EXTENSIONS.md X7): a dispatch of a step or
//! stage with `timeout_ms` that is not reported within it is an orphan.
//!
//! Owns: starting a lease when a dispatch is handed out, finding the
//! overdue dispatches at a given time ([`overdue`], also read by the
//! operator views), and orphaning them ([`expire`]): the token is revoked,
//! `dispatch_orphaned` is recorded, and the same attempt is handed out again
//! with a new token (it counts as a dispatch in the ledgers, not as an
//! attempt); the [`MAX_ORPHANS`]th orphan in a row fails the attempt for
//! good with reason `orphaned`, which `on_fail` routes like any failure.
//! A report resets the count.
//! Must never: read a clock of its own (the time is the host's, given to
//! [`expire`] through [`Host::now_ms`]), or orphan anything from a read-only
//! call: only the engine's mutating transitions call [`expire`].

use serde_json::json;

use super::Transition;
use super::attempt::Retry;
use crate::interp::event::EventKind;
use crate::interp::host::Host;
use crate::interp::index::PlanIndex;
use crate::interp::state::*;
use crate::plan::{Plan, StepKindDef};

/// Orphans in a row that fail a dispatch's attempt for good.
pub const MAX_ORPHANS: u32 = 3;

/// The failure reason of a step (or item) whose dispatches were orphaned
/// [`MAX_ORPHANS`] times in a row.
pub const ORPHANED: &str = "orphaned";

/// A handed-out dispatch whose lease has run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue {
    /// The dispatch.
    pub slot: Slot,
    /// Its attempt number.
    pub attempt: u32,
    /// When it was issued (ms since the epoch).
    pub issued_ms: i64,
    /// Its lease.
    pub timeout_ms: u64,
}

impl Overdue {
    /// How long past its lease the dispatch is at `now`.
    pub fn late_ms(&self, now: i64) -> i64 {
        now - self.issued_ms - i64::try_from(self.timeout_ms).unwrap_or(i64::MAX)
    }
}

/// The lease of the dispatch in `slot`: its step's `timeout_ms`, or for a
/// fanout item, that of the item's current stage.
fn lease_of(plan: &Plan, run: &Run, slot: Slot) -> Option<u64> {
    let frame = run.header.frames.get(slot.at.frame.ix())?;
    let def = plan
        .flows
        .get(frame.flow as usize)?
        .steps
        .get(slot.at.ix())?;
    let Some(k) = slot.item else {
        return def.timeout_ms;
    };
    let StepKindDef::Fanout { stages, .. } = &def.kind else {
        return None;
    };
    let it = run
        .steps
        .get(slot.at.frame.ix())?
        .get(slot.at.ix())?
        .items
        .get(k as usize)?;
    stages.get(it.stage as usize)?.timeout_ms
}

/// The dispatch's issue time and attempt number.
fn issued(run: &Run, slot: Slot) -> Option<(i64, u32)> {
    let st = run.steps.get(slot.at.frame.ix())?.get(slot.at.ix())?;
    match slot.item {
        None => Some((st.issued_ms?, st.attempts)),
        Some(k) => {
            let it = st.items.get(k as usize)?;
            Some((it.issued_ms?, it.attempts))
        }
    }
}

/// Every handed-out dispatch whose lease has run out at `now`, in slot
/// order. A dispatch without an issue time (a row written before leases)
/// never expires.
pub fn overdue(plan: &Plan, run: &Run, now: i64) -> Vec<Overdue> {
    if run.header.status.is_terminal() {
        return Vec::new();
    }
    run.header
        .ready
        .iter()
        .filter_map(|&slot| {
            let timeout_ms = lease_of(plan, run, slot)?;
            let (issued_ms, attempt) = issued(run, slot)?;
            let o = Overdue {
                slot,
                attempt,
                issued_ms,
                timeout_ms,
            };
            (o.late_ms(now) >= 0).then_some(o)
        })
        .collect()
}

/// Orphans every dispatch whose lease has run out at the host's time
/// (see the module docs); the engine runs it first in every mutating
/// transition. Returns how many were orphaned.
pub fn expire(plan: &Plan, index: &PlanIndex, run: &mut Run, host: &mut dyn Host) -> usize {
    if run.header.status.is_terminal() || run.header.ready.is_empty() {
        return 0;
    }
    let now = host.now_ms();
    let due = overdue(plan, run, now);
    if due.is_empty() {
        return 0;
    }
    let mut t = Transition::new(plan, index, run, host);
    for o in &due {
        if t.ended() {
            break;
        }
        t.orphan(o, now);
    }
    t.advance();
    due.len()
}

/// A driver takes over a run whose driver went away (its run lease lapsed,
/// issue 16 §2): every handed-out dispatch gets a new token, so a report
/// with the old one — from an agent of the dead driver that still runs —
/// is refused as stale, and the same attempt is handed out again (no
/// attempt is consumed). Records `driver_interrupted` with `signal`
/// `lease_lapsed` and how many of the dead driver's agents were `killed`.
/// Returns how many dispatches were reissued.
pub fn take_over(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    killed: usize,
    host: &mut dyn Host,
) -> usize {
    if run.header.status.is_terminal() {
        return 0;
    }
    let slots: Vec<Slot> = run.header.ready.iter().copied().collect();
    let mut t = Transition::new(plan, index, run, host);
    let kind = EventKind::DriverInterrupted {
        signal: "lease_lapsed".to_string(),
        killed,
    };
    t.event(kind, None);
    let mut n = 0;
    for slot in slots {
        let handed_out = match slot.item {
            None => t.st_mut(slot.at).token.is_some(),
            Some(k) => t.item_mut(slot.at, k).token.is_some(),
        };
        if !handed_out {
            continue;
        }
        let token = Some(t.mint("d"));
        match slot.item {
            None => t.st_mut(slot.at).token = token,
            Some(k) => t.item_mut(slot.at, k).token = token,
        }
        t.start_lease(slot);
        n += 1;
    }
    t.advance();
    n
}

impl Transition<'_> {
    /// Records when a dispatch just handed out was issued, if it has a lease.
    pub(super) fn start_lease(&mut self, slot: Slot) {
        if lease_of(self.plan, self.run, slot).is_none() {
            return;
        }
        let now = self.host.now_ms();
        match slot.item {
            None => self.st_mut(slot.at).issued_ms = Some(now),
            Some(k) => self.item_mut(slot.at, k).issued_ms = Some(now),
        }
    }

    /// A report arrived for the dispatch: no longer leased, orphans forgotten.
    pub(super) fn end_lease(&mut self, slot: Slot) {
        match slot.item {
            None => {
                let st = self.st_mut(slot.at);
                st.issued_ms = None;
                st.orphans = 0;
            }
            Some(k) => {
                let it = self.item_mut(slot.at, k);
                it.issued_ms = None;
                it.orphans = 0;
            }
        }
    }

    /// Revokes an overdue dispatch's token and hands the same attempt out
    /// again, or fails it for good on the third orphan in a row.
    fn orphan(&mut self, o: &Overdue, now: i64) {
        let slot = o.slot;
        let orphans = match slot.item {
            None => {
                let st = self.st_mut(slot.at);
                st.token = None;
                st.issued_ms = None;
                st.orphans += 1;
                st.orphans
            }
            Some(k) => {
                let it = self.item_mut(slot.at, k);
                it.token = None;
                it.issued_ms = None;
                it.orphans += 1;
                it.orphans
            }
        };
        let kind = EventKind::DispatchOrphaned {
            attempt: o.attempt,
            timeout_ms: o.timeout_ms,
            orphans,
            item_index: slot.item,
        };
        self.event(kind, Some(self.sid(slot.at)));
        self.put_back_orphaned(slot, o.attempt);
        if orphans >= MAX_ORPHANS {
            return self.orphaned_for_good(o, orphans);
        }
        if let Err(b) = self.reserve(slot.at) {
            if self.apply_breach(b, "") {
                let failure = Failure::new(o.attempt, "task budget exhausted");
                self.fail_slot(slot, failure);
            }
            return;
        }
        let token = self.mint("d");
        match slot.item {
            None => {
                let st = self.st_mut(slot.at);
                st.token = Some(token);
                st.issued_ms = Some(now);
            }
            Some(k) => {
                let it = self.item_mut(slot.at, k);
                it.token = Some(token);
                it.issued_ms = Some(now);
            }
        }
    }

    /// The attempt fails with reason `orphaned`, never retried (the agent
    /// was lost three times; another attempt would be lost too).
    fn orphaned_for_good(&mut self, o: &Overdue, orphans: u32) {
        let failure = Failure {
            attempt: o.attempt,
            reason: ORPHANED.to_string(),
            violations: vec![json!({
                "kind": ORPHANED,
                "message": format!(
                    "{orphans} dispatches in a row were not reported within their lease of {} ms",
                    o.timeout_ms
                ),
                "timeoutMs": o.timeout_ms,
                "orphans": orphans,
            })],
        };
        self.fail_slot(o.slot, failure);
    }

    /// A dispatch fails for good outside a report: the attempt path's
    /// failure with no retry, then the fanout moves on for an item.
    fn fail_slot(&mut self, slot: Slot, failure: Failure) {
        match slot.item {
            None => self.set_status(slot.at, StepStatus::Pending),
            Some(k) => self.set_item_status(slot.at, k, StepStatus::Pending),
        }
        self.end_lease(slot);
        self.attempt_failed(slot, failure, None, Retry::Never);
        if let Some(k) = slot.item {
            if self.item_ended(slot.at, k) {
                self.drop_worktree(slot.at, k);
            }
            self.pump(slot.at);
        }
    }
}
