//! The closed set of events the server's main loop reacts to.
//!
//! Owns: turning one raw `lsp_server::Message` into an [`Event`]: the method
//! name is matched once, here, and the parameters are decoded into the typed
//! `lsp-types` value of that method. A message that cannot be decoded
//! becomes an `Invalid` event (answered with an error), never a panic.
//! Must never: act on an event (the server module does), or look at
//! document text.

use lsp_server::{Message, Notification, Request, RequestId};
use lsp_types::notification::{self as n, Notification as LspNotification};
use lsp_types::request::{self as r, Request as LspRequest};
use lsp_types::{
    CodeActionParams, CompletionParams, DidChangeTextDocumentParams, DidChangeWatchedFilesParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DocumentSymbolParams,
    FoldingRangeParams, GotoDefinitionParams, HoverParams, ReferenceParams, RenameParams,
    TextDocumentPositionParams,
};
use serde::de::DeserializeOwned;

/// Everything that can happen to the server after initialization.
#[derive(Debug)]
pub enum Event {
    /// A request from the client: it gets exactly one response.
    Request(RequestId, Req),
    /// A notification from the client: it gets no response.
    Note(Note),
    /// A response to a request of ours (the server sends none, so it is ignored).
    Response,
}

/// The requests the server answers.
#[derive(Debug)]
pub enum Req {
    /// `initialize` again (it is answered once, before the main loop).
    Initialize,
    /// `shutdown`.
    Shutdown,
    /// `textDocument/hover`.
    Hover(HoverParams),
    /// `textDocument/definition`.
    Definition(GotoDefinitionParams),
    /// `textDocument/references`.
    References(ReferenceParams),
    /// `textDocument/prepareRename`.
    PrepareRename(TextDocumentPositionParams),
    /// `textDocument/rename`.
    Rename(RenameParams),
    /// `textDocument/completion`.
    Completion(CompletionParams),
    /// `textDocument/documentSymbol`.
    DocumentSymbol(DocumentSymbolParams),
    /// `textDocument/foldingRange`.
    FoldingRange(FoldingRangeParams),
    /// `textDocument/codeAction`.
    CodeAction(CodeActionParams),
    /// A method the server does not implement.
    Unknown(String),
    /// A known method whose parameters do not decode.
    Invalid {
        /// The method.
        method: String,
        /// What is wrong with the parameters.
        error: String,
    },
}

/// The notifications the server reacts to.
#[derive(Debug)]
pub enum Note {
    /// `textDocument/didOpen`.
    DidOpen(DidOpenTextDocumentParams),
    /// `textDocument/didChange`.
    DidChange(DidChangeTextDocumentParams),
    /// `textDocument/didClose`.
    DidClose(DidCloseTextDocumentParams),
    /// `workspace/didChangeWatchedFiles` (a `stratum.toml` may have changed).
    DidChangeWatchedFiles(DidChangeWatchedFilesParams),
    /// `exit`.
    Exit,
    /// Anything else (`initialized`, `$/cancelRequest`, `didSave`, ...): nothing to do.
    Ignored,
    /// A known notification whose parameters do not decode.
    Invalid {
        /// The method.
        method: String,
        /// What is wrong with the parameters.
        error: String,
    },
}

impl Event {
    /// Classifies one message.
    pub fn from_message(message: Message) -> Event {
        match message {
            Message::Request(request) => {
                let id = request.id.clone();
                Event::Request(id, Req::from_request(request))
            }
            Message::Notification(note) => Event::Note(Note::from_notification(note)),
            Message::Response(_) => Event::Response,
        }
    }
}

impl Req {
    fn from_request(request: Request) -> Req {
        let Request { method, params, .. } = request;
        match method.as_str() {
            r::Initialize::METHOD => Req::Initialize,
            r::Shutdown::METHOD => Req::Shutdown,
            r::HoverRequest::METHOD => decode(method, params, Req::Hover),
            r::GotoDefinition::METHOD => decode(method, params, Req::Definition),
            r::References::METHOD => decode(method, params, Req::References),
            r::PrepareRenameRequest::METHOD => decode(method, params, Req::PrepareRename),
            r::Rename::METHOD => decode(method, params, Req::Rename),
            r::Completion::METHOD => decode(method, params, Req::Completion),
            r::DocumentSymbolRequest::METHOD => decode(method, params, Req::DocumentSymbol),
            r::FoldingRangeRequest::METHOD => decode(method, params, Req::FoldingRange),
            r::CodeActionRequest::METHOD => decode(method, params, Req::CodeAction),
            _ => Req::Unknown(method),
        }
    }
}

impl Note {
    fn from_notification(note: Notification) -> Note {
        let Notification { method, params } = note;
        match method.as_str() {
            n::DidOpenTextDocument::METHOD => decode_note(method, params, Note::DidOpen),
            n::DidChangeTextDocument::METHOD => decode_note(method, params, Note::DidChange),
            n::DidCloseTextDocument::METHOD => decode_note(method, params, Note::DidClose),
            n::DidChangeWatchedFiles::METHOD => {
                decode_note(method, params, Note::DidChangeWatchedFiles)
            }
            n::Exit::METHOD => Note::Exit,
            _ => Note::Ignored,
        }
    }
}

fn decode<P: DeserializeOwned>(
    method: String,
    params: serde_json::Value,
    make: impl FnOnce(P) -> Req,
) -> Req {
    match serde_json::from_value(params) {
        Ok(p) => make(p),
        Err(e) => Req::Invalid {
            method,
            error: e.to_string(),
        },
    }
}

fn decode_note<P: DeserializeOwned>(
    method: String,
    params: serde_json::Value,
    make: impl FnOnce(P) -> Note,
) -> Note {
    match serde_json::from_value(params) {
        Ok(p) => make(p),
        Err(e) => Note::Invalid {
            method,
            error: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_params_become_invalid_events() {
        let msg = Message::Request(Request::new(
            RequestId::from(1),
            "textDocument/hover".into(),
            serde_json::json!({"textDocument": 3}),
        ));
        match Event::from_message(msg) {
            Event::Request(_, Req::Invalid { method, .. }) => {
                assert_eq!(method, "textDocument/hover")
            }
            other => panic!("expected an invalid request, got {other:?}"),
        }
        let msg = Message::Notification(Notification::new(
            "textDocument/didOpen".into(),
            serde_json::json!(null),
        ));
        assert!(matches!(
            Event::from_message(msg),
            Event::Note(Note::Invalid { .. })
        ));
        let msg = Message::Request(Request::new(
            RequestId::from(2),
            "workspace/symbol".into(),
            serde_json::json!({}),
        ));
        assert!(matches!(
            Event::from_message(msg),
            Event::Request(_, Req::Unknown(m)) if m == "workspace/symbol"
        ));
    }
}
