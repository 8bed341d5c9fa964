//! tern's observability, kept apart from the event loops so that the request path only ever
//! touches per-worker cells:
//!
//! - [`WorkerMetrics`]: per-worker counters and latency histograms, written by the worker alone,
//!   merged on read into a [`Snapshot`] the server fills when asked.
//! - [`prometheus::encode`]: the Prometheus text format, with memcached_exporter's metric names.
//! - [`HotKeys`]: sampled, windowed hot-key sketches, one per worker, merged on read.
//! - [`stats_text`]: memcached's `stats` subcommands as wire bytes.
//! - [`AdminServer`]: the admin HTTP endpoint (`/metrics`, `/stats`, `/health`, `/version`,
//!   `/settings`, `/hotkeys`), fed through [`AdminSource`].

#![warn(missing_docs)]

mod admin;
mod hotkeys;
pub mod prometheus;
mod snapshot;
pub mod stats_text;
mod worker;

pub use admin::{stats_json, AdminServer, AdminSource};
pub use hotkeys::{HotKey, HotKeyConfig, HotKeySampler, HotKeys, HotKeysReport};
pub use snapshot::{general_stats, MemcachedCounters, SegmentStats, Snapshot, StoreStats};
pub use worker::{
    latency_bucket, latency_bucket_bound_nanos, Command, LatencyBatch, LatencyHistogram, Outcome,
    OwnedCounter, WorkerMetrics, WorkerSnapshot, FIRST_BUCKET_LOG2, LATENCY_BUCKETS,
};
