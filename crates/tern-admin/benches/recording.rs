//! Per-request recording cost: what a worker pays on each request for metrics and hot keys.
//! `cargo bench -p tern-admin` prints ns per call.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tern_admin::{Command, HotKeyConfig, HotKeys, Outcome, WorkerMetrics};

fn recording(c: &mut Criterion) {
    let metrics = WorkerMetrics::new();
    let hot = HotKeys::new(HotKeyConfig::default());
    let mut sampler = hot.sampler();
    let keys: Vec<Vec<u8>> = (0..1024)
        .map(|i| format!("key:{i:06}").into_bytes())
        .collect();
    let mut i = 0usize;
    let mut next_key = move || {
        i = (i + 1) & 1023;
        i
    };

    c.bench_function("latency_record", |b| {
        let mut ns = 0u64;
        b.iter(|| {
            ns = (ns + 97) & 0xffff;
            metrics.record(
                black_box(Command::Get),
                black_box(Outcome::Hit),
                black_box(ns),
            );
        })
    });
    c.bench_function("hotkey_record_default_1_in_64", |b| {
        b.iter(|| sampler.record(black_box(&keys[next_key()])))
    });
    let every = HotKeys::new(HotKeyConfig {
        sample_every: 1,
        ..HotKeyConfig::default()
    });
    let mut sample_all = every.sampler();
    let mut j = 0usize;
    c.bench_function("hotkey_sampled_path_every_request", |b| {
        b.iter(|| {
            j = (j + 1) & 1023;
            sample_all.record(black_box(&keys[j]))
        })
    });
    let mut k = 0usize;
    c.bench_function("per_request_total_record_plus_hotkey", |b| {
        let mut ns = 0u64;
        b.iter(|| {
            k = (k + 1) & 1023;
            ns = (ns + 97) & 0xffff;
            metrics.record(
                black_box(Command::Get),
                black_box(Outcome::Hit),
                black_box(ns),
            );
            sampler.record(black_box(&keys[k]));
        })
    });
}

criterion_group!(benches, recording);
criterion_main!(benches);
