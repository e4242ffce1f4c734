//! Property tests: the parsers never panic, every span is valid, and
//! printing a parsed expression re-parses to the same tree.

use proptest::prelude::*;
use stratum_grammar::{Expr, ExprKind, Piece, Span, parse_expr, parse_template, walk};

/// Checks that a span lies inside `text` on char boundaries.
fn span_ok(text: &str, span: Span) -> bool {
    let (s, e) = (span.start as usize, span.end as usize);
    s <= e && e <= text.len() && text.is_char_boundary(s) && text.is_char_boundary(e)
}

/// Every span stored in the tree.
fn tree_spans(expr: &Expr) -> Vec<Span> {
    let mut spans = Vec::new();
    walk(expr, &mut |node| {
        spans.push(node.span);
        match &node.kind {
            ExprKind::Member { name_span, .. } => spans.push(*name_span),
            ExprKind::Index { index_span, .. } => spans.push(*index_span),
            ExprKind::Call { callee_span, .. } => spans.push(*callee_span),
            ExprKind::Binary { op_span, .. } => spans.push(*op_span),
            _ => {}
        }
    });
    spans
}

/// The tree with spans erased, as a string.
fn shape(expr: &Expr) -> String {
    let mut out = String::new();
    walk(expr, &mut |node| {
        let head = match &node.kind {
            ExprKind::Null => "null".to_owned(),
            ExprKind::Bool(b) => b.to_string(),
            ExprKind::Number(n) => format!("n{n:?}"),
            ExprKind::String(s) => format!("s{s:?}"),
            ExprKind::Ident(i) => format!("i{i}"),
            ExprKind::Member { name, .. } => format!("m{name}"),
            ExprKind::Index { index, .. } => format!("x{index}"),
            ExprKind::Call { callee, args, .. } => format!("c{callee}/{}", args.len()),
            ExprKind::Unary { op, .. } => format!("u{op}"),
            ExprKind::Binary { op, .. } => format!("b{op}"),
            ExprKind::Paren(_) => "p".to_owned(),
            ExprKind::Lambda { param, .. } => format!("l{param}"),
        };
        out.push_str(&head);
        out.push(' ');
    });
    out
}

/// Soup of expression-ish fragments, good at reaching odd parser states.
fn token_soup() -> impl Strategy<Value = String> {
    let pieces = vec![
        "a",
        "result",
        "f",
        "(",
        ")",
        "!",
        "-",
        "+",
        "*",
        "/",
        "&&",
        "||",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "in",
        ".",
        "[",
        "]",
        ",",
        "0",
        "1",
        "2.5",
        "1e3",
        "'s'",
        "\"t\"",
        "true",
        "null",
        "__proto__",
        " ",
        "\n",
        "${",
        "}",
        "$",
        "{",
        "'",
        "\\",
        "é",
        "007",
        "1e400",
        "\u{2003}",
        "'\\u",
        "x.y",
        "len(",
        "[0]",
        "[-1]",
        "\t",
        "->",
        "p ->",
        "all(x, p -> ",
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..40).prop_map(|v| v.concat())
}

/// Syntactically valid expression source text.
fn valid_expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        "[a-z_][a-z0-9_]{0,3}".prop_filter("keyword", |s| !matches!(
            s.as_str(),
            "in" | "null" | "true" | "false"
        )),
        (0u32..100_000).prop_map(|n| n.to_string()),
        (0u32..1000, 0u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
        (1u32..9, 0i32..300).prop_map(|(a, e)| format!("{a}e{e}")),
        "[ -~é😀]{0,6}".prop_map(|s| format!("{s:?}")),
        "[a-z ]{0,4}".prop_map(|s| format!("'{s}'")),
    ];
    leaf.prop_recursive(6, 48, 4, |inner| {
        let ops = prop::sample::select(vec![
            "||", "&&", "==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/",
        ]);
        prop_oneof![
            (inner.clone(), ops, inner.clone()).prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            (prop::sample::select(vec!["!", "-", "- "]), inner.clone())
                .prop_map(|(op, a)| format!("{op}{a}")),
            inner.clone().prop_map(|a| format!("( {a} )")),
            (
                inner.clone(),
                // `in` is the one operator word that is never a member name
                "[a-z]{1,3}|true|null".prop_filter("`in` is an operator", |m| m != "in")
            )
                .prop_map(|(a, m)| format!("({a}).{m}")),
            (inner.clone(), 0u32..50).prop_map(|(a, i)| format!("({a})[{i}]")),
            (
                "[a-z]{1,4}".prop_filter("keyword", |f| !matches!(
                    f.as_str(),
                    "in" | "null" | "true" | "false"
                )),
                prop::collection::vec(inner.clone(), 0..3)
            )
                .prop_map(|(f, args)| format!("{f}({})", args.join(", "))),
            // X3: a lambda as the last argument
            (
                prop::sample::select(vec!["all", "any", "count", "filter", "map"]),
                inner.clone(),
                inner
            )
                .prop_map(|(f, a, b)| format!("{f}({a}, p -> {b})")),
        ]
    })
}

fn check_expr_spans(text: &str) -> Result<(), TestCaseError> {
    let (expr, errors) = parse_expr(text);
    prop_assert_eq!(expr.is_some(), errors.is_empty());
    for e in &errors {
        prop_assert!(
            span_ok(text, e.span),
            "bad error span {:?} in {:?}",
            e,
            text
        );
        prop_assert!(!e.message.is_empty());
    }
    if let Some(expr) = &expr {
        for span in tree_spans(expr) {
            prop_assert!(span_ok(text, span), "bad span {} in {:?}", span, text);
        }
    }
    Ok(())
}

fn check_round_trip(text: &str) -> Result<(), TestCaseError> {
    if let (Some(expr), _) = parse_expr(text) {
        let printed = expr.to_string();
        let (again, errors) = parse_expr(&printed);
        prop_assert!(
            errors.is_empty(),
            "{:?} printed as {:?}: {:?}",
            text,
            printed,
            errors
        );
        let again = again.expect("tree");
        prop_assert_eq!(
            shape(&again),
            shape(&expr),
            "{:?} printed as {:?}",
            text,
            printed
        );
        prop_assert_eq!(again.to_string(), printed);
    }
    Ok(())
}

fn check_template(text: &str) -> Result<(), TestCaseError> {
    let (template, errors) = parse_template(text);
    for e in &errors {
        prop_assert!(
            span_ok(text, e.span),
            "bad error span {:?} in {:?}",
            e,
            text
        );
    }
    // Pieces tile the text, in order.
    let mut at = 0u32;
    for piece in &template.pieces {
        let span = match piece {
            Piece::Text { text: t, span } => {
                prop_assert_eq!(&text[span.range()], t.as_str());
                *span
            }
            Piece::Ref(r) => {
                prop_assert!(span_ok(text, r.head_span));
                for seg in &r.path {
                    prop_assert!(span_ok(text, seg.span));
                }
                r.span
            }
        };
        prop_assert!(span_ok(text, span));
        prop_assert_eq!(span.start, at);
        at = span.end;
    }
    prop_assert_eq!(at as usize, text.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn expr_arbitrary_strings(text in any::<String>()) {
        check_expr_spans(&text)?;
        check_round_trip(&text)?;
    }

    #[test]
    fn expr_token_soup(text in token_soup()) {
        check_expr_spans(&text)?;
        check_round_trip(&text)?;
    }

    #[test]
    fn expr_valid_round_trips(text in valid_expr()) {
        let (expr, errors) = parse_expr(&text);
        prop_assert!(errors.is_empty(), "{:?}: {:?}", text, errors);
        prop_assert!(expr.is_some());
        check_expr_spans(&text)?;
        check_round_trip(&text)?;
    }

    #[test]
    fn template_arbitrary_strings(text in any::<String>()) {
        check_template(&text)?;
    }

    #[test]
    fn template_soup(text in prop::collection::vec(prop::sample::select(vec![
        "${", "}", "$", "{", "input", "item", "prev", "wave", ".output", ".", "[", "]", "0",
        "07", "a", "A", "-", "_", " ", "é", ".x", "[1]",
    ]), 0..24).prop_map(|v| v.concat())) {
        check_template(&text)?;
    }
}
