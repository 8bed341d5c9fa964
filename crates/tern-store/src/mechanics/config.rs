//! Store settings, and the heap geometry (shards, segment size, segment count) they come to.

use super::error::StoreError;
use super::flash_config::FlashConfig;
use super::index;
use super::segments::OFFSET_BITS;

/// What to do when the heap is full and a write needs room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eviction {
    /// Segcache-style merge eviction: keeps frequently read items.
    #[default]
    Merge,
    /// Evict the oldest written items first.
    Fifo,
    /// Evict items chosen at random (a random segment's worth).
    Random,
    /// Never evict: a write that needs room fails (memcached's `-M`).
    None,
}

impl std::str::FromStr for Eviction {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Eviction, StoreError> {
        match s {
            "merge" => Ok(Eviction::Merge),
            "fifo" => Ok(Eviction::Fifo),
            "random" => Ok(Eviction::Random),
            "none" => Ok(Eviction::None),
            _ => Err(StoreError::Config(format!(
                "unknown eviction policy {s:?} (expected merge, fifo, random or none)"
            ))),
        }
    }
}

/// Store settings, fixed at start.
#[derive(Clone, Debug)]
pub struct Config {
    /// The heap: item bytes never exceed this (memcached's `-m`), until `cache_memlimit`
    /// changes it (`Store::set_memory_limit`).
    pub heap_bytes: usize,
    /// The most `Store::set_memory_limit` may raise the limit to (its address space is
    /// reserved at start, backed only as it is used); 0: the machine's physical memory. Never
    /// below `heap_bytes`, and no more segments than the index can address.
    pub max_heap_bytes: usize,
    /// Largest value accepted (memcached's `-I`).
    pub max_item_size: usize,
    pub eviction: Eviction,
    /// With `false`, every CAS is 0 (memcached's `-C`).
    pub cas_enabled: bool,
    /// Independent partitions, each with its own lock; rounded up to a power of two.
    pub shards: usize,
    /// Threads that write at once (the server's workers): each appends to segments of its own,
    /// up to `MAX_LANES` of them per shard (see `Lanes`), so two cores' sets to one shard do
    /// not write the same cache lines. Fewer when a shard has few segments (`Geometry::lanes`).
    pub writers: usize,
    /// Segment size in bytes, a power of two from 4 KiB to 1 MiB; 0 picks one so that each
    /// shard gets about 16 segments, at most 256 KiB (a merge eviction holds its shard's lock
    /// while it compacts four segments, so smaller segments mean shorter pauses).
    pub segment_size: usize,
    /// Back the heap with huge pages (memcached's `-L`): MAP_HUGETLB when huge pages are
    /// reserved, else madvise(MADV_HUGEPAGE).
    pub large_pages: bool,
    /// mlock the heap (memcached's `-k`); start fails with a clear message when refused.
    pub lock_memory: bool,
    /// The flash tier (memcached's `-o ext_path=...`): items evicted from memory go to these
    /// files, and only their index entries stay in memory.
    pub flash: Option<FlashConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            heap_bytes: 64 << 20,
            max_heap_bytes: 0,
            max_item_size: 1 << 20,
            eviction: Eviction::default(),
            cas_enabled: true,
            shards: 16,
            writers: 1,
            segment_size: 0,
            large_pages: false,
            lock_memory: false,
            flash: None,
        }
    }
}

/// The most writer lanes a shard has (`Config::writers`). Two threads' uniform sets on two
/// lanes ran at 1.52-1.56x one thread's rate against 1.45x on one (store bench, 2026-11-27);
/// more than four is unmeasured and keeps more of a shard's segments open.
pub(crate) const MAX_LANES: usize = 4;

const MIN_SEGMENT: usize = 4 << 10;
const MAX_SEGMENT: usize = 1 << OFFSET_BITS;
const AUTO_MAX_SEGMENT: usize = 256 << 10;

/// A shard count for `threads` threads sharing a `heap_bytes` heap: four shards per thread, so
/// two threads rarely want the same lock and a hot key's lock holds up few other keys, but no
/// more than lets each shard have 16 segments of the largest auto size (smaller segments hold
/// large values worse), and at least the default 16, at most 256.
pub fn shards_for(threads: usize, heap_bytes: usize) -> usize {
    let by_threads = (threads.max(1) * 4).next_power_of_two();
    let by_heap = (heap_bytes / (16 * AUTO_MAX_SEGMENT)).max(1);
    by_threads
        .min(1 << (usize::BITS - 1 - by_heap.leading_zeros()))
        .clamp(16, 256)
}

/// How the heap is laid out, fixed at start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) shards: usize,
    /// log2 of the segment size.
    pub(crate) segment_shift: u32,
    pub(crate) segments: usize,
    /// Segments the heap may grow to (`Config::max_heap_bytes`), at least `segments`.
    pub(crate) reserved: usize,
    /// Writer lanes per shard: `Config::writers`, at most `MAX_LANES`, and at most one per
    /// eight of a shard's segments, so that open segments (which eviction passes over) stay a
    /// small part of a shard.
    pub(crate) lanes: usize,
}

/// The most segments an index entry can name (`Loc::pack` stores the segment plus one in the
/// bits left beside the tag and the offset, and the all-ones value is never a segment).
const MAX_SEGMENTS: usize = (1 << (64 - index::TAG_BITS - OFFSET_BITS)) - 2;

/// The machine's physical memory: where 0 leaves `Config::max_heap_bytes`.
fn physical_memory() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    usize::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(usize::try_from(page).unwrap_or(0))
}

impl Geometry {
    pub(crate) fn of(config: &Config) -> Result<Geometry, StoreError> {
        let shards = config.shards.max(1).next_power_of_two();
        let segment_size = match config.segment_size {
            0 => {
                let target = config.heap_bytes / (shards * 16);
                let pow = if target == 0 {
                    MIN_SEGMENT
                } else {
                    1 << (usize::BITS - 1 - target.leading_zeros())
                };
                pow.clamp(MIN_SEGMENT, AUTO_MAX_SEGMENT)
            }
            size if size.is_power_of_two() && (MIN_SEGMENT..=MAX_SEGMENT).contains(&size) => size,
            size => {
                return Err(StoreError::Config(format!(
                    "segment size {size} must be a power of two from {MIN_SEGMENT} to {MAX_SEGMENT}"
                )))
            }
        };
        let segments = config.heap_bytes / segment_size;
        if segments == 0 {
            return Err(StoreError::Config(format!(
                "the heap ({} bytes) must hold at least one {segment_size}-byte segment",
                config.heap_bytes
            )));
        }
        // With a flash tier, locations in memory leave the flash bit clear.
        let max_segments = if config.flash.is_some() {
            super::flash::MAX_RAM_SEGMENTS
        } else {
            MAX_SEGMENTS
        };
        if segments > max_segments {
            return Err(StoreError::Config(format!(
                "{segments} segments is more than the index can address; use a larger segment size"
            )));
        }
        let max_bytes = match config.max_heap_bytes {
            0 => physical_memory(),
            bytes => bytes,
        };
        let lanes = config
            .writers
            .min(MAX_LANES)
            .min(segments / shards / 8)
            .max(1);
        Ok(Geometry {
            shards,
            segment_shift: segment_size.trailing_zeros(),
            segments,
            lanes,
            reserved: (max_bytes / segment_size).clamp(segments, max_segments),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_grow_with_threads_while_the_heap_keeps_segments_large() {
        let gib = 1 << 30;
        assert_eq!(shards_for(1, 64 << 20), 16);
        assert_eq!(shards_for(64, 64 << 20), 16);
        assert_eq!(shards_for(8, gib), 32);
        assert_eq!(shards_for(64, gib), 256);
        assert_eq!(shards_for(64, 64 * gib), 256);
        assert_eq!(shards_for(64, 512 << 20), 128);
    }

    #[test]
    fn auto_segments_give_each_shard_about_sixteen_within_bounds() {
        let geometry = |heap_bytes, shards| {
            Geometry::of(&Config {
                heap_bytes,
                shards,
                ..Config::default()
            })
            .unwrap()
        };
        let default = geometry(64 << 20, 16);
        assert_eq!((default.segment_shift, default.segments), (18, 256));
        assert!(default.reserved >= default.segments);
        assert_eq!(geometry(64 << 20, 64).segment_shift, 16);
        assert_eq!(geometry(64 << 10, 16).segment_shift, 12);
        assert_eq!(geometry(64 << 20, 5).shards, 8);
    }

    #[test]
    fn writers_get_lanes_up_to_four_and_one_per_eight_segments_of_a_shard() {
        let lanes = |writers, heap_bytes, segment_size| {
            Geometry::of(&Config {
                heap_bytes,
                writers,
                segment_size,
                ..Config::default()
            })
            .unwrap()
            .lanes
        };
        assert_eq!(lanes(1, 64 << 20, 0), 1);
        assert_eq!(lanes(2, 64 << 20, 0), 2);
        // The default heap gives a shard 16 segments: two lanes at most.
        assert_eq!(lanes(64, 64 << 20, 0), 2);
        assert_eq!(lanes(64, 256 << 20, 0), MAX_LANES);
        assert_eq!(lanes(0, 64 << 20, 0), 1);
        // 16 shards of 16 segments: two lanes each; of 8 segments: one.
        assert_eq!(lanes(4, 16 << 20, 64 << 10), 2);
        assert_eq!(lanes(4, 8 << 20, 64 << 10), 1);
    }
}
