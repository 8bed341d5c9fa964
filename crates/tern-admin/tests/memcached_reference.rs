//! The `stats` renderings against Debian's memcached 1.6, the reference peer: same field names,
//! in the same order, as memcached prints them.

use std::net::SocketAddr;

use tern_admin::stats_text::{
    render_stat_lines, stats_conns, stats_general, stats_items, stats_slabs, ConnAddr, ConnInfo,
    ConnState,
};
use tern_admin::{SegmentStats, Snapshot, StoreStats, WorkerMetrics};
use tern_testkit::ServerProcess;

/// The names of the `STAT name value` lines, with the class or fd prefix (`items:1:`, `1:`,
/// `25:`) cut off.
fn names(reply: &[u8]) -> Vec<String> {
    let text = String::from_utf8(reply.to_vec()).unwrap();
    assert!(text.ends_with("END\r\n"), "{text}");
    text.split("\r\n")
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| {
            let name = l.split(' ').next().unwrap();
            name.rsplit(':').next().unwrap().to_string()
        })
        .collect()
}

fn tern_snapshot() -> Snapshot {
    Snapshot {
        workers: vec![WorkerMetrics::new().snapshot()],
        store: StoreStats {
            items: 1,
            segments: SegmentStats {
                segment_bytes: 1 << 20,
                segments_total: 1,
                ..SegmentStats::default()
            },
            ..StoreStats::default()
        },
        ..Snapshot::default()
    }
}

#[test]
fn items_slabs_conns_and_stats_have_memcacheds_fields() {
    // `-o no_modern` turns off memcached's segmented LRU, which tern does not have either.
    let mc = ServerProcess::memcached(&["-o", "no_modern"]);
    let mut conn = mc.connect();
    assert_eq!(
        conn.request(b"set k 0 0 1\r\nx\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    let snap = tern_snapshot();

    let theirs = names(&conn.request(b"stats items\r\n", b"END\r\n"));
    assert_eq!(names(&render_stat_lines(stats_items(&snap))), theirs);

    let theirs = names(&conn.request(b"stats slabs\r\n", b"END\r\n"));
    assert_eq!(names(&render_stat_lines(stats_slabs(&snap))), theirs);

    let reply = conn.request(b"stats conns\r\n", b"END\r\n");
    let text = String::from_utf8(reply.clone()).unwrap();
    // Rebuild memcached's connection list from its own lines, then render it ourselves.
    let mut conns: Vec<ConnInfo> = Vec::new();
    for line in text.split("\r\n").filter_map(|l| l.strip_prefix("STAT ")) {
        let (key, value) = line.split_once(' ').unwrap();
        let (fd, field) = key.split_once(':').unwrap();
        let fd: u64 = fd.parse().unwrap();
        if conns.last().map(|c| c.fd) != Some(fd) {
            conns.push(ConnInfo {
                fd,
                addr: ConnAddr::Unix(String::new()),
                listen_addr: None,
                state: ConnState::Listening,
                secs_since_last_cmd: 0,
            });
        }
        let c = conns.last_mut().unwrap();
        let tcp = |v: &str| {
            let addr: SocketAddr = v.split_once(':').unwrap().1.parse().unwrap();
            ConnAddr::Tcp(addr)
        };
        match field {
            "addr" => c.addr = tcp(value),
            "listen_addr" => c.listen_addr = Some(tcp(value)),
            "state" => {
                c.state = match value {
                    "conn_listening" => ConnState::Listening,
                    "conn_parse_cmd" => ConnState::ParseCmd,
                    "conn_new_cmd" => ConnState::NewCmd,
                    "conn_waiting" => ConnState::Waiting,
                    "conn_read" => ConnState::Read,
                    "conn_write" => ConnState::Write,
                    "conn_mwrite" => ConnState::Mwrite,
                    other => panic!("unexpected state {other}"),
                }
            }
            "secs_since_last_cmd" => c.secs_since_last_cmd = value.parse().unwrap(),
            other => panic!("unexpected field {other}"),
        }
    }
    assert!(conns.iter().any(|c| c.listen_addr.is_some()), "{text}");
    assert_eq!(render_stat_lines(stats_conns(&conns)), reply);

    // Every general stat tern prints is one memcached prints, in memcached's order (with its
    // default options: `-o no_modern` also drops `rejected_connections`, and the LRU lines).
    let default_mc = ServerProcess::memcached(&[]);
    let theirs = names(&default_mc.connect().request(b"stats\r\n", b"END\r\n"));
    let ours = names(&render_stat_lines(stats_general(&snap)));
    let mut at = 0;
    // Lines memcached 1.6.45 added after Debian's 1.6.18 (tern follows 1.6.45).
    let newer = ["slab_reassign_busy_nomem", "slab_reassign_last_busy_status"];
    for name in ours.iter().filter(|n| !newer.contains(&n.as_str())) {
        let found = theirs[at..].iter().position(|n| n == name);
        let offset = found.unwrap_or_else(|| panic!("{name} out of memcached's order or absent"));
        at += offset + 1;
    }
}
