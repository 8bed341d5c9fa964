//! Instructions per store operation, for callgrind (repeatable on a noisy machine):
//!
//! ```sh
//! cargo bench -p tern-store --bench instructions --no-run
//! B=$(ls -t target/release/deps/instructions-* | grep -v '\.d$' | head -1)
//! for mode in none hit miss set; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null $B $mode 100000 2>&1 | grep refs
//! done
//! ```
//! (instructions of `mode` - instructions of `none`) / 100000 = instructions per operation.
//! Without arguments (as `cargo bench` runs it) it does a short run of every mode.

use std::hint::black_box;
use std::sync::Arc;
use tern_store::{Clock, Config, Expiry, Store, StoreOp};

const KEYS: u64 = 100_000;

fn key(i: u64) -> [u8; 10] {
    let mut k = *b"key:000000";
    let mut n = i;
    for b in k[4..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

fn run(mode: &str, count: u64) {
    let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
    for i in 0..KEYS {
        store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, &[b'v'; 32]);
    }
    // Same key sequence in every mode, so the baseline subtracts the loop and key making.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % KEYS;
        match mode {
            "hit" => {
                black_box(store.get(&key(i), |it| it.value.len())).ok();
            }
            "miss" => {
                black_box(store.get(&key(i + KEYS), |it| it.value.len())).ok();
            }
            "set" => {
                black_box(store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, &[b'w'; 32]));
            }
            _ => {
                black_box(key(i));
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1), args.get(2).and_then(|c| c.parse().ok())) {
        (Some(mode), Some(count)) => run(mode, count),
        _ => {
            for mode in ["none", "hit", "miss", "set"] {
                run(mode, 1000);
            }
        }
    }
}
