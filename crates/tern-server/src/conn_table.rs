//! The sockets `stats conns` lists: each worker's table of its listeners and connections,
//! updated on accept and close (never per request) and read by `stats conns`.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use tern_admin::stats_text::ConnAddr;

use crate::net::{Listener, Stream};

/// A socket as `stats conns` lists it. A worker adds its listeners at start and each
/// connection on accept and removes it on close: the table's lock is taken then and by `stats
/// conns`, never per request.
pub struct ConnEntry {
    pub fd: i32,
    pub addr: ConnAddr,
    /// The listener a client came in on; `None` for a listener.
    pub listen_addr: Option<ConnAddr>,
    /// Server clock (unix seconds) when the socket last brought commands in; written by its
    /// worker once per wake-up that served it.
    pub last_cmd: Arc<AtomicU32>,
}

/// Each worker's sockets, one lock per worker.
pub type ConnTables = Box<[Mutex<Vec<ConnEntry>>]>;

fn tcp_or_unix(addr: Option<SocketAddr>, unix: Option<String>) -> ConnAddr {
    match (addr, unix) {
        (Some(a), _) => ConnAddr::Tcp(a),
        (None, path) => ConnAddr::Unix(path.unwrap_or_default()),
    }
}

impl ConnEntry {
    pub fn listener(listener: &Listener, started: u32) -> Option<ConnEntry> {
        let (fd, addr) = match listener {
            Listener::Tcp(l) | Listener::Tls(l, _) => {
                (l.as_raw_fd(), ConnAddr::Tcp(l.local_addr().ok()?))
            }
            Listener::Unix(l) => (
                l.as_raw_fd(),
                ConnAddr::Unix(unix_path(l.local_addr().ok()?)),
            ),
        };
        Some(ConnEntry {
            fd,
            addr,
            listen_addr: None,
            last_cmd: Arc::new(AtomicU32::new(started)),
        })
    }

    pub fn client(stream: &Stream, now: u32) -> ConnEntry {
        let (fd, addr, listen_addr) = match stream.tcp() {
            Some(s) => (
                s.as_raw_fd(),
                tcp_or_unix(s.peer_addr().ok(), None),
                Some(tcp_or_unix(s.local_addr().ok(), None)),
            ),
            None => {
                let Stream::Unix(s) = stream else {
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
        ConnEntry {
            fd,
            addr,
            listen_addr,
            last_cmd: Arc::new(AtomicU32::new(now)),
        }
    }
}

fn unix_path(addr: std::os::unix::net::SocketAddr) -> String {
    addr.as_pathname()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}
