//! Property test: `analyze` on randomly damaged copies of the example specs.
//!
//! Owns: the mutation strategy (delete, duplicate or swap lines, change a
//! line's indentation, overwrite a byte range with printable text or with
//! YAML/template tokens, tabs and non-ASCII text) and the invariants every
//! consumer of an `Analysis` relies on: no panic; `text` is the input; every
//! diagnostic span and label span lies inside the text on char boundaries; the
//! IR is present exactly when there is no error; loading in cached pieces
//! (`yaml::chunked`, the language server's path) gives exactly the tree and
//! diagnostics of loading the whole text. As a check on itself, it also
//! requires that at least a quarter of the damaged specs get errors and that
//! the pieces were used for at least a tenth of them (every undamaged example
//! loads in pieces).
//! Must never: assert which diagnostics a damaged spec gets (the snapshot and
//! conformance suites own that), or write files (failure persistence is off;
//! a failure prints the minimised input instead).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use stratum_compiler::yaml::{self, chunked};
use stratum_compiler::{Analysis, Span, analyze};

/// Cases per example (override with `PROPTEST_CASES`).
const CASES: u32 = 256;

/// Text that breaks YAML, templates or expressions in interesting ways.
const TOKENS: &[&str] = &[
    "${",
    "}",
    "${input.",
    "${x.output}",
    ":",
    ": ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "!!str ",
    "!!binary ",
    "<<: *a",
    "\t",
    "\n",
    "\r\n",
    "\"",
    "'",
    "#",
    "|",
    ">-",
    "? ",
    "---\n",
    "...\n",
    "null",
    "~",
    "[]",
    "{}",
    "é",
    "日本語",
    "🦀",
    "\u{200b}",
    "\u{feff}",
    "\u{2028}",
    "\u{85}",
    "result.",
    "&&",
    "len(",
    "__proto__",
    "0x1F",
    "1e400",
    "-1",
    "\\",
];

#[derive(Debug, Clone)]
enum Replacement {
    Printable(String),
    Token(&'static str),
}

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    /// Add (positive) or remove (negative) leading spaces of a line.
    Reindent(usize, i8),
    /// Overwrite `len` bytes from `start` (both snapped to char boundaries).
    Replace {
        start: usize,
        len: usize,
        with: Replacement,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let replacement = prop_oneof![
        "[ -~]{0,12}".prop_map(Replacement::Printable),
        proptest::sample::select(TOKENS).prop_map(Replacement::Token),
    ];
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (any::<usize>(), -6i8..=6).prop_map(|(l, d)| Mutation::Reindent(l, d)),
        (any::<usize>(), 0usize..24, replacement)
            .prop_map(|(start, len, with)| Mutation::Replace { start, len, with }),
        // favour byte-range damage: it reaches scalars, keys and expressions
        (
            any::<usize>(),
            0usize..8,
            proptest::sample::select(TOKENS).prop_map(Replacement::Token)
        )
            .prop_map(|(start, len, with)| Mutation::Replace { start, len, with }),
    ]
}

fn apply(text: &str, mutation: &Mutation) -> String {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    match mutation {
        Mutation::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Mutation::DuplicateLine(i) => {
            let line = lines[i % n].clone();
            let line = if line.ends_with('\n') {
                line
            } else {
                format!("\n{line}")
            };
            lines.insert(i % n, line);
        }
        Mutation::SwapLines(a, b) => lines.swap(a % n, b % n),
        Mutation::Reindent(i, delta) => {
            let line = &mut lines[i % n];
            if *delta >= 0 {
                line.insert_str(0, &" ".repeat(*delta as usize));
            } else {
                let spaces = line.bytes().take_while(|&b| b == b' ').count();
                line.drain(..spaces.min(delta.unsigned_abs() as usize));
            }
        }
        Mutation::Replace { start, len, with } => {
            let mut start = start % (text.len() + 1);
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + len).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            let with = match with {
                Replacement::Printable(s) => s.as_str(),
                Replacement::Token(t) => t,
            };
            return format!("{}{with}{}", &text[..start], &text[end..]);
        }
    }
    lines.concat()
}

fn check_span(text: &str, span: Span, what: &str) -> Result<(), String> {
    let (start, end) = (span.start as usize, span.end as usize);
    if start > end {
        return Err(format!("{what} span {start}..{end} is backwards"));
    }
    if end > text.len() {
        return Err(format!(
            "{what} span {start}..{end} ends past the text ({} bytes)",
            text.len()
        ));
    }
    if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
        return Err(format!(
            "{what} span {start}..{end} is not on char boundaries"
        ));
    }
    Ok(())
}

fn fresh(chunk: &str) -> Option<std::sync::Arc<chunked::Item>> {
    chunked::load_item(chunk).map(std::sync::Arc::new)
}

/// Loading in pieces equals loading the whole text; `Ok(true)` when the
/// pieces were used (rather than the fallback).
fn check_pieces(text: &str) -> Result<bool, String> {
    let whole = yaml::load(text);
    let via = chunked::load_with(text, &fresh);
    if via.root != whole.root || via.diagnostics != whole.diagnostics {
        return Err(format!(
            "loading in pieces differs from loading the whole text\n--- pieces ---\n{via:?}\n--- whole ---\n{whole:?}"
        ));
    }
    Ok(chunked::splice(text, &fresh).is_some())
}

/// Every invariant of one analysis, as an error message when one fails.
fn check_invariants(input: &str, analysis: &Analysis) -> Result<(), String> {
    if analysis.text != input {
        return Err("`Analysis::text` differs from the input".into());
    }
    let text = analysis.text.as_str();
    for d in &analysis.diagnostics {
        let code = d.code.as_str();
        check_span(text, d.span, "primary").map_err(|e| format!("{code} ({}): {e}", d.message))?;
        for label in &d.labels {
            check_span(text, label.span, "label")
                .map_err(|e| format!("{code} ({}): {e}", d.message))?;
        }
    }
    let errors = analysis.error_count();
    if analysis.ir.is_some() != (errors == 0) {
        let codes: Vec<&str> = analysis
            .diagnostics
            .iter()
            .map(|d| d.code.as_str())
            .collect();
        return Err(format!(
            "ir present = {}, but {errors} errors (diagnostics: {codes:?})",
            analysis.ir.is_some()
        ));
    }
    Ok(())
}

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".stratum.yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no examples/*.stratum.yaml found in {}",
        dir.display()
    );
    files
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (name, text)
        })
        .collect()
}

#[test]
fn examples_are_clean_before_mutation() {
    for (name, text) in examples() {
        let analysis = analyze(&text);
        assert!(
            analysis.error_count() == 0,
            "{name} has errors: {:?}",
            analysis.diagnostics
        );
        check_invariants(&text, &analysis).unwrap_or_else(|e| panic!("{name}: {e}"));
        let used = check_pieces(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(used, "{name} did not load in pieces");
    }
}

#[test]
fn mutated_examples_keep_the_analysis_invariants() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let mut failures = Vec::new();
    let (total, damaged, pieces) = (Cell::new(0u32), Cell::new(0u32), Cell::new(0u32));
    for (name, original) in examples() {
        let mut runner = TestRunner::new(config.clone());
        let strategy = proptest::collection::vec(mutation(), 1..=4);
        let result = runner.run(&strategy, |mutations| {
            let text = mutations.iter().fold(original.clone(), |t, m| apply(&t, m));
            let analysis = catch_unwind(AssertUnwindSafe(|| analyze(&text))).map_err(|p| {
                TestCaseError::fail(format!(
                    "analyze panicked: {}\n--- input ---\n{text}",
                    panic_message(&*p)
                ))
            })?;
            total.set(total.get() + 1);
            damaged.set(damaged.get() + u32::from(analysis.error_count() > 0));
            let used = check_pieces(&text)
                .map_err(|e| TestCaseError::fail(format!("{e}\n--- input ---\n{text}")))?;
            pieces.set(pieces.get() + u32::from(used));
            check_invariants(&text, &analysis)
                .map_err(|e| TestCaseError::fail(format!("{e}\n--- input ---\n{text}")))
        });
        match result {
            Ok(()) => {}
            Err(TestError::Fail(reason, mutations)) => {
                failures.push(format!("{name}: {reason}\nmutations: {mutations:?}"))
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} example(s) broke an invariant:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    // the mutations must bite: a good share of the damaged specs get errors
    let (total, damaged, pieces) = (total.get(), damaged.get(), pieces.get());
    eprintln!("{damaged} of {total} mutated specs have errors; {pieces} loaded in pieces");
    assert!(
        pieces * 10 >= total,
        "only {pieces} of {total} mutated specs loaded in pieces: the test no longer reaches them"
    );
    assert!(
        damaged * 4 >= total,
        "only {damaged} of {total} mutated specs have errors: the mutations are too weak"
    );
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}
