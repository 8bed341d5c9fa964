//! One run: the key space sized (`key_space_factor`), preload, settle, then the measured phase
//! on `threads` generator threads, merged into a report (the `--json` document).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tern_tune::pin;

use crate::cpu::{self, CpuReport, CpuSample};
use crate::engine::{Job, Tick, Worker};
use crate::ketama::Ketama;
use crate::server_stats::{self, KeySpace, ServerGets, Settle};
use crate::stats::{Counts, Latency, Stats};
use crate::workload::{Plan, Target, Workload};

/// Version of the JSON document; bumped when a field changes meaning or goes away.
pub const SCHEMA: &str = "tern-bench/1";

#[derive(Clone, Debug, Serialize)]
pub struct PreloadReport {
    pub keys: u64,
    pub seconds: f64,
    /// Sets that were not stored (any status other than stored).
    pub failed: u64,
}

/// The `--json` document of one run (docs/bench.md describes each field).
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub schema: &'static str,
    pub workload: Workload,
    /// `closed` or `open`.
    pub mode: &'static str,
    pub target_rate: Option<f64>,
    /// Length of the measured phase.
    pub seconds: f64,
    /// Replies received to measured requests.
    pub requests: u64,
    pub ops_per_sec: f64,
    /// hits / (hits + misses) over gets; null without gets.
    pub hit_ratio: Option<f64>,
    pub by_command: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub counts: Counts,
    pub errors_total: u64,
    pub latency_us: Latency,
    /// Where the servers answered the gets, memory or flash; null without a flash tier.
    pub server_gets: Option<ServerGets>,
    /// How `key_space_factor` sized the key space; null without it.
    pub key_space: Option<KeySpace>,
    pub preload: Option<PreloadReport>,
    pub settle: Option<Settle>,
    pub cpu: Option<CpuReport>,
}

/// A second of the run, all threads merged: the live line and the `--hdr` log are made of these.
pub struct Second {
    pub second: u64,
    /// Seconds covered: 1, or less for the last.
    pub span: f64,
    pub measuring: bool,
    pub stats: Stats,
    /// The server's CPU use over this second, when its process is known (100 = one core).
    pub server_cpu_percent: Option<f64>,
}

fn spawn_all(
    plan: &Plan,
    ring: Option<&Ketama>,
    jobs: Vec<Job>,
    start: Instant,
    ticks: Option<mpsc::Sender<Tick>>,
    mut while_running: impl FnMut(),
) -> anyhow::Result<Stats> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(thread, job)| {
                let ticks = ticks.clone();
                std::thread::Builder::new()
                    .name(format!("tern-bench-{thread}"))
                    .spawn_scoped(scope, move || {
                        if !plan.pin.is_empty() {
                            let cpu = plan.pin[thread % plan.pin.len()];
                            pin::pin_current_thread(cpu).with_context(|| {
                                format!("pin generator thread {thread} to CPU {cpu}")
                            })?;
                        }
                        Worker::new(plan, ring, job, thread)?.run(start, ticks.as_ref())
                    })
                    .expect("spawn a generator thread")
            })
            .collect();
        drop(ticks);
        while_running();
        let mut merged: Option<Stats> = None;
        for handle in handles {
            let stats = handle.join().expect("generator thread panicked")?;
            match &mut merged {
                Some(m) => m.add(&stats),
                None => merged = Some(stats),
            }
        }
        Ok(merged.expect("at least one thread"))
    })
}

fn share(total: u64, parts: usize, index: usize) -> u64 {
    total / parts as u64 + u64::from((index as u64) < total % parts as u64)
}

/// The server's PID when there is one local TCP server to look at.
pub fn local_server_pid(plan: &Plan) -> Option<u32> {
    match plan.targets.as_slice() {
        [Target::Tcp { addr, .. }] if is_local(addr.ip()) => cpu::pid_listening_on(addr.port()),
        _ => None,
    }
}

fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok() // an address of this machine
}

/// Runs `workload` once; `on_second` sees each merged second as it completes.
pub fn run(
    workload: &Workload,
    server_pid: Option<u32>,
    on_second: &mut dyn FnMut(&Second),
) -> anyhow::Result<RunReport> {
    let mut workload = workload.clone();
    let mut plan = Plan::new(&workload)?;
    let key_space = match plan.key_space_factor {
        Some(factor) => {
            let key_space = KeySpace::of_servers(&plan, factor)?;
            workload.keys = key_space.keys;
            plan = Plan::new(&workload)?;
            Some(key_space)
        }
        None => None,
    };
    let ring = (plan.targets.len() > 1).then(|| {
        Ketama::new(
            &plan
                .targets
                .iter()
                .map(Target::ring_name)
                .collect::<Vec<_>>(),
        )
    });
    let threads = plan.threads;

    let preload = if plan.preload {
        let began = Instant::now();
        let jobs = (0..threads)
            .map(|t| Job::Preload {
                first: plan.keys * t as u64 / threads as u64,
                end: plan.keys * (t as u64 + 1) / threads as u64,
                rate: plan.preload_rate.map(|r| r / threads as f64),
            })
            .collect();
        let stats = spawn_all(&plan, ring.as_ref(), jobs, began, None, || {}).context("preload")?;
        let c = &stats.counts;
        Some(PreloadReport {
            keys: plan.keys,
            seconds: began.elapsed().as_secs_f64(),
            failed: c.not_stored + c.exists + c.not_found + c.errors.total() + c.unanswered,
        })
    } else {
        None
    };
    let settle = plan
        .settle
        .map(|limit| server_stats::settle(&plan, limit))
        .transpose()
        .context("settle")?;

    // The servers' counters as the measured phase begins, for the split of gets between memory
    // and flash; best effort: a server that does not answer `stats` only loses the split.
    let snapshot = || server_stats::fetch_all(&plan).ok();
    let mut servers_begin = plan.warmup.is_zero().then(snapshot);
    let pid = server_pid.or_else(|| local_server_pid(&plan));
    let jobs = (0..threads)
        .map(|t| Job::Measure {
            quota: plan.requests.map(|q| share(q, threads, t)),
            rate: plan.rate.map(|r| r / threads as f64),
        })
        .collect();
    let (tx, rx) = mpsc::channel::<Tick>();
    let start = Instant::now();
    let mut cpu_begin = None;
    let mut cpu_percent = Vec::new();
    let mut machine_per_second = Vec::new();
    let stats = spawn_all(&plan, ring.as_ref(), jobs, start, Some(tx), || {
        let mut pending: HashMap<u64, (usize, Second)> = HashMap::new();
        // Server CPU sampled as each second is emitted: through the run, not only at its ends.
        let mut last_cpu = pid
            .and_then(cpu::server_cpu_ns)
            .map(|ns| (ns, Instant::now()));
        let mut last_machine = CpuSample::take(None);
        let mut emit = |mut second: Second| {
            let machine = CpuSample::take(None);
            machine_per_second.push(last_machine.report(&machine, None, 0).machine);
            last_machine = machine;
            if let (Some(pid), Some((ns, at))) = (pid, last_cpu) {
                let now_ns = cpu::server_cpu_ns(pid);
                let now = Instant::now();
                second.server_cpu_percent = now_ns.map(|n| {
                    n.saturating_sub(ns) as f64
                        / 1e7
                        / now.duration_since(at).as_secs_f64().max(1e-3)
                });
                last_cpu = now_ns.map(|n| (n, now));
                cpu_percent.extend(second.server_cpu_percent);
            }
            on_second(&second);
        };
        loop {
            if cpu_begin.is_none() && start.elapsed() >= plan.warmup {
                cpu_begin = Some(CpuSample::take(pid));
                if servers_begin.is_none() {
                    servers_begin = Some(snapshot());
                }
            }
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(tick) => {
                    let entry = pending.entry(tick.second).or_insert_with(|| {
                        (
                            0,
                            Second {
                                second: tick.second,
                                span: 0.0,
                                measuring: tick.measuring,
                                stats: Stats::new(tick.stats.counts.by_command.len()),
                                server_cpu_percent: None,
                            },
                        )
                    });
                    entry.0 += 1;
                    entry.1.span = entry.1.span.max(tick.span);
                    entry.1.stats.add(&tick.stats);
                    if entry.0 == threads {
                        let (_, second) = pending.remove(&tick.second).expect("present");
                        emit(second);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut rest: Vec<_> = pending.into_values().map(|(_, s)| s).collect();
        rest.sort_by_key(|s| s.second);
        rest.into_iter().for_each(emit);
    })?;
    let cpu_end = CpuSample::take(pid);
    let server_gets = servers_begin
        .flatten()
        .filter(|begin| begin.iter().any(|s| s.number("get_extstore").is_some()))
        .and_then(|begin| ServerGets::between(&begin, &snapshot()?));

    let counts = stats.counts.clone();
    // Until the last reply: a server that fell behind answers after the schedule ended, and its
    // throughput must not be credited with the schedule's rate.
    let until_last_reply = Duration::from_nanos(stats.last_reply_ns).saturating_sub(plan.warmup);
    let seconds = match plan.requests {
        Some(_) => until_last_reply.as_secs_f64(),
        None => plan.duration.max(until_last_reply).as_secs_f64(),
    };
    let gets = counts.hits + counts.misses;
    Ok(RunReport {
        schema: SCHEMA,
        workload,
        mode: if plan.rate.is_some() {
            "open"
        } else {
            "closed"
        },
        target_rate: plan.rate,
        seconds,
        requests: counts.replies,
        ops_per_sec: counts.replies as f64 / seconds.max(1e-9),
        hit_ratio: (gets > 0).then(|| counts.hits as f64 / gets as f64),
        by_command: plan.commands.iter().zip(&counts.by_command).fold(
            BTreeMap::new(),
            |mut m, (c, n)| {
                *m.entry(c.name.to_string()).or_insert(0) += n;
                m
            },
        ),
        errors_total: counts.errors.total(),
        latency_us: Latency::of(&stats.latency),
        counts,
        server_gets,
        key_space,
        preload,
        settle,
        cpu: cpu_begin.map(|b| CpuReport {
            server_cpu_percent_per_second: cpu_percent,
            machine_per_second,
            ..b.report(&cpu_end, pid, stats.counts.replies)
        }),
    })
}
