//! Lexer and parser for Stratum v1 expressions (`when`, `set`, `ensure[].expr`,
//! `iterate.until`) and for `${...}` template references inside strings.
//!
//! This crate owns *syntax only*: tokens, the expression tree with byte
//! spans, the §7.3 size limits, template splitting and reference
//! classification, and syntax error messages. It knows nothing of YAML,
//! contracts, bindings, scopes or evaluation, and it never panics on any
//! input. Its public API is deliberately narrow ([`parse_expr`],
//! [`parse_template`], [`walk`] and the data types) so the parser generator
//! behind it can be replaced without touching callers.
//!
//! All spans are half-open byte ranges into the text that was parsed.
//!
//! ```
//! use stratum_grammar::{ExprKind, ParseErrorKind, RefKind, parse_expr, parse_template};
//!
//! let (expr, errors) = parse_expr("len(result.files) > 0 && !input.dry_run");
//! assert!(errors.is_empty());
//! assert_eq!(expr.unwrap().to_string(), "len(result.files) > 0 && !input.dry_run");
//!
//! let (expr, errors) = parse_expr("${build.output.ok} == true");
//! assert!(expr.is_none());
//! assert_eq!(errors[0].kind, ParseErrorKind::TemplateInExpression);
//!
//! let (template, errors) = parse_template("Review ${build.output.sha}");
//! assert!(errors.is_empty());
//! let reference = template.references().next().unwrap();
//! assert_eq!((reference.kind, reference.head.as_str()), (RefKind::StepOutput, "build"));
//! # let _ = ExprKind::Null;
//! ```

mod ast;
mod error;
mod lexer;
mod parser;
mod template;

pub use ast::{BinaryOp, Expr, ExprKind, Span, UnaryOp};
pub use error::{ParseError, ParseErrorKind};
pub use parser::{MAX_DEPTH, MAX_NODES};
pub use template::{PathSegment, Piece, RefKind, Reference, SegmentKind, Template};

/// Parses one expression.
///
/// Returns `Some(tree)` exactly when the error list is empty. On failure the
/// errors are sorted by position; lexical errors (bad characters, strings,
/// numbers, `${...}`) are all reported and stop parsing; otherwise the parser
/// reports the first syntax error and, where it can recover, later ones too.
///
/// Trees returned here never exceed [`MAX_DEPTH`] levels of nesting or
/// [`MAX_NODES`] nodes; both limits are enforced on the token stream before
/// any tree is built, so hostile input cannot exhaust the stack.
pub fn parse_expr(text: &str) -> (Option<Expr>, Vec<ParseError>) {
    parser::parse_expr(text)
}

/// Splits a string into literal text and `${...}` references.
///
/// Every `${...}` token is classified per §5.2 (with `${item.path}` and
/// `${prev.path}` as paths into the item / previous output). Invalid tokens,
/// nested `${${`, and a `${` with no closing `}` are reported as errors and
/// left in the text pieces. Stray `}`, `{` and `$` are ordinary text.
pub fn parse_template(text: &str) -> (Template, Vec<ParseError>) {
    template::parse_template(text)
}

/// Calls `f` on `expr` and every node below it, in pre-order (a node before
/// its children, children in source order). Iterative: it uses no recursion.
pub fn walk(expr: &Expr, f: &mut impl FnMut(&Expr)) {
    let mut stack = vec![expr];
    while let Some(node) = stack.pop() {
        f(node);
        let children = node.children();
        stack.extend(children.into_iter().rev());
    }
}

#[cfg(test)]
mod tests;
