//! The pool configs `tern tune plan` writes, used for real: Debian's twemproxy (`nutcracker`)
//! runs with the generated YAML in front of the planned instances, started on loopback ports;
//! keys set through it spread over every instance and read back through it, each on the
//! instance a libmemcached ketama client given the generated server list would pick.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use common::fixture;
use tern_bench::ketama::Ketama;
use tern_testkit::{free_port, tern_bin, Conn, ServerProcess};

const KEYS: usize = 400;

/// The first of `n` consecutive ports that are all free now.
fn free_ports(n: u16) -> u16 {
    loop {
        let first = free_port();
        if first.checked_add(n).is_some()
            && (1..n).all(|i| TcpListener::bind(("127.0.0.1", first + i)).is_ok())
        {
            return first;
        }
    }
}

fn plan(fixture_root: &Path, args: &[&str]) -> String {
    let out = Command::new(tern_bin())
        .args(["tune", "plan", "--root", fixture_root.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn nutcracker_spreads_keys_over_the_planned_instances_as_ketama_clients_do() {
    let nutcracker = Path::new("/usr/sbin/nutcracker");
    assert!(
        nutcracker.exists(),
        "twemproxy is missing: apt-get install nutcracker (.ci/run installs it)"
    );
    let dir = std::env::temp_dir().join(format!("tern-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // A four-node machine: one instance per node, on four consecutive loopback ports.
    let root = fixture("amd-epyc-4node");
    let first = free_ports(4);
    let proxy_port = free_port();
    let port_arg = first.to_string();
    let proxy_listen = format!("127.0.0.1:{proxy_port}");
    let common = ["--port", &port_arg, "--address", "127.0.0.1"];
    let wrote = plan(
        &root,
        &[
            &common[..],
            &["--format", "twemproxy", "--proxy-listen", &proxy_listen],
            &["--out", dir.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(wrote.contains("nutcracker.yml"), "{wrote}");
    let servers: Vec<String> = plan(&root, &[&common[..], &["--format", "servers"]].concat())
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect();
    let ports: Vec<u16> = (first..first + 4).collect();
    let expected: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    assert_eq!(servers, expected);

    // The planned instances (their --pin and --numa-node are the fixture's, not this machine's).
    let instances: Vec<ServerProcess> = ports
        .iter()
        .map(|&port| ServerProcess::tern_on_port(port, &["-t", "1"]))
        .collect();
    let config = dir.join("nutcracker.yml");
    let check = Command::new(nutcracker)
        .args(["--test-conf", "--conf-file"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "nutcracker refuses the YAML: {check:?}"
    );
    let mut proxy_cmd = Command::new(nutcracker);
    proxy_cmd
        .arg("--conf-file")
        .arg(&config)
        .args(["--stats-addr", "127.0.0.1", "--stats-port"])
        .arg(free_port().to_string())
        .arg("--output")
        .arg(dir.join("nutcracker.log"));
    let _proxy = ServerProcess::spawn(proxy_cmd, proxy_port);

    let mut through_proxy = Conn::connect(proxy_port);
    for i in 0..KEYS {
        let value = format!("value-{i}");
        through_proxy.expect(
            format!("set key:{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"STORED\r\n",
        );
    }
    for i in 0..KEYS {
        let value = format!("value-{i}");
        through_proxy.expect(
            format!("get key:{i}\r\n").as_bytes(),
            format!("VALUE key:{i} 0 {}\r\n{value}\r\nEND\r\n", value.len()).as_bytes(),
        );
    }
    // A multi-get the proxy splits over the instances and joins again.
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let reply = through_proxy.request(format!("get {}\r\n", keys.join(" ")).as_bytes(), b"END\r\n");
    assert_eq!(
        String::from_utf8_lossy(&reply)
            .matches("VALUE key:")
            .count(),
        20
    );

    // Spread: every instance holds a fair share, and all of them the whole set once.
    let held: Vec<u64> = instances
        .iter()
        .map(|s| {
            s.connect().stats("stats\r\n")["curr_items"]
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(held.iter().sum::<u64>(), KEYS as u64, "{held:?}");
    for (port, n) in ports.iter().zip(&held) {
        assert!(
            *n >= (KEYS / 4 / 3) as u64,
            "instance {port} holds {n} of {KEYS} keys: {held:?}"
        );
    }

    // Each key lives where libmemcached's ketama over the generated server list puts it.
    let ring = Ketama::new(&servers);
    let mut direct: Vec<Conn> = instances.iter().map(|s| s.connect()).collect();
    for i in 0..KEYS {
        let key = format!("key:{i}");
        let expected = ring.server_for(key.as_bytes());
        let holders: Vec<usize> = (0..direct.len())
            .filter(|&s| {
                let reply = direct[s].request(format!("get {key}\r\n").as_bytes(), b"END\r\n");
                reply.starts_with(b"VALUE")
            })
            .collect();
        assert_eq!(
            holders,
            [expected],
            "{key}: the proxy put it on {holders:?}, ketama says {}",
            servers[expected]
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
