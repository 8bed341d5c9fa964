//! Two threads against one, measured in pairs: 1 thread does `OPS` operations, then 2 threads
//! do `OPS` each, 11 times, and the median of the pairs' throughput ratios (wall clock) is
//! printed (with what an operation costs more on two threads, from the medians' rates), for
//! gets of uniform keys, for sets of uniform keys on a heap that has cycled, and
//! for gets of zipf-distributed keys (exponent 0.99 and 1.2) alone and with 5 % and 20 % sets,
//! where a hot key's shard is every thread's. The zipf workloads then run on the [`Ceiling`],
//! a store that does the least any could, without and with a lock per shard: how far two
//! threads sharing hot keys scale on this machine at all.
//! Pairs run back to back, so the drift of a shared VM (a third between runs a minute apart)
//! cancels out, which comparing criterion's separate `threads/*_wall/1` and `/2` runs does not.
//!
//! `cargo bench -p tern-store --bench scaling`. Needs two idle cores: it measures wall clock.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use parking_lot::Mutex;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use rand_distr::Zipf;
use tern_store::{Expiry, StoreOp};

mod common;
use common::{filled, key, Rng, KEYS};

const OPS: u64 = 300_000;
/// The ceiling's operations are ~5x quicker: more of them keep a run long against starting
/// threads.
const CEILING_OPS: u64 = 10 * OPS;
const PAIRS: usize = 11;

/// Operations per second of `threads` threads doing `ops` operations each, by wall clock;
/// `op` is given its thread's number and random stream.
fn rate(threads: u64, ops: u64, op: &(impl Fn(usize, &mut Rng) + Sync)) -> f64 {
    let barrier = Barrier::new(threads as usize + 1);
    let start = std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                barrier.wait();
                for _ in 0..ops {
                    op(t as usize, &mut rng);
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    (threads * ops) as f64 / start.elapsed().as_secs_f64()
}

/// Key numbers drawn from a Zipf distribution over `KEYS` (exponent `s`), drawn once so that a
/// measured operation costs a table read, not a sample.
fn zipf_keys(s: f64) -> Vec<u64> {
    let zipf = Zipf::new(KEYS, s).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    (0..ZIPF_TABLE)
        .map(|_| rng.sample(zipf) as u64 - 1)
        .collect()
}

const ZIPF_TABLE: usize = 1 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pairs(name: &str, ops: u64, op: impl Fn(usize, &mut Rng) + Sync) {
    let (mut one, mut two, mut ratios) = (vec![], vec![], vec![]);
    rate(2, ops, &op); // warm-up
    for _ in 0..PAIRS {
        let (r1, r2) = (rate(1, ops, &op), rate(2, ops, &op));
        one.push(r1);
        two.push(r2);
        ratios.push(r2 / r1);
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let (one, two) = (median(one), median(two));
    // What an operation costs its thread more with two threads than with one: the medians'
    // time per operation, apart.
    let added_ns = 1e9 * (2.0 / two - 1.0 / one);
    println!(
        "| {name} | {:.2} M/s | {:.2} M/s | {:.2}x ({lo:.2}-{hi:.2}) | {added_ns:+.0} ns |",
        one / 1e6,
        two / 1e6,
        median(ratios)
    );
}

fn main() {
    let store = filled(false);
    let churned = filled(true);
    println!(
        "| {PAIRS} pairs, wall clock | 1 thread | 2 threads | 2 / 1, median (range) | added per op |"
    );
    println!("|---|---|---|---|---|");
    pairs("gets, uniform keys", OPS, |_, rng: &mut Rng| {
        black_box(store.get(&key(rng.next() % KEYS), |it| it.value.len())).ok();
    });
    let value = [b'x'; 32];
    pairs(
        "sets, uniform keys, cycled heap",
        OPS,
        |_, rng: &mut Rng| {
            let k = key(rng.next() % KEYS);
            black_box(churned.store(StoreOp::Set, &k, 0, Expiry::NEVER, &value));
        },
    );
    let zipf = [0.99, 1.2].map(|exponent| (exponent, zipf_keys(exponent)));
    for (exponent, keys) in &zipf {
        for sets_percent in MIX {
            let name = format!("gets with {sets_percent} % sets, zipf {exponent}");
            pairs(&name, OPS, |_, rng: &mut Rng| {
                let r = rng.next();
                let k = key(keys[r as usize % ZIPF_TABLE]);
                if (r >> 40) % 100 < sets_percent {
                    black_box(churned.store(StoreOp::Set, &k, 0, Expiry::NEVER, &value));
                } else {
                    black_box(churned.get(&k, |it| it.value.len())).ok();
                }
            });
        }
    }
    let ceiling = Ceiling::new();
    for locked in [false, true] {
        for (exponent, keys) in &zipf {
            for sets_percent in MIX {
                let lock = if locked {
                    "a lock per shard"
                } else {
                    "no lock"
                };
                let name = format!("ceiling, {lock}: {sets_percent} % sets, zipf {exponent}");
                pairs(&name, CEILING_OPS, |thread, rng: &mut Rng| {
                    let r = rng.next();
                    let k = keys[r as usize % ZIPF_TABLE];
                    if (r >> 40) % 100 < sets_percent {
                        ceiling.set(thread, k, &value, locked);
                    } else {
                        black_box(ceiling.get(k));
                    }
                });
            }
        }
    }
}

/// Percentages of sets among the zipf workloads' operations.
const MIX: [u64; 3] = [0, 5, 20];

/// The least a store two threads share could do for these workloads: a slot per key, spread
/// over the table as a hashed index spreads them, naming its newest record; a set fills a
/// record in its thread's own region (so no two threads append to one place) and publishes it
/// with one store; a get loads the slot, checks the record's key and reads its value. No index
/// probe, no eviction, no counters, and without `locked` no lock: what it loses with a second
/// thread is what sharing hot keys costs on this machine. With `locked`, a set publishes under
/// a lock per shard (16, by key), with two counters beside the lock word as a store keeps them.
///
/// A region's records are reused after `REGION` of its thread's sets: a get slower than that
/// would read a torn record, which a ceiling does not mind (every word is an atomic).
struct Ceiling {
    slots: Box<[AtomicU32]>,
    records: Box<[Record]>,
    /// Each thread's next record in its region, on a line of its own.
    next: [Padded<AtomicUsize>; 2],
    locks: Box<[Padded<Mutex<[u64; 2]>>]>,
}

#[repr(align(128))]
struct Padded<T>(T);

/// A key number and its value, on one cache line.
#[derive(Default)]
#[repr(align(64))]
struct Record([AtomicU64; 8]);

const REGION: usize = 1 << 16;
/// An odd multiplier prime to `KEYS`, so that `slot` is a permutation of the keys.
const SPREAD: u64 = 48_271;

impl Ceiling {
    /// Every key holding a record of `value` written by thread 0.
    fn new() -> Ceiling {
        let ceiling = Ceiling {
            slots: (0..KEYS).map(|_| AtomicU32::new(0)).collect(),
            records: (0..2 * REGION).map(|_| Default::default()).collect(),
            next: [(); 2].map(|_| Padded(AtomicUsize::new(0))),
            locks: (0..16).map(|_| Padded(Mutex::new([0; 2]))).collect(),
        };
        for k in 0..KEYS {
            ceiling.set(0, k, &[b'v'; 32], false);
        }
        ceiling
    }

    fn slot(&self, k: u64) -> &AtomicU32 {
        &self.slots[(k * SPREAD % KEYS) as usize]
    }

    fn set(&self, thread: usize, k: u64, value: &[u8; 32], locked: bool) {
        let cursor = &self.next[thread].0;
        let n = cursor.load(Ordering::Relaxed);
        cursor.store((n + 1) % REGION, Ordering::Relaxed);
        let at = thread * REGION + n;
        let record = &self.records[at].0;
        record[0].store(k, Ordering::Relaxed);
        for (word, bytes) in record[1..5].iter().zip(value.chunks(8)) {
            word.store(
                u64::from_le_bytes(bytes.try_into().unwrap()),
                Ordering::Relaxed,
            );
        }
        // Held until the slot is published.
        let _counts = locked.then(|| {
            let mut counts = self.locks[(k % 16) as usize].0.lock();
            counts[0] += 1;
            counts[1] += value.len() as u64;
            counts
        });
        self.slot(k).store(at as u32, Ordering::Release);
    }

    /// The sum of key `k`'s value words, if its slot names its record.
    fn get(&self, k: u64) -> Option<u64> {
        let record = &self.records[self.slot(k).load(Ordering::Acquire) as usize].0;
        (record[0].load(Ordering::Relaxed) == k).then(|| {
            record[1..5]
                .iter()
                .map(|word| word.load(Ordering::Relaxed))
                .fold(0, u64::wrapping_add)
        })
    }
}
