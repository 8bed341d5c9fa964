//! Prometheus text exposition format 0.0.4 of a [`Snapshot`].
//!
//! Hand-written rather than built on `prometheus-client` or `prometheus`: those crates are
//! registries of live metric objects that own their values, while tern's values already live in
//! per-worker cells and the store and are read once per scrape into a plain [`Snapshot`].
//! `prometheus-client` also writes only OpenMetrics (a `# EOF` trailer and `_total`-less family
//! names in `# TYPE`, unlike memcached_exporter's output that dashboards were built on) and has no
//! histogram built from existing bucket counts; `prometheus` would pull in protobuf to build the
//! same thing from message structs. The format itself is a few lines of `HELP`/`TYPE`/sample
//! text, encoded here and checked by the tests with Python's `prometheus_client` parser.

use std::fmt::Write;

use crate::snapshot::{MemcachedCounters, Snapshot};
use crate::worker::{latency_bucket_bound_nanos, Command, Outcome, WorkerSnapshot};

/// The HTTP `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Encoder {
    out: String,
}

impl Encoder {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"");
                for ch in v.chars() {
                    match ch {
                        '\\' => self.out.push_str("\\\\"),
                        '"' => self.out.push_str("\\\""),
                        '\n' => self.out.push_str("\\n"),
                        c => self.out.push(c),
                    }
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A metric with one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// A per-worker family: name, type, help, and how to read the value from one worker.
type PerWorkerMetric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&WorkerSnapshot) -> u64,
);

/// Renders `s` in the Prometheus text format: memcached_exporter's metrics under their names,
/// types, labels and help texts, then tern's own under `tern_`.
pub fn encode(s: &Snapshot) -> String {
    let t = s.totals();
    let m = MemcachedCounters::from_totals(&t);
    let mut e = Encoder {
        out: String::with_capacity(16 * 1024),
    };

    // memcached_exporter's names, so existing dashboards and alerts work unchanged.
    e.single(
        "memcached_up",
        "gauge",
        "Could the memcached server be reached.",
        1,
    );
    e.single(
        "memcached_uptime_seconds",
        "counter",
        "Number of seconds since the server started.",
        s.uptime_seconds,
    );
    e.single(
        "memcached_time_seconds",
        "gauge",
        "current UNIX time according to the server.",
        s.time_unix_seconds,
    );
    e.family(
        "memcached_version",
        "gauge",
        "The version of this memcached server.",
    );
    e.sample("memcached_version", &[("version", &s.version)], 1);
    e.single(
        "memcached_process_user_cpu_seconds_total",
        "counter",
        "Accumulated user time for this process.",
        s.rusage_user_seconds,
    );
    e.single(
        "memcached_process_system_cpu_seconds_total",
        "counter",
        "Accumulated system time for this process.",
        s.rusage_system_seconds,
    );
    e.single(
        "memcached_read_bytes_total",
        "counter",
        "Total number of bytes read by this server from network.",
        t.bytes_read,
    );
    e.single(
        "memcached_written_bytes_total",
        "counter",
        "Total number of bytes sent by this server to network.",
        t.bytes_written,
    );
    e.single(
        "memcached_current_connections",
        "gauge",
        "Current number of open connections.",
        t.current_connections(),
    );
    e.single(
        "memcached_max_connections",
        "gauge",
        "Maximum number of clients allowed.",
        s.max_connections,
    );
    e.single(
        "memcached_connections_total",
        "counter",
        "Total number of connections opened since the server started running.",
        t.conns_opened,
    );
    e.single(
        "memcached_connections_rejected_total",
        "counter",
        "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode.",
        t.conns_rejected,
    );
    e.single(
        "memcached_connections_yielded_total",
        "counter",
        "Total number of connections yielded running due to hitting the memcached's -R limit.",
        t.conn_yields,
    );
    e.single(
        "memcached_connections_listener_disabled_total",
        "counter",
        "Number of times that memcached has hit its connections limit and disabled its listener.",
        s.listen_disabled_num,
    );
    e.single(
        "memcached_current_bytes",
        "gauge",
        "Current number of bytes used to store items.",
        s.store.bytes,
    );
    e.single(
        "memcached_limit_bytes",
        "gauge",
        "Number of bytes this server is allowed to use for storage.",
        s.store.limit_bytes,
    );
    e.family(
        "memcached_commands_total",
        "counter",
        "Total number of all requests broken down by command (get, set, etc.) and status.",
    );
    for (command, status, value) in m.exporter_series() {
        e.sample(
            "memcached_commands_total",
            &[("command", command), ("status", status)],
            value,
        );
    }
    e.single(
        "memcached_current_items",
        "gauge",
        "Current number of items stored by this instance.",
        s.store.items,
    );
    e.single(
        "memcached_items_total",
        "counter",
        "Total number of items stored during the life of this instance.",
        s.store.total_items,
    );
    e.single(
        "memcached_items_evicted_total",
        "counter",
        "Total number of valid items removed from cache to free memory for new items.",
        s.store.evictions,
    );
    e.single(
        "memcached_items_reclaimed_total",
        "counter",
        "Total number of times an entry was stored using memory from an expired entry.",
        s.store.reclaimed,
    );
    e.single(
        "memcached_item_too_large_total",
        "counter",
        "The number of times an item exceeded the max-item-size when being stored.",
        m.store_too_large,
    );
    e.single(
        "memcached_item_no_memory_total",
        "counter",
        "The number of times an item could not be stored due to no more memory.",
        m.store_no_memory,
    );
    e.single(
        "memcached_malloced_bytes",
        "gauge",
        "Number of bytes of memory allocated to slab pages.",
        s.store.segments.malloced_bytes,
    );
    e.single(
        "memcached_accepting_connections",
        "gauge",
        "The Memcached server is currently accepting new connections.",
        s.accepting_connections as u8,
    );

    // tern's own.
    e.family(
        "tern_commands_total",
        "counter",
        "Requests by command and outcome (retrievals count one per key).",
    );
    for &c in Command::ALL {
        for &o in Outcome::ALL {
            let v = t.get(c, o);
            if v > 0 {
                e.sample(
                    "tern_commands_total",
                    &[("command", c.label()), ("status", o.label())],
                    v,
                );
            }
        }
    }
    e.family(
        "tern_command_duration_seconds",
        "histogram",
        "Server-side time per request, from the read that brought it in to the write of its response, by command.",
    );
    for &c in Command::ALL {
        let h = &t.latency[c as usize];
        let count = h.count();
        if count == 0 {
            continue;
        }
        let mut cumulative = 0;
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative += n;
            let le = match latency_bucket_bound_nanos(i) {
                Some(ns) => (ns as f64 / 1e9).to_string(),
                None => "+Inf".to_string(),
            };
            e.sample(
                "tern_command_duration_seconds_bucket",
                &[("command", c.label()), ("le", &le)],
                cumulative,
            );
        }
        e.sample(
            "tern_command_duration_seconds_sum",
            &[("command", c.label())],
            h.sum_nanos as f64 / 1e9,
        );
        e.sample(
            "tern_command_duration_seconds_count",
            &[("command", c.label())],
            count,
        );
    }
    let per_worker: [PerWorkerMetric; 3] = [
        (
            "tern_worker_requests_total",
            "counter",
            "Requests handled by each worker thread.",
            WorkerSnapshot::requests,
        ),
        (
            "tern_worker_wakeups_total",
            "counter",
            "Event-loop wake-ups with events to handle, by worker thread.",
            |w| w.wakeups,
        ),
        (
            "tern_worker_connections",
            "gauge",
            "Open connections owned by each worker thread.",
            WorkerSnapshot::current_connections,
        ),
    ];
    for (name, kind, help, value) in per_worker {
        e.family(name, kind, help);
        for (i, w) in s.workers.iter().enumerate() {
            e.sample(name, &[("worker", &i.to_string())], value(w));
        }
    }
    let seg = &s.store.segments;
    e.single(
        "tern_segment_size_bytes",
        "gauge",
        "Size of one storage segment.",
        seg.segment_bytes,
    );
    e.family("tern_segments", "gauge", "Storage segments by state.");
    e.sample("tern_segments", &[("state", "used")], seg.segments_used());
    e.sample("tern_segments", &[("state", "free")], seg.segments_free);
    e.single(
        "tern_heap_bytes",
        "gauge",
        "Bytes of the heap opened for segments (the memory limit's reach so far).",
        seg.heap_bytes(),
    );
    e.family(
        "tern_segment_item_bytes",
        "gauge",
        "Bytes in used segments: live items, and dead space (deleted or overwritten items not yet reclaimed, unwritten segment ends).",
    );
    e.sample(
        "tern_segment_item_bytes",
        &[("state", "live")],
        seg.live_bytes,
    );
    e.sample(
        "tern_segment_item_bytes",
        &[("state", "dead")],
        seg.dead_bytes,
    );
    e.single(
        "tern_segment_merges_total",
        "counter",
        "Merge evictions: the oldest segments of a TTL group compacted into one, unread items evicted.",
        seg.merges,
    );
    e.single(
        "tern_segments_expired_total",
        "counter",
        "Segments freed because all their items expired.",
        seg.segments_expired,
    );
    e.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut e = Encoder { out: String::new() };
        e.sample("m", &[("version", "a\"b\\c\nd")], 1);
        assert_eq!(e.out, "m{version=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let w = crate::WorkerMetrics::new();
        w.record(Command::Get, Outcome::Hit, 100);
        w.record(Command::Get, Outcome::Hit, 1_000_000_000);
        let snap = Snapshot {
            workers: vec![w.snapshot()],
            ..Snapshot::default()
        };
        let text = encode(&snap);
        assert!(text.contains(
            "tern_command_duration_seconds_bucket{command=\"get\",le=\"0.000000128\"} 1\n"
        ));
        assert!(
            text.contains("tern_command_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 2\n")
        );
        assert!(text.contains("tern_command_duration_seconds_count{command=\"get\"} 2\n"));
        assert!(!text.contains("command=\"set\",le"));
    }
}
