//! tern bench and libmemcached (Debian's libmemcached11, asked through ctypes by
//! libmemcached_ketama.py) agree on where each key lives under weighted ketama.

use std::process::Command;

use tern_bench::ketama::Ketama;
use tern_bench::run::run;
use tern_bench::workload::{Plan, Target, Workload};
use tern_testkit::ServerProcess;

/// libmemcached's server index for each key.
fn libmemcached_places(servers: &str, keys: &[String], store: bool) -> Vec<usize> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libmemcached_ketama.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script);
    if !store {
        cmd.arg("--hash-only");
    }
    let out = cmd.arg(servers).args(keys).output().expect("run python3");
    assert!(
        out.status.success(),
        "libmemcached_ketama.py failed (is libmemcached11 installed?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let places: Vec<usize> = text
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(places.len(), keys.len());
    places
}

fn ring(servers: &[String]) -> Ketama {
    let names: Vec<String> = servers
        .iter()
        .map(|s| Target::parse(s).unwrap().ring_name())
        .collect();
    Ketama::new(&names)
}

fn holds(server: &ServerProcess, key: &str) -> bool {
    let mut conn = server.connect();
    conn.send(format!("get {key}\r\n").as_bytes());
    let reply = conn.read_until(b"END\r\n");
    reply.starts_with(b"VALUE")
}

#[test]
fn ring_matches_libmemcached_including_the_default_port_and_unix_socket_rules() {
    let servers: Vec<String> = [
        "127.0.0.1:11211",
        "10.0.0.2:11211",
        "10.0.0.3:22122",
        "10.0.0.4:1",
        "/run/memcached/a.sock",
    ]
    .map(String::from)
    .to_vec();
    let keys: Vec<String> = (0..500).map(|i| format!("key:{i}")).collect();
    let theirs = libmemcached_places(&servers.join(","), &keys, false);
    let ours = ring(&servers);
    for (key, place) in keys.iter().zip(theirs) {
        assert_eq!(ours.server_for(key.as_bytes()), place, "key {key}");
    }
}

#[test]
fn keys_land_where_libmemcached_looks_for_them() {
    let pool: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::memcached(&[])).collect();
    let servers: Vec<String> = pool
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();

    // tern bench stores keys k0000000.. across the pool; libmemcached must find each one where
    // it looks.
    let w = Workload {
        servers: servers.clone(),
        keys: 300,
        key_len: 8,
        mix: "get:1".into(),
        requests: Some(300),
        ..Workload::default()
    };
    let r = run(&w, None, &mut |_| {}).unwrap();
    assert_eq!(
        r.hit_ratio,
        Some(1.0),
        "every get went to the server holding the key"
    );
    let plan = Plan::new(&w).unwrap();
    let keys: Vec<String> = (0..300)
        .map(|i| {
            let mut k = Vec::new();
            plan.write_key(&mut k, i);
            String::from_utf8(k).unwrap()
        })
        .collect();
    let places = libmemcached_places(&servers.join(","), &keys, false);
    for (key, &place) in keys.iter().zip(&places) {
        assert!(holds(&pool[place], key), "{key} is not on server {place}");
    }
    assert!((0..3).all(|s| places.contains(&s)), "every server got keys");

    // And the other way: keys libmemcached stores are where tern bench's ring says.
    let theirs: Vec<String> = (0..200).map(|i| format!("lm:{i}")).collect();
    libmemcached_places(&servers.join(","), &theirs, true);
    let ours = ring(&servers);
    for key in &theirs {
        assert!(holds(&pool[ours.server_for(key.as_bytes())], key), "{key}");
    }
}
