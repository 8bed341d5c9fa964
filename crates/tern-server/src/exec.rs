//! The command executor: runs one parsed ASCII command against the store and appends its reply to
//! the connection's output buffer. No I/O and no allocation on the get/set path; the event loop
//! (`worker.rs`) owns sockets and buffers. The binary and meta protocols (issue 4) reuse the
//! store calls and the recording ([`Executor::record`]) here with their own encoders.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use tern_admin::stats_text;
use tern_admin::{Command as Op, HotKeyConfig, HotKeys, Outcome, Snapshot};
use tern_proto::ascii::{self, Command, Keys, StoreKind};
use tern_store::{
    Arith, ArithError, Expiry, Miss, Store, StoreOp, StoreOutcome, UnixSecs, MAX_RELATIVE_EXPTIME,
};

use crate::admin::{ConnTables, WorkerState};
use crate::config::Settings;

/// The memcached protocol level tern speaks, then tern's own version: clients that gate features
/// on the server's version see a 1.6 server.
pub const VERSION_REPLY: &str = concat!("VERSION 1.6.18-tern-", env!("CARGO_PKG_VERSION"), "\r\n");

/// Changes the log level (0 = warnings only ... 3 = trace) of a running server.
pub type LogLevelSetter = Box<dyn Fn(u32) + Send + Sync>;

/// State shared by every worker: settings, the store, what every worker records.
pub struct Shared {
    pub settings: Settings,
    pub store: Store,
    /// One per worker, indexed by worker number; only that worker writes its state.
    pub workers: Box<[WorkerState]>,
    /// The hot-key sketches the workers' samplers feed.
    pub hot_keys: HotKeys,
    /// Each worker's sockets, for `stats conns`.
    pub conn_tables: ConnTables,
    /// Open client connections over all workers; checked against `-c` on accept.
    pub curr_connections: AtomicUsize,
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
}

impl Shared {
    pub fn new(settings: Settings, store: Store) -> Shared {
        let started = store.clock().now();
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
            settings,
            store,
            curr_connections: AtomicUsize::new(0),
            started,
            stats_baseline: Mutex::new(None),
            shutdown: AtomicBool::new(false),
        }
    }
}

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Continue,
    /// Send what is queued, then close (`quit`).
    CloseAfterWrite,
    /// Close at once, dropping queued replies (`shutdown`, as memcached does).
    CloseNow,
}

/// What the connection does with its input after a command line that may carry a data block
/// (a storage command, `ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The command ran; drop this many bytes after the line (its data block).
    Done(usize),
    /// The data block has not fully arrived: this many bytes after the line are needed.
    Need(usize),
    /// An error was answered; discard this many bytes after the line, arrived or not.
    Swallow(usize),
}

/// Runs commands for one worker.
pub struct Executor<'a> {
    pub shared: &'a Shared,
    /// This worker's recording state (only this worker's thread writes it).
    pub worker: &'a WorkerState,
}

impl<'a> Executor<'a> {
    pub fn new(shared: &'a Shared, worker: usize) -> Executor<'a> {
        Executor {
            shared,
            worker: &shared.workers[worker],
        }
    }

    /// Records one request (one key of a retrieval): its outcome count, and a place in the
    /// latency batch the connection times once its replies are written.
    #[inline]
    pub fn record(&self, op: Op, outcome: Outcome) {
        self.worker.metrics.count(op, outcome);
        self.worker.batch.add(op);
    }

    /// [`Executor::record`] for a request naming `key`, which the hot-key sampler also sees.
    #[inline]
    pub fn record_key(&self, op: Op, outcome: Outcome, key: &[u8]) {
        self.record(op, outcome);
        self.worker.hot_keys.record(key);
    }

    fn expiry(&self, exptime: i64) -> Expiry {
        Expiry::from_exptime(exptime, self.shared.store.clock().now())
    }

    /// Records a request the parser refused, answered or not (a bad binary magic byte, an
    /// overlong line and a UDP request cut off by its datagram get no reply): an invalid request
    /// with the error outcome, in none of memcached's counters, as memcached 1.6.18 counts it.
    pub fn record_refused(&self) {
        self.record(Op::Invalid, Outcome::Error);
    }

    /// A line the parser refused: counted ([`Executor::record_refused`]), answered with
    /// memcached's error unless the line asked for `noreply`.
    pub fn reject(&self, rejection: ascii::Rejection, out: &mut Vec<u8>) {
        self.record_refused();
        if !rejection.noreply {
            out.extend_from_slice(rejection.reply);
        }
    }

    /// Runs any command but the storage ones (see [`Executor::store_command`]).
    pub fn execute(&self, cmd: Command<'_>, out: &mut Vec<u8>) -> After {
        let store = &self.shared.store;
        let reply = |out: &mut Vec<u8>, noreply: bool, text: &[u8]| {
            if !noreply {
                out.extend_from_slice(text);
            }
        };
        match cmd {
            Command::Get {
                keys,
                with_cas,
                touch,
            } => self.get(keys, with_cas, touch, out),
            Command::Store { .. } => {
                unreachable!("storage commands carry data: use store_command()")
            }
            Command::Meta { .. } => unreachable!("meta commands may carry data: use meta::run()"),
            Command::Delete { key, noreply } => {
                if store.delete(key) {
                    self.record_key(Op::Delete, Outcome::Hit, key);
                    reply(out, noreply, ascii::DELETED);
                } else {
                    self.record_key(Op::Delete, Outcome::Miss, key);
                    reply(out, noreply, ascii::NOT_FOUND);
                }
            }
            Command::Arith {
                incr,
                key,
                delta,
                noreply,
            } => {
                let (op, metric) = if incr {
                    (Arith::Incr, Op::Incr)
                } else {
                    (Arith::Decr, Op::Decr)
                };
                let result = store.incr_decr(key, op, delta, None);
                let outcome = match result {
                    Ok(_) => Outcome::Hit,
                    Err(ArithError::NotFound) => Outcome::Miss,
                    Err(ArithError::Exists) => Outcome::Exists,
                    Err(ArithError::NonNumeric) => Outcome::Error,
                    Err(ArithError::OutOfMemory) => Outcome::NoMemory,
                };
                self.record_key(metric, outcome, key);
                match result {
                    Ok(counted) => {
                        if !noreply {
                            ascii::encode_number(out, counted.value);
                        }
                    }
                    Err(ArithError::NotFound) => reply(out, noreply, ascii::NOT_FOUND),
                    Err(ArithError::Exists) => reply(out, noreply, ascii::EXISTS),
                    Err(ArithError::NonNumeric) => reply(out, noreply, ascii::NON_NUMERIC),
                    Err(ArithError::OutOfMemory) => reply(out, noreply, ascii::OUT_OF_MEMORY),
                }
            }
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                if store.touch(key, self.expiry(exptime)) {
                    self.record_key(Op::Touch, Outcome::Hit, key);
                    reply(out, noreply, ascii::TOUCHED);
                } else {
                    self.record_key(Op::Touch, Outcome::Miss, key);
                    reply(out, noreply, ascii::NOT_FOUND);
                }
            }
            Command::FlushAll { delay, noreply } => {
                if self.shared.settings.disable_flush_all {
                    // memcached counts a refused flush_all in cmd_flush too.
                    self.record(Op::Flush, Outcome::Error);
                    reply(out, noreply, ascii::FLUSH_DISABLED);
                } else {
                    self.record(Op::Flush, Outcome::Hit);
                    store.flush_all(self.flush_delay(delay));
                    reply(out, noreply, ascii::OK);
                }
            }
            Command::Version => {
                self.record(Op::Admin, Outcome::Hit);
                out.extend_from_slice(VERSION_REPLY.as_bytes());
            }
            Command::Verbosity { level, noreply } => {
                self.record(Op::Admin, Outcome::Hit);
                // memcached caps the level at 2; level N logs as much as -v repeated N times.
                let level = level.min(2);
                self.shared.verbosity.store(level, Ordering::Relaxed);
                if let Some(set) = &self.shared.set_log_level {
                    set(level);
                }
                reply(out, noreply, ascii::OK);
            }
            Command::Stats { args } => self.stats(args, out),
            Command::Quit => {
                self.record(Op::Admin, Outcome::Hit);
                return After::CloseAfterWrite;
            }
            Command::Shutdown { mode } => {
                self.record(Op::Admin, Outcome::Hit);
                if !self.shared.settings.enable_shutdown {
                    out.extend_from_slice(ascii::SHUTDOWN_DISABLED);
                } else if mode == ascii::ShutdownMode::Invalid {
                    out.extend_from_slice(ascii::BAD_SHUTDOWN);
                } else {
                    // The signal thread runs the same graceful stop as SIGTERM.
                    tracing::info!("shutdown command received");
                    let _ = signal_hook::low_level::raise(signal_hook::consts::SIGTERM);
                    return After::CloseNow;
                }
            }
        }
        After::Continue
    }

    /// memcached's flush delay: 0 or negative is now, up to 30 days relative, beyond that an
    /// absolute unix time.
    pub(crate) fn flush_delay(&self, delay: i64) -> u32 {
        if delay <= 0 {
            0
        } else if delay > MAX_RELATIVE_EXPTIME {
            let now = i64::from(self.shared.store.clock().now());
            (delay - now).clamp(0, i64::from(u32::MAX)) as u32
        } else {
            delay as u32
        }
    }

    fn get(&self, keys: Keys<'_>, with_cas: bool, touch: Option<i64>, out: &mut Vec<u8>) {
        let store = &self.shared.store;
        let rollback = out.len();
        let expiry = touch.map(|exptime| self.expiry(exptime));
        let op = match (touch.is_some(), with_cas) {
            (false, false) => Op::Get,
            (false, true) => Op::Gets,
            (true, false) => Op::Gat,
            (true, true) => Op::Gats,
        };
        for key in keys {
            if key.len() > ascii::KEY_MAX_LENGTH {
                // memcached drops the values already queued for this line and answers the error.
                self.record(Op::Invalid, Outcome::Error);
                out.truncate(rollback);
                out.extend_from_slice(ascii::BAD_FORMAT);
                return;
            }
            let encode = |item: tern_store::ItemView<'_>| {
                ascii::encode_value(
                    out,
                    key,
                    item.flags,
                    item.value,
                    with_cas.then_some(item.cas),
                )
            };
            let found = match expiry {
                None => store.get(key, encode),
                Some(expiry) => store.get_and_touch(key, expiry, encode),
            };
            let outcome = match found {
                Ok(()) => Outcome::Hit,
                Err(Miss::NotFound) => Outcome::Miss,
                Err(Miss::Expired) => Outcome::Expired,
                Err(Miss::Flushed) => Outcome::Flushed,
            };
            self.record_key(op, outcome, key);
        }
        out.extend_from_slice(ascii::END);
    }

    /// A storage command line (`Command::Store`); `after` holds the bytes that follow it. A
    /// value larger than `-I` is refused at once and its data block skipped, arrived or not
    /// (memcached's swallow); any other runs once its whole data block is in.
    pub fn store_command(&self, cmd: Command<'_>, after: &[u8], out: &mut Vec<u8>) -> Step {
        let Command::Store {
            kind,
            key,
            flags,
            exptime,
            bytes,
            cas_unique,
            noreply,
        } = cmd
        else {
            unreachable!("store_command runs storage commands only")
        };
        // The parser bounds `bytes` below i32::MAX - 2.
        let block = bytes + 2;
        if bytes > self.shared.settings.max_item_size {
            self.too_large(kind, key, noreply, out);
            return Step::Swallow(block);
        }
        let Some(data) = ascii::data_block(after, bytes) else {
            return Step::Need(block);
        };
        self.store(kind, key, flags, exptime, cas_unique, data, noreply, out);
        Step::Done(block)
    }

    /// A storage command whose data block has arrived (`data` is `Err` when it did not end in
    /// `\r\n`).
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        kind: StoreKind,
        key: &[u8],
        flags: u32,
        exptime: i64,
        cas_unique: u64,
        data: Result<&[u8], ()>,
        noreply: bool,
        out: &mut Vec<u8>,
    ) {
        let metric = store_metric(kind);
        let Ok(value) = data else {
            self.record_key(metric, Outcome::Error, key);
            if !noreply {
                out.extend_from_slice(ascii::BAD_DATA_CHUNK);
            }
            return;
        };
        let op = match kind {
            StoreKind::Set => StoreOp::Set,
            StoreKind::Add => StoreOp::Add,
            StoreKind::Replace => StoreOp::Replace,
            StoreKind::Append => StoreOp::Append(None),
            StoreKind::Prepend => StoreOp::Prepend(None),
            StoreKind::Cas => StoreOp::Cas(cas_unique),
        };
        let outcome = self
            .shared
            .store
            .store(op, key, flags, self.expiry(exptime), value);
        let (recorded, text) = match outcome {
            StoreOutcome::Stored { .. } => (Outcome::Stored, ascii::STORED),
            StoreOutcome::NotStored => (Outcome::NotStored, ascii::NOT_STORED),
            StoreOutcome::Exists => (Outcome::Exists, ascii::EXISTS),
            StoreOutcome::NotFound => (Outcome::NotFound, ascii::NOT_FOUND),
            StoreOutcome::TooLarge => (Outcome::TooLarge, ascii::TOO_LARGE),
            StoreOutcome::OutOfMemory => (Outcome::NoMemory, ascii::OUT_OF_MEMORY_STORING),
        };
        self.record_key(metric, recorded, key);
        if !noreply {
            out.extend_from_slice(text);
        }
    }

    /// A storage command whose value is larger than `-I`: memcached answers at once, skips the
    /// data block, and (for set) removes the old value so no stale copy survives.
    fn too_large(&self, kind: StoreKind, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
        // Refused before its data is read, so memcached counts it in store_too_large but not
        // in cmd_set: recorded as an invalid request with the too-large outcome.
        self.record(Op::Invalid, Outcome::TooLarge);
        if kind == StoreKind::Set {
            self.shared.store.delete(key);
        }
        if !noreply {
            out.extend_from_slice(ascii::TOO_LARGE);
        }
    }

    /// The `stats` family, as memcached 1.6 answers it, plus tern's `stats segments` and
    /// `stats hotkeys [N]`.
    fn stats(&self, mut args: Keys<'_>, out: &mut Vec<u8>) {
        let shared = self.shared;
        let (sub, arg) = (args.next(), args.next());
        let hit = |bytes: Vec<u8>| (Outcome::Hit, bytes);
        let (outcome, reply) = match (sub, arg) {
            (None, _) => hit(stats_text::render_stats(&shared.stats_snapshot())),
            (Some(b"reset"), None) => {
                shared.reset_stats();
                hit(ascii::RESET.to_vec())
            }
            (Some(b"settings"), None) => {
                hit(stats_text::render_stat_lines(shared.settings_stats()))
            }
            (Some(b"items"), None) => hit(stats_text::render_stats_items(&shared.stats_snapshot())),
            (Some(b"slabs"), None) => hit(stats_text::render_stats_slabs(&shared.stats_snapshot())),
            (Some(b"segments"), None) => hit(stats_text::render_stats_segments(
                &shared.stats_snapshot().store.segments,
            )),
            (Some(b"conns"), None) => {
                let asker = self.worker.serving_fd.load(Ordering::Relaxed);
                hit(stats_text::render_stats_conns(&shared.conns(asker)))
            }
            (Some(b"hotkeys"), count) => {
                let count = match count {
                    None => Some(stats_text::DEFAULT_HOT_KEYS),
                    Some(n) => std::str::from_utf8(n).ok().and_then(|n| n.parse().ok()),
                };
                match (count, args.next()) {
                    (Some(n), None) => {
                        hit(stats_text::render_stats_hotkeys(&shared.hot_keys.top(n)))
                    }
                    _ => (Outcome::Error, ascii::BAD_FORMAT.to_vec()),
                }
            }
            _ => (Outcome::Error, ascii::ERROR.to_vec()),
        };
        self.record(Op::Stats, outcome);
        out.extend_from_slice(&reply);
    }
}

/// The metric a storage command is recorded under.
fn store_metric(kind: StoreKind) -> Op {
    match kind {
        StoreKind::Set => Op::Set,
        StoreKind::Add => Op::Add,
        StoreKind::Replace => Op::Replace,
        StoreKind::Append => Op::Append,
        StoreKind::Prepend => Op::Prepend,
        StoreKind::Cas => Op::Cas,
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
        let lines: [(&str, &dyn std::fmt::Display); 25] = [
            ("maxbytes", &(s.memory_limit_mb << 20)),
            ("maxconns", &s.conn_limit),
            ("tcpport", &s.port),
            ("udpport", &s.udp_port),
            ("inter", &listen),
            ("verbosity", &verbosity),
            ("evictions", &on_off(!s.disable_evictions)),
            ("domain_socket", &socket),
            ("umask", &format_args!("{:o}", s.unix_mask)),
            ("num_threads", &s.threads),
            ("reqs_per_event", &s.max_reqs_per_event),
            ("cas_enabled", &yes_no(!s.disable_cas)),
            ("tcp_backlog", &s.listen_backlog),
            // Text or binary, chosen per connection by its first byte, as memcached -B auto.
            ("binding_protocol", &"auto-negotiate"),
            ("item_size_max", &s.max_item_size),
            ("flush_enabled", &yes_no(!s.disable_flush_all)),
            ("shutdown_command", &yes_no(s.enable_shutdown)),
            ("lock_memory", &yes_no(s.lock_memory)),
            ("large_memory_pages", &yes_no(s.enable_largepages)),
            ("admin_port", &admin_port),
            ("hotkey_sample_rate", &s.hotkey_sample_rate),
            ("hotkey_window", &s.hotkey_window_secs),
            ("eviction", &eviction),
            ("worker_cpus", &self.worker_cpus),
            ("numa_node", &numa_node),
        ];
        lines
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }
}
