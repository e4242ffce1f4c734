//! Benchmarks of the plan and the VM on generated specs: build (lower +
//! encode), load (decode + verify), and VM transitions per step on linear
//! flows, non-durable (in-memory interpreter) and through the engine on an
//! in-memory store.
//!
//! Owns: timing only; every input is checked to be valid first.
//! Must never: assert on time (figures go to the README and the issue notes).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use stratum_compiler::analyze;
use stratum_compiler::build::build_plan;
use stratum_compiler::testgen::generate_spec;
use stratum_vm::interp::{
    self, FileEvidence, FileRoot, Host, HostError, PlanIndex, Report, Verdict,
};
use stratum_vm::plan::file;

fn bench_build_and_load(c: &mut Criterion) {
    let mut build = c.benchmark_group("build");
    for steps in [10usize, 100, 1000, 10000] {
        let a = analyze(&generate_spec(steps));
        assert!(a.ir.is_some());
        build.throughput(Throughput::Elements(steps as u64));
        build
            .sample_size(if steps >= 10000 { 10 } else { 30 })
            .measurement_time(Duration::from_secs(5));
        build.bench_with_input(BenchmarkId::from_parameter(steps), &a, |b, a| {
            b.iter(|| file::encode(&build_plan(black_box(a)).unwrap()))
        });
    }
    build.finish();
    let mut load = c.benchmark_group("load_verify");
    for steps in [10usize, 100, 1000, 10000] {
        let a = analyze(&generate_spec(steps));
        let (bytes, _) = file::encode(&build_plan(&a).unwrap());
        load.throughput(Throughput::Elements(steps as u64));
        load.sample_size(30)
            .measurement_time(Duration::from_secs(5));
        load.bench_with_input(BenchmarkId::from_parameter(steps), &bytes, |b, bytes| {
            b.iter(|| file::load(black_box(bytes)).unwrap())
        });
    }
    load.finish();
}

/// A linear flow of `n` steps, each reading the previous step's output.
fn linear(n: usize) -> String {
    let mut s = String::from(
        "version: 1\ncontracts:\n  Out: {x: integer}\nflows:\n  entry: main\n  main:\n    input: {}\n",
    );
    s.push_str(&format!(
        "    output: {{from: \"${{s{}.output}}\", contract: Out}}\n    steps:\n",
        n - 1
    ));
    for i in 0..n {
        if i == 0 {
            s.push_str(
                "      - {id: s0, do: \"start\", out: Out, ensure: [{expr: \"result.x > 0\"}]}\n",
            );
        } else {
            s.push_str(&format!("      - {{id: s{i}, do: \"continue ${{s{}.output.x}}\", out: Out, ensure: [{{expr: \"result.x > 0\"}}]}}\n", i - 1));
        }
    }
    s
}

struct Quiet(i64);

impl Host for Quiet {
    fn now_ms(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
    fn file_exists(&mut self, _: FileRoot<'_>, _: &str) -> Result<FileEvidence, HostError> {
        Err(HostError::Unsupported("no files".into()))
    }
    fn file_contains(
        &mut self,
        _: FileRoot<'_>,
        _: &str,
        _: &str,
    ) -> Result<(bool, FileEvidence), HostError> {
        Err(HostError::Unsupported("no files".into()))
    }
    fn judge(&mut self, _: &str, _: &str, _: &Value) -> Result<Verdict, HostError> {
        Err(HostError::Judge("no judge".into()))
    }
}

fn bench_transitions(c: &mut Criterion) {
    let mut group = c.benchmark_group("transitions_per_step");
    for n in [10usize, 100, 1000, 10000] {
        let plan = build_plan(&analyze(&linear(n))).expect("the linear spec builds");
        let (bytes, hash) = file::encode(&plan);
        let index = PlanIndex::new(&plan);
        let report = Report::from_json(&json!({"output": {"x": 1}})).unwrap();
        group.throughput(Throughput::Elements(n as u64));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(if n >= 10000 { 20 } else { 5 }));
        group.bench_function(BenchmarkId::new("interpreter", n), |b| {
            b.iter(|| {
                let mut host = Quiet(0);
                let (mut run, mut out) = interp::start(
                    &plan,
                    &index,
                    &hash.to_hex(),
                    "bench",
                    None,
                    json!({}),
                    None,
                    &mut host,
                )
                .unwrap();
                while let Some(e) = out.ready.first() {
                    let (id, token) = (e.id.clone(), e.dispatch_token.clone());
                    out = interp::report(
                        &plan,
                        &index,
                        &mut run,
                        &id,
                        Some(&token),
                        &report,
                        &mut host,
                    )
                    .unwrap();
                    run.dirty.clear();
                    run.events.clear();
                }
                assert_eq!(out.wire_status(), "completed");
            })
        });
        group.bench_function(BenchmarkId::new("engine_memory_store", n), |b| {
            b.iter(|| {
                let mut host = Quiet(0);
                let mut engine = stratum_vm::engine::Engine::new(Box::new(
                    stratum_vm::store::MemoryStore::new(),
                ));
                let lp = engine.add_plan(&bytes).unwrap();
                let (id, mut out) = engine.start(&lp, None, json!({}), &mut host, None).unwrap();
                while let Some(e) = out.ready.first() {
                    let (step, token) = (e.id.clone(), e.dispatch_token.clone());
                    out = engine
                        .report(&id, &step, Some(&token), &report, &mut host)
                        .unwrap();
                }
                assert_eq!(out.wire_status(), "completed");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_build_and_load, bench_transitions);
criterion_main!(benches);
