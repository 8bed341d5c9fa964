//! `tern tune`: read the machine's topology (`inspect`), check its tuning (`doctor`), lay tern out
//! on its cores, NUMA nodes and NIC interrupts (`plan`); and the pinning API the server uses for
//! `--pin auto|CPULIST` and `--numa-node N` (see [`pin`]).

pub mod cpuset;
pub mod doctor;
pub mod pin;
pub mod plan;
pub mod system;
pub mod topology;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

pub use cpuset::CpuSet;
use doctor::{DoctorRequest, Status, Workers};
use plan::{Instances, PlanRequest};
use system::SystemState;
pub use topology::Topology;
use topology::{find_tern_servers, read_threads, ThreadInfo};

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    #[command(subcommand)]
    command: TuneCommand,
}

#[derive(clap::Subcommand, Debug)]
enum TuneCommand {
    /// Show packages, NUMA nodes, SMT siblings, isolated CPUs, NICs with their queues and IRQs,
    /// and (with --pid) a running server's threads and their CPUs.
    Inspect(InspectArgs),
    /// Check the machine's settings against what a pinned tern needs; exits non-zero when a
    /// check fails.
    Doctor(DoctorArgs),
    /// Plan instances, worker CPUs, interrupt CPUs and memory; print them as commands, a shell
    /// script, systemd drop-ins for the packaged units, or the pool configs clients need to use
    /// the instances as one cache (twemproxy, ketama server list); --apply writes the IRQ
    /// affinities.
    Plan(PlanArgs),
}

#[derive(clap::Args, Debug)]
struct RootArg {
    /// Read /sys and /proc below this directory instead of / (a copied tree of another machine).
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

#[derive(clap::Args, Debug)]
struct InspectArgs {
    #[command(flatten)]
    root: RootArg,
    /// Also list this process's threads and the CPUs each may run on.
    #[arg(long)]
    pid: Option<u32>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DoctorArgs {
    #[command(flatten)]
    root: RootArg,
    /// Check the worker threads of this running server (default: the one running `tern serve`,
    /// when there is exactly one).
    #[arg(long, conflicts_with = "pin")]
    pid: Option<u32>,
    /// Check planned worker CPUs (the --pin list tern serve will get).
    #[arg(long, value_name = "CPULIST")]
    pin: Option<CpuSet>,
    /// Only check this NIC's interrupts and moderation.
    #[arg(long)]
    nic: Option<String>,
    /// tern serve's -c: maximum connections.
    #[arg(short = 'c', long = "max-conns", default_value_t = 1024)]
    max_conns: u64,
    /// tern serve's -b: listen backlog.
    #[arg(short = 'b', long = "backlog", default_value_t = 1024)]
    backlog: u64,
    /// tern serve's -m: cache memory in MiB.
    #[arg(short = 'm', long = "memory", default_value_t = 64)]
    memory: u64,
    /// tern serve's -L: large pages.
    #[arg(short = 'L', long = "large-pages")]
    large_pages: bool,
    /// tern serve's -k: locked memory.
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Print JSON instead of the report.
    #[arg(long)]
    json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PlanFormat {
    /// Summary tables, then the command lines.
    Table,
    /// `tern serve` command lines only.
    Commands,
    /// A commented shell script with the cset, taskset and smp_affinity steps.
    Script,
    /// systemd files: drop-ins for the packaged tern@N.service (one per NUMA node) or
    /// tern.service, and the IRQ unit (each under a header; --out writes them as files).
    Systemd,
    /// A twemproxy (nutcracker) pool YAML over the instances: ketama, MD5.
    Twemproxy,
    /// The instances as host:port lines, for ketama clients.
    Servers,
    Json,
}

#[derive(clap::Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    root: RootArg,
    /// Interface clients arrive on (default: the NIC with the most interrupt lines).
    #[arg(long)]
    nic: Option<String>,
    /// Worker CPUs in total (default: all the rules leave for workers).
    #[arg(long)]
    cores: Option<usize>,
    /// One instance per NUMA node, or a single one.
    #[arg(long, value_enum, default_value = "per-node")]
    instances: Instances,
    /// Cache memory in MiB over all instances (default: 64 per instance).
    #[arg(long)]
    memory: Option<u64>,
    /// Workers per interrupt CPU; the seed's starting point for the kernel stack is 4.
    #[arg(long, default_value_t = 4)]
    workers_per_irq_cpu: usize,
    /// Number of interrupt CPUs, overriding --workers-per-irq-cpu.
    #[arg(long)]
    irq_cpus: Option<usize>,
    /// Let workers use every hyperthread, not only one per core.
    #[arg(long)]
    smt: bool,
    /// Port of the first instance; others count up.
    #[arg(short = 'p', long, default_value_t = 11211)]
    port: u16,
    /// Pass -L (large pages) to the instances.
    #[arg(short = 'L', long = "large-pages")]
    large_pages: bool,
    /// Pass -k (locked memory) to the instances.
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Admin endpoint port of the first instance; others count up [default: none].
    #[arg(long, value_name = "PORT")]
    admin_port: Option<u16>,
    /// Path of the tern binary in commands and units (the Debian package's by default).
    #[arg(long, default_value = plan::PACKAGED_BIN)]
    bin: String,
    #[arg(long, value_enum, default_value = "table")]
    format: PlanFormat,
    /// Address clients reach the instances at, in the pool configs.
    #[arg(long, default_value = "127.0.0.1")]
    address: String,
    /// Where the twemproxy pool listens.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:22121")]
    proxy_listen: String,
    /// With --format systemd, twemproxy or servers: write the files into this directory
    /// (systemd: /etc/systemd/system) instead of printing them.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the planned IRQ affinities to /proc/irq/N/smp_affinity_list (root), nothing else.
    #[arg(long)]
    apply: bool,
}

pub fn run(args: TuneArgs) -> Result<ExitCode> {
    match args.command {
        TuneCommand::Inspect(a) => inspect(a),
        TuneCommand::Doctor(a) => doctor(a),
        TuneCommand::Plan(a) => plan(a),
    }
}

/// What `inspect --json` prints.
#[derive(Serialize)]
struct Inspection {
    root: PathBuf,
    packages: usize,
    cores: usize,
    #[serde(flatten)]
    topology: Topology,
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<ProcessThreads>,
}

#[derive(Serialize)]
struct ProcessThreads {
    pid: u32,
    threads: Vec<ThreadInfo>,
}

fn inspect(a: InspectArgs) -> Result<ExitCode> {
    let topology = Topology::read(&a.root.root)?;
    let process = match a.pid {
        Some(pid) => Some(ProcessThreads {
            pid,
            threads: read_threads(&a.root.root, pid)?,
        }),
        None => None,
    };
    let inspection = Inspection {
        root: a.root.root.clone(),
        packages: topology.packages().len(),
        cores: topology.cores().len(),
        topology,
        process,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&inspection)?);
    } else {
        print!("{}", render_inspection(&inspection));
    }
    Ok(ExitCode::SUCCESS)
}

fn render_inspection(i: &Inspection) -> String {
    let t = &i.topology;
    let mut out = String::new();
    let smt = t.cpus.iter().map(|c| c.siblings.len()).max().unwrap_or(1);
    let _ = writeln!(
        out,
        "{} CPUs online: {} package(s), {} cores, {} thread(s) per core, {} NUMA node(s); isolated CPUs: {}",
        t.cpus.len(),
        i.packages,
        i.cores,
        smt,
        t.nodes.len(),
        if t.isolated.is_empty() {
            "none".to_string()
        } else {
            t.isolated.to_string()
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<6} {:<24} {:>10}", "node", "cpus", "memory");
    for n in &t.nodes {
        let _ = writeln!(
            out,
            "{:<6} {:<24} {:>10}",
            n.id,
            n.cpus.to_string(),
            n.memory_mib.map_or("?".to_string(), |m| format!("{m} MiB"))
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<8} {:<6} {:<24}",
        "package", "node", "cores (SMT siblings)"
    );
    for p in t.packages() {
        let cores: Vec<String> = t
            .cores()
            .iter()
            .filter(|c| {
                c.first()
                    .and_then(|id| t.cpu(id))
                    .is_some_and(|cpu| cpu.package == p)
            })
            .map(|c| c.to_string())
            .collect();
        let nodes = t.nodes_of(
            &t.cpus
                .iter()
                .filter(|c| c.package == p)
                .map(|c| c.id)
                .collect(),
        );
        let _ = writeln!(out, "{:<8} {:<6} {}", p, nodes.to_string(), cores.join(" "));
    }
    let governors: std::collections::BTreeSet<&str> = t
        .cpus
        .iter()
        .filter_map(|c| c.governor.as_deref())
        .collect();
    if !governors.is_empty() {
        let list: Vec<&str> = governors.into_iter().collect();
        let _ = writeln!(out, "cpufreq governors: {}", list.join(", "));
    }
    let _ = writeln!(out);
    if t.nics.is_empty() {
        let _ = writeln!(out, "no NIC with a device");
    }
    for nic in &t.nics {
        let _ = writeln!(
            out,
            "NIC {}: node {}, {} rx / {} tx queues, {} IRQs",
            nic.name,
            nic.node.map_or("unknown".to_string(), |n| n.to_string()),
            nic.rx_queues,
            nic.tx_queues,
            nic.irqs.len()
        );
        if !nic.irqs.is_empty() {
            let _ = writeln!(
                out,
                "  {:<6} {:<28} {:>12}  affinity",
                "irq", "name", "count"
            );
        }
        for irq in &nic.irqs {
            let _ = writeln!(
                out,
                "  {:<6} {:<28} {:>12}  {}",
                irq.irq,
                irq.name,
                irq.count,
                irq.affinity
                    .as_ref()
                    .map_or("?".to_string(), |a| a.to_string())
            );
        }
    }
    if let Some(p) = &i.process {
        let _ = writeln!(out);
        let _ = writeln!(out, "threads of pid {}:", p.pid);
        let _ = writeln!(
            out,
            "  {:<8} {:<18} {:<16} nodes",
            "tid", "name", "allowed CPUs"
        );
        for th in &p.threads {
            let _ = writeln!(
                out,
                "  {:<8} {:<18} {:<16} {}",
                th.tid,
                th.name,
                th.allowed.to_string(),
                t.nodes_of(&th.allowed)
            );
        }
    }
    out
}

fn doctor(a: DoctorArgs) -> Result<ExitCode> {
    let root = &a.root.root;
    let topology = Topology::read(root)?;
    let nic_names: Vec<String> = doctor::checked_nics(&topology, a.nic.as_deref())
        .iter()
        .map(|n| n.name.clone())
        .collect();
    let system = SystemState::read(root, &nic_names)?;
    let workers = match (a.pid, a.pin) {
        (Some(pid), _) => Some(Workers::Threads {
            pid,
            threads: read_threads(root, pid)?,
        }),
        (None, Some(cpus)) => Some(Workers::Planned(cpus)),
        // Nothing named: check the running server, when there is exactly one.
        (None, None) => match find_tern_servers(root)?.as_slice() {
            [pid] => Some(Workers::Threads {
                pid: *pid,
                threads: read_threads(root, *pid)?,
            }),
            [] => None,
            several => {
                let pids: Vec<String> = several.iter().map(|p| p.to_string()).collect();
                eprintln!(
                    "tern tune doctor: {} tern serve processes are running (pids {}); pass --pid \
                     to check one's workers",
                    several.len(),
                    pids.join(", ")
                );
                None
            }
        },
    };
    let req = DoctorRequest {
        max_conns: a.max_conns,
        backlog: a.backlog,
        memory_mib: a.memory,
        large_pages: a.large_pages,
        lock_memory: a.lock_memory,
        nic: a.nic,
        workers,
    };
    let checks = doctor::run_checks(&topology, &system, &req);
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if a.json {
        #[derive(Serialize)]
        struct Report<'a> {
            failed: usize,
            checks: &'a [doctor::Check],
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Report {
                failed,
                checks: &checks
            })?
        );
    } else {
        print!("{}", doctor::render(&checks));
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn plan(a: PlanArgs) -> Result<ExitCode> {
    let topology = Topology::read(&a.root.root)?;
    let req = PlanRequest {
        nic: a.nic,
        cores: a.cores,
        instances: a.instances,
        memory_mib: a.memory,
        workers_per_irq_cpu: a.workers_per_irq_cpu,
        irq_cpus: a.irq_cpus,
        smt: a.smt,
        port: a.port,
        large_pages: a.large_pages,
        lock_memory: a.lock_memory,
        admin_port: a.admin_port,
        bin: a.bin,
    };
    let plan = plan::make_plan(&topology, &req)?;
    if a.apply {
        for line in plan.apply_irq_affinity(&a.root.root)? {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let files: Vec<(String, String)> = match a.format {
        PlanFormat::Systemd => plan.render_units(),
        PlanFormat::Twemproxy => vec![(
            "nutcracker.yml".to_string(),
            plan.render_twemproxy(&a.address, &a.proxy_listen),
        )],
        PlanFormat::Servers => vec![(
            "tern-servers.txt".to_string(),
            plan.render_servers(&a.address),
        )],
        _ => Vec::new(),
    };
    if let Some(dir) = &a.out {
        if files.is_empty() {
            anyhow::bail!("--out writes files: add --format systemd, twemproxy or servers");
        }
        write_files(&files, dir)?;
        if a.format == PlanFormat::Systemd {
            println!("then: {}", plan.enable_command());
        }
        return Ok(ExitCode::SUCCESS);
    }
    match a.format {
        PlanFormat::Table => print!("{}", plan.render_table()),
        PlanFormat::Commands => print!("{}", plan.render_commands()),
        PlanFormat::Script => print!("{}", plan.render_script()),
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
        PlanFormat::Systemd => print!("{}", plan.render_units_text()),
        PlanFormat::Twemproxy | PlanFormat::Servers => print!("{}", files[0].1),
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes each (relative path, contents) under `dir`, making the drop-in directories.
fn write_files(files: &[(String, String)], dir: &Path) -> Result<()> {
    for (name, body) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("create {}", parent.display()))?;
        }
        std::fs::write(&path, body).with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
