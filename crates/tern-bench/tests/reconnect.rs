//! `--reconnect`: when the server closes a connection with a request unanswered, tern bench opens
//! a new one and sends that request again; without it the closed connection is an error.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use tern_bench::run::run;
use tern_bench::workload::Workload;

/// Answers `get`s with `END`, and on each connection reads a tenth request it never answers
/// before closing: the client sees the connection closed with that request in flight.
fn closing_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut line = String::new();
            for _ in 0..9 {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0
                    || writer.write_all(b"END\r\n").is_err()
                {
                    break;
                }
            }
            line.clear();
            let _ = reader.read_line(&mut line);
        }
    });
    port
}

fn workload(port: u16, reconnect: bool) -> Workload {
    Workload {
        servers: vec![format!("127.0.0.1:{port}")],
        connections: 1,
        pipeline: 1,
        mix: "get:1".into(),
        preload: false,
        requests: Some(100),
        reconnect,
        ..Workload::default()
    }
}

#[test]
fn a_closed_connection_is_reopened_and_its_request_sent_again() {
    let port = closing_server();
    let r = run(&workload(port, true), None, &mut |_| {}).unwrap();
    assert_eq!(r.requests, 100);
    assert_eq!(r.counts.misses, 100);
    // Nine answered per connection: the tenth request of each went again on the next one.
    assert!(
        r.counts.reconnects >= 100 / 9,
        "{} reconnects",
        r.counts.reconnects
    );
    assert_eq!(r.counts.unanswered, 0);
    assert_eq!(r.errors_total, 0, "{:?}", r.counts.errors);
}

#[test]
fn without_reconnect_a_closed_connection_ends_the_run() {
    let port = closing_server();
    let err = run(&workload(port, false), None, &mut |_| {}).unwrap_err();
    assert!(
        format!("{err:#}").contains("closed every connection"),
        "{err:#}"
    );
}
