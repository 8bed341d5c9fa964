//! `stats`: the shards' counters (`mechanics/counters.rs`, each kept under its shard's lock)
//! summed into one snapshot, with the pool's gauges beside them.

use super::Store;
use crate::mechanics::counters::Counters;
use crate::mechanics::index::Index;
use crate::mechanics::segments::get32;

/// The store's counters for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    /// Key + value bytes of the items held.
    pub bytes: u64,
    /// The memory limit (`Store::memory_limit`): the heap, or what `set_memory_limit` set.
    pub limit_maxbytes: u64,
    pub evictions: u64,
    /// Expired items whose memory was taken back.
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    /// Whole segments freed by the TTL pass because every item in them had expired.
    pub reclaimed_segments: u64,
    /// Merge evictions run (each compacts a few segments into one).
    pub merges: u64,
    /// Heap bytes in segments holding items (the rest is free in the pool).
    pub heap_used: u64,
    /// Heap bytes open for segments: `Config::heap_bytes` (whole segments), more once
    /// `set_memory_limit` raised the limit past it.
    pub heap_bytes: u64,
    /// Heap bytes in segments whose pages may hold memory: written since the heap was opened
    /// and not given back since (memcached's `total_malloced`: it grows as items need memory
    /// and falls when a lowered limit gives free memory back).
    pub malloced_bytes: u64,
    /// Bytes of the hash index (memcached's `hash_bytes`): outside the heap's mapping but
    /// inside the memory limit, where each segment's worth of it is a segment fewer for items.
    pub index_bytes: u64,
    /// Slots of the shards' index tables together (full or not): the index's size in entries.
    pub index_slots: u64,
    /// The most slots the index has had since the heap was first made, a warm restart's
    /// downtime included (memcached's hash table only grows, and survives a restart).
    pub index_slots_peak: u64,
    /// Items stored: header + key + value bytes written and still live.
    pub item_bytes_with_headers: u64,
    /// Items in memory of at least the flash tier's starting `ext_item_size` (0 without one).
    pub items_flash_sized: u64,
    /// Seconds since the oldest segment at the eviction end of any TTL group was opened: how
    /// long an item that is not read again stays (memcached's `stats items` age); 0 when empty.
    pub oldest_item_age: u32,
}

impl Store {
    pub fn stats(&self) -> StoreStats {
        let now = self.clock.now();
        let mut total = Counters::default();
        let mut oldest_created = now;
        let mut index_slots = 0;
        self.each_shard(now, |sh| {
            total.add(&sh.counters);
            index_slots += sh.index.slots() as u64;
            for &head in sh.chains.iter().filter_map(|chain| chain.front()) {
                oldest_created = oldest_created.min(get32(&self.segs.meta(head).created));
            }
        });
        let size = self.segs.size() as u64;
        let (used, warm, open, limit, index_bytes, index_peak) = {
            let pool = self.pool();
            (
                pool.in_use() as u64,
                pool.warm() as u64,
                // Grown only under the pool lock, so it agrees with the pool's counts.
                self.segs.count() as u64,
                pool.limit() as u64,
                pool.index_bytes() as u64,
                pool.index_peak(),
            )
        };
        StoreStats {
            // Entries left by evicted flash pages are not items (until a lookup or a sweep
            // removes them, the shards still count them).
            curr_items: total
                .curr_items
                .saturating_sub(self.flash.as_ref().map_or(0, |f| f.stale_entries())),
            total_items: total.total_items,
            bytes: total.bytes,
            limit_maxbytes: limit * size,
            evictions: total.evictions,
            reclaimed: total.reclaimed,
            expired_unfetched: total.expired_unfetched,
            evicted_unfetched: total.evicted_unfetched,
            reclaimed_segments: total.reclaimed_segments,
            merges: total.merges,
            heap_used: used * size,
            heap_bytes: open * size,
            malloced_bytes: warm * size,
            index_bytes,
            index_slots_peak: (Index::slots_in(index_peak) as u64).max(index_slots),
            index_slots,
            item_bytes_with_headers: total.item_bytes,
            items_flash_sized: total.flash_sized,
            oldest_item_age: now - oldest_created,
        }
    }

    /// `stats reset`: zeroes the cumulative counters (not the gauges).
    pub fn reset_stats(&self) {
        self.each_shard(self.clock.now(), |sh| sh.counters.reset_cumulative());
    }
}
