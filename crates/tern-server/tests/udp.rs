//! memcached's UDP transport (`-U`) against the real server: datagram framing compared with
//! Debian's memcached 1.6.18 request by request, a Python client reassembling large replies,
//! and UDP staying off unless asked for.

use std::io::Read;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tern_testkit::prometheus::{self, sample};
use tern_testkit::{binary, free_port, http_get, ServerProcess, PATIENCE};

/// A datagram as the test compares it: frame header fields, then the payload.
type Datagram = ((u16, u16, u16, u16), Vec<u8>);

struct Client {
    socket: UdpSocket,
    port: u16,
}

impl Client {
    fn new(port: u16) -> Client {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP client socket");
        Client { socket, port }
    }

    /// Sends `payload` under the given header; returns the datagrams that come back until the
    /// line is quiet. `expect` datagrams are waited for with the full patience; after that a
    /// short wait makes sure nothing else follows.
    fn exchange(&self, header: [u16; 4], payload: &[u8], expect: usize) -> Vec<Datagram> {
        let mut datagram: Vec<u8> = header.iter().flat_map(|h| h.to_be_bytes()).collect();
        datagram.extend_from_slice(payload);
        self.socket
            .send_to(&datagram, ("127.0.0.1", self.port))
            .expect("send");
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let wait = if got.len() < expect {
                PATIENCE
            } else {
                Duration::from_millis(200)
            };
            self.socket.set_read_timeout(Some(wait)).unwrap();
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let field = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
                    got.push(((field(0), field(2), field(4), field(6)), buf[8..n].to_vec()));
                }
                Err(_) if got.len() >= expect => return got,
                Err(e) => panic!("{e}: {} of {expect} datagrams for {payload:?}", got.len()),
            }
        }
    }
}

fn tcp_set(server: &ServerProcess, key: &str, value: &[u8]) {
    let mut c = server.connect();
    let mut request = format!("set {key} 3 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    c.expect(&request, b"STORED\r\n");
}

/// The exchanges compared: (header, payload, datagrams expected back).
fn script() -> Vec<([u16; 4], Vec<u8>, usize)> {
    vec![
        // A 5020-byte reply: four datagrams of at most 1400 bytes, numbered 0..3 of 4.
        ([7, 0, 1, 0], b"get big\r\n".to_vec(), 4),
        // A multi-get: one message per key, END with the last.
        ([8, 0, 1, 0], b"get a big a\r\n".to_vec(), 6),
        ([9, 0, 1, 0], b"gets a\r\n".to_vec(), 1),
        ([10, 0, 1, 0], b"gat 100 a missing\r\n".to_vec(), 2),
        // Two commands in one datagram: two messages.
        ([11, 0, 1, 0], b"set u 0 0 2\r\nhi\r\nget u\r\n".to_vec(), 2),
        ([12, 0, 1, 0], b"mg a v f\r\n".to_vec(), 1),
        ([13, 0, 1, 0], b"bogus\r\n".to_vec(), 1),
        // The sequence number of a request does not matter; a count other than 1 drops it.
        ([14, 3, 1, 0], b"get a\r\n".to_vec(), 1),
        ([15, 0, 2, 0], b"get a\r\n".to_vec(), 0),
        // Shorter than a header plus one byte: ignored.
        ([16, 0, 1, 0], Vec::new(), 0),
        // Binary frames: GetK of "a", then Noop; one message each.
        ([17, 0, 1, 0], binary_getk_noop(), 2),
    ]
}

fn binary_getk_noop() -> Vec<u8> {
    let mut frames = vec![0x80, 0x0c, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 77];
    frames.extend_from_slice(&[0; 8]);
    frames.push(b'a');
    frames.extend_from_slice(&[0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 78]);
    frames.extend_from_slice(&[0; 8]);
    frames
}

fn run(server: &ServerProcess, udp_port: u16) -> Vec<Vec<Datagram>> {
    tcp_set(server, "a", b"1");
    tcp_set(server, "big", &vec![b'x'; 5000]);
    let client = Client::new(udp_port);
    script()
        .into_iter()
        .map(|(header, payload, expect)| {
            let mut got = client.exchange(header, &payload, expect);
            for (_, payload) in &mut got {
                // CAS values differ between servers.
                if payload.starts_with(b"VALUE a 3 1 ") {
                    *payload = b"VALUE a 3 1 <cas>".to_vec();
                }
                // A binary reply's CAS: bytes 16..24 of its header.
                if payload.first() == Some(&0x81) && payload.len() >= 24 {
                    payload[16..24].fill(0);
                }
            }
            got
        })
        .collect()
}

#[test]
fn framing_matches_memcached_datagram_by_datagram() {
    let tern_udp = free_port();
    let tern = ServerProcess::tern(&["-U", &tern_udp.to_string(), "-t", "2"]);
    let memcached_udp = free_port();
    let memcached = ServerProcess::memcached(&["-U", &memcached_udp.to_string()]);
    let ours = run(&tern, tern_udp);
    let theirs = run(&memcached, memcached_udp);
    assert_eq!(ours.len(), theirs.len());
    for ((request, ours), theirs) in script().iter().zip(&ours).zip(&theirs) {
        assert_eq!(
            ours,
            theirs,
            "reply to {:?}",
            String::from_utf8_lossy(&request.1)
        );
    }
    // The 5025-byte reply really was split: 1400-byte datagrams (1392 of payload), then the
    // rest.
    let sizes: Vec<usize> = ours[0].iter().map(|(_, p)| p.len() + 8).collect();
    assert_eq!(sizes, [1400, 1400, 1400, 857]);
}

#[test]
fn a_request_cut_off_by_its_datagram_is_dropped() {
    // memcached 1.6.18 keeps waiting for the rest and takes the next datagram, from any
    // client, as the data (answering that one `CLIENT_ERROR bad data chunk`); tern drops the
    // cut request, so the next datagram is served on its own.
    let udp_port = free_port();
    let _server = ServerProcess::tern(&["-U", &udp_port.to_string()]);
    let client = Client::new(udp_port);
    assert!(client
        .exchange([1, 0, 1, 0], b"set cut 0 0 10\r\nabc", 0)
        .is_empty());
    assert!(client.exchange([2, 0, 1, 0], b"get cut", 0).is_empty());
    let reply = client.exchange([3, 0, 1, 0], b"get cut\r\n", 1);
    assert_eq!(reply, [((3, 0, 1, 0), b"END\r\n".to_vec())]);
}

#[test]
fn python_udp_client_reassembles_get_gets_and_gat() {
    let udp_port = free_port();
    let server = ServerProcess::tern(&["-U", &udp_port.to_string()]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/udp_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(server.port.to_string())
        .arg(udp_port.to_string())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "UDP client failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tern_bench_udp_gets_run_clean() {
    // tern bench --udp sends to the UDP port with the TCP port's number, as memcslap does:
    // listen on that number too (`-l addr:port` beside the test kit's own port).
    let port = free_port();
    let _server =
        ServerProcess::tern(&["-l", &format!("127.0.0.1:{port}"), "-U", &port.to_string()]);
    let out = Command::new(tern_testkit::tern_bin())
        .args([
            "bench",
            "-s",
            &format!("127.0.0.1:{port}"),
            "--udp",
            "-n",
            "2000",
        ])
        .output()
        .expect("run tern bench");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("(2000 replies)"), "{text}");
    assert!(text.contains("hit ratio    100.00%"), "{text}");
    assert!(text.contains("errors       0 ("), "{text}");
}

#[test]
fn udp_is_off_unless_asked_for() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    let settings = String::from_utf8(c.request(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(settings.contains("STAT udpport 0\r\n"), "{settings}");
    // Nothing answers UDP on the server's port: the kernel refuses the datagram, which a
    // connected socket sees as an error (or, at worst, as silence).
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(("127.0.0.1", server.port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    socket.send(b"\0\x01\0\0\0\x01\0\0get a\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert!(socket.recv(&mut buf).is_err(), "a UDP reply without -U");
}

/// A tern serving UDP (`-U`) and its admin endpoint: the server, the UDP port, the admin port.
fn with_udp_and_admin() -> (ServerProcess, u16, u16) {
    let udp_port = free_port();
    let admin = free_port();
    let server = ServerProcess::tern(&[
        "-U",
        &udp_port.to_string(),
        "--admin-port",
        &admin.to_string(),
    ]);
    (server, udp_port, admin)
}

/// The requests the parser refused, from the admin endpoint's per-command counts.
fn rejected_requests(admin: u16) -> u64 {
    let (status, _, body) = http_get(("127.0.0.1", admin), "/stats");
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    stats["commands"]["invalid"]["outcomes"]["error"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn rejected_lines_count_as_errors_as_over_tcp() {
    let (server, udp_port, admin) = with_udp_and_admin();
    let rejected = || rejected_requests(admin);
    let mut tcp = server.connect();
    tcp.expect(b"bogus\r\n", b"ERROR\r\n");
    tcp.expect(
        b"touch k x\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    assert_eq!(rejected(), 2);
    let udp = Client::new(udp_port);
    assert_eq!(
        udp.exchange([1, 0, 1, 0], b"bogus\r\n", 1),
        [((1, 0, 1, 0), b"ERROR\r\n".to_vec())]
    );
    assert_eq!(
        udp.exchange([2, 0, 1, 0], b"touch k x\r\n", 1),
        [(
            (2, 0, 1, 0),
            b"CLIENT_ERROR invalid exptime argument\r\n".to_vec()
        )]
    );
    assert_eq!(rejected(), 4, "UDP counts rejected lines as TCP does");
}

#[test]
fn udp_only_traffic_reaches_the_latency_histograms() {
    let (_server, udp_port, admin) = with_udp_and_admin();
    // No TCP request at all: a UDP turn must time its own batch.
    let udp = Client::new(udp_port);
    udp.exchange([1, 0, 1, 0], b"set k 0 0 1\r\nv\r\n", 1);
    udp.exchange([2, 0, 1, 0], b"get k\r\n", 1);
    udp.exchange([3, 0, 1, 0], b"get k missing\r\n", 2);
    let (status, _, body) = http_get(("127.0.0.1", admin), "/metrics");
    assert_eq!(status, 200);
    let m = prometheus::parse(&body);
    let count = |command: &str| {
        sample(
            &m,
            "tern_command_duration_seconds",
            "tern_command_duration_seconds_count",
            &[("command", command)],
        )
    };
    assert_eq!(count("set"), 1.0);
    assert_eq!(count("get"), 3.0, "one sample per key");
    let sum = sample(
        &m,
        "tern_command_duration_seconds",
        "tern_command_duration_seconds_sum",
        &[("command", "get")],
    );
    assert!(sum > 0.0);
}

#[test]
fn rejected_binary_frames_count_as_errors_over_tcp_and_udp() {
    let (server, udp_port, admin) = with_udp_and_admin();
    let rejected = || rejected_requests(admin);
    const UNKNOWN_COMMAND: u16 = 0x81;
    const INVALID_ARGUMENTS: u16 = 0x04;
    let unknown_opcode = binary::frame(0x42, &[], &[], &[], 7);
    // A Get carrying extras, which it must not.
    let get_with_extras = binary::frame(0x00, &[0; 4], b"k", &[], 8);
    let mut tcp = server.connect();
    tcp.send(&unknown_opcode);
    let reply = binary::Reply::read(&mut tcp.stream).unwrap();
    assert_eq!((reply.status, reply.opaque), (UNKNOWN_COMMAND, 7));
    tcp.send(&get_with_extras);
    let reply = binary::Reply::read(&mut tcp.stream).unwrap();
    assert_eq!((reply.status, reply.opaque), (INVALID_ARGUMENTS, 8));
    assert!(tcp.is_closed_by_server());
    assert_eq!(rejected(), 2);
    let udp = Client::new(udp_port);
    let status = |datagrams: Vec<Datagram>| {
        assert_eq!(datagrams.len(), 1);
        let payload = &datagrams[0].1;
        u16::from_be_bytes([payload[6], payload[7]])
    };
    assert_eq!(
        status(udp.exchange([1, 0, 1, 0], &unknown_opcode, 1)),
        UNKNOWN_COMMAND
    );
    assert_eq!(
        status(udp.exchange([2, 0, 1, 0], &get_with_extras, 1)),
        INVALID_ARGUMENTS
    );
    assert_eq!(rejected(), 4, "UDP counts rejected frames as TCP does");
    // memcached 1.6.18 moves none of its `stats` counters for these.
    let stats = server.connect().stats("stats\r\n");
    for name in ["cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "get_misses"] {
        assert_eq!(stats[name], "0", "stat {name}");
    }
}

#[test]
fn requests_refused_without_a_reply_count_as_errors() {
    let (server, udp_port, admin) = with_udp_and_admin();
    let rejected = || rejected_requests(admin);
    // A binary connection's next frame with a bad magic byte: closed, nothing sent.
    let mut tcp = server.connect();
    tcp.send(&binary::frame(0x0a, &[], &[], &[], 1));
    assert_eq!(binary::Reply::read(&mut tcp.stream).unwrap().opaque, 1);
    let mut bad_magic = binary::frame(0x0a, &[], &[], &[], 2);
    bad_magic[0] = 0x81;
    tcp.send(&bad_magic);
    let mut after = Vec::new();
    tcp.stream.read_to_end(&mut after).unwrap();
    assert!(after.is_empty(), "a reply to a bad magic byte: {after:?}");
    assert_eq!(rejected(), 1);
    // An ASCII line past the limit: closed.
    let mut tcp = server.connect();
    tcp.send(&[b'x'; 4096]);
    assert!(tcp.is_closed_by_server());
    assert_eq!(rejected(), 2);
    // A UDP request cut off by its datagram: dropped. The next datagram's reply (same client,
    // same worker socket, served in order) shows the cut one was handled.
    let udp = Client::new(udp_port);
    assert!(udp
        .exchange([1, 0, 1, 0], b"set cut 0 0 10\r\nabc", 0)
        .is_empty());
    udp.exchange([2, 0, 1, 0], b"get cut\r\n", 1);
    assert_eq!(rejected(), 3);
    let noop = binary::frame(0x0a, &[], &[], &[], 3);
    let cut_frame = [&noop[..], &noop[..10]].concat();
    assert_eq!(udp.exchange([3, 0, 1, 0], &cut_frame, 1).len(), 1);
    udp.exchange([4, 0, 1, 0], b"get cut\r\n", 1);
    assert_eq!(rejected(), 4, "a binary frame cut off counts too");
    // memcached 1.6.18 moves none of its `stats` counters for these: only the two probing
    // gets show.
    let stats = server.connect().stats("stats\r\n");
    for (name, want) in [
        ("cmd_get", "2"),
        ("get_misses", "2"),
        ("cmd_set", "0"),
        ("cmd_touch", "0"),
        ("cmd_flush", "0"),
    ] {
        assert_eq!(stats[name], want, "stat {name}");
    }
}
