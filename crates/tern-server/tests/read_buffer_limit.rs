//! `-o read_buf_mem_limit`: a value still arriving waits in its connection's read buffer, and
//! the buffers grown for such values are bounded all together. Past the bound a storage command
//! gets memcached's "out of memory" answer, its value is swallowed without being buffered, and
//! the connection goes on; under a churn of large uploads from many clients the server stays
//! within `-m` + 48 MiB (checked in a memory-limited cgroup where the machine offers one).

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use tern_testkit::{binary, free_port, tern_bin, Conn, Rng, ServerProcess};

const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// A storage command's line and the first `sent` bytes of its `len`-byte value.
fn partial_set(line: &str, len: usize, sent: usize) -> Vec<u8> {
    let mut request = format!("{line}\r\n").into_bytes();
    request.resize(request.len() + sent.min(len), b'v');
    request
}

/// The last `n` bytes of a value and its line end.
fn value_tail(n: usize) -> Vec<u8> {
    let mut tail = vec![b'v'; n];
    tail.extend_from_slice(b"\r\n");
    tail
}

#[test]
fn past_the_bound_a_set_is_refused_its_value_swallowed_and_the_connection_kept() {
    // 1 MiB of grown buffers; items up to 2 MiB, so a 1.5 MB value is allowed but unholdable.
    let server = ServerProcess::tern(&["-o", "read_buf_mem_limit=1", "-I", "2m"]);
    let mut conn = server.connect();
    let big = 1_500_000;

    // The answer comes as soon as the line is in, before the value.
    conn.expect(
        &partial_set("set big 0 0 1500000", big, 1000),
        OUT_OF_MEMORY,
    );
    // The rest of the value is swallowed, not taken for commands.
    conn.send(&value_tail(big - 1000));
    conn.expect(b"get big\r\n", b"END\r\n");
    // noreply hides the answer, as for any text storage reply.
    conn.send(&partial_set("set big 0 0 1500000 noreply", big, big));
    conn.send(&value_tail(0));
    conn.expect(b"mn\r\n", b"MN\r\n");

    // A value the bound can hold is stored, arriving in pieces; twice, so the first one's
    // buffer must have been given back to the bound.
    let held = 900_000;
    let mut request = partial_set("set held 0 0 900000", held, held);
    request.extend_from_slice(&value_tail(0));
    for _ in 0..2 {
        for piece in request.chunks(100_000) {
            conn.send(piece);
        }
        conn.expect(b"", b"STORED\r\n");
    }
    let value = conn.request(b"get held\r\n", b"END\r\n");
    assert_eq!(value.len(), "VALUE held 0 900000\r\n".len() + held + 7);

    // A failed set removes the old value, as memcached's does, so nothing stale stays.
    conn.expect(b"set old 0 0 1\r\nx\r\n", b"STORED\r\n");
    conn.expect(&partial_set("set old 0 0 1500000", big, 0), OUT_OF_MEMORY);
    conn.send(&value_tail(big));
    conn.expect(b"get old\r\n", b"END\r\n");

    // Meta: the error is sent whatever q says.
    let mut ms = format!("ms mbig {big} q\r\n").into_bytes();
    ms.resize(ms.len() + big, b'm');
    ms.extend_from_slice(b"\r\nmn\r\n");
    conn.send(&ms);
    conn.expect(b"", OUT_OF_MEMORY);
    conn.expect(b"", b"MN\r\n");

    let stats = conn.stats("stats\r\n");
    assert_eq!(stats["read_buf_oom"], "4");
    assert_eq!(stats["store_no_memory"], "4");
    assert_eq!(
        stats["cmd_set"], "3",
        "refused sets are not counted, as in memcached"
    );
    let settings = conn.stats("stats settings\r\n");
    assert_eq!(settings["read_buf_mem_limit"], (1 << 20).to_string());

    // Binary: Out of memory (0x82), the frame skipped, the connection kept.
    let mut bin = server.connect();
    let frame = binary::frame(0x01, &[0; 8], b"bbig", &vec![b'b'; big], 7);
    bin.send(&frame[..2000]);
    let reply = binary::Reply::read(&mut bin.stream).unwrap();
    assert_eq!((reply.status, reply.opaque), (0x82, 7));
    bin.send(&frame[2000..]);
    bin.send(&binary::frame(0x0b, &[], b"", b"", 8));
    let version = binary::Reply::read(&mut bin.stream).unwrap();
    assert_eq!((version.status, version.opaque), (0, 8));
}

#[test]
fn the_default_bound_is_sixteen_mib_and_zero_lifts_it() {
    let server = ServerProcess::tern(&[]);
    let settings = server.connect().stats("stats settings\r\n");
    assert_eq!(settings["read_buf_mem_limit"], (16 << 20).to_string());

    let server = ServerProcess::tern(&["-o", "read_buf_mem_limit=0", "-I", "2m"]);
    let mut conn = server.connect();
    let big = 1_500_000;
    conn.send(&partial_set("set big 0 0 1500000", big, 1000));
    conn.expect(&value_tail(big - 1000), b"STORED\r\n");
}

/// A cgroup the server runs in, limited to `limit` bytes of memory, removed when dropped.
struct MemoryCgroup {
    dir: PathBuf,
    /// cgroup v2's files, else v1's.
    v2: bool,
}

impl MemoryCgroup {
    /// A new child cgroup with a memory limit, v2 where the memory controller is there, else
    /// v1; why not when neither can be made here (not root, no controller, read-only).
    fn create(limit: u64) -> Result<MemoryCgroup, String> {
        let name = format!("tern-test-{}", std::process::id());
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2_controllers = fs::read_to_string(v2_root.join("cgroup.controllers"));
        let (dir, v2) = if v2_controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            (v2_root.join(&name), true)
        } else if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
            (Path::new("/sys/fs/cgroup/memory").join(&name), false)
        } else {
            return Err("no cgroup memory controller (neither v2 nor v1) is mounted".into());
        };
        fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = MemoryCgroup { dir, v2 };
        let (file, no_swap) = if v2 {
            ("memory.max", "memory.swap.max")
        } else {
            ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
        };
        fs::write(cgroup.dir.join(file), limit.to_string())
            .map_err(|e| format!("cannot set {file}: {e}"))?;
        // Swap would let the server pass the limit without being killed: none where settable.
        let _ = fs::write(
            cgroup.dir.join(no_swap),
            if v2 { "0".into() } else { limit.to_string() },
        );
        Ok(cgroup)
    }

    /// How many times the kernel's OOM killer ran in the cgroup.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = fs::read_to_string(self.dir.join(file)).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// The most memory charged to the cgroup so far (v1), or now (v2 without `memory.peak`).
    fn peak(&self) -> u64 {
        let file = match (self.v2, self.dir.join("memory.peak").exists()) {
            (true, true) => "memory.peak",
            (true, false) => "memory.current",
            (false, _) => "memory.max_usage_in_bytes",
        };
        fs::read_to_string(self.dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Threads, each with this many connections uploading at once: 1,024 in all, the issue's churn.
const THREADS: usize = 8;
const CONNS_PER_THREAD: usize = 128;
const ROUNDS: usize = 4;
const KEYS: u64 = 400;
const MAX_VALUE: u64 = 500_000;

/// The value written as `version` of `key`: its length and bytes follow from both, so a value
/// read back says which write it was, and a wrong or torn one cannot pass for another.
fn value_of(key: u64, version: u64) -> Vec<u8> {
    let mut rng = Rng(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version ^ 1);
    let len = 100 + rng.below(MAX_VALUE - 100) as usize;
    let mut value = format!("{key}:{version}:").into_bytes();
    value.extend((value.len()..len).map(|_| b'a' + (rng.next_u64() % 26) as u8));
    value
}

/// One thread's churn: the `(key, version)`s stored, and how many sets were refused.
type Churned = (Vec<(u64, u64)>, usize);

/// Reads one reply line.
fn read_line(stream: &mut TcpStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte)?;
        line.push(byte[0]);
    }
    Ok(String::from_utf8(line).unwrap())
}

/// One thread's churn: each round, every connection sends a set's line and all of its value
/// but the end, then every one the end, so all of them hold a partial value at once; then the
/// replies.
fn churn(port: u16, thread: usize) -> io::Result<Churned> {
    let mut rng = Rng(thread as u64 + 1);
    let mut conns = (0..CONNS_PER_THREAD)
        .map(|_| TcpStream::connect(("127.0.0.1", port)))
        .collect::<io::Result<Vec<_>>>()?;
    let (mut stored, mut refused) = (Vec::new(), 0);
    for round in 0..ROUNDS {
        let writes: Vec<(u64, u64, Vec<u8>)> = (0..CONNS_PER_THREAD)
            .map(|c| {
                let key = rng.below(KEYS);
                let version = ((round * THREADS + thread) * CONNS_PER_THREAD + c) as u64;
                let value = value_of(key, version);
                let mut request = format!("set k{key} 0 0 {}\r\n", value.len()).into_bytes();
                request.extend_from_slice(&value);
                request.extend_from_slice(b"\r\n");
                (key, version, request)
            })
            .collect();
        // All but the last 3 bytes (a value byte and the line end): the slowest upload.
        for (conn, (_, _, request)) in conns.iter_mut().zip(&writes) {
            conn.write_all(&request[..request.len() - 3])?;
        }
        for (conn, (_, _, request)) in conns.iter_mut().zip(&writes) {
            conn.write_all(&request[request.len() - 3..])?;
        }
        for (conn, (key, version, _)) in conns.iter_mut().zip(&writes) {
            match read_line(conn)?.as_str() {
                "STORED\r\n" => stored.push((*key, *version)),
                "SERVER_ERROR out of memory storing object\r\n" => refused += 1,
                other => panic!("set k{key}: {other:?}"),
            }
        }
    }
    Ok((stored, refused))
}

#[test]
fn a_churn_of_large_uploads_stays_within_the_memory_limit_plus_48_mib() {
    let memory_mb = 32;
    let limit = (memory_mb + 48) << 20;
    let cgroup = match MemoryCgroup::create(limit) {
        Ok(cgroup) => cgroup,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    // The server joins the cgroup before it runs, so all of its memory is charged there.
    let port = free_port();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
        .arg(&cgroup.dir)
        .arg(tern_bin())
        .args(["serve", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(["-m", &memory_mb.to_string(), "-t", "2", "-c", "1100"]);
    let server = ServerProcess::spawn(cmd, port);

    let outcomes: Vec<io::Result<Churned>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| scope.spawn(move || churn(port, thread)))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // A connection cut short says why only once the cgroup is asked.
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the server was OOM-killed in its cgroup"
    );
    let mut acked: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut refused = 0;
    for outcome in outcomes {
        let (stored, no_room) = outcome.expect("the churn's connections");
        for (key, version) in stored {
            acked.entry(key).or_default().push(version);
        }
        refused += no_room;
    }

    let mut conn = Conn::connect(server.port);
    let (mut hits, mut misses) = (0, 0);
    for key in 0..KEYS {
        let reply = conn.request(format!("get k{key}\r\n").as_bytes(), b"END\r\n");
        if reply == b"END\r\n" {
            misses += 1;
            continue;
        }
        let header_end = reply.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
        let value = &reply[header_end..reply.len() - 7];
        let version: u64 = String::from_utf8_lossy(value)
            .split(':')
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("k{key}: a value of no write"));
        assert!(
            acked.get(&key).is_some_and(|v| v.contains(&version)),
            "k{key} holds version {version}, which was never acknowledged"
        );
        assert!(
            value == value_of(key, version),
            "k{key}: version {version} is wrong"
        );
        hits += 1;
    }
    let stored: usize = acked.values().map(Vec::len).sum();
    eprintln!(
        "churn: {stored} stored, {refused} refused; read back {hits} hits, {misses} misses; \
         cgroup peak {} MiB of {} MiB",
        cgroup.peak() >> 20,
        limit >> 20
    );
    assert!(stored > 0, "nothing was stored");
    assert_eq!(conn.line("version\r\n").split(' ').next(), Some("VERSION"));
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the server was OOM-killed in its cgroup"
    );
}

/// Resident set size of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Rounds of 30 connections each holding most of a 500 KB value at once, then finishing it.
/// The buffers grown for them are freed when the values are stored; they must leave the
/// process then, in every round: glibc by default raises its mmap threshold to the largest
/// block freed, so a second round's buffers would come from its heap and stay resident
/// (tern fixes the threshold at start: `process::return_large_buffers_at_once`).
#[test]
fn buffers_grown_for_large_values_leave_the_process_once_freed() {
    let server = ServerProcess::tern(&["-m", "8", "-t", "1", "-o", "read_buf_mem_limit=64"]);
    let len = 500_000;
    let mut settled = Vec::new();
    for round in 0..3 {
        let mut conns: Vec<Conn> = (0..30).map(|_| server.connect()).collect();
        for (i, conn) in conns.iter_mut().enumerate() {
            conn.send(&partial_set(
                &format!("set r{round}k{i} 0 0 {len}"),
                len,
                len - 10,
            ));
        }
        for conn in conns.iter_mut() {
            conn.expect(&value_tail(10), b"STORED\r\n");
        }
        drop(conns);
        // One more request through the worker, so it has taken back every buffer.
        server.connect().expect(b"mn\r\n", b"MN\r\n");
        settled.push(rss_kib(server.pid()));
    }
    // 30 buffers of 500 KB are 14.6 MiB: a round that kept them would show it.
    let growth = settled[2].saturating_sub(settled[0]);
    assert!(
        growth < 4 * 1024,
        "RSS after each round (KiB): {settled:?}: freed buffers stayed resident"
    );
}
