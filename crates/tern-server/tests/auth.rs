//! `-Y/--auth-file` end to end: pymemcache authenticating with its own `set`, every wire format
//! refused before that (compared with Debian's memcached `-Y`), argon2 entries, SIGHUP re-reading
//! the file, and the counters.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use argon2::{Argon2, PasswordHasher};
use tern_testkit::{Conn, ServerProcess, PATIENCE};

struct AuthDir(std::path::PathBuf);

impl AuthDir {
    fn new(name: &str, text: &str) -> AuthDir {
        let dir = std::env::temp_dir().join(format!("tern-auth-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("users"), text).unwrap();
        AuthDir(dir)
    }
    fn file(&self) -> String {
        self.0.join("users").display().to_string()
    }
}

impl Drop for AuthDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";

/// The reply to `request` on a fresh connection, read until the server closes it.
fn until_closed(port: u16, request: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut conn = Conn::connect(port);
    conn.stream.write_all(request).unwrap();
    let mut got = Vec::new();
    conn.stream
        .read_to_end(&mut got)
        .expect("the server closes");
    got
}

#[test]
fn unauthenticated_requests_of_every_format_are_refused_as_memcached_refuses_them() {
    let users = AuthDir::new("refused", "alice:secret\n");
    let tern = ServerProcess::tern(&["-Y", &users.file()]);
    let memcached = ServerProcess::memcached(&["-Y", &users.file()]);
    let binary_noop = [
        0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    // Each line gets the refusal and the connection stays, so the client may still
    // authenticate (memcached's proto_text.c; 1.6.18 answers the first line only and then
    // ignores the connection, so only first lines are compared with it).
    let first_line = |port: u16, request: &[u8]| {
        let mut conn = Conn::connect(port);
        conn.send(request);
        let mut got = conn.read_until(b"\r\n");
        let end = got.windows(2).position(|w| w == b"\r\n").expect("a line") + 2;
        got.truncate(end);
        got
    };
    for (request, lines) in [
        (&b"get a\r\nversion\r\n"[..], 2),
        (b"mg a v\r\nmn\r\n", 2),
        (b"version\r\n", 1),
        // The data block after a refused line reads as a line of its own.
        (b"add k 0 0 12\r\nalice secret\r\n", 2),
        (b"flush_all\r\n", 1),
    ] {
        assert_eq!(
            first_line(tern.port, request),
            first_line(memcached.port, request),
            "{:?}",
            String::from_utf8_lossy(request)
        );
        let mut conn = tern.connect();
        conn.expect(request, &UNAUTHENTICATED.repeat(lines));
        conn.expect(b"set k 0 0 12\r\nalice secret\r\n", b"STORED\r\n");
        conn.expect(b"version\r\n", tern_server::VERSION_REPLY.as_bytes());
    }
    // A binary frame gets the text refusal, and the connection is closed, as memcached does.
    assert_eq!(until_closed(tern.port, &binary_noop), UNAUTHENTICATED);
    assert_eq!(
        first_line(tern.port, &binary_noop),
        first_line(memcached.port, &binary_noop)
    );
    // A wrong password: memcached 1.6.18 says `unauthenticated`, newer ones (and tern)
    // `authentication failure`; the connection stays unauthenticated.
    let mut conn = tern.connect();
    conn.expect(
        b"set k 0 0 9\r\nalice bad\r\nversion\r\n",
        b"CLIENT_ERROR authentication failure\r\nCLIENT_ERROR unauthenticated\r\n",
    );
    conn.expect(b"set k 0 0 12\r\nalice secret\r\n", b"STORED\r\n");
    let stats = conn.stats("stats\r\n");
    // Five connections above and this one authenticated; one attempt failed.
    assert_eq!(stats["auth_cmds"], "7");
    assert_eq!(stats["auth_errors"], "1");
    let settings = conn.stats("stats settings\r\n");
    assert_eq!(settings["auth_enabled_ascii"], users.file());
}

#[test]
fn pymemcache_authenticates_then_works_and_sighup_rereads_the_file() {
    let hash = Argon2::default()
        .hash_password(b"h4sh")
        .unwrap()
        .to_string();
    let users = AuthDir::new("pymemcache", &format!("alice:secret\nbob:{hash}\n"));
    let server = ServerProcess::tern(&["-Y", &users.file()]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pymemcache_auth.py");
    let run = |user: &str, password: &str| {
        let out = Command::new("python3")
            .arg(&script)
            .args([&server.port.to_string(), user, password])
            .output()
            .expect("run python3");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = run("alice", "secret");
    assert!(ok && text.contains("authenticated: ok"), "{text}");
    let (ok, text) = run("bob", "h4sh");
    assert!(
        ok && text.contains("authenticated: ok"),
        "argon2 entry: {text}"
    );
    let (ok, text) = run("alice", "wrong");
    assert!(!ok && text.contains("authentication failure"), "{text}");
    // Alice's password changes on disk; SIGHUP makes it the one that works.
    std::fs::write(users.0.join("users"), "alice:changed\n").unwrap();
    server.signal("HUP");
    let deadline = Instant::now() + PATIENCE;
    while !run("alice", "changed").0 {
        assert!(Instant::now() < deadline, "the new password never worked");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!run("alice", "secret").0);
}
