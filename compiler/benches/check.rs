//! Benchmark of the whole front end (`analyze`) on generated specs.
//!
//! Owns: timing [`stratum_compiler::analyze`] on specs of 10, 100, 1000 and
//! 10000 steps from [`stratum_compiler::testgen::generate_spec`], reported as
//! steps per second (`Throughput::Elements`).
//! Must never: time the generator, read files, or benchmark an input that has
//! diagnostics (a benchmark of the error path would hide a broken generator).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stratum_compiler::analyze;
use stratum_compiler::testgen::generate_spec;

const SIZES: [usize; 4] = [10, 100, 1000, 10000];

fn bench_analyze(c: &mut Criterion) {
    let mut group = c.benchmark_group("analyze");
    for steps in SIZES {
        let text = generate_spec(steps);
        let first = analyze(&text);
        assert!(
            first.diagnostics.is_empty(),
            "generate_spec({steps}) has diagnostics: {:?}",
            first.diagnostics
        );
        assert!(first.ir.is_some(), "generate_spec({steps}) has no IR");
        group.throughput(Throughput::Elements(steps as u64));
        // big inputs take long per iteration: fewer samples, more time
        if steps >= 10000 {
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(20));
        } else if steps >= 1000 {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(10));
        } else {
            group
                .sample_size(100)
                .measurement_time(Duration::from_secs(5));
        }
        group.bench_with_input(BenchmarkId::from_parameter(steps), &text, |b, text| {
            b.iter(|| analyze(black_box(text)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_analyze);
criterion_main!(benches);
