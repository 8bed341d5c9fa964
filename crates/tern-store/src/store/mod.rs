//! The top layer: the `Store` (what it is made of, and how it is built from a `Config`) and
//! every operation on it, one file each: reads, writes, large items (`runs`), `flush_all`, the
//! memory limit, warm restart (`persist`), `lru_crawler metadump` (`dump`), eviction,
//! read-ahead (`prefetch`), the steps commands share (`shard`, `ttl`, `key`) and `stats`.
//!
//! Built on `crate::mechanics` and importing from nowhere else in the crate; nothing below
//! imports from here. This file imports none of its submodules either (they all import
//! `Store` from it), so no two files here import each other.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use crate::mechanics::clock::Clock;
use crate::mechanics::config::{Config, Geometry};
use crate::mechanics::error::StoreError;
use crate::mechanics::flash::{largest_item, Flash};
use crate::mechanics::flush_mark::Flush;
use crate::mechanics::hash_seeds;
use crate::mechanics::heap::{Heap, PageKind};
use crate::mechanics::pool::Pool;
use crate::mechanics::segments::Segments;
use crate::mechanics::shard::{Padded, Shard, ShardLock, WriterLanes};
use crate::mechanics::types::EvictedItem;

pub(crate) mod dump;
pub(crate) mod evict;
pub(crate) mod flash;
pub(crate) mod flush;
pub(crate) mod key;
pub(crate) mod memlimit;
pub(crate) mod persist;
pub(crate) mod prefetch;
pub(crate) mod read;
pub(crate) mod runs;
pub(crate) mod shard;
pub(crate) mod stats;
pub(crate) mod ttl;
pub(crate) mod write;

/// The store. `Sync`: share one behind an `Arc` across worker threads.
pub struct Store {
    pub(crate) config: Config,
    pub(crate) clock: Arc<Clock>,
    pub(crate) hasher: ahash::RandomState,
    /// The seeds `hasher` was made from, saved with a memory file (`persist`).
    pub(crate) seeds: [u64; 4],
    /// Each shard behind its lock, which reads skip (see `mechanics/seqlock.rs`).
    pub(crate) shards: Box<[Padded<ShardLock>]>,
    pub(crate) segs: Segments,
    pub(crate) pool: Mutex<Pool>,
    pub(crate) flush: Flush,
    /// Per shard, the age order of its oldest segment (`u64::MAX`: none), for `evict_for`.
    pub(crate) oldest: Box<[AtomicU64]>,
    /// Told of every item evicted (see `observe_evictions`).
    pub(crate) eviction_observer: OnceLock<EvictionObserver>,
    /// The flash tier (`Config::flash`), if any; boxed, so that a store without one stays as
    /// small as it was.
    pub(crate) flash: Option<Box<Flash>>,
    /// Items of at least this many bytes count as `flash_sized` (the flash tier's starting
    /// `ext_item_size`; never without a flash tier).
    pub(crate) flash_sized_from: usize,
    /// The largest item the flash tier takes: one whose record fits a write buffer.
    pub(crate) flash_sized_to: usize,
    /// Which writer lane each thread appends to (`Geometry::lanes` of them per shard).
    pub(crate) lanes: WriterLanes,
}

/// What `Store::observe_evictions` calls, under the evicting shard's lock.
pub type EvictionObserver = Box<dyn Fn(EvictedItem<'_>) + Send + Sync>;

impl Store {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Store, StoreError> {
        let geometry = Geometry::of(&config)?;
        let heap = Heap::new(
            geometry.segments << geometry.segment_shift,
            geometry.reserved << geometry.segment_shift,
            config.large_pages,
            config.lock_memory,
        )?;
        let seeds = hash_seeds::random_seeds();
        let flash = config
            .flash
            .as_ref()
            .map(|f| Flash::open(f).map(Box::new))
            .transpose()?;
        let mut store = Store::with_heap(
            config,
            clock,
            &geometry,
            heap,
            hash_seeds::hasher_of(seeds),
            seeds,
        );
        store.flash = flash;
        Ok(store)
    }

    /// A store of `geometry` over `heap`, empty, hashing keys with `hasher`.
    pub(crate) fn with_heap(
        config: Config,
        clock: Arc<Clock>,
        geometry: &Geometry,
        heap: Heap,
        hasher: ahash::RandomState,
        seeds: [u64; 4],
    ) -> Store {
        let max_index_bytes =
            max_index_bytes(geometry.segments << geometry.segment_shift, geometry.shards);
        let shards: Box<[_]> = (0..geometry.shards)
            .map(|id| {
                Padded(ShardLock::new(Shard::new(
                    id as u32,
                    hasher.hash_one(id) | 1,
                    max_index_bytes,
                )))
            })
            .collect();
        let mut pool = Pool::new(geometry.segments, 1 << geometry.segment_shift);
        pool.charge_index_anyway(shards.iter().map(|s| s.0.lock().index.bytes()).sum());
        Store {
            segs: Segments::new(
                heap,
                geometry.segments,
                geometry.segment_shift,
                config.cas_enabled,
            ),
            pool: Mutex::new(pool),
            flush: Flush::new(),
            oldest: (0..geometry.shards)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
            eviction_observer: OnceLock::new(),
            flash: None,
            flash_sized_from: config
                .flash
                .as_ref()
                .map_or(usize::MAX, |f| f.knobs.item_size as usize),
            flash_sized_to: config
                .flash
                .as_ref()
                .map_or(0, |f| largest_item(f.wbuf_size)),
            lanes: WriterLanes::new(geometry.lanes),
            config,
            clock,
            hasher,
            seeds,
            shards,
        }
    }

    /// Has `observe` called for every item evicted from now on (memcached's `watch
    /// evictions`), under the evicting shard's lock: it must be quick and must not call the
    /// store. One observer per store; false if one is set already.
    pub fn observe_evictions(&self, observe: EvictionObserver) -> bool {
        self.eviction_observer.set(observe).is_ok()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The segment size in use (after `Config::segment_size` 0 picked one).
    pub fn segment_size(&self) -> usize {
        self.segs.size()
    }

    /// How the heap's pages are backed.
    pub fn page_kind(&self) -> PageKind {
        self.segs.page_kind()
    }

    /// The free pool, under its lock (see `mechanics/pool.rs`).
    pub(crate) fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock()
    }
}

/// How large a shard's index table may grow in a heap of `heap_bytes` (its regions' size, see
/// `index::Regions`). A shard's index holds its share of the items, about 1/shards of them
/// with hashed keys: room for four times that (1 MiB at least, the whole heap at most) is far
/// from ever limiting it, and keeps the address space the tables reserve (twice this per
/// shard) within a few times the heap. A raised memory limit widens them (`Index::widen`).
pub(crate) fn max_index_bytes(heap_bytes: usize, shards: usize) -> usize {
    (4 * heap_bytes / shards)
        .max(1 << 20)
        .min(heap_bytes.max(1 << 16))
}
