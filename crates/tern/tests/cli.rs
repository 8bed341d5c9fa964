//! The binary's entry points, run for real.

use std::process::Command;

#[test]
fn help_lists_every_subcommand() {
    let out = Command::new(tern_testkit::tern_bin())
        .arg("--help")
        .output()
        .expect("run tern --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["serve", "bench", "tune"] {
        assert!(
            text.contains(sub),
            "`tern --help` does not list {sub}:\n{text}"
        );
    }
}

#[test]
fn unknown_subcommand_fails() {
    let out = Command::new(tern_testkit::tern_bin())
        .arg("frobnicate")
        .output()
        .expect("run tern frobnicate");
    assert!(!out.status.success());
}
