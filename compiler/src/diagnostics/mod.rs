//! The one diagnostic type of stratumc, and its renderers.
//!
//! Owns: [`Diagnostic`] (code, severity, primary span and message, labels,
//! notes, help), the code catalogue ([`codes`]), and the human and JSON
//! renderers. Every consumer (CLI, LSP, MCP) converts these plain values; none
//! builds its own.
//! Must never: decide whether a spec is valid — checks create diagnostics,
//! this module only describes and prints them.

pub mod ci;
pub mod codes;
pub mod render;

pub use codes::Code;

use crate::source::Span;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The spec is invalid.
    Error,
    /// The spec is valid but suspicious.
    Warning,
}

impl Severity {
    /// `"error"` or `"warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A secondary location that helps explain a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What is there (lower-case, short).
    pub message: String,
}

/// One problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The stable code.
    pub code: Code,
    /// Error or warning (the code's default).
    pub severity: Severity,
    /// What is wrong (lower-case, no trailing period).
    pub message: String,
    /// Where it is wrong: byte range in the file.
    pub span: Span,
    /// Optional text under the primary underline.
    pub span_label: Option<String>,
    /// Secondary locations.
    pub labels: Vec<Label>,
    /// Extra facts.
    pub notes: Vec<String>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with the code's default severity.
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: code.severity(),
            message: message.into(),
            span,
            span_label: None,
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    /// Adds a secondary label.
    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }

    /// Sets the text under the primary underline.
    pub fn with_span_label(mut self, message: impl Into<String>) -> Self {
        self.span_label = Some(message.into());
        self
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Sets the help text.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Sets the help text when there is one.
    pub fn with_help_opt(mut self, help: Option<String>) -> Self {
        if help.is_some() {
            self.help = help;
        }
        self
    }

    /// The name a did-you-mean help proposes (the help written by
    /// [`did_you_mean`]), for quick fixes.
    pub fn suggestion(&self) -> Option<&str> {
        let help = self.help.as_deref()?;
        let rest = help.strip_prefix("did you mean `")?;
        let end = rest.find("`?")?;
        Some(&rest[..end])
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Collects diagnostics while a stage runs.
#[derive(Debug, Default)]
pub struct Sink {
    diagnostics: Vec<Diagnostic>,
}

impl Sink {
    /// Records a diagnostic.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    /// The diagnostic recorded last.
    pub fn last_mut(&mut self) -> Option<&mut Diagnostic> {
        self.diagnostics.last_mut()
    }

    /// Whether any error was recorded.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// Number of diagnostics so far.
    pub fn len(&self) -> usize {
        self.diagnostics.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.diagnostics.is_empty()
    }

    /// The diagnostics in the order they were recorded (not sorted).
    pub fn into_unsorted(self) -> Vec<Diagnostic> {
        self.diagnostics
    }

    /// The diagnostics, sorted by position then code, duplicates removed.
    pub fn finish(mut self) -> Vec<Diagnostic> {
        self.diagnostics.sort_by(|a, b| {
            (a.span.start, a.span.end, a.code).cmp(&(b.span.start, b.span.end, b.code))
        });
        self.diagnostics
            .dedup_by(|a, b| a.code == b.code && a.span == b.span && a.message == b.message);
        self.diagnostics
    }
}

/// Did-you-mean: the candidate closest to `name` when it is close enough
/// (the toolchain's one rule for it lives in the VM crate, which also reads
/// `stratum.toml`).
pub use stratum_vm::suggest::suggest;

/// A "did you mean" help text, when a suggestion exists.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    suggest(name, candidates).map(|s| format!("did you mean `{s}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_pick_close_names() {
        assert_eq!(
            suggest("atempts", ["attempts", "after", "agent"]),
            Some("attempts")
        );
        assert_eq!(suggest("ensrue", ["ensure", "out"]), Some("ensure"));
        assert_eq!(suggest("zzz", ["ensure", "out"]), None);
        assert_eq!(suggest("out", ["out"]), None);
    }

    #[test]
    fn every_code_has_a_unique_string_and_an_explanation() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {}", code.as_str());
            assert_eq!(Code::parse(code.as_str()), Some(*code));
            assert!(
                code.explanation()
                    .starts_with(&format!("# {}", code.as_str())),
                "{} explanation",
                code.as_str()
            );
        }
    }
}
