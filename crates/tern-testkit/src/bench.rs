//! Servers for `tern bench`'s tests: Debian's memcached also listening on UDP, or on a unix
//! socket only.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, memcached_bin, ServerProcess, PATIENCE};

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
        assert!(Instant::now() < deadline, "{cmd:?} was not ready in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// memcached on 127.0.0.1 with TCP and UDP on the same free port number (memcached 1.6 has UDP
/// off unless asked).
pub fn memcached_with_udp(args: &[&str]) -> ServerProcess {
    let port = free_port();
    let mut cmd = Command::new(memcached_bin());
    cmd.args(["-l", "127.0.0.1", "-u", "root"])
        .args(["-p", &port.to_string(), "-U", &port.to_string()])
        .args(args);
    start(cmd, port, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
}

/// memcached serving a unix socket at `path` only (memcached then opens no TCP port: `port` is 0).
pub fn memcached_unix(path: &Path) -> ServerProcess {
    let _ = std::fs::remove_file(path);
    let mut cmd = Command::new(memcached_bin());
    cmd.args(["-u", "root", "-s"]).arg(path);
    start(cmd, 0, || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    })
}

/// A fresh path for a unix socket in the temp folder.
pub fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tern-{name}-{}.sock", std::process::id()))
}
