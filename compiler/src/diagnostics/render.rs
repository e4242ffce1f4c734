//! Renderers of diagnostics: human (codespan-reporting, like rustc) and JSON
//! (the versioned format of `stratumc check --format json`).
//!
//! Owns: converting [`Diagnostic`]s to text. Colour is the caller's choice.
//! Must never: filter, reorder or reword diagnostics.

use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Config};
use serde_json::{Value, json};

use super::{Diagnostic, Severity};
use crate::source::{LineIndex, Span};

/// Version of the JSON document.
pub const JSON_VERSION: u32 = 1;

fn clamp(text: &str, s: Span) -> std::ops::Range<usize> {
    let mut start = (s.start as usize).min(text.len());
    let mut end = (s.end as usize).min(text.len()).max(start);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

fn to_codespan(text: &str, d: &Diagnostic) -> cs::Diagnostic<()> {
    let severity = match d.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    let mut labels = vec![
        cs::Label::primary((), clamp(text, d.span))
            .with_message(d.span_label.clone().unwrap_or_default()),
    ];
    for l in &d.labels {
        labels.push(cs::Label::secondary((), clamp(text, l.span)).with_message(l.message.clone()));
    }
    let mut notes: Vec<String> = d.notes.iter().map(|n| format!("note: {n}")).collect();
    if let Some(h) = &d.help {
        notes.push(format!("help: {h}"));
    }
    cs::Diagnostic::new(severity)
        .with_code(d.code.as_str())
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(notes)
}

/// Most diagnostics rendered with source snippets per file; the rest are counted.
pub const MAX_HUMAN_DIAGNOSTICS: usize = 200;
/// Lines longer than this (minified JSON specs) are not printed as snippets.
pub const MAX_SNIPPET_LINE: usize = 400;

/// Renders diagnostics for a terminal or a pipe.
///
/// Like rustc: code, message, the source line, the underline, labels, notes
/// and help. A diagnostic on a very long line gets a one-line form with its
/// position instead of the line, and only the first
/// [`MAX_HUMAN_DIAGNOSTICS`] are rendered (`--format json` has them all).
pub fn human(path: &str, text: &str, diagnostics: &[Diagnostic], color: bool) -> String {
    let file = SimpleFile::new(path, text);
    let config = Config::default();
    let lines = LineIndex::new(text);
    let mut out: Vec<u8> = Vec::new();
    for d in diagnostics.iter().take(MAX_HUMAN_DIAGNOSTICS) {
        let start = d.span.start as usize;
        let line_start = text
            .get(..start.min(text.len()))
            .and_then(|t| t.rfind('\n'))
            .map_or(0, |i| i + 1);
        let line_end = text
            .get(start.min(text.len())..)
            .and_then(|t| t.find('\n'))
            .map_or(text.len(), |i| start + i);
        let long_line = line_end.saturating_sub(line_start) > MAX_SNIPPET_LINE;
        let result = if long_line {
            Err(())
        } else {
            let cd = to_codespan(text, d);
            if color {
                let mut w = codespan_reporting::term::termcolor::Ansi::new(&mut out);
                term::emit_to_write_style(&mut w, &config, &file, &cd).map_err(|_| ())
            } else {
                let mut w = codespan_reporting::term::termcolor::NoColor::new(&mut out);
                term::emit_to_write_style(&mut w, &config, &file, &cd).map_err(|_| ())
            }
        };
        if result.is_err() {
            let lc = lines.line_col(text, d.span.start);
            let mut line = format!(
                "{}[{}]: {}\n  --> {path}:{}:{}\n",
                d.severity.as_str(),
                d.code.as_str(),
                d.message,
                lc.line,
                lc.column
            );
            for n in &d.notes {
                line.push_str(&format!("  = note: {n}\n"));
            }
            if let Some(h) = &d.help {
                line.push_str(&format!("  = help: {h}\n"));
            }
            line.push('\n');
            out.extend_from_slice(line.as_bytes());
        }
    }
    if diagnostics.len() > MAX_HUMAN_DIAGNOSTICS {
        let rest = diagnostics.len() - MAX_HUMAN_DIAGNOSTICS;
        out.extend_from_slice(
            format!(
                "... and {rest} more diagnostics in {path} (`--format json` lists them all)\n\n"
            )
            .as_bytes(),
        );
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One diagnostic as a JSON object (lines and columns 1-based; columns in chars).
pub fn json_diagnostic(text: &str, lines: &LineIndex, d: &Diagnostic) -> Value {
    let pos = |s: Span| {
        let a = lines.line_col(text, s.start);
        let b = lines.line_col(text, s.end);
        (a, b)
    };
    let (a, b) = pos(d.span);
    let labels: Vec<Value> = d
        .labels
        .iter()
        .map(|l| {
            let (la, lb) = pos(l.span);
            json!({"message": l.message, "line": la.line, "column": la.column, "end_line": lb.line, "end_column": lb.column})
        })
        .collect();
    json!({
        "code": d.code.as_str(),
        "severity": d.severity.as_str(),
        "message": d.message,
        "line": a.line,
        "column": a.column,
        "end_line": b.line,
        "end_column": b.column,
        "labels": labels,
        "notes": d.notes,
        "help": d.help,
    })
}

/// The `files[]` entry of one file.
pub fn json_file(path: &str, text: &str, lines: &LineIndex, diagnostics: &[Diagnostic]) -> Value {
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    json!({
        "path": path,
        "errors": errors,
        "warnings": diagnostics.len() - errors,
        "diagnostics": diagnostics.iter().map(|d| json_diagnostic(text, lines, d)).collect::<Vec<_>>(),
    })
}
