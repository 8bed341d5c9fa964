//! Topology parsing against fixture trees of /sys and /proc from varied machines.

mod common;

use common::fixture;
use tern_tune::topology::{find_tern_servers, read_threads};
use tern_tune::{CpuSet, Topology};

fn read(name: &str) -> Topology {
    Topology::read(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap()
}

#[test]
fn xeon_two_sockets_with_hyperthreads() {
    let t = read("xeon-e5-2620-2s");
    assert_eq!(t.cpus.len(), 24);
    assert_eq!(t.packages().len(), 2);
    assert_eq!(t.cores().len(), 12);
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.nodes[0].cpus, set("0-5,12-17"));
    assert_eq!(t.nodes[1].cpus, set("6-11,18-23"));
    assert_eq!(t.nodes[1].memory_mib, Some(16384));
    let cpu13 = t.cpu(13).unwrap();
    assert_eq!(
        (cpu13.package, cpu13.core, cpu13.node),
        (0, 1, 0),
        "{cpu13:?}"
    );
    assert_eq!(cpu13.siblings, set("1,13"));
    assert_eq!(t.cpu(20).unwrap().node, 1);
    assert_eq!(cpu13.governor.as_deref(), Some("ondemand"));
    assert!(t.isolated.is_empty());
    // lo has no device and is left out.
    assert_eq!(t.nics.len(), 1);
    let eth2 = &t.nics[0];
    assert_eq!(eth2.name, "eth2");
    assert_eq!(eth2.node, Some(0));
    assert_eq!((eth2.rx_queues, eth2.tx_queues), (4, 4));
    let irqs: Vec<u32> = eth2.irqs.iter().map(|i| i.irq).collect();
    assert_eq!(irqs, vec![128, 129, 130, 131]);
    assert_eq!(eth2.irqs[1].name, "eth2-1");
    assert_eq!(eth2.irqs[1].count, 897001);
    assert_eq!(eth2.irqs[1].affinity, Some(set("0-23")));
    // Allowed everywhere: nobody steered them.
    assert!(t.steered_irq_cpus().is_empty());
}

#[test]
fn vm_without_numa_and_with_a_virtio_nic() {
    let t = read("vm-1node");
    assert_eq!(t.cpus.len(), 4);
    assert_eq!(t.packages().len(), 1);
    assert_eq!(t.cores().len(), 4);
    // No /sys/devices/system/node: one node with every CPU and /proc/meminfo's memory.
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].cpus, set("0-3"));
    assert_eq!(t.nodes[0].memory_mib, Some(8192));
    assert!(t
        .cpus
        .iter()
        .all(|c| c.governor.is_none() && c.siblings.len() == 1));
    assert_eq!(t.nics.len(), 1, "{:?}", t.nics);
    let eth0 = &t.nics[0];
    // numa_node -1 on the PCI parent of the virtio device: unknown.
    assert_eq!(eth0.node, None);
    assert_eq!((eth0.rx_queues, eth0.tx_queues), (2, 2));
    let names: Vec<&str> = eth0.irqs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "virtio2-config",
            "virtio2-input.0",
            "virtio2-output.0",
            "virtio2-input.1",
            "virtio2-output.1"
        ]
    );
}

#[test]
fn amd_four_nodes_in_one_package() {
    let t = read("amd-epyc-4node");
    assert_eq!(t.cpus.len(), 32);
    assert_eq!(t.packages().len(), 1);
    assert_eq!(t.cores().len(), 16);
    assert_eq!(t.nodes.len(), 4);
    assert_eq!(t.nodes[3].cpus, set("12-15,28-31"));
    assert_eq!(t.nodes_of(&set("0,16")), set("0"));
    assert_eq!(t.nodes_of(&set("3-4")), set("0-1"));
    let nic = t.nic("enp193s0f0np0").unwrap();
    assert_eq!(nic.node, Some(3));
    // mlx5 names its vectors after the PCI device, not the interface: found via msi_irqs.
    assert_eq!(nic.irqs.len(), 5);
    assert_eq!(nic.irqs[1].name, "mlx5_comp0@pci:0000:c1:00.0");
    assert_eq!(nic.irqs[4].affinity, Some(set("15")));
    assert_eq!(t.steered_irq_cpus(), set("12-15"));
}

#[test]
fn nic_with_eight_queues() {
    let t = read("nic-8queues");
    let eth0 = t.nic("eth0").unwrap();
    assert_eq!((eth0.rx_queues, eth0.tx_queues), (8, 8));
    assert_eq!(eth0.irqs.len(), 9);
    assert_eq!(eth0.irqs[0].name, "eth0-TxRx-0");
    assert_eq!(eth0.irqs[8].name, "eth0");
    assert_eq!(eth0.irqs[7].affinity, Some(set("7")));
    assert_eq!(t.steered_irq_cpus(), set("0-7"));
}

#[test]
fn box_with_isolated_cpus_and_a_pinned_tern() {
    let root = fixture("isolated-cpus");
    let t = Topology::read(&root).unwrap();
    assert_eq!(t.isolated, set("4-7"));
    assert_eq!(t.steered_irq_cpus(), set("1"));
    let threads = read_threads(&root, 4242).unwrap();
    let summary: Vec<(String, String)> = threads
        .iter()
        .map(|th| (th.name.clone(), th.allowed.to_string()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("tern".into(), "0-3".into()),
            ("tern-worker-0".into(), "4".into()),
            ("tern-worker-1".into(), "5".into()),
            ("tern-worker-2".into(), "6".into()),
            ("tern-worker-3".into(), "7".into()),
        ]
    );
    assert!(read_threads(&root, 999).is_err());
    assert_eq!(find_tern_servers(&root).unwrap(), vec![4242]);
    assert!(find_tern_servers(&fixture("vm-1node")).unwrap().is_empty());
}

#[test]
fn this_machine_reads() {
    let t = Topology::read(std::path::Path::new("/")).unwrap();
    assert!(!t.cpus.is_empty());
    assert!(!t.nodes.is_empty());
    assert_eq!(
        t.nodes
            .iter()
            .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus)),
        t.online()
    );
    // Our own threads, as `inspect --pid` reads them.
    let threads = read_threads(std::path::Path::new("/"), std::process::id()).unwrap();
    assert!(!threads.is_empty());
}
