//! memcached's `stats` family as data: each group is a list of `(name, value)` pairs with
//! memcached 1.6's field names, built from plain data; [`render_stat_lines`] frames a list as the
//! text protocol's `STAT <name> <value>\r\n` lines ending in `END\r\n`, and the binary protocol
//! sends the same pairs as one packet each.
//!
//! tern has no slab classes and no segmented LRU, so `stats items` and `stats slabs` map its
//! segment store onto memcached's shapes (one class, id 1); the fields with no tern counterpart
//! are printed as 0 so that tools reading them keep working. See each function.

use std::fmt::Display;
use std::io::Write;
use std::net::SocketAddr;

use crate::hotkeys::HotKeysReport;
use crate::snapshot::{general_stats, MemcachedCounters, SegmentStats, Snapshot};

/// Hot keys listed when `stats hotkeys` / `/hotkeys` give no count.
pub const DEFAULT_HOT_KEYS: usize = 10;

/// One `stats` group: `(name, value)` pairs in the order memcached prints them.
pub type StatLines = Vec<(String, String)>;

fn lines<N: Display, V: Display>(pairs: impl IntoIterator<Item = (N, V)>) -> StatLines {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// Any `(name, value)` list as `STAT` lines plus `END`, the text protocol's framing.
pub fn render_stat_lines<N: Display, V: Display>(
    pairs: impl IntoIterator<Item = (N, V)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    for (name, value) in pairs {
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
    out.extend_from_slice(b"END\r\n");
    out
}

/// Plain `stats`: memcached's general statistics (see [`general_stats`]).
pub fn stats_general(snap: &Snapshot) -> StatLines {
    lines(general_stats(snap))
}

/// `stats items`: tern has no size classes; its items are listed as class 1, or with a flash
/// tier as memcached's extstore shows them: class 1 the items in memory smaller than the flash
/// tier's `ext_item_size` (as set at start), class 2 the items on flash (their index entries,
/// where memcached keeps their headers, in its small classes), class 3 the items in memory
/// the flash tier would take by size. A class is listed only when it holds items, as memcached
/// lists only classes holding items; the counters below are the whole store's, on the lowest
/// class listed.
///
/// tern has no HOT/WARM/COLD LRU, so the fields are exactly those memcached 1.6 prints with
/// `lru_segmented no` (`-o no_modern`). `number` = items, `mem_requested` = item bytes,
/// `evicted`, `reclaimed`, `outofmemory`, `expired_unfetched` and `evicted_unfetched` = the
/// store's and commands' counts, `age` = the age of the oldest segment at the eviction end
/// (memcached's: of its LRU tail). The store keeps no eviction times, tail repairs or LRU
/// crawler, so `evicted_nonzero`, `evicted_time`, `tailrepairs`, `crawler_reclaimed`,
/// `crawler_items_checked` and `lrutail_reflocked` are 0.
pub fn stats_items(snap: &Snapshot) -> StatLines {
    let store = &snap.store;
    let classes: Vec<(u32, u64)> = if store.flash_tier {
        let small = store
            .items
            .saturating_sub(store.items_on_flash + store.items_flash_sized);
        vec![
            (1, small),
            (2, store.items_on_flash),
            (3, store.items_flash_sized),
        ]
    } else {
        vec![(1, store.items)]
    };
    let m = MemcachedCounters::from_totals(&snap.totals());
    let mut out = Vec::new();
    for (class, number) in classes.into_iter().filter(|&(_, n)| n > 0) {
        let first = out.is_empty();
        let whole = |v: u64| if first { v } else { 0 };
        let fields: [(&str, u64); 14] = [
            ("number", number),
            ("age", store.oldest_item_age_seconds),
            ("mem_requested", whole(store.bytes)),
            ("evicted", whole(store.evictions)),
            ("evicted_nonzero", 0),
            ("evicted_time", 0),
            ("outofmemory", whole(m.store_no_memory)),
            ("tailrepairs", 0),
            ("reclaimed", whole(store.reclaimed)),
            ("expired_unfetched", whole(store.expired_unfetched)),
            ("evicted_unfetched", whole(store.evicted_unfetched)),
            ("crawler_reclaimed", 0),
            ("crawler_items_checked", 0),
            ("lrutail_reflocked", 0),
        ];
        out.extend(
            fields
                .into_iter()
                .map(|(name, value)| (format!("items:{class}:{name}"), value)),
        );
    }
    lines(out)
}

/// `stats slabs`: the segment heap shown as one slab class (id 1) whose pages are segments and
/// whose chunks are whole segments: `chunk_size` = segment size, `chunks_per_page` = 1,
/// `total_pages` = `total_chunks` = segments allocated, `used_chunks` = segments holding items,
/// `free_chunks` = free segments, `free_chunks_end` = 0 (segments are handed out whole); the
/// per-class hit counters are the server's totals, `active_slabs` is 1 (0 before any segment
/// exists) and `total_malloced` is the bytes of segments whose memory may be resident.
pub fn stats_slabs(snap: &Snapshot) -> StatLines {
    let seg = &snap.store.segments;
    let active = seg.segments_total > 0;
    let mut out = StatLines::new();
    if active {
        let m = MemcachedCounters::from_totals(&snap.totals());
        let fields: [(&str, u64); 15] = [
            ("chunk_size", seg.segment_bytes),
            ("chunks_per_page", 1),
            ("total_pages", seg.segments_total),
            ("total_chunks", seg.segments_total),
            ("used_chunks", seg.segments_used()),
            ("free_chunks", seg.segments_free),
            ("free_chunks_end", 0),
            ("get_hits", m.get_hits),
            ("cmd_set", m.cmd_set),
            ("delete_hits", m.delete_hits),
            ("incr_hits", m.incr_hits),
            ("decr_hits", m.decr_hits),
            ("cas_hits", m.cas_hits),
            ("cas_badval", m.cas_badval),
            ("touch_hits", m.touch_hits),
        ];
        out = lines(
            fields
                .iter()
                .map(|(name, value)| (format!("1:{name}"), value)),
        );
    }
    out.extend(lines([
        ("active_slabs", u64::from(active)),
        ("total_malloced", seg.malloced_bytes),
    ]));
    out
}

/// `stats segments` (tern's own): the segment store's layout and churn.
pub fn stats_segments(seg: &SegmentStats) -> StatLines {
    lines([
        ("segment_size", seg.segment_bytes),
        ("segments_total", seg.segments_total),
        ("segments_used", seg.segments_used()),
        ("segments_free", seg.segments_free),
        ("heap_bytes", seg.heap_bytes()),
        ("live_bytes", seg.live_bytes),
        ("dead_bytes", seg.dead_bytes),
        ("merges", seg.merges),
        ("segments_expired", seg.segments_expired),
    ])
}

/// A socket address as memcached prints it in `stats conns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnAddr {
    /// `tcp:1.2.3.4:11211` or `tcp6:[::1]:11211`
    Tcp(SocketAddr),
    /// `udp:1.2.3.4:11211` or `udp6:[::1]:11211`
    Udp(SocketAddr),
    /// `unix:/path/to/socket`
    Unix(String),
}

impl Display for ConnAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = |a: &SocketAddr| if a.is_ipv6() { "6" } else { "" };
        match self {
            ConnAddr::Tcp(a) => write!(f, "tcp{}:{a}", v6(a)),
            ConnAddr::Udp(a) => write!(f, "udp{}:{a}", v6(a)),
            ConnAddr::Unix(path) => write!(f, "unix:{path}"),
        }
    }
}

/// A connection's state, named as memcached's `conn_*` states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// A listening socket.
    Listening,
    /// Between requests, about to parse the next one.
    NewCmd,
    /// Waiting for the socket to become readable.
    Waiting,
    /// Reading a request.
    Read,
    /// Parsing a request already read.
    ParseCmd,
    /// Writing a single response.
    Write,
    /// Reading a value's data block.
    Nread,
    /// Discarding the data block of a refused request.
    Swallow,
    /// Closing.
    Closing,
    /// Writing several queued responses.
    Mwrite,
}

impl ConnState {
    /// memcached's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Listening => "conn_listening",
            ConnState::NewCmd => "conn_new_cmd",
            ConnState::Waiting => "conn_waiting",
            ConnState::Read => "conn_read",
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Write => "conn_write",
            ConnState::Nread => "conn_nread",
            ConnState::Swallow => "conn_swallow",
            ConnState::Closing => "conn_closing",
            ConnState::Mwrite => "conn_mwrite",
        }
    }
}

/// One line group of `stats conns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The number memcached prints first: the socket's file descriptor.
    pub fd: u64,
    /// The peer's address (a listener's own address for listening sockets).
    pub addr: ConnAddr,
    /// The listener a client connection came in on; `None` for listeners.
    pub listen_addr: Option<ConnAddr>,
    /// What the connection is doing.
    pub state: ConnState,
    /// Seconds since its last command.
    pub secs_since_last_cmd: u64,
}

/// `stats conns`: per connection `addr`, `listen_addr` (client connections only), `state`,
/// `secs_since_last_cmd`, keyed by fd, in the order given.
pub fn stats_conns(conns: &[ConnInfo]) -> StatLines {
    let mut out = StatLines::new();
    for c in conns {
        let mut stat = |name: &str, value: String| out.push((format!("{}:{name}", c.fd), value));
        stat("addr", c.addr.to_string());
        if let Some(listen) = &c.listen_addr {
            stat("listen_addr", listen.to_string());
        }
        stat("state", c.state.name().to_string());
        stat("secs_since_last_cmd", c.secs_since_last_cmd.to_string());
    }
    out
}

/// `stats hotkeys [N]` (tern's own): the window and sampling, then per rank `r` from 1 the
/// key (escaped as in [`HotKeysReport::to_json`]), its estimated requests over the window and
/// its rate per second:
///
/// ```text
/// STAT hotkeys_window_seconds 10.000
/// STAT hotkeys_sample_every 64
/// STAT hotkey:1:key user:42
/// STAT hotkey:1:requests 51200
/// STAT hotkey:1:rate 5120.0
/// END
/// ```
pub fn stats_hotkeys(report: &HotKeysReport) -> StatLines {
    let mut out = lines([
        (
            "hotkeys_window_seconds",
            format!("{:.3}", report.window_seconds),
        ),
        ("hotkeys_sample_every", report.sample_every.to_string()),
    ]);
    for (i, k) in report.keys.iter().enumerate() {
        let rank = i + 1;
        out.extend(lines([
            (
                format!("hotkey:{rank}:key"),
                k.key.escape_ascii().to_string(),
            ),
            (
                format!("hotkey:{rank}:requests"),
                k.estimated_requests.to_string(),
            ),
            (
                format!("hotkey:{rank}:rate"),
                format!("{:.1}", k.rate_per_second),
            ),
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotkeys::HotKey;
    use crate::snapshot::StoreStats;
    use crate::worker::{Command, Outcome, WorkerMetrics};

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    fn snapshot() -> Snapshot {
        let w = WorkerMetrics::new();
        w.record(Command::Get, Outcome::Hit, 1);
        w.record(Command::Set, Outcome::Stored, 1);
        w.record(Command::Set, Outcome::NoMemory, 1);
        Snapshot {
            workers: vec![w.snapshot()],
            store: StoreStats {
                items: 1,
                bytes: 61,
                reclaimed: 2,
                oldest_item_age_seconds: 35,
                segments: SegmentStats {
                    segment_bytes: 1 << 20,
                    segments_total: 4,
                    segments_free: 3,
                    malloced_bytes: 1 << 20,
                    ..SegmentStats::default()
                },
                ..StoreStats::default()
            },
            ..Snapshot::default()
        }
    }

    #[test]
    fn items_have_memcached_fields_in_order() {
        let out = text(render_stat_lines(stats_items(&snapshot())));
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("STAT items:1:"))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        // memcached 1.6.18's `stats items` with `-o no_modern` (lru_segmented no).
        let memcached =
            "number age mem_requested evicted evicted_nonzero evicted_time outofmemory \
            tailrepairs reclaimed expired_unfetched evicted_unfetched crawler_reclaimed \
            crawler_items_checked lrutail_reflocked";
        assert_eq!(names, memcached.split_whitespace().collect::<Vec<_>>());
        assert!(out.contains("STAT items:1:number 1\r\n"));
        assert!(out.contains("STAT items:1:mem_requested 61\r\n"));
        assert!(out.contains("STAT items:1:outofmemory 1\r\n"));
        assert!(out.contains("STAT items:1:reclaimed 2\r\n"));
        assert!(out.contains("STAT items:1:age 35\r\n"));
        assert!(out.ends_with("END\r\n"));
        assert_eq!(
            text(render_stat_lines(stats_items(&Snapshot::default()))),
            "END\r\n"
        );
    }

    #[test]
    fn items_with_a_flash_tier_show_memory_and_flash_as_extstore_classes() {
        let mut snap = snapshot();
        snap.store.flash_tier = true;
        snap.store.items = 10;
        snap.store.items_on_flash = 6;
        snap.store.items_flash_sized = 3;
        let out = text(render_stat_lines(stats_items(&snap)));
        assert!(out.contains("STAT items:1:number 1\r\n"), "{out}");
        assert!(out.contains("STAT items:2:number 6\r\n"), "{out}");
        assert!(out.contains("STAT items:3:number 3\r\n"), "{out}");
        assert!(out.contains("STAT items:1:evicted_unfetched"));
        assert!(out.contains("STAT items:3:reclaimed 0\r\n"));
        // Everything on flash: memcached's test library waits for classes 3 and up to empty.
        snap.store.items_on_flash = 10;
        snap.store.items_flash_sized = 0;
        let out = text(render_stat_lines(stats_items(&snap)));
        assert!(
            !out.contains("items:1:") && !out.contains("items:3:"),
            "{out}"
        );
        assert!(out.contains("STAT items:2:number 10\r\n"), "{out}");
    }

    #[test]
    fn slabs_map_segments() {
        let out = text(render_stat_lines(stats_slabs(&snapshot())));
        let expected = "STAT 1:chunk_size 1048576\r\nSTAT 1:chunks_per_page 1\r\n\
            STAT 1:total_pages 4\r\nSTAT 1:total_chunks 4\r\nSTAT 1:used_chunks 1\r\n\
            STAT 1:free_chunks 3\r\nSTAT 1:free_chunks_end 0\r\nSTAT 1:get_hits 1\r\n\
            STAT 1:cmd_set 2\r\nSTAT 1:delete_hits 0\r\nSTAT 1:incr_hits 0\r\n\
            STAT 1:decr_hits 0\r\nSTAT 1:cas_hits 0\r\nSTAT 1:cas_badval 0\r\n\
            STAT 1:touch_hits 0\r\nSTAT active_slabs 1\r\nSTAT total_malloced 1048576\r\nEND\r\n";
        assert_eq!(out, expected);
        assert_eq!(
            text(render_stat_lines(stats_slabs(&Snapshot::default()))),
            "STAT active_slabs 0\r\nSTAT total_malloced 0\r\nEND\r\n"
        );
    }

    #[test]
    fn conns_match_memcached_lines() {
        let conns = [
            ConnInfo {
                fd: 24,
                addr: ConnAddr::Tcp("[::]:21999".parse().unwrap()),
                listen_addr: None,
                state: ConnState::Listening,
                secs_since_last_cmd: 0,
            },
            ConnInfo {
                fd: 25,
                addr: ConnAddr::Tcp("127.0.0.1:58932".parse().unwrap()),
                listen_addr: Some(ConnAddr::Tcp("127.0.0.1:21999".parse().unwrap())),
                state: ConnState::ParseCmd,
                secs_since_last_cmd: 3,
            },
        ];
        // As memcached 1.6.18 prints them.
        let expected = "STAT 24:addr tcp6:[::]:21999\r\nSTAT 24:state conn_listening\r\n\
            STAT 24:secs_since_last_cmd 0\r\nSTAT 25:addr tcp:127.0.0.1:58932\r\n\
            STAT 25:listen_addr tcp:127.0.0.1:21999\r\nSTAT 25:state conn_parse_cmd\r\n\
            STAT 25:secs_since_last_cmd 3\r\nEND\r\n";
        assert_eq!(text(render_stat_lines(stats_conns(&conns))), expected);
        assert_eq!(
            ConnAddr::Unix("/tmp/mc.sock".into()).to_string(),
            "unix:/tmp/mc.sock"
        );
    }

    #[test]
    fn segments_and_settings() {
        let out = text(render_stat_lines(stats_segments(
            &snapshot().store.segments,
        )));
        assert!(out.starts_with("STAT segment_size 1048576\r\nSTAT segments_total 4\r\n"));
        assert!(out.contains("STAT segments_used 1\r\n"));
        assert!(out.contains("STAT heap_bytes 4194304\r\n"));
        assert_eq!(
            text(render_stat_lines([
                ("maxbytes", "67108864"),
                ("evictions", "on")
            ])),
            "STAT maxbytes 67108864\r\nSTAT evictions on\r\nEND\r\n"
        );
    }

    #[test]
    fn hotkeys_lines() {
        let report = HotKeysReport {
            window_seconds: 10.0,
            sample_every: 64,
            keys: vec![HotKey {
                key: b"user:42".to_vec(),
                estimated_requests: 51_200,
                rate_per_second: 5_120.0,
            }],
        };
        assert_eq!(
            text(render_stat_lines(stats_hotkeys(&report))),
            "STAT hotkeys_window_seconds 10.000\r\nSTAT hotkeys_sample_every 64\r\n\
             STAT hotkey:1:key user:42\r\nSTAT hotkey:1:requests 51200\r\n\
             STAT hotkey:1:rate 5120.0\r\nEND\r\n"
        );
    }

    #[test]
    fn general_stats_render() {
        let out = text(render_stat_lines(stats_general(&snapshot())));
        assert!(out.starts_with("STAT pid 0\r\nSTAT uptime 0\r\n"));
        assert!(out.contains("STAT cmd_set 2\r\n"));
        assert!(out.contains("STAT store_no_memory 1\r\n"));
        assert!(out.contains("STAT curr_items 1\r\n"));
    }
}
