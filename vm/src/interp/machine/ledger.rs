//! Ledgers and budgets: every spend is charged to the step's own ledger and
//! to each enclosing flow and `run` step up to the entry flow; a breach of
//! the entry flow's budget ends the run, a sub-flow's fails its `run` step,
//! a task's fails the attempt (reference v1-runtime §4.11, §4.13).
//!
//! Owns: reserving dispatches, settling usage (also over the limit), the
//! severity of breaches, reading `usage`, and usage receipts.
//! Must never: refund (spend only grows; a revert keeps the larger spend).

use serde_json::Value;

use super::Transition;
use super::ops::Target;
use crate::interp::event::{EventKind, UsageDebit};
use crate::interp::state::*;
use crate::interp::{Receipt, ReceiptOutcome, VmError};
use crate::plan::{BudgetDef, StepKindDef};

/// Which ledger was exceeded.
pub(super) enum Breach {
    /// The entry flow's budget: the run ends `budget_exhausted`.
    Root,
    /// A sub-flow's budget (its flow or its `run` step): the `run` step fails.
    Sub(FrameIx),
    /// The step's own budget: the attempt fails.
    Task,
}

/// Where a ledger lives.
#[derive(Debug, Clone, Copy)]
enum LedgerAt {
    Step(StepAt),
    Frame(FrameIx),
}

impl<'a> Transition<'a> {
    /// The ledgers a step of frame `f` charges, innermost first.
    fn ledgers(&self, f: FrameIx, step: Option<u32>) -> Vec<(Option<&'a BudgetDef>, LedgerAt)> {
        let mut out = Vec::new();
        if let Some(s) = step {
            let at = StepAt::new(f, s);
            out.push((self.def(at).budget.as_ref(), LedgerAt::Step(at)));
        }
        let mut frame = f;
        loop {
            out.push((self.flow(frame).budget.as_ref(), LedgerAt::Frame(frame)));
            match self.frame(frame).parent {
                Some(parent) => {
                    out.push((self.def(parent).budget.as_ref(), LedgerAt::Step(parent)));
                    frame = parent.frame;
                }
                None => break,
            }
        }
        out
    }

    fn spent(&self, at: LedgerAt) -> Spend {
        match at {
            LedgerAt::Step(s) => self.st(s).spent,
            LedgerAt::Frame(f) => self.frame(f).spent,
        }
    }

    fn add_spent(&mut self, at: LedgerAt, s: &Spend) {
        match at {
            LedgerAt::Step(step) => self.st_mut(step).spent.add(s),
            LedgerAt::Frame(f) => self.frame_mut(f).spent.add(s),
        }
    }

    /// The most severe breach among the ledgers if `amount` were added.
    fn breach(
        &self,
        f: FrameIx,
        step: Option<u32>,
        amount: &Spend,
        already_added: bool,
    ) -> Option<Breach> {
        let mut worst: Option<Breach> = None;
        for (limit, at) in self.ledgers(f, step) {
            let Some(limit) = limit else { continue };
            let mut s = self.spent(at);
            if !already_added {
                s.add(amount);
            }
            if !exceeds(&s, limit) {
                continue;
            }
            let b = match at {
                LedgerAt::Frame(FrameIx::ENTRY) => Breach::Root,
                LedgerAt::Frame(fr) => Breach::Sub(fr),
                LedgerAt::Step(s) if Some(s.step) == step && s.frame == f => Breach::Task,
                // a run step's budget: the sub-flow it called
                LedgerAt::Step(s) => self.st(s).child.map_or(Breach::Task, Breach::Sub),
            };
            worst = Some(match (worst, b) {
                (Some(Breach::Root), _) | (_, Breach::Root) => Breach::Root,
                (Some(Breach::Sub(a)), Breach::Sub(b2)) => Breach::Sub(a.min(b2)),
                (Some(Breach::Sub(a)), _) => Breach::Sub(a),
                (_, b) => b,
            });
        }
        worst
    }

    /// Reserves one dispatch; nothing is recorded when a ledger would overflow.
    pub(super) fn reserve(&mut self, at: StepAt) -> Result<(), Breach> {
        let one = Spend {
            dispatches: 1.0,
            ..Spend::default()
        };
        if let Some(b) = self.breach(at.frame, Some(at.step), &one, false) {
            return Err(b);
        }
        for (_, l) in self.ledgers(at.frame, Some(at.step)) {
            self.add_spent(l, &one);
        }
        Ok(())
    }

    /// Records usage in every ledger (even over the limit) and reports a breach.
    pub(super) fn settle(&mut self, at: StepAt, amount: &Spend) -> Option<Breach> {
        for (_, l) in self.ledgers(at.frame, Some(at.step)) {
            self.add_spent(l, amount);
        }
        self.breach(at.frame, Some(at.step), amount, true)
    }

    /// Applies a breach; true when the attempt itself should fail (task ledger).
    pub(super) fn apply_breach(&mut self, b: Breach, what: &str) -> bool {
        match b {
            Breach::Root => {
                let failure = Failure::new(0, format!("flow budget exhausted{what}"));
                self.end_run(RunStatus::BudgetExhausted, failure);
                false
            }
            Breach::Sub(child) => {
                if let Some(parent) = self.frame(child).parent {
                    self.fail_forced(parent, format!("subflow budget exhausted{what}"));
                }
                false
            }
            Breach::Task => true,
        }
    }

    /// Settles a usage receipt (reference v1-runtime §4.13): idempotent by
    /// `dispatchId`; recorded in every ledger it touches even over the limit;
    /// a flow breach ends a running run, other breaches are only reported.
    pub(super) fn usage_report(&mut self, r: &Receipt) -> Result<ReceiptOutcome, VmError> {
        if self.status() == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        if let Some(&seq) = self.run.header.receipts.get(&r.dispatch_id) {
            return Ok(ReceiptOutcome {
                duplicate: true,
                seq,
                budget: None,
            });
        }
        let amount = parse_usage(Some(&r.usage)).map_err(|e| match e {
            VmError::InvalidReport(m) => VmError::InvalidReceipt(m),
            other => other,
        })?;
        let (f, task) = self.receipt_ledgers(r.step_id.as_deref())?;
        let was_terminal = self.ended();
        for (_, at) in self.ledgers(f, task) {
            self.add_spent(at, &amount);
        }
        self.run.header.receipt_seq += 1;
        let seq = self.run.header.receipt_seq;
        self.run.header.receipts.insert(r.dispatch_id.clone(), seq);
        let debit = UsageDebit::Receipt {
            dispatch_id: r.dispatch_id.clone(),
            source: r.source.clone(),
            seq,
            amount: amount.to_json(),
            usd_source: r.usd_source.clone(),
            extra: r.extra.clone(),
        };
        self.event(EventKind::UsageDebit(debit), r.step_id.clone());
        let budget = match self.breach(f, task, &amount, true) {
            None => None,
            Some(Breach::Root) if was_terminal => Some("flow_exhausted_after_terminal"),
            Some(Breach::Root) => {
                let reason = format!("flow budget exhausted by usage receipt `{}`", r.dispatch_id);
                self.end_run(RunStatus::BudgetExhausted, Failure::new(0, reason));
                Some("flow_exhausted")
            }
            Some(Breach::Sub(_)) => Some("subflow_exhausted"),
            Some(Breach::Task) => Some("task_exhausted"),
        };
        Ok(ReceiptOutcome {
            duplicate: false,
            seq,
            budget,
        })
    }

    /// Where a receipt settles: a task's ledgers, or (gate, run step, no step) the flows only.
    fn receipt_ledgers(&self, step_id: Option<&str>) -> Result<(FrameIx, Option<u32>), VmError> {
        let Some(id) = step_id else {
            return Ok((FrameIx::ENTRY, None));
        };
        match self.locate(id) {
            None => Err(VmError::InvalidStep(format!(
                "the run has no step `{id}`; use a step id of this run (`step`, `parent/child` or `fanout/3`), or leave `stepId` out to charge the flow"
            ))),
            Some(Target::Item(at, _)) => Ok((at.frame, Some(at.step))),
            Some(Target::Step(at)) => match self.def(at).kind {
                StepKindDef::Do { .. } | StepKindDef::Fanout { .. } => {
                    Ok((at.frame, Some(at.step)))
                }
                _ => Ok((at.frame, None)),
            },
        }
    }
}

fn exceeds(s: &Spend, limit: &BudgetDef) -> bool {
    let over = |spent: f64, lim: Option<f64>| lim.is_some_and(|l| spent > l + 1e-9);
    over(s.usd, limit.usd)
        || over(s.tokens, limit.tokens.map(|x| x as f64))
        || over(s.dispatches, limit.dispatches.map(|x| x as f64))
        || over(s.ms, limit.ms.map(|x| x as f64))
}

/// Reads a report's `usage` (`{tokens?, usd?, ms?}`, non-negative numbers).
pub(super) fn parse_usage(usage: Option<&Value>) -> Result<Spend, VmError> {
    let Some(u) = usage.filter(|u| !u.is_null()) else {
        return Ok(Spend::default());
    };
    let Some(obj) = u.as_object() else {
        return Err(VmError::InvalidReport("`usage` must be an object".into()));
    };
    let mut s = Spend::default();
    for (k, val) in obj {
        let n = val
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| {
                VmError::InvalidReport(format!("`usage.{k}` must be a non-negative number"))
            })?;
        match k.as_str() {
            "tokens" => s.tokens = n,
            "usd" => s.usd = n,
            "ms" => s.ms = n,
            "dispatches" => {
                return Err(VmError::InvalidReport(
                    "dispatches are engine-accounted; do not report them in usage".into(),
                ));
            }
            other => {
                return Err(VmError::InvalidReport(format!(
                    "unknown usage key `{other}`; use `tokens`, `usd`, `ms`"
                )));
            }
        }
    }
    Ok(s)
}
