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
//!
//! # Wiring into the server
//!
//! At start-up: one [`HotKeys`], and per worker a [`WorkerMetrics`], a [`LatencyBatch`] and a
//! [`HotKeySampler`] from [`HotKeys::sampler`]. All three record through `&self` with relaxed
//! loads and stores (no `lock` prefix): only the owning worker may write them, any thread may
//! read them. The one lock is the worker's hot-key sketch, taken by the sampled requests (about
//! one in `--hotkey-sample-rate`) and by readers. tern-server keeps the three of a worker
//! together in one cache-line-aligned `WorkerState`, in a slice of all workers' states that the
//! workers and the readers share; with `--admin-port` it also starts the endpoint with
//! [`AdminServer::start`] and a type implementing [`AdminSource`].
//!
//! Per event-loop wake-up: [`WorkerMetrics::wakeup`], and the clock read once after the read
//! that brings a batch of requests in. Per request (per key for retrievals):
//! [`WorkerMetrics::count`] with its outcome, [`LatencyBatch::add`], [`HotKeySampler::record`]
//! with the key. After the batch's write: the clock again and [`LatencyBatch::finish`]. Per
//! read/write: [`WorkerMetrics::read_bytes`] / [`WorkerMetrics::written_bytes`]; per
//! connection: [`WorkerMetrics::conn_opened`] / [`WorkerMetrics::conn_closed`] /
//! [`WorkerMetrics::conn_rejected`].
//!
//! On `stats ...` or a scrape: build a [`Snapshot`] (workers' [`WorkerMetrics::snapshot`], the
//! store's [`StoreStats`]), then [`stats_text`]'s renderers or [`prometheus::encode`]; for
//! `stats reset` save the snapshot as a baseline and render [`Snapshot::since`] afterwards.

#![warn(missing_docs)]

mod hotkeys;
mod http;
pub mod prometheus;
mod snapshot;
pub mod stats_text;
mod worker;

pub use hotkeys::{HotKey, HotKeyConfig, HotKeySampler, HotKeys, HotKeysReport};
pub use http::{stats_json, AdminServer, AdminSource};
pub use snapshot::{
    general_stats, hash_power_level, MemcachedCounters, RestoreStats, SegmentStats, ServerStats,
    Snapshot, StoreStats,
};
pub use worker::{
    latency_bucket, latency_bucket_bound_nanos, Command, ConnBuffers, LatencyBatch,
    LatencyHistogram, Outcome, OwnedCounter, WorkerMetrics, WorkerSnapshot, FIRST_BUCKET_LOG2,
    LATENCY_BUCKETS,
};
