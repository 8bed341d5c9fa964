//! memcached's `cache_memlimit`: the memory limit, lowered or raised while the store runs. The
//! heap is mapped once at start (`Config::heap_bytes`, memcached's `-m`), so the limit moves
//! within it: the pool hands out no segment past it, lowering it evicts down to it, and the
//! free segments' memory goes back to the OS.

use crate::item;
use crate::store::Store;
use crate::write::MAX_KEY;
use crate::Eviction;

/// memcached's floor: "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m".
const MIN_LIMIT_BYTES: usize = 8 << 20;
/// The fewest segments per shard a limit leaves: one being written and one to evict or merge.
const MIN_SEGMENTS_PER_SHARD: usize = 2;
/// Memory given back to the OS per hold of the pool lock, so that a writer needing a segment
/// meanwhile waits for one short madvise, not for the whole heap's.
const DISCARD_STEP_BYTES: usize = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryLimitError {
    #[error("cannot set the memory limit below {min} bytes")]
    TooSmall { min: usize },
    #[error("cannot set the memory limit above the {max}-byte heap mapped at start (-m)")]
    TooLarge { max: usize },
}

impl Store {
    /// The memory limit in bytes (memcached's `limit_maxbytes`): `Config::heap_bytes` rounded
    /// down to whole segments (the heap as mapped) until `set_memory_limit` changes it.
    pub fn memory_limit(&self) -> usize {
        self.pool().limit() * self.segs.size()
    }

    /// memcached's `cache_memlimit`: sets how much of the heap items may use, `bytes` rounded
    /// down to whole segments. Lowering it frees segments until those in use fit: expired ones
    /// first, then by the eviction policy, each time in the shard holding the heap's oldest
    /// segment (as a write in a full heap does), one shard's lock at a time; then the free
    /// segments' memory goes back to the OS (MADV_DONTNEED) and RSS falls, except for a heap
    /// locked with `-k` or backed by MAP_HUGETLB pages (see `Heap::can_discard`). Raising it
    /// lets writes use the segments again, their pages faulting back in as they are written.
    ///
    /// On return the segments in use fit the limit, unless no more could be freed: with
    /// `Eviction::None` only expired items go, so the limit is set but more may stay in use;
    /// until deletes and expiry bring use under it, a write that needs a new segment answers
    /// out of memory, as in a full heap. (A large write in flight holds its run until linked.)
    ///
    /// # Errors
    /// `TooLarge` above `Config::heap_bytes`: the heap is mapped once at start, so the limit
    /// cannot pass `-m`. `TooSmall` below the most of: 8 MiB (memcached's floor), two segments
    /// per shard, and the run of segments the largest item (`Config::max_item_size`) takes;
    /// but never above the whole heap, which can always be set.
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), MemoryLimitError> {
        if bytes > self.config.heap_bytes {
            return Err(MemoryLimitError::TooLarge {
                max: self.config.heap_bytes,
            });
        }
        let size = self.segs.size();
        let segments = bytes / size;
        let min = self.min_limit_segments();
        if segments < min {
            return Err(MemoryLimitError::TooSmall { min: min * size });
        }
        let lowered = {
            let mut pool = self.pool();
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
        let largest = item::item_size(MAX_KEY, self.config.max_item_size, u32::MAX, true, false);
        MIN_LIMIT_BYTES
            .div_ceil(size)
            .max(MIN_SEGMENTS_PER_SHARD * self.shards.len())
            .max(largest.div_ceil(size))
            .min(self.segs.count())
    }

    fn over_limit(&self) -> bool {
        let pool = self.pool();
        pool.in_use() > pool.limit()
    }

    /// Frees segments until those in use fit the limit, or none more can be freed. Holds one
    /// shard's lock at a time, and no other lock while it waits for one.
    fn evict_to_limit(&self) {
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
        if !self.segs.can_discard() {
            return;
        }
        let step = DISCARD_STEP_BYTES / self.segs.size();
        let mut from = 0;
        loop {
            let mut pool = self.pool();
            let Some((start, len)) = pool.warm_free_run(from, step) else {
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

    use crate::{Clock, Config, Expiry, Store, StoreOp};

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
}
