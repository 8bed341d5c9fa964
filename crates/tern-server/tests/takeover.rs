//! Live hand-over (`--takeover`, docs/restart.md): under a steady load, a new tern takes the
//! listening sockets and the memory file from the running one. No connection is refused, no
//! reply is an error, no key stored before (or acknowledged during) the hand-over is missed;
//! clients whose connection the old process closed reconnect and send their request again, as
//! memcached clients do.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, ServerProcess, PATIENCE};

/// The load: requests a second over all clients, due at fixed times (open loop: a late reply
/// does not delay the next request's due time, and latency counts from when it was due).
const RATE: u64 = 20_000;
const CLIENTS: u64 = 4;
/// One request in this many is a `set` of a new key; the others `get` a key stored before.
const SET_EVERY: u64 = 10;
const KEYS: usize = 1000;

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

#[test]
fn hand_over_under_load_refuses_nothing_and_misses_nothing() {
    let dir = scratch("load");
    let port = free_port();
    // The new process has more workers than the old: it binds more sockets into the group.
    let mut old_cmd = Command::new(tern_bin());
    old_cmd.args(serve_args(port, &dir, "2"));
    let mut old = ServerProcess::spawn(old_cmd, port);
    // Whoever connects to the control socket can stop the server: its user only. (The port
    // accepts from its bind on, before the control socket is made.)
    await_until("the control socket", || dir.join("takeover.sock").exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("takeover.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the control socket's mode");
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

/// The unix socket (`-s`) and the admin endpoint's socket are handed over too, and a new
/// process with fewer workers than the old takes every TCP socket (some workers two); the
/// unix socket's file stays (the old one does not remove it), the pidfile is the new one's.
#[test]
fn unix_and_admin_sockets_are_handed_over_to_fewer_workers() {
    let dir = scratch("sockets");
    let port = free_port();
    let admin_port = free_port().to_string();
    let unix = dir.join("tern.sock");
    let pidfile = dir.join("tern.pid");
    let args = |threads: &str| {
        let mut args = serve_args(port, &dir, threads);
        let extra = ["-s", unix.to_str().unwrap(), "--admin-port", &admin_port];
        args.extend(extra.map(String::from));
        args.extend(["-P".to_string(), pidfile.display().to_string()]);
        args
    };
    let mut old_cmd = Command::new(tern_bin());
    old_cmd.args(args("3"));
    let mut old = ServerProcess::spawn(old_cmd, port);
    old.connect().expect(b"set k 3 0 1\r\nv\r\n", b"STORED\r\n");

    let new = take_over(port, args("1"));
    assert!(old.wait_exit().success(), "the old server exits 0");
    // Every one of the old process's three sockets is accepted from: connections spread over
    // them by the kernel's SO_REUSEPORT hash, so a socket nobody accepted from would hang one.
    for _ in 0..30 {
        new.connect()
            .expect(b"get k\r\n", b"VALUE k 3 1\r\nv\r\nEND\r\n");
    }
    let mut over_unix = std::os::unix::net::UnixStream::connect(&unix).unwrap();
    over_unix.set_read_timeout(Some(PATIENCE)).unwrap();
    over_unix.write_all(b"get k\r\n").unwrap();
    let mut reply = [0; 21];
    over_unix.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"VALUE k 3 1\r\nv\r\nEND\r\n");
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
