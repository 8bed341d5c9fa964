//! What the server shows about itself, built on `tern_admin`: each worker's recording state,
//! the snapshot every `stats` subcommand and the admin endpoint read (workers merged, the
//! store's numbers mapped onto tern-admin's), `stats reset`'s baseline, the sockets `stats
//! conns` lists, and the [`AdminSource`] behind `--admin-port`.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tern_admin::stats_text::{ConnAddr, ConnInfo, ConnState};
use tern_admin::{
    AdminSource, HotKeySampler, HotKeys, HotKeysReport, LatencyBatch, SegmentStats, Snapshot,
    StoreStats, WorkerMetrics,
};
use tern_store::Store;

use crate::exec::Shared;
use crate::net::{Listener, Stream};

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

/// A socket as `stats conns` lists it. A worker adds its listeners at start and each
/// connection on accept and removes it on close: the table's lock is taken then and by `stats
/// conns`, never per request.
pub struct ConnEntry {
    pub fd: i32,
    pub addr: ConnAddr,
    /// The listener a client came in on; `None` for a listener.
    pub listen_addr: Option<ConnAddr>,
    /// Server clock (unix seconds) when the socket last brought commands in; written by its
    /// worker once per wake-up that served it.
    pub last_cmd: Arc<AtomicU32>,
}

/// Each worker's sockets, one lock per worker.
pub type ConnTables = Box<[Mutex<Vec<ConnEntry>>]>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn tcp_or_unix(addr: Option<SocketAddr>, unix: Option<String>) -> ConnAddr {
    match (addr, unix) {
        (Some(a), _) => ConnAddr::Tcp(a),
        (None, path) => ConnAddr::Unix(path.unwrap_or_default()),
    }
}

impl ConnEntry {
    pub fn listener(listener: &Listener, started: u32) -> Option<ConnEntry> {
        let (fd, addr) = match listener {
            Listener::Tcp(l) => (l.as_raw_fd(), ConnAddr::Tcp(l.local_addr().ok()?)),
            Listener::Unix(l) => (
                l.as_raw_fd(),
                ConnAddr::Unix(unix_path(l.local_addr().ok()?)),
            ),
        };
        Some(ConnEntry {
            fd,
            addr,
            listen_addr: None,
            last_cmd: Arc::new(AtomicU32::new(started)),
        })
    }

    pub fn client(stream: &Stream, now: u32) -> ConnEntry {
        let (fd, addr, listen_addr) = match stream {
            Stream::Tcp(s) => (
                s.as_raw_fd(),
                tcp_or_unix(s.peer_addr().ok(), None),
                Some(tcp_or_unix(s.local_addr().ok(), None)),
            ),
            Stream::Unix(s) => {
                let local = s.local_addr().ok().map(unix_path);
                (
                    s.as_raw_fd(),
                    // memcached prints a unix client's address as the socket's path too.
                    tcp_or_unix(None, local.clone()),
                    Some(tcp_or_unix(None, local)),
                )
            }
        };
        ConnEntry {
            fd,
            addr,
            listen_addr,
            last_cmd: Arc::new(AtomicU32::new(now)),
        }
    }
}

fn unix_path(addr: std::os::unix::net::SocketAddr) -> String {
    addr.as_pathname()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Seconds of CPU time (user, system) of this process.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// The store's numbers in tern-admin's terms. The store counts bytes of segments in use and of
/// live items (with headers); the rest of a used segment is dead space: items deleted or
/// overwritten and not yet compacted away, and the unwritten end of each segment being filled.
pub fn store_stats(store: &Store) -> StoreStats {
    let s = store.stats();
    let segment_bytes = store.segment_size() as u64;
    let segments_total = store.config().heap_bytes as u64 / segment_bytes;
    let segments_used = s.heap_used / segment_bytes;
    StoreStats {
        items: s.curr_items,
        total_items: s.total_items,
        bytes: s.bytes,
        limit_bytes: s.limit_maxbytes,
        evictions: s.evictions,
        reclaimed: s.reclaimed,
        expired_unfetched: s.expired_unfetched,
        evicted_unfetched: s.evicted_unfetched,
        oldest_item_age_seconds: u64::from(s.oldest_item_age),
        segments: SegmentStats {
            segment_bytes,
            segments_total,
            segments_free: segments_total.saturating_sub(segments_used),
            live_bytes: s.item_bytes_with_headers,
            dead_bytes: s.heap_used.saturating_sub(s.item_bytes_with_headers),
            merges: s.merges,
            segments_expired: s.reclaimed_segments,
        },
    }
}

impl Shared {
    /// Every counter as it stands (what `/metrics` shows: Prometheus counters only go up).
    pub fn snapshot(&self) -> Snapshot {
        let now = self.store.clock().now();
        let (user, system) = rusage();
        Snapshot {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_seconds: u64::from(now.saturating_sub(self.started)),
            time_unix_seconds: u64::from(now),
            rusage_user_seconds: user,
            rusage_system_seconds: system,
            max_connections: self.settings.conn_limit as u64,
            accepting_connections: !self.shutdown.load(Ordering::Relaxed),
            workers: self.workers.iter().map(|w| w.metrics.snapshot()).collect(),
            store: store_stats(&self.store),
        }
    }

    /// What the `stats` family shows: counters since the last `stats reset`.
    pub fn stats_snapshot(&self) -> Snapshot {
        let now = self.snapshot();
        match &*lock(&self.stats_baseline) {
            Some(baseline) => now.since(baseline),
            None => now,
        }
    }

    /// `stats reset`: later `stats` count from here; nothing is written into the workers'
    /// counters (only they write those) or the store's.
    pub fn reset_stats(&self) {
        let now = self.snapshot();
        *lock(&self.stats_baseline) = Some(now);
    }

    /// Every socket, for `stats conns`, ordered by descriptor as memcached lists them. The
    /// connection asking (`asker`) is parsing its command; the others wait for input.
    pub fn conns(&self, asker: i32) -> Vec<ConnInfo> {
        let now = self.store.clock().now();
        let mut conns: Vec<ConnInfo> = self
            .conn_tables
            .iter()
            .flat_map(|table| {
                lock(table)
                    .iter()
                    .map(|e| ConnInfo {
                        fd: e.fd as u64,
                        addr: e.addr.clone(),
                        listen_addr: e.listen_addr.clone(),
                        state: match (&e.listen_addr, e.fd == asker) {
                            (None, _) => ConnState::Listening,
                            (Some(_), true) => ConnState::ParseCmd,
                            (Some(_), false) => ConnState::Read,
                        },
                        secs_since_last_cmd: u64::from(
                            now.saturating_sub(e.last_cmd.load(Ordering::Relaxed)),
                        ),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        conns.sort_by_key(|c| c.fd);
        conns
    }
}

/// The admin endpoint's view of the running server.
pub struct ServerAdmin(pub Arc<Shared>);

impl AdminSource for ServerAdmin {
    fn snapshot(&self) -> Snapshot {
        self.0.snapshot()
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.0.settings_stats()
    }

    fn hot_keys(&self, n: usize) -> HotKeysReport {
        self.0.hot_keys.top(n)
    }

    fn health(&self) -> Result<(), String> {
        if self.0.shutdown.load(Ordering::Relaxed) {
            Err("shutting down".into())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rusage_reads_this_process() {
        let (user, system) = rusage();
        assert!(user >= 0.0 && system >= 0.0);
        let spin = std::time::Instant::now();
        while spin.elapsed().as_millis() < 20 {}
        assert!(rusage().0 > user);
    }

    #[test]
    fn store_stats_map_segments() {
        let clock = Arc::new(tern_store::Clock::manual(1_700_000_000));
        let store = Store::new(
            tern_store::Config {
                heap_bytes: 4 << 20,
                segment_size: 64 << 10,
                ..tern_store::Config::default()
            },
            clock,
        )
        .unwrap();
        let empty = store_stats(&store);
        assert_eq!(empty.segments.segments_total, 64);
        assert_eq!(empty.segments.segments_free, 64);
        assert_eq!(empty.segments.heap_bytes(), 4 << 20);
        store.store(
            tern_store::StoreOp::Set,
            b"key",
            0,
            tern_store::Expiry::from_exptime(0, 1_700_000_000),
            b"value",
        );
        let one = store_stats(&store);
        assert_eq!((one.items, one.bytes), (1, 8));
        assert_eq!(one.segments.segments_used(), 1);
        assert!(one.segments.live_bytes >= 8);
        assert_eq!(
            one.segments.live_bytes + one.segments.dead_bytes,
            64 << 10,
            "a used segment is live items plus dead space"
        );
    }
}
