//! `tern bench` driving Debian's memcached for real: counts, hits, rates, protocols, transports.

use tern_bench::run::{run, RunReport};
use tern_bench::workload::Workload;
use tern_testkit::bench::{memcached_unix, memcached_with_udp, socket_path};
use tern_testkit::ServerProcess;

fn workload(server: &str) -> Workload {
    Workload {
        servers: vec![server.to_string()],
        keys: 2_000,
        duration: "1s".into(),
        ..Workload::default()
    }
}

fn bench(w: &Workload) -> RunReport {
    run(w, None, &mut |_| {}).expect("run")
}

#[test]
fn request_counts_add_up_in_every_protocol() {
    let mc = ServerProcess::memcached(&[]);
    for protocol in ["ascii", "meta", "binary"] {
        let w = Workload {
            protocol: protocol.into(),
            threads: 2,
            connections: 3,
            pipeline: 4,
            mix: "get:6,set:2,multiget:1,delete:1,touch:1".into(),
            multiget: 5,
            requests: Some(3_001),
            ..workload(&format!("127.0.0.1:{}", mc.port))
        };
        let r = bench(&w);
        assert_eq!(r.requests, 3_001, "{protocol}");
        assert_eq!(r.by_command.values().sum::<u64>(), 3_001, "{protocol}");
        let gets = r.by_command["get"] + 5 * r.by_command["multiget"];
        assert_eq!(r.counts.hits + r.counts.misses, gets, "{protocol}");
        assert_eq!(r.errors_total, 0, "{protocol}: {:?}", r.counts.errors);
        assert_eq!(r.counts.unanswered, 0);
        assert!(r.latency_us.p50 > 0.0 && r.latency_us.max >= r.latency_us.p99);
        assert_eq!(
            r.preload.as_ref().map(|p| (p.keys, p.failed)),
            Some((2_000, 0))
        );
    }
}

#[test]
fn preload_makes_every_get_a_hit() {
    let mc = ServerProcess::memcached(&[]);
    let w = Workload {
        mix: "get:3,mg:1,multiget:1".into(),
        key_distribution: "zipf:0.99".into(),
        requests: Some(2_000),
        ..workload(&format!("127.0.0.1:{}", mc.port))
    };
    let r = bench(&w);
    assert!(r.hit_ratio.unwrap() >= 0.999, "hit ratio {:?}", r.hit_ratio);

    // The control: the same reads without a preload miss.
    let mc = ServerProcess::memcached(&[]);
    let cold = bench(&Workload {
        preload: false,
        mix: "get:1".into(),
        requests: Some(1_000),
        ..workload(&format!("127.0.0.1:{}", mc.port))
    });
    assert_eq!(cold.hit_ratio, Some(0.0));
}

#[test]
fn open_loop_sends_at_the_target_rate() {
    let mc = ServerProcess::memcached(&[]);
    for (arrivals, threads) in [("constant", 1), ("poisson", 1), ("constant", 2)] {
        let w = Workload {
            rate: Some(2_000.0),
            arrivals: arrivals.into(),
            threads,
            duration: "2s".into(),
            warmup: "200ms".into(),
            ..workload(&format!("127.0.0.1:{}", mc.port))
        };
        let r = bench(&w);
        // Requests due in the 2 s window, all sent and answered: the rate the schedule kept (how
        // late each went out is in the latencies; a busy CI machine may delay the last replies).
        assert_eq!(r.counts.unanswered, 0);
        let achieved = r.requests as f64 / 2.0;
        assert!(
            (achieved - 2_000.0).abs() <= 100.0,
            "{arrivals}, {threads} thread(s): sent {achieved:.0}/s for a target of 2000/s"
        );
        assert_eq!(r.mode, "open");
    }
}

#[test]
fn udp_gets_and_unix_sockets() {
    let mc = memcached_with_udp(&[]);
    let w = Workload {
        transport: "udp".into(),
        mix: "get:3,multiget:1".into(),
        requests: Some(1_000),
        ..workload(&format!("127.0.0.1:{}", mc.port))
    };
    let r = bench(&w);
    // Loopback does not drop, so every UDP request is answered (a timeout would show here).
    assert_eq!(r.requests, 1_000, "{:?}", r.counts.errors);
    assert!(r.hit_ratio.unwrap() >= 0.999);

    let path = socket_path("bench-unix");
    let _mc = memcached_unix(&path);
    let r = bench(&Workload {
        requests: Some(1_000),
        ..workload(path.to_str().unwrap())
    });
    assert_eq!((r.requests, r.errors_total), (1_000, 0));
    assert!(r.hit_ratio.unwrap() >= 0.999);
}

#[test]
fn server_cpu_is_found_from_the_port() {
    let mc = ServerProcess::memcached(&[]);
    let r = bench(&Workload {
        requests: Some(2_000),
        ..workload(&format!("127.0.0.1:{}", mc.port))
    });
    let cpu = r.cpu.expect("cpu report");
    assert_eq!(cpu.server_pid, Some(mc.pid()));
    assert!(cpu.server_cpu_us_per_request.unwrap() > 0.0);
    // 2,000 requests take under a second: one (partial) second was sampled.
    assert!(!cpu.server_cpu_percent_per_second.is_empty());
    assert_eq!(
        cpu.machine_per_second.len(),
        cpu.server_cpu_percent_per_second.len()
    );
    assert_eq!(cpu.machine_per_second[0][0].cpu, "cpu");
    let all = &cpu.machine[0];
    assert_eq!(all.cpu, "cpu");
    let sum = all.usr + all.sys + all.irq + all.softirq + all.iowait + all.steal + all.idle;
    assert!((sum - 100.0).abs() < 1.0, "split sums to {sum}");
}

#[test]
fn tls_connections_count_every_reply() {
    let certs = tern_testkit::tls::Certs::generate();
    let o = format!(
        "ssl_chain_cert={},ssl_key={}",
        certs.path("server.pem"),
        certs.path("server.key")
    );
    let mc = ServerProcess::memcached(&["-Z", "-o", &o]);
    for protocol in ["ascii", "meta", "binary"] {
        let w = Workload {
            protocol: protocol.into(),
            tls_ca: Some(certs.path("ca.pem")),
            connections: 3,
            pipeline: 16,
            mix: "get:8,set:2".into(),
            requests: Some(5_000),
            ..workload(&format!("127.0.0.1:{}", mc.port))
        };
        let r = bench(&w);
        assert_eq!(r.requests, 5_000, "{protocol}");
        assert_eq!(r.errors_total, 0, "{protocol}: {:?}", r.counts.errors);
        assert_eq!(r.counts.unanswered, 0, "{protocol}");
        assert!(r.hit_ratio.unwrap() >= 0.999, "{protocol}");
    }
}
