//! What a transition hands back: the ready entries (E4/E5: the rendered
//! task, its contract and ensures, the previous failure), the waiting gates,
//! and the entry flow's ledger.
//!
//! Owns: building [`Outcome`] from the run.
//! Must never: change the run (views are built after the transition).

use super::Transition;
use crate::interp::outcome::*;
use crate::interp::state::*;
use crate::plan::{BaseType, PredDef, StepKindDef};
use serde_json::Value;

impl Transition<'_> {
    pub(super) fn outcome(&self) -> Outcome {
        let h = &self.run.header;
        let ready = h
            .ready
            .iter()
            .filter_map(|&s| self.ready_entry(s))
            .collect();
        let gates = h.gates.iter().filter_map(|&at| self.waiting(at)).collect();
        let entry = self.flow(FrameIx::ENTRY);
        Outcome {
            status: h.status,
            ready,
            gates,
            output: h.output.clone(),
            failure: h.failure.clone(),
            ledger: LedgerView {
                spent: h.frames[0].spent,
                budget: entry.budget.as_ref().map(BudgetView::from),
            },
        }
    }

    fn waiting(&self, at: StepAt) -> Option<WaitingGate> {
        let StepKindDef::Gate {
            on_approve,
            on_revise,
            on_kill,
            max_rounds,
            ..
        } = self.def(at).kind
        else {
            return None;
        };
        let name = |t: Option<u32>| t.map(|t| self.own_id(at.sibling(t)).to_string());
        let shown = self.st(at).shown.clone().unwrap_or_default();
        Some(WaitingGate {
            step_id: self.sid(at),
            gate_token: self.st(at).token.clone().unwrap_or_default(),
            round: self.frame(at.frame).rounds,
            max_rounds: self.flow(at.frame).max_rounds,
            gate_max_rounds: max_rounds,
            routes: GateRoutes {
                approve: name(on_approve),
                revise: name(on_revise),
                kill: name(on_kill),
            },
            prompt: shown.prompt,
            show: shown.files,
            options: self.st(at).options.clone(),
        })
    }

    fn contract_view(&self, record: u32) -> ContractView {
        let mut contracts: Vec<(String, Ordered<String>)> = Vec::new();
        let mut todo = vec![record];
        while let Some(r) = todo.pop() {
            let rec = &self.plan.records[r as usize];
            let name = self.plan.str(rec.name).to_string();
            if contracts.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let mut fields = Vec::new();
            for fd in &rec.fields {
                if let BaseType::Record(inner) = fd.ty.base {
                    todo.push(inner);
                }
                let ty = crate::plan::disasm::type_string(self.plan, &fd.ty, fd.optional);
                fields.push((self.plan.str(fd.name).to_string(), ty));
            }
            contracts.push((name, Ordered(fields)));
        }
        ContractView {
            root: self
                .plan
                .str(self.plan.records[record as usize].name)
                .to_string(),
            contracts: Ordered(contracts),
        }
    }

    fn ensure_views(
        &self,
        f: FrameIx,
        preds: &[PredDef],
        item: Option<&Value>,
        prev: Option<&Value>,
    ) -> Vec<EnsureView> {
        let s = |id: u32| self.plan.str(id).to_string();
        let text = |t: u32| match self.render(f, t, item, prev) {
            Ok(Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(why) => format!("(cannot be rendered yet: {why})"),
        };
        preds
            .iter()
            .map(|p| match p {
                PredDef::Expr(c) => EnsureView::Expr(s(self.flow(f).chunks[*c as usize].source)),
                PredDef::FileExists(p) => EnsureView::FileExists(s(*p)),
                PredDef::FileContains(a, b) => EnsureView::FileContains {
                    path: s(*a),
                    text: s(*b),
                },
                // X3: the agent sees the path it must write
                PredDef::FileExistsAt(t) => EnsureView::FileExists(text(*t)),
                PredDef::FileContainsAt(t, b) => EnsureView::FileContains {
                    path: text(*t),
                    text: s(*b),
                },
                PredDef::Judged(st, k) => EnsureView::Judged {
                    statement: s(*st),
                    stakes: k.as_str().to_string(),
                },
                PredDef::Scored {
                    rubric,
                    threshold,
                    judge,
                    inputs,
                } => EnsureView::Scored {
                    rubric: text(*rubric),
                    threshold: *threshold,
                    judge: judge.map(s),
                    inputs: inputs.iter().map(|t| text(*t)).collect(),
                },
                PredDef::Exec {
                    run,
                    args,
                    expect_exit,
                    ..
                } => EnsureView::Exec {
                    run: s(*run),
                    args: args.iter().map(|t| text(*t)).collect(),
                    expect_exit: *expect_exit,
                },
            })
            .collect()
    }

    /// The revise a `do` step's dispatch carries as `previousRevise` (X10):
    /// the target's on every attempt; a closure member's on its first
    /// dispatch; inside a sub-flow that a revise (re-)entered through its
    /// `run` step, the first dispatch of each of the sub-flow's first
    /// steps (those without dependencies), nested calls included.
    fn revise_heard(&self, at: StepAt) -> Option<crate::interp::Revised> {
        let st = self.st(at);
        if st.revised.is_some() {
            return st.revised.clone();
        }
        if st.attempts > 1 {
            return None;
        }
        if st.revise_context.is_some() {
            return st.revise_context.clone();
        }
        let mut here = at;
        while self.fidx(here.frame).deps[here.ix()].is_empty() {
            let caller = self.frame(here.frame).parent?;
            let cs = self.st(caller);
            if let Some(r) = cs.revised.as_ref().or(cs.revise_context.as_ref()) {
                return Some(r.clone());
            }
            here = caller;
        }
        None
    }

    /// The `previousRoute` step `at`'s dispatch carries (X9): its own, or,
    /// for a first dispatch of a root step of a called flow (no
    /// dependencies, first attempt, never reset), the one of the `run` step
    /// that called it, up through nested calls.
    fn carried_route(&self, at: StepAt) -> Option<crate::interp::PreviousRoute> {
        let st = self.st(at);
        if let Some(r) = &st.previous_route {
            return Some(r.clone());
        }
        let parent = self.frame(at.frame).parent?;
        // the first pass of the call only (an `iterate` pass is not re-entered)
        let first = st.attempts <= 1 && st.epoch == 0 && self.st(parent).iterations == 0;
        (first && self.fidx(at.frame).deps[at.ix()].is_empty())
            .then(|| self.carried_route(parent))
            .flatten()
    }

    fn ready_entry(&self, slot: Slot) -> Option<ReadyEntry> {
        let at = slot.at;
        let st = self.st(at);
        let def = self.def(at);
        let Some(k) = slot.item else {
            let StepKindDef::Do {
                task,
                agent,
                attempts,
                ..
            } = def.kind
            else {
                return None;
            };
            return Some(ReadyEntry {
                id: self.sid(at),
                task: self.render_task(at.frame, task, None, None)?,
                agent,
                attempt: st.attempts,
                attempts_left: attempts.saturating_sub(st.attempts),
                dispatch_token: st.token.clone()?,
                dispatch: Dispatch::Step,
                contract: def.out.map(|o| self.contract_view(o)),
                ensure: self.ensure_views(at.frame, &def.ensure, None, None),
                previous_failure: st.failure.clone().or_else(|| st.routed.clone()),
                previous_revise: self.revise_heard(at),
                previous_route: self.carried_route(at),
                item: None,
                cwd: None,
                timeout_ms: def.timeout_ms,
                scope: def
                    .scope
                    .as_ref()
                    .map(|sc| self.scope_view(at.frame, sc, None, None)),
            });
        };
        let StepKindDef::Fanout {
            stages, consumer, ..
        } = &def.kind
        else {
            return None;
        };
        let it = st.items.get(k as usize)?;
        let stage = stages.get(it.stage as usize)?;
        Some(ReadyEntry {
            id: self.slot_id(slot),
            task: self.render_task(at.frame, stage.task, Some(&it.value), it.output.as_ref())?,
            agent: stage.agent,
            attempt: it.attempts,
            attempts_left: stage.attempts.saturating_sub(it.stage_attempts),
            dispatch_token: it.token.clone()?,
            dispatch: if *consumer {
                Dispatch::Consumer
            } else {
                Dispatch::Engine
            },
            contract: stage.out.map(|o| self.contract_view(o)),
            ensure: self.ensure_views(at.frame, &stage.ensure, Some(&it.value), it.output.as_ref()),
            previous_failure: it.failure.clone(),
            // X10: a fanout the revise reset (its target or in its closure):
            // each item's first dispatch hears the answer
            previous_revise: (it.stage == 0 && it.attempts <= 1)
                .then(|| st.revised.clone().or_else(|| st.revise_context.clone()))
                .flatten(),
            // X9: a fanout a route re-entered: its items' first dispatches
            previous_route: self
                .carried_route(at)
                .filter(|_| it.stage == 0 && it.attempts <= 1),
            item: Some(ItemEntry {
                item: it.value.clone(),
                item_index: k,
                stage: it.stage,
                prev: if it.stage > 0 {
                    it.output.clone()
                } else {
                    None
                },
            }),
            // the item's agent works in its worktree
            cwd: it.worktree.clone(),
            timeout_ms: stage.timeout_ms,
            scope: stage
                .scope
                .as_ref()
                .map(|sc| self.scope_view(at.frame, sc, Some(&it.value), it.output.as_ref())),
        })
    }

    /// A task as the agent reads it (its template rendered to text).
    fn render_task(
        &self,
        f: FrameIx,
        t: u32,
        item: Option<&serde_json::Value>,
        prev: Option<&serde_json::Value>,
    ) -> Option<String> {
        match self.render(f, t, item, prev).ok()? {
            serde_json::Value::String(s) => Some(s),
            other => Some(other.to_string()),
        }
    }
}
