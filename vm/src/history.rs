//! What past runs in the store show of compiled steps (`stratumc cost
//! --history`): per step hash, how often its attempts passed, what its
//! dispatches spent, what its judge calls used, and how many runs and
//! dispatches that rests on.
//!
//! Owns: scanning the newest [`MAX_RUNS`] runs of a store, loading their
//! plans, hashing their steps ([`step_hash`], X8: the same compiled step in
//! any spec hashes the same), and folding their audit events into
//! [`StepHistory`] records. The cost model (in the compiler) turns them
//! into figures; the CLI hands them over as plain data.
//! Must never: write to the store or change a run, decide what a figure
//! means for an estimate (that is the cost model's), or fail because one
//! past run cannot be read (it is skipped and counted).
//!
//! What is counted, per event of a step (sub-flow steps by their path,
//! fanout items under their fanout): `ready` and `fanout_item_ready` are
//! dispatches; `result` (not an `iterate` cycle's request for another try)
//! and `fanout_attempt_result` are attempts, passed or not; the agent's own
//! usage debits (`usage_debit` of a dispatch, `fanout_ledger_debit` without
//! a source) add tokens, dollars and milliseconds; `judged` events are judge
//! calls with their tokens. Receipts (`stratum_usage_report`) are not
//! per-dispatch and are left out. A dimension no debit reported stays
//! unknown (a debit leaves out what is zero).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::Value;

use crate::engine::{Engine, EngineError, LoadedPlan};
use crate::interp::event::{AttemptResult, UsageDebit};
use crate::interp::{Event, EventKind};
use crate::plan::StepKindDef;
use crate::plan::hash::step_hash;

/// Most runs scanned, newest first: history follows what the steps do now,
/// and a large store is not read whole.
pub const MAX_RUNS: usize = 200;

/// What past runs show of one compiled step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepHistory {
    /// Runs that dispatched it at least once.
    pub runs: u64,
    /// Its dispatches over those runs.
    pub dispatches: u64,
    /// Attempts that ended (passed or failed).
    pub attempts: u64,
    /// Attempts that passed every check.
    pub passed: u64,
    /// Tokens its agents reported, when some debit reported tokens.
    pub tokens: Option<f64>,
    /// Dollars, the same way.
    pub usd: Option<f64>,
    /// Milliseconds, the same way.
    pub ms: Option<f64>,
    /// Judge calls that gave a verdict.
    pub judge_calls: u64,
    /// Tokens those judge calls used.
    pub judge_tokens: f64,
}

impl StepHistory {
    /// Share of attempts that passed, when some attempt ended.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.passed as f64 / self.attempts as f64)
    }

    /// A total per dispatch, when it is known and there were dispatches.
    pub fn per_dispatch(&self, total: Option<f64>) -> Option<f64> {
        total
            .filter(|_| self.dispatches > 0)
            .map(|t| t / self.dispatches as f64)
    }

    /// Tokens per judge call, when there were judge calls.
    pub fn judge_tokens_per_call(&self) -> Option<f64> {
        (self.judge_calls > 0).then(|| self.judge_tokens / self.judge_calls as f64)
    }

    fn merge(&mut self, o: &StepHistory) {
        self.runs += o.runs;
        self.dispatches += o.dispatches;
        self.attempts += o.attempts;
        self.passed += o.passed;
        self.tokens = add_opt(self.tokens, o.tokens);
        self.usd = add_opt(self.usd, o.usd);
        self.ms = add_opt(self.ms, o.ms);
        self.judge_calls += o.judge_calls;
        self.judge_tokens += o.judge_tokens;
    }
}

fn add_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// The history of the wanted step hashes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// Per step hash that some scanned run has.
    pub steps: BTreeMap<String, StepHistory>,
    /// Runs scanned.
    pub runs_scanned: usize,
    /// Runs left out because their plan or audit could not be read.
    pub runs_skipped: usize,
}

/// Folds the newest [`MAX_RUNS`] runs of the engine's store for the steps
/// whose hash is in `wanted`. Only listing the store can fail; a run that
/// cannot be read is skipped (counted in [`History::runs_skipped`]).
pub fn observe(engine: &mut Engine, wanted: &BTreeSet<String>) -> Result<History, EngineError> {
    // the newest MAX_RUNS only: listing one page, not the whole store
    let metas =
        engine
            .store()
            .list_page(None, u64::try_from(MAX_RUNS).unwrap_or(u64::MAX), None)?;
    let mut out = History::default();
    let mut hashes: HashMap<String, Hashes> = HashMap::new();
    for meta in metas.iter().take(MAX_RUNS) {
        out.runs_scanned += 1;
        let Ok(plan) = engine.plan(&meta.plan_hash) else {
            out.runs_skipped += 1;
            continue;
        };
        let Ok(events) = engine.events(&meta.run_id) else {
            out.runs_skipped += 1;
            continue;
        };
        let table = hashes
            .entry(meta.plan_hash.clone())
            .or_insert_with(|| Hashes::of(&plan));
        let Some(&entry) = plan.index.flow_ids.get(&meta.flow) else {
            out.runs_skipped += 1;
            continue;
        };
        for (hash, step) in fold_run(&plan, table, entry, &events, wanted) {
            out.steps.entry(hash).or_default().merge(&step);
        }
    }
    Ok(out)
}

/// The step hashes of one plan, by flow and step index.
struct Hashes(HashMap<(u32, u32), String>);

impl Hashes {
    fn of(plan: &LoadedPlan) -> Hashes {
        let mut map = HashMap::new();
        for (f, flow) in plan.plan.flows.iter().enumerate() {
            for s in 0..flow.steps.len() {
                if let Some(h) = step_hash(&plan.plan, f as u32, s as u32) {
                    map.insert((f as u32, s as u32), h);
                }
            }
        }
        Hashes(map)
    }
}

/// The step an event's id names (`step`, `call/child`, `fan/3`): sub-flow
/// steps through their `run` step, fanout items as their fanout.
fn locate(plan: &LoadedPlan, entry: u32, id: &str) -> Option<(u32, u32)> {
    let mut flow = entry;
    let mut segments = id.split('/');
    let mut at = *plan
        .index
        .flows
        .get(flow as usize)?
        .ids
        .get(segments.next()?)?;
    for seg in segments {
        let def = plan.plan.flows.get(flow as usize)?.steps.get(at as usize)?;
        match &def.kind {
            StepKindDef::Run { flow: callee, .. } => {
                flow = *callee;
                at = *plan.index.flows.get(flow as usize)?.ids.get(seg)?;
            }
            _ => break,
        }
    }
    Some((flow, at))
}

/// Usage as a debit records it (keys left out when zero).
#[derive(Deserialize)]
struct Amount {
    tokens: Option<f64>,
    usd: Option<f64>,
    ms: Option<f64>,
}

/// One run's figures per wanted step hash (steps it dispatched).
fn fold_run(
    plan: &LoadedPlan,
    hashes: &Hashes,
    entry: u32,
    events: &[Event],
    wanted: &BTreeSet<String>,
) -> BTreeMap<String, StepHistory> {
    let mut per: BTreeMap<String, StepHistory> = BTreeMap::new();
    for event in events {
        let Some(id) = event.step.as_deref() else {
            continue;
        };
        let Some(hash) = locate(plan, entry, id).and_then(|at| hashes.0.get(&at)) else {
            continue;
        };
        if wanted.contains(hash) {
            add_event(per.entry(hash.clone()).or_default(), &event.kind);
        }
    }
    per.retain(|_, h| h.dispatches > 0);
    for h in per.values_mut() {
        h.runs = 1;
    }
    per
}

/// What one event of a step adds to its history.
fn add_event(h: &mut StepHistory, kind: &EventKind) {
    match kind {
        EventKind::Ready { .. } | EventKind::FanoutItemReady { .. } => h.dispatches += 1,
        EventKind::Result(AttemptResult::Output { .. }) => {
            h.attempts += 1;
            h.passed += 1;
        }
        EventKind::Result(AttemptResult::Failure { iterate: None, .. }) => h.attempts += 1,
        EventKind::FanoutAttemptResult { success, .. } => {
            h.attempts += 1;
            h.passed += u64::from(*success);
        }
        EventKind::UsageDebit(UsageDebit::Dispatch { amount, .. })
        | EventKind::FanoutLedgerDebit {
            amount,
            source: None,
            ..
        } => add_amount(h, amount),
        EventKind::Judged { usage, .. } => {
            h.judge_calls += 1;
            h.judge_tokens += usage.tokens;
        }
        _ => {}
    }
}

fn add_amount(h: &mut StepHistory, amount: &Value) {
    let Ok(a) = Amount::deserialize(amount) else {
        return;
    };
    h.tokens = add_opt(h.tokens, a.tokens);
    h.usd = add_opt(h.usd, a.usd);
    h.ms = add_opt(h.ms, a.ms);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::event::JudgeUsage;
    use crate::interp::state::Failure;
    use serde_json::json;

    #[test]
    fn events_fold_into_attempts_usage_and_judge_calls() {
        let mut h = StepHistory::default();
        let events = [
            EventKind::Ready { attempt: 1 },
            EventKind::Result(AttemptResult::Failure {
                attempt: 1,
                failure: Failure::new(1, "no"),
                iterate: None,
            }),
            EventKind::UsageDebit(UsageDebit::Dispatch {
                attempt: 1,
                amount: json!({"tokens": 100, "usd": 0.5, "dispatches": 1}),
            }),
            EventKind::Ready { attempt: 2 },
            EventKind::Result(AttemptResult::Output {
                attempt: 2,
                output: json!({}),
            }),
            EventKind::UsageDebit(UsageDebit::Dispatch {
                attempt: 2,
                amount: json!({"tokens": 300}),
            }),
            EventKind::Judged {
                statement: "s".into(),
                holds: true,
                reason: "r".into(),
                stakes: "cheap".into(),
                model: "m".into(),
                usage: JudgeUsage {
                    tokens: 40.0,
                    usd: 0.0,
                },
                judge: None,
                score: None,
                threshold: None,
                reasons: Vec::new(),
                inputs: Vec::new(),
            },
            // a judge's debit of a fanout item is not the agent's
            EventKind::FanoutLedgerDebit {
                item_index: 0,
                attempt: 1,
                amount: json!({"tokens": 9999}),
                source: Some("judge".into()),
            },
        ];
        for e in &events {
            add_event(&mut h, e);
        }
        assert_eq!((h.dispatches, h.attempts, h.passed), (2, 2, 1));
        assert_eq!(h.pass_rate(), Some(0.5));
        assert_eq!(h.per_dispatch(h.tokens), Some(200.0));
        assert_eq!(h.per_dispatch(h.usd), Some(0.25));
        // no debit reported time: unknown, not zero
        assert_eq!(h.per_dispatch(h.ms), None);
        assert_eq!(h.judge_tokens_per_call(), Some(40.0));
    }

    #[test]
    fn an_iterate_cycle_is_not_a_failed_attempt() {
        let mut h = StepHistory::default();
        add_event(
            &mut h,
            &EventKind::Result(AttemptResult::Failure {
                attempt: 1,
                failure: Failure::new(1, "until"),
                iterate: Some(crate::interp::event::Iteration {
                    iteration: 1,
                    max: 3,
                }),
            }),
        );
        assert_eq!(h.attempts, 0);
        assert_eq!(h.pass_rate(), None);
    }
}
