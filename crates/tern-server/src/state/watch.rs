//! memcached's `watch`: connections that asked for a stream of log lines of some kinds (item
//! fetches, stores, evictions, connection events) receive them as the workers serve requests.
//! A leaf module, shared by every worker.
//!
//! Nobody watching costs a request one relaxed load of [`Watchers::watching`]'s mask. While
//! someone watches, a worker formats the line and sends it to each watcher's socket without
//! blocking; a line that does not fit the socket's buffer is dropped and counted, and the next
//! line that fits is preceded by memcached's `skipped=N` notice, so a slow watcher never slows
//! the server.

use std::fmt::{self, Write as _};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The kinds of log line a watcher can ask for (memcached's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `item_get` for every key looked up.
    Fetchers = 1,
    /// `item_store` for every storage command.
    Mutations = 2,
    /// `eviction` for every item evicted to make room.
    Evictions = 4,
    /// `conn_new` and `conn_close`.
    Connevents = 8,
    /// `deleted` for every item a text `delete` or a meta `md` removes.
    Deletions = 16,
}

/// memcached's `watch` words, and those memcached knows but tern has nothing to log for
/// (its system, raw-command and proxy streams): accepted, they log nothing.
pub fn parse_kinds(words: &[&[u8]]) -> Option<u8> {
    if words.is_empty() {
        return Some(Kind::Fetchers as u8);
    }
    words.iter().try_fold(0u8, |mask, word| {
        let kind = match *word {
            b"fetchers" => Kind::Fetchers as u8,
            b"mutations" => Kind::Mutations as u8,
            b"evictions" => Kind::Evictions as u8,
            b"connevents" => Kind::Connevents as u8,
            b"deletions" => Kind::Deletions as u8,
            b"sysevents" | b"rawcmds" | b"proxyreqs" | b"proxyevents" | b"proxyuser" => 0,
            _ => return None,
        };
        Some(mask | kind)
    })
}

/// A client as `conn_new` / `conn_close` show it: a TCP peer (`None` when its address cannot be
/// had) or a local (unix socket) client.
pub enum Peer {
    Tcp(Option<SocketAddr>),
    Local,
}

/// Why a connection closed, as `conn_close ... reason=` says (memcached 1.6.45's names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloseReason {
    /// A protocol error: an overlong line, an HTTP request line.
    Error,
    /// The client hung up, or sent `quit`.
    #[default]
    Normal,
    /// The `shutdown` command.
    Shutdown,
    /// `-o idle_timeout`.
    IdleTimeout,
}

impl CloseReason {
    /// The `conn_close` line's field.
    pub fn field(self) -> &'static str {
        match self {
            CloseReason::Error => " reason=error",
            CloseReason::Normal => " reason=normal",
            CloseReason::Shutdown => " reason=shutdown",
            CloseReason::IdleTimeout => " reason=idle_timeout",
        }
    }
}

struct Watcher {
    id: u64,
    kinds: u8,
    socket: Box<dyn Write + Send>,
    /// Lines dropped since the last one sent.
    skipped: u64,
}

/// Everyone watching, and the union of what they watch.
#[derive(Default)]
pub struct Watchers {
    mask: AtomicU8,
    /// memcached's global id of a log line.
    gid: AtomicU64,
    next_id: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
    /// Lines sent to a watcher, and lines a watcher missed (socket full), for `stats`; counted
    /// under the lock, only while someone watches.
    sent: AtomicU64,
    skipped: AtomicU64,
}

impl Watchers {
    /// Whether anyone watches `kind` (one relaxed load: the request path's only cost).
    #[inline]
    pub fn watching(&self, kind: Kind) -> bool {
        self.watched() & kind as u8 != 0
    }

    /// Every kind someone watches, as `Kind` bits: one relaxed load for a request that may
    /// log lines of two kinds.
    #[inline]
    pub fn watched(&self) -> u8 {
        self.mask.load(Ordering::Relaxed)
    }

    /// Starts streaming `kinds` to `socket` (a non-blocking duplicate of the watcher's
    /// connection), after `greeting` (the `watch` command's `OK`): both under the lock that
    /// log lines take, so the greeting comes first and nothing logged after it is missed.
    /// The id it returns names the watcher for [`Watchers::remove`].
    pub fn add(
        &self,
        kinds: u8,
        mut socket: Box<dyn Write + Send>,
        greeting: &[u8],
    ) -> std::io::Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut watchers = self.lock();
        // The workers learn of the new kinds before the client learns it is watching (the
        // greeting), so nothing the client does after the greeting goes unlogged.
        self.mask
            .store(self.mask.load(Ordering::Relaxed) | kinds, Ordering::Relaxed);
        if let Err(e) = socket.write_all(greeting) {
            self.publish(&watchers);
            return Err(e);
        }
        watchers.push(Watcher {
            id,
            kinds,
            socket,
            skipped: 0,
        });
        Ok(id)
    }

    pub fn remove(&self, id: u64) {
        let mut watchers = self.lock();
        watchers.retain(|w| w.id != id);
        self.publish(&watchers);
    }

    /// For `stats`: watchers now, lines logged (memcached's `log_worker_written`), lines sent
    /// to watchers and lines they missed.
    pub fn stats(&self) -> (u64, u64, u64, u64) {
        let watchers = self.lock().len() as u64;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (
            watchers,
            load(&self.gid),
            load(&self.sent),
            load(&self.skipped),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watcher>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, watchers: &[Watcher]) {
        let mask = watchers.iter().fold(0, |mask, w| mask | w.kinds);
        self.mask.store(mask, Ordering::Relaxed);
    }

    /// memcached's `conn_new` / `conn_close` lines for a client socket; `peer` is asked only
    /// while someone watches connection events (it reads the socket's address).
    pub fn conn_event(&self, peer: impl FnOnce() -> Peer, fd: i32, event: &str, reason: &str) {
        if !self.watching(Kind::Connevents) {
            return;
        }
        let (peer, transport) = match peer() {
            Peer::Tcp(addr) => (addr, "tcp"),
            Peer::Local => (None, "local"),
        };
        let (ip, port) = peer.map_or((String::new(), 0), |a| (a.ip().to_string(), a.port()));
        self.log(
            Kind::Connevents,
            format_args!(
                "type={event} rip={ip} rport={port} transport={transport}{reason} cfd={fd}"
            ),
        );
    }

    /// Sends one line of `kind` to whoever watches it: `ts=... gid=... ` then `fields`.
    pub fn log(&self, kind: Kind, fields: fmt::Arguments<'_>) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let mut line = String::with_capacity(160);
        // memcached prints the microseconds unpadded ("ts=%d.%d").
        let _ = writeln!(
            line,
            "ts={}.{} gid={gid} {fields}",
            now.as_secs(),
            now.subsec_micros()
        );
        let mut watchers = self.lock();
        let before = watchers.len();
        let (mut sent, mut skipped) = (0, 0);
        watchers.retain_mut(|w| {
            if w.kinds & kind as u8 == 0 {
                return true;
            }
            let skipped_before = w.skipped;
            let alive = w.send(&line);
            match (alive, w.skipped > skipped_before) {
                (true, true) => skipped += 1,
                (true, false) => sent += 1,
                (false, _) => {}
            }
            alive
        });
        self.sent.fetch_add(sent, Ordering::Relaxed);
        self.skipped.fetch_add(skipped, Ordering::Relaxed);
        if watchers.len() != before {
            self.publish(&watchers);
        }
    }
}

impl Watcher {
    /// False when the watcher is gone (its socket failed).
    fn send(&mut self, line: &str) -> bool {
        let mut text = String::new();
        if self.skipped > 0 {
            text = format!("skipped={}\n", self.skipped);
        }
        text.push_str(line);
        match self.socket.write(text.as_bytes()) {
            Ok(n) if n == text.len() => {
                self.skipped = 0;
                true
            }
            // A partial line would garble the stream: the rest is lost with the socket's
            // buffer full, so the watcher is dropped, as a watcher that stopped reading.
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.skipped += 1;
                true
            }
            Err(_) => false,
        }
    }
}

/// Sends memcached's `eviction` line for each item the store evicts while someone watches
/// evictions (the store calls this under the evicting shard's lock: formatting and a
/// non-blocking send, only while watched).
pub fn observe_evictions(
    watchers: Arc<Watchers>,
    clock: Arc<tern_store::Clock>,
) -> tern_store::EvictionObserver {
    Box::new(move |item| {
        if !watchers.watching(Kind::Evictions) {
            return;
        }
        let now = clock.now();
        let ttl = item
            .expiry
            .deadline()
            .map_or(-1, |deadline| i64::from(deadline) - i64::from(now));
        watchers.log(
            Kind::Evictions,
            format_args!(
                "type=eviction key={} fetch={} ttl={ttl} la={} clsid=1",
                LoggedKey(item.key),
                if item.fetched { "yes" } else { "no" },
                now.saturating_sub(item.last_access)
            ),
        );
    })
}

/// A key as memcached's log lines show it: URL-encoded (RFC 3986 unreserved bytes as they are).
pub struct LoggedKey<'a>(pub &'a [u8]);

impl fmt::Display for LoggedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0 {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                f.write_char(b as char)?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex as StdMutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<StdMutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_reach_the_watchers_of_their_kind_only() {
        let watchers = Watchers::default();
        assert!(!watchers.watching(Kind::Fetchers));
        let sink = Sink::default();
        let kinds = parse_kinds(&[b"mutations"]).unwrap();
        let id = watchers
            .add(kinds, Box::new(sink.clone()), b"OK\r\n")
            .unwrap();
        assert!(watchers.watching(Kind::Mutations) && !watchers.watching(Kind::Fetchers));
        watchers.log(Kind::Fetchers, format_args!("type=item_get"));
        watchers.log(
            Kind::Mutations,
            format_args!("type=item_store key={}", LoggedKey(b"k:1")),
        );
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(text.starts_with("OK\r\nts="), "{text}");
        assert!(
            text.ends_with(" gid=2 type=item_store key=k%3A1\n"),
            "{text}"
        );
        watchers.remove(id);
        assert!(!watchers.watching(Kind::Mutations));
    }

    #[test]
    fn kinds_are_memcacheds_words() {
        assert_eq!(parse_kinds(&[]), Some(Kind::Fetchers as u8));
        assert_eq!(parse_kinds(&[b"evictions", b"connevents"]), Some(4 | 8));
        assert_eq!(parse_kinds(&[b"deletions"]), Some(16));
        assert_eq!(parse_kinds(&[b"sysevents"]), Some(0));
        assert_eq!(parse_kinds(&[b"bogus"]), None);
    }
}
