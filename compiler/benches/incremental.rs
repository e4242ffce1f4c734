//! Benchmark of the incremental database behind the language server.
//!
//! Owns: timing `ide::diagnostics` on a generated spec of about 5,000 lines
//! (from [`stratum_compiler::testgen::generate_spec`]) — on open (a fresh
//! database: full analysis) and after a one-character edit inside one step's
//! `ensure` expression (the edit toggles between two texts, so every
//! iteration is a real change). Two shapes: ten flows of 70 steps, and one
//! flow of 700 steps (where the edited flow is the whole spec).
//! Must never: time the generator, read files, or benchmark an input whose
//! diagnostics differ from `analyze` (checked before timing).

use std::hint::black_box;

/// The allocator of the `stratumc` binary, so that the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use stratum_compiler::analyze;
use stratum_compiler::ide::{self, Db};
use stratum_compiler::testgen::generate_multi_flow_spec as multi_flow;

/// The text with the first `>= 0.5` after `anchor` turned into `>= 0.6`.
fn edited(text: &str, anchor: &str) -> String {
    let at = text.find(anchor).expect("anchor present");
    let rel = text[at..].find(">= 0.5").expect("an ensure with `>= 0.5`");
    let mut out = text.to_string();
    out.replace_range(at + rel + 5..at + rel + 6, "6");
    out
}

fn bench_shape(c: &mut Criterion, name: &str, text: String, anchor: &str) {
    let lines = text.lines().count();
    let other = edited(&text, anchor);
    for t in [&text, &other] {
        let want = analyze(t);
        assert!(want.ir.is_some(), "{name}: the generated spec has errors");
        let mut db = Db::new();
        let file = db.set_text("bench.stratum.yaml", t.clone());
        assert_eq!(ide::diagnostics(&db, file), want.diagnostics);
    }
    let mut group = c.benchmark_group(format!("incremental/{name} ({lines} lines)"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("open", |b| {
        b.iter(|| {
            let mut db = Db::new();
            let file = db.set_text("bench.stratum.yaml", black_box(text.clone()));
            ide::diagnostics(&db, file)
        })
    });
    let mut db = Db::new();
    let file = db.set_text("bench.stratum.yaml", text.clone());
    ide::diagnostics(&db, file);
    let texts = [other, text];
    let mut turn = 0usize;
    group.bench_function("edit", |b| {
        b.iter(|| {
            turn += 1;
            db.set_text("bench.stratum.yaml", texts[turn % 2].clone());
            ide::diagnostics(&db, file)
        })
    });
    group.finish();
}

fn bench_phases(c: &mut Criterion) {
    let text = multi_flow(10, 70);
    let mut group = c.benchmark_group("phases");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2));
    group.bench_function("yaml", |b| {
        b.iter(|| stratum_compiler::yaml::load(black_box(&text)))
    });
    let loaded = stratum_compiler::yaml::load(&text);
    group.bench_function("decode", |b| {
        b.iter(|| {
            let mut sink = stratum_compiler::diagnostics::Sink::default();
            stratum_compiler::syntax::decode::decode(
                loaded.root.as_ref(),
                text.len() as u32,
                &mut sink,
            )
        })
    });
    group.bench_function("analyze", |b| b.iter(|| analyze(black_box(&text))));
    let ir = analyze(&text).ir.expect("valid");
    group.bench_function("budget", |b| {
        b.iter(|| stratum_compiler::cost::budget_warnings(&ir, &Default::default()))
    });
    group.bench_function("ir_clone", |b| b.iter(|| ir.clone()));
    group.finish();
}

fn bench_incremental(c: &mut Criterion) {
    bench_phases(c);
    bench_shape(c, "10 flows", multi_flow(10, 70), "  pipeline_5:\n");
    bench_shape(c, "1 flow", multi_flow(1, 700), "_350\n");
}

criterion_group!(benches, bench_incremental);
criterion_main!(benches);
