//! systemd's readiness protocol, end to end: the test plays the service manager. It binds the
//! unix datagram socket systemd would pass in NOTIFY_SOCKET, starts the real tern with it, and
//! reads what tern says: READY=1 once it accepts connections, RELOADING=1 then READY=1 around a
//! SIGHUP (which re-reads the log level from --config), STOPPING=1 at SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tern_testkit::{free_port, tern_bin, Conn, PATIENCE};

struct Tern(Child);

impl Drop for Tern {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-notify-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The service manager's end: one datagram per notification.
fn manager(dir: &Path) -> (UnixDatagram, PathBuf) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    (socket, path)
}

fn next_message(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification from tern in time");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn start(args: &[&str], notify_socket: &Path) -> (Tern, u16) {
    let port = free_port();
    let child = Command::new(tern_bin())
        .args(["serve", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .env("NOTIFY_SOCKET", notify_socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    (Tern(child), port)
}

fn signal(tern: &Tern, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), tern.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn ready_only_when_serving_then_reload_and_stop() {
    let dir = scratch("lifecycle");
    let (socket, socket_path) = manager(&dir);
    let config = dir.join("tern.toml");
    std::fs::write(&config, "verbose = 0\n").unwrap();
    let (mut tern, port) = start(
        &["--config", config.to_str().unwrap(), "-t", "2"],
        &socket_path,
    );

    let ready = next_message(&socket);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS= with READY=1: {ready:?}"));
    assert!(
        status.contains(&format!("127.0.0.1:{port}")) && status.contains("2 workers"),
        "{status}"
    );
    // Ready means ready: the first connection made after READY=1 is served, with no retry.
    let mut conn = Conn::connect(port);
    assert!(conn.line("version\r\n").starts_with("VERSION "));
    assert_eq!(conn.stats("stats settings\r\n")["verbosity"], "0");

    // SIGHUP re-reads the file's log level; the server keeps serving the same connection.
    std::fs::write(&config, "verbose = 2\n").unwrap();
    signal(&tern, "HUP");
    let reloading = next_message(&socket);
    assert!(
        reloading.lines().any(|l| l == "RELOADING=1"),
        "{reloading:?}"
    );
    let reloaded = next_message(&socket);
    assert!(reloaded.lines().any(|l| l == "READY=1"), "{reloaded:?}");
    assert!(reloaded.contains("verbosity 2"), "{reloaded:?}");
    assert_eq!(conn.stats("stats settings\r\n")["verbosity"], "2");

    // A file that no longer parses changes nothing and says so; the server stays up.
    std::fs::write(&config, "verbose = \"loud\"\n").unwrap();
    signal(&tern, "HUP");
    assert!(next_message(&socket).contains("RELOADING=1"));
    let failed = next_message(&socket);
    assert!(failed.contains("reload failed"), "{failed:?}");
    assert_eq!(conn.stats("stats settings\r\n")["verbosity"], "2");

    signal(&tern, "TERM");
    let stopping = next_message(&socket);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(tern.0.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_a_config_file_sighup_changes_nothing_and_does_not_stop_the_server() {
    let dir = scratch("no-config");
    let (socket, socket_path) = manager(&dir);
    let (tern, port) = start(&["-v"], &socket_path);
    assert!(next_message(&socket).contains("READY=1"));
    signal(&tern, "HUP");
    assert!(next_message(&socket).contains("RELOADING=1"));
    assert!(next_message(&socket).contains("no --config file to re-read"));
    let mut conn = Conn::connect(port);
    assert_eq!(conn.stats("stats settings\r\n")["verbosity"], "1");
    drop(tern);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hand-over inside one unit (docs/restart.md: `ExecReload=` starts the successor with
/// `--takeover -d`, `NotifyAccess=all`): the old process says nothing as it goes (a STOPPING=1
/// would stop the unit), the successor's daemon says MAINPID= (itself) with READY=1, and the
/// command systemd started returns only after that, so systemd follows the new main process.
#[test]
fn a_successor_taking_over_with_d_names_itself_the_main_process_before_its_command_returns() {
    let dir = scratch("takeover");
    let (socket, socket_path) = manager(&dir);
    let control = dir.join("takeover.sock");
    let args = ["--takeover-socket", control.to_str().unwrap()];
    let (mut old, port) = start(&args, &socket_path);
    assert!(next_message(&socket).contains("READY=1"));

    let mut reload = Command::new(tern_bin())
        .args(["serve", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .args(["--takeover", "-d"])
        .env("NOTIFY_SOCKET", &socket_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let command_pid = reload.id();
    assert!(reload.wait().unwrap().success(), "tern serve -d exits 0");
    // Already queued when the command returned: no waiting.
    socket.set_nonblocking(true).unwrap();
    let message = next_message(&socket);
    assert!(message.lines().any(|l| l == "READY=1"), "{message:?}");
    let main_pid: u32 = message
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .unwrap_or_else(|| panic!("no MAINPID= from the successor: {message:?}"))
        .parse()
        .unwrap();
    assert_ne!(
        main_pid, command_pid,
        "the daemon, not the command that forked it"
    );
    assert!(old.0.wait().unwrap().success(), "the old server exits 0");
    let mut buf = [0u8; 4096];
    assert!(
        socket.recv(&mut buf).is_err(),
        "nothing more, from either: {:?}",
        String::from_utf8_lossy(&buf)
    );

    let mut conn = Conn::connect(port);
    assert_eq!(conn.stats("stats\r\n")["pid"], main_pid.to_string());
    drop(conn);
    // The daemon is not this test's child: stop it by its pid, and wait until it is gone.
    let status = Command::new("kill")
        .args(["-TERM", &main_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Gone, or a zombie where nothing reaps orphans.
    let running = || {
        std::fs::read_to_string(format!("/proc/{main_pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| !s.starts_with(" Z"))
        })
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
