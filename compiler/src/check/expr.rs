//! Expression checking (decisions C2–C4, C6, C7): bindings per context,
//! builtin signatures, closed-contract member access, operand types,
//! ordered reads of `result.<step>`, constant conditions.
//!
//! Owns: the typing rules of the expression language. This file holds the
//! entry point (parse errors, the height limit, constant conditions, the
//! IR), the scopes and the walk over the tree; its rooms hold the rest:
//! [`names`] (bindings, members, `result.<step>`), [`call`] (builtins,
//! lambdas and their parameters' scopes),
//! [`ops`] (operators), [`fold`] (constant folding).
//! Must never: evaluate expressions against run-time values (the VM does),
//! or parse them (the grammar crate does).

mod call;
mod fold;
mod names;
mod ops;

use stratum_grammar::{Expr, ExprKind, ParseErrorKind, UnaryOp};

pub(super) use self::fold::constant_number;
use self::fold::{Const, fold};
pub(super) use self::names::status_type;
use super::{Checker, FlowCtx};
use crate::diagnostics::{Code, Diagnostic};
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
    /// `failure` is bound and `result` is not (X9: an `on_fail` entry's `when`).
    pub failure: bool,
}

struct Walk<'a, 'c, 'f> {
    ck: &'c mut Checker<'a>,
    fc: &'c mut FlowCtx<'f>,
    scalar: &'c Str,
    scope: &'c Scope,
    /// Whether this expression reads any binding or the file system.
    dynamic: bool,
    /// Depth of `coalesce(...)` calls around the node being typed (a read
    /// inside one handles `null`: X2).
    coalesced: u32,
    /// The lambda parameters in scope with their element types, innermost last.
    params: Vec<(String, Type)>,
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
            coalesced: 0,
            params: Vec::new(),
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
                if let Some(t) = self.file_member(object, name, *name_span) {
                    return t;
                }
                let t = self.member(&base, object, name, *name_span, e);
                let kind = match &base {
                    _ if self.ck.facts.is_none() => None,
                    Type::Record(r) => Some(super::FactKind::Field {
                        record: *r,
                        field: name.clone(),
                    }),
                    Type::Steps(_) | Type::StepStates(_) => self
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
            } => {
                let coalesce = callee == "coalesce";
                self.coalesced += u32::from(coalesce);
                let t = self.call(callee, *callee_span, args, e);
                self.coalesced -= u32::from(coalesce);
                t
            }
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
            ExprKind::Lambda { .. } => {
                self.misplaced_lambda(e, None);
                Type::Any
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
