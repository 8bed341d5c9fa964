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
//!   header (see `mechanics/item.rs`) and nothing else.
//! - The store is split into shards by key hash. A shard owns its own lock, hash index, TTL
//!   groups and counters; segments move between shards only through a small free pool, taken
//!   once per filled segment. A get locks one shard and writes only that shard's memory.
//! - A segment's bytes belong to one shard at a time and are reached only through `segments`,
//!   which takes the shard's lock-guarded `Owner` (shared to read, exclusive to write) and, in
//!   debug builds, asserts that the shard owns the segment.
//! - Each shard keeps one chain of segments per TTL group (never, and one per power of two of
//!   seconds), so items that expire together sit together: `reclaim_expired` frees whole
//!   segments whose last deadline has passed.
//! - When the pool is empty, the shard holding the heap's oldest segment evicts (see
//!   `evict_for`): `Merge` (after segcache's: a clock over segments; the oldest segments of a
//!   chain are read in order, items read since they were written are packed together and
//!   kept, the rest dropped), `Fifo`, `Random`; `None` answers out-of-memory.
//! - An item larger than a segment takes a run of contiguous segments from the same heap.
//! - The memory limit (memcached's `cache_memlimit`, see `memlimit`) caps the segments in use
//!   within the mapped heap: past it the pool hands out nothing, so writes make room as in a
//!   full heap; lowering it evicts down to it and gives free segments' pages back to the OS.
//!   The index counts inside it: its tables are charged in whole segments, charged before a
//!   table grows (eviction making room), so items and index together stay within `-m`.
//! - The CAS unique is the item's place: (segment epoch << log2(segment size)) | offset. Every
//!   write goes to a fresh place, so every stored version gets a new unique at no per-item cost;
//!   a touch that must move an item carries its unique along.
//! - With a memory file (memcached's `-e`, `Store::open_file`) the heap is a shared mapping of
//!   it, and `snapshot_meta` saves what lives beside the heap, so a restart restores every
//!   live item (see `persist`).
//!
//! # Layers
//! Two folders, imported in one direction only: `mechanics` (clock, settings, heap, segments,
//! pool, items, index, TTL groups, shard state: the pieces, none of which knows the `Store`) and
//! `store` (the `Store` and every operation on it, built from those pieces). A piece that needed
//! the store would tie the two into one tangle again: it takes what it needs as arguments.

mod mechanics;
mod store;

#[cfg(test)]
mod tests;

pub use mechanics::clock;
pub use mechanics::clock::{Clock, UnixSecs, MAX_RELATIVE_EXPTIME};
pub use mechanics::config::{shards_for, Config, Eviction};
pub use mechanics::error::StoreError;
pub use mechanics::flash::FlashWaker;
pub use mechanics::flash_config::{
    FlashConfig, FlashFile, FlashKnobs, FlashPageInfo, FlashSettings, FlashStats,
    DEFAULT_READ_DEPTH,
};
pub use mechanics::heap::PageKind;
pub use mechanics::types::{
    Arith, ArithError, Counted, EvictedItem, Expiry, ItemView, Marks, Miss, Refused, StoreOp,
    StoreOutcome,
};
pub use store::dump::{DumpCursor, ItemMeta};
pub use store::key::{HashedKey, ReadKey};
pub use store::memlimit::MemoryLimitError;
pub use store::persist::{Opened, Restored, META_HEADER_LEN};
pub use store::prefetch::PREFETCH_MAX;
pub use store::stats::StoreStats;
pub use store::write::parse_u64;
pub use store::{EvictionObserver, Store};
