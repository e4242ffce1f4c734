//! X11 scopes: the snapshot a scoped dispatch starts from, the one-at-a-time
//! rule for scoped dispatches that share a working tree, the check of what
//! a report changed (`scope_violation`, with the out-of-scope paths put
//! back), `changes()`, and the patch record of an accepted dispatch.
//!
//! Owns: when snapshots are taken and dropped, which paths a scope allows
//! (an entry renders like an `artifacts` entry: a path, a list of paths, or
//! a glob; `files` may change or delete, `create` may create), the byte cap,
//! and the `patch_recorded` / `scope_restored` events.
//! Must never: touch git or a file except through the `Host`, or put back
//! a path inside the scope (in-scope edits stay for the retry).

use serde_json::{Value, json};

use super::Transition;
use crate::host::glob::compile;
use crate::interp::event::{EventKind, PatchRecord};
use crate::interp::host::{ChangeStatus, FileChange, FileRoot, Restore};
use crate::interp::state::*;
use crate::plan::{ArtifactDef, ScopeDef, StepKindDef};

/// What a scope allows, rendered for one dispatch.
struct Allowed {
    files: Vec<Pattern>,
    create: Vec<Pattern>,
    max_changed_bytes: Option<u64>,
}

enum Pattern {
    Path(String),
    Glob(globset::GlobMatcher),
}

impl Pattern {
    fn matches(&self, path: &str) -> bool {
        match self {
            Pattern::Path(p) => p.trim_start_matches("./") == path,
            Pattern::Glob(g) => g.is_match(path),
        }
    }
}

impl Transition<'_> {
    /// The scope of a dispatch of `slot` (a `do` step's, or its item's
    /// current stage's).
    pub(super) fn slot_scope(&self, slot: Slot) -> Option<&'_ ScopeDef> {
        match slot.item {
            None => self.def(slot.at).scope.as_ref(),
            Some(k) => {
                let (stages, _, _) = self.fanout_def(slot.at)?;
                stages
                    .get(self.item(slot.at, k).stage as usize)?
                    .scope
                    .as_ref()
            }
        }
    }

    /// Whether a scoped dispatch is live in the shared workspace tree (not
    /// an item's own worktree): another one must wait until it reports.
    pub(super) fn workspace_busy(&self) -> bool {
        self.run.steps.iter().flatten().any(|st| {
            (st.status == StepStatus::Ready && st.snapshot.is_some())
                || st.items.iter().any(|it| {
                    it.status == StepStatus::Ready && it.snapshot.is_some() && it.worktree.is_none()
                })
        })
    }

    /// Whether step `at` (a `do` step with `scope`) must wait for the
    /// workspace tree.
    pub(super) fn scoped_step_waits(&self, at: StepAt) -> bool {
        matches!(self.def(at).kind, StepKindDef::Do { .. })
            && self.def(at).scope.is_some()
            && self.workspace_busy()
    }

    /// Whether item `k`'s next dispatch is scoped in the shared tree and
    /// must wait.
    pub(super) fn scoped_item_waits(&self, at: StepAt, k: u32) -> bool {
        !self.isolated(at) && self.slot_scope(Slot::item(at, k)).is_some() && self.workspace_busy()
    }

    /// After a scoped dispatch in the shared tree reported: the steps and
    /// fanouts that waited for the tree are looked at again.
    pub(super) fn wake_scoped(&mut self) {
        for f in 0..self.run.steps.len() as u32 {
            for s in 0..self.run.steps[f as usize].len() as u32 {
                let at = StepAt::new(FrameIx(f), s);
                let status = self.st(at).status;
                let def = self.def(at);
                if status == StepStatus::Pending && def.scope.is_some() && !self.queue.contains(&at)
                {
                    self.queue.push_back(at);
                }
                if status == StepStatus::Running && matches!(def.kind, StepKindDef::Fanout { .. }) {
                    self.pump(at);
                }
            }
        }
    }

    fn slot_root(&self, slot: Slot) -> Option<String> {
        slot.item
            .and_then(|k| self.item(slot.at, k).worktree.clone())
    }

    /// The ref name of a slot's snapshot: `<step>-<item>-a<attempt>`.
    fn snapshot_name(&self, slot: Slot, attempt: u32, what: &str) -> String {
        let id = self.slot_id(slot);
        format!("{id}-a{attempt}-{what}")
    }

    /// Takes the snapshot of a scoped dispatch being issued (`attempt`);
    /// `Err` with the reason when the host cannot (the attempt fails).
    pub(super) fn take_snapshot(&mut self, slot: Slot, attempt: u32) -> Result<(), String> {
        if self.slot_scope(slot).is_none() {
            return Ok(());
        }
        let root = self.slot_root(slot);
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let run_id = self.run.header.id.clone();
        let name = self.snapshot_name(slot, attempt, "before");
        let tree = self
            .host
            .snapshot(at, &run_id, &name)
            .map_err(|e| format!("scope: cannot snapshot the working tree: {e}"))?;
        let first = attempt == 1;
        match slot.item {
            None => {
                let st = self.st_mut(slot.at);
                if first || st.entry_snapshot.is_none() {
                    st.entry_snapshot = Some(tree.clone());
                }
                st.snapshot = Some(tree);
            }
            Some(k) => {
                let it = self.item_mut(slot.at, k);
                if first || it.entry_snapshot.is_none() {
                    it.entry_snapshot = Some(tree.clone());
                }
                it.snapshot = Some(tree);
            }
        }
        Ok(())
    }

    /// At report: what the dispatch changed since its snapshot, checked
    /// against its scope. Out-of-scope changes are put back (an event) and
    /// the attempt fails with a `scope_violation`; otherwise `changes()`
    /// and the pending patch record are set for the checks and the success.
    pub(super) fn check_scope(
        &mut self,
        slot: Slot,
        attempt: u32,
        tree: Option<String>,
    ) -> Result<(), Failure> {
        self.changes_seen = None;
        self.diff_seen = None;
        let (Some(scope), Some(tree)) = (self.slot_scope(slot).cloned(), tree) else {
            return Ok(());
        };
        let root = self.slot_root(slot);
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let run_id = self.run.header.id.clone();
        let name = self.snapshot_name(slot, attempt, "after");
        let diff = self
            .host
            .snapshot_diff(at, &tree, &run_id, &name)
            .map_err(|e| {
                scope_failure(attempt, format!("cannot diff the working tree: {e}"), &[])
            })?;
        let allowed = self
            .allowed(slot, &scope)
            .map_err(|e| scope_failure(attempt, e, &[]))?;
        let outside: Vec<&FileChange> = diff.files.iter().filter(|c| !allowed.admits(c)).collect();
        if !outside.is_empty() {
            let paths: Vec<String> = outside.iter().map(|c| c.path.clone()).collect();
            let violations: Vec<Value> = outside
                .iter()
                .map(|c| {
                    let why = if c.status == ChangeStatus::Added {
                        "created outside `create`"
                    } else {
                        "changed outside `files`"
                    };
                    json!({"kind": "scope_violation", "path": c.path, "status": c.status.as_str(), "reason": why})
                })
                .collect();
            self.put_back(slot, attempt, &tree, &paths, at);
            return Err(Failure {
                attempt,
                reason: format!(
                    "scope_violation: the dispatch changed {} outside its scope: {} (put back to the snapshot)",
                    plural(paths.len()),
                    paths.join(", ")
                ),
                violations,
            });
        }
        let bytes: u64 = diff.files.iter().map(|c| c.bytes).sum();
        if let Some(max) = allowed.max_changed_bytes
            && bytes > max
        {
            let paths: Vec<String> = diff.files.iter().map(|c| c.path.clone()).collect();
            return Err(Failure {
                attempt,
                reason: format!(
                    "scope_violation: the dispatch changed {bytes} bytes, more than `max_changed_bytes` {max} ({})",
                    paths.join(", ")
                ),
                violations: vec![json!({
                    "kind": "scope_violation",
                    "reason": "max_changed_bytes",
                    "bytes": bytes,
                    "max": max,
                    "paths": paths,
                })],
            });
        }
        self.changes_seen = Some(changes_value(&diff.files));
        self.diff_seen = Some((tree, diff));
        Ok(())
    }

    /// X7 meets X11: a scoped dispatch whose lease ran out is diffed
    /// against its snapshot like a report, and what it changed outside its
    /// scope is put back (`scope_restored`) before it is handed out again
    /// or fails for good, so the next dispatch is not blamed for the
    /// orphan's stray edits. Its in-scope changes stay, like a failed
    /// attempt's: the next dispatch starts from them and the accepted
    /// record (diffed from the entry's first snapshot) holds them. A tree
    /// that cannot be diffed is left as it is (the next report diffs it).
    pub(super) fn put_back_orphaned(&mut self, slot: Slot, attempt: u32) {
        let tree = match slot.item {
            None => self.st(slot.at).snapshot.clone(),
            Some(k) => self.item(slot.at, k).snapshot.clone(),
        };
        let (Some(scope), Some(tree)) = (self.slot_scope(slot).cloned(), tree) else {
            return;
        };
        let root = self.slot_root(slot);
        let at = root
            .as_deref()
            .map_or(FileRoot::Workspace, FileRoot::Worktree);
        let run_id = self.run.header.id.clone();
        let name = self.snapshot_name(slot, attempt, "orphaned");
        let Ok(diff) = self.host.snapshot_diff(at, &tree, &run_id, &name) else {
            return;
        };
        let Ok(allowed) = self.allowed(slot, &scope) else {
            return;
        };
        let paths: Vec<String> = diff
            .files
            .iter()
            .filter(|c| !allowed.admits(c))
            .map(|c| c.path.clone())
            .collect();
        if !paths.is_empty() {
            self.put_back(slot, attempt, &tree, &paths, at);
        }
    }

    /// Puts the out-of-scope `paths` back to snapshot `tree` (a restore
    /// that fails is recorded in the event's paths as not restored: the
    /// attempt fails anyway).
    fn put_back(
        &mut self,
        slot: Slot,
        attempt: u32,
        tree: &str,
        paths: &[String],
        at: FileRoot<'_>,
    ) {
        let wanted: Vec<Restore> = paths
            .iter()
            .map(|p| Restore {
                path: p.clone(),
                expect: None,
            })
            .collect();
        let restored = match self.host.snapshot_restore(at, tree, &wanted) {
            Ok(_) => paths.to_vec(),
            Err(_) => Vec::new(),
        };
        let kind = EventKind::ScopeRestored {
            attempt,
            item_index: slot.item,
            tree: tree.to_string(),
            paths: restored,
        };
        let id = self.sid(slot.at);
        self.event(kind, Some(id));
    }

    /// The scope's entries rendered for this dispatch.
    fn allowed(&mut self, slot: Slot, scope: &ScopeDef) -> Result<Allowed, String> {
        let item = slot.item.map(|k| {
            let it = self.item(slot.at, k);
            (it.value.clone(), it.output.clone())
        });
        let patterns = |entries: &[ArtifactDef]| -> Result<Vec<Pattern>, String> {
            let mut out = Vec::new();
            for a in entries {
                let (it, prev) = item
                    .as_ref()
                    .map_or((None, None), |(v, p)| (Some(v), p.as_ref()));
                let rendered = self
                    .render(slot.at.frame, a.template, it, prev)
                    .map_err(|e| format!("a scope entry does not render: {e}"))?;
                let texts = match rendered {
                    Value::String(s) => vec![s],
                    Value::Array(items) => items
                        .into_iter()
                        .map(|v| match v {
                            Value::String(s) => Ok(s),
                            other => Err(format!("a scope entry's list holds {other}, not a path")),
                        })
                        .collect::<Result<_, _>>()?,
                    Value::Null => Vec::new(),
                    other => return Err(format!("a scope entry rendered {other}, not a path")),
                };
                for t in texts {
                    if t.starts_with('/') || t.split(['/', '\\']).any(|c| c == "..") {
                        return Err(format!("the scope entry {t:?} leaves the working tree"));
                    }
                    out.push(if a.glob || crate::host::glob::is_glob(&t) {
                        Pattern::Glob(compile(&t).map_err(|e| e.to_string())?)
                    } else {
                        Pattern::Path(t)
                    });
                }
            }
            Ok(out)
        };
        let files = patterns(&scope.files)?;
        let create = patterns(&scope.create)?;
        Ok(Allowed {
            files,
            create,
            max_changed_bytes: scope.max_changed_bytes,
        })
    }

    /// A scoped step's dispatch is issued (or a fanout of scoped stages in
    /// the workspace tree starts): the first of its entry marks where a
    /// rollback to it starts.
    pub(super) fn mark_entry(&mut self, at: StepAt, attempt: u32) {
        let def = self.def(at);
        let scoped = match &def.kind {
            StepKindDef::Fanout {
                stages, worktree, ..
            } => !worktree && stages.iter().any(|s| s.scope.is_some()),
            _ => def.scope.is_some(),
        };
        if attempt == 1 && scoped {
            let n = self.run.header.patch_log.len() as u32;
            self.st_mut(at).patch_mark = Some(n);
        }
    }

    /// `rollback: STEP` before step `at` routes or goes back (X11): the
    /// workspace patches from STEP's latest entry on, newest first, put
    /// back to their snapshots where each file is still what its patch
    /// recorded; `Err` (`rollback_conflict`) names the files that were not.
    pub(super) fn rollback(&mut self, at: StepAt, to: u32, attempt: u32) -> Result<(), Failure> {
        let target = at.sibling(to);
        let mark = self
            .st(target)
            .patch_mark
            .map_or(usize::MAX, |m| m as usize);
        let log = &self.run.header.patch_log;
        let undo: Vec<PatchRef> = log.iter().skip(mark).rev().cloned().collect();
        let mut trees = Vec::new();
        let mut paths = Vec::new();
        let mut conflicts = Vec::new();
        for p in &undo {
            let wanted: Vec<Restore> = p
                .files
                .iter()
                .map(|(path, after)| Restore {
                    path: path.clone(),
                    expect: Some(after.clone()),
                })
                .collect();
            match self
                .host
                .snapshot_restore(FileRoot::Workspace, &p.tree_before, &wanted)
            {
                Ok(c) => {
                    paths.extend(
                        wanted
                            .iter()
                            .map(|w| w.path.clone())
                            .filter(|w| !c.contains(w)),
                    );
                    conflicts.extend(c);
                }
                Err(e) => conflicts.push(format!("{} ({e})", p.step)),
            }
            trees.push(p.tree_before.clone());
        }
        if mark < self.run.header.patch_log.len() {
            self.run.header.patch_log.truncate(mark);
        }
        conflicts.sort();
        conflicts.dedup();
        let kind = EventKind::RolledBack {
            to: self.own_id(target).to_string(),
            trees,
            paths,
            conflicts: conflicts.clone(),
        };
        let id = self.sid(at);
        self.event(kind, Some(id));
        if conflicts.is_empty() {
            return Ok(());
        }
        Err(Failure {
            attempt,
            reason: format!(
                "rollback_conflict: rolling back to `{}` left {} alone, changed since its patch was recorded: {}",
                self.own_id(target),
                plural(conflicts.len()),
                conflicts.join(", ")
            ),
            violations: vec![
                json!({"kind": "rollback_conflict", "to": self.own_id(target), "paths": conflicts}),
            ],
        })
    }

    /// The scope of a ready entry, rendered (an entry that does not render
    /// shows its source; a list spreads into its paths).
    pub(super) fn scope_view(
        &self,
        f: FrameIx,
        scope: &ScopeDef,
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> crate::interp::outcome::ScopeView {
        let texts = |entries: &[ArtifactDef]| -> Vec<String> {
            let mut out = Vec::new();
            for a in entries {
                match self.render(f, a.template, item, prev) {
                    Ok(Value::String(s)) => out.push(s),
                    Ok(Value::Array(items)) => out.extend(items.into_iter().map(|v| match v {
                        Value::String(s) => s,
                        other => other.to_string(),
                    })),
                    Ok(Value::Null) => {}
                    Ok(other) => out.push(other.to_string()),
                    Err(_) => out.push(crate::plan::disasm::template_source(
                        self.plan,
                        self.flow(f),
                        a.template,
                    )),
                }
            }
            out
        };
        crate::interp::outcome::ScopeView {
            files: texts(&scope.files),
            create: texts(&scope.create),
            max_changed_bytes: scope.max_changed_bytes,
        }
    }

    /// The accepted dispatch's patch record (its diff was taken at report).
    pub(super) fn record_patch(&mut self, slot: Slot, attempt: u32) {
        let Some((mut before, mut diff)) = self.diff_seen.take() else {
            return;
        };
        // a retry's snapshot holds the in-scope work of the failed attempts
        // before it: the record covers the whole entry, from its first one
        let base = match slot.item {
            None => self.st(slot.at).entry_snapshot.clone(),
            Some(k) => self.st(slot.at).items[k as usize].entry_snapshot.clone(),
        };
        if let Some(base) = base.filter(|b| *b != before) {
            let root = self.slot_root(slot);
            let at = root
                .as_deref()
                .map_or(FileRoot::Workspace, FileRoot::Worktree);
            let run_id = self.run.header.id.clone();
            let name = self.snapshot_name(slot, attempt, "entry");
            if let Ok(whole) = self.host.snapshot_diff(at, &base, &run_id, &name) {
                before = base;
                diff = whole;
            }
        }
        if self.slot_root(slot).is_none() {
            let files = diff
                .files
                .iter()
                .map(|f| (f.path.clone(), f.after.clone()))
                .collect();
            let entry = PatchRef {
                step: self.slot_id(slot),
                attempt,
                tree_before: before.clone(),
                tree_after: diff.tree.clone(),
                files,
            };
            self.run.header.patch_log.push(entry);
        }
        let (text, cut) = crate::host::snapshot::bounded_diff(&diff.patch);
        let sha256 = crate::eval::value::sha256_hex(diff.patch.as_bytes());
        let diff_bytes = diff.patch.len() as u64;
        if cut {
            // the inline diff is the full one unless it was cut: only then a blob
            self.run.blobs.push(Blob {
                sha256: sha256.clone(),
                bytes: std::mem::take(&mut diff.patch).into_bytes(),
            });
        }
        let record = PatchRecord {
            step: self.sid(slot.at),
            attempt,
            item_index: slot.item,
            root: self.slot_root(slot).map(|_| "worktree".to_string()),
            tree_before: before,
            tree_after: diff.tree,
            files: diff.files,
            diff: text,
            diff_truncated: cut,
            diff_sha256: Some(sha256),
            diff_bytes: Some(diff_bytes),
        };
        let id = self.sid(slot.at);
        self.event(EventKind::PatchRecorded(record), Some(id));
    }

    /// The workspace's snapshot before a worktree fanout merges its items'
    /// patches (X11), when the plan has scopes (so a rollback may undo the
    /// merge) and there is something to merge; `Err` when the host could
    /// not take it (the merge then fails).
    pub(super) fn merge_snapshot(
        &mut self,
        at: StepAt,
        any: bool,
    ) -> Result<Option<String>, String> {
        if !any || !has_scopes(self.plan) {
            return Ok(None);
        }
        let run_id = self.run.header.id.clone();
        let name = format!("{}-e{}-merge-before", self.sid(at), self.st(at).epoch);
        self.host
            .snapshot(FileRoot::Workspace, &run_id, &name)
            .map(Some)
            .map_err(|e| format!("cannot snapshot the workspace before the merge: {e}"))
    }

    /// The merged patches as one entry of the run's patch log (X11), so a
    /// rollback to a step before the fanout restores the files the merge
    /// changed, with the same conflict checks as a scoped dispatch's patch.
    /// `Err` when the host could not diff it (the fanout then fails: a
    /// later rollback would not know what to undo).
    pub(super) fn record_merge(&mut self, at: StepAt, before: String) -> Result<(), String> {
        let run_id = self.run.header.id.clone();
        let name = format!("{}-e{}-merge-after", self.sid(at), self.st(at).epoch);
        let diff = self
            .host
            .snapshot_diff(FileRoot::Workspace, &before, &run_id, &name)
            .map_err(|e| format!("cannot diff the workspace after the merge: {e}"))?;
        let files = diff
            .files
            .iter()
            .map(|f| (f.path.clone(), f.after.clone()))
            .collect();
        let entry = PatchRef {
            step: self.sid(at),
            attempt: self.st(at).attempts.max(1),
            tree_before: before,
            tree_after: diff.tree,
            files,
        };
        self.run.header.patch_log.push(entry);
        Ok(())
    }

    /// The run ended: its snapshot refs go (the trees may then be pruned).
    pub(super) fn drop_snapshots(&mut self) {
        if has_scopes(self.plan) {
            let run_id = self.run.header.id.clone();
            let _ = self.host.snapshots_drop(&run_id);
        }
    }
}

/// Whether any step or stage of the plan has a `scope`.
pub(super) fn has_scopes(plan: &crate::plan::Plan) -> bool {
    plan.flows.iter().any(|f| {
        f.steps.iter().any(|s| {
            s.scope.is_some()
                || matches!(&s.kind, StepKindDef::Fanout { stages, .. } if stages.iter().any(|st| st.scope.is_some()))
        })
    })
}

impl Allowed {
    /// A change the scope admits: a created file inside `create`; any other
    /// change inside `files` or `create`.
    fn admits(&self, c: &FileChange) -> bool {
        let in_create = self.create.iter().any(|p| p.matches(&c.path));
        match c.status {
            ChangeStatus::Added => in_create,
            _ => in_create || self.files.iter().any(|p| p.matches(&c.path)),
        }
    }
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 path".into()
    } else {
        format!("{n} paths")
    }
}

fn scope_failure(attempt: u32, why: String, paths: &[String]) -> Failure {
    Failure {
        attempt,
        reason: format!("scope_violation: {why}"),
        violations: vec![json!({"kind": "scope_violation", "reason": why, "paths": paths})],
    }
}

/// `changes()`: `[{path, status, bytes}]`.
fn changes_value(files: &[FileChange]) -> Value {
    Value::Array(
        files
            .iter()
            .map(|c| json!({"path": c.path, "status": c.status.as_str(), "bytes": c.bytes}))
            .collect(),
    )
}
