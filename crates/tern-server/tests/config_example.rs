//! `config/tern.toml`, the example that holds every `--config` key at its default: a server
//! started with it runs exactly as one started with no config at all, and the example names
//! every key the file format accepts, so a new option cannot be added without it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use tern_testkit::ServerProcess;

fn repo_path(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    let full = repo_path(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// The keys the TOML file accepts: the fields of `FileConfig` in config/file.rs, read from its source
/// text (the struct is private, and serde names each key after its field).
fn file_format_keys() -> BTreeSet<String> {
    let source = read("crates/tern-server/src/config/file.rs");
    let start = source
        .find("struct FileConfig {")
        .expect("config.rs has no `struct FileConfig {`: point this test at the TOML struct");
    let body = &source[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
    let mut keys = BTreeSet::new();
    for line in body.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        if line.starts_with("#[") {
            // A renamed or flattened field would make the key differ from the field's name.
            assert!(
                !["rename", "alias", "flatten"]
                    .iter()
                    .any(|a| line.contains(a)),
                "FileConfig has `{line}`: teach this test how that attribute names its key"
            );
            continue;
        }
        let field = line.trim_start_matches("pub ");
        let (name, _) = field
            .split_once(':')
            .unwrap_or_else(|| panic!("not a field of FileConfig: {line:?}"));
        keys.insert(name.trim().to_string());
    }
    // Guards against a parse that silently finds nothing.
    assert!(
        keys.contains("port") && keys.contains("memory_limit") && keys.len() > 20,
        "{keys:?}"
    );
    keys
}

/// `key = value` or, for a key that defaults to none, `# key = example`.
fn key_of(line: &str) -> Option<(&str, bool)> {
    let (text, commented) = match line.strip_prefix('#') {
        Some(rest) => (rest.trim_start(), true),
        None => (line, false),
    };
    let (name, _) = text.split_once('=')?;
    let name = name.trim();
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .then_some((name, commented))
}

#[test]
fn the_example_names_every_key_once_each_under_a_comment_line() {
    let example = read("config/tern.toml");
    let lines: Vec<&str> = example.lines().collect();
    let mut seen = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((key, _)) = key_of(line) else {
            continue;
        };
        assert!(seen.insert(key.to_string()), "{key} appears twice");
        let above = i.checked_sub(1).map(|j| lines[j]);
        assert!(
            above.is_some_and(|l| l.starts_with('#') && key_of(l).is_none()),
            "{key} has no comment line of its own above it"
        );
    }
    let accepted = file_format_keys();
    let missing: Vec<_> = accepted.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "config/tern.toml lacks {missing:?}: add each with its default and a comment line"
    );
    let unknown: Vec<_> = seen.difference(&accepted).collect();
    assert!(
        unknown.is_empty(),
        "config/tern.toml names {unknown:?}, which the file format does not accept"
    );
}

#[test]
fn a_server_started_with_the_example_runs_with_the_defaults() {
    let example = repo_path("config/tern.toml");
    // The testkit gives each server `-l 127.0.0.1 -p <free port>`; flags win over the file.
    let with_example = ServerProcess::tern(&["--config", example.to_str().unwrap()]);
    let without = ServerProcess::tern(&[]);
    // Sorted, so a failure shows the two lists in the same order.
    let settings = |server: &ServerProcess| -> BTreeMap<String, String> {
        let mut s: BTreeMap<_, _> = server
            .connect()
            .stats("stats settings\r\n")
            .into_iter()
            .collect();
        assert_eq!(s.remove("tcpport"), Some(server.port.to_string()));
        s
    };
    let (example_settings, default_settings) = (settings(&with_example), settings(&without));
    assert_eq!(example_settings, default_settings);
    // memcached's defaults and tern's own, as docs/serve.md lists them.
    for (name, value) in [
        ("maxbytes", "67108864"),
        ("maxconns", "1024"),
        ("udpport", "0"),
        ("verbosity", "0"),
        ("evictions", "on"),
        ("domain_socket", "NULL"),
        ("umask", "700"),
        ("num_threads", "4"),
        ("reqs_per_event", "20"),
        ("cas_enabled", "yes"),
        ("tcp_backlog", "1024"),
        ("item_size_max", "1048576"),
        ("flush_enabled", "yes"),
        ("shutdown_command", "no"),
        ("lock_memory", "no"),
        ("large_memory_pages", "no"),
        ("admin_port", "off"),
        ("hotkey_sample_rate", "64"),
        ("hotkey_window", "10"),
        ("eviction", "merge"),
        ("worker_cpus", "unpinned"),
        ("numa_node", "off"),
        ("binding_protocol", "auto-negotiate"),
        ("stat_key_prefix", ":"),
        ("detail_enabled", "no"),
        ("dump_enabled", "yes"),
        ("idle_timeout", "0"),
        ("maxconns_fast", "yes"),
        ("hashpower_init", "0"),
    ] {
        assert_eq!(
            example_settings.get(name).map(String::as_str),
            Some(value),
            "stats settings {name}"
        );
    }
}
