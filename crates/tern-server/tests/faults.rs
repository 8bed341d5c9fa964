//! Faults an operator meets, end to end: running out of descriptors, and `-o idle_timeout`
//! judging connections that are not idle. Each test provokes the fault for real (a lowered
//! `RLIMIT_NOFILE`, a stopped process) and checks what clients see. docs/reliability.md lists
//! them.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{
    free_port, io_engine_args, memcached_bin, tern_bin, Conn, ServerProcess, PATIENCE,
};

/// Starts `tern serve` on a free port with `RLIMIT_NOFILE` set to `soft:hard` before it runs,
/// its stderr kept for the test; once it accepts, the server, or how it exited and what it said.
fn tern_with_file_limit(
    soft: u64,
    hard: u64,
    args: &[&str],
) -> Result<ServerProcess, (ExitStatus, String)> {
    let port = free_port();
    let mut cmd = Command::new(tern_bin());
    cmd.arg("serve")
        .args(["-l", "127.0.0.1", "-p", &port.to_string()])
        .args(io_engine_args(args))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    with_file_limit(&mut cmd, soft, hard);
    let mut child = cmd.spawn().expect("spawn tern");
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Err((status, stderr_of(&mut child)));
        }
        if tern_testkit::listening(port) {
            return Ok(ServerProcess { child, port });
        }
        assert!(Instant::now() < deadline, "tern neither started nor exited");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// linux/capability.h's number (libc has none).
const CAP_SYS_RESOURCE: libc::c_ulong = 24;

/// Has `cmd` run with `RLIMIT_NOFILE` at `soft:hard`, and unable to raise the hard limit even
/// as root: CAP_SYS_RESOURCE leaves its capability bounding set (a user without the capability
/// had none to drop, and the drop fails harmlessly).
fn with_file_limit(cmd: &mut Command, soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: runs in the child between fork and exec, where only async-signal-safe calls are
    // allowed; prctl and setrlimit are plain system calls, reading only `limit`, copied into
    // the closure.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0);
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}

/// What a child that has exited (or been killed) wrote to its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

/// The soft and hard open-files limits of a running process, from /proc.
fn file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// User plus system CPU time of a process so far, in clock ticks, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // After the command name: state is field 3 of stat(5), utime 14 and stime 15.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a configuration value and touches no memory of ours.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as u64
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stat(conn: &mut Conn, name: &str) -> u64 {
    let stats = conn.stats("stats\r\n");
    stats
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in stats: {stats:?}"))
        .parse()
        .unwrap()
}

/// With 64 descriptors and 200 clients, tern takes in what its descriptors allow; the rest wait
/// in the backlog, and are taken in as connections close: none waits forever, and the waiting
/// costs no CPU to speak of.
#[test]
fn out_of_descriptors_clients_wait_and_are_served_as_descriptors_free() {
    // -c 64 is allowed (the hard limit holds it), but 64 descriptors cannot hold 64 clients
    // beside the listeners, polls and the rest: tern meets EMFILE below -c.
    let server = tern_with_file_limit(64, 64, &["-c", "64", "-t", "2"]).expect("tern starts");
    let (pid, port) = (server.pid(), server.port);
    assert_eq!(file_limits(pid), (64, 64));
    // Taken in (answered) before the descriptors run out: it reads the stats throughout.
    let mut admin = server.connect();
    assert!(admin.line("version\r\n").starts_with("VERSION "));

    let mut clients: Vec<TcpStream> = (0..200)
        .map(|_| {
            // The kernel completes the handshake into the listener's backlog, accepted or not.
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            s.write_all(b"version\r\n").unwrap();
            s
        })
        .collect();
    wait_for("tern to run out of descriptors", || {
        stat(&mut admin, "listen_disabled_num") >= 1
    });
    let open = stat(&mut admin, "curr_connections");
    assert!(open < 64, "{open} connections open under 64 descriptors");
    assert_eq!(stat(&mut admin, "accepting_conns"), 0);

    // Clients wait without the server spinning: a retry loop would burn a whole core. One
    // second of wall time is the subject here, not a synchronisation; CPU time counts only
    // what tern itself ran, so a loaded machine cannot inflate it.
    let (cpu_before, wall_before) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let cpu = (cpu_ticks(pid) - cpu_before) as f64 / clock_ticks_per_second() as f64;
    let wall = wall_before.elapsed().as_secs_f64();
    eprintln!(
        "CPU while clients wait at EMFILE: {:.1} % of a core",
        100.0 * cpu / wall
    );
    assert!(
        cpu < 0.5 * wall,
        "tern used {cpu:.2} s of CPU in {wall:.2} s at EMFILE"
    );

    // 160 leave, among them every client taken in so far (at most 63 of the first 160
    // connected, whatever the kernel's spread over the two listeners): the 40 left, all
    // waiting or served, fit in the descriptors freed and are answered.
    let rest = clients.split_off(160);
    drop(clients);
    for mut client in rest {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while !got.ends_with(b"\r\n") {
            match client.read(&mut buf) {
                Ok(0) => panic!("closed before the reply"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("a waiting client got no reply in {PATIENCE:?}: {e}"),
            }
        }
        assert!(got.starts_with(b"VERSION "), "{got:?}");
    }
    // Every client gone: a fresh one is answered.
    let mut fresh = server.connect();
    assert!(fresh.line("version\r\n").starts_with("VERSION "));
    wait_for("tern to accept again", || {
        stat(&mut admin, "accepting_conns") == 1
    });
    let stats = admin.stats("stats\r\n");
    assert!(stats["time_in_listen_disabled_us"].parse::<u64>().unwrap() > 0);
}

/// `-c` needs descriptors: tern raises its soft limit as far as the hard one allows.
#[test]
fn serve_raises_the_open_files_limit_to_what_c_needs() {
    let server = tern_with_file_limit(64, 4096, &["-c", "1000", "-t", "2"]).expect("tern starts");
    let (soft, hard) = file_limits(server.pid());
    assert!((1000..=4096).contains(&soft), "soft limit {soft}");
    assert_eq!(hard, 4096);
    assert!(server.connect().line("version\r\n").starts_with("VERSION "));
}

/// Above a hard limit it may not raise, tern refuses to start, as memcached does ("failed to
/// set rlimit for open files").
#[test]
fn serve_refuses_a_c_above_the_hard_limit_it_cannot_raise() {
    let Err((status, stderr)) = tern_with_file_limit(64, 64, &["-c", "1000", "-t", "2"]) else {
        panic!("tern started with -c 1000 under a hard limit of 64");
    };
    assert!(!status.success());
    assert!(
        stderr.contains("failed to set rlimit for open files")
            && stderr.contains("smaller maxconns"),
        "{stderr}"
    );
    // So does the reference.
    let mut memcached = Command::new(memcached_bin());
    memcached
        .args(["-l", "127.0.0.1", "-p", &free_port().to_string(), "-U", "0"])
        .args(["-u", "root", "-c", "1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    with_file_limit(&mut memcached, 64, 64);
    let out = memcached.output().expect("run memcached");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("failed to set rlimit for open files"),
        "{stderr}"
    );
}

/// A hard limit that holds `-c` but not tern's own descriptors beside: tern starts, raises the
/// soft limit to the hard one, and says what it lacks.
#[test]
fn serve_warns_when_the_hard_limit_holds_c_but_not_its_own_descriptors() {
    let mut server = tern_with_file_limit(32, 64, &["-c", "60", "-t", "2"]).expect("tern starts");
    let (soft, hard) = file_limits(server.pid());
    assert!(server.connect().line("version\r\n").starts_with("VERSION "));
    let _ = server.child.kill();
    let _ = server.child.wait();
    let stderr = stderr_of(&mut server.child);
    assert_eq!((soft, hard), (64, 64));
    assert!(
        stderr.contains("open files limited to 64") && stderr.contains("-c 60 needs"),
        "{stderr}"
    );
}

/// Sends `version` every 10 ms on each of `conns` connections for `secs` seconds; panics on
/// any connection the server closes.
fn steady_traffic(server: &ServerProcess, conns: usize, secs: u64) {
    let mut clients: Vec<Conn> = (0..conns).map(|_| server.connect()).collect();
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        for c in &mut clients {
            assert!(c.line("version\r\n").starts_with("VERSION "));
        }
        // The pace is the subject: a request every 10 ms per connection.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A connection that sends a request every 10 ms is never idle, whatever `--idle-timeout`.
/// Five seconds are enough: the old rule (whole seconds of the store clock) closed such a
/// connection at almost every once-a-second check where its last request fell in the second
/// before, which took 18 of 20 within two or three checks; five seconds hold at least four.
#[test]
fn idle_timeout_spares_a_client_sending_every_10ms() {
    let server = ServerProcess::tern(&["--idle-timeout", "1", "-t", "2"]);
    steady_traffic(&server, 10, 5);
    let mut admin = server.connect();
    assert_eq!(stat(&mut admin, "idle_kicks"), 0);
    // memcached passes the same (its rule: more than the timeout on its clock).
    let memcached = ServerProcess::memcached(&["-o", "idle_timeout=1"]);
    steady_traffic(&memcached, 10, 5);
}

/// Whether every thread of `pid` is stopped (state T in /proc).
fn all_threads_stopped(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .all(|task| {
            let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
            matches!(
                stat.rsplit_once(')').unwrap().1.split_whitespace().next(),
                Some("T")
            )
        })
}

/// Stopped for longer than `--idle-timeout` with requests waiting, tern serves them once it
/// runs again: a connection with input is not idle, however old its last request. One with
/// nothing to say is, and only that one is counted in `idle_kicks`.
#[test]
fn idle_timeout_serves_requests_that_waited_through_a_stop() {
    // A timeout of 3 s leaves the steps after the stop 3 s before the busy connections could
    // be idle again; the stop of 4 s outlasts it.
    let server = ServerProcess::tern(&["--idle-timeout", "3", "-t", "2"]);
    let mut busy: Vec<Conn> = (0..20).map(|_| server.connect()).collect();
    for c in &mut busy {
        assert!(c.line("version\r\n").starts_with("VERSION "));
    }
    let mut quiet = server.connect();
    assert!(quiet.line("version\r\n").starts_with("VERSION "));

    server.signal("STOP");
    wait_for("tern to stop", || all_threads_stopped(server.pid()));
    for (i, c) in busy.iter_mut().enumerate() {
        c.send(format!("set k{i} 0 0 1\r\nv\r\nget k{i}\r\n").as_bytes());
    }
    // The stop outlasting the timeout is the subject.
    std::thread::sleep(Duration::from_secs(4));
    server.signal("CONT");

    for (i, c) in busy.iter_mut().enumerate() {
        let reply = c.read_until(b"END\r\n");
        assert_eq!(
            String::from_utf8_lossy(&reply),
            format!("STORED\r\nVALUE k{i} 0 1\r\nv\r\nEND\r\n")
        );
    }
    // The quiet one, without input since before the stop, is closed.
    let mut buf = [0u8; 16];
    match quiet.stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the quiet connection was not closed: {other:?}"),
    }
    assert_eq!(stat(&mut server.connect(), "idle_kicks"), 1);
    for c in &mut busy {
        assert!(c.line("version\r\n").starts_with("VERSION "));
    }
}
