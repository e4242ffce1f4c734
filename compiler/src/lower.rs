//! Lowering: checked IR → [`stratum_vm::plan::Plan`].
//!
//! Owns: the mapping of every IR construct to plan tables — interned strings,
//! records, steps in topological order, edges, templates with their
//! type-preservation mode, expressions compiled to stack bytecode with a
//! recorded stack bound and a pc → source-offset map, `with` trees as
//! index-linked nodes, the IR's reset closures as bitsets, and the cost bounds the
//! cost analysis computed.
//! Must never: check a rule (the IR is already valid) or decide a cost (that
//! is `cost`); the same IR must always lower to the same plan.

use std::collections::HashMap;

use stratum_grammar::{BinaryOp, Expr, ExprKind, UnaryOp};
use stratum_vm::plan::op::{self, Op};
use stratum_vm::plan::*;

use crate::analysis::Analysis;
use crate::ir::{
    self, EdgeKind as IrEdge, FlowIr, Piece, RefIr, StepKindIr, TemplateIr, WithValue,
};
use crate::source::Span;
use crate::syntax::ast;
use crate::types::{FieldType, Ty};

/// Per-step cost facts handed to lowering: (entries, worst dispatches).
pub type StepBounds = Vec<Vec<(u32, CostBound)>>;

/// A worst-case bound as the cost analysis states it.
#[derive(Debug, Clone, PartialEq)]
pub enum CostBound {
    /// Known.
    Finite(u64),
    /// Known only from inputs (text such as `2 + 3 × len(input.items)`).
    Symbolic(String),
}

/// Lowers an analysed spec; `None` when it has errors.
///
/// `bounds[flow][step]` are the cost facts per IR step, and `flow_bounds[flow]`
/// the whole-flow worst case.
pub fn lower(analysis: &Analysis, bounds: &StepBounds, flow_bounds: &[CostBound]) -> Option<Plan> {
    let ir = analysis.ir.as_ref()?;
    let mut l = Lowerer {
        analysis,
        strings: Vec::new(),
        interned: HashMap::new(),
    };
    let records = ir
        .types
        .records
        .iter()
        .map(|r| RecordDef {
            name: l.s(&r.name),
            fields: r
                .fields
                .iter()
                .map(|(n, ft)| FieldDef {
                    name: l.s(n),
                    ty: l.ty(ft),
                    optional: ft.optional,
                })
                .collect(),
        })
        .collect();
    let flows = ir
        .flows
        .iter()
        .enumerate()
        .map(|(fi, f)| {
            let no_bounds = Vec::new();
            let b = bounds.get(fi).unwrap_or(&no_bounds);
            let fb = flow_bounds.get(fi).cloned().unwrap_or(CostBound::Finite(0));
            l.flow(f, b, &fb)
        })
        .collect();
    Some(Plan {
        strings: l.strings,
        records,
        flows,
        entry: ir.entry as u32,
    })
}

struct Lowerer<'a> {
    analysis: &'a Analysis,
    strings: Vec<String>,
    interned: HashMap<String, u32>,
}

/// Tables of one flow under construction.
struct FlowTables {
    chunks: Vec<Chunk>,
    templates: Vec<TemplateDef>,
    with_nodes: Vec<WithNode>,
    /// IR step id → plan step index.
    index: Vec<u32>,
}

impl Lowerer<'_> {
    fn s(&mut self, text: &str) -> StrId {
        if let Some(&id) = self.interned.get(text) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(text.to_string());
        self.interned.insert(text.to_string(), id);
        id
    }

    fn pos(&self, span: Span) -> Pos {
        let lc = self
            .analysis
            .lines
            .line_col(&self.analysis.text, span.start);
        Pos {
            line: lc.line,
            col: lc.column,
        }
    }

    fn ty(&mut self, ft: &FieldType) -> TypeDef {
        let mut t = &ft.ty;
        let mut list_depth = 0u8;
        while let Ty::List(inner) = t {
            list_depth = list_depth.saturating_add(1);
            t = inner;
        }
        let base = match t {
            Ty::String => BaseType::String,
            Ty::Integer => BaseType::Integer,
            Ty::Number => BaseType::Number,
            Ty::Boolean => BaseType::Boolean,
            Ty::Object | Ty::Error => BaseType::Object,
            Ty::Array => BaseType::Array,
            Ty::Enum(v) => BaseType::Enum(v.iter().map(|x| self.s(x)).collect()),
            Ty::Record(r) => BaseType::Record(*r as u32),
            Ty::List(_) => unreachable!("invariant: list levels were unwrapped above"),
        };
        TypeDef { base, list_depth }
    }

    fn bound(&mut self, b: &CostBound) -> Bound {
        match b {
            CostBound::Finite(n) => Bound::Finite(*n),
            CostBound::Symbolic(text) => Bound::Symbolic(self.s(text)),
        }
    }

    fn budget(b: &ast::Budget) -> BudgetDef {
        BudgetDef {
            usd: b.usd,
            tokens: b.tokens,
            dispatches: b.dispatches,
            ms: b.ms,
        }
    }

    fn path(&mut self, path: &[ir::Segment]) -> Vec<Seg> {
        path.iter()
            .map(|s| match s {
                ir::Segment::Field(f) => Seg::Field(self.s(f)),
                ir::Segment::Index(i) => Seg::Index(u32::try_from(*i).unwrap_or(u32::MAX)),
            })
            .collect()
    }

    fn reference(&mut self, t: &FlowTables, r: &RefIr) -> RefDef {
        let target = match r.target {
            ir::RefTarget::Input => RefTarget::Input,
            ir::RefTarget::Step(s) => RefTarget::Step(t.index[s]),
            ir::RefTarget::Item => RefTarget::Item,
            ir::RefTarget::Prev => RefTarget::Prev,
            ir::RefTarget::Carry(c) => RefTarget::Carry(c as u32),
            ir::RefTarget::State(s, field) => match field {
                ir::StateField::Status => RefTarget::Status(t.index[s]),
                ir::StateField::Failure => RefTarget::Failure(t.index[s]),
                ir::StateField::Note => RefTarget::Note(t.index[s]),
                ir::StateField::Choice => RefTarget::Choice(t.index[s]),
            },
        };
        RefDef {
            target,
            path: self.path(&r.path),
        }
    }

    fn template(&mut self, t: &mut FlowTables, tir: &TemplateIr, is_task: bool) -> u32 {
        let pieces = tir
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(s) => PieceDef::Text(self.s(s)),
                Piece::Ref(r) => PieceDef::Ref(self.reference(t, r)),
            })
            .collect();
        let mode = match (tir.full_value, is_task) {
            (false, _) => TemplateMode::Interpolate,
            (true, true) => TemplateMode::FullValueString,
            (true, false) => TemplateMode::FullValue,
        };
        let pos = self.pos(tir.span);
        t.templates.push(TemplateDef { pieces, mode, pos });
        (t.templates.len() - 1) as u32
    }

    fn single_ref_template(&mut self, t: &mut FlowTables, r: &RefIr) -> u32 {
        let pieces = vec![PieceDef::Ref(self.reference(t, r))];
        let pos = self.pos(r.span);
        t.templates.push(TemplateDef {
            pieces,
            mode: TemplateMode::FullValue,
            pos,
        });
        (t.templates.len() - 1) as u32
    }

    fn with_value(&mut self, t: &mut FlowTables, v: &WithValue) -> u32 {
        // children first, so every child index is below its parent's (the verifier checks it)
        let node = match v {
            WithValue::Template(tir) => WithNode::Template(self.template(t, tir, false)),
            WithValue::Literal(serde_json::Value::Bool(b)) => WithNode::Bool(*b),
            WithValue::Literal(serde_json::Value::Number(n)) => {
                WithNode::Number(n.as_f64().unwrap_or(0.0))
            }
            WithValue::Literal(_) => WithNode::Null,
            WithValue::List(items) => {
                WithNode::List(items.iter().map(|i| self.with_value(t, i)).collect())
            }
            WithValue::Map(entries) => WithNode::Map(
                entries
                    .iter()
                    .map(|(k, v)| (self.s(k), self.with_value(t, v)))
                    .collect(),
            ),
        };
        t.with_nodes.push(node);
        (t.with_nodes.len() - 1) as u32
    }

    fn chunk(&mut self, t: &mut FlowTables, e: &ir::ExprIr, context: Context) -> u32 {
        let mut c = Compiler {
            code: Vec::new(),
            consts: Vec::new(),
            depth: 0,
            max: 0,
            spans: Vec::new(),
            strings: self,
            params: Vec::new(),
        };
        c.expr(&e.ast);
        c.emit(Op::Return, &[], e.ast.span.start);
        let (code, consts, max, spans) = (c.code, c.consts, c.max, c.spans);
        let source = self.s(&e.source);
        // the expression text starts after an opening quote, if any
        let pos = self.pos(Span::at(
            e.span.start
                + u32::from(
                    self.analysis
                        .text
                        .as_bytes()
                        .get(e.span.start as usize)
                        .is_some_and(|b| *b == b'"' || *b == b'\''),
                ),
        ));
        t.chunks.push(Chunk {
            source,
            context,
            code,
            consts,
            max_stack: max.min(u32::from(u16::MAX)) as u16,
            pos,
            spans,
        });
        (t.chunks.len() - 1) as u32
    }

    fn predicates(
        &mut self,
        t: &mut FlowTables,
        preds: &[ir::PredicateIr],
        context: Context,
    ) -> Vec<PredDef> {
        preds
            .iter()
            .map(|p| match p {
                ir::PredicateIr::Expr(e) => PredDef::Expr(self.chunk(t, e, context)),
                ir::PredicateIr::FileExists(p) => PredDef::FileExistsAt(self.template(t, p, true)),
                ir::PredicateIr::FileContains { path, text } => {
                    PredDef::FileContainsAt(self.template(t, path, true), self.s(text))
                }
                ir::PredicateIr::Judged { statement, stakes } => {
                    PredDef::Judged(self.s(statement), *stakes)
                }
                ir::PredicateIr::Scored {
                    rubric,
                    threshold,
                    judge,
                    inputs,
                } => PredDef::Scored {
                    rubric: self.template(t, rubric, true),
                    threshold: *threshold,
                    judge: judge.as_ref().map(|j| self.s(j)),
                    inputs: inputs.iter().map(|p| self.template(t, p, true)).collect(),
                },
                ir::PredicateIr::Exec {
                    run,
                    args,
                    expect_exit,
                    timeout_ms,
                } => PredDef::Exec {
                    run: self.s(run),
                    args: args.iter().map(|a| self.template(t, a, false)).collect(),
                    expect_exit: *expect_exit,
                    timeout_ms: *timeout_ms,
                },
            })
            .collect()
    }

    fn flow(&mut self, f: &FlowIr, bounds: &[(u32, CostBound)], flow_bound: &CostBound) -> FlowDef {
        let n = f.steps.len();
        let mut index = vec![0u32; n];
        for (new, &old) in f.topo.iter().enumerate() {
            index[old] = new as u32;
        }
        let mut t = FlowTables {
            chunks: Vec::new(),
            templates: Vec::new(),
            with_nodes: Vec::new(),
            index,
        };
        let name = self.s(&f.name);
        let output = OutputDef {
            step: t.index[f.output.step],
            path: self.path(&f.output.path),
            contract: f.output.contract as u32,
            pos: self.pos(f.output.span),
        };
        let carry = f
            .carry
            .iter()
            .map(|c| CarryDef {
                name: self.s(&c.name),
                initial: self.reference(&t, &c.initial),
                on_revise: c
                    .on_revise
                    .iter()
                    .map(|(g, r)| (t.index[*g], self.reference(&t, r)))
                    .collect(),
            })
            .collect();
        let mut steps = Vec::with_capacity(n);
        for &old in &f.topo {
            let s = &f.steps[old];
            let (entries, worst) = bounds
                .get(old)
                .cloned()
                .unwrap_or((1, CostBound::Finite(0)));
            let step = self.step(&mut t, s, (entries, &worst), f.dispatch_timeout_ms);
            steps.push(step);
        }
        let mut edges: Vec<EdgeDef> = f
            .edges
            .iter()
            .map(|e| EdgeDef {
                from: t.index[e.from],
                to: t.index[e.to],
                kind: match e.kind {
                    IrEdge::Order => EdgeKind::Order,
                    IrEdge::Data => EdgeKind::Data,
                    IrEdge::OnFail => EdgeKind::OnFail,
                    IrEdge::Approve => EdgeKind::Approve,
                    IrEdge::Kill => EdgeKind::Kill,
                    IrEdge::State => EdgeKind::State,
                },
            })
            .collect();
        edges.sort_by_key(|e| (e.to, e.from, e.kind as u8));
        let closures = f
            .resets
            .iter()
            .map(|r| {
                let mut words = vec![0u64; n.div_ceil(64)];
                for (old, inside) in r.steps.iter().enumerate() {
                    if *inside {
                        let i = t.index[old] as usize;
                        words[i / 64] |= 1 << (i % 64);
                    }
                }
                ClosureDef {
                    gate: t.index[r.from],
                    target: t.index[r.target],
                    steps: words,
                }
            })
            .collect::<Vec<_>>();
        let mut closures = closures;
        closures.sort_by_key(|c| c.gate);
        let worst_dispatches = self.bound(flow_bound);
        FlowDef {
            name,
            input: f.input as u32,
            output,
            steps,
            edges,
            budget: f.budget.as_ref().map(Self::budget),
            max_rounds: f.max_rounds.map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
            carry,
            chunks: t.chunks,
            templates: t.templates,
            with_nodes: t.with_nodes,
            closures,
            worst_dispatches,
        }
    }

    fn step(
        &mut self,
        t: &mut FlowTables,
        s: &ir::StepIr,
        (entries, worst): (u32, &CostBound),
        default_timeout: Option<u64>,
    ) -> StepDef {
        let u = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
        let when = s.when.as_ref().map(|w| self.chunk(t, w, Context::Steps));
        // the AST's agents are the plan's enum (one list of names)
        let agent = |a: ast::Agent| -> Agent { a };
        let kind = match &s.kind {
            StepKindIr::Do {
                task,
                agent: a,
                attempts,
                iterate,
            } => StepKindDef::Do {
                task: self.template(t, task, true),
                agent: agent(*a),
                attempts: u(*attempts),
                iterate: iterate
                    .as_ref()
                    .map(|it| (u(it.max), self.chunk(t, &it.until, Context::Output))),
            },
            StepKindIr::Set { fields } => StepKindDef::Set {
                fields: fields
                    .iter()
                    .map(|(k, e)| (self.s(k), self.chunk(t, e, Context::Steps)))
                    .collect(),
            },
            StepKindIr::Gate {
                on_approve,
                on_revise,
                on_kill,
                max_rounds,
                prompt,
                show,
                options,
            } => StepKindDef::Gate {
                on_approve: on_approve.map(|x| t.index[x]),
                on_revise: on_revise.map(|x| t.index[x]),
                on_kill: on_kill.map(|x| t.index[x]),
                max_rounds: max_rounds.map(u),
                prompt: prompt.as_ref().map(|p| self.template(t, p, true)),
                show: show.iter().map(|p| self.template(t, p, true)).collect(),
                options: options.as_ref().map(|o| match o {
                    ir::GateOptionsIr::List(list) => {
                        GateOptionsDef::List(list.iter().map(|s| self.s(s)).collect())
                    }
                    // a list keeps its value (full value, not a task string)
                    ir::GateOptionsIr::Template(p) => {
                        GateOptionsDef::Template(self.template(t, p, false))
                    }
                }),
            },
            StepKindIr::Fanout {
                over,
                stages,
                concurrency,
                isolation,
                require,
                pre_merge,
                dispatch,
                ..
            } => {
                let over = self.single_ref_template(t, over);
                let stages = stages
                    .iter()
                    .map(|st| StageDef {
                        task: self.template(t, &st.task, true),
                        agent: agent(st.agent),
                        out: st.out.map(|o| o as u32),
                        ensure: self.predicates(t, &st.ensure, Context::StageOutput),
                        attempts: u(st.attempts),
                        when: st
                            .when
                            .as_ref()
                            .map(|w| self.chunk(t, w, Context::StageWhen)),
                        timeout_ms: st.timeout_ms.or(default_timeout),
                        artifacts: self.artifacts(t, &st.artifacts),
                        scope: st.scope.as_ref().map(|sc| self.scope(t, sc)),
                        on_fail: self.on_fail_routes(t, &st.on_fail),
                    })
                    .collect();
                StepKindDef::Fanout {
                    over,
                    stages,
                    concurrency: u(*concurrency),
                    worktree: *isolation == ast::Isolation::Worktree,
                    require: match require {
                        ast::Require::All => Require::All,
                        ast::Require::Any => Require::Any,
                        ast::Require::AtLeast(n) => Require::AtLeast(u(*n)),
                    },
                    pre_merge: pre_merge.iter().map(|p| self.s(p)).collect(),
                    consumer: *dispatch == ast::Dispatch::Consumer,
                }
            }
            StepKindIr::Run {
                flow,
                with,
                iterate,
            } => StepKindDef::Run {
                flow: *flow as u32,
                with: with
                    .iter()
                    .map(|(k, v)| (self.s(k), self.with_value(t, v)))
                    .collect(),
                iterate: iterate
                    .as_ref()
                    .map(|it| (u(it.max), self.chunk(t, &it.until, Context::Output))),
            },
            // X12: `in` keeps its value's type (a string as is, else its JSON)
            StepKindIr::Evaluate {
                command,
                timeout_ms,
                input,
            } => StepKindDef::Evaluate {
                command: self.s(command),
                timeout_ms: *timeout_ms,
                input: input.as_ref().map(|i| self.template(t, i, false)),
            },
        };
        let ensure = self.predicates(t, &s.ensure, Context::Output);
        let id = self.s(&s.id);
        let worst_dispatches = self.bound(worst);
        StepDef {
            id,
            pos: self.pos(s.span),
            kind,
            when,
            ensure,
            out: s.out.map(|o| o as u32),
            budget: s.budget.as_ref().map(Self::budget),
            on_fail: s.on_fail.map(|x| t.index[x]),
            on_fail_continue: s.continues,
            timeout_ms: match s.kind {
                StepKindIr::Do { .. } => s.timeout_ms.or(default_timeout),
                _ => None,
            },
            artifacts: self.artifacts(t, &s.artifacts),
            scope: s.scope.as_ref().map(|sc| self.scope(t, sc)),
            routes: self.routes(t, &s.routes),
            on_fail_routes: self.on_fail_routes(t, &s.on_fail_routes),
            entries,
            worst_dispatches,
        }
    }

    /// `route` entries (X9): conditions over the step's output, targets by
    /// plan index (their reset closures are in the flow's `closures`).
    fn routes(&mut self, t: &mut FlowTables, routes: &[ir::RouteIr]) -> Vec<RouteDef> {
        routes
            .iter()
            .map(|r| RouteDef {
                rollback: r.rollback.map(|s| t.index[s]),
                when: self.chunk(t, &r.when, Context::Output),
                action: match &r.action {
                    ir::RouteActionIr::Goto { target, max, note } => RouteAction::Goto {
                        target: t.index[*target],
                        max: u32::try_from(*max).unwrap_or(u32::MAX),
                        note: note.as_ref().map(|n| self.template(t, n, true)),
                    },
                    ir::RouteActionIr::Fail(reason) => RouteAction::Fail {
                        reason: self.template(t, reason, true),
                    },
                },
            })
            .collect()
    }

    /// X9 `on_fail` entries: conditions over `failure`, targets by plan index.
    fn on_fail_routes(&mut self, t: &mut FlowTables, entries: &[ir::OnFailIr]) -> Vec<OnFailDef> {
        entries
            .iter()
            .map(|e| OnFailDef {
                rollback: e.rollback.map(|s| t.index[s]),
                when: e.when.as_ref().map(|w| self.chunk(t, w, Context::Failure)),
                action: match &e.action {
                    ir::OnFailActionIr::Step(s) => OnFailAction::Step(t.index[*s]),
                    ir::OnFailActionIr::Continue => OnFailAction::Continue,
                    ir::OnFailActionIr::Goto { target, max, note } => OnFailAction::Goto {
                        target: t.index[*target],
                        max: u32::try_from(*max).unwrap_or(u32::MAX),
                        note: note.as_ref().map(|n| self.template(t, n, true)),
                    },
                    ir::OnFailActionIr::Fail => OnFailAction::Fail,
                },
            })
            .collect()
    }

    /// `artifacts` entries (X4): a full reference keeps its value (a path or
    /// a list of paths, checked when the step runs), others interpolate.
    fn artifacts(&mut self, t: &mut FlowTables, artifacts: &[ir::ArtifactIr]) -> Vec<ArtifactDef> {
        artifacts
            .iter()
            .map(|a| ArtifactDef {
                template: self.template(t, &a.template, false),
                glob: a.glob,
            })
            .collect()
    }

    /// `scope` (X11): its entries lowered like `artifacts` entries.
    fn scope(&mut self, t: &mut FlowTables, sc: &ir::ScopeIr) -> ScopeDef {
        ScopeDef {
            files: self.artifacts(t, &sc.files),
            create: self.artifacts(t, &sc.create),
            max_changed_bytes: sc.max_changed_bytes,
        }
    }
}

/// Compiles one expression tree to stack bytecode. The tree's height is
/// bounded by the checker (≤ 256), so recursion here is bounded too.
struct Compiler<'l, 'a> {
    code: Vec<u8>,
    consts: Vec<ConstDef>,
    depth: u32,
    max: u32,
    spans: Vec<(u32, u32)>,
    strings: &'l mut Lowerer<'a>,
    /// The lambda parameters in scope, innermost last (X3).
    params: Vec<String>,
}

impl Compiler<'_, '_> {
    fn emit(&mut self, op: Op, args: &[u32], offset: u32) {
        let pc = self.code.len() as u32;
        if self.spans.last().is_none_or(|&(_, o)| o != offset) {
            self.spans.push((pc, offset));
        }
        op::encode(&mut self.code, op, args);
        let (pops, pushes) = match op {
            Op::Call => (args.get(1).copied().unwrap_or(0), 1),
            // Invariant: only Call has a variable effect.
            other => other
                .effect()
                .expect("invariant: only Call has a variable stack effect"),
        };
        self.depth = self.depth.saturating_sub(pops) + pushes;
        self.max = self.max.max(self.depth);
    }

    fn constant(&mut self, k: ConstDef, offset: u32) {
        let i = match self.consts.iter().position(|c| *c == k) {
            Some(i) => i,
            None => {
                self.consts.push(k);
                self.consts.len() - 1
            }
        };
        self.emit(Op::Const, &[i as u32], offset);
    }

    fn expr(&mut self, e: &Expr) {
        let at = e.span.start;
        match &e.kind {
            ExprKind::Null => self.constant(ConstDef::Null, at),
            ExprKind::Bool(b) => self.constant(ConstDef::Bool(*b), at),
            ExprKind::Number(n) => self.constant(ConstDef::Number(*n), at),
            ExprKind::String(s) => {
                let id = self.strings.s(s);
                self.constant(ConstDef::Str(id), at);
            }
            ExprKind::Ident(name) if self.params.contains(name) => {
                // Invariant: the guard found the name among the parameters.
                let outward = self
                    .params
                    .iter()
                    .rev()
                    .position(|p| p == name)
                    .unwrap_or(0);
                self.emit(Op::Param, &[outward as u32], at);
            }
            // Invariant: the checker lets a lambda stand only as the last
            // argument of a lambda form, which `call` compiles.
            ExprKind::Lambda { body, .. } => self.expr(body),
            ExprKind::Ident(name) => {
                let op = match name.as_str() {
                    // X9: `failure` (an `on_fail` entry's `when`) is the
                    // subject of a `Failure` chunk, in the `result` register
                    "result" | "failure" => Op::LoadResult,
                    "input" => Op::LoadInput,
                    "item" => Op::LoadItem,
                    "steps" => Op::LoadSteps,
                    _ => Op::LoadPrev,
                };
                self.emit(op, &[], at);
            }
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Member {
                object,
                name,
                name_span,
            } => {
                self.expr(object);
                let id = self.strings.s(name);
                self.emit(Op::Field, &[id], name_span.start);
            }
            ExprKind::Index {
                object,
                index,
                index_span,
            } => {
                self.expr(object);
                self.emit(
                    Op::Index,
                    &[u32::try_from(*index).unwrap_or(u32::MAX)],
                    index_span.start,
                );
            }
            ExprKind::Call {
                callee,
                callee_span,
                args,
            } => self.call(callee, callee_span.start, args),
            ExprKind::Unary { op, operand } => {
                self.expr(operand);
                self.emit(
                    if *op == UnaryOp::Not {
                        Op::Not
                    } else {
                        Op::Neg
                    },
                    &[],
                    at,
                );
            }
            ExprKind::Binary {
                op: op @ (BinaryOp::And | BinaryOp::Or),
                op_span,
                lhs,
                rhs,
            } => self.logic(*op == BinaryOp::And, op_span.start, lhs, rhs),
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                self.expr(lhs);
                self.expr(rhs);
                self.emit(binary_op(*op), &[], op_span.start);
            }
        }
    }

    /// A builtin call: its arguments, then `Call f argc`; a lambda form
    /// (X3): the list, `Each f end`, the body, `EachEnd`.
    fn call(&mut self, callee: &str, at: u32, args: &[Expr]) {
        if let [list, lambda] = args
            && let ExprKind::Lambda { param, body, .. } = &lambda.kind
        {
            // Invariant: the checker accepts lambdas only in builtin lambda forms.
            let f = op::builtin(callee).expect("invariant: lambda forms are builtins");
            self.expr(list);
            let each_at = self.code.len();
            self.emit(Op::Each, &[u32::from(f), 0], at);
            let body_start = self.code.len();
            self.params.push(param.clone());
            self.expr(body);
            self.params.pop();
            self.emit(Op::EachEnd, &[], lambda.span.end);
            let distance = u16::try_from(self.code.len() - body_start).unwrap_or(u16::MAX);
            self.code[each_at + 2..each_at + 4].copy_from_slice(&distance.to_le_bytes());
            return;
        }
        for a in args {
            self.expr(a);
        }
        // Invariant: the checker accepts only builtin names with their arity.
        let f = op::builtin(callee).expect("invariant: the checker accepts only builtin functions");
        self.emit(Op::Call, &[u32::from(f), args.len() as u32], at);
    }

    /// `&&` / `||`: the left side, a jump over the right side that keeps
    /// the deciding value, then the right side checked to be a boolean.
    fn logic(&mut self, is_and: bool, at: u32, lhs: &Expr, rhs: &Expr) {
        self.expr(lhs);
        let jump_at = self.code.len();
        self.emit(if is_and { Op::AndJump } else { Op::OrJump }, &[0], at);
        let after_jump = self.code.len();
        // the kept value is back on the stack at the join point
        self.expr(rhs);
        self.emit(Op::CheckBool, &[], rhs.span.start);
        let distance = u16::try_from(self.code.len() - after_jump).unwrap_or(u16::MAX);
        self.code[jump_at + 1..jump_at + 3].copy_from_slice(&distance.to_le_bytes());
    }
}

/// The opcode of a binary operator other than `&&` and `||`.
fn binary_op(op: BinaryOp) -> Op {
    match op {
        BinaryOp::Eq => Op::Eq,
        BinaryOp::Ne => Op::Ne,
        BinaryOp::Lt => Op::Lt,
        BinaryOp::Le => Op::Le,
        BinaryOp::Gt => Op::Gt,
        BinaryOp::Ge => Op::Ge,
        BinaryOp::In => Op::In,
        BinaryOp::Add => Op::Add,
        BinaryOp::Sub => Op::Sub,
        BinaryOp::Mul => Op::Mul,
        _ => Op::Div,
    }
}
