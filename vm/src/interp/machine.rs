//! The transitions of a run: start, report, resolve a gate, cancel, view.
//!
//! Owns: scheduling with a worklist (a transition looks only at the steps it
//! can affect, so its cost does not grow with the steps already done),
//! attempts, routes, gates, resets, fanout items, sub-flow frames, ledgers,
//! carry, output, tokens and audit events.
//! Must never: do I/O except through `Host`, or leave a run half-changed when
//! it returns an error (every check that can refuse runs before any write).

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::index::PlanIndex;
use super::state::*;
use super::{Host, Outcome, Receipt, ReceiptOutcome, Report, VmError};
use crate::eval::contract::{check_record, check_record_at};
use crate::eval::template::{RefValues, render};
use crate::eval::value::type_name;
use crate::eval::{Bindings, Files, ResultBinding, StepOutputs, eval};
use crate::plan::*;

struct M<'a> {
    plan: &'a Plan,
    index: &'a PlanIndex,
    run: &'a mut Run,
    host: &'a mut dyn Host,
    queue: VecDeque<(u32, u32)>,
    /// Root of file predicates while an item of a worktree fanout is checked
    /// (its worktree); `None`: the workspace root.
    file_root: Option<String>,
}

/// Which ledger was exceeded.
enum Breach {
    /// The entry flow's budget: the run ends `budget_exhausted`.
    Root,
    /// A sub-flow's budget (its flow or its `run` step): the `run` step fails.
    Sub(u32),
    /// The step's own budget: the attempt fails.
    Task,
}

fn v(u: u32) -> usize {
    u as usize
}

impl<'a> M<'a> {
    // ----- accessors --------------------------------------------------------

    fn flow(&self, f: u32) -> &'a FlowDef {
        &self.plan.flows[v(self.run.header.frames[v(f)].flow)]
    }

    fn def(&self, f: u32, i: u32) -> &'a StepDef {
        &self.flow(f).steps[v(i)]
    }

    fn st(&self, f: u32, i: u32) -> &StepState {
        &self.run.steps[v(f)][v(i)]
    }

    fn st_mut(&mut self, f: u32, i: u32) -> &mut StepState {
        self.run.dirty.insert(row_key(f, i));
        &mut self.run.steps[v(f)][v(i)]
    }

    fn fidx(&self, f: u32) -> &'a super::index::FlowIndex {
        &self.index.flows[v(self.run.header.frames[v(f)].flow)]
    }

    /// The id clients see: `step`, `parent/child`.
    fn sid(&self, f: u32, i: u32) -> String {
        let own = self.plan.str(self.def(f, i).id);
        match self.run.header.frames[v(f)].parent {
            Some((pf, ps)) => format!("{}/{own}", self.sid(pf, ps)),
            None => own.to_string(),
        }
    }

    fn now(&mut self) -> i64 {
        self.host.now_ms()
    }

    fn event(&mut self, kind: &str, step: Option<String>, detail: Value) {
        let at = self.now();
        self.run.events.push(Event {
            at,
            kind: kind.into(),
            step,
            detail,
        });
    }

    fn mint(&mut self, prefix: &str) -> String {
        self.run.header.issued += 1;
        let n = self.run.header.issued;
        let h = blake3::hash(
            format!(
                "{}:{}:{}",
                self.run.header.id, n, self.run.header.created_ms
            )
            .as_bytes(),
        );
        format!("{prefix}{n}-{}", &h.to_hex()[..12])
    }

    fn set_status(&mut self, f: u32, i: u32, status: StepStatus) {
        let old = self.st(f, i).status;
        if old == status {
            return;
        }
        let frame = &mut self.run.header.frames[v(f)];
        if old.is_terminal() && !status.is_terminal() {
            frame.live += 1;
        } else if !old.is_terminal() && status.is_terminal() {
            frame.live = frame.live.saturating_sub(1);
        }
        let key = (f, i, 0);
        if old == StepStatus::Ready {
            self.run.header.ready.remove(&key);
        }
        if status == StepStatus::Ready {
            self.run.header.ready.insert(key);
        }
        if old == StepStatus::WaitingGate {
            self.run.header.gates.remove(&(f, i));
        }
        if status == StepStatus::WaitingGate {
            self.run.header.gates.insert((f, i));
        }
        self.st_mut(f, i).status = status;
    }

    fn enqueue_succ(&mut self, f: u32, i: u32) {
        for &(t, _) in &self.fidx(f).succ[v(i)] {
            self.queue.push_back((f, t));
        }
    }

    fn end_run(&mut self, status: RunStatus, failure: Option<Failure>) {
        if self.run.header.status.is_terminal() {
            return;
        }
        self.run.header.status = status;
        self.run.header.failure = failure.clone();
        let detail = failure.map_or(
            Value::Null,
            |f| json!({"attempt": f.attempt, "reason": f.reason}),
        );
        self.event(status.as_str(), None, detail);
        self.burn_tokens();
        self.drop_all_worktrees();
    }

    // ----- worktrees (`isolation: worktree`, engine dispatch) ----------------

    /// Whether step `i` of frame `f` is a fanout whose items run in git worktrees made by the host.
    fn isolated(&self, f: u32, i: u32) -> bool {
        matches!(
            self.def(f, i).kind,
            StepKindDef::Fanout {
                worktree: true,
                consumer: false,
                ..
            }
        )
    }

    /// Removes item `k`'s worktree if it has one (a worktree is always
    /// removed: after success, failure, skip, reset, or the end of the run).
    fn drop_worktree(&mut self, f: u32, i: u32, k: u32) {
        let Some(dir) = self
            .st(f, i)
            .items
            .get(v(k))
            .and_then(|it| it.worktree.clone())
        else {
            return;
        };
        self.st_mut(f, i).items[v(k)].worktree = None;
        let id = self.sid(f, i);
        let detail = match self.host.worktree_remove(&dir) {
            Ok(()) => json!({"itemIndex": k, "path": dir}),
            Err(e) => json!({"itemIndex": k, "path": dir, "error": e}),
        };
        self.event("worktree_removed", Some(id), detail);
    }

    fn drop_worktrees(&mut self, f: u32, i: u32) {
        for k in 0..self.st(f, i).items.len() as u32 {
            self.drop_worktree(f, i, k);
        }
    }

    /// Removes every live worktree of the run (it ended or was cancelled).
    fn drop_all_worktrees(&mut self) {
        for f in 0..self.run.steps.len() as u32 {
            for i in 0..self.run.steps[v(f)].len() as u32 {
                if self.st(f, i).items.iter().any(|it| it.worktree.is_some()) {
                    self.drop_worktrees(f, i);
                }
            }
        }
    }

    /// `file_exists` at the current file root.
    fn host_file_exists(&mut self, path: &str) -> Result<(bool, Value), String> {
        match self.file_root.as_deref() {
            Some(root) => self.host.file_exists_in(root, path),
            None => self.host.file_exists(path),
        }
    }

    /// `file_contains` at the current file root.
    fn host_file_contains(&mut self, path: &str, text: &str) -> Result<(bool, Value), String> {
        match self.file_root.as_deref() {
            Some(root) => self.host.file_contains_in(root, path, text),
            None => self.host.file_contains(path, text),
        }
    }

    /// Drops every live token (terminal runs hand nothing out).
    fn burn_tokens(&mut self) {
        self.burn_where(|_| true);
    }

    /// Drops the live tokens of frames that `frame` selects (steps, fanout items and gates).
    fn burn_where(&mut self, frame: impl Fn(u32) -> bool) {
        let ready: Vec<(u32, u32, u32)> = self
            .run
            .header
            .ready
            .iter()
            .copied()
            .filter(|k| frame(k.0))
            .collect();
        for (f, i, item) in ready {
            self.run.header.ready.remove(&(f, i, item));
            if item == 0 {
                self.st_mut(f, i).token = None;
            } else if let Some(it) = self.st_mut(f, i).items.get_mut(v(item - 1)) {
                it.token = None;
            }
        }
        let gates: Vec<(u32, u32)> = self
            .run
            .header
            .gates
            .iter()
            .copied()
            .filter(|k| frame(k.0))
            .collect();
        for (f, i) in gates {
            self.run.header.gates.remove(&(f, i));
            self.st_mut(f, i).token = None;
        }
    }

    // ----- values -----------------------------------------------------------

    fn frame_input(&self, f: u32) -> &Value {
        &self.run.header.frames[v(f)].input
    }

    /// Resolves a reference in frame `f` (items bind `item`/`prev`).
    fn resolve(
        &self,
        f: u32,
        r: &RefDef,
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> Option<Value> {
        let base: Value = match r.target {
            RefTarget::Input => self.frame_input(f).clone(),
            RefTarget::Step(s) => {
                let st = self.run.steps[v(f)].get(v(s))?;
                if st.status != StepStatus::Succeeded {
                    return None;
                }
                st.output.clone()?
            }
            RefTarget::Item => item?.clone(),
            RefTarget::Prev => prev?.clone(),
            RefTarget::Carry(c) => {
                let name = self.plan.str(self.flow(0).carry.get(v(c))?.name);
                self.run.header.carry.get(name)?.value.clone()
            }
        };
        walk(&base, &r.path, self.plan).cloned()
    }

    fn render(
        &self,
        f: u32,
        t: u32,
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> Result<Value, String> {
        let td = &self.flow(f).templates[v(t)];
        let refs = Refs {
            m: self,
            f,
            item,
            prev,
        };
        render(self.plan, td, &refs)
    }

    fn run_chunk(
        &mut self,
        f: u32,
        c: u32,
        result: ResultSel<'_>,
        item: Option<&Value>,
        prev: Option<Option<&Value>>,
    ) -> Result<Value, String> {
        let chunk = &self.flow(f).chunks[v(c)];
        let frame_steps = &self.run.steps[v(f)];
        let outputs = Outputs {
            ids: &self.fidx(f).ids,
            steps: frame_steps,
        };
        let input = &self.run.header.frames[v(f)].input;
        let result = match result {
            ResultSel::Steps => ResultBinding::Steps(&outputs),
            ResultSel::Value(v) => ResultBinding::Value(v),
        };
        let b = Bindings {
            result,
            input,
            item,
            prev,
        };
        let mut files = HostFiles {
            host: &mut *self.host,
            root: self.file_root.as_deref(),
            evidence: Vec::new(),
        };
        let r = eval(self.plan, chunk, &b, &mut files);
        let evidence = std::mem::take(&mut files.evidence);
        for e in evidence {
            self.event("evidence", None, e);
        }
        r.map_err(|e| e.to_string())
    }

    // ----- ledgers ----------------------------------------------------------

    /// The ledgers a step of frame `f` charges, innermost first: (kind, limit, frame, step).
    fn ledgers(&self, f: u32, i: Option<u32>) -> Vec<(Option<&'a BudgetDef>, LedgerAt)> {
        let mut out = Vec::new();
        if let Some(i) = i {
            out.push((self.def(f, i).budget.as_ref(), LedgerAt::Step(f, i)));
        }
        let mut frame = f;
        loop {
            out.push((self.flow(frame).budget.as_ref(), LedgerAt::Frame(frame)));
            match self.run.header.frames[v(frame)].parent {
                Some((pf, ps)) => {
                    out.push((self.def(pf, ps).budget.as_ref(), LedgerAt::Step(pf, ps)));
                    frame = pf;
                }
                None => break,
            }
        }
        out
    }

    fn spent(&self, at: LedgerAt) -> Spend {
        match at {
            LedgerAt::Step(f, i) => self.st(f, i).spent,
            LedgerAt::Frame(f) => self.run.header.frames[v(f)].spent,
        }
    }

    fn add_spent(&mut self, at: LedgerAt, s: &Spend) {
        match at {
            LedgerAt::Step(f, i) => self.st_mut(f, i).spent.add(s),
            LedgerAt::Frame(f) => self.run.header.frames[v(f)].spent.add(s),
        }
    }

    /// The most severe breach among the ledgers if `amount` were added.
    fn breach(
        &self,
        f: u32,
        i: Option<u32>,
        amount: &Spend,
        already_added: bool,
    ) -> Option<Breach> {
        let mut worst: Option<Breach> = None;
        for (limit, at) in self.ledgers(f, i) {
            let Some(limit) = limit else { continue };
            let mut s = self.spent(at);
            if !already_added {
                s.add(amount);
            }
            let over = |spent: f64, lim: Option<f64>| lim.is_some_and(|l| spent > l + 1e-9);
            let exceeded = over(s.usd, limit.usd)
                || over(s.tokens, limit.tokens.map(|x| x as f64))
                || over(s.dispatches, limit.dispatches.map(|x| x as f64))
                || over(s.ms, limit.ms.map(|x| x as f64));
            if !exceeded {
                continue;
            }
            let b = match at {
                LedgerAt::Frame(0) => Breach::Root,
                LedgerAt::Frame(fr) => Breach::Sub(fr),
                LedgerAt::Step(sf, si) if Some(si) == i && sf == f => Breach::Task,
                LedgerAt::Step(sf, _) => {
                    // a run step's budget: the sub-flow it called
                    match self.st(sf, at.step()).child {
                        Some(child) => Breach::Sub(child),
                        None => Breach::Task,
                    }
                }
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
    fn reserve(&mut self, f: u32, i: u32) -> Result<(), Breach> {
        let one = Spend {
            dispatches: 1.0,
            ..Spend::default()
        };
        if let Some(b) = self.breach(f, Some(i), &one, false) {
            return Err(b);
        }
        for (_, at) in self.ledgers(f, Some(i)) {
            self.add_spent(at, &one);
        }
        Ok(())
    }

    /// Records usage in every ledger (even over the limit) and reports a breach.
    fn settle(&mut self, f: u32, i: u32, amount: &Spend) -> Option<Breach> {
        for (_, at) in self.ledgers(f, Some(i)) {
            self.add_spent(at, amount);
        }
        self.breach(f, Some(i), amount, true)
    }

    /// Applies a breach found while working on step `i` of frame `f`.
    /// Returns true when the attempt itself should fail (task ledger).
    fn apply_breach(&mut self, f: u32, b: Breach, what: &str) -> bool {
        match b {
            Breach::Root => {
                self.end_run(
                    RunStatus::BudgetExhausted,
                    Some(Failure::new(0, format!("flow budget exhausted{what}"))),
                );
                false
            }
            Breach::Sub(child) => {
                if let Some((pf, ps)) = self.run.header.frames[v(child)].parent {
                    let _ = f;
                    self.fail_forced(pf, ps, format!("subflow budget exhausted{what}"));
                }
                false
            }
            Breach::Task => true,
        }
    }

    // ----- scheduling -------------------------------------------------------

    fn advance(&mut self) {
        self.materialize_carry();
        loop {
            while let Some((f, i)) = self.queue.pop_front() {
                if self.run.header.status.is_terminal() {
                    self.queue.clear();
                    break;
                }
                if self.run.header.frames[v(f)].closed {
                    continue;
                }
                if self.st(f, i).status == StepStatus::Pending {
                    self.try_step(f, i);
                }
            }
            // finishing a frame makes its `run` step succeed, which queues its successors
            self.settle_frames();
            if self.queue.is_empty() || self.run.header.status.is_terminal() {
                break;
            }
        }
        if self.run.header.status == RunStatus::Running
            && self.run.header.ready.is_empty()
            && self.run.header.gates.is_empty()
        {
            let live = self.run.header.frames[0].live;
            if live > 0 {
                self.end_run(
                    RunStatus::Failed,
                    Some(Failure::new(0, "no runnable steps remain")),
                );
            }
        }
    }

    /// Finishes frames whose steps are all terminal (sub-flows first, then the entry flow).
    fn settle_frames(&mut self) {
        for f in (0..self.run.header.frames.len() as u32).rev() {
            if self.run.header.status.is_terminal() {
                return;
            }
            let frame = &self.run.header.frames[v(f)];
            if frame.closed || frame.live > 0 {
                continue;
            }
            let result = self.frame_output(f);
            self.run.header.frames[v(f)].closed = true;
            match self.run.header.frames[v(f)].parent {
                None => match result {
                    Ok(out) => {
                        self.run.header.output = Some(out.clone());
                        self.run.header.status = RunStatus::Completed;
                        self.event("completed", None, json!({"output": out}));
                        self.burn_tokens();
                    }
                    Err(reason) => self.end_run(RunStatus::Failed, Some(Failure::new(0, reason))),
                },
                Some((pf, ps)) => match result {
                    Ok(out) => self.succeed(pf, ps, out),
                    Err(reason) => self.fail_forced(pf, ps, format!("sub-flow failed: {reason}")),
                },
            }
        }
    }

    fn frame_output(&self, f: u32) -> Result<Value, String> {
        let flow = self.flow(f);
        let o = &flow.output;
        let src = self.st(f, o.step);
        let src_id = self.plan.str(self.def(f, o.step).id);
        if src.status != StepStatus::Succeeded {
            return Err(format!(
                "the flow output comes from step `{src_id}`, which {}",
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
    fn try_step(&mut self, f: u32, i: u32) {
        let fidx = self.fidx(f);
        // routes: a route target waits to be chosen; not chosen → skipped (E2)
        if !fidx.routers[v(i)].is_empty() && self.st(f, i).routed.is_none() {
            let all_done = fidx.routers[v(i)]
                .iter()
                .all(|&(r, _)| self.st(f, r).status.is_terminal());
            if all_done {
                self.skip(f, i, "no route chose this step");
            }
            return;
        }
        // dependencies: skipped ones satisfy order edges; handled failures skip dependants (E2)
        for &(d, kind) in &fidx.deps[v(i)] {
            let ds = self.st(f, d);
            match ds.status {
                StepStatus::Succeeded => {}
                StepStatus::Skipped if kind == EdgeKind::Order => {}
                StepStatus::Skipped => {
                    let name = self.plan.str(self.def(f, d).id).to_string();
                    self.skip(
                        f,
                        i,
                        &format!("it reads the output of `{name}`, which was skipped"),
                    );
                    return;
                }
                StepStatus::Failed => {
                    let name = self.plan.str(self.def(f, d).id).to_string();
                    self.skip(f, i, &format!("`{name}` failed and its failure was routed"));
                    return;
                }
                _ => return,
            }
        }
        let def = self.def(f, i);
        if let Some(c) = def.when {
            match self.run_chunk(f, c, ResultSel::Steps, None, None) {
                Ok(Value::Bool(true)) => {}
                Ok(_) => {
                    self.skip(f, i, "`when` is not true");
                    return;
                }
                Err(e) => {
                    // E1: a `when` that errors fails the step (its on_fail may route it)
                    self.fail_forced(f, i, format!("when_error: {e}"));
                    return;
                }
            }
        }
        match &def.kind {
            StepKindDef::Do { .. } => self.issue(f, i),
            StepKindDef::Set { fields } => self.run_set(f, i, fields),
            StepKindDef::Gate { .. } => {
                let token = self.mint("g");
                self.st_mut(f, i).token = Some(token);
                self.set_status(f, i, StepStatus::WaitingGate);
                let id = self.sid(f, i);
                let round = self.run.header.frames[v(f)].rounds;
                self.event("gate_waiting", Some(id), json!({"round": round}));
            }
            StepKindDef::Fanout { over, .. } => self.start_fanout(f, i, *over),
            StepKindDef::Run { flow, with } => self.start_subflow(f, i, *flow, with),
        }
    }

    fn skip(&mut self, f: u32, i: u32, reason: &str) {
        self.set_status(f, i, StepStatus::Skipped);
        let id = self.sid(f, i);
        self.event("skipped", Some(id), json!({"reason": reason}));
        self.enqueue_succ(f, i);
    }

    /// Makes a `do` step ready: render, reserve a dispatch, mint a token.
    fn issue(&mut self, f: u32, i: u32) {
        let StepKindDef::Do { task, .. } = self.def(f, i).kind else {
            return;
        };
        let attempt = self.st(f, i).attempts + 1;
        if let Err(reason) = self.render(f, task, None, None) {
            self.st_mut(f, i).attempts = attempt;
            self.fail_attempt(f, i, Failure::new(attempt, reason), None, false);
            return;
        }
        match self.reserve(f, i) {
            Ok(()) => {}
            Err(b) => {
                if self.apply_breach(f, b, "") {
                    self.st_mut(f, i).attempts = attempt;
                    self.fail_attempt(
                        f,
                        i,
                        Failure::new(attempt, "task budget exhausted"),
                        None,
                        true,
                    );
                }
                return;
            }
        }
        let token = self.mint("d");
        let st = self.st_mut(f, i);
        st.attempts = attempt;
        st.token = Some(token);
        self.set_status(f, i, StepStatus::Ready);
        let id = self.sid(f, i);
        self.event("ready", Some(id), json!({"attempt": attempt}));
    }

    fn succeed(&mut self, f: u32, i: u32, output: Value) {
        let attempt = self.st(f, i).attempts.max(1);
        let st = self.st_mut(f, i);
        st.output = Some(output.clone());
        st.token = None;
        st.failure = None;
        st.attempts = attempt;
        self.set_status(f, i, StepStatus::Succeeded);
        let id = self.sid(f, i);
        self.event(
            "result",
            Some(id),
            json!({"attempt": attempt, "output": output}),
        );
        self.enqueue_succ(f, i);
        if f == 0 {
            self.materialize_carry();
        }
    }

    /// A failure that is never retried (set, run, fanout settlement, when errors, iterate exhaustion).
    fn fail_forced(&mut self, f: u32, i: u32, reason: String) {
        let attempt = self.st(f, i).attempts.max(1);
        self.fail_attempt(f, i, Failure::new(attempt, reason), None, true);
    }

    /// Records a failed attempt; retries while attempts remain, else exhausts the step.
    fn fail_attempt(
        &mut self,
        f: u32,
        i: u32,
        mut failure: Failure,
        output: Option<Value>,
        forced: bool,
    ) {
        let max = match self.def(f, i).kind {
            StepKindDef::Do { attempts, .. } => attempts,
            _ => 1,
        };
        let identical = output.is_some() && output == self.st(f, i).last_output;
        if identical {
            failure.reason.push_str(" (no retry: identical evidence)");
        }
        let st = self.st_mut(f, i);
        st.token = None;
        st.last_output = output;
        st.failure = Some(failure.clone());
        let attempts = st.attempts;
        let id = self.sid(f, i);
        self.event(
            "result",
            Some(id),
            json!({"attempt": failure.attempt, "failure": failure}),
        );
        if !forced && !identical && attempts < max && !self.run.header.status.is_terminal() {
            self.set_status(f, i, StepStatus::Pending);
            self.queue.push_back((f, i));
            return;
        }
        self.exhaust(f, i, failure);
    }

    /// The step failed for good: route it, fail the parent, or fail the run.
    fn exhaust(&mut self, f: u32, i: u32, failure: Failure) {
        self.set_status(f, i, StepStatus::Failed);
        self.st_mut(f, i).failure = Some(failure.clone());
        self.drop_child(f, i);
        if let Some(target) = self.def(f, i).on_fail {
            self.st_mut(f, i).handled = true;
            self.st_mut(f, target).routed = Some(failure.clone());
            let id = self.sid(f, i);
            let tid = self.plan.str(self.def(f, target).id).to_string();
            self.event(
                "routed",
                Some(id),
                json!({"target": tid, "failure": failure}),
            );
            self.queue.push_back((f, target));
            self.enqueue_succ(f, i);
            return;
        }
        match self.run.header.frames[v(f)].parent {
            Some((pf, ps)) => {
                let id = self.plan.str(self.def(f, i).id).to_string();
                self.run.header.frames[v(f)].closed = true;
                self.burn_frame(f);
                self.fail_forced(
                    pf,
                    ps,
                    format!("step `{id}` of the sub-flow failed: {}", failure.reason),
                );
            }
            None => self.end_run(RunStatus::Failed, Some(failure)),
        }
    }

    /// Closes a running step's sub-flow (when the step fails or is reset).
    fn drop_child(&mut self, f: u32, i: u32) -> Option<u32> {
        let child = self.st_mut(f, i).child.take()?;
        self.run.header.frames[v(child)].closed = true;
        self.burn_frame(child);
        Some(child)
    }

    fn burn_frame(&mut self, f: u32) {
        self.burn_where(|fr| fr == f);
    }

    // ----- checks of an output ---------------------------------------------

    /// Contract and ensures of an output; the failure with its violations when one fails.
    #[allow(clippy::too_many_arguments)]
    fn check_output(
        &mut self,
        f: u32,
        out: Option<u32>,
        ensure: &[PredDef],
        output: &Value,
        attempt: u32,
        item: Option<(&Value, Option<&Value>)>,
        step_id: &str,
    ) -> Result<(Spend, ()), (Failure, Spend)> {
        let mut usage = Spend::default();
        if let Some(rec) = out
            && let Err(e) = check_record(self.plan, rec, output)
        {
            return Err((
                Failure {
                    attempt,
                    reason: format!("output does not satisfy its contract: {e}"),
                    violations: vec![json!({"kind": "contract", "message": e})],
                },
                usage,
            ));
        }
        for p in ensure {
            let verdict: Result<(), (String, Value)> = match p {
                PredDef::Expr(c) => {
                    let source = self.plan.str(self.flow(f).chunks[v(*c)].source).to_string();
                    let r = match item {
                        Some((it, prev)) => {
                            self.run_chunk(f, *c, ResultSel::Value(output), Some(it), Some(prev))
                        }
                        None => self.run_chunk(f, *c, ResultSel::Value(output), None, None),
                    };
                    match r {
                        Ok(Value::Bool(true)) => Ok(()),
                        Ok(Value::Bool(false)) => Err((
                            format!("ensure {source:?} failed: predicate evaluated to false"),
                            json!({"kind": "ensure", "expr": source, "reason": "predicate evaluated to false"}),
                        )),
                        Ok(other) => {
                            let why = format!(
                                "type_error: predicate must evaluate to boolean, received {}",
                                type_name(&other)
                            );
                            Err((
                                format!("ensure {source:?} failed: {why}"),
                                json!({"kind": "ensure", "expr": source, "reason": why}),
                            ))
                        }
                        Err(why) => Err((
                            format!("ensure {source:?} failed: {why}"),
                            json!({"kind": "ensure", "expr": source, "reason": why}),
                        )),
                    }
                }
                PredDef::FileExists(p) => {
                    let path = self.plan.str(*p).to_string();
                    match self.host_file_exists(&path) {
                        Ok((true, ev)) => {
                            self.event("evidence", Some(step_id.to_string()), ev);
                            Ok(())
                        }
                        Ok((false, ev)) => {
                            self.event("evidence", Some(step_id.to_string()), ev);
                            Err((
                                format!("ensure file_exists {path:?} failed: no such file"),
                                json!({"kind": "ensure", "file_exists": path, "reason": "no such file"}),
                            ))
                        }
                        Err(why) => Err((
                            format!("ensure file_exists {path:?} failed: validation_error: {why}"),
                            json!({"kind": "ensure", "file_exists": path, "reason": why}),
                        )),
                    }
                }
                PredDef::FileContains(p, t) => {
                    let (path, text) =
                        (self.plan.str(*p).to_string(), self.plan.str(*t).to_string());
                    match self.host_file_contains(&path, &text) {
                        Ok((true, ev)) => {
                            self.event("evidence", Some(step_id.to_string()), ev);
                            Ok(())
                        }
                        Ok((false, ev)) => {
                            self.event("evidence", Some(step_id.to_string()), ev);
                            Err((
                                format!(
                                    "ensure file_contains {path:?} {text:?} failed: text not found"
                                ),
                                json!({"kind": "ensure", "file_contains": {"path": path, "text": text}, "reason": "text not found"}),
                            ))
                        }
                        Err(why) => Err((
                            format!(
                                "ensure file_contains {path:?} failed: validation_error: {why}"
                            ),
                            json!({"kind": "ensure", "file_contains": {"path": path, "text": text}, "reason": why}),
                        )),
                    }
                }
                PredDef::Judged(s, stakes) => {
                    let statement = self.plan.str(*s).to_string();
                    let stakes = match stakes {
                        Stakes::Cheap => "cheap",
                        Stakes::Default => "default",
                        Stakes::Paranoid => "paranoid",
                    };
                    let context = json!({"result": output, "input": self.frame_input(f)});
                    let verdict = self.host.judge(&statement, stakes, &context);
                    let (holds, reason, model, tokens, usd) = match &verdict {
                        Ok(v) => (v.holds, v.reason.clone(), v.model.clone(), v.tokens, v.usd),
                        Err(e) => (false, e.clone(), "none".to_string(), 0.0, 0.0),
                    };
                    usage.tokens += tokens;
                    usage.usd += usd;
                    self.event("judged", Some(step_id.to_string()), json!({"statement": statement, "holds": holds, "reason": reason, "stakes": stakes, "model": model, "usage": {"tokens": tokens, "usd": usd}}));
                    match verdict {
                        Ok(v) if v.holds => Ok(()),
                        Ok(v) => Err((
                            format!("ensure judged {statement:?} failed: {}", v.reason),
                            json!({"kind": "judged", "statement": statement, "reason": v.reason}),
                        )),
                        Err(e) => Err((
                            format!("ensure judged {statement:?} failed: {e}"),
                            json!({"kind": "judged", "statement": statement, "reason": e}),
                        )),
                    }
                }
            };
            if let Err((reason, violation)) = verdict {
                return Err((
                    Failure {
                        attempt,
                        reason,
                        violations: vec![violation],
                    },
                    usage,
                ));
            }
        }
        Ok((usage, ()))
    }

    // ----- set, fanout, run --------------------------------------------------

    fn run_set(&mut self, f: u32, i: u32, fields: &[(StrId, u32)]) {
        self.st_mut(f, i).attempts = 1;
        let mut obj = serde_json::Map::new();
        for (k, c) in fields {
            match self.run_chunk(f, *c, ResultSel::Steps, None, None) {
                Ok(val) => {
                    obj.insert(self.plan.str(*k).to_string(), val);
                }
                Err(e) => {
                    // E1: deterministic, no retry
                    let key = self.plan.str(*k).to_string();
                    self.fail_forced(f, i, format!("set `{key}` failed: {e}"));
                    return;
                }
            }
        }
        let output = Value::Object(obj);
        let def = self.def(f, i);
        let id = self.sid(f, i);
        match self.check_output(f, def.out, &def.ensure, &output, 1, None, &id) {
            Ok(_) => self.succeed(f, i, output),
            Err((failure, _)) => self.fail_attempt(f, i, failure, Some(output), true),
        }
    }

    fn start_fanout(&mut self, f: u32, i: u32, over: u32) {
        let attempt = self.st(f, i).attempts + 1;
        self.st_mut(f, i).attempts = attempt;
        let list = match self.render(f, over, None, None) {
            Ok(Value::Array(items)) => items,
            Ok(other) => {
                self.fail_attempt(
                    f,
                    i,
                    Failure {
                        attempt,
                        reason: format!(
                            "fanout over must resolve to an array, found {}",
                            type_name(&other)
                        ),
                        violations: vec![],
                    },
                    None,
                    false,
                );
                return;
            }
            Err(reason) => {
                self.fail_attempt(f, i, Failure::new(attempt, reason), None, false);
                return;
            }
        };
        let st = self.st_mut(f, i);
        st.items = list
            .into_iter()
            .map(|value| ItemState {
                value,
                ..ItemState::default()
            })
            .collect();
        self.set_status(f, i, StepStatus::Running);
        let n = self.st(f, i).items.len();
        if n == 0 {
            self.settle_fanout(f, i);
            return;
        }
        self.pump(f, i);
    }

    fn fanout_def(&self, f: u32, i: u32) -> Option<(&'a [StageDef], u32, Require)> {
        match &self.def(f, i).kind {
            StepKindDef::Fanout {
                stages,
                concurrency,
                require,
                ..
            } => Some((stages, *concurrency, *require)),
            _ => None,
        }
    }

    /// Promotes pending items to ready, up to `concurrency` in flight.
    fn pump(&mut self, f: u32, i: u32) {
        let Some((stages, concurrency, _)) = self.fanout_def(f, i) else {
            return;
        };
        loop {
            if self.run.header.status.is_terminal() || self.st(f, i).status != StepStatus::Running {
                return;
            }
            let items = &self.st(f, i).items;
            let in_flight = items
                .iter()
                .filter(|it| it.status == StepStatus::Ready)
                .count() as u32;
            if in_flight >= concurrency {
                break;
            }
            let Some(k) = items.iter().position(|it| it.status == StepStatus::Pending) else {
                break;
            };
            self.issue_item(f, i, k as u32, stages);
        }
        if self.st(f, i).items.iter().all(|it| it.status.is_terminal())
            && self.st(f, i).status == StepStatus::Running
        {
            self.settle_fanout(f, i);
        }
    }

    /// Readies item `k` at its current stage (evaluating stage `when`s on the way).
    fn issue_item(&mut self, f: u32, i: u32, k: u32, stages: &[StageDef]) {
        if self.isolated(f, i) && !self.make_worktree(f, i, k) {
            return;
        }
        self.file_root = self.st(f, i).items[v(k)].worktree.clone();
        self.issue_item_stage(f, i, k, stages);
        self.file_root = None;
        if self.st(f, i).items[v(k)].status.is_terminal() {
            self.drop_worktree(f, i, k);
        }
    }

    /// Gives item `k` its worktree unless it has one; false when the host
    /// could not make it (the item then failed).
    fn make_worktree(&mut self, f: u32, i: u32, k: u32) -> bool {
        if self.st(f, i).items[v(k)].worktree.is_some() {
            return true;
        }
        let id = self.sid(f, i);
        let name = format!("{id}-e{}-{k}", self.st(f, i).epoch);
        let run_id = self.run.header.id.clone();
        match self.host.worktree_create(&run_id, &name) {
            Ok(dir) => {
                self.event(
                    "worktree_created",
                    Some(id),
                    json!({"itemIndex": k, "path": dir}),
                );
                self.st_mut(f, i).items[v(k)].worktree = Some(dir);
                true
            }
            Err(e) => {
                let it = &mut self.st_mut(f, i).items[v(k)];
                it.attempts += 1;
                it.status = StepStatus::Failed;
                let failure = Failure::new(
                    it.attempts,
                    format!("could not create the item's git worktree: {e}"),
                );
                it.failure = Some(failure.clone());
                self.event(
                    "fanout_attempt_result",
                    Some(id),
                    json!({"itemIndex": k, "stage": 0, "attempt": failure.attempt, "success": false, "failure": failure}),
                );
                false
            }
        }
    }

    fn issue_item_stage(&mut self, f: u32, i: u32, k: u32, stages: &[StageDef]) {
        loop {
            let it = &self.st(f, i).items[v(k)];
            let stage_i = it.stage;
            let Some(stage) = stages.get(v(stage_i)) else {
                return;
            };
            let (value, prev) = (it.value.clone(), it.output.clone());
            if let Some(c) = stage.when {
                let r = self.run_chunk(f, c, ResultSel::Steps, Some(&value), Some(prev.as_ref()));
                if !matches!(r, Ok(Value::Bool(true))) {
                    let id = self.sid(f, i);
                    self.event(
                        "fanout_item_skipped",
                        Some(id),
                        json!({"itemIndex": k, "stage": stage_i}),
                    );
                    let last = v(stage_i) + 1 == stages.len();
                    let it = &mut self.st_mut(f, i).items[v(k)];
                    if last {
                        it.status = StepStatus::Skipped;
                        it.output = None;
                        return;
                    }
                    it.stage += 1;
                    it.stage_attempts = 0;
                    continue;
                }
            }
            if let Err(reason) = self.render(f, stage.task, Some(&value), prev.as_ref()) {
                let it = &mut self.st_mut(f, i).items[v(k)];
                it.attempts += 1;
                it.status = StepStatus::Failed;
                it.failure = Some(Failure::new(it.attempts, reason));
                return;
            }
            match self.reserve(f, i) {
                Ok(()) => {}
                Err(b) => {
                    if self.apply_breach(f, b, "") {
                        let it = &mut self.st_mut(f, i).items[v(k)];
                        it.attempts += 1;
                        it.status = StepStatus::Failed;
                        it.failure = Some(Failure::new(it.attempts, "task budget exhausted"));
                    }
                    return;
                }
            }
            let token = self.mint("d");
            let it = &mut self.st_mut(f, i).items[v(k)];
            it.attempts += 1;
            it.stage_attempts += 1;
            it.token = Some(token);
            it.status = StepStatus::Ready;
            let attempt = it.attempts;
            self.run.header.ready.insert((f, i, k + 1));
            let id = self.sid(f, i);
            self.event(
                "fanout_item_ready",
                Some(id),
                json!({"itemIndex": k, "stage": stage_i, "attempt": attempt}),
            );
            return;
        }
    }

    fn settle_fanout(&mut self, f: u32, i: u32) {
        let Some((_, _, require)) = self.fanout_def(f, i) else {
            return;
        };
        let items = &self.st(f, i).items;
        let n = items.len();
        let ok = items
            .iter()
            .filter(|it| it.status == StepStatus::Succeeded)
            .count();
        let needed = match require {
            Require::All => n,
            Require::Any => 1,
            Require::AtLeast(k) => v(k),
        };
        if ok < needed {
            let r = match require {
                Require::All => "all".to_string(),
                Require::Any => "any".to_string(),
                Require::AtLeast(k) => k.to_string(),
            };
            self.fail_forced(
                f,
                i,
                format!("fanout require {r} not met ({ok}/{n} succeeded)"),
            );
            return;
        }
        let output = Value::Array(
            items
                .iter()
                .map(|it| {
                    if it.status == StepStatus::Succeeded {
                        it.output.clone().unwrap_or(Value::Null)
                    } else {
                        Value::Null
                    }
                })
                .collect(),
        );
        if self.isolated(f, i) && !self.merge_patches(f, i) {
            return;
        }
        self.succeed(f, i, output);
    }

    /// Merges the patches of the succeeded items in index order after the
    /// `pre_merge` commands; false when that failed (the run failed: a merge
    /// error is never routed to `on_fail`).
    fn merge_patches(&mut self, f: u32, i: u32) -> bool {
        let StepKindDef::Fanout { pre_merge, .. } = &self.def(f, i).kind else {
            return true;
        };
        let commands: Vec<String> = pre_merge
            .iter()
            .map(|c| self.plan.str(*c).to_string())
            .collect();
        let patches: Vec<(u32, String)> = self
            .st(f, i)
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| it.status == StepStatus::Succeeded)
            .filter_map(|(k, it)| it.patch.clone().map(|p| (k as u32, p)))
            .collect();
        let merged: Vec<u32> = patches.iter().map(|(k, _)| *k).collect();
        let id = self.sid(f, i);
        match self.host.worktree_merge(&commands, &patches) {
            Ok(()) => {
                self.event(
                    "fanout_merged",
                    Some(id),
                    json!({"items": merged, "preMerge": commands}),
                );
                true
            }
            Err(e) => {
                let attempt = self.st(f, i).attempts.max(1);
                let failure = Failure::new(attempt, format!("fanout merge failed: {e}"));
                self.event(
                    "result",
                    Some(id),
                    json!({"attempt": attempt, "failure": failure}),
                );
                self.set_status(f, i, StepStatus::Failed);
                self.st_mut(f, i).failure = Some(failure.clone());
                self.end_run(RunStatus::Failed, Some(failure));
                false
            }
        }
    }

    fn start_subflow(&mut self, f: u32, i: u32, callee: u32, with: &[(StrId, u32)]) {
        self.st_mut(f, i).attempts = 1;
        let mut input = serde_json::Map::new();
        for (k, node) in with {
            match self.with_value(f, *node) {
                Ok(val) => {
                    input.insert(self.plan.str(*k).to_string(), val);
                }
                Err(reason) => {
                    self.fail_forced(f, i, reason);
                    return;
                }
            }
        }
        let input = Value::Object(input);
        let callee_flow = &self.plan.flows[v(callee)];
        if let Err(e) = check_record(self.plan, callee_flow.input, &input) {
            self.fail_forced(
                f,
                i,
                format!(
                    "input of sub-flow `{}` is invalid: {e}",
                    self.plan.str(callee_flow.name)
                ),
            );
            return;
        }
        if self.run.header.frames.len() >= MAX_FRAMES {
            self.fail_forced(f, i, "too many sub-flow invocations in one run".into());
            return;
        }
        let n = callee_flow.steps.len() as u32;
        let child = self.run.header.frames.len() as u32;
        self.run.header.frames.push(FrameMeta {
            flow: callee,
            parent: Some((f, i)),
            input,
            rounds: 0,
            spent: Spend::default(),
            len: n,
            closed: false,
            live: n,
        });
        self.run.steps.push(vec![StepState::default(); v(n)]);
        for s in 0..n {
            self.run.dirty.insert(row_key(child, s));
            self.queue.push_back((child, s));
        }
        self.st_mut(f, i).child = Some(child);
        self.set_status(f, i, StepStatus::Running);
    }

    fn with_value(&self, f: u32, node: u32) -> Result<Value, String> {
        // children come before parents (verified), so this recursion is bounded by the verified depth (≤ 64)
        match &self.flow(f).with_nodes[v(node)] {
            WithNode::Template(t) => self.render(f, *t, None, None),
            WithNode::Null => Ok(Value::Null),
            WithNode::Bool(b) => Ok(Value::Bool(*b)),
            WithNode::Number(n) => {
                Ok(serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number))
            }
            WithNode::List(items) => items
                .iter()
                .map(|&c| self.with_value(f, c))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            WithNode::Map(entries) => {
                let mut m = serde_json::Map::new();
                for (k, c) in entries {
                    m.insert(self.plan.str(*k).to_string(), self.with_value(f, *c)?);
                }
                Ok(Value::Object(m))
            }
        }
    }

    // ----- carry ------------------------------------------------------------

    fn materialize_carry(&mut self) {
        let flow = self.flow(0);
        for c in &flow.carry {
            let name = self.plan.str(c.name).to_string();
            let (value, epoch) = match c.initial.target {
                RefTarget::Step(s) => {
                    let st = self.st(0, s);
                    if st.status != StepStatus::Succeeded {
                        continue;
                    }
                    if self
                        .run
                        .header
                        .carry
                        .get(&name)
                        .is_some_and(|cv| cv.source_epoch == Some(st.epoch))
                    {
                        continue;
                    }
                    (self.resolve(0, &c.initial, None, None), Some(st.epoch))
                }
                _ => {
                    if self.run.header.carry.contains_key(&name) {
                        continue;
                    }
                    (self.resolve(0, &c.initial, None, None), None)
                }
            };
            match value {
                Some(value) => {
                    self.run.header.carry.insert(
                        name.clone(),
                        CarryValue {
                            value,
                            source_epoch: epoch,
                            kind: "initial".into(),
                        },
                    );
                    self.event(
                        "carry_updated",
                        None,
                        json!({"name": name, "reason": "initial"}),
                    );
                }
                None => {
                    self.end_run(
                        RunStatus::Failed,
                        Some(Failure::new(
                            0,
                            format!("carry_initial_unresolved: `{name}`"),
                        )),
                    );
                    return;
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum LedgerAt {
    Step(u32, u32),
    Frame(u32),
}

impl LedgerAt {
    fn step(self) -> u32 {
        match self {
            LedgerAt::Step(_, s) => s,
            LedgerAt::Frame(_) => 0,
        }
    }
}

enum ResultSel<'v> {
    Steps,
    Value(&'v Value),
}

/// Follows a path into a value.
fn walk<'v>(base: &'v Value, path: &[Seg], plan: &Plan) -> Option<&'v Value> {
    let mut cur = base;
    for s in path {
        cur = match s {
            Seg::Field(f) => cur.as_object()?.get(plan.str(*f))?,
            Seg::Index(i) => cur.as_array()?.get(v(*i))?,
        };
    }
    Some(cur)
}

struct Refs<'m, 'a> {
    m: &'m M<'a>,
    f: u32,
    item: Option<&'m Value>,
    prev: Option<&'m Value>,
}

impl RefValues for Refs<'_, '_> {
    fn value(&self, target: RefTarget) -> Option<std::borrow::Cow<'_, Value>> {
        let r = RefDef {
            target,
            path: Vec::new(),
        };
        self.m
            .resolve(self.f, &r, self.item, self.prev)
            .map(std::borrow::Cow::Owned)
    }
}

struct Outputs<'s> {
    ids: &'s std::collections::HashMap<String, u32>,
    steps: &'s [StepState],
}

impl StepOutputs for Outputs<'_> {
    fn get(&self, id: &str) -> Option<&Value> {
        let st = self.steps.get(v(*self.ids.get(id)?))?;
        if st.status == StepStatus::Succeeded {
            st.output.as_ref()
        } else {
            None
        }
    }

    fn to_object(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut ids: Vec<(&String, &u32)> = self.ids.iter().collect();
        ids.sort_by_key(|(_, i)| **i);
        for (id, _) in ids {
            if let Some(o) = self.get(id) {
                m.insert(id.clone(), o.clone());
            }
        }
        Value::Object(m)
    }
}

struct HostFiles<'h> {
    host: &'h mut dyn Host,
    /// An item's worktree, else the workspace root.
    root: Option<&'h str>,
    evidence: Vec<Value>,
}

impl Files for HostFiles<'_> {
    fn file_exists(&mut self, path: &str) -> Result<bool, String> {
        let (holds, ev) = match self.root {
            Some(root) => self.host.file_exists_in(root, path)?,
            None => self.host.file_exists(path)?,
        };
        self.evidence.push(ev);
        Ok(holds)
    }

    fn file_contains(&mut self, path: &str, text: &str) -> Result<bool, String> {
        let (holds, ev) = match self.root {
            Some(root) => self.host.file_contains_in(root, path, text)?,
            None => self.host.file_contains(path, text)?,
        };
        self.evidence.push(ev);
        Ok(holds)
    }
}

// ----- operations ---------------------------------------------------------------

/// Where a client step id points.
enum Target {
    Step(u32, u32),
    Item(u32, u32, u32),
}

impl<'a> M<'a> {
    fn new(
        plan: &'a Plan,
        index: &'a PlanIndex,
        run: &'a mut Run,
        host: &'a mut dyn Host,
    ) -> M<'a> {
        M {
            plan,
            index,
            run,
            host,
            queue: VecDeque::new(),
            file_root: None,
        }
    }

    /// Resolves `a`, `a/b` (sub-flow child) or `a/3` (fanout item).
    fn locate(&self, id: &str) -> Option<Target> {
        let mut parts = id.split('/');
        let first = parts.next()?;
        let mut f = 0u32;
        let mut i = *self.fidx(0).ids.get(first)?;
        for part in parts {
            let st = self.st(f, i);
            if let Some(child) = st.child
                && !self.run.header.frames[v(child)].closed
                && let Some(&ci) = self.fidx(child).ids.get(part)
            {
                f = child;
                i = ci;
                continue;
            }
            if matches!(self.def(f, i).kind, StepKindDef::Fanout { .. })
                && let Ok(k) = part.parse::<u32>()
                && v(k) < st.items.len()
                && part == k.to_string()
            {
                return Some(Target::Item(f, i, k));
            }
            return None;
        }
        Some(Target::Step(f, i))
    }

    fn not_awaiting(&self, id: &str, why: &str) -> VmError {
        VmError::NotAwaiting(format!("step `{id}` is not awaiting a result: {why}"))
    }

    fn check_token(live: Option<&String>, given: Option<&str>, what: &str) -> Result<(), VmError> {
        match (live, given) {
            (_, None) => Err(VmError::StaleToken(format!(
                "{what} is stale: missing token; send the token handed out with it"
            ))),
            (Some(l), Some(g)) if l == g => Ok(()),
            _ => Err(VmError::StaleToken(format!(
                "{what} is stale: the token was issued for a superseded issuance (a newer one was handed out, or the result was already accepted)"
            ))),
        }
    }

    fn parse_usage(usage: Option<&Value>) -> Result<Spend, VmError> {
        let Some(u) = usage else {
            return Ok(Spend::default());
        };
        if u.is_null() {
            return Ok(Spend::default());
        }
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

    /// Settles a usage receipt (reference v1-runtime §4.13): idempotent by
    /// `dispatchId`; recorded in every ledger it touches even over the limit;
    /// a flow breach ends a running run, other breaches are only reported.
    fn usage_report(&mut self, r: &Receipt) -> Result<ReceiptOutcome, VmError> {
        if self.run.header.status == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        if let Some(&seq) = self.run.header.receipts.get(&r.dispatch_id) {
            return Ok(ReceiptOutcome {
                duplicate: true,
                seq,
                budget: None,
            });
        }
        let amount = Self::parse_usage(Some(&r.usage)).map_err(|e| match e {
            VmError::InvalidReport(m) => VmError::InvalidReceipt(m),
            other => other,
        })?;
        // where it settles: a task's ledgers, or (gate, run step, no step) the flows only
        let (f, task) = match r.step_id.as_deref() {
            None => (0, None),
            Some(id) => match self.locate(id) {
                None => {
                    return Err(VmError::InvalidStep(format!(
                        "the run has no step `{id}`; use a step id of this run (`step`, `parent/child` or `fanout/3`), or leave `stepId` out to charge the flow"
                    )));
                }
                Some(Target::Item(f, i, _)) => (f, Some(i)),
                Some(Target::Step(f, i)) => match self.def(f, i).kind {
                    StepKindDef::Do { .. } | StepKindDef::Fanout { .. } => (f, Some(i)),
                    _ => (f, None),
                },
            },
        };
        let was_terminal = self.run.header.status.is_terminal();
        for (_, at) in self.ledgers(f, task) {
            self.add_spent(at, &amount);
        }
        self.run.header.receipt_seq += 1;
        let seq = self.run.header.receipt_seq;
        self.run.header.receipts.insert(r.dispatch_id.clone(), seq);
        let mut detail = json!({
            "dispatchId": r.dispatch_id,
            "source": r.source,
            "seq": seq,
            "amount": amount.to_json(),
            "usdSource": r.usd_source,
        });
        if let Some(obj) = detail.as_object_mut() {
            obj.extend(r.extra.clone());
        }
        self.event("usage_debit", r.step_id.clone(), detail);
        let budget = match self.breach(f, task, &amount, true) {
            None => None,
            Some(Breach::Root) if was_terminal => Some("flow_exhausted_after_terminal"),
            Some(Breach::Root) => {
                self.end_run(
                    RunStatus::BudgetExhausted,
                    Some(Failure::new(
                        0,
                        format!("flow budget exhausted by usage receipt `{}`", r.dispatch_id),
                    )),
                );
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

    fn report(&mut self, id: &str, token: Option<&str>, report: &Report) -> Result<(), VmError> {
        if self.run.header.status == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        if self.run.header.status.is_terminal() {
            return Err(self.not_awaiting(
                id,
                &format!("the run is {}", self.run.header.status.as_str()),
            ));
        }
        let usage = Self::parse_usage(report.usage.as_ref())?;
        match self.locate(id) {
            None => Err(self.not_awaiting(id, "no such step in this run")),
            Some(Target::Step(f, i)) => {
                let st = self.st(f, i);
                if !matches!(self.def(f, i).kind, StepKindDef::Do { .. }) {
                    return Err(self.not_awaiting(id, "it is not an agent task"));
                }
                if st.status != StepStatus::Ready {
                    return Err(self.not_awaiting(id, &format!("it is {}", st.status.as_str())));
                }
                Self::check_token(st.token.as_ref(), token, "step result")?;
                self.step_done(f, i, report, usage);
                Ok(())
            }
            Some(Target::Item(f, i, k)) => {
                let it = &self.st(f, i).items[v(k)];
                if it.status != StepStatus::Ready || self.st(f, i).status != StepStatus::Running {
                    return Err(
                        self.not_awaiting(id, &format!("the item is {}", it.status.as_str()))
                    );
                }
                Self::check_token(it.token.as_ref(), token, "item result")?;
                self.item_done(f, i, k, report, usage);
                Ok(())
            }
        }
    }

    fn step_done(&mut self, f: u32, i: u32, report: &Report, usage: Spend) {
        let attempt = self.st(f, i).attempts;
        let id = self.sid(f, i);
        self.set_status(f, i, StepStatus::Pending); // leaves the ready set; decided below
        self.st_mut(f, i).token = None;
        if usage != Spend::default() {
            self.event(
                "usage_debit",
                Some(id.clone()),
                json!({"attempt": attempt, "amount": usage.to_json()}),
            );
            if let Some(b) = self.settle(f, i, &usage)
                && self.apply_breach(f, b, "")
            {
                self.fail_attempt(
                    f,
                    i,
                    Failure::new(attempt, "task budget exhausted"),
                    report.output.clone(),
                    false,
                );
                return;
            }
            if self.run.header.status.is_terminal() {
                return;
            }
        }
        if let Some(reason) = &report.failure {
            self.fail_attempt(f, i, Failure::new(attempt, reason.clone()), None, false);
            return;
        }
        let output = report.output.clone().unwrap_or(Value::Null);
        let def = self.def(f, i);
        let checked = self.check_output(f, def.out, &def.ensure, &output, attempt, None, &id);
        let judge_usage = match &checked {
            Ok((u, _)) => *u,
            Err((_, u)) => *u,
        };
        if judge_usage != Spend::default()
            && let Some(b) = self.settle(f, i, &judge_usage)
            && self.apply_breach(f, b, " (judged predicate)")
        {
            self.fail_attempt(
                f,
                i,
                Failure::new(attempt, "task budget exhausted (judged predicate)"),
                Some(output),
                false,
            );
            return;
        }
        if self.run.header.status.is_terminal() {
            return;
        }
        if let Err((failure, _)) = checked {
            self.fail_attempt(f, i, failure, Some(output), false);
            return;
        }
        // iterate
        if let StepKindDef::Do {
            iterate: Some((max, until)),
            ..
        } = def.kind
        {
            let r = self.run_chunk(f, until, ResultSel::Value(&output), None, None);
            if !matches!(r, Ok(Value::Bool(true))) {
                let source = self
                    .plan
                    .str(self.flow(f).chunks[v(until)].source)
                    .to_string();
                let why = match r {
                    Ok(Value::Bool(false)) => "predicate evaluated to false".to_string(),
                    Ok(other) => format!(
                        "type_error: predicate must evaluate to boolean, received {}",
                        type_name(&other)
                    ),
                    Err(e) => e,
                };
                let iterations = self.st(f, i).iterations + 1;
                self.st_mut(f, i).iterations = iterations;
                let failure = Failure {
                    attempt,
                    reason: format!("iterate until {source:?} failed: {why}"),
                    violations: vec![
                        json!({"kind": "iterate", "expr": source, "reason": why, "iteration": iterations, "max": max}),
                    ],
                };
                let same = Some(&output) == self.st(f, i).last_output.as_ref();
                let exhausted = iterations >= max;
                if exhausted || same {
                    self.fail_attempt(f, i, failure, Some(output), true);
                } else {
                    // an iteration is not a failed attempt: re-dispatch with feedback
                    let st = self.st_mut(f, i);
                    st.last_output = Some(output);
                    st.failure = Some(failure.clone());
                    self.event("result", Some(id), json!({"attempt": attempt, "failure": failure, "iterate": {"iteration": iterations, "max": max}}));
                    self.queue.push_back((f, i));
                }
                return;
            }
        }
        // the flow output is checked as soon as its source succeeds
        let o = &self.flow(f).output;
        if o.step == i {
            let value = walk(&output, &o.path, self.plan).cloned();
            let problem = match value {
                None => Some("the flow output path is missing from this output".to_string()),
                Some(val) => check_record(self.plan, o.contract, &val).err(),
            };
            if let Some(e) = problem {
                let failure = Failure {
                    attempt,
                    reason: format!("flow output does not satisfy its contract: {e}"),
                    violations: vec![json!({"kind": "flow_output", "message": e})],
                };
                self.fail_attempt(f, i, failure, Some(output), false);
                return;
            }
        }
        self.succeed(f, i, output);
    }

    fn item_done(&mut self, f: u32, i: u32, k: u32, report: &Report, usage: Spend) {
        let Some((stages, _, _)) = self.fanout_def(f, i) else {
            return;
        };
        let id = format!("{}/{k}", self.sid(f, i));
        self.run.header.ready.remove(&(f, i, k + 1));
        let it = &mut self.st_mut(f, i).items[v(k)];
        it.token = None;
        it.status = StepStatus::Pending;
        let (attempt, stage_i, value, prev) =
            (it.attempts, it.stage, it.value.clone(), it.output.clone());
        let Some(stage) = stages.get(v(stage_i)) else {
            return;
        };
        let mut failure: Option<(Failure, Option<Value>)> = None;
        if usage != Spend::default() {
            self.event(
                "usage_debit",
                Some(id.clone()),
                json!({"attempt": attempt, "itemIndex": k, "amount": usage.to_json()}),
            );
            if let Some(b) = self.settle(f, i, &usage)
                && self.apply_breach(f, b, "")
            {
                failure = Some((
                    Failure {
                        attempt,
                        reason: "task budget exhausted".into(),
                        violations: vec![],
                    },
                    None,
                ));
            }
            if self.run.header.status.is_terminal() {
                return;
            }
        }
        let output = report.output.clone().unwrap_or(Value::Null);
        if failure.is_none() {
            if let Some(reason) = &report.failure {
                failure = Some((Failure::new(attempt, reason.clone()), None));
            } else {
                self.file_root = self.st(f, i).items[v(k)].worktree.clone();
                let checked = self.check_output(
                    f,
                    stage.out,
                    &stage.ensure,
                    &output,
                    attempt,
                    Some((&value, prev.as_ref())),
                    &id,
                );
                self.file_root = None;
                let (spent, problem) = match checked {
                    Ok((u, _)) => (u, None),
                    Err((fl, u)) => (u, Some(fl)),
                };
                if spent != Spend::default()
                    && let Some(b) = self.settle(f, i, &spent)
                {
                    self.apply_breach(f, b, " (judged predicate)");
                }
                if self.run.header.status.is_terminal() {
                    return;
                }
                if let Some(fl) = problem {
                    failure = Some((fl, Some(output.clone())));
                }
            }
        }
        let step_id = self.sid(f, i);
        let last = v(stage_i) + 1 == stages.len();
        let mut patch = None;
        let mut no_retry = false;
        if failure.is_none() && last && self.isolated(f, i) {
            // the patch is stored on the item in the same transition as its success
            let dir = self.st(f, i).items[v(k)].worktree.clone();
            match dir.map(|d| self.host.worktree_patch(&d)) {
                Some(Ok(p)) => {
                    self.event(
                        "worktree_patch",
                        Some(step_id.clone()),
                        json!({"itemIndex": k, "bytes": p.len()}),
                    );
                    patch = (!p.is_empty()).then_some(p);
                }
                Some(Err(e)) => {
                    no_retry = true;
                    failure = Some((
                        Failure::new(attempt, format!("could not take the item's patch: {e}")),
                        None,
                    ));
                }
                None => {
                    no_retry = true;
                    failure = Some((
                        Failure::new(attempt, "the item's worktree is gone; nothing to merge"),
                        None,
                    ));
                }
            }
        }
        match failure {
            Some((mut fl, out)) => {
                let it = &self.st(f, i).items[v(k)];
                let identical = out.is_some() && out == it.last_output;
                if identical {
                    fl.reason.push_str(" (no retry: identical evidence)");
                }
                let retry = !no_retry && !identical && it.stage_attempts < stage.attempts;
                self.event("fanout_attempt_result", Some(step_id), json!({"itemIndex": k, "stage": stage_i, "attempt": attempt, "success": false, "failure": fl}));
                let it = &mut self.st_mut(f, i).items[v(k)];
                it.last_output = out;
                it.failure = Some(fl);
                it.status = if retry {
                    StepStatus::Pending
                } else {
                    StepStatus::Failed
                };
            }
            None => {
                self.event(
                    "fanout_attempt_result",
                    Some(step_id),
                    json!({"itemIndex": k, "stage": stage_i, "attempt": attempt, "success": true}),
                );
                let it = &mut self.st_mut(f, i).items[v(k)];
                it.output = Some(output);
                it.last_output = None;
                it.failure = None;
                if last {
                    it.status = StepStatus::Succeeded;
                    it.patch = patch;
                } else {
                    it.stage += 1;
                    it.stage_attempts = 0;
                    it.status = StepStatus::Pending;
                }
            }
        }
        if self.st(f, i).items[v(k)].status.is_terminal() {
            self.drop_worktree(f, i, k);
        }
        self.pump(f, i);
    }
}

impl<'a> M<'a> {
    fn resolve_gate(
        &mut self,
        id: &str,
        token: Option<&str>,
        decision: &str,
        note: Option<&str>,
        by: &str,
    ) -> Result<(), VmError> {
        if !["approve", "revise", "kill"].contains(&decision) {
            return Err(VmError::InvalidDecision(decision.to_string()));
        }
        if self.run.header.status == RunStatus::Cancelled {
            return Err(VmError::Cancelled(self.run.header.id.clone()));
        }
        let Some(Target::Step(f, i)) = self.locate(id) else {
            return Err(VmError::NotAwaiting(format!(
                "gate `{id}` is not awaiting a decision: no such gate in this run"
            )));
        };
        let StepKindDef::Gate {
            on_approve,
            on_revise,
            on_kill,
            max_rounds,
        } = self.def(f, i).kind
        else {
            return Err(VmError::NotAwaiting(format!("`{id}` is not a gate")));
        };
        let st = self.st(f, i);
        if st.status != StepStatus::WaitingGate || self.run.header.status.is_terminal() {
            return Err(VmError::NotAwaiting(format!(
                "gate `{id}` is not awaiting a decision: it is {}",
                st.status.as_str()
            )));
        }
        Self::check_token(st.token.as_ref(), token, "gate decision")?;
        let target = match decision {
            "approve" => on_approve,
            "kill" => on_kill,
            _ => on_revise,
        };
        let detail = |t: Option<u32>, m: &Self| json!({"decision": decision, "target": t.map(|t| m.plan.str(m.def(f, t).id)), "note": note, "resolvedBy": by});
        if decision == "revise" {
            let total = self.run.header.frames[v(f)].rounds + 1;
            let flow_max = self.flow(f).max_rounds;
            let gate_rounds = self.st(f, i).gate_rounds + 1;
            let exhausted = target.is_none()
                || flow_max.is_none_or(|m| total > m)
                || max_rounds.is_some_and(|m| gate_rounds > m);
            if !exhausted {
                // carry values written by this revise must resolve first (nothing changes otherwise)
                let mut writes = Vec::new();
                if f == 0 {
                    for c in &self.flow(0).carry {
                        for (g, r) in &c.on_revise {
                            if *g == i {
                                let name = self.plan.str(c.name).to_string();
                                let value = self.resolve(0, r, None, None).ok_or_else(|| VmError::CarryUnresolved(format!("`{name}` cannot be resolved yet; finish its source step, then decide again with the same token")))?;
                                writes.push((name, value, c.initial.target));
                            }
                        }
                    }
                }
                self.st_mut(f, i).token = None;
                let d = detail(target, self);
                self.event("gate_resolved", Some(id.to_string()), d);
                self.run.header.frames[v(f)].rounds = total;
                for (name, value, initial) in writes {
                    let epoch = match initial {
                        RefTarget::Step(s) => Some(self.st(0, s).epoch),
                        _ => None,
                    };
                    self.run.header.carry.insert(
                        name.clone(),
                        CarryValue {
                            value,
                            source_epoch: epoch,
                            kind: "revise".into(),
                        },
                    );
                    self.event(
                        "carry_updated",
                        Some(id.to_string()),
                        json!({"name": name, "reason": "revise", "round": total}),
                    );
                }
                if let Some(t) = target {
                    self.reset(f, i, t);
                }
                self.st_mut(f, i).gate_rounds = gate_rounds;
                return Ok(());
            }
            self.st_mut(f, i).token = None;
            self.st_mut(f, i).decision = Some("revise".into());
            self.set_status(f, i, StepStatus::Succeeded);
            let d = detail(target, self);
            self.event("gate_resolved", Some(id.to_string()), d);
            let failure = Failure::new(0, format!("gate `{id}`: gate revision rounds exhausted"));
            self.scope_failure(f, failure, RunStatus::Failed);
            return Ok(());
        }
        self.st_mut(f, i).token = None;
        self.st_mut(f, i).decision = Some(decision.to_string());
        self.set_status(f, i, StepStatus::Succeeded);
        let d = detail(target, self);
        self.event("gate_resolved", Some(id.to_string()), d);
        match target {
            Some(t) => {
                self.st_mut(f, t).routed = Some(Failure::new(0, format!("gate {decision}")));
                self.queue.push_back((f, t));
                self.enqueue_succ(f, i);
            }
            None if decision == "kill" => {
                let failure = Failure::new(0, format!("gate `{id}` killed the flow"));
                self.scope_failure(f, failure, RunStatus::Killed);
            }
            // E3: approve with no target completes the gate; its successors go on
            None => self.enqueue_succ(f, i),
        }
        Ok(())
    }

    /// A failure of a whole frame: the run (entry flow) or the calling `run` step.
    fn scope_failure(&mut self, f: u32, failure: Failure, status: RunStatus) {
        match self.run.header.frames[v(f)].parent {
            None => self.end_run(status, Some(failure)),
            Some((pf, ps)) => {
                self.run.header.frames[v(f)].closed = true;
                self.burn_frame(f);
                self.st_mut(pf, ps).child = None;
                self.fail_forced(pf, ps, failure.reason);
            }
        }
    }

    /// Resets the reset closure of gate `g` revising to `target` (precomputed in the plan).
    fn reset(&mut self, f: u32, g: u32, target: u32) {
        let flow = self.flow(f);
        let closure = flow
            .closures
            .iter()
            .find(|c| c.gate == g && c.target == target);
        let members: Vec<u32> = match closure {
            Some(c) => (0..flow.steps.len() as u32)
                .filter(|&s| c.contains(s))
                .collect(),
            None => vec![target],
        };
        let mut reset = Vec::new();
        let mut dropped = Vec::new();
        for &s in &members {
            // items in flight are dropped with their step, and their worktrees removed
            self.drop_worktrees(f, s);
            let items: Vec<u32> = (0..self.st(f, s).items.len() as u32).collect();
            for k in items {
                self.run.header.ready.remove(&(f, s, k + 1));
            }
            if let Some(child) = self.drop_child(f, s) {
                dropped.push(self.sid(f, s));
                let _ = child;
            }
            self.set_status(f, s, StepStatus::Pending);
            let st = self.st_mut(f, s);
            let from = st.epoch;
            let gate_rounds = st.gate_rounds;
            *st = StepState {
                epoch: from + 1,
                gate_rounds,
                ..StepState::default()
            };
            reset.push(json!({"stepId": self.plan.str(self.def(f, s).id), "fromEpoch": from, "toEpoch": from + 1}));
            self.queue.push_back((f, s));
        }
        let id = self.sid(f, target);
        self.event(
            "step_reset",
            Some(id),
            json!({"reason": "revise", "reset": reset, "subflowsDropped": dropped}),
        );
    }

    fn cancel(&mut self) {
        if self.run.header.status.is_terminal() {
            return;
        }
        let steps: Vec<String> = self
            .run
            .header
            .ready
            .iter()
            .filter(|k| k.2 == 0)
            .map(|k| self.sid(k.0, k.1))
            .chain(self.run.header.gates.iter().map(|k| self.sid(k.0, k.1)))
            .collect();
        let items = self.run.header.ready.iter().filter(|k| k.2 != 0).count();
        self.burn_tokens();
        self.drop_all_worktrees();
        self.run.header.status = RunStatus::Cancelled;
        self.event(
            "flow_cancelled",
            None,
            json!({"by": "operator", "burned": {"steps": steps, "items": items}}),
        );
    }

    /// Every live token is replaced (after a checkpoint revert, older tokens must be stale).
    fn rotate(&mut self) {
        let ready: Vec<(u32, u32, u32)> = self.run.header.ready.iter().copied().collect();
        for (f, i, item) in ready {
            let t = self.mint("d");
            if item == 0 {
                self.st_mut(f, i).token = Some(t);
            } else if let Some(it) = self.st_mut(f, i).items.get_mut(v(item - 1)) {
                it.token = Some(t);
            }
        }
        let gates: Vec<(u32, u32)> = self.run.header.gates.iter().copied().collect();
        for (f, i) in gates {
            let t = self.mint("g");
            self.st_mut(f, i).token = Some(t);
        }
    }

    // ----- views -------------------------------------------------------------

    fn contract_json(&self, record: u32) -> Value {
        let mut contracts = serde_json::Map::new();
        let mut todo = vec![record];
        while let Some(r) = todo.pop() {
            let rec = &self.plan.records[v(r)];
            let name = self.plan.str(rec.name).to_string();
            if contracts.contains_key(&name) {
                continue;
            }
            let mut fields = serde_json::Map::new();
            for fd in &rec.fields {
                if let BaseType::Record(inner) = fd.ty.base {
                    todo.push(inner);
                }
                fields.insert(
                    self.plan.str(fd.name).to_string(),
                    Value::from(crate::plan::disasm::type_string(
                        self.plan,
                        &fd.ty,
                        fd.optional,
                    )),
                );
            }
            contracts.insert(name, Value::Object(fields));
        }
        json!({"root": self.plan.str(self.plan.records[v(record)].name), "contracts": contracts})
    }

    fn ensure_json(&self, f: u32, preds: &[PredDef]) -> Value {
        Value::Array(
            preds
                .iter()
                .map(|p| match p {
                    PredDef::Expr(c) => json!({"expr": self.plan.str(self.flow(f).chunks[v(*c)].source)}),
                    PredDef::FileExists(s) => json!({"file_exists": self.plan.str(*s)}),
                    PredDef::FileContains(a, b) => json!({"file_contains": {"path": self.plan.str(*a), "text": self.plan.str(*b)}}),
                    PredDef::Judged(s, k) => json!({"judged": {"statement": self.plan.str(*s), "stakes": format!("{k:?}").to_lowercase()}}),
                })
                .collect(),
        )
    }

    fn ready_entry(&self, f: u32, i: u32, item: u32) -> Option<Value> {
        let st = self.st(f, i);
        let def = self.def(f, i);
        if item == 0 {
            let StepKindDef::Do {
                task,
                agent,
                attempts,
                ..
            } = def.kind
            else {
                return None;
            };
            let text = self.render(f, task, None, None).ok()?;
            let prev = st.failure.as_ref().or(st.routed.as_ref());
            Some(json!({
                "id": self.sid(f, i),
                "do": text,
                "agent": agent_name(agent),
                "attempt": st.attempts,
                "attemptsLeft": attempts.saturating_sub(st.attempts),
                "dispatchToken": st.token,
                "dispatch": "step",
                "contract": def.out.map(|o| self.contract_json(o)),
                "ensure": self.ensure_json(f, &def.ensure),
                "previousFailure": prev,
            }))
        } else {
            let k = item - 1;
            let StepKindDef::Fanout {
                stages, consumer, ..
            } = &def.kind
            else {
                return None;
            };
            let it = st.items.get(v(k))?;
            let stage = stages.get(v(it.stage))?;
            let text = self
                .render(f, stage.task, Some(&it.value), it.output.as_ref())
                .ok()?;
            let mut entry = json!({
                "id": format!("{}/{k}", self.sid(f, i)),
                "do": text,
                "agent": agent_name(stage.agent),
                "attempt": it.attempts,
                "attemptsLeft": stage.attempts.saturating_sub(it.stage_attempts),
                "dispatchToken": it.token,
                "dispatch": if *consumer { "consumer" } else { "engine" },
                "contract": stage.out.map(|o| self.contract_json(o)),
                "ensure": self.ensure_json(f, &stage.ensure),
                "previousFailure": it.failure,
                "item": it.value,
                "itemIndex": k,
                "stage": it.stage,
                "prev": if it.stage > 0 { it.output.clone() } else { None },
            });
            // the item's agent works in its worktree
            if let (Some(dir), Some(m)) = (&it.worktree, entry.as_object_mut()) {
                m.insert("cwd".into(), Value::from(dir.as_str()));
            }
            Some(entry)
        }
    }

    fn outcome(&self) -> Outcome {
        let h = &self.run.header;
        let ready = h
            .ready
            .iter()
            .filter_map(|&(f, i, item)| self.ready_entry(f, i, item))
            .collect();
        let gates = h
            .gates
            .iter()
            .filter_map(|&(f, i)| {
                let StepKindDef::Gate { on_approve, on_revise, on_kill, max_rounds } = self.def(f, i).kind else { return None };
                let name = |t: Option<u32>| t.map(|t| self.plan.str(self.def(f, t).id).to_string());
                Some(json!({
                    "stepId": self.sid(f, i),
                    "gateToken": self.st(f, i).token,
                    "round": h.frames[v(f)].rounds,
                    "maxRounds": self.flow(f).max_rounds,
                    "gateMaxRounds": max_rounds,
                    "routes": {"approve": name(on_approve), "revise": name(on_revise), "kill": name(on_kill)},
                }))
            })
            .collect();
        let budget = self.flow(0).budget.as_ref().map(
            |b| json!({"usd": b.usd, "tokens": b.tokens, "dispatches": b.dispatches, "ms": b.ms}),
        );
        Outcome {
            status: h.status,
            ready,
            gates,
            output: h.output.clone(),
            failure: h.failure.clone(),
            ledger: json!({"spent": h.frames[0].spent.to_json(), "budget": budget}),
        }
    }
}

fn agent_name(a: Agent) -> &'static str {
    match a {
        Agent::Claude => "claude",
        Agent::Codex => "codex",
    }
}

// ----- public API ----------------------------------------------------------------

/// Starts a run of `flow` (default: the entry flow) with `input`.
#[allow(clippy::too_many_arguments)]
pub fn start(
    plan: &Plan,
    index: &PlanIndex,
    plan_hash: &str,
    run_id: &str,
    flow: Option<&str>,
    input: Value,
    workspace: Option<String>,
    host: &mut dyn Host,
) -> Result<(Run, Outcome), VmError> {
    let flow_i = match flow {
        None => plan.entry,
        Some(name) => *index
            .flow_ids
            .get(name)
            .ok_or_else(|| VmError::UnknownFlow(name.to_string()))?,
    };
    let fd = &plan.flows[v(flow_i)];
    // engine-run worktree fanouts need a host that makes git worktrees, and a workspace root
    for s in &fd.steps {
        if let StepKindDef::Fanout {
            worktree: true,
            consumer: false,
            ..
        } = s.kind
        {
            if !host.supports_worktrees() {
                return Err(VmError::Limit(format!(
                    "step `{}`: `isolation: worktree` with `dispatch: engine` is not supported yet by this host (it makes no git worktrees); run it with `stratumc run` or the MCP server, use `isolation: none`, or `dispatch: consumer` (the client isolates each item)",
                    plan.str(s.id)
                )));
            }
            if workspace.is_none() {
                return Err(VmError::Limit(format!(
                    "step `{}`: `isolation: worktree` needs a workspace root (a git repository) to make the items' worktrees in; give the run one",
                    plan.str(s.id)
                )));
            }
        }
    }
    if fd.steps.len() > MAX_STEPS {
        return Err(VmError::Limit(format!(
            "flow has {} steps; a run supports at most {MAX_STEPS}",
            fd.steps.len()
        )));
    }
    check_record_at(plan, fd.input, &input, "input").map_err(VmError::InvalidInput)?;
    let n = fd.steps.len() as u32;
    let now = host.now_ms();
    let header = Header {
        id: run_id.to_string(),
        plan_hash: plan_hash.to_string(),
        status: RunStatus::Running,
        output: None,
        failure: None,
        frames: vec![FrameMeta {
            flow: flow_i,
            parent: None,
            input,
            rounds: 0,
            spent: Spend::default(),
            len: n,
            closed: false,
            live: n,
        }],
        carry: Default::default(),
        issued: 0,
        workspace,
        created_ms: now,
        ready: Default::default(),
        gates: Default::default(),
        receipts: Default::default(),
        receipt_seq: 0,
    };
    let mut run = Run {
        header,
        steps: vec![vec![StepState::default(); v(n)]],
        version: 0,
        dirty: (0..n).map(|s| row_key(0, s)).collect(),
        events: Vec::new(),
    };
    let mut m = M::new(plan, index, &mut run, host);
    m.event(
        "planned",
        None,
        json!({"planHash": plan_hash, "flow": plan.str(fd.name)}),
    );
    m.queue.extend((0..n).map(|s| (0, s)));
    m.advance();
    let out = m.outcome();
    Ok((run, out))
}

/// Reports the result of a dispatch (`step`, `parent/child` or `fanout/3`).
pub fn report(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    step_id: &str,
    token: Option<&str>,
    result: &Report,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    let mut m = M::new(plan, index, run, host);
    m.report(step_id, token, result)?;
    m.advance();
    Ok(m.outcome())
}

/// Decides a waiting gate (`approve`, `revise`, `kill`).
#[allow(clippy::too_many_arguments)]
pub fn resolve_gate(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    step_id: &str,
    token: Option<&str>,
    decision: &str,
    note: Option<&str>,
    resolved_by: &str,
    host: &mut dyn Host,
) -> Result<Outcome, VmError> {
    let mut m = M::new(plan, index, run, host);
    m.resolve_gate(step_id, token, decision, note, resolved_by)?;
    m.advance();
    Ok(m.outcome())
}

/// Cancels a run: every live token is burned; later reports are refused.
pub fn cancel(plan: &Plan, index: &PlanIndex, run: &mut Run, host: &mut dyn Host) -> Outcome {
    let mut m = M::new(plan, index, run, host);
    m.cancel();
    m.outcome()
}

/// Replaces every live token (after a checkpoint revert).
pub fn rotate_tokens(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    host: &mut dyn Host,
) -> Outcome {
    let mut m = M::new(plan, index, run, host);
    m.rotate();
    m.outcome()
}

/// Settles a usage receipt; see [`Receipt`].
pub fn usage_report(
    plan: &Plan,
    index: &PlanIndex,
    run: &mut Run,
    receipt: &Receipt,
    host: &mut dyn Host,
) -> Result<(ReceiptOutcome, Outcome), VmError> {
    let mut m = M::new(plan, index, run, host);
    let r = m.usage_report(receipt)?;
    Ok((r, m.outcome()))
}

/// The current outcome without changing anything (resume, poll).
pub fn view(plan: &Plan, index: &PlanIndex, run: &mut Run, host: &mut dyn Host) -> Outcome {
    M::new(plan, index, run, host).outcome()
}
