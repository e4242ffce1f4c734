//! Fanout steps: items of `over`, their stages, `concurrency`, `require`,
//! and for `isolation: worktree` with engine dispatch the items' git
//! worktrees, patches and the ordered merge (reference v1-runtime §4.12).
//!
//! Owns: starting a fanout, promoting items to ready, issuing an item's
//! stage (stage `when`s, rendering, reserving), settling the fanout, and
//! every worktree's life (made on first issue, always removed).
//! Must never: report an item's attempt (the attempt path does), route an
//! item's failure by its stage's `on_fail` (`on_fail` does), or route a
//! merge error to `on_fail` (it fails the run).

use serde_json::Value;

use super::Transition;
use super::attempt::Retry;
use super::values::ResultSel;
use crate::eval::value::type_name;
use crate::interp::event::EventKind;
use crate::interp::state::*;
use crate::plan::{Require, StageDef, StepKindDef};

impl<'a> Transition<'a> {
    pub(super) fn start_fanout(&mut self, at: StepAt, over: u32) {
        let attempt = self.st(at).attempts + 1;
        self.st_mut(at).attempts = attempt;
        self.mark_entry(at, attempt);
        let list = match self.render(at.frame, over, None, None) {
            Ok(Value::Array(items)) => items,
            Ok(other) => {
                let reason = format!(
                    "fanout over must resolve to an array, found {}",
                    type_name(&other)
                );
                return self.attempt_failed(
                    Slot::step(at),
                    Failure::new(attempt, reason),
                    None,
                    Retry::Allowed,
                );
            }
            Err(reason) => {
                return self.attempt_failed(
                    Slot::step(at),
                    Failure::new(attempt, reason),
                    None,
                    Retry::Allowed,
                );
            }
        };
        self.st_mut(at).items.set(
            list.into_iter()
                .map(|value| ItemState {
                    value,
                    ..ItemState::default()
                })
                .collect(),
        );
        self.set_status(at, StepStatus::Running);
        if self.st(at).items.is_empty() {
            return self.settle_fanout(at);
        }
        self.pump(at);
    }

    /// The fanout's stages, concurrency and `require`.
    pub(super) fn fanout_def(&self, at: StepAt) -> Option<(&'a [StageDef], u32, Require)> {
        match &self.def(at).kind {
            StepKindDef::Fanout {
                stages,
                concurrency,
                require,
                ..
            } => Some((stages, *concurrency, *require)),
            _ => None,
        }
    }

    /// Promotes pending items to ready, up to `concurrency` in flight; settles when all are done.
    pub(super) fn pump(&mut self, at: StepAt) {
        let Some((stages, concurrency, _)) = self.fanout_def(at) else {
            return;
        };
        loop {
            if self.ended() || self.st(at).status != StepStatus::Running {
                return;
            }
            // the items out are the step's item slots in the header's ready
            // set (set_item_status keeps them): counted without a scan of
            // the items, so a report costs the same in a fanout of 10,000
            let out = Slot::item(at, 0)..=Slot::item(at, u32::MAX);
            let in_flight = self.run.header.ready.range(out).count() as u32;
            if in_flight >= concurrency {
                break;
            }
            let items = &self.st(at).items;
            let Some(k) = items.iter().position(|it| it.status == StepStatus::Pending) else {
                break;
            };
            // X11: scoped items that share the working tree go one at a time
            if self.scoped_item_waits(at, k as u32) {
                break;
            }
            self.issue_item(at, k as u32, stages);
        }
        let st = self.st(at);
        if st.status == StepStatus::Running && st.items.iter().all(|it| it.status.is_terminal()) {
            self.settle_fanout(at);
        }
    }

    /// Readies item `k` at its current stage (evaluating stage `when`s on the way).
    fn issue_item(&mut self, at: StepAt, k: u32, stages: &[StageDef]) {
        if self.isolated(at) && !self.make_worktree(at, k) {
            return;
        }
        self.file_root = self.item(at, k).worktree.clone();
        self.issue_item_stage(at, k, stages);
        self.file_root = None;
        if self.item(at, k).status.is_terminal() {
            self.drop_worktree(at, k);
        }
    }

    fn issue_item_stage(&mut self, at: StepAt, k: u32, stages: &[StageDef]) {
        loop {
            let it = self.item(at, k);
            let stage_i = it.stage;
            let Some(stage) = stages.get(stage_i as usize) else {
                return;
            };
            let (value, prev) = (it.value.clone(), it.output.clone());
            if let Some(c) = stage.when {
                let by = self.slot_id(Slot { at, item: Some(k) });
                let r = self.run_chunk(
                    &by,
                    at.frame,
                    c,
                    ResultSel::Steps,
                    Some(&value),
                    Some(prev.as_ref()),
                );
                if !matches!(r, Ok(Value::Bool(true))) {
                    if self.skip_stage(at, k, stage_i, stages.len()) {
                        continue;
                    }
                    return;
                }
            }
            if let Err(reason) = self.render(at.frame, stage.task, Some(&value), prev.as_ref()) {
                return self.item_failed_at_issue(at, k, reason);
            }
            if let Err(b) = self.reserve(at) {
                if self.apply_breach(b, "") {
                    self.item_failed_at_issue(at, k, "task budget exhausted".into());
                }
                return;
            }
            let next = self.item(at, k).attempts + 1;
            if let Err(reason) = self.take_snapshot(Slot::item(at, k), next) {
                return self.item_failed_at_issue(at, k, reason);
            }
            let token = self.mint("d");
            let it = self.item_mut(at, k);
            it.attempts += 1;
            it.stage_attempts += 1;
            it.token = Some(token);
            let attempt = it.attempts;
            self.set_item_status(at, k, StepStatus::Ready);
            self.start_lease(Slot::item(at, k));
            let kind = EventKind::FanoutItemReady {
                item_index: k,
                stage: stage_i,
                attempt,
            };
            self.event(kind, Some(self.sid(at)));
            return;
        }
    }

    /// A stage's `when` is not true: the item moves to the next stage (true),
    /// or is skipped after its last stage (false).
    fn skip_stage(&mut self, at: StepAt, k: u32, stage: u32, stages: usize) -> bool {
        let kind = EventKind::FanoutItemSkipped {
            item_index: k,
            stage,
        };
        self.event(kind, Some(self.sid(at)));
        let it = self.item_mut(at, k);
        if stage as usize + 1 == stages {
            it.status = StepStatus::Skipped;
            it.output = None;
            return false;
        }
        it.stage += 1;
        it.stage_attempts = 0;
        true
    }

    /// An item could not be issued (its task did not render, its budget is
    /// spent): it fails without a dispatch.
    fn item_failed_at_issue(&mut self, at: StepAt, k: u32, reason: String) {
        let it = self.item_mut(at, k);
        it.attempts += 1;
        it.status = StepStatus::Failed;
        it.failure = Some(Failure::new(it.attempts, reason));
    }

    fn settle_fanout(&mut self, at: StepAt) {
        let Some((_, _, require)) = self.fanout_def(at) else {
            return;
        };
        let items = &self.st(at).items;
        let n = items.len();
        // X9: an item a stage's `on_fail: continue` handled counts as met
        let ok = items
            .iter()
            .filter(|it| it.status == StepStatus::Succeeded || it.continued)
            .count();
        let needed = match require {
            Require::All => n,
            Require::Any => 1,
            Require::AtLeast(k) => k as usize,
        };
        if ok < needed {
            let r = match require {
                Require::All => "all".to_string(),
                Require::Any => "any".to_string(),
                Require::AtLeast(k) => k.to_string(),
            };
            let counted = if items.iter().any(|it| it.continued) {
                "succeeded or continued"
            } else {
                "succeeded"
            };
            return self.fail_forced(
                at,
                format!("fanout require {r} not met ({ok}/{n} {counted})"),
            );
        }
        let output = Value::Array(
            items
                .iter()
                .map(|it| match it.status {
                    StepStatus::Succeeded => it.output.clone().unwrap_or(Value::Null),
                    _ => Value::Null,
                })
                .collect(),
        );
        if self.isolated(at) && !self.merge_patches(at) {
            return;
        }
        self.succeed(at, output);
    }

    // ----- worktrees (`isolation: worktree`, engine dispatch) ----------------

    /// Whether step `at` is a fanout whose items run in git worktrees made by the host.
    pub(super) fn isolated(&self, at: StepAt) -> bool {
        matches!(
            self.def(at).kind,
            StepKindDef::Fanout {
                worktree: true,
                consumer: false,
                ..
            }
        )
    }

    /// Gives item `k` its worktree unless it has one; false when the host
    /// could not make it (the item then failed).
    fn make_worktree(&mut self, at: StepAt, k: u32) -> bool {
        if self.item(at, k).worktree.is_some() {
            return true;
        }
        let id = self.sid(at);
        let name = format!("{id}-e{}-{k}", self.st(at).epoch);
        let run_id = self.run.header.id.clone();
        match self.host.worktree_create(&run_id, &name) {
            Ok(dir) => {
                let kind = EventKind::WorktreeCreated {
                    item_index: k,
                    path: dir.clone(),
                };
                self.event(kind, Some(id));
                self.item_mut(at, k).worktree = Some(dir);
                true
            }
            Err(e) => {
                let it = self.item_mut(at, k);
                it.attempts += 1;
                it.status = StepStatus::Failed;
                let failure = Failure::new(
                    it.attempts,
                    format!("could not create the item's git worktree: {e}"),
                );
                it.failure = Some(failure.clone());
                let kind = EventKind::FanoutAttemptResult {
                    item_index: k,
                    stage: 0,
                    attempt: failure.attempt,
                    success: false,
                    failure: Some(failure),
                };
                self.event(kind, Some(id));
                false
            }
        }
    }

    /// The item's changes, taken when its final stage succeeded (`None`: it
    /// changed nothing); `Err` is the failure reason.
    pub(super) fn take_patch(&mut self, at: StepAt, k: u32) -> Result<Option<String>, String> {
        let Some(dir) = self.item(at, k).worktree.clone() else {
            return Err("the item's worktree is gone; nothing to merge".into());
        };
        let patch = self
            .host
            .worktree_patch(&dir)
            .map_err(|e| format!("could not take the item's patch: {e}"))?;
        let kind = EventKind::WorktreePatch {
            item_index: k,
            bytes: patch.len(),
        };
        self.event(kind, Some(self.sid(at)));
        Ok((!patch.is_empty()).then_some(patch))
    }

    /// Removes item `k`'s worktree if it has one (a worktree is always
    /// removed: after success, failure, skip, reset, or the end of the run).
    pub(super) fn drop_worktree(&mut self, at: StepAt, k: u32) {
        let Some(dir) = self
            .st(at)
            .items
            .get(k as usize)
            .and_then(|it| it.worktree.clone())
        else {
            return;
        };
        self.item_mut(at, k).worktree = None;
        let error = self.host.worktree_remove(&dir).err().map(|e| e.to_string());
        let kind = EventKind::WorktreeRemoved {
            item_index: k,
            path: dir,
            error,
        };
        self.event(kind, Some(self.sid(at)));
    }

    pub(super) fn drop_worktrees(&mut self, at: StepAt) {
        for k in 0..self.st(at).items.len() as u32 {
            self.drop_worktree(at, k);
        }
    }

    /// Removes every live worktree of the run (it ended or was cancelled).
    pub(super) fn drop_all_worktrees(&mut self) {
        for f in 0..self.run.steps.len() as u32 {
            for s in 0..self.run.steps[f as usize].len() as u32 {
                let at = StepAt::new(FrameIx(f), s);
                if self.st(at).items.iter().any(|it| it.worktree.is_some()) {
                    self.drop_worktrees(at);
                }
            }
        }
    }

    /// Merges the patches of the succeeded items in index order after the
    /// `pre_merge` commands; false when that failed (the run failed: a merge
    /// error is never routed to `on_fail`).
    fn merge_patches(&mut self, at: StepAt) -> bool {
        let StepKindDef::Fanout { pre_merge, .. } = &self.def(at).kind else {
            return true;
        };
        let commands: Vec<String> = pre_merge
            .iter()
            .map(|c| self.plan.str(*c).to_string())
            .collect();
        let patches: Vec<(u32, String)> = self
            .st(at)
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| it.status == StepStatus::Succeeded)
            .filter_map(|(k, it)| it.patch.clone().map(|p| (k as u32, p)))
            .collect();
        let items: Vec<u32> = patches.iter().map(|(k, _)| *k).collect();
        // X11: the merge is a patch of the workspace a rollback undoes
        let before = match self.merge_snapshot(at, !patches.is_empty()) {
            Ok(tree) => tree,
            Err(e) => return self.merge_failed(at, e),
        };
        let result = self.host.worktree_merge(&commands, &patches);
        let kind = EventKind::FanoutMerge {
            items,
            pre_merge: commands,
            success: result.is_ok(),
            reason: result.as_ref().err().map(|e| e.to_string()),
        };
        self.event(kind, Some(self.sid(at)));
        let Err(e) = result else {
            return match before.map(|tree| self.record_merge(at, tree)) {
                Some(Err(e)) => self.merge_failed(at, e),
                _ => true,
            };
        };
        self.merge_failed(at, e.to_string())
    }

    /// A merge that failed: the fanout and the run fail (false).
    fn merge_failed(&mut self, at: StepAt, e: String) -> bool {
        let attempt = self.st(at).attempts.max(1);
        let failure = Failure::new(attempt, format!("fanout merge failed: {e}"));
        let result = crate::interp::event::AttemptResult::Failure {
            attempt,
            failure: failure.clone(),
            iterate: None,
        };
        self.event(EventKind::Result(result), Some(self.sid(at)));
        self.set_status(at, StepStatus::Failed);
        self.st_mut(at).failure = Some(failure.clone());
        self.end_run(RunStatus::Failed, failure);
        false
    }
}
