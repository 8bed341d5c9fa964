//! What read-ahead (`Store::prefetch`) saves a pipelined batch: CPU time per get of a 256-byte
//! value, in batches of 16 random keys, each batch read plain or after one `prefetch` of its
//! keys; rounds alternate and the medians of 10 of each are printed. Run it with a key count
//! that fits the caches and with one that does not:
//!
//!   cargo run --release -p tern-store --example read_ahead -- 1000
//!   cargo run --release -p tern-store --example read_ahead -- 100000
//!
//! `HUGE=1` asks for transparent huge pages for the heap (`-L`).

use std::sync::Arc;
use tern_store::{Clock, Config, Expiry, Store, StoreOp, PREFETCH_MAX};

/// This thread's CPU time, so other processes on a busy machine count less.
fn cpu_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |k| k.parse().expect("KEYS"));
    let config = Config {
        heap_bytes: 1 << 30,
        large_pages: std::env::var_os("HUGE").is_some(),
        ..Config::default()
    };
    let store = Store::new(config, Arc::new(Clock::manual(1_700_000_000))).expect("store");
    let value = [b'v'; 256];
    let names: Vec<Vec<u8>> = (0..keys)
        .map(|i| format!("key:{i:08}").into_bytes())
        .collect();
    for name in &names {
        store.store(StoreOp::Set, name, 0, Expiry::NEVER, &value);
    }
    let mut state: u64 = 88_172_645_463_325_252;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as usize % keys
    };
    let mut out = Vec::with_capacity(1 << 20);
    let (mut plain, mut ahead) = (Vec::new(), Vec::new());
    const GETS: usize = 200_000;
    for round in 0..20 {
        let read_ahead = round % 2 == 1;
        let start = cpu_nanos();
        for _ in 0..GETS / PREFETCH_MAX {
            let batch: [&[u8]; PREFETCH_MAX] = std::array::from_fn(|_| &names[random()][..]);
            if read_ahead {
                store.prefetch(&batch);
            }
            for key in batch {
                let _ =
                    store.get_into(key, &mut out, |item, out| out.extend_from_slice(item.value));
            }
            out.clear();
        }
        let per_get = (cpu_nanos() - start) as f64 / GETS as f64;
        if read_ahead { &mut ahead } else { &mut plain }.push(per_get);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{keys} keys: CPU per get, median of 10 rounds: plain {:.0} ns, read ahead {:.0} ns ({:.2}x)",
        median(&mut plain),
        median(&mut ahead),
        median(&mut ahead) / median(&mut plain)
    );
}
