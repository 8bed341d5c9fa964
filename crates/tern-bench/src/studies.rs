//! The studies' experiments: a sweep of one parameter, the highest rate that meets a latency SLO,
//! and two servers compared by alternated runs.

use std::time::Duration;

use anyhow::{bail, ensure};
use serde::Serialize;

use crate::run::{self, RunReport, Second};
use crate::workload::Workload;

/// The parameter a sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vary {
    Connections,
    Rate,
    Threads,
    Pipeline,
    Multiget,
    ValueSize,
}

impl Vary {
    pub fn label(self) -> &'static str {
        match self {
            Vary::Connections => "connections per thread",
            Vary::Rate => "target rate (requests/s)",
            Vary::Threads => "generator threads",
            Vary::Pipeline => "pipeline depth",
            Vary::Multiget => "keys per multiget",
            Vary::ValueSize => "value size (bytes)",
        }
    }

    /// Sets the parameter to `x` in `w`.
    pub fn apply(self, w: &mut Workload, x: f64) {
        let n = x.round().max(1.0) as usize;
        match self {
            Vary::Connections => w.connections = n,
            Vary::Rate => w.rate = Some(x),
            Vary::Threads => w.threads = n,
            Vary::Pipeline => w.pipeline = n,
            Vary::Multiget => {
                w.multiget = n;
                // Sweeping multiget size is only meaningful if multigets are sent.
                if !w.mix.contains("multiget") {
                    w.mix = "multiget:1".into();
                }
            }
            Vary::ValueSize => w.value_size = n.to_string(),
        }
    }
}

/// `from`, `from + step`, ... up to `to` (inclusive, within rounding).
pub fn steps(from: f64, to: f64, step: f64) -> anyhow::Result<Vec<f64>> {
    ensure!(step > 0.0, "--step must be positive");
    ensure!(from <= to, "--from must not exceed --to");
    let count = ((to - from) / step + 1e-9).floor() as usize + 1;
    ensure!(count <= 1000, "a sweep of {count} points is too long");
    Ok((0..count).map(|i| from + step * i as f64).collect())
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    pub x: f64,
    pub report: RunReport,
}

/// Runs `base` once per value. Keys are preloaded on the first point only, unless the value size
/// changes, since the server keeps them between points.
pub fn sweep(
    base: &Workload,
    vary: Vary,
    values: &[f64],
    server_pid: Option<u32>,
    on_second: &mut dyn FnMut(&Second),
    on_point: &mut dyn FnMut(&SweepPoint),
) -> anyhow::Result<Vec<SweepPoint>> {
    let mut points = Vec::new();
    for (i, &x) in values.iter().enumerate() {
        let mut w = base.clone();
        vary.apply(&mut w, x);
        w.preload = base.preload && (i == 0 || vary == Vary::ValueSize);
        let report = run::run(&w, server_pid, on_second)?;
        let point = SweepPoint { x, report };
        on_point(&point);
        points.push(point);
    }
    Ok(points)
}

pub fn sweep_csv(vary: Vary, points: &[SweepPoint]) -> String {
    let mut csv = format!(
        "{},ops_per_sec,mean_us,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us,hit_ratio,errors,late,server_cpu_us_per_request\n",
        serde_json::to_value(vary).expect("a name").as_str().expect("a string")
    );
    for p in points {
        let r = &p.report;
        let l = &r.latency_us;
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
        csv += &format!(
            "{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},{},{}\n",
            p.x,
            r.ops_per_sec,
            l.mean,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.p9999,
            l.max,
            opt(r.hit_ratio),
            r.errors_total,
            r.counts.late,
            opt(r.cpu.as_ref().and_then(|c| c.server_cpu_us_per_request)),
        );
    }
    csv
}

/// The latency objective: every given percentile must stay at or under its bound.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Slo {
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
}

impl Slo {
    pub fn new(p99: Option<Duration>, p999: Option<Duration>) -> anyhow::Result<Slo> {
        if p99.is_none() && p999.is_none() {
            bail!("give --p99 and/or --p999");
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Ok(Slo {
            p99_us: p99.map(us),
            p999_us: p999.map(us),
        })
    }

    /// Met when the percentiles are in bounds and the server kept up with the rate (an open-loop
    /// run that fell behind would otherwise pass on the requests it did answer). 90 %, not more:
    /// throughput counts until the last reply, so a short probe loses a few percent to any
    /// hiccup at its end, while a server that falls behind loses far more.
    pub fn met_by(&self, r: &RunReport) -> bool {
        let l = &r.latency_us;
        let within = |bound: Option<f64>, v: f64| bound.is_none_or(|b| v <= b);
        let kept_up = r.target_rate.is_none_or(|rate| r.ops_per_sec >= 0.9 * rate);
        within(self.p99_us, l.p99)
            && within(self.p999_us, l.p999)
            && kept_up
            && r.errors_total == 0
            && r.counts.unanswered == 0
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub rate: f64,
    pub met: bool,
    pub report: RunReport,
}

#[derive(Clone, Debug, Serialize)]
pub struct SloResult {
    pub slo: Slo,
    /// The closed-loop run that sized the search (absent when --max-rate was given).
    pub capacity: Option<RunReport>,
    /// Highest rate that met the SLO; null if even the lowest rate tried did not.
    pub best_rate: Option<f64>,
    pub best: Option<RunReport>,
    pub probes: Vec<Probe>,
}

/// Whether a rate meets the SLO, from its probes so far: when most of `repeats` probes do. A
/// short probe fails on a stall of the machine as readily as on the server's own tail (a
/// 16-core VM stalled idle servers and generators alike for 10-50 ms, 2026-11-26), and one
/// such probe used to decide the whole search below it.
#[derive(Clone, Copy, Debug)]
pub struct Majority {
    needed: u32,
    allowed_failures: u32,
    passed: u32,
    failed: u32,
}

impl Majority {
    /// For `repeats` probes (at least 1).
    pub fn of(repeats: u32) -> Majority {
        let repeats = repeats.max(1);
        let needed = repeats / 2 + 1;
        Majority {
            needed,
            allowed_failures: repeats - needed,
            passed: 0,
            failed: 0,
        }
    }

    /// Counts a probe; the verdict once it is decided (no further probe could change it).
    pub fn record(&mut self, met: bool) -> Option<bool> {
        if met {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        if self.passed >= self.needed {
            Some(true)
        } else if self.failed > self.allowed_failures {
            Some(false)
        } else {
            None
        }
    }
}

/// How `slo_search` looks.
#[derive(Clone, Copy, Debug)]
pub struct SloSearch {
    pub slo: Slo,
    /// Probes per rate, of which most must meet the SLO (see [`Majority`]).
    pub repeats: u32,
    /// Lowest rate to try (default: 1% of the highest).
    pub min_rate: Option<f64>,
    /// Highest rate to try (default: 120% of a closed-loop run's throughput).
    pub max_rate: Option<f64>,
    /// Stop when the bracket is this narrow, as a fraction of the rate.
    pub precision: f64,
}

/// Bisects the open-loop rate between the search's bounds until the bracket is narrow enough.
pub fn slo_search(
    base: &Workload,
    search: SloSearch,
    server_pid: Option<u32>,
    on_second: &mut dyn FnMut(&Second),
    on_probe: &mut dyn FnMut(&Probe),
) -> anyhow::Result<SloResult> {
    let SloSearch {
        slo,
        repeats,
        min_rate,
        max_rate,
        precision,
    } = search;
    ensure!(precision > 0.0, "--precision must be positive");
    let mut w = base.clone();
    let capacity = match max_rate {
        Some(_) => None,
        None => {
            w.rate = None;
            let r = run::run(&w, server_pid, on_second)?;
            w.preload = false;
            Some(r)
        }
    };
    let hi_start =
        max_rate.unwrap_or_else(|| capacity.as_ref().map_or(1000.0, |c| c.ops_per_sec * 1.2));
    let mut lo = min_rate.unwrap_or(hi_start * 0.01).max(1.0);
    let mut hi = hi_start.max(lo);
    let mut probes = Vec::new();
    let mut try_rate = |rate: f64, w: &mut Workload| -> anyhow::Result<bool> {
        w.rate = Some(rate);
        let mut majority = Majority::of(repeats);
        loop {
            let report = run::run(w, server_pid, on_second)?;
            w.preload = false;
            let probe = Probe {
                rate,
                met: slo.met_by(&report),
                report,
            };
            on_probe(&probe);
            let verdict = majority.record(probe.met);
            probes.push(probe);
            if let Some(met) = verdict {
                return Ok(met);
            }
        }
    };
    let best_rate = if try_rate(hi, &mut w)? {
        Some(hi)
    } else if !try_rate(lo, &mut w)? {
        None
    } else {
        while (hi - lo) / hi > precision {
            let mid = (lo + hi) / 2.0;
            if try_rate(mid, &mut w)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    };
    // The first probe at the best rate that met the SLO.
    let best = best_rate.and_then(|rate| {
        probes
            .iter()
            .find(|p| p.rate == rate && p.met)
            .map(|p| p.report.clone())
    });
    Ok(SloResult {
        slo,
        capacity,
        best_rate,
        best,
        probes,
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct Side {
    pub servers: String,
    pub runs: Vec<RunReport>,
    pub median_ops_per_sec: f64,
    pub median_p50_us: f64,
    pub median_p99_us: f64,
    pub median_p999_us: f64,
    pub median_server_cpu_us_per_request: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    /// b / a for each median.
    pub ratio_ops_per_sec: f64,
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    pub ratio_p999: f64,
    pub ratio_server_cpu_per_request: Option<f64>,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn side(servers: &str, runs: Vec<RunReport>) -> Side {
    let m = |f: fn(&RunReport) -> f64| median(runs.iter().map(f).collect());
    let cpu: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.cpu.as_ref().and_then(|c| c.server_cpu_us_per_request))
        .collect();
    Side {
        servers: servers.to_string(),
        median_ops_per_sec: m(|r| r.ops_per_sec),
        median_p50_us: m(|r| r.latency_us.p50),
        median_p99_us: m(|r| r.latency_us.p99),
        median_p999_us: m(|r| r.latency_us.p999),
        median_server_cpu_us_per_request: (cpu.len() == runs.len()).then(|| median(cpu)),
        runs,
    }
}

/// Runs `base` against `a` then `b`, `rounds` times, alternating so drift in a noisy machine
/// hits both sides alike.
pub fn compare(
    base: &Workload,
    a: &str,
    b: &str,
    rounds: usize,
    on_second: &mut dyn FnMut(&Second),
    on_run: &mut dyn FnMut(&str, &RunReport),
) -> anyhow::Result<Comparison> {
    ensure!(rounds > 0, "--rounds must be at least 1");
    let mut runs = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (i, servers) in [a, b].into_iter().enumerate() {
            let mut w = base.clone();
            w.servers = vec![servers.to_string()];
            w.preload = base.preload && round == 0;
            let report = run::run(&w, None, on_second)?;
            on_run(servers, &report);
            runs[i].push(report);
        }
    }
    let [ra, rb] = runs;
    let (a, b) = (side(a, ra), side(b, rb));
    Ok(Comparison {
        ratio_ops_per_sec: b.median_ops_per_sec / a.median_ops_per_sec,
        ratio_p50: b.median_p50_us / a.median_p50_us,
        ratio_p99: b.median_p99_us / a.median_p99_us,
        ratio_p999: b.median_p999_us / a.median_p999_us,
        ratio_server_cpu_per_request: a
            .median_server_cpu_us_per_request
            .zip(b.median_server_cpu_us_per_request)
            .map(|(x, y)| y / x),
        a,
        b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_include_both_ends() {
        assert_eq!(
            steps(1.0, 17.0, 4.0).unwrap(),
            vec![1.0, 5.0, 9.0, 13.0, 17.0]
        );
        assert_eq!(steps(0.1, 0.3, 0.1).unwrap().len(), 3);
        assert!(steps(5.0, 1.0, 1.0).is_err());
    }

    #[test]
    fn each_vary_sets_its_parameter() {
        let base = Workload::default();
        let set = |vary: Vary, x: f64| {
            let mut w = base.clone();
            vary.apply(&mut w, x);
            w
        };
        assert_eq!(set(Vary::Connections, 8.0).connections, 8);
        assert_eq!(set(Vary::Threads, 2.0).threads, 2);
        assert_eq!(set(Vary::Pipeline, 16.0).pipeline, 16);
        assert_eq!(set(Vary::Rate, 1500.5).rate, Some(1500.5));
        assert_eq!(set(Vary::ValueSize, 4096.0).value_size, "4096");
        let multiget = set(Vary::Multiget, 16.0);
        assert_eq!(
            (multiget.multiget, multiget.mix.as_str()),
            (16, "multiget:1")
        );
        let mut mixed = base.clone();
        mixed.mix = "get:1,multiget:1".into();
        Vary::Multiget.apply(&mut mixed, 4.0);
        assert_eq!(
            mixed.mix, "get:1,multiget:1",
            "a mix with multigets is kept"
        );
    }

    #[test]
    fn slo_needs_a_bound_and_keeps_it_in_microseconds() {
        assert!(Slo::new(None, None).is_err());
        let slo = Slo::new(None, Some(Duration::from_millis(2))).unwrap();
        assert_eq!(slo.p999_us, Some(2000.0));
    }

    #[test]
    fn a_rate_meets_the_slo_when_most_of_its_probes_do_and_probing_stops_once_decided() {
        let verdicts = |repeats: u32, probes: &[bool]| {
            let mut majority = Majority::of(repeats);
            probes
                .iter()
                .map(|&met| majority.record(met))
                .collect::<Vec<_>>()
        };
        assert_eq!(verdicts(1, &[true]), [Some(true)]);
        assert_eq!(verdicts(1, &[false]), [Some(false)]);
        assert_eq!(verdicts(3, &[true, true]), [None, Some(true)]);
        assert_eq!(verdicts(3, &[false, false]), [None, Some(false)]);
        assert_eq!(verdicts(3, &[true, false, true]), [None, None, Some(true)]);
        assert_eq!(
            verdicts(3, &[false, true, false]),
            [None, None, Some(false)]
        );
        // Of an even number, more than half: one failure of two decides.
        assert_eq!(verdicts(2, &[true, false]), [None, Some(false)]);
        assert_eq!(verdicts(2, &[true, true]), [None, Some(true)]);
        assert_eq!(
            verdicts(5, &[false, true, false, true, true]),
            [None, None, None, None, Some(true)]
        );
        assert_eq!(verdicts(0, &[true]), [Some(true)]);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
