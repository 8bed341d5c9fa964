//! Memory that does not grow with clients: 10,000 idle connections, each having done one set
//! and one get, cost tern at most 1 KiB each (its buffers go back to the worker's pool at the
//! end of every turn), measured as the server's RSS growth beside memcached's.

use std::io::{Read, Write};
use std::net::TcpStream;

use tern_testkit::ServerProcess;

const CONNECTIONS: usize = 10_000;

/// Raises this process's open-file limit to its hard limit (servers started from here inherit
/// it), failing clearly when that is too low for the test.
fn raise_file_limit(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        assert!(
            limit.rlim_max >= needed,
            "the hard open-file limit ({}) is below the {needed} this test needs",
            limit.rlim_max
        );
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// Resident set size of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One set and one get, answered.
fn set_and_get(stream: &mut TcpStream, key: usize) {
    stream
        .write_all(format!("set k{key} 0 0 1\r\nv\r\nget k{key}\r\n").as_bytes())
        .unwrap();
    let want = format!("STORED\r\nVALUE k{key} 0 1\r\nv\r\nEND\r\n");
    let mut got = vec![0; want.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(got, want.as_bytes());
}

/// RSS growth in KiB of `server` once `CONNECTIONS` clients have done a set and a get and
/// idle, from a baseline taken after one such client.
fn idle_connections_growth(server: &ServerProcess) -> (u64, Vec<TcpStream>) {
    let connect = || TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut first = connect();
    set_and_get(&mut first, 0);
    let before = rss_kib(server.pid());
    let mut clients = vec![first];
    for key in 1..=CONNECTIONS {
        let mut stream = connect();
        set_and_get(&mut stream, key);
        clients.push(stream);
    }
    let after = rss_kib(server.pid());
    (after.saturating_sub(before), clients)
}

#[test]
fn ten_thousand_idle_connections_cost_at_most_a_kib_each() {
    raise_file_limit(CONNECTIONS as u64 + 100);
    let max_conns = (CONNECTIONS + 100).to_string();

    let memcached = ServerProcess::memcached(&["-c", &max_conns]);
    let (theirs, clients) = idle_connections_growth(&memcached);
    drop(clients);
    drop(memcached);

    let tern = ServerProcess::tern(&["-c", &max_conns]);
    let (ours, clients) = idle_connections_growth(&tern);
    eprintln!(
        "RSS growth for {CONNECTIONS} idle connections: tern {ours} KiB, memcached {theirs} KiB"
    );
    assert!(
        ours <= CONNECTIONS as u64,
        "tern grew by {ours} KiB for {CONNECTIONS} idle connections (memcached: {theirs} KiB)"
    );

    // The buffers they used are back in the pools but for the last few connections each of
    // the 4 workers served (at most 16 per worker keep theirs until its next sweep).
    let stats = tern.connect().stats("stats\r\n");
    assert_eq!(
        stats["curr_connections"],
        (CONNECTIONS + 2).to_string(),
        "{stats:?}"
    );
    let stat = |name: &str| stats[name].parse::<u64>().unwrap();
    let most_held = 4 * 16;
    assert!(
        stat("read_buf_bytes") - stat("read_buf_bytes_free") <= most_held * 16 * 1024,
        "{stats:?}"
    );
    assert!(stat("response_obj_count") <= most_held + 4, "{stats:?}");
    drop(clients);
}
