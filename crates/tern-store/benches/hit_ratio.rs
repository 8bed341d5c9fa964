//! Hit ratio of merge vs fifo vs random eviction on a Zipf(0.99) workload larger than memory:
//! 1 M keys of 100-byte values (~115 MB) through a 16 MB heap, cache-aside (a miss is
//! followed by a set), 5 M requests after a 1 M-request warm-up. Prints a table;
//! `scripts/policy-sim.py` gives item-level FIFO, LRU, CLOCK and S3-FIFO on the same workload.
//!
//! `cargo bench -p tern-store --bench hit_ratio`

use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::Zipf;
use std::sync::Arc;
use tern_store::{Clock, Config, Eviction, Expiry, Store, StoreOp};

const KEYS: u64 = 1_000_000;
const WARM_UP: u64 = 1_000_000;
const REQUESTS: u64 = 5_000_000;

fn main() {
    println!("| eviction | hit ratio | evictions | merges | items held at the end |");
    println!("|---|---|---|---|---|");
    for eviction in [Eviction::Merge, Eviction::Fifo, Eviction::Random] {
        let store = Store::new(
            Config {
                heap_bytes: 16 << 20,
                eviction,
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        let zipf = Zipf::new(KEYS, 0.99).unwrap();
        let mut rng = StdRng::seed_from_u64(42);
        let value = [b'v'; 100];
        let mut hits = 0u64;
        for n in 0..WARM_UP + REQUESTS {
            let key = (rng.sample(zipf) as u64).to_le_bytes();
            if store.get(&key, |_| ()).is_ok() {
                hits += (n >= WARM_UP) as u64;
            } else {
                store.store(StoreOp::Set, &key, 0, Expiry::NEVER, &value);
            }
        }
        let s = store.stats();
        println!(
            "| {eviction:?} | {:.2}% | {} | {} | {} |",
            hits as f64 * 100.0 / REQUESTS as f64,
            s.evictions,
            s.merges,
            s.curr_items
        );
    }
}
