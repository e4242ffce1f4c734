//! Values inside a run: references, templates, expressions and `with`
//! inputs, evaluated against the frame's input, the steps' outputs, carry
//! variables and a fanout item's `item`/`prev`.
//!
//! Owns: reference resolution (a reference reads only a succeeded step; a
//! step that failed past `on_fail: continue` reads as `null`, X2), the
//! state of a step as expressions and templates see it (X1: `status`,
//! `output`, `failure`, `attempts`, a gate's `note`, [`state_of`]),
//! template rendering and expression evaluation in a frame, the evidence
//! events of file functions, and building a sub-flow's `with` input.
//! Must never: change step state (values are read, not written).

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::Transition;
use crate::eval::template::{RefValues, render};
use crate::eval::{Bindings, Files, ResultBinding, StepOutputs, StepStates, eval_with_steps};
use crate::interp::event::EventKind;
use crate::interp::host::{CommandReceipt, FileEvidence, FileRead, FileRoot, Host, HostError};
use crate::interp::state::*;
use crate::plan::{FlowDef, Plan, RefDef, RefTarget, Seg, WithNode};

/// What `result` is bound to in an expression.
pub(super) enum ResultSel<'v> {
    /// The outputs of the frame's steps (`when`, `set`).
    Steps,
    /// One output (`ensure`, `until`).
    Value(&'v Value),
}

/// Follows a path into a value.
pub(super) fn walk<'v>(base: &'v Value, path: &[Seg], plan: &Plan) -> Option<&'v Value> {
    let mut cur = base;
    for s in path {
        cur = match s {
            Seg::Field(f) => cur.as_object()?.get(plan.str(*f))?,
            Seg::Index(i) => cur.as_array()?.get(*i as usize)?,
        };
    }
    Some(cur)
}

impl Transition<'_> {
    /// Resolves a reference in frame `f` (items bind `item`/`prev`).
    pub(super) fn resolve(
        &self,
        f: FrameIx,
        r: &RefDef,
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> Option<Value> {
        let base: Value = match r.target {
            RefTarget::Input => (*self.frame(f).input).clone(),
            RefTarget::Step(s) => {
                let st = self.run.steps[f.ix()].get(s as usize)?;
                if continued(self.flow(f), s, st) {
                    // X2: the output of a step that failed past `on_fail: continue` is `null`
                    return Some(Value::Null);
                }
                if st.status != StepStatus::Succeeded {
                    return None;
                }
                st.output.clone()?
            }
            RefTarget::Status(s)
            | RefTarget::Failure(s)
            | RefTarget::Note(s)
            | RefTarget::Choice(s) => {
                let st = self.run.steps[f.ix()].get(s as usize)?;
                let state = state_of(st);
                match r.target {
                    RefTarget::Status(_) => state.status,
                    RefTarget::Failure(_) => state.failure,
                    RefTarget::Choice(_) => state.choice,
                    _ => state.note,
                }
            }
            RefTarget::Item => item?.clone(),
            RefTarget::Prev => prev?.clone(),
            RefTarget::Carry(c) => {
                let def = self.flow(FrameIx::ENTRY).carry.get(c as usize)?;
                self.run
                    .header
                    .carry
                    .get(self.plan.str(def.name))?
                    .value
                    .clone()
            }
        };
        walk(&base, &r.path, self.plan).cloned()
    }

    /// Renders template `t` of frame `f`'s flow.
    pub(super) fn render(
        &self,
        f: FrameIx,
        t: u32,
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> Result<Value, String> {
        let td = &self.flow(f).templates[t as usize];
        let refs = Refs {
            t: self,
            f,
            item,
            prev,
        };
        render(self.plan, td, &refs).map_err(|e| e.to_string())
    }

    /// Evaluates expression chunk `c` of frame `f`'s flow for step `by`
    /// (its id as clients see it, `fan/3` for an item): the evidence of its
    /// file functions is recorded as that step's (X8 re-checks it).
    pub(super) fn run_chunk(
        &mut self,
        by: &str,
        f: FrameIx,
        c: u32,
        result: ResultSel<'_>,
        item: Option<&Value>,
        prev: Option<Option<&Value>>,
    ) -> Result<Value, String> {
        let chunk = &self.flow(f).chunks[c as usize];
        let outputs = Outputs {
            ids: &self.fidx(f).ids,
            steps: &self.run.steps[f.ix()],
        };
        let states = States {
            ids: &self.fidx(f).ids,
            steps: &self.run.steps[f.ix()],
            defs: &self.flow(f).steps,
        };
        let result = match result {
            ResultSel::Steps => ResultBinding::Steps(&outputs),
            ResultSel::Value(v) => ResultBinding::Value(v),
        };
        let b = Bindings {
            result,
            input: &self.run.header.frames[f.ix()].input,
            item,
            prev,
        };
        let mut files = HostFiles {
            host: &mut *self.host,
            root: self.file_root.as_deref(),
            evidence: Vec::new(),
            receipts: self.receipts.as_deref(),
            changes: self.changes_seen.as_ref(),
        };
        let r = eval_with_steps(self.plan, chunk, &b, Some(&states), &mut files);
        let evidence = std::mem::take(&mut files.evidence);
        let in_worktree = self.file_root.is_some();
        for e in evidence {
            self.evidence(e, in_worktree, Some(by));
        }
        r.map_err(|e| e.to_string())
    }

    /// Records what a file check saw.
    pub(super) fn evidence(&mut self, file: FileEvidence, in_worktree: bool, step: Option<&str>) {
        let root = in_worktree.then(|| "worktree".to_string());
        self.event(EventKind::Evidence { file, root }, step.map(str::to_string));
    }

    /// The value of `with` node `node` of frame `f`'s flow.
    pub(super) fn with_value(&self, f: FrameIx, node: u32) -> Result<Value, String> {
        // children come before parents (verified), so this recursion is bounded by the verified depth (≤ 64)
        match &self.flow(f).with_nodes[node as usize] {
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
}

struct Refs<'m, 'a> {
    t: &'m Transition<'a>,
    f: FrameIx,
    item: Option<&'m Value>,
    prev: Option<&'m Value>,
}

impl RefValues for Refs<'_, '_> {
    fn value(&self, target: RefTarget) -> Option<Cow<'_, Value>> {
        let r = RefDef {
            target,
            path: Vec::new(),
        };
        self.t
            .resolve(self.f, &r, self.item, self.prev)
            .map(Cow::Owned)
    }
}

struct Outputs<'s> {
    ids: &'s HashMap<String, u32>,
    steps: &'s [StepState],
}

impl StepOutputs for Outputs<'_> {
    fn get(&self, id: &str) -> Option<&Value> {
        let st = self.steps.get(*self.ids.get(id)? as usize)?;
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

/// A step's state as `steps.<id>` and `${<id>.status}` see it (X1).
pub(super) struct StateView {
    /// `succeeded`, `failed`, `skipped` (or, before it finished, its row's status).
    pub status: Value,
    /// The output when it succeeded, else `null`.
    pub output: Value,
    /// `{reason, violations}` when it failed, else `null`.
    pub failure: Value,
    /// Attempts made since its last reset.
    pub attempts: Value,
    /// A gate's note of its latest decision, else `null`.
    pub note: Value,
    /// A gate's choice of its latest decision (X10), else `null`.
    pub choice: Value,
}

/// Whether step `s` failed and `on_fail: continue` let the flow go on (X2).
pub(super) fn continued(flow: &FlowDef, s: u32, st: &StepState) -> bool {
    st.status == StepStatus::Failed
        && (st.continued
            || flow
                .steps
                .get(s as usize)
                .is_some_and(|d| d.on_fail_continue))
}

/// The state of step `s` of `flow` from its row: the status is what the row
/// says (a step that did not run because it was skipped is `skipped`).
pub(super) fn state_of(st: &StepState) -> StateView {
    let failure = match (&st.failure, st.status) {
        (Some(f), StepStatus::Failed) => {
            let mut m = serde_json::Map::new();
            m.insert("reason".into(), Value::String(f.reason.clone()));
            m.insert("violations".into(), Value::Array(f.violations.clone()));
            Value::Object(m)
        }
        (None, StepStatus::Failed) => {
            let mut m = serde_json::Map::new();
            m.insert("reason".into(), Value::String("failed".into()));
            m.insert("violations".into(), Value::Array(Vec::new()));
            Value::Object(m)
        }
        _ => Value::Null,
    };
    let output = match (&st.output, st.status) {
        (Some(o), StepStatus::Succeeded) => o.clone(),
        _ => Value::Null,
    };
    StateView {
        status: Value::String(st.status.as_str().into()),
        output,
        failure,
        attempts: Value::from(st.attempts),
        note: st.note.clone().map_or(Value::Null, Value::String),
        choice: st.choice.clone().map_or(Value::Null, Value::String),
    }
}

struct States<'s> {
    ids: &'s HashMap<String, u32>,
    steps: &'s [StepState],
    /// The flow's steps: a gate's state also has its `choice` (X10).
    defs: &'s [crate::plan::StepDef],
}

impl StepStates for States<'_> {
    fn state(&self, id: &str) -> Option<Value> {
        let s = *self.ids.get(id)?;
        let v = state_of(self.steps.get(s as usize)?);
        let mut m = serde_json::Map::new();
        m.insert("status".into(), v.status);
        m.insert("output".into(), v.output);
        m.insert("failure".into(), v.failure);
        m.insert("attempts".into(), v.attempts);
        let is_gate = self
            .defs
            .get(s as usize)
            .is_some_and(|d| matches!(d.kind, crate::plan::StepKindDef::Gate { .. }));
        if is_gate {
            m.insert("choice".into(), v.choice);
        }
        Some(Value::Object(m))
    }

    fn to_object(&self) -> Value {
        let mut ids: Vec<(&String, &u32)> = self.ids.iter().collect();
        ids.sort_by_key(|(_, i)| **i);
        let mut m = serde_json::Map::new();
        for (id, _) in ids {
            if let Some(v) = self.state(id) {
                m.insert(id.clone(), v);
            }
        }
        Value::Object(m)
    }
}

/// The evaluator's file functions, through the host, collecting evidence.
struct HostFiles<'h> {
    host: &'h mut dyn Host,
    /// An item's worktree, else the workspace root.
    root: Option<&'h str>,
    evidence: Vec<FileEvidence>,
    /// This attempt's `exec` receipts (X12); `None` outside an output's checks.
    receipts: Option<&'h [CommandReceipt]>,
    /// `changes()` of the scoped dispatch being checked (X11).
    changes: Option<&'h Value>,
}

impl Files for HostFiles<'_> {
    fn changes(&mut self) -> Result<Value, HostError> {
        self.changes.cloned().ok_or_else(|| {
            HostError::Unsupported(
                "`changes()` is only known in the ensure of a scoped dispatch".into(),
            )
        })
    }

    fn file_exists(&mut self, path: &str) -> Result<bool, HostError> {
        let root = self.root.map_or(FileRoot::Workspace, FileRoot::Worktree);
        let ev = self.host.file_exists(root, path)?;
        let exists = ev.exists;
        self.evidence.push(ev);
        Ok(exists)
    }

    fn file_contains(&mut self, path: &str, text: &str) -> Result<bool, HostError> {
        let root = self.root.map_or(FileRoot::Workspace, FileRoot::Worktree);
        let (holds, ev) = self.host.file_contains(root, path, text)?;
        self.evidence.push(ev);
        Ok(holds)
    }

    fn read_file(&mut self, path: &str) -> Result<FileRead, HostError> {
        let root = self.root.map_or(FileRoot::Workspace, FileRoot::Worktree);
        let (read, ev) = self.host.read_file(root, path)?;
        self.evidence.push(ev);
        Ok(read)
    }

    fn glob(&mut self, pattern: &str) -> Result<Vec<String>, HostError> {
        let root = self.root.map_or(FileRoot::Workspace, FileRoot::Worktree);
        self.host.glob(root, pattern)
    }

    fn receipts(&mut self) -> Result<Value, HostError> {
        let Some(receipts) = self.receipts else {
            return Err(HostError::Unsupported(crate::eval::NO_RECEIPTS.into()));
        };
        serde_json::to_value(receipts).map_err(|e| HostError::Unsupported(e.to_string()))
    }
}
