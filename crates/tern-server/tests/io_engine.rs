//! `--io-engine`: the io_uring worker loop serves, and `stats settings` names the engine the
//! workers run. (The protocol tests run once more under `TERN_TEST_IO_ENGINE=uring`, see .ci/run.)

use tern_testkit::ServerProcess;

fn engine(server: &ServerProcess) -> String {
    let settings = server.connect().stats("stats settings\r\n");
    settings["io_engine"].clone()
}

#[test]
fn the_uring_engine_serves_and_says_so() {
    // This kernel allows io_uring where the test runs (CI's); a kernel without it would fall
    // back to epoll with a warning, and this test would say so.
    let uring = ServerProcess::tern(&["--io-engine=uring", "-t", "2"]);
    assert_eq!(engine(&uring), "uring");
    let mut conn = uring.connect();
    conn.send(b"set k 0 0 5\r\nhello\r\nget k\r\n");
    assert_eq!(
        conn.read_until(b"END\r\n"),
        b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n"
    );
    // Many connections at once, each served in its turn, replies in order.
    let mut conns: Vec<_> = (0..20).map(|_| uring.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(format!("set key{i} 0 0 1\r\n{}\r\nget key{i}\r\n", i % 10).as_bytes());
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let want = format!("STORED\r\nVALUE key{i} 0 1\r\n{}\r\nEND\r\n", i % 10);
        assert_eq!(c.read_until(b"END\r\n"), want.as_bytes());
    }
    let epoll = ServerProcess::tern(&["--io-engine=epoll"]);
    assert_eq!(engine(&epoll), "epoll");
}

#[test]
fn a_client_that_closes_is_closed_and_counted() {
    let server = ServerProcess::tern(&["--io-engine=uring", "-t", "1"]);
    let mut watcher = server.connect();
    let before = watcher.stats("stats\r\n");
    let count = |stats: &std::collections::HashMap<String, String>, name: &str| -> u64 {
        stats[name].parse().unwrap()
    };
    for _ in 0..5 {
        let mut c = server.connect();
        c.send(b"version\r\n");
        c.read_until(b"\r\n");
        c.send(b"quit\r\n");
        assert!(c.is_closed_by_server(), "quit closes the connection");
    }
    let after = watcher.stats("stats\r\n");
    assert_eq!(count(&after, "curr_connections"), 1);
    assert_eq!(
        count(&after, "total_connections") - count(&before, "total_connections"),
        5
    );
}
