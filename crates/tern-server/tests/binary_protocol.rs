//! The binary protocol against the real server: libmemcached's `memccapable -b`, `memcslap
//! --binary` and `memcaslap -B` (Debian's libmemcached-tools), and raw frames for what those
//! tools do not check (quiet batching, incr/decr creation, flush delay, Stat groups).

use std::process::Command;

use tern_testkit::binary::{frame, Reply};
use tern_testkit::{Conn, ServerProcess};

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const APPEND: u8 = 0x0e;
const GETKQ: u8 = 0x0d;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const INCRQ: u8 = 0x15;
const TOUCH: u8 = 0x1c;

/// `frame` with a request CAS: the change must apply only to the item's version `cas`.
fn with_cas(mut frame: Vec<u8>, cas: u64) -> Vec<u8> {
    frame[16..24].copy_from_slice(&cas.to_be_bytes());
    frame
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn incr_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes(),
        &exptime.to_be_bytes(),
    ]
    .concat()
}

fn read_reply(c: &mut Conn) -> Reply {
    let reply = Reply::read(&mut c.stream).expect("read a response packet");
    assert_eq!(reply.magic, 0x81, "response magic in {reply:?}");
    reply
}

fn tool_output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("run {program} ({e}): apt-get install libmemcached-tools (.ci/run does this)")
        });
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

#[test]
fn memccapable_suites_pass_as_against_memcached_1_6_45() {
    let server = ServerProcess::tern(&["-t", "2"]);
    let port = server.port.to_string();
    let binary = tool_output("memccapable", &["-h", "127.0.0.1", "-p", &port, "-b"]);
    assert!(binary.contains("All tests passed"), "{binary}");
    assert!(!binary.contains("[FAIL]"), "{binary}");
    // memccapable names 27 binary tests.
    assert_eq!(binary.matches("[pass]").count(), 27, "{binary}");
    // The whole suite: memccapable's two ascii delete tests send a hold time and expect it
    // refused, which memcached 1.6.40 and later (1.6.45, the release tern follows) ignore; both
    // fail against memcached 1.6.45 as against tern, and every other test passes.
    let out = Command::new("memccapable")
        .args(["-h", "127.0.0.1", "-p", &port])
        .output()
        .expect("run memccapable");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("2 of 54 tests failed"), "{stdout}{stderr}");
    assert_eq!(stdout.matches("[pass]").count(), 52, "{stdout}{stderr}");
    // A failure's `[FAIL]` goes to stderr, so on stdout the two deletes' names run on into the
    // next test's.
    let words = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("ascii delete ascii delete noreply ascii incr [pass]"),
        "{stdout}{stderr}"
    );
    assert_eq!(stderr.matches("[FAIL]").count(), 2, "{stdout}{stderr}");
}

#[test]
fn memcslap_and_memcaslap_binary_runs_are_clean() {
    let server = ServerProcess::tern(&["-t", "2"]);
    let servers = format!("127.0.0.1:{}", server.port);
    let slap = tool_output(
        "memcslap",
        &[
            &format!("--servers={servers}"),
            "--binary",
            "--concurrency=4",
            "--execute-number=500",
        ],
    );
    assert!(slap.contains("Time to set"), "{slap}");
    assert!(!slap.to_lowercase().contains("fail"), "{slap}");
    assert!(!slap.to_lowercase().contains("error"), "{slap}");
    let caslap = tool_output(
        "memcaslap",
        &[
            "-s",
            &servers,
            "-B",
            "-x",
            "20000",
            "-c",
            "8",
            "--verify=0.1",
        ],
    );
    // Every operation completed, gets found what was set, and verification saw no mismatch.
    assert!(caslap.contains("cmd_get: 18000"), "{caslap}");
    assert!(caslap.contains("cmd_set: 2000"), "{caslap}");
    assert!(caslap.contains("get_misses: 0"), "{caslap}");
    assert!(caslap.contains("verify_misses: 0"), "{caslap}");
    assert!(caslap.contains("verify_failed: 0"), "{caslap}");
    assert!(!caslap.to_lowercase().contains("error"), "{caslap}");
}

#[test]
fn quiet_commands_are_answered_only_when_they_have_news() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    // One write: quiet stores, a failing AddQ, a GetQ miss, a GetKQ hit, a creating IncrementQ,
    // then Noop ends the batch.
    let mut batch = frame(SETQ, &set_extras(7, 0), b"a", b"alpha", 1);
    batch.extend(frame(SETQ, &set_extras(0, 0), b"b", b"beta", 2));
    batch.extend(frame(ADDQ, &set_extras(0, 0), b"a", b"again", 3));
    batch.extend(frame(GETQ, &[], b"missing", b"", 4));
    batch.extend(frame(GETKQ, &[], b"a", b"", 5));
    batch.extend(frame(INCRQ, &incr_extras(1, 40, 0), b"n", b"", 6));
    batch.extend(frame(NOOP, &[], b"", b"", 7));
    c.send(&batch);
    let exists = read_reply(&mut c);
    assert_eq!((exists.opcode, exists.status, exists.opaque), (ADDQ, 2, 3));
    assert_eq!(exists.value, b"Data exists for key.");
    let hit = read_reply(&mut c);
    assert_eq!((hit.opcode, hit.status, hit.opaque), (GETKQ, 0, 5));
    assert_eq!(hit.extras, 7u32.to_be_bytes());
    assert_eq!(
        (hit.key.as_slice(), hit.value.as_slice()),
        (&b"a"[..], &b"alpha"[..])
    );
    let noop = read_reply(&mut c);
    assert_eq!((noop.opcode, noop.status, noop.opaque), (NOOP, 0, 7));
    // The quiet increment created the counter with its initial value, delta not applied.
    c.send(&frame(GET, &[], b"n", b"", 8));
    assert_eq!(read_reply(&mut c).value, b"40");
}

#[test]
fn increment_creates_unless_told_not_to() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.send(&frame(
        INCR,
        &incr_extras(5, 10, 0xffff_ffff),
        b"ctr",
        b"",
        1,
    ));
    let miss = read_reply(&mut c);
    assert_eq!(
        (miss.status, miss.opaque),
        (1, 1),
        "no-create expiration: Key not found"
    );
    c.send(&frame(INCR, &incr_extras(5, 10, 0), b"ctr", b"", 2));
    assert_eq!(read_reply(&mut c).value, 10u64.to_be_bytes());
    c.send(&frame(INCR, &incr_extras(5, 10, 0), b"ctr", b"", 3));
    assert_eq!(read_reply(&mut c).value, 15u64.to_be_bytes());
    c.send(&frame(SET, &set_extras(0, 0), b"text", b"abc", 4));
    read_reply(&mut c);
    c.send(&frame(INCR, &incr_extras(1, 0, 0), b"text", b"", 5));
    assert_eq!(read_reply(&mut c).status, 6, "Non-numeric");
}

#[test]
fn a_stale_request_cas_is_refused_on_delete_arithmetic_and_append() {
    const KEY_EXISTS: u16 = 2;
    let server = ServerProcess::tern(&[]);
    let (mut a, mut b) = (server.connect(), server.connect());
    a.send(&frame(SET, &set_extras(0, 0), b"n", b"5", 1));
    let seen = read_reply(&mut a).cas;
    // Another connection writes after `a` learned the CAS: every change `a` conditions on it
    // is refused and leaves the other connection's value in place.
    b.send(&frame(INCR, &incr_extras(1, 0, 0), b"n", b"", 2));
    let other = read_reply(&mut b);
    assert_eq!(other.value, 6u64.to_be_bytes());
    for request in [
        frame(DELETE, &[], b"n", b"", 3),
        frame(INCR, &incr_extras(1, 0, 0), b"n", b"", 4),
        frame(APPEND, &[], b"n", b"0", 5),
    ] {
        a.send(&with_cas(request, seen));
        assert_eq!(read_reply(&mut a).status, KEY_EXISTS);
    }
    a.send(&frame(GET, &[], b"n", b"", 6));
    let got = read_reply(&mut a);
    assert_eq!((got.value.as_slice(), got.cas), (&b"6"[..], other.cas));
    // The incr reply's CAS names the version it wrote: conditioned changes on it go through.
    a.send(&with_cas(
        frame(INCR, &incr_extras(1, 0, 0), b"n", b"", 7),
        other.cas,
    ));
    let counted = read_reply(&mut a);
    assert_eq!(
        (counted.status, counted.value),
        (0, 7u64.to_be_bytes().to_vec())
    );
    a.send(&with_cas(frame(DELETE, &[], b"n", b"", 8), counted.cas));
    assert_eq!(read_reply(&mut a).status, 0);
}

#[test]
fn delayed_flush_keeps_items_until_then_and_touch_returns_flags() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.send(&frame(SET, &set_extras(3, 0), b"k", b"v", 1));
    read_reply(&mut c);
    // A flush a day from now leaves the item readable today.
    c.send(&frame(FLUSH, &86_400u32.to_be_bytes(), b"", b"", 2));
    assert_eq!(read_reply(&mut c).status, 0);
    c.send(&frame(TOUCH, &100u32.to_be_bytes(), b"k", b"", 3));
    let touched = read_reply(&mut c);
    assert_eq!(
        (touched.status, touched.extras),
        (0, 3u32.to_be_bytes().to_vec())
    );
    assert!(touched.value.is_empty());
    c.send(&frame(FLUSH, &[], b"", b"", 4));
    read_reply(&mut c);
    c.send(&frame(GET, &[], b"k", b"", 5));
    assert_eq!(read_reply(&mut c).status, 1);
}

#[test]
fn stat_streams_one_packet_per_statistic_then_an_empty_one() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    for group in [&b""[..], b"settings"] {
        c.send(&frame(STAT, &[], group, b"", 9));
        let mut names = Vec::new();
        loop {
            let r = read_reply(&mut c);
            assert_eq!((r.opcode, r.status, r.opaque), (STAT, 0, 9));
            if r.key.is_empty() {
                break;
            }
            names.push(String::from_utf8(r.key).unwrap());
        }
        let want = if group.is_empty() {
            "cmd_get"
        } else {
            "item_size_max"
        };
        assert!(names.iter().any(|n| n == want), "{names:?}");
    }
    c.send(&frame(STAT, &[], b"nonsense", b"", 10));
    assert_eq!(read_reply(&mut c).status, 1);
}

#[test]
fn protocol_is_chosen_per_connection_by_the_first_byte() {
    let server = ServerProcess::tern(&[]);
    let mut binary = server.connect();
    let mut text = server.connect();
    binary.send(&frame(SET, &set_extras(0, 0), b"shared", b"both", 1));
    read_reply(&mut binary);
    text.expect(b"get shared\r\n", b"VALUE shared 0 4\r\nboth\r\nEND\r\n");
    // A text connection stays text: a 0x80 byte later is just a bad command line, too short for
    // a command (memcached 1.6.45's reply; 1.6.18 said ERROR).
    text.expect(b"\x80\r\n", b"CLIENT_ERROR bad command line format\r\n");
    let settings = String::from_utf8(text.request(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(
        settings.contains("STAT binding_protocol auto-negotiate\r\n"),
        "{settings}"
    );
}

#[test]
fn large_values_arrive_whole_and_too_large_ones_are_skipped() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    c.send(&frame(SET, &set_extras(1, 0), b"big", &big, 1));
    assert_eq!(read_reply(&mut c).status, 0);
    c.send(&frame(GET, &[], b"big", b"", 2));
    let got = read_reply(&mut c);
    assert_eq!((got.status, got.value.len()), (0, big.len()));
    assert!(got.value == big, "the value came back changed");
    // Over the 1 MiB item limit: Too large, the old value removed, and the frame's bytes
    // (sent in pieces) skipped so the next request is read correctly.
    let huge = frame(
        SET,
        &set_extras(0, 0),
        b"big",
        &vec![b'h'; (1 << 20) + 1],
        3,
    );
    for piece in huge.chunks(300_000) {
        c.send(piece);
    }
    let refused = read_reply(&mut c);
    assert_eq!((refused.status, refused.opaque), (3, 3));
    c.send(&frame(GET, &[], b"big", b"", 4));
    let after = read_reply(&mut c);
    assert_eq!((after.status, after.opaque), (1, 4));
}

/// A binary Stat: each statistic's (name, value), or the error status.
fn binary_stats(c: &mut Conn, group: &[u8]) -> Result<Vec<(String, String)>, u16> {
    c.send(&frame(STAT, &[], group, b"", 7));
    let mut stats = Vec::new();
    loop {
        let r = read_reply(c);
        if r.status != 0 {
            return Err(r.status);
        }
        if r.key.is_empty() {
            return Ok(stats);
        }
        stats.push((
            String::from_utf8(r.key).unwrap(),
            String::from_utf8(r.value).unwrap(),
        ));
    }
}

#[test]
fn stat_groups_answer_as_memcached_does() {
    let tern = ServerProcess::tern(&[]);
    let memcached = ServerProcess::memcached(&[]);
    let (mut t, mut m) = (tern.connect(), memcached.connect());
    for c in [&mut t, &mut m] {
        c.send(&frame(SET, &set_extras(0, 0), b"user:1", b"v", 1));
        read_reply(c);
    }
    // `detail on` and `off` answer with the end packet alone; `dump` is one `detailed` stat
    // holding the text protocol's dump; an unknown `detail` word is Key not found.
    for group in [&b"detail on"[..], b"detail off", b"detail bogus", b"bogus"] {
        assert_eq!(
            binary_stats(&mut t, group),
            binary_stats(&mut m, group),
            "{}",
            String::from_utf8_lossy(group)
        );
    }
    binary_stats(&mut t, b"detail on").unwrap();
    binary_stats(&mut m, b"detail on").unwrap();
    for c in [&mut t, &mut m] {
        c.send(&frame(GET, &[], b"user:1", b"", 2));
        read_reply(c);
    }
    let dump = binary_stats(&mut t, b"detail dump").unwrap();
    assert_eq!(dump, binary_stats(&mut m, b"detail dump").unwrap());
    assert_eq!(dump[0].0, "detailed");
    assert!(
        dump[0].1.contains("PREFIX user get 1 hit 1 set 0 del 0"),
        "{dump:?}"
    );
    // `settings` and `items`: the same statistics as over text, under memcached's names
    // (aside from tern's own settings and those newer than the peer: tern has no slab or LRU
    // settings to show).
    let not_in_1_6_18 = [
        "lock_memory",
        "large_memory_pages",
        "admin_port",
        "hotkey_sample_rate",
        "hotkey_window",
        "eviction",
        "worker_cpus",
        "numa_node",
        "io_engine",
        "tls_handshake_timeout",
        // memcached 1.6.45's, which Debian's 1.6.18 (the peer here) does not print yet.
        "client_flags_size",
    ];
    for group in [&b"settings"[..], b"items"] {
        let ours = binary_stats(&mut t, group).unwrap();
        let theirs: Vec<String> = binary_stats(&mut m, group)
            .unwrap()
            .into_iter()
            .map(|s| s.0)
            .collect();
        for (name, _) in &ours {
            assert!(
                theirs.contains(name) || not_in_1_6_18.contains(&name.as_str()),
                "{name} is not memcached's"
            );
        }
        let text = tern
            .connect()
            .stats(&format!("stats {}\r\n", String::from_utf8_lossy(group)));
        assert_eq!(ours.len(), text.len());
        assert!(ours.iter().all(|(name, _)| text.contains_key(name)));
    }
}
