//! `stats` and `stats settings` have every key memcached 1.6.45 prints, in its order, with
//! tern's own figures where the test can move them (docs/observability.md).

use tern_testkit::{stat_lines, Conn, ServerProcess};

/// memcached 1.6.45's `stats` keys, captured from the live 1.6.45 (`memcached -t 4 -m 64`,
/// built with extstore and TLS but not its proxy) on 2026-11-26: all 93.
/// `idle_kicks` appears only with `-o idle_timeout`, after `auth_errors`.
const MEMCACHED_STATS: &[&str] = &[
    "pid",
    "uptime",
    "time",
    "version",
    "libevent",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "max_connections",
    "curr_connections",
    "total_connections",
    "rejected_connections",
    "connection_structures",
    "response_obj_oom",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "read_buf_oom",
    "reserved_fds",
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "cmd_meta",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "store_no_memory",
    "auth_cmds",
    "auth_errors",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "accepting_conns",
    "listen_disabled_num",
    "time_in_listen_disabled_us",
    "threads",
    "conn_yields",
    "hash_power_level",
    "hash_bytes",
    "hash_is_expanding",
    "slab_reassign_rescues",
    "slab_reassign_chunk_rescues",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_busy_nomem",
    "slab_reassign_last_busy_status",
    "slab_reassign_running",
    "slabs_moved",
    "lru_crawler_running",
    "lru_crawler_starts",
    "lru_maintainer_juggles",
    "malloc_fails",
    "log_worker_dropped",
    "log_worker_written",
    "log_watcher_skipped",
    "log_watcher_sent",
    "log_watchers",
    "unexpected_napi_ids",
    "round_robin_fallback",
    "bytes",
    "curr_items",
    "total_items",
    "slab_global_page_pool",
    "expired_unfetched",
    "evicted_unfetched",
    "evicted_active",
    "evictions",
    "reclaimed",
    "crawler_reclaimed",
    "crawler_items_checked",
    "lrutail_reflocked",
    "moves_to_cold",
    "moves_to_warm",
    "moves_within_lru",
    "direct_reclaims",
    "lru_bumps_dropped",
];

/// memcached 1.6.45's `stats settings` keys, captured from the same live 1.6.45.
const MEMCACHED_SETTINGS: &[&str] = &[
    "maxbytes",
    "maxconns",
    "tcpport",
    "udpport",
    "inter",
    "verbosity",
    "oldest",
    "evictions",
    "domain_socket",
    "umask",
    "shutdown_command",
    "growth_factor",
    "chunk_size",
    "num_threads",
    "num_threads_per_udp",
    "stat_key_prefix",
    "detail_enabled",
    "reqs_per_event",
    "cas_enabled",
    "tcp_backlog",
    "binding_protocol",
    "auth_enabled_sasl",
    "auth_enabled_ascii",
    "item_size_max",
    "maxconns_fast",
    "hashpower_init",
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "tail_repair_time",
    "flush_enabled",
    "dump_enabled",
    "hash_algorithm",
    "lru_maintainer_thread",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temp_lru",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "track_sizes",
    "inline_ascii_response",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_wbuf_size",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
    "ext_drop_unread",
    "ssl_enabled",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
    "num_napi_ids",
    "memory_file",
    "client_flags_size",
];

/// The names of a `stats` reply that `expected` lists, in the reply's order, checked to be
/// `expected` exactly: every key present, in memcached's order (tern's own keys may follow).
fn assert_has_in_order(reply: &[(String, String)], expected: &[&str]) {
    let names: Vec<&str> = reply.iter().map(|(n, _)| n.as_str()).collect();
    let missing: Vec<&&str> = expected.iter().filter(|k| !names.contains(k)).collect();
    assert!(missing.is_empty(), "missing {missing:?} in {names:?}");
    let ours: Vec<&str> = names.into_iter().filter(|n| expected.contains(n)).collect();
    assert_eq!(ours, expected);
}

fn stats(c: &mut Conn, request: &str) -> Vec<(String, String)> {
    stat_lines(&c.request(request.as_bytes(), b"END\r\n"))
}

fn stat(c: &mut Conn, name: &str) -> String {
    c.stats("stats\r\n")
        .remove(name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn stats_and_settings_have_every_key_of_memcached_1_6_45() {
    let tern = ServerProcess::tern(&["-t", "4"]);
    let mut c = tern.connect();
    assert_has_in_order(&stats(&mut c, "stats\r\n"), MEMCACHED_STATS);
    assert_has_in_order(&stats(&mut c, "stats settings\r\n"), MEMCACHED_SETTINGS);
    let settings = c.stats("stats settings\r\n");
    assert_eq!(settings["client_flags_size"], "4");
    assert_eq!(settings["num_threads_per_udp"], "4");
    assert_eq!(settings["memory_file"], "(null)");
    let general = c.stats("stats\r\n");
    assert_eq!(general["libevent"], "epoll");
    // Four listeners (one per worker) and each worker's most connections at once: the
    // connections open now at least, every connection ever made at most.
    let n = |name: &str| general[name].parse::<u64>().unwrap();
    let structures = n("connection_structures");
    assert!(structures >= 4 + n("curr_connections"), "{structures}");
    assert!(structures <= 4 + n("total_connections"), "{structures}");
    assert_eq!(general["malloc_fails"], "0");
    assert_eq!(general["slab_reassign_last_busy_status"], "none");
    let reserved: u64 = general["reserved_fds"].parse().unwrap();
    assert!(reserved >= 4, "the listeners at least: {reserved}");
}

#[test]
fn log_watchers_count_watch_connections() {
    let tern = ServerProcess::tern(&[]);
    let mut c = tern.connect();
    assert_eq!(stat(&mut c, "log_watchers"), "0");
    let mut watcher = tern.connect();
    watcher.expect(b"watch mutations\r\n", b"OK\r\n");
    assert_eq!(stat(&mut c, "log_watchers"), "1");
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    watcher.read_until(b"\n");
    let general = c.stats("stats\r\n");
    assert_eq!(general["log_worker_written"], "1");
    assert_eq!(general["log_watcher_sent"], "1");
    assert_eq!(general["log_watcher_skipped"], "0");
    drop(watcher);
    // The watcher leaves when the server sees its connection close: wait for that.
    let mut left = false;
    for _ in 0..200 {
        if stat(&mut c, "log_watchers") == "0" {
            left = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(left, "the closed watcher is still counted");
}

/// memcached's `t/restart.t` expects 16 before and 17 after storing 2^17 items.
#[test]
fn hash_power_level_grows_with_items() {
    let tern = ServerProcess::tern(&["-m", "128"]);
    let mut c = tern.connect();
    assert_eq!(stat(&mut c, "hash_power_level"), "16");
    let items = 1u32 << 17;
    let mut batch = Vec::new();
    for i in 0..items {
        batch.extend_from_slice(format!("set z{i} 0 0 0 noreply\r\n\r\n").as_bytes());
        if batch.len() > 64 << 10 || i + 1 == items {
            c.send(&batch);
            batch.clear();
        }
    }
    c.expect(b"mn\r\n", b"MN\r\n");
    assert_eq!(stat(&mut c, "curr_items"), items.to_string());
    assert_eq!(stat(&mut c, "hash_power_level"), "17");
}
