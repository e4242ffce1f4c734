//! Fuzz target: the whole front end on arbitrary bytes.
//!
//! Owns: feeding any byte string to `analyze_bytes` and asserting the
//! invariants every consumer relies on: no panic; every diagnostic span and
//! label span lies inside the analysed text, on char boundaries; the IR is
//! present exactly when there is no error; and both renderers accept the
//! diagnostics.
//! Must never: filter or repair inputs (a panic anywhere is a finding).

#![no_main]

use libfuzzer_sys::fuzz_target;
use stratum_compiler::analysis::analyze_bytes;
use stratum_compiler::diagnostics::render;
use stratum_compiler::source::Span;

fn check_span(text: &str, span: Span, what: &str, code: &str) {
    let (start, end) = (span.start as usize, span.end as usize);
    assert!(
        start <= end,
        "{code}: {what} span {start}..{end} is backwards"
    );
    assert!(
        end <= text.len(),
        "{code}: {what} span {start}..{end} ends past the text ({} bytes)",
        text.len()
    );
    assert!(
        text.is_char_boundary(start),
        "{code}: {what} span start {start} is inside a char"
    );
    assert!(
        text.is_char_boundary(end),
        "{code}: {what} span end {end} is inside a char"
    );
}

fuzz_target!(|data: &[u8]| {
    let analysis = analyze_bytes(data);
    let text = analysis.text.as_str();
    for d in &analysis.diagnostics {
        let code = d.code.as_str();
        check_span(text, d.span, "primary", code);
        for label in &d.labels {
            check_span(text, label.span, "label", code);
        }
    }
    let errors = analysis.error_count();
    assert_eq!(
        analysis.ir.is_some(),
        errors == 0,
        "ir present = {}, but {errors} errors",
        analysis.ir.is_some()
    );
    let _ = render::human("fuzz.stratum.yaml", text, &analysis.diagnostics, false);
    let _ = render::json_file(
        "fuzz.stratum.yaml",
        text,
        &analysis.lines,
        &analysis.diagnostics,
    );
});
