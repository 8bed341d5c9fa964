//! Read-ahead for a pipelined batch: the index buckets and items a batch of gets will read are
//! loaded into the cache before the first of them is served, so their cache misses overlap
//! instead of following one another. With 100,000 keys of 256 bytes a get's misses (its index
//! bucket, then its item) cost several times all its instructions.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::index::{self, BUCKET_STRIDE};
use crate::segments::Loc;
use crate::shard::{Key, Padded, Shard};
use crate::Store;

/// The most keys one `prefetch` call looks at.
pub const PREFETCH_MAX: usize = 16;

/// Per shard, where its index table is and how many buckets it has, set under the shard's lock
/// whenever the table is rebuilt and read without it: a prefetch from a hint that a rebuild
/// has just made stale only loads a useless line (a prefetch never faults).
pub(crate) struct IndexHints(Box<[Hint]>);

#[derive(Default)]
struct Hint {
    table: AtomicPtr<u8>,
    buckets: AtomicUsize,
}

impl IndexHints {
    /// Hints naming each shard's first index table.
    pub(crate) fn new(shards: &[Padded<Mutex<Shard>>]) -> IndexHints {
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
        hint.table.store(table.cast_mut(), Ordering::Relaxed);
        hint.buckets.store(buckets, Ordering::Relaxed);
    }
}

impl Store {
    /// Starts loading what gets or sets of `keys` (at most [`PREFETCH_MAX`] are looked at) will
    /// read: first every home index bucket, from the hints, without locks; then, shard lock by
    /// shard lock, the first 256 bytes of the item each bucket holds under the key's tag (not
    /// checked against the key: a tag collision only loads useless lines). It pays for a store of
    /// any size in the server, whose kernel network path evicts the caches between batches: at
    /// 1,000 keys too (see docs/performance.md, "Read-ahead for every pipelined batch").
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(PREFETCH_MAX)];
        let mut hashed = [(0, Key { bytes: &[], tag: 0 }); PREFETCH_MAX];
        for (slot, key) in hashed.iter_mut().zip(keys) {
            *slot = self.hash(key);
            let hint = &self.index_hints.0[slot.0];
            // Every hint names a table: they are set when the store is made.
            let home = index::home_bucket(slot.1.tag, hint.buckets.load(Ordering::Relaxed));
            let table = hint.table.load(Ordering::Relaxed);
            prefetch_line(table.wrapping_add(home * BUCKET_STRIDE));
        }
        for &(shard, key) in &hashed[..keys.len()] {
            let guard = self.lock(shard);
            if let Some(packed) = guard.index.home_location(key.tag) {
                let loc = Loc::unpack(packed);
                let item = &self.segs.read(&guard.owner, loc.seg)[loc.off as usize..];
                for line in 0..ITEM_LINES {
                    prefetch_line(item.as_ptr().wrapping_add(line * 64));
                }
            }
        }
    }
}

/// Cache lines of an item loaded ahead: its header, key and a 256-byte value's start (the
/// hardware's own prefetch follows a longer value once it is read).
const ITEM_LINES: usize = 4;

/// Asks the CPU to load the cache line at `at`; any address will do.
#[inline(always)]
fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, even for an address no longer (or
    // never) mapped, and changes no state the program can observe.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::{Clock, Config, Expiry, Store, StoreOp};

    fn key(i: usize) -> Vec<u8> {
        format!("key:{i:08}").into_bytes()
    }

    /// Read-ahead trusts each shard's hint to name its index table as it is now: the hints
    /// follow the tables through every rebuild (growth and a flush here).
    fn assert_hints_follow_the_index(store: &Store) {
        for (shard, hint) in store.index_hints.0.iter().enumerate() {
            let guard = store.lock(shard);
            let (table, buckets) = guard.index.table();
            assert_eq!(hint.table.load(Ordering::Relaxed).cast_const(), table);
            assert_eq!(hint.buckets.load(Ordering::Relaxed), buckets);
        }
    }

    #[test]
    fn each_shards_hint_follows_its_index_through_growth_and_a_flush() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        assert_hints_follow_the_index(&store);
        for i in 0..40_000 {
            store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, b"v");
        }
        assert_hints_follow_the_index(&store);
        store.flush_all(0);
        for i in 0..100 {
            store.get(&key(i), |_| ()).unwrap_err();
        }
        assert_hints_follow_the_index(&store);
    }

    #[test]
    fn prefetching_any_keys_changes_no_value() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        for i in 0..40_000 {
            store.store(StoreOp::Set, &key(i), i as u32, Expiry::NEVER, &key(i));
        }
        // Present and absent keys, an empty one, and more than one call looks at.
        let names: Vec<Vec<u8>> = (39_990..40_010).map(key).chain([Vec::new()]).collect();
        let batch: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        store.prefetch(&batch);
        for (i, name) in (39_990..40_010).zip(&names) {
            let found = store.get(name, |item| (item.flags, item.value.to_vec()));
            if i < 40_000 {
                assert_eq!(found.unwrap(), (i as u32, key(i)));
            } else {
                found.unwrap_err();
            }
        }
    }
}
