//! The bottom layer: how items are kept, with no `Store` in sight. The clock, the error type,
//! the settings and the heap's geometry (`config`), the heap and its segments, the free pool,
//! the item layout, the hash index and its read-ahead hints, TTL groups, a shard's state (and the
//! sequence count that lets reads skip its lock: `seqlock`) and
//! counters, the `flush_all` mark, the key hash's seeds, and the plain values the API takes and
//! gives (`types`).
//!
//! Nothing here imports from `crate::store`: the operations are built on these pieces, never the
//! other way round, so each piece can be read (and tested) on its own. Within this folder no two
//! files import each other either.

pub mod clock;
pub(crate) mod config;
pub(crate) mod counters;
pub(crate) mod error;
pub(crate) mod flash;
pub(crate) mod flash_config;
pub(crate) mod flush_mark;
pub(crate) mod hash_seeds;
pub(crate) mod heap;
pub(crate) mod index;
pub(crate) mod index_hints;
pub(crate) mod item;
pub(crate) mod pool;
pub(crate) mod segments;
pub(crate) mod seqlock;
pub(crate) mod shard;
pub(crate) mod ttl;
pub(crate) mod types;
