//! The command executor: runs one parsed ASCII command against the store and appends its reply to
//! the connection's output buffer. No I/O and no allocation on the get/set path; the event loop
//! (`worker.rs`) owns sockets and buffers. The binary and meta protocols (issue 4) reuse the
//! store calls and counters here with their own encoders.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use tern_proto::ascii::{self, Command, Keys, StoreKind};
use tern_store::{
    Arith, ArithError, Expiry, Miss, Store, StoreOp, StoreOutcome, UnixSecs, MAX_RELATIVE_EXPTIME,
};

use crate::config::Settings;
use crate::stats::{self, Totals, WorkerCounters};

/// The memcached protocol level tern speaks, then tern's own version: clients that gate features
/// on the server's version see a 1.6 server.
pub const VERSION_REPLY: &str = concat!("VERSION 1.6.18-tern-", env!("CARGO_PKG_VERSION"), "\r\n");

/// Changes the log level (0 = warnings only ... 3 = trace) of a running server.
pub type LogLevelSetter = Box<dyn Fn(u32) + Send + Sync>;

/// State shared by every worker: settings, the store, the counters of every worker.
pub struct Shared {
    pub settings: Settings,
    pub store: Store,
    /// One per worker, indexed by worker number; only that worker writes its counters.
    pub workers: Box<[WorkerCounters]>,
    /// Open client connections over all workers; checked against `-c` on accept.
    pub curr_connections: AtomicUsize,
    pub started: UnixSecs,
    /// Sums at the last `stats reset`.
    pub baseline: Mutex<Totals>,
    /// Set by the `verbosity` command; shown in `stats settings`.
    pub verbosity: AtomicU32,
    /// Applies a new `verbosity` to the log filter (absent when logging is set up elsewhere).
    pub set_log_level: Option<LogLevelSetter>,
    /// Set once: stop accepting, finish in-flight replies, exit.
    pub shutdown: AtomicBool,
}

impl Shared {
    pub fn new(settings: Settings, store: Store) -> Shared {
        let started = store.clock().now();
        Shared {
            workers: (0..settings.threads)
                .map(|_| WorkerCounters::default())
                .collect(),
            verbosity: AtomicU32::new(u32::from(settings.verbose)),
            set_log_level: None,
            settings,
            store,
            curr_connections: AtomicUsize::new(0),
            started,
            baseline: Mutex::new(Totals::default()),
            shutdown: AtomicBool::new(false),
        }
    }

    /// Every worker's counters summed, minus the baseline of the last `stats reset`.
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for worker in self.workers.iter() {
            worker.add_to(&mut totals);
        }
        totals.since(&self.baseline.lock().unwrap())
    }

    fn reset_stats(&self) {
        let mut totals = Totals::default();
        for worker in self.workers.iter() {
            worker.add_to(&mut totals);
        }
        *self.baseline.lock().unwrap() = totals;
        self.store.reset_stats();
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

/// Runs commands for one worker.
pub struct Executor<'a> {
    pub shared: &'a Shared,
    pub counters: &'a WorkerCounters,
}

impl<'a> Executor<'a> {
    pub fn new(shared: &'a Shared, worker: usize) -> Executor<'a> {
        Executor {
            shared,
            counters: &shared.workers[worker],
        }
    }

    fn expiry(&self, exptime: i64) -> Expiry {
        Expiry::from_exptime(exptime, self.shared.store.clock().now())
    }

    /// Runs any command but the storage ones (see [`Executor::store`]).
    pub fn execute(&self, cmd: Command<'_>, out: &mut Vec<u8>) -> After {
        let c = self.counters;
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
            Command::Store { .. } => unreachable!("storage commands carry data: use store()"),
            Command::Delete { key, noreply } => {
                if store.delete(key) {
                    c.delete_hits.incr();
                    reply(out, noreply, ascii::DELETED);
                } else {
                    c.delete_misses.incr();
                    reply(out, noreply, ascii::NOT_FOUND);
                }
            }
            Command::Arith {
                incr,
                key,
                delta,
                noreply,
            } => {
                let op = if incr { Arith::Incr } else { Arith::Decr };
                match store.incr_decr(key, op, delta) {
                    Ok(n) => {
                        if incr { &c.incr_hits } else { &c.decr_hits }.incr();
                        if !noreply {
                            ascii::encode_number(out, n);
                        }
                    }
                    Err(ArithError::NotFound) => {
                        if incr { &c.incr_misses } else { &c.decr_misses }.incr();
                        reply(out, noreply, ascii::NOT_FOUND);
                    }
                    Err(ArithError::NonNumeric) => reply(out, noreply, ascii::NON_NUMERIC),
                    Err(ArithError::OutOfMemory) => reply(out, noreply, ascii::OUT_OF_MEMORY),
                }
            }
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                c.cmd_touch.incr();
                if store.touch(key, self.expiry(exptime)) {
                    c.touch_hits.incr();
                    reply(out, noreply, ascii::TOUCHED);
                } else {
                    c.touch_misses.incr();
                    reply(out, noreply, ascii::NOT_FOUND);
                }
            }
            Command::FlushAll { delay, noreply } => {
                c.cmd_flush.incr();
                if self.shared.settings.disable_flush_all {
                    reply(out, noreply, ascii::FLUSH_DISABLED);
                } else {
                    store.flush_all(self.flush_delay(delay));
                    reply(out, noreply, ascii::OK);
                }
            }
            Command::Version => out.extend_from_slice(VERSION_REPLY.as_bytes()),
            Command::Verbosity { level, noreply } => {
                // memcached caps the level at 2; level N logs as much as -v repeated N times.
                let level = level.min(2);
                self.shared.verbosity.store(level, Ordering::Relaxed);
                if let Some(set) = &self.shared.set_log_level {
                    set(level);
                }
                reply(out, noreply, ascii::OK);
            }
            Command::Stats { args } => self.stats(args, out),
            Command::Quit => return After::CloseAfterWrite,
            Command::Shutdown { mode } => {
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
    fn flush_delay(&self, delay: i64) -> u32 {
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
        let c = self.counters;
        let store = &self.shared.store;
        let rollback = out.len();
        let expiry = touch.map(|exptime| self.expiry(exptime));
        for key in keys {
            if key.len() > ascii::KEY_MAX_LENGTH {
                // memcached drops the values already queued for this line and answers the error.
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
            match (found, touch.is_some()) {
                (Ok(()), false) => c.get_hits.incr(),
                (Ok(()), true) => c.touch_hits.incr(),
                (Err(miss), touch) => {
                    match miss {
                        Miss::Expired => c.get_expired.incr(),
                        Miss::Flushed => c.get_flushed.incr(),
                        Miss::NotFound => {}
                    }
                    if touch {
                        &c.touch_misses
                    } else {
                        &c.get_misses
                    }
                    .incr();
                }
            }
            if touch.is_some() {
                &c.cmd_touch
            } else {
                &c.cmd_get
            }
            .incr();
        }
        out.extend_from_slice(ascii::END);
    }

    /// A storage command whose data block has arrived (`data` is `Err` when it did not end in
    /// `\r\n`).
    #[allow(clippy::too_many_arguments)]
    pub fn store(
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
        let c = self.counters;
        c.cmd_set.incr();
        let Ok(value) = data else {
            if !noreply {
                out.extend_from_slice(ascii::BAD_DATA_CHUNK);
            }
            return;
        };
        let op = match kind {
            StoreKind::Set => StoreOp::Set,
            StoreKind::Add => StoreOp::Add,
            StoreKind::Replace => StoreOp::Replace,
            StoreKind::Append => StoreOp::Append,
            StoreKind::Prepend => StoreOp::Prepend,
            StoreKind::Cas => StoreOp::Cas(cas_unique),
        };
        let outcome = self
            .shared
            .store
            .store(op, key, flags, self.expiry(exptime), value);
        let text = match outcome {
            StoreOutcome::Stored { .. } => {
                if kind == StoreKind::Cas {
                    c.cas_hits.incr();
                }
                ascii::STORED
            }
            StoreOutcome::NotStored => ascii::NOT_STORED,
            StoreOutcome::Exists => {
                c.cas_badval.incr();
                ascii::EXISTS
            }
            StoreOutcome::NotFound => {
                c.cas_misses.incr();
                ascii::NOT_FOUND
            }
            StoreOutcome::TooLarge => {
                c.store_too_large.incr();
                ascii::TOO_LARGE
            }
            StoreOutcome::OutOfMemory => {
                c.store_no_memory.incr();
                ascii::OUT_OF_MEMORY_STORING
            }
        };
        if !noreply {
            out.extend_from_slice(text);
        }
    }

    /// A storage command whose value is larger than `-I`: memcached answers at once, skips the
    /// data block, and (for set) removes the old value so no stale copy survives.
    pub fn too_large(&self, kind: StoreKind, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
        self.counters.store_too_large.incr();
        if kind == StoreKind::Set {
            self.shared.store.delete(key);
        }
        if !noreply {
            out.extend_from_slice(ascii::TOO_LARGE);
        }
    }

    fn stats(&self, mut args: Keys<'_>, out: &mut Vec<u8>) {
        match args.next() {
            None => self.general_stats(out),
            Some(b"reset") => {
                self.shared.reset_stats();
                out.extend_from_slice(ascii::RESET);
                return;
            }
            Some(b"settings") => self.settings_stats(out),
            Some(_) => {
                out.extend_from_slice(ascii::ERROR);
                return;
            }
        }
        out.extend_from_slice(ascii::END);
    }

    fn general_stats(&self, out: &mut Vec<u8>) {
        let shared = self.shared;
        let now = shared.store.clock().now();
        let t = shared.totals();
        let s = shared.store.stats();
        let ((us, uus), (ss, sus)) = stats::rusage();
        let stat = |out: &mut Vec<u8>, name: &str, value: &dyn std::fmt::Display| {
            ascii::encode_stat(out, name, value)
        };
        stat(out, "pid", &std::process::id());
        stat(out, "uptime", &now.saturating_sub(shared.started));
        stat(out, "time", &now);
        stat(out, "version", &env!("CARGO_PKG_VERSION"));
        stat(out, "pointer_size", &(usize::BITS));
        stat(out, "rusage_user", &format_args!("{us}.{uus:06}"));
        stat(out, "rusage_system", &format_args!("{ss}.{sus:06}"));
        stat(out, "max_connections", &shared.settings.conn_limit);
        let curr = shared.curr_connections.load(Ordering::Relaxed);
        stat(out, "curr_connections", &curr);
        let counters: [(&str, u64); 26] = [
            ("total_connections", t.total_connections),
            ("rejected_connections", t.rejected_connections),
            ("cmd_get", t.cmd_get),
            ("cmd_set", t.cmd_set),
            ("cmd_flush", t.cmd_flush),
            ("cmd_touch", t.cmd_touch),
            ("get_hits", t.get_hits),
            ("get_misses", t.get_misses),
            ("get_expired", t.get_expired),
            ("get_flushed", t.get_flushed),
            ("delete_misses", t.delete_misses),
            ("delete_hits", t.delete_hits),
            ("incr_misses", t.incr_misses),
            ("incr_hits", t.incr_hits),
            ("decr_misses", t.decr_misses),
            ("decr_hits", t.decr_hits),
            ("cas_misses", t.cas_misses),
            ("cas_hits", t.cas_hits),
            ("cas_badval", t.cas_badval),
            ("touch_hits", t.touch_hits),
            ("touch_misses", t.touch_misses),
            ("store_too_large", t.store_too_large),
            ("store_no_memory", t.store_no_memory),
            ("bytes_read", t.bytes_read),
            ("bytes_written", t.bytes_written),
            ("limit_maxbytes", s.limit_maxbytes),
        ];
        for (name, value) in counters {
            stat(out, name, &value);
        }
        stat(out, "threads", &shared.settings.threads);
        stat(out, "conn_yields", &t.conn_yields);
        let store_stats: [(&str, u64); 8] = [
            ("bytes", s.bytes),
            ("curr_items", s.curr_items),
            ("total_items", s.total_items),
            ("expired_unfetched", s.expired_unfetched),
            ("evicted_unfetched", s.evicted_unfetched),
            ("evictions", s.evictions),
            ("reclaimed", s.reclaimed),
            (
                "accepting_conns",
                u64::from(!shared.shutdown.load(Ordering::Relaxed)),
            ),
        ];
        for (name, value) in store_stats {
            stat(out, name, &value);
        }
    }

    fn settings_stats(&self, out: &mut Vec<u8>) {
        let s = &self.shared.settings;
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
        let verbosity = self.shared.verbosity.load(Ordering::Relaxed);
        let lines: [(&str, &dyn std::fmt::Display); 18] = [
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
            ("binding_protocol", &"ascii"),
            ("item_size_max", &s.max_item_size),
            ("flush_enabled", &yes_no(!s.disable_flush_all)),
            ("shutdown_command", &yes_no(s.enable_shutdown)),
            ("lock_memory", &yes_no(s.lock_memory)),
        ];
        for (name, value) in lines {
            ascii::encode_stat(out, name, value);
        }
        ascii::encode_stat(out, "large_memory_pages", yes_no(s.enable_largepages));
    }
}
