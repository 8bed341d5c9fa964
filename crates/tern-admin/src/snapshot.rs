//! What the server hands over when scraped: a [`Snapshot`] of plain values, and the
//! memcached-compatible counters derived from it.

use crate::worker::{Command, Outcome, WorkerSnapshot};

/// tern's segment storage, as plain numbers the store reports.
///
/// A segment is a fixed-size slab of memory items are appended to (as in Pelikan's segcache);
/// whole segments are expired or evicted at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SegmentStats {
    /// Size of one segment in bytes.
    pub segment_bytes: u64,
    /// Segments of the heap opened so far (in use or free): `-m`'s, more once `cache_memlimit`
    /// raised the limit past it.
    pub segments_total: u64,
    /// Segments holding no items, ready to be written.
    pub segments_free: u64,
    /// Bytes of segments whose memory may be resident: written since the heap was opened and
    /// not given back since (memcached's `total_malloced`: it grows as items need memory and
    /// falls when a lowered `cache_memlimit` gives free memory back).
    pub malloced_bytes: u64,
    /// Bytes of items that can still be read (headers, keys, values).
    pub live_bytes: u64,
    /// Bytes in used segments not holding live items: deleted or overwritten items not yet
    /// reclaimed, and the unwritten end of the segments items are being appended to.
    pub dead_bytes: u64,
    /// Merge evictions since start: each compacts the oldest few segments of a TTL group into
    /// one, keeping the items read since they were written and evicting the rest.
    pub merges: u64,
    /// Segments freed because every item in them expired, since start.
    pub segments_expired: u64,
}

impl SegmentStats {
    /// Segments holding items.
    pub fn segments_used(&self) -> u64 {
        self.segments_total.saturating_sub(self.segments_free)
    }

    /// Bytes of the heap opened for segments.
    pub fn heap_bytes(&self) -> u64 {
        self.segments_total * self.segment_bytes
    }
}

/// Store-wide numbers the server reads from its store at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Items stored now (memcached's `curr_items`), on flash too.
    pub items: u64,
    /// Items stored since start (memcached's `total_items`).
    pub total_items: u64,
    /// Bytes used by items now (memcached's `bytes`).
    pub bytes: u64,
    /// The memory limit, `-m` (memcached's `limit_maxbytes`).
    pub limit_bytes: u64,
    /// Bytes of the hash index, counted inside the memory limit (memcached's `hash_bytes`).
    pub index_bytes: u64,
    /// The most slots the hash index has had (full or not; across a warm restart too), for
    /// `hash_power_level`.
    pub index_slots: u64,
    /// Live items removed to make room (memcached's `evictions`).
    pub evictions: u64,
    /// Expired items whose memory was taken back (memcached's `reclaimed`).
    pub reclaimed: u64,
    /// Expired items taken back that were never read (memcached's `expired_unfetched`).
    pub expired_unfetched: u64,
    /// Evicted items that were never read (memcached's `evicted_unfetched`).
    pub evicted_unfetched: u64,
    /// Seconds an item not read again has stayed so far: the age of the oldest segment at the
    /// eviction end (memcached's `stats items` `age`, the age of its LRU tail).
    pub oldest_item_age_seconds: u64,
    /// The segment layout.
    pub segments: SegmentStats,
    /// Items on flash (a flash tier's index entries; 0 without one).
    pub items_on_flash: u64,
    /// Items in memory the flash tier would take by size (its starting `ext_item_size`; 0
    /// without one).
    pub items_flash_sized: u64,
    /// Whether the server has a flash tier (`stats items` then reports three classes).
    pub flash_tier: bool,
}

/// Everything `/metrics`, `/stats` and `stats` show, filled by the server when asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The server's version string, e.g. `0.1.0`.
    pub version: String,
    /// The server's process id.
    pub pid: u32,
    /// Seconds since the server started.
    pub uptime_seconds: u64,
    /// The server's clock, unix seconds.
    pub time_unix_seconds: u64,
    /// User CPU time of the process, seconds (from getrusage).
    pub rusage_user_seconds: f64,
    /// System CPU time of the process, seconds (from getrusage).
    pub rusage_system_seconds: f64,
    /// The connection limit, `-c`.
    pub max_connections: u64,
    /// Whether the listener is accepting connections (memcached's `accepting_conns`): not while
    /// stopping, nor while accepts are stopped (at `-c` without maxconns_fast, or out of
    /// descriptors).
    pub accepting_connections: bool,
    /// Times the server stopped accepting new connections: at `-c` without maxconns_fast, or out
    /// of descriptors (memcached's `listen_disabled_num`).
    pub listen_disabled_num: u64,
    /// Microseconds spent with accepts stopped, counted as each stop ends (memcached's
    /// `time_in_listen_disabled_us`).
    pub time_in_listen_disabled_us: u64,
    /// `-o idle_timeout` in seconds, 0 when off: `stats` shows `idle_kicks` only while it is on,
    /// as memcached does.
    pub idle_timeout_seconds: u64,
    /// One entry per worker thread, in worker order, from [`crate::WorkerMetrics::snapshot`].
    pub workers: Vec<WorkerSnapshot>,
    /// The store's numbers.
    pub store: StoreStats,
    /// With a memory file (`-e`): what the start restored; `None` without one.
    pub restore: Option<RestoreStats>,
    /// The server-wide figures of memcached's `stats` that are neither a worker's counters
    /// nor the store's.
    pub server: ServerStats,
}

/// Server-wide figures the server reads when asked (none is counted per request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// The event mechanism the workers use (`epoll` or `uring`), shown as memcached's
    /// `libevent` (its event library's version): tern uses no libevent.
    pub event_engine: String,
    /// Listening sockets (TCP, UDP, unix), counted in `connection_structures` as memcached
    /// counts its listening connections.
    pub listeners: u64,
    /// Descriptors the process holds that are not client connections (memcached's
    /// `reserved_fds`): listeners, event queues, wake-up descriptors, files.
    pub reserved_fds: u64,
    /// The smallest `hashpower` memcached would report (`-o hashpower`, else 16): see
    /// [`hash_power_level`].
    pub hashpower_init: u32,
    /// `watch` connections open now (memcached's `log_watchers`).
    pub log_watchers: u64,
    /// Log lines the workers produced for watchers (memcached's `log_worker_written`).
    pub log_lines_written: u64,
    /// Lines sent to watchers, one per watcher (memcached's `log_watcher_sent`).
    pub log_lines_sent: u64,
    /// Lines a watcher missed because its socket was full (memcached's `log_watcher_skipped`).
    pub log_lines_skipped: u64,
}

/// memcached's `hash_power_level` for tern's index: the power of two of the most slots the
/// index has had (rounded down), never under `init`. memcached's table has 2^level buckets,
/// starts at `hashpower_init` (16), doubles when items pass 1.5 x 2^level, never shrinks and is
/// restored at its size by a warm restart; tern's index starts with a few buckets per shard and
/// grows in 1.125x steps at 85% full, so its level follows the items the same way (~2^17 items
/// stored: 17), and its peak is kept (and saved with `-e`) as memcached's table is.
pub fn hash_power_level(index_slots: u64, init: u32) -> u32 {
    index_slots.checked_ilog2().unwrap_or(0).max(init)
}

/// A warm restart's outcome (`-e`), shown in `stats` as `restored_items` and
/// `restore_time_us` (memcached has no such lines; `_us` as in its `time_in_listen_disabled_us`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Live items restored from the memory file (0 when the cache started empty).
    pub items: u64,
    /// Microseconds from mapping the file to the store being ready.
    pub micros: u64,
}

impl Snapshot {
    /// The workers merged.
    pub fn totals(&self) -> WorkerSnapshot {
        WorkerSnapshot::merge(&self.workers)
    }

    /// This snapshot with its counters taken relative to `baseline`, an earlier snapshot saved
    /// by `stats reset`: command, byte, connection, item, eviction and expiry counts restart
    /// from the reset, while gauges (items, bytes, open connections, segments) and identity
    /// fields stay as they are. For the `stats` family only: `/metrics` keeps raw counters, as
    /// Prometheus counters must only go up.
    pub fn since(&self, baseline: &Snapshot) -> Snapshot {
        let mut d = self.clone();
        d.listen_disabled_num = d
            .listen_disabled_num
            .saturating_sub(baseline.listen_disabled_num);
        d.time_in_listen_disabled_us = d
            .time_in_listen_disabled_us
            .saturating_sub(baseline.time_in_listen_disabled_us);
        for (w, b) in d.workers.iter_mut().zip(baseline.workers.iter()) {
            *w = w.since(b);
        }
        let (st, bs) = (&mut d.store, &baseline.store);
        st.total_items = st.total_items.saturating_sub(bs.total_items);
        st.evictions = st.evictions.saturating_sub(bs.evictions);
        st.reclaimed = st.reclaimed.saturating_sub(bs.reclaimed);
        st.expired_unfetched = st.expired_unfetched.saturating_sub(bs.expired_unfetched);
        st.evicted_unfetched = st.evicted_unfetched.saturating_sub(bs.evicted_unfetched);
        let (sg, bg) = (&mut st.segments, &bs.segments);
        sg.merges = sg.merges.saturating_sub(bg.merges);
        sg.segments_expired = sg.segments_expired.saturating_sub(bg.segments_expired);
        let (sv, bv) = (&mut d.server, &baseline.server);
        sv.log_lines_written = sv.log_lines_written.saturating_sub(bv.log_lines_written);
        sv.log_lines_sent = sv.log_lines_sent.saturating_sub(bv.log_lines_sent);
        sv.log_lines_skipped = sv.log_lines_skipped.saturating_sub(bv.log_lines_skipped);
        d
    }
}

/// The command counters memcached's `stats` reports, derived from tern's per-command outcomes
/// with memcached's accounting (see the field docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemcachedCounters {
    /// Keys looked up by get, gets and mg (memcached counts gat/gats in `cmd_touch` only).
    pub cmd_get: u64,
    /// Storage commands (set, add, replace, append, prepend, cas, ms), any result.
    pub cmd_set: u64,
    /// flush_all commands.
    pub cmd_flush: u64,
    /// touch, gat and gats.
    pub cmd_touch: u64,
    /// Meta commands (mg, ms, md, ma, mn).
    pub cmd_meta: u64,
    /// get/gets/mg keys found.
    pub get_hits: u64,
    /// get/gets/mg keys not found, expired or flushed.
    pub get_misses: u64,
    /// Retrievals (any command) that found their item expired.
    pub get_expired: u64,
    /// Retrievals (any command) that found their item flushed.
    pub get_flushed: u64,
    /// delete/md that found the key.
    pub delete_hits: u64,
    /// delete/md that did not.
    pub delete_misses: u64,
    /// incr (and ma, which memcached also counts as incr unless in decr mode; tern counts all
    /// ma here) that found the key.
    pub incr_hits: u64,
    /// incr/ma that did not.
    pub incr_misses: u64,
    /// decr that found the key.
    pub decr_hits: u64,
    /// decr that did not.
    pub decr_misses: u64,
    /// cas that stored.
    pub cas_hits: u64,
    /// cas on a missing key.
    pub cas_misses: u64,
    /// cas whose unique did not match.
    pub cas_badval: u64,
    /// touch/gat/gats that found the key.
    pub touch_hits: u64,
    /// touch/gat/gats that did not (missing, expired or flushed).
    pub touch_misses: u64,
    /// Stores refused as larger than the item size limit.
    pub store_too_large: u64,
    /// Stores refused for lack of memory.
    pub store_no_memory: u64,
}

impl MemcachedCounters {
    /// Derives memcached's counters from merged worker counts.
    pub fn from_totals(t: &WorkerSnapshot) -> MemcachedCounters {
        use Command::*;
        let total = |cmds: &[Command]| cmds.iter().map(|&c| t.command_total(c)).sum::<u64>();
        let count = |cmds: &[Command], o: Outcome| cmds.iter().map(|&c| t.get(c, o)).sum::<u64>();
        let gets = [Get, Gets, MetaGet];
        let touches = [Touch, Gat, Gats];
        let incrs = [Incr, MetaIncrement];
        let decrs = [Decr, MetaDecrement];
        let all = |o: Outcome| Command::ALL.iter().map(|&c| t.get(c, o)).sum::<u64>();
        let missed = |cmds: &[Command]| {
            count(cmds, Outcome::Miss)
                + count(cmds, Outcome::Expired)
                + count(cmds, Outcome::Flushed)
        };
        MemcachedCounters {
            cmd_get: total(&[Get, Gets, MetaGet]),
            cmd_set: total(&[Set, Add, Replace, Append, Prepend, Cas, MetaSet]),
            cmd_flush: total(&[Flush]),
            cmd_touch: total(&touches),
            cmd_meta: total(&[
                MetaGet,
                MetaSet,
                MetaDelete,
                MetaIncrement,
                MetaDecrement,
                MetaNoop,
            ]),
            get_hits: count(&gets, Outcome::Hit),
            get_misses: missed(&gets),
            get_expired: all(Outcome::Expired),
            get_flushed: all(Outcome::Flushed),
            delete_hits: count(&[Delete, MetaDelete], Outcome::Hit),
            delete_misses: count(&[Delete, MetaDelete], Outcome::Miss),
            incr_hits: count(&incrs, Outcome::Hit),
            incr_misses: count(&incrs, Outcome::Miss),
            decr_hits: count(&decrs, Outcome::Hit),
            decr_misses: count(&decrs, Outcome::Miss),
            cas_hits: t.get(Cas, Outcome::Stored),
            cas_misses: t.get(Cas, Outcome::NotFound),
            cas_badval: t.get(Cas, Outcome::Exists),
            touch_hits: count(&touches, Outcome::Hit),
            touch_misses: missed(&touches),
            store_too_large: all(Outcome::TooLarge),
            store_no_memory: all(Outcome::NoMemory),
        }
    }

    /// The `(command, status, value)` series of memcached_exporter's `memcached_commands_total`,
    /// computed as the exporter computes them from `stats` (set/hit is `cmd_set` minus cas).
    pub fn exporter_series(&self) -> Vec<(&'static str, &'static str, u64)> {
        let cas_all = self.cas_hits + self.cas_misses + self.cas_badval;
        vec![
            ("get", "hit", self.get_hits),
            ("get", "miss", self.get_misses),
            ("delete", "hit", self.delete_hits),
            ("delete", "miss", self.delete_misses),
            ("incr", "hit", self.incr_hits),
            ("incr", "miss", self.incr_misses),
            ("decr", "hit", self.decr_hits),
            ("decr", "miss", self.decr_misses),
            ("cas", "hit", self.cas_hits),
            ("cas", "miss", self.cas_misses),
            ("cas", "badval", self.cas_badval),
            ("touch", "hit", self.touch_hits),
            ("touch", "miss", self.touch_misses),
            ("flush", "hit", self.cmd_flush),
            ("set", "hit", self.cmd_set.saturating_sub(cas_all)),
        ]
    }
}

/// memcached's general `stats` as `(name, value)` pairs, every key of memcached 1.6.45's
/// (built without its proxy, extstore off) in its order, except `auth_cmds`, `auth_errors` and
/// the `ssl_*` lines, which the server adds where memcached prints them. Keys for machinery
/// tern does not have (slab rebalancing, the LRU maintainer and crawler, NAPI ids) are 0;
/// docs/observability.md says why for each.
pub fn general_stats(s: &Snapshot) -> Vec<(&'static str, String)> {
    let t = s.totals();
    let m = MemcachedCounters::from_totals(&t);
    let rusage = |secs: f64| {
        let micros = (secs * 1e6).round() as u64;
        format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
    };
    let n = |v: u64| v.to_string();
    let zero = || "0".to_string();
    let v = &s.server;
    let mut stats = vec![
        ("pid", s.pid.to_string()),
        ("uptime", n(s.uptime_seconds)),
        ("time", n(s.time_unix_seconds)),
        ("version", s.version.clone()),
        ("libevent", v.event_engine.clone()),
        ("pointer_size", (usize::BITS).to_string()),
        ("rusage_user", rusage(s.rusage_user_seconds)),
        ("rusage_system", rusage(s.rusage_system_seconds)),
        ("max_connections", n(s.max_connections)),
        ("curr_connections", n(t.current_connections())),
        ("total_connections", n(t.conns_opened)),
        ("rejected_connections", n(t.conns_rejected)),
        ("connection_structures", n(v.listeners + t.conns_peak)),
        // Replies are not limited by read_buf_mem_limit: see docs/observability.md.
        ("response_obj_oom", zero()),
        ("response_obj_count", n(t.conn_buffers.response_obj_count)),
        ("response_obj_bytes", n(t.conn_buffers.response_obj_bytes)),
        ("read_buf_count", n(t.conn_buffers.read_buf_count)),
        ("read_buf_bytes", n(t.conn_buffers.read_buf_bytes)),
        ("read_buf_bytes_free", n(t.conn_buffers.read_buf_bytes_free)),
        ("read_buf_oom", n(t.read_buf_oom)),
        ("reserved_fds", n(v.reserved_fds)),
        ("cmd_get", n(m.cmd_get)),
        ("cmd_set", n(m.cmd_set)),
        ("cmd_flush", n(m.cmd_flush)),
        ("cmd_touch", n(m.cmd_touch)),
        ("cmd_meta", n(m.cmd_meta)),
        ("get_hits", n(m.get_hits)),
        ("get_misses", n(m.get_misses)),
        ("get_expired", n(m.get_expired)),
        ("get_flushed", n(m.get_flushed)),
        ("delete_misses", n(m.delete_misses)),
        ("delete_hits", n(m.delete_hits)),
        ("incr_misses", n(m.incr_misses)),
        ("incr_hits", n(m.incr_hits)),
        ("decr_misses", n(m.decr_misses)),
        ("decr_hits", n(m.decr_hits)),
        ("cas_misses", n(m.cas_misses)),
        ("cas_hits", n(m.cas_hits)),
        ("cas_badval", n(m.cas_badval)),
        ("touch_hits", n(m.touch_hits)),
        ("touch_misses", n(m.touch_misses)),
        ("store_too_large", n(m.store_too_large)),
        ("store_no_memory", n(m.store_no_memory)),
    ];
    if s.idle_timeout_seconds > 0 {
        stats.push(("idle_kicks", n(t.idle_kicks)));
    }
    stats.extend([
        ("bytes_read", n(t.bytes_read)),
        ("bytes_written", n(t.bytes_written)),
        ("limit_maxbytes", n(s.store.limit_bytes)),
        ("accepting_conns", n(s.accepting_connections as u64)),
        ("listen_disabled_num", n(s.listen_disabled_num)),
        (
            "time_in_listen_disabled_us",
            n(s.time_in_listen_disabled_us),
        ),
        ("threads", n(s.workers.len() as u64)),
        ("conn_yields", n(t.conn_yields)),
        (
            "hash_power_level",
            hash_power_level(s.store.index_slots, v.hashpower_init).to_string(),
        ),
        ("hash_bytes", n(s.store.index_bytes)),
        // A shard's table is rebuilt under its lock: no expansion runs beside requests.
        ("hash_is_expanding", zero()),
        ("slab_reassign_rescues", zero()),
        ("slab_reassign_chunk_rescues", zero()),
        ("slab_reassign_inline_reclaim", zero()),
        ("slab_reassign_busy_items", zero()),
        ("slab_reassign_busy_deletes", zero()),
        ("slab_reassign_busy_nomem", zero()),
        ("slab_reassign_last_busy_status", "none".to_string()),
        ("slab_reassign_running", zero()),
        ("slabs_moved", zero()),
        ("lru_crawler_running", zero()),
        ("lru_crawler_starts", zero()),
        ("lru_maintainer_juggles", zero()),
        ("malloc_fails", zero()),
        // Workers send log lines themselves: no buffer between them and the watchers to drop.
        ("log_worker_dropped", zero()),
        ("log_worker_written", n(v.log_lines_written)),
        ("log_watcher_skipped", n(v.log_lines_skipped)),
        ("log_watcher_sent", n(v.log_lines_sent)),
        ("log_watchers", n(v.log_watchers)),
        ("unexpected_napi_ids", zero()),
        ("round_robin_fallback", zero()),
        ("bytes", n(s.store.bytes)),
        ("curr_items", n(s.store.items)),
        ("total_items", n(s.store.total_items)),
        // Free segments are memory no class holds yet, as memcached's global page pool.
        ("slab_global_page_pool", n(s.store.segments.segments_free)),
        ("expired_unfetched", n(s.store.expired_unfetched)),
        ("evicted_unfetched", n(s.store.evicted_unfetched)),
        ("evicted_active", zero()),
        ("evictions", n(s.store.evictions)),
        ("reclaimed", n(s.store.reclaimed)),
        ("crawler_reclaimed", zero()),
        ("crawler_items_checked", zero()),
        ("lrutail_reflocked", zero()),
        ("moves_to_cold", zero()),
        ("moves_to_warm", zero()),
        ("moves_within_lru", zero()),
        ("direct_reclaims", zero()),
        ("lru_bumps_dropped", zero()),
    ]);
    if let Some(restore) = s.restore {
        stats.push(("restored_items", n(restore.items)));
        stats.push(("restore_time_us", n(restore.micros)));
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::WorkerMetrics;

    #[test]
    fn memcached_accounting() {
        let w = WorkerMetrics::new();
        w.record(Command::Get, Outcome::Hit, 1);
        w.count(Command::Gets, Outcome::Miss);
        w.record(Command::Gat, Outcome::Hit, 1);
        w.record(Command::Set, Outcome::Stored, 1);
        w.record(Command::Add, Outcome::NotStored, 1);
        w.record(Command::Cas, Outcome::Exists, 1);
        w.record(Command::Cas, Outcome::Stored, 1);
        w.record(Command::Set, Outcome::TooLarge, 1);
        w.record(Command::Flush, Outcome::Hit, 1);
        w.count(Command::Get, Outcome::Expired);
        w.count(Command::MetaGet, Outcome::Flushed);
        let m = MemcachedCounters::from_totals(&w.snapshot());
        // gat counts as a touch, not a get, as in memcached 1.6.18.
        assert_eq!((m.cmd_get, m.get_hits, m.get_misses), (4, 1, 3));
        assert_eq!((m.get_expired, m.get_flushed), (1, 1));
        assert_eq!((m.cmd_touch, m.touch_hits), (1, 1));
        assert_eq!(m.cmd_set, 5);
        assert_eq!((m.cas_hits, m.cas_badval, m.cas_misses), (1, 1, 0));
        assert_eq!(m.store_too_large, 1);
        let series = m.exporter_series();
        assert!(series.contains(&("set", "hit", 3)));
        assert!(series.contains(&("flush", "hit", 1)));
        assert!(series.contains(&("cas", "badval", 1)));
    }

    #[test]
    fn stats_reset_restarts_counters_not_gauges() {
        let w = WorkerMetrics::new();
        w.record(Command::Get, Outcome::Hit, 1);
        w.conn_opened();
        let before = Snapshot {
            listen_disabled_num: 2,
            time_in_listen_disabled_us: 300,
            workers: vec![w.snapshot()],
            store: StoreStats {
                items: 5,
                total_items: 5,
                evictions: 1,
                ..StoreStats::default()
            },
            ..Snapshot::default()
        };
        w.record(Command::Get, Outcome::Miss, 1);
        let mut now = before.clone();
        now.workers = vec![w.snapshot()];
        now.store.total_items = 7;
        now.store.items = 6;
        now.listen_disabled_num = 3;
        now.time_in_listen_disabled_us = 500;
        let d = now.since(&before);
        assert_eq!(
            (d.listen_disabled_num, d.time_in_listen_disabled_us),
            (1, 200)
        );
        let m = MemcachedCounters::from_totals(&d.totals());
        assert_eq!((m.get_hits, m.get_misses), (0, 1));
        assert_eq!(d.totals().conns_opened, 0);
        assert_eq!(d.totals().current_connections(), 1);
        assert_eq!(
            (d.store.items, d.store.total_items, d.store.evictions),
            (6, 2, 0)
        );
    }

    #[test]
    fn general_stats_formats_like_memcached() {
        let snap = Snapshot {
            version: "0.1.0".into(),
            rusage_user_seconds: 1.5,
            workers: vec![WorkerSnapshot::default(); 3],
            ..Snapshot::default()
        };
        let stats = general_stats(&snap);
        let get = |k: &str| stats.iter().find(|(n, _)| *n == k).unwrap().1.clone();
        assert_eq!(get("rusage_user"), "1.500000");
        assert_eq!(get("threads"), "3");
        assert_eq!(get("version"), "0.1.0");
        assert_eq!(get("accepting_conns"), "0");
        assert!(!stats.iter().any(|(k, _)| *k == "idle_kicks"));
        let with_idle_timeout = Snapshot {
            idle_timeout_seconds: 5,
            ..snap
        };
        let stats = general_stats(&with_idle_timeout);
        let names: Vec<&str> = stats.iter().map(|(k, _)| *k).collect();
        let at = |k: &str| names.iter().position(|n| *n == k).unwrap();
        // memcached's order: after store_no_memory (and its auth lines), before bytes_read.
        assert_eq!(at("idle_kicks") + 1, at("bytes_read"));
        assert_eq!(at("accepting_conns") + 1, at("listen_disabled_num"));
    }
}
