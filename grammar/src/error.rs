//! Syntax errors shared by the expression parser and the template scanner.
//!
//! This module owns the [`ParseError`] value and its [`ParseErrorKind`]s. It
//! never renders diagnostics (no colours, no line/column maths, no source
//! snippets) and knows nothing of YAML paths: callers map the byte [`Span`]
//! into their own coordinates.

use std::fmt;

use crate::ast::Span;

/// What went wrong, as a stable machine-readable category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseErrorKind {
    /// A character that cannot start any token (`$`, `{`, `%`, a single `&`, non-ASCII letters...).
    UnexpectedChar,
    /// A string literal with no closing quote.
    UnterminatedString,
    /// A backslash escape that is not one of `\" \' \\ \/ \b \f \n \r \t \uXXXX`.
    InvalidEscape,
    /// A raw character below U+0020 (tab, newline, ...) inside a string literal.
    ControlCharInString,
    /// A malformed or non-finite number (`007`, `1e`, `1e400`).
    InvalidNumber,
    /// A token that cannot appear at this point.
    UnexpectedToken,
    /// The text ended where more was expected.
    UnexpectedEnd,
    /// The expression is empty (only whitespace).
    Empty,
    /// Member `__proto__`, `constructor` or `prototype`.
    ForbiddenMember,
    /// An index that is not a non-negative integral number literal.
    InvalidIndex,
    /// A call on something other than a bare function name (`x.f()`).
    MethodCall,
    /// `${...}` template syntax inside an expression.
    TemplateInExpression,
    /// Nesting deeper than the limit of 128.
    TooDeep,
    /// More than 4096 syntax-tree nodes.
    TooManyNodes,
    /// A `${...}` reference whose body does not parse.
    InvalidReference,
    /// A `${` with no closing `}`.
    DanglingTemplate,
}

impl ParseErrorKind {
    /// A short stable name, e.g. `"unexpected_token"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ParseErrorKind::UnexpectedChar => "unexpected_char",
            ParseErrorKind::UnterminatedString => "unterminated_string",
            ParseErrorKind::InvalidEscape => "invalid_escape",
            ParseErrorKind::ControlCharInString => "control_char_in_string",
            ParseErrorKind::InvalidNumber => "invalid_number",
            ParseErrorKind::UnexpectedToken => "unexpected_token",
            ParseErrorKind::UnexpectedEnd => "unexpected_end",
            ParseErrorKind::Empty => "empty",
            ParseErrorKind::ForbiddenMember => "forbidden_member",
            ParseErrorKind::InvalidIndex => "invalid_index",
            ParseErrorKind::MethodCall => "method_call",
            ParseErrorKind::TemplateInExpression => "template_in_expression",
            ParseErrorKind::TooDeep => "too_deep",
            ParseErrorKind::TooManyNodes => "too_many_nodes",
            ParseErrorKind::InvalidReference => "invalid_reference",
            ParseErrorKind::DanglingTemplate => "dangling_template",
        }
    }
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One syntax error: a kind, the byte span it refers to, and a lower-case
/// message that says what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The category.
    pub kind: ParseErrorKind,
    /// Byte span in the parsed text (may be empty, e.g. at end of input).
    pub span: Span,
    /// Human-readable message, lower-case, quoting source text with backticks.
    pub message: String,
}

impl ParseError {
    /// Builds an error.
    pub fn new(kind: ParseErrorKind, span: Span, message: impl Into<String>) -> ParseError {
        ParseError {
            kind,
            span,
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParseError {}

/// At most this many errors are reported for one text; hostile input must
/// not turn into millions of messages.
pub(crate) const MAX_ERRORS: usize = 50;

/// Quotes a piece of source text for a message: backticks, truncated to a
/// readable length on a char boundary.
pub(crate) fn quote(text: &str) -> String {
    const MAX_CHARS: usize = 32;
    let mut out = String::from("`");
    let mut chars = text.chars();
    for c in chars.by_ref().take(MAX_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('`');
    out
}
