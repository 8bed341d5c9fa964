//! A reply never needs to fit in memory: a 1 GiB reply (2,000 values of 500 KiB) asked for by
//! one text `get` line, by a binary getkq pipeline and by a batch of meta `mg`, read slowly,
//! raises the server's RSS by at most 64 MiB, and another client is answered meanwhile.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use tern_testkit::binary::{frame, Reply};
use tern_testkit::ServerProcess;

const KEYS: usize = 2_000;
const VALUE: usize = 500 * 1024;
/// The most the server's RSS may rise while a reply is streamed.
const RSS_BOUND_KIB: u64 = 64 * 1024;
/// RSS is sampled after every this many values read.
const SAMPLE_EVERY: usize = 50;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Key `i`'s value: one letter repeated, so a value out of place shows.
fn value(i: usize) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; VALUE]
}

fn load(server: &ServerProcess) {
    let mut conn = server.connect();
    let values: Vec<Vec<u8>> = (0..26).map(value).collect();
    for i in 0..KEYS {
        conn.send(format!("set k{i} 0 0 {VALUE}\r\n").as_bytes());
        conn.send(&values[i % 26]);
        conn.send(b"\r\n");
        assert_eq!(conn.read_until(b"\r\n"), b"STORED\r\n", "key {i}");
    }
}

/// What one phase checks while it reads a reply: RSS stays within the bound of `before`, and a
/// second client's get is answered while the reply is still being read.
struct Watch<'a> {
    server: &'a ServerProcess,
    before: u64,
    peak: u64,
}

impl Watch<'_> {
    fn new(server: &ServerProcess) -> Watch<'_> {
        let before = rss_kib(server.pid());
        Watch {
            server,
            before,
            peak: before,
        }
    }

    /// Called after value `i` of the reply was read.
    fn after_value(&mut self, i: usize, what: &str) {
        if i == 0 {
            // The request has arrived and its reply started: another client is served now.
            let mut other = self.server.connect();
            other.send(b"get k1\r\n");
            let mut want = format!("VALUE k1 0 {VALUE}\r\n").into_bytes();
            want.extend_from_slice(&value(1));
            want.extend_from_slice(b"\r\nEND\r\n");
            assert!(
                other.read_until(b"END\r\n") == want,
                "{what}: another client's get"
            );
        }
        if i % SAMPLE_EVERY == 0 || i == KEYS - 1 {
            self.peak = self.peak.max(rss_kib(self.server.pid()));
            let rise = self.peak - self.before;
            assert!(
                rise <= RSS_BOUND_KIB,
                "{what}: RSS rose by {rise} KiB by value {i} of a 1 GiB reply"
            );
        }
    }

    fn report(&self, what: &str) {
        eprintln!("{what}: RSS rise {} KiB", self.peak - self.before);
    }
}

fn read_value(reader: &mut impl Read, i: usize, what: &str) {
    let mut got = vec![0; VALUE + 2];
    reader.read_exact(&mut got).unwrap();
    assert!(got[..VALUE] == value(i)[..], "{what}: value {i}");
    assert_eq!(&got[VALUE..], b"\r\n", "{what}: value {i}");
}

#[test]
fn a_one_gib_reply_streams_in_every_protocol() {
    let server = ServerProcess::tern(&["-m", "1100", "-I", "1m", "-t", "2"]);
    load(&server);

    // Text: one `get` line naming every key.
    let what = "text get";
    let mut watch = Watch::new(&server);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut line = String::from("get");
    for i in 0..KEYS {
        line.push_str(&format!(" k{i}"));
    }
    line.push_str("\r\n");
    stream.write_all(line.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    for i in 0..KEYS {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        assert_eq!(header, format!("VALUE k{i} 0 {VALUE}\r\n"), "{what}");
        read_value(&mut reader, i, what);
        watch.after_value(i, what);
    }
    let mut end = [0; 5];
    reader.read_exact(&mut end).unwrap();
    assert_eq!(&end, b"END\r\n");
    watch.report(what);

    // Binary: a getkq for every key but the last, a getk for the last.
    let what = "binary getkq";
    let mut watch = Watch::new(&server);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut frames = Vec::new();
    for i in 0..KEYS {
        let opcode = if i == KEYS - 1 { 0x0c } else { 0x0d };
        frames.extend(frame(
            opcode,
            &[],
            format!("k{i}").as_bytes(),
            &[],
            i as u32,
        ));
    }
    stream.write_all(&frames).unwrap();
    for i in 0..KEYS {
        let reply = Reply::read(&mut stream).unwrap();
        assert_eq!((reply.status, reply.opaque), (0, i as u32), "{what}");
        assert_eq!(reply.key, format!("k{i}").as_bytes(), "{what}");
        assert!(reply.value == value(i), "{what}: value {i}");
        watch.after_value(i, what);
    }
    watch.report(what);

    // Meta: an `mg` for every key, then `mn`.
    let what = "meta mg";
    let mut watch = Watch::new(&server);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut batch = String::new();
    for i in 0..KEYS {
        batch.push_str(&format!("mg k{i} v\r\n"));
    }
    batch.push_str("mn\r\n");
    stream.write_all(batch.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    for i in 0..KEYS {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        assert_eq!(header, format!("VA {VALUE}\r\n"), "{what}");
        read_value(&mut reader, i, what);
        watch.after_value(i, what);
    }
    let mut end = [0; 4];
    reader.read_exact(&mut end).unwrap();
    assert_eq!(&end, b"MN\r\n");
    watch.report(what);
}

/// A get resumed between its keys answers what one built whole would: `gat`'s and `gets`'
/// fields on every value, a single `END`, and memcached's error (no values) for a too-long key
/// after enough values to back up the replies.
#[test]
fn a_streamed_get_answers_as_one_built_whole() {
    let server = ServerProcess::tern(&["-m", "64", "-I", "1m"]);
    let mut conn = server.connect();
    let big = 600 * 1024;
    for i in 0..4 {
        conn.send(format!("set s{i} {i} 0 {big}\r\n").as_bytes());
        conn.send(&vec![b'a' + i as u8; big]);
        conn.expect(b"\r\n", b"STORED\r\n");
    }
    let keys = "s0 s1 s2 s3";
    for (request, with_cas) in [
        (format!("gat 0 {keys}\r\n"), false),
        (format!("gets {keys}\r\n"), true),
    ] {
        conn.send(request.as_bytes());
        let mut reader = BufReader::new(conn.stream.try_clone().unwrap());
        for i in 0..4 {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let want = format!("VALUE s{i} {i} {big}");
            assert!(header.starts_with(&want), "{request}: {header}");
            assert_eq!(header.split(' ').count(), if with_cas { 5 } else { 4 });
            let mut data = vec![0; big + 2];
            reader.read_exact(&mut data).unwrap();
            assert!(
                data[..big].iter().all(|&b| b == b'a' + i as u8),
                "{request}"
            );
        }
        let mut end = String::new();
        reader.read_line(&mut end).unwrap();
        assert_eq!(end, "END\r\n", "{request}");
        assert!(reader.buffer().is_empty(), "{request}: nothing after END");
    }
    let too_long = "x".repeat(251);
    conn.expect(
        format!("get {keys} {too_long}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    );
    conn.expect(b"get s9\r\n", b"END\r\n");
}
