//! The flash tier's options, commands and stats (memcached's extstore), against the real
//! server: what memcached refuses at start tern refuses, `-h` names `ext_path` (memcached's test
//! library reads it there), `stats settings`, `stats` and `stats extstore` show the flash tier
//! under memcached's names, the `extstore` command answers as memcached 1.6.45 does, and the
//! flash threads run and stop with the server. Flash files live in a scratch directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use tern_testkit::{tern_bin, ServerProcess};

/// A directory for flash files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tern-flash-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// `-o ext_path=` for a file `name` of `size` (memcached's syntax) in the directory.
    fn ext_path(&self, name: &str, size: &str) -> String {
        format!("ext_path={}:{size}", self.0.join(name).display())
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tern serve <args>` run to its end, for command lines it must refuse: within 10 s, so that
/// one it wrongly accepts fails the test (status 124) instead of serving forever.
fn tern_output(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("10")
        .arg(tern_bin())
        .arg("serve")
        .args(["-l", "127.0.0.1", "-p", "0"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// memcached 1.6.45's refusals and their messages, as it printed them on 2026-11-26 (Debian's
/// 1.6.18 starts with a `1GB` or zero-sized file).
#[test]
fn what_memcached_refuses_at_start_tern_refuses_with_its_message() {
    let dir = Scratch::new("refused");
    let zero = dir.ext_path("zero", "0G");
    let bytes = dir.ext_path("bytes", "1GB");
    let small = dir.ext_path("small", "32m");
    let bucket = dir.ext_path("bucket", "1g:bogus");
    let fine = dir.ext_path("fine", "1g");
    for (args, says) in [
        (
            vec!["-o", &zero],
            "supplied ext_path has zero size, cannot use",
        ),
        (
            vec!["-o", &small],
            "supplied ext_path has zero size, cannot use",
        ),
        (
            vec!["-o", &bytes],
            "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)",
        ),
        (
            vec!["-o", "ext_path"],
            "missing argument to ext_path, ie: ext_path=/d/file:5G",
        ),
        (vec!["-o", &bucket], "Unknown extstore bucket: bogus"),
        (
            vec!["-o", &fine, "-I", "8m"],
            "-I (item_size_max: 8388608) cannot be larger than ext_wbuf_size: 4194304",
        ),
        (
            vec!["-o", &fine, "-U", "11211"],
            "Cannot use UDP with extstore enabled (-U 0 to disable)",
        ),
    ] {
        let out = tern_output(&args);
        let ours = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "tern serve {args:?} was accepted");
        assert!(ours.contains(says), "tern serve {args:?}: {ours}");
    }
    // The long flag and the TOML key are read by the same rules.
    let out = tern_output(&["--ext-path", &format!("{}:0g", dir.0.display())]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("zero size"));
    let toml = dir.file(
        "tern.toml",
        &format!("ext_path = \"{}/toml:1GB\"\n", dir.0.display()),
    );
    let out = tern_output(&["--config", &toml]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("(m|g|t|p supported)"));
}

/// A value that names its key, 20,000 bytes as memcached's extstore tests use.
fn value_of(n: u32) -> Vec<u8> {
    let mut v = format!("value-of-{n}:").into_bytes();
    while v.len() < 20_000 {
        v.push(b'a' + (v.len() % 26) as u8);
    }
    v
}

/// A server with a 16 MiB heap in front of a 256 MiB flash file, items of 512 bytes and up
/// going to flash once idle a second.
fn flash_server(dir: &Scratch, extra: &[&str]) -> ServerProcess {
    let path = dir.ext_path("flash", "256m");
    let mut args = vec![
        "-m",
        "16",
        "-o",
        &path,
        "-o",
        "ext_page_size=8,ext_wbuf_size=2,ext_item_age=1,ext_max_sleep=10000",
    ];
    args.extend_from_slice(extra);
    ServerProcess::tern(&args)
}

/// Stores the values of `keys` (2,400 are three times the heap), waits until flash holds all
/// it will take.
fn fill(server: &ServerProcess, keys: std::ops::Range<u32>) {
    fill_with(server, "key", keys, value_of);
}

/// [`fill`] with keys `{prefix}:N` and the values `value` makes.
fn fill_with(
    server: &ServerProcess,
    prefix: &str,
    keys: std::ops::Range<u32>,
    value: impl Fn(u32) -> Vec<u8>,
) {
    let mut conn = server.connect();
    for n in keys {
        let value = value(n);
        let mut request = format!("set {prefix}:{n} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        conn.expect(&request, b"STORED\r\n");
    }
    // memcached's test library waits this way: until no item flash would take is in memory.
    for _ in 0..600 {
        let items = conn.stats("stats items\r\n");
        if !items.contains_key("items:3:number") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("items stayed in memory");
}

/// The `VALUE` lines of a get of `keys` (`key:N`, values `value_of`), without `END`.
fn get_reply(keys: &[u32]) -> Vec<u8> {
    value_lines("key", keys, value_of)
}

/// The `VALUE` lines for `{prefix}:N` of each of `keys`, whose values `value` makes.
fn value_lines(prefix: &str, keys: &[u32], value: impl Fn(u32) -> Vec<u8>) -> Vec<u8> {
    let mut reply = Vec::new();
    for &n in keys {
        let value = value(n);
        reply.extend_from_slice(format!("VALUE {prefix}:{n} 0 {}\r\n", value.len()).as_bytes());
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\n");
    }
    reply
}

#[test]
fn items_beyond_memory_are_served_from_flash_by_every_get() {
    served_from_flash_by_every_get("epoll");
}

/// The io_uring engine's workers read flash on rings of their own too, their completions
/// noticed through the engine's mio poll (before, its reads went through the I/O threads).
#[test]
fn the_io_uring_engine_serves_flash_as_epoll_does() {
    served_from_flash_by_every_get("uring");
}

/// io_uring instances the process holds open.
fn rings(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy() == "anon_inode:[io_uring]")
        .count()
}

fn served_from_flash_by_every_get(engine: &str) {
    let dir = Scratch::new(&format!("serve-{engine}"));
    let server = flash_server(&dir, &["--io-engine", engine, "-t", "2"]);
    // Each worker's ring for its flash reads (and under io_uring its sockets' ring), before any
    // read (the I/O threads open theirs at their first); the workers make them as they start.
    // None where the kernel has no io_uring.
    let per_worker = if engine == "uring" { 2 } else { 1 };
    let mut open = rings(server.pid());
    for _ in 0..200 {
        if open == 2 * per_worker {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
        open = rings(server.pid());
    }
    if open > 0 {
        assert_eq!(open, 2 * per_worker, "io_uring instances of 2 workers");
    }
    fill(&server, 0..2_400);
    let mut conn = server.connect();
    let stats = conn.stats("stats\r\n");
    assert!(
        stats["extstore_objects_written"].parse::<u64>().unwrap() > 1_000,
        "{stats:?}"
    );
    assert_eq!(stats["curr_items"], "2400");
    // One key, then a multiget whose keys are all on flash: every value, in order.
    let mut want = get_reply(&[7]);
    want.extend_from_slice(b"END\r\n");
    conn.expect(b"get key:7\r\n", &want);
    let keys: Vec<u32> = (100..140).collect();
    let line = keys
        .iter()
        .map(|n| format!("key:{n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut want = get_reply(&keys);
    want.extend_from_slice(b"END\r\n");
    conn.expect(format!("get {line}\r\n").as_bytes(), &want);
    // Pipelined gets, a miss among them.
    let mut request = Vec::new();
    let mut want = Vec::new();
    for n in [300u32, 301, 999_999, 302] {
        request.extend_from_slice(format!("get key:{n}\r\n").as_bytes());
        if n < 2_400 {
            want.extend_from_slice(&get_reply(&[n]));
        }
        want.extend_from_slice(b"END\r\n");
    }
    conn.expect(&request, &want);
    // Meta, touch, delete and incr on items on flash.
    let value = value_of(400);
    let mut want = format!("VA {} f0\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    conn.expect(b"mg key:400 v f\r\n", &want);
    conn.expect(b"touch key:401 100\r\n", b"TOUCHED\r\n");
    conn.expect(b"delete key:402\r\n", b"DELETED\r\n");
    conn.expect(b"get key:402\r\n", b"END\r\n");
    conn.expect(
        b"incr key:403 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    let stats = conn.stats("stats\r\n");
    let from_flash: u64 = stats["get_extstore"].parse().unwrap();
    assert!(from_flash >= 44, "{stats:?}");
    assert_eq!(stats["badcrc_from_extstore"], "0");
    // A deferred get is counted once: 1 + 40 + 4 + 1 gets and mg's one.
    assert_eq!(stats["cmd_get"], "47", "{stats:?}");
    // The binary protocol's get reads flash too.
    let mut conn = server.connect();
    conn.send(&tern_testkit::binary::frame(0x00, &[], b"key:500", &[], 7));
    let reply = tern_testkit::binary::Reply::read(&mut conn.stream).unwrap();
    assert_eq!(reply.status, 0);
    assert_eq!(reply.value, value_of(500));
}

/// memcached's `binary-extstore.t` fills flash until pages are evicted, then expects gets of
/// the first keys to count `miss_from_extstore`: the evicted page's entries are left behind,
/// stale, and a get that meets one answers a miss.
#[test]
fn a_get_of_an_item_whose_flash_page_was_evicted_is_a_miss_from_extstore() {
    let dir = Scratch::new("evicted");
    // 48 MB of values through a 16 MiB heap and two 8 MiB pages of flash; no read brings an
    // item back into memory, which could evict more while the gets count.
    let path = dir.ext_path("flash", "16m");
    let server = ServerProcess::tern(&[
        "-m",
        "16",
        "-o",
        &path,
        "-o",
        "ext_page_size=8,ext_wbuf_size=2,ext_item_age=1,ext_max_sleep=10000,ext_recache_rate=0",
    ]);
    fill(&server, 0..2_400);
    let mut conn = server.connect();
    let count =
        |stats: &HashMap<String, String>, name: &str| -> u64 { stats[name].parse().unwrap() };
    // The flash thread evicts a page whenever none is free: wait until one is and nothing has
    // moved for a while, so that no eviction comes between the counts and the gets.
    let mut before = conn.stats("stats\r\n");
    let mut still = 0;
    for _ in 0..600 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = conn.stats("stats\r\n");
        let moved = [
            "extstore_page_evictions",
            "extstore_objects_written",
            "curr_items",
        ]
        .iter()
        .any(|name| now[*name] != before[*name]);
        let none_free = count(&now, "extstore_pages_free") == 0;
        still = if moved || none_free { 0 } else { still + 1 };
        before = now;
        if still == 6 {
            break;
        }
    }
    assert_eq!(still, 6, "the flash tier never settled: {before:?}");
    assert!(count(&before, "extstore_page_evictions") > 0, "{before:?}");
    assert!(count(&before, "extstore_stale_entries") > 0, "{before:?}");
    let mut found = 0;
    for n in 0..2_400 {
        let reply = conn.request(format!("get key:{n}\r\n").as_bytes(), b"END\r\n");
        if reply != b"END\r\n" {
            let mut want = get_reply(&[n]);
            want.extend_from_slice(b"END\r\n");
            assert_eq!(reply, want, "key:{n}");
            found += 1;
        }
    }
    // curr_items counted the items, not the entries left behind.
    assert_eq!(count(&before, "curr_items"), found);
    let after = conn.stats("stats\r\n");
    let met = count(&before, "extstore_stale_entries") - count(&after, "extstore_stale_entries");
    assert!(met > 0, "{after:?}");
    assert_eq!(count(&after, "miss_from_extstore"), met, "{after:?}");
    // As memcached counts a get of a header whose page went: a hit, a read from extstore, a
    // miss from extstore.
    assert_eq!(count(&after, "get_hits"), found + met, "{after:?}");
    assert_eq!(
        count(&after, "get_misses"),
        2_400 - found - met,
        "{after:?}"
    );
    assert!(count(&after, "get_extstore") >= met, "{after:?}");
}

#[test]
fn pipelined_gets_beyond_a_read_buffer_are_all_answered_from_flash() {
    // More get lines than a connection's read buffer (16 KiB) holds, each waiting for its
    // item's flash read: the server reads the rest of them from the socket as it goes, no
    // readiness edge announcing them after the first.
    // The values are small enough that the replies never fill the socket (whose writable
    // edges would drive the connection, reading, on their own), and `-R` lets no turn stop
    // early (a connection that yields is driven again, reading).
    let dir = Scratch::new("pipelined");
    let server = flash_server(&dir, &["-R", "100000"]);
    let small_value = |n: u32| {
        let mut v = format!("small-{n}:").into_bytes();
        v.resize(600, b'v');
        v
    };
    fill_with(&server, "small", 0..2_000, small_value);
    let keys: Vec<u32> = (0..1_500).map(|i| i * 7 % 2_000).collect();
    let mut request = Vec::new();
    let mut want = Vec::new();
    for &n in &keys {
        request.extend_from_slice(format!("get small:{n}\r\n").as_bytes());
        want.extend_from_slice(&value_lines("small", &[n], small_value));
        want.extend_from_slice(b"END\r\n");
    }
    assert!(request.len() > 16 * 1024);
    let mut conn = server.connect();
    conn.expect(&request, &want);
    let stats = conn.stats("stats\r\n");
    assert!(
        stats["get_extstore"].parse::<u64>().unwrap() > 1_000,
        "{stats:?}"
    );
}

#[test]
fn a_warm_restart_keeps_what_flash_holds() {
    let dir = Scratch::new("restart");
    let memory_file = dir.0.join("mem");
    let memory_file = memory_file.to_str().unwrap();
    let mut server = flash_server(&dir, &["-e", memory_file]);
    fill(&server, 0..2_400);
    let on_flash: u64 = server.connect().stats("stats\r\n")["extstore_objects_used"]
        .parse()
        .unwrap();
    assert!(on_flash > 1_000);
    server.signal("TERM");
    assert!(server.wait_exit().success());
    let server = flash_server(&dir, &["-e", memory_file]);
    let mut conn = server.connect();
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["curr_items"], "2400", "{stats:?}");
    for n in (0..2_400).step_by(97) {
        let mut want = get_reply(&[n]);
        want.extend_from_slice(b"END\r\n");
        conn.expect(format!("get key:{n}\r\n").as_bytes(), &want);
    }
    assert!(
        conn.stats("stats\r\n")["get_extstore"]
            .parse::<u64>()
            .unwrap()
            > 0
    );
}

/// A value of 800,000 bytes that names its key, as memcached's `binary-extstore.t` stores:
/// larger than a segment (a run) and than a block, within a 2 MiB write buffer.
fn large_value_of(n: u32) -> Vec<u8> {
    let mut v = format!("large-{n}:").into_bytes();
    while v.len() < 800_000 {
        v.push(b'A' + ((v.len() * 7 + n as usize) % 26) as u8);
    }
    v
}

/// The whole reply to a get of `keys` (`big:N`, values `large_value_of`).
fn large_reply(keys: &[u32]) -> Vec<u8> {
    let mut reply = value_lines("big", keys, large_value_of);
    reply.extend_from_slice(b"END\r\n");
    reply
}

/// Items larger than a segment go to flash as memcached's chunked items go to extstore (its
/// bucket 2), whole in one record of many blocks, and every get reads them back through the
/// deferred reads (the rest of each record read by an I/O thread): one key, a multiget, the
/// binary protocol, and a recache into memory.
#[test]
fn items_larger_than_a_segment_are_served_from_flash() {
    let dir = Scratch::new("large");
    let server = flash_server(&dir, &[]);
    let mut conn = server.connect();
    // 40 x 800,000 bytes: twice the heap. Each set evicts about one item to flash; once the
    // buffers it filled are written, the next finds one free (else it would evict the item
    // as without flash, which this test is not about).
    for n in 0..40 {
        let value = large_value_of(n);
        let mut request = format!("set big:{n} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        conn.expect(&request, b"STORED\r\n");
        for _ in 0..600 {
            if conn.stats("stats\r\n")["extstore_io_queue"] == "0" {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    // Until none the tier would take is in memory: those larger than a segment included.
    for _ in 0..600 {
        if !conn.stats("stats items\r\n").contains_key("items:3:number") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let items = conn.stats("stats items\r\n");
    assert_eq!(items["items:2:number"], "40", "{items:?}");
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["curr_items"], "40");
    assert_eq!(stats["extstore_objects_used"], "40", "{stats:?}");
    let pages = tern_testkit::stat_lines(&conn.request(b"stats extstore\r\n", b"END\r\n"));
    assert!(
        pages
            .iter()
            .any(|(n, v)| n.ends_with(":bucket") && v == "2"),
        "{pages:?}"
    );
    conn.expect(b"get big:7\r\n", &large_reply(&[7]));
    let keys: Vec<u32> = (10..16).collect();
    let line: Vec<String> = keys.iter().map(|n| format!("big:{n}")).collect();
    conn.expect(
        format!("get {}\r\n", line.join(" ")).as_bytes(),
        &large_reply(&keys),
    );
    let mut binary = server.connect();
    binary.send(&tern_testkit::binary::frame(0x00, &[], b"big:20", &[], 9));
    let reply = tern_testkit::binary::Reply::read(&mut binary.stream).unwrap();
    assert_eq!((reply.status, reply.value), (0, large_value_of(20)));
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["get_extstore"], "8", "{stats:?}");
    assert_eq!(stats["badcrc_from_extstore"], "0");
    let read: u64 = stats["extstore_bytes_read"].parse().unwrap();
    assert!(read >= 8 * 800_000, "{stats:?}");
    // With every read recached, the item comes back into memory (a run of its own).
    let recaches = |conn: &mut tern_testkit::Conn| -> u64 {
        conn.stats("stats\r\n")["recache_from_extstore"]
            .parse()
            .unwrap()
    };
    let before = recaches(&mut conn);
    conn.expect(b"extstore recache_rate 1\r\n", b"OK\r\n");
    conn.expect(b"get big:30\r\n", &large_reply(&[30]));
    conn.expect(b"get big:30\r\n", &large_reply(&[30]));
    assert_eq!(recaches(&mut conn), before + 1);
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["get_extstore"], "9", "the second get read memory");
}

/// `flash_server`'s command line on a planned port, with a memory file (`-e`) and a control
/// socket to hand over on (`--takeover-socket`), as docs/restart.md runs a hand-over.
fn hand_over_args(dir: &Scratch, port: u16) -> Vec<String> {
    let mut args: Vec<String> = ["serve", "-l", "127.0.0.1", "-p", &port.to_string()]
        .map(String::from)
        .to_vec();
    args.extend(["-m", "16", "-o"].map(String::from));
    args.push(dir.ext_path("flash", "256m"));
    args.push("-o".into());
    args.push("ext_page_size=8,ext_wbuf_size=2,ext_item_age=1,ext_max_sleep=10000".into());
    for (flag, name) in [("-e", "mem"), ("--takeover-socket", "takeover.sock")] {
        args.push(flag.into());
        args.push(dir.0.join(name).display().to_string());
    }
    args.extend(tern_testkit::io_engine_args(&[]));
    args
}

/// Contract item 5 of issue 27: a successor started with `--takeover` opens the flash files
/// the old process held (it unlocks them once its metadata is saved) and serves every item
/// that was on flash, from flash, value for value.
#[test]
fn a_takeover_successor_serves_what_flash_holds() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("takeover");
    let port = tern_testkit::free_port();
    let args = hand_over_args(&dir, port);
    let mut old = ServerProcess::spawn(
        {
            let mut cmd = Command::new(tern_bin());
            cmd.args(&args);
            cmd
        },
        port,
    );
    // The control socket is offered (mode 0600) after the port accepts.
    let control = dir.0.join("takeover.sock");
    let deadline = std::time::Instant::now() + tern_testkit::PATIENCE;
    while !std::fs::metadata(&control).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600) {
        assert!(std::time::Instant::now() < deadline, "no control socket");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    fill(&old, 0..2_400);
    let before = old.connect().stats("stats\r\n");
    let on_flash: u64 = before["extstore_objects_used"].parse().unwrap();
    assert!(on_flash > 1_000, "{before:?}");

    // Not waited for as `ServerProcess::spawn` waits: the port accepts already (the old
    // server's sockets); the old one exits once it has saved and handed over.
    let new = ServerProcess {
        child: Command::new(tern_bin())
            .args(&args)
            .arg("--takeover")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        port,
    };
    assert!(old.wait_exit().success(), "the old server exits 0");
    let mut conn = new.connect();
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["pid"], new.pid().to_string(), "the successor serves");
    assert_eq!(stats["restored_items"], "2400", "{stats:?}");
    assert_eq!(stats["curr_items"], "2400", "{stats:?}");
    // Whatever the old one had on flash when it saved is on flash still (its idle thread may
    // have moved more there before the hand-over stopped it).
    let kept: u64 = stats["extstore_objects_used"].parse().unwrap();
    assert!(kept >= on_flash, "{kept} of {on_flash} items on flash");
    assert_eq!(
        conn.stats("stats items\r\n")["items:2:number"],
        kept.to_string()
    );
    for n in 0..2_400 {
        let mut want = get_reply(&[n]);
        want.extend_from_slice(b"END\r\n");
        conn.expect(format!("get key:{n}\r\n").as_bytes(), &want);
    }
    let stats = conn.stats("stats\r\n");
    let from_flash: u64 = stats["get_extstore"].parse().unwrap();
    assert!(
        from_flash >= kept,
        "{from_flash} gets from flash, {kept} on it"
    );
    assert_eq!(stats["badcrc_from_extstore"], "0");
    assert_eq!(stats["miss_from_extstore"], "0");
    // The successor writes flash on from the pages the old one left.
    fill(&new, 2_400..4_800);
    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["curr_items"], "4800", "{stats:?}");
    let used: u64 = stats["extstore_objects_used"].parse().unwrap();
    assert!(used > kept + 1_000, "{used} on flash after {kept}");
    for n in (0..4_800).step_by(7) {
        let mut want = get_reply(&[n]);
        want.extend_from_slice(b"END\r\n");
        conn.expect(format!("get key:{n}\r\n").as_bytes(), &want);
    }
}

#[test]
fn help_names_ext_path_as_memcacheds_test_library_looks_for_it() {
    let out = Command::new(tern_bin())
        .args(["serve", "-h"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    // MemcachedTest.pm's supports_extstore: `-h` output matching /ext_path/i.
    for name in [
        "ext_path",
        "ext_page_size",
        "ext_wbuf_size",
        "ext_threads",
        "ext_item_size",
        "ext_item_age",
        "ext_low_ttl",
        "ext_drop_unread",
        "ext_recache_rate",
        "ext_compact_under",
        "ext_drop_under",
        "ext_max_frag",
        "ext_max_sleep",
        "slab_automove_freeratio",
    ] {
        assert!(help.contains(name), "tern serve -h lacks {name}");
    }
}

/// The `ext_*` lines of `stats settings`.
fn ext_settings(server: &ServerProcess) -> HashMap<String, String> {
    server
        .connect()
        .stats("stats settings\r\n")
        .into_iter()
        .filter(|(name, _)| name.starts_with("ext_") || name == "slab_automove_freeratio")
        .collect()
}

#[test]
fn without_a_flash_tier_tern_answers_as_a_memcached_without_extstore() {
    let server = ServerProcess::tern(&["-o", "ext_item_size=100"]);
    let mut c = server.connect();
    c.expect(b"extstore item_size 100\r\n", b"ERROR\r\n");
    c.expect(b"stats extstore\r\n", b"ERROR\r\n");
    let stats = c.stats("stats\r\n");
    assert!(!stats.keys().any(|k| k.contains("extstore")), "{stats:?}");
    // The lines stay, at 0: no flash tier.
    let settings = ext_settings(&server);
    assert_eq!(settings.len(), 11, "{settings:?}");
    assert_eq!(settings["ext_item_size"], "0");
    assert_eq!(settings["ext_drop_unread"], "no");
}

/// The names of the process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_flash_threads_run_with_the_tier_and_stop_with_the_server() {
    let dir = Scratch::new("threads");
    let path = dir.ext_path("flash", "128m");
    for (args, threads) in [
        (vec!["-o", path.as_str(), "--ext-threads", "2"], 2),
        (vec!["-o", path.as_str()], 1),
        (vec![], 0),
    ] {
        let mut server = ServerProcess::tern(&args);
        server
            .connect()
            .expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
        // ext_threads I/O threads, and one for the background work. They start after the
        // workers (which may serve first): the list is read until they are all there.
        let mut want: Vec<String> = (0..threads).map(|i| format!("tern-flash-io-{i}")).collect();
        if threads > 0 {
            want.push("tern-flash-work".into());
        }
        let flash_threads = || -> Vec<String> {
            thread_names(server.pid())
                .into_iter()
                .filter(|n| n.starts_with("tern-flash"))
                .collect()
        };
        let mut flash = flash_threads();
        for _ in 0..200 {
            if flash == want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
            flash = flash_threads();
        }
        assert_eq!(flash, want, "{args:?}");
        server.signal("TERM");
        assert!(server.wait_exit().success(), "{args:?}");
    }
}

#[test]
fn a_second_server_on_the_same_flash_file_is_refused() {
    let dir = Scratch::new("lock");
    let path = dir.ext_path("flash", "128m");
    let _first = ServerProcess::tern(&["-o", &path]);
    let out = tern_output(&["-o", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 124: still serving when `timeout` stopped it.
    assert!(
        !out.status.success() && out.status.code() != Some(124),
        "a second server shares the flash file ({}): {stderr}",
        out.status
    );
    assert!(stderr.contains(&*dir.0.to_string_lossy()), "{stderr}");
}

#[test]
fn stats_settings_show_the_tier_as_memcached_shows_it() {
    let dir = Scratch::new("settings");
    for options in [
        dir.ext_path("t", "1g"),
        format!(
            "{},ext_item_size=100,ext_item_age=60,ext_low_ttl=5,ext_recache_rate=10,\
             ext_wbuf_size=2,ext_compact_under=4,ext_drop_under=3,ext_max_sleep=7,\
             ext_max_frag=0.5,ext_drop_unread,slab_automove_freeratio=0.25",
            dir.ext_path("t", "1g")
        ),
    ] {
        let tern = ServerProcess::tern(&["-o", &options]);
        let memcached_options = options.replace("/t:", "/m:");
        let memcached = ServerProcess::memcached(&["-o", &memcached_options]);
        let (mut ours, mut theirs) = (ext_settings(&tern), ext_settings(&memcached));
        assert_eq!(ours.len(), 11, "{ours:?}");
        // Debian's 1.6.18 derives these from a quarter of the pages, 1.6.45 (checked below)
        // from 1% of them.
        if !options.contains("compact_under") {
            for name in ["ext_compact_under", "ext_drop_under"] {
                ours.remove(name);
                theirs.remove(name);
            }
        }
        assert_eq!(ours, theirs, "-o {options}");
    }
    let defaults = ext_settings(&ServerProcess::tern(&["-o", &dir.ext_path("d", "1g")]));
    for (name, value) in [
        ("ext_item_size", "512"),
        ("ext_item_age", "4294967295"),
        ("ext_low_ttl", "0"),
        ("ext_recache_rate", "2000"),
        ("ext_wbuf_size", "4194304"),
        // 1% of 16 pages, at least 1.
        ("ext_compact_under", "1"),
        ("ext_drop_under", "1"),
        ("ext_max_sleep", "1000000"),
        ("ext_max_frag", "0.80"),
        ("slab_automove_freeratio", "0.010"),
        ("ext_drop_unread", "no"),
    ] {
        assert_eq!(defaults[name], value, "{name}");
    }
    let toml = dir.file(
        "tern.toml",
        &format!(
            "ext_path = [\"{0}/a:1g\", \"{0}/b:1g\"]\next_item_size = 64\next_max_frag = 0.3\n",
            dir.0.display()
        ),
    );
    let from_file = ext_settings(&ServerProcess::tern(&["--config", &toml]));
    assert_eq!(
        (&*from_file["ext_item_size"], &*from_file["ext_max_frag"]),
        ("64", "0.30")
    );
}

#[test]
fn the_extstore_command_changes_what_stats_settings_show() {
    let dir = Scratch::new("command");
    let server = ServerProcess::tern(&["-o", &dir.ext_path("f", "1g")]);
    let mut c = server.connect();
    for (line, reply) in [
        ("extstore", "ERROR"),
        ("extstore item_size", "ERROR"),
        ("extstore item_size x", "ERROR"),
        ("extstore bogus 1", "ERROR"),
        ("extstore free_memchunks 1 2", "OK"),
        ("extstore free_memchunks 64 2", "ERROR"),
        ("extstore item_size 100", "OK"),
        ("extstore item_age 60", "OK"),
        ("extstore low_ttl 5", "OK"),
        ("extstore recache_rate 10", "OK"),
        ("extstore compact_under 4", "OK"),
        ("extstore drop_under 3", "OK"),
        ("extstore max_sleep 7", "OK"),
        ("extstore max_frag 0.5", "OK"),
        ("extstore drop_unread 1", "OK"),
    ] {
        assert_eq!(
            c.line(&format!("{line}\r\n")),
            format!("{reply}\r\n"),
            "{line}"
        );
    }
    // noreply silences OK and ERROR alike, as in memcached.
    c.send(b"extstore item_size 200 noreply\r\nextstore bogus 1 noreply\r\n");
    c.expect(b"mn\r\n", b"MN\r\n");
    let settings = ext_settings(&server);
    for (name, value) in [
        ("ext_item_size", "200"),
        ("ext_item_age", "60"),
        ("ext_low_ttl", "5"),
        ("ext_recache_rate", "10"),
        ("ext_compact_under", "4"),
        ("ext_drop_under", "3"),
        ("ext_max_sleep", "7"),
        ("ext_max_frag", "0.50"),
        ("ext_drop_unread", "yes"),
    ] {
        assert_eq!(settings[name], value, "{name}");
    }
}

#[test]
fn stats_show_the_tier_in_memcacheds_places() {
    let dir = Scratch::new("stats");
    let server = ServerProcess::tern(&["-o", &dir.ext_path("f", "1g")]);
    let mut c = server.connect();
    let stats = tern_testkit::stat_lines(&c.request(b"stats\r\n", b"END\r\n"));
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    let after = |name: &str| names[names.iter().position(|n| *n == name).unwrap() + 1];
    assert_eq!(after("get_flushed"), "get_extstore");
    assert_eq!(after("badcrc_from_extstore"), "delete_misses");
    assert_eq!(after("log_watchers"), "extstore_memory_pressure");
    assert_eq!(after("extstore_io_queue"), "extstore_false_reads");
    assert_eq!(after("extstore_false_reads"), "extstore_stale_entries");
    assert_eq!(
        after("extstore_stale_entries"),
        "extstore_write_amplification"
    );
    let value = |name: &str| &stats.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(value("extstore_limit_maxbytes"), &(1u64 << 30).to_string());
    assert_eq!(value("extstore_write_amplification"), "0.00");
    // 16 pages of 64 MiB, four lines each.
    let pages = tern_testkit::stat_lines(&c.request(b"stats extstore\r\n", b"END\r\n"));
    assert_eq!(pages.len(), 16 * 4);
    assert_eq!(
        pages[..4]
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["0:version", "0:bytes", "0:bucket", "0:free_bucket"]
    );
}
