//! The server reports exactly what `stratumc check` reports: for every spec
//! of the conformance corpus, the diagnostics published on `didOpen` equal
//! the compiler's own `analyze` (code, severity, message, and the range
//! converted back to bytes), in the same order. Then the same after an
//! incremental edit and after a full-text change back to the original (the
//! incremental database must never serve stale results).

mod support;

use std::path::Path;

use lsp_types::{DiagnosticSeverity, NumberOrString, Position, TextDocumentContentChangeEvent};
use stratum_compiler::{Severity, analyze};
use support::{Client, uri};

/// The byte offset of an LSP position, the slow, obvious way (independent of
/// the server's conversion).
fn offset_of(text: &str, p: Position) -> usize {
    let mut line_start = 0;
    for _ in 0..p.line {
        line_start += text[line_start..].find('\n').expect("the line exists") + 1;
    }
    let mut units = 0;
    for (i, c) in text[line_start..].char_indices() {
        if units >= p.character {
            return line_start + i;
        }
        units += c.len_utf16() as u32;
    }
    assert_eq!(units, p.character, "position past the end of the text");
    text.len()
}

/// Compares what the server published for `text` with `analyze(text)`.
fn compare(name: &str, text: &str, published: &[lsp_types::Diagnostic]) -> Vec<String> {
    let expected = analyze(text).diagnostics;
    let mut problems = Vec::new();
    if expected.len() != published.len() {
        problems.push(format!(
            "{name}: check has {} diagnostics, the server published {}",
            expected.len(),
            published.len()
        ));
    }
    for (e, p) in expected.iter().zip(published) {
        let code = Some(NumberOrString::String(e.code.as_str().to_string()));
        let severity = Some(match e.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        });
        let start = offset_of(text, p.range.start) as u32;
        let end = offset_of(text, p.range.end) as u32;
        if p.code != code
            || p.severity != severity
            || p.message != e.message
            || (start, end) != (e.span.start, e.span.end)
        {
            problems.push(format!(
                "{name}: expected {} {:?} at {}..{}, published {:?} {:?} at {start}..{end}",
                e.code.as_str(),
                e.message,
                e.span.start,
                e.span.end,
                p.code,
                p.message
            ));
        }
        let labels = p
            .related_information
            .iter()
            .flatten()
            .filter(|r| !r.message.starts_with("note: ") && !r.message.starts_with("help: "))
            .count();
        if labels != e.labels.len() {
            problems.push(format!(
                "{name}: {} has {} labels, {labels} published",
                e.code.as_str(),
                e.labels.len()
            ));
        }
    }
    problems
}

#[test]
fn every_corpus_spec_gets_the_diagnostics_of_stratumc_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance");
    let files = stratum_conformance::corpus(&dir);
    assert!(files.len() > 100, "the corpus is at {}", dir.display());
    let mut client = Client::start();
    let mut problems = Vec::new();
    let (mut compared, mut with_diagnostics, mut not_utf8) = (0, 0, 0);
    for (i, path) in files.iter().enumerate() {
        let bytes = std::fs::read(path).unwrap();
        // an editor buffer is text: files that are not UTF-8 cannot be sent
        let Ok(text) = String::from_utf8(bytes) else {
            not_utf8 += 1;
            continue;
        };
        let name = path.strip_prefix(&dir).unwrap().display().to_string();
        let u = uri(&format!("corpus/{i}.stratum.yaml"));
        let published = client.open(&u, &text);
        problems.extend(compare(&name, &text, &published.diagnostics));
        compared += 1;
        with_diagnostics += usize::from(!published.diagnostics.is_empty());

        // an edit that appends a comment line: nothing changes but the text
        let end = support::position_of_offset(&text, text.len());
        let edited = format!("{text}\n# é 😀\n");
        let again = client.change(
            &u,
            2,
            vec![TextDocumentContentChangeEvent {
                range: Some(lsp_types::Range::new(end, end)),
                range_length: None,
                text: "\n# é 😀\n".into(),
            }],
        );
        problems.extend(compare(
            &format!("{name} (edited)"),
            &edited,
            &again.diagnostics,
        ));

        // and back to the original text in one full-text change
        let back = client.change(
            &u,
            3,
            vec![TextDocumentContentChangeEvent {
                range: None,
                range_length: None,
                text: text.clone(),
            }],
        );
        problems.extend(compare(
            &format!("{name} (reverted)"),
            &text,
            &back.diagnostics,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(not_utf8 <= 3, "{not_utf8} corpus files are not UTF-8");
    assert!(compared + not_utf8 == files.len());
    assert!(
        with_diagnostics > 100,
        "only {with_diagnostics} specs had diagnostics"
    );
    client.shutdown();
}
