//! What `tern top` knows about one server: its last sample, the rates over the last interval
//! and a short history of them. No I/O and no clock: samples and the time between them come in
//! from outside, so a test can feed canned ones.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// Points kept per sparkline: two minutes at the default one-second interval.
pub const HISTORY: usize = 120;

/// The commands shown, each with the `stats` counters whose sum counts it (names both tern and
/// memcached 1.6 print). memcached counts every storage command (set, add, replace, append,
/// prepend, cas) in `cmd_set`, and each key of a multi-get in `cmd_get`.
const COMMANDS: &[(&str, &[&str])] = &[
    ("get", &["cmd_get"]),
    ("set", &["cmd_set"]),
    ("delete", &["delete_hits", "delete_misses"]),
    ("incr", &["incr_hits", "incr_misses"]),
    ("decr", &["decr_hits", "decr_misses"]),
    ("touch", &["cmd_touch"]),
    ("flush", &["cmd_flush"]),
];

/// The commands whose latency percentiles are shown (tern's admin endpoint only).
pub const LATENCY_COMMANDS: &[&str] = &["get", "set"];

/// A latency histogram as Prometheus exposes it: cumulative counts by bucket upper bound in
/// seconds, the last bound infinite.
pub type Histogram = Vec<(f64, u64)>;

/// One poll of one server.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// The `version` command's answer: `1.6.18` from memcached, `1.6.18-tern-0.1.0` from tern
    /// (whose `stats` shows its own version only).
    pub version: String,
    /// The `stats` reply, by name.
    pub stats: HashMap<String, String>,
    /// From tern's `/metrics`: per command, its latency histogram. Empty without the admin
    /// endpoint.
    pub latency: BTreeMap<String, Histogram>,
    /// From tern's `/hotkeys`, hottest first; `None` without the admin endpoint.
    pub hot_keys: Option<Vec<HotKey>>,
    /// Why the admin endpoint gave nothing this time, when it was asked and failed.
    pub admin_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HotKey {
    /// As the server prints it: `\` and non-printable bytes escaped.
    pub key: String,
    pub requests_per_second: f64,
}

/// Per-second figures over the last interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    /// Requests per second by command, in [`COMMANDS`] order.
    pub by_command: Vec<(&'static str, f64)>,
    pub total: f64,
    /// Share of gets that hit; `None` when there were no gets.
    pub hit_ratio: Option<f64>,
    pub evictions: f64,
    pub new_connections: f64,
}

/// Latency upper bounds (the histogram's bucket bounds) over the last interval, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    pub requests: u64,
    /// The largest finite bound: a percentile beyond it is infinite (the `+Inf` bucket).
    pub ceiling: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

/// Sparkline series, one point per interval, oldest first.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub ops: VecDeque<u64>,
    /// Hit ratio in percent; an interval without gets repeats the last value.
    pub hit_ratio: VecDeque<u64>,
    pub connections: VecDeque<u64>,
    pub evictions: VecDeque<u64>,
}

impl History {
    fn push(&mut self, rates: &Rates, connections: u64) {
        let last_hit = self.hit_ratio.back().copied().unwrap_or(0);
        let hit = rates
            .hit_ratio
            .map_or(last_hit, |r| (r * 100.0).round() as u64);
        for (series, value) in [
            (&mut self.ops, rates.total.round() as u64),
            (&mut self.hit_ratio, hit),
            (&mut self.connections, connections),
            (&mut self.evictions, rates.evictions.round() as u64),
        ] {
            if series.len() == HISTORY {
                series.pop_front();
            }
            series.push_back(value);
        }
    }
}

/// One watched server.
#[derive(Clone, Debug)]
pub struct ServerModel {
    /// `host:port` as given.
    pub addr: String,
    /// The last sample that arrived; `None` before the first.
    pub last: Option<Sample>,
    /// Over the last interval; `None` until two samples in a row arrived.
    pub rates: Option<Rates>,
    /// Per [`LATENCY_COMMANDS`] entry, over the last interval.
    pub latency: Vec<(&'static str, Option<Percentiles>)>,
    pub history: History,
    /// Why the last poll failed; the figures shown are then the last ones that arrived.
    pub error: Option<String>,
    /// The next sample only sets a new baseline (after a pause or a failure), so no rate spans
    /// time the view did not watch.
    fresh_baseline: bool,
}

impl ServerModel {
    pub fn new(addr: impl Into<String>) -> ServerModel {
        ServerModel {
            addr: addr.into(),
            last: None,
            rates: None,
            latency: Vec::new(),
            history: History::default(),
            error: None,
            fresh_baseline: true,
        }
    }

    /// Takes a new sample, `elapsed` after the previous one.
    pub fn push(&mut self, sample: Sample, elapsed: Duration) {
        self.error = None;
        let restarted = match &self.last {
            // Counters start again from zero after a restart.
            Some(last) => stat_u64(&sample.stats, "uptime") < stat_u64(&last.stats, "uptime"),
            None => true,
        };
        if let (false, false, Some(last)) = (self.fresh_baseline, restarted, &self.last) {
            let seconds = elapsed.as_secs_f64().max(1e-3);
            let rates = rates(last, &sample, seconds);
            let connections = stat_u64(&sample.stats, "curr_connections");
            self.history.push(&rates, connections);
            self.rates = Some(rates);
            self.latency = LATENCY_COMMANDS
                .iter()
                .map(|&c| {
                    let now = sample.latency.get(c);
                    let before = last.latency.get(c).map(Vec::as_slice);
                    (c, now.and_then(|now| interval_percentiles(now, before)))
                })
                .collect();
        }
        self.fresh_baseline = false;
        self.last = Some(sample);
    }

    /// The poll failed: keep the last figures, say why, and start over at the next sample.
    pub fn failed(&mut self, error: String) {
        self.error = Some(error);
        self.fresh_baseline = true;
    }

    /// After a pause: the next sample is a baseline, not the end of a long interval.
    pub fn forget_baseline(&mut self) {
        self.fresh_baseline = true;
    }

    pub fn stat(&self, name: &str) -> Option<&str> {
        self.last
            .as_ref()
            .and_then(|s| s.stats.get(name))
            .map(String::as_str)
    }

    pub fn stat_u64(&self, name: &str) -> u64 {
        self.last.as_ref().map_or(0, |s| stat_u64(&s.stats, name))
    }

    fn version(&self) -> Option<&str> {
        self.last.as_ref().map(|s| s.version.as_str())
    }

    /// tern answers `version` with memcached's version, `-tern-` and its own.
    pub fn is_tern(&self) -> bool {
        self.version().is_some_and(|v| v.contains("-tern-"))
    }

    /// `tern 0.1.0`, `memcached 1.6.18`, or `?` before the first sample.
    pub fn kind(&self) -> String {
        match self.version() {
            Some(v) => match v.split_once("-tern-") {
                Some((_, tern)) => format!("tern {tern}"),
                None => format!("memcached {v}"),
            },
            None => "?".to_string(),
        }
    }

    /// Item bytes in use over the memory limit.
    pub fn memory_ratio(&self) -> Option<f64> {
        let limit = self.stat_u64("limit_maxbytes");
        (limit > 0).then(|| self.stat_u64("bytes") as f64 / limit as f64)
    }

    pub fn hot_keys(&self) -> Option<&[HotKey]> {
        self.last.as_ref().and_then(|s| s.hot_keys.as_deref())
    }

    pub fn admin_error(&self) -> Option<&str> {
        self.last.as_ref().and_then(|s| s.admin_error.as_deref())
    }

    /// Whether latency percentiles came from an admin endpoint.
    pub fn has_latency(&self) -> bool {
        self.last.as_ref().is_some_and(|s| !s.latency.is_empty())
    }
}

fn stat_u64(stats: &HashMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn rates(before: &Sample, now: &Sample, seconds: f64) -> Rates {
    // A `stats reset` moves counters back; the interval then counts as zero.
    let delta =
        |name: &str| stat_u64(&now.stats, name).saturating_sub(stat_u64(&before.stats, name));
    let by_command: Vec<(&'static str, f64)> = COMMANDS
        .iter()
        .map(|(command, counters)| {
            let count: u64 = counters.iter().map(|c| delta(c)).sum();
            (*command, count as f64 / seconds)
        })
        .collect();
    let hits = delta("get_hits");
    let lookups = hits + delta("get_misses");
    Rates {
        total: by_command.iter().map(|(_, r)| r).sum(),
        by_command,
        hit_ratio: (lookups > 0).then(|| hits as f64 / lookups as f64),
        evictions: delta("evictions") as f64 / seconds,
        new_connections: delta("total_connections") as f64 / seconds,
    }
}

/// Percentiles of the requests between two readings of a cumulative histogram (each bucket's
/// count includes the ones below it, as Prometheus exposes them). `None` without requests in
/// between or when the buckets changed shape.
pub fn interval_percentiles(
    now: &[(f64, u64)],
    before: Option<&[(f64, u64)]>,
) -> Option<Percentiles> {
    let counts: Vec<(f64, u64)> = match before {
        Some(before) => {
            if before.len() != now.len() {
                return None;
            }
            now.iter()
                .zip(before)
                .map(|(&(bound, n), &(_, b))| (bound, n.saturating_sub(b)))
                .collect()
        }
        None => now.to_vec(),
    };
    let requests = counts.last()?.1;
    if requests == 0 {
        return None;
    }
    let quantile = |q: f64| {
        let rank = ((q * requests as f64).ceil() as u64).max(1);
        counts
            .iter()
            .find(|&&(_, n)| n >= rank)
            .map_or(f64::INFINITY, |&(bound, _)| bound)
    };
    let ceiling = counts
        .iter()
        .map(|&(bound, _)| bound)
        .filter(|b| b.is_finite())
        .fold(0.0, f64::max);
    Some(Percentiles {
        requests,
        ceiling,
        p50: quantile(0.5),
        p99: quantile(0.99),
        p999: quantile(0.999),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: &[(&str, u64)]) -> Sample {
        Sample {
            stats: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Sample::default()
        }
    }

    #[test]
    fn rates_are_deltas_over_the_interval() {
        let mut m = ServerModel::new("h:1");
        m.push(
            sample(&[
                ("uptime", 10),
                ("cmd_get", 100),
                ("get_hits", 50),
                ("get_misses", 50),
            ]),
            Duration::ZERO,
        );
        assert!(m.rates.is_none(), "one sample is only a baseline");
        m.push(
            sample(&[
                ("uptime", 12),
                ("cmd_get", 300),
                ("get_hits", 200),
                ("get_misses", 100),
                ("cmd_set", 40),
                ("delete_hits", 2),
                ("delete_misses", 2),
                ("evictions", 6),
            ]),
            Duration::from_secs(2),
        );
        let r = m.rates.clone().unwrap();
        assert_eq!(r.by_command[0], ("get", 100.0));
        assert_eq!(r.by_command[1], ("set", 20.0));
        assert_eq!(r.by_command[2], ("delete", 2.0));
        assert_eq!(r.total, 122.0);
        assert_eq!(r.hit_ratio, Some(0.75));
        assert_eq!(r.evictions, 3.0);
        assert_eq!(m.history.ops, [122]);
        assert_eq!(m.history.hit_ratio, [75]);
    }

    #[test]
    fn a_restart_a_failure_or_a_pause_starts_a_new_baseline() {
        let mut m = ServerModel::new("h:1");
        m.push(
            sample(&[("uptime", 100), ("cmd_get", 1000)]),
            Duration::ZERO,
        );
        // Restarted: uptime went down, counters are new.
        m.push(
            sample(&[("uptime", 1), ("cmd_get", 10)]),
            Duration::from_secs(1),
        );
        assert!(m.rates.is_none());
        m.push(
            sample(&[("uptime", 2), ("cmd_get", 20)]),
            Duration::from_secs(1),
        );
        assert_eq!(m.rates.as_ref().unwrap().total, 10.0);
        m.failed("connection refused".into());
        m.push(
            sample(&[("uptime", 9), ("cmd_get", 90)]),
            Duration::from_secs(7),
        );
        assert_eq!(m.history.ops.len(), 1, "no rate across the failure");
        m.forget_baseline();
        m.push(
            sample(&[("uptime", 20), ("cmd_get", 500)]),
            Duration::from_secs(11),
        );
        assert_eq!(m.history.ops.len(), 1, "no rate across the pause");
    }

    #[test]
    fn percentiles_from_histogram_deltas() {
        let before = [(0.001, 10), (0.002, 10), (f64::INFINITY, 10)];
        // 100 new requests: 98 under 1 ms, 1 under 2 ms, 1 above.
        let now = [(0.001, 108), (0.002, 109), (f64::INFINITY, 110)];
        let p = interval_percentiles(&now, Some(&before)).unwrap();
        assert_eq!(p.requests, 100);
        assert_eq!((p.p50, p.p99, p.p999), (0.001, 0.002, f64::INFINITY));
        assert_eq!(p.ceiling, 0.002);
        assert_eq!(interval_percentiles(&before, Some(&before)), None);
        assert_eq!(interval_percentiles(&now, Some(&before[..2])), None);
    }

    #[test]
    fn kind_from_the_version() {
        let mut m = ServerModel::new("h:1");
        assert_eq!(m.kind(), "?");
        let s = Sample {
            version: "1.6.18-tern-0.1.0".into(),
            ..Sample::default()
        };
        m.push(s, Duration::ZERO);
        assert!(m.is_tern());
        assert_eq!(m.kind(), "tern 0.1.0");
        let s = Sample {
            version: "1.6.18".into(),
            ..Sample::default()
        };
        m.push(s, Duration::ZERO);
        assert_eq!(m.kind(), "memcached 1.6.18");
    }
}
