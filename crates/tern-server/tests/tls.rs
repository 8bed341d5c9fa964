//! TLS (`-Z`) end to end, with certificates the tests make: rustls and Python's `ssl` (through
//! pymemcache's `tls_context=`) as clients, `openssl s_client`, mutual TLS with valid, missing
//! and foreign client certificates, `refresh_certs` after a certificate is swapped on disk, a
//! stalled handshake, and Debian's memcached `-Z` as the reference for the replies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use tern_testkit::tls::{self, Certs, TlsConn};
use tern_testkit::{free_port, tern_bin, Conn, ServerProcess};

/// tern with `-Z` on 127.0.0.1:port (whatever TERN_TEST_TLS says), `args` appended.
fn tern_tls(certs: &Certs, extra_o: &str, args: &[&str]) -> ServerProcess {
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-t", "2"])
        .args(certs.server_args(extra_o))
        .args(args);
    ServerProcess::spawn(cmd, port)
}

/// Sends `request` and reads until the reply ends with `end`.
fn ask(conn: &mut TlsConn, request: &str, end: &str) -> String {
    ask_replies(conn, request, end, 1)
}

/// Sends `request` and reads until `replies` replies ending with `end` came back.
fn ask_replies(conn: &mut TlsConn, request: &str, end: &str, replies: usize) -> String {
    conn.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    let end = end.as_bytes();
    while !got.ends_with(end) || got.windows(end.len()).filter(|w| *w == end).count() < replies {
        let n = conn.read(&mut buf).expect("read a reply over TLS");
        assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

fn stat(lines: &str, name: &str) -> String {
    lines
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {lines}"))
        .to_string()
}

/// The connection works: a handshake refused with TLS 1.3 shows only once the client reads.
fn served(port: u16, config: std::sync::Arc<rustls::ClientConfig>) -> bool {
    let Ok(mut conn) = tls::connect(port, config) else {
        return false;
    };
    if conn.write_all(b"version\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(conn.read(&mut buf), Ok(n) if n > 0 && buf.starts_with(b"VERSION "))
}

#[test]
fn commands_over_tls_and_a_plain_listener_beside() {
    let certs = Certs::generate();
    let plain = free_port();
    let server = tern_tls(&certs, "", &["-l", &format!("notls:127.0.0.1:{plain}")]);
    let mut conn = tls::connect(server.port, certs.client_config(None)).unwrap();
    assert_eq!(
        ask(&mut conn, "set k 5 0 3\r\nabc\r\n", "\r\n"),
        "STORED\r\n"
    );
    // Many replies of one wake-up, pipelined.
    let pipelined = "get k\r\n".repeat(50);
    let replies = ask(
        &mut conn,
        &pipelined,
        &"VALUE k 5 3\r\nabc\r\nEND\r\n".repeat(50),
    );
    assert_eq!(replies.matches("END").count(), 50);
    let mut plain_conn = Conn::connect(plain);
    plain_conn.expect(b"get k\r\n", b"VALUE k 5 3\r\nabc\r\nEND\r\n");
    let settings =
        String::from_utf8(plain_conn.request(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert_eq!(stat(&settings, "ssl_enabled"), "yes");
    assert_eq!(stat(&settings, "ssl_verify_mode"), "0");
    assert_eq!(stat(&settings, "ssl_wbuf_size"), "16384");
    assert_eq!(stat(&settings, "ssl_min_version"), "tlsv1.2");
    assert_eq!(stat(&settings, "ssl_chain_cert"), certs.path("server.pem"));
    // Plain text sent to the TLS port is a failed handshake, counted.
    let mut raw = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    raw.write_all(b"get k\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = raw.read_to_end(&mut sink);
    assert!(!sink.starts_with(b"VALUE"));
    let stats = String::from_utf8(plain_conn.request(b"stats\r\n", b"END\r\n")).unwrap();
    assert_eq!(stat(&stats, "ssl_handshake_errors"), "1");
    stat(&stats, "time_since_server_cert_refresh");
}

#[test]
fn a_large_value_and_a_large_reply_cross_tls_whole() {
    let certs = Certs::generate();
    let server = tern_tls(&certs, "ssl_wbuf_size=4", &[]);
    let mut conn = tls::connect(server.port, certs.client_config(None)).unwrap();
    let value = "v".repeat(900_000);
    let reply = ask(
        &mut conn,
        &format!("set big 0 0 {}\r\n{value}\r\n", value.len()),
        "\r\n",
    );
    assert_eq!(reply, "STORED\r\n");
    let reply = ask_replies(&mut conn, &"get big\r\n".repeat(2), "END\r\n", 2);
    assert_eq!(
        reply.len(),
        2 * (value.len() + "VALUE big 0 900000\r\n\r\nEND\r\n".len())
    );
}

#[test]
fn mutual_tls_takes_the_cas_clients_only() {
    let certs = Certs::generate();
    let mtls = free_port();
    let server = tern_tls(&certs, "", &["-l", &format!("mtls:127.0.0.1:{mtls}")]);
    assert!(served(mtls, certs.client_config(Some("client"))));
    assert!(
        !served(mtls, certs.client_config(None)),
        "no client certificate"
    );
    assert!(
        !served(mtls, certs.client_config(Some("rogue"))),
        "another CA's"
    );
    // The -Z listener (ssl_verify_mode=0) asks for none.
    assert!(served(server.port, certs.client_config(None)));
    let mut conn = tls::connect(server.port, certs.client_config(None)).unwrap();
    let stats = ask(&mut conn, "stats\r\n", "END\r\n");
    assert_eq!(stat(&stats, "ssl_handshake_errors"), "2");
}

#[test]
fn an_mtls_listener_without_a_ca_starts_and_trusts_no_client() {
    // memcached 1.6.45 starts with `-l mtls:HOST:PORT` and no `-o ssl_ca_cert`, and refuses a
    // client without a certificate there (`t/ssl_ports.t`, "failed to connect without peer
    // cert"); with no CA, OpenSSL trusts no certificate either.
    let certs = Certs::generate();
    let (port, mtls) = (free_port(), free_port());
    let o = format!(
        "ssl_chain_cert={},ssl_key={}",
        certs.path("server.pem"),
        certs.path("server.key")
    );
    let mut cmd = Command::new(tern_bin());
    cmd.arg("serve")
        .args(["-l", &format!("127.0.0.1,mtls:127.0.0.1:{mtls}")])
        .args(["-p", &port.to_string(), "-Z", "-o", &o]);
    let server = ServerProcess::spawn(cmd, port);
    assert!(served(server.port, certs.client_config(None)));
    assert!(!served(mtls, certs.client_config(None)), "no certificate");
    assert!(
        !served(mtls, certs.client_config(Some("client"))),
        "no CA to trust it"
    );
    // ssl_verify_mode=1 without a CA: a client showing no certificate is let in, one showing
    // a certificate is refused.
    let mut cmd = Command::new(tern_bin());
    let port = free_port();
    cmd.arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-Z"])
        .args(["-o", &format!("{o},ssl_verify_mode=1")]);
    let server = ServerProcess::spawn(cmd, port);
    assert!(served(server.port, certs.client_config(None)));
    assert!(!served(server.port, certs.client_config(Some("client"))));
}

#[test]
fn a_client_over_the_limit_gets_memcacheds_plain_text_refusal() {
    // memcached 1.6.45 with -Z at -c (maxconns_fast) writes `ERROR Too many open connections`
    // to the socket before any handshake and closes it (memcached.c, before ssl_accept): a
    // TLS client's handshake fails (Python: "WRONG_VERSION_NUMBER"), a plain reader sees the
    // line. Recorded live on 2026-11-26.
    let certs = Certs::generate();
    let server = tern_tls(&certs, "", &["-c", "2"]);
    let mut a = tls::connect(server.port, certs.client_config(None)).unwrap();
    // The test kit's start-up probe may still be counted for a moment.
    for _ in 0..1000 {
        let stats = ask(&mut a, "stats\r\n", "END\r\n");
        if stat(&stats, "curr_connections") == "1" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut b = tls::connect(server.port, certs.client_config(None)).unwrap();
    ask(&mut b, "version\r\n", "\r\n");
    assert!(!served(server.port, certs.client_config(None)), "over -c");
    let mut plain = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    plain
        .set_read_timeout(Some(tern_testkit::PATIENCE))
        .unwrap();
    let mut got = Vec::new();
    plain.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ERROR Too many open connections\r\n");
}

#[test]
fn verify_mode_2_refuses_a_client_without_a_certificate() {
    let certs = Certs::generate();
    let server = tern_tls(&certs, "ssl_verify_mode=2", &[]);
    assert!(!served(server.port, certs.client_config(None)));
    assert!(served(server.port, certs.client_config(Some("client"))));
    let server = tern_tls(&certs, "ssl_verify_mode=1", &[]);
    assert!(
        served(server.port, certs.client_config(None)),
        "1 only asks"
    );
    assert!(!served(server.port, certs.client_config(Some("rogue"))));
}

#[test]
fn refresh_certs_serves_a_certificate_swapped_on_disk() {
    let first = Certs::generate();
    let second = Certs::generate();
    let dir = Certs::generate();
    let copy = |from: &Certs| {
        for name in ["server.pem", "server.key"] {
            std::fs::copy(from.dir.join(name), dir.dir.join(name)).unwrap();
        }
    };
    copy(&first);
    let server = tern_tls(&dir, "", &[]);
    // `dir`'s CA signed neither certificate: each client trusts the CA of the one it expects.
    let mut old = tls::connect(server.port, first.client_config(None)).unwrap();
    assert!(tls::connect(server.port, second.client_config(None)).is_err());
    copy(&second);
    assert_eq!(ask(&mut old, "refresh_certs\r\n", "\r\n"), "OK\r\n");
    assert!(served(server.port, second.client_config(None)));
    assert!(tls::connect(server.port, first.client_config(None)).is_err());
    // The connection made before keeps its session.
    assert_eq!(
        ask(&mut old, "version\r\n", "\r\n").split(' ').next(),
        Some("VERSION")
    );
    // A file that does not load leaves the last certificate in place.
    std::fs::write(dir.dir.join("server.pem"), "garbage").unwrap();
    let reply = ask(&mut old, "refresh_certs\r\n", "\r\n");
    assert!(
        reply.starts_with(&format!(
            "Error loading the certificate chain: {} : ",
            dir.path("server.pem")
        )),
        "{reply}"
    );
    assert!(served(server.port, second.client_config(None)));
}

#[test]
fn refresh_certs_without_tls_is_memcacheds_error() {
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string()]);
    let server = ServerProcess::spawn(cmd, port);
    let mut conn = server.connect();
    assert_eq!(conn.line("refresh_certs\r\n"), "Error TLS not enabled\r\n");
}

#[test]
fn a_stalled_handshake_costs_its_slot_until_the_timeout() {
    let certs = Certs::generate();
    let server = tern_tls(&certs, "", &["--tls-handshake-timeout", "1"]);
    // Half a ClientHello, then nothing: the server hangs up on its own.
    let mut raw = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    raw.set_read_timeout(Some(tern_testkit::PATIENCE)).unwrap();
    raw.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    let mut sink = Vec::new();
    raw.read_to_end(&mut sink)
        .expect("closed by the server, not timed out here");
    // Others were served meanwhile and after.
    let mut conn = tls::connect(server.port, certs.client_config(None)).unwrap();
    let stats = ask(&mut conn, "stats\r\n", "END\r\n");
    assert_eq!(stat(&stats, "ssl_handshake_errors"), "1");
    assert_eq!(stat(&stats, "curr_connections"), "1");
}

/// The same requests over TLS to tern and to Debian's memcached `-Z` get the same replies.
#[test]
fn replies_over_tls_match_memcached_with_tls() {
    let certs = Certs::generate();
    let o = format!(
        "ssl_chain_cert={},ssl_key={}",
        certs.path("server.pem"),
        certs.path("server.key")
    );
    let memcached = ServerProcess::memcached(&["-Z", "-o", &o]);
    let tern = tern_tls(&certs, "", &[]);
    let script = "set a 0 0 1\r\n1\r\nget a b\r\nadd a 0 0 1\r\n2\r\nincr a 5\r\n\
                  decr a 100\r\nappend a 0 0 2\r\nxy\r\nget a\r\nmg a v f t\r\n\
                  ms c 2 T0\r\nhi\r\nmg c v\r\ndelete a\r\ndelete a\r\nbogus\r\n\
                  refresh_certs\r\nmn\r\n";
    let reply = |port| {
        let mut conn = tls::connect(port, certs.client_config(None)).unwrap();
        ask(&mut conn, script, "MN\r\n")
    };
    assert_eq!(reply(tern.port), reply(memcached.port));
}

#[test]
fn pymemcache_over_tls_and_mutual_tls() {
    let certs = Certs::generate();
    let mtls = free_port();
    let server = tern_tls(&certs, "", &["-l", &format!("mtls:127.0.0.1:{mtls}")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pymemcache_tls.py");
    let run = |port: u16, identity: &str| {
        let out = Command::new("python3")
            .arg(&script)
            .args([&port.to_string(), &certs.path("ca.pem")])
            .args(
                (!identity.is_empty())
                    .then(|| {
                        [
                            certs.path(&format!("{identity}.pem")),
                            certs.path(&format!("{identity}.key")),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .output()
            .expect("run python3");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = run(server.port, "");
    assert!(ok && text.contains("pymemcache over TLS: ok"), "{text}");
    let (ok, text) = run(mtls, "client");
    assert!(ok && text.contains("pymemcache over TLS: ok"), "{text}");
    let (ok, text) = run(mtls, "");
    assert!(!ok, "no client certificate, yet served: {text}");
    let (ok, text) = run(mtls, "rogue");
    assert!(!ok, "another CA's certificate, yet served: {text}");
}

#[test]
fn openssl_s_client_talks_to_tern() {
    let certs = Certs::generate();
    let server = tern_tls(&certs, "ssl_min_version=tlsv1.3", &[]);
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-CAfile"])
        .arg(certs.path("ca.pem"))
        .args(["-connect", &format!("127.0.0.1:{}", server.port)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl (apt-get install openssl; .ci/run does this)");
    // `quit` makes tern close, which ends s_client.
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"set s 0 0 2\r\nok\r\nget s\r\nquit\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "STORED\r\nVALUE s 0 2\r\nok\r\nEND\r\n"
    );
    // TLS 1.2 is refused under ssl_min_version=tlsv1.3.
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-connect",
            &format!("127.0.0.1:{}", server.port),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn tls_start_up_errors_are_refused() {
    let certs = Certs::generate();
    let refused = |args: &[&str], why: &str| {
        let out = Command::new(tern_bin())
            .arg("serve")
            .args(["-l", "127.0.0.1", "-p", &free_port().to_string()])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{args:?}: {err}"
        );
    };
    refused(&["-Z"], "ssl_chain_cert");
    refused(&["-l", "mtls:127.0.0.1:1"], "needs -Z");
    let missing = format!(
        "ssl_chain_cert={},ssl_key=/nonexistent",
        certs.path("server.pem")
    );
    refused(
        &["-Z", "-o", &missing],
        "Error loading the private key: /nonexistent",
    );
    let chain = format!("ssl_chain_cert={}", certs.path("server.pem"));
    refused(
        &["-Z", "-o", &format!("{chain},ssl_min_version=tlsv1.1")],
        "TLS 1.2 and 1.3",
    );
}
