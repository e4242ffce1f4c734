//! Benchmark of the language server as an editor sees it: from sending
//! `didOpen`/`didChange` to receiving `publishDiagnostics`, over an
//! in-memory connection (JSON values, UTF-16 conversion and the compiler's
//! incremental database included; no process or pipe).
//!
//! Owns: timing the round trip on generated specs of about 5,000 lines
//! (`testgen::generate_spec`: one flow of 700 steps, and ten flows of 70):
//! opening a document in a fresh server (a full analysis, nothing cached),
//! and a one-character incremental edit inside an `ensure` expression (toggled
//! between two values, so every iteration is a real change).
//! Must never: time the generator, or benchmark a spec with diagnostics.

use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

/// The allocator of the `stratumc` binary, so that the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use lsp_server::{Connection, Message, Notification, Request, RequestId};
use serde_json::{Value, json};
use stratum_compiler::testgen::{generate_multi_flow_spec as multi_flow, generate_spec};

struct Client {
    conn: Connection,
    server: Option<std::thread::JoinHandle<Result<stratum_lsp::Ending, String>>>,
}

impl Client {
    fn start() -> Client {
        let (server_conn, conn) = Connection::memory();
        let server = std::thread::spawn(move || stratum_lsp::serve(&server_conn));
        let client = Client {
            conn,
            server: Some(server),
        };
        client.send(Message::Request(Request::new(
            RequestId::from(1),
            "initialize".into(),
            json!({"capabilities": {}}),
        )));
        client.recv();
        client.notify("initialized", json!({}));
        client
    }

    fn send(&self, m: Message) {
        self.conn.sender.send(m).expect("the server runs");
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(Message::Notification(Notification::new(
            method.into(),
            params,
        )));
    }

    fn recv(&self) -> Message {
        self.conn.receiver.recv().expect("the server answers")
    }

    /// Waits for the next diagnostics; returns how many there were.
    fn diagnostics(&self) -> usize {
        loop {
            if let Message::Notification(n) = self.recv()
                && n.method == "textDocument/publishDiagnostics"
            {
                return n.params["diagnostics"].as_array().map_or(0, Vec::len);
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.send(Message::Request(Request::new(
            RequestId::from(2),
            "shutdown".into(),
            Value::Null,
        )));
        self.notify("exit", Value::Null);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// The UTF-16 position of byte `offset` (the spec is ASCII, so bytes = units).
fn position(text: &str, offset: usize) -> Value {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let character = offset - before.rfind('\n').map_or(0, |i| i + 1);
    json!({"line": line, "character": character})
}

fn bench_roundtrip(c: &mut Criterion) {
    // one flow of 700 steps, and ten flows of 70: about 5,000 lines each
    bench_spec(c, "one_flow", &generate_spec(700));
    bench_spec(c, "ten_flows", &multi_flow(10, 70));
}

fn bench_spec(c: &mut Criterion, shape: &str, text: &str) {
    let lines = text.lines().count();
    assert!(text.is_ascii());
    let uri = &format!("file:///bench/{shape}.stratum.yaml");
    let open = |client: &Client, uri: &str, version: i32| {
        client.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "yaml", "version": version, "text": text}}),
        );
        client.diagnostics()
    };

    let mut group = c.benchmark_group(format!("lsp_{shape}_{lines}_lines"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    // the first document of a fresh server: a full analysis with nothing
    // cached (starting and stopping the server is not timed)
    group.bench_function("open", |b| {
        b.iter_batched(
            Client::start,
            |fresh| {
                assert_eq!(open(&fresh, uri, 1), 0);
                fresh
            },
            BatchSize::PerIteration,
        )
    });

    let client = Client::start();
    assert_eq!(
        open(&client, uri, 1),
        0,
        "the generated spec has diagnostics"
    );
    let mut version = 1;
    // the `5` of the first `>= 0.5` in the middle of the spec
    let middle = text.len() / 2;
    let at = middle
        + text[middle..]
            .find(">= 0.5")
            .expect("an ensure with `>= 0.5`")
        + 5;
    let range = json!({"start": position(text, at), "end": position(text, at + 1)});
    let mut digit = '5';
    group.bench_function("one_char_edit", |b| {
        b.iter(|| {
            version += 1;
            digit = if digit == '5' { '6' } else { '5' };
            client.notify(
                "textDocument/didChange",
                json!({
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"range": range, "text": digit.to_string()}],
                }),
            );
            client.diagnostics()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_roundtrip);
criterion_main!(benches);
