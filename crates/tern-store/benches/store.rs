//! ns per get hit / miss and per set (32 B, 4 KiB), single-threaded, and gets/s and sets/s with
//! 1 and 2 threads on uniform keys (the scaling figure), plus gets/s of one reader while another
//! thread rewrites a single hot key (split into the hot key's shard and the others), writes
//! uniform keys, or does nothing useful (controls).
//!
//! `cargo bench -p tern-store --bench store`. Multi-thread results are reported as elements
//! (operations) per second over all threads, by wall time (`*_wall`) and by the busiest
//! thread's CPU time (`*_cpu`, which a machine shared with other work does not distort).

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tern_store::{Expiry, Store, StoreOp};

mod common;
use common::{empty, fill, filled, key, split_by_shard, Rng, KEYS};

fn single(c: &mut Criterion) {
    let store = filled(false);
    let churned = filled(true);
    let mut g = c.benchmark_group("single");
    let mut rng = Rng(7);
    g.bench_function("get_hit", |b| {
        b.iter(|| {
            let k = key(rng.next() % KEYS);
            black_box(store.get(&k, |it| it.value.len()))
        })
    });
    g.bench_function("get_miss", |b| {
        b.iter(|| {
            let k = key(KEYS + rng.next() % KEYS);
            black_box(store.get(&k, |it| it.value.len()))
        })
    });
    for size in [32usize, 4096] {
        let value = vec![b'x'; size];
        g.bench_function(BenchmarkId::new("set", size), |b| {
            b.iter(|| {
                let k = key(rng.next() % KEYS);
                black_box(churned.store(StoreOp::Set, &k, 0, Expiry::NEVER, &value))
            })
        });
    }
    g.finish();
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Which clock a multi-thread benchmark reports.
#[derive(Clone, Copy)]
enum Timing {
    /// Wall time: throughput, if the machine has a free core per thread.
    Wall,
    /// The largest CPU time any thread used: what the throughput would be with a core per
    /// thread, unaffected by other processes taking the cores (this machine is shared), but
    /// still paying for lock contention and cache lines moving between threads.
    Cpu,
}

/// Runs `op` on `threads` threads, `iters` times each.
fn parallel(threads: usize, iters: u64, timing: Timing, op: impl Fn(&mut Rng) + Sync) -> Duration {
    let barrier = Barrier::new(threads + 1);
    let (start, cpu) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
                    barrier.wait();
                    let cpu = thread_cpu();
                    for _ in 0..iters {
                        op(&mut rng);
                    }
                    thread_cpu() - cpu
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cpu = workers.into_iter().map(|w| w.join().unwrap()).max();
        (start, cpu.unwrap_or_default())
    });
    match timing {
        Timing::Wall => start.elapsed(),
        Timing::Cpu => cpu,
    }
}

fn multi(c: &mut Criterion) {
    let store = filled(false);
    let churned = filled(true);
    let mut g = c.benchmark_group("threads");
    let value = [b'x'; 32];
    for (name, timing) in [("wall", Timing::Wall), ("cpu", Timing::Cpu)] {
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            g.bench_function(BenchmarkId::new(format!("get_{name}"), threads), |b| {
                b.iter_custom(|iters| {
                    parallel(threads, iters, timing, |rng| {
                        black_box(store.get(&key(rng.next() % KEYS), |it| it.value.len())).ok();
                    })
                })
            });
            g.bench_function(BenchmarkId::new(format!("set_{name}"), threads), |b| {
                b.iter_custom(|iters| {
                    parallel(threads, iters, timing, |rng| {
                        black_box(churned.store(
                            StoreOp::Set,
                            &key(rng.next() % KEYS),
                            0,
                            Expiry::NEVER,
                            &value,
                        ));
                    })
                })
            });
        }
    }
    // One reader while a second thread writes without pause, in the reader's CPU time: the
    // reader of uniform keys beside a writer of one hot key (compare with threads/get_cpu/1) or
    // of uniform keys; and, to see where the hot key's cost falls, a reader of only the keys
    // in the hot key's shard (1/16 of them) or of only the others, alone and beside it (these
    // pick keys from a list: compare them with each other, not with the uniform ones).
    g.throughput(Throughput::Elements(1));
    let set_hot = |store: &Store| {
        store.store(StoreOp::Set, b"hot", 0, Expiry::NEVER, &value);
    };
    let all = |rng: &mut Rng| rng.next() % KEYS;
    beside(
        &mut g,
        "get_beside_hot_writer",
        &store,
        all,
        Some(|| set_hot(&store)),
    );
    let mut wrng = Rng(5);
    let set_uniform = || {
        let k = key(wrng.next() % KEYS);
        store.store(StoreOp::Set, &k, 0, Expiry::NEVER, &value);
    };
    beside(
        &mut g,
        "get_beside_uniform_writer",
        &store,
        all,
        Some(set_uniform),
    );
    // Controls: the hot writer on a store of its own (shares no lock or line with the reader,
    // only caches and memory), and a thread that only executes `pause` (shares nothing but the
    // machine: on this 2-vCPU VM even that slows the reader by about 10%).
    let apart = empty(false);
    beside(
        &mut g,
        "get_beside_hot_writer_apart",
        &store,
        all,
        Some(|| set_hot(&apart)),
    );
    let spin = || {
        for _ in 0..100 {
            std::hint::spin_loop();
        }
    };
    beside(&mut g, "get_beside_spinner", &store, all, Some(spin));
    let split = empty(false);
    let (same, other) = split_by_shard(&split, b"hot");
    fill(&split, false);
    for (name, keys) in [("get_hot_shard", &same), ("get_other_shards", &other)] {
        let pick = |rng: &mut Rng| keys[(rng.next() % keys.len() as u64) as usize];
        beside(&mut g, &format!("{name}_alone"), &split, pick, None::<fn()>);
        let hot = Some(|| set_hot(&split));
        beside(
            &mut g,
            &format!("{name}_beside_hot_writer"),
            &split,
            pick,
            hot,
        );
    }
    g.finish();
}

/// Gets of `key(pick(rng))` by this thread, in its CPU time, while another thread calls
/// `work` without pause (none without).
fn beside(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    store: &Store,
    pick: impl Fn(&mut Rng) -> u64,
    mut work: Option<impl FnMut() + Send>,
) {
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                if let Some(work) = work.as_mut() {
                    let stop = &stop;
                    s.spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            work();
                        }
                    });
                }
                let mut rng = Rng(3);
                let start = thread_cpu();
                for _ in 0..iters {
                    let k = key(pick(&mut rng));
                    black_box(store.get(&k, |it| it.value.len())).ok();
                }
                let took = thread_cpu() - start;
                stop.store(true, Ordering::Relaxed);
                took
            })
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = single, multi
}
criterion_main!(benches);
