//! Every ASCII command and its error paths, against the real binary over TCP. Replies are checked
//! byte for byte against what memcached 1.6 answers.

use std::collections::HashMap;

use tern_testkit::{Conn, ServerProcess};

#[test]
fn storage_and_retrieval() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(b"set a 5 0 3\r\nabc\r\n", b"STORED\r\n");
    c.expect(b"get a\r\n", b"VALUE a 5 3\r\nabc\r\nEND\r\n");
    c.expect(b"get nope\r\n", b"END\r\n");
    c.expect(b"set b 4294967295 0 0\r\n\r\n", b"STORED\r\n");
    c.expect(
        b"get a nope b a\r\n",
        b"VALUE a 5 3\r\nabc\r\nVALUE b 4294967295 0\r\n\r\nVALUE a 5 3\r\nabc\r\nEND\r\n",
    );
    c.expect(b"add a 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"add c 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b"replace nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"replace c 7 0 1\r\ny\r\n", b"STORED\r\n");
    c.expect(b"append c 0 0 2\r\nzz\r\n", b"STORED\r\n");
    c.expect(b"prepend c 0 0 2\r\naa\r\n", b"STORED\r\n");
    c.expect(b"get c\r\n", b"VALUE c 7 5\r\naayzz\r\nEND\r\n");
    c.expect(b"append nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(b"prepend nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    // Lines may end in a bare \n; runs of spaces separate tokens.
    c.expect(
        b"set  d  1  0  2\nhi\r\nget d\n",
        b"STORED\r\nVALUE d 1 2\r\nhi\r\nEND\r\n",
    );
}

#[test]
fn cas_commands() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(b"cas k 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n");
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    let reply = String::from_utf8(c.request(b"gets k\r\n", b"END\r\n")).unwrap();
    let unique: u64 = reply
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    c.expect(
        format!("cas k 0 0 1 {}\r\ny\r\n", unique + 1000).as_bytes(),
        b"EXISTS\r\n",
    );
    c.expect(
        format!("cas k 3 0 1 {unique}\r\nz\r\n").as_bytes(),
        b"STORED\r\n",
    );
    c.expect(
        format!("cas k 3 0 1 {unique}\r\nw\r\n").as_bytes(),
        b"EXISTS\r\n",
    );
    c.expect(b"get k\r\n", b"VALUE k 3 1\r\nz\r\nEND\r\n");
    // memcached 1.6.45's transcript: a cas line refused once its length is read swallows its
    // data block (1.6.18 answered `ERROR` to a short line and read the data as a command,
    // which desynchronised t/cas.t); a line too short to hold a length is a bad format alone.
    let format = b"CLIENT_ERROR bad command line format\r\n";
    c.expect(b"cas k 0 0 1 x\r\nz\r\n", format);
    c.expect(b"cas k 0 0 1\r\nz\r\n", format);
    c.expect(
        b"cas k 0 0 1 noreply\r\nz\r\nget k\r\n",
        b"VALUE k 3 1\r\nz\r\nEND\r\n",
    );
    c.expect(b"cas\r\n", format);
    c.expect(b"cas k 0 0\r\n", format);
    let s = c.stats("stats\r\n");
    assert_eq!(
        (
            &s["cas_misses"][..],
            &s["cas_hits"][..],
            &s["cas_badval"][..]
        ),
        ("1", "1", "2")
    );
}

#[test]
fn cas_disabled_with_dash_c() {
    let server = ServerProcess::tern(&["-C"]);
    let mut c = server.connect();
    c.expect(
        b"set k 0 0 1\r\nx\r\ngets k\r\n",
        b"STORED\r\nVALUE k 0 1 0\r\nx\r\nEND\r\n",
    );
}

#[test]
fn arithmetic() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(b"incr n 1\r\n", b"NOT_FOUND\r\n");
    c.expect(b"set n 0 0 3\r\n100\r\nincr n 5\r\n", b"STORED\r\n105\r\n");
    c.expect(
        b"decr n 6\r\nget n\r\n",
        b"99\r\nVALUE n 0 3\r\n99 \r\nEND\r\n",
    );
    c.expect(b"decr n 1000\r\n", b"0\r\n");
    c.expect(
        b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\n",
        b"STORED\r\n1\r\n",
    );
    c.expect(b"set n 0 0 3\r\n 12\r\nincr n 1\r\n", b"STORED\r\n13\r\n");
    c.expect(
        b"set s 0 0 3\r\nabc\r\nincr s 1\r\n",
        b"STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.expect(
        b"incr n x\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.expect(
        b"incr n -1\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.expect(
        b"incr n 18446744073709551616\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    // 1.6.45: too few tokens is a bad format (1.6.18: `ERROR`); tokens after the delta are
    // ignored.
    c.expect(b"incr n\r\n", b"CLIENT_ERROR bad command line format\r\n");
    c.expect(
        b"incr n 1 noreply\r\ndecr n 1 noreply\r\nget n\r\n",
        b"VALUE n 0 3\r\n13 \r\nEND\r\n",
    );
}

#[test]
fn delete_and_touch() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k\r\ndelete k\r\n",
        b"STORED\r\nDELETED\r\nNOT_FOUND\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k 0\r\n",
        b"STORED\r\nDELETED\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k noreply\r\nget k\r\n",
        b"STORED\r\nEND\r\n",
    );
    // memcached 1.6.45's transcript: since 1.6.40 everything after the key but a final
    // `noreply` is ignored (1.6.18 answered `CLIENT_ERROR bad command line format.  Usage:
    // delete <key> [noreply]` and kept the key); memcached's own proxy sends `noreplY`.
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k noreplY\r\nget k\r\n",
        b"STORED\r\nDELETED\r\nEND\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k 1\r\n",
        b"STORED\r\nDELETED\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k x y noreply\r\nget k\r\n",
        b"STORED\r\nEND\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\ndelete k 0 noreply\r\nget k\r\n",
        b"STORED\r\nEND\r\n",
    );
    c.expect(b"delete k noreply x\r\n", b"NOT_FOUND\r\n");
    c.expect(b"delete\r\n", b"CLIENT_ERROR bad command line format\r\n");
    c.expect(b"touch k 10\r\n", b"NOT_FOUND\r\n");
    c.expect(
        b"set k 0 0 1\r\nx\r\ntouch k 10\r\n",
        b"STORED\r\nTOUCHED\r\n",
    );
    c.expect(
        b"touch k x\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.expect(b"touch k\r\n", b"CLIENT_ERROR bad command line format\r\n");
    // A negative exptime expires the item at once.
    c.expect(b"touch k -1\r\nget k\r\n", b"TOUCHED\r\nEND\r\n");
    c.expect(b"set k 0 -1 1\r\nx\r\nget k\r\n", b"STORED\r\nEND\r\n");
    // An absolute time in the past (beyond 30 days means absolute) is expired too.
    c.expect(b"set k 0 2592001 1\r\nx\r\nget k\r\n", b"STORED\r\nEND\r\n");
    c.expect(
        b"set k 0 2592000 1\r\nx\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n",
    );
}

#[test]
fn get_and_touch() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(
        b"set k 3 0 1\r\nx\r\ngat 100 k nope\r\n",
        b"STORED\r\nVALUE k 3 1\r\nx\r\nEND\r\n",
    );
    let reply = String::from_utf8(c.request(b"gats 100 k\r\n", b"END\r\n")).unwrap();
    assert!(reply.starts_with("VALUE k 3 1 "), "{reply}");
    c.expect(
        b"gat -1 k\r\nget k\r\n",
        b"VALUE k 3 1\r\nx\r\nEND\r\nEND\r\n",
    );
    c.expect(b"gat x k\r\n", b"CLIENT_ERROR invalid exptime argument\r\n");
    // 1.6.45: a gat without a key is a bad format (1.6.18: `gat 10` was a bare `END`).
    c.expect(b"gat 10\r\n", b"CLIENT_ERROR bad command line format\r\n");
    c.expect(b"gat\r\n", b"CLIENT_ERROR bad command line format\r\n");
    let s = c.stats("stats\r\n");
    assert_eq!((&s["touch_hits"][..], &s["touch_misses"][..]), ("3", "1"));
}

#[test]
fn flush_all_now_later_and_disabled() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(
        b"set k 0 0 1\r\nx\r\nflush_all\r\nget k\r\n",
        b"STORED\r\nOK\r\nEND\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\nflush_all noreply\r\nget k\r\n",
        b"STORED\r\nEND\r\n",
    );
    c.expect(
        b"set k 0 0 1\r\nx\r\nflush_all 100\r\nget k\r\n",
        b"STORED\r\nOK\r\nVALUE k 0 1\r\nx\r\nEND\r\n",
    );
    c.expect(b"flush_all 0\r\nflush_all -1\r\n", b"OK\r\nOK\r\n");
    c.expect(
        b"flush_all x\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    // 1.6.45 ignores the words after the delay (1.6.18: `ERROR`).
    c.expect(b"flush_all 0 2 3\r\n", b"OK\r\n");
    let disabled = ServerProcess::tern(&["-F"]);
    let mut d = disabled.connect();
    d.expect(b"flush_all\r\n", b"CLIENT_ERROR flush_all not allowed\r\n");
    let s = d.stats("stats\r\n");
    assert_eq!(s["cmd_flush"], "1");
}

#[test]
fn bad_command_lines() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    for bad in ["bogus", "GET a"] {
        c.expect(format!("{bad}\r\n").as_bytes(), b"ERROR\r\n");
    }
    let format = b"CLIENT_ERROR bad command line format\r\n";
    // memcached 1.6.45 (1.6.18 said ERROR): a line of under 4 bytes, its ending included.
    for short in ["x", ""] {
        c.expect(format!("{short}\r\n").as_bytes(), format);
    }
    // memcached 1.6.45's transcript: a command with too few tokens is a bad format (1.6.18:
    // `ERROR`), tokens past those it reads are ignored.
    for short in [
        "get",
        "gets",
        "set k 0 0",
        "add",
        "replace k",
        "append k 0",
        "prepend",
    ] {
        c.expect(format!("{short}\r\n").as_bytes(), format);
    }
    c.expect(b"set extra 0 0 1 2 3\r\nx\r\n", b"STORED\r\n");
    // Without a valid length the data line is read as a command, as in memcached.
    c.expect(b"set k 0 0 -1\r\n", format);
    c.expect(b"set k 0 0 1x\r\n", format);
    // 1.6.45: once the length is read, a refused line's data block is swallowed (1.6.18 read
    // it as a command).
    c.expect(b"set k x 0 1\r\nx\r\n", format);
    c.expect(b"set k -1 0 1\r\nx\r\n", format);
    c.expect(b"set k 0 x 1\r\nx\r\n", format);
    c.expect(b"set k 0 2147483648 1\r\nx\r\n", format);
    let long_key = "k".repeat(251);
    c.expect(format!("set {long_key} 0 0 1\r\nx\r\n").as_bytes(), format);
    c.expect(format!("get {long_key}\r\n").as_bytes(), format);
    c.expect(format!("get a {long_key} b\r\n").as_bytes(), format);
    c.expect(format!("incr {long_key} 1\r\n").as_bytes(), format);
    c.expect(format!("delete {long_key}\r\n").as_bytes(), format);
    c.expect(format!("touch {long_key} 1\r\n").as_bytes(), format);
    let max_key = "k".repeat(250);
    c.expect(
        format!("set {max_key} 0 0 1\r\nx\r\nget {max_key}\r\n").as_bytes(),
        format!("STORED\r\nVALUE {max_key} 0 1\r\nx\r\nEND\r\n").as_bytes(),
    );
    // noreply silences the errors of the command that asked for it.
    c.expect(
        b"set k x 0 1 noreply\r\nx\r\nversion\r\n",
        b"VERSION 1.6.45-tern-0.1.0\r\n",
    );
    // A data block that does not end in \r\n; what follows is read as a line, here one of
    // under 4 bytes, which memcached 1.6.45 answers with a bad format (1.6.18: ERROR).
    c.expect(
        b"set k 0 0 1\r\nxy\r\n",
        b"CLIENT_ERROR bad data chunk\r\nCLIENT_ERROR bad command line format\r\n",
    );
    c.expect(b"set k 0 0 2 noreply\r\nxyz\r\n", format);
    // Control characters are part of a key, as in memcached's text protocol.
    c.expect(
        b"set a\x01\tb 0 0 1\r\nx\r\nget a\x01\tb\r\n",
        b"STORED\r\nVALUE a\x01\tb 0 1\r\nx\r\nEND\r\n",
    );
    // A NUL ends the line, as memcached reads it as a C string.
    c.expect(b"get k\x00junk\r\n", b"END\r\n");
}

#[test]
fn overlong_line_closes_the_connection() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.send(&[b'x'; 4096]);
    assert!(c.is_closed_by_server());
    // A long multi-get line is fine.
    let mut c = server.connect();
    let keys: String = (0..2000).map(|i| format!(" key{i}")).collect();
    c.expect(
        format!("set key1999 0 0 1\r\nx\r\nget{keys}\r\n").as_bytes(),
        b"STORED\r\nVALUE key1999 0 1\r\nx\r\nEND\r\n",
    );
}

#[test]
fn value_sizes_around_the_item_limit() {
    let server = ServerProcess::tern(&["-I", "2k"]);
    let mut c = server.connect();
    for size in [0usize, 1, 2048] {
        let value = vec![b'v'; size];
        let mut req = format!("set k{size} 0 0 {size}\r\n").into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.expect(&req, b"STORED\r\n");
        let mut want = format!("VALUE k{size} 0 {size}\r\n").into_bytes();
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\nEND\r\n");
        c.expect(format!("get k{size}\r\n").as_bytes(), &want);
    }
    // One byte over: refused, the data skipped, the old value removed (memcached does the same).
    let mut req = b"set k2048 0 0 2049\r\n".to_vec();
    req.extend_from_slice(&[b'v'; 2049]);
    req.extend_from_slice(b"\r\nget k2048\r\n");
    c.expect(&req, b"SERVER_ERROR object too large for cache\r\nEND\r\n");
    // Appending past the limit is refused too.
    let mut req = b"append k1 0 0 2048\r\n".to_vec();
    req.extend_from_slice(&[b'v'; 2048]);
    req.extend_from_slice(b"\r\n");
    c.expect(&req, b"SERVER_ERROR object too large for cache\r\n");
    let s = c.stats("stats settings\r\n");
    assert_eq!(s["item_size_max"], "2048");
}

#[test]
fn large_values_at_the_default_limit() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    let size = 1 << 20;
    let value: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set big 0 0 {size}\r\n").into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    c.expect(&req, b"STORED\r\n");
    let mut want = format!("VALUE big 0 {size}\r\n").into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    c.expect(b"get big\r\n", &want);
    c.expect(
        format!("set big 0 0 {}\r\n", size + 1).as_bytes(),
        b"SERVER_ERROR object too large for cache\r\n",
    );
    c.send(&vec![b'x'; size + 1]);
    c.expect(b"\r\nget big\r\n", b"END\r\n");
}

#[test]
fn out_of_memory_with_evictions_off() {
    let server = ServerProcess::tern(&["-M", "-m", "2", "-I", "512k"]);
    let mut c = server.connect();
    let value = vec![b'v'; 100 * 1024];
    let mut saw_oom = false;
    for i in 0..64 {
        let mut req = format!("set k{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.send(&req);
        let line = c.line("");
        match line.as_str() {
            "STORED\r\n" => {}
            "SERVER_ERROR out of memory storing object\r\n" => saw_oom = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_oom, "2 MB never filled up");
    let s = c.stats("stats\r\n");
    assert_eq!(s["evictions"], "0");
}

#[test]
fn version_verbosity_quit() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    c.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
    c.expect(b"verbosity 1\r\nverbosity 1 noreply\r\n", b"OK\r\n");
    c.expect(
        b"verbosity x\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    // 1.6.45: a missing level is a bad format (1.6.18: `ERROR`); words after it are ignored.
    c.expect(
        b"verbosity\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    c.expect(b"verbosity 1 2 3\r\n", b"OK\r\n");
    c.expect(b"set k 0 0 1\r\nx\r\nquit\r\nget k\r\n", b"STORED\r\n");
    assert!(c.is_closed_by_server());
}

#[test]
fn shutdown_only_when_enabled() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    // memcached 1.6.45's reply (1.6.18: `ERROR: shutdown not enabled`); `noreply` silences it.
    c.expect(b"shutdown\r\n", b"SERVER_ERROR: shutdown not enabled\r\n");
    c.expect(
        b"shutdown graceful\r\n",
        b"SERVER_ERROR: shutdown not enabled\r\n",
    );
    c.expect(
        b"shutdown noreply\r\nversion\r\n",
        tern_server::VERSION_REPLY.as_bytes(),
    );
    let mut enabled = ServerProcess::tern(&["-A"]);
    let mut c = enabled.connect();
    c.expect(
        b"shutdown bogus\r\n",
        b"CLIENT_ERROR invalid shutdown mode\r\n",
    );
    c.send(b"shutdown\r\n");
    assert!(c.is_closed_by_server());
    assert!(enabled.wait_exit().success());
}

#[test]
fn stats_count_what_happened() {
    let server = ServerProcess::tern(&["-t", "2"]);
    let mut c = server.connect();
    c.expect(
        b"set a 0 0 1\r\n1\r\nget a b\r\n",
        b"STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n",
    );
    c.expect(
        b"delete a\r\ndelete a\r\nincr a 1\r\ndecr a 1\r\ntouch a 1\r\n",
        b"DELETED\r\nNOT_FOUND\r\nNOT_FOUND\r\nNOT_FOUND\r\nNOT_FOUND\r\n",
    );
    c.expect(
        b"set n 0 0 1\r\n1\r\nincr n 1\r\ndecr n 1\r\n",
        b"STORED\r\n2\r\n1\r\n",
    );
    let s = wait_for_connections(&mut c, "1", 2);
    let want = [
        ("cmd_get", "2"),
        ("get_hits", "1"),
        ("get_misses", "1"),
        ("cmd_set", "2"),
        ("delete_hits", "1"),
        ("delete_misses", "1"),
        ("incr_misses", "1"),
        ("decr_misses", "1"),
        ("incr_hits", "1"),
        ("decr_hits", "1"),
        ("touch_misses", "1"),
        ("cmd_touch", "1"),
        ("curr_items", "1"),
        ("curr_connections", "1"),
        ("threads", "2"),
        ("limit_maxbytes", "67108864"),
        ("pointer_size", "64"),
        ("version", tern_server::VERSION),
    ];
    for (name, value) in want {
        assert_eq!(s.get(name).map(String::as_str), Some(value), "stat {name}");
    }
    assert_eq!(s["pid"], server.pid().to_string());
    for name in [
        "uptime",
        "time",
        "rusage_user",
        "rusage_system",
        "rejected_connections",
        "cmd_flush",
        "get_expired",
        "get_flushed",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "bytes_read",
        "bytes_written",
        "conn_yields",
        "bytes",
        "evictions",
        "reclaimed",
        "expired_unfetched",
        "evicted_unfetched",
    ] {
        assert!(s.contains_key(name), "stats lacks {name}");
    }
    // The test kit's start-up probe was a connection too.
    assert!(s["total_connections"].parse::<u64>().unwrap() >= 1);
    assert!(s["bytes_read"].parse::<u64>().unwrap() > 50);
    c.expect(b"stats reset\r\n", b"RESET\r\n");
    let s = c.stats("stats\r\n");
    assert_eq!(
        (&s["cmd_get"][..], &s["get_hits"][..], &s["curr_items"][..]),
        ("0", "0", "1")
    );
    c.expect(b"stats bogus\r\n", b"ERROR\r\n");
    let settings = c.stats("stats settings\r\n");
    assert_eq!(settings["num_threads"], "2");
    assert_eq!(settings["maxconns"], "1024");
    assert_eq!(settings["tcpport"], server.port.to_string());
}

/// The server's `stats` once it counts `n` connections open (a closed one is counted until
/// the server has seen the close) and has taken in at least `taken` since it started
/// (`total_connections`).
fn wait_for_connections(c: &mut Conn, n: &str, taken: u64) -> HashMap<String, String> {
    for _ in 0..1000 {
        let s = c.stats("stats\r\n");
        let total: u64 = s["total_connections"].parse().unwrap();
        if s["curr_connections"] == n && total >= taken {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the server never counted {n} connections open of {taken} taken in");
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let server = ServerProcess::tern(&["-c", "2", "-t", "2"]);
    let mut a = server.connect();
    // The test kit's start-up probe, closed at once by the kit, is counted from when a worker
    // takes it in (on a loaded machine, after `a`) until it sees the close: both taken in,
    // only `a` open.
    let before = wait_for_connections(&mut a, "1", 2);
    let mut b = server.connect();
    b.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
    let mut third = server.connect();
    third.expect(b"", b"ERROR Too many open connections\r\n");
    assert!(third.is_closed_by_server());
    drop(b);
    // The freed slot is usable again once the server has seen the close.
    let after = wait_for_connections(&mut a, "1", 3);
    let rejected = |s: &HashMap<String, String>| s["rejected_connections"].parse::<u64>().unwrap();
    assert_eq!(rejected(&after) - rejected(&before), 1);
    let mut again = server.connect();
    again.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
}

#[test]
fn noreply_and_leading_spaces_as_memcached_1_6_45() {
    // memcached 1.6.45's transcripts (its request parser, `proto_parser.c`): `noreply`, the
    // last token read, silences any reply of the line, an unknown command's `ERROR` and an
    // admin command's answer included (1.6.18 answered `ERROR` to each of these); after a
    // leading space only the commands it looks up by their first token are known.
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    let version = tern_server::VERSION_REPLY.as_bytes();
    for silent in [
        "bogus noreply",
        "shutdown noreply",
        "slabs x noreply",
        "lru_crawler enable noreply",
        "flush_all 0 0 0 noreply",
        "cache_memlimit 100 noreply",
        "delete noreply",
        " bogus noreply",
    ] {
        c.expect(format!("{silent}\r\nversion\r\n").as_bytes(), version);
    }
    c.expect(b"cache_memlimit 64 2\r\n", b"OK\r\n");
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.expect(b" get k\r\n", b"ERROR\r\n");
    c.expect(b" delete k\r\n", b"ERROR\r\n");
    c.expect(b" verbosity 1\r\n", b"OK\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
    // 23 tokens are read: a `noreply` past them is not seen.
    let tokens = |n: usize| format!("delete k{} noreply\r\n", " x".repeat(n));
    c.expect(tokens(21).as_bytes(), b"DELETED\r\n");
    c.expect(format!("{}version\r\n", tokens(20)).as_bytes(), version);
}
