//! The public analysis API: source text in, plain data out.
//!
//! Owns: running the stages in order (bytes → text → YAML → AST → checked IR)
//! and collecting their diagnostics. The CLI, the LSP and the MCP server call
//! [`analyze`] / [`analyze_with`] (with the environment input,
//! [`crate::env::CheckEnv`]) / [`analyze_bytes`] and never re-implement a rule.
//! Must never: print, read files, or keep state between calls.

use crate::check;
use crate::diagnostics::{Code, Diagnostic, Sink};
use crate::ir::Ir;
use crate::source::{LineIndex, Span};
use crate::syntax::{ast::Spec, decode};
use crate::yaml;

/// Largest spec accepted, in bytes.
pub const MAX_FILE_SIZE: usize = 16 * 1024 * 1024;

/// Everything the front end knows about one spec.
#[derive(Debug)]
pub struct Analysis {
    /// The text analysed (lossily decoded when the bytes were not UTF-8).
    pub text: String,
    /// Line index of `text`.
    pub lines: LineIndex,
    /// Diagnostics sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The decoded syntax tree (partial when there were errors).
    pub spec: Spec,
    /// The checked IR, present exactly when there are no errors.
    pub ir: Option<Ir>,
}

impl Analysis {
    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    /// Number of warnings.
    pub fn warning_count(&self) -> usize {
        self.diagnostics.len() - self.error_count()
    }

    /// Adds the `--portable` warnings (one per use of a language 1.1
    /// addition, [`check::portable`]), keeping the diagnostics in order.
    pub fn with_portability_warnings(mut self) -> Analysis {
        let mut sink = Sink::default();
        for d in self.diagnostics.drain(..) {
            sink.push(d);
        }
        for d in check::portable::warnings(&self.spec) {
            sink.push(d);
        }
        self.diagnostics = sink.finish();
        self
    }
}

/// The diagnostic for a spec over [`MAX_FILE_SIZE`] (nothing else is read).
pub fn too_large(len: usize) -> Diagnostic {
    Diagnostic::new(
        Code::FileTooLarge,
        Span::at(0),
        format!("the file is {len} bytes; specs are limited to {MAX_FILE_SIZE} bytes"),
    )
}

/// Analyses raw file contents (checks UTF-8 and size first).
pub fn analyze_bytes(bytes: &[u8]) -> Analysis {
    analyze_bytes_with(bytes, &crate::env::CheckEnv::default())
}

/// [`analyze_bytes`] with the environment input.
pub fn analyze_bytes_with(bytes: &[u8], env: &crate::env::CheckEnv) -> Analysis {
    if bytes.len() > MAX_FILE_SIZE {
        let text = String::new();
        let d = too_large(bytes.len());
        return Analysis {
            lines: LineIndex::new(&text),
            text,
            diagnostics: vec![d],
            spec: Spec::default(),
            ir: None,
        };
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => analyze_with(text, env),
        Err(e) => {
            let text = String::from_utf8_lossy(bytes).into_owned();
            // the lossy text keeps every valid prefix byte-for-byte
            let at = e.valid_up_to() as u32;
            let end = next_char_end(&text, at);
            let d = Diagnostic::new(
                Code::InvalidUtf8,
                Span::new(at, end),
                format!("the file is not UTF-8 text: invalid byte at offset {at}"),
            )
            .with_help("save the spec as UTF-8");
            Analysis {
                lines: LineIndex::new(&text),
                text,
                diagnostics: vec![d],
                spec: Spec::default(),
                ir: None,
            }
        }
    }
}

fn next_char_end(text: &str, at: u32) -> u32 {
    text.get(at as usize..)
        .and_then(|r| r.chars().next())
        .map_or(at, |c| at + c.len_utf8() as u32)
}

/// Analyses a spec given as text, without an environment (no
/// `stratum.toml` known: [`crate::env::CheckEnv::default`]).
pub fn analyze(text: &str) -> Analysis {
    analyze_with(text, &crate::env::CheckEnv::default())
}

/// Analyses a spec given as text with the environment input (the
/// `stratum.toml` near it): also the checks that need it ([`crate::env`]).
pub fn analyze_with(text: &str, env: &crate::env::CheckEnv) -> Analysis {
    let mut sink = Sink::default();
    let loaded = yaml::load(text);
    let yaml_failed = loaded.root.is_none() && !loaded.diagnostics.is_empty();
    let yaml_errors = !loaded.diagnostics.is_empty();
    for d in loaded.diagnostics {
        sink.push(d);
    }
    let mut spec = Spec::default();
    let mut ir = None;
    if !yaml_failed {
        spec = decode::decode(loaded.root.as_ref(), text.len() as u32, &mut sink);
        ir = check::check(&spec, text, &mut sink);
        crate::env::warnings(&spec, env)
            .into_iter()
            .for_each(|d| sink.push(d));
        if yaml_errors {
            ir = None;
        }
        if let Some(ir) = &ir {
            let config = crate::cost::CostConfig::default();
            crate::cost::budget_warnings(ir, &config)
                .into_iter()
                .for_each(|d| sink.push(d));
        }
    }
    Analysis {
        text: text.to_string(),
        lines: LineIndex::new(text),
        diagnostics: sink.finish(),
        spec,
        ir,
    }
}
