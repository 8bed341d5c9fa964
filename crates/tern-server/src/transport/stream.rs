//! [`Stream`]: a client connection, over TCP (plain or TLS) or a unix socket, as the serve loops
//! read and write it; and [`RingIo`], a socket whose I/O the io_uring engine does (`uring/`).
//! The two sit in one file because each holds the other (a ring's socket is a plain
//! [`Stream`]); the ring engine fills and drains a [`RingIo`] but this file knows nothing of it.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use tern_admin::stats_text::ConnAddr;

use crate::state::conn_table::ConnEntry;
use crate::state::watch::Peer;
use crate::transport::tls::TlsStream;

/// A client connection, over TCP (plain or TLS) or a unix socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
    /// A TCP or unix socket whose I/O the io_uring engine does (`uring/`): reads take what
    /// its receives brought, writes are queued for its next submit.
    Ring(Box<RingIo>),
}

impl Stream {
    /// A second handle on the same socket (non-blocking like this one), for `watch`: other
    /// workers write log lines to it while this connection's worker owns the stream.
    pub fn duplicate(&self) -> io::Result<Box<dyn Write + Send>> {
        use std::os::fd::AsFd;
        Ok(match self {
            Stream::Tcp(s) => Box::new(std::net::TcpStream::from(s.as_fd().try_clone_to_owned()?)),
            Stream::Unix(s) => Box::new(std::os::unix::net::UnixStream::from(
                s.as_fd().try_clone_to_owned()?,
            )),
            // Log lines written past the TLS session would reach the client as garbage.
            Stream::Tls(_) => return Err(io::ErrorKind::Unsupported.into()),
            Stream::Ring(s) => return s.socket.duplicate(),
        })
    }

    /// The TCP socket under a plain or TLS stream.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Tls(s) => Some(&s.tcp),
            Stream::Ring(s) => s.socket.tcp(),
            Stream::Unix(_) => None,
        }
    }

    /// The client as `stats conns` lists it, from `now` (server clock).
    pub fn conn_entry(&self, now: u32) -> ConnEntry {
        let (fd, addr, listen_addr) = match self.tcp() {
            Some(s) => (
                s.as_raw_fd(),
                tcp_or_unix(s.peer_addr().ok(), None),
                Some(tcp_or_unix(s.local_addr().ok(), None)),
            ),
            None => {
                let Stream::Unix(s) = self else {
                    unreachable!("every stream but a unix one is TCP")
                };
                let local = s.local_addr().ok().map(unix_path);
                (
                    s.as_raw_fd(),
                    // memcached prints a unix client's address as the socket's path too.
                    tcp_or_unix(None, local.clone()),
                    Some(tcp_or_unix(None, local)),
                )
            }
        };
        ConnEntry::new(fd, addr, listen_addr, now)
    }

    /// The client as `watch`'s connection events show it (asked only while someone watches).
    pub fn peer(&self) -> Peer {
        match self.tcp() {
            Some(s) => Peer::Tcp(s.peer_addr().ok()),
            None => Peer::Local,
        }
    }

    /// Encrypted bytes wait for the socket (TLS), or queued bytes for the ring's send: the
    /// connection wants writable edges (or its send's completion).
    #[inline]
    pub fn pending_output(&self) -> bool {
        match self {
            Stream::Tls(s) => s.pending_output(),
            Stream::Ring(s) => s.pending_output(),
            _ => false,
        }
    }
}

impl Stream {
    /// Writes `buf` to the socket itself, outside any TLS session: how memcached 1.6.45
    /// refuses a client over `-c` (`ERROR Too many open connections` written in plain text
    /// before any handshake, so a TLS client sees a protocol error and a plain one the line).
    pub fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tls(s) => {
                let flags = rustix::net::SendFlags::NOSIGNAL;
                Ok(rustix::net::send(&s.tcp, buf, flags)?)
            }
            other => other.write(buf),
        }
    }
}

// Plain sockets are read and written with rustix's direct system calls: std's go through
// libc's `recv`/`send`, whose thread-cancellation bookkeeping costs ~60 instructions per
// unpipelined request (callgrind). The calls and flags are std's own (`send` with
// MSG_NOSIGNAL), so errors and partial transfers are the same.
impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let flags = rustix::net::RecvFlags::empty();
        match self {
            Stream::Tcp(s) => Ok(rustix::net::recv(&*s, buf, flags)?.0),
            Stream::Unix(s) => Ok(rustix::net::recv(&*s, buf, flags)?.0),
            Stream::Tls(s) => s.read(buf),
            Stream::Ring(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let flags = rustix::net::SendFlags::NOSIGNAL;
        match self {
            Stream::Tcp(s) => Ok(rustix::net::send(&*s, buf, flags)?),
            Stream::Unix(s) => Ok(rustix::net::send(&*s, buf, flags)?),
            Stream::Tls(s) => s.write(buf),
            Stream::Ring(s) => s.write(buf),
        }
    }

    /// Sends what a TLS session still holds; nothing to do for a plain socket.
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
            Stream::Tls(s) => s.tcp.register(r, t, i),
            Stream::Ring(s) => s.socket.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.tcp.reregister(r, t, i),
            Stream::Ring(s) => s.socket.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            Stream::Tls(s) => s.tcp.deregister(r),
            Stream::Ring(s) => s.socket.deregister(r),
        }
    }
}

fn tcp_or_unix(addr: Option<SocketAddr>, unix: Option<String>) -> ConnAddr {
    match (addr, unix) {
        (Some(a), _) => ConnAddr::Tcp(a),
        (None, path) => ConnAddr::Unix(path.unwrap_or_default()),
    }
}

/// A unix socket's path as `stats conns` shows it (empty when it has none).
pub fn unix_path(addr: std::os::unix::net::SocketAddr) -> String {
    addr.as_pathname()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Past this many reply bytes queued for the ring beyond the send in flight, a connection's
/// writes wait in its write buffer (where `conn.rs` counts them for its backpressure).
const SEND_QUEUE_LIMIT: usize = 256 * 1024;
/// A connection's staging buffers are kept between turns up to this capacity, freed above it.
const KEEP_CAPACITY: usize = 16 * 1024;

/// A connection socket as the io_uring engine drives it: the bytes its receives brought, not
/// yet read by the connection, and the replies written to it, queued for a send.
pub struct RingIo {
    /// Owns the descriptor (for `stats conns`, `watch`'s second handle and the close); never
    /// read or written directly.
    pub socket: Stream,
    pub(crate) input: Vec<u8>,
    pub(crate) read_at: usize,
    /// The peer closed its side, or the receive failed (errno): reads say so once the input
    /// is consumed.
    pub(crate) eof: bool,
    pub(crate) error: Option<i32>,
    /// Written, not handed to a send yet.
    pub(crate) queued: Vec<u8>,
    /// The bytes of the send in flight, from `sent_at`: untouched until it completes.
    pub(crate) sending: Vec<u8>,
    pub(crate) sent_at: usize,
    pub(crate) in_flight: bool,
}

impl RingIo {
    pub(crate) fn new(socket: Stream) -> RingIo {
        RingIo {
            socket,
            input: Vec::new(),
            read_at: 0,
            eof: false,
            error: None,
            queued: Vec::new(),
            sending: Vec::new(),
            sent_at: 0,
            in_flight: false,
        }
    }

    /// Replies queued or in flight: the connection is not done writing.
    pub fn pending_output(&self) -> bool {
        self.in_flight || !self.queued.is_empty()
    }

    pub(crate) fn unread(&self) -> usize {
        self.input.len() - self.read_at
    }

    /// Frees staging buffers grown past what an ordinary turn needs.
    pub(crate) fn shrink(&mut self) {
        if self.unread() == 0 && self.input.capacity() > KEEP_CAPACITY {
            self.input = Vec::new();
            self.read_at = 0;
        }
        if !self.in_flight && self.sending.capacity() > KEEP_CAPACITY {
            self.sending = Vec::new();
        }
        if self.queued.is_empty() && self.queued.capacity() > KEEP_CAPACITY {
            self.queued = Vec::new();
        }
    }
}

impl Read for RingIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let unread = &self.input[self.read_at..];
        if !unread.is_empty() {
            let n = unread.len().min(buf.len());
            buf[..n].copy_from_slice(&unread[..n]);
            self.read_at += n;
            if self.read_at == self.input.len() {
                self.input.clear();
                self.read_at = 0;
            }
            return Ok(n);
        }
        match (self.error, self.eof) {
            (Some(errno), _) => Err(io::Error::from_raw_os_error(errno)),
            (None, true) => Ok(0),
            (None, false) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for RingIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(errno) = self.error {
            return Err(io::Error::from_raw_os_error(errno));
        }
        // All or nothing: a connection writes its whole write buffer at once, which it only
        // empties (and reuses from the start) once all of it is taken.
        if self.queued.len() >= SEND_QUEUE_LIMIT && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.queued.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn ring_io() -> (RingIo, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let stream = Stream::Unix(mio::net::UnixStream::from_std(ours));
        (RingIo::new(stream), theirs)
    }

    #[test]
    fn reads_take_what_receives_brought_then_would_block_then_the_end() {
        let (mut io, _peer) = ring_io();
        io.input.extend_from_slice(b"get a\r\nget b\r\n");
        let mut buf = [0u8; 7];
        assert_eq!(io.read(&mut buf).unwrap(), 7);
        assert_eq!(&buf, b"get a\r\n");
        assert_eq!(io.unread(), 7);
        let mut rest = [0u8; 64];
        assert_eq!(io.read(&mut rest).unwrap(), 7);
        assert_eq!(io.input.len(), 0, "consumed input is dropped");
        let e = io.read(&mut rest).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        io.eof = true;
        assert_eq!(io.read(&mut rest).unwrap(), 0);
        io.error = Some(libc::ECONNRESET);
        assert_eq!(
            io.read(&mut rest).unwrap_err().raw_os_error(),
            Some(libc::ECONNRESET)
        );
    }

    #[test]
    fn writes_queue_whole_until_the_limit() {
        let (mut io, _peer) = ring_io();
        assert!(!io.pending_output());
        let big = vec![b'v'; SEND_QUEUE_LIMIT + 10];
        // Under the limit a write is taken whole, however large, so a connection's write
        // buffer empties and restarts from its beginning.
        assert_eq!(io.write(&big).unwrap(), big.len());
        assert!(io.pending_output());
        let e = io.write(b"more").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(io.write(b"").unwrap(), 0);
        io.error = Some(libc::EPIPE);
        assert_eq!(
            io.write(b"x").unwrap_err().raw_os_error(),
            Some(libc::EPIPE)
        );
    }
}
