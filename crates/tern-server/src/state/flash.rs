//! The flash tier as `stats` shows it, under memcached 1.6.45's names, order and formats: the
//! `ext_*` lines of `stats settings`, the extstore lines of the general `stats`, and `stats
//! extstore`'s pages. Plain functions of the store's values.

use tern_store::{FlashPageInfo, FlashSettings, FlashStats};

type Lines = Vec<(String, String)>;

fn lines<const N: usize>(pairs: [(&str, String); N]) -> Lines {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// C's `%.Nf`: Rust's fixed notation, but NaN as C prints it.
pub fn c_fixed(x: f64, digits: usize) -> String {
    match (x.is_nan(), x.is_sign_negative()) {
        (true, false) => "nan".to_string(),
        (true, true) => "-nan".to_string(),
        _ => format!("{x:.digits$}"),
    }
}

/// The `ext_*` lines of `stats settings` (memcached's `process_stat_settings`).
pub fn settings_lines(knobs: &FlashSettings, wbuf_bytes: usize, freeratio: f64) -> Lines {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    lines([
        ("ext_item_size", knobs.item_size.to_string()),
        ("ext_item_age", knobs.item_age.to_string()),
        ("ext_low_ttl", knobs.low_ttl.to_string()),
        ("ext_recache_rate", knobs.recache_rate.to_string()),
        ("ext_wbuf_size", wbuf_bytes.to_string()),
        ("ext_compact_under", knobs.compact_under.to_string()),
        ("ext_drop_under", knobs.drop_under.to_string()),
        ("ext_max_sleep", knobs.max_sleep_us.to_string()),
        ("ext_max_frag", c_fixed(knobs.max_frag, 2)),
        ("slab_automove_freeratio", c_fixed(freeratio, 3)),
        ("ext_drop_unread", yes_no(knobs.drop_unread)),
    ])
}

/// The per-thread extstore counters memcached prints after `get_flushed`. The store counts
/// neither reads given up on (`get_aborted_extstore`) nor reads refused a buffer
/// (`get_oom_extstore`): 0, so that tools reading them keep working.
pub fn get_lines(s: &FlashStats) -> Lines {
    lines([
        ("get_extstore", s.gets.to_string()),
        ("get_aborted_extstore", 0.to_string()),
        ("get_oom_extstore", 0.to_string()),
        ("recache_from_extstore", s.recaches.to_string()),
        ("miss_from_extstore", s.misses.to_string()),
        ("badcrc_from_extstore", s.bad_crc.to_string()),
    ])
}

/// memcached's `storage_stats` (after `log_watchers`), then tern's own three. The store has no
/// memory pressure figure and no COLD or old buckets to rescue items into, so
/// `extstore_memory_pressure`, `extstore_compact_resc_cold` and `extstore_compact_resc_old`
/// are 0.
pub fn storage_lines(s: &FlashStats) -> Lines {
    // Bytes written to flash per byte stored by sets.
    let amplification = match s.bytes_set {
        0 => 0.0,
        set => s.bytes_written as f64 / set as f64,
    };
    lines([
        ("extstore_memory_pressure", c_fixed(0.0, 2)),
        ("extstore_compact_lost", s.compact_lost.to_string()),
        ("extstore_compact_rescues", s.compact_rescues.to_string()),
        ("extstore_compact_resc_cold", 0.to_string()),
        ("extstore_compact_resc_old", 0.to_string()),
        ("extstore_compact_skipped", s.compact_skipped.to_string()),
        ("extstore_page_allocs", s.page_allocs.to_string()),
        ("extstore_page_evictions", s.page_evictions.to_string()),
        ("extstore_page_reclaims", s.page_reclaims.to_string()),
        ("extstore_pages_free", s.pages_free.to_string()),
        ("extstore_pages_used", s.pages_used.to_string()),
        ("extstore_objects_evicted", s.objects_evicted.to_string()),
        ("extstore_objects_read", s.objects_read.to_string()),
        ("extstore_objects_written", s.objects_written.to_string()),
        ("extstore_objects_used", s.objects_used.to_string()),
        ("extstore_bytes_evicted", s.bytes_evicted.to_string()),
        ("extstore_bytes_written", s.bytes_written.to_string()),
        ("extstore_bytes_read", s.bytes_read.to_string()),
        ("extstore_bytes_used", s.bytes_used.to_string()),
        ("extstore_bytes_fragmented", s.bytes_fragmented.to_string()),
        ("extstore_limit_maxbytes", s.limit_maxbytes.to_string()),
        ("extstore_io_queue", s.io_queue.to_string()),
        ("extstore_false_reads", s.false_reads.to_string()),
        ("extstore_stale_entries", s.stale_entries.to_string()),
        ("extstore_write_amplification", c_fixed(amplification, 2)),
    ])
}

/// `stats extstore`: four lines per page (memcached's `process_extstore_stats`). memcached's
/// `free_bucket` is the bucket a page goes back to when freed, set per `ext_path`; tern's files
/// take no bucket, so it is always the default bucket, 0.
pub fn page_lines(pages: &[FlashPageInfo]) -> Lines {
    pages
        .iter()
        .enumerate()
        .flat_map(|(i, page)| {
            [
                (format!("{i}:version"), page.version.to_string()),
                (format!("{i}:bytes"), page.bytes_used.to_string()),
                (format!("{i}:bucket"), page.bucket.to_string()),
                (format!("{i}:free_bucket"), 0.to_string()),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(lines: &Lines) -> Vec<&str> {
        lines.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn formats_as_c_prints_them() {
        assert_eq!(c_fixed(0.8, 2), "0.80");
        assert_eq!(c_fixed(0.01, 3), "0.010");
        assert_eq!(
            c_fixed(0.125, 2),
            "0.12",
            "exact ties round to even, as glibc"
        );
        assert_eq!(c_fixed(f64::NAN, 2), "nan");
        assert_eq!(c_fixed(-f64::NAN, 2), "-nan");
        assert_eq!(c_fixed(f64::INFINITY, 2), "inf");
    }

    #[test]
    fn settings_as_memcached_prints_them_by_default() {
        let got = settings_lines(&FlashSettings::default(), 4 << 20, 0.01);
        let want = [
            ("ext_item_size", "512"),
            ("ext_item_age", "4294967295"),
            ("ext_low_ttl", "0"),
            ("ext_recache_rate", "2000"),
            ("ext_wbuf_size", "4194304"),
            ("ext_compact_under", "0"),
            ("ext_drop_under", "0"),
            ("ext_max_sleep", "1000000"),
            ("ext_max_frag", "0.80"),
            ("slab_automove_freeratio", "0.010"),
            ("ext_drop_unread", "no"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn stats_lines_in_memcacheds_order_then_terns() {
        let stats = FlashStats {
            gets: 3,
            recaches: 1,
            bytes_written: 300,
            bytes_set: 200,
            pages_free: 24,
            limit_maxbytes: 1 << 30,
            ..FlashStats::default()
        };
        let get = get_lines(&stats);
        assert_eq!(
            names(&get),
            [
                "get_extstore",
                "get_aborted_extstore",
                "get_oom_extstore",
                "recache_from_extstore",
                "miss_from_extstore",
                "badcrc_from_extstore"
            ]
        );
        assert_eq!((get[0].1.as_str(), get[3].1.as_str()), ("3", "1"));
        let storage = storage_lines(&stats);
        // memcached 1.6.45's storage_stats, as it printed them on 2026-11-26.
        let memcached = [
            "extstore_memory_pressure",
            "extstore_compact_lost",
            "extstore_compact_rescues",
            "extstore_compact_resc_cold",
            "extstore_compact_resc_old",
            "extstore_compact_skipped",
            "extstore_page_allocs",
            "extstore_page_evictions",
            "extstore_page_reclaims",
            "extstore_pages_free",
            "extstore_pages_used",
            "extstore_objects_evicted",
            "extstore_objects_read",
            "extstore_objects_written",
            "extstore_objects_used",
            "extstore_bytes_evicted",
            "extstore_bytes_written",
            "extstore_bytes_read",
            "extstore_bytes_used",
            "extstore_bytes_fragmented",
            "extstore_limit_maxbytes",
            "extstore_io_queue",
        ];
        assert_eq!(names(&storage)[..memcached.len()], memcached);
        assert_eq!(
            names(&storage)[memcached.len()..],
            [
                "extstore_false_reads",
                "extstore_stale_entries",
                "extstore_write_amplification"
            ]
        );
        let value = |name: &str| &storage.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(value("extstore_memory_pressure"), "0.00");
        assert_eq!(value("extstore_pages_free"), "24");
        assert_eq!(value("extstore_limit_maxbytes"), "1073741824");
        assert_eq!(value("extstore_write_amplification"), "1.50");
        let nothing_set = storage_lines(&FlashStats::default());
        assert_eq!(nothing_set.last().unwrap().1, "0.00");
    }

    #[test]
    fn pages_as_memcached_lists_them() {
        let pages = [
            FlashPageInfo::default(),
            FlashPageInfo {
                version: 7,
                bytes_used: 4096,
                bucket: 2,
                free: false,
            },
        ];
        let got = page_lines(&pages);
        let got: Vec<String> = got.iter().map(|(n, v)| format!("{n} {v}")).collect();
        assert_eq!(
            got,
            [
                "0:version 0",
                "0:bytes 0",
                "0:bucket 0",
                "0:free_bucket 0",
                "1:version 7",
                "1:bytes 4096",
                "1:bucket 2",
                "1:free_bucket 0"
            ]
        );
        assert!(page_lines(&[]).is_empty());
    }
}
