//! The admin endpoint over real TCP on 127.0.0.1, with a fake source standing in for the server,
//! and `/metrics` parsed by Python's `prometheus_client` (installed by .ci/run).

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tern_admin::{
    AdminServer, AdminSource, Command, HotKeyConfig, HotKeys, HotKeysReport, Outcome, SegmentStats,
    ServerStats, Snapshot, StoreStats, WorkerMetrics,
};
use tern_testkit::http_get;
use tern_testkit::prometheus::{self, sample};

struct FakeServer {
    workers: Vec<WorkerMetrics>,
    hot: HotKeys,
}

impl AdminSource for FakeServer {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            version: "0.1.0-test \"quoted\" back\\slash".into(),
            pid: 4242,
            uptime_seconds: 17,
            time_unix_seconds: 1_800_000_000,
            rusage_user_seconds: 0.25,
            rusage_system_seconds: 0.5,
            max_connections: 1024,
            accepting_connections: true,
            listen_disabled_num: 0,
            time_in_listen_disabled_us: 0,
            idle_timeout_seconds: 0,
            workers: self.workers.iter().map(WorkerMetrics::snapshot).collect(),
            restore: None,
            server: ServerStats::default(),
            store: StoreStats {
                items: 3,
                total_items: 5,
                bytes: 300,
                limit_bytes: 64 << 20,
                index_bytes: 8 << 10,
                index_slots: 1 << 10,
                evictions: 2,
                reclaimed: 1,
                expired_unfetched: 1,
                evicted_unfetched: 2,
                oldest_item_age_seconds: 40,
                segments: SegmentStats {
                    segment_bytes: 1 << 20,
                    segments_total: 8,
                    segments_free: 6,
                    malloced_bytes: 2 << 20,
                    live_bytes: 300,
                    dead_bytes: 100,
                    merges: 1,
                    segments_expired: 4,
                },
                ..StoreStats::default()
            },
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("maxbytes".into(), (64u64 << 20).to_string()),
            ("num_threads".into(), "2".into()),
        ]
    }

    fn hot_keys(&self, n: usize) -> HotKeysReport {
        self.hot.top(n)
    }

    fn health(&self) -> Result<(), String> {
        Ok(())
    }
}

/// The known sequence: what two workers would record for it.
fn fake_server() -> FakeServer {
    let w0 = WorkerMetrics::new();
    let w1 = WorkerMetrics::new();
    for _ in 0..3 {
        w0.record(Command::Get, Outcome::Hit, 800);
    }
    w1.record(Command::Get, Outcome::Miss, 3_000);
    w1.count(Command::Get, Outcome::Expired); // a second key of the same multi-get
    w0.conn_yield();
    w0.record(Command::Set, Outcome::Stored, 1_500);
    w1.record(Command::Set, Outcome::Stored, 1_500);
    w1.record(Command::Add, Outcome::NotStored, 900);
    w0.record(Command::Cas, Outcome::Exists, 700);
    w0.record(Command::Delete, Outcome::Miss, 400);
    w0.record(Command::Incr, Outcome::Hit, 400);
    w0.wakeup();
    w0.wakeup();
    w1.wakeup();
    w0.read_bytes(1000);
    w1.read_bytes(24);
    w0.written_bytes(512);
    w0.conn_opened();
    w1.conn_opened();
    w1.conn_opened();
    w1.conn_closed();
    let hot = HotKeys::new(HotKeyConfig {
        sample_every: 1,
        ..HotKeyConfig::default()
    });
    let s = hot.sampler();
    for _ in 0..5 {
        s.record(b"hot");
    }
    s.record(b"warm");
    FakeServer {
        workers: vec![w0, w1],
        hot,
    }
}

#[test]
fn metrics_parse_with_prometheus_client_and_match_the_sequence() {
    let server = AdminServer::start("127.0.0.1:0", Arc::new(fake_server())).unwrap();
    let (status, head, body) = http_get(server.local_addr(), "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let f = prometheus::parse(&body);

    let cmd = |command: &str, status: &str| {
        sample(
            &f,
            "memcached_commands",
            "memcached_commands_total",
            &[("command", command), ("status", status)],
        )
    };
    assert_eq!(f["memcached_commands"]["type"], "counter");
    assert_eq!(cmd("get", "hit"), 3.0);
    assert_eq!(cmd("get", "miss"), 2.0); // a miss and an expired item
    assert_eq!(cmd("set", "hit"), 3.0); // set, set, add: memcached's cmd_set less cas
    assert_eq!(cmd("cas", "badval"), 1.0);
    assert_eq!(cmd("delete", "miss"), 1.0);
    assert_eq!(cmd("incr", "hit"), 1.0);
    assert_eq!(cmd("touch", "hit"), 0.0);

    let one = |family: &str, name: &str| sample(&f, family, name, &[]);
    assert_eq!(one("memcached_up", "memcached_up"), 1.0);
    assert_eq!(
        one("memcached_current_items", "memcached_current_items"),
        3.0
    );
    assert_eq!(
        one("memcached_items_evicted", "memcached_items_evicted_total"),
        2.0
    );
    assert_eq!(
        one(
            "memcached_items_reclaimed",
            "memcached_items_reclaimed_total"
        ),
        1.0
    );
    assert_eq!(
        one("memcached_current_bytes", "memcached_current_bytes"),
        300.0
    );
    assert_eq!(
        one("memcached_limit_bytes", "memcached_limit_bytes"),
        67108864.0
    );
    assert_eq!(
        one(
            "memcached_current_connections",
            "memcached_current_connections"
        ),
        2.0
    );
    assert_eq!(
        one("memcached_connections", "memcached_connections_total"),
        3.0
    );
    assert_eq!(
        one("memcached_read_bytes", "memcached_read_bytes_total"),
        1024.0
    );
    assert_eq!(
        one("memcached_written_bytes", "memcached_written_bytes_total"),
        512.0
    );
    assert_eq!(
        one("memcached_malloced_bytes", "memcached_malloced_bytes"),
        2.0 * 1048576.0
    );
    assert_eq!(
        sample(
            &f,
            "memcached_version",
            "memcached_version",
            &[("version", "0.1.0-test \"quoted\" back\\slash")]
        ),
        1.0
    );

    assert_eq!(
        sample(
            &f,
            "tern_commands",
            "tern_commands_total",
            &[("command", "add"), ("status", "not_stored")]
        ),
        1.0
    );
    assert_eq!(f["tern_command_duration_seconds"]["type"], "histogram");
    let get_le = |le: &str| {
        sample(
            &f,
            "tern_command_duration_seconds",
            "tern_command_duration_seconds_bucket",
            &[("command", "get"), ("le", le)],
        )
    };
    assert_eq!(get_le("0.000000512"), 0.0);
    assert_eq!(get_le("0.000001024"), 3.0); // the three 800 ns hits
    assert_eq!(get_le("0.000004096"), 4.0); // and the 3 us miss
    assert_eq!(get_le("+Inf"), 4.0);
    let get_sum = sample(
        &f,
        "tern_command_duration_seconds",
        "tern_command_duration_seconds_sum",
        &[("command", "get")],
    );
    assert!((get_sum - 5.4e-6).abs() < 1e-12, "{get_sum}");
    let worker = |family: &str, name: &str, w: &str| sample(&f, family, name, &[("worker", w)]);
    assert_eq!(
        worker("tern_worker_requests", "tern_worker_requests_total", "0"),
        7.0
    );
    assert_eq!(
        worker("tern_worker_requests", "tern_worker_requests_total", "1"),
        4.0
    );
    assert_eq!(
        one(
            "memcached_connections_yielded",
            "memcached_connections_yielded_total"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &f,
            "tern_commands",
            "tern_commands_total",
            &[("command", "get"), ("status", "expired")]
        ),
        1.0
    );
    assert_eq!(
        worker("tern_worker_wakeups", "tern_worker_wakeups_total", "0"),
        2.0
    );
    assert_eq!(
        worker("tern_worker_connections", "tern_worker_connections", "1"),
        1.0
    );
    assert_eq!(
        sample(&f, "tern_segments", "tern_segments", &[("state", "used")]),
        2.0
    );
    assert_eq!(
        one("tern_segments_expired", "tern_segments_expired_total"),
        4.0
    );
}

#[test]
fn json_text_and_error_routes() {
    let server = AdminServer::start("127.0.0.1:0", Arc::new(fake_server())).unwrap();
    let addr = server.local_addr();

    let (status, head, body) = http_get(addr, "/stats");
    assert_eq!(status, 200);
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: application/json"));
    let stats: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["stats"]["cmd_get"], 5);
    assert_eq!(stats["stats"]["get_expired"], 1);
    assert_eq!(stats["stats"]["conn_yields"], 1);
    assert_eq!(stats["stats"]["get_hits"], 3);
    assert_eq!(stats["stats"]["cmd_set"], 4);
    assert_eq!(stats["stats"]["cas_badval"], 1);
    assert_eq!(stats["stats"]["curr_connections"], 2);
    assert_eq!(stats["stats"]["threads"], 2);
    assert_eq!(stats["stats"]["rusage_system"], 0.5);
    assert_eq!(stats["commands"]["get"]["outcomes"]["hit"], 3);
    assert_eq!(stats["commands"]["get"]["latency"]["count"], 4);
    assert_eq!(stats["commands"]["get"]["latency"]["p50_us_at_most"], 1.024);
    assert_eq!(stats["workers"][1]["wakeups"], 1);
    assert_eq!(stats["segments"]["segments_used"], 2);

    let (status, _, body) = http_get(addr, "/health");
    assert_eq!((status, body.as_str()), (200, "OK\n"));
    let (status, _, body) = http_get(addr, "/version");
    assert_eq!(
        (status, body.as_str()),
        (200, "0.1.0-test \"quoted\" back\\slash\n")
    );

    let (status, _, body) = http_get(addr, "/settings");
    assert_eq!(status, 200);
    let settings: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(settings["maxbytes"], "67108864");
    assert_eq!(settings["num_threads"], "2");

    let (status, _, body) = http_get(addr, "/hotkeys?n=1");
    assert_eq!(status, 200);
    let hot: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(hot["sample_every"], 1);
    assert_eq!(hot["keys"].as_array().unwrap().len(), 1);
    assert_eq!(hot["keys"][0]["key"], "hot");
    assert_eq!(hot["keys"][0]["estimated_requests"], 5);
    let (_, _, body) = http_get(addr, "/hotkeys");
    let hot: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(hot["keys"][1]["key"], "warm");

    assert_eq!(http_get(addr, "/hotkeys?n=x").0, 400);
    assert_eq!(http_get(addr, "/nope").0, 404);
    assert_eq!(http_get(addr, "/").0, 404);
    drop(server);
    // tiny_http closes its listener from its accept thread once woken, so give it a moment.
    let closed = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        TcpStream::connect(addr).is_err()
    });
    assert!(closed, "endpoint still listening after drop");
}
