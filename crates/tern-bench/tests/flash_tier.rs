//! Workloads for a flash tier, against real servers: the key space sized from the servers'
//! `limit_maxbytes` (`--key-space-factor`), `--settle`, and the gets split between memory and
//! flash, which only a server with memcached's extstore counters gets.

use std::process::Command;

use serde_json::Value;
use tern_bench::report::print_table;
use tern_bench::run::{run, RunReport};
use tern_bench::server_stats::ITEM_OVERHEAD;
use tern_bench::workload::Workload;
use tern_testkit::{tern_bin, ServerProcess};

fn bench(w: &Workload) -> RunReport {
    run(w, None, &mut |_| {}).expect("run")
}

fn table(r: &RunReport) -> String {
    let mut out = Vec::new();
    print_table(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn limit_maxbytes(server: &ServerProcess) -> u64 {
    server.connect().stats("stats\r\n")["limit_maxbytes"]
        .parse()
        .unwrap()
}

#[test]
fn key_space_factor_sizes_the_keys_from_terns_limit_maxbytes() {
    let tern = ServerProcess::tern(&["-m", "2"]);
    let limit = limit_maxbytes(&tern);
    let server = format!("127.0.0.1:{}", tern.port);
    let out = Command::new(tern_bin())
        .args([
            "bench",
            "-s",
            &server,
            "--key-space-factor",
            "1.5",
            "-v",
            "200",
        ])
        .args(["-m", "get:1", "-n", "500", "--settle", "5s", "--json", "-q"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 200-byte values, 16-byte keys: 275 bytes a key; 1.5 × the limit of them, rounded up.
    let per_key = 200 + 16 + ITEM_OVERHEAD;
    let keys = (3 * limit).div_ceil(2 * per_key);
    assert_eq!(doc["workload"]["keys"], keys, "{doc:#}");
    assert_eq!(doc["workload"]["key_space_factor"], 1.5);
    assert_eq!(doc["key_space"]["keys"], keys);
    assert_eq!(doc["key_space"]["limit_maxbytes"], limit);
    assert_eq!(doc["key_space"]["bytes_per_key"], per_key as f64);
    // Every key stored once, more than the server holds: it evicts and refuses none.
    assert_eq!(doc["preload"]["keys"], keys);
    assert_eq!(doc["preload"]["failed"], 0);
    // tern has no flash tier (no extstore counters): settled at once, no split.
    assert_eq!(doc["settle"]["settled"], true);
    assert!(doc["server_gets"].is_null(), "{doc:#}");
    assert!(
        stderr.contains(&format!(
            "key space    {keys} keys x {per_key} B = 1.5 x limit_maxbytes ({limit} B)"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("settle       flash idle after"), "{stderr}");
    assert!(!stderr.contains("server gets"), "{stderr}");

    let both = Command::new(tern_bin())
        .args([
            "bench",
            "-s",
            &server,
            "-k",
            "10",
            "--key-space-factor",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        !both.status.success(),
        "--keys and --key-space-factor conflict"
    );
}

#[test]
fn a_pool_sizes_its_key_space_from_its_servers_memory_summed() {
    let (a, b) = (
        ServerProcess::tern(&["-m", "2"]),
        ServerProcess::tern(&["-m", "3"]),
    );
    let limit = limit_maxbytes(&a) + limit_maxbytes(&b);
    let r = bench(&Workload {
        servers: vec![format!("127.0.0.1:{},127.0.0.1:{}", a.port, b.port)],
        key_space_factor: Some(0.25),
        value_size: "100-300".into(),
        mix: "get:1".into(),
        preload: false,
        requests: Some(100),
        ..Workload::default()
    });
    // Mean value 200 bytes: 275 bytes a key.
    let keys = limit.div_ceil(4 * 275);
    let ks = r.key_space.as_ref().expect("key_space reported");
    assert_eq!(
        (ks.limit_maxbytes, ks.keys, r.workload.keys),
        (limit, keys, keys)
    );
}

#[test]
fn gets_split_between_memory_and_flash_on_memcached_with_extstore() {
    let dir = std::env::temp_dir().join(format!("tern-bench-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // ext_item_age=0: memcached writes every item of 512 bytes or more to flash, memory pressure
    // or not, and keeps only its header in memory. (A flash file of one 64 MiB page, its
    // default page size, takes nothing.)
    let ext = format!(
        "ext_path={}:256m,ext_item_age=0",
        dir.join("flash").display()
    );
    let mc = ServerProcess::memcached(&["-m", "16", "-o", &ext]);
    let r = bench(&Workload {
        servers: vec![format!("127.0.0.1:{}", mc.port)],
        key_space_factor: Some(0.5),
        value_size: "1024".into(),
        mix: "get:1".into(),
        settle: Some("60s".into()),
        requests: Some(2_000),
        ..Workload::default()
    });
    assert_eq!(r.preload.as_ref().map(|p| p.failed), Some(0));
    assert!(
        r.settle.as_ref().is_some_and(|s| s.settled),
        "{:?}",
        r.settle
    );
    let gets = r
        .server_gets
        .as_ref()
        .expect("the split, from extstore's counters");
    // The server's counters saw exactly this run's keys, every one stored.
    assert_eq!(gets.total(), r.counts.hits + r.counts.misses);
    assert_eq!((r.counts.hits, gets.misses), (2_000, 0));
    assert!(gets.from_flash > 0, "{gets:?}");
    assert!(
        table(&r).contains(&format!(
            "server gets  {} from RAM ({:.1}%), {} from flash",
            gets.from_ram,
            gets.from_ram as f64 / 20.0,
            gets.from_flash
        )),
        "{}",
        table(&r)
    );
    drop(mc);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_split_is_reported_by_servers_without_a_flash_tier() {
    let (mc, tern) = (ServerProcess::memcached(&[]), ServerProcess::tern(&[]));
    for port in [mc.port, tern.port] {
        let r = bench(&Workload {
            servers: vec![format!("127.0.0.1:{port}")],
            keys: 500,
            requests: Some(500),
            ..Workload::default()
        });
        assert_eq!(r.server_gets, None);
        assert!(r.key_space.is_none() && r.settle.is_none());
        let table = table(&r);
        for absent in ["server gets", "key space", "settle"] {
            assert!(!table.contains(absent), "{table}");
        }
    }
}
