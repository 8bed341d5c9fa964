//! The key hash's seeds: random for each new store, saved with a memory file so that a restart
//! hashes every key to the same shard and index tag as before.

use std::hash::{BuildHasher, RandomState};

pub(crate) fn random_seeds() -> [u64; 4] {
    std::array::from_fn(|i| RandomState::new().hash_one(i))
}

pub(crate) fn hasher_of(seeds: [u64; 4]) -> ahash::RandomState {
    ahash::RandomState::with_seeds(seeds[0], seeds[1], seeds[2], seeds[3])
}
