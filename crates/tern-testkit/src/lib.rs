//! Test support shared by the crates' end-to-end tests: find the real `tern` binary, start it (or
//! Debian's `memcached`, the reference peer) on a free loopback port, and talk to it over TCP.

pub mod bench;
pub mod binary;
pub mod prometheus;
pub mod tls;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a test waits for a server to start or a reply to arrive before failing.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The `tern` binary built by this `cargo test` run (target/<profile>/tern, beside `deps/`).
pub fn tern_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps");
    let bin = profile_dir.join("tern");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace`, which builds it",
        bin.display()
    );
    bin
}

/// A port for a test server on 127.0.0.1: never handed out before in this test process, and
/// bindable now. Drawn at random from the ports the kernel never gives a `connect` or a
/// `bind` to port 0 ([`test_ports`]), and tried without listening on it.
///
/// Until 2026-11-27 the kernel picked (a listener bound to port 0). A port it picks is free in
/// its eyes until the test's server binds it, so another test thread's pick could land on it
/// meanwhile, and that pick listened for a moment: the start-up wait's probe (or the test's
/// first connection) reached that listener instead of the server, which found its port taken
/// and exited. The test's first connection was then refused, no socket left on the port, or
/// reset: about once in 60 runs of the TLS pass's split test, and now and then in CI. A
/// handed-out port is never tried again here, and a try that does not listen takes no
/// connection. Each port goes to one test only: tern binds with SO_REUSEPORT, so two tests
/// given one port would share it silently.
pub fn free_port() -> u16 {
    /// The range drawn from, read once; the ports handed out; the draws.
    struct Ports {
        low: u16,
        high: u16,
        handed_out: BTreeSet<u16>,
        rng: Rng,
    }
    static PORTS: Mutex<Option<Ports>> = Mutex::new(None);
    let mut ports = PORTS.lock().unwrap_or_else(|p| p.into_inner());
    let Ports {
        low,
        high,
        handed_out,
        rng,
    } = ports.get_or_insert_with(|| {
        let (low, high) = test_ports();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ports {
            low,
            high,
            handed_out: BTreeSet::new(),
            // Processes side by side draw different ports.
            rng: Rng((nanos ^ u64::from(std::process::id()) << 32) | 1),
        }
    });
    loop {
        let port = *low + rng.below(u64::from(*high - *low)) as u16;
        if !handed_out.contains(&port) && bindable(port) {
            handed_out.insert(port);
            return port;
        }
    }
}

/// The ports `free_port` draws from, `low..high`: from 10,000 up to the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), or above that range where that leaves more.
fn test_ports() -> (u16, u16) {
    let (first, last) = ephemeral_range().unwrap_or((32_768, 60_999));
    let below = (10_000, first.max(10_000));
    let above = (last.saturating_add(1), u16::MAX);
    let widest = if below.1 - below.0 >= above.1.saturating_sub(above.0) {
        below
    } else {
        above
    };
    assert!(
        widest.1 - widest.0 >= 1_000,
        "the ephemeral range {first}-{last} leaves too few ports for test servers"
    );
    widest
}

/// The kernel's ephemeral port range, first and last (`ip_local_port_range`), if it can be read.
fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut bounds = text.split_whitespace().map(|b| b.parse::<u16>().ok());
    Some((bounds.next()??, bounds.next()??))
}

/// Whether a TCP socket can bind 127.0.0.1:`port` (with SO_REUSEADDR, as servers do, so an
/// old connection's TIME_WAIT does not count). It never listens: nothing can connect to it.
fn bindable(port: u16) -> bool {
    let Ok(socket) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
    else {
        return false;
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    socket.set_reuse_address(true).is_ok() && socket.bind(&addr.into()).is_ok()
}

/// Whether a server listens on 127.0.0.1:`port`. A connection to a port of the ephemeral range
/// that nothing listens on yet can connect to itself, when the kernel happens to pick that very
/// port as its local one (TCP's simultaneous open): that is no server, so such a connection
/// counts as none. (Taken for a server, it let tests talk to a tern still starting: a first
/// request refused or reset, seen in CI and once in 30 runs of the TLS pass on 2026-11-26.)
pub fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok_and(|s| !connected_to_itself(&s))
}

/// Whether `stream` is a TCP connection to itself (its local and peer addresses are one).
pub fn connected_to_itself(stream: &TcpStream) -> bool {
    stream.local_addr().ok() == stream.peer_addr().ok()
}

/// A server process on 127.0.0.1 that is killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub port: u16,
}

impl ServerProcess {
    /// Starts `tern serve -l 127.0.0.1 -p <free port> <args>` and waits until it accepts.
    pub fn tern(args: &[&str]) -> ServerProcess {
        Self::tern_on_port(free_port(), args)
    }

    /// Starts `tern serve -l 127.0.0.1 -p <port> <args>` on a port the caller chose (a planned
    /// one), and waits until it accepts.
    ///
    /// With `TERN_TEST_TLS=1` in the environment, tern serves TLS on a port of its own and a
    /// relay in this process turns plain connections to `port` into TLS ones to it, so every
    /// end-to-end test runs unchanged over TLS.
    ///
    /// With `TERN_TEST_IO_ENGINE=uring` (or `epoll`), tern runs with that `--io-engine` unless
    /// the test names one itself, so every end-to-end test runs unchanged on io_uring.
    pub fn tern_on_port(port: u16, args: &[&str]) -> ServerProcess {
        if std::env::var_os("TERN_TEST_TLS").is_some_and(|v| v == "1") {
            return Self::tern_behind_tls_relay(port, args);
        }
        let mut cmd = Command::new(tern_bin());
        cmd.arg("serve")
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(io_engine_args(args))
            .args(args);
        Self::spawn(cmd, port)
    }

    fn tern_behind_tls_relay(port: u16, args: &[&str]) -> ServerProcess {
        static CERTS: std::sync::OnceLock<tls::Certs> = std::sync::OnceLock::new();
        // Beside the binary under test, not in the temp directory: see `Certs::shared`.
        let certs =
            CERTS.get_or_init(|| tls::Certs::shared(&tern_bin().with_file_name("tern-tls-relay")));
        let inner = free_port();
        let mut cmd = Command::new(tern_bin());
        cmd.arg("serve")
            .args(["-l", "127.0.0.1", "-p", &inner.to_string()])
            .args(certs.server_args(""))
            .args(args);
        let mut server = Self::spawn(cmd, inner);
        tls::relay(port, inner, certs.client_config(None));
        server.port = port;
        server
    }

    /// Starts Debian's `memcached -l 127.0.0.1 -p <free port> <args>`, the reference peer.
    /// Panics with the install command when it is missing: tests never skip silently.
    pub fn memcached(args: &[&str]) -> ServerProcess {
        Self::memcached_from(memcached_bin(), args)
    }

    /// Starts the newest memcached a registry ships (Debian 13's source package, built by
    /// `scripts/third-party-memcached.sh`), the second reference peer.
    pub fn memcached_newest(args: &[&str]) -> ServerProcess {
        Self::memcached_from(memcached_newest_bin(), args)
    }

    fn memcached_from(bin: PathBuf, args: &[&str]) -> ServerProcess {
        let port = free_port();
        let mut cmd = Command::new(bin);
        // `-u root`: memcached refuses to run as root without it (CI runs as root); ignored otherwise.
        cmd.args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-u",
            "root",
        ])
        .args(args);
        Self::spawn(cmd, port)
    }

    /// Spawns `cmd` (any server: tern, memcached, a proxy in front of them) and waits until it
    /// accepts TCP on 127.0.0.1:`port`.
    pub fn spawn(cmd: Command, port: u16) -> ServerProcess {
        Self::start(cmd, port, || listening(port))
    }

    /// Spawns `cmd` (stdout dropped, stderr shown) and waits until `ready`, failing the test if
    /// the server exits first or is not ready within [`PATIENCE`].
    fn start(mut cmd: Command, port: u16, ready: impl Fn() -> bool) -> ServerProcess {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let mut server = ServerProcess { child, port };
        let deadline = Instant::now() + PATIENCE;
        while !ready() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{cmd:?} exited before it was ready: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "{cmd:?} was not ready in time (port {port})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// A new connection with read and write timeouts, so a missing reply fails the test instead of
    /// hanging it.
    pub fn connect(&self) -> Conn {
        let mut conn = Conn::connect(self.port);
        conn.server_pid = Some(self.pid());
        conn
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// For a failure message: the server's process state (`/proc`'s letter: Z once it has
    /// exited) and whether its port accepts now, so that a refused connection says whose it was.
    pub fn describe(&self) -> String {
        let state = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .ok()
            .and_then(|stat| {
                let after_name = stat.rsplit(')').next()?;
                after_name.split_whitespace().next().map(str::to_string)
            })
            .unwrap_or_else(|| "gone".to_string());
        let accepting = if listening(self.port) {
            "accepting"
        } else {
            "not accepting"
        };
        format!(
            "server pid {} (state {state}), port {} {accepting}",
            self.pid(),
            self.port
        )
    }

    /// Sends `signal` (a name such as `TERM` or `INT`) to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Waits for the server to exit (it was told to) and returns its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--io-engine=ENGINE` from `TERN_TEST_IO_ENGINE`, unless `args` choose an engine.
pub fn io_engine_args(args: &[&str]) -> Vec<String> {
    match std::env::var("TERN_TEST_IO_ENGINE") {
        Ok(engine) if !args.iter().any(|a| a.starts_with("--io-engine")) => {
            vec![format!("--io-engine={engine}")]
        }
        _ => Vec::new(),
    }
}

/// Whether a server on `port` answers `version` within half a second: false when nothing
/// listens, when it is not serving yet, or when its process exits without serving (a listening
/// socket takes connections into its backlog before its server answers any).
pub fn answers_version(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut reply = [0u8; 8];
    conn.write_all(b"version\r\n").is_ok()
        && conn.read_exact(&mut reply).is_ok()
        && &reply == b"VERSION "
}

/// Path of Debian's memcached (package `memcached`).
pub fn memcached_bin() -> PathBuf {
    for candidate in ["/usr/bin/memcached", "/usr/local/bin/memcached"] {
        let path = PathBuf::from(candidate);
        if path.exists() {
            return path;
        }
    }
    panic!("memcached is not installed: `apt-get install memcached` (.ci/run does this)");
}

/// Path of the newest memcached built into `target/third-party` by
/// `scripts/third-party-memcached.sh` (which `.ci/run` runs).
pub fn memcached_newest_bin() -> PathBuf {
    let target = tern_bin()
        .parent()
        .and_then(|profile| profile.parent())
        .expect("tern lives in target/<profile>")
        .join("third-party");
    let newest = std::fs::read_dir(&target)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let version: Vec<u32> = name
                .strip_prefix("memcached-")?
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            Some((version, target.join(&name).join("memcached")))
        })
        .filter(|(_, bin)| bin.exists())
        .max();
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "no memcached in {}: run scripts/third-party-memcached.sh (.ci/run does this)",
            target.display()
        ),
    }
}

/// The IPv4 TCP sockets whose local or remote port is `port`, from /proc/net/tcp, as
/// `local->remote STATE` (for a failure message: a refused connection says what was there).
pub fn tcp_sockets_on(port: u16) -> String {
    const STATES: [&str; 12] = [
        "?",
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
    ];
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let sockets: Vec<String> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, state) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
            let (lp, rp) = (port_of(local)?, port_of(remote)?);
            let state = usize::from_str_radix(state, 16).ok()?;
            (lp == port || rp == port)
                .then(|| format!("{lp}->{rp} {}", STATES.get(state).unwrap_or(&"?")))
        })
        .collect();
    if sockets.is_empty() {
        "none".into()
    } else {
        sockets.join(", ")
    }
}

/// A blocking TCP connection to a server under test.
pub struct Conn {
    pub stream: TcpStream,
    /// The server process behind the connection when known, so a failed read can say whether
    /// the server was still running (a reset with no reply reads the same either way).
    server_pid: Option<u32>,
}

impl Conn {
    pub fn connect(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| {
            panic!(
                "connect to 127.0.0.1:{port}: {e}; its TCP sockets now: {}",
                tcp_sockets_on(port)
            )
        });
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_write_timeout(Some(PATIENCE)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            server_pid: None,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.stream.write_all(bytes) {
            panic!("write to server: {e}; {}", self.server_state());
        }
    }

    /// Whether the server process is still running, from /proc (it is not reaped before the
    /// test ends, so an exited server is a zombie whose exit code /proc still holds).
    fn server_state(&self) -> String {
        let Some(pid) = self.server_pid else {
            return "server process unknown".into();
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the parenthesised command name: state is the 1st, exit_code the 50th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        match fields.first() {
            Some(&"Z") => {
                let code: i32 = fields.get(49).and_then(|c| c.parse().ok()).unwrap_or(-1);
                format!(
                    "server process {pid} has exited (exit status {}, signal {})",
                    (code >> 8) & 0xff,
                    code & 0x7f
                )
            }
            Some(state) => format!("server process {pid} is still running (state {state})"),
            None => format!("server process {pid} is gone"),
        }
    }

    /// Reads until the bytes received so far end with `terminator`; panics on timeout or close.
    pub fn read_until(&mut self, terminator: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while !got.ends_with(terminator) {
            match self.stream.read(&mut buf) {
                Ok(0) => panic!(
                    "server closed the connection; got so far: {:?}; {}",
                    String::from_utf8_lossy(&got),
                    self.server_state()
                ),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!(
                    "no reply ending in {:?} ({e}); got so far: {:?}; {}",
                    String::from_utf8_lossy(terminator),
                    String::from_utf8_lossy(&got),
                    self.server_state()
                ),
            }
        }
        got
    }

    /// Reads exactly `n` bytes.
    pub fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut got = vec![0u8; n];
        self.stream.read_exact(&mut got).expect("read reply");
        got
    }

    /// Sends `request` and checks that exactly `reply` comes back (further bytes are left for the
    /// next call, which then fails on them).
    pub fn expect(&mut self, request: &[u8], reply: &[u8]) {
        self.send(request);
        // Messages show the start of a long request only.
        let request = &request[..request.len().min(200)];
        let mut got = vec![0u8; reply.len()];
        let mut filled = 0;
        while filled < got.len() {
            match self.stream.read(&mut got[filled..]) {
                Ok(0) => panic!(
                    "server closed after {:?} in reply to {:?}; {}",
                    String::from_utf8_lossy(&got[..filled]),
                    String::from_utf8_lossy(request),
                    self.server_state()
                ),
                Ok(n) => filled += n,
                Err(e) => panic!(
                    "{e} after {:?} in reply to {:?}, expected {:?}; {}",
                    String::from_utf8_lossy(&got[..filled]),
                    String::from_utf8_lossy(request),
                    String::from_utf8_lossy(reply),
                    self.server_state()
                ),
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(reply),
            "reply to {:?}",
            String::from_utf8_lossy(request)
        );
    }

    /// Sends `request` and returns the reply, read until it ends with `terminator`.
    pub fn request(&mut self, request: &[u8], terminator: &[u8]) -> Vec<u8> {
        self.send(request);
        self.read_until(terminator)
    }

    /// Sends one text request and returns its one-line (or `END`-terminated) reply as a string.
    pub fn line(&mut self, request: &str) -> String {
        self.send(request.as_bytes());
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n") {
            match self.stream.read(&mut byte) {
                Ok(1) => got.push(byte[0]),
                Ok(_) => panic!("server closed; got {:?}", String::from_utf8_lossy(&got)),
                Err(e) => panic!(
                    "no reply line ({e}); got {:?}",
                    String::from_utf8_lossy(&got)
                ),
            }
        }
        String::from_utf8(got).expect("utf-8 reply")
    }

    /// Sends a `stats` request (`"stats\r\n"`, `"stats settings\r\n"`, ...) and returns its
    /// `STAT name value` lines by name.
    pub fn stats(&mut self, request: &str) -> HashMap<String, String> {
        stat_lines(&self.request(request.as_bytes(), b"END\r\n"))
            .into_iter()
            .collect()
    }

    /// True when the server has closed the connection (reads EOF within the patience window).
    pub fn is_closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// The `STAT name value` lines of a reply that ends in `END`, in order.
pub fn stat_lines(reply: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8(reply.to_vec()).expect("utf-8 stats");
    assert!(text.ends_with("END\r\n"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("STAT name value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// One HTTP/1.1 GET of `path` over a fresh connection (`Connection: close`, read to the end):
/// (status, status line and headers, body).
pub fn http_get(addr: impl ToSocketAddrs, path: &str) -> (u16, String, String) {
    let mut conn = TcpStream::connect(addr).expect("connect to the HTTP endpoint");
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

/// A small seeded generator (xorshift64*) for random test streams: a failing stream replays from
/// its seed, on any machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (modulo: the bias does not matter for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::{ephemeral_range, free_port, tcp_sockets_on, test_ports, Conn};
    use std::collections::HashSet;
    use std::net::{TcpListener, TcpStream};
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn tcp_sockets_on_a_port_name_its_listener_and_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // /proc/net/tcp is read a page at a time: sockets other tests open and close meanwhile
        // can shift its lines, so a read may miss one. Read again before concluding.
        let sockets_until = |shown: &dyn Fn(&str) -> bool| {
            let mut sockets = tcp_sockets_on(port);
            for _ in 0..100 {
                if shown(&sockets) {
                    break;
                }
                sockets = tcp_sockets_on(port);
            }
            sockets
        };
        let listening = format!("{port}->0 LISTEN");
        let sockets = sockets_until(&|s| s.contains(&listening));
        assert!(sockets.contains(&listening), "{sockets}");
        let _client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_served, _) = listener.accept().unwrap();
        let both = |s: &str| s.matches("ESTABLISHED").count() == 2;
        let sockets = sockets_until(&both);
        assert!(both(&sockets), "{sockets}");
    }

    #[test]
    fn a_failed_read_says_how_the_server_process_ended() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut conn = Conn::connect(listener.local_addr().unwrap().port());
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        conn.server_pid = Some(child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !conn.server_state().contains("has exited") {
            assert!(Instant::now() < deadline, "{}", conn.server_state());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(conn.server_state().contains("exit status 3, signal 0"));
        child.wait().unwrap();
        assert!(conn.server_state().contains("is gone"));
        conn.server_pid = Some(std::process::id());
        assert!(conn.server_state().contains("still running"));
    }

    #[test]
    fn free_port_never_hands_out_a_port_twice() {
        let mut seen = HashSet::new();
        for _ in 0..3000 {
            assert!(seen.insert(free_port()), "a port handed out twice");
        }
    }

    #[test]
    fn free_ports_are_never_ones_the_kernel_picks_itself() {
        let (first, last) = ephemeral_range().unwrap();
        let (low, high) = test_ports();
        assert!(
            high <= first || low > last,
            "{low}..{high} meets {first}-{last}"
        );
        for _ in 0..200 {
            let port = free_port();
            assert!((low..high).contains(&port), "{port}");
        }
    }
}
