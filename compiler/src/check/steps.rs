//! Per-step content: `when`, `ensure` predicates, `do` and `iterate`, `set`
//! against its `out` contract, fanout stages (their bindings, `when`,
//! `ensure`, attempts), and `run` with `with` against the callee's inputs;
//! builds each step's IR.
//!
//! Owns: the rules of reference v1-language §6.2 that read one step at a time.
//! Must never: add graph edges (the driver does, in `mod.rs`) or check
//! rules that span steps (carry, gates, worktrees have their own files).

use super::expr::{Role, Scope};
use super::template::{Leaf, StageScope};
use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::ir::{self, Piece, StepId, WithValue};
use crate::source::Span;
use crate::syntax::ast::{self, PredicateKind, Route, StepKind};
use crate::types::{FieldType, Type};
use crate::yaml::{Node, Str, Value};

impl<'a> Checker<'a> {
    fn result_type(&self, fc: &FlowCtx<'_>, out: &Option<ast::Name>) -> Type {
        match out {
            Some(n) => match self.contracts.get(n.text.as_str()) {
                Some(Some(r)) => Type::Record(*r),
                _ => Type::Any,
            },
            None => {
                let _ = fc;
                Type::Any
            }
        }
    }

    fn predicates(
        &mut self,
        fc: &mut FlowCtx<'_>,
        preds: &[ast::Predicate],
        scope: &Scope,
    ) -> Option<Vec<ir::PredicateIr>> {
        let mut out = Vec::new();
        let mut ok = true;
        for p in preds {
            let Some(kind) = &p.kind else {
                ok = false;
                continue;
            };
            out.push(match kind {
                PredicateKind::Expr(e) => match self.expr(fc, e, scope) {
                    Some(x) => ir::PredicateIr::Expr(x),
                    None => {
                        ok = false;
                        continue;
                    }
                },
                PredicateKind::FileExists(p) => match self.file_path(fc, p, scope) {
                    Some(t) => ir::PredicateIr::FileExists(t),
                    None => {
                        ok = false;
                        continue;
                    }
                },
                PredicateKind::FileContains { path, text } => {
                    match self.file_path(fc, path, scope) {
                        Some(t) => ir::PredicateIr::FileContains {
                            path: t,
                            text: text.text.clone(),
                        },
                        None => {
                            ok = false;
                            continue;
                        }
                    }
                }
                PredicateKind::Judged { statement, stakes } => ir::PredicateIr::Judged {
                    statement: statement.text.clone(),
                    stakes: *stakes,
                },
                PredicateKind::Scored(sc) => match self.scored(fc, sc, scope) {
                    Some(p) => p,
                    None => {
                        ok = false;
                        continue;
                    }
                },
                PredicateKind::Exec(ex) => match self.exec(fc, ex, scope) {
                    Some(p) => p,
                    None => {
                        ok = false;
                        continue;
                    }
                },
            });
        }
        ok.then_some(out)
    }

    /// The scored form of `judged` (X5): its rubric and input paths are
    /// templates of the step (a fanout stage's also bind `${item}`/`${prev}`).
    /// Whether `judge:` names a configured judge needs the environment
    /// (`crate::env`), not the spec.
    fn scored(
        &mut self,
        fc: &mut FlowCtx<'_>,
        sc: &ast::Scored,
        scope: &Scope,
    ) -> Option<ir::PredicateIr> {
        let (leaf, stage) = match &scope.item {
            Some(_) => (
                Leaf::StageTask,
                StageScope {
                    item: scope.item.clone(),
                    prev: scope.prev.clone(),
                },
            ),
            None => (Leaf::Task, StageScope::default()),
        };
        let reader = Some(scope.reader);
        let rubric = self.template(fc, reader, &sc.rubric, leaf, &stage);
        let inputs: Vec<Option<ir::TemplateIr>> = sc
            .inputs
            .iter()
            .map(|p| self.template(fc, reader, p, leaf, &stage))
            .collect();
        Some(ir::PredicateIr::Scored {
            rubric: rubric?,
            threshold: sc.threshold,
            judge: sc.judge.as_ref().map(|j| j.text.clone()),
            inputs: inputs.into_iter().collect::<Option<_>>()?,
        })
    }

    /// An `exec` check (X12): each argument is a template of the step (a
    /// fanout stage's also binds `${item}`/`${prev}`) whose full reference
    /// must render to text (a string, number or boolean) or a list of them
    /// (S0335). Whether `run:` names a declared command needs the
    /// environment (`crate::env`), not the spec.
    fn exec(
        &mut self,
        fc: &mut FlowCtx<'_>,
        ex: &ast::Exec,
        scope: &Scope,
    ) -> Option<ir::PredicateIr> {
        let (leaf, stage) = match &scope.item {
            Some(_) => (
                Leaf::StageArtifact,
                StageScope {
                    item: scope.item.clone(),
                    prev: scope.prev.clone(),
                },
            ),
            None => (Leaf::Artifact, StageScope::default()),
        };
        let mut args = Vec::new();
        let mut ok = true;
        for a in &ex.args {
            match self.template(fc, Some(scope.reader), a, leaf, &stage) {
                Some(t) if self.exec_arg_renders(&t) => args.push(t),
                _ => ok = false,
            }
        }
        ok.then(|| ir::PredicateIr::Exec {
            run: ex.run.text.clone(),
            args,
            expect_exit: ex.expect_exit,
            timeout_ms: ex.timeout_ms.map(|t| t.value),
        })
    }

    /// Whether an `exec` argument renders to text or a list of texts; S0335
    /// when its full reference never can.
    fn exec_arg_renders(&mut self, t: &ir::TemplateIr) -> bool {
        let Some(Piece::Ref(r)) = t.pieces.first().filter(|_| t.full_value) else {
            return true;
        };
        let scalar =
            |ty: &Type| ty.is_stringy() || matches!(ty, Type::Any | Type::Number | Type::Bool);
        let fine = match &r.ty {
            Type::List(el) => scalar(el),
            ty => scalar(ty),
        };
        if fine {
            return true;
        }
        let shown = self.types.display(&r.ty);
        self.sink.push(
            Diagnostic::new(
                Code::ExecArgNotText,
                r.span,
                format!("an `exec` argument must render to text or a list of texts, but this reference is {shown}"),
            )
            .with_span_label(format!("this is {shown}"))
            .with_note("each argument is passed as one argument, never split by a shell; a list gives one argument per element")
            .with_help("reference a string, number or boolean field (or a list of them), or embed it in text to pass it as JSON"),
        );
        false
    }

    /// A file predicate path (`file_exists`, `file_contains.path`): a
    /// template of the step (language 1.1 X3; a fanout stage's also binds
    /// `${item}`/`${prev}`); a full reference must be a string (S0415).
    /// Whether the rendered path stays in the workspace is the host's jail
    /// to decide at run time, as for a literal path.
    fn file_path(
        &mut self,
        fc: &mut FlowCtx<'_>,
        path: &Str,
        scope: &Scope,
    ) -> Option<ir::TemplateIr> {
        let (leaf, stage) = match &scope.item {
            Some(_) => (
                Leaf::StageFilePath,
                StageScope {
                    item: scope.item.clone(),
                    prev: scope.prev.clone(),
                },
            ),
            None => (Leaf::FilePath, StageScope::default()),
        };
        self.template(fc, Some(scope.reader), path, leaf, &stage)
    }

    /// Checks step `i` and builds its IR.
    pub(super) fn step(&mut self, fc: &mut FlowCtx<'a>, i: StepId) -> Option<ir::StepIr> {
        let s: &'a ast::Step = &fc.flow.steps[i];
        let steps_scope = |field: &'static str, role: Role| Scope {
            field,
            role,
            result: Type::Steps(fc.flow_index),
            item: None,
            prev: None,
            reader: i,
            failure: false,
        };
        let when = match &s.when {
            Some(w) => {
                let sc = steps_scope("when", Role::Condition);
                Some(self.expr(fc, w, &sc))
            }
            None => None,
        };
        let own = self.result_type(fc, &s.out);
        let ensure_scope = Scope {
            field: "ensure",
            role: Role::Condition,
            result: own.clone(),
            item: None,
            prev: None,
            reader: i,
            failure: false,
        };
        self.changes_allowed = s.scope.is_some();
        let ensure = self.predicates(fc, &s.ensure, &ensure_scope);
        self.changes_allowed = false;
        let on_fail = s
            .plain_on_fail()
            .and_then(|n| fc.index.get(n.text.as_str()).copied());
        let kind = match &s.kind {
            StepKind::Do(task) => {
                let task = self.template(fc, Some(i), task, Leaf::Task, &StageScope::default());
                let iterate = match &s.iterate {
                    Some(it) => {
                        let until = it.until.as_ref().and_then(|u| {
                            let sc = Scope {
                                field: "iterate.until",
                                ..ensure_scope.clone()
                            };
                            self.expr(fc, u, &sc)
                        });
                        Some(until.zip(it.max).map(|(until, max)| ir::IterateIr {
                            max: max.value,
                            until,
                        }))
                    }
                    None => Some(None),
                };
                Some(ir::StepKindIr::Do {
                    task: task?,
                    agent: s.agent.unwrap_or_default(),
                    attempts: s.attempts.map_or(2, |a| a.value),
                    iterate: iterate?,
                })
            }
            StepKind::Set(fields) => self.set_step(fc, s, i, fields),
            StepKind::Gate(g) => {
                let display = self.gate_display(fc, i, g);
                let route = |r: &Route| {
                    r.step()
                        .and_then(|n| fc.index.get(n.text.as_str()).copied())
                };
                display.map(|(prompt, show, options)| ir::StepKindIr::Gate {
                    on_approve: route(&g.on_approve),
                    on_revise: route(&g.on_revise),
                    on_kill: route(&g.on_kill),
                    max_rounds: g.max_rounds.map(|m| m.value),
                    prompt,
                    show,
                    options,
                })
            }
            StepKind::Fanout(f) => self.fanout_step(fc, s, i, f),
            StepKind::Run {
                flow,
                with,
                with_span,
            } => self.run_step(fc, s, i, flow, with.as_deref(), *with_span),
            StepKind::Evaluate(ev) => {
                // X12: `in` is a template of the step (data edges like a `do` task)
                let input = match &ev.input {
                    Some(t) => self
                        .template(fc, Some(i), t, Leaf::EvaluateIn, &StageScope::default())
                        .map(Some),
                    None => Some(None),
                };
                input.map(|input| ir::StepKindIr::Evaluate {
                    command: ev.command.text.clone(),
                    timeout_ms: ev.timeout_ms.value,
                    input,
                })
            }
            StepKind::Broken => None,
        };
        let out = match &fc.outputs[i] {
            StepOut::Known(Type::Record(r)) => Some(*r),
            StepOut::Known(Type::List(inner)) => match **inner {
                Type::Record(r) => Some(r),
                _ => None,
            },
            _ => None,
        };
        let artifacts = self.artifacts(fc, i, &s.artifacts, &StageScope::default());
        let scope = self.scope(fc, i, s.scope.as_ref(), &StageScope::default());
        let routes = self.routes(fc, i);
        let on_fail_routes = self.on_fail_routes(fc, i);
        let output_type = match &fc.outputs[i] {
            StepOut::Known(t) => Some(t.clone()),
            _ => None,
        };
        Some(ir::StepIr {
            id: s.id.as_ref()?.text.clone(),
            span: s.span,
            kind: kind?,
            out,
            output_type,
            when: match when {
                Some(w) => Some(w?),
                None => None,
            },
            ensure: ensure?,
            budget: s.budget.clone(),
            cost: s.cost,
            timeout_ms: s.timeout_ms.map(|t| t.value),
            artifacts: artifacts?,
            scope: scope?,
            on_fail,
            on_fail_routes: on_fail_routes?,
            routes: routes?,
            continues: s
                .plain_on_fail()
                .is_some_and(|n| super::continues::is_continue(fc, n)),
        })
    }

    fn set_step(
        &mut self,
        fc: &mut FlowCtx<'a>,
        s: &ast::Step,
        i: StepId,
        fields: &[(ast::Name, Option<Str>)],
    ) -> Option<ir::StepKindIr> {
        let scope = Scope {
            field: "set",
            role: Role::Value,
            result: Type::Steps(fc.flow_index),
            item: None,
            prev: None,
            reader: i,
            failure: false,
        };
        let mut out = Vec::new();
        let mut ok = true;
        let record = match self.result_type(fc, &s.out) {
            Type::Record(r) => Some(r),
            _ => None,
        };
        for (key, e) in fields {
            let Some(x) = e.as_ref().and_then(|e| self.expr(fc, e, &scope)) else {
                ok = false;
                continue;
            };
            if let Some(r) = record {
                let rec = &self.types.records[r];
                match rec.field(&key.text) {
                    None => {
                        let help =
                            did_you_mean(&key.text, rec.fields.iter().map(|(n, _)| n.as_str()));
                        let name = rec.name.clone();
                        self.sink.push(
                            Diagnostic::new(Code::SetContractMismatch, key.span, format!("contract `{name}` has no field `{}`, so this `set` output would be rejected", key.text))
                                .with_note("contracts are strict: an object with an undeclared field fails validation")
                                .with_help_opt(help),
                        );
                        ok = false;
                    }
                    Some(ft) if !self.types.fits(&x.ty, ft) => {
                        let (want, got) = (self.types.display_ty(ft), self.types.display(&x.ty));
                        self.sink.push(
                            Diagnostic::new(
                                Code::SetContractMismatch,
                                x.span,
                                format!(
                                    "`set.{}` is {got}, but contract field `{}` is {want}",
                                    key.text, key.text
                                ),
                            )
                            .with_span_label(format!("this is {got}")),
                        );
                        ok = false;
                    }
                    Some(ft) => {
                        if ft.ty == crate::types::Ty::Integer
                            && let Some(n) = super::expr::constant_number(&x.ast)
                            && n.fract() != 0.0
                        {
                            self.sink.push(
                                Diagnostic::new(Code::SetContractMismatch, x.span, format!("`set.{}` is always `{n}`, which is not an integer, but contract field `{}` is integer", key.text, key.text))
                                    .with_note("an integer is a number with no fraction"),
                            );
                            ok = false;
                        }
                    }
                }
            }
            out.push((key.text.clone(), x));
        }
        if let Some(r) = record {
            let rec = &self.types.records[r];
            let missing: Vec<String> = rec
                .fields
                .iter()
                .filter(|(n, ft)| !ft.optional && !fields.iter().any(|(k, _)| &k.text == n))
                .map(|(n, _)| format!("`{n}`"))
                .collect();
            if !missing.is_empty() {
                let name = rec.name.clone();
                self.sink.push(
                    Diagnostic::new(
                        Code::SetContractMismatch,
                        s.construct_span,
                        format!(
                            "`set` gives no value for the required field{} {} of contract `{name}`",
                            if missing.len() == 1 { "" } else { "s" },
                            missing.join(", ")
                        ),
                    )
                    .with_help("add a key for every required field of the `out` contract"),
                );
                ok = false;
            }
        }
        ok.then_some(ir::StepKindIr::Set { fields: out })
    }

    fn fanout_step(
        &mut self,
        fc: &mut FlowCtx<'a>,
        s: &ast::Step,
        i: StepId,
        f: &'a ast::Fanout,
    ) -> Option<ir::StepKindIr> {
        let over = f.over.as_ref().and_then(|o| {
            let parsed = self.parses.template(&o.text);
            if !parsed.errors.is_empty() || parsed.template.full_value().is_none() {
                self.sink.push(
                    Diagnostic::new(Code::FanoutOverNotSingleRef, o.span, "`fanout.over` must be exactly one reference such as `${plan.output.tasks}`")
                        .with_note("the fanout runs its stages once for each element of that list"),
                );
                return None;
            }
            let tir = self.template(fc, Some(i), o, Leaf::Over, &StageScope::default())?;
            match tir.pieces.into_iter().next() {
                Some(Piece::Ref(r)) => Some(r),
                _ => None,
            }
        });
        let item = over.as_ref().map(|r| match &r.ty {
            Type::List(inner) => (**inner).clone(),
            _ => Type::Any,
        });
        let mut stages = Vec::new();
        let mut ok = true;
        let mut prev: Option<Type> = None;
        for (j, st) in f.stages.iter().enumerate() {
            let stage_scope = StageScope {
                item: Some(item.clone().unwrap_or(Type::Any)),
                prev: Some(if j == 0 {
                    None
                } else {
                    Some(prev.clone().unwrap_or(Type::Any))
                }),
            };
            let task = st
                .task
                .as_ref()
                .and_then(|t| self.template(fc, Some(i), t, Leaf::StageTask, &stage_scope));
            let when = st.when.as_ref().map(|w| {
                let sc = Scope {
                    field: "when",
                    role: Role::Condition,
                    result: Type::Steps(fc.flow_index),
                    item: stage_scope.item.clone(),
                    prev: stage_scope.prev.clone(),
                    reader: i,
                    failure: false,
                };
                self.expr(fc, w, &sc)
            });
            let own = self.result_type(fc, &st.out);
            let sc = Scope {
                field: "ensure",
                role: Role::Condition,
                result: own.clone(),
                item: stage_scope.item.clone(),
                prev: stage_scope.prev.clone(),
                reader: i,
                failure: false,
            };
            self.changes_allowed = st.scope.is_some();
            let ensure = self.predicates(fc, &st.ensure, &sc);
            self.changes_allowed = false;
            let artifacts = self.artifacts(fc, i, &st.artifacts, &stage_scope);
            let scope = self.scope(fc, i, st.scope.as_ref(), &stage_scope);
            let on_fail = self.stage_on_fail(fc, i, &st.on_fail);
            let out = match own {
                Type::Record(r) => Some(r),
                _ => None,
            };
            prev = Some(if st.out.is_some() {
                self.result_type(fc, &st.out)
            } else {
                Type::Any
            });
            match (task, ensure, when, artifacts, scope, on_fail) {
                (Some(task), Some(ensure), w, Some(artifacts), Some(scope), Some(on_fail))
                    if !matches!(w, Some(None)) =>
                {
                    stages.push(ir::StageIr {
                        task,
                        agent: st.agent.unwrap_or_default(),
                        out,
                        ensure,
                        attempts: st.attempts.or(s.attempts).map_or(2, |a| a.value),
                        when: w.flatten(),
                        cost: st.cost,
                        timeout_ms: st.timeout_ms.map(|t| t.value),
                        artifacts,
                        scope,
                        on_fail,
                    })
                }
                _ => ok = false,
            }
        }
        if !ok {
            return None;
        }
        Some(ir::StepKindIr::Fanout {
            over: over?,
            stages,
            concurrency: f.concurrency?.value,
            isolation: f.isolation?.0,
            require: f.require?,
            pre_merge: f.pre_merge.iter().map(|p| p.text.clone()).collect(),
            dispatch: f.dispatch,
            attempts: s.attempts.map_or(2, |a| a.value),
        })
    }

    /// `artifacts` entries (X4): paths or globs, see [`Self::path_entries`].
    fn artifacts(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        entries: &[Str],
        stage: &StageScope,
    ) -> Option<Vec<ir::ArtifactIr>> {
        self.path_entries(fc, i, entries, stage, PathList::Artifacts)
    }

    /// The one rule of path entries (`artifacts`, X4; `scope.files` and
    /// `scope.create`, X11): each a template of the step that renders to a
    /// path (a full reference may be a string list), or a glob when its
    /// literal text has `*`, `?` or `[`; literal text never leaves the
    /// workspace and a glob must parse. Each list reports with its own
    /// codes and words ([`PathList`]).
    pub(super) fn path_entries(
        &mut self,
        fc: &mut FlowCtx<'a>,
        i: StepId,
        entries: &[Str],
        stage: &StageScope,
        list: PathList<'_>,
    ) -> Option<Vec<ir::ArtifactIr>> {
        let leaf = if stage.item.is_some() {
            Leaf::StageArtifact
        } else {
            Leaf::Artifact
        };
        let mut out = Vec::new();
        let mut ok = true;
        for e in entries {
            let Some(template) = self.template(fc, Some(i), e, leaf, stage) else {
                ok = false;
                continue;
            };
            let literal: String = template
                .pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Text(t) => Some(t.as_str()),
                    Piece::Ref(_) => None,
                })
                .collect();
            let glob = stratum_vm::host::glob::is_glob(&literal);
            if !self.path_entry_fits(e, &template, glob, list) {
                ok = false;
                continue;
            }
            out.push(ir::ArtifactIr { template, glob });
        }
        ok.then_some(out)
    }

    /// A full reference that is not a path or a list of paths (S0320,
    /// S0340), or literal text that leaves the workspace or a glob that
    /// does not parse (S0321, S0341); true when the entry is fine.
    fn path_entry_fits(
        &mut self,
        e: &Str,
        t: &ir::TemplateIr,
        glob: bool,
        list: PathList<'_>,
    ) -> bool {
        if t.full_value
            && let Some(Piece::Ref(r)) = t.pieces.first()
        {
            let fits = match &r.ty {
                Type::List(inner) => inner.is_stringy() || **inner == Type::Any,
                ty => ty.is_stringy() || *ty == Type::Any,
            };
            if !fits {
                let shown = self.types.display(&r.ty);
                let d = match list {
                    PathList::Artifacts => Diagnostic::new(Code::ArtifactNotPath, r.span, format!("an `artifacts` entry must render to a path or a list of paths, but this reference is {shown}"))
                        .with_span_label(format!("this is {shown}"))
                        .with_note("a full reference may be a string or a string list (`string[]`); anything else has no path to check")
                        .with_help("reference a string field holding the path, e.g. `${write.output.path}`"),
                    PathList::Scope(key) => Diagnostic::new(Code::ScopeNotPath, r.span, format!("a `scope.{key}` entry must render to a path or a list of paths, but this reference is {shown}"))
                        .with_span_label(format!("this is {shown}"))
                        .with_note("a full reference may be a string or a string list (`string[]`), e.g. the files a planning step named")
                        .with_help("reference a string or string-list field, e.g. `${patch_plan.output.files}`"),
                };
                self.sink.push(d);
                return false;
            }
            return true;
        }
        let text: String = t
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Ref(_) => "x",
            })
            .collect();
        let leaves = text.starts_with('/') || text.split(['/', '\\']).any(|c| c == "..");
        let problem = if leaves {
            Some("it leaves the workspace (absolute, or with `..`)".to_string())
        } else if glob {
            stratum_vm::host::glob::compile(&text)
                .err()
                .map(|e| e.to_string())
        } else {
            None
        };
        let Some(problem) = problem else {
            return true;
        };
        let d = match list {
            PathList::Artifacts => Diagnostic::new(Code::InvalidArtifactPath, e.span, format!("the `artifacts` entry `{}` is not usable: {problem}", e.text))
                .with_note("artifacts are paths or globs relative to the workspace (or the item's worktree); `*` and `?` stay in one directory, `**` crosses directories")
                .with_help("write a relative path such as `out/report.md` or a glob such as `out/**/*.md`"),
            PathList::Scope(key) => Diagnostic::new(Code::InvalidScopePath, e.span, format!("the `scope.{key}` entry `{}` is not usable: {problem}", e.text))
                .with_note("scope entries are paths or globs relative to the git working tree (or the item's worktree); `*` and `?` stay in one directory, `**` crosses directories")
                .with_help("write a relative path such as `src/lib.rs` or a glob such as `src/**/*.rs`"),
        };
        self.sink.push(d);
        false
    }

    fn run_step(
        &mut self,
        fc: &mut FlowCtx<'a>,
        s: &ast::Step,
        i: StepId,
        flow: &ast::Name,
        with: Option<&[ast::WithEntry]>,
        with_span: Option<Span>,
    ) -> Option<ir::StepKindIr> {
        let Some(&callee) = self.flows.get(flow.text.as_str()) else {
            let names: Vec<&str> = self
                .spec
                .flows
                .iter()
                .map(|f| f.name.text.as_str())
                .collect();
            self.sink.push(
                Diagnostic::new(
                    Code::UnknownFlow,
                    flow.span,
                    format!("`run` names `{}`, which is not a flow", flow.text),
                )
                .with_help_opt(did_you_mean(&flow.text, names.iter().copied())),
            );
            return None;
        };
        let with = with?;
        let input = self.flow_inputs[callee];
        let fields: Vec<(String, FieldType)> = self.types.records[input].fields.clone();
        let callee_decl = self.spec.flows[callee].input.is_some();
        let mut ok = true;
        if callee_decl {
            for e in with {
                if !fields.iter().any(|(n, _)| n == &e.key.text) {
                    let help = did_you_mean(&e.key.text, fields.iter().map(|(n, _)| n.as_str()));
                    self.sink.push(
                        Diagnostic::new(
                            Code::WithMismatch,
                            e.key.span,
                            format!("flow `{}` has no input `{}`", flow.text, e.key.text),
                        )
                        .with_note(format!(
                            "`{}` takes: {}",
                            flow.text,
                            if fields.is_empty() {
                                "nothing".into()
                            } else {
                                fields
                                    .iter()
                                    .map(|(n, _)| format!("`{n}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ))
                        .with_help_opt(help),
                    );
                    ok = false;
                }
            }
            let missing: Vec<String> = fields
                .iter()
                .filter(|(n, _)| !with.iter().any(|e| &e.key.text == n))
                .map(|(n, _)| format!("`{n}`"))
                .collect();
            if !missing.is_empty() {
                self.sink.push(
                    Diagnostic::new(Code::WithMismatch, with_span.unwrap_or(flow.span), format!("`with` gives no value for input{} {} of flow `{}`", if missing.len() == 1 { "" } else { "s" }, missing.join(", "), flow.text))
                        .with_note("`with` must list every input of the called flow, optional ones included (pass `null` for an optional input you leave empty)"),
                );
                ok = false;
            }
        }
        let mut values = Vec::new();
        for e in with {
            let Some(v) = self.with_value(fc, i, &e.value) else {
                ok = false;
                continue;
            };
            if let (WithValue::Template(t), Some((_, ft))) =
                (&v, fields.iter().find(|(n, _)| n == &e.key.text))
                && t.full_value
                && let Some(Piece::Ref(r)) = t.pieces.first()
                && !self.types.fits(&r.ty, ft)
            {
                let (want, got) = (self.types.display_ty(ft), self.types.display(&r.ty));
                self.sink.push(
                    Diagnostic::new(
                        Code::ReferenceTypeMismatch,
                        r.span,
                        format!(
                            "input `{}` of flow `{}` is {want}, but this reference is {got}",
                            e.key.text, flow.text
                        ),
                    )
                    .with_span_label(format!("this is {got}")),
                );
                ok = false;
            }
            values.push((e.key.text.clone(), v));
        }
        let iterate = self.run_iterate(fc, s, i);
        ok.then_some(ir::StepKindIr::Run {
            flow: callee,
            with: values,
            iterate: iterate?,
        })
    }

    /// `iterate` on a `run` step (X9): `until` is a condition over the
    /// called flow's output (`result`). `Some(None)`: no `iterate`.
    fn run_iterate(
        &mut self,
        fc: &mut FlowCtx<'a>,
        s: &ast::Step,
        i: StepId,
    ) -> Option<Option<ir::IterateIr>> {
        let Some(it) = &s.iterate else {
            return Some(None);
        };
        let result = match &fc.outputs[i] {
            StepOut::Known(t) => t.clone(),
            _ => Type::Any,
        };
        let scope = Scope {
            field: "iterate.until",
            role: Role::Condition,
            result,
            item: None,
            prev: None,
            reader: i,
            failure: false,
        };
        let until = it.until.as_ref().and_then(|u| self.expr(fc, u, &scope));
        Some(Some(ir::IterateIr {
            max: it.max?.value,
            until: until?,
        }))
    }

    fn with_value(&mut self, fc: &mut FlowCtx<'a>, i: StepId, node: &Node) -> Option<WithValue> {
        Some(match &node.value {
            Value::String(s) => WithValue::Template(self.template(
                fc,
                Some(i),
                s,
                Leaf::With,
                &StageScope::default(),
            )?),
            Value::Sequence(items) => {
                let mut out = Vec::new();
                for it in items {
                    out.push(self.with_value(fc, i, it));
                }
                WithValue::List(out.into_iter().collect::<Option<Vec<_>>>()?)
            }
            Value::Mapping(entries) => {
                let mut out = Vec::new();
                for e in entries {
                    out.push(
                        self.with_value(fc, i, &e.value)
                            .map(|v| (e.key.text.clone(), v)),
                    );
                }
                WithValue::Map(out.into_iter().collect::<Option<Vec<_>>>()?)
            }
            Value::Null => WithValue::Literal(serde_json::Value::Null),
            Value::Bool(b) => WithValue::Literal(serde_json::Value::Bool(*b)),
            Value::Number(n) => WithValue::Literal(
                serde_json::Number::from_f64(*n)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number),
            ),
        })
    }
}

/// Which list of path entries [`Checker::path_entries`] checks: the same
/// rule, each list with its own codes and words.
#[derive(Clone, Copy)]
pub(super) enum PathList<'k> {
    /// A step's or stage's `artifacts` (X4).
    Artifacts,
    /// `scope.files` or `scope.create` (X11), by key.
    Scope(&'k str),
}
