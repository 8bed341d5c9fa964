//! Server-wide state every worker shares: the settings, the store, each worker's recording
//! state and socket table, the connection count, `stats reset`'s baseline; and what the server
//! shows about itself from them: the snapshot behind every `stats` group and the admin
//! endpoint ([`ServerAdmin`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tern_admin::stats_text::{ConnInfo, ConnState};
use tern_admin::{
    AdminSource, HotKeyConfig, HotKeys, HotKeysReport, RestoreStats, SegmentStats, ServerStats,
    Snapshot, StoreStats,
};
use tern_store::{FlashSettings, Store, UnixSecs};

use crate::config::Settings;
use crate::state::conn_table::{ConnEntry, ConnTables};
use crate::state::credentials::AuthFile;
use crate::state::flash;
use crate::state::prefix_stats::PrefixStats;
use crate::state::read_budget::ReadBudget;
use crate::state::recording::WorkerState;
use crate::state::sasl::Sasl;
use crate::state::tls_config::Tls;
use crate::state::watch::{CloseReason, Peer, Watchers};

/// Changes the log level (0 = warnings only ... 3 = trace) of a running server.
pub type LogLevelSetter = Box<dyn Fn(u32) + Send + Sync>;

/// State shared by every worker: settings, the store, what every worker records.
pub struct Shared {
    pub settings: Settings,
    pub store: Store,
    /// The store has a flash tier (`Ops::flash_deferred` asks this first: one load).
    pub flash_tier: bool,
    /// One per worker, indexed by worker number; only that worker writes its state.
    pub workers: Box<[WorkerState]>,
    /// The hot-key sketches the workers' samplers feed.
    pub hot_keys: HotKeys,
    /// Each worker's sockets, for `stats conns`.
    pub conn_tables: ConnTables,
    /// Open client connections over all workers; checked against `-c` on accept.
    pub curr_connections: AtomicUsize,
    /// `-o read_buf_mem_limit`: what every worker's grown read buffers are charged to.
    pub read_budget: Arc<ReadBudget>,
    pub started: UnixSecs,
    /// Everything as it stood at the last `stats reset`.
    pub stats_baseline: Mutex<Option<Snapshot>>,
    /// Set by the `verbosity` command; shown in `stats settings`.
    pub verbosity: AtomicU32,
    /// Applies a new `verbosity` to the log filter (absent when logging is set up elsewhere).
    pub set_log_level: Option<LogLevelSetter>,
    /// Set once: stop accepting, finish in-flight replies, exit.
    pub shutdown: AtomicBool,
    /// Each worker's CPU under `--pin` (`0,1`), or `unpinned`; for `stats settings`.
    pub worker_cpus: String,
    /// `stats detail`.
    pub prefix_stats: PrefixStats,
    /// `watch` (shared with the store's eviction observer).
    pub watchers: Arc<Watchers>,
    /// With `-e`: what the start restored, for `stats`.
    pub restore: Option<RestoreStats>,
    /// `-Z`: the certificates and TLS counters.
    pub tls: Option<Arc<Tls>>,
    /// `-Y`: the users, and the authentication counters.
    pub auth: Option<AuthFile>,
    /// `-S`: SASL through libsasl2 (and `MEMCACHED_SASL_PWDB`'s users), and the authentication
    /// counters.
    pub sasl: Option<Sasl>,
    /// Workers that stopped accepting, for `listen_disabled_num` and its time.
    pub listen_pauses: ListenPauses,
}

/// memcached's `listen_disabled_num` and `time_in_listen_disabled_us` over every worker's
/// listeners: the server stops accepting when its first worker does (at `-c` without
/// maxconns_fast, or out of descriptors) and accepts again when the last one does. Locked on
/// those changes and by `stats` only.
#[derive(Default)]
pub struct ListenPauses(Mutex<PauseState>);

#[derive(Default)]
struct PauseState {
    /// Workers not accepting now.
    paused: usize,
    /// When the first of them stopped.
    since: Option<std::time::Instant>,
    count: u64,
    micros: u64,
}

impl ListenPauses {
    /// A worker stopped accepting (call once per stop, then [`ListenPauses::resume`]).
    pub fn pause(&self) {
        let mut p = lock(&self.0);
        if p.paused == 0 {
            p.since = Some(std::time::Instant::now());
            p.count += 1;
        }
        p.paused += 1;
    }

    /// A worker accepts again.
    pub fn resume(&self) {
        let mut p = lock(&self.0);
        p.paused = p.paused.saturating_sub(1);
        if p.paused == 0 {
            if let Some(since) = p.since.take() {
                p.micros += since.elapsed().as_micros() as u64;
            }
        }
    }

    /// (accepting, stops so far, microseconds of the stops that ended).
    fn read(&self) -> (bool, u64, u64) {
        let p = lock(&self.0);
        (p.paused == 0, p.count, p.micros)
    }
}

impl Shared {
    /// Counts a new connection of `worker` against `-c`; false, with nothing counted, when
    /// `-c` connections are open already.
    pub fn reserve_connection(&self, worker: usize) -> bool {
        let open = self.curr_connections.fetch_add(1, Ordering::Relaxed);
        if open >= self.settings.conn_limit {
            self.curr_connections.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        self.workers[worker].metrics.conn_opened();
        true
    }

    /// Gives back what [`Shared::reserve_connection`] counted.
    pub fn unreserve_connection(&self, worker: usize) {
        self.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.workers[worker].metrics.conn_closed();
    }

    /// `worker`'s sockets as `stats conns` lists them.
    pub fn conn_table(&self, worker: usize) -> MutexGuard<'_, Vec<ConnEntry>> {
        self.conn_tables[worker]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists `worker`'s listeners for `stats conns`.
    pub fn list_listeners(&self, worker: usize, entries: impl IntoIterator<Item = ConnEntry>) {
        self.conn_table(worker).extend(entries);
    }

    /// Lists a client `worker` took in for `stats conns` and tells watchers (`conn_new`, with
    /// `peer`): its descriptor, and the clock of its last command, which the worker keeps up
    /// to date.
    pub fn list_client(
        &self,
        worker: usize,
        entry: ConnEntry,
        peer: impl FnOnce() -> Peer,
    ) -> (i32, Arc<AtomicU32>) {
        let activity = (entry.fd, entry.last_cmd.clone());
        self.conn_table(worker).push(entry);
        self.watchers.conn_event(peer, activity.0, "conn_new", "");
        activity
    }

    /// Undoes [`Shared::list_client`] and [`Shared::reserve_connection`] as a client's
    /// connection closes, before its descriptor does (and can be reused).
    pub fn unlist_client(
        &self,
        worker: usize,
        fd: i32,
        reason: CloseReason,
        peer: impl FnOnce() -> Peer,
    ) {
        self.watchers
            .conn_event(peer, fd, "conn_close", reason.field());
        self.conn_table(worker).retain(|e| e.fd != fd);
        self.unreserve_connection(worker);
    }

    pub fn new(settings: Settings, store: Store) -> Shared {
        let started = store.clock().now();
        let read_buf_mem_limit = settings.read_buf_mem_limit;
        let hot_keys = HotKeys::new(HotKeyConfig {
            sample_every: settings.hotkey_sample_rate,
            window: std::time::Duration::from_secs(settings.hotkey_window_secs),
            ..HotKeyConfig::default()
        });
        Shared {
            workers: (0..settings.threads)
                .map(|_| WorkerState::new(&hot_keys))
                .collect(),
            hot_keys,
            conn_tables: (0..settings.threads).map(|_| Mutex::default()).collect(),
            verbosity: AtomicU32::new(u32::from(settings.verbose)),
            set_log_level: None,
            worker_cpus: "unpinned".into(),
            prefix_stats: PrefixStats::new(settings.prefix_delimiter, settings.detail_enabled),
            settings,
            flash_tier: store.flash_knobs().is_some(),
            store,
            curr_connections: AtomicUsize::new(0),
            read_budget: Arc::new(ReadBudget::new(read_buf_mem_limit)),
            started,
            stats_baseline: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            watchers: Arc::default(),
            restore: None,
            tls: None,
            auth: None,
            sasl: None,
            listen_pauses: ListenPauses::default(),
        }
    }
}

impl Shared {
    /// `stats settings` (memcached's names and formats) and the admin endpoint's `/settings`.
    pub fn settings_stats(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let on_off = |b: bool| if b { "on" } else { "off" };
        let listen = if s.listen.is_empty() {
            "NULL".to_string()
        } else {
            s.listen.join(",")
        };
        let socket = s
            .unix_socket
            .as_ref()
            .map_or("NULL".to_string(), |p| p.display().to_string());
        let verbosity = self.verbosity.load(Ordering::Relaxed);
        let admin_port = s.admin_port.map_or("off".to_string(), |p| p.to_string());
        let numa_node = s.numa_node.map_or("off".to_string(), |n| n.to_string());
        let eviction = format!("{:?}", s.effective_eviction()).to_lowercase();
        let hashpower = s.hashpower.unwrap_or(0);
        let memory_file = s
            .memory_file
            .as_ref()
            .map_or("(null)".to_string(), |p| p.display().to_string());
        // Machinery tern does not have (slab classes, the LRU and its crawler, NAPI ids), and
        // the flash tier when there is none, shows as off or 0: docs/observability.md names
        // each line and why.
        let lines: [(&str, &dyn std::fmt::Display); 62] = [
            ("maxbytes", &self.store.memory_limit()),
            ("maxconns", &s.conn_limit),
            ("tcpport", &s.port),
            ("udpport", &s.udp_port),
            ("inter", &listen),
            ("verbosity", &verbosity),
            ("oldest", &0),
            ("evictions", &on_off(!s.disable_evictions)),
            ("domain_socket", &socket),
            ("umask", &format_args!("{:o}", s.unix_mask)),
            ("shutdown_command", &yes_no(s.enable_shutdown)),
            ("growth_factor", &"0.00"),
            ("chunk_size", &0),
            ("num_threads", &s.threads),
            // Every worker serves UDP on its own socket.
            ("num_threads_per_udp", &s.threads),
            ("stat_key_prefix", &char::from(s.prefix_delimiter)),
            ("detail_enabled", &yes_no(self.prefix_stats.enabled())),
            ("reqs_per_event", &s.max_reqs_per_event),
            ("cas_enabled", &yes_no(!s.disable_cas)),
            ("tcp_backlog", &s.listen_backlog),
            ("binding_protocol", &s.protocol.memcached_name()),
            ("item_size_max", &s.max_item_size),
            ("maxconns_fast", &yes_no(s.maxconns_fast)),
            ("hashpower_init", &hashpower),
            ("slab_reassign", &"no"),
            ("slab_automove", &0),
            ("slab_automove_ratio", &"0.00"),
            ("slab_automove_window", &0),
            ("slab_chunk_max", &0),
            ("lru_crawler", &"no"),
            ("lru_crawler_sleep", &0),
            ("lru_crawler_tocrawl", &0),
            ("tail_repair_time", &0),
            ("flush_enabled", &yes_no(!s.disable_flush_all)),
            ("dump_enabled", &yes_no(!s.dumping_disabled)),
            ("hash_algorithm", &"ahash"),
            ("lru_maintainer_thread", &"no"),
            ("lru_segmented", &"no"),
            ("hot_lru_pct", &0),
            ("warm_lru_pct", &0),
            ("hot_max_factor", &"0.00"),
            ("warm_max_factor", &"0.00"),
            ("temp_lru", &"no"),
            ("temporary_ttl", &0),
            ("idle_timeout", &s.idle_timeout_secs),
            ("watcher_logbuf_size", &0),
            ("worker_logbuf_size", &0),
            ("read_buf_mem_limit", &s.read_buf_mem_limit),
            ("track_sizes", &"no"),
            ("inline_ascii_response", &"no"),
            ("num_napi_ids", &0),
            ("memory_file", &memory_file),
            // Client flags are 32 bits, as memcached's default build.
            ("client_flags_size", &std::mem::size_of::<u32>()),
            ("lock_memory", &yes_no(s.lock_memory)),
            ("large_memory_pages", &yes_no(s.enable_largepages)),
            ("admin_port", &admin_port),
            ("hotkey_sample_rate", &s.hotkey_sample_rate),
            ("hotkey_window", &s.hotkey_window_secs),
            ("eviction", &eviction),
            ("worker_cpus", &self.worker_cpus),
            ("numa_node", &numa_node),
            ("io_engine", &s.io_engine.name()),
        ];
        let mut lines: Vec<(String, String)> = lines
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        lines.extend(self.flash_settings());
        lines.extend(self.tls_settings());
        in_memcached_order(&mut lines, MEMCACHED_SETTINGS);
        lines
    }

    /// The `ext_*` lines of `stats settings`: the flash tier's knobs as they are now, or 0 (and
    /// `no`) without one.
    fn flash_settings(&self) -> Vec<(String, String)> {
        let flash = &self.settings.flash;
        match self.store.flash_knobs() {
            Some(knobs) => flash::settings_lines(
                &knobs.get(),
                flash.wbuf_bytes(),
                flash.slab_automove_freeratio,
            ),
            None => {
                let zero = FlashSettings {
                    item_size: 0,
                    item_age: 0,
                    low_ttl: 0,
                    recache_rate: 0,
                    compact_under: 0,
                    drop_under: 0,
                    max_frag: 0.0,
                    drop_unread: false,
                    max_sleep_us: 0,
                };
                flash::settings_lines(&zero, 0, 0.0)
            }
        }
    }

    /// memcached's `ssl_*` lines of `stats settings` (a path not given is `NULL`).
    fn tls_settings(&self) -> Vec<(String, String)> {
        let t = &self.settings.tls;
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map_or("NULL".to_string(), |p| p.display().to_string())
        };
        let auth_file = self.auth.as_ref().map(|a| a.path.display().to_string());
        [
            ("auth_enabled_sasl", yes_no(self.sasl.is_some())),
            ("auth_enabled_ascii", auth_file.unwrap_or("no".into())),
            ("ssl_enabled", yes_no(t.enabled)),
            ("ssl_chain_cert", path(&t.chain_cert)),
            ("ssl_key", path(&t.key)),
            ("ssl_verify_mode", t.verify_mode.to_string()),
            ("ssl_keyformat", t.keyformat.to_string()),
            ("ssl_ciphers", t.ciphers.clone().unwrap_or("NULL".into())),
            ("ssl_ca_cert", path(&t.ca_cert)),
            ("ssl_wbuf_size", t.wbuf_size.to_string()),
            ("ssl_session_cache", yes_no(t.session_cache)),
            ("ssl_kernel_tls", yes_no(false)),
            ("ssl_min_version", t.min_version.name().to_string()),
            (
                "tls_handshake_timeout",
                t.handshake_timeout_secs.to_string(),
            ),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
    }

    /// memcached's authentication lines of `stats` (`auth_cmds`: authenticating requests,
    /// `auth_errors`: those refused), then its TLS lines, present with `-Z` only
    /// (`ssl_new_sessions` with the session cache only).
    pub fn security_stats(&self) -> Vec<(String, String)> {
        static ZERO: AtomicU64 = AtomicU64::new(0);
        let (attempts, failures) = match (&self.auth, &self.sasl) {
            (Some(a), _) => (&a.attempts, &a.failures),
            (None, Some(s)) => (&s.attempts, &s.failures),
            (None, None) => (&ZERO, &ZERO),
        };
        let (attempts, failures) = (
            attempts.load(Ordering::Relaxed),
            failures.load(Ordering::Relaxed),
        );
        let mut lines = vec![
            ("auth_cmds".to_string(), attempts.to_string()),
            ("auth_errors".to_string(), failures.to_string()),
        ];
        let Some(tls) = &self.tls else {
            return lines;
        };
        let counters = &tls.counters;
        if tls.options.session_cache {
            let sessions = counters.new_sessions.load(Ordering::Relaxed);
            lines.push(("ssl_new_sessions".into(), sessions.to_string()));
        }
        let errors = counters.handshake_errors.load(Ordering::Relaxed);
        lines.push(("ssl_handshake_errors".into(), errors.to_string()));
        lines.push((
            "time_since_server_cert_refresh".into(),
            tls.since_refresh().to_string(),
        ));
        lines
    }
}

/// memcached 1.6.45's `stats settings` names in its order (built with extstore and TLS, not
/// its proxy; `drop_privileges` is Linux-less).
const MEMCACHED_SETTINGS: &[&str] = &[
    "maxbytes",
    "maxconns",
    "tcpport",
    "udpport",
    "inter",
    "verbosity",
    "oldest",
    "evictions",
    "domain_socket",
    "umask",
    "shutdown_command",
    "growth_factor",
    "chunk_size",
    "num_threads",
    "num_threads_per_udp",
    "stat_key_prefix",
    "detail_enabled",
    "reqs_per_event",
    "cas_enabled",
    "tcp_backlog",
    "binding_protocol",
    "auth_enabled_sasl",
    "auth_enabled_ascii",
    "item_size_max",
    "maxconns_fast",
    "hashpower_init",
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "tail_repair_time",
    "flush_enabled",
    "dump_enabled",
    "hash_algorithm",
    "lru_maintainer_thread",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temp_lru",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "track_sizes",
    "inline_ascii_response",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_wbuf_size",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
    "ext_drop_unread",
    "ssl_enabled",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
    "num_napi_ids",
    "memory_file",
    "client_flags_size",
];

/// Sorts `lines` into `order`'s order (a stable sort: names `order` lacks, tern's own, keep
/// theirs after it).
fn in_memcached_order(lines: &mut [(String, String)], order: &[&str]) {
    lines.sort_by_key(|(name, _)| order.iter().position(|n| n == name).unwrap_or(order.len()));
}

/// memcached's default `hashpower`: its table's size before any item is stored.
const MEMCACHED_HASHPOWER: u32 = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    let segments_total = s.heap_bytes / segment_bytes;
    let segments_used = s.heap_used / segment_bytes;
    StoreStats {
        items: s.curr_items,
        total_items: s.total_items,
        bytes: s.bytes,
        limit_bytes: s.limit_maxbytes,
        index_bytes: s.index_bytes,
        index_slots: s.index_slots_peak,
        evictions: s.evictions,
        reclaimed: s.reclaimed,
        expired_unfetched: s.expired_unfetched,
        evicted_unfetched: s.evicted_unfetched,
        oldest_item_age_seconds: u64::from(s.oldest_item_age),
        segments: SegmentStats {
            segment_bytes,
            segments_total,
            segments_free: segments_total.saturating_sub(segments_used),
            malloced_bytes: s.malloced_bytes,
            live_bytes: s.item_bytes_with_headers,
            dead_bytes: s.heap_used.saturating_sub(s.item_bytes_with_headers),
            merges: s.merges,
            segments_expired: s.reclaimed_segments,
        },
        items_on_flash: store.flash_stats().map_or(0, |f| f.objects_used),
        items_flash_sized: s.items_flash_sized,
        flash_tier: store.flash_knobs().is_some(),
    }
}

impl Shared {
    /// Every counter as it stands (what `/metrics` shows: Prometheus counters only go up).
    pub fn snapshot(&self) -> Snapshot {
        let now = self.store.clock().now();
        let (user, system) = rusage();
        let (accepting, listen_disabled_num, time_in_listen_disabled_us) =
            self.listen_pauses.read();
        Snapshot {
            version: super::VERSION.to_string(),
            pid: std::process::id(),
            uptime_seconds: u64::from(now.saturating_sub(self.started)),
            time_unix_seconds: u64::from(now),
            rusage_user_seconds: user,
            rusage_system_seconds: system,
            max_connections: self.settings.conn_limit as u64,
            accepting_connections: accepting && !self.shutdown.load(Ordering::Relaxed),
            listen_disabled_num,
            time_in_listen_disabled_us,
            idle_timeout_seconds: self.settings.idle_timeout_secs,
            workers: self.workers.iter().map(|w| w.metrics.snapshot()).collect(),
            store: store_stats(&self.store),
            restore: self.restore,
            server: self.server_stats(),
        }
    }

    /// The figures of `stats` that are the server's own: read here, when asked.
    fn server_stats(&self) -> ServerStats {
        let (mut listeners, mut clients) = (0, 0);
        for table in self.conn_tables.iter() {
            for entry in lock(table).iter() {
                match entry.listen_addr {
                    None => listeners += 1,
                    Some(_) => clients += 1,
                }
            }
        }
        // Every descriptor but the client connections (and the one reading the directory).
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
        let (log_watchers, written, sent, skipped) = self.watchers.stats();
        ServerStats {
            event_engine: self.settings.io_engine.name().to_string(),
            listeners,
            reserved_fds: open_fds.saturating_sub(1 + clients),
            hashpower_init: self.settings.hashpower.unwrap_or(MEMCACHED_HASHPOWER),
            log_watchers,
            log_lines_written: written,
            log_lines_sent: sent,
            log_lines_skipped: skipped,
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
