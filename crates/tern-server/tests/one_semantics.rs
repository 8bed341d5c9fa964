//! One request semantics for every wire format: the same logical operations sent as text
//! commands, as binary frames and as meta commands leave the same items behind, and count the
//! same in every counter they share.

use std::collections::BTreeMap;

use tern_testkit::binary::{frame, Reply};
use tern_testkit::{free_port, http_get, Conn, ServerProcess};

/// `-I` for these servers: `TOO_LARGE` bytes are refused.
const MAX_ITEM: &str = "1k";
const TOO_LARGE: usize = 2048;

/// The operations, in order. Each format expresses them in its own commands.
#[derive(Clone, Copy, Debug)]
enum Op {
    Set(&'static str, u32, &'static str),
    Get(&'static str),
    Add(&'static str, &'static str),
    Replace(&'static str, &'static str),
    Append(&'static str, &'static str),
    Prepend(&'static str, &'static str),
    Incr(&'static str, u64),
    Decr(&'static str, u64),
    Touch(&'static str, u32),
    Delete(&'static str),
    SetTooLarge(&'static str),
    Version,
    Noop,
}

const OPS: &[Op] = &[
    Op::Set("a", 5, "hello"),
    Op::Get("a"),
    Op::Get("missing"),
    Op::Add("a", "no"),
    Op::Add("n", "10"),
    Op::Replace("nothing", "no"),
    Op::Append("a", " world"),
    Op::Prepend("a", ">"),
    Op::Append("nothing", "no"),
    Op::Incr("n", 5),
    Op::Decr("n", 2),
    Op::Incr("nothing", 1),
    Op::Decr("a", 1),
    Op::Touch("a", 1000),
    Op::Touch("nothing", 1000),
    Op::Set("gone", 0, "x"),
    Op::Delete("gone"),
    Op::Delete("gone"),
    Op::Set("big", 0, "old"),
    Op::SetTooLarge("big"),
    Op::Get("big"),
    Op::Version,
    Op::Noop,
];

/// Keys whose items are compared afterwards.
const KEYS: &[&str] = &["a", "n", "nothing", "gone", "big", "missing"];

fn text(c: &mut Conn, op: Op) {
    let value_line = |verb: &str, key: &str, flags: u32, value: &str| {
        format!("{verb} {key} {flags} 0 {}\r\n{value}\r\n", value.len())
    };
    let (request, end): (String, &[u8]) = match op {
        Op::Set(k, f, v) => (value_line("set", k, f, v), b"\r\n"),
        Op::Get(k) => (format!("get {k}\r\n"), b"END\r\n"),
        Op::Add(k, v) => (value_line("add", k, 0, v), b"\r\n"),
        Op::Replace(k, v) => (value_line("replace", k, 0, v), b"\r\n"),
        Op::Append(k, v) => (value_line("append", k, 0, v), b"\r\n"),
        Op::Prepend(k, v) => (value_line("prepend", k, 0, v), b"\r\n"),
        Op::Incr(k, d) => (format!("incr {k} {d}\r\n"), b"\r\n"),
        Op::Decr(k, d) => (format!("decr {k} {d}\r\n"), b"\r\n"),
        Op::Touch(k, t) => (format!("touch {k} {t}\r\n"), b"\r\n"),
        Op::Delete(k) => (format!("delete {k}\r\n"), b"\r\n"),
        Op::SetTooLarge(k) => (value_line("set", k, 0, &"x".repeat(TOO_LARGE)), b"\r\n"),
        Op::Version => ("version\r\n".into(), b"\r\n"),
        // The classic text commands have no no-op: `version` changes nothing either.
        Op::Noop => ("version\r\n".into(), b"\r\n"),
    };
    c.request(request.as_bytes(), end);
}

fn meta(c: &mut Conn, op: Op) {
    let set = |key: &str, flags: u32, mode: &str, value: &str| {
        format!("ms {key} {} F{flags} M{mode}\r\n{value}\r\n", value.len())
    };
    let request = match op {
        Op::Set(k, f, v) => set(k, f, "S", v),
        Op::Get(k) => format!("mg {k} v\r\n"),
        Op::Add(k, v) => set(k, 0, "E", v),
        Op::Replace(k, v) => set(k, 0, "R", v),
        Op::Append(k, v) => set(k, 0, "A", v),
        Op::Prepend(k, v) => set(k, 0, "P", v),
        Op::Incr(k, d) => format!("ma {k} D{d}\r\n"),
        Op::Decr(k, d) => format!("ma {k} MD D{d}\r\n"),
        // Meta has no touch alone: a get that sets the TTL.
        Op::Touch(k, t) => format!("mg {k} T{t}\r\n"),
        Op::Delete(k) => format!("md {k}\r\n"),
        Op::SetTooLarge(k) => set(k, 0, "S", &"x".repeat(TOO_LARGE)),
        Op::Version => "version\r\n".into(),
        Op::Noop => "mn\r\n".into(),
    };
    // Every reply here is one line but a hit's `VA`, whose value line follows.
    let line = c.line(&request);
    if line.starts_with("VA ") {
        c.read_until(b"\r\n");
    }
}

const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const GET: u8 = 0x00;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const VERSION: u8 = 0x0b;
const NOOP: u8 = 0x0a;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const TOUCH: u8 = 0x1c;

fn binary(c: &mut Conn, op: Op) {
    let store = |opcode: u8, key: &str, flags: u32, value: &[u8]| {
        let extras = [flags.to_be_bytes(), 0u32.to_be_bytes()].concat();
        frame(opcode, &extras, key.as_bytes(), value, 0)
    };
    // An exptime of all ones: a miss is not created, as text incr/decr never create.
    let arith = |opcode: u8, key: &str, delta: u64| {
        let extras = [&delta.to_be_bytes()[..], &0u64.to_be_bytes(), &[0xff; 4]].concat();
        frame(opcode, &extras, key.as_bytes(), b"", 0)
    };
    let request = match op {
        Op::Set(k, f, v) => store(SET, k, f, v.as_bytes()),
        Op::Get(k) => frame(GET, &[], k.as_bytes(), b"", 0),
        Op::Add(k, v) => store(ADD, k, 0, v.as_bytes()),
        Op::Replace(k, v) => store(REPLACE, k, 0, v.as_bytes()),
        Op::Append(k, v) => frame(APPEND, &[], k.as_bytes(), v.as_bytes(), 0),
        Op::Prepend(k, v) => frame(PREPEND, &[], k.as_bytes(), v.as_bytes(), 0),
        Op::Incr(k, d) => arith(INCR, k, d),
        Op::Decr(k, d) => arith(DECR, k, d),
        Op::Touch(k, t) => frame(TOUCH, &t.to_be_bytes(), k.as_bytes(), b"", 0),
        Op::Delete(k) => frame(DELETE, &[], k.as_bytes(), b"", 0),
        Op::SetTooLarge(k) => store(SET, k, 0, &vec![b'x'; TOO_LARGE]),
        Op::Version => frame(VERSION, &[], b"", b"", 0),
        Op::Noop => frame(NOOP, &[], b"", b"", 0),
    };
    c.send(&request);
    Reply::read(&mut c.stream).expect("one response packet per request");
}

/// What the operations left behind and how they were counted.
#[derive(Debug, PartialEq)]
struct Result {
    /// Each key's `VALUE` line and data (no CAS), or nothing.
    items: Vec<String>,
    /// memcached's `stats` counters the operations move.
    stats: BTreeMap<String, String>,
    /// tern's `tern_commands_total` series, `command/status` -> count.
    commands: BTreeMap<String, String>,
}

fn run(client: fn(&mut Conn, Op)) -> Result {
    let admin = free_port();
    let server = ServerProcess::tern(&[
        "-I",
        MAX_ITEM,
        "-t",
        "1",
        "--admin-port",
        &admin.to_string(),
    ]);
    let mut c = server.connect();
    for &op in OPS {
        client(&mut c, op);
    }
    let (status, _, metrics) = http_get(("127.0.0.1", admin), "/metrics");
    assert_eq!(status, 200);
    let commands = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("tern_commands_total{command=\""))
        .map(|l| {
            let (labels, count) = l.rsplit_once(' ').unwrap();
            let key = labels.replace("\",status=\"", "/").replace("\"}", "");
            (key, count.to_string())
        })
        .collect();
    let mut inspect = server.connect();
    let all = inspect.stats("stats\r\n");
    let counters = [
        "cmd_get",
        "get_hits",
        "get_misses",
        "cmd_set",
        "cmd_touch",
        "touch_hits",
        "touch_misses",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "store_too_large",
        "curr_items",
        "total_items",
        "bytes",
    ];
    let stats = counters
        .iter()
        .map(|&name| (name.to_string(), all[name].clone()))
        .collect();
    let items = KEYS
        .iter()
        .map(|key| {
            let reply = inspect.request(format!("get {key}\r\n").as_bytes(), b"END\r\n");
            String::from_utf8(reply).unwrap()
        })
        .collect();
    Result {
        items,
        stats,
        commands,
    }
}

#[test]
fn text_binary_and_meta_share_one_semantics() {
    let text = run(text);
    let binary = run(binary);
    let meta = run(meta);

    // The effects themselves, read back over text.
    assert_eq!(
        text.items,
        [
            "VALUE a 5 12\r\n>hello world\r\nEND\r\n",
            "VALUE n 0 2\r\n13\r\nEND\r\n",
            "END\r\n",
            "END\r\n",
            "END\r\n",
            "END\r\n",
        ]
    );
    assert_eq!(binary.items, text.items, "binary frames");
    assert_eq!(meta.items, text.items, "meta commands");

    // Text and binary are the classic command set in two framings: every counter agrees,
    // the no-ops and version included.
    assert_eq!(binary.stats, text.stats);
    assert_eq!(binary.commands, text.commands);
    assert_eq!(binary.commands["admin/hit"], "2", "version and noop");
    assert_eq!(binary.commands["invalid/too_large"], "1");

    // Meta's commands are counted as themselves (mg, ms, ...), and in the memcached counters
    // they share with the classic ones. A meta touch is a get that sets the TTL, so it counts
    // as a get, not as a touch.
    let touches = [
        "cmd_touch",
        "touch_hits",
        "touch_misses",
        "cmd_get",
        "get_hits",
        "get_misses",
    ];
    let shared = |r: &Result| {
        let mut s = r.stats.clone();
        s.retain(|name, _| !touches.contains(&name.as_str()));
        s
    };
    assert_eq!(shared(&meta), shared(&text));
    let count = |r: &Result, name: &str| r.stats[name].parse::<u64>().unwrap();
    assert_eq!(count(&text, "cmd_touch"), 2);
    assert_eq!(count(&meta, "cmd_get"), count(&text, "cmd_get") + 2);
    assert_eq!(
        count(&meta, "get_hits") + count(&meta, "get_misses"),
        count(&text, "cmd_get") + 2
    );
    assert_eq!(meta.commands["ms/stored"], "6");
    assert_eq!(meta.commands["invalid/too_large"], "1");
}
