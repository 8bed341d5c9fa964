//! What the store benches share: the key set, a cheap random stream, and which keys share a
//! shard with a given key, stores filled for benching.

// Each bench compiles this module and uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use tern_store::{Clock, Config, Expiry, Miss, Store, StoreOp};

pub const KEYS: u64 = 100_000;

pub fn key(i: u64) -> [u8; 10] {
    let mut k = *b"key:000000";
    let mut n = i;
    for b in k[4..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// Keys `0..KEYS` split into those in `hot`'s shard and the others, found through the public
/// API since the shard hash is seeded per store: after a delayed `flush_all` comes due, the
/// first lookup in a shard empties it and answers `Flushed` for a key it held, so once `k`'s
/// lookup has emptied its shard, `hot` answers `Flushed` only from another shard. Empties the
/// store and moves its clock by one second per key.
pub fn split_by_shard(store: &Store, hot: &[u8]) -> (Vec<u64>, Vec<u64>) {
    let (mut same, mut other) = (Vec::new(), Vec::new());
    for i in 0..KEYS {
        let k = key(i);
        store.store(StoreOp::Set, hot, 0, Expiry::NEVER, b"h");
        store.store(StoreOp::Set, &k, 0, Expiry::NEVER, b"k");
        store.flush_all(1);
        store.clock().advance(1);
        assert_eq!(store.get(&k, |_| ()), Err(Miss::Flushed));
        match store.get(hot, |_| ()) {
            Err(Miss::NotFound) => same.push(i),
            Err(Miss::Flushed) => other.push(i),
            seen => panic!("{seen:?}"),
        }
    }
    store.flush_all(0);
    (same, other)
}

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A store holding `KEYS` items. With `churned`, a 64 MB heap first takes 3 M sets, so set
/// benchmarks run in the steady state of a heap that has cycled (segments emptied by
/// overwrites go back to the pool) whichever of them runs first.
pub fn filled(churned: bool) -> Arc<Store> {
    let store = empty(churned);
    fill(&store, churned);
    store
}

/// A manual clock (at the current time): nothing ticks it here, and [`split_by_shard`] moves it.
pub fn empty(churned: bool) -> Arc<Store> {
    let store = Store::new(
        Config {
            heap_bytes: if churned { 64 << 20 } else { 256 << 20 },
            // The scaling bench's two threads, each on its own lane.
            writers: 2,
            ..Config::default()
        },
        Arc::new(Clock::manual(Clock::system().now())),
    )
    .unwrap();
    Arc::new(store)
}

pub fn fill(store: &Store, churned: bool) {
    for i in 0..KEYS {
        store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, &[b'v'; 32]);
    }
    if churned {
        let mut rng = Rng(11);
        for _ in 0..3_000_000 {
            let k = key(rng.next() % KEYS);
            store.store(StoreOp::Set, &k, 0, Expiry::NEVER, &[b'w'; 32]);
        }
    }
}
