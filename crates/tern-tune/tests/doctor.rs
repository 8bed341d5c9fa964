//! `tern tune doctor` checks against fixture machines: a box as the seed found it before tuning,
//! and one tuned the way the seed recommends.

mod common;

use std::path::PathBuf;

use tern_tune::doctor::{run_checks, Check, DoctorRequest, Status, Workers};
use tern_tune::system::SystemState;
use tern_tune::topology::read_threads;
use tern_tune::{CpuSet, Topology};

fn checks(fixture: &str, req: impl FnOnce(&PathBuf) -> DoctorRequest) -> Vec<Check> {
    let root = common::fixture(fixture);
    let topology = Topology::read(&root).unwrap();
    let nics: Vec<String> = topology.nics.iter().map(|n| n.name.clone()).collect();
    let system = SystemState::read(&root, &nics).unwrap();
    run_checks(&topology, &system, &req(&root))
}

fn status(checks: &[Check], name: &str) -> Status {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
        .status
}

fn check<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn untuned_xeon_fails_where_the_seed_tuned() {
    let checks = checks("xeon-e5-2620-2s", |root| DoctorRequest {
        max_conns: 4096,
        workers: Some(Workers::Threads {
            pid: 4242,
            threads: read_threads(root, 4242).unwrap(),
        }),
        ..DoctorRequest::default()
    });
    assert_eq!(status(&checks, "irqbalance"), Status::Fail);
    assert!(check(&checks, "irqbalance").found.contains("pid 812"));
    assert_eq!(
        check(&checks, "irqbalance").fix,
        "systemctl disable --now irqbalance"
    );
    assert_eq!(status(&checks, "swap"), Status::Fail);
    assert!(check(&checks, "swap").found.contains("/dev/sda2"));
    assert_eq!(status(&checks, "transparent-hugepages"), Status::Warn);
    assert_eq!(status(&checks, "huge-pages"), Status::Pass);
    assert_eq!(status(&checks, "open-files"), Status::Fail);
    assert_eq!(
        check(&checks, "open-files").fix,
        "ulimit -n 4160 before starting tern (systemd: LimitNOFILE=4160)"
    );
    assert_eq!(status(&checks, "somaxconn"), Status::Fail);
    assert_eq!(
        check(&checks, "somaxconn").fix,
        "sysctl -w net.core.somaxconn=1024"
    );
    assert_eq!(status(&checks, "cpu-governor"), Status::Warn);
    assert!(check(&checks, "cpu-governor").found.contains("ondemand"));
    // ethtool is only asked about the live machine.
    assert_eq!(status(&checks, "nic-coalescing"), Status::Skip);
    // Unpinned workers: allowed on both nodes and on every interrupt's CPUs.
    assert_eq!(status(&checks, "numa-span"), Status::Fail);
    assert!(check(&checks, "numa-span")
        .found
        .contains("4 worker threads"));
    assert_eq!(status(&checks, "irqs-on-workers"), Status::Fail);
    assert!(check(&checks, "irqs-on-workers")
        .found
        .contains("128 (eth2-0)"));
    assert_eq!(status(&checks, "workers-pinned"), Status::Warn);
    assert!(check(&checks, "workers-pinned")
        .found
        .starts_with("4 of 4 worker threads of pid 4242 are not pinned"));
    // Every failure and warning says why and how to fix it.
    for c in &checks {
        assert!(!c.why.is_empty(), "{c:?}");
        if matches!(c.status, Status::Fail | Status::Warn) {
            assert!(!c.fix.is_empty(), "{c:?}");
        }
    }
}

#[test]
fn tuned_box_with_isolated_workers_passes() {
    let checks = checks("isolated-cpus", |root| DoctorRequest {
        max_conns: 4096,
        memory_mib: 2048,
        large_pages: true,
        workers: Some(Workers::Threads {
            pid: 4242,
            threads: read_threads(root, 4242).unwrap(),
        }),
        ..DoctorRequest::default()
    });
    let not_passing: Vec<&Check> = checks
        .iter()
        .filter(|c| c.status != Status::Pass && c.name != "nic-coalescing")
        .collect();
    assert!(not_passing.is_empty(), "{not_passing:#?}");
    assert!(check(&checks, "numa-span").found.contains("CPUs 4-7"));
    assert_eq!(
        check(&checks, "workers-pinned").found,
        "4 worker threads of pid 4242, one per CPU (4-7)"
    );
}

#[test]
fn large_pages_without_a_reservation_warn_with_the_page_count() {
    let checks = checks("vm-1node", |_| DoctorRequest {
        large_pages: true,
        memory_mib: 1024,
        ..DoctorRequest::default()
    });
    assert_eq!(status(&checks, "huge-pages"), Status::Warn);
    assert_eq!(
        check(&checks, "huge-pages").fix,
        "echo 512 > /proc/sys/vm/nr_hugepages"
    );
    // No cpufreq in the VM, and no workers named: skipped, not failed.
    assert_eq!(status(&checks, "cpu-governor"), Status::Skip);
    assert_eq!(status(&checks, "numa-span"), Status::Skip);
    assert_eq!(status(&checks, "irqs-on-workers"), Status::Skip);
}

#[test]
fn reserved_pages_without_large_pages_warn() {
    let checks = checks("isolated-cpus", |_| DoctorRequest::default());
    assert_eq!(status(&checks, "huge-pages"), Status::Warn);
    assert!(check(&checks, "huge-pages").found.contains("2048 MiB"));
}

#[test]
fn swap_is_fine_with_locked_memory() {
    let checks = checks("xeon-e5-2620-2s", |_| DoctorRequest {
        lock_memory: true,
        ..DoctorRequest::default()
    });
    assert_eq!(status(&checks, "swap"), Status::Pass);
}

#[test]
fn planned_workers_against_driver_spread_interrupts() {
    // ixgbe spreads its 8 queues one per CPU: any worker CPU gets interrupts until the plan is
    // applied.
    let planned = |list: &str| {
        checks("nic-8queues", |_| DoctorRequest {
            workers: Some(Workers::Planned(CpuSet::parse(list).unwrap())),
            ..DoctorRequest::default()
        })
    };
    let checks = planned("2-7");
    assert_eq!(status(&checks, "irqs-on-workers"), Status::Fail);
    assert!(check(&checks, "irqs-on-workers")
        .found
        .contains("7 NIC interrupts"));
    assert_eq!(status(&checks, "numa-span"), Status::Pass);
    let amd = checks_amd("0-3,4");
    assert_eq!(status(&amd, "numa-span"), Status::Fail);
    let amd = checks_amd("0-3");
    assert_eq!(status(&amd, "numa-span"), Status::Pass);
    // mlx5's vectors sit on CPUs 12-15 (and the async one everywhere).
    assert_eq!(status(&checks_amd("1-3"), "irqs-on-workers"), Status::Fail);
}

fn checks_amd(list: &str) -> Vec<Check> {
    checks("amd-epyc-4node", |_| DoctorRequest {
        workers: Some(Workers::Planned(CpuSet::parse(list).unwrap())),
        ..DoctorRequest::default()
    })
}
