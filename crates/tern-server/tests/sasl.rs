//! `-S`: binary clients authenticate with SASL PLAIN against `MEMCACHED_SASL_PWDB`, through a
//! small client of the tests' own (the test kit's binary frames). Debian's memcached checks SASL
//! with Cyrus' sasldb, not a password file, so it is the reference for refusals only.

use std::io::{Read, Write};
use std::process::Command;

use tern_testkit::binary::{frame, Reply};
use tern_testkit::{free_port, tern_bin, Conn, ServerProcess};

const AUTH_ERROR: u16 = 0x20;
const GET: u8 = 0x00;
const SET: u8 = 0x01;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const LIST_MECHS: u8 = 0x20;
const AUTH: u8 = 0x21;
const STEP: u8 = 0x22;

fn ask(conn: &mut Conn, opcode: u8, key: &[u8], value: &[u8]) -> Reply {
    let extras: &[u8] = if opcode == SET { &[0; 8] } else { &[] };
    conn.stream
        .write_all(&frame(opcode, extras, key, value, 9))
        .unwrap();
    Reply::read(&mut conn.stream).expect("a reply")
}

fn closed(conn: &mut Conn) -> bool {
    let mut rest = Vec::new();
    conn.stream.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

#[test]
fn sasl_plain_then_binary_commands_and_refusals_before() {
    let dir = std::env::temp_dir().join(format!("tern-sasl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pwdb = dir.join("pwdb");
    std::fs::write(&pwdb, "alice:secret\n").unwrap();
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.env("MEMCACHED_SASL_PWDB", &pwdb).arg("serve").args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-S",
    ]);
    let server = ServerProcess::spawn(cmd, port);

    let mut conn = server.connect();
    let mechs = ask(&mut conn, LIST_MECHS, b"", b"");
    assert_eq!((mechs.status, mechs.value.as_slice()), (0, &b"PLAIN"[..]));
    assert_eq!(ask(&mut conn, VERSION, b"", b"").status, 0);
    // A wrong password and a step are refused; the connection may try again.
    let wrong = ask(&mut conn, AUTH, b"PLAIN", b"\0alice\0nope");
    assert_eq!(
        (wrong.status, wrong.value.as_slice()),
        (AUTH_ERROR, &b"Auth failure."[..])
    );
    assert_eq!(
        ask(&mut conn, STEP, b"PLAIN", b"\0alice\0secret").status,
        AUTH_ERROR
    );
    let ok = ask(&mut conn, AUTH, b"PLAIN", b"\0alice\0secret");
    assert_eq!((ok.status, ok.value.as_slice()), (0, &b"Authenticated"[..]));
    assert_eq!(ask(&mut conn, SET, b"k", b"v").status, 0);
    let got = ask(&mut conn, GET, b"k", b"");
    assert_eq!((got.status, got.value.as_slice()), (0, &b"v"[..]));

    // Any other request first: status 0x20, then the connection closes (as memcached does).
    let mut early = server.connect();
    let refused = ask(&mut early, NOOP, b"", b"");
    assert_eq!(
        (refused.status, refused.value.as_slice()),
        (AUTH_ERROR, &b"Auth failure."[..])
    );
    assert!(closed(&mut early));
    // Text is refused: the connection closes unanswered.
    let mut text = server.connect();
    text.send(b"get k\r\n");
    assert!(closed(&mut text));

    let mut conn = server.connect();
    assert_eq!(ask(&mut conn, AUTH, b"PLAIN", b"\0alice\0secret").status, 0);
    let stats = {
        conn.stream
            .write_all(&frame(0x10, &[], b"", b"", 1))
            .unwrap();
        let mut stats = Vec::new();
        loop {
            let reply = Reply::read(&mut conn.stream).unwrap();
            if reply.key.is_empty() {
                break stats;
            }
            stats.push((
                String::from_utf8(reply.key).unwrap(),
                String::from_utf8(reply.value).unwrap(),
            ));
        }
    };
    let stat = |name: &str| {
        stats
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(stat("auth_cmds"), Some("4"));
    assert_eq!(stat("auth_errors"), Some("2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Refusals before authentication match Debian's memcached -S (its users come from sasldb).
#[test]
fn refusals_before_authentication_match_memcached() {
    let dir = std::env::temp_dir().join(format!("tern-sasl-ref-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("memcached.conf"), "mech_list: plain\n").unwrap();
    std::fs::write(dir.join("pwdb"), "alice:secret\n").unwrap();
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.env("MEMCACHED_SASL_PWDB", dir.join("pwdb"))
        .arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-S"]);
    let tern = ServerProcess::spawn(cmd, port);
    let port = free_port();
    let mut cmd = Command::new(tern_testkit::memcached_bin());
    cmd.env("SASL_CONF_PATH", &dir).args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-u",
        "root",
        "-S",
    ]);
    let memcached = ServerProcess::spawn(cmd, port);
    for (opcode, key, value) in [
        (LIST_MECHS, &b""[..], &b""[..]),
        (GET, b"k", b""),
        (NOOP, b"", b""),
        (AUTH, b"PLAIN", b"\0alice\0nope"),
        (AUTH, b"CRAM-MD5", b"x"),
        (STEP, b"PLAIN", b"\0alice\0nope"),
    ] {
        let reply = |server: &ServerProcess| {
            let r = ask(&mut server.connect(), opcode, key, value);
            (r.opcode, r.status, r.value)
        };
        assert_eq!(reply(&tern), reply(&memcached), "opcode {opcode:#x}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
