//! Where each shard's index table is, readable without the shard's lock: for read-ahead to start
//! loading a key's bucket, and for optimistic reads (see `seqlock`) to probe it.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use super::shard::{Padded, Shard, ShardLock};

/// Per shard, where its index table is and how many buckets it has, set under the shard's lock
/// whenever the table is rebuilt and read without it: a prefetch from a hint that a rebuild
/// has just made stale only loads a useless line (a prefetch never faults), and a read probes
/// a table that stays mapped, whichever pair of the two values it loads (see `index::find_racy`
/// and `seqlock`).
pub(crate) struct IndexHints(pub(crate) Box<[Hint]>);

#[derive(Default)]
pub(crate) struct Hint {
    pub(crate) table: AtomicPtr<u8>,
    pub(crate) buckets: AtomicUsize,
}

impl IndexHints {
    /// Hints naming each shard's first index table.
    pub(crate) fn new(shards: &[Padded<ShardLock>]) -> IndexHints {
        let hints = IndexHints(shards.iter().map(|_| Hint::default()).collect());
        for shard in shards {
            hints.refresh(&shard.0.lock());
        }
        hints
    }

    /// Records where `sh`'s index table is now (after a rebuild, under the shard's lock).
    pub(crate) fn refresh(&self, sh: &Shard) {
        let (table, buckets) = sh.index.table();
        let hint = &self.0[sh.owner.id() as usize];
        // Relaxed: called while the shard's count is odd, whose closing store publishes these
        // to readers (see `seqlock`); read-ahead takes any value.
        hint.table.store(table, Ordering::Relaxed);
        hint.buckets.store(buckets, Ordering::Relaxed);
    }
}
