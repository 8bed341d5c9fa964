//! The store itself: what it is made of, and how it is built from a `Config`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::config::Geometry;
use crate::flush::Flush;
use crate::heap::{Heap, PageKind};
use crate::pool::Pool;
use crate::prefetch::IndexHints;
use crate::segments::Segments;
use crate::shard::{Padded, Shard};
use crate::{Clock, Config, EvictedItem, StoreError};

/// The store. `Sync`: share one behind an `Arc` across worker threads.
pub struct Store {
    pub(crate) config: Config,
    pub(crate) clock: Arc<Clock>,
    pub(crate) hasher: ahash::RandomState,
    /// The seeds `hasher` was made from, saved with a memory file (`persist`).
    pub(crate) seeds: [u64; 4],
    pub(crate) shards: Box<[Padded<Mutex<Shard>>]>,
    /// Where each shard's index table is, for read-ahead without its lock.
    pub(crate) index_hints: IndexHints,
    pub(crate) segs: Segments,
    pub(crate) pool: Mutex<Pool>,
    pub(crate) flush: Flush,
    /// Per shard, the age order of its oldest segment (`u64::MAX`: none), for `evict_for`.
    pub(crate) oldest: Box<[AtomicU64]>,
    /// Told of every item evicted (see `observe_evictions`).
    pub(crate) eviction_observer: OnceLock<EvictionObserver>,
}

/// What `Store::observe_evictions` calls, under the evicting shard's lock.
pub type EvictionObserver = Box<dyn Fn(EvictedItem<'_>) + Send + Sync>;

impl Store {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Store, StoreError> {
        let geometry = Geometry::of(&config)?;
        let heap = Heap::new(
            geometry.segments << geometry.segment_shift,
            config.large_pages,
            config.lock_memory,
        )?;
        let seeds = crate::persist::random_seeds();
        Ok(Store::with_heap(
            config,
            clock,
            &geometry,
            heap,
            crate::persist::hasher_of(seeds),
            seeds,
        ))
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
        let shards: Box<[_]> = (0..geometry.shards)
            .map(|id| Padded(Mutex::new(Shard::new(id as u32, hasher.hash_one(id) | 1))))
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
            config,
            clock,
            hasher,
            seeds,
            index_hints: IndexHints::new(&shards),
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
}
