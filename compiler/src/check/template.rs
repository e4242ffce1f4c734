//! `${...}` templates and reference typing (C5, C8): which references a
//! leaf may hold, what each resolves to, the static type of its path, and
//! the single-reference leaves (`fanout.over`, `output.from`, carry values);
//! also the step references that become data edges.
//!
//! Owns: reference v1-language §5 and §6.2 items 16–25 (references and
//! templates) with the path typing of §2.6; the IDE facts recorded while
//! resolving a reference.
//! Must never: parse template syntax itself (the grammar crate does) or
//! check what a step does with a value (that is the step's own check).

use stratum_grammar::{PathSegment, RefKind, Reference, SegmentKind};

use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::ir::{EdgeKind, Piece, RefIr, RefTarget, Segment, StateField, StepId, TemplateIr};
use crate::source::Span;
use crate::syntax::ast::StepKind;
use crate::types::Type;
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
    /// A `do` step's `artifacts` entry, or a gate's `show` or `prompt` (X4).
    Artifact,
    /// A fanout stage's `artifacts` entry (X4: `${item}`, `${prev}` bound).
    StageArtifact,
    /// A `file_exists` or `file_contains.path` path of a step (X3).
    FilePath,
    /// A file predicate path of a fanout stage (X3: `${item}`, `${prev}` bound).
    StageFilePath,
    /// An `evaluate` step's `in` (X12): any type (a full reference keeps
    /// its value; the engine writes a string as is, anything else as JSON).
    EvaluateIn,
}

/// Whether a template reference reads a gate's answer (`${<gate>.note}`,
/// `${<gate>.choice}`, X10): inside the gate's reset closure such a read is
/// the latest round's value (`null` before any) and orders nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AnswerRead {
    /// A gate's note or choice.
    Yes,
    /// Any other reference.
    No,
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

/// Every template of a `scope` (X11): `files`, then `create`.
fn ast_scope_entries(s: &crate::syntax::ast::Scope) -> impl Iterator<Item = &Str> {
    s.files.iter().chain(&s.create)
}

impl<'a> Checker<'a> {
    /// Step references of step `i`'s template leaves, for data edges (and
    /// state edges: `${<id>.status}` and the like order without skipping).
    /// A gate's `note`/`choice` reads are answer reads (X10): state edges
    /// unless the reader is in the gate's reset closure ([`AnswerRead`]).
    pub(super) fn data_sources(
        &mut self,
        fc: &FlowCtx<'_>,
        i: StepId,
    ) -> Vec<(StepId, Span, EdgeKind, AnswerRead)> {
        let s = &fc.flow.steps[i];
        let mut leaves: Vec<&Str> = Vec::new();
        match &s.kind {
            StepKind::Do(t) => {
                leaves.push(t);
                leaves.extend(s.artifacts.iter());
                leaves.extend(s.scope.iter().flat_map(ast_scope_entries));
            }
            StepKind::Fanout(f) => {
                leaves.extend(f.over.iter());
                leaves.extend(f.stages.iter().filter_map(|st| st.task.as_ref()));
                leaves.extend(f.stages.iter().flat_map(|st| st.artifacts.iter()));
                leaves.extend(
                    f.stages
                        .iter()
                        .flat_map(|st| st.scope.iter().flat_map(ast_scope_entries)),
                );
            }
            StepKind::Gate(g) => {
                leaves.extend(g.prompt.iter().chain(&g.show));
                if let Some(crate::syntax::ast::GateOptions::Template(o)) = &g.options {
                    leaves.push(o);
                }
            }
            StepKind::Evaluate(ev) => leaves.extend(ev.input.iter()),
            StepKind::Run {
                with: Some(with), ..
            } => {
                for e in with {
                    collect_strings(&e.value, &mut leaves);
                }
            }
            _ => {}
        }
        // The scored form of `judged` (X5): its rubric and input paths, and
        // file predicate paths (X3), of the step and of its fanout stages.
        let stage_ensures = match &s.kind {
            StepKind::Fanout(f) => f.stages.iter().flat_map(|st| st.ensure.iter()).collect(),
            _ => Vec::new(),
        };
        for p in s.ensure.iter().chain(stage_ensures) {
            match &p.kind {
                Some(crate::syntax::ast::PredicateKind::Scored(sc)) => {
                    leaves.push(&sc.rubric);
                    leaves.extend(sc.inputs.iter());
                }
                // X12: `exec` arguments
                Some(crate::syntax::ast::PredicateKind::Exec(ex)) => leaves.extend(ex.args.iter()),
                // X3: file predicate paths are templates too
                Some(
                    crate::syntax::ast::PredicateKind::FileExists(path)
                    | crate::syntax::ast::PredicateKind::FileContains { path, .. },
                ) => leaves.push(path),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for leaf in leaves {
            let parsed = self.parses.template(&leaf.text);
            for r in parsed.template.references() {
                let member = state_read(fc, r);
                let kind = if r.kind == RefKind::StepOutput {
                    EdgeKind::Data
                } else if member.is_some() {
                    EdgeKind::State
                } else {
                    continue;
                };
                if let Some(&from) = fc.index.get(r.head.as_str()) {
                    let answer = match member {
                        Some("note" | "choice")
                            if matches!(fc.flow.steps[from].kind, StepKind::Gate(_)) =>
                        {
                            AnswerRead::Yes
                        }
                        _ => AnswerRead::No,
                    };
                    out.push((from, self.map(leaf, r.span.start, r.span.end), kind, answer));
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
            let stringy = r.ty.is_stringy() || r.ty == Type::Any;
            let need = match leaf {
                Leaf::Task | Leaf::StageTask if !stringy => Some((
                    Code::ReferenceTypeMismatch,
                    "a `do` task must render to a string",
                    "embed it in text, e.g. `Work on ${...}`, to interpolate it as JSON",
                )),
                Leaf::FilePath | Leaf::StageFilePath if !stringy => Some((
                    Code::FilePathNotString,
                    "a file predicate path must render to a string",
                    "reference a string field holding the path, e.g. `${input.workdir}/plan.md` or `${write.output.path}`",
                )),
                Leaf::Over if !matches!(r.ty, Type::List(_) | Type::Any) => Some((
                    Code::ReferenceTypeMismatch,
                    "`fanout.over` must be a list",
                    "reference a list field (`T[]`)",
                )),
                _ => None,
            };
            if let Some((code, msg, help)) = need {
                let shown = self.types.display(&r.ty);
                self.sink.push(
                    Diagnostic::new(
                        code,
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
        match r.kind {
            RefKind::Item | RefKind::Prev => self.binding_reference(s, r, span, leaf, stage),
            RefKind::Input => self.input_reference(fc, s, r, span),
            RefKind::StepOutput => self.step_reference(fc, step, s, r, span, leaf),
            RefKind::Carry if state_read(fc, r).is_some() => {
                self.state_reference(fc, step, s, r, span, leaf)
            }
            RefKind::Carry => self.carry_reference(fc, step, s, r, span, leaf),
        }
    }

    /// `${item...}` and `${prev...}`: bound in fanout stages only.
    fn binding_reference(
        &mut self,
        s: &Str,
        r: &Reference,
        span: Span,
        leaf: Leaf,
        stage: &StageScope,
    ) -> Option<RefIr> {
        let path: Vec<Segment> = r.path.iter().map(seg).collect();
        let in_stage = matches!(
            leaf,
            Leaf::StageTask | Leaf::StageArtifact | Leaf::StageFilePath
        );
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

    /// `${input.field...}`.
    fn input_reference(
        &mut self,
        fc: &FlowCtx<'_>,
        s: &Str,
        r: &Reference,
        span: Span,
    ) -> Option<RefIr> {
        let path: Vec<Segment> = r.path.iter().map(seg).collect();
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

    /// `${step.output...}`.
    fn step_reference(
        &mut self,
        fc: &mut FlowCtx<'_>,
        step: Option<StepId>,
        s: &Str,
        r: &Reference,
        span: Span,
        leaf: Leaf,
    ) -> Option<RefIr> {
        let path: Vec<Segment> = r.path.iter().map(seg).collect();
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
        if let Some(reader) = step {
            fc.output_reads.push(super::continues::OutputRead {
                reader,
                step: src,
                span,
                guarded: false,
            });
        }
        Some(RefIr {
            target: RefTarget::Step(src),
            path,
            ty,
            span,
        })
    }

    /// `${name...}`: a carry variable of the entry flow.
    fn carry_reference(
        &mut self,
        fc: &mut FlowCtx<'_>,
        step: Option<StepId>,
        s: &Str,
        r: &Reference,
        span: Span,
        leaf: Leaf,
    ) -> Option<RefIr> {
        let path: Vec<Segment> = r.path.iter().map(seg).collect();
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
                (Type::Failure, SegmentKind::Field(f)) => match f.as_str() {
                    "reason" => Ok(Type::String),
                    "violations" => Ok(Type::List(Box::new(Type::Any))),
                    _ => Err((
                        format!("`{shown}` (a failure) has no field `{f}`"),
                        did_you_mean(f, ["reason", "violations"]),
                    )),
                },
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

    /// Checks a reference that must be exactly one full `${step.output...}` (or `${input...}` when allowed).
    pub(super) fn single_ref(
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
}

/// Whether `${<head>.<member>...}` reads a step's state (X1): `<head>` is a
/// step of the flow, not a carry variable of the entry flow (those keep
/// their v1 meaning), and the first segment is a state member (`choice` of
/// X10 included; other names keep their v1 diagnostics).
fn state_read<'r>(fc: &FlowCtx<'_>, r: &'r Reference) -> Option<&'r str> {
    if fc.is_entry && fc.carry.contains_key(r.head.as_str()) {
        return None;
    }
    fc.index.get(r.head.as_str())?;
    match &r.path.first()?.kind {
        SegmentKind::Field(f) if TEMPLATE_STATE_MEMBERS.contains(&f.as_str()) => Some(f.as_str()),
        _ => None,
    }
}

/// The members a template reads of a step's state; `choice` is X10 (refused).
pub(crate) const TEMPLATE_STATE_MEMBERS: &[&str] = &["status", "failure", "note", "choice"];

impl Checker<'_> {
    /// `${<id>.status}`, `${<id>.failure...}`, `${<id>.note}` (X1),
    /// `${<id>.choice}` (X10, typed by the gate's options).
    fn state_reference(
        &mut self,
        fc: &mut FlowCtx<'_>,
        step: Option<StepId>,
        s: &Str,
        r: &Reference,
        span: Span,
        leaf: Leaf,
    ) -> Option<RefIr> {
        let src = *fc.index.get(r.head.as_str())?;
        let member = state_read(fc, r)?;
        let is_gate = matches!(fc.flow.steps[src].kind, StepKind::Gate(_));
        let (field, base) = match member {
            "status" => (StateField::Status, super::expr::status_type()),
            "failure" => (StateField::Failure, Type::Failure),
            "note" if is_gate => (StateField::Note, Type::String),
            "choice" => {
                let shown = format!("${{{}.choice}}", r.head);
                match super::gates::choice_type(fc.flow, src, span, &shown) {
                    Ok(t) => (StateField::Choice, t),
                    Err(d) => {
                        self.sink.push(*d);
                        return None;
                    }
                }
            }
            _ => {
                let note = match member {
                    "note" => format!(
                        "`note` is the note of a gate's latest decision, and `{}` is not a gate",
                        r.head
                    ),
                    _ => format!(
                        "a template reads a step's `status`, `failure`, `note` and `choice` (gates) or `output`: `${{{}.output}}`",
                        r.head
                    ),
                };
                self.sink.push(
                    Diagnostic::new(
                        Code::StepStateMember,
                        span,
                        format!(
                            "`${{{}.{member}}}`: step `{}` has no `{member}`",
                            r.head, r.head
                        ),
                    )
                    .with_note(note)
                    .with_help(format!(
                        "read `${{{}.status}}` or `${{{}.failure}}`",
                        r.head, r.head
                    )),
                );
                return None;
            }
        };
        if leaf == Leaf::OutputFrom || leaf == Leaf::Carry {
            return None; // the caller reports the wrong kind
        }
        self.fact_at(
            s,
            (r.head_span.start, r.head_span.end),
            super::FactKind::Step(src),
            &base,
        );
        let shown = format!("{}.{member}", r.head);
        let ty = self.typed_path(base, &r.path[1..], s, &shown)?;
        self.fact(span, super::FactKind::Reference, &ty);
        if Some(src) == step {
            return None; // reported with the graph (self reference)
        }
        Some(RefIr {
            target: RefTarget::State(src, field),
            path: r.path[1..].iter().map(seg).collect(),
            ty,
            span,
        })
    }
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
