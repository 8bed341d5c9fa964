//! `-S`: binary clients authenticate through libsasl2, as memcached's do: users made by
//! `saslpasswd2` in a sasldb that `SASL_CONF_PATH`'s `memcached.conf` names (PLAIN and CRAM-MD5,
//! side by side with Debian's memcached -S), and PLAIN against `MEMCACHED_SASL_PWDB`, through a
//! small client of the tests' own (the test kit's binary frames).

use std::io::{Read, Write};
use std::process::Command;

use tern_testkit::binary::{frame, Reply};
use tern_testkit::{free_port, tern_bin, Conn, ServerProcess};

const AUTH_ERROR: u16 = 0x20;
const AUTH_CONTINUE: u16 = 0x21;
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
    std::fs::write(dir.join("memcached.conf"), "mech_list: plain\n").unwrap();
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.env("MEMCACHED_SASL_PWDB", &pwdb)
        .env("SASL_CONF_PATH", &dir);
    cmd.arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-S"]);
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
        .env("SASL_CONF_PATH", &dir)
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

/// A sasldb made by `saslpasswd2`, named by `SASL_CONF_PATH`'s `memcached.conf`: tern (no
/// `MEMCACHED_SASL_PWDB`) and Debian's memcached answer the same to the mechanism list, PLAIN
/// right and wrong, a CRAM-MD5 exchange right and wrong, and a request before authenticating.
#[test]
fn sasldb_users_authenticate_with_plain_and_cram_md5_as_memcached() {
    use hmac::{KeyInit, Mac};
    let dir = std::env::temp_dir().join(format!("tern-sasldb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sasldb = dir.join("sasldb2");
    std::fs::write(
        dir.join("memcached.conf"),
        format!(
            "mech_list: plain cram-md5\nsasldb_path: {}\n",
            sasldb.display()
        ),
    )
    .unwrap();
    let mut saslpasswd2 = Command::new("saslpasswd2")
        .args(["-a", "memcached", "-c", "-p", "-f"])
        .arg(&sasldb)
        .arg("alice")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("saslpasswd2 (apt-get install sasl2-bin; .ci/run does this)");
    saslpasswd2
        .stdin
        .take()
        .unwrap()
        .write_all(b"secret")
        .unwrap();
    assert!(saslpasswd2.wait().unwrap().success());

    let start = |bin: std::path::PathBuf, memcached: bool| {
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.env("SASL_CONF_PATH", &dir)
            .env_remove("MEMCACHED_SASL_PWDB");
        if !memcached {
            cmd.arg("serve");
        }
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-S"]);
        if memcached {
            cmd.args(["-u", "root"]);
        }
        ServerProcess::spawn(cmd, port)
    };
    let tern = start(tern_bin(), false);
    let memcached = start(tern_testkit::memcached_bin(), true);

    let cram = |conn: &mut Conn, password: &[u8]| {
        let challenge = ask(conn, AUTH, b"CRAM-MD5", b"");
        assert_eq!(challenge.status, AUTH_CONTINUE);
        assert!(
            challenge.value.starts_with(b"<") && challenge.value.ends_with(b">"),
            "{:?}",
            String::from_utf8_lossy(&challenge.value)
        );
        let mut mac = hmac::Hmac::<md5::Md5>::new_from_slice(password).unwrap();
        mac.update(&challenge.value);
        let digest: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let reply = ask(
            conn,
            STEP,
            b"CRAM-MD5",
            format!("alice {digest}").as_bytes(),
        );
        (reply.status, reply.value)
    };
    let transcript = |server: &ServerProcess| {
        let mut seen = Vec::new();
        let mut conn = server.connect();
        let mechs = ask(&mut conn, LIST_MECHS, b"", b"");
        seen.push((mechs.status, mechs.value));
        let wrong = ask(&mut conn, AUTH, b"PLAIN", b"\0alice\0nope");
        seen.push((wrong.status, wrong.value));
        let ok = ask(&mut conn, AUTH, b"PLAIN", b"\0alice\0secret");
        seen.push((ok.status, ok.value));
        assert_eq!(ask(&mut conn, SET, b"k", b"v").status, 0);
        let got = ask(&mut conn, GET, b"k", b"");
        seen.push((got.status, got.value));

        let mut conn = server.connect();
        seen.push(cram(&mut conn, b"nope"));
        let mut conn = server.connect();
        seen.push(cram(&mut conn, b"secret"));
        let got = ask(&mut conn, GET, b"k", b"");
        seen.push((got.status, got.value));

        let mut early = server.connect();
        let refused = ask(&mut early, GET, b"k", b"");
        seen.push((refused.status, refused.value));
        assert!(closed(&mut early));
        seen
    };
    let seen = transcript(&tern);
    assert_eq!(
        seen,
        [
            (0, b"PLAIN CRAM-MD5".to_vec()),
            (AUTH_ERROR, b"Auth failure.".to_vec()),
            (0, b"Authenticated".to_vec()),
            (0, b"v".to_vec()),
            (AUTH_ERROR, b"Auth failure.".to_vec()),
            (0, b"Authenticated".to_vec()),
            (0, b"v".to_vec()),
            (AUTH_ERROR, b"Auth failure.".to_vec()),
        ]
    );
    assert_eq!(seen, transcript(&memcached));
    std::fs::remove_dir_all(&dir).unwrap();
}
