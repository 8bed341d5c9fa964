//! `--pin` and `--numa-node` on the real binary: the kernel's view of each thread's CPUs
//! (/proc/<pid>/task/*/status) and `stats settings`.

use std::path::Path;

use tern_testkit::ServerProcess;

/// (thread name, Cpus_allowed_list) for every thread of `pid`, once its `workers` worker threads
/// and the clock thread (started after them) exist: the listening sockets accept before the
/// threads are spawned, so a connectable server may not have all its threads yet.
fn thread_cpus(pid: u32, workers: usize) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + tern_testkit::PATIENCE;
    loop {
        let threads = read_thread_cpus(pid);
        let started = threads
            .iter()
            .filter(|(name, _)| name.starts_with("tern-worker-"))
            .count();
        if started == workers && threads.iter().any(|(name, _)| name == "tern-clock") {
            return threads;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{workers} workers never appeared: {threads:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn read_thread_cpus(pid: u32) -> Vec<(String, String)> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let mut threads = Vec::new();
    for task in std::fs::read_dir(tasks).unwrap() {
        let dir = task.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap();
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in status")
            .trim()
            .to_string();
        threads.push((name.trim().to_string(), allowed));
    }
    threads
}

/// One `stats settings` value.
fn stat(conn: &mut tern_testkit::Conn, name: &str) -> String {
    let settings = conn.stats("stats settings\r\n");
    settings
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {settings:?}"))
        .clone()
}

#[test]
fn pin_puts_the_worker_on_its_cpu() {
    let server = ServerProcess::tern(&["--pin", "1", "-t", "1"]);
    let threads = thread_cpus(server.pid(), 1);
    let worker = threads
        .iter()
        .find(|(name, _)| name == "tern-worker-0")
        .unwrap_or_else(|| panic!("no tern-worker-0 among {threads:?}"));
    assert_eq!(worker.1, "1", "{threads:?}");
    // An explicit list leaves the other threads where they were.
    let clock = threads
        .iter()
        .find(|(name, _)| name == "tern-clock")
        .unwrap();
    assert_ne!(clock.1, "1", "{threads:?}");
    assert_eq!(stat(&mut server.connect(), "worker_cpus"), "1");
}

#[test]
fn unpinned_by_default() {
    let server = ServerProcess::tern(&["-t", "2"]);
    let allowed: Vec<_> = thread_cpus(server.pid(), 2)
        .into_iter()
        .filter(|(name, _)| name.starts_with("tern-worker-"))
        .map(|(_, cpus)| cpus)
        .collect();
    // The workers keep the affinity the server was started with: this test's own.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    assert_eq!(allowed, [own, own]);
    assert_eq!(stat(&mut server.connect(), "worker_cpus"), "unpinned");
}

#[test]
fn numa_node_binds_memory_and_threads_to_the_node() {
    let server = ServerProcess::tern(&["--numa-node", "0", "-t", "1"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    assert!(status.contains("Mems_allowed_list:\t0\n"), "{status}");
    let mut conn = server.connect();
    assert_eq!(stat(&mut conn, "numa_node"), "0");
    assert_eq!(conn.line("set k 0 0 1\r\nv\r\n"), "STORED\r\n");
}

#[test]
fn impossible_placements_fail_at_start_with_a_message() {
    for args in [
        &["--pin", "4095"][..],
        &["--numa-node", "63"],
        &["--pin", "x"],
    ] {
        // A port of its own, not `-p 0`: this server listens before its placement fails. A
        // port the kernel picked could be the one another test's server has just probed and
        // not yet bound again with SO_REUSEPORT; both would then share it, and this server's
        // exit would reset the other test's connections queued on its socket (seen in CI).
        let port = tern_testkit::free_port().to_string();
        let out = std::process::Command::new(tern_testkit::tern_bin())
            .args(["serve", "-l", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--pin") || err.contains("NUMA"),
            "{args:?}: {err}"
        );
    }
}
