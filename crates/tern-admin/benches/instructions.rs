//! Per-call work in instructions, a figure that does not move with the machine's load (criterion's
//! nanoseconds do): `scripts/instructions.sh` runs this under callgrind with two iteration
//! counts and divides the difference by the extra iterations, so start-up cancels out.
//!
//! Usage: `instructions <op> <iterations>`, op one of `baseline` (the loop alone), `record`,
//! `count_batch`, `hotkey`, `request`; with no arguments (as `cargo bench` runs it) every op runs a few times.

use std::hint::black_box;
use tern_admin::{Command, HotKeyConfig, HotKeys, LatencyBatch, Outcome, WorkerMetrics};

const OPS: [&str; 5] = ["baseline", "record", "count_batch", "hotkey", "request"];

fn run(op: &str, iterations: u64) {
    let metrics = WorkerMetrics::new();
    let hot = HotKeys::new(HotKeyConfig::default());
    let sampler = hot.sampler();
    let batch = LatencyBatch::new();
    let keys: Vec<Vec<u8>> = (0..1024)
        .map(|i| format!("key:{i:06}").into_bytes())
        .collect();
    // The op is chosen once, outside the loop; every loop makes the same command and key as
    // `baseline`, the loop alone, which the script subtracts.
    let command = |i: u64| {
        black_box(if i % 5 == 0 {
            Command::Set
        } else {
            Command::Get
        })
    };
    let key = |i: u64| black_box(&keys[(i & 1023) as usize]);
    match op {
        "baseline" => {
            for i in 0..iterations {
                black_box(command(i));
                black_box(key(i));
            }
        }
        "record" => {
            for i in 0..iterations {
                black_box(key(i));
                metrics.record(command(i), Outcome::Hit, i & 0xffff);
            }
        }
        "count_batch" => {
            for i in 0..iterations {
                let c = command(i);
                black_box(key(i));
                metrics.count(c, Outcome::Hit);
                batch.add(c);
                if i % 16 == 15 {
                    batch.finish(&metrics, black_box(20_000));
                }
            }
        }
        "hotkey" => {
            for i in 0..iterations {
                black_box(command(i));
                sampler.record(key(i));
            }
        }
        "request" => {
            for i in 0..iterations {
                let c = command(i);
                metrics.count(c, Outcome::Hit);
                batch.add(c);
                sampler.record(key(i));
                if i % 16 == 15 {
                    batch.finish(&metrics, black_box(20_000));
                }
            }
        }
        other => panic!("unknown op {other}; one of {OPS:?}"),
    }
    black_box(metrics.snapshot());
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.as_slice() {
        [op, n] => run(op, n.parse().expect("iterations is a number")),
        _ => {
            for op in OPS {
                run(op, 1_000);
            }
        }
    }
}
