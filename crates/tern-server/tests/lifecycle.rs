//! Starting and stopping: signals, daemon mode and pidfile, unix socket, config file, command
//! line errors, logging, idle cost.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, Conn, ServerProcess, PATIENCE};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-lifecycle-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_finishes_in_flight_replies_then_exits_zero() {
    let mut server = ServerProcess::tern(&["-I", "4m", "-m", "512", "-t", "2"]);
    let mut c = server.connect();
    let size = 4 << 20;
    let mut set = format!("set big 0 0 {size}\r\n").into_bytes();
    set.extend(std::iter::repeat_n(b'q', size));
    set.extend_from_slice(b"\r\n");
    c.expect(&set, b"STORED\r\n");
    // 16 MiB of replies: more than the socket buffers hold, so most are still queued in the
    // server when the signal arrives.
    c.send(b"get big big big big\r\n");
    std::thread::sleep(Duration::from_millis(100));
    server.signal("TERM");
    let mut got = Vec::new();
    c.stream
        .read_to_end(&mut got)
        .expect("read until the server closes");
    let one = format!("VALUE big 0 {size}\r\n").len() + size + 2;
    assert_eq!(got.len(), 4 * one + 5, "a reply was cut short");
    assert!(got.ends_with(b"qq\r\nEND\r\n"));
    assert!(server.wait_exit().success());
}

#[test]
fn sigint_on_an_idle_server_exits_zero() {
    let mut server = ServerProcess::tern(&[]);
    let _idle = server.connect();
    server.signal("INT");
    assert!(server.wait_exit().success());
}

#[test]
fn daemon_mode_writes_and_removes_the_pidfile() {
    let dir = scratch("daemon");
    let pidfile = dir.join("tern.pid");
    let port = free_port();
    let status = Command::new(tern_bin())
        .args([
            "serve",
            "-d",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-P",
        ])
        .arg(&pidfile)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the foreground process exits 0 once forked"
    );
    let mut pid = 0u32;
    wait_for("the pidfile", || {
        let text = std::fs::read_to_string(&pidfile).unwrap_or_default();
        pid = text.trim().parse().unwrap_or(0);
        text.ends_with('\n') && pid != 0
    });
    // Killed even when an assertion below fails, so a failed run leaves no daemon behind;
    // disarmed once the daemon is gone, as its pid may then be another process's.
    struct Reap(Option<u32>);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
    let mut reap = Reap(Some(pid));
    wait_for("the daemon to accept", || tern_testkit::listening(port));
    let mut c = Conn::connect(port);
    c.expect(
        b"set k 0 0 1\r\nx\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n",
    );
    let kill = Command::new("kill").arg(pid.to_string()).status().unwrap();
    assert!(kill.success());
    reap.0 = None;
    wait_for("the pidfile to be removed at exit", || !pidfile.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server started with `tern serve ARGS`, killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tern serve ARGS`, which listens on the unix socket `path` (alone: `-s` turns TCP
/// off), and waits until it accepts there.
fn serve_unix(path: &Path, args: &[&str]) -> Killed {
    let server = Killed(
        Command::new(tern_bin())
            .args(["serve", "-s", path.to_str().unwrap()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the unix socket", || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    });
    server
}

#[test]
fn unix_socket_with_access_mask() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let dir = scratch("unix");
    let path = dir.join("tern.sock");
    let _server = serve_unix(&path, &["-a", "0770"]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o770);
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"set u 0 0 2\r\nhi\r\nget u\r\n").unwrap();
    let want = b"STORED\r\nVALUE u 0 2\r\nhi\r\nEND\r\n";
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    drop(_server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_unix_socket_turns_tcp_and_udp_off_even_with_listen_addresses() {
    // memcached 1.6.45 with `-s PATH -l 127.0.0.1 -p P -U P` listens on the unix socket only
    // (checked against it): memcached.c binds TCP and UDP only while `settings.socketpath ==
    // NULL`, whatever -l says.
    let dir = scratch("unix-only");
    let path = dir.join("tern.sock");
    let port = free_port();
    let server = serve_unix(
        &path,
        &[
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            &port.to_string(),
        ],
    );
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"version\r\n").unwrap();
    let mut got = [0u8; 8];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"VERSION ");
    // Serving on the unix socket, so every listener is bound: none is on the port.
    let refused = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    udp.set_read_timeout(Some(PATIENCE)).unwrap();
    udp.send(b"\0\0\0\0\0\x01\0\0version\r\n").unwrap();
    let refused = udp.recv(&mut [0u8; 64]).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_file_with_flags_overriding_it() {
    let dir = scratch("config");
    let path = dir.join("tern.toml");
    std::fs::write(
        &path,
        "threads = 3\nconn_limit = 77\nmax_item_size = \"2m\"\ndisable_cas = true\n\
         max_reqs_per_event = 9\n",
    )
    .unwrap();
    let server = ServerProcess::tern(&["--config", path.to_str().unwrap(), "-c", "55"]);
    let mut c = server.connect();
    let settings = String::from_utf8(c.request(b"stats settings\r\n", b"END\r\n")).unwrap();
    for want in [
        "STAT num_threads 3\r\n",
        "STAT maxconns 55\r\n",
        "STAT item_size_max 2097152\r\n",
        "STAT cas_enabled no\r\n",
        "STAT reqs_per_event 9\r\n",
    ] {
        assert!(settings.contains(want), "{want:?} not in\n{settings}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn serve(args: &[&str]) -> std::process::Output {
    Command::new(tern_bin())
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn command_line_errors_and_help() {
    let out = serve(&["--no-such-option"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-option"));
    let out = serve(&["-I", "12q"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-I 12q"));
    let dir = scratch("badconfig");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "treads = 2\n").unwrap();
    let out = serve(&["--config", path.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("treads"));
    std::fs::remove_dir_all(&dir).unwrap();
    let out = serve(&["-V"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tern "));
    let out = serve(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--port",
        "--listen",
        "--udp-port",
        "--unix-socket",
        "--unix-mask",
        "--memory-limit",
        "--threads",
        "--conn-limit",
        "--max-reqs-per-event",
        "--listen-backlog",
        "--max-item-size",
        "--disable-evictions",
        "--disable-cas",
        "--lock-memory",
        "--enable-largepages",
        "--enable-shutdown",
        "--disable-flush-all",
        "--verbose",
        "--daemon",
        "--user",
        "--pidfile",
        "--version",
        "--config",
    ] {
        assert!(help.contains(flag), "--help does not explain {flag}");
    }
    // A port already in use is an error, not a silent share.
    let first = ServerProcess::tern(&[]);
    let out = serve(&["-l", "127.0.0.1", "-p", &first.port.to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
}

#[test]
fn the_start_log_says_how_the_heap_is_backed() {
    let (status, _, stderr) = stop_and_collect(serve_piped(&["-v", "-m", "8"]));
    assert!(status.success());
    assert!(
        stderr.contains("item heap: 8 MiB in normal pages"),
        "{stderr}"
    );
    // With -L the heap gets huge pages of some kind, or the fallback is a warning.
    let (status, _, stderr) = stop_and_collect(serve_piped(&["-v", "-m", "8", "-L"]));
    assert!(status.success());
    let huge = stderr.contains("item heap: 8 MiB in explicit huge pages")
        || stderr.contains("item heap: 8 MiB in transparent huge pages");
    let fell_back = stderr.contains("-L: no huge pages could be had");
    assert!(huge != fell_back, "{stderr}");
}

/// Starts `tern serve -l 127.0.0.1 -p <free port> <args>` with stdout and stderr piped, for the
/// test to read once the server has exited, and waits until it accepts. Held in a
/// `ServerProcess`, it is killed if the test fails first.
fn serve_piped(args: &[&str]) -> ServerProcess {
    let port = free_port();
    let child = Command::new(tern_bin())
        .args(["serve", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = ServerProcess { child, port };
    wait_for("the server to accept", || tern_testkit::listening(port));
    server
}

/// Stops a server from [`serve_piped`] with SIGTERM: its exit status, stdout and stderr. The
/// pipes are read after the exit; a server blocked on a full pipe fails `wait_exit` (and is
/// killed) rather than hanging the test.
fn stop_and_collect(mut server: ServerProcess) -> (ExitStatus, String, String) {
    server.signal("TERM");
    let status = server.wait_exit();
    fn read_all(pipe: Option<impl Read>) -> String {
        let mut text = String::new();
        pipe.expect("a piped output")
            .read_to_string(&mut text)
            .unwrap();
        text
    }
    let stdout = read_all(server.child.stdout.take());
    let stderr = read_all(server.child.stderr.take());
    (status, stdout, stderr)
}

#[test]
fn quiet_by_default_and_idle_costs_no_cpu() {
    let server = serve_piped(&["-t", "4"]);
    let mut c = server.connect();
    c.expect(b"set k 0 0 1\r\nx\r\nbogus\r\n", b"STORED\r\nERROR\r\n");
    let cpu_ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.pid())).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_name.split(' ').collect();
        // utime and stime, fields 14 and 15 of /proc/PID/stat.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks() - before;
    // Four idle workers and an open idle connection: a busy loop would burn ~200 ticks here.
    assert!(
        spent <= 5,
        "an idle server used {spent} ticks of CPU in 2 s"
    );
    let (status, stdout, stderr) = stop_and_collect(server);
    assert!(status.success());
    assert!(stdout.is_empty() && stderr.is_empty(), "{stderr:?}");
}

/// The real and effective uid of a process, from /proc.
fn uid_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().to_string()
}

#[test]
fn dash_u_drops_root_privileges() {
    let server = ServerProcess::tern(&["-u", "nobody"]);
    // Its sockets listen (and accept into the backlog) before it drops root; it answers only
    // once its workers run, which start after the drop.
    let mut c = server.connect();
    c.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
    let ours = uid_of(std::process::id());
    let theirs = uid_of(server.pid());
    if ours == "0" {
        let nobody = Command::new("id").args(["-u", "nobody"]).output().unwrap();
        assert_eq!(theirs, String::from_utf8_lossy(&nobody.stdout).trim());
    } else {
        // Not root: -u is ignored, as memcached does.
        assert_eq!(theirs, ours);
    }
    c.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
}

#[test]
fn dash_k_locks_memory_or_says_why_not() {
    let port = free_port();
    let child = Command::new(tern_bin())
        .args(["serve", "-k", "-l", "127.0.0.1", "-p", &port.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed when dropped, so a failed assertion leaves no server behind.
    let mut server = ServerProcess { child, port };
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            // Refused by the OS (no CAP_IPC_LOCK and a low RLIMIT_MEMLOCK): a clear message.
            assert!(!status.success());
            let mut err = String::new();
            server
                .child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(err.contains("-k: cannot lock memory"), "{err}");
            return;
        }
        // The port listens before memory is locked (sockets are bound first, as root), and the
        // workers start after: only a reply shows the locking is done.
        if tern_testkit::answers_version(port) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tern -k neither started nor failed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let locked = status.lines().find(|l| l.starts_with("VmLck:")).unwrap();
    assert_ne!(locked.split_whitespace().nth(1), Some("0"), "{locked}");
}

#[test]
fn the_verbosity_command_raises_the_log_level() {
    // One worker: the start-up probe is accepted (quietly) before this test's commands run.
    let server = serve_piped(&["-t", "1"]);
    let mut c = server.connect();
    c.expect(b"verbosity 2\r\n", b"OK\r\n");
    let mut other = server.connect();
    other.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
    c.expect(b"verbosity 0\r\n", b"OK\r\n");
    let (_, _, log) = stop_and_collect(server);
    // Debug lines appear only while verbosity was 2: one for the second connection.
    assert_eq!(log.matches("new connection").count(), 1, "{log}");
}

#[test]
fn one_version_everywhere() {
    // The memcached release tern follows, then tern's own version, wherever a version is
    // reported: clients read it from `version` or from `stats` (PHP's memcached extension uses
    // both) and parse its major and minor numbers (Node's `memcached`).
    let version = "1.6.45-tern-0.1.0";
    assert_eq!(tern_server::VERSION, version);
    assert!(version.starts_with(tern_server::MEMCACHED_RELEASE));
    // `memcached -V` prints `memcached 1.6.45`.
    let out = serve(&["-V"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("tern {version}\n")
    );
    let admin = free_port();
    let server = ServerProcess::tern(&["--admin-port", &admin.to_string()]);
    let mut c = server.connect();
    c.expect(b"version\r\n", format!("VERSION {version}\r\n").as_bytes());
    assert_eq!(c.stats("stats\r\n")["version"], version);
    // A connection's first byte picks its protocol: the binary version on a fresh one.
    let mut b = server.connect();
    b.send(&tern_testkit::binary::frame(0x0b, &[], b"", b"", 0));
    let reply = tern_testkit::binary::Reply::read(&mut b.stream).unwrap();
    assert_eq!(reply.value, version.as_bytes());
    let (status, _, body) = tern_testkit::http_get(("127.0.0.1", admin), "/version");
    assert_eq!(
        (status, body.as_str()),
        (200, format!("{version}\n").as_str())
    );
}

/// The start-up wait (`tern_testkit::listening`) must not take a socket connected to itself for
/// a server: a connect to a port of the ephemeral range that nothing listens on yet ends that
/// way when the kernel picks the same port as its local one.
#[test]
fn a_socket_connected_to_itself_is_no_server() {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).unwrap();
    let itself = socket.local_addr().unwrap();
    socket
        .connect(&itself)
        .expect("a TCP socket connects to its own address (simultaneous open)");
    let stream: TcpStream = socket.into();
    assert!(tern_testkit::connected_to_itself(&stream));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(!tern_testkit::connected_to_itself(&client));
    assert!(tern_testkit::listening(port));
    drop(listener);
    assert!(!tern_testkit::listening(port));
}
