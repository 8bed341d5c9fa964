//! Issue 7 end to end against the real binary: a known sequence of commands, then `stats` checked
//! field by field, `/metrics` scraped over HTTP and parsed by Python's `prometheus_client`, the
//! other `stats` subcommands and admin endpoints, and hot keys found in a Zipf workload.

use std::collections::HashMap;
use std::io::Read;
use std::process::Command as Process;
use std::time::Duration;

use serde_json::Value;
use tern_testkit::prometheus::{self, sample};
use tern_testkit::{free_port, http_get, stat_lines, Conn, ServerProcess};

/// One GET of the admin endpoint on `port`: (status, body).
fn admin_get(port: u16, path: &str) -> (u16, String) {
    let (status, _, body) = http_get(("127.0.0.1", port), path);
    (status, body)
}

/// `/metrics` parsed by prometheus_client: family -> samples.
fn scrape(port: u16) -> Value {
    let (status, body) = admin_get(port, "/metrics");
    assert_eq!(status, 200);
    prometheus::parse(&body)
}

/// Sends requests and expects replies, counting every byte both ways.
struct Counted {
    conn: Conn,
    sent: u64,
    received: u64,
}

impl Counted {
    fn expect(&mut self, request: &[u8], reply: &[u8]) {
        self.conn.expect(request, reply);
        self.sent += request.len() as u64;
        self.received += reply.len() as u64;
    }

    fn stats(&mut self, request: &str) -> Vec<(String, String)> {
        let reply = self.conn.request(request.as_bytes(), b"END\r\n");
        self.sent += request.len() as u64;
        self.received += reply.len() as u64;
        stat_lines(&reply)
    }
}

/// Waits until the server has counted the test kit's start-up probe as closed.
fn settle(c: &mut Conn) {
    for _ in 0..500 {
        if c.stats("stats\r\n")["curr_connections"] == "1" {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the start-up probe stayed open");
}

#[test]
fn stats_and_metrics_count_a_known_sequence() {
    let admin = free_port();
    let server = ServerProcess::tern(&["-t", "2", "--admin-port", &admin.to_string()]);
    let mut conn = server.connect();
    settle(&mut conn);
    let mut c = Counted {
        conn,
        sent: 0,
        received: 0,
    };
    // Counted from here: a reset, so the settling `stats` above do not count.
    c.expect(b"stats reset\r\n", b"RESET\r\n");
    let (sent0, received0) = (c.sent, c.received);
    c.expect(b"set a 1 0 2\r\naa\r\n", b"STORED\r\n");
    c.expect(b"set b 0 0 1\r\nb\r\n", b"STORED\r\n");
    c.expect(b"add a 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.expect(
        b"get a b c\r\n",
        b"VALUE a 1 2\r\naa\r\nVALUE b 0 1\r\nb\r\nEND\r\n",
    );
    c.expect(b"delete b\r\ndelete b\r\n", b"DELETED\r\nNOT_FOUND\r\n");
    c.expect(b"incr n 1\r\n", b"NOT_FOUND\r\n");
    c.expect(b"set n 0 0 1\r\n5\r\n", b"STORED\r\n");
    c.expect(b"incr n 2\r\ndecr n 1\r\n", b"7\r\n6\r\n");
    c.expect(
        b"touch a 100\r\ntouch zz 100\r\n",
        b"TOUCHED\r\nNOT_FOUND\r\n",
    );
    c.expect(b"gat 100 a zz\r\n", b"VALUE a 1 2\r\naa\r\nEND\r\n");
    c.expect(b"cas a 0 0 1 999999\r\nz\r\n", b"EXISTS\r\n");
    c.expect(b"cas zz 0 0 1 1\r\nz\r\n", b"NOT_FOUND\r\n");
    c.expect(b"bogus\r\n", b"ERROR\r\n");
    let received_before_stats = c.received;
    let s = c.stats("stats\r\n");
    let get = |name: &str| {
        s.iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("stats lacks {name}"))
            .1
            .clone()
    };
    // Field by field against the sequence (memcached 1.6.18's accounting: gat is a touch).
    let want = [
        ("curr_connections", "1"),
        ("total_connections", "0"),
        ("rejected_connections", "0"),
        ("cmd_get", "3"),
        ("cmd_set", "6"),
        ("cmd_flush", "0"),
        ("cmd_touch", "4"),
        ("get_hits", "2"),
        ("get_misses", "1"),
        ("get_expired", "0"),
        ("get_flushed", "0"),
        ("delete_misses", "1"),
        ("delete_hits", "1"),
        ("incr_misses", "1"),
        ("incr_hits", "1"),
        ("decr_misses", "0"),
        ("decr_hits", "1"),
        ("cas_misses", "1"),
        ("cas_hits", "0"),
        ("cas_badval", "1"),
        ("touch_hits", "2"),
        ("touch_misses", "2"),
        ("store_too_large", "0"),
        ("store_no_memory", "0"),
        ("limit_maxbytes", "67108864"),
        ("accepting_conns", "1"),
        ("threads", "2"),
        ("conn_yields", "0"),
        ("curr_items", "2"),
        ("total_items", "3"),
        ("bytes", "5"),
        ("evictions", "0"),
        ("reclaimed", "0"),
        ("version", tern_server::VERSION),
        ("pid", &server.pid().to_string()),
    ];
    for (name, value) in want {
        assert_eq!(get(name), value, "stat {name}");
    }
    // Bytes since the reset: every request after it (this `stats` was read before it ran),
    // every reply after it but this one (written after it ran), the reset's own `RESET`.
    assert_eq!(get("bytes_read"), (c.sent - sent0).to_string());
    assert_eq!(
        get("bytes_written"),
        (received_before_stats - received0 + "RESET\r\n".len() as u64).to_string()
    );

    // /metrics keeps raw counters (Prometheus counters only go up): the settling `stats`
    // before the reset count there, so compare the command series, which they do not touch.
    let m = scrape(admin);
    let cmd = |command: &str, status: &str| {
        sample(
            &m,
            "memcached_commands",
            "memcached_commands_total",
            &[("command", command), ("status", status)],
        )
    };
    let exporter = [
        ("get", "hit", 2.0),
        ("get", "miss", 1.0),
        ("delete", "hit", 1.0),
        ("delete", "miss", 1.0),
        ("incr", "hit", 1.0),
        ("incr", "miss", 1.0),
        ("decr", "hit", 1.0),
        ("decr", "miss", 0.0),
        ("cas", "hit", 0.0),
        ("cas", "miss", 1.0),
        ("cas", "badval", 1.0),
        ("touch", "hit", 2.0),
        ("touch", "miss", 2.0),
        ("flush", "hit", 0.0),
        ("set", "hit", 4.0),
    ];
    for (command, status, value) in exporter {
        assert_eq!(cmd(command, status), value, "{command} {status}");
    }
    let one = |family: &str, name: &str| sample(&m, family, name, &[]);
    assert_eq!(
        one("memcached_current_items", "memcached_current_items"),
        2.0
    );
    // Three stores; the incr/decr fit their old length and the touches move nothing, so
    // memcached 1.6.18 counts 3 too.
    assert_eq!(one("memcached_items", "memcached_items_total"), 3.0);
    assert_eq!(
        one(
            "memcached_current_connections",
            "memcached_current_connections"
        ),
        1.0
    );
    // The test kit's start-up probe and ours.
    assert_eq!(
        one("memcached_connections", "memcached_connections_total"),
        2.0
    );
    assert_eq!(
        one("memcached_limit_bytes", "memcached_limit_bytes"),
        67108864.0
    );
    assert_eq!(
        one("memcached_current_bytes", "memcached_current_bytes"),
        5.0
    );
    assert_eq!(one("memcached_up", "memcached_up"), 1.0);
    let tern = |command: &str, status: &str| {
        sample(
            &m,
            "tern_commands",
            "tern_commands_total",
            &[("command", command), ("status", status)],
        )
    };
    assert_eq!(tern("set", "stored"), 3.0);
    assert_eq!(tern("add", "not_stored"), 1.0);
    assert_eq!(tern("gat", "hit"), 1.0);
    assert_eq!(tern("gat", "miss"), 1.0);
    assert_eq!(tern("invalid", "error"), 1.0);
    // Every get key took one latency sample.
    let h = |name: &str| {
        sample(
            &m,
            "tern_command_duration_seconds",
            name,
            &[("command", "get")],
        )
    };
    assert_eq!(h("tern_command_duration_seconds_count"), 3.0);
    assert!(h("tern_command_duration_seconds_sum") > 0.0);
    let inf = sample(
        &m,
        "tern_command_duration_seconds",
        "tern_command_duration_seconds_bucket",
        &[("command", "get"), ("le", "+Inf")],
    );
    assert_eq!(inf, 3.0);
    // Requests per worker add up to every command recorded (the one connection's worker).
    let per_worker: f64 = (0..2)
        .map(|w| {
            sample(
                &m,
                "tern_worker_requests",
                "tern_worker_requests_total",
                &[("worker", &w.to_string())],
            )
        })
        .sum();
    let all_commands: f64 = m["tern_commands"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[2].as_f64().unwrap())
        .sum();
    assert_eq!(per_worker, all_commands);
    let segments: HashMap<_, _> = c.stats("stats segments\r\n").into_iter().collect();
    let used = sample(&m, "tern_segments", "tern_segments", &[("state", "used")]);
    assert_eq!(used.to_string(), segments["segments_used"]);

    // `stats reset` restarted the `stats` counters only.
    c.expect(b"stats reset\r\n", b"RESET\r\n");
    let after: HashMap<_, _> = c.stats("stats\r\n").into_iter().collect();
    assert_eq!(
        (
            &after["cmd_get"][..],
            &after["get_hits"][..],
            &after["curr_items"][..]
        ),
        ("0", "0", "2")
    );
    assert_eq!(cmd("get", "hit"), 2.0, "the earlier scrape");
    let m2 = scrape(admin);
    assert_eq!(
        sample(
            &m2,
            "memcached_commands",
            "memcached_commands_total",
            &[("command", "get"), ("status", "hit")]
        ),
        2.0,
        "/metrics is not reset"
    );
}

#[test]
fn stats_subcommands_and_admin_endpoints() {
    let admin = free_port();
    let server = ServerProcess::tern(&["-t", "2", "--admin-port", &admin.to_string()]);
    let mut c = server.connect();
    c.expect(b"set k 0 0 5\r\nhello\r\n", b"STORED\r\n");
    let items = c.stats("stats items\r\n");
    assert_eq!(items["items:1:number"], "1");
    assert_eq!(items["items:1:mem_requested"], "6");
    let slabs = c.stats("stats slabs\r\n");
    let segments = c.stats("stats segments\r\n");
    assert_eq!(slabs["1:chunk_size"], segments["segment_size"]);
    assert_eq!(slabs["1:used_chunks"], "1");
    assert_eq!(segments["segments_used"], "1");
    let total: u64 = segments["segments_total"].parse().unwrap();
    let size: u64 = segments["segment_size"].parse().unwrap();
    assert_eq!(total * size, 64 << 20);
    // memcached's memory handed to slab pages: here the one segment written.
    assert_eq!(slabs["total_malloced"], segments["segment_size"]);
    assert_eq!(slabs["active_slabs"], "1");
    let settings = c.stats("stats settings\r\n");
    assert_eq!(settings["admin_port"], admin.to_string());
    assert_eq!(settings["hotkey_sample_rate"], "64");
    assert_eq!(settings["num_threads"], "2");

    // stats conns: listeners (one per worker), this connection parsing, another waiting.
    let mut other = server.connect();
    other.expect(b"version\r\n", b"VERSION 1.6.45-tern-0.1.0\r\n");
    let conns = stat_lines(&c.request(b"stats conns\r\n", b"END\r\n"));
    let states: Vec<&str> = conns
        .iter()
        .filter(|(k, _)| k.ends_with(":state"))
        .map(|(_, v)| v.as_str())
        .collect();
    let count = |s: &str| states.iter().filter(|&&x| x == s).count();
    assert_eq!(count("conn_listening"), 2, "{conns:?}");
    assert_eq!(count("conn_parse_cmd"), 1, "{conns:?}");
    assert!(count("conn_read") >= 1, "{conns:?}");
    let port = format!("tcp:127.0.0.1:{}", server.port);
    assert!(conns
        .iter()
        .any(|(k, v)| k.ends_with(":listen_addr") && *v == port));
    let local = other.stream.local_addr().unwrap();
    assert!(conns
        .iter()
        .any(|(k, v)| k.ends_with(":addr") && *v == format!("tcp:{local}")));

    c.expect(
        b"stats hotkeys x\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    c.expect(b"stats nonsense\r\n", b"ERROR\r\n");

    assert_eq!(admin_get(admin, "/health"), (200, "OK\n".to_string()));
    assert_eq!(
        admin_get(admin, "/version"),
        (200, format!("{}\n", tern_server::VERSION))
    );
    let (status, body) = admin_get(admin, "/settings");
    assert_eq!(status, 200);
    let settings: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(settings["tcpport"], server.port.to_string());
    let (status, body) = admin_get(admin, "/stats");
    assert_eq!(status, 200);
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["stats"]["curr_items"], 1);
    assert_eq!(json["stats"]["pid"], server.pid());
    assert_eq!(json["segments"]["segments_used"], 1);
    assert_eq!(admin_get(admin, "/nope").0, 404);
}

/// A Zipf(1.0) sampler over `n` ranks with a fixed seed, so the test is repeatable.
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(n: usize) -> Zipf {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / r as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Zipf {
            cdf,
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next(&mut self) -> usize {
        // xorshift64*: plenty for picking ranks.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let u = (self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

#[test]
fn zipf_workload_finds_the_hottest_keys() {
    let admin = free_port();
    let server = ServerProcess::tern(&[
        "-t",
        "2",
        // One request in two sampled: the fifth and sixth hottest keys (~2,670 and ~2,230
        // requests of 100,000) then come out in order by about 6 standard deviations of the
        // sampled counts, against 3.7 at one in four, where the order failed in 1 of 300 runs
        // (2026-11-27; 0 of 1,000 at one in two).
        "--hotkey-sample-rate",
        "2",
        // A window longer than the test, so the estimate covers every request sent.
        "--hotkey-window",
        "3600",
        "--admin-port",
        &admin.to_string(),
    ]);
    let keys = 1_000;
    let requests = 100_000;
    let mut zipf = Zipf::new(keys);
    let mut truth = vec![0u64; keys];
    // Two connections, so both workers most likely sample; pipelined batches of 100 gets.
    let mut conns = [server.connect(), server.connect()];
    for batch in 0..requests / 100 {
        let mut request = Vec::new();
        for _ in 0..100 {
            let rank = zipf.next();
            truth[rank] += 1;
            request.extend_from_slice(format!("get key:{rank}\r\n").as_bytes());
        }
        let c = &mut conns[batch % 2];
        c.send(&request);
        let mut ends = 0;
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        while ends < 100 {
            let n = c.stream.read(&mut buf).unwrap();
            assert!(n > 0, "server closed");
            got.extend_from_slice(&buf[..n]);
            ends = got.windows(5).filter(|w| w == b"END\r\n").count();
        }
    }
    let mut hottest: Vec<usize> = (0..keys).collect();
    hottest.sort_by_key(|&r| std::cmp::Reverse(truth[r]));

    let lines = stat_lines(&conns[0].request(b"stats hotkeys 5\r\n", b"END\r\n"));
    let found: Vec<String> = lines
        .iter()
        .filter(|(k, _)| k.ends_with(":key"))
        .map(|(_, v)| v.clone())
        .collect();
    let want: Vec<String> = hottest[..5].iter().map(|r| format!("key:{r}")).collect();
    // Under Zipf(1) the five hottest are far enough apart to come out in order.
    assert_eq!(found, want, "{lines:?}");
    assert_eq!(lines[1], ("hotkeys_sample_every".into(), "2".into()));
    let estimate: f64 = lines
        .iter()
        .find(|(k, _)| k == "hotkey:1:requests")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let real = truth[hottest[0]] as f64;
    assert!(
        (estimate - real).abs() / real < 0.15,
        "estimate {estimate} vs {real}"
    );

    let (status, body) = admin_get(admin, "/hotkeys?n=3");
    assert_eq!(status, 200);
    let json: Value = serde_json::from_str(&body).unwrap();
    let over_http: Vec<&str> = json["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert_eq!(over_http, want[..3]);
}

#[test]
fn hot_keys_off_with_sample_rate_zero() {
    let server = ServerProcess::tern(&["--hotkey-sample-rate", "0"]);
    let mut c = server.connect();
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    for _ in 0..1000 {
        c.expect(b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
    }
    let hot = stat_lines(&c.request(b"stats hotkeys\r\n", b"END\r\n"));
    assert_eq!(hot.len(), 2, "{hot:?}");
    assert_eq!(hot[1], ("hotkeys_sample_every".into(), "0".into()));
    let settings = c.stats("stats settings\r\n");
    assert_eq!(settings["hotkey_sample_rate"], "0");
    assert_eq!(settings["admin_port"], "off");
}

#[test]
fn admin_port_in_use_fails_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Process::new(tern_testkit::tern_bin())
        .args(["serve", "-l", "127.0.0.1", "-p"])
        .arg(free_port().to_string())
        .args(["--admin-port", &port.to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--admin-port"), "{stderr}");
}
