//! What the store's integration tests share: a store on a manual clock, and values that name
//! their key and carry a checksum, so a torn or misplaced read is caught.

use std::sync::Arc;
use tern_store::{Clock, Config, Expiry, Store, StoreOp, StoreOutcome, UnixSecs};

pub const T0: UnixSecs = 1_700_000_000;

pub fn store_with(config: Config) -> Store {
    Store::new(config, Arc::new(Clock::manual(T0))).unwrap()
}

pub fn set(s: &Store, key: &[u8], value: &[u8]) -> StoreOutcome {
    s.store(StoreOp::Set, key, 0, Expiry::NEVER, value)
}

/// A value that names its key and version and ends in a checksum, so any torn or misplaced
/// read is caught.
pub fn stamped(key: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let mut x = (key as u64) << 32 | version as u64 | 1;
    while v.len() + 8 < len.max(16) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    let sum = checksum(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

pub fn verify(key: u32, value: &[u8]) {
    assert!(value.len() >= 16, "short value {}", value.len());
    let (body, sum) = value.split_at(value.len() - 8);
    assert_eq!(
        checksum(body),
        u64::from_le_bytes(sum.try_into().unwrap()),
        "torn value"
    );
    assert_eq!(
        u32::from_le_bytes(body[..4].try_into().unwrap()),
        key,
        "someone else's value"
    );
}
