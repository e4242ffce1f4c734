//! `${...}` template references inside plain strings (language reference
//! §5.2, with decision C8: paths on `item` and `prev`).
//!
//! This module owns splitting a string into text and reference pieces and
//! classifying each reference (item, prev, input, step output, carry). It
//! never decides whether a reference is *allowed* where it appears, never
//! resolves names or types, and knows nothing of YAML: those are the
//! checker's job. It is a hand-written, non-recursive scanner.

use crate::ast::Span;
use crate::error::{MAX_ERRORS, ParseError, ParseErrorKind, quote};

/// A string split into literal text and references.
///
/// The pieces tile the input: concatenating the source text of every piece in
/// order gives back the whole string. An invalid or dangling `${...}` stays in
/// the text pieces (and is reported as an error).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    /// The pieces, in source order. Adjacent text is merged into one piece.
    pub pieces: Vec<Piece>,
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text, exactly as written.
    Text {
        /// The text.
        text: String,
        /// Where it is.
        span: Span,
    },
    /// A valid `${...}` reference.
    Ref(Reference),
}

/// A parsed `${...}` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// What the reference points at.
    pub kind: RefKind,
    /// The leading name: `item`, `prev`, `input`, the step id or the carry name.
    pub head: String,
    /// Span of `head`.
    pub head_span: Span,
    /// The path after the head; for [`RefKind::StepOutput`] the path after `.output`.
    pub path: Vec<PathSegment>,
    /// Span of the whole `${...}` token, braces included.
    pub span: Span,
}

/// The reference kinds of §5.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefKind {
    /// `${item}` or `${item.path}`: the current fanout element.
    Item,
    /// `${prev}` or `${prev.path}`: the previous fanout stage's output.
    Prev,
    /// `${input...}`: the flow input. An empty path or one starting with an
    /// index is still returned as `Input`; the checker reports it.
    Input,
    /// `${step.output...}`: a step's output.
    StepOutput,
    /// `${name...}`: a carry variable.
    Carry,
}

/// One step of a reference path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSegment {
    /// Field name or index.
    pub kind: SegmentKind,
    /// Span of the field name (without the `.`) or of the digits (without the brackets).
    pub span: Span,
}

/// A path step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentKind {
    /// `.name`
    Field(String),
    /// `[digits]` (leading zeros allowed).
    Index(u64),
}

impl Template {
    /// The reference when the whole string is exactly one `${...}` token
    /// (no surrounding text or whitespace).
    pub fn full_value(&self) -> Option<&Reference> {
        match self.pieces.as_slice() {
            [Piece::Ref(r)] => Some(r),
            _ => None,
        }
    }

    /// The valid references, in source order.
    pub fn references(&self) -> impl Iterator<Item = &Reference> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Ref(r) => Some(r),
            Piece::Text { .. } => None,
        })
    }
}

/// Splits `text` into pieces and parses every `${...}` token. See [`crate::parse_template`].
pub(crate) fn parse_template(text: &str) -> (Template, Vec<ParseError>) {
    let mut pieces = Vec::new();
    let mut errors = Vec::new();
    let mut text_start = 0;
    let mut pos = 0;
    while let Some(found) = text.get(pos..).and_then(|rest| rest.find("${")) {
        let open = pos + found;
        let body_start = open + 2;
        let Some(close) = text.get(body_start..).and_then(|rest| rest.find('}')) else {
            let span = Span::from_usize(open, text.len());
            errors.truncate(MAX_ERRORS - 1);
            errors.push(ParseError::new(
                ParseErrorKind::DanglingTemplate,
                span,
                format!(
                    "expected `}}` to close the reference {}, found end of text",
                    quote(text.get(open..).unwrap_or("${"))
                ),
            ));
            break;
        };
        let body_end = body_start + close;
        let token_end = body_end + 1;
        let token = text.get(open..token_end).unwrap_or("");
        let body = text.get(body_start..body_end).unwrap_or("");
        let result = if let Some(inner) = body.find("${") {
            let at = body_start + inner;
            Err(ParseError::new(
                ParseErrorKind::InvalidReference,
                Span::from_usize(at, at + 2),
                format!(
                    "invalid reference {}: references cannot be nested",
                    quote(token)
                ),
            ))
        } else {
            parse_body(body, body_start, token)
        };
        match result {
            Ok((kind, head, head_span, path)) => {
                push_text(&mut pieces, text, text_start, open);
                pieces.push(Piece::Ref(Reference {
                    kind,
                    head,
                    head_span,
                    path,
                    span: Span::from_usize(open, token_end),
                }));
                text_start = token_end;
            }
            Err(err) => {
                if errors.len() < MAX_ERRORS {
                    errors.push(err);
                }
            }
        }
        pos = token_end;
    }
    push_text(&mut pieces, text, text_start, text.len());
    (Template { pieces }, errors)
}

fn push_text(pieces: &mut Vec<Piece>, text: &str, start: usize, end: usize) {
    if start < end
        && let Some(slice) = text.get(start..end)
    {
        pieces.push(Piece::Text {
            text: slice.to_owned(),
            span: Span::from_usize(start, end),
        });
    }
}

type Parsed = (RefKind, String, Span, Vec<PathSegment>);

fn describe(rest: &str) -> String {
    match rest.chars().next() {
        None => String::from("`}`"),
        Some(' ') => String::from("a space"),
        Some(c) if c.is_whitespace() => String::from("whitespace"),
        Some(c) => quote(&c.to_string()),
    }
}

/// Parses a reference body that starts at byte `base` of the template.
fn parse_body(body: &str, base: usize, token: &str) -> Result<Parsed, ParseError> {
    let bytes = body.as_bytes();
    let error_at = |i: usize, expected: &str| {
        let rest = body.get(i..).unwrap_or("");
        let len = rest.chars().next().map_or(0, char::len_utf8);
        let span = if len == 0 {
            // At the closing brace.
            Span::from_usize(base + i, base + i + 1)
        } else {
            Span::from_usize(base + i, base + i + len)
        };
        ParseError::new(
            ParseErrorKind::InvalidReference,
            span,
            format!(
                "invalid reference {}: expected {expected}, found {}",
                quote(token),
                describe(rest)
            ),
        )
    };

    if !bytes.first().is_some_and(u8::is_ascii_lowercase) {
        return Err(error_at(
            0,
            "a lowercase name such as `input`, `item` or a step id",
        ));
    }
    let mut i = 1;
    while bytes
        .get(i)
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
    {
        i += 1;
    }
    let head = body.get(..i).unwrap_or("").to_owned();
    let head_span = Span::from_usize(base, base + i);

    let mut path = Vec::new();
    while let Some(&b) = bytes.get(i) {
        match b {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                if bytes
                    .get(j)
                    .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
                {
                    j += 1;
                    while bytes
                        .get(j)
                        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    {
                        j += 1;
                    }
                } else {
                    return Err(error_at(start, "a field name after `.`"));
                }
                path.push(PathSegment {
                    kind: SegmentKind::Field(body.get(start..j).unwrap_or("").to_owned()),
                    span: Span::from_usize(base + start, base + j),
                });
                i = j;
            }
            b'[' => {
                let start = i + 1;
                let mut j = start;
                while bytes.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
                if j == start {
                    return Err(error_at(start, "digits after `[`"));
                }
                if bytes.get(j) != Some(&b']') {
                    return Err(error_at(j, "`]`"));
                }
                let digits = body.get(start..j).unwrap_or("");
                let span = Span::from_usize(base + start, base + j);
                let Ok(index) = digits.parse::<u64>() else {
                    return Err(ParseError::new(
                        ParseErrorKind::InvalidReference,
                        span,
                        format!(
                            "invalid reference {}: index {} is too large",
                            quote(token),
                            quote(digits)
                        ),
                    ));
                };
                path.push(PathSegment {
                    kind: SegmentKind::Index(index),
                    span,
                });
                i = j + 1;
            }
            _ => return Err(error_at(i, "`.`, `[` or `}`")),
        }
    }

    let kind = match head.as_str() {
        "item" => RefKind::Item,
        "prev" => RefKind::Prev,
        "input" => RefKind::Input,
        _ => match path.first() {
            Some(PathSegment {
                kind: SegmentKind::Field(f),
                ..
            }) if f == "output" => {
                path.remove(0);
                RefKind::StepOutput
            }
            _ => RefKind::Carry,
        },
    };
    Ok((kind, head, head_span, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_ref(text: &str) -> Reference {
        let (t, e) = parse_template(text);
        assert!(e.is_empty(), "{text}: {e:?}");
        t.full_value()
            .cloned()
            .unwrap_or_else(|| panic!("not full-value: {text}"))
    }

    fn path(r: &Reference) -> Vec<String> {
        r.path
            .iter()
            .map(|s| match &s.kind {
                SegmentKind::Field(f) => format!(".{f}"),
                SegmentKind::Index(i) => format!("[{i}]"),
            })
            .collect()
    }

    fn one_err(text: &str) -> ParseError {
        let (_, e) = parse_template(text);
        assert_eq!(e.len(), 1, "{text}: {e:?}");
        e.into_iter().next().unwrap()
    }

    #[test]
    fn classification() {
        let r = one_ref("${item}");
        assert_eq!(
            (r.kind, r.head.as_str(), r.path.len()),
            (RefKind::Item, "item", 0)
        );
        let r = one_ref("${item.name[2]}");
        assert_eq!(r.kind, RefKind::Item);
        assert_eq!(path(&r), [".name", "[2]"]);
        let r = one_ref("${prev.x}");
        assert_eq!((r.kind, path(&r)), (RefKind::Prev, vec![".x".to_owned()]));
        let r = one_ref("${input.a.b[0]}");
        assert_eq!(
            (r.kind, path(&r)),
            (RefKind::Input, vec![".a".into(), ".b".into(), "[0]".into()])
        );
        assert_eq!(one_ref("${input}").kind, RefKind::Input);
        assert_eq!(one_ref("${input[0]}").kind, RefKind::Input);
        assert_eq!(one_ref("${input.output}").kind, RefKind::Input);
        let r = one_ref("${wave.output}");
        assert_eq!(
            (r.kind, r.head.as_str(), r.path.len()),
            (RefKind::StepOutput, "wave", 0)
        );
        let r = one_ref("${wave.output.tasks}");
        assert_eq!(
            (r.kind, path(&r)),
            (RefKind::StepOutput, vec![".tasks".to_owned()])
        );
        let r = one_ref("${wave.output[0]}");
        assert_eq!(
            (r.kind, path(&r)),
            (RefKind::StepOutput, vec!["[0]".to_owned()])
        );
        let r = one_ref("${my-step_2.output}");
        assert_eq!(
            (r.kind, r.head.as_str()),
            (RefKind::StepOutput, "my-step_2")
        );
        for carry in [
            "${wave}",
            "${wave.outputs}",
            "${wave.outputValue}",
            "${wave[0]}",
            "${build.out}",
        ] {
            assert_eq!(one_ref(carry).kind, RefKind::Carry, "{carry}");
        }
        let r = one_ref("${wave.outputs.x}");
        assert_eq!(path(&r), [".outputs", ".x"]);
        let r = one_ref("${a[007]}");
        assert_eq!(path(&r), ["[7]"]);
    }

    #[test]
    fn spans() {
        let (t, e) = parse_template("ab ${step.output.x[12]} c");
        assert!(e.is_empty());
        assert_eq!(t.pieces.len(), 3);
        assert_eq!(
            t.pieces[0],
            Piece::Text {
                text: "ab ".into(),
                span: Span::new(0, 3)
            }
        );
        let Piece::Ref(r) = &t.pieces[1] else {
            panic!()
        };
        assert_eq!(r.span, Span::new(3, 23));
        assert_eq!(r.head_span, Span::new(5, 9));
        assert_eq!(r.path[0].span, Span::new(17, 18));
        assert_eq!(r.path[1].span, Span::new(19, 21));
        assert_eq!(
            t.pieces[2],
            Piece::Text {
                text: " c".into(),
                span: Span::new(23, 25)
            }
        );
        assert!(t.full_value().is_none());
        assert_eq!(t.references().count(), 1);
    }

    #[test]
    fn plain_text_and_stray_characters() {
        for text in [
            "",
            "plain",
            "a } b { c $ d",
            "$",
            "$$",
            "{}",
            "$ {x}",
            "}${input.a}",
        ] {
            let (t, e) = parse_template(text);
            assert!(e.is_empty(), "{text}: {e:?}");
            let joined: String = t
                .pieces
                .iter()
                .map(|p| match p {
                    Piece::Text { text, .. } => text.clone(),
                    Piece::Ref(r) => text[r.span.range()].to_owned(),
                })
                .collect();
            assert_eq!(joined, text);
        }
        let (t, _) = parse_template("");
        assert!(t.pieces.is_empty());
        let (t, _) = parse_template("$${input.a}");
        assert_eq!(t.references().count(), 1);
    }

    #[test]
    fn full_value() {
        assert!(parse_template("${a.output}").0.full_value().is_some());
        assert!(parse_template(" ${a.output}").0.full_value().is_none());
        assert!(parse_template("${a.output} ").0.full_value().is_none());
        assert!(
            parse_template("${a.output}${b.output}")
                .0
                .full_value()
                .is_none()
        );
    }

    #[test]
    fn invalid_bodies() {
        for (text, start, end) in [
            ("${}", 2, 3),
            ("${ input.x }", 2, 3),
            ("${input.x }", 9, 10),
            ("${Foo.output}", 2, 3),
            ("${input.bad-name}", 11, 12),
            ("${input.}", 8, 9),
            ("${input.1a}", 8, 9),
            ("${a[]}", 4, 5),
            ("${a[1}", 5, 6),
            ("${a[x]}", 4, 5),
            ("${a..b}", 4, 5),
            ("${a.b!}", 5, 6),
            ("x ${é}", 4, 6),
            ("${a[99999999999999999999999]}", 4, 27),
        ] {
            let e = one_err(text);
            assert_eq!(e.kind, ParseErrorKind::InvalidReference, "{text}");
            assert_eq!(e.span, Span::new(start, end), "{text}: {}", e.message);
            assert!(
                e.message.starts_with("invalid reference `"),
                "{}",
                e.message
            );
        }
        assert!(one_err("${ input.x }").message.contains("found a space"));
        // invalid tokens stay text
        let (t, _) = parse_template("a ${Foo} b");
        assert_eq!(t.pieces.len(), 1);
        assert_eq!(t.references().count(), 0);
    }

    #[test]
    fn nested_and_dangling() {
        let e = one_err("${${input.x}}");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::InvalidReference, Span::new(2, 4))
        );
        assert!(e.message.contains("nested"));
        let e = one_err("${missing");
        assert_eq!(
            (e.kind, e.span),
            (ParseErrorKind::DanglingTemplate, Span::new(0, 9))
        );
        let (t, e) = parse_template("${input.a} and ${");
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].kind, e[0].span),
            (ParseErrorKind::DanglingTemplate, Span::new(15, 17))
        );
        assert_eq!(t.references().count(), 1);
        // several errors are all reported
        let (_, e) = parse_template("${A} ${b.} ${");
        assert_eq!(e.len(), 3);
    }
}
