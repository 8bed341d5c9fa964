//! What each worker records per request: tern-admin's counters, the latency batch and the
//! hot-key sampler, in one cache-line-aligned [`WorkerState`] per worker. A leaf module: the
//! operations layer writes it, `stats` and the admin endpoint read it.

use std::sync::atomic::AtomicI32;

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
    /// Wakes this worker's event loop when a flash read it asked for has landed (set at
    /// start, with the loop's waker).
    pub flash_waker: std::sync::OnceLock<tern_store::FlashWaker>,
}

impl WorkerState {
    pub fn new(hot_keys: &HotKeys) -> WorkerState {
        WorkerState {
            metrics: WorkerMetrics::new(),
            batch: LatencyBatch::new(),
            hot_keys: hot_keys.sampler(),
            serving_fd: AtomicI32::new(-1),
            flash_waker: std::sync::OnceLock::new(),
        }
    }

    /// Gives every request noted since the last batch the time since `started` (a
    /// [`monotonic_nanos`] read after the receive that brought them in), now that their replies
    /// are sent.
    #[inline]
    pub fn finish_batch(&self, started: u64) {
        if !self.batch.is_empty() {
            let elapsed = monotonic_nanos().saturating_sub(started);
            self.batch.finish(&self.metrics, elapsed);
        }
    }
}

/// The monotonic clock in nanoseconds, for batch latencies. `Instant::now` plus
/// `elapsed().as_nanos()` costs ~80 more instructions per unpipelined request (callgrind) in
/// `Duration`'s checked arithmetic. (rustix's own vDSO reader would be cheaper still, but it
/// crashes under valgrind, which the instruction counts rely on.)
#[inline]
pub fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration, and
    // CLOCK_MONOTONIC always exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_clock_goes_forward_with_time() {
        let started = monotonic_nanos();
        assert!(started > 0);
        // nanosleep sleeps at least this long, measured on CLOCK_MONOTONIC.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = monotonic_nanos();
        assert!(later - started >= 2_000_000, "{started} {later}");
    }
}
