//! The expression syntax tree: [`Span`], [`Expr`], [`ExprKind`] and the
//! operator enums, plus a source-like [`Display`](std::fmt::Display) and a
//! debug [`Expr::dump`] used by golden tests.
//!
//! This module owns the *shape* of parsed expressions only. It never parses,
//! never type-checks and knows nothing of bindings, YAML or evaluation.
//!
//! Every tree produced by [`crate::parse_expr`] respects the limits of the
//! language (nesting depth 128, at most 4096 nodes). A tree can still be up
//! to 4096 nodes *tall* (`a + b + ...` and `x.a.b...` chains do not count
//! towards the depth limit), so everything here that visits a whole tree
//! (`Clone`, `PartialEq`, `Debug`, `Display`, `dump`, `walk`) uses an
//! explicit stack instead of recursion. Only the compiler-generated `Drop`
//! recurses, with tiny frames, at most 4096 deep.

use std::fmt;

/// A half-open byte range `start..end` into the parsed text.
///
/// Offsets are byte offsets (not characters, not UTF-16 units) and always lie
/// on `char` boundaries of the text that was parsed. Texts longer than
/// `u32::MAX` bytes are not supported: offsets beyond that saturate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    /// First byte of the range.
    pub start: u32,
    /// One past the last byte of the range.
    pub end: u32,
}

impl Span {
    /// Builds a span from `start..end`.
    pub const fn new(start: u32, end: u32) -> Span {
        Span { start, end }
    }

    /// Builds a span from `usize` byte offsets, saturating at `u32::MAX`.
    pub fn from_usize(start: usize, end: usize) -> Span {
        Span {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// The range as `usize` offsets, for slicing the source text.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// Number of bytes covered.
    pub fn len(self) -> u32 {
        self.end.saturating_sub(self.start)
    }

    /// True when the span covers no bytes.
    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }

    /// The smallest span covering both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// One expression node with the span of the source text it was parsed from.
///
/// `Clone`, `PartialEq`, `Debug` and `Display` are implemented without
/// recursion, because a valid tree can be up to 4096 nodes tall (a long
/// `a + b + ...` or `x.a.b...` chain). Equality compares spans too.
pub struct Expr {
    /// What the node is.
    pub kind: ExprKind,
    /// The whole source text of the node (for `Paren`, including the parentheses).
    pub span: Span,
}

/// The kinds of expression nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number literal (always finite and non-negative; `-1` is `Unary(Neg, 1)`).
    Number(f64),
    /// A string literal, already decoded.
    ///
    /// `\uXXXX` escapes are UTF-16 code units: a high surrogate escape followed
    /// directly by a low surrogate escape decodes to one `char`; any lone
    /// surrogate decodes to U+FFFD REPLACEMENT CHARACTER.
    String(String),
    /// A bare identifier (a binding such as `result`).
    Ident(String),
    /// `object.name`. The name may be any identifier token, including
    /// `true`, `false` and `null` (but never `in`).
    Member {
        /// The value whose member is read.
        object: Box<Expr>,
        /// The member name.
        name: String,
        /// Span of the name (without the dot).
        name_span: Span,
    },
    /// `object[index]` with a non-negative integral literal index.
    Index {
        /// The value that is indexed.
        object: Box<Expr>,
        /// The index value.
        index: u64,
        /// Span of the index literal (without the brackets).
        index_span: Span,
    },
    /// `callee(args...)`; only bare identifiers can be called.
    Call {
        /// The function name.
        callee: String,
        /// Span of the function name.
        callee_span: Span,
        /// The arguments, in order.
        args: Vec<Expr>,
    },
    /// A prefix operator applied to an operand.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        operand: Box<Expr>,
    },
    /// A binary operator.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Span of the operator token.
        op_span: Span,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// A parenthesised expression, kept so that spans and printing stay faithful.
    Paren(Box<Expr>),
    /// A lambda `param -> body`, only ever a call argument (language 1.1,
    /// X3; which calls take one is the checker's rule).
    Lambda {
        /// The parameter name.
        param: String,
        /// Span of the parameter name.
        param_span: Span,
        /// The body.
        body: Box<Expr>,
    },
}

/// Prefix operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

impl UnaryOp {
    /// The operator as written in source.
    pub fn as_str(self) -> &'static str {
        match self {
            UnaryOp::Not => "!",
            UnaryOp::Neg => "-",
        }
    }
}

/// Binary operators, lowest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `in`
    In,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl BinaryOp {
    /// The operator as written in source.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::In => "in",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
        }
    }

    /// Binding strength: 1 (`||`) to 5 (`*` `/`). All levels are left-associative.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::In => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div => 5,
        }
    }
}

impl fmt::Display for UnaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for BinaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Precedence of unary operators (above every binary level).
const UNARY_PREC: u8 = 6;
/// Precedence of postfix forms and primaries.
const POSTFIX_PREC: u8 = 7;

impl Expr {
    /// Builds a node.
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    fn precedence(&self) -> u8 {
        match &self.kind {
            ExprKind::Binary { op, .. } => op.precedence(),
            ExprKind::Unary { .. } => UNARY_PREC,
            ExprKind::Lambda { .. } => 0,
            _ => POSTFIX_PREC,
        }
    }

    /// The direct children of this node, in source order.
    pub fn children(&self) -> Vec<&Expr> {
        match &self.kind {
            ExprKind::Null
            | ExprKind::Bool(_)
            | ExprKind::Number(_)
            | ExprKind::String(_)
            | ExprKind::Ident(_) => Vec::new(),
            ExprKind::Member { object, .. } | ExprKind::Index { object, .. } => vec![object],
            ExprKind::Call { args, .. } => args.iter().collect(),
            ExprKind::Unary { operand, .. } => vec![operand],
            ExprKind::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            ExprKind::Paren(inner) => vec![inner],
            ExprKind::Lambda { body, .. } => vec![body],
        }
    }

    /// A multi-line debug tree with spans, one node per line, used by golden tests.
    pub fn dump(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let mut stack = vec![(self, 0usize)];
        while let Some((node, indent)) = stack.pop() {
            for _ in 0..indent {
                out.push_str("  ");
            }
            // Writing into a String cannot fail.
            let _ = writeln!(out, "{}", Head(node));
            stack.extend(node.children().into_iter().rev().map(|c| (c, indent + 1)));
        }
        out
    }

    /// Copies this node with new children (in `children()` order).
    fn rebuild(&self, children: Vec<Expr>) -> Expr {
        let span = self.span;
        let mut it = children.into_iter();
        // The caller always passes exactly `children().len()` nodes; the
        // placeholder only keeps this total without a panic path.
        let mut next = || Box::new(it.next().unwrap_or_else(|| Expr::new(ExprKind::Null, span)));
        let kind = match &self.kind {
            ExprKind::Null => ExprKind::Null,
            ExprKind::Bool(b) => ExprKind::Bool(*b),
            ExprKind::Number(n) => ExprKind::Number(*n),
            ExprKind::String(s) => ExprKind::String(s.clone()),
            ExprKind::Ident(s) => ExprKind::Ident(s.clone()),
            ExprKind::Member {
                name, name_span, ..
            } => ExprKind::Member {
                object: next(),
                name: name.clone(),
                name_span: *name_span,
            },
            ExprKind::Index {
                index, index_span, ..
            } => ExprKind::Index {
                object: next(),
                index: *index,
                index_span: *index_span,
            },
            ExprKind::Call {
                callee,
                callee_span,
                args,
            } => ExprKind::Call {
                callee: callee.clone(),
                callee_span: *callee_span,
                args: args.iter().map(|_| *next()).collect(),
            },
            ExprKind::Unary { op, .. } => ExprKind::Unary {
                op: *op,
                operand: next(),
            },
            ExprKind::Binary { op, op_span, .. } => {
                let lhs = next();
                let rhs = next();
                ExprKind::Binary {
                    op: *op,
                    op_span: *op_span,
                    lhs,
                    rhs,
                }
            }
            ExprKind::Paren(_) => ExprKind::Paren(next()),
            ExprKind::Lambda {
                param, param_span, ..
            } => ExprKind::Lambda {
                param: param.clone(),
                param_span: *param_span,
                body: next(),
            },
        };
        Expr::new(kind, span)
    }

    /// Compares everything but the children.
    fn shallow_eq(&self, other: &Expr) -> bool {
        if self.span != other.span {
            return false;
        }
        match (&self.kind, &other.kind) {
            (ExprKind::Null, ExprKind::Null) => true,
            (ExprKind::Bool(a), ExprKind::Bool(b)) => a == b,
            (ExprKind::Number(a), ExprKind::Number(b)) => a == b,
            (ExprKind::String(a), ExprKind::String(b))
            | (ExprKind::Ident(a), ExprKind::Ident(b)) => a == b,
            (
                ExprKind::Member {
                    name: a,
                    name_span: sa,
                    ..
                },
                ExprKind::Member {
                    name: b,
                    name_span: sb,
                    ..
                },
            ) => a == b && sa == sb,
            (
                ExprKind::Index {
                    index: a,
                    index_span: sa,
                    ..
                },
                ExprKind::Index {
                    index: b,
                    index_span: sb,
                    ..
                },
            ) => a == b && sa == sb,
            (
                ExprKind::Call {
                    callee: a,
                    callee_span: sa,
                    args: xa,
                },
                ExprKind::Call {
                    callee: b,
                    callee_span: sb,
                    args: xb,
                },
            ) => a == b && sa == sb && xa.len() == xb.len(),
            (ExprKind::Unary { op: a, .. }, ExprKind::Unary { op: b, .. }) => a == b,
            (
                ExprKind::Binary {
                    op: a, op_span: sa, ..
                },
                ExprKind::Binary {
                    op: b, op_span: sb, ..
                },
            ) => a == b && sa == sb,
            (ExprKind::Paren(_), ExprKind::Paren(_)) => true,
            (
                ExprKind::Lambda {
                    param: a,
                    param_span: sa,
                    ..
                },
                ExprKind::Lambda {
                    param: b,
                    param_span: sb,
                    ..
                },
            ) => a == b && sa == sb,
            _ => false,
        }
    }
}

impl Clone for Expr {
    fn clone(&self) -> Expr {
        // Post-order with an explicit stack: children are cloned first and
        // collected on `done`, then the parent takes them back off.
        let mut work: Vec<(&Expr, bool)> = vec![(self, false)];
        let mut done: Vec<Expr> = Vec::new();
        while let Some((node, expanded)) = work.pop() {
            if expanded {
                let n = node.children().len();
                let children = done.split_off(done.len().saturating_sub(n));
                done.push(node.rebuild(children));
            } else {
                work.push((node, true));
                work.extend(node.children().into_iter().rev().map(|c| (c, false)));
            }
        }
        done.pop()
            .unwrap_or_else(|| Expr::new(ExprKind::Null, self.span))
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Expr) -> bool {
        let mut stack = vec![(self, other)];
        while let Some((a, b)) = stack.pop() {
            if !a.shallow_eq(b) {
                return false;
            }
            let (ca, cb) = (a.children(), b.children());
            if ca.len() != cb.len() {
                return false;
            }
            stack.extend(ca.into_iter().zip(cb));
        }
        true
    }
}

/// One node's own data, for `dump` and `Debug`.
struct Head<'a>(&'a Expr);

impl fmt::Display for Head<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = self.0.span;
        match &self.0.kind {
            ExprKind::Null => write!(f, "Null @{span}"),
            ExprKind::Bool(b) => write!(f, "Bool {b} @{span}"),
            ExprKind::Number(n) => write!(f, "Number {} @{span}", NumberText(*n)),
            ExprKind::String(s) => write!(f, "String {s:?} @{span}"),
            ExprKind::Ident(name) => write!(f, "Ident {name} @{span}"),
            ExprKind::Member {
                name, name_span, ..
            } => write!(f, "Member .{name} @{span} (name @{name_span})"),
            ExprKind::Index {
                index, index_span, ..
            } => write!(f, "Index [{index}] @{span} (index @{index_span})"),
            ExprKind::Call {
                callee,
                callee_span,
                args,
            } => write!(
                f,
                "Call {callee} ({} args) @{span} (callee @{callee_span})",
                args.len()
            ),
            ExprKind::Unary { op, .. } => write!(f, "Unary {op:?} @{span}"),
            ExprKind::Binary { op, op_span, .. } => {
                write!(f, "Binary {op:?} @{span} (op @{op_span})")
            }
            ExprKind::Paren(_) => write!(f, "Paren @{span}"),
            ExprKind::Lambda {
                param, param_span, ..
            } => write!(f, "Lambda {param} @{span} (param @{param_span})"),
        }
    }
}

/// Compact one-line tree: `Binary Add @0..5 (op @2..3) [Ident a @0..1, Number 1 @4..5]`.
impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        enum Item<'a> {
            Node(&'a Expr),
            Text(&'static str),
        }
        let mut stack = vec![Item::Node(self)];
        while let Some(item) = stack.pop() {
            match item {
                Item::Text(t) => f.write_str(t)?,
                Item::Node(node) => {
                    write!(f, "{}", Head(node))?;
                    let children = node.children();
                    if !children.is_empty() {
                        f.write_str(" [")?;
                        stack.push(Item::Text("]"));
                        for (i, child) in children.into_iter().enumerate().rev() {
                            stack.push(Item::Node(child));
                            if i > 0 {
                                stack.push(Item::Text(", "));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Prints a number so that the lexer reads it back as the same value.
struct NumberText(f64);

impl fmt::Display for NumberText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let a = v.abs();
        if v == 0.0 || (1e-6..1e21).contains(&a) {
            // Plain decimal, shortest round-trip digits, no exponent.
            write!(f, "{v}")
        } else {
            // Exponent form such as `1e300` or `1.5e-7`.
            write!(f, "{v:?}")
        }
    }
}

/// Writes `s` as a double-quoted string literal the lexer decodes back to `s`.
fn write_string_literal(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    use std::fmt::Write as _;
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\u{8}' => f.write_str("\\b")?,
            '\u{c}' => f.write_str("\\f")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

/// Prints the expression in source form, with single spaces around binary
/// operators. Parentheses are printed where the tree has `Paren` nodes, and
/// also wherever a hand-built tree would otherwise re-parse differently.
/// For any tree returned by [`crate::parse_expr`], printing and re-parsing
/// yields the same tree (up to spans).
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        enum Item<'a> {
            /// A node printed in a context that needs at least this precedence.
            Node(&'a Expr, u8),
            Text(&'static str),
            Name(&'a str),
            Index(u64),
        }
        let mut stack = vec![Item::Node(self, 0)];
        while let Some(item) = stack.pop() {
            let (node, min_prec) = match item {
                Item::Text(t) => {
                    f.write_str(t)?;
                    continue;
                }
                Item::Name(n) => {
                    f.write_str(n)?;
                    continue;
                }
                Item::Index(i) => {
                    write!(f, "{i}")?;
                    continue;
                }
                Item::Node(node, min_prec) => (node, min_prec),
            };
            if node.precedence() < min_prec {
                f.write_str("(")?;
                stack.push(Item::Text(")"));
                stack.push(Item::Node(node, 0));
                continue;
            }
            // Items are pushed in reverse order of printing.
            match &node.kind {
                ExprKind::Null => f.write_str("null")?,
                ExprKind::Bool(b) => write!(f, "{b}")?,
                ExprKind::Number(n) => write!(f, "{}", NumberText(*n))?,
                ExprKind::String(s) => write_string_literal(f, s)?,
                ExprKind::Ident(name) => f.write_str(name)?,
                ExprKind::Member { object, name, .. } => {
                    stack.push(Item::Name(name));
                    stack.push(Item::Text("."));
                    stack.push(Item::Node(object, POSTFIX_PREC));
                }
                ExprKind::Index { object, index, .. } => {
                    stack.push(Item::Text("]"));
                    stack.push(Item::Index(*index));
                    stack.push(Item::Text("["));
                    stack.push(Item::Node(object, POSTFIX_PREC));
                }
                ExprKind::Call { callee, args, .. } => {
                    f.write_str(callee)?;
                    f.write_str("(")?;
                    stack.push(Item::Text(")"));
                    for (i, arg) in args.iter().enumerate().rev() {
                        stack.push(Item::Node(arg, 0));
                        if i > 0 {
                            stack.push(Item::Text(", "));
                        }
                    }
                }
                ExprKind::Unary { op, operand } => {
                    f.write_str(op.as_str())?;
                    stack.push(Item::Node(operand, UNARY_PREC));
                }
                ExprKind::Binary { op, lhs, rhs, .. } => {
                    let p = op.precedence();
                    // Left-associative: an equal-precedence right operand needs parentheses.
                    stack.push(Item::Node(rhs, p + 1));
                    stack.push(Item::Text(" "));
                    stack.push(Item::Text(op.as_str()));
                    stack.push(Item::Text(" "));
                    stack.push(Item::Node(lhs, p));
                }
                ExprKind::Paren(inner) => {
                    f.write_str("(")?;
                    stack.push(Item::Text(")"));
                    stack.push(Item::Node(inner, 0));
                }
                ExprKind::Lambda { param, body, .. } => {
                    f.write_str(param)?;
                    f.write_str(" -> ")?;
                    stack.push(Item::Node(body, 0));
                }
            }
        }
        Ok(())
    }
}
