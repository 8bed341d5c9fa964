//! A worker thread: one mio event loop (epoll, edge-triggered) owning its listeners and its
//! connections. Serving a request takes no lock here (the store does its own sharded locking);
//! the worker's `stats conns` table is locked only on accept and close.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use tern_proto::ascii;

use crate::ops::Ops;
use crate::state::shared::Shared;
use crate::state::watch::CloseReason;
use crate::transport::buffers::BufferPool;
use crate::transport::conn::{self, Conn, Drive, Limits};
use crate::transport::net::Listener;
use crate::transport::stream::Stream;
use crate::transport::udp::UdpServer;

/// Woken by the main thread to stop.
pub const WAKER: Token = Token(0);
const FIRST_LISTENER: usize = 1;
/// UDP socket tokens (`-U`) start here, above any listener's.
const FIRST_UDP: usize = 1 << 19;
/// This worker's flash reads completed (the eventfd of its own ring: `Worker::run`, and the
/// io_uring engine's mio poll, whose UDP tokens stay far below).
pub const FLASH_READS: Token = Token(FIRST_UDP - 1);
/// Connection tokens start here (listener tokens sit below).
const FIRST_CONN: usize = 1 << 20;
/// Connections served since the last sweep that may still hold buffers: past this many, the
/// worker takes back what they no longer need. Lending and taking back on every turn instead
/// cost an unpipelined get ~140 instructions (+7.5%); this way a busy connection keeps its
/// buffers, and at most this many idle ones per worker hold 32 KiB each.
pub(crate) const MAX_HOLDERS: usize = 16;
/// How long a stopping worker waits for clients to take their last replies.
pub(crate) const DRAIN_PATIENCE: Duration = Duration::from_secs(5);
/// Out of descriptors, a worker tries its accepts again this often (memcached's
/// `maxconns_handler` looks every 10 ms), and at once when one of its connections closes.
pub(crate) const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// At most one warning this often about accepts failing (the rest go to the debug log).
pub(crate) const ACCEPT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Accept errors that leave the backlog as it is until a descriptor or memory frees:
/// `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// A worker's accepts stopped by a failing accept (out of descriptors, most often): when to
/// try again, whether `stats` counts the stop, when the log last said so.
#[derive(Default)]
pub(crate) struct AcceptRetry {
    pub at: Option<Instant>,
    /// Counted in `listen_disabled_num` (out of descriptors), until accepts work again.
    counted: bool,
    warned: Option<Instant>,
}

impl AcceptRetry {
    /// Accepts failed with `e`: they stop until [`ACCEPT_RETRY`] from now (or a close).
    pub fn failed(&mut self, shared: &Shared, worker: usize, e: &io::Error) {
        self.at = Some(Instant::now() + ACCEPT_RETRY);
        if !out_of_descriptors(e) {
            tracing::debug!(worker, "accept failed: {e}");
            return;
        }
        if !self.counted {
            self.counted = true;
            shared.listen_pauses.pause();
        }
        if self
            .warned
            .is_none_or(|at| at.elapsed() >= ACCEPT_WARNING_EVERY)
        {
            self.warned = Some(Instant::now());
            tracing::warn!(
                worker,
                "accept failed: {e}; new clients wait in the backlog until a descriptor frees"
            );
        } else {
            tracing::debug!(worker, "accept failed: {e}");
        }
    }

    /// Accepts work again (the backlog was emptied, or accepting is over).
    pub fn succeeded(&mut self, shared: &Shared) {
        self.at = None;
        if self.counted {
            self.counted = false;
            shared.listen_pauses.resume();
        }
    }

    /// A descriptor was freed here: try at once rather than at the next tick.
    pub fn descriptor_freed(&mut self) {
        if self.at.is_some() {
            self.at = Some(Instant::now());
        }
    }

    /// Time to try again.
    pub fn due(&self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }
}

pub struct Worker {
    id: usize,
    shared: Arc<Shared>,
    poll: Poll,
    listeners: Vec<Listener>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections to serve again before sleeping (they stopped with work left).
    again: Vec<usize>,
    limits: Limits,
    /// Per connection slot: its socket's descriptor and when it last brought commands in
    /// (shared with its `stats conns` entry).
    activity: Vec<(i32, Arc<AtomicU32>)>,
    /// This worker's UDP sockets (`-U`), one per listen address.
    udp: Vec<UdpServer>,
    /// UDP sockets that stopped at their per-turn budget with datagrams left.
    udp_again: Vec<usize>,
    /// At -c without maxconns_fast: clients wait (in `waiting`, then in the backlog) until a
    /// connection closes.
    accept_paused: bool,
    waiting: VecDeque<Stream>,
    /// Accepts failed (out of descriptors): tried again from a time, or when a connection
    /// closes.
    accept_retry: AcceptRetry,
    /// The server second of the last idle-connection check.
    idle_checked: u32,
    /// Read and write buffers lent to connections.
    buffers: BufferPool,
    /// Connections that took buffers since the last sweep (`MAX_HOLDERS`).
    holders: Vec<usize>,
    /// The server second of the last stalled-handshake check.
    handshakes_checked: u32,
    /// Connections waiting for flash reads, driven again when the waker says one landed.
    awaiting_flash: Vec<usize>,
}

impl Worker {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        poll: Poll,
        mut listeners: Vec<Listener>,
    ) -> io::Result<Worker> {
        for (i, listener) in listeners.iter_mut().enumerate() {
            poll.registry().register(
                listener.source(),
                Token(FIRST_LISTENER + i),
                Interest::READABLE,
            )?;
        }
        let started = shared.started;
        shared.list_listeners(id, listeners.iter().filter_map(|l| l.conn_entry(started)));
        let s = &shared.settings;
        let limits = Limits {
            max_reqs_per_event: s.max_reqs_per_event,
            // Long get lines (many keys) may grow up to the item size limit.
            max_line: s.max_item_size.max(ascii::MAX_LINE_WITHOUT_NEWLINE),
        };
        let buffers = BufferPool::new(shared.read_budget.clone());
        Ok(Worker {
            id,
            shared,
            poll,
            listeners,
            conns: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            limits,
            activity: Vec::new(),
            udp: Vec::new(),
            udp_again: Vec::new(),
            accept_paused: false,
            waiting: VecDeque::new(),
            accept_retry: AcceptRetry::default(),
            idle_checked: 0,
            buffers,
            holders: Vec::new(),
            handshakes_checked: 0,
            awaiting_flash: Vec::new(),
        })
    }

    /// Serves memcached's UDP protocol on `socket` too, from this worker's poll.
    pub fn add_udp(&mut self, mut socket: mio::net::UdpSocket) -> io::Result<()> {
        let token = Token(FIRST_UDP + self.udp.len());
        self.poll
            .registry()
            .register(&mut socket, token, Interest::READABLE)?;
        self.udp.push(UdpServer::new(socket));
        Ok(())
    }

    /// Runs until shutdown, then lets clients take their last replies.
    pub fn run(mut self) {
        let store = &self.shared.store;
        store.defer_flash_reads_on_this_thread();
        if let Some(wake) = self.shared.workers[self.id].flash_waker.get() {
            // The worker submits its flash reads itself, no I/O thread between (see
            // tern-store's `mechanics/flash/direct.rs`); without a ring they go through those.
            let registry = self.poll.registry();
            store.read_flash_on_this_thread(wake.clone(), |fd| {
                registry.register(
                    &mut mio::unix::SourceFd(&fd),
                    FLASH_READS,
                    Interest::READABLE,
                )
            });
        }
        let mut events = Events::with_capacity(1024);
        let mut draining_since: Option<Instant> = None;
        loop {
            let timeout = if !self.again.is_empty() || !self.udp_again.is_empty() {
                Some(Duration::ZERO)
            } else if self.accept_retry.at.is_some() {
                Some(ACCEPT_RETRY)
            } else if draining_since.is_some() || self.accept_paused {
                Some(Duration::from_millis(50))
            } else if self.shared.settings.idle_timeout_secs > 0 || self.shared.tls.is_some() {
                // -o idle_timeout, and TLS handshakes that stall: look about once a second.
                Some(Duration::from_secs(1))
            } else {
                // Idle: sleep until something happens; no timer wakes an idle worker.
                None
            };
            if self.holders.len() > MAX_HOLDERS {
                self.sweep_buffers();
            }
            // Once per wake-up, cheaper than per request, and exact while the worker sleeps.
            self.buffers.publish(&self.shared.workers[self.id].metrics);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(worker = self.id, "poll failed: {e}");
                    break;
                }
            }
            if !events.is_empty() {
                self.shared.workers[self.id].metrics.wakeup();
            }
            let mut woken = false;
            for event in events.iter() {
                // Connections first: the commonest event meets one comparison.
                match event.token() {
                    Token(t) if t >= FIRST_CONN => {
                        let idx = t - FIRST_CONN;
                        if event.is_read_closed() || event.is_error() {
                            if let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) {
                                conn.hangup = true;
                            }
                        }
                        self.drive(idx)
                    }
                    WAKER => woken = true,
                    FLASH_READS => {
                        self.shared.store.land_flash_reads_on_this_thread();
                        woken = true;
                    }
                    Token(t) if t >= FIRST_UDP => self.serve_udp(t - FIRST_UDP),
                    Token(t) => self.accept(t - FIRST_LISTENER),
                }
            }
            if woken {
                // A flash read landed (or the main thread called): the connections that
                // wait for one run their request again (one still unread waits again).
                let ops = Ops::new(&self.shared, self.id);
                let conns = &self.conns;
                let ready = conn::ready_after_flash(&mut self.awaiting_flash, &ops, |idx| {
                    conns.get(idx).and_then(Option::as_ref)
                });
                for idx in ready {
                    self.drive_with(idx, Conn::drive_after_flash);
                }
            }
            // Looked at before taking: taking an empty list still writes it back (~15
            // instructions a wake-up, most wake-ups).
            if !self.again.is_empty() {
                for idx in std::mem::take(&mut self.again) {
                    if let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) {
                        conn.queued = false;
                        self.drive(idx);
                    }
                }
            }
            if !self.udp_again.is_empty() {
                for idx in std::mem::take(&mut self.udp_again) {
                    self.serve_udp(idx);
                }
            }
            if self.accept_paused && draining_since.is_none() {
                // -o no_maxconns_fast: waiting clients come in as others leave (on any
                // worker, so this one looks again every 50 ms).
                self.admit_waiting();
            }
            if self.accept_retry.due() && draining_since.is_none() {
                // Out of descriptors: one may have freed, here or anywhere in the process.
                self.accept_retry.at = None;
                for listener in 0..self.listeners.len() {
                    self.accept(listener);
                }
                if self.accept_retry.at.is_none() {
                    self.accept_retry.succeeded(&self.shared);
                }
            }
            if self.shared.settings.idle_timeout_secs > 0 {
                self.close_idle();
            }
            self.close_stalled_handshakes();
            if draining_since.is_none() && self.shared.shutdown.load(Ordering::Relaxed) {
                self.begin_drain();
                draining_since = Some(Instant::now());
            }
            if let Some(since) = draining_since {
                let open = self.conns.iter().any(Option::is_some);
                if !open || since.elapsed() > DRAIN_PATIENCE {
                    break;
                }
            }
        }
        for idx in 0..self.conns.len() {
            self.close(idx);
        }
        self.shared.store.stop_reading_flash_on_this_thread();
        tracing::debug!(worker = self.id, "stopped");
    }

    /// Takes back the buffers of the connections served lately that no partial request or
    /// unsent reply needs.
    fn sweep_buffers(&mut self) {
        let mut keep = Vec::new();
        for idx in self.holders.drain(..) {
            // A slot closed and reused may be listed twice: `listed` says whether it is done.
            if let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) {
                if conn.listed {
                    conn.listed = false;
                    conn.release_buffers(&mut self.buffers);
                    if conn.holds_buffers() {
                        keep.push(idx);
                    }
                }
            }
        }
        for &idx in &keep {
            if let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) {
                conn.listed = true;
            }
        }
        self.holders = keep;
    }

    fn serve_udp(&mut self, idx: usize) {
        let ops = Ops::new(&self.shared, self.id);
        let more = self.udp[idx].serve(&ops, self.limits.max_line);
        if more && !self.udp_again.contains(&idx) {
            self.udp_again.push(idx);
        }
    }

    fn accept(&mut self, listener: usize) {
        // Without maxconns_fast, clients over -c wait: first those already taken in, then
        // the backlog, as slots free up. Out of descriptors, all wait for the retry.
        if self.accept_paused || self.accept_retry.at.is_some() {
            return;
        }
        loop {
            let stream = match self.listeners[listener].accept(self.shared.tls.as_deref()) {
                Ok(stream) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // That client is gone (or the call was interrupted): the next may be fine.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    // EMFILE and friends: the connection stays in the backlog, and the
                    // listener's edge is spent, so the worker tries again by itself: at once
                    // when one of its connections closes, else after ACCEPT_RETRY.
                    self.accept_retry.failed(&self.shared, self.id, &e);
                    return;
                }
            };
            if let Err(stream) = self.admit(stream) {
                if self.shared.settings.maxconns_fast {
                    self.shared.workers[self.id].metrics.conn_rejected();
                    let mut stream = stream;
                    // Best effort, like memcached: the reply fits any socket buffer. Plain
                    // text even on a TLS listener, before any handshake, as memcached does.
                    let _ = stream.write_plain(ascii::TOO_MANY_CONNECTIONS);
                } else {
                    // memcached stops accepting at -c: this client waits, unread, and so
                    // do those still in the backlog.
                    self.waiting.push_back(stream);
                    self.accept_paused = true;
                    self.shared.listen_pauses.pause();
                    return;
                }
            }
        }
    }

    /// Takes a waiting client in for each slot that has freed up, then goes back to the
    /// backlog once none waits.
    fn admit_waiting(&mut self) {
        while let Some(stream) = self.waiting.pop_front() {
            if let Err(stream) = self.admit(stream) {
                self.waiting.push_front(stream);
                return;
            }
        }
        self.accept_paused = false;
        self.shared.listen_pauses.resume();
        for listener in 0..self.listeners.len() {
            self.accept(listener);
        }
    }

    /// Registers a new client unless -c connections are open (then it is handed back).
    fn admit(&mut self, stream: Stream) -> Result<(), Stream> {
        if !self.shared.reserve_connection(self.id) {
            return Err(stream);
        }
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let mut conn = Conn::new(stream);
        if let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(FIRST_CONN + idx),
            Interest::READABLE,
        ) {
            tracing::warn!(worker = self.id, "cannot register a connection: {e}");
            self.shared.unreserve_connection(self.id);
            self.free.push(idx);
            return Ok(());
        }
        let entry = conn.stream.conn_entry(self.shared.store.clock().now());
        let activity = self
            .shared
            .list_client(self.id, entry, || conn.stream.peer());
        if idx < self.activity.len() {
            self.activity[idx] = activity;
        } else {
            self.activity.push(activity);
        }
        self.conns[idx] = Some(conn);
        tracing::debug!(worker = self.id, conn = idx, "new connection");
        Ok(())
    }

    /// -o idle_timeout: closes connections that brought no input and had no reply waiting for
    /// that long, measured to the nanosecond from the turns that served them, and that have
    /// nothing to read now (a worker that did not run for a while, stopped or starved, reads
    /// first). Watchers and dumps are never idle. Checked once a server second.
    fn close_idle(&mut self) {
        let second = self.shared.store.clock().now();
        if second == self.idle_checked {
            return;
        }
        self.idle_checked = second;
        let open = self
            .conns
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.as_mut()?)));
        let limit = self.shared.settings.idle_timeout_secs;
        let idle = conn::idle_connections(open, limit, &mut self.again);
        for idx in idle {
            tracing::debug!(worker = self.id, conn = idx, "closing an idle connection");
            self.shared.workers[self.id].metrics.idle_kick();
            self.close_for(idx, Some(CloseReason::IdleTimeout));
        }
    }

    /// TLS: closes connections still handshaking after `--tls-handshake-timeout`, so a client
    /// that stalls mid-handshake holds a slot for that long and no more.
    fn close_stalled_handshakes(&mut self) {
        let Some(tls) = self.shared.tls.clone() else {
            return;
        };
        let second = self.shared.store.clock().now();
        if second == self.handshakes_checked {
            return;
        }
        self.handshakes_checked = second;
        let (now, limit) = (Instant::now(), tls.handshake_timeout());
        let stalled: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(idx, conn)| match &conn.as_ref()?.stream {
                Stream::Tls(s) if s.handshake_stalled(now, limit) => Some(idx),
                _ => None,
            })
            .collect();
        for idx in stalled {
            tracing::debug!(worker = self.id, conn = idx, "TLS handshake timed out");
            tls.counters
                .handshake_errors
                .fetch_add(1, Ordering::Relaxed);
            self.close(idx);
        }
    }

    fn drive(&mut self, idx: usize) {
        self.drive_with(idx, Conn::drive);
    }

    /// Drives connection `idx` through `drive` (`Conn::drive`, or `Conn::drive_after_flash`
    /// when a flash read it waited for landed) and acts on what it asks for.
    #[inline(always)]
    fn drive_with(
        &mut self,
        idx: usize,
        drive: impl FnOnce(&mut Conn, &Ops<'_>, &Limits, &mut BufferPool) -> Drive,
    ) {
        let ops = Ops::new(&self.shared, self.id);
        let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        // Once per wake-up, not per request: for `stats conns`.
        let (fd, last_cmd) = &self.activity[idx];
        ops.worker.serving_fd.store(*fd, Ordering::Relaxed);
        last_cmd.store(self.shared.store.clock().now(), Ordering::Relaxed);
        let drive = drive(conn, &ops, &self.limits, &mut self.buffers);
        if !conn.listed && conn.holds_buffers() {
            conn.listed = true;
            self.holders.push(idx);
        }
        if conn.awaiting_flash() {
            self.awaiting_flash.push(idx);
        }
        match drive {
            Drive::Close => self.close(idx),
            Drive::Open { again } => {
                if again && !conn.queued {
                    conn.queued = true;
                    self.again.push(idx);
                }
                // Writable events are wanted only while replies wait in the buffer: watching
                // them always would wake the loop after every reply the kernel acknowledges.
                let want_writes = conn.has_unsent();
                if want_writes != conn.watching_writes {
                    let interest = if want_writes {
                        Interest::READABLE | Interest::WRITABLE
                    } else {
                        Interest::READABLE
                    };
                    let token = Token(FIRST_CONN + idx);
                    if self
                        .poll
                        .registry()
                        .reregister(&mut conn.stream, token, interest)
                        .is_err()
                    {
                        self.close(idx);
                        return;
                    }
                    conn.watching_writes = want_writes;
                }
            }
        }
    }

    fn close(&mut self, idx: usize) {
        self.close_for(idx, None);
    }

    /// Closes a connection for `reason` where the worker knows it (`-o idle_timeout`), else for
    /// the one the connection recorded (a protocol error, `shutdown`, or normal).
    fn close_for(&mut self, idx: usize, reason: Option<CloseReason>) {
        if let Some(mut conn) = self.conns.get_mut(idx).and_then(Option::take) {
            let reason = reason.unwrap_or_else(|| conn.close_reason());
            let _ = self.poll.registry().deregister(&mut conn.stream);
            conn.close_buffers(&mut self.buffers);
            if let Some(id) = conn.watch_id() {
                self.shared.watchers.remove(id);
            }
            self.shared
                .unlist_client(self.id, self.activity[idx].0, reason, || conn.stream.peer());
            self.free.push(idx);
            // Its descriptor closes as `conn` drops: a client waiting in the backlog may come.
            self.accept_retry.descriptor_freed();
            tracing::debug!(worker = self.id, conn = idx, "connection closed");
        }
    }

    /// Stops accepting and closes every connection once its queued replies are sent.
    fn begin_drain(&mut self) {
        self.accept_retry.succeeded(&self.shared);
        for mut listener in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(listener.source());
        }
        self.shared
            .conn_table(self.id)
            .retain(|e| e.listen_addr.is_some());
        let ops = Ops::new(&self.shared, self.id);
        let mut done = Vec::new();
        for (idx, slot) in self.conns.iter_mut().enumerate() {
            if let Some(conn) = slot {
                conn.finish();
                if conn.flush(&ops).is_err() || !(conn.has_unsent() || conn.resuming()) {
                    done.push(idx);
                }
            }
        }
        for idx in done {
            self.close(idx);
        }
    }
}
