//! `--io-engine=uring`: a worker's event loop on io_uring instead of epoll. Each listener has
//! one multishot accept; each connection one multishot receive that takes buffers from the
//! worker's provided buffer ring; every send a loop turn produced goes to the kernel with the
//! wait for the next completions, in one `io_uring_enter`. Connection sockets sit in the ring's
//! registered file table, so no operation looks their descriptor up.
//!
//! A connection's protocol work is `Conn::drive`'s, unchanged: its socket is a
//! [`Stream::Ring`], whose reads take what the receives brought ([`RingIo`]) and whose writes
//! queue bytes for the turn's send. The wake-up from the main thread (shutdown) and `-U`'s UDP
//! sockets stay on the worker's mio poll, whose epoll descriptor the ring polls.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use mio::{Events, Interest, Poll, Token};
use tern_proto::ascii;

use crate::ops::Ops;
use crate::state::shared::Shared;
use crate::state::watch::CloseReason;
use crate::transport::buffers::BufferPool;
use crate::transport::conn::{self, Conn, Drive, Limits};
use crate::transport::net::Listener;
use crate::transport::stream::{RingIo, Stream};
use crate::transport::udp::UdpServer;
use crate::transport::worker::{
    AcceptRetry, Worker, ACCEPT_RETRY, DRAIN_PATIENCE, FLASH_READS, MAX_HOLDERS, WAKER,
};

mod accept;
mod ring;

pub use ring::unavailable;
use ring::{build_ring, BufRing, BUFFER_GROUP};

/// Received bytes a connection holds unread before its receive is cancelled (backpressure: it
/// reads nothing while its replies wait for the client); re-armed below half of it.
const INPUT_LIMIT: usize = 256 * 1024;

/// What a completion is for: the kind in the top byte of its user data, an index below.
const ACCEPT: u64 = 1 << 56;
const RECV: u64 = 2 << 56;
const SEND: u64 = 3 << 56;
const WAKE: u64 = 4 << 56;
/// Cancels and closes: nothing to do when they complete but free a slot closing.
const CLOSE: u64 = 5 << 56;
/// The index of a cancel that frees no slot.
const NO_SLOT: u64 = u32::MAX as u64;
const KIND: u64 = 0xff << 56;

/// A worker thread that runs the io_uring engine; built on the main thread, the ring itself in
/// the worker's thread (its only submitter). Where the ring cannot be set up there, the worker
/// runs the epoll loop instead.
pub struct UringWorker {
    id: usize,
    shared: Arc<Shared>,
    poll: Poll,
    listeners: Vec<Listener>,
    udp: Vec<mio::net::UdpSocket>,
}

impl UringWorker {
    pub fn new(id: usize, shared: Arc<Shared>, poll: Poll, listeners: Vec<Listener>) -> Self {
        UringWorker {
            id,
            shared,
            poll,
            listeners,
            udp: Vec::new(),
        }
    }

    /// Serves memcached's UDP protocol on `socket` too (from the worker's mio poll).
    pub fn add_udp(&mut self, socket: mio::net::UdpSocket) {
        self.udp.push(socket);
    }

    pub fn run(self) {
        self.shared.store.defer_flash_reads_on_this_thread();
        let ring = build_ring().and_then(|ring| {
            BufRing::new().and_then(|bufs| {
                bufs.register(&ring)?;
                Ok((ring, bufs))
            })
        });
        match ring {
            Ok((ring, bufs)) => match Engine::new(self, ring, bufs) {
                Ok(engine) => engine.run(),
                Err(e) => tracing::error!("io_uring worker cannot start: {e}"),
            },
            Err(e) => {
                tracing::warn!(worker = self.id, "io_uring unavailable ({e}); using epoll");
                let mut worker = match Worker::new(self.id, self.shared, self.poll, self.listeners)
                {
                    Ok(worker) => worker,
                    Err(e) => return tracing::error!("worker cannot start: {e}"),
                };
                for socket in self.udp {
                    if let Err(e) = worker.add_udp(socket) {
                        tracing::error!("UDP socket cannot be polled: {e}");
                    }
                }
                worker.run();
            }
        }
    }
}

/// Where a connection's operations stand in the ring.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    /// A multishot receive is armed (its last completion not seen yet).
    receiving: bool,
    /// Its receive was cancelled because the connection holds enough unread input.
    receive_paused: bool,
    /// The bytes of a send still in flight when the connection closed, kept until the send
    /// completes (the kernel may read them until then).
    orphan: Option<Vec<u8>>,
    /// Cancels and the close submitted when the connection closed, not yet completed.
    closing: u8,
    /// In the registered file table at this slot's index.
    fixed: bool,
    /// Listed to be driven at the end of this turn.
    marked: bool,
    /// In the engine's free list.
    free: bool,
}

impl Slot {
    /// Nothing in the ring refers to the slot any more: its index may serve a new connection.
    fn idle(&self) -> bool {
        self.conn.is_none() && !self.receiving && self.orphan.is_none() && self.closing == 0
    }
}

struct Engine {
    // The ring is declared (and dropped) before the buffer ring it refers to.
    ring: IoUring,
    bufs: BufRing,
    id: usize,
    shared: Arc<Shared>,
    poll: Poll,
    events: Events,
    listeners: Vec<Listener>,
    /// Per listener: its multishot accept is armed.
    accepting: Vec<bool>,
    udp: Vec<UdpServer>,
    udp_again: Vec<usize>,
    /// The poll on the mio poll's descriptor is armed.
    wake_armed: bool,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Slots of registered file table.
    fixed_files: usize,
    /// Slots whose multishot receive ended while their connection goes on.
    rearm: Vec<usize>,
    /// Slots to drive at the end of this turn, and those that stopped with work left.
    to_drive: Vec<usize>,
    again: Vec<usize>,
    /// Connections waiting for flash reads, driven again when the waker says one landed.
    awaiting_flash: Vec<usize>,
    /// Per slot: the socket's descriptor and when it last brought commands in.
    activity: Vec<(i32, Arc<std::sync::atomic::AtomicU32>)>,
    limits: Limits,
    buffers: BufferPool,
    holders: Vec<usize>,
    /// At -c without maxconns_fast: accepts cancelled, clients wait here.
    accept_paused: bool,
    waiting: VecDeque<Stream>,
    /// An accept failed (EMFILE and friends): accepts are tried again from a time, or when a
    /// connection closes.
    accept_retry: AcceptRetry,
    idle_checked: u32,
    draining_since: Option<Instant>,
}

fn kind_index(user_data: u64) -> (u64, usize) {
    (user_data & KIND, (user_data & !KIND) as usize)
}

impl Engine {
    fn new(parts: UringWorker, ring: IoUring, bufs: BufRing) -> io::Result<Engine> {
        let UringWorker {
            id,
            shared,
            poll,
            listeners,
            udp,
        } = parts;
        let mut servers = Vec::new();
        for (i, mut socket) in udp.into_iter().enumerate() {
            poll.registry()
                .register(&mut socket, Token(1 + i), Interest::READABLE)?;
            servers.push(UdpServer::new(socket));
        }
        if let Some(wake) = shared.workers[id].flash_waker.get() {
            // The worker submits its flash reads on a ring of its own, as the epoll worker
            // does (without, they go through the I/O threads: a third of the reads a second).
            let registry = poll.registry();
            shared.store.read_flash_on_this_thread(wake.clone(), |fd| {
                registry.register(
                    &mut mio::unix::SourceFd(&fd),
                    FLASH_READS,
                    Interest::READABLE,
                )
            });
        }
        let started = shared.started;
        shared.list_listeners(id, listeners.iter().filter_map(|l| l.conn_entry(started)));
        // As many registered files as connections may be open (and closing), within the open
        // files limit the kernel holds the table to; connections beyond use their descriptor.
        let nofile = {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes into the struct passed, nothing else.
            match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
                0 => usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX),
                _ => 0,
            }
        };
        let wanted = (shared.settings.conn_limit + 64)
            .min(nofile / 2)
            .min(1 << 16);
        let fixed_files = match ring.submitter().register_files_sparse(wanted as u32) {
            Ok(()) => wanted,
            Err(e) => {
                tracing::debug!(worker = id, "no registered files: {e}");
                0
            }
        };
        let s = &shared.settings;
        let limits = Limits {
            max_reqs_per_event: s.max_reqs_per_event,
            max_line: s.max_item_size.max(ascii::MAX_LINE_WITHOUT_NEWLINE),
        };
        let accepting = vec![false; listeners.len()];
        let buffers = BufferPool::new(shared.read_budget.clone());
        Ok(Engine {
            ring,
            bufs,
            id,
            shared,
            poll,
            events: Events::with_capacity(64),
            listeners,
            accepting,
            udp: servers,
            udp_again: Vec::new(),
            wake_armed: false,
            slots: Vec::new(),
            free: Vec::new(),
            fixed_files,
            rearm: Vec::new(),
            to_drive: Vec::new(),
            again: Vec::new(),
            awaiting_flash: Vec::new(),
            activity: Vec::new(),
            limits,
            buffers,
            holders: Vec::new(),
            accept_paused: false,
            waiting: VecDeque::new(),
            accept_retry: AcceptRetry::default(),
            idle_checked: 0,
            draining_since: None,
        })
    }

    /// Queues `entry`, submitting first when the queue is full.
    ///
    /// # Safety
    /// Whatever memory `entry` points at must stay valid and unmoved until its completion.
    unsafe fn push(&mut self, entry: &squeue::Entry) {
        // SAFETY: passed on to the caller.
        while unsafe { self.ring.submission().push(entry) }.is_err() {
            if let Err(e) = self.ring.submit() {
                tracing::error!(worker = self.id, "io_uring submit failed: {e}");
                std::thread::yield_now();
            }
        }
    }

    /// Queues an entry that points at no memory of ours (or only at memory it never reads).
    fn push_plain(&mut self, entry: squeue::Entry) {
        // SAFETY: accepts, receives into the provided buffers, polls, cancels and closes
        // carry no pointer the kernel reads or writes after submission.
        unsafe { self.push(&entry) }
    }

    fn run(mut self) {
        self.arm_wake();
        for i in 0..self.listeners.len() {
            self.arm_accept(i);
        }
        loop {
            if self.holders.len() > MAX_HOLDERS {
                self.sweep_buffers();
            }
            self.buffers.publish(&self.shared.workers[self.id].metrics);
            self.wait();
            self.complete();
            self.drive_marked();
            self.housekeeping();
            if let Some(since) = self.draining_since {
                let open = self.slots.iter().any(|s| s.conn.is_some());
                if !open || since.elapsed() > DRAIN_PATIENCE {
                    break;
                }
            }
        }
        for idx in 0..self.slots.len() {
            self.close(idx);
        }
        let _ = self.ring.submit();
        self.shared.store.stop_reading_flash_on_this_thread();
        tracing::debug!(worker = self.id, "stopped");
    }

    /// Submits the turn's entries and waits for a completion, as long as the loop may sleep.
    fn wait(&mut self) {
        let timeout = if !self.again.is_empty() || !self.udp_again.is_empty() {
            Some(Duration::ZERO)
        } else if self.accept_retry.at.is_some() {
            Some(ACCEPT_RETRY)
        } else if self.draining_since.is_some() || self.accept_paused {
            Some(Duration::from_millis(50))
        } else if self.shared.settings.idle_timeout_secs > 0 {
            Some(Duration::from_secs(1))
        } else {
            None
        };
        let submitter = self.ring.submitter();
        let result = match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                submitter.submit_with_args(1, &args)
            }
            None => submitter.submit_and_wait(1),
        };
        if let Err(e) = result {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => {}
                _ => tracing::error!(worker = self.id, "io_uring wait failed: {e}"),
            }
        }
    }

    /// Handles every completion posted.
    fn complete(&mut self) {
        let mut woke = false;
        loop {
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            woke = true;
            let (kind, idx) = kind_index(cqe.user_data());
            let (res, flags) = (cqe.result(), cqe.flags());
            match kind {
                RECV => self.received(idx, res, flags),
                SEND => self.sent(idx, res),
                ACCEPT => self.accepted(idx, res, flags),
                WAKE => {
                    if !cqueue::more(flags) {
                        self.wake_armed = false;
                    }
                    self.poll_mio();
                }
                _ => {
                    if let Some(slot) = self.slots.get_mut(idx) {
                        slot.closing = slot.closing.saturating_sub(1);
                        self.free_if_idle(idx);
                    }
                }
            }
        }
        if woke {
            self.shared.workers[self.id].metrics.wakeup();
        }
    }

    fn received(&mut self, idx: usize, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let slot = &mut self.slots[idx];
        if !cqueue::more(flags) {
            slot.receiving = false;
            if !slot.receive_paused && slot.conn.is_some() {
                self.rearm.push(idx);
            }
        }
        if let (Some(bid), Ok(len)) = (bid, usize::try_from(res)) {
            if let Some(io) = slot.conn.as_mut().and_then(ring_io) {
                io.input.extend_from_slice(self.bufs.bytes(bid, len));
            }
            self.bufs.give_back(bid);
        }
        let Some(conn) = slot.conn.as_mut() else {
            return self.free_if_idle(idx);
        };
        match res {
            // A paused receive's cancel, or a multishot receive that ran out of buffers: the
            // end of the turn arms it again.
            r if r == -libc::ECANCELED || r == -libc::ENOBUFS => return,
            0 => {
                conn.hangup = true;
                if let Some(io) = ring_io(conn) {
                    io.eof = true;
                }
            }
            r if r < 0 => {
                if let Some(io) = ring_io(conn) {
                    io.error = Some(-r);
                }
            }
            _ => {}
        }
        self.mark(idx);
    }

    fn sent(&mut self, idx: usize, res: i32) {
        let slot = &mut self.slots[idx];
        if slot.orphan.take().is_some() {
            return self.free_if_idle(idx);
        }
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let Some(io) = ring_io(conn) else { return };
        io.in_flight = false;
        match usize::try_from(res) {
            Ok(n) => {
                io.sent_at += n;
                if io.sent_at < io.sending.len() {
                    // A short send: the rest goes next.
                    return self.send(idx);
                }
                io.sending.clear();
                io.sent_at = 0;
                io.shrink();
                if !io.queued.is_empty() {
                    self.send(idx);
                }
                // The connection goes on if it waits for its sends: replies left in its write
                // buffer, a close after them, a metadump to continue.
                let conn = self.slots[idx].conn.as_ref().expect("checked above");
                if conn.closing() || !conn.waits_for_input() {
                    self.mark(idx);
                }
            }
            Err(_) => {
                io.error = Some(-res);
                self.close(idx);
            }
        }
    }

    fn arm_wake(&mut self) {
        if !self.wake_armed {
            let fd = types::Fd(self.poll.as_raw_fd());
            let poll = opcode::PollAdd::new(fd, libc::POLLIN as u32).multi(true);
            self.push_plain(poll.build().user_data(WAKE));
            self.wake_armed = true;
        }
    }

    fn arm_accept(&mut self, listener: usize) {
        if self.accepting[listener] || self.accept_paused || self.draining_since.is_some() {
            return;
        }
        let fd = types::Fd(self.listeners[listener].as_fd().as_raw_fd());
        let accept = opcode::AcceptMulti::new(fd)
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build();
        self.push_plain(accept.user_data(ACCEPT | listener as u64));
        self.accepting[listener] = true;
    }

    fn arm_receive(&mut self, idx: usize) {
        let slot = &self.slots[idx];
        let Some(fd) = slot.conn.as_ref().and_then(socket_fd) else {
            return;
        };
        let entry = if slot.fixed {
            opcode::RecvMulti::new(types::Fixed(idx as u32), BUFFER_GROUP).build()
        } else {
            opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP).build()
        };
        self.push_plain(entry.user_data(RECV | idx as u64));
        let slot = &mut self.slots[idx];
        slot.receiving = true;
        slot.receive_paused = false;
    }

    /// Hands the connection's queued replies to a send, unless one is in flight.
    fn send(&mut self, idx: usize) {
        let slot = &mut self.slots[idx];
        let fixed = slot.fixed;
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let Some(fd) = socket_fd(conn) else { return };
        let Some(io) = ring_io(conn) else { return };
        if io.in_flight {
            return;
        }
        if io.sent_at == io.sending.len() {
            if io.queued.is_empty() {
                return;
            }
            io.sending.clear();
            io.sent_at = 0;
            std::mem::swap(&mut io.sending, &mut io.queued);
        }
        let rest = &io.sending[io.sent_at..];
        let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
        io.in_flight = true;
        let entry = if fixed {
            opcode::Send::new(types::Fixed(idx as u32), ptr, len)
        } else {
            opcode::Send::new(types::Fd(fd), ptr, len)
        }
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(SEND | idx as u64);
        // SAFETY: `sending` is not touched while `in_flight` (set above), and when its
        // connection closes first it moves to the slot's `orphan` (a move of the Vec, not of
        // its heap bytes) until this send completes; the engine's drop cancels every request
        // before anything is freed.
        unsafe { self.push(&entry) };
    }

    fn mark(&mut self, idx: usize) {
        let slot = &mut self.slots[idx];
        if !slot.marked {
            slot.marked = true;
            self.to_drive.push(idx);
        }
    }

    fn drive_marked(&mut self) {
        let mut queue = std::mem::take(&mut self.to_drive);
        queue.append(&mut self.again);
        for &idx in &queue {
            let slot = &mut self.slots[idx];
            slot.marked = false;
            if let Some(conn) = slot.conn.as_mut() {
                conn.queued = false;
            }
        }
        for &idx in &queue {
            self.drive(idx);
        }
        // The list's allocation is kept for the next turn (with anything marked meanwhile).
        queue.clear();
        queue.append(&mut self.to_drive);
        self.to_drive = queue;
        for idx in std::mem::take(&mut self.udp_again) {
            self.serve_udp(idx);
        }
    }

    fn drive(&mut self, idx: usize) {
        let ops = Ops::new(&self.shared, self.id);
        let Some(conn) = self.slots[idx].conn.as_mut() else {
            return;
        };
        // Once per turn that serves it, not per request: for `stats conns`.
        let (fd, last_cmd) = &self.activity[idx];
        ops.worker.serving_fd.store(*fd, Ordering::Relaxed);
        last_cmd.store(self.shared.store.clock().now(), Ordering::Relaxed);
        let drive = conn.drive(&ops, &self.limits, &mut self.buffers);
        if !conn.listed && conn.holds_buffers() {
            conn.listed = true;
            self.holders.push(idx);
        }
        if conn.awaiting_flash() {
            self.awaiting_flash.push(idx);
        }
        let again = match drive {
            Drive::Close => return self.close(idx),
            Drive::Open { again } => again,
        };
        if again && !conn.queued {
            conn.queued = true;
            self.again.push(idx);
        }
        let ended = conn_ended(conn);
        let unread = ring_io(conn).map_or(0, |io| io.unread());
        let slot = &mut self.slots[idx];
        if unread > INPUT_LIMIT && slot.receiving && !slot.receive_paused {
            // Backpressure: the client sends faster than its replies leave.
            slot.receive_paused = true;
            let cancel = opcode::AsyncCancel::new(RECV | idx as u64).build();
            self.push_plain(cancel.user_data(CLOSE | NO_SLOT));
        } else if slot.receive_paused && !slot.receiving && unread < INPUT_LIMIT / 2 && !ended {
            self.arm_receive(idx);
        }
        self.send(idx);
    }

    fn serve_udp(&mut self, idx: usize) {
        let ops = Ops::new(&self.shared, self.id);
        let more = self.udp[idx].serve(&ops, self.limits.max_line);
        if more && !self.udp_again.contains(&idx) {
            self.udp_again.push(idx);
        }
    }

    /// The mio poll's descriptor is readable: the main thread woke us, flash reads landed, or
    /// UDP datagrams came.
    fn poll_mio(&mut self) {
        if let Err(e) = self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(worker = self.id, "poll failed: {e}");
            }
        }
        let mut udp = Vec::new();
        let mut woken = false;
        for event in self.events.iter() {
            match event.token() {
                WAKER => woken = true,
                FLASH_READS => {
                    self.shared.store.land_flash_reads_on_this_thread();
                    woken = true;
                }
                Token(t) => udp.push(t - 1),
            }
        }
        if woken {
            // A flash read landed (or the main thread called): the connections that wait
            // for one run their request again (one still unread waits again).
            let ops = Ops::new(&self.shared, self.id);
            let slots = &self.slots;
            let ready = conn::ready_after_flash(&mut self.awaiting_flash, &ops, |idx| {
                slots.get(idx).and_then(|slot| slot.conn.as_ref())
            });
            for idx in ready {
                self.mark(idx);
            }
        }
        for idx in udp {
            self.serve_udp(idx);
        }
    }

    fn housekeeping(&mut self) {
        self.arm_wake();
        if self.accept_paused && self.draining_since.is_none() {
            self.admit_waiting();
        }
        if self.accept_retry.due() && self.draining_since.is_none() {
            self.retry_accepts();
        }
        if self.shared.settings.idle_timeout_secs > 0 {
            self.close_idle();
        }
        if self.draining_since.is_none() && self.shared.shutdown.load(Ordering::Relaxed) {
            self.begin_drain();
            self.draining_since = Some(Instant::now());
        }
        // Receives that ended (out of buffers, or by the kernel's choice) go on.
        for idx in std::mem::take(&mut self.rearm) {
            let slot = &self.slots[idx];
            let open = slot.conn.as_ref().is_some_and(|c| !conn_ended(c));
            if open && !slot.receiving && !slot.receive_paused {
                self.arm_receive(idx);
            }
        }
    }

    /// -o idle_timeout, as the epoll worker applies it.
    fn close_idle(&mut self) {
        let second = self.shared.store.clock().now();
        if second == self.idle_checked {
            return;
        }
        self.idle_checked = second;
        let open =
            (self.slots.iter_mut().enumerate()).filter_map(|(i, s)| Some((i, s.conn.as_mut()?)));
        let limit = self.shared.settings.idle_timeout_secs;
        let idle = conn::idle_connections(open, limit, &mut self.again);
        for idx in idle {
            tracing::debug!(worker = self.id, conn = idx, "closing an idle connection");
            self.shared.workers[self.id].metrics.idle_kick();
            self.close_for(idx, Some(CloseReason::IdleTimeout));
        }
    }

    /// Takes back the buffers of the connections served lately that no partial request or
    /// unsent reply needs (as the epoll worker does).
    fn sweep_buffers(&mut self) {
        let mut keep = Vec::new();
        for idx in std::mem::take(&mut self.holders) {
            if let Some(conn) = self.slots[idx].conn.as_mut() {
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
            if let Some(conn) = self.slots[idx].conn.as_mut() {
                conn.listed = true;
            }
        }
        self.holders = keep;
    }

    /// Stops accepting (so a successor taking over gets every new client) and closes every
    /// connection once its queued replies are sent.
    fn begin_drain(&mut self) {
        self.accept_retry.succeeded(&self.shared);
        for i in 0..self.listeners.len() {
            if self.accepting[i] {
                let cancel = opcode::AsyncCancel::new(ACCEPT | i as u64).build();
                self.push_plain(cancel.user_data(CLOSE | NO_SLOT));
            }
        }
        // Submitted now: the cancels must reach the kernel before the listeners close.
        let _ = self.ring.submit();
        self.listeners.clear();
        self.shared
            .conn_table(self.id)
            .retain(|e| e.listen_addr.is_some());
        self.waiting.clear();
        let ops = Ops::new(&self.shared, self.id);
        let mut done = Vec::new();
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            if let Some(conn) = slot.conn.as_mut() {
                conn.finish();
                if conn.flush(&ops).is_err() || !(conn.has_unsent() || conn.resuming()) {
                    done.push(idx);
                }
            }
        }
        for idx in 0..self.slots.len() {
            if !done.contains(&idx) {
                self.send(idx);
            }
        }
        for idx in done {
            self.close(idx);
        }
    }

    fn close(&mut self, idx: usize) {
        self.close_for(idx, None);
    }

    /// As the epoll worker's: the worker's reason (`-o idle_timeout`), else the connection's.
    fn close_for(&mut self, idx: usize, reason: Option<CloseReason>) {
        let Some(mut conn) = self.slots[idx].conn.take() else {
            return;
        };
        let reason = reason.unwrap_or_else(|| conn.close_reason());
        conn.close_buffers(&mut self.buffers);
        if let Some(id) = conn.watch_id() {
            self.shared.watchers.remove(id);
        }
        let fd = self.activity[idx].0;
        self.shared
            .unlist_client(self.id, fd, reason, || conn.stream.peer());
        // The ring lets go of the socket: its receive and send are cancelled and its
        // registered file closed, all in this turn's submit; the descriptor itself closes when
        // `conn` drops below. A send's bytes stay until its completion.
        let mut in_flight = None;
        if let Some(io) = ring_io(&mut conn) {
            if io.in_flight {
                in_flight = Some(std::mem::take(&mut io.sending));
            }
        }
        let slot = &mut self.slots[idx];
        let receiving = slot.receiving;
        let fixed = slot.fixed;
        if in_flight.is_some() {
            slot.orphan = in_flight;
            let cancel = opcode::AsyncCancel::new(SEND | idx as u64).build();
            self.push_plain(cancel.user_data(CLOSE | idx as u64));
            self.slots[idx].closing += 1;
        }
        if receiving {
            let cancel = opcode::AsyncCancel::new(RECV | idx as u64).build();
            self.push_plain(cancel.user_data(CLOSE | idx as u64));
            self.slots[idx].closing += 1;
        }
        if fixed {
            let close = opcode::Close::new(types::Fixed(idx as u32)).build();
            self.push_plain(close.user_data(CLOSE | idx as u64));
            let slot = &mut self.slots[idx];
            slot.closing += 1;
            slot.fixed = false;
        }
        drop(conn);
        // Its descriptor is closed: a client waiting in the backlog may come.
        self.accept_retry.descriptor_freed();
        self.free_if_idle(idx);
        tracing::debug!(worker = self.id, conn = idx, "connection closed");
    }

    fn free_if_idle(&mut self, idx: usize) {
        let slot = &mut self.slots[idx];
        if slot.idle() && !slot.free {
            slot.free = true;
            self.free.push(idx);
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Before any buffer a request may still use is freed (connections' sends, the buffer
        // ring): every request is cancelled, synchronously, then the buffer ring unregistered.
        let submitter = self.ring.submitter();
        let _ = submitter.register_sync_cancel(None, types::CancelBuilder::any());
        let _ = submitter.unregister_buf_ring(BUFFER_GROUP);
    }
}

fn ring_io(conn: &mut Conn) -> Option<&mut RingIo> {
    match &mut conn.stream {
        Stream::Ring(io) => Some(io),
        _ => None,
    }
}

fn socket_fd(conn: &Conn) -> Option<RawFd> {
    match &conn.stream {
        Stream::Ring(io) => match &io.socket {
            Stream::Tcp(s) => Some(s.as_raw_fd()),
            Stream::Unix(s) => Some(s.as_raw_fd()),
            _ => None,
        },
        _ => None,
    }
}

/// The connection's receive has nothing more to bring: the peer closed or it failed.
fn conn_ended(conn: &Conn) -> bool {
    match &conn.stream {
        Stream::Ring(io) => io.eof || io.error.is_some(),
        _ => true,
    }
}
