//! `--pin auto|CPULIST` choices on fixture machines, and pinning for real on this one.

mod common;

use tern_tune::pin::{
    current_thread_affinity, pin_current_thread, plan_pinning, plan_pinning_on, PinError,
    PinLayout, PinSpec,
};
use tern_tune::{CpuSet, Topology};

fn topology(name: &str) -> Topology {
    Topology::read(&common::fixture(name)).unwrap()
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap()
}

fn auto(t: &Topology, allowed: &str, workers: usize, node: Option<usize>) -> PinLayout {
    plan_pinning_on(t, &set(allowed), &PinSpec::Auto, workers, node).unwrap()
}

#[test]
fn auto_skips_cpu_zero_and_hyperthreads_while_it_can() {
    let t = topology("xeon-e5-2620-2s");
    let layout = auto(&t, "0-23", 4, None);
    assert_eq!(layout.workers, vec![1, 2, 3, 4]);
    assert_eq!(layout.background, Some(0));
    // 12 cores: the 11 beyond CPU 0's first, then second hyperthreads (not CPU 0's sibling 12).
    assert_eq!(
        auto(&t, "0-23", 12, None).workers,
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13]
    );
    // All 24: CPU 0 too, background threads left unpinned.
    let all = auto(&t, "0-23", 24, None);
    assert_eq!(all.workers.len(), 24);
    assert_eq!(all.background, None);
}

#[test]
fn auto_with_a_numa_node_stays_on_it() {
    let t = topology("xeon-e5-2620-2s");
    let layout = auto(&t, "0-23", 4, Some(1));
    assert_eq!(layout.workers, vec![6, 7, 8, 9]);
    assert_eq!(layout.background, Some(10));
    assert!(matches!(
        plan_pinning_on(&t, &set("0-23"), &PinSpec::Auto, 13, Some(1)),
        Err(PinError::NotEnoughCpus { workers: 13, .. })
    ));
    assert!(matches!(
        plan_pinning_on(&t, &set("0-23"), &PinSpec::Auto, 1, Some(2)),
        Err(PinError::NoSuchNode { node: 2, .. })
    ));
}

#[test]
fn auto_avoids_cpus_the_nic_interrupts_are_steered_to() {
    // mlx5 vectors on CPUs 12-15 (node 3).
    let t = topology("amd-epyc-4node");
    let layout = auto(&t, "0-31", 3, Some(3));
    // Node 3 is 12-15 and 28-31; 28-31 are the interrupt CPUs' hyperthreads, so they come after
    // nothing better is left: still better than the interrupt CPUs themselves.
    assert_eq!(layout.workers, vec![28, 29, 30]);
    let layout = auto(&t, "0-31", 5, Some(3));
    assert_eq!(layout.workers, vec![12, 28, 29, 30, 31]);
}

#[test]
fn auto_prefers_isolated_cpus_even_outside_default_affinity() {
    let t = topology("isolated-cpus");
    // A process nobody confined has the housekeeping CPUs 0-3 as its affinity (the kernel leaves
    // isolcpus out); the isolated 4-7 are where workers belong.
    assert_eq!(auto(&t, "0-3", 2, None).workers, vec![4, 5]);
    assert_eq!(auto(&t, "0-3", 4, None).workers, vec![4, 5, 6, 7]);
    // The interrupt CPU 1 and CPU 0 come last.
    assert_eq!(auto(&t, "0-3", 6, None).workers, vec![2, 3, 4, 5, 6, 7]);
    // Confined by taskset/cset to 2-3: only those.
    assert_eq!(auto(&t, "2-3", 2, None).workers, vec![2, 3]);
    assert!(matches!(
        plan_pinning_on(&t, &set("2-3"), &PinSpec::Auto, 3, None),
        Err(PinError::NotEnoughCpus { workers: 3, .. })
    ));
}

#[test]
fn auto_on_a_small_vm_uses_cpu_zero_only_when_needed() {
    let t = topology("vm-1node");
    assert_eq!(auto(&t, "0-3", 1, None).workers, vec![1]);
    assert_eq!(auto(&t, "0-3", 3, None).workers, vec![1, 2, 3]);
    assert_eq!(auto(&t, "0-3", 4, None).workers, vec![0, 1, 2, 3]);
}

#[test]
fn explicit_lists_wrap_and_are_checked() {
    let t = topology("xeon-e5-2620-2s");
    let spec: PinSpec = "2-4".parse().unwrap();
    let layout = plan_pinning_on(&t, &set("0-23"), &spec, 5, None).unwrap();
    assert_eq!(layout.workers, vec![2, 3, 4, 2, 3]);
    assert_eq!(layout.background, None);
    let err = plan_pinning_on(&t, &set("0-23"), &"20-25".parse().unwrap(), 2, None).unwrap_err();
    assert!(matches!(err, PinError::CpusNotAvailable { .. }));
    assert!(err.to_string().contains("CPUs 24-25"), "{err}");
    let err = plan_pinning_on(&t, &set("0-23"), &spec, 2, Some(1)).unwrap_err();
    assert!(
        matches!(err, PinError::CpusOutsideNode { node: 1, .. }),
        "{err}"
    );
    assert!(matches!(
        plan_pinning_on(&t, &set("0-23"), &spec, 0, None),
        Err(PinError::NoWorkers)
    ));
}

#[test]
fn plan_and_pin_on_this_machine() {
    // What the server does: plan from the live topology, then pin each worker thread.
    let allowed = current_thread_affinity().unwrap();
    let layout = plan_pinning(&PinSpec::Auto, 1, None).unwrap();
    let cpu = layout.workers[0];
    assert!(allowed.contains(cpu) || Topology::read("/".as_ref()).unwrap().isolated.contains(cpu));
    std::thread::spawn(move || {
        pin_current_thread(cpu).unwrap();
        assert_eq!(
            current_thread_affinity().unwrap(),
            [cpu].into_iter().collect()
        );
    })
    .join()
    .unwrap();
    let steered = Topology::read("/".as_ref()).unwrap().steered_irq_cpus();
    if allowed.len() >= 2 && steered.is_empty() {
        // With two or more CPUs and no interrupt CPUs to avoid, one worker is kept off CPU 0.
        assert_ne!(cpu, 0);
    }
}
