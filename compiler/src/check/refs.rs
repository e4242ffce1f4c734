//! `${...}` references and per-step checking: templates, reference typing
//! (C5, C8), `with` against callee inputs, `set` against its contract, flow
//! outputs, carry variables, revise gates, consumer worktrees, unreachable
//! steps and sub-flow recursion.
//!
//! Owns: the rules of reference §5 and §6.2 items 13–54 that are not graph
//! algorithms.
//! Must never: parse template syntax itself (the grammar crate does).

use stratum_grammar::{PathSegment, RefKind, Reference, SegmentKind};

use super::expr::{Role, Scope};
use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::ir::{self, Piece, RefIr, RefTarget, Segment, StepId, TemplateIr, WithValue};
use crate::source::Span;
use crate::syntax::ast::{self, PredicateKind, Route, StepKind};
use crate::types::{FieldType, Type};
use crate::yaml::{Node, Str, Value};

/// Where a template is written; decides which references are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaf {
    /// A step `do`.
    Task,
    /// A fanout stage `do`.
    StageTask,
    /// `fanout.over`.
    Over,
    /// A string leaf of `with`.
    With,
    /// `output.from`.
    OutputFrom,
    /// A carry `initial` or `on_revise` value.
    Carry,
}

/// Bindings of a fanout stage.
#[derive(Debug, Clone, Default)]
pub(super) struct StageScope {
    pub item: Option<Type>,
    /// `Some(None)`: first stage, `prev` has no value.
    pub prev: Option<Option<Type>>,
}

fn seg(p: &PathSegment) -> Segment {
    match &p.kind {
        SegmentKind::Field(f) => Segment::Field(f.clone()),
        SegmentKind::Index(i) => Segment::Index(*i),
    }
}

impl<'a> Checker<'a> {
    /// Step references of step `i`'s template leaves, for data edges.
    pub(super) fn data_sources(&mut self, fc: &FlowCtx<'_>, i: StepId) -> Vec<(StepId, Span)> {
        let s = &fc.flow.steps[i];
        let mut leaves: Vec<&Str> = Vec::new();
        match &s.kind {
            StepKind::Do(t) => leaves.push(t),
            StepKind::Fanout(f) => {
                leaves.extend(f.over.iter());
                leaves.extend(f.stages.iter().filter_map(|st| st.task.as_ref()));
            }
            StepKind::Run {
                with: Some(with), ..
            } => {
                for e in with {
                    collect_strings(&e.value, &mut leaves);
                }
            }
            _ => {}
        }
        let mut out = Vec::new();
        for leaf in leaves {
            let parsed = self.parses.template(&leaf.text);
            for r in parsed.template.references() {
                if r.kind == RefKind::StepOutput
                    && let Some(&from) = fc.index.get(r.head.as_str())
                {
                    out.push((from, self.map(leaf, r.span.start, r.span.end)));
                }
            }
        }
        out
    }

    /// Parses and checks a template leaf.
    pub(super) fn template(
        &mut self,
        fc: &mut FlowCtx<'_>,
        step: Option<StepId>,
        s: &Str,
        leaf: Leaf,
        stage: &StageScope,
    ) -> Option<TemplateIr> {
        let parsed = self.parses.template(&s.text);
        let (t, errors) = (&parsed.template, &parsed.errors);
        if !errors.is_empty() {
            for e in errors {
                let span = self.map(s, e.span.start, e.span.end);
                self.sink.push(
                    Diagnostic::new(Code::InvalidReference, span, if e.message.starts_with("invalid reference") { e.message.clone() } else { format!("invalid reference: {}", e.message) })
                        .with_note("references are `${input.field}`, `${step.output.field}`, `${item}`, `${prev}` or a carry variable `${name}`; there is no escape for a literal `${`"),
                );
            }
            return None;
        }
        let full = t.full_value().is_some();
        let mut pieces = Vec::new();
        let mut ok = true;
        for p in &t.pieces {
            match p {
                stratum_grammar::Piece::Text { text, .. } => pieces.push(Piece::Text(text.clone())),
                stratum_grammar::Piece::Ref(r) => match self.reference(fc, step, s, r, leaf, stage)
                {
                    Some(r) => pieces.push(Piece::Ref(r)),
                    None => ok = false,
                },
            }
        }
        if !ok {
            return None;
        }
        let tir = TemplateIr {
            pieces,
            full_value: full,
            span: s.span,
        };
        if full && let Some(Piece::Ref(r)) = tir.pieces.first() {
            let need = match leaf {
                Leaf::Task | Leaf::StageTask if !(r.ty.is_stringy() || r.ty == Type::Any) => {
                    Some((
                        "a `do` task must render to a string",
                        "embed it in text, e.g. `Work on ${...}`, to interpolate it as JSON",
                    ))
                }
                Leaf::Over if !matches!(r.ty, Type::List(_) | Type::Any) => Some((
                    "`fanout.over` must be a list",
                    "reference a list field (`T[]`)",
                )),
                _ => None,
            };
            if let Some((msg, help)) = need {
                let shown = self.types.display(&r.ty);
                self.sink.push(
                    Diagnostic::new(
                        Code::ReferenceTypeMismatch,
                        r.span,
                        format!("{msg}, but this reference is {shown}"),
                    )
                    .with_span_label(format!("this is {shown}"))
                    .with_help(help),
                );
                return None;
            }
        }
        Some(tir)
    }

    fn reference(
        &mut self,
        fc: &mut FlowCtx<'_>,
        step: Option<StepId>,
        s: &Str,
        r: &Reference,
        leaf: Leaf,
        stage: &StageScope,
    ) -> Option<RefIr> {
        let span = self.map(s, r.span.start, r.span.end);
        let path: Vec<Segment> = r.path.iter().map(seg).collect();
        let in_stage = leaf == Leaf::StageTask;
        match r.kind {
            RefKind::Item | RefKind::Prev => {
                let word = if r.kind == RefKind::Item {
                    "item"
                } else {
                    "prev"
                };
                if !in_stage {
                    self.sink.push(
                        Diagnostic::new(Code::ReferenceScope, span, format!("`${{{word}}}` is only available in fanout stages"))
                            .with_note("`${item}` and `${prev}` are bound in a fanout stage's `do`, `when` and `ensure`"),
                    );
                    return None;
                }
                let base = if r.kind == RefKind::Item {
                    stage.item.clone().unwrap_or(Type::Any)
                } else {
                    match &stage.prev {
                        Some(Some(t)) => t.clone(),
                        _ => {
                            self.sink.push(
                                Diagnostic::new(
                                    Code::ReferenceScope,
                                    span,
                                    "`${prev}` has no value in the first fanout stage",
                                )
                                .with_note("`${prev}` is the output of the previous stage"),
                            );
                            return None;
                        }
                    }
                };
                self.fact_at(
                    s,
                    (r.head_span.start, r.head_span.end),
                    super::FactKind::Binding(word.into()),
                    &base,
                );
                let ty = self.typed_path(base, &r.path, s, word)?;
                self.fact(span, super::FactKind::Reference, &ty);
                Some(RefIr {
                    target: if r.kind == RefKind::Item {
                        RefTarget::Item
                    } else {
                        RefTarget::Prev
                    },
                    path,
                    ty,
                    span,
                })
            }
            RefKind::Input => {
                if r.path.is_empty() {
                    self.sink.push(
                        Diagnostic::new(
                            Code::InvalidReference,
                            span,
                            "`${input}` needs a field: write `${input.<field>}`",
                        )
                        .with_note("the whole input cannot be referenced; name one of its fields"),
                    );
                    return None;
                }
                self.fact_at(
                    s,
                    (r.head_span.start, r.head_span.end),
                    super::FactKind::Binding("input".into()),
                    &Type::Record(fc.input),
                );
                let ty = self.typed_path(Type::Record(fc.input), &r.path, s, "input")?;
                self.fact(span, super::FactKind::Reference, &ty);
                Some(RefIr {
                    target: RefTarget::Input,
                    path,
                    ty,
                    span,
                })
            }
            RefKind::StepOutput => {
                let (src, base) = self.step_source(fc, r, span)?;
                self.fact_at(
                    s,
                    (r.head_span.start, r.head_span.end),
                    super::FactKind::Step(src),
                    &base,
                );
                let name = format!("{}.output", r.head);
                if let Type::List(_) = base
                    && leaf == Leaf::OutputFrom
                    && !matches!(r.path.first().map(|p| &p.kind), Some(SegmentKind::Index(_)))
                {
                    self.sink.push(
                        Diagnostic::new(
                            Code::UnknownPath,
                            span,
                            format!("the output of fanout `{}` is a list: index it", r.head),
                        )
                        .with_help(format!(
                            "write `${{{}.output[0]}}` or `${{{}.output[0].field}}`",
                            r.head, r.head
                        )),
                    );
                    return None;
                }
                let ty = self.typed_path(base, &r.path, s, &name)?;
                self.fact(span, super::FactKind::Reference, &ty);
                if Some(src) == step {
                    // reported with the graph (self reference)
                    return None;
                }
                Some(RefIr {
                    target: RefTarget::Step(src),
                    path,
                    ty,
                    span,
                })
            }
            RefKind::Carry => {
                if leaf == Leaf::OutputFrom || leaf == Leaf::Carry {
                    return None; // the caller reports the wrong kind
                }
                match fc.carry.get(r.head.as_str()) {
                    Some(&v) if fc.is_entry => {
                        self.fact_at(
                            s,
                            (r.head_span.start, r.head_span.end),
                            super::FactKind::Carry(v),
                            &Type::Any,
                        );
                        if let Some(step) = step {
                            fc.carry_uses.push((v, step, span));
                        }
                        Some(RefIr {
                            target: RefTarget::Carry(v),
                            path,
                            ty: Type::Any,
                            span,
                        })
                    }
                    _ => {
                        let mut d = Diagnostic::new(
                            Code::UnknownCarry,
                            span,
                            format!("`${{{}}}` names no carry variable", r.head),
                        );
                        if fc.index.contains_key(r.head.as_str()) {
                            let rest: String = r
                                .path
                                .iter()
                                .map(|p| match &p.kind {
                                    SegmentKind::Field(f) => format!(".{f}"),
                                    SegmentKind::Index(i) => format!("[{i}]"),
                                })
                                .collect();
                            let rest = rest
                                .strip_prefix(".outputs")
                                .or_else(|| rest.strip_prefix(".result"))
                                .unwrap_or(&rest);
                            d = d.with_help(format!(
                                "`{}` is a step; its output is `${{{}.output{rest}}}`",
                                r.head, r.head
                            ));
                        } else if let Some(h) = did_you_mean(&r.head, fc.carry.keys().copied()) {
                            d = d.with_help(h);
                        } else if let Some(h) = did_you_mean(&r.head, fc.index.keys().copied()) {
                            d = d.with_help(format!("{h} (a step's output is `${{step.output}}`)"));
                        } else {
                            d = d.with_note("a `${name}` reference reads a carry variable declared under the entry flow's `carry:`");
                        }
                        self.sink.push(d);
                        None
                    }
                }
            }
        }
    }

    /// Resolves the step of a `${step.output}` reference and the type of its output.
    fn step_source(
        &mut self,
        fc: &FlowCtx<'_>,
        r: &Reference,
        span: Span,
    ) -> Option<(StepId, Type)> {
        let Some(&src) = fc.index.get(r.head.as_str()) else {
            if fc.flow.steps_broken {
                return None; // the broken step list is already reported
            }
            if fc.carry.contains_key(r.head.as_str()) {
                self.sink.push(
                    Diagnostic::new(
                        Code::CarryPathReserved,
                        span,
                        format!(
                            "`{}` is a carry variable; carry paths may not begin with `output`",
                            r.head
                        ),
                    )
                    .with_help("rename the field, or the carry variable"),
                );
            } else {
                let help = did_you_mean(&r.head, fc.index.keys().copied());
                self.sink.push(
                    Diagnostic::new(
                        Code::UnknownStepReference,
                        span,
                        format!(
                            "`${{{}.output}}` refers to `{}`, which is not a step of flow `{}`",
                            r.head, r.head, fc.flow.name.text
                        ),
                    )
                    .with_help_opt(help),
                );
            }
            return None;
        };
        match &fc.outputs[src] {
            StepOut::Known(t) => Some((src, t.clone())),
            StepOut::Gate => {
                self.sink.push(
                    Diagnostic::new(
                        Code::NoOutputContract,
                        span,
                        format!("`{}` is a gate and has no output", r.head),
                    )
                    .with_note(
                        "a gate only decides; read the output of the step it reviews instead",
                    ),
                );
                None
            }
            StepOut::NoContract => {
                let at = fc.flow.steps[src].id.as_ref().map_or(span, |n| n.span);
                self.sink.push(
                    Diagnostic::new(
                        Code::NoOutputContract,
                        span,
                        format!(
                            "step `{}` has no `out` contract, so its output cannot be referenced",
                            r.head
                        ),
                    )
                    .with_label(at, "declared without `out`")
                    .with_help(format!("add `out: <Contract>` to step `{}`", r.head)),
                );
                None
            }
            StepOut::FanoutNoFinalOut(stage) => {
                self.sink.push(
                    Diagnostic::new(Code::FanoutNeedsFinalOut, span, format!("the output of fanout `{}` is read, but its last stage has no `out`", r.head))
                        .with_label(*stage, "last stage")
                        .with_help("add `out: <Contract>` to the last stage; the fanout's output is the list of those outputs"),
                );
                None
            }
        }
    }

    /// Types a reference path (reference §2.6) and reports the first bad segment.
    fn typed_path(
        &mut self,
        mut t: Type,
        path: &[PathSegment],
        s: &Str,
        base_name: &str,
    ) -> Option<Type> {
        let mut shown = base_name.to_string();
        for p in path {
            let next = match (&t, &p.kind) {
                (Type::Any | Type::Object, SegmentKind::Field(_)) => return Some(Type::Any),
                (Type::Any, SegmentKind::Index(_)) => return Some(Type::Any),
                (Type::Record(rid), SegmentKind::Field(f)) => {
                    let record = &self.types.records[*rid];
                    match record.field(f) {
                        Some(ft) => Ok(Type::of(&ft.ty)),
                        None => Err((
                            format!("`{shown}` ({}) has no field `{f}`", record.name),
                            did_you_mean(f, record.fields.iter().map(|(n, _)| n.as_str())),
                        )),
                    }
                }
                (Type::List(inner), SegmentKind::Index(_)) => {
                    if **inner == Type::Any {
                        return Some(Type::Any);
                    }
                    Ok((**inner).clone())
                }
                (Type::List(_), SegmentKind::Field(f)) => Err((
                    format!("`{shown}` is a list; `.{f}` needs an index first"),
                    Some(format!("write `{shown}[0].{f}`")),
                )),
                (other, SegmentKind::Index(i)) => Err((
                    format!(
                        "`{shown}` is {} and cannot be indexed with `[{i}]`",
                        self.types.display(other)
                    ),
                    None,
                )),
                (other, SegmentKind::Field(f)) => Err((
                    format!(
                        "`{shown}` is {} and has no field `{f}`",
                        self.types.display(other)
                    ),
                    None,
                )),
            };
            match next {
                Ok(n) => {
                    if let (Type::Record(rid), SegmentKind::Field(f)) = (&t, &p.kind) {
                        let kind = super::FactKind::Field {
                            record: *rid,
                            field: f.clone(),
                        };
                        self.fact_at(s, (p.span.start, p.span.end), kind, &n);
                    }
                    t = n;
                    match &p.kind {
                        SegmentKind::Field(f) => shown = format!("{shown}.{f}"),
                        SegmentKind::Index(i) => shown = format!("{shown}[{i}]"),
                    }
                }
                Err((msg, help)) => {
                    let span = self.map(s, p.span.start, p.span.end);
                    self.sink
                        .push(Diagnostic::new(Code::UnknownPath, span, msg).with_help_opt(help));
                    return None;
                }
            }
        }
        Some(t)
    }

    // ----- steps -----------------------------------------------------------

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
                PredicateKind::FileExists(p) => ir::PredicateIr::FileExists(p.text.clone()),
                PredicateKind::FileContains { path, text } => ir::PredicateIr::FileContains {
                    path: path.text.clone(),
                    text: text.text.clone(),
                },
                PredicateKind::Judged { statement, stakes } => ir::PredicateIr::Judged {
                    statement: statement.text.clone(),
                    stakes: *stakes,
                },
            });
        }
        ok.then_some(out)
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
        };
        let ensure = self.predicates(fc, &s.ensure, &ensure_scope);
        let on_fail = s
            .on_fail
            .as_ref()
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
                let route = |r: &Route| {
                    r.step()
                        .and_then(|n| fc.index.get(n.text.as_str()).copied())
                };
                Some(ir::StepKindIr::Gate {
                    on_approve: route(&g.on_approve),
                    on_revise: route(&g.on_revise),
                    on_kill: route(&g.on_kill),
                    max_rounds: g.max_rounds.map(|m| m.value),
                })
            }
            StepKind::Fanout(f) => self.fanout_step(fc, s, i, f),
            StepKind::Run {
                flow,
                with,
                with_span,
            } => self.run_step(fc, s, i, flow, with.as_deref(), *with_span),
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
            on_fail,
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
        f: &ast::Fanout,
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
            };
            let ensure = self.predicates(fc, &st.ensure, &sc);
            let out = match own {
                Type::Record(r) => Some(r),
                _ => None,
            };
            prev = Some(if st.out.is_some() {
                self.result_type(fc, &st.out)
            } else {
                Type::Any
            });
            match (task, ensure, when) {
                (Some(task), Some(ensure), w) if !matches!(w, Some(None)) => {
                    stages.push(ir::StageIr {
                        task,
                        agent: st.agent.unwrap_or_default(),
                        out,
                        ensure,
                        attempts: st.attempts.or(s.attempts).map_or(2, |a| a.value),
                        when: w.flatten(),
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

    fn run_step(
        &mut self,
        fc: &mut FlowCtx<'a>,
        _s: &ast::Step,
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
        ok.then_some(ir::StepKindIr::Run {
            flow: callee,
            with: values,
        })
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

    // ----- flow-level rules -------------------------------------------------

    /// Checks a reference that must be exactly one full `${step.output...}` (or `${input...}` when allowed).
    fn single_ref(
        &mut self,
        fc: &mut FlowCtx<'a>,
        s: &Str,
        leaf: Leaf,
        allow_input: bool,
        code: Code,
        what: &str,
    ) -> Option<RefIr> {
        let parsed = self.parses.template(&s.text);
        let (t, errors) = (&parsed.template, &parsed.errors);
        let kind_ok = t.full_value().is_some_and(|r| {
            r.kind == RefKind::StepOutput || (allow_input && r.kind == RefKind::Input)
        });
        if !errors.is_empty() || !kind_ok {
            let expected = if allow_input {
                "one full `${step.output...}` or `${input...}` reference"
            } else {
                "one full `${step.output...}` reference"
            };
            self.sink.push(
                Diagnostic::new(code, s.span, format!("{what} must be {expected}"))
                    .with_note("the whole string must be the reference, with no text around it"),
            );
            return None;
        }
        let tir = self.template(fc, None, s, leaf, &StageScope::default())?;
        match tir.pieces.into_iter().next() {
            Some(Piece::Ref(r)) => Some(r),
            _ => None,
        }
    }

    pub(super) fn flow_output(&mut self, fc: &mut FlowCtx<'a>) -> Option<ir::OutputIr> {
        let out = fc.flow.output.as_ref()?;
        let from = out.from.as_ref()?;
        let r = self.single_ref(
            fc,
            from,
            Leaf::OutputFrom,
            false,
            Code::InvalidFlowOutput,
            "`output.from`",
        )?;
        let RefTarget::Step(step) = r.target else {
            return None;
        };
        let contract = self.flow_output_records[fc.flow_index];
        if let (Some(c), ty) = (contract, &r.ty) {
            let ft = FieldType {
                ty: crate::types::Ty::Record(c),
                optional: false,
            };
            if !self.types.fits(ty, &ft) {
                let (want, got) = (self.types.display_ty(&ft), self.types.display(ty));
                let cspan = out.contract.as_ref().map_or(from.span, |c| c.span);
                self.sink.push(
                    Diagnostic::new(Code::FlowOutputMismatch, from.span, format!("the flow output is {got}, but `output.contract` is `{want}`"))
                        .with_label(cspan, "declared here")
                        .with_note("the producer's value must satisfy the flow's output contract (structurally identical contracts are accepted)"),
                );
                return None;
            }
        }
        Some(ir::OutputIr {
            step,
            path: r.path,
            contract: contract?,
            span: from.span,
        })
    }

    pub(super) fn carry(&mut self, fc: &mut FlowCtx<'a>) -> Option<Vec<ir::CarryIr>> {
        let Some(carry) = &fc.flow.carry else {
            return Some(Vec::new());
        };
        if !fc.is_entry {
            self.sink.push(
                Diagnostic::new(
                    Code::CarryRootOnly,
                    carry.key_span,
                    format!(
                        "flow `{}` is not the entry flow, so it cannot declare `carry`",
                        fc.flow.name.text
                    ),
                )
                .with_help("move the carry block to the entry flow"),
            );
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (vi, v) in carry.vars.iter().enumerate() {
            let name = v.name.text.as_str();
            if ["item", "prev", "input"].contains(&name) || fc.index.contains_key(name) {
                let why = if fc.index.contains_key(name) {
                    format!("a step of this flow is called `{name}`")
                } else {
                    format!("`{name}` is a reserved reference name")
                };
                self.sink.push(
                    Diagnostic::new(
                        Code::CarryNameConflict,
                        v.name.span,
                        format!("carry variable `{name}` cannot have this name: {why}"),
                    )
                    .with_help("rename the carry variable"),
                );
                ok = false;
                continue;
            }
            let Some(init) = &v.initial else {
                ok = false;
                continue;
            };
            // conditional source (rule 33) before typing (rule 34)
            let parsed = self.parses.template(&init.text);
            if let Some(r) = parsed.template.full_value()
                && r.kind == RefKind::StepOutput
                && let Some(&src) = fc.index.get(r.head.as_str())
            {
                let st = &fc.flow.steps[src];
                let why = if st.when.is_some() {
                    Some("it has a `when`")
                } else if matches!(st.kind, StepKind::Gate(_)) {
                    Some("it is a gate")
                } else if fc.graph.is_route_target(src) {
                    Some("it runs only when a route chooses it")
                } else {
                    None
                };
                if let Some(why) = why {
                    self.sink.push(
                        Diagnostic::new(Code::CarryInitialConditional, init.span, format!("the initial value of `{name}` comes from step `{}`, which may not run: {why}", r.head))
                            .with_help("take the initial value from a step that always runs"),
                    );
                    ok = false;
                    continue;
                }
            }
            let Some(initial) = self.single_ref(
                fc,
                init,
                Leaf::Carry,
                true,
                Code::CarryInvalidReference,
                &format!("the initial value of carry `{name}`"),
            ) else {
                ok = false;
                continue;
            };
            // uses before the initial value exists (rule 36)
            if let RefTarget::Step(src) = initial.target {
                let uses: Vec<(StepId, Span)> = fc
                    .carry_uses
                    .iter()
                    .filter(|(c, _, _)| *c == vi)
                    .map(|(_, s, sp)| (*s, *sp))
                    .collect();
                for (user, span) in uses {
                    if user == src || !fc.graph.reaches(src, user, true) {
                        let src_id = fc.flow.steps[src]
                            .id
                            .as_ref()
                            .map_or("?", |n| n.text.as_str())
                            .to_string();
                        self.sink.push(
                            Diagnostic::new(Code::CarryBeforeInitial, span, format!("`${{{name}}}` may be read before step `{src_id}` has produced its initial value"))
                                .with_help(format!("add `{src_id}` to this step's `after` list")),
                        );
                        ok = false;
                    }
                }
            }
            let mut revs = Vec::new();
            for (gate, value) in &v.on_revise {
                if !crate::syntax::decode::is_step_id(&gate.text) {
                    ok = false;
                    continue; // already reported by the decoder
                }
                let Some(&g) = fc
                    .index
                    .get(gate.text.as_str())
                    .filter(|&&g| matches!(fc.flow.steps[g].kind, StepKind::Gate(_)))
                else {
                    let gates: Vec<&str> = fc
                        .flow
                        .steps
                        .iter()
                        .filter(|s| matches!(s.kind, StepKind::Gate(_)))
                        .filter_map(|s| s.id.as_ref().map(|n| n.text.as_str()))
                        .collect();
                    self.sink.push(
                        Diagnostic::new(
                            Code::CarryUnknownGate,
                            gate.span,
                            format!(
                                "`{}` is not a gate of flow `{}`",
                                gate.text, fc.flow.name.text
                            ),
                        )
                        .with_help_opt(did_you_mean(&gate.text, gates.iter().copied())),
                    );
                    ok = false;
                    continue;
                };
                let Some(r) = self.single_ref(
                    fc,
                    value,
                    Leaf::Carry,
                    true,
                    Code::CarryInvalidReference,
                    &format!("the `on_revise` value of carry `{name}`"),
                ) else {
                    ok = false;
                    continue;
                };
                let StepKind::Gate(gdef) = &fc.flow.steps[g].kind else {
                    continue;
                };
                let Some(target) = gdef.on_revise.step() else {
                    self.sink.push(
                        Diagnostic::new(
                            Code::CarryReviseTargetNull,
                            value.span,
                            format!(
                                "gate `{}` has `on_revise: null`, so this value is never written",
                                gate.text
                            ),
                        )
                        .with_help("give the gate an `on_revise` target, or remove this entry"),
                    );
                    ok = false;
                    continue;
                };
                // an unknown target, or a gate revising to itself, is reported
                // with the revise gates
                let Some(reset) = fc.reset_of(g) else {
                    continue;
                };
                let closure = &reset.steps;
                let uses: Vec<(StepId, Span)> = fc
                    .carry_uses
                    .iter()
                    .filter(|(c, _, _)| *c == vi)
                    .map(|(_, s, sp)| (*s, *sp))
                    .collect();
                for (user, span) in uses {
                    let user_id = fc.flow.steps[user]
                        .id
                        .as_ref()
                        .map_or("?", |n| n.text.as_str())
                        .to_string();
                    if !closure[user] {
                        self.sink.push(
                            Diagnostic::new(Code::CarryReviseMissesConsumer, value.span, format!("step `{user_id}` reads `${{{name}}}`, but a revise of gate `{}` does not re-run it", gate.text))
                                .with_label(span, "read here")
                                .with_note(format!("a revise resets `{}` and the steps after it", target.text)),
                        );
                        ok = false;
                    } else if user != g && !fc.graph.reaches(user, g, true) {
                        self.sink.push(
                            Diagnostic::new(Code::CarryGateNotAfterConsumer, value.span, format!("step `{user_id}` reads `${{{name}}}` but does not come before gate `{}`", gate.text))
                                .with_label(span, "read here")
                                .with_help(format!("add `{user_id}` to the `after` list of `{}`", gate.text)),
                        );
                        ok = false;
                    }
                }
                revs.push((g, r));
            }
            out.push(ir::CarryIr {
                name: name.to_string(),
                initial,
                on_revise: revs,
            });
        }
        ok.then_some(out)
    }

    pub(super) fn revise_gates(&mut self, fc: &mut FlowCtx<'a>) {
        let mut reported_rounds = false;
        for (g, s) in fc.flow.steps.iter().enumerate() {
            let StepKind::Gate(gate) = &s.kind else {
                continue;
            };
            let Some(target) = gate.on_revise.step() else {
                continue;
            };
            if fc.flow.max_rounds.is_none() && !reported_rounds {
                reported_rounds = true;
                self.sink.push(
                    Diagnostic::new(Code::ReviseNeedsMaxRounds, target.span, format!("gate revises to `{}`, but flow `{}` has no `max_rounds`", target.text, fc.flow.name.text))
                        .with_note("`max_rounds` bounds the revisions of the whole flow, even when the gate has its own")
                        .with_help("add `max_rounds: 3` to the flow"),
                );
            }
            let Some(t) = self.target(fc, target, "`on_revise`") else {
                continue;
            };
            if t == g {
                self.sink.push(
                    Diagnostic::new(
                        Code::SelfReference,
                        target.span,
                        "a gate cannot revise to itself",
                    )
                    .with_help("revise to the step whose work the gate reviews"),
                );
                continue;
            }
            if !fc.graph.reaches(t, g, false) {
                let gid =
                    s.id.as_ref()
                        .map_or("this gate", |n| n.text.as_str())
                        .to_string();
                self.sink.push(
                    Diagnostic::new(Code::ReviseNotAncestor, target.span, format!("`{}` does not come before gate `{gid}`, so the gate cannot revise to it", target.text))
                        .with_note("a revise goes back to an earlier step and runs it and everything after it again")
                        .with_help(format!("add `{}` to the `after` list of `{gid}`, or revise to a step that does come before it", target.text)),
                );
            }
        }
    }

    pub(super) fn consumer_worktrees(&mut self, fc: &mut FlowCtx<'a>) {
        for (i, s) in fc.flow.steps.iter().enumerate() {
            let StepKind::Fanout(f) = &s.kind else {
                continue;
            };
            let Some((ast::Isolation::Worktree, iso_span)) = f.isolation else {
                continue;
            };
            if f.dispatch != ast::Dispatch::Consumer || !fc.is_entry {
                continue;
            }
            for st in &f.stages {
                for p in &st.ensure {
                    let uses_fs = match &p.kind {
                        Some(PredicateKind::FileExists(_) | PredicateKind::FileContains { .. }) => {
                            true
                        }
                        Some(PredicateKind::Expr(e)) => calls_file_fn(&e.text),
                        _ => false,
                    };
                    if uses_fs {
                        self.sink.push(consumer_fs(p.span));
                    }
                }
                if let Some(w) = &st.when
                    && calls_file_fn(&w.text)
                {
                    self.sink.push(consumer_fs(w.span));
                }
            }
            let has_gate = fc.flow.steps.iter().enumerate().any(|(g, gs)| {
                matches!(gs.kind, StepKind::Gate(_))
                    && gs.when.is_none()
                    && !fc.graph.is_route_target(g)
                    && fc.graph.dependencies(g).any(|d| d == i)
            });
            if !has_gate {
                let id =
                    s.id.as_ref()
                        .map_or("this fanout", |n| n.text.as_str())
                        .to_string();
                self.sink.push(
                    Diagnostic::new(Code::ConsumerWorktreeGate, iso_span, format!("consumer-dispatched worktree fanout `{id}` needs a gate right after it"))
                        .with_note("the client's worktree changes are merged only after a person reviews them")
                        .with_help(format!("add a step `- {{id: review, after: [{id}], gate: {{on_approve: null, on_revise: null, on_kill: null}}}}`")),
                );
            }
        }
    }

    pub(super) fn unreachable(&mut self, fc: &mut FlowCtx<'a>) {
        let mut dead = vec![false; fc.flow.steps.len()];
        let mut stack = fc.never_runs.clone();
        for &s in &stack {
            dead[s] = true;
        }
        let origins = stack.clone();
        while let Some(v) = stack.pop() {
            let next: Vec<StepId> = fc.graph.data_successors(v).collect();
            for t in next {
                if !dead[t] {
                    dead[t] = true;
                    stack.push(t);
                    if let Some(id) = &fc.flow.steps[t].id {
                        self.sink.push(
                            Diagnostic::new(Code::UnreachableStep, id.span, format!("step `{}` can never run", id.text))
                                .with_note("it reads the output of a step whose `when` is always false, so it is always skipped"),
                        );
                    }
                }
            }
        }
        let _ = origins;
    }

    pub(super) fn subflow_recursion(&mut self) {
        let spec = self.spec;
        let n = spec.flows.len();
        let mut state = vec![0u8; n];
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            // iterative DFS: (flow, next step index)
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (f, ref mut next)) = stack.last_mut() {
                let steps = &spec.flows[f].steps;
                if *next >= steps.len() {
                    state[f] = 2;
                    stack.pop();
                    continue;
                }
                let s = &steps[*next];
                *next += 1;
                let StepKind::Run { flow, .. } = &s.kind else {
                    continue;
                };
                let Some(&callee) = self.flows.get(flow.text.as_str()) else {
                    continue;
                };
                match state[callee] {
                    1 => {
                        self.sink.push(
                            Diagnostic::new(Code::RecursiveSubflow, flow.span, format!("flow `{}` calls `{}`, which is already running in this chain of calls", spec.flows[f].name.text, flow.text))
                                .with_note("sub-flows cannot call themselves, directly or through other flows"),
                        );
                    }
                    0 => {
                        state[callee] = 1;
                        stack.push((callee, 0));
                    }
                    _ => {}
                }
            }
        }
    }
}

fn consumer_fs(span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::ConsumerWorktreeFilesystem,
        span,
        "file predicates cannot be checked in a consumer-dispatched worktree fanout",
    )
    .with_note("the items run in the client's worktrees, which the engine cannot read")
    .with_help("check the result fields instead, or use `dispatch: engine`")
}

fn calls_file_fn(text: &str) -> bool {
    let (ast, errors) = stratum_grammar::parse_expr(text);
    if !errors.is_empty() {
        return false;
    }
    let mut found = false;
    if let Some(ast) = ast {
        stratum_grammar::walk(&ast, &mut |e| {
            if let stratum_grammar::ExprKind::Call { callee, .. } = &e.kind
                && (callee == "file_exists" || callee == "file_contains")
            {
                found = true;
            }
        });
    }
    found
}

fn collect_strings<'n>(node: &'n Node, out: &mut Vec<&'n Str>) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        match &n.value {
            Value::String(s) => out.push(s),
            Value::Sequence(items) => stack.extend(items.iter().rev()),
            Value::Mapping(entries) => stack.extend(entries.iter().rev().map(|e| &e.value)),
            _ => {}
        }
    }
}

/// The safe-shape filter of reference §7.8 plus compilation with size limits
/// (the rule lives in `stratum_vm::eval::regex`, shared with the evaluator).
pub(super) fn regex_check(pattern: &str) -> Result<(), String> {
    stratum_vm::eval::regex::check_pattern(pattern)
}
