//! Fuzz target: the expression parser and the template scanner on arbitrary UTF-8.
//!
//! Owns: calling `stratum_grammar::parse_expr` and `parse_template` on any
//! valid UTF-8 string and asserting their documented contracts: no panic; a
//! tree exactly when there is no error; errors sorted; every span (errors,
//! nodes, pieces, references, path segments) inside the text on char
//! boundaries; template pieces tile the input, with no two text pieces side by
//! side.
//! Must never: filter or repair inputs (a panic anywhere is a finding).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stratum_grammar::{Piece, Span, parse_expr, parse_template, walk};

fn check_span(text: &str, span: Span, what: &str) {
    let (start, end) = (span.start as usize, span.end as usize);
    assert!(start <= end, "{what} span {start}..{end} is backwards");
    assert!(
        end <= text.len(),
        "{what} span {start}..{end} ends past the text ({} bytes)",
        text.len()
    );
    assert!(
        text.is_char_boundary(start) && text.is_char_boundary(end),
        "{what} span {start}..{end} is inside a char"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    let (tree, errors) = parse_expr(text);
    assert_eq!(
        tree.is_some(),
        errors.is_empty(),
        "tree present = {}, errors = {errors:?}",
        tree.is_some()
    );
    for e in &errors {
        check_span(text, e.span, "expression error");
    }
    assert!(
        errors
            .windows(2)
            .all(|w| w[0].span.start <= w[1].span.start),
        "errors are not sorted: {errors:?}"
    );
    if let Some(tree) = &tree {
        walk(tree, &mut |node| {
            check_span(text, node.span, "expression node")
        });
    }

    let (template, errors) = parse_template(text);
    for e in &errors {
        check_span(text, e.span, "template error");
    }
    let mut at = 0u32;
    let mut last_was_text = false;
    for piece in &template.pieces {
        match piece {
            Piece::Text { text: t, span } => {
                check_span(text, *span, "text piece");
                assert_eq!(span.start, at, "pieces do not tile the input");
                assert_eq!(
                    &text[span.start as usize..span.end as usize],
                    t.as_str(),
                    "text piece differs from its source"
                );
                assert!(!last_was_text, "two text pieces side by side");
                at = span.end;
                last_was_text = true;
            }
            Piece::Ref(r) => {
                check_span(text, r.span, "reference");
                assert_eq!(r.span.start, at, "pieces do not tile the input");
                check_span(text, r.head_span, "reference head");
                assert!(
                    r.span.start <= r.head_span.start && r.head_span.end <= r.span.end,
                    "head outside its reference"
                );
                for seg in &r.path {
                    check_span(text, seg.span, "path segment");
                    assert!(
                        r.span.start <= seg.span.start && seg.span.end <= r.span.end,
                        "segment outside its reference"
                    );
                }
                at = r.span.end;
                last_was_text = false;
            }
        }
    }
    assert_eq!(at as usize, text.len(), "pieces do not cover the input");
});
