//! What each worker records per request: tern-admin's counters, the latency batch and the
//! hot-key sampler, in one cache-line-aligned [`WorkerState`] per worker. A leaf module: the
//! operations layer writes it, `stats` and the admin endpoint read it.

use std::sync::atomic::AtomicI32;
use std::time::Instant;

use tern_admin::{HotKeySampler, HotKeys, LatencyBatch, WorkerMetrics};

/// Everything one worker records per request, written by that worker's thread alone (relaxed
/// load + store, no `lock` prefix) and read by whoever serves `stats` or a scrape. Aligned so
/// that no two workers share a cache line.
#[repr(align(128))]
pub struct WorkerState {
    pub metrics: WorkerMetrics,
    /// Requests served since the last write, timed together once it is done.
    pub batch: LatencyBatch,
    pub hot_keys: HotKeySampler,
    /// The socket of the connection being served, so `stats conns` can mark its asker.
    pub serving_fd: AtomicI32,
}

impl WorkerState {
    pub fn new(hot_keys: &HotKeys) -> WorkerState {
        WorkerState {
            metrics: WorkerMetrics::new(),
            batch: LatencyBatch::new(),
            hot_keys: hot_keys.sampler(),
            serving_fd: AtomicI32::new(-1),
        }
    }

    /// Gives every request noted since the last batch the time since `started` (the clock read
    /// after the receive that brought them in), now that their replies are sent.
    #[inline]
    pub fn finish_batch(&self, started: Instant) {
        if !self.batch.is_empty() {
            self.batch
                .finish(&self.metrics, started.elapsed().as_nanos() as u64);
        }
    }
}
