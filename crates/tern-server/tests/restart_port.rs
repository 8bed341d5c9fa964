//! A restart finds its port free: tern stopped while a client is connected closes the
//! connection first, so its side waits in FIN_WAIT2 (then TIME_WAIT) for up to a minute, and
//! a new tern started at once on the same port must bind it, as memcached does (SO_REUSEADDR
//! on every socket tern binds). A port another server listens on is still refused.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, Conn, ServerProcess, PATIENCE};

fn serve_args(port: u16, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["serve", "-l", "127.0.0.1", "-p", &port.to_string()]
        .map(String::from)
        .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(tern_testkit::io_engine_args(extra));
    args
}

/// `tern serve` on `port` (not behind `TERN_TEST_TLS`'s relay: the test is about the port tern
/// binds itself), once it accepts; the test fails if it exits first.
fn serve(port: u16, extra: &[&str]) -> ServerProcess {
    let mut cmd = Command::new(tern_bin());
    cmd.args(serve_args(port, extra));
    ServerProcess::spawn(cmd, port)
}

/// Whether a TCP socket on 127.0.0.1:`port` is closing after its side closed first:
/// FIN_WAIT1 (4), FIN_WAIT2 (5), TIME_WAIT (6) or CLOSING (11) in `/proc/net/tcp`.
fn closing_on(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields[1] == local && matches!(fields[3], "04" | "05" | "06" | "0B")
    })
}

/// Waits until `done` holds, failing the test after [`PATIENCE`].
fn await_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops `server` with SIGTERM while `client` stays connected, and waits until the server's
/// side of that connection is closing (the state that held the port before SO_REUSEADDR).
fn stop_with_client_connected(mut server: ServerProcess, client: &mut Conn) {
    client.expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    server.signal("TERM");
    assert!(server.wait_exit().success(), "tern exits 0 on SIGTERM");
    let port = server.port;
    await_until(
        "the stopped server's side of the connection to close",
        || closing_on(port),
    );
}

#[test]
fn a_restart_binds_while_the_old_connections_close() {
    let port = free_port();
    // The admin endpoint's port too, with a client of its own.
    let admin = free_port();
    let admin_arg = ["--admin-port", &admin.to_string()].map(String::from);
    let admin_arg: Vec<&str> = admin_arg.iter().map(String::as_str).collect();
    let old = serve(port, &admin_arg);
    let mut admin_client = std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap();
    admin_client.set_read_timeout(Some(PATIENCE)).unwrap();
    admin_client
        .write_all(b"GET /health HTTP/1.1\r\nHost: tern\r\n\r\n")
        .unwrap();
    let mut head = [0; 12];
    admin_client.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mut client = old.connect();
    stop_with_client_connected(old, &mut client);
    await_until("the admin connection to close", || closing_on(admin));
    // At once, while the old connections close: it binds both ports and serves.
    let new = serve(port, &admin_arg);
    new.connect()
        .expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    let (status, _, _) = tern_testkit::http_get(("127.0.0.1", admin), "/health");
    assert_eq!(status, 200);
    // The clients of the old process are still connected (half-closed) throughout.
    assert!(closing_on(port) && closing_on(admin));
    drop((client, admin_client));
}

#[test]
fn a_port_another_server_listens_on_is_still_refused() {
    let port = free_port();
    let refused = |what: &str| {
        let out = Command::new(tern_bin())
            .args(serve_args(port, &[]))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: a second tern started");
        assert!(
            stderr.contains(&format!("cannot listen on 127.0.0.1:{port}"))
                && stderr.contains("Address already in use"),
            "{what}: {stderr}"
        );
    };
    let first = serve(port, &[]);
    refused("tern listens");
    first
        .connect()
        .expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    drop(first);
    // Another program's listener (std's sets SO_REUSEADDR too).
    let other = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    refused("another program listens");
    drop(other);
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-restart-port-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A hand-over (`--takeover`, docs/restart.md), then the successor stopped with a client
/// connected and a plain restart at once: neither the connections the old process closed at
/// the hand-over nor the successor's block the port.
#[test]
fn a_restart_after_a_hand_over_binds_while_connections_close() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("takeover");
    let port = free_port();
    let control = dir.join("takeover.sock");
    let offer = ["--takeover-socket", control.to_str().unwrap()];
    let old = serve(port, &offer);
    await_until("the control socket", || control_ready(&control));
    let mut old_client = old.connect();
    old_client.expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());

    let mut args = serve_args(port, &offer);
    args.push("--takeover".into());
    let successor = ServerProcess {
        child: Command::new(tern_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        port,
    };
    let mut old = old;
    assert!(old.wait_exit().success(), "the old server exits 0");
    // The old process closed its client's connection first.
    await_until("the old process's connection to close", || closing_on(port));
    let mut client = successor.connect();
    stop_with_client_connected(successor, &mut client);

    let restarted = serve(port, &[]);
    restarted
        .connect()
        .expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    drop((old_client, client));
    let _ = std::fs::remove_dir_all(&dir);

    fn control_ready(control: &Path) -> bool {
        std::fs::metadata(control).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600)
    }
}
