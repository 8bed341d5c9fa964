//! What people read: the live line each second, the final table, and the `--hdr` interval log.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};

use crate::run::{RunReport, Second};
use crate::stats::Latency;

/// The live display: a progress bar with the line as its message on a terminal, plain lines on
/// stderr otherwise (CI logs, pipes).
pub struct Live {
    bar: Option<ProgressBar>,
    quiet: bool,
    /// Merged histograms per second, kept only when an `--hdr` log is wanted.
    intervals: Option<Vec<(u64, Histogram<u64>)>>,
}

pub fn live_line(s: &Second) -> String {
    let c = &s.stats.counts;
    let l = Latency::of(&s.stats.latency);
    let reconnects = match c.reconnects {
        0 => String::new(),
        n => format!("  reconnects {n}"),
    };
    let server = s
        .server_cpu_percent
        .map_or(String::new(), |p| format!("  server cpu {p:>5.1}%"));
    format!(
        "[{:>4}s] {:>10} ops/s  p50 {:>8.1} us  p99 {:>8.1} us  max {:>8.1} us  errors {}{reconnects}{server}{}",
        s.second + 1,
        (c.replies as f64 / s.span.max(1e-3)).round(),
        l.p50,
        l.p99,
        l.max,
        c.errors.total(),
        match (s.measuring, s.span < 0.99) {
            (false, _) => "  (warm-up)".to_string(),
            // A thread's last tick covers only the end of the run (the drain).
            (true, true) => format!("  (last {:.3} s)", s.span),
            (true, false) => String::new(),
        }
    )
}

impl Live {
    /// `seconds`: expected length of the run, for the bar; `quiet`: print nothing live.
    pub fn new(seconds: Option<u64>, keep_intervals: bool, quiet: bool) -> Live {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(seconds.unwrap_or(0));
            let template = if seconds.is_some() {
                "{bar:40} {pos}/{len}s"
            } else {
                "{spinner} {elapsed}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
            bar
        });
        Live {
            bar,
            quiet,
            intervals: keep_intervals.then(Vec::new),
        }
    }

    pub fn second(&mut self, s: &Second) {
        if let Some(intervals) = &mut self.intervals {
            intervals.push((s.second, s.stats.latency.clone()));
        }
        let line = live_line(s);
        match &self.bar {
            Some(bar) => {
                // Each second stays on screen above the bar, as the plain lines do.
                bar.println(&line);
                bar.set_position(s.second + 1);
            }
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Writes the per-second histograms as an HdrHistogram interval log (values in ns; the
    /// max-value divisor makes the max column read in milliseconds).
    pub fn write_hdr(&self, path: &Path) -> anyhow::Result<()> {
        let intervals = self.intervals.as_deref().unwrap_or_default();
        let mut file =
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        let mut serializer = V2DeflateSerializer::new();
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("tern bench latency log; values in nanoseconds")
            .with_start_time(std::time::SystemTime::now())
            .with_max_value_divisor(1e6)
            .begin_log_with(&mut file, &mut serializer)?;
        for (second, h) in intervals {
            log.write_histogram(
                h,
                Duration::from_secs(*second),
                Duration::from_secs(1),
                None,
            )
            .map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// The final table.
pub fn print_table(r: &RunReport, out: &mut dyn Write) -> std::io::Result<()> {
    let w = &r.workload;
    let mode = match r.target_rate {
        Some(rate) => format!("open loop at {rate:.0}/s ({})", w.arrivals),
        None => "closed loop".into(),
    };
    writeln!(
        out,
        "tern bench: {mode}, {} x {} connections x pipeline {}, {}/{}, {} server(s), {:.1} s",
        w.threads,
        w.connections,
        w.pipeline,
        w.protocol,
        w.transport,
        w.servers.iter().flat_map(|s| s.split(',')).count(),
        r.seconds
    )?;
    if let Some(k) = &r.key_space {
        writeln!(
            out,
            "  key space    {} keys x {:.0} B = {} x limit_maxbytes ({} B)",
            k.keys, k.bytes_per_key, k.factor, k.limit_maxbytes
        )?;
    }
    if let Some(p) = &r.preload {
        writeln!(
            out,
            "  preload      {} keys in {:.2} s ({} failed)",
            p.keys, p.seconds, p.failed
        )?;
    }
    if let Some(s) = &r.settle {
        if s.settled {
            writeln!(out, "  settle       flash idle after {:.2} s", s.seconds)?;
        } else {
            writeln!(
                out,
                "  settle       flash still busy after {:.2} s",
                s.seconds
            )?;
        }
    }
    writeln!(
        out,
        "  throughput   {:.0} ops/s ({} replies)",
        r.ops_per_sec, r.requests
    )?;
    let l = &r.latency_us;
    writeln!(
        out,
        "  latency us   mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}  max {:.1}",
        l.mean, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
    )?;
    if let Some(h) = r.hit_ratio {
        writeln!(
            out,
            "  hit ratio    {:.2}% ({} hits, {} misses)",
            h * 100.0,
            r.counts.hits,
            r.counts.misses
        )?;
    }
    if let Some(g) = &r.server_gets {
        let share = |n: u64| 100.0 * n as f64 / g.total().max(1) as f64;
        writeln!(
            out,
            "  server gets  {} from RAM ({:.1}%), {} from flash ({:.1}%), {} misses ({:.1}%; {} gone from flash)",
            g.from_ram,
            share(g.from_ram),
            g.from_flash,
            share(g.from_flash),
            g.misses,
            share(g.misses),
            g.flash_misses
        )?;
    }
    let commands: Vec<String> = r
        .by_command
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    writeln!(out, "  commands     {}", commands.join("  "))?;
    let c = &r.counts;
    writeln!(
        out,
        "  outcomes     not_found {}  not_stored {}  exists {}",
        c.not_found, c.not_stored, c.exists
    )?;
    let e = &c.errors;
    writeln!(
        out,
        "  errors       {} (ERROR {}  CLIENT_ERROR {}  SERVER_ERROR {}  binary {}  timeout {}  disconnected {}  refused {})",
        e.total(),
        e.error,
        e.client_error,
        e.server_error,
        e.binary_status,
        e.timeout,
        e.disconnected,
        e.refused
    )?;
    if r.workload.reconnect {
        writeln!(
            out,
            "  connections  {} reconnects, {} refused attempts, {} error replies, {} misses",
            c.reconnects,
            e.refused,
            e.replies(),
            c.misses
        )?;
    }
    if r.target_rate.is_some() || c.unanswered > 0 {
        writeln!(
            out,
            "  schedule     {} sent late (over 1 ms after due), {} unanswered",
            c.late, c.unanswered
        )?;
    }
    if let Some(cpu) = &r.cpu {
        if let (Some(pid), Some(us)) = (cpu.server_pid, cpu.server_cpu_us_per_request) {
            writeln!(
                out,
                "  server cpu   pid {pid}: {us:.2} us/request ({:.0} ms)",
                cpu.server_cpu_ms.unwrap_or(0.0)
            )?;
        }
        for s in &cpu.machine {
            writeln!(
                out,
                "  {:<12} usr {:>5.1}%  sys {:>5.1}%  irq {:>4.1}%  softirq {:>5.1}%  iowait {:>4.1}%  steal {:>4.1}%  idle {:>5.1}%",
                s.cpu, s.usr, s.sys, s.irq, s.softirq, s.iowait, s.steal, s.idle
            )?;
        }
    }
    Ok(())
}
