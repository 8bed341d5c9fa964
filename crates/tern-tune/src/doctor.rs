//! `tern tune doctor`: checks of the machine against what a pinned, NUMA-local tern needs. Each
//! check says what it found, why it matters (citing the effect measured in the seed studies) and
//! the exact fix.

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::system::{Coalescing, SystemState};
use crate::topology::{Nic, ThreadInfo, Topology};

/// How `tern serve` is (or will be) run: the settings the checks compare against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoctorRequest {
    /// `-c`: maximum simultaneous connections.
    pub max_conns: u64,
    /// `-b`: listen backlog.
    pub backlog: u64,
    /// `-m`: cache memory in MiB.
    pub memory_mib: u64,
    /// `-L`: large pages.
    pub large_pages: bool,
    /// `-k`: lock memory.
    pub lock_memory: bool,
    /// Only check this NIC's interrupts and moderation (all NICs with interrupts when `None`).
    pub nic: Option<String>,
    /// Worker CPUs to check: from a running process's threads or a planned `--pin` list.
    pub workers: Option<Workers>,
}

impl Default for DoctorRequest {
    /// memcached's defaults.
    fn default() -> DoctorRequest {
        DoctorRequest {
            max_conns: 1024,
            backlog: 1024,
            memory_mib: 64,
            large_pages: false,
            lock_memory: false,
            nic: None,
            workers: None,
        }
    }
}

/// Where the worker CPUs come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workers {
    /// Threads of a running server; those named like `tern-worker-3` (memcached: `mc-worker`) are
    /// the workers, or all threads when none is.
    Threads { pid: u32, threads: Vec<ThreadInfo> },
    /// A planned `--pin` list.
    Planned(CpuSet),
}

impl Workers {
    /// The worker threads of a running server: those named like workers, or all.
    fn worker_threads(threads: &[ThreadInfo]) -> Vec<&ThreadInfo> {
        let named: Vec<&ThreadInfo> = threads
            .iter()
            .filter(|t| t.name.contains("worker"))
            .collect();
        if named.is_empty() {
            threads.iter().collect()
        } else {
            named
        }
    }

    /// (description, CPUs the workers may run on).
    fn cpus(&self) -> (String, CpuSet) {
        match self {
            Workers::Planned(cpus) => (format!("planned workers on CPUs {cpus}"), cpus.clone()),
            Workers::Threads { pid, threads } => {
                let chosen = Workers::worker_threads(threads);
                let cpus = chosen
                    .iter()
                    .fold(CpuSet::new(), |acc, t| acc.union(&t.allowed));
                (
                    format!(
                        "{} worker threads of pid {pid} allowed on CPUs {cpus}",
                        chosen.len()
                    ),
                    cpus,
                )
            }
        }
    }
}

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Costs performance but does not break the layout; does not fail the exit status.
    Warn,
    /// Breaks the layout or the server's settings; the exit status is non-zero.
    Fail,
    /// Could not be checked here; `found` says why.
    Skip,
}

/// One check's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub found: String,
    /// Why it matters, one line.
    pub why: &'static str,
    /// The exact command or setting that fixes it; empty when nothing needs fixing.
    pub fix: String,
}

impl Check {
    fn new(name: &'static str, why: &'static str, status: Status, found: String) -> Check {
        Check {
            name,
            status,
            found,
            why,
            fix: String::new(),
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = fix.into();
        self
    }
}

const WHY_IRQBALANCE: &str = "irqbalance moves NIC interrupts every 10 s, undoing the planned IRQ \
    CPUs; Solarflare's guide stops it first, and its unshielded interrupts flatlined at 70 MB/s \
    where shielded ones reached 138";
const WHY_SWAP: &str = "a swapped-out item turns a microsecond hit into a disk read; the seed \
    recipes start with `swapoff -a` (or lock memory with -k)";
const WHY_THP: &str =
    "THP 'always' lets khugepaged compact memory under the server, a tail-latency \
    stall; 'madvise' gives huge pages only to a heap that asks (-L)";
const WHY_HUGEPAGES: &str = "large pages cut TLB misses on a cache's random reads; the seeds run \
    memcached with -L over reserved pages (`echo 128 > /proc/sys/vm/nr_hugepages`)";
const WHY_NOFILE: &str = "every connection is a file descriptor: past the limit accept() fails \
    with EMFILE and clients are refused (the OpenOnload how-to raises `ulimit -n`)";
const WHY_SOMAXCONN: &str = "the kernel silently caps the listen backlog at somaxconn; a burst of \
    connects beyond it drops SYNs, and each retry costs a 1 s timeout in the tail";
const WHY_GOVERNOR: &str = "ondemand/powersave raise the clock only after load arrives, so bursts \
    start slow and land in p99.9; the tuned Solarflare box stopped cpuspeed";
const WHY_COALESCING: &str = "adaptive RX moderation holds packets to batch interrupts, adding \
    latency; Solarflare turns it off (`ethtool -C eth2 adaptive-rx off`, rx-usecs 0 on the \
    kernel stack)";
const WHY_NUMA: &str = "one server spanning two NUMA nodes flatlined at 400 MB/s where one \
    instance per node reached 600 (Solarflare fig. 4): remote memory and cache lines cost";
const WHY_PINNED: &str = "a worker the scheduler may move loses its caches and queues behind \
    other work; pinning each thread to its own core tripled Pelikan's throughput at a 2 ms p999";
const WHY_IRQ_ON_WORKERS: &str = "interrupts on worker CPUs steal cycles and pollute caches; \
    pinning workers and moving RX/TX queues to their own cores tripled Pelikan's throughput at a \
    2 ms p999";

/// The NICs whose interrupts and moderation are checked: the one named, or all with interrupts.
pub fn checked_nics<'a>(topology: &'a Topology, nic: Option<&str>) -> Vec<&'a Nic> {
    topology
        .nics
        .iter()
        .filter(|n| match nic {
            Some(name) => n.name == name,
            None => !n.irqs.is_empty(),
        })
        .collect()
}

/// Runs every check.
pub fn run_checks(topology: &Topology, system: &SystemState, req: &DoctorRequest) -> Vec<Check> {
    let mut checks = Vec::new();

    checks.push(if system.irqbalance_pids.is_empty() {
        Check::new(
            "irqbalance",
            WHY_IRQBALANCE,
            Status::Pass,
            "irqbalance is not running".into(),
        )
    } else {
        Check::new(
            "irqbalance",
            WHY_IRQBALANCE,
            Status::Fail,
            format!(
                "irqbalance is running (pid {})",
                join(system.irqbalance_pids.iter())
            ),
        )
        .fix("systemctl disable --now irqbalance")
    });

    checks.push(if system.swaps.is_empty() {
        Check::new("swap", WHY_SWAP, Status::Pass, "no swap is active".into())
    } else {
        let names = join(system.swaps.iter().map(|s| &s.name));
        if req.lock_memory {
            Check::new(
                "swap",
                WHY_SWAP,
                Status::Pass,
                format!("swap is on ({names}) but -k locks tern's memory"),
            )
        } else {
            Check::new(
                "swap",
                WHY_SWAP,
                Status::Fail,
                format!("swap is on: {names}"),
            )
            .fix("swapoff -a (and remove swap lines from /etc/fstab), or run tern serve with -k")
        }
    });

    let thp_fix = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled";
    checks.push(match system.thp.as_deref() {
        None => Check::new(
            "transparent-hugepages",
            WHY_THP,
            Status::Skip,
            "no /sys/kernel/mm/transparent_hugepage/enabled".into(),
        ),
        Some("always") => Check::new(
            "transparent-hugepages",
            WHY_THP,
            Status::Warn,
            "THP mode is always".into(),
        )
        .fix(thp_fix),
        Some("never") if req.large_pages => Check::new(
            "transparent-hugepages",
            WHY_THP,
            Status::Warn,
            "THP mode is never, so -L gets huge pages only from a reservation".into(),
        )
        .fix(thp_fix),
        Some(mode) => Check::new(
            "transparent-hugepages",
            WHY_THP,
            Status::Pass,
            format!("THP mode is {mode}"),
        ),
    });

    let reserved = system.hugepages_reserved_mib();
    checks.push(if req.large_pages {
        if reserved >= req.memory_mib {
            Check::new(
                "huge-pages",
                WHY_HUGEPAGES,
                Status::Pass,
                format!("{reserved} MiB reserved covers -L -m {}", req.memory_mib),
            )
        } else {
            let pages = req.memory_mib.div_ceil(2);
            Check::new(
                "huge-pages",
                WHY_HUGEPAGES,
                Status::Warn,
                format!(
                    "-L -m {} but only {reserved} MiB reserved in huge pages",
                    req.memory_mib
                ),
            )
            .fix(format!("echo {pages} > /proc/sys/vm/nr_hugepages"))
        }
    } else if reserved > 0 {
        Check::new(
            "huge-pages",
            WHY_HUGEPAGES,
            Status::Warn,
            format!("{reserved} MiB reserved in huge pages, unused by tern without -L"),
        )
        .fix("run tern serve with -L, or echo 0 > /proc/sys/vm/nr_hugepages if nothing else uses them")
    } else {
        Check::new(
            "huge-pages",
            WHY_HUGEPAGES,
            Status::Pass,
            "no huge pages reserved and -L not asked for".into(),
        )
    });

    // Listeners, log files and the epoll fds need a few descriptors beyond the connections.
    let needed = req.max_conns + 64;
    checks.push(match &system.open_files {
        None => Check::new(
            "open-files",
            WHY_NOFILE,
            Status::Skip,
            "no /proc/self/limits".into(),
        ),
        Some(limit) => match limit.soft {
            Some(soft) if soft < needed => Check::new(
                "open-files",
                WHY_NOFILE,
                Status::Fail,
                format!(
                    "open-file limit {soft} is below -c {} plus 64 spare",
                    req.max_conns
                ),
            )
            .fix(format!(
                "ulimit -n {needed} before starting tern (systemd: LimitNOFILE={needed})"
            )),
            soft => Check::new(
                "open-files",
                WHY_NOFILE,
                Status::Pass,
                format!(
                    "open-file limit {} covers -c {}",
                    soft.map_or("unlimited".to_string(), |s| s.to_string()),
                    req.max_conns
                ),
            ),
        },
    });

    checks.push(match system.somaxconn {
        None => Check::new(
            "somaxconn",
            WHY_SOMAXCONN,
            Status::Skip,
            "no /proc/sys/net/core/somaxconn".into(),
        ),
        Some(max) if max < req.backlog => Check::new(
            "somaxconn",
            WHY_SOMAXCONN,
            Status::Fail,
            format!("net.core.somaxconn {max} caps -b {} to {max}", req.backlog),
        )
        .fix(format!("sysctl -w net.core.somaxconn={}", req.backlog)),
        Some(max) => Check::new(
            "somaxconn",
            WHY_SOMAXCONN,
            Status::Pass,
            format!("net.core.somaxconn {max} covers -b {}", req.backlog),
        ),
    });

    let with_governor: Vec<_> = topology
        .cpus
        .iter()
        .filter_map(|c| c.governor.as_deref().map(|g| (c.id, g)))
        .collect();
    let slow: CpuSet = with_governor
        .iter()
        .filter(|(_, g)| *g != "performance")
        .map(|(id, _)| *id)
        .collect();
    checks.push(if with_governor.is_empty() {
        Check::new(
            "cpu-governor",
            WHY_GOVERNOR,
            Status::Skip,
            "no cpufreq (a VM or a fixed clock)".into(),
        )
    } else if slow.is_empty() {
        Check::new(
            "cpu-governor",
            WHY_GOVERNOR,
            Status::Pass,
            "every CPU uses the performance governor".into(),
        )
    } else {
        let governors: std::collections::BTreeSet<&str> =
            with_governor.iter().map(|(_, g)| *g).collect();
        Check::new(
            "cpu-governor",
            WHY_GOVERNOR,
            Status::Warn,
            format!(
                "CPUs {slow} use governor {}",
                join(governors.iter().filter(|g| **g != "performance"))
            ),
        )
        .fix("cpupower frequency-set -g performance")
    });

    let nics = checked_nics(topology, req.nic.as_deref());
    if nics.is_empty() {
        checks.push(Check::new(
            "nic-coalescing",
            WHY_COALESCING,
            Status::Skip,
            match &req.nic {
                Some(name) => format!("no NIC {name}"),
                None => "no NIC with interrupts".into(),
            },
        ));
    }
    for nic in &nics {
        checks.push(match system.coalescing.get(&nic.name) {
            None => Check::new(
                "nic-coalescing",
                WHY_COALESCING,
                Status::Skip,
                format!("{}: not read", nic.name),
            ),
            Some(Coalescing::Unknown { reason }) => Check::new(
                "nic-coalescing",
                WHY_COALESCING,
                Status::Skip,
                format!("{}: {reason}", nic.name),
            ),
            Some(Coalescing::Read {
                adaptive_rx: Some(true),
                rx_usecs,
            }) => Check::new(
                "nic-coalescing",
                WHY_COALESCING,
                Status::Warn,
                format!(
                    "{}: adaptive-rx on{}",
                    nic.name,
                    rx_usecs.map_or(String::new(), |u| format!(", rx-usecs {u}"))
                ),
            )
            .fix(format!("ethtool -C {} adaptive-rx off", nic.name)),
            Some(Coalescing::Read {
                adaptive_rx,
                rx_usecs,
            }) => Check::new(
                "nic-coalescing",
                WHY_COALESCING,
                Status::Pass,
                format!(
                    "{}: adaptive-rx {}, rx-usecs {}",
                    nic.name,
                    match adaptive_rx {
                        Some(false) => "off",
                        _ => "n/a",
                    },
                    rx_usecs.map_or("n/a".to_string(), |u| u.to_string())
                ),
            ),
        });
    }

    match &req.workers {
        None => {
            let found = "no workers to check: no single running `tern serve` found; pass --pid \
                         PID or --pin CPULIST";
            checks.push(Check::new(
                "numa-span",
                WHY_NUMA,
                Status::Skip,
                found.into(),
            ));
            checks.push(Check::new(
                "workers-pinned",
                WHY_PINNED,
                Status::Skip,
                found.into(),
            ));
            checks.push(Check::new(
                "irqs-on-workers",
                WHY_IRQ_ON_WORKERS,
                Status::Skip,
                found.into(),
            ));
        }
        Some(workers) => {
            let (described, cpus) = workers.cpus();
            let nodes = topology.nodes_of(&cpus);
            checks.push(if nodes.len() > 1 {
                Check::new(
                    "numa-span",
                    WHY_NUMA,
                    Status::Fail,
                    format!("{described}: they span NUMA nodes {nodes}"),
                )
                .fix("one instance per node: tern tune plan --instances per-node, or tern serve --numa-node N --pin auto")
            } else {
                Check::new(
                    "numa-span",
                    WHY_NUMA,
                    Status::Pass,
                    format!("{described}: all on node {nodes}"),
                )
            });
            checks.push(pinned_check(workers));
            let landing: Vec<String> = nics
                .iter()
                .flat_map(|nic| &nic.irqs)
                .filter_map(|irq| {
                    let on = irq.affinity.as_ref()?.intersection(&cpus);
                    (!on.is_empty()).then(|| format!("{} ({}) on {on}", irq.irq, irq.name))
                })
                .collect();
            checks.push(if landing.is_empty() {
                Check::new(
                    "irqs-on-workers",
                    WHY_IRQ_ON_WORKERS,
                    Status::Pass,
                    format!("no NIC interrupt may land on worker CPUs {cpus}"),
                )
            } else {
                Check::new(
                    "irqs-on-workers",
                    WHY_IRQ_ON_WORKERS,
                    Status::Fail,
                    format!(
                        "{} NIC interrupts may land on worker CPUs {cpus}: irq {}",
                        landing.len(),
                        landing.join(", ")
                    ),
                )
                .fix("tern tune plan --apply (run as root), then start tern with the plan's --pin")
            });
        }
    }
    checks
}

/// Each worker on one CPU of its own (the seed's `taskset -pc CPU TID` per thread).
fn pinned_check(workers: &Workers) -> Check {
    let Workers::Threads { pid, threads } = workers else {
        return Check::new(
            "workers-pinned",
            WHY_PINNED,
            Status::Pass,
            "planned --pin list: one CPU per worker".into(),
        );
    };
    let chosen = Workers::worker_threads(threads);
    let unpinned: Vec<String> = chosen
        .iter()
        .filter(|t| t.allowed.len() != 1)
        .map(|t| format!("{} on {}", t.name, t.allowed))
        .collect();
    let cpus: Vec<usize> = chosen.iter().filter_map(|t| t.allowed.first()).collect();
    let distinct: CpuSet = cpus.iter().copied().collect();
    if !unpinned.is_empty() {
        Check::new(
            "workers-pinned",
            WHY_PINNED,
            Status::Warn,
            format!(
                "{} of {} worker threads of pid {pid} are not pinned: {}",
                unpinned.len(),
                chosen.len(),
                unpinned.join(", ")
            ),
        )
        .fix("restart with tern serve --pin auto (or --pin CPULIST from tern tune plan)")
    } else if distinct.len() < cpus.len() {
        Check::new(
            "workers-pinned",
            WHY_PINNED,
            Status::Warn,
            format!(
                "{} worker threads of pid {pid} share {} CPUs ({distinct})",
                cpus.len(),
                distinct.len()
            ),
        )
        .fix("fewer threads (-t), or --pin with one CPU per worker")
    } else {
        Check::new(
            "workers-pinned",
            WHY_PINNED,
            Status::Pass,
            format!(
                "{} worker threads of pid {pid}, one per CPU ({distinct})",
                cpus.len()
            ),
        )
    }
}

fn join<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// The human report: one block per check.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let tag = match c.status {
            Status::Pass => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        out.push_str(&format!("{tag} {:<22} {}\n", c.name, c.found));
        if matches!(c.status, Status::Warn | Status::Fail) {
            out.push_str(&format!("     why: {}\n", c.why));
            out.push_str(&format!("     fix: {}\n", c.fix));
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    out.push_str(&format!(
        "\n{failed} failed, {warned} warnings, {} checks\n",
        checks.len()
    ));
    out
}
