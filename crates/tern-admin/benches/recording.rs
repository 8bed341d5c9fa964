//! Per-request recording cost: what a worker pays on each request for metrics and hot keys.
//! `cargo bench -p tern-admin` prints ns per call.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tern_admin::{Command, HotKeyConfig, HotKeys, LatencyBatch, Outcome, WorkerMetrics};

fn recording(c: &mut Criterion) {
    let metrics = WorkerMetrics::new();
    let hot = HotKeys::new(HotKeyConfig::default());
    let sampler = hot.sampler();
    let keys: Vec<Vec<u8>> = (0..1024)
        .map(|i| format!("key:{i:06}").into_bytes())
        .collect();
    let mut i = 0usize;
    let mut next_key = move || {
        i = (i + 1) & 1023;
        i
    };

    // What the server pays to timestamp a request, if it reads the clock per response.
    c.bench_function("instant_now", |b| b.iter(std::time::Instant::now));
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
    let sample_all = every.sampler();
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

/// The path the server is meant to take per request: outcome count, batch-latency note and
/// hot-key sampling, with the batch (16 requests, as 16-deep pipelining) finished every 16th.
/// The two clock reads per batch are not included: see `instant_now`.
fn recommended_path(c: &mut Criterion) {
    let metrics = WorkerMetrics::new();
    let hot = HotKeys::new(HotKeyConfig::default());
    let sampler = hot.sampler();
    let batch = LatencyBatch::new();
    let keys: Vec<Vec<u8>> = (0..1024)
        .map(|i| format!("key:{i:06}").into_bytes())
        .collect();
    let mut k = 0usize;
    c.bench_function("per_request_count_batch_latency_hotkey", |b| {
        b.iter(|| {
            k = (k + 1) & 1023;
            let command = if k % 5 == 0 {
                Command::Set
            } else {
                Command::Get
            };
            metrics.count(black_box(command), black_box(Outcome::Hit));
            batch.add(command);
            sampler.record(black_box(&keys[k]));
            if k % 16 == 0 {
                batch.finish(&metrics, black_box(20_000));
            }
        })
    });
}

criterion_group!(benches, recording, recommended_path);
criterion_main!(benches);
