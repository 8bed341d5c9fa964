//! Third-party clients against the real server: libmemcached's `memccapable` (Debian's
//! libmemcached-tools) and PyPI's `pymemcache`. Missing tools fail the test with the install
//! command; nothing is skipped.

use std::path::Path;
use std::process::Command;

use tern_testkit::ServerProcess;

fn require(program: &str, install: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).exists()))
        .unwrap_or(false);
    assert!(
        found,
        "{program} is not installed: {install} (.ci/run does this)"
    );
}

#[test]
fn memccapable_ascii_tests_pass_as_against_memcached_1_6_45() {
    require("memccapable", "apt-get install libmemcached-tools");
    let server = ServerProcess::tern(&["-t", "2"]);
    let out = Command::new("memccapable")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-a"])
        .output()
        .expect("run memccapable");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // Its two delete tests send a hold time and expect it refused, which memcached 1.6.40 and
    // later (1.6.45, the release tern follows) ignore: both fail against memcached 1.6.45 as
    // against tern. Every other ASCII test (memccapable names 27) passes.
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("2 of 27 tests failed"), "{stdout}{stderr}");
    assert_eq!(stdout.matches("[pass]").count(), 25, "{stdout}{stderr}");
    // A failure's `[FAIL]` goes to stderr, so on stdout the two deletes' names run on into the
    // next test's.
    let words = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("ascii delete ascii delete noreply ascii incr [pass]"),
        "{stdout}{stderr}"
    );
}

#[test]
fn pymemcache_get_set_multiget_cas_incr_touch_delete() {
    let import = Command::new("python3")
        .args(["-c", "import pymemcache"])
        .status()
        .expect("run python3");
    assert!(
        import.success(),
        "pymemcache is not installed: python3 -m pip install pymemcache (.ci/run does this)"
    );
    let server = ServerProcess::tern(&["-t", "2"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pymemcache_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(server.port.to_string())
        .output()
        .expect("run the pymemcache script");
    assert!(
        out.status.success(),
        "pymemcache checks failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
