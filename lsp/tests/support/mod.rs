//! A small LSP client for the in-process tests: the server runs on a thread
//! over `Connection::memory()`, the test speaks JSON-RPC to it.
//!
//! Owns: starting/stopping the server, typed requests and notifications,
//! collecting `publishDiagnostics`, and computing UTF-16 positions of
//! needles in a text *independently* of the server's own conversion.
//! Must never: share code with the server's position conversion (the tests
//! would then check the code against itself).

#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::VecDeque;
use std::thread::JoinHandle;
use std::time::Duration;

use lsp_server::{Connection, Message, Notification, Request, RequestId, Response, ResponseError};
use lsp_types::notification::{
    DidChangeTextDocument, DidOpenTextDocument, Exit, Initialized, Notification as LspNotification,
    PublishDiagnostics,
};
use lsp_types::request::{Initialize, Request as LspRequest, Shutdown};
use lsp_types::{
    DidChangeTextDocumentParams, DidOpenTextDocumentParams, InitializeParams, Position,
    PublishDiagnosticsParams, Range, TextDocumentContentChangeEvent, TextDocumentIdentifier,
    TextDocumentItem, TextDocumentPositionParams, Uri, VersionedTextDocumentIdentifier,
};
use stratum_lsp::Ending;

/// A generous bound that only turns a hung server into a failure instead
/// of a hung test run; nothing is timed.
const HANG: Duration = Duration::from_secs(120);

/// A client connected to an in-process server.
pub struct Client {
    conn: Connection,
    server: Option<JoinHandle<Result<Ending, String>>>,
    next_id: i32,
    /// `publishDiagnostics` received and not yet taken.
    diagnostics: VecDeque<PublishDiagnosticsParams>,
    /// The server's answer to `initialize`.
    pub init: serde_json::Value,
}

impl Client {
    /// Starts a server and completes the initialize handshake.
    pub fn start() -> Client {
        let (server_conn, conn) = Connection::memory();
        let server = std::thread::spawn(move || stratum_lsp::serve(&server_conn));
        let mut client = Client {
            conn,
            server: Some(server),
            next_id: 0,
            diagnostics: VecDeque::new(),
            init: serde_json::Value::Null,
        };
        let init = client
            .request::<Initialize>(InitializeParams::default())
            .expect("initialize succeeds");
        client.init = serde_json::to_value(init).expect("InitializeResult serialises");
        client.notify::<Initialized>(lsp_types::InitializedParams {});
        client
    }

    /// Sends a notification.
    pub fn notify<N: LspNotification>(&self, params: N::Params) {
        self.send(Message::Notification(Notification::new(
            N::METHOD.into(),
            params,
        )));
    }

    /// Sends a raw message.
    pub fn send(&self, message: Message) {
        self.conn
            .sender
            .send(message)
            .expect("the server is running");
    }

    /// Sends a typed request and waits for its response.
    pub fn request<R: LspRequest>(
        &mut self,
        params: R::Params,
    ) -> Result<R::Result, ResponseError> {
        let response = self.raw_request(R::METHOD, serde_json::to_value(params).unwrap());
        let value = response.response_result?;
        Ok(serde_json::from_value(value)
            .unwrap_or_else(|e| panic!("{} result does not decode: {e}", R::METHOD)))
    }

    /// Sends a request with any method and parameters; returns the response.
    pub fn raw_request(&mut self, method: &str, params: serde_json::Value) -> Response {
        self.next_id += 1;
        let id = RequestId::from(self.next_id);
        self.send(Message::Request(Request::new(
            id.clone(),
            method.into(),
            params,
        )));
        loop {
            match self.recv() {
                Message::Response(r) if r.id == id => return r,
                Message::Response(r) => panic!("a response to an unknown request: {r:?}"),
                Message::Notification(n) => self.keep(n),
                Message::Request(r) => panic!("the server sent a request: {r:?}"),
            }
        }
    }

    fn recv(&self) -> Message {
        self.conn
            .receiver
            .recv_timeout(HANG)
            .expect("the server answers (or it hung)")
    }

    fn keep(&mut self, n: Notification) {
        if n.method == PublishDiagnostics::METHOD {
            self.diagnostics
                .push_back(serde_json::from_value(n.params).expect("publishDiagnostics decodes"));
        }
    }

    /// The next `publishDiagnostics` the server sends.
    pub fn next_diagnostics(&mut self) -> PublishDiagnosticsParams {
        if let Some(d) = self.diagnostics.pop_front() {
            return d;
        }
        match self.recv() {
            Message::Notification(n) if n.method == PublishDiagnostics::METHOD => {
                serde_json::from_value(n.params).expect("publishDiagnostics decodes")
            }
            other => panic!("expected publishDiagnostics, got {other:?}"),
        }
    }

    /// Opens a document and returns the diagnostics published for it.
    pub fn open(&mut self, uri: &Uri, text: &str) -> PublishDiagnosticsParams {
        self.notify::<DidOpenTextDocument>(DidOpenTextDocumentParams {
            text_document: TextDocumentItem::new(uri.clone(), "stratum".into(), 1, text.into()),
        });
        let d = self.next_diagnostics();
        assert_eq!(&d.uri, uri);
        d
    }

    /// Sends changes and returns the diagnostics published after them.
    pub fn change(
        &mut self,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
    ) -> PublishDiagnosticsParams {
        self.notify::<DidChangeTextDocument>(DidChangeTextDocumentParams {
            text_document: VersionedTextDocumentIdentifier::new(uri.clone(), version),
            content_changes: changes,
        });
        let d = self.next_diagnostics();
        assert_eq!(&d.uri, uri);
        assert_eq!(d.version, Some(version));
        d
    }

    /// `shutdown` then `exit`; returns how the server saw the ending.
    pub fn shutdown(mut self) -> Ending {
        self.request::<Shutdown>(()).expect("shutdown succeeds");
        self.notify::<Exit>(());
        self.join()
    }

    /// Waits for the server thread.
    pub fn join(mut self) -> Ending {
        let server = self.server.take().expect("joined once");
        server
            .join()
            .expect("the server thread does not panic")
            .expect("the server ends without a protocol error")
    }
}

/// A `file://` URI for a test document.
pub fn uri(name: &str) -> Uri {
    format!("file:///tmp/stratum-lsp-tests/{name}")
        .parse()
        .expect("a valid URI")
}

/// The UTF-16 position of byte `offset` in `text`, computed the slow,
/// obvious way.
pub fn position_of_offset(text: &str, offset: usize) -> Position {
    let before = &text[..offset];
    let line = before.matches('\n').count() as u32;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let character = before[line_start..].encode_utf16().count() as u32;
    Position::new(line, character)
}

/// The position of the start of the `nth` (0-based) occurrence of `needle`.
pub fn pos(text: &str, needle: &str, nth: usize) -> Position {
    let offset = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("{needle:?} occurs fewer than {} times", nth + 1))
        .0;
    position_of_offset(text, offset)
}

/// The range of the `nth` occurrence of `needle`.
pub fn range(text: &str, needle: &str, nth: usize) -> Range {
    let start = pos(text, needle, nth);
    let offset = text.match_indices(needle).nth(nth).unwrap().0;
    Range::new(start, position_of_offset(text, offset + needle.len()))
}

/// The text covered by an LSP range, extracted the slow, obvious way.
pub fn text_of(text: &str, range: Range) -> String {
    let offset = |p: Position| {
        let mut line_start = 0;
        for _ in 0..p.line {
            line_start += text[line_start..].find('\n').unwrap() + 1;
        }
        let mut units = 0;
        for (i, c) in text[line_start..].char_indices() {
            if units >= p.character || c == '\n' {
                return line_start + i;
            }
            units += c.len_utf16() as u32;
        }
        text.len()
    };
    text[offset(range.start)..offset(range.end)].to_string()
}

/// Parameters naming a position in a document.
pub fn at(uri: &Uri, position: Position) -> TextDocumentPositionParams {
    TextDocumentPositionParams::new(TextDocumentIdentifier::new(uri.clone()), position)
}
