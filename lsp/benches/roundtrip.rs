//! Benchmark of the language server as an editor sees it: from sending
//! `didOpen`/`didChange` to receiving `publishDiagnostics`, over an
//! in-memory connection (JSON values, UTF-16 conversion and the compiler's
//! incremental database included; no process or pipe), through the client
//! of the server's own tests (`tests/support`).
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

use lsp_types::{Range, TextDocumentContentChangeEvent};
use stratum_compiler::testgen::{generate_multi_flow_spec as multi_flow, generate_spec};

// the in-process client of the server's tests
#[path = "../tests/support/mod.rs"]
mod support;
use support::{Client, position_of_offset, uri};

fn bench_roundtrip(c: &mut Criterion) {
    // one flow of 700 steps, and ten flows of 70: about 5,000 lines each
    bench_spec(c, "one_flow", &generate_spec(700));
    bench_spec(c, "ten_flows", &multi_flow(10, 70));
}

fn bench_spec(c: &mut Criterion, shape: &str, text: &str) {
    let lines = text.lines().count();
    assert!(text.is_ascii());
    let uri = &uri(&format!("{shape}.stratum.yaml"));

    let mut group = c.benchmark_group(format!("lsp_{shape}_{lines}_lines"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    // the first document of a fresh server: a full analysis with nothing
    // cached (starting and stopping the server is not timed)
    group.bench_function("open", |b| {
        b.iter_batched(
            Client::start,
            |mut fresh| {
                assert!(fresh.open(uri, text).diagnostics.is_empty());
                fresh
            },
            BatchSize::PerIteration,
        )
    });

    let mut client = Client::start();
    assert!(
        client.open(uri, text).diagnostics.is_empty(),
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
    let range = Range::new(
        position_of_offset(text, at),
        position_of_offset(text, at + 1),
    );
    let mut digit = '5';
    group.bench_function("one_char_edit", |b| {
        b.iter(|| {
            version += 1;
            digit = if digit == '5' { '6' } else { '5' };
            let change = TextDocumentContentChangeEvent {
                range: Some(range),
                range_length: None,
                text: digit.to_string(),
            };
            client.change(uri, version, vec![change]).diagnostics.len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_roundtrip);
criterion_main!(benches);
