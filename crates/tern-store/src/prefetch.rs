//! Read-ahead for a pipelined batch: the index buckets and items a batch of gets will read are
//! loaded into the cache before the first of them is served, so their cache misses overlap
//! instead of following one another. With 100,000 keys of 256 bytes a get's misses (its index
//! bucket, then its item) cost several times all its instructions.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::index::{self, BUCKET_STRIDE};
use crate::segments::Loc;
use crate::shard::{Key, Shard};
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

/// Below this many index buckets in all (about 26,000 items), items and index mostly stay in
/// the caches and read-ahead costs more than it saves: without this floor, `examples/
/// read_ahead.rs` measured a get over 1,000 keys at 1.20x the CPU, over 10,000 at 0.96x, over
/// 100,000 at 0.48x.
const READ_AHEAD_MIN_BUCKETS: usize = 4096;

impl IndexHints {
    pub(crate) fn new(shards: usize) -> IndexHints {
        IndexHints((0..shards).map(|_| Hint::default()).collect())
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
    /// Whether read-ahead pays: the store is too big for the caches (shard 0's index stands for
    /// all: keys spread evenly over the shards).
    #[inline]
    pub fn reads_ahead(&self) -> bool {
        let buckets = self.index_hints.0[0].buckets.load(Ordering::Relaxed);
        buckets * self.shards.len() >= READ_AHEAD_MIN_BUCKETS
    }

    /// Starts loading what gets or sets of `keys` (at most [`PREFETCH_MAX`] are looked at) will
    /// read: first every home index bucket, from the hints, without locks; then, shard lock by
    /// shard lock, the first 256 bytes of the item each bucket holds under the key's tag (not
    /// checked against the key: a tag collision only loads useless lines). Worth it only when
    /// [`Store::reads_ahead`].
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(PREFETCH_MAX)];
        let mut hashed = [(0, Key { bytes: &[], tag: 0 }); PREFETCH_MAX];
        for (slot, key) in hashed.iter_mut().zip(keys) {
            *slot = self.hash(key);
            let hint = &self.index_hints.0[slot.0];
            let buckets = hint.buckets.load(Ordering::Relaxed);
            if buckets != 0 {
                let home = index::home_bucket(slot.1.tag, buckets);
                let table = hint.table.load(Ordering::Relaxed);
                prefetch_line(table.wrapping_add(home * BUCKET_STRIDE));
            }
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
    use std::sync::Arc;

    use crate::{Clock, Config, Expiry, Store, StoreOp};

    fn key(i: usize) -> Vec<u8> {
        format!("key:{i:08}").into_bytes()
    }

    #[test]
    fn read_ahead_starts_once_the_store_outgrows_the_caches_and_stops_after_a_flush() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let mut stored = 0;
        while !store.reads_ahead() {
            assert!(stored < 100_000, "read-ahead never started");
            store.store(StoreOp::Set, &key(stored), 0, Expiry::NEVER, b"v");
            stored += 1;
        }
        assert!(stored > 10_000, "read-ahead started at {stored} items");
        store.flush_all(0);
        store.get(&key(0), |_| ()).unwrap_err();
        assert!(!store.reads_ahead());
    }

    #[test]
    fn prefetching_any_keys_changes_no_value() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        for i in 0..40_000 {
            store.store(StoreOp::Set, &key(i), i as u32, Expiry::NEVER, &key(i));
        }
        assert!(store.reads_ahead());
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
