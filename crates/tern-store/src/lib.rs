//! tern-store: the storage engine behind every command. No I/O: the server calls it, tests and
//! benchmarks call it directly.
//!
//! The API is shaped for the server's hot path: reads hand a borrowed view of the item to a
//! closure (the caller copies the value straight into its output buffer, nothing is allocated),
//! writes take the value as a slice of the connection's read buffer.
//!
//! # Design (after Pelikan's segcache, NSDI'21)
//! - The heap (`Config::heap_bytes`, memcached's `-m`) is one mapping made at start, cut into
//!   equal segments. Items are appended log-style to a segment; an item carries a 4-23 byte
//!   header (see `item.rs`) and nothing else.
//! - The store is split into shards by key hash. A shard owns its own lock, hash index, TTL
//!   groups and counters; segments move between shards only through a small free pool, taken
//!   once per filled segment. A get locks one shard and writes only that shard's memory.
//! - Each shard keeps one chain of segments per TTL group (never, and one per power of two of
//!   seconds), so items that expire together sit together: `reclaim_expired` frees whole
//!   segments whose last deadline has passed.
//! - When the pool is empty, the shard holding the heap's oldest segment evicts (see
//!   `evict_for`): `Merge` (after segcache's: a clock over segments; the oldest segments of a
//!   chain are read in order, items read since they were written are packed together and
//!   kept, the rest dropped), `Fifo`, `Random`; `None` answers out-of-memory.
//! - An item larger than a segment takes a run of contiguous segments from the same heap.
//! - The CAS unique is the item's place: (segment epoch << log2(segment size)) | offset. Every
//!   write goes to a fresh place, so every stored version gets a new unique at no per-item cost;
//!   a touch that must move an item carries its unique along.

pub mod clock;
mod heap;
mod index;
mod item;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

pub use clock::{Clock, UnixSecs, MAX_RELATIVE_EXPTIME};
pub use heap::PageKind;
use index::Index;
use item::Header;

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
    /// The heap: item bytes never exceed this (memcached's `-m`).
    pub heap_bytes: usize,
    /// Largest value accepted (memcached's `-I`).
    pub max_item_size: usize,
    pub eviction: Eviction,
    /// With `false`, every CAS is 0 (memcached's `-C`).
    pub cas_enabled: bool,
    /// Independent partitions, each with its own lock; rounded up to a power of two.
    pub shards: usize,
    /// Segment size in bytes, a power of two from 4 KiB to 1 MiB; 0 picks one so that each
    /// shard gets about 16 segments, at most 256 KiB (a merge eviction holds its shard's lock
    /// while it compacts four segments, so smaller segments mean shorter pauses).
    pub segment_size: usize,
    /// Back the heap with huge pages (memcached's `-L`): MAP_HUGETLB when huge pages are
    /// reserved, else madvise(MADV_HUGEPAGE).
    pub large_pages: bool,
    /// mlock the heap (memcached's `-k`); start fails with a clear message when refused.
    pub lock_memory: bool,
}

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

impl Default for Config {
    fn default() -> Config {
        Config {
            heap_bytes: 64 << 20,
            max_item_size: 1 << 20,
            eviction: Eviction::default(),
            cas_enabled: true,
            shards: 16,
            segment_size: 0,
            large_pages: false,
            lock_memory: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Lock(String),
}

/// When an item stops being served: never, or at a deadline in unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expiry(UnixSecs);

impl Expiry {
    pub const NEVER: Expiry = Expiry(0);
    /// A deadline already past: the item is stored and never served (memcached's negative exptime).
    pub const EXPIRED: Expiry = Expiry(1);

    /// memcached's rule for an `exptime` field: 0 never expires, a negative value is already
    /// expired, up to 30 days is relative to `now`, anything larger is an absolute unix time.
    pub fn from_exptime(exptime: i64, now: UnixSecs) -> Expiry {
        if exptime == 0 {
            Expiry::NEVER
        } else if exptime < 0 {
            Expiry::EXPIRED
        } else if exptime > MAX_RELATIVE_EXPTIME {
            Expiry(exptime.min(UnixSecs::MAX as i64) as UnixSecs).max_past()
        } else {
            Expiry((now as i64 + exptime).min(UnixSecs::MAX as i64) as UnixSecs)
        }
    }

    /// Keeps 0 meaning "never" even for an absolute time of 0.
    fn max_past(self) -> Expiry {
        if self.0 == 0 {
            Expiry::EXPIRED
        } else {
            self
        }
    }

    /// The deadline, or `None` for never.
    pub fn deadline(self) -> Option<UnixSecs> {
        (self.0 != 0).then_some(self.0)
    }

    pub fn is_expired_at(self, now: UnixSecs) -> bool {
        self.0 != 0 && self.0 <= now
    }

    /// Seconds left at `now` (0 once expired), or `None` for never: meta's `t` flag.
    pub fn remaining(self, now: UnixSecs) -> Option<u32> {
        self.deadline().map(|d| d.saturating_sub(now))
    }
}

/// A stored item as a reader sees it, borrowed for the duration of the read.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    pub expiry: Expiry,
    /// Fetched before this read since it was stored (meta's `h`).
    pub fetched: bool,
    /// Last access before this read, in unix seconds; coarse: exact for 32 s after the
    /// item's segment was opened, then within 25% of the segment's age (meta's `l`).
    pub last_access: UnixSecs,
    /// Marked stale by [`Store::invalidate`] (meta's `X`).
    pub stale: bool,
    /// A win token was already handed out for this item (meta's `Z`).
    pub win_sent: bool,
}

/// The per-item marks the meta protocol sets for invalidation and anti-stampede; a
/// [`Store::get_marked`] reader may change them and they are written back with the read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub stale: bool,
    pub win_sent: bool,
}

/// Why a lookup found nothing; the server counts each kind (`get_misses`, `get_expired`,
/// `get_flushed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    NotFound,
    Expired,
    /// Invalidated by a `flush_all` (reported by the first lookup of the key's shard after the
    /// flush took effect; the shard is emptied then, so later lookups say `NotFound`).
    Flushed,
}

/// The write commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
    /// Append to the item; with a CAS, only if the item's CAS is still that one (checked in
    /// the same locked step as the write, as memcached checks under its item lock).
    Append(Option<u64>),
    /// Prepend to the item; the CAS as for `Append`.
    Prepend(Option<u64>),
    /// Store only if the item's CAS is still this one.
    Cas(u64),
}

/// The outcome of a write, one per memcached reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`, with the new version's CAS.
    Stored { cas: u64 },
    /// `NOT_STORED`: add on an existing key, replace/append/prepend on a missing one.
    NotStored,
    /// `EXISTS`: cas (or a CAS-conditioned append/prepend) with a stale unique.
    Exists,
    /// `NOT_FOUND`: cas on a missing key.
    NotFound,
    /// `SERVER_ERROR object too large for cache` (also a key longer than 250 bytes).
    TooLarge,
    /// `SERVER_ERROR out of memory storing object` (eviction off and the heap full).
    OutOfMemory,
}

/// incr/decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Incr,
    Decr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArithError {
    #[error("NOT_FOUND")]
    NotFound,
    /// The item's CAS is not the one the request expected.
    #[error("EXISTS")]
    Exists,
    #[error("CLIENT_ERROR cannot increment or decrement non-numeric value")]
    NonNumeric,
    #[error("SERVER_ERROR out of memory")]
    OutOfMemory,
}

/// A counter after incr/decr: the new number and the new version's CAS and expiry, so a reply
/// that shows them needs no second read (which another writer could overtake).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub value: u64,
    pub cas: u64,
    pub expiry: Expiry,
}

/// Why a delete or invalidate left the item alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No live item for the key.
    NotFound,
    /// The item's CAS is not the one the request expected.
    Exists,
}

/// The store's counters for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    /// Key + value bytes of the items held.
    pub bytes: u64,
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
    /// Bytes of the hash index, outside the heap.
    pub index_bytes: u64,
    /// Items stored: header + key + value bytes written and still live.
    pub item_bytes_with_headers: u64,
    /// Seconds since the oldest segment at the eviction end of any TTL group was opened: how
    /// long an item that is not read again stays (memcached's `stats items` age); 0 when empty.
    pub oldest_item_age: u32,
}

/// TTL groups per shard: 0 for items that never expire, then one per power of two of seconds.
const GROUPS: usize = 33;
const NO_SEGMENT: u32 = u32::MAX;
const OWNER_FREE: u32 = u32::MAX;
/// A run handed to a writer that has not linked it into its shard yet.
const OWNER_PENDING: u32 = u32::MAX - 1;
/// Segments compacted into one by a merge eviction.
const MERGE_SEGMENTS: usize = 4;
const OFFSET_BITS: u32 = 20;
const MIN_SEGMENT: usize = 4 << 10;
const MAX_SEGMENT: usize = 1 << OFFSET_BITS;
const AUTO_MAX_SEGMENT: usize = 256 << 10;
/// memcached's KEY_MAX_LENGTH.
const MAX_KEY: usize = 250;
/// An item this close to a segment's size goes to the large-item path, so a rewrite that adds
/// an expiry field and a kept CAS (a touch, 12 bytes) always fits an ordinary segment.
const GROWTH_ROOM: usize = 16;
/// Largest value of `never` in a segment's `max_expiry`: some item there never expires.
const NEVER_EXPIRES: u32 = u32::MAX;

/// Where an item lives: segment (run head for large items) and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    seg: u32,
    off: u32,
}

impl Loc {
    /// Never 0, which marks an empty index slot.
    fn pack(self) -> u64 {
        ((self.seg as u64 + 1) << OFFSET_BITS) | self.off as u64
    }

    fn unpack(packed: u64) -> Loc {
        Loc {
            seg: (packed >> OFFSET_BITS) as u32 - 1,
            off: (packed & ((1 << OFFSET_BITS) - 1)) as u32,
        }
    }
}

/// Per-segment bookkeeping, beside the heap rather than in it. Fields are atomics only so the
/// table can be shared; each is written by whoever owns the segment (its shard, under the
/// shard's lock, or the pool, under its lock), and ownership changes through those locks, so
/// relaxed loads see the owner's last writes.
/// One cache line each: neighbouring segments usually belong to different shards, and a write
/// to one segment's counters must not slow the other shard's readers (false sharing).
#[derive(Default)]
#[repr(align(64))]
struct SegMeta {
    owner: AtomicU32,
    /// First segment of the run this one belongs to (itself for an ordinary segment).
    head: AtomicU32,
    /// At a run head: segments in the run; 1 for an ordinary segment.
    run_len: AtomicU32,
    write_off: AtomicU32,
    live: AtomicU32,
    /// Latest deadline of any item written here; 0 when empty, `NEVER_EXPIRES` for never.
    max_expiry: AtomicU32,
    created: AtomicU32,
    group: AtomicU32,
    /// High bits of the CAS of every item here; renewed when items are rewritten in place.
    epoch: AtomicU64,
    /// Age order for FIFO and merge: the epoch the segment was opened with.
    order: AtomicU64,
}

fn get32(a: &AtomicU32) -> u32 {
    a.load(Relaxed)
}

fn set32(a: &AtomicU32, v: u32) {
    a.store(v, Relaxed)
}

/// Free segments as a bitmap, so a large item can find a run of contiguous ones.
struct Pool {
    free: Vec<u64>,
    /// Reserved for a large item being made room for: never handed out, even once free.
    claimed: Vec<u64>,
    free_count: usize,
    segments: usize,
    /// Where the next large-item window starts, so evictions for runs rotate over the heap.
    window: usize,
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(bits: &mut [u64], i: usize, on: bool) {
    if on {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

impl Pool {
    fn new(segments: usize) -> Pool {
        let words = segments.div_ceil(64);
        let mut pool = Pool {
            free: vec![0; words],
            claimed: vec![0; words],
            free_count: segments,
            segments,
            window: 0,
        };
        for i in 0..segments {
            set_bit(&mut pool.free, i, true);
        }
        pool
    }

    /// The lowest free segment: low segments are reused first, so untouched pages stay out of
    /// RSS as long as possible.
    fn take(&mut self) -> Option<u32> {
        let word = self.free.iter().position(|&w| w != 0)?;
        let i = word * 64 + self.free[word].trailing_zeros() as usize;
        set_bit(&mut self.free, i, false);
        self.free_count -= 1;
        Some(i as u32)
    }

    fn give(&mut self, seg: u32) {
        let i = seg as usize;
        if !bit(&self.claimed, i) {
            debug_assert!(!bit(&self.free, i));
            set_bit(&mut self.free, i, true);
            self.free_count += 1;
        }
    }

    fn find_run(&self, len: usize) -> Option<usize> {
        let mut start = 0;
        for i in 0..self.segments {
            if !bit(&self.free, i) {
                start = i + 1;
            } else if i + 1 - start == len {
                return Some(start);
            }
        }
        None
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    curr_items: u64,
    bytes: u64,
    item_bytes: u64,
    total_items: u64,
    evictions: u64,
    reclaimed: u64,
    expired_unfetched: u64,
    evicted_unfetched: u64,
    reclaimed_segments: u64,
    merges: u64,
}

struct Shard {
    id: u32,
    index: Index,
    /// Segments of each TTL group, oldest first; the last may be the group's `active` one.
    chains: [VecDeque<u32>; GROUPS],
    /// The segment each TTL group appends to, or `NO_SEGMENT`.
    active: [u32; GROUPS],
    /// The `flush_all` generation this shard has applied.
    flush_seq: u32,
    counters: Counters,
    /// Reused buffer for values built from an older version (append, incr, relocation).
    scratch: Vec<u8>,
    /// Segments this shard has emptied, to hand back to the pool (or keep one).
    freed: Vec<u32>,
    /// Bumped whenever items leave the index other than by `unlink` of a known item (eviction,
    /// reclaim, merge, flush): a `Found` taken before is still exact while this is unchanged.
    churn: u64,
    rng: u64,
}

/// Keeps each shard's lock on its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

#[derive(Clone, Copy, Debug)]
struct Found {
    slot: usize,
    loc: Loc,
    hdr: Header,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Deleted or replaced: no counter.
    Gone,
    Evicted,
    Expired,
}

fn group_of(expiry: u32, now: UnixSecs) -> usize {
    if expiry == 0 {
        return 0;
    }
    let ttl = expiry.saturating_sub(now).max(1);
    1 + (31 - ttl.leading_zeros()) as usize
}

fn expiry_rank(expiry: u32) -> u32 {
    if expiry == 0 {
        NEVER_EXPIRES
    } else {
        expiry
    }
}

/// The store. `Sync`: share one behind an `Arc` across worker threads.
pub struct Store {
    config: Config,
    clock: Arc<Clock>,
    hasher: ahash::RandomState,
    shards: Box<[Padded<Mutex<Shard>>]>,
    heap: heap::Heap,
    segment_shift: u32,
    metas: Box<[SegMeta]>,
    pool: Mutex<Pool>,
    epoch: AtomicU64,
    /// The latest `flush_all`: deadline (high 32 bits) and generation (low 32 bits).
    flush: AtomicU64,
    flush_lock: Mutex<()>,
    /// Per shard, the age order of its oldest segment (`u64::MAX`: none), for `evict_for`.
    oldest: Box<[AtomicU64]>,
}

impl Store {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Store, StoreError> {
        let shard_count = config.shards.max(1).next_power_of_two();
        let segment_size = match config.segment_size {
            0 => {
                let target = config.heap_bytes / (shard_count * 16);
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
        if segments >= (1 << (64 - index::TAG_BITS - OFFSET_BITS)) - 1 {
            return Err(StoreError::Config(format!(
                "{segments} segments is more than the index can address; use a larger segment size"
            )));
        }
        let heap = heap::Heap::new(
            segments * segment_size,
            config.large_pages,
            config.lock_memory,
        )?;
        let hasher = ahash::RandomState::new();
        let shards = (0..shard_count)
            .map(|id| {
                Padded(Mutex::new(Shard {
                    id: id as u32,
                    index: Index::new(),
                    chains: std::array::from_fn(|_| VecDeque::new()),
                    active: [NO_SEGMENT; GROUPS],
                    flush_seq: 0,
                    counters: Counters::default(),
                    scratch: Vec::new(),
                    freed: Vec::new(),
                    churn: 0,
                    rng: hasher.hash_one(id) | 1,
                }))
            })
            .collect();
        let metas: Box<[SegMeta]> = (0..segments).map(|_| SegMeta::default()).collect();
        for (i, meta) in metas.iter().enumerate() {
            set32(&meta.owner, OWNER_FREE);
            set32(&meta.head, i as u32);
            set32(&meta.run_len, 1);
        }
        Ok(Store {
            config,
            clock,
            hasher,
            shards,
            heap,
            segment_shift: segment_size.trailing_zeros(),
            metas,
            pool: Mutex::new(Pool::new(segments)),
            epoch: AtomicU64::new(1),
            flush: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
            oldest: (0..shard_count).map(|_| AtomicU64::new(u64::MAX)).collect(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The segment size in use (after `Config::segment_size` 0 picked one).
    pub fn segment_size(&self) -> usize {
        1 << self.segment_shift
    }

    /// How the heap's pages are backed.
    pub fn page_kind(&self) -> PageKind {
        self.heap.pages
    }

    fn hash(&self, key: &[u8]) -> (usize, u32) {
        let hash = self.hasher.hash_one(key);
        // Tag 0 is folded into 1: an empty index slot is all zero bits.
        let tag = ((hash >> (64 - index::TAG_BITS)) as u32).max(1);
        (hash as usize & (self.shards.len() - 1), tag)
    }

    fn tag(&self, key: &[u8]) -> u32 {
        self.hash(key).1
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A reader's closure that panicked leaves the shard consistent (it only borrows), so a
        // poisoned lock is still good.
        self.shards[shard]
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn meta(&self, seg: u32) -> &SegMeta {
        &self.metas[seg as usize]
    }

    fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Relaxed)
    }

    /// The bytes of segment `seg`, or of the whole run it heads.
    ///
    /// # Safety
    /// The caller owns `seg`: it holds the lock of the shard `seg` belongs to, or `seg` heads a
    /// run it reserved and has not linked yet. No other slice of these bytes is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn segment(&self, seg: u32) -> &mut [u8] {
        let run = get32(&self.meta(seg).run_len).max(1) as usize;
        // SAFETY: `seg + run <= segments`, so the range is inside the heap; exclusivity is the
        // caller's contract.
        unsafe {
            self.heap.slice(
                (seg as usize) << self.segment_shift,
                run << self.segment_shift,
            )
        }
    }

    /// The CAS unique of an item written at `loc` (its place). Offsets are below the segment
    /// size, so shifting the epoch by the segment size's bits keeps uniques distinct and as
    /// small as they can be (they grow by one segment's worth per segment opened).
    fn place_cas(&self, loc: Loc) -> u64 {
        if self.config.cas_enabled {
            (self.meta(loc.seg).epoch.load(Relaxed) << self.segment_shift) | loc.off as u64
        } else {
            0
        }
    }

    /// The CAS unique of a stored item: the one it kept through a rewrite, else its place's.
    fn cas_of(&self, loc: Loc, hdr: &Header) -> u64 {
        match hdr.cas {
            Some(cas) if self.config.cas_enabled => cas,
            _ => self.place_cas(loc),
        }
    }

    /// The item `key` maps to in this shard, expired or not.
    fn lookup(&self, sh: &Shard, key: &[u8], tag: u32) -> Option<Found> {
        let mut hdr = None;
        let slot = sh.index.find(tag, |packed| {
            let loc = Loc::unpack(packed);
            // SAFETY: the index points only into segments of this shard, whose lock the caller
            // holds; the slice lives for this comparison only.
            let bytes = unsafe { self.segment(loc.seg) };
            let item = &bytes[loc.off as usize..];
            if item[0] as usize != key.len() {
                return false;
            }
            let h = item::parse(item);
            let same = h.key(item) == key;
            if same {
                hdr = Some(h);
            }
            same
        })?;
        Some(Found {
            slot,
            loc: Loc::unpack(sh.index.location(slot)),
            hdr: hdr.expect("set by the match"),
        })
    }

    /// The live item for `key`: an expired one is unlinked and reported.
    fn live(&self, sh: &mut Shard, key: &[u8], tag: u32, now: UnixSecs) -> Result<Found, Miss> {
        let found = self.lookup(sh, key, tag).ok_or(Miss::NotFound)?;
        if Expiry(found.hdr.expiry).is_expired_at(now) {
            self.unlink(sh, found, Cause::Expired, true);
            return Err(Miss::Expired);
        }
        Ok(found)
    }

    /// Applies a `flush_all` that has come due for this shard; reports `Flushed` when `key`
    /// was among the items it removed.
    #[inline]
    fn catch_up_flush(
        &self,
        sh: &mut Shard,
        key: Option<(&[u8], u32)>,
        now: UnixSecs,
    ) -> Result<(), Miss> {
        let mark = self.flush.load(Relaxed);
        let (at, seq) = ((mark >> 32) as u32, mark as u32);
        if seq == sh.flush_seq || at > now {
            return Ok(());
        }
        let had_key = key.is_some_and(|(key, tag)| self.lookup(sh, key, tag).is_some());
        self.clear_shard(sh);
        sh.flush_seq = seq;
        if had_key {
            Err(Miss::Flushed)
        } else {
            Ok(())
        }
    }

    fn clear_shard(&self, sh: &mut Shard) {
        for g in 0..GROUPS {
            while let Some(head) = sh.chains[g].pop_front() {
                let run = get32(&self.meta(head).run_len);
                sh.freed.extend(head..head + run);
            }
            sh.active[g] = NO_SEGMENT;
        }
        sh.index.clear();
        sh.churn += 1;
        let c = &mut sh.counters;
        (c.curr_items, c.bytes, c.item_bytes) = (0, 0, 0);
        self.release(sh, false);
    }

    /// Removes an item from the index and the counters. With `free_empty`, a sealed segment
    /// left with no live item goes back to the pool.
    fn unlink(&self, sh: &mut Shard, found: Found, cause: Cause, free_empty: bool) {
        sh.index.remove(found.slot);
        let meta = self.meta(found.loc.seg);
        let live = get32(&meta.live) - 1;
        set32(&meta.live, live);
        let h = found.hdr;
        let c = &mut sh.counters;
        c.curr_items -= 1;
        c.bytes -= (h.key_len + h.value_len) as u64;
        c.item_bytes -= h.size() as u64;
        let unfetched = !h.has(item::FETCHED) as u64;
        match cause {
            Cause::Gone => {}
            Cause::Evicted => {
                c.evictions += 1;
                c.evicted_unfetched += unfetched;
            }
            Cause::Expired => {
                c.reclaimed += 1;
                c.expired_unfetched += unfetched;
            }
        }
        let seg = found.loc.seg;
        if free_empty && live == 0 && sh.active[get32(&meta.group) as usize] != seg {
            self.drop_segment(sh, seg);
            self.release(sh, false);
        }
    }

    /// Takes a segment (or run) out of its chain; its segments go to `sh.freed`.
    fn drop_segment(&self, sh: &mut Shard, head: u32) {
        let meta = self.meta(head);
        let g = get32(&meta.group) as usize;
        if let Some(pos) = sh.chains[g].iter().position(|&s| s == head) {
            sh.chains[g].remove(pos);
        }
        if sh.active[g] == head {
            sh.active[g] = NO_SEGMENT;
        }
        let run = get32(&meta.run_len);
        sh.freed.extend(head..head + run);
    }

    /// Hands the shard's freed segments to the pool, keeping one for the caller if asked and
    /// no large item has claimed it.
    fn release(&self, sh: &mut Shard, keep: bool) -> Option<u32> {
        if sh.freed.is_empty() {
            return None;
        }
        self.publish_oldest(sh);
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = None;
        for seg in sh.freed.drain(..) {
            let meta = self.meta(seg);
            set32(&meta.owner, OWNER_FREE);
            set32(&meta.head, seg);
            set32(&meta.run_len, 1);
            if keep && kept.is_none() && !bit(&pool.claimed, seg as usize) {
                // Owned again before the pool lock is dropped: a large write choosing a window
                // must never take a segment that is free in name only.
                set32(&meta.owner, sh.id);
                kept = Some(seg);
            } else {
                pool.give(seg);
            }
        }
        kept
    }

    /// Room for `size` bytes at the tail of TTL group `g`.
    fn reserve(&self, sh: &mut Shard, size: usize, g: usize, now: UnixSecs) -> Option<Loc> {
        let active = sh.active[g];
        if active != NO_SEGMENT {
            let meta = self.meta(active);
            let off = get32(&meta.write_off);
            if off as usize + size <= self.segment_size() {
                set32(&meta.write_off, off + size as u32);
                return Some(Loc { seg: active, off });
            }
        }
        let seg = self.make_room(sh, now)?;
        let meta = self.meta(seg);
        set32(&meta.owner, sh.id);
        set32(&meta.head, seg);
        set32(&meta.run_len, 1);
        self.open_segment(sh, seg, size, g, now);
        let sealed = std::mem::replace(&mut sh.active[g], seg);
        if sealed != NO_SEGMENT && get32(&self.meta(sealed).live) == 0 {
            self.drop_segment(sh, sealed);
            self.release(sh, false);
        }
        Some(Loc { seg, off: 0 })
    }

    /// A free segment for this shard: from the pool, else by reclaiming its expired segments,
    /// else by evicting (see `evict_for`).
    fn make_room(&self, sh: &mut Shard, now: UnixSecs) -> Option<u32> {
        for _ in 0..8 {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(seg) = pool.take() {
                // Owned before the pool lock is dropped (see `release`).
                set32(&self.meta(seg).owner, sh.id);
                return Some(seg);
            }
            drop(pool);
            if self.reclaim_shard(sh, now) == 0 && !self.evict_for(sh, now) {
                return None;
            }
            if let Some(seg) = self.release(sh, true) {
                return Some(seg);
            }
        }
        None
    }

    /// Frees segments by the eviction policy where the heap's oldest segment is, as one
    /// unsharded segcache would: in that shard when it is another one and its lock is free
    /// (what it frees goes to the pool), else in this shard, else in any shard that has some.
    /// Without this, shards that free several segments at once (merge) would feed the others
    /// through the pool and shrink while they grew. Another shard's lock is never waited for,
    /// so two shards evicting for each other cannot deadlock.
    fn evict_for(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        if self.config.eviction == Eviction::None {
            return false;
        }
        let me = sh.id as usize;
        let oldest = (0..self.shards.len())
            .min_by_key(|&s| self.oldest[s].load(Relaxed))
            .expect("at least one shard");
        if oldest != me && self.evict_in_other(oldest, now) {
            return true;
        }
        if self.evict_one(sh, now) {
            return true;
        }
        (0..self.shards.len()).any(|other| other != me && self.evict_in_other(other, now))
    }

    fn evict_in_other(&self, other: usize, now: UnixSecs) -> bool {
        let Ok(mut guard) = self.shards[other].0.try_lock() else {
            return false;
        };
        let evicted = self.evict_one(&mut guard, now);
        if evicted {
            self.release(&mut guard, false);
        }
        evicted
    }

    /// Publishes the age of this shard's oldest segment for `evict_for`; called whenever a
    /// shard opens or frees segments. A stale value only makes a worse victim choice.
    fn publish_oldest(&self, sh: &Shard) {
        let order = self
            .oldest_group(sh)
            .map_or(u64::MAX, |g| self.meta(sh.chains[g][0]).order.load(Relaxed));
        self.oldest[sh.id as usize].store(order, Relaxed);
    }

    fn oldest_group(&self, sh: &Shard) -> Option<usize> {
        (0..GROUPS)
            .filter(|&g| !sh.chains[g].is_empty())
            .min_by_key(|&g| self.meta(sh.chains[g][0]).order.load(Relaxed))
    }

    /// Frees at least one segment of this shard into `sh.freed`, by the configured policy.
    fn evict_one(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        match self.config.eviction {
            Eviction::None => false,
            Eviction::Merge => self.merge(sh, now),
            Eviction::Fifo => match self.oldest_group(sh) {
                Some(g) => {
                    self.evict_segment(sh, sh.chains[g][0], now);
                    true
                }
                None => false,
            },
            Eviction::Random => {
                let total: usize = sh.chains.iter().map(VecDeque::len).sum();
                if total == 0 {
                    return false;
                }
                sh.rng ^= sh.rng << 13;
                sh.rng ^= sh.rng >> 7;
                sh.rng ^= sh.rng << 17;
                let mut pick = (sh.rng % total as u64) as usize;
                let g = (0..GROUPS)
                    .find(|&g| {
                        let len = sh.chains[g].len();
                        if pick < len {
                            true
                        } else {
                            pick -= len;
                            false
                        }
                    })
                    .expect("pick < total");
                self.evict_segment(sh, sh.chains[g][pick], now);
                true
            }
        }
    }

    /// The item at `loc` in one of this locked shard's segments, and its index slot when the
    /// index still points there (an item deleted or replaced since has none).
    fn indexed_item(&self, sh: &Shard, loc: Loc) -> (Header, Option<usize>) {
        let (hdr, tag) = {
            // SAFETY: `loc.seg` belongs to this locked shard; the slice ends with this block.
            let bytes = unsafe { self.segment(loc.seg) };
            let item = &bytes[loc.off as usize..];
            let h = item::parse(item);
            (h, self.tag(h.key(item)))
        };
        (hdr, sh.index.find(tag, |p| p == loc.pack()))
    }

    fn removal_cause(hdr: &Header, now: UnixSecs) -> Cause {
        if Expiry(hdr.expiry).is_expired_at(now) {
            Cause::Expired
        } else {
            Cause::Evicted
        }
    }

    /// Unlinks every live item of a segment (or run) and frees it. Whole items only: an item
    /// never spans segments except inside a run, which goes as one.
    fn evict_segment(&self, sh: &mut Shard, head: u32, now: UnixSecs) {
        sh.churn += 1;
        let end = get32(&self.meta(head).write_off);
        let mut off = 0;
        while off < end {
            let loc = Loc { seg: head, off };
            let (hdr, slot) = self.indexed_item(sh, loc);
            off += hdr.size() as u32;
            if let Some(slot) = slot {
                let cause = Self::removal_cause(&hdr, now);
                self.unlink(sh, Found { slot, loc, hdr }, cause, false);
            }
        }
        self.drop_segment(sh, head);
    }

    /// Segcache-style merge eviction, run as a clock over whole segments: the oldest segments
    /// of the oldest TTL group are read in order; an item read since it was written (or last
    /// kept) is kept, its mark cleared, and packed towards the front of what was read, the
    /// others are evicted. It stops as soon as the packed items fill a segment and a whole
    /// segment behind them is empty, leaving the rest of the segment being read in place for
    /// the next merge, so kept items always fill their segments (no half-empty merge output),
    /// and a hot item is never dropped for lack of room. The filled segments move to the young
    /// end, so a kept item has a whole cycle to be read again before it is looked at again.
    fn merge(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        let Some(g) = self.oldest_group(sh) else {
            return false;
        };
        // Sealed ordinary segments only: a run goes whole, the active segment is being written.
        let mut sources = [NO_SEGMENT; MERGE_SEGMENTS];
        let mut n = 0;
        for &seg in sh.chains[g].iter().take(MERGE_SEGMENTS) {
            if get32(&self.meta(seg).run_len) != 1 || seg == sh.active[g] {
                break;
            }
            sources[n] = seg;
            n += 1;
        }
        if n < 2 {
            self.evict_segment(sh, sh.chains[g][0], now);
            return true;
        }
        sh.churn += 1;
        // Packing goes to `sources[out]` at `write`; it never passes the item being read, so
        // no unread item is overwritten.
        let mut out = 0;
        let mut write = 0usize;
        let mut max_expiry = 0u32;
        // The source left partly read, when the merge stops inside one.
        let mut stopped = None;
        'sources: for (i, &src) in sources[..n].iter().enumerate() {
            let src_meta = self.meta(src);
            let src_created = get32(&src_meta.created);
            let end = get32(&src_meta.write_off);
            let mut off = 0;
            while off < end {
                let loc = Loc { seg: src, off };
                let (hdr, slot) = self.indexed_item(sh, loc);
                let size = hdr.size();
                let Some(slot) = slot else {
                    off += size as u32;
                    continue;
                };
                let found = Found { slot, loc, hdr };
                let cause = Self::removal_cause(&hdr, now);
                if cause == Cause::Expired || !hdr.has(item::REFERENCED) {
                    self.unlink(sh, found, cause, false);
                    off += size as u32;
                    continue;
                }
                if write + size > self.segment_size() {
                    // `out < i` here: an item read from `sources[out]` itself fits where it is.
                    self.seal_merged(sources[out], write, max_expiry);
                    if out + 1 < i {
                        // Packed items fill a segment and a whole one behind them is empty.
                        stopped = Some(i);
                        break 'sources;
                    }
                    (out, write, max_expiry) = (i, 0, 0);
                }
                let dest = sources[out];
                let dest_created = get32(&self.meta(dest).created);
                let last_access = src_created + item::decode_age(hdr.access);
                let age = item::encode_age(last_access.saturating_sub(dest_created));
                let from = off as usize;
                let moved = if src == dest {
                    // SAFETY: `dest` belongs to this locked shard; the only slice alive.
                    let bytes = unsafe { self.segment(dest) };
                    // `write <= from`: packing never passes the item being read.
                    bytes.copy_within(from..from + size, write);
                    &mut bytes[write..write + size]
                } else {
                    // SAFETY: `src` and `dest` are different segments of this locked shard, so
                    // the two slices do not overlap, and no other slice is alive.
                    let (src_bytes, dest_bytes) =
                        unsafe { (self.segment(src), self.segment(dest)) };
                    dest_bytes[write..write + size].copy_from_slice(&src_bytes[from..from + size]);
                    set32(&src_meta.live, get32(&src_meta.live) - 1);
                    let dest_meta = self.meta(dest);
                    set32(&dest_meta.live, get32(&dest_meta.live) + 1);
                    &mut dest_bytes[write..write + size]
                };
                item::set_bits(moved, 0, item::REFERENCED);
                item::set_access(moved, age);
                let packed = Loc {
                    seg: dest,
                    off: write as u32,
                };
                sh.index.set_location(slot, packed.pack());
                write += size;
                max_expiry = max_expiry.max(expiry_rank(hdr.expiry));
                off += size as u32;
            }
        }
        let read = stopped.unwrap_or(n);
        if stopped.is_none() {
            self.seal_merged(sources[out], write, max_expiry);
        }
        // Segments holding packed items; every other fully read one is now empty.
        let kept = if write == 0 && stopped.is_none() {
            out
        } else {
            out + 1
        };
        let chain = &mut sh.chains[g];
        chain.drain(..read);
        for &seg in &sources[kept..read] {
            debug_assert_eq!(get32(&self.meta(seg).live), 0);
            sh.freed.push(seg);
        }
        let young_end = if chain.back() == Some(&sh.active[g]) {
            chain.len() - 1
        } else {
            chain.len()
        };
        for (k, &seg) in sources[..kept].iter().enumerate() {
            chain.insert(young_end + k, seg);
            self.meta(seg).order.store(self.next_epoch(), Relaxed);
        }
        sh.counters.merges += 1;
        if kept == read {
            // Every item read was hot and they packed with no room to spare: nothing freed, so
            // evict the oldest segment outright (their marks are cleared for the next pass).
            let oldest = sh.chains[g][0];
            self.evict_segment(sh, oldest, now);
        }
        true
    }

    /// Finishes a segment that merge packed `len` bytes of kept items into.
    fn seal_merged(&self, seg: u32, len: usize, max_expiry: u32) {
        let meta = self.meta(seg);
        debug_assert_eq!(len == 0, get32(&meta.live) == 0);
        set32(&meta.write_off, len as u32);
        set32(&meta.max_expiry, max_expiry);
        // The kept items moved, so they take new CAS uniques: a unique never names two places.
        meta.epoch.store(self.next_epoch(), Relaxed);
    }

    /// Frees this shard's segments whose every item has expired; returns how many.
    fn reclaim_shard(&self, sh: &mut Shard, now: UnixSecs) -> usize {
        let mut reclaimed = 0;
        for g in 0..GROUPS {
            let mut i = 0;
            while i < sh.chains[g].len() {
                let seg = sh.chains[g][i];
                let max = get32(&self.meta(seg).max_expiry);
                if max != 0 && max != NEVER_EXPIRES && max <= now {
                    self.evict_segment(sh, seg, now);
                    sh.counters.reclaimed_segments += 1;
                    reclaimed += 1;
                } else {
                    i += 1;
                }
            }
        }
        reclaimed
    }

    /// Adds a freshly written item to the index, replacing the key's older version. `known`
    /// is the older version as looked up while `sh.churn` had the given value; it saves a
    /// second lookup when nothing was evicted in between.
    fn link(
        &self,
        sh: &mut Shard,
        key: &[u8],
        tag: u32,
        loc: Loc,
        hdr: Header,
        known: Option<(Option<Found>, u64)>,
    ) {
        let old = match known {
            Some((old, churn)) if churn == sh.churn => old,
            _ => self.lookup(sh, key, tag),
        };
        if let Some(old) = old {
            self.unlink(sh, old, Cause::Gone, true);
        }
        sh.index.insert(tag, loc.pack());
        let meta = self.meta(loc.seg);
        set32(&meta.live, get32(&meta.live) + 1);
        set32(
            &meta.max_expiry,
            get32(&meta.max_expiry).max(expiry_rank(hdr.expiry)),
        );
        let c = &mut sh.counters;
        c.curr_items += 1;
        c.bytes += (hdr.key_len + hdr.value_len) as u64;
        c.item_bytes += hdr.size() as u64;
    }

    /// Whether an item of `size` bytes goes to an ordinary segment (else a run).
    fn fits_segment(&self, size: usize) -> bool {
        size + GROWTH_ROOM <= self.segment_size()
    }

    /// Writes a new version of `key` into its TTL group's segment; `None` when no room can be
    /// made. The older version, if any, is replaced (`old`: what the caller found just now).
    #[allow(clippy::too_many_arguments)]
    fn put_small(
        &self,
        sh: &mut Shard,
        key: &[u8],
        tag: u32,
        old: Option<Found>,
        flags: u32,
        expiry: u32,
        cas: Option<u64>,
        parts: [&[u8]; 2],
        keep_bits: u8,
        now: UnixSecs,
    ) -> Option<Loc> {
        let churn = sh.churn;
        let value_len = parts[0].len() + parts[1].len();
        let size = item::item_size(key.len(), value_len, flags, expiry != 0, cas.is_some());
        debug_assert!(self.fits_segment(size));
        let loc = self.reserve(sh, size, group_of(expiry, now), now)?;
        let created = get32(&self.meta(loc.seg).created);
        let hdr = {
            // SAFETY: `loc.seg` is this locked shard's active segment; the slice ends here.
            let bytes = unsafe { self.segment(loc.seg) };
            let item = &mut bytes[loc.off as usize..];
            let access = item::encode_age(now.saturating_sub(created));
            item::write(
                item,
                key,
                flags,
                expiry,
                expiry != 0,
                cas,
                parts,
                keep_bits,
                access,
            );
            item::parse(item)
        };
        self.link(sh, key, tag, loc, hdr, Some((old, churn)));
        Some(loc)
    }

    /// A run of `len` contiguous segments for a large item, evicting whatever holds a window of
    /// the heap when no free run exists. Called without any shard lock held.
    fn alloc_run(&self, len: usize) -> Option<u32> {
        let segments = self.metas.len();
        if len > segments {
            return None;
        }
        for _ in 0..8 {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(start) = pool.find_run(len) {
                for seg in start..start + len {
                    set_bit(&mut pool.free, seg, false);
                }
                pool.free_count -= len;
                self.mark_pending(start as u32, len);
                return Some(start as u32);
            }
            if self.config.eviction == Eviction::None {
                return None;
            }
            // Claim a window no other large write is using, then empty it.
            let starts = segments - len + 1;
            let start = (0..starts).map(|i| (pool.window + i) % starts).find(|&s| {
                (s..s + len).all(|seg| {
                    !bit(&pool.claimed, seg) && get32(&self.metas[seg].owner) != OWNER_PENDING
                })
            })?;
            pool.window = start + len;
            for seg in start..start + len {
                set_bit(&mut pool.claimed, seg, true);
                if bit(&pool.free, seg) {
                    set_bit(&mut pool.free, seg, false);
                    pool.free_count -= 1;
                }
            }
            drop(pool);
            let now = self.clock.now();
            for seg in start..start + len {
                let owner = get32(&self.metas[seg].owner);
                if (owner as usize) < self.shards.len() {
                    let mut sh = self.lock(owner as usize);
                    // Re-checked under the lock: the shard may have freed it meanwhile.
                    if get32(&self.metas[seg].owner) == owner {
                        let head = get32(&self.metas[seg].head);
                        self.evict_segment(&mut sh, head, now);
                        self.release(&mut sh, false);
                    }
                }
            }
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            for seg in start..start + len {
                set_bit(&mut pool.claimed, seg, false);
            }
            if (start..start + len).all(|seg| get32(&self.metas[seg].owner) == OWNER_FREE) {
                self.mark_pending(start as u32, len);
                return Some(start as u32);
            }
            // Not emptied (cannot happen while claims hold); give back what is free and retry.
            for seg in start..start + len {
                if get32(&self.metas[seg].owner) == OWNER_FREE && !bit(&pool.free, seg) {
                    pool.give(seg as u32);
                }
            }
        }
        None
    }

    /// Called with the pool locked, so no one sees the run as free in between.
    fn mark_pending(&self, start: u32, len: usize) {
        for seg in start..start + len as u32 {
            set32(&self.meta(seg).owner, OWNER_PENDING);
            set32(&self.meta(seg).head, start);
        }
        set32(&self.meta(start).run_len, len as u32);
    }

    /// Gives back a run that was not used.
    fn free_run(&self, start: u32, len: usize) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        for seg in start..start + len as u32 {
            let meta = self.meta(seg);
            set32(&meta.owner, OWNER_FREE);
            set32(&meta.head, seg);
            set32(&meta.run_len, 1);
            pool.give(seg);
        }
    }

    /// Makes a reserved run part of the shard, in TTL group `g`.
    fn adopt_run(
        &self,
        sh: &mut Shard,
        start: u32,
        len: usize,
        size: usize,
        g: usize,
        now: UnixSecs,
    ) {
        for seg in start..start + len as u32 {
            set32(&self.meta(seg).owner, sh.id);
        }
        self.open_segment(sh, start, size, g, now);
    }

    /// Puts segment (or run) `head`, owned by this shard, at the young end of TTL group `g`
    /// with `written` bytes already reserved in it.
    fn open_segment(&self, sh: &mut Shard, head: u32, written: usize, g: usize, now: UnixSecs) {
        let meta = self.meta(head);
        let epoch = self.next_epoch();
        set32(&meta.write_off, written as u32);
        set32(&meta.live, 0);
        set32(&meta.max_expiry, 0);
        set32(&meta.created, now);
        set32(&meta.group, g as u32);
        meta.epoch.store(epoch, Relaxed);
        meta.order.store(epoch, Relaxed);
        sh.chains[g].push_back(head);
        self.publish_oldest(sh);
    }

    /// Looks `key` up and hands the item to `read`.
    pub fn get<R>(&self, key: &[u8], read: impl FnOnce(ItemView<'_>) -> R) -> Result<R, Miss> {
        self.read_item::<true, _>(key, None, |item, _| read(item))
    }

    /// Looks `key` up, sets its expiry (get-and-touch), and hands the item to `read`.
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        expiry: Expiry,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<true, _>(key, Some(expiry), |item, _| read(item))
    }

    /// For the meta protocol: like `get`/`get_and_touch`, and `read` may change the item's
    /// stale and win-token marks, which are saved with the read (e.g. `mg` handing out a win
    /// token sets `win_sent` in the same locked step that saw it clear).
    pub fn get_marked<R>(
        &self,
        key: &[u8],
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<true, _>(key, touch, read)
    }

    /// `get_marked` for meta's `u` flag (memcached's "no LRU bump"): the read leaves the
    /// fetched mark, the recently-read mark merge eviction keeps items by, and the access time
    /// as they were. Only the marks `read` changes are saved.
    pub fn peek_marked<R>(
        &self,
        key: &[u8],
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<false, _>(key, touch, read)
    }

    /// `md <key> I`: marks the item stale (clearing its win token, so the next reader wins the
    /// recache), gives it a new CAS as memcached does (so a writer holding the old one cannot
    /// overwrite the invalidation unnoticed) and, when given, a new expiry. With
    /// `expected_cas`, only if the item's CAS is that one, checked in the same locked step
    /// (`md I C`). Not a read: the fetched mark stays as it was, as memcached's `md` leaves it.
    pub fn invalidate(
        &self,
        key: &[u8],
        expiry: Option<Expiry>,
        expected_cas: Option<u64>,
    ) -> Result<(), Refused> {
        let (shard, tag) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        let found = self.live_checked(sh, key, tag, now, expected_cas)?;
        let h = found.hdr;
        let deadline = expiry.map_or(h.expiry, |e| e.0);
        let moved_size = item::item_size(h.key_len, h.value_len, h.flags, deadline != 0, false);
        if self.fits_segment(h.size()) && self.fits_segment(moved_size) {
            // The CAS is the item's place: a new place gives the new CAS.
            let mut scratch = std::mem::take(&mut sh.scratch);
            scratch.clear();
            {
                // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
                let bytes = unsafe { self.segment(found.loc.seg) };
                scratch.extend_from_slice(&bytes[found.loc.off as usize..][h.value_range()]);
            }
            let keep = (h.bits & (item::FETCHED | item::REFERENCED)) | item::STALE;
            let written = self.put_small(
                sh,
                key,
                tag,
                Some(found),
                h.flags,
                deadline,
                None,
                [&scratch, &[]],
                keep,
                now,
            );
            sh.scratch = scratch;
            // With eviction off and the heap full the item cannot move: answered as a miss,
            // as a touch that must move is.
            return written.map(|_| ()).ok_or(Refused::NotFound);
        }
        // A large item stays in its run, whose epoch moves so the CAS changes (as for incr).
        // A small item within 4 bytes of the large-item size that gains a deadline cannot take
        // the expiry field by moving; it is touched and marked where it is and keeps its CAS.
        let found = match expiry {
            Some(expiry) => self
                .set_expiry(sh, found, key, tag, expiry.0, now)
                .map_err(|_| Refused::NotFound)?,
            None => found,
        };
        {
            // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
            let bytes = unsafe { self.segment(found.loc.seg) };
            item::set_bits(
                &mut bytes[found.loc.off as usize..],
                item::STALE,
                item::WIN_SENT,
            );
        }
        if !self.fits_segment(found.hdr.size()) {
            self.meta(found.loc.seg)
                .epoch
                .store(self.next_epoch(), Relaxed);
        }
        Ok(())
    }

    /// Sets the expiry of `key`; false when it is not there.
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> bool {
        self.read_item::<true, _>(key, Some(expiry), |_, _| ())
            .is_ok()
    }

    /// A read; with `BUMP` (every read but meta's `u`) it marks the item fetched and recently
    /// read and updates its access time. A const parameter, so a plain get carries no test.
    fn read_item<const BUMP: bool, R>(
        &self,
        key: &[u8],
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        let (shard, tag) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        self.catch_up_flush(sh, Some((key, tag)), now)?;
        let mut found = self.live(sh, key, tag, now)?;
        if let Some(expiry) = touch {
            found = self.set_expiry(sh, found, key, tag, expiry.0, now)?;
        }
        let cas = self.cas_of(found.loc, &found.hdr);
        let created = get32(&self.meta(found.loc.seg).created);
        let h = found.hdr;
        // SAFETY: the item's segment belongs to this locked shard; the only slice alive, and it
        // does not outlive this function (the reader cannot keep the borrowed view).
        let bytes = unsafe { self.segment(found.loc.seg) };
        let item = &mut bytes[found.loc.off as usize..];
        let mut marks = Marks {
            stale: h.has(item::STALE),
            win_sent: h.has(item::WIN_SENT),
        };
        let result = read(
            ItemView {
                value: &item[h.value_range()],
                flags: h.flags,
                cas,
                expiry: Expiry(h.expiry),
                fetched: h.has(item::FETCHED),
                last_access: created + item::decode_age(h.access),
                stale: marks.stale,
                win_sent: marks.win_sent,
            },
            &mut marks,
        );
        let mark = |on: bool, bit: u8| if on { bit } else { 0 };
        let bump = if BUMP {
            item::FETCHED | item::REFERENCED
        } else {
            0
        };
        let set = bump | mark(marks.stale, item::STALE) | mark(marks.win_sent, item::WIN_SENT);
        let clear = mark(!marks.stale, item::STALE) | mark(!marks.win_sent, item::WIN_SENT);
        // Only write when something changes: repeated reads leave the cache line clean.
        if (h.bits & !clear) | set != h.bits {
            item::set_bits(item, set, clear);
        }
        if BUMP {
            let access = item::encode_age(now.saturating_sub(created));
            if access != h.access {
                item::set_access(item, access);
            }
        }
        Ok(result)
    }

    /// Gives an item a new deadline: in place when it has an expiry field, else by rewriting it
    /// with one (the one case besides merge where a value keeps its bytes but gets a new CAS).
    fn set_expiry(
        &self,
        sh: &mut Shard,
        found: Found,
        key: &[u8],
        tag: u32,
        expiry: u32,
        now: UnixSecs,
    ) -> Result<Found, Miss> {
        let h = found.hdr;
        if let Some(at) = h.expiry_at() {
            {
                // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
                let bytes = unsafe { self.segment(found.loc.seg) };
                let field = found.loc.off as usize + at;
                bytes[field..field + 4].copy_from_slice(&expiry.to_le_bytes());
            }
            let meta = self.meta(found.loc.seg);
            set32(
                &meta.max_expiry,
                get32(&meta.max_expiry).max(expiry_rank(expiry)),
            );
            return Ok(Found {
                hdr: Header { expiry, ..h },
                ..found
            });
        }
        if expiry == 0 {
            return Ok(found);
        }
        let mut scratch = std::mem::take(&mut sh.scratch);
        scratch.clear();
        {
            // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
            let bytes = unsafe { self.segment(found.loc.seg) };
            let item = &bytes[found.loc.off as usize..];
            scratch.extend_from_slice(&item[h.value_range()]);
        }
        let keep = h.bits & (item::FETCHED | item::STALE | item::WIN_SENT | item::REFERENCED);
        let written = self.put_small(
            sh,
            key,
            tag,
            Some(found),
            h.flags,
            expiry,
            // A touch keeps the item's CAS unique, as memcached's does.
            self.config.cas_enabled.then(|| self.cas_of(found.loc, &h)),
            [&scratch, &[]],
            keep,
            now,
        );
        sh.scratch = scratch;
        // With eviction off and the heap full the item cannot move; it is reported missing
        // rather than served with the wrong deadline.
        written.ok_or(Miss::NotFound)?;
        self.lookup(sh, key, tag).ok_or(Miss::NotFound)
    }

    pub fn store(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
    ) -> StoreOutcome {
        if key.is_empty() || key.len() > MAX_KEY {
            return StoreOutcome::TooLarge;
        }
        let (shard, tag) = self.hash(key);
        // A run reserved for a large item while no shard lock was held.
        let mut run: Option<(u32, usize)> = None;
        loop {
            let now = self.clock.now();
            let mut guard = self.lock(shard);
            let sh = &mut *guard;
            let found = match self.catch_up_flush(sh, Some((key, tag)), now) {
                Ok(()) => self.live(sh, key, tag, now).ok(),
                Err(_) => None,
            };
            let (flags, expiry, old_first) = match (op, found) {
                (StoreOp::Add, Some(_)) => return self.give_up(run, StoreOutcome::NotStored),
                (StoreOp::Replace | StoreOp::Append(_) | StoreOp::Prepend(_), None) => {
                    return self.give_up(run, StoreOutcome::NotStored)
                }
                (StoreOp::Cas(_), None) => return self.give_up(run, StoreOutcome::NotFound),
                (
                    StoreOp::Cas(unique)
                    | StoreOp::Append(Some(unique))
                    | StoreOp::Prepend(Some(unique)),
                    Some(f),
                ) if self.cas_of(f.loc, &f.hdr) != unique => {
                    return self.give_up(run, StoreOutcome::Exists)
                }
                // append/prepend keep the item's flags and expiry, as memcached does.
                (StoreOp::Append(_), Some(f)) => (f.hdr.flags, f.hdr.expiry, Some(true)),
                (StoreOp::Prepend(_), Some(f)) => (f.hdr.flags, f.hdr.expiry, Some(false)),
                _ => (flags, expiry.0, None),
            };
            let mut scratch = std::mem::take(&mut sh.scratch);
            scratch.clear();
            if let (Some(f), Some(_)) = (found, old_first) {
                // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
                let bytes = unsafe { self.segment(f.loc.seg) };
                scratch.extend_from_slice(&bytes[f.loc.off as usize..][f.hdr.value_range()]);
            }
            let parts: [&[u8]; 2] = match old_first {
                Some(true) => [&scratch, value],
                Some(false) => [value, &scratch],
                None => [value, &[]],
            };
            let value_len = parts[0].len() + parts[1].len();
            if value_len > self.config.max_item_size {
                sh.scratch = scratch;
                return self.fail(sh, op, key, tag, run, StoreOutcome::TooLarge);
            }
            if self.fits_segment(item::item_size(
                key.len(),
                value_len,
                flags,
                expiry != 0,
                false,
            )) {
                let written =
                    self.put_small(sh, key, tag, found, flags, expiry, None, parts, 0, now);
                sh.scratch = scratch;
                return match written {
                    Some(loc) => {
                        // Stores only: as memcached's, touch and incr rewrites do not count.
                        sh.counters.total_items += 1;
                        self.give_up(
                            run,
                            StoreOutcome::Stored {
                                cas: self.place_cas(loc),
                            },
                        )
                    }
                    None => self.fail(sh, op, key, tag, run, StoreOutcome::OutOfMemory),
                };
            }
            // Large item: it takes a run of whole segments, with room for a deadline so a
            // touch never has to move it.
            let size = item::item_size(key.len(), value_len, flags, true, false);
            let len = size.div_ceil(self.segment_size());
            if let Some((start, run_len)) = run.take() {
                if run_len == len {
                    {
                        // SAFETY: the run was reserved by this call and is not linked yet, so
                        // nothing else refers to its bytes; the slice ends here.
                        let bytes = unsafe { self.segment(start) };
                        item::write(bytes, key, flags, expiry, true, None, parts, 0, 0);
                    }
                    sh.scratch = scratch;
                    self.adopt_run(sh, start, len, size, group_of(expiry, now), now);
                    // SAFETY: the run now belongs to this locked shard; the slice is temporary.
                    let hdr = item::parse(unsafe { self.segment(start) });
                    let loc = Loc { seg: start, off: 0 };
                    self.link(sh, key, tag, loc, hdr, None);
                    sh.counters.total_items += 1;
                    return StoreOutcome::Stored {
                        cas: self.place_cas(loc),
                    };
                }
                // The size changed under a concurrent append: reserve again.
                self.free_run(start, run_len);
            }
            sh.scratch = scratch;
            drop(guard);
            match self.alloc_run(len) {
                Some(start) => run = Some((start, len)),
                None => {
                    let mut guard = self.lock(shard);
                    return self.fail(&mut guard, op, key, tag, None, StoreOutcome::OutOfMemory);
                }
            }
        }
    }

    fn give_up(&self, run: Option<(u32, usize)>, outcome: StoreOutcome) -> StoreOutcome {
        if let Some((start, len)) = run {
            self.free_run(start, len);
        }
        outcome
    }

    /// Like memcached, a set that fails leaves no stale copy behind.
    fn fail(
        &self,
        sh: &mut Shard,
        op: StoreOp,
        key: &[u8],
        tag: u32,
        run: Option<(u32, usize)>,
        outcome: StoreOutcome,
    ) -> StoreOutcome {
        if op == StoreOp::Set {
            if let Some(old) = self.lookup(sh, key, tag) {
                self.unlink(sh, old, Cause::Gone, true);
            }
        }
        self.give_up(run, outcome)
    }

    pub fn delete(&self, key: &[u8]) -> bool {
        self.delete_checked(key, None).is_ok()
    }

    /// Deletes `key`; with `expected_cas`, only if the item's CAS is that one, checked in the
    /// same locked step (binary Delete with a CAS, meta `md C`).
    pub fn delete_checked(&self, key: &[u8], expected_cas: Option<u64>) -> Result<(), Refused> {
        let (shard, tag) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        let found = self.live_checked(sh, key, tag, now, expected_cas)?;
        self.unlink(sh, found, Cause::Gone, true);
        Ok(())
    }

    /// The live item for `key`, if its CAS is `expected_cas` (when given).
    fn live_checked(
        &self,
        sh: &mut Shard,
        key: &[u8],
        tag: u32,
        now: UnixSecs,
        expected_cas: Option<u64>,
    ) -> Result<Found, Refused> {
        self.catch_up_flush(sh, Some((key, tag)), now)
            .map_err(|_| Refused::NotFound)?;
        let found = self
            .live(sh, key, tag, now)
            .map_err(|_| Refused::NotFound)?;
        match expected_cas {
            Some(cas) if cas != self.cas_of(found.loc, &found.hdr) => Err(Refused::Exists),
            _ => Ok(found),
        }
    }

    /// incr/decr as memcached does them: the value must be a decimal u64 (leading spaces allowed),
    /// incr wraps at 2^64, decr stops at 0, and a result shorter than the value is space-padded
    /// to the value's length. The result is a new version (new CAS) with the item's flags and
    /// expiry, and keeps its fetched, stale and win-token marks. With `expected_cas`, only if
    /// the item's CAS is that one, checked in the same locked step (binary Increment with a
    /// CAS, meta `ma C`).
    pub fn incr_decr(
        &self,
        key: &[u8],
        op: Arith,
        delta: u64,
        expected_cas: Option<u64>,
    ) -> Result<Counted, ArithError> {
        let (shard, tag) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        let found = self
            .live_checked(sh, key, tag, now, expected_cas)
            .map_err(|refused| match refused {
                Refused::NotFound => ArithError::NotFound,
                Refused::Exists => ArithError::Exists,
            })?;
        let h = found.hdr;
        let current = {
            // SAFETY: the item's segment belongs to this locked shard; the slice ends here.
            let bytes = unsafe { self.segment(found.loc.seg) };
            parse_u64(&bytes[found.loc.off as usize..][h.value_range()])
        }
        .ok_or(ArithError::NonNumeric)?;
        let next = match op {
            Arith::Incr => current.wrapping_add(delta),
            Arith::Decr => current.saturating_sub(delta),
        };
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        let mut n = next;
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &digits[start..];
        if !self.fits_segment(h.size()) {
            // A large item keeps its run: the number is written over the value in place
            // (never longer than it, the value being far above 20 bytes), padded with spaces,
            // and the run's epoch moves so the CAS changes.
            {
                // SAFETY: the run belongs to this locked shard; the slice ends here.
                let bytes = unsafe { self.segment(found.loc.seg) };
                let value = &mut bytes[h.value_range()];
                value[..digits.len()].copy_from_slice(digits);
                value[digits.len()..].fill(b' ');
            }
            self.meta(found.loc.seg)
                .epoch
                .store(self.next_epoch(), Relaxed);
            return Ok(Counted {
                value: next,
                cas: self.cas_of(found.loc, &h),
                expiry: Expiry(h.expiry),
            });
        }
        let mut scratch = std::mem::take(&mut sh.scratch);
        scratch.clear();
        scratch.extend_from_slice(digits);
        if scratch.len() < h.value_len {
            scratch.resize(h.value_len, b' ');
        } else if scratch.len() > h.value_len {
            // memcached links a new item only when the number outgrows its old length.
            sh.counters.total_items += 1;
        }
        // memcached rewrites a counter in place when it can, marks and all.
        let keep = h.bits & (item::FETCHED | item::STALE | item::WIN_SENT | item::REFERENCED);
        let written = self.put_small(
            sh,
            key,
            tag,
            Some(found),
            h.flags,
            h.expiry,
            None,
            [&scratch, &[]],
            keep,
            now,
        );
        sh.scratch = scratch;
        written
            .map(|loc| Counted {
                value: next,
                cas: self.place_cas(loc),
                expiry: Expiry(h.expiry),
            })
            .ok_or(ArithError::OutOfMemory)
    }

    /// `flush_all [delay]`: items stored before `now + delay` stop being served from then on.
    /// Each shard is emptied by its first operation once the deadline has come (an immediate
    /// flush empties them all now).
    pub fn flush_all(&self, delay_secs: u32) {
        let _serial = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        // A flush already due must not be cancelled by the new mark.
        self.catch_up_all(now);
        let seq = (self.flush.load(Relaxed) as u32).wrapping_add(1);
        let at = now.saturating_add(delay_secs);
        self.flush.store(((at as u64) << 32) | seq as u64, Relaxed);
        if delay_secs == 0 {
            self.catch_up_all(now);
        }
    }

    fn catch_up_all(&self, now: UnixSecs) {
        for shard in 0..self.shards.len() {
            let mut sh = self.lock(shard);
            let _ = self.catch_up_flush(&mut sh, None, now);
        }
    }

    /// Takes back the memory of expired items without waiting for them to be read: every
    /// segment whose items have all expired is freed whole (`reclaimed_segments`). The server
    /// calls this from its clock thread every few seconds (tern-server: every 10 s).
    pub fn reclaim_expired(&self) {
        let now = self.clock.now();
        for shard in 0..self.shards.len() {
            let mut guard = self.lock(shard);
            let sh = &mut *guard;
            let _ = self.catch_up_flush(sh, None, now);
            self.reclaim_shard(sh, now);
            self.release(sh, false);
        }
    }

    pub fn stats(&self) -> StoreStats {
        let now = self.clock.now();
        let mut total = Counters::default();
        let mut index_bytes = 0;
        let mut oldest_created = now;
        for shard in 0..self.shards.len() {
            let mut guard = self.lock(shard);
            let sh = &mut *guard;
            let _ = self.catch_up_flush(sh, None, now);
            let c = sh.counters;
            total.curr_items += c.curr_items;
            total.bytes += c.bytes;
            total.item_bytes += c.item_bytes;
            total.total_items += c.total_items;
            total.evictions += c.evictions;
            total.reclaimed += c.reclaimed;
            total.expired_unfetched += c.expired_unfetched;
            total.evicted_unfetched += c.evicted_unfetched;
            total.reclaimed_segments += c.reclaimed_segments;
            total.merges += c.merges;
            index_bytes += sh.index.bytes() as u64;
            for chain in &sh.chains {
                if let Some(&head) = chain.front() {
                    oldest_created = oldest_created.min(get32(&self.meta(head).created));
                }
            }
        }
        let free = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free_count;
        StoreStats {
            curr_items: total.curr_items,
            total_items: total.total_items,
            bytes: total.bytes,
            limit_maxbytes: self.config.heap_bytes as u64,
            evictions: total.evictions,
            reclaimed: total.reclaimed,
            expired_unfetched: total.expired_unfetched,
            evicted_unfetched: total.evicted_unfetched,
            reclaimed_segments: total.reclaimed_segments,
            merges: total.merges,
            heap_used: ((self.metas.len() - free) << self.segment_shift) as u64,
            index_bytes,
            item_bytes_with_headers: total.item_bytes,
            oldest_item_age: now - oldest_created,
        }
    }

    /// `stats reset`: zeroes the cumulative counters (not the gauges).
    pub fn reset_stats(&self) {
        for shard in 0..self.shards.len() {
            let mut sh = self.lock(shard);
            let c = &mut sh.counters;
            (c.total_items, c.evictions, c.reclaimed) = (0, 0, 0);
            (c.expired_unfetched, c.evicted_unfetched) = (0, 0);
            (c.reclaimed_segments, c.merges) = (0, 0);
        }
    }
}

/// memcached's `safe_strtoull` on an item's value: optional leading white space, decimal digits,
/// then the end or white space; no sign, no overflow.
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    let start = value.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &value[start..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    if let Some(after) = rest.get(digits) {
        if !after.is_ascii_whitespace() {
            return None;
        }
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixSecs = 1_700_000_000;

    fn store() -> Store {
        Store::new(Config::default(), Arc::new(Clock::manual(T0))).unwrap()
    }

    fn get(s: &Store, key: &[u8]) -> Result<Vec<u8>, Miss> {
        s.get(key, |item| item.value.to_vec())
    }

    #[test]
    fn set_then_get() {
        let s = store();
        assert!(matches!(
            s.store(StoreOp::Set, b"k", 5, Expiry::NEVER, b"v"),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(get(&s, b"k"), Ok(b"v".to_vec()));
        assert_eq!(s.get(b"k", |i| i.flags), Ok(5));
    }

    #[test]
    fn expiry_relative_absolute_negative() {
        assert_eq!(Expiry::from_exptime(0, T0), Expiry::NEVER);
        assert!(Expiry::from_exptime(-1, T0).is_expired_at(T0));
        assert_eq!(Expiry::from_exptime(10, T0).deadline(), Some(T0 + 10));
        assert_eq!(
            Expiry::from_exptime(T0 as i64 + 99, T0).deadline(),
            Some(T0 + 99)
        );
    }

    #[test]
    fn items_expire_with_the_clock() {
        let s = store();
        s.store(StoreOp::Set, b"k", 0, Expiry::from_exptime(2, T0), b"v");
        s.clock().advance(1);
        assert!(get(&s, b"k").is_ok());
        s.clock().advance(1);
        assert_eq!(get(&s, b"k"), Err(Miss::Expired));
    }

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
    fn total_items_counts_stores_and_outgrown_counters_only() {
        let s = store();
        s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"aa");
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"5");
        s.store(StoreOp::Add, b"a", 0, Expiry::NEVER, b"x");
        let _ = s.incr_decr(b"n", Arith::Incr, 2, None);
        let _ = s.incr_decr(b"n", Arith::Decr, 1, None);
        assert!(s.touch(b"a", Expiry(s.clock().now() + 100)));
        assert_eq!(s.stats().total_items, 2);
        // 6 -> 106 no longer fits where 6 was: memcached links a new item and counts it.
        let _ = s.incr_decr(b"n", Arith::Incr, 100, None);
        assert_eq!(s.stats().total_items, 3);
    }

    #[test]
    fn incr_decr_follow_memcached() {
        let s = store();
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"100");
        let value = |r: Result<Counted, ArithError>| r.map(|c| c.value);
        assert_eq!(value(s.incr_decr(b"n", Arith::Decr, 1, None)), Ok(99));
        assert_eq!(get(&s, b"n"), Ok(b"99 ".to_vec()));
        assert_eq!(value(s.incr_decr(b"n", Arith::Decr, 1000, None)), Ok(0));
        s.store(
            StoreOp::Set,
            b"n",
            0,
            Expiry::NEVER,
            b"18446744073709551615",
        );
        assert_eq!(value(s.incr_decr(b"n", Arith::Incr, 2, None)), Ok(1));
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b" 12");
        assert_eq!(value(s.incr_decr(b"n", Arith::Incr, 1, None)), Ok(13));
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"abc");
        assert_eq!(
            s.incr_decr(b"n", Arith::Incr, 1, None),
            Err(ArithError::NonNumeric)
        );
        assert_eq!(
            s.incr_decr(b"missing", Arith::Incr, 1, None),
            Err(ArithError::NotFound)
        );
    }

    #[test]
    fn cas_add_replace_append() {
        let s = store();
        assert_eq!(
            s.store(StoreOp::Replace, b"k", 0, Expiry::NEVER, b"x"),
            StoreOutcome::NotStored
        );
        let StoreOutcome::Stored { cas } = s.store(StoreOp::Add, b"k", 0, Expiry::NEVER, b"a")
        else {
            panic!("add failed")
        };
        assert_eq!(
            s.store(StoreOp::Add, b"k", 0, Expiry::NEVER, b"b"),
            StoreOutcome::NotStored
        );
        assert_eq!(
            s.store(StoreOp::Cas(cas + 100), b"k", 0, Expiry::NEVER, b"c"),
            StoreOutcome::Exists
        );
        assert!(matches!(
            s.store(StoreOp::Cas(cas), b"k", 0, Expiry::NEVER, b"c"),
            StoreOutcome::Stored { .. }
        ));
        s.store(StoreOp::Append(None), b"k", 9, Expiry::NEVER, b"d");
        s.store(StoreOp::Prepend(None), b"k", 9, Expiry::NEVER, b"b");
        assert_eq!(get(&s, b"k"), Ok(b"bcd".to_vec()));
        assert_eq!(s.get(b"k", |i| i.flags), Ok(0));
    }

    #[test]
    fn cas_conditioned_ops_check_in_the_same_step() {
        let s = store();
        let set = |value: &[u8]| match s.store(StoreOp::Set, b"k", 0, Expiry::NEVER, value) {
            StoreOutcome::Stored { cas } => cas,
            other => panic!("set: {other:?}"),
        };
        let cas = set(b"1");
        let stale = cas + 1;
        // Mismatch: nothing changes.
        assert_eq!(s.delete_checked(b"k", Some(stale)), Err(Refused::Exists));
        assert_eq!(
            s.incr_decr(b"k", Arith::Incr, 1, Some(stale)),
            Err(ArithError::Exists)
        );
        for op in [StoreOp::Append(Some(stale)), StoreOp::Prepend(Some(stale))] {
            assert_eq!(
                s.store(op, b"k", 0, Expiry::NEVER, b"0"),
                StoreOutcome::Exists
            );
        }
        assert_eq!(s.invalidate(b"k", None, Some(stale)), Err(Refused::Exists));
        assert_eq!(
            s.get(b"k", |i| (i.value.to_vec(), i.cas, i.stale)),
            Ok((b"1".to_vec(), cas, false))
        );
        // Match: each op runs and hands out the CAS the next one must name.
        let counted = s.incr_decr(b"k", Arith::Incr, 1, Some(cas)).unwrap();
        assert_eq!(counted.value, 2);
        assert_eq!(
            s.get(b"k", |i| (i.cas, i.expiry)),
            Ok((counted.cas, counted.expiry))
        );
        let StoreOutcome::Stored { cas } = s.store(
            StoreOp::Append(Some(counted.cas)),
            b"k",
            0,
            Expiry::NEVER,
            b"0",
        ) else {
            panic!("append with the current CAS")
        };
        let StoreOutcome::Stored { cas } =
            s.store(StoreOp::Prepend(Some(cas)), b"k", 0, Expiry::NEVER, b"1")
        else {
            panic!("prepend with the current CAS")
        };
        assert_eq!(get(&s, b"k"), Ok(b"120".to_vec()));
        assert_eq!(s.invalidate(b"k", None, Some(cas)), Ok(()));
        // memcached's `md I` gives the item a new CAS: the one read before no longer matches.
        assert_eq!(s.delete_checked(b"k", Some(cas)), Err(Refused::Exists));
        let (stale, new_cas) = s.get(b"k", |i| (i.stale, i.cas)).unwrap();
        assert!(stale && new_cas != cas);
        let cas = new_cas;
        assert_eq!(s.delete_checked(b"k", Some(cas)), Ok(()));
        // Missing: NotFound (append/prepend: NotStored, as memcached answers).
        assert_eq!(s.delete_checked(b"k", Some(cas)), Err(Refused::NotFound));
        assert_eq!(
            s.incr_decr(b"k", Arith::Incr, 1, Some(cas)),
            Err(ArithError::NotFound)
        );
        assert_eq!(s.invalidate(b"k", None, Some(cas)), Err(Refused::NotFound));
        assert_eq!(
            s.store(StoreOp::Append(Some(cas)), b"k", 0, Expiry::NEVER, b"0"),
            StoreOutcome::NotStored
        );
    }

    #[test]
    fn flush_now_and_later() {
        let s = store();
        s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"1");
        s.flush_all(0);
        assert!(get(&s, b"a").is_err());
        s.clock().advance(1);
        s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"1");
        s.flush_all(5);
        s.clock().advance(4);
        assert!(get(&s, b"a").is_ok());
        s.clock().advance(1);
        assert_eq!(get(&s, b"a"), Err(Miss::Flushed));
    }

    #[test]
    fn heap_limit_evicts_or_refuses() {
        let config = Config {
            heap_bytes: 64 * 1024,
            shards: 1,
            ..Config::default()
        };
        let s = Store::new(config.clone(), Arc::new(Clock::manual(T0))).unwrap();
        for i in 0..1000u32 {
            s.store(StoreOp::Set, &i.to_be_bytes(), 0, Expiry::NEVER, &[7; 100]);
        }
        assert!(s.stats().evictions > 0);
        let no_evict = Store::new(
            Config {
                eviction: Eviction::None,
                ..config
            },
            Arc::new(Clock::manual(T0)),
        )
        .unwrap();
        let outcomes: Vec<_> = (0..1000u32)
            .map(|i| no_evict.store(StoreOp::Set, &i.to_be_bytes(), 0, Expiry::NEVER, &[7; 100]))
            .collect();
        assert!(outcomes.contains(&StoreOutcome::OutOfMemory));
    }
}
