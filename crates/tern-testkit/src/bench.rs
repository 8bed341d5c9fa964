//! Servers for `tern bench`'s tests: Debian's memcached also listening on UDP, or on a unix
//! socket only.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{free_port, memcached_bin, ServerProcess};

/// memcached on 127.0.0.1 with TCP and UDP on the same free port number (memcached 1.6 has UDP
/// off unless asked).
pub fn memcached_with_udp(args: &[&str]) -> ServerProcess {
    let port = free_port();
    let mut cmd = Command::new(memcached_bin());
    cmd.args(["-l", "127.0.0.1", "-u", "root"])
        .args(["-p", &port.to_string(), "-U", &port.to_string()])
        .args(args);
    ServerProcess::spawn(cmd, port)
}

/// memcached serving a unix socket at `path` only (memcached then opens no TCP port: `port` is 0).
pub fn memcached_unix(path: &Path) -> ServerProcess {
    let _ = std::fs::remove_file(path);
    let mut cmd = Command::new(memcached_bin());
    cmd.args(["-u", "root", "-s"]).arg(path);
    ServerProcess::start(cmd, 0, || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    })
}

/// A fresh path for a unix socket in the temp folder.
pub fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tern-{name}-{}.sock", std::process::id()))
}
