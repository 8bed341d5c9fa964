//! Keys as the store hashes them: which shard a key lives in and its index tag, worked out
//! once per command (or once per pipelined get, by read-ahead).

use super::Store;
use crate::mechanics::index::{self, NO_SLOT};

/// A key with its index tag, hashed once per command.
#[derive(Clone, Copy)]
pub(crate) struct Key<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) tag: u32,
}

/// A key hashed by a store: the shard it lives in and its index tag, worked out once. A
/// pipelined batch's read-ahead hashes each key (to start loading its index bucket), and the
/// get that follows reuses the hash. It is only made by [`Store::hash_key`], and a store keeps
/// its hash seeds for life, so a `HashedKey` always names its key's place in that store (a
/// server has one store).
#[derive(Clone, Copy)]
pub struct HashedKey<'a> {
    pub(crate) shard: usize,
    pub(crate) key: Key<'a>,
    /// The index slot where read-ahead saw the key's tag, tried first by the read (see
    /// `Index::find_hinted`); [`NO_SLOT`] when there is none.
    pub(crate) slot_hint: u32,
}

impl<'a> HashedKey<'a> {
    pub fn bytes(&self) -> &'a [u8] {
        self.key.bytes
    }
}

/// The key of a read: its bytes, hashed by the read, or a [`HashedKey`] hashed already.
pub trait ReadKey<'a>: Copy {
    fn hashed(self, store: &Store) -> HashedKey<'a>;
}

impl<'a, T: AsRef<[u8]> + ?Sized> ReadKey<'a> for &'a T {
    #[inline(always)]
    fn hashed(self, store: &Store) -> HashedKey<'a> {
        store.hash_key(self.as_ref())
    }
}

impl<'a> ReadKey<'a> for HashedKey<'a> {
    #[inline(always)]
    fn hashed(self, _: &Store) -> HashedKey<'a> {
        self
    }
}

impl Store {
    #[inline]
    pub(crate) fn hash<'k>(&self, key: &'k [u8]) -> (usize, Key<'k>) {
        let hash = self.hasher.hash_one(key);
        // Tag 0 is folded into 1: an empty index slot is all zero bits.
        let tag = ((hash >> (64 - index::TAG_BITS)) as u32).max(1);
        let shard = hash as usize & (self.shards.len() - 1);
        (shard, Key { bytes: key, tag })
    }

    /// `key` hashed, for a read to take later (see [`HashedKey`]).
    #[inline]
    pub fn hash_key<'k>(&self, key: &'k [u8]) -> HashedKey<'k> {
        let (shard, key) = self.hash(key);
        HashedKey {
            shard,
            key,
            slot_hint: NO_SLOT,
        }
    }
}
