//! Golden tests: every line of `test_data/{ok,err}/*.expr` and
//! `test_data/templates/*.txt` is parsed and the results are compared with
//! the insta snapshots in `tests/snapshots/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use stratum_grammar::{ParseError, Piece, SegmentKind, Span, parse_expr, parse_template};

fn data_files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{ext} files in {}", root.display());
    files
}

/// The non-comment, non-blank lines of a data file.
fn cases(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read test data");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("unnamed")
        .to_owned()
}

/// Renders an error under its source line with a caret marker.
fn render_error(out: &mut String, text: &str, err: &ParseError) {
    let start = text[..err.span.start as usize].chars().count();
    let width = text[err.span.range()].chars().count().max(1);
    let _ = writeln!(out, "  {}", text.replace('\t', " "));
    let _ = writeln!(out, "  {}{}", " ".repeat(start), "^".repeat(width));
    let _ = writeln!(out, "  {:?} @{}: {}", err.kind, err.span, err.message);
}

fn span_text(text: &str, span: Span) -> &str {
    &text[span.range()]
}

#[test]
fn ok_expressions() {
    for file in data_files("ok", "expr") {
        let mut out = String::new();
        for case in cases(&file) {
            let (expr, errors) = parse_expr(&case);
            assert!(errors.is_empty(), "{case}: {errors:?}");
            let expr = expr.expect("tree");
            let _ = writeln!(out, "=== {case}");
            let _ = writeln!(out, "display: {expr}");
            out.push_str(&expr.dump());
        }
        insta::assert_snapshot!(format!("ok__{}", stem(&file)), out);
    }
}

#[test]
fn err_expressions() {
    for file in data_files("err", "expr") {
        let mut out = String::new();
        for case in cases(&file) {
            let (expr, errors) = parse_expr(&case);
            assert!(expr.is_none(), "{case} should fail");
            assert!(!errors.is_empty(), "{case} should report an error");
            let _ = writeln!(out, "=== {case}");
            for err in &errors {
                render_error(&mut out, &case, err);
            }
        }
        insta::assert_snapshot!(format!("err__{}", stem(&file)), out);
    }
}

#[test]
fn templates() {
    for file in data_files("templates", "txt") {
        let mut out = String::new();
        for case in cases(&file) {
            let (template, errors) = parse_template(&case);
            let _ = writeln!(out, "=== {case}");
            if let Some(r) = template.full_value() {
                let _ = writeln!(out, "full value: {:?} {}", r.kind, r.head);
            }
            for piece in &template.pieces {
                match piece {
                    Piece::Text { text, span } => {
                        assert_eq!(span_text(&case, *span), text);
                        let _ = writeln!(out, "  Text {text:?} @{span}");
                    }
                    Piece::Ref(r) => {
                        let _ = writeln!(
                            out,
                            "  Ref {:?} head={} @{} (head @{}) `{}`",
                            r.kind,
                            r.head,
                            r.span,
                            r.head_span,
                            span_text(&case, r.span)
                        );
                        for seg in &r.path {
                            let shown = match &seg.kind {
                                SegmentKind::Field(f) => format!("Field {f}"),
                                SegmentKind::Index(i) => format!("Index {i}"),
                            };
                            let _ = writeln!(
                                out,
                                "    {shown} @{} `{}`",
                                seg.span,
                                span_text(&case, seg.span)
                            );
                        }
                    }
                }
            }
            for err in &errors {
                render_error(&mut out, &case, err);
            }
        }
        insta::assert_snapshot!(format!("templates__{}", stem(&file)), out);
    }
}
