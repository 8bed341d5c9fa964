//! `tern tune plan`: from the topology and a goal, a layout of tern instances, worker CPUs, NIC
//! interrupt CPUs and memory, rendered as `tern serve` command lines, a commented shell script or
//! systemd units; `--apply` writes the IRQ affinities.
//!
//! The rules are the seed studies' recipe: one instance per NUMA node (one server spanning two
//! nodes flatlined at 400 MB/s where one per node reached 600), CPU 0 left to system tasks and
//! shared with interrupts, NIC interrupts on a few CPUs of the NIC's own node (remote interrupt
//! CPUs cost up to 31%) kept off the workers, about one interrupt CPU per four workers to start
//! with, one hyperthread per core for workers (hyperthreading moved results by under 5%).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// How many tern processes to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Instances {
    /// One instance per NUMA node, each with its node's CPUs and memory.
    PerNode,
    /// A single instance, on the NIC's node first.
    One,
}

/// The goal of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRequest {
    /// Interface clients arrive on; `None` picks the NIC with the most interrupt lines.
    pub nic: Option<String>,
    /// Worker CPUs in total; `None` uses every CPU the rules leave for workers.
    pub cores: Option<usize>,
    pub instances: Instances,
    /// Cache memory in MiB over all instances; `None` gives each instance memcached's 64.
    pub memory_mib: Option<u64>,
    /// Workers per interrupt CPU (the seed's starting point is 4).
    pub workers_per_irq_cpu: usize,
    /// Interrupt CPUs, overriding the ratio.
    pub irq_cpus: Option<usize>,
    /// Let workers use every hyperthread, not only one per core.
    pub smt: bool,
    /// Port of the first instance; the others count up from it.
    pub port: u16,
    pub large_pages: bool,
    pub lock_memory: bool,
    /// Admin endpoint port of the first instance (the others count up); `None`: no endpoint.
    pub admin_port: Option<u16>,
    /// Path of the tern binary in commands and units.
    pub bin: String,
}

/// Where the Debian package installs tern, and so where its systemd units run it from.
pub const PACKAGED_BIN: &str = "/usr/bin/tern";

impl Default for PlanRequest {
    fn default() -> PlanRequest {
        PlanRequest {
            nic: None,
            cores: None,
            instances: Instances::PerNode,
            memory_mib: None,
            workers_per_irq_cpu: 4,
            irq_cpus: None,
            smt: false,
            port: 11211,
            large_pages: false,
            lock_memory: false,
            admin_port: None,
            bin: PACKAGED_BIN.to_string(),
        }
    }
}

impl PlanRequest {
    /// The `tern tune plan` flags that reproduce this request (for the boot-time IRQ unit).
    pub fn to_args(&self) -> Vec<String> {
        let defaults = PlanRequest::default();
        let mut args = Vec::new();
        if let Some(nic) = &self.nic {
            args.extend(["--nic".to_string(), nic.clone()]);
        }
        if let Some(cores) = self.cores {
            args.extend(["--cores".to_string(), cores.to_string()]);
        }
        if self.instances == Instances::One {
            args.extend(["--instances".to_string(), "one".to_string()]);
        }
        if let Some(memory) = self.memory_mib {
            args.extend(["--memory".to_string(), memory.to_string()]);
        }
        if self.workers_per_irq_cpu != defaults.workers_per_irq_cpu {
            args.extend([
                "--workers-per-irq-cpu".to_string(),
                self.workers_per_irq_cpu.to_string(),
            ]);
        }
        if let Some(n) = self.irq_cpus {
            args.extend(["--irq-cpus".to_string(), n.to_string()]);
        }
        if self.smt {
            args.push("--smt".to_string());
        }
        args
    }
}

/// One interrupt line and the CPU the plan gives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IrqAssignment {
    pub irq: u32,
    pub name: String,
    pub cpu: usize,
}

/// The NIC the plan steers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedNic {
    pub name: String,
    /// Node the plan treats as the NIC's (node reported, or the first node when unknown).
    pub node: usize,
    pub node_known: bool,
    pub irqs: Vec<IrqAssignment>,
}

/// One tern process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedInstance {
    /// Also the systemd unit and cset shield name.
    pub name: String,
    /// NUMA nodes its workers are on (one, unless `--instances one` had to span).
    pub nodes: CpuSet,
    pub port: u16,
    pub workers: CpuSet,
    pub memory_mib: u64,
    /// `tern serve` argv.
    pub command: Vec<String>,
    /// The packaged systemd unit that runs it: `tern@N.service` for NUMA node N's instance,
    /// `tern.service` for a single one.
    pub unit: String,
}

/// A layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub nic: Option<PlannedNic>,
    /// CPUs left to system tasks (CPU 0's core).
    pub system_cpus: CpuSet,
    pub irq_cpus: CpuSet,
    pub instances: Vec<PlannedInstance>,
    /// Things the reader should know: fallbacks taken, limits hit.
    pub notes: Vec<String>,
    /// The request, as flags, so generated units can re-apply it.
    pub plan_args: Vec<String>,
    pub large_pages: bool,
    pub lock_memory: bool,
    pub bin: String,
}

/// Makes a plan for `topology`.
pub fn make_plan(topology: &Topology, req: &PlanRequest) -> Result<Plan> {
    anyhow::ensure!(
        req.workers_per_irq_cpu >= 1,
        "--workers-per-irq-cpu must be at least 1"
    );
    anyhow::ensure!(req.cores != Some(0), "--cores must be at least 1");
    let mut notes = Vec::new();
    let cores = topology.cores();
    let node_of_core = |core: &CpuSet| -> usize {
        core.first()
            .and_then(|c| topology.cpu(c))
            .map(|c| c.node)
            .unwrap_or(0)
    };

    let nic = match &req.nic {
        Some(name) => Some(topology.nic(name).with_context(|| {
            let names: Vec<&str> = topology.nics.iter().map(|n| n.name.as_str()).collect();
            format!("no NIC {name:?} (NICs with a device: {})", names.join(", "))
        })?),
        None => topology
            .nics
            .iter()
            .filter(|n| !n.irqs.is_empty())
            .max_by_key(|n| (n.irqs.len(), std::cmp::Reverse(n.name.clone()))),
    };
    if nic.is_none() {
        notes.push("no NIC with interrupt lines found: no interrupt CPUs planned".to_string());
    }
    let first_node = topology
        .nodes
        .iter()
        .find(|n| !n.cpus.is_empty())
        .map(|n| n.id)
        .unwrap_or(0);
    let nic_node = nic.and_then(|n| n.node).unwrap_or(first_node);
    if let Some(nic) = nic {
        if nic.node.is_none() {
            notes.push(format!(
                "{} does not report a NUMA node (usual in VMs): treating it as on node {nic_node}",
                nic.name
            ));
        }
    }

    // CPU 0's core runs system tasks (the seed's `cset set --cpu=0 system-tasks`), unless it is
    // the only core.
    let system_core = if cores.len() > 1 {
        cores.iter().find(|c| c.contains(0)).cloned()
    } else {
        None
    };
    let system_cpus = system_core.clone().unwrap_or_default();

    // Interrupt CPUs, on the NIC's node: CPU 0 first (it is busy with little else, as the seed
    // notes), then the lowest non-isolated cores; isolated CPUs are kept for workers.
    let mut irq_core_order: Vec<&CpuSet> = cores
        .iter()
        .filter(|c| node_of_core(c) == nic_node)
        .collect();
    irq_core_order.sort_by_key(|c| {
        (
            Some(*c) != system_core.as_ref(),
            !c.is_disjoint(&topology.isolated),
            c.first(),
        )
    });
    let irq_lines = nic.map(|n| n.irqs.len()).unwrap_or(0);
    let worker_pool = |irq_count: usize| -> Vec<(usize, Vec<usize>)> {
        let irq_cores: Vec<&CpuSet> = irq_core_order.iter().take(irq_count).copied().collect();
        let mut pools: Vec<(usize, Vec<usize>)> = Vec::new();
        for node in &topology.nodes {
            let mut node_cores: Vec<&CpuSet> = cores
                .iter()
                .filter(|c| node_of_core(c) == node.id)
                .filter(|c| Some(*c) != system_core.as_ref())
                .filter(|c| !irq_cores.contains(c))
                .collect();
            // Isolated cores first: the kernel already keeps other tasks off them.
            node_cores.sort_by_key(|c| (c.is_disjoint(&topology.isolated), c.first()));
            let cpus: Vec<usize> = node_cores
                .iter()
                .flat_map(|c| {
                    let take = if req.smt { c.len() } else { 1 };
                    c.iter().take(take).collect::<Vec<_>>()
                })
                .collect();
            if !cpus.is_empty() {
                pools.push((node.id, cpus));
            }
        }
        pools
    };
    let pool_size =
        |pools: &[(usize, Vec<usize>)]| -> usize { pools.iter().map(|(_, c)| c.len()).sum() };
    let nic_node_keeps_workers = |irq_count: usize| {
        worker_pool(irq_count)
            .iter()
            .any(|(node, _)| *node == nic_node)
    };

    let irq_count = if nic.is_none() {
        0
    } else {
        let wanted = match req.irq_cpus {
            Some(n) => n,
            None => {
                // Grow the interrupt CPUs until there is one per `ratio` remaining workers.
                let mut n = 1;
                loop {
                    let workers = req
                        .cores
                        .unwrap_or(usize::MAX)
                        .min(pool_size(&worker_pool(n)));
                    if n * req.workers_per_irq_cpu >= workers
                        || n >= irq_core_order.len()
                        || n >= irq_lines
                    {
                        break n;
                    }
                    n += 1;
                }
            }
        };
        let mut n = wanted.min(irq_lines).min(irq_core_order.len());
        // Never take the NIC node's last worker core for interrupts.
        while n > 1 && !nic_node_keeps_workers(n) {
            n -= 1;
        }
        if n < wanted {
            notes.push(format!(
                "{wanted} interrupt CPUs wanted, {n} planned (limited by the NIC's {irq_lines} \
                 interrupt lines and the cores on node {nic_node})"
            ));
        }
        n
    };
    let irq_cpus: CpuSet = irq_core_order
        .iter()
        .take(irq_count)
        .filter_map(|c| c.first())
        .collect();

    let mut pools = worker_pool(irq_count);
    if pools.is_empty() {
        // A one-core machine: everything shares it.
        pools = vec![(first_node, topology.online().iter().collect())];
        notes.push("only one core: the worker shares it with system tasks and interrupts".into());
    }
    // The NIC's node first, so a small --cores lands next to the NIC.
    pools.sort_by_key(|(node, _)| (*node != nic_node, *node));
    let available = pool_size(&pools);
    let want_workers = match (req.cores, req.instances) {
        (Some(n), _) => n,
        (None, Instances::PerNode) => available,
        (None, Instances::One) => pools[0].1.len(),
    };
    if want_workers > available {
        bail!(
            "--cores {want_workers}: only {available} CPUs are left for workers after system and \
             interrupt CPUs{}",
            if req.smt {
                ""
            } else {
                " (--smt adds hyperthreads)"
            }
        );
    }

    // Which CPUs each instance gets.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    match req.instances {
        Instances::PerNode => {
            // Round-robin over nodes so a --cores below the total stays balanced.
            let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); pools.len()];
            let mut next = vec![0usize; pools.len()];
            let mut taken = 0;
            while taken < want_workers {
                for (i, (_, cpus)) in pools.iter().enumerate() {
                    if taken < want_workers && next[i] < cpus.len() {
                        per_node[i].push(cpus[next[i]]);
                        next[i] += 1;
                        taken += 1;
                    }
                }
            }
            // Instances (and their ports) in node order, whatever order filled them.
            let mut filled: Vec<(usize, Vec<usize>)> = pools
                .iter()
                .map(|(node, _)| *node)
                .zip(per_node)
                .filter(|(_, g)| !g.is_empty())
                .collect();
            filled.sort_by_key(|(node, _)| *node);
            groups.extend(filled.into_iter().map(|(_, g)| g));
        }
        Instances::One => {
            let all: Vec<usize> = pools.iter().flat_map(|(_, c)| c.clone()).collect();
            groups.push(all[..want_workers].to_vec());
        }
    }

    let memory_each = match req.memory_mib {
        Some(total) => (total / groups.len() as u64).max(1),
        None => 64,
    };
    let mut instances = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let workers: CpuSet = group.iter().copied().collect();
        let nodes = topology.nodes_of(&workers);
        let port = req.port.checked_add(i as u16).context("--port too high")?;
        let admin_port = match req.admin_port {
            Some(first) => Some(
                first
                    .checked_add(i as u16)
                    .context("--admin-port too high")?,
            ),
            None => None,
        };
        let (name, unit) = match nodes.first() {
            Some(node) if nodes.len() == 1 && req.instances == Instances::PerNode => {
                (format!("tern-node{node}"), format!("tern@{node}.service"))
            }
            _ => (format!("tern-{i}"), "tern.service".to_string()),
        };
        if nodes.len() > 1 {
            notes.push(format!(
                "{name} spans NUMA nodes {nodes}: the seed's one server across two nodes \
                 flatlined at 400 MB/s where one per node reached 600; prefer --instances per-node"
            ));
        }
        let node_memory: Option<u64> = nodes
            .iter()
            .map(|n| topology.node(n).and_then(|n| n.memory_mib))
            .sum();
        if let Some(node_memory) = node_memory {
            if memory_each > node_memory * 9 / 10 {
                notes.push(format!(
                    "{name}: -m {memory_each} is over 90% of its nodes' {node_memory} MiB; leave \
                     room for the kernel and other processes"
                ));
            }
        }
        let mut command = vec![
            req.bin.clone(),
            "serve".to_string(),
            "-p".to_string(),
            port.to_string(),
            "-t".to_string(),
            workers.len().to_string(),
            "-m".to_string(),
            memory_each.to_string(),
            "--pin".to_string(),
            workers.to_string(),
        ];
        if nodes.len() == 1 {
            command.extend(["--numa-node".to_string(), nodes.to_string()]);
        }
        if req.large_pages {
            command.push("-L".to_string());
        }
        if req.lock_memory {
            command.push("-k".to_string());
        }
        if let Some(admin_port) = admin_port {
            command.extend(["--admin-port".to_string(), admin_port.to_string()]);
        }
        instances.push(PlannedInstance {
            name,
            nodes,
            port,
            workers,
            memory_mib: memory_each,
            command,
            unit,
        });
    }

    let planned_nic = nic.map(|nic| {
        let targets: Vec<usize> = irq_cpus.iter().collect();
        PlannedNic {
            name: nic.name.clone(),
            node: nic_node,
            node_known: nic.node.is_some(),
            // Round-robin over the interrupt CPUs; none when the NIC has no interrupt lines.
            irqs: nic
                .irqs
                .iter()
                .zip(targets.iter().cycle())
                .map(|(irq, &cpu)| IrqAssignment {
                    irq: irq.irq,
                    name: irq.name.clone(),
                    cpu,
                })
                .collect(),
        }
    });

    Ok(Plan {
        nic: planned_nic,
        system_cpus,
        irq_cpus,
        instances,
        notes,
        plan_args: req.to_args(),
        large_pages: req.large_pages,
        lock_memory: req.lock_memory,
        bin: req.bin.clone(),
    })
}

/// Quotes a word for sh when it needs it.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,:=@".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Plan {
    /// A human summary.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        match &self.nic {
            Some(nic) => {
                let _ = writeln!(
                    out,
                    "NIC {} on node {}{}: {} interrupt lines -> CPUs {}",
                    nic.name,
                    nic.node,
                    if nic.node_known { "" } else { " (assumed)" },
                    nic.irqs.len(),
                    self.irq_cpus
                );
            }
            None => out.push_str("NIC: none with interrupts\n"),
        }
        let _ = writeln!(
            out,
            "system tasks: CPUs {}",
            display_or_none(&self.system_cpus)
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<12} {:<6} {:<6} {:>7} {:>8}  worker CPUs",
            "instance", "nodes", "port", "workers", "memory"
        );
        for inst in &self.instances {
            let _ = writeln!(
                out,
                "{:<12} {:<6} {:<6} {:>7} {:>5}MiB  {}",
                inst.name,
                inst.nodes.to_string(),
                inst.port,
                inst.workers.len(),
                inst.memory_mib,
                inst.workers
            );
        }
        if let Some(nic) = &self.nic {
            let _ = writeln!(out);
            let _ = writeln!(out, "{:<6} {:<28} cpu", "irq", "name");
            for a in &nic.irqs {
                let _ = writeln!(out, "{:<6} {:<28} {}", a.irq, a.name, a.cpu);
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            for note in &self.notes {
                let _ = writeln!(out, "note: {note}");
            }
        }
        out.push('\n');
        out.push_str(&self.render_commands());
        out
    }

    /// One `tern serve` command line per instance.
    pub fn render_commands(&self) -> String {
        self.instances
            .iter()
            .map(|i| shell_line(&i.command) + "\n")
            .collect()
    }

    /// A commented shell script doing the seed's steps for this layout.
    pub fn render_script(&self) -> String {
        let mut s = String::new();
        let plan_line = shell_line(
            &[self.bin.clone(), "tune".into(), "plan".into()]
                .into_iter()
                .chain(self.plan_args.iter().cloned())
                .collect::<Vec<_>>(),
        );
        let _ = writeln!(s, "#!/bin/sh");
        let _ = writeln!(
            s,
            "# tern layout, generated by: {plan_line} --format script"
        );
        let _ = writeln!(
            s,
            "# Run as root. Each step says why; skip what does not apply."
        );
        let _ = writeln!(s, "set -eu");
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "# 1. Stop irqbalance: it rewrites IRQ affinities every few seconds and would undo step 3."
        );
        let _ = writeln!(s, "systemctl disable --now irqbalance 2>/dev/null || true");
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "# 2. No swapping: a swapped-out item turns a microsecond get into a disk read."
        );
        let _ = writeln!(s, "swapoff -a");
        let _ = writeln!(s);
        match &self.nic {
            Some(nic) if !nic.irqs.is_empty() => {
                let _ = writeln!(
                    s,
                    "# 3. {} interrupts onto CPUs {} (node {}), off the workers: shielded interrupt CPUs",
                    nic.name, self.irq_cpus, nic.node
                );
                let _ = writeln!(
                    s,
                    "#    kept scaling where unshielded ones flatlined at half the throughput. Same as"
                );
                let _ = writeln!(s, "#    `{plan_line} --apply`.");
                for a in &nic.irqs {
                    let _ = writeln!(
                        s,
                        "echo {} > /proc/irq/{}/smp_affinity_list  # {}",
                        a.cpu, a.irq, a.name
                    );
                }
                let _ = writeln!(s);
                let _ = writeln!(
                    s,
                    "# 4. Interrupt moderation: adaptive-rx off lowers latency (needs ethtool; not every driver has it)."
                );
                let _ = writeln!(
                    s,
                    "ethtool -C {} adaptive-rx off || echo 'ethtool -C {} adaptive-rx off failed: check ethtool -c {}'",
                    nic.name, nic.name, nic.name
                );
            }
            _ => {
                let _ = writeln!(s, "# 3-4. No NIC interrupts to steer on this machine.");
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "# 5. Shields (cpuset): system tasks on CPUs {}, each instance on its own CPUs and node.",
            display_or_none(&self.system_cpus)
        );
        let _ = writeln!(
            s,
            "#    Without cset, `taskset -c` confines each instance the same way (memory then follows --numa-node)."
        );
        let _ = writeln!(s, "if command -v cset >/dev/null; then");
        if !self.system_cpus.is_empty() {
            let _ = writeln!(s, "  cset set --cpu={} system-tasks", self.system_cpus);
            let _ = writeln!(s, "  cset proc --move / system-tasks --kthread");
        }
        for inst in &self.instances {
            let _ = writeln!(
                s,
                "  cset set --cpu={} --mem={} {}",
                inst.workers, inst.nodes, inst.name
            );
        }
        let _ = writeln!(s, "fi");
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "# 6. Start the instances. --pin pins each worker thread to one CPU itself (the seed's"
        );
        let _ = writeln!(
            s,
            "#    `ps -L` + `taskset -pc CPU TID` per thread); --numa-node keeps its memory local."
        );
        for inst in &self.instances {
            let serve = shell_line(&inst.command);
            let _ = writeln!(s, "if command -v cset >/dev/null; then");
            let _ = writeln!(s, "  cset proc --set={} --exec -- {serve} &", inst.name);
            let _ = writeln!(s, "else");
            let _ = writeln!(s, "  taskset -c {} {serve} &", inst.workers);
            let _ = writeln!(s, "fi");
        }
        let _ = writeln!(s, "wait");
        s
    }

    /// The systemd files: a oneshot unit that re-applies the IRQ affinities at boot, and per
    /// instance a drop-in for the packaged unit that runs it (`tern@N.service` per NUMA node,
    /// `tern.service` for a single instance), which holds the unit's hardening and user.
    /// Returns (path under /etc/systemd/system, contents).
    pub fn render_units(&self) -> Vec<(String, String)> {
        let mut units = Vec::new();
        let irq_unit = "tern-irq-affinity.service";
        let has_irqs = self.nic.as_ref().is_some_and(|n| !n.irqs.is_empty());
        if let (true, Some(nic)) = (has_irqs, &self.nic) {
            let mut apply = vec![self.bin.clone(), "tune".into(), "plan".into()];
            apply.extend(self.plan_args.iter().cloned());
            apply.push("--apply".into());
            let mut u = String::new();
            let _ = writeln!(u, "[Unit]");
            let _ = writeln!(
                u,
                "Description=tern: steer {} interrupts to CPUs {}, off the workers",
                nic.name, self.irq_cpus
            );
            let _ = writeln!(u, "After=network-pre.target");
            let _ = writeln!(
                u,
                "# irqbalance would move the interrupts back every few seconds."
            );
            let _ = writeln!(u, "Conflicts=irqbalance.service");
            let _ = writeln!(u);
            let _ = writeln!(u, "[Service]");
            let _ = writeln!(u, "Type=oneshot");
            let _ = writeln!(u, "RemainAfterExit=yes");
            let _ = writeln!(u, "ExecStart={}", shell_line(&apply));
            let _ = writeln!(u);
            let _ = writeln!(u, "[Install]");
            let _ = writeln!(u, "WantedBy=multi-user.target");
            units.push((irq_unit.to_string(), u));
        }
        for inst in &self.instances {
            let template = inst.unit != "tern.service";
            // The command line less the binary and `serve`, and less the --numa-node the
            // template adds itself from the instance name.
            let mut args: Vec<String> = inst.command.iter().skip(2).cloned().collect();
            if template {
                if let Some(at) = args.iter().position(|a| a == "--numa-node") {
                    args.drain(at..at + 2);
                }
            }
            let mut u = String::new();
            let _ = writeln!(
                u,
                "# {}: port {}, NUMA node {}, workers on CPUs {}, {} MiB.",
                inst.name, inst.port, inst.nodes, inst.workers, inst.memory_mib
            );
            let _ = writeln!(
                u,
                "# A drop-in for the packaged {}{}.",
                inst.unit,
                if template {
                    format!(", which adds --numa-node {}", inst.nodes)
                } else {
                    String::new()
                }
            );
            if has_irqs {
                let _ = writeln!(u, "[Unit]");
                let _ = writeln!(u, "After={irq_unit}");
                let _ = writeln!(u, "Wants={irq_unit}");
                let _ = writeln!(u);
            }
            let _ = writeln!(u, "[Service]");
            let _ = writeln!(u, "Environment=\"TERN_ARGS={}\"", args.join(" "));
            let _ = writeln!(
                u,
                "# The unit's shield: the process may only run on its workers' CPUs."
            );
            let _ = writeln!(
                u,
                "CPUAffinity={}",
                inst.workers.to_string().replace(',', " ")
            );
            if inst.nodes.len() == 1 {
                let _ = writeln!(
                    u,
                    "# Memory from its node from the first page on (systemd takes no %i here)."
                );
                let _ = writeln!(u, "NUMAPolicy=bind");
                let _ = writeln!(u, "NUMAMask={}", inst.nodes);
            }
            if self.lock_memory {
                let _ = writeln!(u, "LimitMEMLOCK=infinity");
            }
            units.push((format!("{}.d/tern-tune-plan.conf", inst.unit), u));
        }
        units
    }

    /// What to run once the files are in /etc/systemd/system.
    pub fn enable_command(&self) -> String {
        let mut units: Vec<String> = Vec::new();
        if self.nic.as_ref().is_some_and(|n| !n.irqs.is_empty()) {
            units.push("tern-irq-affinity.service".into());
        }
        units.extend(self.instances.iter().map(|i| i.unit.clone()));
        let single = self.instances.iter().all(|i| i.unit == "tern.service");
        format!(
            "systemctl daemon-reload && {}systemctl enable --now {} (restart the instances that already run)",
            if single {
                ""
            } else {
                "systemctl disable --now tern.service && "
            },
            units.join(" ")
        )
    }

    /// All systemd files in one text, each under a `# ---- path ----` header, then what to run.
    pub fn render_units_text(&self) -> String {
        let files: Vec<String> = self
            .render_units()
            .iter()
            .map(|(name, body)| format!("# ---- {name} ----\n{body}"))
            .collect();
        format!(
            "{}\n# Written with --out /etc/systemd/system; then: {}\n",
            files.join("\n"),
            self.enable_command()
        )
    }

    /// A twemproxy (nutcracker) pool over the instances, reached at `address`, with the proxy
    /// listening on `listen`.
    pub fn render_twemproxy(&self, address: &str, listen: &str) -> String {
        let mut y = String::new();
        let _ = writeln!(
            y,
            "# twemproxy (nutcracker) pool over the {} tern instance(s) of this plan: nutcracker -c FILE",
            self.instances.len()
        );
        let _ = writeln!(
            y,
            "# ketama over MD5, each server named as libmemcached names it on its ring, so this proxy"
        );
        let _ = writeln!(
            y,
            "# and a ketama client given the same servers in the same order (tern tune plan"
        );
        let _ = writeln!(y, "# --format servers) put every key on the same instance.");
        let _ = writeln!(y, "tern:");
        let _ = writeln!(y, "  listen: {listen}");
        let _ = writeln!(y, "  hash: md5");
        let _ = writeln!(y, "  distribution: ketama");
        let _ = writeln!(
            y,
            "  # An instance answers in microseconds: a second without an answer is a failure."
        );
        let _ = writeln!(y, "  timeout: 1000");
        let _ = writeln!(y, "  preconnect: true");
        let _ = writeln!(
            y,
            "  # A stopped instance is not ejected: its keys fail rather than move, as with a client."
        );
        let _ = writeln!(y, "  auto_eject_hosts: false");
        let _ = writeln!(y, "  servers:");
        for inst in &self.instances {
            let _ = writeln!(
                y,
                "    - {address}:{}:1 {}",
                inst.port,
                ketama_name(address, inst.port)
            );
        }
        y
    }

    /// The instances as `host:port` lines, in the pool's order, for ketama clients.
    pub fn render_servers(&self, address: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# The {} tern instance(s) of this plan, in order, for ketama clients (libmemcached with",
            self.instances.len()
        );
        let _ = writeln!(
            s,
            "# MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, tern bench -s): they place keys as the twemproxy"
        );
        let _ = writeln!(
            s,
            "# pool of --format twemproxy does. Comma-separated: grep -v '^#' FILE | paste -sd,"
        );
        for inst in &self.instances {
            let _ = writeln!(s, "{address}:{}", inst.port);
        }
        s
    }

    /// Writes each IRQ's planned CPU to `root/proc/irq/N/smp_affinity_list` and nothing else.
    /// Returns one line per IRQ; fails after trying them all if any write failed (the kernel
    /// refuses some, e.g. managed interrupts, with EIO; non-root gets EACCES).
    pub fn apply_irq_affinity(&self, root: &Path) -> Result<Vec<String>> {
        let Some(nic) = &self.nic else {
            bail!("no NIC with interrupt lines: nothing to apply");
        };
        let mut report = Vec::new();
        let mut failures = 0;
        for a in &nic.irqs {
            let path = root.join(format!("proc/irq/{}/smp_affinity_list", a.irq));
            match std::fs::write(&path, format!("{}\n", a.cpu)) {
                Ok(()) => report.push(format!("irq {} ({}) -> CPU {}", a.irq, a.name, a.cpu)),
                Err(e) => {
                    failures += 1;
                    report.push(format!(
                        "irq {} ({}): {}: {e}",
                        a.irq,
                        a.name,
                        path.display()
                    ));
                }
            }
        }
        if failures > 0 {
            bail!(
                "{failures} of {} IRQ affinities not written (this needs root; the kernel also \
                 refuses some, e.g. managed IRQs):\n{}",
                nic.irqs.len(),
                report.join("\n")
            );
        }
        Ok(report)
    }
}

/// A server's name on libmemcached's ketama ring: `host` alone on the default port 11211,
/// `host:port` otherwise (tern bench's `Target::ring_name` agrees).
fn ketama_name(address: &str, port: u16) -> String {
    if port == 11211 {
        address.to_string()
    } else {
        format!("{address}:{port}")
    }
}

fn display_or_none(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".to_string()
    } else {
        set.to_string()
    }
}
