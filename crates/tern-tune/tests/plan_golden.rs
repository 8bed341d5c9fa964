//! Golden tests for `tern tune plan`: each fixture machine and goal renders to the files under
//! tests/golden/. After a deliberate change, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p tern-tune --test plan_golden` and review the diff.

mod common;

use std::path::{Path, PathBuf};

use common::copy_tree;
use tern_tune::plan::{make_plan, Instances, Plan, PlanRequest};
use tern_tune::{CpuSet, Topology};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn topology(name: &str) -> Topology {
    Topology::read(&common::fixture(name)).unwrap()
}

fn check_golden(file: &str, actual: &str) {
    let path = crate_dir().join("tests/golden").join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; generate it with UPDATE_GOLDEN=1", path.display()));
    assert!(
        expected == actual,
        "{} differs (UPDATE_GOLDEN=1 regenerates it):\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

/// Every rendering of a plan against its golden files, named `<case>.<kind>`.
fn check_all(case: &str, plan: &Plan) {
    check_golden(&format!("{case}.txt"), &plan.render_table());
    check_golden(&format!("{case}.sh"), &plan.render_script());
    check_golden(&format!("{case}.units"), &plan.render_units_text());
    check_golden(
        &format!("{case}.json"),
        &(serde_json::to_string_pretty(plan).unwrap() + "\n"),
    );
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap()
}

#[test]
fn xeon_one_instance_per_node() {
    let plan = make_plan(
        &topology("xeon-e5-2620-2s"),
        &PlanRequest {
            memory_mib: Some(8192),
            ..PlanRequest::default()
        },
    )
    .unwrap();
    // CPU 0's core for system tasks and the first interrupt CPU, two more interrupt CPUs on the
    // NIC's node for 9 workers (1 per ~4), one hyperthread per core for workers.
    assert_eq!(plan.system_cpus, set("0,12"));
    assert_eq!(plan.irq_cpus, set("0-2"));
    assert_eq!(plan.instances.len(), 2);
    assert_eq!(plan.instances[0].workers, set("3-5"));
    assert_eq!(plan.instances[1].workers, set("6-11"));
    assert_eq!(plan.instances[1].memory_mib, 4096);
    check_all("xeon-per-node", &plan);
}

#[test]
fn xeon_one_instance_with_hyperthreads_and_large_pages() {
    let plan = make_plan(
        &topology("xeon-e5-2620-2s"),
        &PlanRequest {
            instances: Instances::One,
            cores: Some(12),
            smt: true,
            large_pages: true,
            lock_memory: true,
            memory_mib: Some(4096),
            ..PlanRequest::default()
        },
    )
    .unwrap();
    assert_eq!(plan.instances.len(), 1);
    // 3 interrupt CPUs for 12 workers; node 0 has 6 worker threads left, the other 6 come from
    // node 1, and the plan says so.
    assert_eq!(plan.irq_cpus, set("0-2"));
    assert_eq!(plan.instances[0].workers, set("3-8,15-20"));
    assert!(plan.notes.iter().any(|n| n.contains("spans NUMA nodes")));
    check_all("xeon-one-smt", &plan);
}

#[test]
fn vm_with_unknown_nic_node() {
    let plan = make_plan(&topology("vm-1node"), &PlanRequest::default()).unwrap();
    assert_eq!(plan.irq_cpus, set("0"));
    assert_eq!(plan.instances.len(), 1);
    assert_eq!(plan.instances[0].workers, set("1-3"));
    assert!(plan
        .notes
        .iter()
        .any(|n| n.contains("does not report a NUMA node")));
    check_all("vm", &plan);
}

#[test]
fn amd_four_nodes_nic_on_node_three() {
    let plan = make_plan(
        &topology("amd-epyc-4node"),
        &PlanRequest {
            memory_mib: Some(65536),
            ..PlanRequest::default()
        },
    )
    .unwrap();
    // Interrupt CPUs on the NIC's node 3 (CPU 0 is not there), not on the workers.
    assert_eq!(plan.nic.as_ref().unwrap().node, 3);
    assert!(plan.irq_cpus.is_subset(&set("12-15")));
    assert_eq!(plan.instances.len(), 4);
    for inst in &plan.instances {
        assert!(inst.workers.is_disjoint(&plan.irq_cpus));
        assert_eq!(inst.nodes.len(), 1);
    }
    check_all("amd-per-node", &plan);
    // The pool configs: every instance in port order, the default port named as libmemcached
    // names it on its ring.
    check_golden(
        "amd-per-node.twemproxy.yml",
        &plan.render_twemproxy("10.0.0.5", "127.0.0.1:22121"),
    );
    check_golden("amd-per-node.servers", &plan.render_servers("10.0.0.5"));
}

#[test]
fn amd_few_cores_land_next_to_the_nic() {
    let plan = make_plan(
        &topology("amd-epyc-4node"),
        &PlanRequest {
            cores: Some(2),
            instances: Instances::One,
            ..PlanRequest::default()
        },
    )
    .unwrap();
    assert_eq!(plan.instances[0].nodes, set("3"));
    check_all("amd-one-2cores", &plan);
}

#[test]
fn eight_queue_nic_spreads_its_interrupts() {
    let plan = make_plan(
        &topology("nic-8queues"),
        &PlanRequest {
            nic: Some("eth0".into()),
            ..PlanRequest::default()
        },
    )
    .unwrap();
    assert_eq!(plan.irq_cpus, set("0-1"));
    assert_eq!(plan.instances[0].workers, set("2-7"));
    let cpus: Vec<usize> = plan
        .nic
        .as_ref()
        .unwrap()
        .irqs
        .iter()
        .map(|a| a.cpu)
        .collect();
    assert_eq!(cpus, vec![0, 1, 0, 1, 0, 1, 0, 1, 0]);
    check_all("nic-8queues", &plan);
}

#[test]
fn interrupt_cpus_follow_the_ratio() {
    let t = topology("nic-8queues");
    let with_ratio = |ratio| {
        make_plan(
            &t,
            &PlanRequest {
                workers_per_irq_cpu: ratio,
                ..PlanRequest::default()
            },
        )
        .unwrap()
        .irq_cpus
    };
    assert_eq!(with_ratio(1), set("0-3"));
    assert_eq!(with_ratio(2), set("0-2"));
    assert_eq!(with_ratio(8), set("0"));
    let fixed = make_plan(
        &t,
        &PlanRequest {
            irq_cpus: Some(3),
            ..PlanRequest::default()
        },
    )
    .unwrap();
    assert_eq!(fixed.irq_cpus, set("0-2"));
}

#[test]
fn isolated_cpus_are_kept_for_workers() {
    let plan = make_plan(&topology("isolated-cpus"), &PlanRequest::default()).unwrap();
    assert!(plan.irq_cpus.is_disjoint(&set("4-7")));
    assert!(set("4-7").is_subset(&plan.instances[0].workers));
    check_all("isolated", &plan);
}

#[test]
fn bad_goals_are_refused() {
    let t = topology("vm-1node");
    let err = make_plan(
        &t,
        &PlanRequest {
            nic: Some("eth9".into()),
            ..PlanRequest::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("no NIC \"eth9\""), "{err}");
    let err = make_plan(
        &t,
        &PlanRequest {
            cores: Some(4),
            ..PlanRequest::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("only 3 CPUs"), "{err:#}");
}

#[test]
fn apply_writes_only_irq_affinities() {
    let fixture = common::fixture("nic-8queues");
    let copy = std::env::temp_dir().join(format!("tern-tune-apply-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(&fixture, &copy);
    let plan = make_plan(&Topology::read(&copy).unwrap(), &PlanRequest::default()).unwrap();
    let report = plan.apply_irq_affinity(&copy).unwrap();
    assert_eq!(report.len(), 9);
    assert_eq!(report[1], "irq 42 (eth0-TxRx-1) -> CPU 1");
    let after = Topology::read(&copy).unwrap();
    assert_eq!(after.steered_irq_cpus(), set("0-1"));
    assert_eq!(
        std::fs::read_to_string(copy.join("proc/irq/42/smp_affinity_list")).unwrap(),
        "1\n"
    );
    // Nothing but smp_affinity_list files changed (IRQs 41 and 42 were on CPUs 0 and 1 already).
    let changed = changed_files(&fixture, &copy);
    assert_eq!(changed.len(), 7, "{changed:?}");
    assert!(changed.iter().all(|p| p.ends_with("smp_affinity_list")));
    std::fs::remove_dir_all(&copy).unwrap();
}

#[test]
fn apply_reports_every_failed_write() {
    let plan = make_plan(&topology("nic-8queues"), &PlanRequest::default()).unwrap();
    let missing = std::env::temp_dir().join("tern-tune-no-such-root");
    let err = plan.apply_irq_affinity(&missing).unwrap_err().to_string();
    assert!(
        err.starts_with("9 of 9 IRQ affinities not written"),
        "{err}"
    );
}

fn changed_files(a: &Path, b: &Path) -> Vec<PathBuf> {
    let mut changed = Vec::new();
    for entry in std::fs::read_dir(a).unwrap() {
        let entry = entry.unwrap();
        let other = b.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            changed.extend(changed_files(&entry.path(), &other));
        } else if entry.file_type().unwrap().is_file()
            && std::fs::read(entry.path()).unwrap() != std::fs::read(&other).unwrap()
        {
            changed.push(entry.path());
        }
    }
    changed
}
