//! Live hand-over (`--takeover`, docs/restart.md): under a steady load, a new tern takes the
//! listening sockets and the memory file from the running one. No connection is refused, no
//! reply is an error, no key stored before (or acknowledged during) the hand-over is missed;
//! clients whose connection the old process closed reconnect and send their request again, as
//! memcached clients do. The load comes from `tern bench --reconnect` (open loop), and from
//! this file's own clients, which also check that every `set` acknowledged around the hand-over
//! is kept, value for value.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, ServerProcess, PATIENCE};

/// The load: requests a second over all clients, due at fixed times (open loop: a late reply
/// does not delay the next request's due time, and latency counts from when it was due).
const RATE: u64 = 20_000;
const CLIENTS: u64 = 4;
/// One request in this many is a `set` of a new key; the others `get` a key stored before.
const SET_EVERY: u64 = 10;
const KEYS: usize = 1000;

/// The tests that put a 20,000 requests/s load on a server run one at a time: together they
/// would starve each other (and the servers) of the machine's cores.
static LOAD: Mutex<()> = Mutex::new(());

#[derive(Default)]
struct Tally {
    served: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    misses: AtomicU64,
    reconnects: AtomicU64,
    /// Set when the new process starts: the worst latency before it is the load's own.
    handing_over: AtomicBool,
    worst_micros_before: AtomicU64,
    worst_micros: AtomicU64,
    /// Keys whose `set` was answered STORED, to look for after the hand-over.
    written: Mutex<Vec<String>>,
}

fn value_of(key: &str) -> Vec<u8> {
    format!("value-of-{key}-{}", "x".repeat(40)).into_bytes()
}

/// One request and its reply on `conn`; `None` when the connection broke before the whole
/// reply came (closed or reset by the old process): the caller reconnects and sends it again.
fn exchange(conn: &mut BufReader<TcpStream>, request: &[u8], value_len: usize) -> Option<Vec<u8>> {
    conn.get_mut().write_all(request).ok()?;
    let mut reply = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if conn.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        reply.extend_from_slice(&line);
        if line.starts_with(b"VALUE ") {
            let mut data = vec![0; value_len + 2];
            conn.read_exact(&mut data).ok()?;
            reply.extend_from_slice(&data);
        } else {
            return Some(reply);
        }
    }
}

fn client(port: u16, id: u64, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let interval = Duration::from_nanos(1_000_000_000 * CLIENTS / RATE);
    let connect = || -> Option<BufReader<TcpStream>> {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => {
                stream.set_read_timeout(Some(PATIENCE)).unwrap();
                stream.set_nodelay(true).unwrap();
                Some(BufReader::new(stream))
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    tally.refused.fetch_add(1, Ordering::Relaxed);
                } else {
                    tally.errors.fetch_add(1, Ordering::Relaxed);
                }
                None
            }
        }
    };
    let mut conn = connect();
    let mut due = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        n += 1;
        let (key, set) = if n % SET_EVERY == 0 {
            (format!("written:{id}:{n}"), true)
        } else {
            (format!("stored:{}", (id * 7919 + n) % KEYS as u64), false)
        };
        let value = value_of(&key);
        let request = if set {
            let mut r = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
            r.extend_from_slice(&value);
            r.extend_from_slice(b"\r\n");
            r
        } else {
            format!("get {key}\r\n").into_bytes()
        };
        let reply = loop {
            let Some(c) = conn.as_mut() else {
                conn = connect();
                if conn.is_none() {
                    return;
                }
                continue;
            };
            match exchange(c, &request, value.len()) {
                Some(reply) => break reply,
                None => {
                    tally.reconnects.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        };
        let expected = if set {
            b"STORED\r\n".to_vec()
        } else {
            let mut e = format!("VALUE {key} 0 {}\r\n", value.len()).into_bytes();
            e.extend_from_slice(&value);
            e.extend_from_slice(b"\r\nEND\r\n");
            e
        };
        if reply == expected {
            if set {
                tally.written.lock().unwrap().push(key);
            }
        } else if reply == b"END\r\n" {
            tally.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            eprintln!(
                "unexpected reply to {key}: {:?}",
                String::from_utf8_lossy(&reply)
            );
            tally.errors.fetch_add(1, Ordering::Relaxed);
        }
        let micros = due.elapsed().as_micros() as u64;
        tally.worst_micros.fetch_max(micros, Ordering::Relaxed);
        if !tally.handing_over.load(Ordering::Relaxed) {
            tally
                .worst_micros_before
                .fetch_max(micros, Ordering::Relaxed);
        }
        tally.served.fetch_add(1, Ordering::Relaxed);
        due += interval;
    }
}

fn scratch(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("tern-takeover-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn serve_args(port: u16, dir: &Path, threads: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "serve",
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        threads,
        "-e",
        &dir.join("tern.mem").display().to_string(),
        "--takeover-socket",
        &dir.join("takeover.sock").display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    // TERN_TEST_IO_ENGINE: the hand-over's "stop accepting" under each engine.
    args.extend(tern_testkit::io_engine_args(&[]));
    args
}

/// Starts the tern that will be taken over from, and waits until it offers its sockets: its
/// port accepts (into the kernel's backlog) before the control socket is there. The control
/// socket's mode is 0600 (whoever connects can stop the server: its user only), set once it
/// listens.
fn serve_offering(port: u16, dir: &Path, args: Vec<String>) -> ServerProcess {
    use std::os::unix::fs::PermissionsExt;
    let mut cmd = Command::new(tern_bin());
    cmd.args(args);
    let server = ServerProcess::spawn(cmd, port);
    let control = dir.join("takeover.sock");
    await_until("the control socket, mode 0600", || {
        std::fs::metadata(&control).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600)
    });
    server
}

/// Starts a tern that takes over from the one serving `port`. Not waited for as
/// `ServerProcess::spawn` waits: the port accepts already (the old server's sockets).
fn take_over(port: u16, args: Vec<String>) -> ServerProcess {
    let child = Command::new(tern_bin())
        .args(args)
        .arg("--takeover")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    ServerProcess { child, port }
}

/// Waits until `done` holds, failing the test after [`PATIENCE`].
fn await_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The worst latency in `tern bench`'s live lines (`max N us`), in µs.
fn worst_of(lines: &[String]) -> f64 {
    lines
        .iter()
        .filter_map(|line| {
            line.split("max ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .fold(0.0, f64::max)
}

#[test]
fn hand_over_under_tern_bench_refuses_nothing_and_misses_nothing() {
    let _load = LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("bench");
    let port = free_port();
    let mut old = serve_offering(port, &dir, serve_args(port, &dir, "2"));
    // tern bench stores its 1,000 keys (k000000000000000...) first, then sends 100,000 requests
    // (gets, one in ten a set of one of those keys) due at 20,000 a second: five seconds.
    let mut bench = Command::new(tern_bin())
        .args(["bench", "-s", &format!("127.0.0.1:{port}")])
        .args(["-r", "20000", "-n", "100000", "--reconnect", "-k", "1000"])
        .args(["-c", "4", "-p", "8", "-m", "get:9,set:1", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its stderr: a line per second of load, then the table.
    let (lines_tx, lines_rx) = mpsc::channel();
    let stderr = BufReader::new(bench.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut before = Vec::new();
    while before.len() < 2 {
        let line = lines_rx
            .recv_timeout(PATIENCE)
            .expect("tern bench reports its first seconds of load");
        if line.starts_with('[') {
            before.push(line);
        }
    }
    // Two seconds of load on the old server, then the hand-over.
    let new = take_over(port, serve_args(port, &dir, "3"));
    assert!(old.wait_exit().success(), "the old server exits 0");
    let out = bench.wait_with_output().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = lines_rx.try_iter().collect();
    let text = format!("{}\n{}", before.join("\n"), rest.join("\n"));
    assert!(out.status.success(), "tern bench failed:\n{text}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let count = |pointer: &str| {
        report
            .pointer(pointer)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("{pointer} in {report}"))
    };
    let during: Vec<String> = rest.into_iter().filter(|l| l.starts_with('[')).collect();
    eprintln!(
        "hand-over under tern bench -r 20000 --reconnect: worst latency {} µs over the run; \
         {} µs in the seconds after the hand-over began, {} µs in the two before; {} reconnects",
        report["latency_us"]["max"],
        worst_of(&during),
        worst_of(&before),
        count("/reconnects")
    );
    assert_eq!(count("/preload/failed"), 0, "{text}");
    assert_eq!(count("/errors/refused"), 0, "refused connections\n{text}");
    let error_replies = ["error", "client_error", "server_error", "binary_status"]
        .map(|kind| count(&format!("/errors/{kind}")));
    assert_eq!(error_replies, [0; 4], "error replies\n{text}");
    assert_eq!(count("/misses"), 0, "misses\n{text}");
    assert_eq!(count("/errors_total"), 0, "{text}");
    assert_eq!(count("/unanswered"), 0, "{text}");
    assert_eq!(count("/requests"), 100_000, "{text}");
    // Each of the 4 connections was open on the old server, which closed it: the load crossed
    // the hand-over.
    assert!(count("/reconnects") >= 4, "{text}");

    let mut check = new.connect();
    let stats = check.stats("stats\r\n");
    assert_eq!(
        stats["pid"],
        new.pid().to_string(),
        "the new process serves"
    );
    assert_ne!(
        stats["get_hits"], "0",
        "the new process served the load's gets"
    );
    assert_eq!(
        stats["restored_items"], "1000",
        "the old one's keys restored"
    );
    // tern bench's values are `abc...` cut to the value size (32 bytes).
    let value: String = (b'a'..=b'z').chain(b'a'..=b'f').map(char::from).collect();
    for i in 0..1000 {
        let key = format!("k{i:015}");
        check.expect(
            format!("get {key}\r\n").as_bytes(),
            format!("VALUE {key} 0 32\r\n{value}\r\nEND\r\n").as_bytes(),
        );
    }
    drop(check);
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same hand-over under this file's own clients, which remember every `set` answered
/// STORED (before, during or after it) and find each one afterwards, value for value.
#[test]
fn writes_acknowledged_around_a_hand_over_are_kept() {
    let _load = LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("load");
    let port = free_port();
    // The new process has more workers than the old: it binds more sockets into the group.
    let mut old = serve_offering(port, &dir, serve_args(port, &dir, "2"));
    let mut setup = old.connect();
    for i in 0..KEYS {
        let key = format!("stored:{i}");
        let value = value_of(&key);
        let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        setup.expect(&request, b"STORED\r\n");
    }
    drop(setup);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (stop, tally) = (stop.clone(), tally.clone());
            std::thread::spawn(move || client(port, id, stop, tally))
        })
        .collect();
    // A second of load on the old server, then the hand-over, then a second on the new one.
    await_until("load on the old server", || {
        tally.served.load(Ordering::Relaxed) >= RATE
    });
    tally.handing_over.store(true, Ordering::Relaxed);
    let new = take_over(port, serve_args(port, &dir, "3"));
    assert!(old.wait_exit().success(), "the old server exits 0");
    let at_hand_over = tally.served.load(Ordering::Relaxed);
    await_until("load on the new server", || {
        tally.served.load(Ordering::Relaxed) >= at_hand_over + RATE
    });
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    let mut check = new.connect();
    let stats = check.stats("stats\r\n");
    assert_eq!(
        stats["pid"],
        new.pid().to_string(),
        "the new process serves"
    );
    let written = tally.written.lock().unwrap();
    // What the old one held when it saved: the keys stored before, and the sets it answered
    // before the hand-over (those answered after went to the new one).
    let restored: usize = stats["restored_items"].parse().unwrap();
    assert!(
        (KEYS..=KEYS + written.len()).contains(&restored),
        "{restored} items restored from the old one's save"
    );
    for key in written.iter() {
        let value = value_of(key);
        let mut expected = format!("VALUE {key} 0 {}\r\n", value.len()).into_bytes();
        expected.extend_from_slice(&value);
        expected.extend_from_slice(b"\r\nEND\r\n");
        check.expect(format!("get {key}\r\n").as_bytes(), &expected);
    }
    let served = tally.served.load(Ordering::Relaxed);
    let reconnects = tally.reconnects.load(Ordering::Relaxed);
    eprintln!(
        "hand-over under {RATE} requests/s: {served} served ({} sets), {reconnects} reconnects, \
         worst latency {} µs ({} µs before the hand-over began)",
        written.len(),
        tally.worst_micros.load(Ordering::Relaxed),
        tally.worst_micros_before.load(Ordering::Relaxed),
    );
    assert_eq!(
        tally.refused.load(Ordering::Relaxed),
        0,
        "refused connections"
    );
    assert_eq!(tally.errors.load(Ordering::Relaxed), 0, "error replies");
    assert_eq!(tally.misses.load(Ordering::Relaxed), 0, "misses");
    // Every client's first connection was to the old process, which closed it.
    assert!(reconnects >= CLIENTS, "{reconnects} reconnects");
    assert!(
        !dir.join("tern.mem.meta").exists(),
        "the new one cleared the clean mark"
    );
    drop(check);
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--takeover` with nothing to take over starts as usual (a first start under the same unit).
#[test]
fn takeover_with_no_running_server_starts_as_usual() {
    let dir = scratch("first");
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.args(serve_args(port, &dir, "1")).arg("--takeover");
    let server = ServerProcess::spawn(cmd, port);
    server
        .connect()
        .expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin endpoint's socket is handed over too, and a new process with fewer workers than
/// the old takes every TCP socket (some workers two); the pidfile is the new one's.
#[test]
fn admin_socket_is_handed_over_to_fewer_workers() {
    let dir = scratch("sockets");
    let port = free_port();
    let admin_port = free_port().to_string();
    let pidfile = dir.join("tern.pid");
    let args = |threads: &str| {
        let mut args = serve_args(port, &dir, threads);
        let extra = ["--admin-port", &admin_port];
        args.extend(extra.map(String::from));
        args.extend(["-P".to_string(), pidfile.display().to_string()]);
        args
    };
    let mut old = serve_offering(port, &dir, args("3"));
    old.connect().expect(b"set k 3 0 1\r\nv\r\n", b"STORED\r\n");

    let new = take_over(port, args("1"));
    assert!(old.wait_exit().success(), "the old server exits 0");
    // Every one of the old process's three sockets is accepted from: connections spread over
    // them by the kernel's SO_REUSEPORT hash, so a socket nobody accepted from would hang one.
    for _ in 0..30 {
        new.connect()
            .expect(b"get k\r\n", b"VALUE k 3 1\r\nv\r\nEND\r\n");
    }
    let (status, _, body) = tern_testkit::http_get(
        ("127.0.0.1", admin_port.parse::<u16>().unwrap()),
        "/metrics",
    );
    assert_eq!(status, 200);
    assert!(!body.is_empty());
    let written = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(
        written.trim(),
        new.pid().to_string(),
        "the pidfile names the new process"
    );
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `request` over the unix socket at `path`, and the reply's first `len` bytes.
fn over_unix(path: &Path, request: &[u8], len: usize) -> Vec<u8> {
    let mut conn = std::os::unix::net::UnixStream::connect(path).unwrap();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    conn.write_all(request).unwrap();
    let mut reply = vec![0; len];
    conn.read_exact(&mut reply).unwrap();
    reply
}

/// The unix socket (`-s`, which turns TCP off, as in memcached) is handed over too; its file
/// stays (the old process does not remove it).
#[test]
fn a_unix_socket_is_handed_over() {
    let dir = scratch("unix");
    let unix = dir.join("tern.sock");
    // `-l`/`-p` in `serve_args` are ignored beside `-s`.
    let mut args = serve_args(free_port(), &dir, "2");
    args.extend(["-s".to_string(), unix.display().to_string()]);
    let old = Command::new(tern_bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut old = ServerProcess {
        child: old,
        port: 0,
    };
    let control = dir.join("takeover.sock");
    await_until("the unix socket and the control socket", || {
        control.exists() && std::os::unix::net::UnixStream::connect(&unix).is_ok()
    });
    assert_eq!(over_unix(&unix, b"set k 3 0 1\r\nv\r\n", 8), b"STORED\r\n");
    let new = take_over(0, args);
    assert!(old.wait_exit().success(), "the old server exits 0");
    assert_eq!(
        over_unix(&unix, b"get k\r\n", 21),
        b"VALUE k 3 1\r\nv\r\nEND\r\n"
    );
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The inodes of the UDP sockets bound to `port` on this machine (`/proc/net/udp`): a socket
/// keeps its inode for as long as any process holds it.
fn udp_sockets_on(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields[1].ends_with(&port).then(|| fields[9].to_string())
        })
        .collect()
}

/// A `get` over memcached's UDP frame (request id 1), answered in one datagram.
fn udp_get(port: u16, key: &str) -> Vec<u8> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket.connect(("127.0.0.1", port)).unwrap();
    let mut request = b"\0\x01\0\0\0\x01\0\0".to_vec();
    request.extend_from_slice(format!("get {key}\r\n").as_bytes());
    socket.send(&request).unwrap();
    let mut reply = [0; 1500];
    let n = socket.recv(&mut reply).expect("a UDP reply in time");
    assert_eq!(&reply[..2], b"\0\x01", "the request's id");
    reply[8..n].to_vec()
}

/// `-U` sockets are handed over like the TCP ones: the successor serves UDP from the very
/// sockets the old process bound (their queues survive the hand-over), not from new ones.
#[test]
fn udp_sockets_are_handed_over() {
    let dir = scratch("udp");
    let port = free_port();
    let udp_port = free_port();
    let args = |threads: &str| {
        let mut args = serve_args(port, &dir, threads);
        args.extend(["-U".to_string(), udp_port.to_string()]);
        args
    };
    let mut old = serve_offering(port, &dir, args("2"));
    old.connect()
        .expect(b"set k 5 0 2\r\nhi\r\n", b"STORED\r\n");
    assert_eq!(udp_get(udp_port, "k"), b"VALUE k 5 2\r\nhi\r\nEND\r\n");
    let old_sockets = udp_sockets_on(udp_port);
    assert_eq!(old_sockets.len(), 2, "one UDP socket per worker");

    let new = take_over(port, args("3"));
    assert!(old.wait_exit().success(), "the old server exits 0");
    // The old one is gone: the successor answers, and the key it restored is there.
    assert_eq!(udp_get(udp_port, "k"), b"VALUE k 5 2\r\nhi\r\nEND\r\n");
    let new_sockets = udp_sockets_on(udp_port);
    for socket in &old_sockets {
        assert!(
            new_sockets.contains(socket),
            "the old process's UDP socket {socket} lives on in the new one ({new_sockets:?})"
        );
    }
    assert_eq!(
        new_sockets.len(),
        3,
        "a third socket joined for the third worker"
    );
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}
