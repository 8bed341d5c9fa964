//! A shard's counters, kept under its lock so a command writes only its own shard's; the
//! store sums them when `stats` asks.

/// One shard's counters; `repr(C)`, those every set moves first (see `shard::ShardLock`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub(crate) struct Counters {
    pub(crate) curr_items: u64,
    pub(crate) bytes: u64,
    pub(crate) item_bytes: u64,
    /// Items in memory the flash tier would take by size (`Store::flash_sized`; none without
    /// one): what `stats items` reports apart, as memcached's larger slab classes.
    pub(crate) flash_sized: u64,
    pub(crate) total_items: u64,
    /// Item bytes stored by the store commands (the flash tier's write amplification is
    /// what it wrote over this).
    pub(crate) set_bytes: u64,
    pub(crate) evictions: u64,
    pub(crate) reclaimed: u64,
    pub(crate) expired_unfetched: u64,
    pub(crate) evicted_unfetched: u64,
    pub(crate) reclaimed_segments: u64,
    pub(crate) merges: u64,
}

impl Counters {
    pub(crate) fn add(&mut self, other: &Counters) {
        self.curr_items += other.curr_items;
        self.bytes += other.bytes;
        self.item_bytes += other.item_bytes;
        self.flash_sized += other.flash_sized;
        self.total_items += other.total_items;
        self.evictions += other.evictions;
        self.reclaimed += other.reclaimed;
        self.expired_unfetched += other.expired_unfetched;
        self.evicted_unfetched += other.evicted_unfetched;
        self.reclaimed_segments += other.reclaimed_segments;
        self.merges += other.merges;
        self.set_bytes += other.set_bytes;
    }

    /// Zeroes the cumulative counters, keeping the gauges.
    pub(crate) fn reset_cumulative(&mut self) {
        *self = Counters {
            curr_items: self.curr_items,
            bytes: self.bytes,
            item_bytes: self.item_bytes,
            flash_sized: self.flash_sized,
            ..Counters::default()
        };
    }
}
