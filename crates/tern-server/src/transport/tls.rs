//! A client connection's TLS session (`-Z`), driven by its worker's event loop. The stream sits
//! behind the connection's `read` and `write`, so the connection code is the same with or
//! without TLS: a read decrypts whatever the socket holds (the handshake advances there, never
//! blocking the worker), a write encrypts a whole turn's replies into as few records as fit and
//! sends them with one `write` where the socket takes them. The configurations it starts from
//! are server-wide state ([`Tls`]).

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use rustls::{HandshakeKind, ServerConnection};

use crate::config::ListenTls;
use crate::state::tls_config::{Tls, TlsCounters};

/// A client's TLS session over its socket, driven without blocking.
pub struct TlsStream {
    pub tcp: TcpStream,
    session: ServerConnection,
    accepted: Instant,
    counters: Arc<TlsCounters>,
    count_sessions: bool,
}

impl TlsStream {
    /// Starts a server session on a freshly accepted socket with `tls`'s current
    /// configuration for `mode`; the handshake runs as the client's bytes arrive.
    pub fn accept(tls: &Tls, tcp: TcpStream, mode: ListenTls) -> io::Result<TlsStream> {
        let mut session = ServerConnection::new(tls.config(mode)).map_err(io::Error::other)?;
        session.set_buffer_limit(Some(tls.options.wbuf_size));
        Ok(TlsStream {
            tcp,
            session,
            accepted: Instant::now(),
            counters: tls.counters.clone(),
            count_sessions: tls.options.session_cache,
        })
    }

    /// Encrypted bytes wait for the socket to take them.
    #[inline]
    pub fn pending_output(&self) -> bool {
        self.session.wants_write()
    }

    /// Still handshaking `limit` after the connection was accepted.
    pub fn handshake_stalled(&self, now: Instant, limit: Duration) -> bool {
        self.session.is_handshaking() && now.duration_since(self.accepted) > limit
    }

    /// Sends encrypted bytes until none is left or the socket is full.
    fn push(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Decrypts what arrived, answering the handshake; a protocol error (a refused client
    /// certificate, a client speaking plain text) sends its alert and ends the connection.
    fn process(&mut self) -> io::Result<()> {
        let handshaking = self.session.is_handshaking();
        if let Err(e) = self.session.process_new_packets() {
            if handshaking {
                self.counters
                    .handshake_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
            let _ = self.push();
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if handshaking
            && !self.session.is_handshaking()
            && self.count_sessions
            && self.session.handshake_kind() == Some(HandshakeKind::Full)
        {
            self.counters.new_sessions.fetch_add(1, Ordering::Relaxed);
        }
        self.push()
    }
}

impl Read for TlsStream {
    /// Fills `buf` with plaintext; a short read means the socket is drained (so the caller may
    /// wait for the next readable edge, as with a plain socket). `WouldBlock` when nothing
    /// decrypted is there yet (mid-handshake, or half a record).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        // A short read of the socket emptied it: the read that would only say WouldBlock is
        // skipped, as for a plain socket (a new edge comes with new bytes).
        let mut drained = false;
        loop {
            if filled == buf.len() {
                return Ok(filled);
            }
            match self.session.reader().read(&mut buf[filled..]) {
                // The client's close_notify.
                Ok(0) => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && drained => {
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end like any other for a cache.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return Err(e),
            }
            let mut probe = ShortReadProbe {
                tcp: &mut self.tcp,
                short: false,
            };
            match self.session.read_tls(&mut probe) {
                Ok(n) => {
                    // 0 is the end of the stream: the reader says so next.
                    drained = probe.short && n > 0;
                    self.process()?
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The socket as rustls reads it, noting whether a read came back short.
struct ShortReadProbe<'a> {
    tcp: &'a mut TcpStream,
    short: bool,
}

impl Read for ShortReadProbe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

impl Write for TlsStream {
    /// Encrypts as much of `buf` as the session buffers (`ssl_wbuf_size`) and sends it;
    /// `WouldBlock` while earlier records still wait for the socket.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push()?;
        if self.session.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.session.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.push()?;
        Ok(n)
    }

    /// Sends what is still encrypted and unsent; what the socket does not take waits for the
    /// writable edge ([`TlsStream::pending_output`]).
    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}
