//! The server: capabilities, initialization, the main loop and shutdown.
//!
//! Owns: the server state (the compiler's database and the open
//! documents), the main loop over [`Event`]s with one dispatch per event,
//! sending responses and `publishDiagnostics`, the shutdown/exit protocol,
//! and the last line of defence against a panicking handler (an LSP error
//! response instead of a dead server).
//! Must never: decode method names (the event module does), convert
//! positions (the convert module does), or print to stdout (the protocol).

use std::panic::{AssertUnwindSafe, catch_unwind};

use lsp_server::{Connection, ErrorCode, Message, Notification, RequestId, Response};
use lsp_types::notification::{Notification as _, PublishDiagnostics};
use lsp_types::{
    CodeActionKind, CodeActionOptions, CodeActionProviderCapability, CompletionOptions,
    FoldingRangeProviderCapability, HoverProviderCapability, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, RenameOptions, ServerCapabilities, ServerInfo,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
};
use serde::Serialize;
use stratum_compiler::ide::Db;

use crate::documents::Documents;
use crate::event::{Event, Note, Req};
use crate::handlers::{self, Failure, Snapshot};

/// What the server offers.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        position_encoding: Some(PositionEncodingKind::UTF16),
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                ..Default::default()
            },
        )),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), "$".into(), "{".into()]),
            ..Default::default()
        }),
        document_symbol_provider: Some(OneOf::Left(true)),
        folding_range_provider: Some(FoldingRangeProviderCapability::Simple(true)),
        code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
            code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// How the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `shutdown` then `exit`, as the protocol asks (exit status 0).
    Clean,
    /// `exit` without `shutdown`, or the client went away (exit status 1).
    Abrupt,
}

/// Serves one client over stdio until it exits.
pub fn run_stdio() -> Result<Ending, String> {
    let (connection, io_threads) = Connection::stdio();
    let ending = serve(&connection);
    // the writer thread ends only once every sender is gone
    drop(connection);
    io_threads
        .join()
        .map_err(|e| format!("the connection failed: {e}"))?;
    ending
}

/// Serves one client over `connection` (stdio, or `Connection::memory()`
/// in tests) from `initialize` to `exit`.
pub fn serve(connection: &Connection) -> Result<Ending, String> {
    let (id, params) = connection
        .initialize_start()
        .map_err(|e| format!("initialization failed: {e}"))?;
    let result = serde_json::json!({
        "capabilities": capabilities(),
        "serverInfo": ServerInfo {
            name: "stratumc".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        },
    });
    connection
        .initialize_finish(id, result)
        .map_err(|e| format!("initialization failed: {e}"))?;
    if watches_dynamically(&params) {
        register_config_watcher(connection);
    }
    let mut server = Server {
        connection,
        db: Db::new(),
        docs: Documents::default(),
        shutdown: false,
    };
    for message in &connection.receiver {
        if let Some(ending) = server.handle(Event::from_message(message)) {
            return Ok(ending);
        }
    }
    Ok(Ending::Abrupt)
}

/// Whether the client lets the server register file watchers
/// (`workspace.didChangeWatchedFiles.dynamicRegistration`).
fn watches_dynamically(params: &serde_json::Value) -> bool {
    serde_json::from_value::<lsp_types::InitializeParams>(params.clone())
        .ok()
        .and_then(|p| {
            p.capabilities
                .workspace?
                .did_change_watched_files?
                .dynamic_registration
        })
        .unwrap_or(false)
}

/// Asks the client to report changes of every `stratum.toml` (the
/// environment input of the documents): `client/registerCapability`. The
/// client's answer needs no action.
fn register_config_watcher(connection: &Connection) {
    use lsp_types::request::{RegisterCapability, Request as _};
    let options = lsp_types::DidChangeWatchedFilesRegistrationOptions {
        watchers: vec![lsp_types::FileSystemWatcher {
            glob_pattern: lsp_types::GlobPattern::String("**/stratum.toml".into()),
            kind: None,
        }],
    };
    let params = lsp_types::RegistrationParams {
        registrations: vec![lsp_types::Registration {
            id: "stratum-toml".into(),
            method: "workspace/didChangeWatchedFiles".into(),
            register_options: serde_json::to_value(options).ok(),
        }],
    };
    let request = lsp_server::Request::new(
        RequestId::from("register-stratum-toml".to_string()),
        RegisterCapability::METHOD.into(),
        params,
    );
    if connection.sender.send(Message::Request(request)).is_err() {
        log("the client closed the connection");
    }
}

struct Server<'c> {
    connection: &'c Connection,
    db: Db,
    docs: Documents,
    /// `shutdown` was answered: only `exit` is expected now.
    shutdown: bool,
}

impl Server<'_> {
    /// Reacts to one event; `Some` when the session is over.
    fn handle(&mut self, event: Event) -> Option<Ending> {
        match event {
            Event::Request(id, req) => self.request(id, req),
            Event::Note(note) => return self.notification(note),
            Event::Response => {}
        }
        None
    }

    fn notification(&mut self, note: Note) -> Option<Ending> {
        match note {
            Note::Exit => {
                return Some(if self.shutdown {
                    Ending::Clean
                } else {
                    Ending::Abrupt
                });
            }
            Note::DidOpen(p) => self.notified(|db, docs| handlers::did_open(db, docs, p).map(Some)),
            Note::DidChange(p) => self.notified(|db, docs| handlers::did_change(db, docs, p)),
            Note::DidClose(p) => {
                self.notified(|db, docs| Ok(Some(handlers::did_close(db, docs, p))))
            }
            Note::DidChangeWatchedFiles(p) => {
                let (db, docs) = (&mut self.db, &self.docs);
                match catch_unwind(AssertUnwindSafe(|| {
                    handlers::did_change_watched_files(db, docs, p)
                })) {
                    Ok(all) => all.into_iter().for_each(|params| self.publish(params)),
                    Err(panic) => log(&format!("analysis failed: {}", panic_message(panic))),
                }
            }
            Note::Ignored => {}
            Note::Invalid { method, error } => log(&format!(
                "ignored `{method}` with invalid parameters: {error}"
            )),
        }
        None
    }

    fn request(&mut self, id: RequestId, req: Req) {
        if self.shutdown {
            return self.respond(Response::new_err(
                id,
                ErrorCode::InvalidRequest as i32,
                "the server is shutting down; only `exit` is accepted".into(),
            ));
        }
        let s = Snapshot {
            db: &self.db,
            docs: &self.docs,
        };
        let response = match req {
            Req::Initialize => Response::new_err(
                id,
                ErrorCode::InvalidRequest as i32,
                "the server is already initialized".into(),
            ),
            Req::Shutdown => {
                self.shutdown = true;
                Response::new_ok(id, ())
            }
            Req::Hover(p) => answer(id, || handlers::hover(&s, p)),
            Req::Definition(p) => answer(id, || handlers::definition(&s, p)),
            Req::References(p) => answer(id, || handlers::references(&s, p)),
            Req::PrepareRename(p) => answer(id, || handlers::prepare_rename(&s, p)),
            Req::Rename(p) => answer(id, || handlers::rename(&s, p)),
            Req::Completion(p) => answer(id, || handlers::completion(&s, p)),
            Req::DocumentSymbol(p) => answer(id, || handlers::document_symbol(&s, p)),
            Req::FoldingRange(p) => answer(id, || handlers::folding_range(&s, p)),
            Req::CodeAction(p) => answer(id, || handlers::code_action(&s, p)),
            Req::Unknown(method) => Response::new_err(
                id,
                ErrorCode::MethodNotFound as i32,
                format!("stratumc lsp does not implement `{method}`"),
            ),
            Req::Invalid { method, error } => Response::new_err(
                id,
                ErrorCode::InvalidParams as i32,
                format!("invalid parameters for `{method}`: {error}"),
            ),
        };
        self.respond(response);
    }

    /// Runs a notification handler and publishes the diagnostics it
    /// returns. A handler's complaint is logged; a panic (a compiler bug) is
    /// logged instead of ending the session.
    fn notified(
        &mut self,
        handler: impl FnOnce(
            &mut Db,
            &mut Documents,
        ) -> Result<Option<PublishDiagnosticsParams>, String>,
    ) {
        let (db, docs) = (&mut self.db, &mut self.docs);
        match catch_unwind(AssertUnwindSafe(|| handler(db, docs))) {
            Ok(Ok(Some(params))) => self.publish(params),
            Ok(Ok(None)) => {}
            Ok(Err(complaint)) => log(&complaint),
            Err(panic) => log(&format!("analysis failed: {}", panic_message(panic))),
        }
    }

    fn publish(&self, params: PublishDiagnosticsParams) {
        self.send(Message::Notification(Notification::new(
            PublishDiagnostics::METHOD.into(),
            params,
        )));
    }

    fn respond(&self, response: Response) {
        self.send(Message::Response(response));
    }

    fn send(&self, message: Message) {
        // the client is gone when this fails; the loop ends on the next receive
        if self.connection.sender.send(message).is_err() {
            log("the client closed the connection");
        }
    }
}

/// Runs a request handler and builds its response: the result, an LSP
/// error for a refused or impossible request, or `InternalError` if the
/// handler panicked.
fn answer<T: Serialize>(id: RequestId, f: impl FnOnce() -> Result<T, Failure>) -> Response {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Response::new_ok(id, value),
        Ok(Err(Failure::NotOpen(uri))) => Response::new_err(
            id,
            ErrorCode::InvalidParams as i32,
            format!(
                "the document {} is not open (send textDocument/didOpen first)",
                uri.as_str()
            ),
        ),
        Ok(Err(Failure::Refused(why))) => {
            Response::new_err(id, ErrorCode::RequestFailed as i32, why)
        }
        Err(panic) => Response::new_err(
            id,
            ErrorCode::InternalError as i32,
            format!("internal error in stratumc lsp: {}", panic_message(panic)),
        ),
    }
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Server-side log: stderr, which LSP clients keep apart from the protocol.
pub(crate) fn log(message: &str) {
    eprintln!("stratumc lsp: {message}");
}
