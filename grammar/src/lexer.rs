//! The expression lexer (language reference §7.1), built on logos.
//!
//! This module owns the token set and the exact lexical rules: string
//! literals and their escapes, number literals, ASCII identifiers, keywords,
//! operators and punctuation, and the dedicated `${...}` error (decision C3).
//! It never builds syntax trees, never recurses and knows nothing of YAML,
//! templates or bindings.

use logos::Logos;

use crate::ast::Span;
use crate::error::{MAX_ERRORS, ParseError, ParseErrorKind, quote};

/// A lexing failure, with offsets relative to the start of the failing token.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum LexError {
    /// No token starts with this character.
    #[default]
    UnexpectedChar,
    /// A string literal ran to the end of the text.
    UnterminatedString,
    /// A bad escape at `start..end` (relative to the token).
    InvalidEscape { start: usize, end: usize },
    /// A raw control character at `start..end` (relative to the token).
    ControlChar { start: usize, end: usize },
    /// A malformed number (leading zero, incomplete exponent).
    MalformedNumber,
    /// A number literal that does not fit a finite double.
    NonFiniteNumber,
    /// `${...}` in an expression.
    Template,
}

/// Expression tokens.
#[derive(Logos, Debug, Clone, PartialEq)]
#[logos(error = LexError)]
#[logos(skip r"\s+")]
pub(crate) enum Token {
    #[token("null")]
    Null,
    #[token("true")]
    True,
    #[token("false")]
    False,
    #[token("in")]
    In,
    #[regex("[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice().to_owned())]
    Ident(String),
    #[regex(r"(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", lex_number)]
    Number(f64),
    #[token("\"", |lex| lex_string(lex, '"'))]
    #[token("'", |lex| lex_string(lex, '\''))]
    Str(String),
    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<=")]
    Le,
    #[token(">=")]
    Ge,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("<")]
    Lt,
    #[token(">")]
    Gt,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    /// `->` between a lambda's parameter and its body (language 1.1, X3).
    #[token("->")]
    Arrow,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("!")]
    Bang,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token(".")]
    Dot,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token(",")]
    Comma,
    /// Never produced: `${...}` always lexes as [`LexError::Template`].
    #[regex(r"\$\{[^}]*\}?", template_error)]
    Template,
}

impl Token {
    /// True for tokens that can end an operand; used by the limit scanner
    /// to tell prefix `-` from infix `-`.
    pub(crate) fn ends_operand(&self) -> bool {
        matches!(
            self,
            Token::Null
                | Token::True
                | Token::False
                | Token::Ident(_)
                | Token::Number(_)
                | Token::Str(_)
                | Token::RParen
                | Token::RBracket
        )
    }

    /// True for binary operators (`-` included: callers decide prefix/infix).
    pub(crate) fn is_binary_operator(&self) -> bool {
        matches!(
            self,
            Token::EqEq
                | Token::NotEq
                | Token::Le
                | Token::Ge
                | Token::AndAnd
                | Token::OrOr
                | Token::Lt
                | Token::Gt
                | Token::Plus
                | Token::Minus
                | Token::Star
                | Token::Slash
                | Token::In
        )
    }
}

fn template_error(_: &mut logos::Lexer<'_, Token>) -> Result<(), LexError> {
    Err(LexError::Template)
}

fn lex_number(lex: &mut logos::Lexer<'_, Token>) -> Result<f64, LexError> {
    // `007`, `01`: a number may not run straight into more digits.
    // `1e`, `1e+`, `2E-x`: an exponent marker without digits.
    let rest = lex.remainder().as_bytes();
    let malformed = matches!(rest.first(), Some(b'0'..=b'9' | b'e' | b'E'));
    if malformed {
        let mut n = 1;
        if matches!(rest.first(), Some(b'e' | b'E')) && matches!(rest.get(1), Some(b'+' | b'-')) {
            n = 2;
        }
        while rest
            .get(n)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            n += 1;
        }
        lex.bump(n);
        return Err(LexError::MalformedNumber);
    }
    match lex.slice().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(LexError::NonFiniteNumber),
    }
}

/// Accumulates decoded string contents, pairing UTF-16 surrogate escapes.
struct Utf16Builder {
    out: String,
    pending_high: Option<u16>,
}

impl Utf16Builder {
    fn flush(&mut self) {
        if self.pending_high.take().is_some() {
            self.out.push(char::REPLACEMENT_CHARACTER);
        }
    }

    fn push_char(&mut self, c: char) {
        self.flush();
        self.out.push(c);
    }

    fn push_unit(&mut self, unit: u16) {
        match unit {
            0xD800..=0xDBFF => {
                self.flush();
                self.pending_high = Some(unit);
            }
            0xDC00..=0xDFFF => match self.pending_high.take() {
                Some(high) => {
                    let code =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                    self.out
                        .push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                None => self.out.push(char::REPLACEMENT_CHARACTER),
            },
            _ => {
                self.flush();
                self.out
                    .push(char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
        }
    }
}

fn lex_string(lex: &mut logos::Lexer<'_, Token>, quote_char: char) -> Result<String, LexError> {
    let rest = lex.remainder();
    let mut buf = Utf16Builder {
        out: String::new(),
        pending_high: None,
    };
    let mut first_error: Option<LexError> = None;
    // Offsets in `rest` are shifted by 1 (the opening quote) to be token-relative.
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == quote_char {
            lex.bump(i + c.len_utf8());
            buf.flush();
            return match first_error {
                Some(e) => Err(e),
                None => Ok(buf.out),
            };
        }
        if c == '\\' {
            let decoded = match chars.next() {
                Some((_, '"')) => Some('"'),
                Some((_, '\'')) => Some('\''),
                Some((_, '\\')) => Some('\\'),
                Some((_, '/')) => Some('/'),
                Some((_, 'b')) => Some('\u{8}'),
                Some((_, 'f')) => Some('\u{c}'),
                Some((_, 'n')) => Some('\n'),
                Some((_, 'r')) => Some('\r'),
                Some((_, 't')) => Some('\t'),
                Some((j, 'u')) => {
                    let hex = rest
                        .get(j + 1..j + 5)
                        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
                    match hex.and_then(|h| u16::from_str_radix(h, 16).ok()) {
                        Some(unit) => {
                            for _ in 0..4 {
                                chars.next();
                            }
                            buf.push_unit(unit);
                        }
                        None => {
                            // Cover `\u` plus whatever hex digits follow.
                            let mut end = j + 1;
                            while end < j + 5
                                && rest.as_bytes().get(end).is_some_and(u8::is_ascii_hexdigit)
                            {
                                end += 1;
                            }
                            first_error.get_or_insert(LexError::InvalidEscape {
                                start: i + 1,
                                end: end + 1,
                            });
                        }
                    }
                    None
                }
                Some((j, other)) => {
                    // The escape consumes `other` (even a quote); keep scanning.
                    first_error.get_or_insert(LexError::InvalidEscape {
                        start: i + 1,
                        end: j + 1 + other.len_utf8(),
                    });
                    None
                }
                None => None, // runs into the end: unterminated below
            };
            if let Some(d) = decoded {
                buf.push_char(d);
            }
            continue;
        }
        if (c as u32) < 0x20 {
            first_error.get_or_insert(LexError::ControlChar {
                start: i + 1,
                end: i + 1 + c.len_utf8(),
            });
        }
        buf.push_char(c);
    }
    lex.bump(rest.len());
    Err(LexError::UnterminatedString)
}

/// A token with its byte range.
pub(crate) type Spanned = (usize, Token, usize);

/// Splits `text` into tokens. Lexical errors are reported (up to
/// `MAX_ERRORS`, then lexing stops); erroneous tokens are dropped from the
/// token list.
pub(crate) fn lex(text: &str) -> (Vec<Spanned>, Vec<ParseError>) {
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    let mut lexer = Token::lexer(text);
    while let Some(result) = lexer.next() {
        let range = lexer.span();
        match result {
            Ok(tok) => tokens.push((range.start, tok, range.end)),
            Err(err) => {
                errors.push(lex_error(text, range, err));
                if errors.len() >= MAX_ERRORS {
                    break;
                }
            }
        }
    }
    (tokens, errors)
}

fn lex_error(text: &str, range: std::ops::Range<usize>, err: LexError) -> ParseError {
    let slice = text.get(range.clone()).unwrap_or("");
    let whole = Span::from_usize(range.start, range.end);
    let rel = |start: usize, end: usize| Span::from_usize(range.start + start, range.start + end);
    match err {
        LexError::UnexpectedChar => {
            // Cover exactly one character (logos may stop inside a multi-byte one).
            let c = text.get(range.start..).and_then(|s| s.chars().next());
            let end = c.map_or(range.end, |c| range.start + c.len_utf8());
            let shown = c.map(String::from).unwrap_or_default();
            let hint = match c {
                Some('=') => "; use `==` to compare",
                Some('&') => "; use `&&` for logical and",
                Some('|') => "; use `||` for logical or",
                Some('$') => "; `$` can only appear inside a string",
                _ => "",
            };
            ParseError::new(
                ParseErrorKind::UnexpectedChar,
                Span::from_usize(range.start, end),
                format!("unexpected character {}{hint}", quote(&shown)),
            )
        }
        LexError::UnterminatedString => ParseError::new(
            ParseErrorKind::UnterminatedString,
            whole,
            format!(
                "unterminated string: expected a closing {} before the end of the expression",
                quote(slice.get(..1).unwrap_or("'"))
            ),
        ),
        LexError::InvalidEscape { start, end } => {
            let esc = slice.get(start..end).unwrap_or("\\");
            ParseError::new(
                ParseErrorKind::InvalidEscape,
                rel(start, end),
                format!(
                    "invalid escape {} in string: expected one of `\\\"` `\\'` `\\\\` `\\/` `\\b` `\\f` `\\n` `\\r` `\\t` or `\\u` followed by 4 hex digits",
                    quote(esc)
                ),
            )
        }
        LexError::ControlChar { start, end } => {
            let c = slice.get(start..end).unwrap_or("");
            let code = c.chars().next().map_or(0, u32::from);
            ParseError::new(
                ParseErrorKind::ControlCharInString,
                rel(start, end),
                format!(
                    "control character U+{code:04X} is not allowed in a string: write it as an escape such as `\\n`, `\\t` or `\\u{code:04x}`"
                ),
            )
        }
        LexError::MalformedNumber => ParseError::new(
            ParseErrorKind::InvalidNumber,
            whole,
            format!(
                "invalid number {}: expected `0` or digits not starting with `0`, an optional `.digits` part and an optional exponent such as `e10`",
                quote(slice)
            ),
        ),
        LexError::NonFiniteNumber => ParseError::new(
            ParseErrorKind::InvalidNumber,
            whole,
            format!("number {} is too large", quote(slice)),
        ),
        LexError::Template => ParseError::new(
            ParseErrorKind::TemplateInExpression,
            whole,
            format!(
                "template reference {} cannot be used inside an expression; use the expression form instead",
                quote(slice)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<Token> {
        let (t, e) = lex(text);
        assert!(e.is_empty(), "unexpected errors for {text:?}: {e:?}");
        t.into_iter().map(|(_, t, _)| t).collect()
    }

    fn err(text: &str) -> ParseError {
        let (_, e) = lex(text);
        assert_eq!(e.len(), 1, "expected one error for {text:?}: {e:?}");
        e.into_iter().next().unwrap()
    }

    fn str_value(text: &str) -> String {
        match toks(text).as_slice() {
            [Token::Str(s)] => s.clone(),
            other => panic!("not a single string: {other:?}"),
        }
    }

    #[test]
    fn keywords_and_identifiers() {
        assert_eq!(
            toks("null true false in _x a1 inx nulls True"),
            vec![
                Token::Null,
                Token::True,
                Token::False,
                Token::In,
                Token::Ident("_x".into()),
                Token::Ident("a1".into()),
                Token::Ident("inx".into()),
                Token::Ident("nulls".into()),
                Token::Ident("True".into()),
            ]
        );
    }

    #[test]
    fn operators_longest_match() {
        assert_eq!(
            toks("== != <= >= && || < > + - * / ! ( ) . [ ] ,"),
            vec![
                Token::EqEq,
                Token::NotEq,
                Token::Le,
                Token::Ge,
                Token::AndAnd,
                Token::OrOr,
                Token::Lt,
                Token::Gt,
                Token::Plus,
                Token::Minus,
                Token::Star,
                Token::Slash,
                Token::Bang,
                Token::LParen,
                Token::RParen,
                Token::Dot,
                Token::LBracket,
                Token::RBracket,
                Token::Comma,
            ]
        );
        assert_eq!(
            toks("!!=<<="),
            vec![Token::Bang, Token::NotEq, Token::Lt, Token::Le]
        );
        assert_eq!(
            toks("p->q - >"),
            vec![
                Token::Ident("p".into()),
                Token::Arrow,
                Token::Ident("q".into()),
                Token::Minus,
                Token::Gt,
            ]
        );
        assert_eq!(
            toks("--1"),
            vec![Token::Minus, Token::Minus, Token::Number(1.0)]
        );
    }

    #[test]
    fn unicode_whitespace_is_skipped() {
        let (t, e) = lex("a\u{00A0}\u{2003}\n\r\t\u{3000}b\u{2028}");
        assert!(e.is_empty());
        assert_eq!(t[0], (0, Token::Ident("a".into()), 1));
        assert_eq!(t[1].1, Token::Ident("b".into()));
        assert_eq!(t[1].0, "a\u{00A0}\u{2003}\n\r\t\u{3000}".len());
    }

    #[test]
    fn numbers() {
        assert_eq!(toks("0"), vec![Token::Number(0.0)]);
        assert_eq!(toks("42"), vec![Token::Number(42.0)]);
        assert_eq!(toks("0.5"), vec![Token::Number(0.5)]);
        assert_eq!(toks("1.25e2"), vec![Token::Number(125.0)]);
        assert_eq!(toks("1E+2"), vec![Token::Number(100.0)]);
        assert_eq!(toks("5e-1"), vec![Token::Number(0.5)]);
        assert_eq!(toks("0e0"), vec![Token::Number(0.0)]);
        assert_eq!(toks("1e-400"), vec![Token::Number(0.0)]);
        // `1.e5` is member access `.e5` on `1`.
        assert_eq!(
            toks("1.e5"),
            vec![Token::Number(1.0), Token::Dot, Token::Ident("e5".into())]
        );
        // no leading dot, no trailing dot, no sign, no hex
        assert_eq!(toks(".5"), vec![Token::Dot, Token::Number(5.0)]);
        assert_eq!(toks("1."), vec![Token::Number(1.0), Token::Dot]);
        assert_eq!(toks("-1"), vec![Token::Minus, Token::Number(1.0)]);
        assert_eq!(toks("+1"), vec![Token::Plus, Token::Number(1.0)]);
        assert_eq!(
            toks("0x1"),
            vec![Token::Number(0.0), Token::Ident("x1".into())]
        );
    }

    #[test]
    fn number_errors() {
        let e = err("007");
        assert_eq!(e.kind, ParseErrorKind::InvalidNumber);
        assert_eq!(e.span, Span::new(0, 3));
        assert!(e.message.contains("`007`"), "{}", e.message);
        let e = err("x + 01");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidNumber, Span::new(4, 6))
        );
        let e = err("1e");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidNumber, Span::new(0, 2))
        );
        let e = err("1e+ 2");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidNumber, Span::new(0, 3))
        );
        let e = err("1.5ex");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidNumber, Span::new(0, 5))
        );
        let e = err("a == 1e400");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidNumber, Span::new(5, 10))
        );
        assert!(e.message.contains("too large"));
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(str_value("'abc'"), "abc");
        assert_eq!(str_value("\"a'b\""), "a'b");
        assert_eq!(str_value("'a\"b'"), "a\"b");
        assert_eq!(
            str_value(r#""\" \' \\ \/ \b \f \n \r \t""#),
            "\" ' \\ / \u{8} \u{c} \n \r \t"
        );
        assert_eq!(str_value(r"'\u0041\u00e9\u20AC'"), "Aé€");
        assert_eq!(str_value("'é😀'"), "é😀");
        assert_eq!(str_value("''"), "");
        assert_eq!(str_value("'\u{7f}'"), "\u{7f}");
    }

    #[test]
    fn surrogates() {
        assert_eq!(str_value(r"'\ud83d\ude00'"), "😀");
        assert_eq!(str_value(r"'\ud83d'"), "\u{fffd}");
        assert_eq!(str_value(r"'\ude00'"), "\u{fffd}");
        assert_eq!(str_value(r"'\ud83dx'"), "\u{fffd}x");
        assert_eq!(str_value(r"'\ud83d\ud83d\ude00'"), "\u{fffd}😀");
        assert_eq!(str_value(r"'\ude00\ud83d'"), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn string_errors() {
        let e = err("'abc");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::UnterminatedString, Span::new(0, 4))
        );
        let e = err("x == \"abc\\\"");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::UnterminatedString, Span::new(5, 11))
        );
        let e = err(r"'a\x'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidEscape, Span::new(2, 4))
        );
        assert!(e.message.contains(r"`\x`"), "{}", e.message);
        let e = err(r"'a\u12g4'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidEscape, Span::new(2, 6))
        );
        let e = err(r"'\U0041'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidEscape, Span::new(1, 3))
        );
        let e = err(r"'\é'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidEscape, Span::new(1, 4))
        );
        let e = err("'a\tb'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::ControlCharInString, Span::new(2, 3))
        );
        let e = err("'a\nb'");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::ControlCharInString, Span::new(2, 3))
        );
        assert!(e.message.contains("U+000A"));
        let e = err("'\u{0}'");
        assert_eq!(e.kind, ParseErrorKind::ControlCharInString);
        // lexing continues after a bad string
        let (t, e) = lex(r"'\q' + 1");
        assert_eq!(e.len(), 1);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn unexpected_chars() {
        for (text, start, end) in [
            ("$", 0, 1),
            ("a { b", 2, 3),
            ("}", 0, 1),
            ("?", 0, 1),
            ("%", 0, 1),
            ("a = b", 2, 3),
            (":", 0, 1),
            ("a & b", 2, 3),
            ("a | b", 2, 3),
            ("é", 0, 2),
            ("x.日本", 2, 5),
        ] {
            let (_, errs) = lex(text);
            let e = &errs[0];
            assert_eq!(e.kind, ParseErrorKind::UnexpectedChar, "{text}");
            assert_eq!(e.span, Span::new(start, end), "{text}");
            assert!(
                e.message.starts_with("unexpected character `"),
                "{}",
                e.message
            );
        }
        assert!(err("a = b").message.contains("`==`"));
        let (t, errs) = lex("a & b");
        assert_eq!(errs.len(), 1);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn template_in_expression() {
        let e = err("${a.output} == 1 && x");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::TemplateInExpression, Span::new(0, 11))
        );
        assert!(e.message.contains("`${a.output}`"));
        let e = err("x && ${a.b");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::TemplateInExpression, Span::new(5, 10))
        );
        let e = err("${}");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::TemplateInExpression, Span::new(0, 3))
        );
        let (_, errs) = lex("$ {");
        assert_eq!(errs.len(), 2);
        assert!(
            errs.iter()
                .all(|e| e.kind == ParseErrorKind::UnexpectedChar)
        );
    }
}
