//! Where the CPU goes: the server's own CPU time (from /proc/PID/task/*/schedstat, in ns) and the
//! machine's split into user/system/softirq/idle... (from /proc/stat), sampled over the measured
//! part of a run, as the thesis did with mpstat.

use std::fs;
use std::path::Path;

use serde::Serialize;

/// One reading of the counters.
#[derive(Clone, Debug)]
pub struct CpuSample {
    server_ns: Option<u64>,
    /// Per line of /proc/stat (`cpu`, `cpu0`, ...): name and jiffies per field.
    machine: Vec<(String, [u64; 8])>,
}

/// The machine's time split over the run, in percent of the CPU time that passed.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Split {
    pub cpu: String,
    pub usr: f64,
    pub sys: f64,
    pub irq: f64,
    pub softirq: f64,
    pub iowait: f64,
    pub steal: f64,
    pub idle: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CpuReport {
    pub server_pid: Option<u32>,
    /// The server's CPU time over the measured part of the run.
    pub server_cpu_ms: Option<f64>,
    /// Server CPU microseconds per request answered.
    pub server_cpu_us_per_request: Option<f64>,
    /// The server's CPU use each second of the run (100 = one core busy), warm-up included.
    pub server_cpu_percent_per_second: Vec<f64>,
    /// The whole machine (`cpu`) then each CPU (`cpu0`, ...).
    pub machine: Vec<Split>,
    /// The same split for each second of the run, warm-up included.
    pub machine_per_second: Vec<Vec<Split>>,
}

/// The server's total CPU time in nanoseconds, summed over its threads.
pub fn server_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let text = fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn machine() -> Vec<(String, [u64; 8])> {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cpu"))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?.to_string();
            let mut v = [0u64; 8];
            for slot in &mut v {
                *slot = fields.next()?.parse().ok()?;
            }
            Some((name, v))
        })
        .collect()
}

impl CpuSample {
    pub fn take(pid: Option<u32>) -> CpuSample {
        CpuSample {
            server_ns: pid.and_then(server_cpu_ns),
            machine: machine(),
        }
    }

    /// What happened between `self` (earlier) and `later`, with `requests` answered meanwhile.
    pub fn report(&self, later: &CpuSample, pid: Option<u32>, requests: u64) -> CpuReport {
        let server_ns = match (self.server_ns, later.server_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let machine = self
            .machine
            .iter()
            .zip(&later.machine)
            .filter(|(a, b)| a.0 == b.0)
            .map(|((name, a), (_, b))| {
                // Fields: user nice system idle iowait irq softirq steal.
                let d: Vec<f64> = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| y.saturating_sub(*x) as f64)
                    .collect();
                let total: f64 = d.iter().sum::<f64>().max(1.0);
                let pct = |x: f64| (x * 1000.0 / total).round() / 10.0;
                Split {
                    cpu: name.clone(),
                    usr: pct(d[0] + d[1]),
                    sys: pct(d[2]),
                    idle: pct(d[3]),
                    iowait: pct(d[4]),
                    irq: pct(d[5]),
                    softirq: pct(d[6]),
                    steal: pct(d[7]),
                }
            })
            .collect();
        CpuReport {
            server_pid: pid,
            server_cpu_ms: server_ns.map(|ns| ns as f64 / 1e6),
            server_cpu_us_per_request: server_ns
                .filter(|_| requests > 0)
                .map(|ns| ns as f64 / 1e3 / requests as f64),
            server_cpu_percent_per_second: Vec::new(),
            machine,
            machine_per_second: Vec::new(),
        }
    }
}

/// The process listening on TCP `port` on this machine, found as `ss -p` does: the socket's inode
/// from /proc/net/tcp{,6}, then the process holding a descriptor to it.
pub fn pid_listening_on(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue; // 0A: LISTEN
            }
            let local_port = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(link) = fs::read_link(fd.path()) {
                if inodes.iter().any(|i| Path::new(i) == link) {
                    return Some(pid);
                }
            }
        }
    }
    None
}
