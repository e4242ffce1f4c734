//! Expression parsing glue: lexing, the §7.3 limits, the lalrpop parser and
//! the translation of its errors into [`ParseError`]s.
//!
//! This module owns the order of the pipeline (lex → limits → parse) and the
//! wording of syntax errors. It must never let lalrpop types escape the
//! crate, and it must never hand a token stream that breaks the depth or node
//! limits to the parser, so no later (recursive) code sees a deep tree. It
//! knows nothing of YAML, templates, bindings or types.

use lalrpop_util::ErrorRecovery;

use crate::ast::{BinaryOp, Expr, ExprKind, Span, UnaryOp};
use std::cell::Cell;
use std::rc::Rc;

use crate::error::{MAX_ERRORS, ParseError, ParseErrorKind, quote};
use crate::lexer::{self, LexError, Spanned, Token};

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_qualifications, unused_imports, dead_code)]
    grammar,
    "/expr.rs"
);

/// Maximum nesting depth (unary operators, parenthesised groups, call arguments).
pub const MAX_DEPTH: usize = 128;
/// Maximum number of syntax-tree nodes.
pub const MAX_NODES: usize = 4096;

/// Member names that are always rejected.
const FORBIDDEN_MEMBERS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// Largest index accepted: `2^64` is the first double that does not fit a `u64`.
const INDEX_LIMIT: f64 = 18_446_744_073_709_551_616.0;

type LalrpopError = lalrpop_util::ParseError<usize, Token, LexError>;

/// Parses one expression. See [`crate::parse_expr`].
pub(crate) fn parse_expr(text: &str) -> (Option<Expr>, Vec<ParseError>) {
    let (tokens, lex_errors) = lexer::lex(text);
    if !lex_errors.is_empty() {
        return (None, lex_errors);
    }
    if tokens.is_empty() {
        let err = ParseError::new(
            ParseErrorKind::Empty,
            Span::from_usize(0, text.len()),
            "expected an expression, found nothing",
        );
        return (None, vec![err]);
    }
    if let Some(err) = check_limits(&tokens) {
        return (None, vec![err]);
    }
    let mut builder = Builder {
        text,
        errors: Vec::new(),
        placeholders: Vec::new(),
        error_count: Rc::new(Cell::new(0)),
    };
    // Stop feeding tokens once enough errors were found; the parser then
    // sees the end of input, which only adds a (filtered) follow-on error.
    let count = Rc::clone(&builder.error_count);
    let tokens = tokens
        .into_iter()
        .take_while(move |_| count.get() < MAX_ERRORS)
        .map(Ok);
    let result = grammar::ExprParser::new().parse(&mut builder, tokens);
    match result {
        Ok(expr) if builder.errors.is_empty() => (Some(expr), Vec::new()),
        Ok(_) => (None, builder.finish()),
        Err(err) => {
            let err = builder.convert(err);
            builder.errors.push(err);
            (None, builder.finish())
        }
    }
}

/// Enforces the depth and node limits on the token stream, before any tree
/// exists. Depth counts open parentheses (groups and call argument lists)
/// plus pending prefix operators; a prefix operator stays pending until the
/// next binary operator, `,` or closing bracket at its level. The node count
/// counts exactly the tokens that become nodes in a well-formed expression.
fn check_limits(tokens: &[Spanned]) -> Option<ParseError> {
    // One entry per open bracket level: (is a parenthesis, pending prefix operators).
    let mut levels: Vec<(bool, usize)> = vec![(false, 0)];
    let mut depth = 0usize;
    let mut nodes = 0usize;
    let mut prev: Option<&Token> = None;
    for (start, tok, end) in tokens {
        let span = Span::from_usize(*start, *end);
        let after_dot = matches!(prev, Some(Token::Dot));
        let after_bracket = matches!(prev, Some(Token::LBracket));
        let prefix_position = !prev.is_some_and(Token::ends_operand);
        match tok {
            Token::LParen => {
                depth += 1;
                levels.push((true, 0));
            }
            Token::LBracket => {
                nodes += 1;
                levels.push((false, 0));
            }
            Token::RParen | Token::RBracket => {
                if levels.len() > 1
                    && let Some((paren, pending)) = levels.pop()
                {
                    depth = depth.saturating_sub(pending + usize::from(paren));
                }
            }
            Token::Comma => {
                if let Some(level) = levels.last_mut() {
                    depth = depth.saturating_sub(level.1);
                    level.1 = 0;
                }
            }
            Token::Bang => {
                nodes += 1;
                depth += 1;
                if let Some(level) = levels.last_mut() {
                    level.1 += 1;
                }
            }
            Token::Minus if prefix_position => {
                nodes += 1;
                depth += 1;
                if let Some(level) = levels.last_mut() {
                    level.1 += 1;
                }
            }
            t if t.is_binary_operator() => {
                nodes += 1;
                if let Some(level) = levels.last_mut() {
                    depth = depth.saturating_sub(level.1);
                    level.1 = 0;
                }
            }
            Token::Dot => nodes += 1,
            // the parameter before it already counted as the lambda node
            Token::Arrow => {}
            Token::Number(_) if after_bracket => {}
            _ if after_dot => {}
            _ => nodes += 1,
        }
        if depth > MAX_DEPTH {
            return Some(ParseError::new(
                ParseErrorKind::TooDeep,
                span,
                format!(
                    "expression is nested too deeply: at most {MAX_DEPTH} levels of parentheses, call arguments and unary operators are allowed"
                ),
            ));
        }
        if nodes > MAX_NODES {
            return Some(ParseError::new(
                ParseErrorKind::TooManyNodes,
                span,
                format!("expression is too large: at most {MAX_NODES} syntax nodes are allowed"),
            ));
        }
        prev = Some(tok);
    }
    None
}

/// Builds AST nodes for the grammar and collects the errors it finds.
pub(crate) struct Builder<'t> {
    text: &'t str,
    errors: Vec<ParseError>,
    /// Spans of the placeholders made by error recovery, which must not
    /// trigger further (follow-on) errors.
    placeholders: Vec<Span>,
    /// Number of errors so far, shared with the token feed.
    error_count: Rc<Cell<usize>>,
}

fn sp(start: usize, end: usize) -> Span {
    Span::from_usize(start, end)
}

impl Builder<'_> {
    fn finish(mut self) -> Vec<ParseError> {
        self.errors.sort_by_key(|e| (e.span.start, e.span.end));
        // After recovering from one error the parser often trips again right
        // away (on the next token, or at the end of a half-built expression);
        // such follow-on reports are noise.
        let text = self.text;
        let mut previous: Option<Span> = None;
        self.errors.retain(|e| {
            let follow_on = previous.is_some_and(|p| {
                e.kind == ParseErrorKind::UnexpectedEnd
                    || (e.kind == ParseErrorKind::UnexpectedToken
                        && text
                            .get(p.end as usize..e.span.start as usize)
                            .is_some_and(|gap| gap.trim().is_empty()))
            });
            if !follow_on {
                previous = Some(e.span);
            }
            !follow_on
        });
        self.errors.truncate(MAX_ERRORS);
        self.errors
            .dedup_by(|a, b| a.span == b.span && a.kind == b.kind);
        self.errors
    }

    fn push_error(&mut self, err: ParseError) {
        self.errors.push(err);
        self.error_count.set(self.errors.len());
    }

    fn source(&self, span: Span) -> &str {
        self.text.get(span.range()).unwrap_or("")
    }

    pub(crate) fn null(&mut self, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Null, sp(l, r))
    }

    pub(crate) fn boolean(&mut self, v: bool, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Bool(v), sp(l, r))
    }

    pub(crate) fn number(&mut self, v: f64, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Number(v), sp(l, r))
    }

    pub(crate) fn string(&mut self, v: String, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::String(v), sp(l, r))
    }

    pub(crate) fn ident(&mut self, name: String, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Ident(name), sp(l, r))
    }

    pub(crate) fn paren(&mut self, inner: Expr, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Paren(Box::new(inner)), sp(l, r))
    }

    pub(crate) fn unary(&mut self, op: UnaryOp, l: usize, operand: Expr) -> Expr {
        let span = sp(l, operand.span.end as usize);
        Expr::new(
            ExprKind::Unary {
                op,
                operand: Box::new(operand),
            },
            span,
        )
    }

    pub(crate) fn binary(
        &mut self,
        op: BinaryOp,
        ol: usize,
        or: usize,
        lhs: Expr,
        rhs: Expr,
    ) -> Expr {
        let span = lhs.span.to(rhs.span);
        Expr::new(
            ExprKind::Binary {
                op,
                op_span: sp(ol, or),
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            },
            span,
        )
    }

    pub(crate) fn call(
        &mut self,
        callee: String,
        l: usize,
        cr: usize,
        args: Vec<Expr>,
        r: usize,
    ) -> Expr {
        Expr::new(
            ExprKind::Call {
                callee,
                callee_span: sp(l, cr),
                args,
            },
            sp(l, r),
        )
    }

    pub(crate) fn lambda(&mut self, param: String, l: usize, pr: usize, body: Expr) -> Expr {
        let span = sp(l, body.span.end as usize);
        Expr::new(
            ExprKind::Lambda {
                param,
                param_span: sp(l, pr),
                body: Box::new(body),
            },
            span,
        )
    }

    pub(crate) fn member(&mut self, object: Expr, name: String, nl: usize, nr: usize) -> Expr {
        let name_span = sp(nl, nr);
        if FORBIDDEN_MEMBERS.contains(&name.as_str()) {
            self.push_error(ParseError::new(
                ParseErrorKind::ForbiddenMember,
                name_span,
                format!(
                    "member {} is not allowed: expected a member name other than `__proto__`, `constructor` or `prototype`",
                    quote(&name)
                ),
            ));
        }
        let span = sp(object.span.start as usize, nr);
        Expr::new(
            ExprKind::Member {
                object: Box::new(object),
                name,
                name_span,
            },
            span,
        )
    }

    pub(crate) fn index(&mut self, object: Expr, index: Expr, r: usize) -> Expr {
        let index_span = index.span;
        let value = match index.kind {
            ExprKind::Number(v) if v.fract() == 0.0 && (0.0..INDEX_LIMIT).contains(&v) => {
                // In range and integral: the conversion is exact.
                Some(v as u64)
            }
            _ => None,
        };
        let placeholder =
            matches!(index.kind, ExprKind::Null) && self.placeholders.contains(&index_span);
        let value = value.unwrap_or_else(|| {
            if placeholder {
                return 0;
            }
            let found = self.source(index_span).to_owned();
            self.push_error(ParseError::new(
                ParseErrorKind::InvalidIndex,
                index_span,
                format!(
                    "expected a non-negative whole number literal as index, such as `0`, found {}",
                    quote(&found)
                ),
            ));
            0
        });
        let span = sp(object.span.start as usize, r);
        Expr::new(
            ExprKind::Index {
                object: Box::new(object),
                index: value,
                index_span,
            },
            span,
        )
    }

    pub(crate) fn method_call(&mut self, object: Expr, r: usize) -> Expr {
        let found = self.source(object.span).to_owned();
        self.push_error(ParseError::new(
            ParseErrorKind::MethodCall,
            sp(object.span.start as usize, r),
            format!(
                "only a function name can be called, such as `len(x)`; found a call on {}",
                quote(&found)
            ),
        ));
        object
    }

    pub(crate) fn recover(&mut self, rec: ErrorRecovery<usize, Token, LexError>) -> Expr {
        let err = self.convert(rec.error);
        let span = err.span;
        self.push_error(err);
        self.placeholders.push(span);
        // A placeholder; the caller never sees trees from a failed parse.
        Expr::new(ExprKind::Null, span)
    }

    fn convert(&self, err: LalrpopError) -> ParseError {
        match err {
            lalrpop_util::ParseError::UnrecognizedToken {
                token: (l, tok, r),
                expected,
            } => {
                let span = sp(l, r);
                let found = self.source(span);
                let what = describe_expected(&expected);
                let hint = match tok {
                    Token::In if what == "a member name" => {
                        "; `in` is an operator and cannot be used as a member name"
                    }
                    Token::Arrow => {
                        "; a lambda `p -> …` can only be an argument of a call: the last one of `all`, `any`, `count`, `filter` or `map`"
                    }
                    _ => "",
                };
                ParseError::new(
                    ParseErrorKind::UnexpectedToken,
                    span,
                    format!("expected {what}, found {}{hint}", quote(found)),
                )
            }
            lalrpop_util::ParseError::ExtraToken { token: (l, _, r) } => {
                let span = sp(l, r);
                ParseError::new(
                    ParseErrorKind::UnexpectedToken,
                    span,
                    format!(
                        "expected an operator or end of input, found {}",
                        quote(self.source(span))
                    ),
                )
            }
            lalrpop_util::ParseError::UnrecognizedEof { location, expected } => {
                let end = location.max(self.text.len());
                ParseError::new(
                    ParseErrorKind::UnexpectedEnd,
                    sp(end, end),
                    format!(
                        "expected {}, found end of input",
                        describe_expected(&expected)
                    ),
                )
            }
            lalrpop_util::ParseError::InvalidToken { location } => ParseError::new(
                ParseErrorKind::UnexpectedChar,
                sp(location, location),
                "unexpected character",
            ),
            lalrpop_util::ParseError::User { .. } => ParseError::new(
                ParseErrorKind::UnexpectedToken,
                sp(0, self.text.len()),
                "invalid expression",
            ),
        }
    }
}

/// Turns lalrpop's list of expected terminals into plain words.
fn describe_expected(expected: &[String]) -> String {
    let has = |t: &str| expected.iter().any(|e| e == t);
    let mut parts: Vec<&str> = Vec::new();
    if has("\"(\"") && (has("NUMBER") || has("IDENT")) {
        parts.push("an expression");
    } else if has("IDENT") {
        parts.push("a member name");
    } else if has("NUMBER") {
        parts.push("a number");
    }
    if has("\"||\"") || has("\"&&\"") || has("\"==\"") || has("\"+\"") || has("\"*\"") {
        parts.push("an operator");
    }
    // At top level (no closing bracket or comma possible) the text may end here.
    let top_level = !has("\")\"") && !has("\"]\"") && !has("\",\"");
    if top_level && parts.last() == Some(&"an operator") {
        parts.push("end of input");
    }
    if has("\")\"") {
        parts.push("`)`");
    }
    if has("\"]\"") {
        parts.push("`]`");
    }
    if has("\",\"") {
        parts.push("`,`");
    }
    if parts.is_empty() {
        // Anything else: list the raw terminals, quoted.
        let raw: Vec<String> = expected
            .iter()
            .map(|e| format!("`{}`", e.trim_matches('"')))
            .collect();
        return if raw.is_empty() {
            String::from("end of input")
        } else {
            join_or(&raw.iter().map(String::as_str).collect::<Vec<_>>())
        };
    }
    join_or(&parts)
}

fn join_or(parts: &[&str]) -> String {
    match parts {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}
