//! Expression checking (decisions C2–C4, C6, C7): bindings per context,
//! builtin signatures, closed-contract member access, operand types,
//! ordered reads of `result.<step>`, constant conditions.
//!
//! Owns: the typing rules of the expression language.
//! Must never: evaluate expressions against run-time values (the VM does),
//! or parse them (the grammar crate does).

use stratum_grammar::{BinaryOp, Expr, ExprKind, ParseErrorKind, UnaryOp};

use super::{Checker, FlowCtx, StepOut};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::ir::ExprIr;
use crate::source::Span;
use crate::types::Type;
use crate::yaml::{OffsetMap, Str};

/// The builtin functions and their arities: the VM's table, the one source of truth.
pub use stratum_vm::plan::op::BUILTINS;

/// Tallest expression tree the (recursive) checker walks; the grammar's own
/// limits bound nesting to 128, but left-associative chains (`a + b + …`) can
/// be as tall as the 4,096-node limit.
pub const MAX_CHECK_HEIGHT: usize = 256;

/// Height of an expression tree, computed without recursion.
fn tree_height(root: &Expr) -> usize {
    let mut max = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((e, h)) = stack.pop() {
        max = max.max(h);
        for c in e.children() {
            stack.push((c, h + 1));
        }
    }
    max
}

/// What an expression field is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Must be a boolean (`ensure`, `when`, `until`).
    Condition,
    /// Any value (`set`).
    Value,
}

/// The bindings an expression field provides.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The field, for messages (`when`, `ensure`, …).
    pub field: &'static str,
    /// Condition or value.
    pub role: Role,
    /// Type of `result`.
    pub result: Type,
    /// Type of `item` (`None`: not bound here).
    pub item: Option<Type>,
    /// Type of `prev`: `None` not bound; `Some(None)` bound without a value (first stage).
    pub prev: Option<Option<Type>>,
    /// The step that reads (for ordered reads of `result.<step>`).
    pub reader: usize,
}

/// A folded constant, for C6.
#[derive(Debug, Clone, PartialEq)]
enum Const {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

struct Walk<'a, 'c, 'f> {
    ck: &'c mut Checker<'a>,
    fc: &'c mut FlowCtx<'f>,
    scalar: &'c Str,
    scope: &'c Scope,
    /// Whether this expression reads any binding or the file system.
    dynamic: bool,
}

impl Checker<'_> {
    /// Parses and checks one expression field.
    pub(super) fn expr(&mut self, fc: &mut FlowCtx<'_>, s: &Str, scope: &Scope) -> Option<ExprIr> {
        let parsed = self.parses.expr(&s.text);
        let errors = &parsed.errors;
        if !errors.is_empty() {
            // one root cause per expression: the first error
            for e in errors.iter().take(1) {
                let span = self.map(s, e.span.start, e.span.end);
                let d = match e.kind {
                    ParseErrorKind::TemplateInExpression => template_in_expression(span, &s.text[e.span.range()], scope),
                    ParseErrorKind::ForbiddenMember => Diagnostic::new(Code::ForbiddenMember, span, e.message.clone())
                        .with_note("`__proto__`, `constructor` and `prototype` are never fields of a spec value"),
                    ParseErrorKind::InvalidIndex => Diagnostic::new(Code::InvalidIndex, span, e.message.clone())
                        .with_help("indexes are non-negative integer literals such as `[0]`"),
                    ParseErrorKind::TooDeep | ParseErrorKind::TooManyNodes => {
                        Diagnostic::new(Code::ExprTooComplex, span, e.message.clone())
                    }
                    _ => Diagnostic::new(Code::ExprSyntax, span, format!("invalid {} expression: {}", scope.field, e.message)),
                };
                self.sink.push(d);
            }
            return None;
        }
        let ast = parsed.ast.clone()?;
        // every tree level needs at least one character, so short texts are never too tall
        let height = if s.text.len() <= MAX_CHECK_HEIGHT {
            0
        } else {
            tree_height(&ast)
        };
        if height > MAX_CHECK_HEIGHT {
            let span = self.map(s, ast.span.start, ast.span.end);
            self.sink.push(
                Diagnostic::new(Code::ExprTooComplex, span, format!("this expression is {height} operations deep; the checker accepts at most {MAX_CHECK_HEIGHT}"))
                    .with_help("split the condition into several `ensure` entries, or compute parts in a `set` step"),
            );
            return None;
        }
        // `${...}` inside a string literal is never substituted (C3)
        let mut literal_templates = Vec::new();
        stratum_grammar::walk(&ast, &mut |e| {
            if let ExprKind::String(text) = &e.kind
                && text.contains("${")
            {
                literal_templates.push(e.span);
            }
        });
        if !literal_templates.is_empty() {
            for span in literal_templates {
                let span = self.map(s, span.start, span.end);
                self.sink.push(
                    Diagnostic::new(Code::TemplateInExpression, span, format!("`${{...}}` inside a string literal of a `{}` expression is never substituted", scope.field))
                        .with_note("expressions are not templates: the text `${...}` would be compared literally")
                        .with_help("use the binding itself, e.g. `result.text != item` instead of `result.text != '${item}'`"),
                );
            }
            return None;
        }
        let errors_before = self.sink.len();
        let mut w = Walk {
            ck: self,
            fc,
            scalar: s,
            scope,
            dynamic: false,
        };
        let ty = w.ty(&ast);
        let dynamic = w.dynamic;
        let whole = self.map(s, ast.span.start, ast.span.end);
        if scope.role == Role::Condition && self.sink.len() == errors_before {
            if !matches!(ty, Type::Bool | Type::Any) {
                self.sink.push(
                    Diagnostic::new(
                        Code::NonBooleanCondition,
                        whole,
                        format!(
                            "`{}` must be a boolean condition, but this is {}",
                            scope.field,
                            self.types.display(&ty)
                        ),
                    )
                    .with_help(match ty {
                        Type::Number => "compare it, for example `... > 0`",
                        Type::String | Type::Enum(_) => "compare it, for example `... == 'done'`",
                        Type::List(_) => "test its length, for example `len(...) > 0`",
                        _ => "write a comparison that yields true or false",
                    }),
                );
            } else if !dynamic {
                let value = fold(&ast);
                let what = match value {
                    Some(Const::Bool(true)) => "always true",
                    Some(Const::Bool(false)) => "always false",
                    _ => "constant",
                };
                self.sink.push(
                    Diagnostic::new(Code::ConstantCondition, whole, format!("this `{}` condition is {what}", scope.field))
                        .with_note("it reads no binding (`result`, `input`, `item`, `prev`) and no file, so it can never change")
                        .with_help(if scope.field == "when" { "remove the `when`, or make it depend on a step output or input" } else { "check something about the result instead" }),
                );
                if scope.field == "when" && value == Some(Const::Bool(false)) {
                    fc.never_runs.push(scope.reader);
                }
            }
        }
        Some(ExprIr {
            source: s.text.clone(),
            ast,
            ty,
            span: s.span,
        })
    }

    /// Maps a byte range inside a scalar's value to the file.
    pub(super) fn map(&self, s: &Str, start: u32, end: u32) -> Span {
        let map = {
            let mut cache = self.offsets.borrow_mut();
            if cache.0 != s.span.start || cache.1.is_none() {
                *cache = (
                    s.span.start,
                    Some(std::rc::Rc::new(OffsetMap::new(self.source, s))),
                );
            }
            cache
                .1
                .clone()
                .expect("invariant: the cache was just filled")
        };
        let a = map.at(start);
        let b = if end > start { map.at(end - 1) + 1 } else { a };
        let b = next_boundary(self.source, b.max(a));
        Span::new(a, b)
    }
}

fn next_boundary(text: &str, mut at: u32) -> u32 {
    while (at as usize) < text.len() && !text.is_char_boundary(at as usize) {
        at += 1;
    }
    at
}

fn template_in_expression(span: Span, text: &str, scope: &Scope) -> Diagnostic {
    let body = text.trim_start_matches("${").trim_end_matches('}');
    let form = if let Some(rest) = body.strip_prefix("input.") {
        Some(format!("input.{rest}"))
    } else if let Some((id, rest)) = body.split_once(".output") {
        if scope.field == "when" || scope.field == "set" {
            Some(format!("result.{id}{rest}"))
        } else {
            None
        }
    } else if body.starts_with("item") || body.starts_with("prev") {
        Some(body.to_string())
    } else {
        None
    };
    let d = Diagnostic::new(
        Code::TemplateInExpression,
        span,
        format!(
            "`${{...}}` references cannot be used inside a `{}` expression",
            scope.field
        ),
    )
    .with_note("expressions read values through the bindings `result`, `input`, `item` and `prev`");
    match form {
        Some(f) => d.with_help(format!("write the expression form: `{f}`")),
        None => d.with_help("read the value through `result`, `input`, `item` or `prev` instead"),
    }
}

impl Walk<'_, '_, '_> {
    fn span(&self, s: stratum_grammar::Span) -> Span {
        self.ck.map(self.scalar, s.start, s.end)
    }

    fn push(&mut self, d: Diagnostic) {
        self.ck.sink.push(d);
    }

    fn show(&self, t: &Type) -> String {
        self.ck.types.display(t)
    }

    fn ty(&mut self, e: &Expr) -> Type {
        match &e.kind {
            ExprKind::Null => Type::Null,
            ExprKind::Bool(_) => Type::Bool,
            ExprKind::Number(_) => Type::Number,
            ExprKind::String(_) => Type::String,
            ExprKind::Paren(inner) => self.ty(inner),
            ExprKind::Ident(name) => {
                let t = self.binding(name, e);
                let kind = super::FactKind::Binding(name.clone());
                self.ck
                    .fact_at(self.scalar, (e.span.start, e.span.end), kind, &t);
                t
            }
            ExprKind::Member {
                object,
                name,
                name_span,
            } => {
                let base = self.ty(object);
                let t = self.member(&base, object, name, *name_span, e);
                let kind = match &base {
                    _ if self.ck.facts.is_none() => None,
                    Type::Record(r) => Some(super::FactKind::Field {
                        record: *r,
                        field: name.clone(),
                    }),
                    Type::Steps(_) => self
                        .fc
                        .index
                        .get(name.as_str())
                        .map(|&i| super::FactKind::Step(i)),
                    _ => None,
                };
                if let Some(kind) = kind {
                    let at = (name_span.start, name_span.end);
                    self.ck.fact_at(self.scalar, at, kind, &t);
                }
                t
            }
            ExprKind::Index {
                object,
                index,
                index_span,
            } => {
                let base = self.ty(object);
                match base {
                    Type::List(inner) => *inner,
                    Type::Any => Type::Any,
                    other => {
                        let span = self.span(*index_span);
                        let shown = self.show(&other);
                        self.push(
                            Diagnostic::new(
                                Code::UnknownMember,
                                span,
                                format!(
                                    "cannot index `{}` of type {shown} with `[{index}]`",
                                    self.text(object)
                                ),
                            )
                            .with_note("only lists can be indexed"),
                        );
                        Type::Any
                    }
                }
            }
            ExprKind::Call {
                callee,
                callee_span,
                args,
            } => self.call(callee, *callee_span, args, e),
            ExprKind::Unary { op, operand } => {
                let t = self.ty(operand);
                match op {
                    UnaryOp::Not => {
                        if !matches!(t, Type::Bool | Type::Any) {
                            self.operand_error(operand, &t, "`!` needs a boolean");
                        }
                        Type::Bool
                    }
                    UnaryOp::Neg => {
                        if !matches!(t, Type::Number | Type::Any) {
                            self.operand_error(operand, &t, "unary `-` needs a number");
                        }
                        Type::Number
                    }
                }
            }
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                let l = self.ty(lhs);
                let r = self.ty(rhs);
                self.binary(*op, *op_span, lhs, &l, rhs, &r, e)
            }
        }
    }

    fn text(&self, e: &Expr) -> &str {
        self.scalar.text.get(e.span.range()).unwrap_or("")
    }

    fn operand_error(&mut self, operand: &Expr, t: &Type, need: &str) {
        let span = self.span(operand.span);
        let shown = self.show(t);
        self.push(
            Diagnostic::new(
                Code::OperandType,
                span,
                format!("{need}, but `{}` is {shown}", self.text(operand)),
            )
            .with_span_label(format!("this is {shown}")),
        );
    }

    fn binding(&mut self, name: &str, e: &Expr) -> Type {
        let raw_span = e.span;
        self.dynamic = true;
        match name {
            "result" => self.scope.result.clone(),
            "input" => Type::Record(self.fc.input),
            "item" => {
                match &self.scope.item {
                    Some(t) => t.clone(),
                    None => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), format!("`item` is not available in `{}`", self.scope.field))
                            .with_note("`item` and `prev` are bound only in fanout stage `when` and `ensure`"),
                    );
                        Type::Any
                    }
                }
            }
            "prev" => {
                match &self.scope.prev {
                    Some(Some(t)) => t.clone(),
                    Some(None) => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), "`prev` has no value in the first fanout stage")
                            .with_note("`prev` is the output of the previous stage; the first stage has none"),
                    );
                        Type::Any
                    }
                    None => {
                        self.push(
                        Diagnostic::new(Code::BindingUnavailable, self.span(raw_span), format!("`prev` is not available in `{}`", self.scope.field))
                            .with_note("`item` and `prev` are bound only in fanout stage `when` and `ensure`"),
                    );
                        Type::Any
                    }
                }
            }
            other => {
                let mut candidates = vec!["result", "input"];
                if self.scope.item.is_some() {
                    candidates.extend(["item", "prev"]);
                }
                let help = did_you_mean(other, candidates.iter().copied());
                self.push(
                    Diagnostic::new(
                        Code::UnknownBinding,
                        self.span(raw_span),
                        format!("unknown name `{other}`"),
                    )
                    .with_note(format!(
                        "the names available in `{}` are: {}",
                        self.scope.field,
                        candidates.join(", ")
                    ))
                    .with_help_opt(help.or_else(|| {
                        (BUILTINS.iter().any(|(f, _)| *f == other))
                            .then(|| format!("`{other}` is a function: call it as `{other}(...)`"))
                    }))
                    .with_help_opt(None),
                );
                Type::Any
            }
        }
    }

    fn member(
        &mut self,
        base: &Type,
        object: &Expr,
        name: &str,
        name_span: stratum_grammar::Span,
        whole: &Expr,
    ) -> Type {
        let raw_span = name_span;
        match base {
            Type::Any | Type::Object => Type::Any,
            Type::Record(r) => {
                let record = &self.ck.types.records[*r];
                match record.field(name) {
                    Some(ft) => Type::of(&ft.ty),
                    None => {
                        let help =
                            did_you_mean(name, record.fields.iter().map(|(n, _)| n.as_str()));
                        let fields: Vec<String> = record
                            .fields
                            .iter()
                            .map(|(n, _)| format!("`{n}`"))
                            .collect();
                        let rname = record.name.clone();
                        self.push(
                            Diagnostic::new(
                                Code::UnknownMember,
                                self.span(raw_span),
                                format!("`{rname}` has no field `{name}`"),
                            )
                            .with_span_label("unknown field")
                            .with_note(if fields.is_empty() {
                                format!("`{rname}` has no fields")
                            } else {
                                format!("`{rname}` has: {}", fields.join(", "))
                            })
                            .with_help_opt(help),
                        );
                        Type::Any
                    }
                }
            }
            Type::Steps(_) => self.result_step(name, raw_span, whole),
            other => {
                let shown = self.show(other);
                self.push(Diagnostic::new(
                    Code::UnknownMember,
                    self.span(raw_span),
                    format!(
                        "`{}` is {shown} and has no field `{name}`",
                        self.text(object)
                    ),
                ));
                Type::Any
            }
        }
    }

    /// `result.<step>` in `when`/`set`.
    fn result_step(&mut self, name: &str, raw_span: stratum_grammar::Span, whole: &Expr) -> Type {
        let Some(&step) = self.fc.index.get(name) else {
            let help = did_you_mean(name, self.fc.index.keys().copied());
            self.push(
                Diagnostic::new(
                    Code::UnknownResultStep,
                    self.span(raw_span),
                    format!("`result.{name}`: there is no step `{name}` in this flow"),
                )
                .with_note(format!(
                    "in `{}`, `result` maps the ids of earlier steps to their outputs",
                    self.scope.field
                ))
                .with_help_opt(help),
            );
            return Type::Any;
        };
        let reader = self.scope.reader;
        if step == reader {
            self.push(Diagnostic::new(
                Code::UnorderedRead,
                self.span(raw_span),
                format!(
                    "step `{name}` reads its own output in `{}`",
                    self.scope.field
                ),
            ));
            return Type::Any;
        }
        if !self.fc.is_dependency_ancestor(step, reader) {
            let reader_id = self.fc.flow.steps[reader]
                .id
                .as_ref()
                .map_or("this step", |n| n.text.as_str())
                .to_string();
            let whole_span = self.span(whole.span);
            self.push(
                Diagnostic::new(Code::UnorderedRead, whole_span, format!("`{}` reads `result.{name}`, but `{name}` may not have finished", self.scope.field))
                    .with_note(format!("nothing orders `{name}` before `{reader_id}`: it is not listed in `after` and no `${{{name}.output}}` reference reads it"))
                    .with_help(format!("add `{name}` to the `after` list of `{reader_id}`")),
            );
        }
        match &self.fc.outputs[step] {
            StepOut::Known(t) => t.clone(),
            StepOut::Gate => {
                self.push(Diagnostic::new(
                    Code::UnknownResultStep,
                    self.span(raw_span),
                    format!("`result.{name}`: step `{name}` is a gate and has no output"),
                ));
                Type::Any
            }
            _ => Type::Any,
        }
    }

    fn call(
        &mut self,
        callee: &str,
        callee_span: stratum_grammar::Span,
        args: &[Expr],
        whole: &Expr,
    ) -> Type {
        let arg_types: Vec<Type> = args.iter().map(|a| self.ty(a)).collect();
        let raw_span = callee_span;
        let Some(arity) = BUILTINS
            .iter()
            .find(|(n, _)| *n == callee)
            .map(|&(_, a)| usize::from(a))
        else {
            let help = did_you_mean(callee, BUILTINS.iter().map(|(n, _)| *n));
            self.push(
                Diagnostic::new(
                    Code::UnknownFunction,
                    self.span(raw_span),
                    format!("unknown function `{callee}`"),
                )
                .with_note(format!(
                    "the functions are: {}",
                    BUILTINS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .with_help_opt(help),
            );
            return Type::Any;
        };
        if args.len() != arity {
            let whole_span = self.span(whole.span);
            self.push(Diagnostic::new(
                Code::WrongArity,
                whole_span,
                format!(
                    "`{callee}` takes {arity} argument{}, but {} {} given",
                    if arity == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "was" } else { "were" }
                ),
            ));
            return match callee {
                "str" => Type::String,
                "int" | "len" => Type::Number,
                "max" | "min" => Type::Any,
                _ => Type::Bool,
            };
        }
        if callee.starts_with("file_") || callee == "matches" {
            self.dynamic = true;
        }
        let a0 = &arg_types[0];
        let bad = |t: &Type, ok: &dyn Fn(&Type) -> bool| !matches!(t, Type::Any) && !ok(t);
        match callee {
            "len" => {
                if bad(a0, &|t| {
                    t.is_stringy() || t.is_objecty() || matches!(t, Type::List(_))
                }) {
                    self.operand_error(&args[0], a0, "`len` needs a string, a list or an object");
                }
                Type::Number
            }
            "any" | "all" => {
                if bad(a0, &|t| matches!(t, Type::List(_))) {
                    self.operand_error(&args[0], a0, &format!("`{callee}` needs a list"));
                }
                Type::Bool
            }
            "max" | "min" => match a0 {
                Type::List(inner) => match **inner {
                    Type::Number | Type::String | Type::Enum(_) | Type::Any => (**inner).clone(),
                    _ => {
                        self.operand_error(
                            &args[0],
                            a0,
                            &format!("`{callee}` needs a list of numbers or of strings"),
                        );
                        Type::Any
                    }
                },
                Type::Any => Type::Any,
                other => {
                    let other = other.clone();
                    self.operand_error(&args[0], &other, &format!("`{callee}` needs a list"));
                    Type::Any
                }
            },
            "str" => Type::String,
            "int" => {
                if bad(a0, &|t| {
                    matches!(t, Type::Bool | Type::Number) || t.is_stringy()
                }) {
                    self.operand_error(&args[0], a0, "`int` needs a boolean, a number or a string");
                }
                Type::Number
            }
            "bool" => Type::Bool,
            _ => {
                for (a, t) in args.iter().zip(&arg_types) {
                    if bad(t, &|t| t.is_stringy()) {
                        self.operand_error(a, t, &format!("`{callee}` needs string arguments"));
                    }
                }
                if callee == "matches"
                    && let ExprKind::String(pattern) = &args[1].kind
                    && let Err(why) = super::regex_check(pattern)
                {
                    let span = self.span(args[1].span);
                    self.push(Diagnostic::new(
                        Code::InvalidRegex,
                        span,
                        format!("this `matches` pattern can never be used: {why}"),
                    ));
                }
                Type::Bool
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn binary(
        &mut self,
        op: BinaryOp,
        op_span: stratum_grammar::Span,
        lhs: &Expr,
        l: &Type,
        rhs: &Expr,
        r: &Type,
        whole: &Expr,
    ) -> Type {
        let any = |t: &Type| matches!(t, Type::Any);
        match op {
            BinaryOp::And | BinaryOp::Or => {
                for (side, t) in [(lhs, l), (rhs, r)] {
                    if !matches!(t, Type::Bool | Type::Any) {
                        self.operand_error(
                            side,
                            t,
                            &format!("`{}` needs booleans on both sides", op.as_str()),
                        );
                    }
                }
                Type::Bool
            }
            BinaryOp::Eq | BinaryOp::Ne => {
                self.enum_compare(op, lhs, l, rhs, r, whole);
                Type::Bool
            }
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
                let ok = any(l)
                    || any(r)
                    || (matches!(l, Type::Number) && matches!(r, Type::Number))
                    || (l.is_stringy() && r.is_stringy());
                let orderable = |t: &Type| matches!(t, Type::Number | Type::Any) || t.is_stringy();
                if !ok {
                    let span = self.span(op_span);
                    let (ls, rs) = (self.show(l), self.show(r));
                    let mut d = Diagnostic::new(
                        Code::OperandType,
                        span,
                        format!(
                            "`{}` compares two numbers or two strings, not {ls} and {rs}",
                            op.as_str()
                        ),
                    )
                    .with_label(self.span(lhs.span), format!("this is {ls}"))
                    .with_label(self.span(rhs.span), format!("this is {rs}"));
                    if orderable(l) && orderable(r) {
                        d = d.with_help("convert one side with `int(...)` or `str(...)`");
                    }
                    self.push(d);
                }
                Type::Bool
            }
            BinaryOp::In => {
                match r {
                    Type::Any | Type::List(_) => {}
                    t if t.is_stringy() || t.is_objecty() => {
                        if !(l.is_stringy() || any(l)) {
                            self.operand_error(lhs, l, &format!("the left side of `in` must be a string when the right side is {}", self.show(r)));
                        }
                    }
                    _ => self.operand_error(
                        rhs,
                        r,
                        "the right side of `in` must be a list, a string or an object",
                    ),
                }
                Type::Bool
            }
            BinaryOp::Add => match (l, r) {
                (Type::Number, Type::Number) => Type::Number,
                (a, b) if a.is_stringy() && b.is_stringy() => Type::String,
                (Type::Any, Type::Number) | (Type::Number, Type::Any) => Type::Number,
                (Type::Any, t) | (t, Type::Any) if t.is_stringy() => Type::String,
                (Type::Any, Type::Any) => Type::Any,
                _ => {
                    let span = self.span(op_span);
                    let (ls, rs) = (self.show(l), self.show(r));
                    self.push(
                        Diagnostic::new(
                            Code::OperandType,
                            span,
                            format!("`+` adds two numbers or joins two strings, not {ls} and {rs}"),
                        )
                        .with_label(self.span(lhs.span), format!("this is {ls}"))
                        .with_label(self.span(rhs.span), format!("this is {rs}"))
                        .with_help("convert one side with `str(...)` or `int(...)`"),
                    );
                    Type::Any
                }
            },
            BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                for (side, t) in [(lhs, l), (rhs, r)] {
                    if !matches!(t, Type::Number | Type::Any) {
                        self.operand_error(side, t, &format!("`{}` needs numbers", op.as_str()));
                    }
                }
                Type::Number
            }
        }
    }

    /// `result.verdict == 'aproved'` where `verdict` is an enum without that value.
    fn enum_compare(
        &mut self,
        op: BinaryOp,
        lhs: &Expr,
        l: &Type,
        rhs: &Expr,
        r: &Type,
        whole: &Expr,
    ) {
        let pairs = [(l, rhs), (r, lhs)];
        for (t, lit) in pairs {
            if let (Type::Enum(values), ExprKind::String(s)) = (t, &lit.kind)
                && !values.contains(s)
            {
                let span = self.span(whole.span);
                let help = crate::diagnostics::suggest(s, values.iter().map(String::as_str))
                    .map(|v| format!("did you mean `'{v}'`?"));
                self.push(
                    Diagnostic::new(
                        Code::ConstantCondition,
                        span,
                        format!(
                            "this comparison is always {}: `'{s}'` is not one of the enum values",
                            op == BinaryOp::Ne
                        ),
                    )
                    .with_note(format!(
                        "the values are: {}",
                        values
                            .iter()
                            .map(|v| format!("`{v}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .with_help_opt(help),
                );
                return;
            }
        }
    }
}

/// The value of an expression made only of number literals, if it is one.
pub(super) fn constant_number(e: &Expr) -> Option<f64> {
    match fold(e)? {
        Const::Num(n) => Some(n),
        _ => None,
    }
}

/// Folds an expression made only of literals, when it is simple enough.
fn fold(e: &Expr) -> Option<Const> {
    Some(match &e.kind {
        ExprKind::Null => Const::Null,
        ExprKind::Bool(b) => Const::Bool(*b),
        ExprKind::Number(n) => Const::Num(*n),
        ExprKind::String(s) => Const::Str(s.clone()),
        ExprKind::Paren(inner) => fold(inner)?,
        ExprKind::Unary {
            op: UnaryOp::Not,
            operand,
        } => match fold(operand)? {
            Const::Bool(b) => Const::Bool(!b),
            _ => return None,
        },
        ExprKind::Unary {
            op: UnaryOp::Neg,
            operand,
        } => match fold(operand)? {
            Const::Num(n) => Const::Num(-n),
            _ => return None,
        },
        ExprKind::Binary { op, lhs, rhs, .. } => {
            let (l, r) = (fold(lhs)?, fold(rhs)?);
            match (op, &l, &r) {
                (BinaryOp::And, Const::Bool(a), Const::Bool(b)) => Const::Bool(*a && *b),
                (BinaryOp::Or, Const::Bool(a), Const::Bool(b)) => Const::Bool(*a || *b),
                (BinaryOp::Eq, _, _) => Const::Bool(l == r),
                (BinaryOp::Ne, _, _) => Const::Bool(l != r),
                (BinaryOp::Lt, Const::Num(a), Const::Num(b)) => Const::Bool(a < b),
                (BinaryOp::Le, Const::Num(a), Const::Num(b)) => Const::Bool(a <= b),
                (BinaryOp::Gt, Const::Num(a), Const::Num(b)) => Const::Bool(a > b),
                (BinaryOp::Ge, Const::Num(a), Const::Num(b)) => Const::Bool(a >= b),
                (BinaryOp::Add, Const::Num(a), Const::Num(b)) => Const::Num(a + b),
                (BinaryOp::Sub, Const::Num(a), Const::Num(b)) => Const::Num(a - b),
                (BinaryOp::Mul, Const::Num(a), Const::Num(b)) => Const::Num(a * b),
                _ => return None,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::analyze;

    fn spec_with_ensure(expr: &str) -> String {
        format!(
            "version: 1\ncontracts:\n  Out: {{n: number}}\nflows:\n  entry: m\n  m:\n    input: {{}}\n    output: {{from: \"${{a.output}}\", contract: Out}}\n    steps:\n      - id: a\n        do: x\n        out: Out\n        ensure: [{{expr: \"{expr}\"}}]\n"
        )
    }

    #[test]
    fn tall_chains_are_checked_or_refused_without_overflow() {
        // runs on a small stack to prove the checker's recursion is bounded
        let handle = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(|| {
                let ok = format!("{} > 0", vec!["result.n"; 250].join(" + "));
                let a = analyze(&spec_with_ensure(&ok));
                assert_eq!(a.diagnostics.len(), 0, "{:?}", a.diagnostics);
                let tall = format!("{} > 0", vec!["result.n"; 2000].join(" + "));
                let a = analyze(&spec_with_ensure(&tall));
                assert_eq!(
                    a.diagnostics
                        .iter()
                        .map(|d| d.code.as_str())
                        .collect::<Vec<_>>(),
                    vec!["S0612"]
                );
            })
            .unwrap();
        handle.join().unwrap();
    }
}
