//! memcached's `cache_memlimit`: the memory limit, lowered or raised while the store runs. The
//! heap is mapped once at start (`Config::heap_bytes`, memcached's `-m`), so the limit moves
//! within it: the pool hands out no segment past it, and lowering it evicts down to it.

use crate::item;
use crate::store::Store;
use crate::write::MAX_KEY;
use crate::Eviction;

/// memcached's floor: "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m".
const MIN_LIMIT_BYTES: usize = 8 << 20;
/// The fewest segments per shard a limit leaves: one being written and one to evict or merge.
const MIN_SEGMENTS_PER_SHARD: usize = 2;

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
    /// segment (as a write in a full heap does), one shard's lock at a time. Raising it lets
    /// writes use the segments again.
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
        self.pool().set_limit(segments);
        self.evict_to_limit();
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
}
