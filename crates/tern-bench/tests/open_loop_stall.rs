//! Coordinated omission: when the server stalls for 100 ms, an open loop keeps its schedule, so the
//! requests due during the stall wait, and the percentiles must show that wait.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_bench::run::run;
use tern_bench::workload::Workload;

/// Answers every line with `END` (a get's miss; tern bench's `stats` finds no counters), except
/// that it sleeps 100 ms once, 500 ms in.
fn stalling_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = Instant::now();
    let stalled = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            let stalled = stalled.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    if started.elapsed() > Duration::from_millis(500)
                        && !stalled.swap(true, Ordering::Relaxed)
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    if writer.write_all(b"END\r\n").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    port
}

#[test]
fn open_loop_p99_shows_a_100ms_stall() {
    let port = stalling_server();
    let w = Workload {
        servers: vec![format!("127.0.0.1:{port}")],
        connections: 1,
        pipeline: 1,
        mix: "get:1".into(),
        preload: false,
        rate: Some(1_000.0),
        duration: "1500ms".into(),
        ..Workload::default()
    };
    let r = run(&w, None, &mut |_| {}).unwrap();
    // ~100 of ~1500 requests were due during the stall: their waits (up to 100 ms) are over 1% of
    // all requests, so p99 is a good part of the stall. A closed loop would charge it to one.
    assert!(r.latency_us.p99 >= 50_000.0, "p99 {} us", r.latency_us.p99);
    assert!(r.latency_us.max >= 95_000.0, "max {} us", r.latency_us.max);
    assert!(r.counts.late >= 50, "late {}", r.counts.late);
    assert_eq!(r.errors_total, 0);
}
