//! The flash tier's settings (memcached's `-o ext_*` options): the files, their geometry, and
//! the policy knobs the `extstore` command changes while the server runs ([`FlashKnobs`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// One `ext_path=FILE:SIZE`: the files together form one pool of pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashFile {
    pub path: PathBuf,
    pub bytes: u64,
}

/// The flash tier's fixed settings.
#[derive(Clone, Debug, PartialEq)]
pub struct FlashConfig {
    pub files: Vec<FlashFile>,
    /// memcached's `ext_page_size` (default 64 MiB): the unit flash is filled, compacted and
    /// evicted in.
    pub page_size: usize,
    /// memcached's `ext_wbuf_size` (default 4 MiB): items bound for flash gather in a buffer
    /// this large, written with one write when full.
    pub wbuf_size: usize,
    /// memcached's `ext_threads` (default 1): threads writing buffers and reading pages back.
    pub io_threads: usize,
    /// Reads the workers' own rings keep in flight at most, all together (tern's own: the
    /// server sets it from the files' devices). Past the device's request queue a submission
    /// sleeps in the kernel until a request frees, and the worker with it.
    pub read_depth: usize,
    pub knobs: FlashSettings,
}

/// `read_depth` where the server knows no device's queue.
pub const DEFAULT_READ_DEPTH: usize = 128;

impl Default for FlashConfig {
    fn default() -> FlashConfig {
        FlashConfig {
            files: Vec::new(),
            page_size: 64 << 20,
            wbuf_size: 4 << 20,
            io_threads: 1,
            read_depth: DEFAULT_READ_DEPTH,
            knobs: FlashSettings::default(),
        }
    }
}

#[cfg(test)]
impl FlashConfig {
    /// A small tier for the store's tests: `bytes` of the file at `path` in 1 MiB pages, 256 KiB
    /// write buffers, one I/O thread, items of 64 bytes and up going to flash, none recached.
    pub(crate) fn for_tests(path: PathBuf, bytes: u64) -> FlashConfig {
        FlashConfig {
            files: vec![FlashFile { path, bytes }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            io_threads: 1,
            read_depth: DEFAULT_READ_DEPTH,
            knobs: FlashSettings {
                item_size: 64,
                recache_rate: 0,
                ..FlashSettings::default()
            },
        }
    }
}

/// The policy knobs, with memcached's defaults and meanings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashSettings {
    /// `ext_item_size`: only items of at least this many bytes (key + value) go to flash.
    pub item_size: u32,
    /// `ext_item_age`: items idle this many seconds go to flash before memory runs out;
    /// `u32::MAX` (the default): only when memory runs out.
    pub item_age: u32,
    /// `ext_low_ttl`: items with less than this many seconds left stay in memory.
    pub low_ttl: u32,
    /// `ext_recache_rate`: one read in this many brings the item back into memory (0: never).
    pub recache_rate: u32,
    /// `ext_compact_under`: compact pages while fewer than this many are free.
    pub compact_under: u32,
    /// `ext_drop_under`: while fewer than this many pages are free, compaction drops what was
    /// not read since it was written to flash (as with `drop_unread`).
    pub drop_under: u32,
    /// `ext_max_frag`: compact only pages whose live bytes are under this share of the page.
    pub max_frag: f64,
    /// `ext_drop_unread`: compaction drops items not read since they went to flash.
    pub drop_unread: bool,
    /// `ext_max_sleep`: the most microseconds a background thread sleeps between passes.
    pub max_sleep_us: u32,
}

impl Default for FlashSettings {
    fn default() -> FlashSettings {
        FlashSettings {
            item_size: 512,
            item_age: u32::MAX,
            low_ttl: 0,
            recache_rate: 2000,
            compact_under: 0,
            drop_under: 0,
            max_frag: 0.8,
            drop_unread: false,
            max_sleep_us: 1_000_000,
        }
    }
}

/// [`FlashSettings`] as the running store reads them: each knob on its own, so the `extstore`
/// command can change one while workers and background threads read them. Relaxed: a knob
/// is a hint read afresh on each pass; nothing else is published through it.
#[derive(Debug)]
pub struct FlashKnobs {
    item_size: AtomicU32,
    item_age: AtomicU32,
    low_ttl: AtomicU32,
    recache_rate: AtomicU32,
    compact_under: AtomicU32,
    drop_under: AtomicU32,
    max_frag_bits: AtomicU64,
    drop_unread: AtomicU32,
    max_sleep_us: AtomicU32,
}

impl FlashKnobs {
    pub(crate) fn new(s: &FlashSettings) -> FlashKnobs {
        FlashKnobs {
            item_size: AtomicU32::new(s.item_size),
            item_age: AtomicU32::new(s.item_age),
            low_ttl: AtomicU32::new(s.low_ttl),
            recache_rate: AtomicU32::new(s.recache_rate),
            compact_under: AtomicU32::new(s.compact_under),
            drop_under: AtomicU32::new(s.drop_under),
            max_frag_bits: AtomicU64::new(s.max_frag.to_bits()),
            drop_unread: AtomicU32::new(s.drop_unread as u32),
            max_sleep_us: AtomicU32::new(s.max_sleep_us),
        }
    }

    /// The knobs as they are now.
    pub fn get(&self) -> FlashSettings {
        FlashSettings {
            item_size: self.item_size.load(Relaxed),
            item_age: self.item_age.load(Relaxed),
            low_ttl: self.low_ttl.load(Relaxed),
            recache_rate: self.recache_rate.load(Relaxed),
            compact_under: self.compact_under.load(Relaxed),
            drop_under: self.drop_under.load(Relaxed),
            max_frag: f64::from_bits(self.max_frag_bits.load(Relaxed)),
            drop_unread: self.drop_unread.load(Relaxed) != 0,
            max_sleep_us: self.max_sleep_us.load(Relaxed),
        }
    }

    /// Changes every knob to `s` (the `extstore` command sets one and passes the rest back).
    pub fn set(&self, s: &FlashSettings) {
        self.item_size.store(s.item_size, Relaxed);
        self.item_age.store(s.item_age, Relaxed);
        self.low_ttl.store(s.low_ttl, Relaxed);
        self.recache_rate.store(s.recache_rate, Relaxed);
        self.compact_under.store(s.compact_under, Relaxed);
        self.drop_under.store(s.drop_under, Relaxed);
        self.max_frag_bits.store(s.max_frag.to_bits(), Relaxed);
        self.drop_unread.store(s.drop_unread as u32, Relaxed);
        self.max_sleep_us.store(s.max_sleep_us, Relaxed);
    }
}

/// What `stats` reports of the flash tier, under memcached's names (`extstore_*`, and the
/// per-thread `*_extstore` counters, which tern keeps for the whole store).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    pub compact_lost: u64,
    pub compact_rescues: u64,
    pub compact_skipped: u64,
    pub page_allocs: u64,
    pub page_evictions: u64,
    pub page_reclaims: u64,
    pub pages_free: u64,
    pub pages_used: u64,
    pub objects_evicted: u64,
    pub objects_read: u64,
    pub objects_written: u64,
    pub objects_used: u64,
    pub bytes_evicted: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_used: u64,
    pub bytes_fragmented: u64,
    pub limit_maxbytes: u64,
    /// Buffers full and waiting for a write.
    pub io_queue: u64,
    /// Gets answered from flash (`get_extstore`).
    pub gets: u64,
    /// Lookups that found an index entry on flash but no item there: its page evicted since,
    /// a failed check or read, a page written again meanwhile (`miss_from_extstore`).
    pub misses: u64,
    /// Reads whose checksum failed (`badcrc_from_extstore`).
    pub bad_crc: u64,
    /// Reads that brought the item back into memory (`recache_from_extstore`).
    pub recaches: u64,
    /// Reads of flash for an entry whose tag matched but whose key did not: the cost of
    /// keeping no key in memory (tern's own).
    pub false_reads: u64,
    /// Index entries left pointing at evicted pages, not yet removed by a lookup or a sweep
    /// (tern's own; not counted in `curr_items`).
    pub stale_entries: u64,
    /// Items set that went to flash (`extstore_bytes_written` over the bytes stored: write
    /// amplification), as item bytes stored by sets (tern's own).
    pub bytes_set: u64,
}

/// One flash page as `stats extstore` lists it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashPageInfo {
    pub version: u64,
    pub bytes_used: u64,
    pub bucket: u32,
    pub free: bool,
}
