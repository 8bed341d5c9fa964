//! Per-worker recording: every counter a worker bumps on the request path lives in that worker's
//! own cache-line-aligned [`WorkerMetrics`], written only by the worker's thread and read by the
//! admin thread with relaxed atomic loads. Nothing shared is written per request and no lock is
//! taken; the admin side merges the workers on read ([`crate::Snapshot::totals`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A counter with a single writer: the owning worker thread.
///
/// An increment is a relaxed load and a relaxed store, which compiles to a plain add (no `lock`
/// prefix, no cache-line ping-pong), while other threads can still read it without a data race.
/// Two threads calling [`OwnedCounter::add`] on one counter would lose increments, so each
/// worker writes only its own [`WorkerMetrics`].
#[derive(Debug, Default)]
pub struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    /// Adds `n`; call only from the owning thread.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Reads the value from any thread.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $label:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order (the index of a value is `value as usize`).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// How many values there are.
            pub const COUNT: usize = $name::ALL.len();

            /// The label value used in metrics, `stats` output and JSON.
            pub fn label(self) -> &'static str {
                match self { $($name::$variant => $label),+ }
            }
        }
    };
}

label_enum! {
    /// The command a request ran, as far as metrics care. Retrieval commands are recorded once per
    /// key looked up (memcached's `cmd_get` counts keys, not commands); everything else once per
    /// command.
    Command {
        /// `get`
        Get => "get",
        /// `gets`
        Gets => "gets",
        /// `gat`
        Gat => "gat",
        /// `gats`
        Gats => "gats",
        /// `set`
        Set => "set",
        /// `add`
        Add => "add",
        /// `replace`
        Replace => "replace",
        /// `append`
        Append => "append",
        /// `prepend`
        Prepend => "prepend",
        /// `cas`
        Cas => "cas",
        /// `incr`
        Incr => "incr",
        /// `decr`
        Decr => "decr",
        /// `delete`
        Delete => "delete",
        /// `touch`
        Touch => "touch",
        /// `flush_all`
        Flush => "flush_all",
        /// meta get `mg`
        MetaGet => "mg",
        /// meta set `ms`
        MetaSet => "ms",
        /// meta delete `md`
        MetaDelete => "md",
        /// meta arithmetic `ma`, incrementing (the default mode)
        MetaIncrement => "ma_incr",
        /// meta arithmetic `ma MD`, decrementing (memcached counts it in decr_hits/decr_misses)
        MetaDecrement => "ma_decr",
        /// meta no-op `mn`
        MetaNoop => "mn",
        /// `stats` and its subcommands
        Stats => "stats",
        /// `version`, `verbosity`, `quit` and other administrative commands
        Admin => "admin",
        /// A request the parser refused: a line answered with `ERROR` / `CLIENT_ERROR`, a binary
        /// frame answered with an error status, or one refused without a reply (a bad binary
        /// magic byte, an overlong line, a UDP request cut off by its datagram)
        Invalid => "invalid",
    }
}

label_enum! {
    /// How a command ended.
    Outcome {
        /// Found the key (retrievals, delete, incr/decr, touch) or ran (flush_all, stats, ...).
        Hit => "hit",
        /// The key was not there.
        Miss => "miss",
        /// A retrieval found the item expired (memcached counts it in `get_expired` and as a
        /// miss).
        Expired => "expired",
        /// A retrieval found the item invalidated by `flush_all` (memcached's `get_flushed`,
        /// also a miss).
        Flushed => "flushed",
        /// A storage command stored its item.
        Stored => "stored",
        /// `add`/`replace`/`append`/`prepend` did not store (`NOT_STORED`).
        NotStored => "not_stored",
        /// `cas` found the item changed (`EXISTS`; memcached's `cas_badval`).
        Exists => "exists",
        /// `cas` found no item (`NOT_FOUND`).
        NotFound => "not_found",
        /// The item was larger than the item size limit (memcached's `store_too_large`).
        TooLarge => "too_large",
        /// The store could not make room (memcached's `store_no_memory`).
        NoMemory => "no_memory",
        /// Answered with `ERROR`, `CLIENT_ERROR` or another `SERVER_ERROR`.
        Error => "error",
    }
}

/// Upper bounds of the latency buckets are powers of two nanoseconds from 2^[`FIRST_BUCKET_LOG2`]
/// (128 ns) to 2^([`FIRST_BUCKET_LOG2`] + [`LATENCY_BUCKETS`] - 2) (~67 ms); the last bucket is
/// `+Inf`. Power-of-two bounds make the bucket index a `leading_zeros`, no search.
pub const FIRST_BUCKET_LOG2: u32 = 7;
/// Number of latency buckets including the final `+Inf` one.
pub const LATENCY_BUCKETS: usize = 21;

/// The bucket a latency of `nanos` falls in: the first whose upper bound is `>= nanos`.
#[inline]
pub fn latency_bucket(nanos: u64) -> usize {
    // ceil(log2(nanos)) for nanos >= 2, via the bit length of nanos - 1.
    let bits = 64 - nanos.saturating_sub(1).leading_zeros();
    (bits.saturating_sub(FIRST_BUCKET_LOG2) as usize).min(LATENCY_BUCKETS - 1)
}

/// The upper bound of bucket `i` in nanoseconds, `None` for the last (`+Inf`) bucket.
pub fn latency_bucket_bound_nanos(i: usize) -> Option<u64> {
    (i + 1 < LATENCY_BUCKETS).then(|| 1u64 << (FIRST_BUCKET_LOG2 as usize + i))
}

/// One command's latency histogram cells (non-cumulative counts per bucket, and the sum).
#[derive(Debug, Default)]
struct LatencyCells {
    buckets: [OwnedCounter; LATENCY_BUCKETS],
    sum_nanos: OwnedCounter,
}

/// Everything one worker thread records. Create one per worker where both the worker and the
/// readers reach it (tern-server keeps it in each worker's `WorkerState`, in a slice all
/// threads share), record from the worker only, read from anywhere with
/// [`WorkerMetrics::snapshot`].
///
/// Aligned to 128 bytes (two cache lines, as adjacent-line prefetch pairs them) so that two
/// workers' metrics never share a line.
#[derive(Debug)]
#[repr(align(128))]
pub struct WorkerMetrics {
    commands: [[OwnedCounter; Outcome::COUNT]; Command::COUNT],
    latency: [LatencyCells; Command::COUNT],
    wakeups: OwnedCounter,
    bytes_read: OwnedCounter,
    bytes_written: OwnedCounter,
    conns_opened: OwnedCounter,
    conns_closed: OwnedCounter,
    /// The most connections open at once (written on accept only).
    conns_peak: AtomicU64,
    conns_rejected: OwnedCounter,
    conn_yields: OwnedCounter,
    idle_kicks: OwnedCounter,
    read_buf_oom: OwnedCounter,
    /// Gauges set by the worker's buffer pool, in [`ConnBuffers`]' order.
    conn_buffers: [AtomicU64; 5],
}

/// The bytes a worker's connection buffers hold, by memcached's `stats` names: read buffers
/// allocated (held by connections or free in the pool) and write buffers held by connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnBuffers {
    /// Read buffers allocated.
    pub read_buf_count: u64,
    /// Their bytes.
    pub read_buf_bytes: u64,
    /// Bytes of those free in the pool (held by no connection).
    pub read_buf_bytes_free: u64,
    /// Write buffers held by connections.
    pub response_obj_count: u64,
    /// Their bytes (capacity).
    pub response_obj_bytes: u64,
}

impl ConnBuffers {
    fn merge(&mut self, other: &ConnBuffers) {
        self.read_buf_count += other.read_buf_count;
        self.read_buf_bytes += other.read_buf_bytes;
        self.read_buf_bytes_free += other.read_buf_bytes_free;
        self.response_obj_count += other.response_obj_count;
        self.response_obj_bytes += other.response_obj_bytes;
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            commands: std::array::from_fn(|_| std::array::from_fn(|_| OwnedCounter::default())),
            latency: std::array::from_fn(|_| LatencyCells::default()),
            wakeups: OwnedCounter::default(),
            bytes_read: OwnedCounter::default(),
            bytes_written: OwnedCounter::default(),
            conns_opened: OwnedCounter::default(),
            conns_closed: OwnedCounter::default(),
            conns_peak: AtomicU64::new(0),
            conns_rejected: OwnedCounter::default(),
            conn_yields: OwnedCounter::default(),
            idle_kicks: OwnedCounter::default(),
            read_buf_oom: OwnedCounter::default(),
            conn_buffers: Default::default(),
        }
    }
}

impl WorkerMetrics {
    /// Fresh, all-zero metrics for one worker.
    pub fn new() -> WorkerMetrics {
        WorkerMetrics::default()
    }

    /// Records one command (or one key of a multi-key retrieval) with its outcome and its
    /// server-side latency in nanoseconds. Call once per response, from the worker thread.
    #[inline]
    pub fn record(&self, command: Command, outcome: Outcome, latency_nanos: u64) {
        let c = command as usize;
        self.commands[c][outcome as usize].add(1);
        let cells = &self.latency[c];
        cells.buckets[latency_bucket(latency_nanos)].add(1);
        cells.sum_nanos.add(latency_nanos);
    }

    /// Records one command without a latency (for keys after the first of a multi-get, which
    /// share the command's single latency sample).
    #[inline]
    pub fn count(&self, command: Command, outcome: Outcome) {
        self.commands[command as usize][outcome as usize].add(1);
    }

    /// Counts one return from the event loop's poll (epoll_wait) with events to handle.
    #[inline]
    pub fn wakeup(&self) {
        self.wakeups.add(1);
    }

    /// Counts bytes read from client sockets.
    #[inline]
    pub fn read_bytes(&self, n: u64) {
        self.bytes_read.add(n);
    }

    /// Counts bytes written to client sockets.
    #[inline]
    pub fn written_bytes(&self, n: u64) {
        self.bytes_written.add(n);
    }

    /// Counts a connection this worker took on.
    #[inline]
    pub fn conn_opened(&self) {
        self.conns_opened.add(1);
        // Only this worker writes either count, so a load and a store keep the peak exact.
        let open = self.conns_opened.get() - self.conns_closed.get();
        if open > self.conns_peak.load(Ordering::Relaxed) {
            self.conns_peak.store(open, Ordering::Relaxed);
        }
    }

    /// Counts a connection this worker closed.
    #[inline]
    pub fn conn_closed(&self) {
        self.conns_closed.add(1);
    }

    /// Counts a connection refused for being over the connection limit.
    #[inline]
    pub fn conn_rejected(&self) {
        self.conns_rejected.add(1);
    }

    /// Counts a connection put back in the queue after its per-wake-up request limit (memcached's
    /// `-R`, `conn_yields`).
    #[inline]
    pub fn conn_yield(&self) {
        self.conn_yields.add(1);
    }

    /// Counts a read buffer refused for `-o read_buf_mem_limit` (memcached's `read_buf_oom`).
    #[inline]
    pub fn read_buf_oom(&self) {
        self.read_buf_oom.add(1);
    }

    /// Counts a connection closed for `-o idle_timeout` (memcached's `idle_kicks`).
    #[inline]
    pub fn idle_kick(&self) {
        self.idle_kicks.add(1);
    }

    /// Publishes the worker's connection-buffer gauges.
    pub fn set_conn_buffers(&self, b: ConnBuffers) {
        let values = [
            b.read_buf_count,
            b.read_buf_bytes,
            b.read_buf_bytes_free,
            b.response_obj_count,
            b.response_obj_bytes,
        ];
        for (cell, v) in self.conn_buffers.iter().zip(values) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    /// Reads every cell (relaxed loads: each value is exact, the set is not one instant).
    pub fn snapshot(&self) -> WorkerSnapshot {
        let mut s = WorkerSnapshot::default();
        for (c, row) in self.commands.iter().enumerate() {
            for (o, cell) in row.iter().enumerate() {
                s.commands[c][o] = cell.get();
            }
        }
        for (c, cells) in self.latency.iter().enumerate() {
            for (b, cell) in cells.buckets.iter().enumerate() {
                s.latency[c].buckets[b] = cell.get();
            }
            s.latency[c].sum_nanos = cells.sum_nanos.get();
        }
        s.wakeups = self.wakeups.get();
        s.bytes_read = self.bytes_read.get();
        s.bytes_written = self.bytes_written.get();
        // Closed before opened: a connection opening and closing between the two loads then
        // shows as open for one read rather than underflowing the count.
        let closed = self.conns_closed.get();
        s.conns_opened = self.conns_opened.get();
        s.conns_current = s.conns_opened.saturating_sub(closed);
        s.conns_peak = self.conns_peak.load(Ordering::Relaxed);
        s.conns_rejected = self.conns_rejected.get();
        s.conn_yields = self.conn_yields.get();
        s.idle_kicks = self.idle_kicks.get();
        s.read_buf_oom = self.read_buf_oom.get();
        let [a, b, c, d, e] = self
            .conn_buffers
            .each_ref()
            .map(|g| g.load(Ordering::Relaxed));
        s.conn_buffers = ConnBuffers {
            read_buf_count: a,
            read_buf_bytes: b,
            read_buf_bytes_free: c,
            response_obj_count: d,
            response_obj_bytes: e,
        };
        s
    }
}

/// Latency measured per batch instead of per request: reading the clock costs tens of
/// nanoseconds (measured by `benches/recording.rs`), too much to do twice per request, so a
/// worker notes each request's command here (about a nanosecond) and, once the batch's
/// responses are written, gives every request in it the batch's time from the read that
/// brought it in to the write that sent its answer. For pipelined clients that is the time
/// they wait for the answer.
///
/// Owned by one worker, which alone writes it (relaxed load + store, like [`OwnedCounter`]: no
/// `lock` prefix), so it can live beside the worker's other state and be written through a
/// shared reference; pairs with [`WorkerMetrics::count`] for the outcome counts.
#[derive(Debug, Default)]
pub struct LatencyBatch {
    counts: [AtomicU32; Command::COUNT],
    /// Bit `c` set when `counts[c] > 0`, so `finish` visits only the commands seen.
    seen: AtomicU32,
}

// `seen` has a bit per command.
const _: () = assert!(Command::COUNT <= 32);

impl LatencyBatch {
    /// An empty batch.
    pub fn new() -> LatencyBatch {
        LatencyBatch::default()
    }

    /// Notes one request of `command` in the current batch.
    #[inline]
    pub fn add(&self, command: Command) {
        let c = command as usize;
        let count = &self.counts[c];
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let seen = self.seen.load(Ordering::Relaxed);
        self.seen.store(seen | 1 << c, Ordering::Relaxed);
    }

    /// True when no request was noted since the last [`LatencyBatch::finish`] (so the caller
    /// can skip reading the clock).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.seen.load(Ordering::Relaxed) == 0
    }

    /// Records `latency_nanos` for every request noted since the last call, into `metrics`,
    /// and empties the batch.
    #[inline]
    pub fn finish(&self, metrics: &WorkerMetrics, latency_nanos: u64) {
        let bucket = latency_bucket(latency_nanos);
        let mut seen = self.seen.load(Ordering::Relaxed);
        self.seen.store(0, Ordering::Relaxed);
        while seen != 0 {
            let c = seen.trailing_zeros() as usize;
            seen &= seen - 1;
            let n = self.counts[c].load(Ordering::Relaxed) as u64;
            self.counts[c].store(0, Ordering::Relaxed);
            let cells = &metrics.latency[c];
            cells.buckets[bucket].add(n);
            cells.sum_nanos.add(latency_nanos.saturating_mul(n));
        }
    }
}

/// A latency histogram read out of a worker (or merged over workers): counts per bucket, not
/// cumulative, with bounds from [`latency_bucket_bound_nanos`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Count per bucket.
    pub buckets: [u64; LATENCY_BUCKETS],
    /// Sum of all recorded latencies in nanoseconds.
    pub sum_nanos: u64,
}

impl LatencyHistogram {
    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound (ns) of the bucket holding quantile `q` in 0..=1; `None` when empty or
    /// when the quantile lies in the `+Inf` bucket.
    pub fn quantile_upper_bound_nanos(&self, q: f64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return latency_bucket_bound_nanos(i);
            }
        }
        None
    }

    fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.sum_nanos += other.sum_nanos;
    }
}

/// Plain values read out of one [`WorkerMetrics`], or the sum over workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// Count per `[Command as usize][Outcome as usize]`.
    pub commands: [[u64; Outcome::COUNT]; Command::COUNT],
    /// Latency per `[Command as usize]`.
    pub latency: [LatencyHistogram; Command::COUNT],
    /// Event-loop wake-ups.
    pub wakeups: u64,
    /// Bytes read from clients.
    pub bytes_read: u64,
    /// Bytes written to clients.
    pub bytes_written: u64,
    /// Connections opened.
    pub conns_opened: u64,
    /// Connections open at the time of the read.
    pub conns_current: u64,
    /// The most connections open at once since start (summed over workers: the connection
    /// slots they have grown to; kept as it is by `since`).
    pub conns_peak: u64,
    /// Connections rejected over the limit.
    pub conns_rejected: u64,
    /// Connections that yielded after their per-wake-up request limit.
    pub conn_yields: u64,
    /// Connections closed for being idle past `-o idle_timeout`.
    pub idle_kicks: u64,
    /// Read buffers refused for `-o read_buf_mem_limit`.
    pub read_buf_oom: u64,
    /// Connection buffers (gauges, kept as they are by `since`).
    pub conn_buffers: ConnBuffers,
}

impl Default for WorkerSnapshot {
    fn default() -> Self {
        WorkerSnapshot {
            commands: [[0; Outcome::COUNT]; Command::COUNT],
            latency: [LatencyHistogram::default(); Command::COUNT],
            wakeups: 0,
            bytes_read: 0,
            bytes_written: 0,
            conns_opened: 0,
            conns_current: 0,
            conns_peak: 0,
            conns_rejected: 0,
            conn_yields: 0,
            idle_kicks: 0,
            read_buf_oom: 0,
            conn_buffers: ConnBuffers::default(),
        }
    }
}

impl WorkerSnapshot {
    /// The count of `command` ending in `outcome`.
    pub fn get(&self, command: Command, outcome: Outcome) -> u64 {
        self.commands[command as usize][outcome as usize]
    }

    /// The count of `command` over all outcomes.
    pub fn command_total(&self, command: Command) -> u64 {
        self.commands[command as usize].iter().sum()
    }

    /// Requests handled: all commands over all outcomes.
    pub fn requests(&self) -> u64 {
        self.commands.iter().flatten().sum()
    }

    /// Connections open at the time of the read.
    pub fn current_connections(&self) -> u64 {
        self.conns_current
    }

    /// The counters accumulated since `baseline` was read (an earlier read of the same worker),
    /// for memcached's `stats reset`; the open-connection gauge is kept as it is.
    pub fn since(&self, baseline: &WorkerSnapshot) -> WorkerSnapshot {
        let mut d = self.clone();
        for (a, b) in d.commands.iter_mut().zip(baseline.commands.iter()) {
            for (x, y) in a.iter_mut().zip(b.iter()) {
                *x = x.saturating_sub(*y);
            }
        }
        for (a, b) in d.latency.iter_mut().zip(baseline.latency.iter()) {
            for (x, y) in a.buckets.iter_mut().zip(b.buckets.iter()) {
                *x = x.saturating_sub(*y);
            }
            a.sum_nanos = a.sum_nanos.saturating_sub(b.sum_nanos);
        }
        d.wakeups = d.wakeups.saturating_sub(baseline.wakeups);
        d.bytes_read = d.bytes_read.saturating_sub(baseline.bytes_read);
        d.bytes_written = d.bytes_written.saturating_sub(baseline.bytes_written);
        d.conns_opened = d.conns_opened.saturating_sub(baseline.conns_opened);
        d.conns_rejected = d.conns_rejected.saturating_sub(baseline.conns_rejected);
        d.conn_yields = d.conn_yields.saturating_sub(baseline.conn_yields);
        d.idle_kicks = d.idle_kicks.saturating_sub(baseline.idle_kicks);
        d.read_buf_oom = d.read_buf_oom.saturating_sub(baseline.read_buf_oom);
        d
    }

    /// The sum of `workers`: how the admin side merges on read.
    pub fn merge<'a>(workers: impl IntoIterator<Item = &'a WorkerSnapshot>) -> WorkerSnapshot {
        let mut total = WorkerSnapshot::default();
        for w in workers {
            for (a, b) in total.commands.iter_mut().zip(w.commands.iter()) {
                for (x, y) in a.iter_mut().zip(b.iter()) {
                    *x += y;
                }
            }
            for (a, b) in total.latency.iter_mut().zip(w.latency.iter()) {
                a.merge(b);
            }
            total.wakeups += w.wakeups;
            total.bytes_read += w.bytes_read;
            total.bytes_written += w.bytes_written;
            total.conns_opened += w.conns_opened;
            total.conns_current += w.conns_current;
            total.conns_peak += w.conns_peak;
            total.conns_rejected += w.conns_rejected;
            total.conn_yields += w.conn_yields;
            total.idle_kicks += w.idle_kicks;
            total.read_buf_oom += w.read_buf_oom;
            total.conn_buffers.merge(&w.conn_buffers);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_hold_their_values() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(128), 0);
        assert_eq!(latency_bucket(129), 1);
        assert_eq!(latency_bucket(256), 1);
        assert_eq!(latency_bucket(1_000), 3); // <= 1024
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        for ns in [1u64, 127, 128, 129, 1000, 65_536, 10_000_000, 67_108_864] {
            let b = latency_bucket(ns);
            let upper = latency_bucket_bound_nanos(b).unwrap();
            assert!(ns <= upper, "{ns} above bucket {b} bound {upper}");
            if b > 0 {
                assert!(ns > latency_bucket_bound_nanos(b - 1).unwrap());
            }
        }
        assert_eq!(latency_bucket(67_108_865), LATENCY_BUCKETS - 1);
        assert_eq!(latency_bucket_bound_nanos(LATENCY_BUCKETS - 1), None);
    }

    #[test]
    fn workers_merge_on_read() {
        let a = WorkerMetrics::new();
        let b = WorkerMetrics::new();
        a.record(Command::Get, Outcome::Hit, 500);
        a.count(Command::Get, Outcome::Miss);
        b.record(Command::Get, Outcome::Hit, 2_000);
        b.record(Command::Set, Outcome::Stored, 1_000);
        a.wakeup();
        b.read_bytes(10);
        b.written_bytes(7);
        b.conn_yield();
        a.conn_opened();
        a.conn_opened();
        a.conn_closed();
        let total = WorkerSnapshot::merge(&[a.snapshot(), b.snapshot()]);
        assert_eq!(total.get(Command::Get, Outcome::Hit), 2);
        assert_eq!(total.get(Command::Get, Outcome::Miss), 1);
        assert_eq!(total.command_total(Command::Set), 1);
        assert_eq!(total.requests(), 4);
        assert_eq!(total.wakeups, 1);
        assert_eq!((total.bytes_read, total.bytes_written), (10, 7));
        assert_eq!(total.conn_yields, 1);
        assert_eq!(total.current_connections(), 1);
        assert_eq!(total.conns_opened, 2);

        let baseline = a.snapshot();
        a.record(Command::Get, Outcome::Hit, 5_000);
        a.conn_opened();
        let since = a.snapshot().since(&baseline);
        assert_eq!(since.get(Command::Get, Outcome::Hit), 1);
        assert_eq!(since.get(Command::Get, Outcome::Miss), 0);
        assert_eq!(since.latency[Command::Get as usize].sum_nanos, 5_000);
        assert_eq!(since.wakeups, 0);
        assert_eq!(since.conns_opened, 1);
        assert_eq!(since.current_connections(), 2);
        let get = total.latency[Command::Get as usize];
        assert_eq!(get.count(), 2);
        assert_eq!(get.sum_nanos, 2_500);
        assert_eq!(get.quantile_upper_bound_nanos(0.5), Some(512));
        assert_eq!(get.quantile_upper_bound_nanos(1.0), Some(2_048));
    }

    #[test]
    fn batch_latency_goes_to_each_command_seen() {
        let m = WorkerMetrics::new();
        let batch = LatencyBatch::new();
        assert!(batch.is_empty());
        batch.add(Command::Get);
        batch.add(Command::Get);
        batch.add(Command::Set);
        assert!(!batch.is_empty());
        batch.finish(&m, 3_000);
        assert!(batch.is_empty());
        batch.finish(&m, 1_000_000); // an empty batch records nothing
        batch.add(Command::Get);
        batch.finish(&m, 100);
        let s = m.snapshot();
        let get = s.latency[Command::Get as usize];
        assert_eq!(get.count(), 3);
        assert_eq!(get.sum_nanos, 6_100);
        assert_eq!(get.buckets[latency_bucket(3_000)], 2);
        assert_eq!(get.buckets[0], 1);
        assert_eq!(s.latency[Command::Set as usize].count(), 1);
        assert_eq!(s.latency[Command::Delete as usize].count(), 0);
    }

    #[test]
    fn scrapes_during_recording_only_go_up() {
        use std::sync::Arc;
        let workers: Vec<Arc<WorkerMetrics>> =
            (0..2).map(|_| Arc::new(WorkerMetrics::new())).collect();
        let per_worker = 200_000u64;
        let threads: Vec<_> = workers
            .iter()
            .map(|w| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..per_worker {
                        w.record(Command::Get, Outcome::Hit, i & 0xfff);
                    }
                })
            })
            .collect();
        let mut last = 0;
        while threads.iter().any(|t| !t.is_finished()) {
            let total =
                WorkerSnapshot::merge(&workers.iter().map(|w| w.snapshot()).collect::<Vec<_>>());
            let hits = total.get(Command::Get, Outcome::Hit);
            assert!(hits >= last, "went down from {last} to {hits}");
            assert!(hits <= 2 * per_worker);
            last = hits;
        }
        for t in threads {
            t.join().unwrap();
        }
        let total =
            WorkerSnapshot::merge(&workers.iter().map(|w| w.snapshot()).collect::<Vec<_>>());
        assert_eq!(total.get(Command::Get, Outcome::Hit), 2 * per_worker);
        assert_eq!(total.latency[Command::Get as usize].count(), 2 * per_worker);
    }

    #[test]
    fn reads_from_another_thread_see_owner_writes() {
        let m = std::sync::Arc::new(WorkerMetrics::new());
        let w = m.clone();
        std::thread::spawn(move || {
            for _ in 0..10_000 {
                w.record(Command::Delete, Outcome::Miss, 300);
            }
        })
        .join()
        .unwrap();
        assert_eq!(m.snapshot().get(Command::Delete, Outcome::Miss), 10_000);
        assert_eq!(std::mem::align_of::<WorkerMetrics>(), 128);
    }
}
