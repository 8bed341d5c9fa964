//! Sockets: TCP listeners (one SO_REUSEPORT socket per worker and address, so the kernel spreads
//! new connections over the workers with no shared accept queue), the unix socket listener, and a
//! stream type covering both.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, Socket, Type};

use crate::config::ListenTls;
use crate::tls::{Tls, TlsStream};
use crate::uring::RingIo;

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

/// A listening socket owned by one worker.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
    /// TCP whose clients speak TLS (`-Z`; `mtls:` requires a client certificate).
    Tls(TcpListener, ListenTls),
}

impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) => l.as_fd(),
            Listener::Unix(l) => l.as_fd(),
        }
    }
}

impl Listener {
    /// Accepts one connection; `WouldBlock` when none is waiting. A TLS listener's client
    /// starts its handshake with `tls`.
    pub fn accept(&self, tls: Option<&Tls>) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept()?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tls(l, mode) => {
                let (stream, _) = l.accept()?;
                stream.set_nodelay(true)?;
                let tls = tls.ok_or_else(|| io::Error::other("TLS listener without -Z"))?;
                Ok(Stream::Tls(Box::new(tls.accept(stream, *mode)?)))
            }
        }
    }

    /// The same socket, serving `mode` (plain TCP stays as it is).
    pub fn with_tls(self, mode: ListenTls) -> Listener {
        match (self, mode) {
            (Listener::Tcp(l), ListenTls::Tls | ListenTls::Mutual) => Listener::Tls(l, mode),
            (listener, _) => listener,
        }
    }

    pub fn source(&mut self) -> &mut dyn Source {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) => l,
            Listener::Unix(l) => l,
        }
    }
}

/// Binds `workers` listening sockets on `addr`, all sharing the port through SO_REUSEPORT.
/// A plain bind first (without listen, so no client can connect to it) makes a port already in
/// use fail loudly, as it does for memcached, instead of silently sharing it with another
/// SO_REUSEPORT process.
pub fn bind_tcp(addr: SocketAddr, workers: usize, backlog: i32) -> anyhow::Result<Vec<Listener>> {
    Socket::new(Domain::for_address(addr), Type::STREAM, None)
        .and_then(|probe| probe.bind(&addr.into()))
        .with_context(|| format!("cannot listen on {addr}"))?;
    join_tcp(addr, workers, backlog)
}

/// Binds `count` more SO_REUSEPORT listening sockets on `addr`, joining those already there
/// (a hand-over's inherited ones, when the new process has more workers than the old).
pub fn join_tcp(addr: SocketAddr, count: usize, backlog: i32) -> anyhow::Result<Vec<Listener>> {
    (0..count)
        .map(|_| {
            let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            if addr.is_ipv6() {
                socket.set_only_v6(true)?;
            }
            socket.bind(&addr.into())?;
            socket.listen(backlog)?;
            socket.set_nonblocking(true)?;
            let std_listener: std::net::TcpListener = socket.into();
            Ok(Listener::Tcp(TcpListener::from_std(std_listener)))
        })
        .collect::<io::Result<_>>()
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Binds the unix socket at `path` with memcached's access mask semantics (`-a`).
pub fn bind_unix(path: &Path, mask: u32) -> anyhow::Result<Listener> {
    // A stale socket file from an earlier run would make bind fail.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("cannot listen on unix socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask))
        .with_context(|| format!("cannot set mode {mask:o} on {}", path.display()))?;
    Ok(Listener::Unix(listener))
}
