//! Constant folding of expressions made only of literals (decision C6:
//! constant conditions), and the constant numbers other checks read.
//!
//! Owns: which literal expressions fold and to what.
//! Must never: report diagnostics (the caller decides what a constant
//! means where it appears), or fold anything that reads a binding.

use stratum_grammar::{BinaryOp, Expr, ExprKind, UnaryOp};

/// A folded constant, for C6.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Const {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

/// The value of an expression made only of number literals, if it is one.
pub(crate) fn constant_number(e: &Expr) -> Option<f64> {
    match fold(e)? {
        Const::Num(n) => Some(n),
        _ => None,
    }
}

/// Folds an expression made only of literals, when it is simple enough.
pub(super) fn fold(e: &Expr) -> Option<Const> {
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
