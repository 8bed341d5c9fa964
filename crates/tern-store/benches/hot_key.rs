//! What a thread rewriting one hot key without pause costs a reader, measured in pairs: 0.1 s
//! of gets alone, then 0.1 s beside the second thread, 11 times, so the machine's drift (a
//! third between runs a minute apart on a shared VM) cancels out. Prints per key set and second
//! thread the median ratio of the reader's rates by its CPU time, its futex sleeps per get, and
//! for the uniform reader beside the hot writer the wall time of gets in the hot key's shard and
//! in the others.
//!
//! `cargo bench -p tern-store --bench hot_key [-- SHARDS]` (default 16). Needs two idle cores:
//! on a busy machine the two threads rarely run at the same time.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tern_store::{Clock, Config, Expiry, Store, StoreOp};

mod common;
use common::{key, split_by_shard, Rng, KEYS};

const GETS: u64 = 300_000;
const PAIRS: usize = 11;

/// This thread's CPU time and voluntary context switches (sleeps, here on a shard's futex).
fn usage() -> (Duration, i64) {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_nvcsw)
}

fn new_store(shards: usize) -> Store {
    let config = Config {
        heap_bytes: 256 << 20,
        shards,
        ..Config::default()
    };
    Store::new(config, Arc::new(Clock::manual(1_700_000_000))).unwrap()
}

#[derive(Clone, Copy, PartialEq)]
enum Second {
    None,
    /// Rewrites `hot` in the reader's store.
    HotWriter,
    /// The same on a store of its own: shares no lock or line with the reader.
    HotWriterApart,
    /// Only executes `pause`: shares nothing but the machine.
    Pause,
}

/// One chunk of `GETS` gets: (CPU ns per get, sleeps per get, wall ns per get of keys in the hot
/// shard, of the others).
fn chunk(
    store: &Store,
    apart: &Store,
    keys: &[u64],
    hot_shard: &[bool],
    second: Second,
    rng: &mut Rng,
) -> (f64, f64, f64, f64) {
    let value = [b'x'; 32];
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if second != Second::None {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    match second {
                        Second::HotWriter => {
                            store.store(StoreOp::Set, b"hot", 0, Expiry::NEVER, &value);
                        }
                        Second::HotWriterApart => {
                            apart.store(StoreOp::Set, b"hot", 0, Expiry::NEVER, &value);
                        }
                        _ => (0..100).for_each(|_| std::hint::spin_loop()),
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut wall = [(Duration::ZERO, 0u32); 2];
        let (cpu, sleeps) = usage();
        for _ in 0..GETS {
            let i = keys[(rng.next() % keys.len() as u64) as usize];
            let start = Instant::now();
            black_box(store.get(&key(i), |it| it.value.len())).ok();
            let class = &mut wall[hot_shard[i as usize] as usize];
            class.0 += start.elapsed();
            class.1 += 1;
        }
        let (cpu_end, sleeps_end) = usage();
        stop.store(true, Ordering::Relaxed);
        let per = |(d, n): (Duration, u32)| d.as_nanos() as f64 / n.max(1) as f64;
        (
            (cpu_end - cpu).as_nanos() as f64 / GETS as f64,
            (sleeps_end - sleeps) as f64 / GETS as f64,
            per(wall[1]),
            per(wall[0]),
        )
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a number is the shard count.
    let shards = std::env::args().find_map(|a| a.parse().ok()).unwrap_or(16);
    let store = new_store(shards);
    let apart = new_store(shards);
    let (same, other) = split_by_shard(&store, b"hot");
    let mut hot_shard = vec![false; KEYS as usize];
    for &i in &same {
        hot_shard[i as usize] = true;
    }
    for i in 0..KEYS {
        store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, &[b'v'; 32]);
    }
    let all: Vec<u64> = (0..KEYS).collect();
    let runs = [
        ("uniform keys", &all, Second::HotWriter, "hot-key writer"),
        (
            "uniform keys",
            &all,
            Second::HotWriterApart,
            "hot-key writer, own store",
        ),
        ("uniform keys", &all, Second::Pause, "pause loop"),
        (
            "hot key's shard",
            &same,
            Second::HotWriter,
            "hot-key writer",
        ),
        ("other shards", &other, Second::HotWriter, "hot-key writer"),
    ];
    let mut rng = Rng(3);
    println!(
        "{shards} shards; reader's rate beside / alone by its CPU time, median of {PAIRS} pairs"
    );
    for (keys_name, keys, second, second_name) in runs {
        let (mut ratios, mut sleeps, mut hot_ns, mut other_ns) = (vec![], vec![], vec![], vec![]);
        for _ in 0..PAIRS {
            let alone = chunk(&store, &apart, keys, &hot_shard, Second::None, &mut rng);
            let beside = chunk(&store, &apart, keys, &hot_shard, second, &mut rng);
            ratios.push(alone.0 / beside.0);
            sleeps.push(beside.1);
            hot_ns.push((alone.2, beside.2));
            other_ns.push((alone.3, beside.3));
        }
        print!(
            "{keys_name:16} beside {second_name:26}: {:.2}x, futex sleeps {:.5}/get",
            median(ratios),
            median(sleeps)
        );
        if keys.len() == all.len() && second == Second::HotWriter {
            let ns = |v: &[(f64, f64)], side: fn(&(f64, f64)) -> f64| {
                median(v.iter().map(side).collect())
            };
            print!(
                "; wall ns/get, alone -> beside: hot key's shard {:.0} -> {:.0}, others {:.0} -> {:.0}",
                ns(&hot_ns, |x| x.0),
                ns(&hot_ns, |x| x.1),
                ns(&other_ns, |x| x.0),
                ns(&other_ns, |x| x.1)
            );
        }
        println!();
    }
}
