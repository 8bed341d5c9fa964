//! memcached's `cache_memlimit`: the memory limit, lowered or raised while the store runs. The
//! heap opens `Config::heap_bytes` (memcached's `-m`) at start within an address space
//! reserved up to `Config::max_heap_bytes`; raising the limit past what is open opens more
//! segments (`Segments::grow`), backed as they are written. The pool hands out no segment past
//! the limit, lowering it evicts down to it, and the free segments' memory goes back to the OS.
//!
//! The index counts inside the limit too. Its tables live outside the heap, so each segment's
//! worth of them is charged to the pool as one segment fewer for items, and that many free
//! segments' pages are given back, so items and index together stay within `-m`. A shard's
//! table grows only once its new size is charged (`grow_index`), making room as a write in a
//! full heap does (expired segments, then the eviction policy): an index that cannot grow
//! refuses the write (out of memory), it never drops an accepted item. A table left sparse by
//! evictions shrinks (`shrink_index`), so room the index no longer needs goes back to items.

use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::config::Eviction;
use crate::mechanics::item::{self, MAX_KEY};
use crate::mechanics::pool::Pool;
use crate::mechanics::shard::Shard;

/// memcached's floor: "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m".
const MIN_LIMIT_BYTES: usize = 8 << 20;
/// The fewest segments per shard a limit leaves: one being written and one to evict or merge.
const MIN_SEGMENTS_PER_SHARD: usize = 2;
/// Memory given back to the OS per hold of the pool lock, so that a writer needing a segment
/// meanwhile waits for one short madvise, not for the whole heap's.
const DISCARD_STEP_BYTES: usize = 8 << 20;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryLimitError {
    #[error("cannot set the memory limit below {min} bytes")]
    TooSmall { min: usize },
    #[error("cannot set the memory limit above {max} bytes, the most this heap can grow to")]
    TooLarge { max: usize },
    /// The kernel refused the memory (strict overcommit; `-k` past RLIMIT_MEMLOCK). A memory
    /// file's (`-e`) or MAP_HUGETLB pages' heap cannot grow at all: `TooLarge`.
    #[error("cannot raise the memory limit past the {open}-byte heap: {why}")]
    CannotGrow { open: usize, why: String },
}

impl Store {
    /// The memory limit in bytes (memcached's `limit_maxbytes`): `Config::heap_bytes` rounded
    /// down to whole segments until `set_memory_limit` changes it.
    pub fn memory_limit(&self) -> usize {
        self.pool().limit() * self.segs.size()
    }

    /// memcached's `cache_memlimit`: sets how much memory items may use, `bytes` rounded down
    /// to whole segments. Lowering it frees segments until those in use fit: expired ones
    /// first, then by the eviction policy, each time in the shard holding the heap's oldest
    /// segment (as a write in a full heap does), one shard's lock at a time; then the free
    /// segments' memory goes back to the OS (MADV_DONTNEED) and RSS falls, except for a heap
    /// locked with `-k` or backed by MAP_HUGETLB pages (see `Heap::can_discard`). Raising it
    /// lets writes use the segments again, their pages faulting back in as they are written,
    /// and past the heap opened so far opens more of the address space reserved at start (as
    /// memcached mallocs more pages once its limit is raised).
    ///
    /// On return the segments in use fit the limit, unless no more could be freed: with
    /// `Eviction::None` only expired items go, so the limit is set but more may stay in use;
    /// until deletes and expiry bring use under it, a write that needs a new segment answers
    /// out of memory, as in a full heap. (A large write in flight holds its run until linked.)
    ///
    /// # Errors
    /// `TooLarge` above the reservation (`Config::max_heap_bytes`); `CannotGrow` where the
    /// heap cannot open more (a memory file's, MAP_HUGETLB pages', or the kernel refused).
    /// `TooSmall` below the most of: 8 MiB (memcached's floor), two segments per shard, and
    /// the run of segments the largest item (`Config::max_item_size`) takes; but never above
    /// the heap opened so far, which can always be set.
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), MemoryLimitError> {
        let size = self.segs.size();
        let segments = bytes / size;
        if segments > self.segs.reserved() {
            return Err(MemoryLimitError::TooLarge {
                max: self.segs.reserved() * size,
            });
        }
        let min = self.min_limit_segments();
        if segments < min {
            return Err(MemoryLimitError::TooSmall { min: min * size });
        }
        // The index tables' regions first: only address space, and a raise they cannot follow
        // is refused before the limit moves.
        let index_bytes = super::max_index_bytes(segments * size, self.shards.len());
        for shard in 0..self.shards.len() {
            let mut sh = self.lock(shard);
            sh.index
                .widen(index_bytes)
                .map_err(|e| MemoryLimitError::CannotGrow {
                    open: self.segs.count() * size,
                    why: e.to_string(),
                })?;
            self.refresh_hint(&sh);
        }
        let lowered = {
            let mut pool = self.pool();
            self.segs
                .grow(&mut pool, segments)
                .map_err(|e| MemoryLimitError::CannotGrow {
                    open: self.segs.count() * size,
                    why: e.to_string(),
                })?;
            let lowered = segments < pool.limit();
            pool.set_limit(segments);
            lowered
        };

        self.evict_to_limit();
        if lowered {
            self.discard_free();
        }
        Ok(())
    }

    fn min_limit_segments(&self) -> usize {
        let size = self.segs.size();
        let largest = item::large_item_size(MAX_KEY, self.config.max_item_size, u32::MAX);
        MIN_LIMIT_BYTES
            .div_ceil(size)
            .max(MIN_SEGMENTS_PER_SHARD * self.shards.len())
            .max(largest.div_ceil(size))
            .min(self.segs.count())
    }

    fn over_limit(&self) -> bool {
        self.pool().over_limit()
    }

    /// Grows this shard's index so that it takes one more entry, its new table charged to
    /// the limit before it is built (beside the old one until that is dropped). Makes room as
    /// a write in a full heap does; false when none can be made (then the write that needed
    /// the entry fails, out of memory). Evicting here may also leave the shard needing no
    /// larger table. Every rebuild moves slots, so `churn` changes.
    #[cold]
    pub(crate) fn grow_index(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        sh.churn += 1;
        // Entries left by evicted flash pages go before the table grows for them.
        if self.sweep_stale(sh) > 0 && !sh.index.needs_room() {
            return true;
        }
        // Each pass frees at least a segment, or gives up.
        for _ in 0..=self.segs.count() {
            if !sh.index.needs_room() {
                return true;
            }
            if !sh.index.can_grow() {
                return false;
            }
            let grown = sh.index.grown_bytes();
            if self.pool().charge_index(grown) {
                self.discard_excess_warm();
                let old = sh.index.bytes();
                sh.index.grow();
                self.refresh_hint(sh);
                self.pool().uncharge_index(old);
                return true;
            }
            if self.reclaim_shard(sh, now) == 0 && !self.evict_for(sh, now) {
                return false;
            }
            self.release(sh, false);
        }
        false
    }

    /// Rebuilds this shard's index smaller when evictions left it sparse, giving room back to
    /// items. The smaller table (under half the old one) is charged even past the limit: it
    /// exists for the time of the rebuild beside the old one, which is then dropped.
    pub(crate) fn shrink_index(&self, sh: &mut Shard) {
        if !sh.index.is_sparse() {
            return;
        }
        sh.churn += 1;
        self.pool().charge_index_anyway(sh.index.shrunk_bytes());
        let old = sh.index.bytes();
        sh.index.shrink();
        self.refresh_hint(sh);
        self.pool().uncharge_index(old);
    }

    /// Charges `bytes` of index a restore needs even past the limit (it must index what it
    /// restores); the restore frees segments down to the limit once every shard is indexed.
    pub(crate) fn charge_restored_index(&self, bytes: usize) {
        self.pool().charge_index_anyway(bytes);
    }

    /// Moves the charge of a shard's index from `old` to `new` bytes (`flush_all`'s fresh table).
    pub(crate) fn recharge_index(&self, old: usize, new: usize) {
        let mut pool = self.pool();
        pool.uncharge_index(old);
        pool.charge_index_anyway(new);
    }

    /// Gives back the pages of free segments beyond what the limit leaves the heap beside the
    /// index, so RSS stays within `-m` as the index grows (a no-op where pages cannot be
    /// given back: `Heap::can_discard`).
    pub(crate) fn discard_excess_warm(&self) {
        self.discard_warm(Pool::excess_warm);
    }

    /// Frees segments until those in use and the index fit the limit, or none more can be
    /// freed. Holds one shard's lock at a time, and no other lock while it waits for one.
    pub(crate) fn evict_to_limit(&self) {
        if !self.over_limit() {
            return;
        }
        self.reclaim_expired();
        if self.config.eviction == Eviction::None {
            return;
        }
        let now = self.clock.now();
        let shards = self.shards.len();
        while self.over_limit() {
            let oldest = self.oldest_shard();
            let evicted = self.evict_to_pool(&mut self.lock(oldest), now)
                || (0..shards).any(|s| s != oldest && self.evict_to_pool(&mut self.lock(s), now));
            if !evicted {
                break;
            }
        }
    }

    /// Gives the memory of the free segments that may hold some back to the OS.
    fn discard_free(&self) {
        self.discard_warm(|_| usize::MAX);
    }

    /// Gives back the pages of free segments that may hold some, a run of at most
    /// `DISCARD_STEP_BYTES` per pool lock, while `wanted` asks for more segments (0: enough).
    fn discard_warm(&self, wanted: impl Fn(&Pool) -> usize) {
        if !self.segs.can_discard() {
            return;
        }
        let step = DISCARD_STEP_BYTES / self.segs.size();
        let mut from = 0;
        loop {
            let mut pool = self.pool();
            let want = wanted(&pool);
            if want == 0 {
                break;
            }
            let Some((start, len)) = pool.warm_free_run(from, step.min(want)) else {
                break;
            };
            self.segs.discard(&mut pool, start, len);
            from = start + len;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::mechanics::clock::Clock;
    use crate::mechanics::config::{Config, Eviction};
    use crate::mechanics::types::{Expiry, StoreOp, StoreOutcome};
    use crate::store::memlimit::MemoryLimitError;
    use crate::store::Store;

    /// Segments with any page in memory, and whether every free one has none.
    fn residency(s: &Store) -> (usize, bool) {
        let size = s.segs.size();
        let pool = s.pool();
        let resident = |seg: usize| s.segs.heap().resident_pages(seg * size, size) > 0;
        let in_memory = (0..s.segs.count()).filter(|&seg| resident(seg)).count();
        let free_released = (0..s.segs.count())
            .filter(|&seg| pool.is_free(seg as u32))
            .all(|seg| !resident(seg));
        (in_memory, free_released)
    }

    /// The index's budget holds: segments in use and the index's charge fit the limit, the
    /// charge is what the tables hold, and no more heap segments hold memory than the limit
    /// leaves beside the index.
    fn assert_within_budget(s: &Store) {
        let tables: usize = (0..s.shards.len()).map(|i| s.lock(i).index.bytes()).sum();
        let (in_memory, _) = residency(s);
        let pool = s.pool();
        assert_eq!(pool.index_bytes(), tables);
        assert!(
            pool.in_use() + pool.index_segments() <= pool.limit(),
            "{} segments in use, {} charged to the index, limit {}",
            pool.in_use(),
            pool.index_segments(),
            pool.limit()
        );
        assert!(
            in_memory <= pool.limit() - pool.index_segments(),
            "{in_memory} segments in memory beside {} of index",
            pool.index_segments()
        );
    }

    fn small_store(heap_bytes: usize, eviction: Eviction) -> Store {
        let s = Store::new(
            Config {
                heap_bytes,
                shards: 4,
                eviction,
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        s.segs.heap().no_huge_pages();
        s
    }

    #[test]
    fn tiny_items_fill_the_limit_with_their_index_and_none_is_lost_silently() {
        let s = small_store(4 << 20, Eviction::Merge);
        let sets = 600_000u64;
        for i in 0..sets {
            let outcome = s.store(StoreOp::Set, &i.to_le_bytes(), 0, Expiry::NEVER, b"v");
            assert!(
                matches!(outcome, StoreOutcome::Stored { .. }),
                "{outcome:?}"
            );
            if i % 4096 == 0 {
                assert_within_budget(&s);
            }
        }
        assert_within_budget(&s);
        let stats = s.stats();
        // Every accepted item is held or was evicted, counted.
        assert_eq!(stats.curr_items + stats.evictions, sets);
        assert!(stats.evictions > 0);
        // The index took a real share of the limit (about 10 of every 23 bytes here).
        assert!(stats.index_bytes * 3 > stats.limit_maxbytes, "{stats:?}");
        // The newest items are all there.
        for i in sets - 1000..sets {
            assert!(s.get(&i.to_le_bytes(), |_| ()).is_ok(), "item {i}");
        }
    }

    #[test]
    fn an_index_that_cannot_grow_refuses_the_write_without_eviction() {
        let s = small_store(4 << 20, Eviction::None);
        let mut stored = 0u64;
        let mut refused = 0;
        for i in 0..600_000u64 {
            match s.store(StoreOp::Set, &i.to_le_bytes(), 0, Expiry::NEVER, b"v") {
                StoreOutcome::Stored { .. } => stored += 1,
                StoreOutcome::OutOfMemory => refused += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(refused > 0);
        assert_within_budget(&s);
        let stats = s.stats();
        assert_eq!((stats.curr_items, stats.evictions), (stored, 0));
    }

    #[test]
    fn larger_items_after_tiny_ones_take_back_the_index_room() {
        let s = small_store(4 << 20, Eviction::Fifo);
        for i in 0..300_000u64 {
            s.store(StoreOp::Set, &i.to_le_bytes(), 0, Expiry::NEVER, b"v");
        }
        let tiny_index = s.stats().index_bytes;
        for i in 0..20_000u64 {
            s.store(
                StoreOp::Set,
                &(i << 32).to_le_bytes(),
                0,
                Expiry::NEVER,
                &[7; 1000],
            );
        }
        assert_within_budget(&s);
        let stats = s.stats();
        assert!(
            stats.index_bytes * 4 < tiny_index,
            "{} bytes of index, {tiny_index} before",
            stats.index_bytes
        );
        assert!(stats.heap_used > stats.limit_maxbytes * 9 / 10, "{stats:?}");
    }

    #[test]
    fn a_large_item_taking_cold_segments_leaves_no_segment_warm_past_the_limit() {
        let s = small_store(16 << 20, Eviction::Merge);
        s.set_memory_limit(8 << 20).unwrap();
        {
            // Every segment the limit allows warmed, then every other one given back: free and
            // warm, but no two of them side by side.
            let mut pool = s.pool();
            let room = pool.limit() - pool.index_segments();
            let taken: Vec<u32> = (0..room).map(|_| pool.take().unwrap()).collect();
            for &seg in taken.iter().step_by(2) {
                pool.give(seg);
            }
            assert_eq!(pool.excess_warm(), 0);
        }
        // A run needs contiguous segments: it warms two cold ones.
        let run = s.alloc_run(2).unwrap();
        assert_eq!(s.pool().excess_warm(), 0);
        s.free_run(run);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(8))]
        /// Any mix of sizes, deletes, flushes and limit changes keeps the index in its budget.
        #[test]
        fn the_index_never_passes_its_budget(
            ops in proptest::collection::vec((0u8..8, 0u32..1_000_000, 0usize..5), 1..40)
        ) {
            // 16 MiB, so that the limit can move (its floor is 8 MiB).
            let s = small_store(16 << 20, Eviction::Merge);
            let sizes = [1, 1, 40, 3_000, 300_000];
            for (op, key, size) in ops {
                match op {
                    0 => s.flush_all(0),
                    1 => {
                        let mb = 8 + key as usize % 9;
                        s.set_memory_limit(mb << 20).unwrap();
                    }
                    2 => {
                        for k in key..key + 500 {
                            s.delete(&k.to_le_bytes());
                        }
                    }
                    _ => {
                        for k in key..key + 40_000 {
                            s.store(StoreOp::Set, &k.to_le_bytes(), 0, Expiry::NEVER,
                                &vec![1; sizes[size]]);
                            if sizes[size] > 1000 {
                                break;
                            }
                        }
                    }
                }
                assert_within_budget(&s);
            }
        }
    }

    #[test]
    fn a_raise_past_the_start_heap_opens_more_and_a_shrink_gives_it_back() {
        let s = Store::new(
            Config {
                heap_bytes: 8 << 20,
                max_heap_bytes: 32 << 20,
                shards: 4,
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        s.segs.heap().no_huge_pages();
        let write = |keys: std::ops::Range<u32>| {
            for key in keys {
                let outcome = s.store(
                    StoreOp::Set,
                    &key.to_le_bytes(),
                    0,
                    Expiry::NEVER,
                    &[7; 2000],
                );
                assert!(matches!(outcome, StoreOutcome::Stored { .. }));
            }
        };
        // 20 MB of items in the 8 MiB heap: evicted down to it.
        write(0..10_000);
        let before = s.stats();
        assert!(before.evictions > 0);
        assert_eq!(before.heap_bytes, 8 << 20);
        assert!(before.malloced_bytes <= 8 << 20);
        assert_eq!(
            s.set_memory_limit(33 << 20),
            Err(MemoryLimitError::TooLarge { max: 32 << 20 })
        );
        s.set_memory_limit(24 << 20).unwrap();
        assert_within_budget(&s);
        write(10_000..20_000);
        let raised = s.stats();
        assert_eq!(
            (raised.limit_maxbytes, raised.heap_bytes),
            (24 << 20, 24 << 20)
        );
        assert!(raised.heap_used > 16 << 20, "{raised:?}");
        assert!(raised.malloced_bytes > 16 << 20, "{raised:?}");
        // No eviction while the new room lasted: the newest 8,000 items all read back.
        for key in 12_000..20_000u32 {
            s.get(&key.to_le_bytes(), |v| assert_eq!(v.value, [7; 2000]))
                .unwrap();
        }
        assert_within_budget(&s);
        s.set_memory_limit(8 << 20).unwrap();
        let lowered = s.stats();
        assert_eq!(lowered.heap_bytes, 24 << 20, "what was opened stays open");
        assert!(lowered.malloced_bytes <= 8 << 20, "{lowered:?}");
        let (in_memory, free_released) = residency(&s);
        assert!(free_released && in_memory <= (8 << 20) / s.segs.size());
        assert_within_budget(&s);
    }

    #[test]
    fn a_heap_that_cannot_grow_refuses_a_raise_and_still_shrinks() {
        let s = small_store(16 << 20, Eviction::Merge);
        let max = s.segs.reserved() * s.segs.size();
        assert_eq!(
            s.set_memory_limit(max + s.segs.size()),
            Err(MemoryLimitError::TooLarge { max })
        );
        let capped = Store::new(
            Config {
                heap_bytes: 16 << 20,
                max_heap_bytes: 1 << 20,
                shards: 4,
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        assert_eq!(
            capped.set_memory_limit(17 << 20),
            Err(MemoryLimitError::TooLarge { max: 16 << 20 })
        );
        capped.set_memory_limit(8 << 20).unwrap();
        assert_eq!(capped.memory_limit(), 8 << 20);
    }

    #[test]
    fn a_shrink_gives_free_memory_back_and_writes_then_stay_within_the_limit() {
        let s = Store::new(
            Config {
                heap_bytes: 32 << 20,
                shards: 4,
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        assert!(s.segs.can_discard());
        s.segs.heap().no_huge_pages();
        let limit = s.segs.count() / 2;
        let write = |keys: std::ops::Range<u32>| {
            for key in keys {
                s.store(
                    StoreOp::Set,
                    &key.to_le_bytes(),
                    0,
                    Expiry::NEVER,
                    &[7; 2000],
                );
            }
        };
        write(0..20_000);
        assert!(residency(&s).0 > limit);
        // Deleting the newest items frees written segments before the shrink evicts more.
        for key in 18_000..20_000u32 {
            s.delete(&key.to_le_bytes());
        }
        s.set_memory_limit(limit * s.segs.size()).unwrap();
        let (in_memory, free_released) = residency(&s);
        assert!(free_released);
        assert!(in_memory <= limit, "{in_memory} segments in memory");
        // Written segments are reused before released ones, so memory stays within the limit.
        write(20_000..40_000);
        let (in_memory, _) = residency(&s);
        assert!(in_memory <= limit, "{in_memory} segments in memory");
    }

    /// A write that grows the index may evict the segment holding the item it changes, and
    /// with a flash tier send that item to flash. The index grows before the write looks at
    /// flash, so the write meets the item there: a `replace` replaced it (it answered NOT_STORED
    /// while the item sat on flash), and a set with a given CAS (the general write path) left
    /// no entry of the old version behind its new item (counted in `curr_items`, never found).
    #[test]
    fn a_write_whose_index_growth_sends_its_item_to_flash_still_finds_it_there() {
        use crate::mechanics::flash_config::FlashConfig;
        let dir = std::env::temp_dir().join(format!("tern-store-grow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = Store::new(
            Config {
                heap_bytes: 4 << 20,
                shards: 1,
                eviction: Eviction::Fifo,
                flash: Some(FlashConfig::for_tests(dir.join("flash"), 64 << 20)),
                ..Config::default()
            },
            Arc::new(Clock::manual(1_700_000_000)),
        )
        .unwrap();
        let settle = |s: &Store| while s.flash_work().is_zero() {};
        let key = |n: u32| format!("key:{n}").into_bytes();
        let mut next = 0u32;
        let mut growths = 0;
        let writes: [fn(&Store, &[u8]) -> StoreOutcome; 2] = [
            |s, k| s.store(StoreOp::Replace, k, 0, Expiry::NEVER, &[2; 500]),
            |s, k| s.store_with_cas(StoreOp::Set, k, 0, Expiry::NEVER, &[2; 500], Some(7)),
        ];
        for write in writes {
            // Fill until the next entry grows the index, and the heap has no room for that.
            loop {
                s.store(StoreOp::Set, &key(next), 0, Expiry::NEVER, &[1; 500]);
                next += 1;
                if next % 64 == 0 {
                    settle(&s);
                }
                let sh = s.lock(0);
                let pool = s.pool();
                let grown = pool.index_bytes() + sh.index.grown_bytes();
                if sh.index.needs_room() && pool.in_use() + grown / s.segs.size() > pool.limit() {
                    break;
                }
            }
            settle(&s);
            // The changed item sits in the segment FIFO eviction takes first.
            let target = {
                let sh = s.lock(0);
                let oldest = sh.chains.iter().find_map(|c| c.front().copied()).unwrap();
                (0..next)
                    .find(|&n| {
                        let bytes = key(n);
                        let (_, k) = s.hash(&bytes);
                        s.lookup(&sh, k).is_some_and(|f| f.loc.seg == oldest)
                    })
                    .unwrap()
            };
            let items = s.stats().curr_items;
            let written = s.flash_stats().unwrap().objects_written;
            let outcome = write(&s, &key(target));
            assert!(
                matches!(outcome, StoreOutcome::Stored { .. }),
                "{outcome:?}"
            );
            settle(&s);
            assert!(
                s.flash_stats().unwrap().objects_written > written,
                "nothing went to flash"
            );
            assert!(!s.lock(0).index.needs_room());
            growths += 1;
            let value = s.get(&key(target), |item| item.value.to_vec()).unwrap();
            assert_eq!(value, [2; 500]);
            assert_eq!(s.stats().curr_items, items);
        }
        assert_eq!(growths, 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
