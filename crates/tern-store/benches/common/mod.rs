//! What the store benches share: the key set, a cheap random stream, and which keys share a
//! shard with a given key.

use tern_store::{Expiry, Miss, Store, StoreOp};

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
