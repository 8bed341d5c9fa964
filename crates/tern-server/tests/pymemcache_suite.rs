//! pymemcache's own integration suite (from its source distribution, which `.ci/run` unpacks
//! into target/third-party) against the real server: every client class of pymemcache, with
//! and without key prefixes, through get/set/cas/incr/touch/stats and `cache_memlimit`. Its
//! TLS tests are left out: tern serves no TLS yet.

use std::path::PathBuf;
use std::process::Command;

use tern_testkit::ServerProcess;

/// The unpacked pymemcache sdist, the same version as the installed pymemcache.
fn pymemcache_sdist() -> PathBuf {
    let third_party = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/third-party");
    std::fs::read_dir(&third_party)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("pymemcache/test/test_integration.py").exists())
        .unwrap_or_else(|| {
            panic!(
                "no pymemcache source distribution in {}: run .ci/run, which downloads and \
                 unpacks it",
                third_party.display()
            )
        })
}

#[test]
fn pymemcache_integration_suite_passes() {
    let sdist = pymemcache_sdist();
    let tern = ServerProcess::tern(&[]);
    let out = Command::new("python3")
        .current_dir(&sdist)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        // The sdist's setup.cfg asks for coverage plugins the suite does not need.
        .args(["-o", "addopts="])
        .args(["-m", "integration", "-k", "not tls"])
        .arg("pymemcache/test/test_integration.py")
        .args(["--server", "127.0.0.1", "--port", &tern.port.to_string()])
        .output()
        .expect("run python3 -m pytest (.ci/run installs pytest)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.contains(" passed") && !summary.contains("failed"),
        "{summary}"
    );
}
