//! Read-ahead for a pipelined batch: the index buckets and items a batch of gets will read are
//! loaded into the cache before the first of them is served, so their cache misses overlap
//! instead of following one another. With 100,000 keys of 256 bytes a get's misses (its index
//! bucket, then its item) cost several times all its instructions.

use std::sync::atomic::Ordering;

use super::key::{HashedKey, Key};
use super::Store;
use crate::mechanics::index::{self, BUCKET_STRIDE, NO_SLOT};
use crate::mechanics::segments::Loc;

/// The most keys one `prefetch` call looks at.
pub const PREFETCH_MAX: usize = 16;

impl Store {
    /// Starts loading what gets or sets of `keys` (at most [`PREFETCH_MAX`] are looked at) will
    /// read: [`Store::prefetch_bucket`] for each, then [`Store::prefetch_items`].
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(PREFETCH_MAX)];
        // Slots past `keys.len()` are never read.
        let unused = HashedKey {
            shard: 0,
            key: Key { bytes: &[], tag: 0 },
            slot_hint: NO_SLOT,
        };
        let mut hashed = [unused; PREFETCH_MAX];
        for (slot, key) in hashed.iter_mut().zip(keys) {
            *slot = self.hash_key(key);
            self.prefetch_bucket(*slot);
        }
        self.prefetch_items(&mut hashed[..keys.len()]);
    }

    /// Read-ahead's first stage: starts loading `key`'s home index bucket, found from its
    /// shard's hint without a lock.
    #[inline]
    pub fn prefetch_bucket(&self, key: HashedKey<'_>) {
        let hint = &self.shards[key.shard].0.hint;
        // Every hint names a table: they are set when the store is made.
        let home = index::home_bucket(key.key.tag, hint.buckets.load(Ordering::Relaxed));
        let table = hint.table.load(Ordering::Relaxed);
        prefetch_line(table.wrapping_add(home * BUCKET_STRIDE));
    }

    /// Read-ahead's second stage, once the buckets are on their way: without the shards' locks,
    /// starts loading the first 256 bytes of the item each key's home bucket holds under the
    /// key's tag (not checked against the key: a tag collision only loads useless lines), and
    /// notes that slot in the key for the read that follows to try first. It pays for a store
    /// of any size in the server, whose kernel network path evicts the caches between batches:
    /// at 1,000 keys too (see docs/performance.md, "Read-ahead for every pipelined batch").
    #[inline]
    pub fn prefetch_items<'a, 'k: 'a>(
        &self,
        keys: impl IntoIterator<Item = &'a mut HashedKey<'k>>,
    ) {
        for key in keys {
            let hint = &self.shards[key.shard].0.hint;
            let (table, n) = (
                hint.table.load(Ordering::Relaxed),
                hint.buckets.load(Ordering::Relaxed),
            );
            // SAFETY: a hint of this live store.
            let home = unsafe { index::home_slot_racy(table, n, key.key.tag) };
            // A slot read while a writer changes the table is only a hint, checked by the read.
            if let Some((slot, packed)) = home {
                let loc = Loc::unpack_racy(packed);
                key.slot_hint = slot;
                prefetch_lines(self.segs.address(loc), ITEM_LINES);
            }
        }
    }
}

/// Cache lines of an item loaded ahead: 320 bytes from its start and more, so the whole of an
/// item with a 256-byte value wherever it starts in a line (a longer value's rest the hardware's
/// own prefetch follows once the copy reads it). With four lines the reply's copy of such a
/// value waited for its last one or two: 6 lines took 7-8 % off the server's CPU per request at
/// 256 B, changed nothing measurable at 32 B or 1 KiB; 8 lines gained ~2 % more at 1 KiB and
/// lost ~0.5 % at 32 B (2026-11-27, docs/performance.md).
const ITEM_LINES: usize = 6;

/// A cache line's size on the machines tern runs on.
pub(crate) const LINE: usize = 64;

/// Asks the CPU to load the `lines` cache lines from `at` on; any address will do.
#[inline(always)]
pub(crate) fn prefetch_lines(at: *const u8, lines: usize) {
    for line in 0..lines {
        prefetch_line(at.wrapping_add(line * LINE));
    }
}

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

    use super::BUCKET_STRIDE;
    use crate::mechanics::clock::Clock;
    use crate::mechanics::config::Config;
    use crate::mechanics::index::NO_SLOT;
    use crate::mechanics::types::{Expiry, StoreOp};
    use crate::store::key::HashedKey;
    use crate::store::Store;

    fn key(i: usize) -> Vec<u8> {
        format!("key:{i:08}").into_bytes()
    }

    /// Read-ahead trusts each shard's hint to name its index table as it is now: the hints
    /// follow the tables through every rebuild (growth and a flush here).
    fn assert_hints_follow_the_index(store: &Store) {
        for (shard, cell) in store.shards.iter().enumerate() {
            let hint = &cell.0.hint;
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

    /// A get tries the slot read-ahead noted first, and that slot may since hold another item,
    /// nothing, or lie past a rebuilt table: any slot at all gives the answer no hint gives.
    #[test]
    fn a_read_answers_the_same_whatever_slot_it_tries_first() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        for i in 0..20_000 {
            store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, &key(i));
        }
        let names: Vec<Vec<u8>> = (19_990..20_010).map(key).collect();
        let mut hashed: Vec<_> = names.iter().map(|name| store.hash_key(name)).collect();
        store.prefetch_items(hashed.iter_mut());
        // Most keys sit in their home bucket (where read-ahead looks); a few spill past it.
        assert!(hashed[..10].iter().any(|key| key.slot_hint != NO_SLOT));
        check_every_hint(&store, &hashed, |i| (i < 10).then(|| names[i].clone()));
        // The first five move (a delete, then a set elsewhere); the table grows past them.
        for name in &names[..5] {
            store.delete(name);
            store.store(StoreOp::Set, name, 0, Expiry::NEVER, b"moved");
        }
        for i in 20_000..60_000 {
            store.store(StoreOp::Set, &key(i), 0, Expiry::NEVER, b"v");
        }
        check_every_hint(&store, &hashed[..10], |i| {
            Some(if i < 5 {
                b"moved".to_vec()
            } else {
                names[i].clone()
            })
        });
    }

    /// Reads each key with every slot of its shard's table as its hint, and some past it.
    fn check_every_hint(
        store: &Store,
        hashed: &[HashedKey<'_>],
        want: impl Fn(usize) -> Option<Vec<u8>>,
    ) {
        let read = |key: HashedKey<'_>| store.get(key, |item| item.value.to_vec()).ok();
        for (i, key) in hashed.iter().enumerate() {
            let slots = store.lock(key.shard).index.table().1 * BUCKET_STRIDE / 8;
            assert_eq!(read(*key), want(i));
            for hint in (0..slots as u32 + 16).chain([NO_SLOT - 1, NO_SLOT]) {
                let hinted = HashedKey {
                    slot_hint: hint,
                    ..*key
                };
                assert_eq!(read(hinted), want(i), "key {i}, slot {hint}");
            }
        }
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
