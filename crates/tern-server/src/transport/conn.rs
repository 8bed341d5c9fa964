//! One client connection: a read buffer parsed in place (many requests per read, a request split
//! at any byte waits for the rest, a large value grows the buffer once to its exact size), and a
//! write buffer that collects every reply of a wake-up so they leave in one write. Both are
//! borrowed from the worker's [`BufferPool`] and given back once no partial request or unsent
//! reply needs them, when the worker sweeps its recently served connections (`worker.rs`): an
//! idle connection holds neither.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use rustix::net::RecvFlags;
use tern_store::DumpCursor;

use crate::config;
use crate::ops::Ops;
use crate::state::recording::monotonic_nanos;
use crate::state::sasl::SaslConn;
use crate::state::watch::CloseReason;
use crate::transport::auth::{self, Gate};
use crate::transport::buffers::{BufferPool, BUFFER};
use crate::transport::stream::Stream;
use crate::wire::framing::{After, Replies};
use crate::wire::{binary, text};

/// Read into the buffer only when at least this much room is free at its end (else compact).
const MIN_READ_ROOM: usize = 4 * 1024;
/// A metadump adds steps while fewer unsent bytes than this wait, at most this many per turn.
const METADUMP_BUFFER: usize = 256 * 1024;
const METADUMP_STEPS_PER_TURN: usize = 8;
/// Backpressure: with more unsent reply bytes than this, the connection reads and serves no
/// further requests until the client has taken some.
pub const WRITE_HIGH_WATER: usize = 1 << 20;

/// What the event loop does with a connection after driving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drive {
    /// Keep it; `again` when it stopped with work left (the `-R` cap, or a full read buffer),
    /// so the loop must serve it again without waiting for a new readiness edge.
    Open {
        again: bool,
    },
    Close,
}

pub struct Conn {
    pub stream: Stream,
    /// Empty while borrowed from no pool (nothing unparsed).
    rbuf: Box<[u8]>,
    /// Unparsed bytes are `rbuf[rstart..rend]`.
    rstart: usize,
    rend: usize,
    /// Bytes the request at `rstart` needs in the buffer before it can run (0: unknown).
    need: usize,
    /// `need` is exact (a data block), so grow to it and no further.
    need_exact: bool,
    /// Data bytes still to skip after a value refused as too large.
    swallow: usize,
    /// What the connection holds of `-o read_buf_mem_limit`'s budget: the size of its grown
    /// read buffer, or of the one a data block it waits for was promised; 0 with a standard one.
    rbuf_charge: usize,
    /// No capacity while borrowed from no pool (nothing unsent).
    wbuf: Vec<u8>,
    wsent: usize,
    /// `wbuf`'s capacity past the standard size as the pool last counted it.
    wbuf_extra: usize,
    close_after_write: bool,
    /// What `conn_close` will say, from the request that closed it (watch's `connevents`).
    close_reason: CloseReason,
    /// A get stopped between its keys waits at `rstart`: it is finished before a close.
    resuming: bool,
    /// Its next request waits for flash reads: those asked for (the worker drives it again
    /// once one has landed); empty when it waits for none.
    awaiting_flash: Vec<u64>,
    /// When the batch whose request waits for flash began: that request's latency counts
    /// from there, its wait included.
    waiting_since: Option<u64>,
    /// While it waits for flash: its last read stopped at a full buffer, so the socket may
    /// hold more that no readiness edge will announce; the drive after the read reads it.
    read_after_flash: bool,
    peer_closed: bool,
    /// Already in the worker's queue of connections to serve again.
    pub queued: bool,
    /// In the worker's list of connections that may hold buffers to give back.
    pub listed: bool,
    /// Registered for writable events too (only while replies wait for the client to read).
    pub watching_writes: bool,
    /// The peer shut down its side (epoll's RDHUP): read until end of stream.
    pub hangup: bool,
    /// Decided once, by the connection's first byte, as memcached does.
    protocol: Protocol,
    /// The connection asked to `watch`: log lines go to its socket (see `watch.rs`) and its
    /// input is read only to notice the client leaving.
    watch_id: Option<u64>,
    /// Where a `lru_crawler metadump` stands: lines are produced as the client takes them.
    metadump: Option<DumpCursor>,
    /// Passed `-Y`'s or `-S`'s authentication (unused without them).
    authenticated: bool,
    /// `-S`: the connection's SASL exchange, from its first SASL request until it closes.
    sasl: Option<SaslConn>,
    /// When input last came in, or replies last waited to be sent ([`monotonic_nanos`]): what
    /// `-o idle_timeout` measures from. Set from the clock read a turn with input makes anyway.
    last_active: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// Nothing received yet.
    Unknown,
    /// Text: classic commands and meta commands.
    Text,
    Binary,
}

/// A connection's write buffer as the serve loops see it: backlogged past
/// [`WRITE_HIGH_WATER`] unsent bytes.
struct ConnReplies<'a> {
    wbuf: &'a mut Vec<u8>,
    wsent: usize,
    rbuf_charge: &'a mut usize,
    pool: &'a BufferPool,
}

impl Replies for ConnReplies<'_> {
    #[inline]
    fn buf(&mut self) -> &mut Vec<u8> {
        self.wbuf
    }

    #[inline]
    fn backlogged(&self) -> bool {
        self.wbuf.len() - self.wsent > WRITE_HIGH_WATER
    }

    fn hold(&mut self, bytes: usize) -> bool {
        self.pool.charge_read(self.rbuf_charge, bytes)
    }
}

/// `-o idle_timeout`'s check over a worker's open connections (`limit_secs` seconds, the
/// judgement [`Conn::idleness`]'s): those with input waiting are queued to be served (their
/// index pushed to `again`), the idle ones returned for the worker to close.
pub fn idle_connections<'a>(
    conns: impl Iterator<Item = (usize, &'a mut Conn)>,
    limit_secs: u64,
    again: &mut Vec<usize>,
) -> Vec<usize> {
    let limit = limit_secs.saturating_mul(1_000_000_000);
    let now = monotonic_nanos();
    let mut idle = Vec::new();
    for (idx, conn) in conns {
        match conn.idleness(now, limit) {
            Idleness::Active => {}
            Idleness::InputWaiting => {
                if !conn.queued {
                    conn.queued = true;
                    again.push(idx);
                }
            }
            Idleness::Idle => idle.push(idx),
        }
    }
    idle
}

/// What `-o idle_timeout` finds of a connection ([`Conn::idleness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Idleness {
    /// Input or a reply within the timeout, or busy now.
    Active,
    /// Quiet for the timeout by its clock, but input (or the end) waits in its socket: a worker
    /// that was not running (stopped, starved of CPU) has yet to read it.
    InputWaiting,
    Idle,
}

/// Per-call limits from the settings.
pub struct Limits {
    pub max_reqs_per_event: usize,
    pub max_line: usize,
}

impl Conn {
    pub fn new(stream: Stream) -> Conn {
        Conn {
            stream,
            rbuf: Box::default(),
            rstart: 0,
            rend: 0,
            need: 0,
            need_exact: false,
            swallow: 0,
            rbuf_charge: 0,
            wbuf: Vec::new(),
            wsent: 0,
            wbuf_extra: 0,
            close_after_write: false,
            close_reason: CloseReason::Normal,
            resuming: false,
            awaiting_flash: Vec::new(),
            waiting_since: None,
            read_after_flash: false,
            peer_closed: false,
            queued: false,
            listed: false,
            watching_writes: false,
            hangup: false,
            protocol: Protocol::Unknown,
            watch_id: None,
            metadump: None,
            authenticated: false,
            sasl: None,
            last_active: monotonic_nanos(),
        }
    }

    /// `-o idle_timeout`'s judgement at `now` ([`monotonic_nanos`]): idle when no input came
    /// and no reply waited for `limit` nanoseconds, and a read attempt now finds nothing. A
    /// connection busy now (replies unsent, watching, dumping, queued to be served again)
    /// counts as active from now.
    fn idleness(&mut self, now: u64, limit: u64) -> Idleness {
        if now.saturating_sub(self.last_active) < limit {
            return Idleness::Active;
        }
        if !self.waits_for_input() || self.queued {
            self.last_active = now;
            return Idleness::Active;
        }
        if socket_has_input(&self.stream) {
            return Idleness::InputWaiting;
        }
        Idleness::Idle
    }

    /// Waiting for the client's next command: no reply unsent, not watching or dumping (what
    /// `-o idle_timeout` may close).
    pub fn waits_for_input(&self) -> bool {
        !self.has_unsent() && self.watch_id.is_none() && self.metadump.is_none()
    }

    /// Why the connection ends, as far as it knows (a protocol error, `shutdown`, or normal).
    pub fn close_reason(&self) -> CloseReason {
        self.close_reason
    }

    /// The watcher this connection is, to forget when it closes.
    pub fn watch_id(&self) -> Option<u64> {
        self.watch_id
    }

    fn unsent(&self) -> usize {
        self.wbuf.len() - self.wsent
    }

    pub fn has_unsent(&self) -> bool {
        self.unsent() > 0 || self.stream.pending_output()
    }

    /// Whether the connection waits for flash reads (see `Progress::awaiting_flash`).
    pub fn awaiting_flash(&self) -> bool {
        !self.awaiting_flash.is_empty()
    }

    /// Whether a connection waiting for flash reads should be driven again now.
    fn flash_ready(&self, ops: &Ops<'_>) -> bool {
        ops.flash_ready(&self.awaiting_flash)
    }

    /// A get stopped between its keys is still to finish.
    pub fn resuming(&self) -> bool {
        self.resuming
    }

    /// Asked to close once its replies are sent (`quit`, a drain): an engine that learns of sends
    /// completing (io_uring) drives it again then.
    pub fn closing(&self) -> bool {
        self.close_after_write
    }

    /// Stop serving: send what is queued, then close.
    pub fn finish(&mut self) {
        self.close_after_write = true;
    }

    /// Holds a buffer (pending bytes or not).
    pub fn holds_buffers(&self) -> bool {
        !self.rbuf.is_empty() || self.wbuf.capacity() != 0
    }

    /// Gives both buffers back whatever they hold, as the connection closes.
    pub fn close_buffers(&mut self, pool: &mut BufferPool) {
        self.rstart = self.rend;
        self.wsent = self.wbuf.len();
        self.release_buffers(pool);
        pool.release_charge(&mut self.rbuf_charge);
    }

    /// Returns the read buffer when no byte in it waits to be parsed and the write buffer when
    /// no reply waits to be sent; one kept for a later turn is re-counted if it grew.
    pub fn release_buffers(&mut self, pool: &mut BufferPool) {
        if self.rstart == self.rend && !self.rbuf.is_empty() {
            self.rstart = 0;
            self.rend = 0;
            pool.put_read(std::mem::take(&mut self.rbuf));
            pool.release_charge(&mut self.rbuf_charge);
        }
        if self.wsent == self.wbuf.len() {
            if self.wbuf.capacity() != 0 {
                self.wbuf.clear();
                self.wsent = 0;
                pool.put_write(std::mem::take(&mut self.wbuf), self.wbuf_extra);
                self.wbuf_extra = 0;
            }
        } else if self.wbuf.capacity() - BUFFER != self.wbuf_extra {
            let extra = self.wbuf.capacity() - BUFFER;
            pool.write_grew(self.wbuf_extra, extra);
            self.wbuf_extra = extra;
        }
    }

    /// Borrows a write buffer unless the connection holds one.
    #[inline]
    fn ensure_wbuf(&mut self, pool: &mut BufferPool) {
        if self.wbuf.capacity() == 0 {
            self.wbuf = pool.take_write();
        }
    }

    /// Reads what the socket has, serves up to `-R` requests, and writes the replies,
    /// borrowing buffers from `pool` where it holds none.
    pub fn drive(&mut self, ops: &Ops<'_>, limits: &Limits, pool: &mut BufferPool) -> Drive {
        self.drive_reading::<true>(ops, limits, pool)
    }

    /// `drive` once a flash read the connection waited for has landed, without reading the
    /// socket (unless its last read filled the buffer): what came while it waited raised a
    /// readiness edge of its own and was read then, so a read now would only say WouldBlock,
    /// a system call for each such request.
    pub fn drive_after_flash(
        &mut self,
        ops: &Ops<'_>,
        limits: &Limits,
        pool: &mut BufferPool,
    ) -> Drive {
        self.drive_reading::<false>(ops, limits, pool)
    }

    #[inline(always)]
    fn drive_reading<const READ: bool>(
        &mut self,
        ops: &Ops<'_>,
        limits: &Limits,
        pool: &mut BufferPool,
    ) -> Drive {
        // Replies left from an earlier turn go first. Usually there are none (every turn's
        // replies leave with its flush), and then the call is skipped: it costs an unpipelined
        // request ~30 instructions.
        if self.has_unsent() {
            // A client still taking replies is not idle (a clock read per such turn only).
            self.last_active = monotonic_nanos();
            if self.flush(ops).is_err() {
                return Drive::Close;
            }
        }
        if self.close_after_write && !self.resuming && !self.awaiting_flash() {
            return if self.has_unsent() {
                Drive::Open { again: false }
            } else {
                Drive::Close
            };
        }
        if self.unsent() > WRITE_HIGH_WATER {
            // Backpressure: the writable edge brings us back once the client reads.
            return Drive::Open { again: false };
        }
        if let Some(cursor) = self.metadump {
            self.ensure_wbuf(pool);
            return self.continue_metadump(ops, cursor);
        }
        if self.watch_id.is_some() {
            // A watcher sends nothing more that matters; its end closes the connection.
            return match self.fill(ops, pool) {
                Ok(_) if !self.peer_closed => {
                    self.rstart = self.rend;
                    Drive::Open { again: false }
                }
                _ => Drive::Close,
            };
        }
        let mut buffer_full = false;
        if (READ || self.read_after_flash) && !self.peer_closed && !self.close_after_write {
            match self.fill(ops, pool) {
                Ok(full) => buffer_full = full,
                Err(_) => return Drive::Close,
            }
        }
        // Latency per batch, not per request (a clock read costs more than the recording):
        // from here, after the read, to the write of the batch's replies.
        let started = (self.rstart < self.rend).then(monotonic_nanos);
        // A request run again after its flash read counts from its first run.
        let started = self.waiting_since.take().or(started);
        self.ensure_wbuf(pool);
        let served = self.serve(ops, limits, pool);
        let flushed = served.is_some() && self.flush(ops).is_ok();
        if let Some(started) = started {
            // The same read serves -o idle_timeout: input came in this turn.
            self.last_active = started;
            ops.worker.finish_batch(started);
        }
        let Some(yielded) = served.filter(|_| flushed) else {
            return Drive::Close;
        };
        if self.awaiting_flash() {
            // Neither closed nor driven again before the read lands (the worker drives it
            // then): its request is unfinished. A read that filled the buffer may have left
            // input in the socket: it is read then (not by driving the connection until then).
            self.waiting_since = started;
            self.read_after_flash = buffer_full;
            return Drive::Open { again: false };
        }
        if (self.close_after_write && !self.resuming)
            || (self.peer_closed && !yielded && !self.resuming)
        {
            // memcached closes on EOF; what the client sent before it is answered first.
            self.close_after_write = true;
            return if self.has_unsent() {
                Drive::Open { again: false }
            } else {
                Drive::Close
            };
        }
        let blocked = self.unsent() > WRITE_HIGH_WATER;
        Drive::Open {
            again: !blocked && (yielded || buffer_full),
        }
    }

    /// Adds a few steps of a metadump to the write buffer and sends what the socket takes; the
    /// rest comes on later turns (each step holds one shard's lock briefly), so a dump of a
    /// large cache neither fills memory nor keeps the worker from its other connections.
    fn continue_metadump(&mut self, ops: &Ops<'_>, mut cursor: DumpCursor) -> Drive {
        for _ in 0..METADUMP_STEPS_PER_TURN {
            if self.unsent() > METADUMP_BUFFER {
                break;
            }
            match ops.metadump_step(cursor, &mut self.wbuf) {
                Some(next) => cursor = next,
                None => {
                    self.wbuf.extend_from_slice(b"END\r\n");
                    self.metadump = None;
                    return match self.flush(ops) {
                        Ok(()) => Drive::Open { again: true },
                        Err(_) => Drive::Close,
                    };
                }
            }
        }
        self.metadump = Some(cursor);
        if self.flush(ops).is_err() {
            return Drive::Close;
        }
        // More follows at once while the socket takes it; a full one brings a writable edge.
        Drive::Open {
            again: self.unsent() <= METADUMP_BUFFER,
        }
    }

    /// Reads until the socket is drained or the buffer is full; true when it stopped full.
    fn fill(&mut self, ops: &Ops<'_>, pool: &mut BufferPool) -> io::Result<bool> {
        if self.rbuf.is_empty() {
            self.rbuf = pool.take_read();
        }
        loop {
            if !self.make_room(pool) {
                // A line longer than the budget lets a buffer grow to: memcached closes a
                // connection whose read buffer it cannot get.
                ops.worker.metrics.read_buf_oom();
                return Err(io::ErrorKind::OutOfMemory.into());
            }
            if self.rend == self.rbuf.len() {
                return Ok(true);
            }
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    self.peer_closed = true;
                    return Ok(false);
                }
                Ok(n) => {
                    let room = self.rbuf.len() - self.rend;
                    self.rend += n;
                    ops.worker.metrics.read_bytes(n as u64);
                    if n < room && !self.hangup {
                        // A short read took all the socket had; anything arriving later raises
                        // a new edge. This saves the read that would only say WouldBlock. After
                        // a hang-up the next read must run: it is the one that sees the end.
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes room at the end of the read buffer: compacts unparsed bytes to the front, grows the
    /// buffer only when the pending request needs more than it holds (`need`). With no room
    /// left and no need to grow, the buffer stays full: serving requests frees it. (A grown
    /// buffer goes back to the pool, which frees it, once it holds nothing pending.) False when
    /// the buffer must grow and `-o read_buf_mem_limit` leaves no room for it.
    fn make_room(&mut self, pool: &mut BufferPool) -> bool {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        let len = self.rbuf.len();
        if len - self.rend >= MIN_READ_ROOM && len - self.rstart >= self.need {
            return true;
        }
        let pending = self.rend - self.rstart;
        if self.need > len {
            // A data block grows the buffer to its exact size, once; a long line doubles it.
            let size = if self.need_exact {
                self.need
            } else {
                self.need.max(len * 2)
            };
            // A data block was charged when its command asked to wait for it; a long line is
            // charged here.
            if !pool.charge_read(&mut self.rbuf_charge, size) {
                return false;
            }
            let mut grown = pool.alloc_read(size);
            grown[..pending].copy_from_slice(&self.rbuf[self.rstart..self.rend]);
            pool.put_read(std::mem::replace(&mut self.rbuf, grown));
        } else if self.rstart > 0 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
        } else {
            return true;
        }
        self.rstart = 0;
        self.rend = pending;
        true
    }

    /// Serves buffered requests with the connection's protocol: skips what is left of a
    /// refused request first, then runs one serve loop over the buffer. `Some(true)` when it
    /// stopped at the `-R` cap with requests left, `None` when the connection must close at
    /// once.
    fn serve(&mut self, ops: &Ops<'_>, limits: &Limits, pool: &BufferPool) -> Option<bool> {
        if self.swallow > 0 {
            let skip = self.swallow.min(self.rend - self.rstart);
            self.rstart += skip;
            self.swallow -= skip;
            if self.swallow > 0 {
                return Some(false);
            }
        }
        while !self.authenticated {
            let mut out = ConnReplies {
                wbuf: &mut self.wbuf,
                wsent: self.wsent,
                rbuf_charge: &mut self.rbuf_charge,
                pool,
            };
            let input = &self.rbuf[self.rstart..self.rend];
            if input.is_empty() {
                return Some(false);
            }
            let gate = match (&ops.shared.auth, &ops.shared.sasl) {
                (Some(auth), _) => auth::gate(auth, input, limits.max_line, &mut out),
                (None, Some(sasl)) => auth::sasl_gate(sasl, &mut self.sasl, input, &mut out),
                (None, None) => Gate::Open { consumed: 0 },
            };
            match gate {
                Gate::Open { consumed } => {
                    self.rstart += consumed;
                    self.authenticated = true;
                    self.sasl = None;
                }
                // Every request waiting in the buffer is answered in this turn.
                Gate::Wait { consumed } => self.rstart += consumed,
                Gate::Need { need, exact } => {
                    (self.need, self.need_exact) = (need, exact);
                    return Some(false);
                }
                Gate::Refused => {
                    self.close_after_write = true;
                    return Some(false);
                }
            }
        }
        let input = &self.rbuf[self.rstart..self.rend];
        if self.protocol == Protocol::Unknown {
            self.protocol = match (ops.shared.settings.protocol, input.first()) {
                (_, None) => return Some(false),
                // -B: one protocol for every connection, as memcached does.
                (config::Protocol::Ascii, _) => Protocol::Text,
                (config::Protocol::Binary, _) => Protocol::Binary,
                (config::Protocol::Auto, Some(&tern_proto::binary::REQUEST_MAGIC)) => {
                    Protocol::Binary
                }
                (config::Protocol::Auto, Some(_)) => Protocol::Text,
            };
        }
        let mut out = ConnReplies {
            wbuf: &mut self.wbuf,
            wsent: self.wsent,
            rbuf_charge: &mut self.rbuf_charge,
            pool,
        };
        // Closing (a shutdown's drain), only the get in progress is finished.
        let budget = if self.close_after_write {
            1
        } else {
            limits.max_reqs_per_event
        };
        let progress = match self.protocol {
            Protocol::Binary => binary::serve(ops, input, budget, &mut out),
            _ => text::serve(ops, input, budget, limits.max_line, &mut out),
        };
        self.awaiting_flash.clear();
        if progress.awaiting_flash {
            self.awaiting_flash = Self::ask_flash_reads(ops);
        }
        self.rstart += progress.consumed;
        self.resuming = progress.resume.is_some();
        if let Some(resume) = progress.resume {
            // The get goes on from its next key: its command moves up to that key.
            let line = self.rstart;
            let start = line + resume.next_key - resume.prefix;
            self.rbuf.copy_within(line..line + resume.prefix, start);
            self.rstart = start;
        }
        self.swallow = progress.swallow;
        self.need = progress.need;
        self.need_exact = progress.need_exact;
        match progress.after {
            After::Continue => Some(progress.yielded),
            After::CloseAfterWrite => {
                self.close_after_write = true;
                Some(false)
            }
            After::CloseNow => {
                self.close_reason = CloseReason::Shutdown;
                None
            }
            After::HangUp => {
                self.close_reason = CloseReason::Error;
                None
            }
            After::Metadump => {
                self.metadump = Some(DumpCursor::default());
                Some(true)
            }
            After::Watch(kinds) => {
                self.rstart = self.rend;
                // The reply (`OK`) goes out through the watcher's socket, ahead of any line.
                let socket = self.stream.duplicate().ok()?;
                let greeting = &self.wbuf[self.wsent..];
                self.watch_id = Some(ops.shared.watchers.add(kinds, socket, greeting).ok()?);
                self.wbuf.clear();
                self.wsent = 0;
                Some(false)
            }
        }
    }

    /// Asks for the flash reads the requests just deferred need: off the request path.
    #[cold]
    #[inline(never)]
    fn ask_flash_reads(ops: &Ops<'_>) -> Vec<u64> {
        ops.ask_flash_reads()
    }

    /// Writes queued replies until done or the socket is full.
    pub fn flush(&mut self, ops: &Ops<'_>) -> io::Result<()> {
        while self.wsent < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wsent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wsent += n;
                    ops.worker.metrics.written_bytes(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // A TLS session's last records may still wait for the socket (has_unsent says so).
        self.stream.flush()?;
        self.wbuf.clear();
        self.wsent = 0;
        Ok(())
    }
}

/// Whether input (or the end, or an error) waits that the connection has not read: in its
/// socket, or, on the ring, received and not read yet. A peek: no byte is consumed.
fn socket_has_input(stream: &Stream) -> bool {
    fn peek(socket: impl AsFd) -> bool {
        // Only "would block" finds nothing: Ok(0) is the end and an error (a reset) the end
        // too, which the connection's next read sees and closes on, as it would without
        // -o idle_timeout.
        let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
        rustix::net::recv(socket, &mut [0u8; 1], flags) != Err(rustix::io::Errno::AGAIN)
    }
    match stream {
        Stream::Tcp(s) => peek(s),
        Stream::Unix(s) => peek(s),
        Stream::Tls(s) => peek(&s.tcp),
        Stream::Ring(io) => io.unread() > 0 || socket_has_input(&io.socket),
    }
}

/// Takes out of `waiting` (a worker's connections that wait for flash reads, by index; `conn_at`
/// finds each) those to drive again now that a read landed; one gone is among them (driving
/// its slot finds nothing). The rest stay, to wait again.
pub fn ready_after_flash<'c>(
    waiting: &mut Vec<usize>,
    ops: &Ops<'_>,
    conn_at: impl Fn(usize) -> Option<&'c Conn>,
) -> Vec<usize> {
    let (ready, still): (Vec<usize>, Vec<usize>) = std::mem::take(waiting)
        .into_iter()
        .partition(|&idx| conn_at(idx).is_none_or(|conn| conn.flash_ready(ops)));
    *waiting = still;
    ready
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use tern_store::{Clock, Config, Store};

    use super::*;
    use crate::config::Settings;
    use crate::state::shared::Shared;

    fn shared() -> Shared {
        let clock = Arc::new(Clock::manual(1_700_000_000));
        let store = Store::new(Config::default(), clock).unwrap();
        Shared::new(Settings::default(), store)
    }

    fn pair() -> (Conn, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let stream = Stream::Unix(mio::net::UnixStream::from_std(ours));
        (Conn::new(stream), theirs)
    }

    /// Drives until the connection has nothing left to do with what it was sent.
    fn drive_all(conn: &mut Conn, ops: &Ops<'_>, limits: &Limits, pool: &mut BufferPool) -> Drive {
        loop {
            match conn.drive(ops, limits, pool) {
                Drive::Open { again: true } => continue,
                other => return other,
            }
        }
    }

    fn pool_figures(
        pool: &mut BufferPool,
        metrics: &tern_admin::WorkerMetrics,
    ) -> tern_admin::ConnBuffers {
        pool.publish(metrics);
        metrics.snapshot().conn_buffers
    }

    const LIMITS: Limits = Limits {
        max_reqs_per_event: 20,
        max_line: 1 << 20,
    };

    #[test]
    fn a_large_value_grows_the_read_buffer_once_to_its_exact_size() {
        let shared = shared();
        let ops = Ops::new(&shared, 0);
        let (mut conn, mut client) = pair();
        let mut pool = BufferPool::default();
        let size = 1 << 20;
        let header = format!("set big 0 0 {size}\r\n");
        let exact = header.len() + size + 2;
        let mut request = header.into_bytes();
        request.extend(std::iter::repeat_n(b'v', size));
        request.extend_from_slice(b"\r\n");
        let mut sizes = Vec::new();
        for chunk in request.chunks(10_000) {
            client.write_all(chunk).unwrap();
            assert_eq!(
                drive_all(&mut conn, &ops, &LIMITS, &mut pool),
                Drive::Open { again: false }
            );
            conn.release_buffers(&mut pool);
            if sizes.last() != Some(&conn.rbuf.len()) {
                sizes.push(conn.rbuf.len());
            }
        }
        // 16 KiB, then the exact size once (no doubling, no step-by-step growth), then none.
        assert_eq!(sizes, [BUFFER, exact, 0]);
        let mut reply = [0u8; 8];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"STORED\r\n");
        client.write_all(b"get nothing\r\n").unwrap();
        drive_all(&mut conn, &ops, &LIMITS, &mut pool);
        conn.release_buffers(&mut pool);
        assert!(conn.rbuf.is_empty(), "the buffer is given back");
        assert!(conn.wbuf.capacity() == 0, "so is the write buffer");
        let metrics = tern_admin::WorkerMetrics::new();
        let mut stats = pool_figures(&mut pool, &metrics);
        assert_eq!(
            stats.read_buf_bytes, BUFFER as u64,
            "the large one is freed"
        );
        assert_eq!(stats.read_buf_bytes_free, BUFFER as u64);
        assert_eq!(
            stats.response_obj_bytes, BUFFER as u64,
            "the write buffer is pooled"
        );
        conn.close_buffers(&mut pool);
        stats = pool_figures(&mut pool, &metrics);
        assert_eq!(stats.read_buf_count, 1);
        assert_eq!(stats.read_buf_bytes_free, BUFFER as u64);
    }

    #[test]
    fn a_skipped_value_does_not_grow_the_read_buffer() {
        let shared = shared();
        let ops = Ops::new(&shared, 0);
        let (mut conn, mut client) = pair();
        let mut pool = BufferPool::default();
        let size = (1 << 20) + 1;
        client
            .write_all(format!("set big 0 0 {size}\r\n").as_bytes())
            .unwrap();
        conn.drive(&ops, &LIMITS, &mut pool);
        let data = vec![b'v'; size];
        for chunk in data.chunks(50_000) {
            client.write_all(chunk).unwrap();
            drive_all(&mut conn, &ops, &LIMITS, &mut pool);
            assert!(conn.rbuf.len() <= BUFFER);
        }
        client.write_all(b"\r\nget big\r\n").unwrap();
        drive_all(&mut conn, &ops, &LIMITS, &mut pool);
        let want = b"SERVER_ERROR object too large for cache\r\nEND\r\n";
        let mut reply = vec![0u8; want.len()];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(reply, want);
    }

    #[test]
    fn idle_only_without_input_for_the_whole_timeout() {
        let shared = shared();
        let ops = Ops::new(&shared, 0);
        let (mut conn, mut client) = pair();
        let mut pool = BufferPool::default();
        let second = 1_000_000_000;
        let start = conn.last_active;
        assert_eq!(conn.idleness(start + second - 1, second), Idleness::Active);
        assert_eq!(conn.idleness(start + second, second), Idleness::Idle);
        // Input that came while the worker was not looking: not idle, however old the last.
        client.write_all(b"version\r\n").unwrap();
        assert_eq!(
            conn.idleness(start + 5 * second, second),
            Idleness::InputWaiting
        );
        conn.drive(&ops, &LIMITS, &mut pool);
        let served = conn.last_active;
        assert!(served >= start);
        assert_eq!(conn.idleness(served + second / 2, second), Idleness::Active);
        let mut reply = vec![0u8; format!("VERSION {}\r\n", env!("CARGO_PKG_VERSION")).len()];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(conn.idleness(served + second, second), Idleness::Idle);
        // Replies waiting for the client: busy, and the timeout counts from then.
        conn.wbuf.extend_from_slice(b"unsent");
        assert_eq!(conn.idleness(served + 3 * second, second), Idleness::Active);
        conn.wbuf.clear();
        assert_eq!(conn.idleness(served + 3 * second, second), Idleness::Active);
        assert_eq!(conn.idleness(served + 4 * second, second), Idleness::Idle);
        // The client's end waits to be read, as input does.
        drop(client);
        assert_eq!(
            conn.idleness(served + 9 * second, second),
            Idleness::InputWaiting
        );
    }

    #[test]
    fn the_request_budget_yields_and_resumes() {
        // (conn_yields itself is checked end to end, through `stats`.)
        let shared = shared();
        let ops = Ops::new(&shared, 0);
        let (mut conn, mut client) = pair();
        let mut pool = BufferPool::default();
        let limits = Limits {
            max_reqs_per_event: 3,
            ..LIMITS
        };
        client.write_all(&b"version\r\n".repeat(7)).unwrap();
        assert_eq!(
            conn.drive(&ops, &limits, &mut pool),
            Drive::Open { again: true }
        );
        assert_eq!(
            conn.drive(&ops, &limits, &mut pool),
            Drive::Open { again: true }
        );
        assert_eq!(
            conn.drive(&ops, &limits, &mut pool),
            Drive::Open { again: false }
        );
        let one = crate::ops::VERSION_REPLY.len();
        let mut replies = vec![0u8; 7 * one];
        client.read_exact(&mut replies).unwrap();
    }
}
