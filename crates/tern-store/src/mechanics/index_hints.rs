//! Where a shard's index table is, readable without the shard's lock: for read-ahead to start
//! loading a key's bucket, and for optimistic reads (see `seqlock`) to probe it.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use super::index::Index;

/// Where a shard's index table is and how many buckets it has, set under the shard's lock
/// whenever the table is rebuilt and read without it: a prefetch from a hint that a rebuild
/// has just made stale only loads a useless line (a prefetch never faults), and a read probes
/// a table that stays mapped, whichever pair of the two values it loads (see `index::find_racy`
/// and `seqlock`). Kept beside the shard's sequence count (`ShardLock`), on the line a get
/// reads anyway.
pub(crate) struct Hint {
    pub(crate) table: AtomicPtr<u8>,
    pub(crate) buckets: AtomicUsize,
}

impl Hint {
    /// A hint naming `index`'s table.
    pub(crate) fn of(index: &Index) -> Hint {
        let (table, buckets) = index.table();
        Hint {
            table: AtomicPtr::new(table),
            buckets: AtomicUsize::new(buckets),
        }
    }

    /// Records where `index`'s table is now (after a rebuild, under the shard's lock).
    pub(crate) fn refresh(&self, index: &Index) {
        let (table, buckets) = index.table();
        // Relaxed: called while the shard's count is odd, whose closing store publishes these
        // to readers (see `seqlock`); read-ahead takes any value.
        self.table.store(table, Ordering::Relaxed);
        self.buckets.store(buckets, Ordering::Relaxed);
    }
}
