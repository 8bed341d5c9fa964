//! Listening sockets: TCP listeners (one SO_REUSEPORT socket per worker and address, so the
//! kernel spreads new connections over the workers with no shared accept queue), the unix socket
//! listener, and the accept that turns a client into a [`Stream`].

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use mio::event::Source;
use mio::net::{TcpListener, UnixListener};
use socket2::{Domain, Socket, Type};
use tern_admin::stats_text::ConnAddr;

use crate::config::ListenTls;
use crate::state::conn_table::ConnEntry;
use crate::state::tls_config::Tls;
use crate::transport::stream::{unix_path, Stream};
use crate::transport::tls::TlsStream;

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
                Ok(Stream::Tls(Box::new(TlsStream::accept(
                    tls, stream, *mode,
                )?)))
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

    /// The listener as `stats conns` lists it, from `started` (server clock); `None` when its
    /// address cannot be had.
    pub fn conn_entry(&self, started: u32) -> Option<ConnEntry> {
        let (fd, addr) = match self {
            Listener::Tcp(l) | Listener::Tls(l, _) => {
                (l.as_raw_fd(), ConnAddr::Tcp(l.local_addr().ok()?))
            }
            Listener::Unix(l) => (
                l.as_raw_fd(),
                ConnAddr::Unix(unix_path(l.local_addr().ok()?)),
            ),
        };
        Some(ConnEntry::new(fd, addr, None, started))
    }

    pub fn source(&mut self) -> &mut dyn Source {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) => l,
            Listener::Unix(l) => l,
        }
    }
}

/// Binds `workers` listening sockets on `addr`, all sharing the port through SO_REUSEPORT.
/// A bind without SO_REUSEPORT first (without listen, so no client can connect to it) makes a
/// port another server listens on fail loudly, as it does for memcached, instead of silently
/// sharing it with another SO_REUSEPORT process. Every socket, the probe too, has SO_REUSEADDR,
/// as memcached's have: a restart binds at once while the previous process's connections wait
/// in FIN_WAIT or TIME_WAIT (Linux still refuses it a port something listens on).
pub fn bind_tcp(addr: SocketAddr, workers: usize, backlog: i32) -> anyhow::Result<Vec<Listener>> {
    Socket::new(Domain::for_address(addr), Type::STREAM, None)
        .and_then(|probe| {
            probe.set_reuse_address(true)?;
            if addr.is_ipv6() {
                probe.set_only_v6(true)?;
            }
            probe.bind(&addr.into())
        })
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
