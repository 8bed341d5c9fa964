//! `/metrics` checked by a real third-party parser: Python's prometheus_client (pip-installed by
//! `.ci/run`), through `parse_metrics.py` beside this crate's manifest.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Parses Prometheus text with prometheus_client; panics with its error when it rejects the
/// text. Returns family name -> `{type, help, samples: [[name, labels, value], ...]}`.
pub fn parse(text: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/parse_metrics.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of sample `name` in `family` whose labels include all of `labels`.
pub fn sample(families: &Value, family: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    families[family]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family}"))
        .iter()
        .find(|s| s[0] == name && labels.iter().all(|(k, v)| s[1][*k] == *v))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?} in {family}"))[2]
        .as_f64()
        .unwrap()
}
