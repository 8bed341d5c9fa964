//! The machine's layout as /sys and /proc describe it: packages, cores and their SMT siblings,
//! NUMA nodes, isolated CPUs, NICs with their queues and interrupts, and a process's threads.
//!
//! Everything is read below a root directory (`/` on a live machine) so that fixture trees of
//! other machines, stored under `tests/fixtures/`, drive the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cpuset::CpuSet;

/// Reads `root/rel` as text, trimmed.
pub(crate) fn read_text(root: &Path, rel: &str) -> io::Result<String> {
    fs::read_to_string(root.join(rel)).map(|s| s.trim().to_string())
}

/// Like [`read_text`], but a missing file is `None` (many of these files exist only on some
/// kernels or hardware).
pub(crate) fn read_optional(root: &Path, rel: &str) -> Result<Option<String>> {
    match read_text(root, rel) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", root.join(rel).display())),
    }
}

/// A file of a thread's `/proc` directory, or `None` when the thread is gone: one that exits
/// after its directory was listed leaves the file to fail with ENOENT or, once its files are
/// opened, ESRCH.
fn read_thread_file(root: &Path, rel: &str) -> Result<Option<String>> {
    match read_text(root, rel) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("read {}", root.join(rel).display())),
    }
}

/// Names in a directory, or nothing when it does not exist.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<String>> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.with_context(|| format!("list {}", dir.display()))?;
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("list {}", dir.display())),
    }
}

/// Numbered entries of a directory with a prefix (`node0`, `node1`; `cpu3`), sorted by number.
fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<usize>> {
    let mut numbers: Vec<usize> = list_dir(dir)?
        .iter()
        .filter_map(|name| name.strip_prefix(prefix)?.parse().ok())
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

fn parse_cpulist(root: &Path, rel: &str, text: &str) -> Result<CpuSet> {
    CpuSet::parse(text).with_context(|| format!("in {}", root.join(rel).display()))
}

/// One online logical CPU.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Cpu {
    pub id: usize,
    /// Physical package (socket).
    pub package: usize,
    /// Core number within its package.
    pub core: usize,
    /// NUMA node holding this CPU (0 when the kernel has no NUMA support).
    pub node: usize,
    /// Logical CPUs sharing this core (itself included): hyperthreads.
    pub siblings: CpuSet,
    /// cpufreq scaling governor, when the machine exposes cpufreq (VMs usually do not).
    pub governor: Option<String>,
}

/// One NUMA node.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Node {
    pub id: usize,
    pub cpus: CpuSet,
    /// Memory attached to the node, from its meminfo's `MemTotal`.
    pub memory_mib: Option<u64>,
}

/// An interrupt line a NIC uses.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Irq {
    pub irq: u32,
    /// The action name in /proc/interrupts (`eth2-TxRx-0`), empty when the line is not listed.
    pub name: String,
    /// CPUs the kernel may deliver it to (/proc/irq/N/smp_affinity_list); `None` when unreadable.
    pub affinity: Option<CpuSet>,
    /// Interrupts delivered so far, summed over CPUs.
    pub count: u64,
}

/// A network interface backed by a device (virtual ones like `lo` or bridges have no IRQs).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    /// NUMA node of the device; `None` when the platform does not say (`-1`, usual in VMs).
    pub node: Option<usize>,
    pub rx_queues: usize,
    pub tx_queues: usize,
    pub irqs: Vec<Irq>,
}

/// Packages, nodes, CPUs, isolated CPUs and NICs of one machine.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Topology {
    pub cpus: Vec<Cpu>,
    pub nodes: Vec<Node>,
    /// CPUs taken out of the scheduler's balancing with `isolcpus=`.
    pub isolated: CpuSet,
    pub nics: Vec<Nic>,
}

impl Topology {
    /// Reads the topology below `root` (`/` for this machine).
    pub fn read(root: &Path) -> Result<Topology> {
        let online_rel = "sys/devices/system/cpu/online";
        let online_text = read_text(root, online_rel)
            .with_context(|| format!("read {}", root.join(online_rel).display()))?;
        let online = parse_cpulist(root, online_rel, &online_text)?;

        let nodes = read_nodes(root, &online)?;
        let node_of: BTreeMap<usize, usize> = nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |c| (c, n.id)))
            .collect();

        let mut cpus = Vec::new();
        for id in online.iter() {
            let topo = format!("sys/devices/system/cpu/cpu{id}/topology");
            let number = |file: &str| -> Result<usize> {
                let rel = format!("{topo}/{file}");
                match read_optional(root, &rel)? {
                    // -1 is what a VM without socket information shows.
                    Some(text) => Ok(text
                        .parse::<i64>()
                        .map(|n| n.max(0) as usize)
                        .with_context(|| {
                            format!("{} is not a number", root.join(&rel).display())
                        })?),
                    None => Ok(0),
                }
            };
            let package = number("physical_package_id")?;
            let core = match read_optional(root, &format!("{topo}/core_id"))? {
                Some(_) => number("core_id")?,
                None => id,
            };
            let siblings_rel = format!("{topo}/thread_siblings_list");
            let siblings = match read_optional(root, &siblings_rel)? {
                Some(text) => parse_cpulist(root, &siblings_rel, &text)?,
                None => [id].into_iter().collect(),
            };
            let governor = read_optional(
                root,
                &format!("sys/devices/system/cpu/cpu{id}/cpufreq/scaling_governor"),
            )?;
            cpus.push(Cpu {
                id,
                package,
                core,
                node: node_of.get(&id).copied().unwrap_or(0),
                siblings,
                governor,
            });
        }

        let isolated_rel = "sys/devices/system/cpu/isolated";
        let isolated = match read_optional(root, isolated_rel)? {
            Some(text) => parse_cpulist(root, isolated_rel, &text)?,
            None => CpuSet::new(),
        };

        let interrupts = match read_optional(root, "proc/interrupts")? {
            Some(text) => parse_interrupts(&text),
            None => Vec::new(),
        };
        let nics = read_nics(root, &interrupts)?;

        Ok(Topology {
            cpus,
            nodes,
            isolated,
            nics,
        })
    }

    pub fn online(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    pub fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    pub fn node(&self, id: usize) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// Package numbers in use.
    pub fn packages(&self) -> BTreeSet<usize> {
        self.cpus.iter().map(|c| c.package).collect()
    }

    /// Physical cores as their sets of sibling CPUs, ordered by first CPU.
    pub fn cores(&self) -> Vec<CpuSet> {
        let cores: BTreeSet<Vec<usize>> = self
            .cpus
            .iter()
            .map(|c| c.siblings.intersection(&self.online()).iter().collect())
            .collect();
        let mut cores: Vec<CpuSet> = cores.into_iter().map(|c| c.into_iter().collect()).collect();
        cores.sort_by_key(|c| c.first());
        cores
    }

    /// Nodes spanned by a set of CPUs.
    pub fn nodes_of(&self, cpus: &CpuSet) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| cpus.contains(c.id))
            .map(|c| c.node)
            .collect()
    }

    /// CPUs that a NIC's interrupts are currently steered to, when that is narrower than all
    /// online CPUs: someone (an operator, `tern tune plan --apply`, a driver) placed them. IRQs
    /// allowed everywhere say nothing about intent and are left out.
    pub fn steered_irq_cpus(&self) -> CpuSet {
        let online = self.online();
        self.nics
            .iter()
            .flat_map(|nic| &nic.irqs)
            .filter_map(|irq| irq.affinity.as_ref())
            .filter(|affinity| !online.is_subset(affinity))
            .fold(CpuSet::new(), |acc, affinity| acc.union(affinity))
    }
}

/// NUMA nodes from /sys/devices/system/node; a kernel without NUMA support has no such directory,
/// and then all online CPUs form node 0 with the memory of /proc/meminfo.
fn read_nodes(root: &Path, online: &CpuSet) -> Result<Vec<Node>> {
    let node_dir = root.join("sys/devices/system/node");
    let ids = numbered_entries(&node_dir, "node")?;
    if ids.is_empty() {
        let memory_mib = read_optional(root, "proc/meminfo")?
            .as_deref()
            .and_then(meminfo_total_mib);
        return Ok(vec![Node {
            id: 0,
            cpus: online.clone(),
            memory_mib,
        }]);
    }
    let mut nodes = Vec::new();
    for id in ids {
        let rel = format!("sys/devices/system/node/node{id}/cpulist");
        let cpus = match read_optional(root, &rel)? {
            Some(text) => parse_cpulist(root, &rel, &text)?.intersection(online),
            None => CpuSet::new(),
        };
        let memory_mib = read_optional(root, &format!("sys/devices/system/node/node{id}/meminfo"))?
            .as_deref()
            .and_then(meminfo_total_mib);
        nodes.push(Node {
            id,
            cpus,
            memory_mib,
        });
    }
    Ok(nodes)
}

/// `MemTotal` in MiB from /proc/meminfo (`MemTotal: 16318480 kB`) or a node's meminfo
/// (`Node 0 MemTotal: 16318480 kB`).
fn meminfo_total_mib(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib / 1024)
    })
}

/// One device interrupt line of /proc/interrupts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InterruptLine {
    pub irq: u32,
    pub count: u64,
    pub name: String,
}

/// Numbered lines of /proc/interrupts: `  128:  5  0  PCI-MSI-edge  eth2-0`. Architecture lines
/// (`NMI:`, `LOC:`) are skipped. The action name is the last field.
pub(crate) fn parse_interrupts(text: &str) -> Vec<InterruptLine> {
    let mut lines = text.lines();
    let cpu_columns = lines
        .next()
        .map(|header| header.split_whitespace().count())
        .unwrap_or(0);
    lines
        .filter_map(|line| {
            let (label, rest) = line.split_once(':')?;
            let irq: u32 = label.trim().parse().ok()?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let count = fields
                .iter()
                .take(cpu_columns)
                .map_while(|f| f.parse::<u64>().ok())
                .sum();
            let name = if fields.len() > cpu_columns {
                fields.last().copied().unwrap_or("").to_string()
            } else {
                String::new()
            };
            Some(InterruptLine { irq, count, name })
        })
        .collect()
}

fn read_nics(root: &Path, interrupts: &[InterruptLine]) -> Result<Vec<Nic>> {
    let net = root.join("sys/class/net");
    let mut nics = Vec::new();
    for name in list_dir(&net)? {
        let device = net.join(&name).join("device");
        if !device.exists() {
            continue; // lo, bridges, ifb, veth: no device, no interrupts
        }
        // Virtio NICs hang below a virtio device whose PCI parent holds numa_node and msi_irqs.
        let pci_dirs = [device.clone(), device.join("..")];
        let mut node = None;
        let mut irq_numbers = BTreeSet::new();
        for dir in &pci_dirs {
            if node.is_none() {
                if let Ok(text) = fs::read_to_string(dir.join("numa_node")) {
                    node = text.trim().parse::<usize>().ok(); // -1: unknown
                }
            }
            if irq_numbers.is_empty() {
                irq_numbers.extend(
                    list_dir(&dir.join("msi_irqs"))?
                        .iter()
                        .filter_map(|n| n.parse::<u32>().ok()),
                );
            }
        }
        // Drivers name their queue vectors after the interface (`eth2-TxRx-0`); legacy INTx
        // devices have no msi_irqs and are found only this way.
        let prefix = format!("{name}-");
        irq_numbers.extend(
            interrupts
                .iter()
                .filter(|line| line.name == name || line.name.starts_with(&prefix))
                .map(|line| line.irq),
        );
        let queues = list_dir(&net.join(&name).join("queues"))?;
        let rx_queues = queues.iter().filter(|q| q.starts_with("rx-")).count();
        let tx_queues = queues.iter().filter(|q| q.starts_with("tx-")).count();
        let mut irqs = Vec::new();
        for irq in irq_numbers {
            let line = interrupts.iter().find(|line| line.irq == irq);
            let rel = format!("proc/irq/{irq}/smp_affinity_list");
            let affinity = match read_optional(root, &rel)? {
                Some(text) => Some(parse_cpulist(root, &rel, &text)?),
                None => None,
            };
            irqs.push(Irq {
                irq,
                name: line.map(|l| l.name.clone()).unwrap_or_default(),
                affinity,
                count: line.map(|l| l.count).unwrap_or(0),
            });
        }
        nics.push(Nic {
            name,
            node,
            rx_queues,
            tx_queues,
            irqs,
        });
    }
    Ok(nics)
}

/// PIDs of running `tern serve` processes below `root`: comm `tern`, first argument `serve`.
pub fn find_tern_servers(root: &Path) -> Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in list_dir(&root.join("proc"))? {
        let Ok(pid) = entry.parse::<u32>() else {
            continue;
        };
        // Processes come and go while we look: an unreadable one is not a server.
        let Ok(Some(comm)) = read_optional(root, &format!("proc/{pid}/comm")) else {
            continue;
        };
        if comm != "tern" {
            continue;
        }
        let Ok(cmdline) = fs::read(root.join(format!("proc/{pid}/cmdline"))) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).nth(1) == Some(b"serve".as_slice()) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

/// One thread of a process and the CPUs it may run on.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    /// Thread name (`tern-worker-3`), from /proc/PID/task/TID/comm.
    pub name: String,
    /// `Cpus_allowed_list` of /proc/PID/task/TID/status.
    pub allowed: CpuSet,
}

/// The threads of process `pid` below `root`.
pub fn read_threads(root: &Path, pid: u32) -> Result<Vec<ThreadInfo>> {
    let task_dir: PathBuf = root.join(format!("proc/{pid}/task"));
    let tids = list_dir(&task_dir)?;
    anyhow::ensure!(
        !tids.is_empty(),
        "no process {pid}: {} is missing",
        task_dir.display()
    );
    let mut threads = Vec::new();
    for tid in tids.iter().filter_map(|t| t.parse::<u32>().ok()) {
        let base = format!("proc/{pid}/task/{tid}");
        // A thread can exit between listing and reading: skip it rather than fail.
        let (Some(name), Some(status)) = (
            read_thread_file(root, &format!("{base}/comm"))?,
            read_thread_file(root, &format!("{base}/status"))?,
        ) else {
            continue;
        };
        let allowed_text = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .with_context(|| format!("no Cpus_allowed_list in {base}/status"))?;
        threads.push(ThreadInfo {
            tid,
            name,
            allowed: parse_cpulist(root, &format!("{base}/status"), allowed_text)?,
        });
    }
    threads.sort_by_key(|t| t.tid);
    Ok(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_lines_keep_numbered_irqs_and_their_names() {
        let text = "           CPU0       CPU1\n  \
             0:         45          0   IO-APIC   2-edge      timer\n \
            38:          0       1872 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n \
            NMI:          0          0   Non-maskable interrupts\n";
        let lines = parse_interrupts(text);
        assert_eq!(
            lines,
            vec![
                InterruptLine {
                    irq: 0,
                    count: 45,
                    name: "timer".into()
                },
                InterruptLine {
                    irq: 38,
                    count: 1872,
                    name: "virtio2-input.0".into()
                },
            ]
        );
    }

    #[test]
    fn meminfo_total_from_both_formats() {
        assert_eq!(
            meminfo_total_mib("MemTotal:       2097152 kB\n"),
            Some(2048)
        );
        assert_eq!(
            meminfo_total_mib("Node 1 MemTotal:       16777216 kB\nNode 1 MemFree: 1 kB"),
            Some(16384)
        );
        assert_eq!(meminfo_total_mib("MemFree: 1 kB"), None);
    }
}
