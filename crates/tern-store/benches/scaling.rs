//! Two threads against one, measured in pairs: 1 thread does `OPS` operations, then 2 threads
//! do `OPS` each, 11 times, and the median of the pairs' throughput ratios (wall clock) is
//! printed, for gets of uniform keys, for sets of uniform keys on a heap that has cycled, and
//! for gets of zipf-distributed keys (exponent 0.99 and 1.2) alone and with 5 % and 20 % sets,
//! where a hot key's shard is every thread's.
//! Pairs run back to back, so the drift of a shared VM (a third between runs a minute apart)
//! cancels out, which comparing criterion's separate `threads/*_wall/1` and `/2` runs does not.
//!
//! `cargo bench -p tern-store --bench scaling`. Needs two idle cores: it measures wall clock.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use rand_distr::Zipf;
use tern_store::{Expiry, StoreOp};

mod common;
use common::{filled, key, Rng, KEYS};

const OPS: u64 = 300_000;
const PAIRS: usize = 11;

/// Operations per second of `threads` threads doing `OPS` operations each, by wall clock.
fn rate(threads: u64, op: &(impl Fn(&mut Rng) + Sync)) -> f64 {
    let barrier = Barrier::new(threads as usize + 1);
    let start = std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                barrier.wait();
                for _ in 0..OPS {
                    op(&mut rng);
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    (threads * OPS) as f64 / start.elapsed().as_secs_f64()
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

fn pairs(name: &str, op: impl Fn(&mut Rng) + Sync) {
    let (mut one, mut two, mut ratios) = (vec![], vec![], vec![]);
    rate(2, &op); // warm-up
    for _ in 0..PAIRS {
        let (r1, r2) = (rate(1, &op), rate(2, &op));
        one.push(r1);
        two.push(r2);
        ratios.push(r2 / r1);
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    println!(
        "| {name} | {:.2} M/s | {:.2} M/s | {:.2}x ({lo:.2}-{hi:.2}) |",
        median(one) / 1e6,
        median(two) / 1e6,
        median(ratios)
    );
}

fn main() {
    let store = filled(false);
    let churned = filled(true);
    println!("| {PAIRS} pairs, wall clock | 1 thread | 2 threads | 2 / 1, median (range) |");
    println!("|---|---|---|---|");
    pairs("gets, uniform keys", |rng: &mut Rng| {
        black_box(store.get(&key(rng.next() % KEYS), |it| it.value.len())).ok();
    });
    let value = [b'x'; 32];
    pairs("sets, uniform keys, cycled heap", |rng: &mut Rng| {
        let k = key(rng.next() % KEYS);
        black_box(churned.store(StoreOp::Set, &k, 0, Expiry::NEVER, &value));
    });
    for exponent in [0.99, 1.2] {
        let keys = zipf_keys(exponent);
        for sets_percent in [0, 5, 20] {
            let name = format!("gets with {sets_percent} % sets, zipf {exponent}");
            pairs(&name, |rng: &mut Rng| {
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
}
