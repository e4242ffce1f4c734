//! One handler per LSP method.
//!
//! Owns: what each request and notification does: updating the open
//! documents, calling the compiler's `ide` API,
//! and turning its plain values (byte spans, diagnostics, symbols, edits)
//! into `lsp-types` values through [`crate::convert`].
//! Must never: implement a language rule, count UTF-16 units (only
//! `convert` does), or send messages (handlers return values; the server
//! module sends them).

use std::collections::HashMap;

use lsp_types::{
    CodeActionKind, CodeActionOrCommand, CodeActionParams, CompletionItemKind, CompletionParams,
    CompletionResponse, Diagnostic as LspDiagnostic, DiagnosticRelatedInformation,
    DiagnosticSeverity, DidChangeTextDocumentParams, DidChangeWatchedFilesParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DocumentSymbol, DocumentSymbolParams,
    DocumentSymbolResponse, FoldingRange, FoldingRangeKind, FoldingRangeParams,
    GotoDefinitionParams, GotoDefinitionResponse, Hover, HoverContents, HoverParams, Location,
    MarkupContent, MarkupKind, NumberOrString, Position, PrepareRenameResponse,
    PublishDiagnosticsParams, ReferenceParams, RenameParams, SymbolKind as LspSymbolKind,
    TextDocumentPositionParams, TextEdit as LspTextEdit, Uri, WorkspaceEdit,
};
use stratum_compiler::diagnostics::Diagnostic;
use stratum_compiler::ide::{self, CompletionKind, Db, SymbolKind};
use stratum_compiler::{Severity, Span};

use crate::documents::{Document, Documents};
use crate::environment;

/// Why a request could not be answered (becomes an LSP error response).
#[derive(Debug)]
pub enum Failure {
    /// The request names a document that is not open.
    NotOpen(Uri),
    /// The request is well-formed but cannot be carried out (a refused rename).
    Refused(String),
}

/// The database and the open documents, as the request handlers see them.
pub struct Snapshot<'a> {
    /// The compiler's database.
    pub db: &'a Db,
    /// The open documents.
    pub docs: &'a Documents,
}

impl<'a> Snapshot<'a> {
    fn doc(&self, uri: &Uri) -> Result<&'a Document, Failure> {
        self.docs
            .get(uri)
            .ok_or_else(|| Failure::NotOpen(uri.clone()))
    }

    fn text(&self, doc: &Document) -> &'a str {
        self.db.text(doc.file)
    }

    /// The document and the byte offset of a position in it.
    fn at(&self, uri: &Uri, position: Position) -> Result<(&'a Document, u32), Failure> {
        let doc = self.doc(uri)?;
        let offset = doc.lines.offset(self.text(doc), position);
        Ok((doc, offset))
    }

    fn location(&self, uri: &Uri, doc: &Document, span: Span) -> Location {
        Location::new(uri.clone(), doc.lines.range(self.text(doc), span))
    }

    fn edits(&self, doc: &Document, edits: Vec<ide::TextEdit>) -> Vec<LspTextEdit> {
        let text = self.text(doc);
        edits
            .into_iter()
            .map(|e| LspTextEdit::new(doc.lines.range(text, e.span), e.text))
            .collect()
    }
}

// ---- notifications -------------------------------------------------------

/// `textDocument/didOpen`: the text and the environment input (the
/// `stratum.toml` near the document) go into the database; its diagnostics
/// are published. A `stratum.toml` that cannot be used is logged and the
/// document is checked without it, as `stratumc check` does.
pub fn did_open(
    db: &mut Db,
    docs: &mut Documents,
    p: DidOpenTextDocumentParams,
) -> Result<PublishDiagnosticsParams, String> {
    let doc = p.text_document;
    let file = docs.open(db, doc.uri.clone(), doc.version, doc.text).file;
    let (env, unreadable) = environment::near(&doc.uri);
    db.set_env(file, env);
    if let Some(why) = unreadable {
        crate::server::log(&why);
    }
    publish_diagnostics(db, docs, &doc.uri)
}

/// `workspace/didChangeWatchedFiles`: when a `stratum.toml` changed (was
/// created, saved or deleted), every open document's environment is found
/// again; the diagnostics of those whose environment changed are published.
pub fn did_change_watched_files(
    db: &mut Db,
    docs: &Documents,
    p: DidChangeWatchedFilesParams,
) -> Vec<PublishDiagnosticsParams> {
    if !p.changes.iter().any(|c| environment::is_config(&c.uri)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for uri in docs.uris() {
        let Some(file) = docs.get(&uri).map(|d| d.file) else {
            continue;
        };
        let (env, unreadable) = environment::near(&uri);
        if let Some(why) = unreadable {
            crate::server::log(&why);
        }
        if db.env(file) == &env {
            continue;
        }
        db.set_env(file, env);
        if let Ok(params) = publish_diagnostics(db, docs, &uri) {
            out.push(params);
        }
    }
    out
}

/// `textDocument/didChange`: the changes are applied in order; the
/// diagnostics are published even when they did not change.
pub fn did_change(
    db: &mut Db,
    docs: &mut Documents,
    p: DidChangeTextDocumentParams,
) -> Result<Option<PublishDiagnosticsParams>, String> {
    let uri = p.text_document.uri;
    docs.change(db, &uri, p.text_document.version, p.content_changes)
        .ok_or_else(|| {
            format!(
                "didChange for a document that is not open: {}",
                uri.as_str()
            )
        })?;
    publish_diagnostics(db, docs, &uri).map(Some)
}

/// `textDocument/didClose`: the document is forgotten and its diagnostics
/// are cleared.
pub fn did_close(
    db: &mut Db,
    docs: &mut Documents,
    p: DidCloseTextDocumentParams,
) -> PublishDiagnosticsParams {
    docs.close(db, &p.text_document.uri);
    PublishDiagnosticsParams::new(p.text_document.uri, Vec::new(), None)
}

/// The diagnostics of an open document's current text, with its version.
fn publish_diagnostics(
    db: &Db,
    docs: &Documents,
    uri: &Uri,
) -> Result<PublishDiagnosticsParams, String> {
    let doc = docs
        .get(uri)
        .ok_or_else(|| format!("the document {} is not open", uri.as_str()))?;
    let text = db.text(doc.file);
    let diagnostics = ide::diagnostics(db, doc.file)
        .iter()
        .map(|d| to_lsp_diagnostic(uri, text, doc, d))
        .collect();
    Ok(PublishDiagnosticsParams::new(
        uri.clone(),
        diagnostics,
        Some(doc.version),
    ))
}

/// One compiler diagnostic as an LSP diagnostic: same code, range and
/// message; secondary labels, notes and help become related information.
/// No `codeDescription`: the project has no public location to link the
/// code's explanation to (`stratumc explain CODE` prints it).
pub fn to_lsp_diagnostic(uri: &Uri, text: &str, doc: &Document, d: &Diagnostic) -> LspDiagnostic {
    let range = doc.lines.range(text, d.span);
    let mut related: Vec<DiagnosticRelatedInformation> = d
        .labels
        .iter()
        .map(|l| DiagnosticRelatedInformation {
            location: Location::new(uri.clone(), doc.lines.range(text, l.span)),
            message: l.message.clone(),
        })
        .collect();
    let here = Location::new(uri.clone(), range);
    for note in &d.notes {
        related.push(DiagnosticRelatedInformation {
            location: here.clone(),
            message: format!("note: {note}"),
        });
    }
    if let Some(help) = &d.help {
        related.push(DiagnosticRelatedInformation {
            location: here,
            message: format!("help: {help}"),
        });
    }
    let code = d.code.as_str();
    LspDiagnostic {
        range,
        severity: Some(match d.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(code.to_string())),
        code_description: None,
        source: Some("stratumc".to_string()),
        message: d.message.clone(),
        related_information: (!related.is_empty()).then_some(related),
        tags: None,
        data: None,
    }
}

// ---- requests ------------------------------------------------------------

/// `textDocument/hover`.
pub fn hover(s: &Snapshot, p: HoverParams) -> Result<Option<Hover>, Failure> {
    let uri = &p.text_document_position_params.text_document.uri;
    let (doc, offset) = s.at(uri, p.text_document_position_params.position)?;
    Ok(ide::hover(s.db, doc.file, offset).map(|h| Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value: h.markdown,
        }),
        range: Some(doc.lines.range(s.text(doc), h.range)),
    }))
}

/// `textDocument/definition`.
pub fn definition(
    s: &Snapshot,
    p: GotoDefinitionParams,
) -> Result<Option<GotoDefinitionResponse>, Failure> {
    let uri = &p.text_document_position_params.text_document.uri;
    let (doc, offset) = s.at(uri, p.text_document_position_params.position)?;
    Ok(ide::definition(s.db, doc.file, offset)
        .map(|span| GotoDefinitionResponse::Scalar(s.location(uri, doc, span))))
}

/// `textDocument/references`.
pub fn references(s: &Snapshot, p: ReferenceParams) -> Result<Option<Vec<Location>>, Failure> {
    let uri = &p.text_document_position.text_document.uri;
    let (doc, offset) = s.at(uri, p.text_document_position.position)?;
    let spans = ide::references(s.db, doc.file, offset, p.context.include_declaration);
    if spans.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        spans
            .into_iter()
            .map(|span| s.location(uri, doc, span))
            .collect(),
    ))
}

/// `textDocument/prepareRename`.
pub fn prepare_rename(
    s: &Snapshot,
    p: TextDocumentPositionParams,
) -> Result<Option<PrepareRenameResponse>, Failure> {
    let (doc, offset) = s.at(&p.text_document.uri, p.position)?;
    let text = s.text(doc);
    Ok(ide::prepare_rename(s.db, doc.file, offset).map(|span| {
        PrepareRenameResponse::RangeWithPlaceholder {
            range: doc.lines.range(text, span),
            placeholder: text.get(span.range()).unwrap_or_default().to_string(),
        }
    }))
}

/// `textDocument/rename`: every use in one workspace edit, or the
/// compiler's reason for refusing.
pub fn rename(s: &Snapshot, p: RenameParams) -> Result<Option<WorkspaceEdit>, Failure> {
    let uri = &p.text_document_position.text_document.uri;
    let (doc, offset) = s.at(uri, p.text_document_position.position)?;
    let edits = ide::rename(s.db, doc.file, offset, &p.new_name).map_err(Failure::Refused)?;
    Ok(Some(one_file_edit(uri, s.edits(doc, edits))))
}

/// A workspace edit of one document.
// `Uri` hashes its text; clippy sees the parser's internal cells
#[allow(clippy::mutable_key_type)]
fn one_file_edit(uri: &Uri, edits: Vec<LspTextEdit>) -> WorkspaceEdit {
    WorkspaceEdit::new(HashMap::from([(uri.clone(), edits)]))
}

/// `textDocument/completion`.
pub fn completion(
    s: &Snapshot,
    p: CompletionParams,
) -> Result<Option<CompletionResponse>, Failure> {
    let uri = &p.text_document_position.text_document.uri;
    let (doc, offset) = s.at(uri, p.text_document_position.position)?;
    let items = ide::completion(s.db, doc.file, offset)
        .into_iter()
        .map(|c| lsp_types::CompletionItem {
            kind: Some(match c.kind {
                CompletionKind::Key => CompletionItemKind::PROPERTY,
                CompletionKind::Step => CompletionItemKind::REFERENCE,
                CompletionKind::Contract => CompletionItemKind::STRUCT,
                CompletionKind::Flow => CompletionItemKind::MODULE,
                CompletionKind::Field => CompletionItemKind::FIELD,
                CompletionKind::Function => CompletionItemKind::FUNCTION,
                CompletionKind::Keyword => CompletionItemKind::KEYWORD,
                CompletionKind::Value => CompletionItemKind::VALUE,
            }),
            label: c.label,
            detail: c.detail,
            insert_text: c.insert_text,
            ..Default::default()
        })
        .collect();
    Ok(Some(CompletionResponse::Array(items)))
}

/// `textDocument/documentSymbol`: contracts, flows and their steps, nested.
pub fn document_symbol(
    s: &Snapshot,
    p: DocumentSymbolParams,
) -> Result<Option<DocumentSymbolResponse>, Failure> {
    let doc = s.doc(&p.text_document.uri)?;
    let text = s.text(doc);
    let symbols = ide::symbols(s.db, doc.file)
        .into_iter()
        .map(|sym| to_lsp_symbol(text, doc, sym))
        .collect();
    Ok(Some(DocumentSymbolResponse::Nested(symbols)))
}

/// YAML node spans run up to the next token: the span without its trailing
/// blank space and line breaks.
fn trim_end(text: &str, span: Span) -> Span {
    let body = text.get(span.range()).unwrap_or_default();
    Span::new(span.start, span.start + body.trim_end().len() as u32)
}

fn to_lsp_symbol(text: &str, doc: &Document, sym: ide::Symbol) -> DocumentSymbol {
    let range = doc.lines.range(text, trim_end(text, sym.range));
    let mut selection_range = doc.lines.range(text, sym.selection);
    // LSP requires the selection inside the range
    if selection_range.start < range.start || selection_range.end > range.end {
        selection_range = range;
    }
    #[allow(deprecated)] // `deprecated` is a required field of the struct
    DocumentSymbol {
        name: sym.name,
        detail: sym.detail,
        kind: match sym.kind {
            SymbolKind::Contract => LspSymbolKind::STRUCT,
            SymbolKind::Field => LspSymbolKind::FIELD,
            SymbolKind::Flow => LspSymbolKind::FUNCTION,
            SymbolKind::Step => LspSymbolKind::METHOD,
            SymbolKind::Input => LspSymbolKind::VARIABLE,
        },
        tags: None,
        deprecated: None,
        range,
        selection_range,
        children: (!sym.children.is_empty()).then(|| {
            sym.children
                .into_iter()
                .map(|c| to_lsp_symbol(text, doc, c))
                .collect()
        }),
    }
}

/// `textDocument/foldingRange`: flows, steps and contracts, by line.
pub fn folding_range(
    s: &Snapshot,
    p: FoldingRangeParams,
) -> Result<Option<Vec<FoldingRange>>, Failure> {
    let doc = s.doc(&p.text_document.uri)?;
    let text = s.text(doc);
    let mut ranges: Vec<FoldingRange> = ide::folding(s.db, doc.file)
        .into_iter()
        .filter_map(|span| {
            // trimmed, or the fold would swallow the next item's line
            let r = doc.lines.range(text, trim_end(text, span));
            // a span ending at the start of a line does not include that line
            let end_line = if r.end.character == 0 && r.end.line > r.start.line {
                r.end.line - 1
            } else {
                r.end.line
            };
            (end_line > r.start.line).then_some(FoldingRange {
                start_line: r.start.line,
                start_character: None,
                end_line,
                end_character: None,
                kind: Some(FoldingRangeKind::Region),
                collapsed_text: None,
            })
        })
        .collect();
    ranges.sort_by_key(|r| (r.start_line, r.end_line));
    ranges.dedup_by_key(|r| (r.start_line, r.end_line));
    Ok(Some(ranges))
}

/// `textDocument/codeAction`: the did-you-mean quick fixes for the range.
pub fn code_action(
    s: &Snapshot,
    p: CodeActionParams,
) -> Result<Option<Vec<CodeActionOrCommand>>, Failure> {
    let uri = &p.text_document.uri;
    let doc = s.doc(uri)?;
    let text = s.text(doc);
    if let Some(only) = &p.context.only
        && !only
            .iter()
            .any(|k| CodeActionKind::QUICKFIX.as_str().starts_with(k.as_str()))
    {
        return Ok(Some(Vec::new()));
    }
    let range = doc.lines.span(text, p.range);
    let actions = ide::code_actions(s.db, doc.file, range)
        .into_iter()
        .map(|a| {
            let fixes: Vec<LspDiagnostic> = p
                .context
                .diagnostics
                .iter()
                .filter(|d| d.code == Some(NumberOrString::String(a.code.to_string())))
                .cloned()
                .collect();
            CodeActionOrCommand::CodeAction(lsp_types::CodeAction {
                title: a.title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: (!fixes.is_empty()).then_some(fixes),
                edit: Some(one_file_edit(uri, s.edits(doc, a.edits))),
                command: None,
                is_preferred: Some(a.preferred),
                disabled: None,
                data: None,
            })
        })
        .collect();
    Ok(Some(actions))
}
