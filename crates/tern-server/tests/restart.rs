//! Warm restart (`-e`, docs/restart.md): a graceful stop saves, the next start restores every
//! live item (values byte for byte, flags, CAS), and anything else (a crash, other settings, a
//! damaged file) starts an empty, healthy cache with one line saying why. Deadlines across a
//! downtime are tested in tern-store (`persist`), where the clock can be moved.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, Conn, Rng, ServerProcess, PATIENCE};

/// A memory file under /dev/shm (tmpfs, as the docs ask) when there is one, and its log.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        Scratch::under(&base, name)
    }

    fn under(base: &Path, name: &str) -> Scratch {
        let dir = base.join(format!("tern-restart-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    fn mem(&self) -> String {
        self.dir.join("tern.mem").display().to_string()
    }

    fn meta(&self) -> PathBuf {
        self.dir.join("tern.mem.meta")
    }

    /// `tern serve -e <mem> <args>` on `port`, with its log in `log` (replaced).
    fn command(&self, port: u16, args: &[&str]) -> Command {
        let log = File::create(self.log_path()).unwrap();
        let mut command = Command::new(tern_bin());
        command
            .arg("serve")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-e",
                &self.mem(),
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        command
    }

    /// Starts `tern serve -e <mem> <args>` with its log in `log` (replaced), and waits until it
    /// accepts.
    fn start(&self, args: &[&str]) -> ServerProcess {
        let port = free_port();
        let mut child = self.command(port, args).spawn().expect("spawn tern");
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("tern exited before it was ready ({status}): {}", self.log());
            }
            assert!(Instant::now() < deadline, "tern was not ready in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        ServerProcess { child, port }
    }

    /// Runs `tern serve -e <mem> <args>`, which must exit within `PATIENCE` without ever
    /// answering a request: how it exited. (Its sockets listen before the memory file is
    /// looked at, so a connection may be taken into the backlog of one about to refuse.)
    fn start_fails(&self, args: &[&str]) -> ExitStatus {
        let port = free_port();
        let mut child = self.command(port, args).spawn().expect("spawn tern");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if tern_testkit::answers_version(port) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tern served: {}", self.log());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tern neither served nor exited in time: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("tern.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Value, flags and CAS of every key, by `gets`.
fn read_all(c: &mut Conn, keys: &[String]) -> HashMap<String, (Vec<u8>, u32, u64)> {
    let mut got = HashMap::new();
    for key in keys {
        c.send(format!("gets {key}\r\n").as_bytes());
        let mut reply = c.read_until(b"\r\n");
        if reply == b"END\r\n" {
            continue;
        }
        let line_end = reply.windows(2).position(|w| w == b"\r\n").unwrap();
        let header = String::from_utf8(reply[..line_end].to_vec()).unwrap();
        let fields: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(fields[..2], ["VALUE", key.as_str()], "{header}");
        let len: usize = fields[3].parse().unwrap();
        let whole = line_end + 2 + len + 2 + 5;
        let rest = whole - reply.len();
        reply.extend(c.read_exact(rest));
        let body = &reply[line_end + 2..];
        assert!(body.ends_with(b"\r\nEND\r\n"), "{key}");
        got.insert(
            key.clone(),
            (
                body[..len].to_vec(),
                fields[2].parse().unwrap(),
                fields[4].parse().unwrap(),
            ),
        );
    }
    got
}

/// Stores `count` items of every shape (binary values with CRLFs inside, sizes from 0 to 300
/// KB, flags, deadlines), deletes and overwrites some; returns the keys.
fn fill(c: &mut Conn, count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut keys = Vec::new();
    for i in 0..count {
        let key = format!("key-{seed}-{i}");
        let len = match i % 100 {
            0 => 300_000,
            1..=9 => rng.below(20_000) as usize,
            _ => rng.below(200) as usize,
        };
        let value: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let exptime = if i % 4 == 0 { 100_000 } else { 0 };
        let mut request =
            format!("set {key} {} {exptime} {len}\r\n", rng.below(1 << 32)).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        c.expect(&request, b"STORED\r\n");
        keys.push(key);
    }
    for key in keys.iter().step_by(17) {
        c.expect(format!("delete {key}\r\n").as_bytes(), b"DELETED\r\n");
    }
    let kept = keys.iter().enumerate().filter(|(i, _)| i % 17 != 0);
    for (_, key) in kept.filter(|(i, _)| i % 13 == 3) {
        c.expect(
            format!("append {key} 0 0 4\r\nmore\r\n").as_bytes(),
            b"STORED\r\n",
        );
    }
    keys
}

fn stop(server: &mut ServerProcess, how: &str) {
    if how == "shutdown" {
        let mut c = server.connect();
        c.send(b"shutdown graceful\r\n");
        assert!(c.is_closed_by_server());
    } else {
        server.signal(how);
    }
    assert!(server.wait_exit().success(), "tern exited with an error");
}

#[test]
fn every_graceful_stop_saves_and_the_restart_restores_every_value_byte_for_byte() {
    let scratch = Scratch::new("graceful");
    let mut server = scratch.start(&["-A", "-m", "64"]);
    let mut c = server.connect();
    let keys = fill(&mut c, 3_000, 1);
    let mut expected = read_all(&mut c, &keys);
    assert!(expected.len() > 2_000);
    for how in ["TERM", "INT", "USR1", "shutdown"] {
        stop(&mut server, how);
        assert!(scratch.meta().exists(), "{how}: no metadata saved");
        server = scratch.start(&["-A", "-m", "64"]);
        let mut c = server.connect();
        let stats = c.stats("stats\r\n");
        assert!(!scratch.meta().exists(), "{how}: the clean mark stayed");
        assert_eq!(stats["restored_items"], expected.len().to_string(), "{how}");
        assert_eq!(stats["curr_items"], expected.len().to_string(), "{how}");
        let mut all = keys.clone();
        all.push("after".into());
        let got = read_all(&mut c, &all);
        let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
        assert!(missing.is_empty(), "{how}: {missing:?} lost");
        for (key, want) in &expected {
            assert_eq!(got.get(key), Some(want), "{how}: {key}");
        }
        // CAS uniques go on rising: none handed out before is handed out again.
        let highest = expected.values().map(|v| v.2).max().unwrap();
        c.expect(b"set after 0 0 1\r\nx\r\n", b"STORED\r\n");
        let after = read_all(&mut c, &["after".to_string()])["after"].2;
        assert!(after > highest, "{how}: CAS {after} after {highest}");
        expected.insert(
            "after".into(),
            read_all(&mut c, &["after".into()])["after"].clone(),
        );
        assert_eq!(read_all(&mut c, &all), expected);
    }
    let stats = server.connect().stats("stats settings\r\n");
    assert_eq!(stats["memory_file"], scratch.mem());
}

#[test]
fn kill_9_during_a_write_load_gives_an_empty_healthy_cache() {
    let scratch = Scratch::new("kill9");
    let mut server = scratch.start(&["-t", "2"]);
    fill(&mut server.connect(), 500, 2);
    stop(&mut server, "TERM");
    // Restored, so the metadata was there: the crash below must not leave it valid.
    let mut server = scratch.start(&["-t", "2"]);
    assert_ne!(server.connect().stats("stats\r\n")["restored_items"], "0");
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let mut c = server.connect();
            let stop_writing = stop_writing.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                // Until the server dies under it.
                while !stop_writing.load(Ordering::Relaxed) {
                    let set = format!("set w{w}-{i} 0 0 100 noreply\r\n{i:0100}\r\n");
                    if c.stream.write_all(set.as_bytes()).is_err() {
                        return;
                    }
                    i += 1;
                }
            })
        })
        .collect();
    // Writes are landing: wait until some of them show.
    let mut c = server.connect();
    let deadline = Instant::now() + PATIENCE;
    while c.stats("stats\r\n")["total_items"].parse::<u64>().unwrap() < 10_000 {
        assert!(Instant::now() < deadline, "the writers wrote nothing");
    }
    server.signal("KILL");
    server.wait_exit();
    stop_writing.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    let server = scratch.start(&["-t", "2"]);
    let mut c = server.connect();
    // A reply means the store is open, and its log line written.
    let stats = c.stats("stats\r\n");
    let log = scratch.log();
    assert!(
        log.contains("the cache starts empty: no metadata from a clean stop"),
        "{log}"
    );
    assert_eq!(
        (
            stats["curr_items"].as_str(),
            stats["restored_items"].as_str()
        ),
        ("0", "0")
    );
    c.expect(b"get w0-1\r\n", b"END\r\n");
    c.expect(b"set k 0 0 2\r\nok\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 2\r\nok\r\nEND\r\n");
}

/// A live item's value, to find in the memory file.
const MARKER: &[u8] = b"a value found once in the memory file: 8c1f0e5b";

/// A server stopped cleanly with items in its memory file.
fn saved(scratch: &Scratch, args: &[&str]) {
    let mut server = scratch.start(args);
    let mut c = server.connect();
    fill(&mut c, 300, 3);
    let mut set = format!("set marker 0 0 {}\r\n", MARKER.len()).into_bytes();
    set.extend_from_slice(MARKER);
    set.extend_from_slice(b"\r\n");
    c.expect(&set, b"STORED\r\n");
    stop(&mut server, "TERM");
    assert!(scratch.meta().exists());
}

/// Starts tern on the saved file and checks it starts empty, saying `why`.
fn starts_empty(scratch: &Scratch, args: &[&str], why: &str) {
    let server = scratch.start(args);
    let mut c = server.connect();
    // A reply means the store is open, and its log line written.
    assert_eq!(c.stats("stats\r\n")["curr_items"], "0");
    let log = scratch.log();
    assert!(
        log.contains("the cache starts empty") && log.contains(why),
        "{log}"
    );
    assert!(!scratch.meta().exists(), "the refused metadata stayed");
    c.expect(b"get key-3-1\r\n", b"END\r\n");
    c.expect(b"set k 0 0 2\r\nok\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 2\r\nok\r\nEND\r\n");
}

#[test]
fn other_settings_start_empty_and_say_why() {
    let scratch = Scratch::new("settings");
    saved(&scratch, &["-m", "64"]);
    starts_empty(&scratch, &["-m", "128"], "(-m)");
    saved(&scratch, &["-m", "64"]);
    starts_empty(&scratch, &["-m", "64", "-I", "2m"], "(-I)");
    saved(&scratch, &["-m", "64"]);
    starts_empty(&scratch, &["-m", "64", "-C"], "(-C)");
}

#[test]
fn a_damaged_memory_file_or_metadata_is_refused_with_a_message() {
    let scratch = Scratch::new("damaged");
    // A byte of a live item's value flipped.
    saved(&scratch, &[]);
    let mut bytes = std::fs::read(scratch.mem()).unwrap();
    let at = bytes
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .unwrap();
    bytes[at + 5] ^= 0x20;
    std::fs::write(scratch.mem(), &bytes).unwrap();
    drop(bytes);
    starts_empty(&scratch, &[], "checksum");
    // The memory file cut short.
    saved(&scratch, &[]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(scratch.mem())
        .unwrap();
    file.set_len(file.metadata().unwrap().len() / 2).unwrap();
    starts_empty(&scratch, &[], "truncated");
    // The metadata cut short after its header, or from something else (an empty one, or one
    // too short for its header, refuses to start: below).
    for meta in [
        &b"TERNHEAP\x02\x00\x00\x00"[..],
        b"not tern's metadata at all",
    ] {
        saved(&scratch, &[]);
        std::fs::write(scratch.meta(), meta).unwrap();
        starts_empty(&scratch, &[], "the metadata file");
    }
}

#[test]
fn an_empty_or_headerless_metadata_file_refuses_to_start() {
    // memcached 1.6.45 (`t/restart.t`, "Died with an empty metadata file") aborts on both,
    // before it maps the memory file:
    //   empty:          [restart] Failed to read a tag from metadata file
    //   printf 'T' >:   [restart] internal handler for metadata tag not found: :
    //                   [restart] corrupt metadata file
    let scratch = Scratch::new("headerless");
    for (meta, why) in [
        (
            &b""[..],
            "[restart] Failed to read a tag from metadata file: it is empty",
        ),
        (
            b"TERNHEAP\x02",
            "[restart] corrupt metadata file: 9 bytes, shorter than its 12-byte header",
        ),
    ] {
        saved(&scratch, &[]);
        std::fs::write(scratch.meta(), meta).unwrap();
        let memory = std::fs::read(scratch.mem()).unwrap();
        let status = scratch.start_fails(&[]);
        assert!(!status.success(), "{status}: {}", scratch.log());
        let log = scratch.log();
        assert!(log.contains(why), "{log}");
        assert!(log.contains(&scratch.meta().display().to_string()), "{log}");
        // Nothing was touched: the metadata stays to be looked at, the items stay in the file.
        assert_eq!(std::fs::read(scratch.meta()).unwrap(), meta);
        assert!(std::fs::read(scratch.mem()).unwrap() == memory);
        // Removing it is a fresh start, as a missing metadata file always is.
        std::fs::remove_file(scratch.meta()).unwrap();
        starts_empty(&scratch, &[], "no metadata from a clean stop");
    }
}

#[test]
fn a_memory_file_off_tmpfs_is_warned_about() {
    let scratch = Scratch::under(Path::new(env!("CARGO_TARGET_TMPDIR")), "disk");
    let fs_type = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(&scratch.dir)
        .output()
        .expect("stat");
    let fs_type = String::from_utf8(fs_type.stdout).unwrap();
    let on_memory = ["tmpfs", "hugetlbfs"].contains(&fs_type.trim());
    let server = scratch.start(&[]);
    // A reply means the store is open, and its log lines written.
    server
        .connect()
        .expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    let warned = scratch.log().contains("not on tmpfs or hugetlbfs");
    assert_eq!(warned, !on_memory, "{fs_type}: {}", scratch.log());
}

/// A tmpfs of its own size, mounted for one test and unmounted when dropped (so declare it
/// before whatever runs on it: the servers and files on it go first).
struct SmallTmpfs {
    dir: PathBuf,
}

impl SmallTmpfs {
    /// `None`, having said why, where this process may not mount (EPERM: not root, or no
    /// CAP_SYS_ADMIN, as in many containers).
    fn mount(name: &str, mib: u32) -> Option<SmallTmpfs> {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(format!("tern-tmpfs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c_dir = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let options = std::ffi::CString::new(format!("size={mib}m")).unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                c_dir.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            if err.raw_os_error() == Some(libc::EPERM) {
                println!(
                    "skipped: cannot mount a {mib} MiB tmpfs on {} ({err}); this test needs \
                     root (CAP_SYS_ADMIN)",
                    dir.display()
                );
                return None;
            }
            panic!("mount -t tmpfs on {}: {err}", dir.display());
        }
        Some(SmallTmpfs { dir })
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let c_dir = std::ffi::CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call. Detached, so that a file still
        // open on it (a test that failed half-way) cannot keep it mounted.
        unsafe { libc::umount2(c_dir.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// memcached and tern before this check map a sparse memory file: `-m 128` on a 32 MiB tmpfs
/// starts, then dies of SIGBUS once the tmpfs is full, losing every item. tern reserves the
/// file's space at start: a file system that cannot hold `-m` stops the start with the reason,
/// before anything is served, and a heap that fits keeps serving however full its file system
/// gets afterwards.
#[test]
fn a_memory_file_its_file_system_cannot_hold_is_refused_at_start() {
    let Some(tmpfs) = SmallTmpfs::mount("reserve", 32) else {
        return;
    };
    let scratch = Scratch::under(&tmpfs.dir, "reserve");
    let status = scratch.start_fails(&["-m", "128"]);
    assert!(!status.success(), "{status}: {}", scratch.log());
    let log = scratch.log();
    let why = format!(
        "cannot reserve 128 MiB for the memory file {}: No space left on device",
        scratch.mem()
    );
    assert!(log.contains(&why), "{log}");
    // Nothing of the failed reservation stays allocated.
    assert_eq!(std::fs::metadata(scratch.mem()).unwrap().len(), 0);

    // A heap that fits starts and serves, and goes on serving once something else has taken
    // the rest of the file system: its pages were reserved at start.
    let server = scratch.start(&["-m", "16"]);
    let mut c = server.connect();
    let filler_path = tmpfs.dir.join("filler");
    let mut filler = File::create(&filler_path).unwrap();
    let chunk = vec![0x5a_u8; 1 << 20];
    while filler.write_all(&chunk).is_ok() {}
    // Room for the log (and the metadata at a stop), none for a heap the size of -m.
    filler
        .set_len(filler.metadata().unwrap().len() - (1 << 20))
        .unwrap();
    let value: Vec<u8> = (0..50 << 10).map(|b| (b % 251) as u8).collect();
    // 64 MiB of 50 KiB values through a 16 MiB heap: every segment written, most of them again.
    for i in 0..1_300 {
        let mut set = format!("set big{i} {i} 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        c.expect(&set, b"STORED\r\n");
    }
    let got = read_all(&mut c, &["big1299".to_string()]);
    assert_eq!(got["big1299"], (value, 1299, got["big1299"].2));
    assert!(c.stats("stats\r\n")["evictions"].parse::<u64>().unwrap() > 0);
    drop(c);
    drop(server);
    drop(filler);
}

/// Random damage anywhere in the memory file or its metadata (memcached 1.6.45 spins forever
/// on 300 flipped bytes of its memory file, and serves wrong values after 30): tern starts
/// within `PATIENCE`, and every key either misses or has exactly the value, flags and CAS it
/// had at the stop.
#[test]
fn many_flipped_bytes_never_serve_a_wrong_value() {
    use std::os::unix::fs::FileExt;
    // Where the bytes flip: anywhere in the memory file (a 16 MiB heap mostly written, so
    // mostly items: headers, keys and values), only on its non-zero bytes (items only), or in
    // the metadata.
    let cases = [
        ("anywhere", 30),
        ("anywhere", 300),
        ("items", 30),
        ("items", 300),
        ("metadata", 30),
        ("metadata", 300),
    ];
    for (round, &(place, flips)) in cases.iter().enumerate() {
        let scratch = Scratch::new(&format!("flips-{round}"));
        let args = ["-m", "16"];
        let mut server = scratch.start(&args);
        let mut c = server.connect();
        let keys = fill(&mut c, 2_500, 10 + round as u64);
        let expected = read_all(&mut c, &keys);
        assert!(expected.len() > 1_000, "{}", expected.len());
        drop(c);
        stop(&mut server, "TERM");
        let target = if place == "metadata" {
            scratch.meta()
        } else {
            PathBuf::from(scratch.mem())
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&target)
            .unwrap();
        let len = file.metadata().unwrap().len();
        let mut rng = Rng(0x5eed_0000 + round as u64);
        for _ in 0..flips {
            let mut byte = [0u8];
            let mut at = rng.below(len);
            file.read_exact_at(&mut byte, at).unwrap();
            while place == "items" && byte[0] == 0 {
                at = rng.below(len);
                file.read_exact_at(&mut byte, at).unwrap();
            }
            byte[0] ^= 1 + rng.below(255) as u8;
            file.write_all_at(&byte, at).unwrap();
        }
        drop(file);
        let started = Instant::now();
        let server = scratch.start(&args);
        let mut c = server.connect();
        let stats = c.stats("stats\r\n");
        let took = started.elapsed();
        let got = read_all(&mut c, &keys);
        for (key, value) in &got {
            assert_eq!(
                Some(value),
                expected.get(key),
                "{flips} bytes flipped {place}: {key} came back different"
            );
        }
        println!(
            "{flips} bytes flipped {place}: serving in {} ms, {} of {} items restored{}",
            took.as_millis(),
            got.len(),
            expected.len(),
            scratch
                .log()
                .lines()
                .find(|l| l.contains("the cache starts empty"))
                .map(|l| format!(" ({})", l.trim()))
                .unwrap_or_default()
        );
        assert_eq!(stats["restored_items"], got.len().to_string());
        // Whatever came back, the cache works.
        c.expect(b"set k 0 0 2\r\nok\r\n", b"STORED\r\n");
        c.expect(b"get k\r\n", b"VALUE k 0 2\r\nok\r\nEND\r\n");
    }
}

/// memcached's `t/restart.t`: 2^17 items raise `hash_power_level` to 17, and it stays 17 once
/// they are deleted and across a warm restart (memcached's table never shrinks, and a restart
/// rebuilds it at its saved size).
#[test]
fn hash_power_level_stays_at_its_peak_through_deletes_and_a_restart() {
    let scratch = Scratch::new("hashpower");
    let mut server = scratch.start(&["-m", "128"]);
    let mut c = server.connect();
    let level = |c: &mut Conn| c.stats("stats\r\n")["hash_power_level"].clone();
    assert_eq!(level(&mut c), "16");
    let items = 1u32 << 17;
    for verb in ["set", "delete"] {
        let mut batch = Vec::new();
        for i in 0..items {
            let request = match verb {
                "set" => format!("set z{i} 0 0 0 noreply\r\n\r\n"),
                _ => format!("delete z{i} noreply\r\n"),
            };
            batch.extend_from_slice(request.as_bytes());
            if batch.len() > 64 << 10 || i + 1 == items {
                c.send(&batch);
                batch.clear();
            }
        }
        c.expect(b"mn\r\n", b"MN\r\n");
        assert_eq!(level(&mut c), "17", "after the {verb}s");
    }
    c.expect(b"flush_all\r\n", b"OK\r\n");
    assert_eq!(level(&mut c), "17", "after flush_all");
    stop(&mut server, "TERM");
    let server = scratch.start(&["-m", "128"]);
    assert_eq!(level(&mut server.connect()), "17", "after the restart");
}
