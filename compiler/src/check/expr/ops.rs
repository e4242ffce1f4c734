//! Operators: operand types of the unary and binary operators, and
//! comparisons of an enum with a string that is not one of its values.
//!
//! Owns: the operand-type diagnostics of `&&`, `||`, `==`, `<`, `in`, `+`,
//! `-`, `*`, `/`, and the enum-comparison constant condition.
//! Must never: fold constants (`fold`) or type names and calls.

use stratum_grammar::{BinaryOp, Expr, ExprKind};

use super::Walk;
use crate::diagnostics::{Code, Diagnostic};
use crate::types::Type;

impl Walk<'_, '_, '_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary(
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
