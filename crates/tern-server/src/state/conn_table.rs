//! The sockets `stats conns` lists: each worker's table of its listeners and connections,
//! updated on accept and close (never per request) and read by `stats conns`. The transport
//! reads a socket's descriptor and addresses and hands them here as plain values.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use tern_admin::stats_text::ConnAddr;

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

impl ConnEntry {
    /// A socket listed at `since` (server clock, unix seconds); `listen_addr` as the field says.
    pub fn new(fd: i32, addr: ConnAddr, listen_addr: Option<ConnAddr>, since: u32) -> ConnEntry {
        ConnEntry {
            fd,
            addr,
            listen_addr,
            last_cmd: Arc::new(AtomicU32::new(since)),
        }
    }
}
