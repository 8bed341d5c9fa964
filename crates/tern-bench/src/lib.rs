//! `tern bench`: measure a memcached-compatible server's throughput at a tail-latency SLO,
//! honestly (open loop timed from the schedule), against one server or a ketama-spread pool.

mod alarm;
pub mod cpu;
pub mod engine;
pub mod ketama;
pub mod plot;
pub mod report;
pub mod run;
pub mod server_stats;
pub mod stats;
pub mod studies;
pub mod tls;
pub mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::report::Live;
use crate::run::RunReport;
use crate::studies::{Slo, SloSearch, Vary};
use crate::workload::{Plan, Workload};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// One run (what `tern bench` does with no subcommand).
    Run(RunArgs),
    /// Run once per value of one parameter; write CSV, JSON, and an SVG and PNG figure.
    Sweep(SweepArgs),
    /// Search the open-loop rate for the highest throughput that meets a latency SLO.
    Slo(SloArgs),
    /// Run the same workload against two servers, alternately, and print the ratios.
    Compare(CompareArgs),
}

/// The workload; every flag overrides the `--workload` file, which overrides the defaults.
#[derive(Args, Debug, Clone, Default)]
pub struct WorkloadArgs {
    /// Server `host:port` or unix socket path; repeat or comma-separate for a ketama pool.
    #[arg(short = 's', long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<String>,
    /// A TOML workload file (see docs/bench.md); flags given too take precedence.
    #[arg(short = 'w', long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// ascii, meta or binary.
    #[arg(short = 'P', long, value_parser = ["ascii", "meta", "binary"])]
    pub protocol: Option<String>,
    /// Send gets over UDP (ASCII get/multiget only; keys are preloaded over TCP).
    #[arg(long)]
    pub udp: bool,
    /// Connect over TLS, trusting the CA certificates in this PEM file (the server's certificate
    /// must name the address given with -s).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Generator threads, one event loop each.
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Connections per thread to each server.
    #[arg(short = 'c', long)]
    pub connections: Option<usize>,
    /// Requests in flight per connection.
    #[arg(short = 'p', long)]
    pub pipeline: Option<usize>,
    /// Command mix by weight, e.g. `get:8,set:2` (get set multiget delete incr touch mg ms).
    #[arg(short = 'm', long)]
    pub mix: Option<String>,
    /// Keys per multiget.
    #[arg(long)]
    pub multiget: Option<usize>,
    /// Distinct keys.
    #[arg(short = 'k', long)]
    pub keys: Option<u64>,
    /// Instead of --keys: as many keys as fill X times the servers' memory (`limit_maxbytes`
    /// from their stats, summed), each item counted as mean value size + key length + 59 bytes.
    #[arg(long, value_name = "X", conflicts_with = "keys")]
    pub key_space_factor: Option<f64>,
    /// Bytes per key.
    #[arg(long)]
    pub key_len: Option<usize>,
    /// uniform, sequential or zipf:<exponent>.
    #[arg(long)]
    pub key_distribution: Option<String>,
    /// Value bytes: `256`, `100-1000` or `64:8,1024:2` (size:weight).
    #[arg(short = 'v', long)]
    pub value_size: Option<String>,
    /// Item TTL in seconds (0: none).
    #[arg(long)]
    pub ttl: Option<u32>,
    /// Skip storing every key before measuring.
    #[arg(long)]
    pub no_preload: bool,
    /// Preload at this many sets per second in total (default: as fast as the server answers);
    /// a flash tier's writer may need the preload slower than that, or the server evicts.
    #[arg(long, value_name = "RATE")]
    pub preload_rate: Option<f64>,
    /// Before measuring, wait up to this long (e.g. `30s`) for the servers' flash tier to go
    /// idle: `extstore_io_queue` 0 and no flash write for a second (at once without one).
    #[arg(long, value_name = "LIMIT")]
    pub settle: Option<String>,
    /// Unrecorded run time first, e.g. `2s`.
    #[arg(long)]
    pub warmup: Option<String>,
    /// Measured time, e.g. `10s`.
    #[arg(short = 'd', long)]
    pub duration: Option<String>,
    /// Measure exactly this many requests instead of a duration.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Open loop at this many requests per second in total; without it, closed loop.
    #[arg(short = 'r', long)]
    pub rate: Option<f64>,
    /// Open-loop arrivals: constant or poisson.
    #[arg(long, value_parser = ["constant", "poisson"])]
    pub arrivals: Option<String>,
    /// Open loop: poll without sleeping for this long before each send is due (default `1ms`;
    /// shorter sleeps more: see docs/bench.md).
    #[arg(long, value_name = "DURATION")]
    pub spin: Option<String>,
    /// Random seed (runs with the same seed send the same keys and commands).
    #[arg(long)]
    pub seed: Option<u64>,
    /// When the server closes a connection, reconnect and send again what it left unanswered
    /// (counted as `reconnects`; failed attempts as `refused` errors). Without it a closed
    /// connection is a `disconnected` error and its requests go unanswered.
    #[arg(long)]
    pub reconnect: bool,
    /// Pin generator thread i to the (i mod n)-th CPU of this list (`8-15`, `2,4,6`).
    #[arg(long, value_name = "CPUS")]
    pub pin: Option<String>,
}

impl WorkloadArgs {
    pub fn resolve(&self) -> anyhow::Result<Workload> {
        let mut w = match &self.workload {
            Some(path) => Workload::from_toml_file(path)?,
            None => Workload::default(),
        };
        macro_rules! overlay {
            ($($field:ident),*) => {$(
                if let Some(v) = &self.$field {
                    w.$field = v.clone();
                }
            )*};
        }
        overlay!(
            protocol,
            threads,
            connections,
            pipeline,
            mix,
            multiget,
            keys,
            key_len,
            key_distribution,
            value_size,
            ttl,
            warmup,
            duration,
            arrivals,
            spin,
            seed
        );
        if !self.servers.is_empty() {
            w.servers = self.servers.clone();
        }
        if let Some(ca) = &self.tls_ca {
            w.tls_ca = Some(ca.display().to_string());
        }
        if self.udp {
            w.transport = "udp".into();
            if self.mix.is_none() && w.mix == Workload::default().mix {
                w.mix = "get:1".into();
            }
        }
        if self.no_preload {
            w.preload = false;
        }
        if self.reconnect {
            w.reconnect = true;
        }
        if self.pin.is_some() {
            w.pin = self.pin.clone();
        }
        if self.requests.is_some() {
            w.requests = self.requests;
        }
        if self.rate.is_some() {
            w.rate = self.rate;
        }
        if self.keys.is_some() {
            // A key count given here beats a factor in the workload file.
            w.key_space_factor = None;
        }
        if self.key_space_factor.is_some() {
            w.key_space_factor = self.key_space_factor;
        }
        if self.preload_rate.is_some() {
            w.preload_rate = self.preload_rate;
        }
        if self.settle.is_some() {
            w.settle = self.settle.clone();
        }
        Plan::new(&w)?; // report a bad workload before anything starts
        Ok(w)
    }
}

#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print the report as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write an HdrHistogram interval log (one histogram per second) to this file.
    #[arg(long, value_name = "FILE")]
    pub hdr: Option<PathBuf>,
    /// No live line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Server process to account CPU time to (default: the local process listening on the
    /// server's TCP port, when there is one server).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

#[derive(Args, Debug, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The parameter to vary.
    #[arg(long)]
    pub vary: Vary,
    #[arg(long, required_unless_present = "values")]
    pub from: Option<f64>,
    #[arg(long, required_unless_present = "values")]
    pub to: Option<f64>,
    #[arg(long, default_value_t = 1.0)]
    pub step: f64,
    /// Explicit values instead of --from/--to/--step, e.g. `1,2,4,8,16`.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["from", "to"])]
    pub values: Vec<f64>,
    /// Folder for sweep.csv, sweep.json, sweep.svg and sweep.png.
    #[arg(short = 'o', long, default_value = "tern-bench-sweep")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct SloArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// p99 bound, e.g. `1ms`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub p99: Option<Duration>,
    /// p99.9 bound, e.g. `2ms`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub p999: Option<Duration>,
    /// Lowest rate to try (default: 1% of the highest).
    #[arg(long)]
    pub min_rate: Option<f64>,
    /// Highest rate to try (default: 120% of a closed-loop run's throughput).
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// Stop when the bracket is this narrow, as a fraction of the rate.
    #[arg(long, default_value_t = 0.05)]
    pub precision: f64,
    /// Probes per rate: a rate meets the SLO when most of them do (probing stops once that is
    /// decided, so 3 takes two probes or three).
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Runs per server, alternated.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

fn expected_seconds(w: &Workload) -> Option<u64> {
    let plan = Plan::new(w).ok()?;
    plan.requests
        .is_none()
        .then(|| (plan.warmup + plan.duration).as_secs_f64().ceil() as u64)
}

fn emit(json: bool, report: &RunReport) -> anyhow::Result<()> {
    if json {
        report::print_table(report, &mut std::io::stderr())?;
        serde_json::to_writer_pretty(std::io::stdout().lock(), report)?;
        println!();
    } else {
        report::print_table(report, &mut std::io::stdout())?;
    }
    Ok(())
}

fn run_once(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let w = args.workload.resolve()?;
    let mut live = Live::new(
        expected_seconds(&w),
        args.output.hdr.is_some(),
        args.output.quiet,
    );
    let report = run::run(&w, args.output.server_pid, &mut |s| live.second(s))?;
    live.finish();
    if let Some(path) = &args.output.hdr {
        live.write_hdr(path)?;
    }
    emit(args.output.json, &report)?;
    Ok(ExitCode::SUCCESS)
}

fn run_sweep(args: &SweepArgs) -> anyhow::Result<ExitCode> {
    let base = args.workload.resolve()?;
    let values = if args.values.is_empty() {
        studies::steps(
            args.from.context("--from")?,
            args.to.context("--to")?,
            args.step,
        )?
    } else {
        args.values.clone()
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let mut live = Live::new(None, false, args.output.quiet);
    let points = studies::sweep(
        &base,
        args.vary,
        &values,
        args.output.server_pid,
        &mut |s| live.second(s),
        &mut |p| {
            let l = &p.report.latency_us;
            eprintln!(
                "{} = {}: {:.0} ops/s, mean {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
                args.vary.label(),
                p.x,
                p.report.ops_per_sec,
                l.mean,
                l.p99,
                l.p999
            );
        },
    )?;
    live.finish();
    let csv = studies::sweep_csv(args.vary, &points);
    std::fs::write(args.out.join("sweep.csv"), &csv)?;
    std::fs::write(
        args.out.join("sweep.json"),
        serde_json::to_string_pretty(&points)?,
    )?;
    let figure: Vec<plot::Point> = points
        .iter()
        .map(|p| plot::Point {
            x: p.x,
            ops_per_sec: p.report.ops_per_sec,
            mean_ms: p.report.latency_us.mean / 1000.0,
            p99_ms: p.report.latency_us.p99 / 1000.0,
            p999_ms: p.report.latency_us.p999 / 1000.0,
        })
        .collect();
    let title = format!(
        "tern bench sweep of {}: {} {}, {}",
        args.vary.label(),
        base.protocol,
        base.transport,
        base.mix
    );
    plot::write(&args.out.join("sweep"), &title, args.vary.label(), &figure)?;
    if args.output.json {
        serde_json::to_writer_pretty(std::io::stdout().lock(), &points)?;
        println!();
    } else {
        print!("{csv}");
    }
    eprintln!(
        "wrote {0}/sweep.csv, {0}/sweep.json, {0}/sweep.svg, {0}/sweep.png",
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn run_slo(args: &SloArgs) -> anyhow::Result<ExitCode> {
    let base = args.workload.resolve()?;
    let slo = Slo::new(args.p99, args.p999)?;
    let mut live = Live::new(None, false, args.output.quiet);
    let result = studies::slo_search(
        &base,
        SloSearch {
            slo,
            repeats: args.repeats,
            min_rate: args.min_rate,
            max_rate: args.max_rate,
            precision: args.precision,
        },
        args.output.server_pid,
        &mut |s| live.second(s),
        &mut |p| {
            let l = &p.report.latency_us;
            eprintln!(
                "rate {:>10.0}/s: achieved {:>10.0} ops/s, p99 {:>8.1} us, p99.9 {:>8.1} us, late {} -> {}",
                p.rate,
                p.report.ops_per_sec,
                l.p99,
                l.p999,
                p.report.counts.late,
                if p.met { "meets the SLO" } else { "misses" }
            );
        },
    )?;
    live.finish();
    if args.output.json {
        serde_json::to_writer_pretty(std::io::stdout().lock(), &result)?;
        println!();
    }
    let bounds = [("p99", slo.p99_us), ("p99.9", slo.p999_us)]
        .iter()
        .filter_map(|(n, b)| b.map(|b| format!("{n} <= {b:.0} us")))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out: Box<dyn Write> = if args.output.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    match (&result.best_rate, &result.best) {
        (Some(rate), Some(best)) => writeln!(
            out,
            "highest rate meeting {bounds}: {rate:.0} requests/s (achieved {:.0} ops/s, p99 {:.1} us, p99.9 {:.1} us)",
            best.ops_per_sec, best.latency_us.p99, best.latency_us.p999
        )?,
        _ => writeln!(out, "no rate tried meets {bounds}")?,
    }
    Ok(if result.best_rate.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn run_compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.workload.servers.len() == 2,
        "compare takes exactly two -s (each may be a comma-separated pool)"
    );
    let base = args.workload.resolve()?;
    let (a, b) = (&args.workload.servers[0], &args.workload.servers[1]);
    let mut live = Live::new(None, false, args.output.quiet);
    let c = studies::compare(
        &base,
        a,
        b,
        args.rounds,
        &mut |s| live.second(s),
        &mut |servers, r| {
            eprintln!(
                "{servers}: {:.0} ops/s, p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
                r.ops_per_sec, r.latency_us.p50, r.latency_us.p99, r.latency_us.p999
            )
        },
    )?;
    live.finish();
    if args.output.json {
        serde_json::to_writer_pretty(std::io::stdout().lock(), &c)?;
        println!();
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "medians of {} alternated runs   {:>14} {:>14} {:>8}",
        args.rounds, "A", "B", "B/A"
    );
    println!("  servers {:>44} {:>14}", c.a.servers, c.b.servers);
    let row = |name: &str, x: f64, y: f64, ratio: f64| {
        println!("  {name:<34} {x:>14.1} {y:>14.1} {ratio:>8.3}");
    };
    row(
        "throughput (ops/s)",
        c.a.median_ops_per_sec,
        c.b.median_ops_per_sec,
        c.ratio_ops_per_sec,
    );
    row(
        "p50 (us)",
        c.a.median_p50_us,
        c.b.median_p50_us,
        c.ratio_p50,
    );
    row(
        "p99 (us)",
        c.a.median_p99_us,
        c.b.median_p99_us,
        c.ratio_p99,
    );
    row(
        "p99.9 (us)",
        c.a.median_p999_us,
        c.b.median_p999_us,
        c.ratio_p999,
    );
    if let (Some(x), Some(y), Some(r)) = (
        c.a.median_server_cpu_us_per_request,
        c.b.median_server_cpu_us_per_request,
        c.ratio_server_cpu_per_request,
    ) {
        row("server CPU (us/request)", x, y, r);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let several_runs = match &args.command {
        Some(BenchCommand::Sweep(a)) => Some(&a.output),
        Some(BenchCommand::Slo(a)) => Some(&a.output),
        Some(BenchCommand::Compare(a)) => Some(&a.output),
        _ => None,
    };
    // One interval log per run would need a file per run: ask for it on `run` instead.
    anyhow::ensure!(
        several_runs.is_none_or(|o| o.hdr.is_none()),
        "--hdr records a single run; use it with `tern bench run`"
    );
    match &args.command {
        None => run_once(&args.run),
        Some(BenchCommand::Run(run)) => run_once(run),
        Some(BenchCommand::Sweep(sweep)) => run_sweep(sweep),
        Some(BenchCommand::Slo(slo)) => run_slo(slo),
        Some(BenchCommand::Compare(compare)) => run_compare(compare),
    }
}
