//! Unit tests for the expression parser: precedence, associativity, the
//! postfix rules, every error kind and the limits.

use crate::{
    BinaryOp, Expr, ExprKind, ParseError, ParseErrorKind, Span, UnaryOp, parse_expr, walk,
};

fn ok(text: &str) -> Expr {
    let (expr, errors) = parse_expr(text);
    assert!(errors.is_empty(), "{text}: {errors:?}");
    expr.unwrap_or_else(|| panic!("no tree for {text}"))
}

/// Fully parenthesised form: shows the tree shape in one line.
fn shape(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Null => "null".into(),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Number(n) => n.to_string(),
        ExprKind::String(s) => format!("{s:?}"),
        ExprKind::Ident(n) => n.clone(),
        ExprKind::Member { object, name, .. } => format!("{}.{name}", shape(object)),
        ExprKind::Index { object, index, .. } => format!("{}[{index}]", shape(object)),
        ExprKind::Call { callee, args, .. } => {
            let args: Vec<String> = args.iter().map(shape).collect();
            format!("{callee}({})", args.join(", "))
        }
        ExprKind::Unary { op, operand } => format!("({op}{})", shape(operand)),
        ExprKind::Binary { op, lhs, rhs, .. } => {
            format!("({} {op} {})", shape(lhs), shape(rhs))
        }
        ExprKind::Paren(inner) => format!("[{}]", shape(inner)),
        ExprKind::Lambda { param, body, .. } => format!("{{{param} -> {}}}", shape(body)),
    }
}

fn s(text: &str) -> String {
    shape(&ok(text))
}

fn errs(text: &str) -> Vec<ParseError> {
    let (expr, errors) = parse_expr(text);
    assert!(expr.is_none(), "{text} should fail");
    assert!(!errors.is_empty(), "{text} should report errors");
    errors
}

fn first_err(text: &str) -> (ParseErrorKind, Span, String) {
    let e = errs(text).remove(0);
    (e.kind, e.span, e.message)
}

#[test]
fn literals() {
    assert_eq!(ok("null").kind, ExprKind::Null);
    assert_eq!(ok("true").kind, ExprKind::Bool(true));
    assert_eq!(ok("false").kind, ExprKind::Bool(false));
    assert_eq!(ok("2.5e1").kind, ExprKind::Number(25.0));
    assert_eq!(ok("'x'").kind, ExprKind::String("x".into()));
    assert_eq!(ok("result").kind, ExprKind::Ident("result".into()));
    assert_eq!(ok("  x  ").span, Span::new(2, 3));
}

#[test]
fn precedence_levels() {
    // or < and
    assert_eq!(s("a || b && c"), "(a || (b && c))");
    assert_eq!(s("a && b || c"), "((a && b) || c)");
    // and < cmp
    assert_eq!(s("a == b && c != d"), "((a == b) && (c != d))");
    // cmp < add
    assert_eq!(s("a + 1 < b - 2"), "((a + 1) < (b - 2))");
    assert_eq!(s("'a' in x + y"), "(\"a\" in (x + y))");
    // add < mul
    assert_eq!(s("a + b * c - d / e"), "((a + (b * c)) - (d / e))");
    // mul < unary
    assert_eq!(s("-a * !b"), "((-a) * (!b))");
    // unary < postfix
    assert_eq!(s("-x.y"), "(-x.y)");
    assert_eq!(s("!a in b"), "((!a) in b)");
    assert_eq!(s("-a[0]"), "(-a[0])");
    assert_eq!(s("!f(x)"), "(!f(x))");
    // postfix < primary / parentheses
    assert_eq!(s("(a + b) * c"), "([(a + b)] * c)");
    assert_eq!(s("(a).b"), "[a].b");
    assert_eq!(s("'s'.length"), "\"s\".length");
}

#[test]
fn left_associativity_and_chaining() {
    assert_eq!(s("a - b - c"), "((a - b) - c)");
    assert_eq!(s("a / b / c"), "((a / b) / c)");
    assert_eq!(s("a || b || c"), "((a || b) || c)");
    assert_eq!(s("a && b && c"), "((a && b) && c)");
    assert_eq!(s("1 < 2 == true"), "((1 < 2) == true)");
    assert_eq!(s("1 < 2 < 3"), "((1 < 2) < 3)");
    assert_eq!(s("a in b in c"), "((a in b) in c)");
    assert_eq!(s("a <= b >= c > d"), "(((a <= b) >= c) > d)");
}

#[test]
fn every_binary_operator() {
    for (text, op) in [
        ("a || b", BinaryOp::Or),
        ("a && b", BinaryOp::And),
        ("a == b", BinaryOp::Eq),
        ("a != b", BinaryOp::Ne),
        ("a < b", BinaryOp::Lt),
        ("a <= b", BinaryOp::Le),
        ("a > b", BinaryOp::Gt),
        ("a >= b", BinaryOp::Ge),
        ("a in b", BinaryOp::In),
        ("a + b", BinaryOp::Add),
        ("a - b", BinaryOp::Sub),
        ("a * b", BinaryOp::Mul),
        ("a / b", BinaryOp::Div),
    ] {
        let e = ok(text);
        let ExprKind::Binary {
            op: got, op_span, ..
        } = e.kind
        else {
            panic!("{text}")
        };
        assert_eq!(got, op);
        assert_eq!(&text[op_span.range()], op.as_str());
        assert_eq!(e.span, Span::new(0, text.len() as u32));
    }
}

#[test]
fn unary_operators() {
    assert_eq!(s("--x"), "(-(-x))");
    assert_eq!(s("!!x"), "(!(!x))");
    assert_eq!(s("!-x"), "(!(-x))");
    assert_eq!(s("a - -b"), "(a - (-b))");
    assert_eq!(s("a--b"), "(a - (-b))");
    let e = ok("- 1");
    assert_eq!(e.span, Span::new(0, 3));
    assert!(matches!(
        e.kind,
        ExprKind::Unary {
            op: UnaryOp::Neg,
            ..
        }
    ));
    assert_eq!(UnaryOp::Not.as_str(), "!");
}

#[test]
fn postfix_forms_and_spans() {
    let e = ok("result.build.files[2]");
    assert_eq!(e.span, Span::new(0, 21));
    let ExprKind::Index {
        object,
        index,
        index_span,
    } = e.kind
    else {
        panic!()
    };
    assert_eq!((index, index_span), (2, Span::new(19, 20)));
    let ExprKind::Member {
        name, name_span, ..
    } = object.kind
    else {
        panic!()
    };
    assert_eq!((name.as_str(), name_span), ("files", Span::new(13, 18)));
    assert_eq!(object.span, Span::new(0, 18));

    assert_eq!(s("x.true.false.null"), "x.true.false.null");
    assert_eq!(s("x[1.0]"), "x[1]");
    assert_eq!(s("x[1e0]"), "x[1]");
    assert_eq!(s("x[0][1]"), "x[0][1]");
    assert_eq!(s("1.e5"), "1.e5");
    assert_eq!(s("f(x)[0].y"), "f(x)[0].y");
}

#[test]
fn calls() {
    assert_eq!(s("len()"), "len()");
    assert_eq!(s("max(a, b + 1, f(g(c)))"), "max(a, (b + 1), f(g(c)))");
    let e = ok("matches(s, 'x')");
    let ExprKind::Call {
        callee,
        callee_span,
        args,
    } = e.kind
    else {
        panic!()
    };
    assert_eq!(
        (callee.as_str(), callee_span, args.len()),
        ("matches", Span::new(0, 7), 2)
    );
    assert_eq!(e.span, Span::new(0, 15));
}

#[test]
fn lambdas_are_call_arguments() {
    assert_eq!(s("all(xs, p -> p.ok)"), "all(xs, {p -> p.ok})");
    // the body extends as far as an expression does
    assert_eq!(
        s("any(xs, p -> p.a || p.b && !q)"),
        "any(xs, {p -> (p.a || (p.b && (!q)))})"
    );
    // nesting, and a lambda in any argument position parses (the checker
    // decides where one may stand)
    assert_eq!(
        s("map(xs, x -> count(ys, y -> y < x))"),
        "map(xs, {x -> count(ys, {y -> (y < x)})})"
    );
    assert_eq!(s("f(p -> p, xs)"), "f({p -> p}, xs)");
    let e = ok("all(xs, p -> p)");
    let ExprKind::Call { args, .. } = &e.kind else {
        panic!()
    };
    let ExprKind::Lambda {
        param, param_span, ..
    } = &args[1].kind
    else {
        panic!()
    };
    assert_eq!((param.as_str(), *param_span), ("p", Span::new(8, 9)));
    assert_eq!(args[1].span, Span::new(8, 14));
    assert_eq!(e.to_string(), "all(xs, p -> p)");
    assert_eq!(
        ok("all(xs,p->p.ok&&q)").to_string(),
        "all(xs, p -> p.ok && q)"
    );
    // nodes: the lambda counts once (its parameter), not the arrow
    let mut count = 0;
    walk(&e, &mut |_| count += 1);
    assert_eq!(count, 4);
}

#[test]
fn lambda_errors() {
    // not an argument: a syntax error that says where lambdas go
    for text in ["p -> p", "(p -> p)", "a + (p -> p)", "f(a + p -> p)"] {
        let (k, _, msg) = first_err(text);
        assert_eq!(k, ParseErrorKind::UnexpectedToken, "{text}");
        assert!(msg.contains("last one of `all`"), "{text}: {msg}");
    }
    // one parameter only, a name
    assert_eq!(
        first_err("all(xs, (p, q) -> p)").0,
        ParseErrorKind::UnexpectedToken
    );
    assert_eq!(
        first_err("all(xs, 1 -> p)").0,
        ParseErrorKind::UnexpectedToken
    );
    assert_eq!(
        first_err("all(xs, p ->)").0,
        ParseErrorKind::UnexpectedToken
    );
    // `a->b` was never valid v1; `a - >b` is still the old error
    assert_eq!(first_err("a - > b").0, ParseErrorKind::UnexpectedToken);
    // the depth limit holds for nested lambdas (each call adds a level)
    let deep = format!("{}x{}", "all(xs, p -> ".repeat(129), ")".repeat(129));
    assert_eq!(first_err(&deep).0, ParseErrorKind::TooDeep);
    let fits = format!("{}x{}", "all(xs, p -> ".repeat(128), ")".repeat(128));
    assert!(parse_expr(&fits).0.is_some());
}

#[test]
fn paren_span() {
    let e = ok(" ( a ) ");
    assert_eq!(e.span, Span::new(1, 6));
    assert!(matches!(e.kind, ExprKind::Paren(_)));
}

#[test]
fn error_empty() {
    assert_eq!(first_err("").0, ParseErrorKind::Empty);
    let (k, span, msg) = first_err(" \n ");
    assert_eq!((k, span), (ParseErrorKind::Empty, Span::new(0, 3)));
    assert_eq!(msg, "expected an expression, found nothing");
}

#[test]
fn error_unexpected_token() {
    let (k, span, msg) = first_err("f(a, )");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(5, 6))
    );
    assert_eq!(msg, "expected an expression, found `)`");
    let (k, span, msg) = first_err("a b");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(2, 3))
    );
    assert_eq!(msg, "expected an operator or end of input, found `b`");
    let (k, span, msg) = first_err("x.in");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(2, 4))
    );
    assert!(
        msg.starts_with("expected a member name, found `in`"),
        "{msg}"
    );
    assert_eq!(errs("x.in").len(), 1);
    let (k, span, _) = first_err("a.1");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(2, 3))
    );
    let (k, span, msg) = first_err("1 + * 2");
    assert_eq!(
        (k, span, msg.as_str()),
        (
            ParseErrorKind::UnexpectedToken,
            Span::new(4, 5),
            "expected an expression, found `*`"
        )
    );
    let (k, span, msg) = first_err("(a b)");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(3, 4))
    );
    assert_eq!(msg, "expected an operator or `)`, found `b`");
    let (k, span, _) = first_err("[0]");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(0, 1))
    );
    let (k, span, _) = first_err("a, b");
    assert_eq!(
        (k, span),
        (ParseErrorKind::UnexpectedToken, Span::new(1, 2))
    );
    // `007` is a lexical error, `0 07` a syntax error.
    let (k, _, _) = first_err("0 7");
    assert_eq!(k, ParseErrorKind::UnexpectedToken);
}

#[test]
fn error_recovery_reports_several() {
    let e = errs("(a b) + (c d)");
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(e[0].span, Span::new(3, 4));
    assert_eq!(e[1].span, Span::new(11, 12));
    let e = errs("x.__proto__ == y[-1]");
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(e[0].kind, ParseErrorKind::ForbiddenMember);
    assert_eq!(e[1].kind, ParseErrorKind::InvalidIndex);
}

#[test]
fn error_unexpected_end() {
    for (text, msg) in [
        ("a +", "expected an expression, found end of input"),
        ("(a", "expected `)`, found end of input"),
        ("f(", "expected an expression or `)`, found end of input"),
        ("x.", "expected a member name, found end of input"),
        ("!", "expected an expression, found end of input"),
    ] {
        let (k, span, m) = first_err(text);
        let end = text.len() as u32;
        assert_eq!(
            (k, span),
            (ParseErrorKind::UnexpectedEnd, Span::new(end, end)),
            "{text}"
        );
        assert_eq!(m, msg, "{text}");
    }
    let (_, span, _) = first_err("a +  ");
    assert_eq!(span, Span::new(5, 5));
}

#[test]
fn error_forbidden_member() {
    for name in ["__proto__", "constructor", "prototype"] {
        let text = format!("input.{name}.x");
        let (k, span, msg) = first_err(&text);
        assert_eq!(k, ParseErrorKind::ForbiddenMember);
        assert_eq!(span, Span::new(6, 6 + name.len() as u32));
        assert!(
            msg.starts_with(&format!("member `{name}` is not allowed")),
            "{msg}"
        );
    }
    assert_eq!(s("x.proto"), "x.proto");
    assert_eq!(s("'constructor' in x"), "(\"constructor\" in x)");
}

#[test]
fn error_invalid_index() {
    for (text, start, end) in [
        ("a[-1]", 2, 4),
        ("a['0']", 2, 5),
        ("a[x]", 2, 3),
        ("a[0.5]", 2, 5),
        ("a[(0)]", 2, 5),
        ("a[1 + 1]", 2, 7),
        ("a[1e30]", 2, 6),
    ] {
        let (k, span, msg) = first_err(text);
        assert_eq!(
            (k, span),
            (ParseErrorKind::InvalidIndex, Span::new(start, end)),
            "{text}"
        );
        assert!(
            msg.starts_with("expected a non-negative whole number literal"),
            "{msg}"
        );
        assert!(msg.ends_with(&format!("found `{}`", &text[start as usize..end as usize])));
    }
    assert_eq!(s("a[18446744073709549568]"), "a[18446744073709549568]");
}

#[test]
fn error_method_call() {
    let (k, span, msg) = first_err("x.f()");
    assert_eq!((k, span), (ParseErrorKind::MethodCall, Span::new(0, 5)));
    assert!(msg.contains("found a call on `x.f`"), "{msg}");
    let (k, span, _) = first_err("(f)(x)");
    assert_eq!((k, span), (ParseErrorKind::MethodCall, Span::new(0, 6)));
    let (k, span, _) = first_err("f(x)(y)");
    assert_eq!((k, span), (ParseErrorKind::MethodCall, Span::new(0, 7)));
    let (k, _, _) = first_err("a[0](1)");
    assert_eq!(k, ParseErrorKind::MethodCall);
}

#[test]
fn lexical_errors_stop_parsing() {
    let e = errs("a $ b # c");
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|e| e.kind == ParseErrorKind::UnexpectedChar));
    let (k, span, msg) = first_err("${build.output.ok} == true");
    assert_eq!(
        (k, span),
        (ParseErrorKind::TemplateInExpression, Span::new(0, 18))
    );
    assert!(msg.contains("use the expression form"), "{msg}");
    assert_eq!(first_err("'abc").0, ParseErrorKind::UnterminatedString);
    assert_eq!(first_err(r"'\x'").0, ParseErrorKind::InvalidEscape);
    assert_eq!(first_err("'\t'").0, ParseErrorKind::ControlCharInString);
    assert_eq!(first_err("007").0, ParseErrorKind::InvalidNumber);
    assert_eq!(first_err("1e400").0, ParseErrorKind::InvalidNumber);
    assert_eq!(first_err("a = b").0, ParseErrorKind::UnexpectedChar);
}

fn nested(open: &str, count: usize, inner: &str, close: &str) -> String {
    let mut t = open.repeat(count);
    t.push_str(inner);
    t.push_str(&close.repeat(count));
    t
}

#[test]
fn depth_limit_boundaries() {
    assert!(parse_expr(&nested("(", 128, "x", ")")).0.is_some());
    assert!(parse_expr(&nested("!", 128, "x", "")).0.is_some());
    assert!(parse_expr(&nested("-", 128, "x", "")).0.is_some());
    assert!(parse_expr(&nested("f(", 128, "x", ")")).0.is_some());
    assert!(parse_expr(&nested("!(", 64, "x", ")")).0.is_some());
    let (k, span, msg) = first_err(&nested("(", 129, "x", ")"));
    assert_eq!((k, span), (ParseErrorKind::TooDeep, Span::new(128, 129)));
    assert!(msg.contains("128"));
    assert_eq!(
        first_err(&nested("!", 129, "x", "")).0,
        ParseErrorKind::TooDeep
    );
    assert_eq!(
        first_err(&nested("f(", 129, "x", ")")).0,
        ParseErrorKind::TooDeep
    );
    assert_eq!(
        first_err(&nested("-(", 65, "x", ")")).0,
        ParseErrorKind::TooDeep
    );
    // Siblings do not add up: a unary operator ends at the next binary operator.
    let wide = vec![nested("!", 100, "x", ""); 30].join(" && ");
    assert!(parse_expr(&wide).0.is_some());
    let args = vec![nested("(", 100, "x", ")"); 30].join(", ");
    assert!(parse_expr(&format!("f({args})")).0.is_some());
    // `[` does not count: a literal index at depth 128 is fine.
    assert!(parse_expr(&nested("(", 128, "x[0]", ")")).0.is_some());
}

#[test]
fn node_limit_boundaries() {
    // `x + x + ... + x` with n operands has 2n - 1 nodes.
    let fits = vec!["x"; 2048].join(" + ");
    assert!(parse_expr(&fits).0.is_some());
    let too_many = vec!["x"; 2049].join(" + ");
    assert_eq!(first_err(&too_many).0, ParseErrorKind::TooManyNodes);
    // member chains: x.a.a... has 1 + n nodes
    let members = format!("x{}", ".a".repeat(4095));
    let e = ok(&members);
    let mut count = 0;
    walk(&e, &mut |_| count += 1);
    assert_eq!(count, 4096);
    let members = format!("x{}", ".a".repeat(4096));
    assert_eq!(first_err(&members).0, ParseErrorKind::TooManyNodes);
    let indexes = format!("x{}", "[0]".repeat(4096));
    assert_eq!(first_err(&indexes).0, ParseErrorKind::TooManyNodes);
}

#[test]
fn huge_hostile_inputs_do_not_overflow() {
    // Run on a small stack to prove nothing recursive sees deep input.
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            for open in ["(", "!", "-", "f(", "[", "!("] {
                let text = open.repeat(1_000_000);
                let (expr, errors) = parse_expr(&text);
                assert!(expr.is_none());
                let expected = if open == "[" {
                    ParseErrorKind::TooManyNodes
                } else {
                    ParseErrorKind::TooDeep
                };
                assert_eq!(errors[0].kind, expected, "{open}");
            }
            let text = "x+".repeat(1_000_000) + "x";
            assert_eq!(parse_expr(&text).1[0].kind, ParseErrorKind::TooManyNodes);
        })
        .expect("spawn");
    assert!(handle.join().is_ok());
}

#[test]
fn deepest_allowed_trees_fit_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(|| {
            for text in [
                vec!["x"; 2048].join(" - "),
                format!("x{}", ".a".repeat(4095)),
                nested("(", 128, "x", ")"),
            ] {
                let e = ok(&text);
                let printed = e.to_string();
                let again = ok(&printed);
                assert_eq!(again.to_string(), printed);
                assert!(!e.dump().is_empty());
                let copy = e.clone();
                assert_eq!(copy, e);
                assert!(!format!("{copy:?}").is_empty());
                let mut count = 0;
                walk(&e, &mut |_| count += 1);
                assert!(count > 0);
            }
        })
        .expect("spawn");
    assert!(handle.join().is_ok());
}

#[test]
fn walk_is_pre_order() {
    let e = ok("f(a.b, -c) + d[0]");
    let mut seen = Vec::new();
    walk(&e, &mut |n| seen.push(n.span));
    let texts: Vec<&str> = seen
        .iter()
        .map(|sp| &"f(a.b, -c) + d[0]"[sp.range()])
        .collect();
    assert_eq!(
        texts,
        [
            "f(a.b, -c) + d[0]",
            "f(a.b, -c)",
            "a.b",
            "a",
            "-c",
            "c",
            "d[0]",
            "d"
        ]
    );
}

#[test]
fn display_round_trips() {
    for text in [
        "a || b && !c",
        "(a || b) && c",
        "-x.y[0] * 2.5 - f()",
        "'it''s' + \"q\\\"\\n\"",
        "x in ['a']",
        "1e300 + 1e-7 + 0.1 + 100",
        "--x",
        "a - (b - c)",
        "a.true.null",
        "'\\u0001\\ud83d\\ude00'",
    ] {
        let (Some(e), _) = parse_expr(text) else {
            continue;
        };
        let printed = e.to_string();
        assert_eq!(shape(&ok(&printed)), shape(&e), "{text} -> {printed}");
    }
    assert_eq!(ok("a||b&&!c").to_string(), "a || b && !c");
    assert_eq!(ok("f( 1 ,2 )").to_string(), "f(1, 2)");
    assert_eq!(ok("'a\"b'").to_string(), "\"a\\\"b\"");
    assert_eq!(ok("1e300").to_string(), "1e300");
    assert_eq!(ok("1.50").to_string(), "1.5");
}

#[test]
fn display_adds_parentheses_for_hand_built_trees() {
    let sp = Span::default();
    let leaf = |n: &str| Box::new(Expr::new(ExprKind::Ident(n.into()), sp));
    let sum = Expr::new(
        ExprKind::Binary {
            op: BinaryOp::Add,
            op_span: sp,
            lhs: leaf("a"),
            rhs: leaf("b"),
        },
        sp,
    );
    let product = Expr::new(
        ExprKind::Binary {
            op: BinaryOp::Mul,
            op_span: sp,
            lhs: Box::new(sum.clone()),
            rhs: Box::new(sum.clone()),
        },
        sp,
    );
    assert_eq!(product.to_string(), "(a + b) * (a + b)");
    let neg = Expr::new(
        ExprKind::Unary {
            op: UnaryOp::Neg,
            operand: Box::new(sum.clone()),
        },
        sp,
    );
    assert_eq!(neg.to_string(), "-(a + b)");
    let member = Expr::new(
        ExprKind::Member {
            object: Box::new(neg),
            name: "x".into(),
            name_span: sp,
        },
        sp,
    );
    assert_eq!(member.to_string(), "(-(a + b)).x");
}

#[test]
fn error_display_and_kind_names() {
    let e = errs("a +").remove(0);
    assert_eq!(e.to_string(), e.message);
    assert_eq!(ParseErrorKind::TooDeep.as_str(), "too_deep");
    assert_eq!(
        ParseErrorKind::TemplateInExpression.to_string(),
        "template_in_expression"
    );
}

#[test]
fn error_count_is_capped() {
    let e = errs(&"$".repeat(10_000));
    assert_eq!(e.len(), 50);
    let e = errs(&"(a b) ".repeat(10_000));
    assert!(e.len() <= 50, "{}", e.len());
    let (_, e) = crate::parse_template(&"${A}".repeat(10_000));
    assert_eq!(e.len(), 50);
    let (_, e) = crate::parse_template(&format!("{}${{", "${A}".repeat(10_000)));
    assert_eq!(e.len(), 50);
    assert_eq!(e[49].kind, ParseErrorKind::DanglingTemplate);
}
