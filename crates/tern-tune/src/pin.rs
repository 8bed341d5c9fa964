//! Pinning threads to CPUs and binding memory to NUMA nodes: the API `tern serve --pin` and
//! `--numa-node` use.
//!
//! The server's sequence, on its main thread before it starts any worker:
//!
//! 1. `let layout = tern_tune::pin::plan_pinning(&spec, workers, numa_node)?;` with `spec` from
//!    `--pin auto|CPULIST` (parsed by [`PinSpec::from_str`](std::str::FromStr)) and `numa_node`
//!    from `--numa-node N`.
//! 2. With `--numa-node N`: `tern_tune::pin::bind_memory_to_node(N)?;` so every allocation of this
//!    thread and of the threads it spawns afterwards comes from node N (and, for memory mapped
//!    earlier, `bind_region_to_node(region, N)`).
//! 3. In worker `i`'s thread, first thing: `pin_current_thread(layout.workers[i])?;`. In a
//!    background thread: `if let Some(cpu) = layout.background { pin_current_thread(cpu)? }`.
//!    With `--numa-node N` but no `--pin`, each thread instead calls
//!    `set_current_thread_affinity(&node_cpus(N)?)` to stay on the node without a CPU of its own.
//!
//! The seed studies do each step by hand (`taskset -pc CPU TID` per worker thread, `numactl
//! --membind`); pinning alone tripled Pelikan's throughput at a 2 ms p999 SLO.

use std::io;
use std::str::FromStr;

use serde::Serialize;

use crate::cpuset::{CpuListError, CpuSet};
use crate::topology::Topology;

/// What `--pin` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinSpec {
    /// Choose CPUs by the plan's rules; see [`plan_pinning_on`].
    Auto,
    /// Worker `i` runs on the `i`-th CPU of the list (ascending), wrapping around when there are
    /// more workers than CPUs.
    Cpus(CpuSet),
}

impl FromStr for PinSpec {
    type Err = CpuListError;

    /// `auto` or a cpulist such as `2-5,8`.
    fn from_str(s: &str) -> Result<PinSpec, CpuListError> {
        if s.trim() == "auto" {
            Ok(PinSpec::Auto)
        } else {
            CpuSet::parse(s).map(PinSpec::Cpus)
        }
    }
}

/// Where each thread goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinLayout {
    /// CPU for worker `i` at index `i`; one entry per worker.
    pub workers: Vec<usize>,
    /// A CPU no worker uses, for background threads (expiry, stats, admin); `None` means leave
    /// them unpinned.
    pub background: Option<usize>,
}

/// Why pinning or binding could not be done.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("reading the CPU topology: {0:#}")]
    Topology(anyhow::Error),
    #[error("there are no workers to pin")]
    NoWorkers,
    #[error("--pin {cpus}: CPUs {missing} are not online or not allowed for this process (allowed: {allowed})")]
    CpusNotAvailable {
        cpus: CpuSet,
        missing: CpuSet,
        allowed: CpuSet,
    },
    #[error("--pin {cpus}: CPUs {outside} are not on NUMA node {node} (its CPUs: {node_cpus})")]
    CpusOutsideNode {
        cpus: CpuSet,
        outside: CpuSet,
        node: usize,
        node_cpus: CpuSet,
    },
    #[error("--pin auto: {workers} workers but only {} CPUs ({available}) are available; pass fewer threads or an explicit CPU list", available.len())]
    NotEnoughCpus { workers: usize, available: CpuSet },
    #[error("NUMA node {node} does not exist or has no CPUs (nodes: {nodes})")]
    NoSuchNode { node: usize, nodes: CpuSet },
    #[error("{call}: the kernel refused NUMA node {node}: no such node, or it has no memory")]
    NodeRefused { node: usize, call: &'static str },
    #[error("mbind: the region at {addr:#x} does not start on a page boundary")]
    Unaligned { addr: usize },
    #[error("CPU {cpu} is beyond what sched_setaffinity can address ({max})")]
    CpuOutOfRange { cpu: usize, max: usize },
    #[error("{call}: {source}")]
    Os {
        call: &'static str,
        #[source]
        source: io::Error,
    },
}

/// [`plan_pinning_on`] for this machine: reads the topology from `/` and the calling thread's
/// allowed CPUs (which a `taskset`, cset shield or systemd `CPUAffinity=` may have narrowed).
pub fn plan_pinning(
    spec: &PinSpec,
    workers: usize,
    numa_node: Option<usize>,
) -> Result<PinLayout, PinError> {
    let topology = Topology::read(std::path::Path::new("/")).map_err(PinError::Topology)?;
    let allowed = current_thread_affinity()?;
    plan_pinning_on(&topology, &allowed, spec, workers, numa_node)
}

/// Chooses a CPU per worker and one for background threads.
///
/// `auto` follows the rules of `tern tune plan`: candidates are the online CPUs this process may
/// use (isolated CPUs count as usable unless the process was confined with taskset or a cset),
/// limited to `numa_node` when given. Workers take, in order of preference: CPUs that are neither
/// CPU 0 (system tasks) nor a CPU the NIC interrupts are steered to, nor an SMT sibling of those;
/// then the first hyperthread of each core before second ones; isolated CPUs before others. So
/// CPU 0 and the IRQ CPUs are skipped while there are enough other CPUs, and used when there are
/// not. More workers than candidate CPUs is an error ([`PinError::NotEnoughCpus`]): two pinned
/// workers on one CPU would only take turns.
///
/// An explicit list must lie within the allowed CPUs (and node `numa_node`); workers get its CPUs
/// in ascending order, wrapping around, and background threads stay unpinned.
pub fn plan_pinning_on(
    topology: &Topology,
    allowed: &CpuSet,
    spec: &PinSpec,
    workers: usize,
    numa_node: Option<usize>,
) -> Result<PinLayout, PinError> {
    if workers == 0 {
        return Err(PinError::NoWorkers);
    }
    let node_cpus = match numa_node {
        Some(node) => Some(cpus_of_node(topology, node)?),
        None => None,
    };
    let online = topology.online();
    let usable = {
        let allowed_online = allowed.intersection(&online);
        // A process nobody confined is allowed on every CPU but the isolated ones (the kernel
        // keeps isolcpus out of default affinity); those are exactly where pinned workers belong.
        let unconfined = online
            .difference(&topology.isolated)
            .is_subset(&allowed_online);
        if unconfined {
            online.clone()
        } else {
            allowed_online
        }
    };

    match spec {
        PinSpec::Cpus(cpus) => {
            let missing = cpus.difference(&usable);
            if !missing.is_empty() {
                return Err(PinError::CpusNotAvailable {
                    cpus: cpus.clone(),
                    missing,
                    allowed: usable,
                });
            }
            if let (Some(node), Some(node_cpus)) = (numa_node, &node_cpus) {
                let outside = cpus.difference(node_cpus);
                if !outside.is_empty() {
                    return Err(PinError::CpusOutsideNode {
                        cpus: cpus.clone(),
                        outside,
                        node,
                        node_cpus: node_cpus.clone(),
                    });
                }
            }
            let list: Vec<usize> = cpus.iter().collect();
            if list.is_empty() {
                return Err(PinError::NotEnoughCpus {
                    workers,
                    available: CpuSet::new(),
                });
            }
            Ok(PinLayout {
                workers: (0..workers).map(|i| list[i % list.len()]).collect(),
                background: None,
            })
        }
        PinSpec::Auto => {
            let candidates = match &node_cpus {
                Some(node_cpus) => usable.intersection(node_cpus),
                None => usable,
            };
            if workers > candidates.len() {
                return Err(PinError::NotEnoughCpus {
                    workers,
                    available: candidates,
                });
            }
            let mut avoided = topology.steered_irq_cpus();
            avoided.insert(0);
            let near_avoided: CpuSet = topology
                .cpus
                .iter()
                .filter(|c| !c.siblings.is_disjoint(&avoided))
                .map(|c| c.id)
                .collect();
            let mut ranked: Vec<usize> = candidates.iter().collect();
            ranked.sort_by_key(|&cpu| {
                let sibling_rank = topology
                    .cpu(cpu)
                    .and_then(|c| c.siblings.iter().position(|s| s == cpu))
                    .unwrap_or(0);
                (
                    avoided.contains(cpu),
                    near_avoided.contains(cpu),
                    sibling_rank,
                    !topology.isolated.contains(cpu),
                    cpu,
                )
            });
            let chosen: CpuSet = ranked[..workers].iter().copied().collect();
            let background = if !chosen.contains(0) && candidates.contains(0) {
                Some(0)
            } else {
                candidates.difference(&chosen).first()
            };
            Ok(PinLayout {
                workers: chosen.iter().collect(),
                background,
            })
        }
    }
}

/// Pins the calling thread to one CPU (`sched_setaffinity` on thread id 0, which is the caller).
pub fn pin_current_thread(cpu: usize) -> Result<(), PinError> {
    set_current_thread_affinity(&[cpu].into_iter().collect())
}

/// Lets the calling thread run on `cpus` only (`sched_setaffinity`): with `--numa-node N` and no
/// `--pin`, `set_current_thread_affinity(&node_cpus(N)?)` keeps a thread on its node's CPUs.
/// Errors: [`PinError::CpuOutOfRange`] past `CPU_SETSIZE`, [`PinError::Os`] (`EINVAL`) when none
/// of `cpus` is online and allowed for this process.
pub fn set_current_thread_affinity(cpus: &CpuSet) -> Result<(), PinError> {
    let max = libc::CPU_SETSIZE as usize;
    // SAFETY: cpu_set_t is a plain bitmask, for which all-zero bytes are the valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus.iter() {
        if cpu >= max {
            return Err(PinError::CpuOutOfRange { cpu, max });
        }
        // SAFETY: cpu < CPU_SETSIZE was checked just above, so the bit lies inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a live, initialised cpu_set_t and the size passed is its own size; the
    // kernel only reads it.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(PinError::Os {
            call: "sched_setaffinity",
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The online CPUs of NUMA node `node` on this machine; [`PinError::NoSuchNode`] when it does not
/// exist or has no CPUs.
pub fn node_cpus(node: usize) -> Result<CpuSet, PinError> {
    let topology = Topology::read(std::path::Path::new("/")).map_err(PinError::Topology)?;
    cpus_of_node(&topology, node)
}

fn cpus_of_node(topology: &Topology, node: usize) -> Result<CpuSet, PinError> {
    topology
        .node(node)
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.cpus.clone())
        .ok_or_else(|| PinError::NoSuchNode {
            node,
            nodes: topology.nodes.iter().map(|n| n.id).collect(),
        })
}

/// The CPUs the calling thread may run on (`sched_getaffinity`).
pub fn current_thread_affinity() -> Result<CpuSet, PinError> {
    // SAFETY: all-zero bytes are a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`, which we own.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(PinError::Os {
            call: "sched_getaffinity",
            source: io::Error::last_os_error(),
        });
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: every cpu tested is below CPU_SETSIZE, inside `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

// From linux/mempolicy.h; the libc crate does not export them.
const MPOL_DEFAULT: libc::c_int = 0;
const MPOL_PREFERRED: libc::c_int = 1;
const MPOL_BIND: libc::c_int = 2;
const MPOL_INTERLEAVE: libc::c_int = 3;
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;

/// Node masks passed to the kernel hold this many nodes (the kernel's largest MAX_NUMNODES).
const MASK_NODES: usize = 1024;
const MASK_WORDS: usize = MASK_NODES / libc::c_ulong::BITS as usize;

fn node_mask(node: usize, call: &'static str) -> Result<[libc::c_ulong; MASK_WORDS], PinError> {
    if node >= MASK_NODES {
        return Err(PinError::NodeRefused { node, call });
    }
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    let bits = libc::c_ulong::BITS as usize;
    mask[node / bits] |= 1 << (node % bits);
    Ok(mask)
}

/// Makes every page the calling thread touches from now on come from NUMA node `node` only
/// (`set_mempolicy(MPOL_BIND)`). Threads spawned afterwards inherit the policy, so calling it on
/// the main thread before starting workers binds the whole heap. Pages already touched stay
/// where they are; see [`bind_region_to_node`] for those.
///
/// Errors: [`PinError::NodeRefused`] for a node the kernel does not know or one without memory
/// (`EINVAL`), [`PinError::Os`] for anything else (e.g. `EPERM` under a seccomp filter).
pub fn bind_memory_to_node(node: usize) -> Result<(), PinError> {
    let mask = node_mask(node, "set_mempolicy")?;
    // SAFETY: `mask` is a live array of MASK_WORDS words; maxnode MASK_NODES + 1 makes the kernel
    // read exactly MASK_NODES bits (it subtracts one, a historic quirk), all within `mask`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_BIND,
            mask.as_ptr(),
            (MASK_NODES + 1) as libc::c_ulong,
        )
    };
    mempolicy_result(rc, node, "set_mempolicy")
}

/// Binds the pages of `region` to node `node` and moves those already faulted in elsewhere
/// (`mbind(MPOL_BIND, MPOL_MF_MOVE)`). The region must start on a page boundary (as an `mmap`ed
/// heap does); the kernel rounds its length up to whole pages.
pub fn bind_region_to_node(region: &[u8], node: usize) -> Result<(), PinError> {
    let mask = node_mask(node, "mbind")?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let addr = region.as_ptr() as usize;
    // The kernel answers EINVAL for this too; tell it apart from a bad node.
    if addr % page != 0 {
        return Err(PinError::Unaligned { addr });
    }
    // SAFETY: mbind only changes where the pages of this address range live; their contents are
    // preserved, and `region` is memory we hold a reference to. `mask` is read as in
    // bind_memory_to_node.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            region.as_ptr(),
            region.len() as libc::c_ulong,
            MPOL_BIND,
            mask.as_ptr(),
            (MASK_NODES + 1) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    mempolicy_result(rc, node, "mbind")
}

fn mempolicy_result(rc: libc::c_long, node: usize, call: &'static str) -> Result<(), PinError> {
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINVAL) {
        return Err(PinError::NodeRefused { node, call });
    }
    Err(PinError::Os { call, source: err })
}

/// A NUMA memory policy as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPolicy {
    /// Allocate on the node of the CPU that touches the page.
    Default,
    Preferred(CpuSet),
    Bind(CpuSet),
    Interleave(CpuSet),
    Other {
        mode: i32,
        nodes: CpuSet,
    },
}

/// The calling thread's memory policy (`get_mempolicy`), e.g. for `stats settings`.
pub fn current_memory_policy() -> Result<MemoryPolicy, PinError> {
    get_mempolicy(std::ptr::null(), 0)
}

/// The policy governing the page at `addr` (`get_mempolicy(MPOL_F_ADDR)`).
pub fn memory_policy_at(addr: *const u8) -> Result<MemoryPolicy, PinError> {
    get_mempolicy(addr, MPOL_F_ADDR)
}

fn get_mempolicy(addr: *const u8, flags: libc::c_ulong) -> Result<MemoryPolicy, PinError> {
    let mut mode: libc::c_int = 0;
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    // SAFETY: the kernel writes one int to `mode` and at most MASK_NODES bits to `mask`, both
    // ours; with MPOL_F_ADDR it only looks up `addr` in our address space (EFAULT if unmapped).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            MASK_NODES as libc::c_ulong,
            addr,
            flags,
        )
    };
    if rc != 0 {
        return Err(PinError::Os {
            call: "get_mempolicy",
            source: io::Error::last_os_error(),
        });
    }
    let bits = libc::c_ulong::BITS as usize;
    let nodes: CpuSet = (0..MASK_NODES)
        .filter(|&n| mask[n / bits] & (1 << (n % bits)) != 0)
        .collect();
    Ok(match mode {
        MPOL_DEFAULT => MemoryPolicy::Default,
        MPOL_PREFERRED => MemoryPolicy::Preferred(nodes),
        MPOL_BIND => MemoryPolicy::Bind(nodes),
        MPOL_INTERLEAVE => MemoryPolicy::Interleave(nodes),
        mode => MemoryPolicy::Other { mode, nodes },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_spec_parses_auto_and_lists() {
        assert_eq!("auto".parse::<PinSpec>().unwrap(), PinSpec::Auto);
        assert_eq!(
            "1-2".parse::<PinSpec>().unwrap(),
            PinSpec::Cpus(CpuSet::parse("1-2").unwrap())
        );
        assert!("autox".parse::<PinSpec>().is_err());
    }

    #[test]
    fn pinning_a_thread_shows_in_its_status() {
        // A fresh thread, so the test harness's threads keep their affinity.
        let allowed = current_thread_affinity().unwrap();
        let cpu = allowed.iter().last().expect("some CPU is allowed");
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert_eq!(
                current_thread_affinity().unwrap().to_string(),
                cpu.to_string()
            );
            // What `ps`, `taskset -p` and `tern tune inspect --pid` read.
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            assert_eq!(
                line.split_whitespace().nth(1),
                Some(cpu.to_string().as_str())
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_can_be_kept_on_a_nodes_cpus() {
        std::thread::spawn(|| {
            let node0 = node_cpus(0).unwrap();
            set_current_thread_affinity(&node0).unwrap();
            assert_eq!(current_thread_affinity().unwrap(), node0);
            assert!(matches!(
                node_cpus(4096),
                Err(PinError::NoSuchNode { node: 4096, .. })
            ));
            // No allowed CPU in the set: the kernel refuses and the affinity stays.
            let err = set_current_thread_affinity(&CpuSet::new()).unwrap_err();
            assert!(matches!(err, PinError::Os { .. }), "{err}");
            assert_eq!(current_thread_affinity().unwrap(), node0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pinning_to_an_impossible_cpu_fails() {
        std::thread::spawn(|| {
            assert!(matches!(
                pin_current_thread(libc::CPU_SETSIZE as usize),
                Err(PinError::CpuOutOfRange { .. })
            ));
            // Within the mask but not a CPU this machine has: the kernel says EINVAL.
            assert!(matches!(
                pin_current_thread(libc::CPU_SETSIZE as usize - 1),
                Err(PinError::Os {
                    call: "sched_setaffinity",
                    ..
                })
            ));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn binding_thread_memory_to_node_zero_reads_back() {
        std::thread::spawn(|| {
            assert_eq!(current_memory_policy().unwrap(), MemoryPolicy::Default);
            bind_memory_to_node(0).unwrap();
            assert_eq!(
                current_memory_policy().unwrap(),
                MemoryPolicy::Bind(CpuSet::parse("0").unwrap())
            );
            // Threads spawned now inherit it: that is how the server binds its workers' heap.
            std::thread::spawn(|| {
                assert_eq!(
                    current_memory_policy().unwrap(),
                    MemoryPolicy::Bind(CpuSet::parse("0").unwrap())
                );
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn binding_to_a_missing_node_fails() {
        std::thread::spawn(|| {
            assert!(matches!(
                bind_memory_to_node(1000),
                Err(PinError::NodeRefused {
                    node: 1000,
                    call: "set_mempolicy"
                })
            ));
            assert!(matches!(
                bind_memory_to_node(MASK_NODES),
                Err(PinError::NodeRefused { .. })
            ));
            let page = [0u8; 1];
            assert!(matches!(
                bind_region_to_node(&page, MASK_NODES),
                Err(PinError::NodeRefused { call: "mbind", .. })
            ));
            assert_eq!(current_memory_policy().unwrap(), MemoryPolicy::Default);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn binding_a_region_sets_its_policy() {
        let len = 4 * 4096;
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: the layout has a non-zero size; the pointer is checked and freed below with
        // the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        // SAFETY: `ptr` points to `len` initialised (zeroed) bytes that live until dealloc.
        let region = unsafe { std::slice::from_raw_parts(ptr, len) };
        bind_region_to_node(region, 0).unwrap();
        assert_eq!(
            memory_policy_at(ptr).unwrap(),
            MemoryPolicy::Bind(CpuSet::parse("0").unwrap())
        );
        assert!(region.iter().all(|&b| b == 0), "contents survive the move");
        assert!(matches!(
            bind_region_to_node(&region[1..], 0),
            Err(PinError::Unaligned { .. })
        ));
        // SAFETY: allocated above with this layout, not used after.
        unsafe { std::alloc::dealloc(ptr, layout) };
    }
}
