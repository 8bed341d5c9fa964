//! `tern tune` through the real binary: on this machine and on fixture trees.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{copy_tree, fixture};
use tern_testkit::{tern_bin, ServerProcess};

fn tune(args: &[&str]) -> Output {
    Command::new(tern_bin())
        .arg("tune")
        .args(args)
        .output()
        .expect("run tern tune")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = tune(args);
    assert!(
        out.status.success(),
        "tern tune {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

fn root_arg(name: &str) -> String {
    fixture(name).to_str().unwrap().to_string()
}

#[test]
fn inspect_json_on_this_machine() {
    let json: serde_json::Value = serde_json::from_str(&ok(&["inspect", "--json"])).unwrap();
    let cpus = json["cpus"].as_array().unwrap();
    assert!(!cpus.is_empty());
    assert!(!json["nodes"].as_array().unwrap().is_empty());
    assert!(json["packages"].as_u64().unwrap() >= 1);
    // CPU sets print in list form.
    assert!(json["nodes"][0]["cpus"].is_string());
}

#[test]
fn inspect_pid_shows_each_threads_cpus() {
    // A process confined to CPU 0, as `taskset -c 0` leaves it.
    let mut child = Command::new("taskset")
        .args(["-c", "0", "sleep", "30"])
        .spawn()
        .expect("taskset (util-linux) is installed");
    let pid = child.id().to_string();
    // taskset execs sleep in the same process; wait until it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n" {
        assert!(std::time::Instant::now() < deadline, "sleep did not start");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--pid", &pid])).unwrap();
    let threads = json["process"]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0]["name"], "sleep");
    assert_eq!(threads[0]["allowed"], "0");
    let table = ok(&["inspect", "--pid", &pid]);
    assert!(table.contains(&format!("threads of pid {pid}")), "{table}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn inspect_and_doctor_a_running_server() {
    let server = ServerProcess::tern(&["-t", "2"]);
    let pid = server.pid().to_string();
    // Accepting proves one worker is up; the other may still be starting.
    let deadline = std::time::Instant::now() + tern_testkit::PATIENCE;
    loop {
        let json: serde_json::Value =
            serde_json::from_str(&ok(&["inspect", "--json", "--pid", &pid])).unwrap();
        let workers = json["process"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with("tern-worker-"))
            .count();
        if workers == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "want 2 tern-worker threads: {json}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = tune(&["doctor", "--json", "--pid", &pid]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pinned = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "workers-pinned")
        .unwrap();
    assert!(
        pinned["found"]
            .as_str()
            .unwrap()
            .contains(&format!("worker threads of pid {pid}")),
        "{pinned}"
    );
}

#[test]
fn inspect_table_of_the_seed_xeon() {
    let table = ok(&[
        "inspect",
        "--root",
        &root_arg("xeon-e5-2620-2s"),
        "--pid",
        "4242",
    ]);
    assert!(
        table.starts_with(
            "24 CPUs online: 2 package(s), 12 cores, 2 thread(s) per core, 2 NUMA node(s); \
             isolated CPUs: none"
        ),
        "{table}"
    );
    assert!(table.contains("0-5,12-17"), "{table}");
    assert!(
        table.contains("NIC eth2: node 0, 4 rx / 4 tx queues, 4 IRQs"),
        "{table}"
    );
    assert!(table.contains("tern-worker-3"), "{table}");
}

#[test]
fn doctor_fails_on_an_untuned_box_and_passes_on_a_tuned_one() {
    let out = tune(&[
        "doctor",
        "--root",
        &root_arg("xeon-e5-2620-2s"),
        "--pid",
        "4242",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout(&out);
    assert!(report.contains("FAIL irqbalance"), "{report}");
    assert!(
        report.contains("fix: systemctl disable --now irqbalance"),
        "{report}"
    );

    // Without --pid it finds the one running `tern serve` itself.
    let out = tune(&["doctor", "--root", &root_arg("xeon-e5-2620-2s"), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["failed"].as_u64().unwrap() >= 3);
    assert!(json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "numa-span"
            && c["status"] == "fail"
            && c["found"].as_str().unwrap().contains("pid 4242")));
    assert!(json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "swap" && c["status"] == "fail"));

    let report = ok(&[
        "doctor",
        "--root",
        &root_arg("isolated-cpus"),
        "--pid",
        "4242",
        "-L",
        "-m",
        "2048",
        "-c",
        "4096",
    ]);
    assert!(report.contains("0 failed, 0 warnings"), "{report}");
}

#[test]
fn doctor_runs_on_this_machine() {
    let out = tune(&["doctor", "--json"]);
    // Pass or fail depends on the machine; the report must be there either way.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["checks"].as_array().unwrap().len() >= 10);
}

#[test]
fn plan_outputs_match_the_golden_files() {
    let root = root_arg("nic-8queues");
    let golden = |f: &str| {
        std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden")
                .join(f),
        )
        .unwrap()
    };
    assert_eq!(
        ok(&["plan", "--root", &root, "--nic", "eth0"]),
        golden("nic-8queues.txt")
    );
    assert_eq!(
        ok(&["plan", "--root", &root, "--nic", "eth0", "--format", "script"]),
        golden("nic-8queues.sh")
    );
    assert_eq!(
        ok(&["plan", "--root", &root, "--nic", "eth0", "--format", "systemd"]),
        golden("nic-8queues.units")
    );
    let commands = ok(&["plan", "--root", &root, "--format", "commands"]);
    assert_eq!(
        commands,
        "/usr/bin/tern serve -p 11211 -t 6 -m 64 --pin 2-7 --numa-node 0\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--root", &root, "--format", "json"])).unwrap();
    assert_eq!(json["irq_cpus"], "0-1");
}

#[test]
fn plan_writes_units_and_applies_irq_affinity_to_a_copied_tree() {
    let scratch = std::env::temp_dir().join(format!("tern-tune-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let units = scratch.join("units");
    let written = ok(&[
        "plan",
        "--root",
        &root_arg("xeon-e5-2620-2s"),
        "--format",
        "systemd",
        "--out",
        units.to_str().unwrap(),
    ]);
    // The IRQ unit and one drop-in per node for the packaged template, then what to run.
    assert_eq!(written.lines().count(), 4, "{written}");
    assert!(
        written.contains(
            "systemctl enable --now tern-irq-affinity.service tern@0.service tern@1.service"
        ),
        "{written}"
    );
    let node1 =
        std::fs::read_to_string(units.join("tern@1.service.d/tern-tune-plan.conf")).unwrap();
    assert!(node1.contains("NUMAMask=1"), "{node1}");
    // The template adds --numa-node from the instance name.
    assert!(
        node1.contains("Environment=\"TERN_ARGS=-p 11212 -t 6 -m 64 --pin 6-11\"\n"),
        "{node1}"
    );

    let copy = scratch.join("root");
    copy_tree(&fixture("xeon-e5-2620-2s"), &copy);
    let applied = ok(&["plan", "--root", copy.to_str().unwrap(), "--apply"]);
    assert!(applied.contains("irq 130 (eth2-2) -> CPU 2"), "{applied}");
    assert_eq!(
        std::fs::read_to_string(copy.join("proc/irq/131/smp_affinity_list")).unwrap(),
        "0\n"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn plan_refuses_an_unknown_nic() {
    let out = tune(&["plan", "--root", &root_arg("vm-1node"), "--nic", "eth7"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no NIC \"eth7\" (NICs with a device: eth0)"),
        "{err}"
    );
}
