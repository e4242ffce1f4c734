//! The step hash (language 1.1 X8): one digest of what a compiled step
//! does, so a retried run can tell whether a step of the old run is still the
//! same step, and `stratumc cost --history` can find past runs of it.
//!
//! Owns: [`step_hash`] and the resolution of a step to its contents — its
//! kind with every bytecode chunk (instructions with their string and
//! constant operands resolved), template, contract record (fields, types,
//! nested records), ensure, `when`, `out`, budget, attempts, `iterate`,
//! sub-flow call and route targets (`on_fail`, gate targets) by id. Interned
//! string ids and table indices are resolved to what they name, so the same
//! step in a re-ordered spec hashes the same.
//! Must never: include where the step is (its position in the file, its
//! index, chunk or template table slots), the graph's derived figures
//! (`entries`, worst-case dispatches, a chunk's stack bound) or the dispatch
//! lease (`timeout_ms`: when a dispatch is orphaned does not change what the
//! step computes). `cost` hints are not in the plan at all.
//!
//! A new opcode whose operand names a string or a table slot must be
//! resolved in `instr` (an unresolved index would make the hash depend on
//! table order).

use serde_json::{Value, json};

use super::op::{self, Op};
use super::{ArtifactDef, ScopeDef};
use super::{
    BaseType, BudgetDef, Chunk, ConstDef, FlowDef, OnFailAction, OnFailDef, Plan, PredDef, RefDef,
    RefTarget, RouteAction, RouteDef, Seg, StageDef, StepDef, StepKindDef, TemplateDef,
    TemplateMode, TypeDef, WithNode,
};
use crate::eval::canonical_digest;

/// Deepest contract or `with` nesting resolved; deeper parts hash as their name.
const MAX_DEPTH: usize = 64;

/// The hash of step `step` of flow `flow`: the SHA-256 hex digest of the
/// canonical JSON of the step resolved to its contents (see the module
/// docs). `None` when the indices name no step of `plan`.
pub fn step_hash(plan: &Plan, flow: u32, step: u32) -> Option<String> {
    let fd = plan.flows.get(flow as usize)?;
    let sd = fd.steps.get(step as usize)?;
    Some(canonical_digest(&Resolver { plan, fd }.step(sd)))
}

/// Resolves indices of one flow to what they name.
struct Resolver<'a> {
    plan: &'a Plan,
    fd: &'a FlowDef,
}

fn num(n: f64) -> Value {
    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
}

impl Resolver<'_> {
    fn s(&self, id: u32) -> Value {
        Value::String(self.plan.str(id).to_string())
    }

    /// A step of this flow by id (route targets, gate targets).
    fn target(&self, step: Option<u32>) -> Value {
        step.and_then(|s| self.fd.steps.get(s as usize))
            .map_or(Value::Null, |t| self.s(t.id))
    }

    fn step(&self, sd: &StepDef) -> Value {
        let mut v = json!({
            "id": self.s(sd.id),
            "kind": self.kind(&sd.kind),
            "when": sd.when.map(|c| self.chunk(c)),
            "ensure": sd.ensure.iter().map(|p| self.pred(p)).collect::<Vec<_>>(),
            "out": sd.out.map(|r| self.record(r, 0)),
            "budget": sd.budget.as_ref().map(budget),
            "onFail": self.target(sd.on_fail),
            "onFailContinue": sd.on_fail_continue,
            "artifacts": self.artifacts(&sd.artifacts),
        });
        self.scope(&mut v, sd.scope.as_ref());
        // X9: only steps with routes carry the key (older steps keep their hash)
        if !sd.routes.is_empty()
            && let Value::Object(m) = &mut v
        {
            let routes = sd
                .routes
                .iter()
                .map(|r| self.with_rollback(self.route(r), r.rollback))
                .collect();
            m.insert("routes".into(), Value::Array(routes));
        }
        if !sd.on_fail_routes.is_empty()
            && let Value::Object(m) = &mut v
        {
            let entries = sd
                .on_fail_routes
                .iter()
                .map(|e| self.with_rollback(self.on_fail(e), e.rollback))
                .collect();
            m.insert("onFailRoutes".into(), Value::Array(entries));
        }
        v
    }

    /// X11 `rollback: STEP` on a route or an `on_fail` entry, only when
    /// there is one (entries without keep their hashes).
    fn with_rollback(&self, mut v: Value, rollback: Option<u32>) -> Value {
        if let (Some(r), Value::Object(m)) = (rollback, &mut v) {
            m.insert("rollback".into(), self.target(Some(r)));
        }
        v
    }

    /// An X9 `on_fail` entry: its condition and what it does.
    fn on_fail(&self, e: &OnFailDef) -> Value {
        let when = e.when.map(|c| self.chunk(c));
        match &e.action {
            OnFailAction::Step(s) => json!({"when": when, "step": self.target(Some(*s))}),
            OnFailAction::Continue => json!({"when": when, "continue": true}),
            OnFailAction::Goto { target, max, note } => json!({
                "when": when,
                "goto": self.target(Some(*target)),
                "max": max,
                "note": note.map(|n| self.template(n)),
            }),
            OnFailAction::Fail => json!({
                "when": when,
                "fail": true,
                "rollback": self.target(e.rollback),
            }),
        }
    }

    /// A `route` entry (X9): its condition and what it does.
    fn route(&self, r: &RouteDef) -> Value {
        match &r.action {
            RouteAction::Goto { target, max, note } => json!({
                "when": self.chunk(r.when),
                "goto": self.target(Some(*target)),
                "max": max,
                "note": note.map(|n| self.template(n)),
            }),
            RouteAction::Fail { reason } => json!({
                "when": self.chunk(r.when),
                "fail": self.template(*reason),
            }),
        }
    }

    /// `scope` (X11), only when there is one: the hashes of unscoped steps
    /// stay what they were before scopes existed.
    fn scope(&self, v: &mut Value, scope: Option<&ScopeDef>) {
        if let (Some(sc), Some(obj)) = (scope, v.as_object_mut()) {
            obj.insert(
                "scope".into(),
                json!({
                    "files": self.artifacts(&sc.files),
                    "create": self.artifacts(&sc.create),
                    "maxChangedBytes": sc.max_changed_bytes,
                }),
            );
        }
    }

    fn kind(&self, k: &StepKindDef) -> Value {
        match k {
            StepKindDef::Do {
                task,
                agent,
                attempts,
                iterate,
            } => json!({
                "do": self.template(*task),
                "agent": agent.as_str(),
                "attempts": attempts,
                "iterate": iterate.map(|(max, until)| json!({"max": max, "until": self.chunk(until)})),
            }),
            StepKindDef::Set { fields } => json!({
                "set": fields.iter().map(|(k, c)| json!([self.s(*k), self.chunk(*c)])).collect::<Vec<_>>(),
            }),
            StepKindDef::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                prompt,
                show,
                options,
            } => {
                let mut gate = json!({
                    "onApprove": self.target(*on_approve),
                    "onRevise": self.target(*on_revise),
                    "onKill": self.target(*on_kill),
                    "maxRounds": max_rounds,
                    "prompt": prompt.map(|t| self.template(t)),
                    "show": show.iter().map(|t| self.template(*t)).collect::<Vec<_>>(),
                });
                // X10: present only when set, so gates without options keep their hash
                if let (Some(o), Some(obj)) = (options, gate.as_object_mut()) {
                    obj.insert("options".into(), self.gate_options(o));
                }
                json!({ "gate": gate })
            }
            StepKindDef::Fanout {
                over,
                stages,
                concurrency,
                worktree,
                require,
                pre_merge,
                consumer,
            } => json!({
                "fanout": self.chunk(*over),
                "stages": stages.iter().map(|s| self.stage(s)).collect::<Vec<_>>(),
                "concurrency": concurrency,
                "worktree": worktree,
                "require": format!("{require:?}"),
                "preMerge": pre_merge.iter().map(|s| self.s(*s)).collect::<Vec<_>>(),
                "consumer": consumer,
            }),
            StepKindDef::Run {
                flow,
                with,
                iterate,
            } => {
                let mut v = json!({
                    "run": self.plan.flows.get(*flow as usize).map(|f| self.s(f.name)),
                    "with": with.iter().map(|(k, n)| json!([self.s(*k), self.with(*n, 0)])).collect::<Vec<_>>(),
                });
                // X9: only iterating calls carry the key (older steps keep their hash)
                if let (Some((max, until)), Value::Object(m)) = (iterate, &mut v) {
                    m.insert(
                        "iterate".into(),
                        json!({"max": max, "until": self.chunk(*until)}),
                    );
                }
                v
            }
            // X12: every field changes what the step does
            StepKindDef::Evaluate {
                command,
                timeout_ms,
                input,
            } => json!({
                "evaluate": self.s(*command),
                "timeoutMs": timeout_ms,
                "in": input.map(|t| self.template(t)),
            }),
        }
    }

    fn stage(&self, s: &StageDef) -> Value {
        let mut v = json!({
            "do": self.template(s.task),
            "agent": s.agent.as_str(),
            "out": s.out.map(|r| self.record(r, 0)),
            "ensure": s.ensure.iter().map(|p| self.pred(p)).collect::<Vec<_>>(),
            "attempts": s.attempts,
            "when": s.when.map(|c| self.chunk(c)),
            "artifacts": self.artifacts(&s.artifacts),
        });
        self.scope(&mut v, s.scope.as_ref());
        // X9: only stages with `on_fail` carry the key (older stages keep their hash)
        if let (false, Value::Object(m)) = (s.on_fail.is_empty(), &mut v) {
            let entries = s.on_fail.iter().map(|e| self.on_fail(e)).collect();
            m.insert("onFail".into(), Value::Array(entries));
        }
        v
    }

    /// `artifacts` entries (X4): what the checks require to exist.
    fn artifacts(&self, entries: &[ArtifactDef]) -> Value {
        entries
            .iter()
            .map(|a| json!({"template": self.template(a.template), "glob": a.glob}))
            .collect()
    }

    fn pred(&self, p: &PredDef) -> Value {
        match p {
            PredDef::Expr(c) => json!({"expr": self.chunk(*c)}),
            PredDef::FileExists(path) => json!({"fileExists": self.s(*path)}),
            PredDef::FileContains(path, text) => {
                json!({"fileContains": [self.s(*path), self.s(*text)]})
            }
            PredDef::Judged(statement, stakes) => {
                json!({"judged": self.s(*statement), "stakes": stakes.as_str()})
            }
            PredDef::FileExistsAt(path) => json!({"fileExists": self.path_template(*path)}),
            PredDef::FileContainsAt(path, text) => {
                json!({"fileContains": [self.path_template(*path), self.s(*text)]})
            }
            PredDef::Scored {
                rubric,
                threshold,
                judge,
                inputs,
            } => json!({
                "scored": self.template(*rubric),
                "threshold": num(*threshold),
                "judge": judge.map(|j| self.s(j)),
                "inputs": inputs.iter().map(|t| self.template(*t)).collect::<Vec<_>>(),
            }),
            // X12: every field changes what the check does
            PredDef::Exec {
                run,
                args,
                expect_exit,
                timeout_ms,
            } => json!({
                "exec": self.s(*run),
                "args": args.iter().map(|t| self.template(*t)).collect::<Vec<_>>(),
                "expectExit": expect_exit,
                "timeoutMs": timeout_ms,
            }),
        }
    }

    /// A file predicate path (X3): a template without references hashes as
    /// its text, like the literal path of [`PredDef::FileExists`], so a step
    /// with a literal path keeps the hash it had before paths were templates.
    fn path_template(&self, t: u32) -> Value {
        let Some(TemplateDef { pieces, .. }) = self.fd.templates.get(t as usize) else {
            return Value::Null;
        };
        let mut text = String::new();
        for p in pieces {
            match p {
                super::PieceDef::Text(s) => text.push_str(self.plan.str(*s)),
                super::PieceDef::Ref(_) => return self.template(t),
            }
        }
        Value::String(text)
    }

    /// A chunk as its instructions, operands resolved; its source text,
    /// spans and stack bound are left out (the code is its meaning).
    fn chunk(&self, c: u32) -> Value {
        let Some(ch) = self.fd.chunks.get(c as usize) else {
            return Value::Null;
        };
        let mut code = Vec::new();
        let mut pc = 0;
        while pc < ch.code.len() {
            match op::decode(&ch.code, pc) {
                Ok(i) => {
                    code.push(self.instr(ch, i));
                    pc += i.len;
                }
                Err(_) => {
                    // verified plans decode; an unverified one hashes its raw tail
                    code.push(json!({"raw": ch.code[pc..].to_vec()}));
                    break;
                }
            }
        }
        json!({"context": format!("{:?}", ch.context), "code": code})
    }

    fn instr(&self, ch: &Chunk, i: op::Instr) -> Value {
        let n = i.op.operands().len();
        match i.op {
            Op::Field => json!([i.op.name(), self.s(i.args[0])]),
            Op::Const => json!([
                i.op.name(),
                self.constant(ch.consts.get(i.args[0] as usize))
            ]),
            _ => json!([i.op.name(), &i.args[..n]]),
        }
    }

    fn constant(&self, c: Option<&ConstDef>) -> Value {
        match c {
            None | Some(ConstDef::Null) => Value::Null,
            Some(ConstDef::Bool(b)) => Value::Bool(*b),
            Some(ConstDef::Number(n)) => num(*n),
            Some(ConstDef::Str(s)) => json!({"str": self.s(*s)}),
        }
    }

    /// A gate's `options` (X10): the literal list or the template.
    fn gate_options(&self, o: &super::GateOptionsDef) -> Value {
        match o {
            super::GateOptionsDef::List(l) => {
                json!(l.iter().map(|s| self.s(*s)).collect::<Vec<_>>())
            }
            super::GateOptionsDef::Template(t) => json!({"template": self.template(*t)}),
        }
    }

    fn template(&self, t: u32) -> Value {
        let Some(TemplateDef { pieces, mode, .. }) = self.fd.templates.get(t as usize) else {
            return Value::Null;
        };
        let pieces: Vec<Value> = pieces
            .iter()
            .map(|p| match p {
                super::PieceDef::Text(s) => self.s(*s),
                super::PieceDef::Ref(r) => json!({"ref": self.reference(r)}),
            })
            .collect();
        let mode = match mode {
            TemplateMode::Interpolate => "interpolate",
            TemplateMode::FullValue => "full",
            TemplateMode::FullValueString => "fullString",
        };
        json!({"mode": mode, "pieces": pieces})
    }

    fn reference(&self, r: &RefDef) -> Value {
        let target = match r.target {
            RefTarget::Input => json!("input"),
            RefTarget::Item => json!("item"),
            RefTarget::Prev => json!("prev"),
            RefTarget::Step(s) => json!({"step": self.target(Some(s))}),
            RefTarget::Carry(c) => {
                json!({"carry": self.fd.carry.get(c as usize).map(|d| self.s(d.name))})
            }
            RefTarget::Status(s) => json!({"status": self.target(Some(s))}),
            RefTarget::Failure(s) => json!({"failure": self.target(Some(s))}),
            RefTarget::Note(s) => json!({"note": self.target(Some(s))}),
            RefTarget::Choice(s) => json!({"choice": self.target(Some(s))}),
        };
        json!({"target": target, "path": self.path(&r.path)})
    }

    fn path(&self, path: &[Seg]) -> Value {
        path.iter()
            .map(|s| match s {
                Seg::Field(f) => self.s(*f),
                Seg::Index(i) => json!(i),
            })
            .collect()
    }

    /// A contract record: its name and fields, nested records resolved.
    fn record(&self, r: u32, depth: usize) -> Value {
        let Some(rd) = self.plan.records.get(r as usize) else {
            return Value::Null;
        };
        if depth >= MAX_DEPTH {
            return json!({"record": self.s(rd.name)});
        }
        // a contract's fields are a set: their order in the file means nothing
        let fields: std::collections::BTreeMap<&str, Value> = rd
            .fields
            .iter()
            .map(|f| {
                (
                    self.plan.str(f.name),
                    json!([self.ty(&f.ty, depth), f.optional]),
                )
            })
            .collect();
        json!({"record": self.s(rd.name), "fields": fields})
    }

    fn ty(&self, t: &TypeDef, depth: usize) -> Value {
        let base = match &t.base {
            BaseType::Enum(names) => {
                json!({"enum": names.iter().map(|n| self.s(*n)).collect::<Vec<_>>()})
            }
            BaseType::Record(r) => self.record(*r, depth + 1),
            other => json!(format!("{other:?}")),
        };
        json!({"base": base, "listDepth": t.list_depth})
    }

    fn with(&self, n: u32, depth: usize) -> Value {
        let Some(node) = self.fd.with_nodes.get(n as usize) else {
            return Value::Null;
        };
        if depth >= MAX_DEPTH {
            return json!("…");
        }
        match node {
            WithNode::Template(t) => json!({"template": self.template(*t)}),
            WithNode::Null => Value::Null,
            WithNode::Bool(b) => Value::Bool(*b),
            WithNode::Number(x) => num(*x),
            WithNode::List(items) => items.iter().map(|i| self.with(*i, depth + 1)).collect(),
            WithNode::Map(entries) => entries
                .iter()
                .map(|(k, v)| json!([self.s(*k), self.with(*v, depth + 1)]))
                .collect(),
        }
    }
}

fn budget(b: &BudgetDef) -> Value {
    json!({"usd": b.usd.map(num), "tokens": b.tokens, "dispatches": b.dispatches, "ms": b.ms})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Agent, Bound, OutputDef, PieceDef, Pos};

    /// A one-step plan whose task is `text`, with its strings interned in
    /// the order `order` (indices into `["main", "a", text]`) and the step at
    /// position `pos`.
    fn plan(text: &str, order: [usize; 3], pos: Pos) -> Plan {
        let names = ["main", "a", text];
        let strings: Vec<String> = order.iter().map(|&i| names[i].to_string()).collect();
        let id = |name: &str| strings.iter().position(|s| s == name).unwrap() as u32;
        let step = StepDef {
            id: id("a"),
            pos,
            kind: StepKindDef::Do {
                task: 0,
                agent: Agent::Claude,
                attempts: 1,
                iterate: None,
            },
            when: None,
            ensure: vec![PredDef::FileExists(id(text))],
            out: None,
            budget: None,
            on_fail: None,
            on_fail_continue: false,
            artifacts: Vec::new(),
            scope: None,
            routes: Vec::new(),
            on_fail_routes: Vec::new(),
            timeout_ms: Some(pos.line.into()),
            entries: pos.col,
            worst_dispatches: Bound::Finite(pos.col.into()),
        };
        let flow = FlowDef {
            name: id("main"),
            input: 0,
            output: OutputDef {
                step: 0,
                path: vec![],
                contract: 0,
                pos: Pos::default(),
            },
            steps: vec![step],
            edges: vec![],
            budget: None,
            max_rounds: None,
            carry: vec![],
            chunks: vec![],
            templates: vec![TemplateDef {
                pieces: vec![PieceDef::Text(id(text))],
                mode: TemplateMode::Interpolate,
                pos,
            }],
            with_nodes: vec![],
            closures: vec![],
            worst_dispatches: Bound::Finite(1),
        };
        Plan {
            strings,
            records: vec![],
            flows: vec![flow],
            entry: 0,
        }
    }

    #[test]
    fn string_order_positions_and_derived_figures_do_not_change_the_hash() {
        let a = plan("go", [0, 1, 2], Pos { line: 3, col: 1 });
        let b = plan("go", [2, 0, 1], Pos { line: 40, col: 9 });
        assert_ne!(a.strings, b.strings);
        assert_eq!(step_hash(&a, 0, 0), step_hash(&b, 0, 0));
    }

    #[test]
    fn another_task_text_is_another_hash() {
        let a = plan("go", [0, 1, 2], Pos::default());
        let b = plan("stop", [0, 1, 2], Pos::default());
        assert_ne!(step_hash(&a, 0, 0), step_hash(&b, 0, 0));
        assert_eq!(step_hash(&a, 0, 1), None);
    }

    #[test]
    fn a_literal_templated_path_hashes_as_the_literal_path_and_a_reference_does_not() {
        let literal = plan("notes.md", [0, 1, 2], Pos::default());
        let mut templated = literal.clone();
        // template 1: the path as a one-piece template (template 0 is the task)
        let path = templated.flows[0].templates[0].clone();
        templated.flows[0].templates.push(path);
        templated.flows[0].steps[0].ensure = vec![PredDef::FileExistsAt(1)];
        assert_eq!(step_hash(&literal, 0, 0), step_hash(&templated, 0, 0));
        let mut with_ref = templated.clone();
        with_ref.flows[0].templates[1]
            .pieces
            .push(PieceDef::Ref(RefDef {
                target: RefTarget::Input,
                path: vec![],
            }));
        assert_ne!(step_hash(&templated, 0, 0), step_hash(&with_ref, 0, 0));
    }
}
