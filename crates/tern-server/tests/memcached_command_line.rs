//! memcached's command line, run against tern: every flag and extended option Debian's
//! memcached 1.6.18 lists in `memcached -h` is in `tern serve --help` and starts tern (or is
//! refused with a reason, as kernel TLS); what memcached refuses, tern refuses; the acting
//! flags show in `stats settings` as memcached shows them; the start-up warning names what is
//! ignored; and a Debian user's memcached.conf and the command line of
//! Debian's memcached.service start tern unchanged (only the port and pidfile overridden, so the
//! test can run beside a real memcached).
use std::collections::{BTreeSet, HashMap};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, memcached_bin, tern_bin, ServerProcess, PATIENCE};

/// A directory of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tern-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server started from a whole command line, its stderr going to a file.
struct Logged {
    server: ServerProcess,
    log: PathBuf,
    _dir: Scratch,
}

impl Logged {
    /// Runs `program args` (nothing added) and waits until it accepts on 127.0.0.1:`port`,
    /// failing with its stderr if it exits first.
    fn start(program: PathBuf, args: &[String], port: u16) -> Logged {
        let dir = Scratch::new(&format!("logged-{port}"));
        let log = dir.0.join("stderr");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let mut logged = Logged {
            server: ServerProcess { child, port },
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = logged.server.child.try_wait().unwrap() {
                panic!(
                    "{cmd:?} exited ({status}) before serving:\n{}",
                    logged.stderr()
                );
            }
            assert!(Instant::now() < deadline, "{cmd:?} did not serve in time");
            std::thread::sleep(Duration::from_millis(20));
        }
        logged
    }

    /// `tern serve <args>`.
    fn tern(args: &[String], port: u16) -> Logged {
        let mut argv = vec!["serve".to_string()];
        argv.extend_from_slice(args);
        Logged::start(tern_bin(), &argv, port)
    }

    /// Debian's memcached with `args`, plus `-u root` when no `-u` is given (memcached refuses
    /// to run as root without one; ignored when not root).
    fn memcached(args: &[String], port: u16) -> Logged {
        let mut argv = args.to_vec();
        if !argv.iter().any(|a| a == "-u") {
            argv.extend(["-u".to_string(), "root".to_string()]);
        }
        Logged::start(memcached_bin(), &argv, port)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn settings(&self) -> HashMap<String, String> {
        self.server.connect().stats("stats settings\r\n")
    }

    /// The effective uid the server runs as, from /proc.
    fn uid(&self) -> String {
        uid_of(self.server.pid())
    }
}

/// Runs `tern serve <args>` to its end, for command lines it must refuse: within 10 s, so that
/// one it wrongly accepts fails the test (status 124) instead of serving forever.
fn tern_output(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("10")
        .arg(tern_bin())
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The effective uid of a process.
fn uid_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().to_string()
}

/// The uid of `user` from the password database, if there is such a user.
fn uid_of_user(user: &str) -> Option<String> {
    let out = Command::new("id").args(["-u", user]).output().unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Strings to an owned command line.
fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// What Debian's `memcached -h` prints.
fn memcached_help() -> String {
    let out = Command::new(memcached_bin()).arg("-h").output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn tern_help() -> String {
    let out = tern_output(&["--help"]);
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// True when `text` has `word` as a whole name: `--listen` is not found in `--listen-backlog`,
/// nor `modern` in `no_modern`.
fn mentions(text: &str, word: &str) -> bool {
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].ends_with(name_char)
            && !text[at + word.len()..].starts_with(|c: char| name_char(c) || c == '-')
    })
}

/// The extended options `memcached -h` lists (`   - name: ...` lines).
fn memcached_extended_options() -> BTreeSet<String> {
    memcached_help()
        .lines()
        .filter_map(|l| l.strip_prefix("   - "))
        .filter_map(|l| l.split_once(':'))
        .map(|(name, _)| name.to_string())
        .filter(|name| name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .collect()
}

#[test]
fn help_names_every_flag_and_extended_option_of_debians_memcached() {
    let (theirs, ours) = (memcached_help(), tern_help());
    let mut long_names = BTreeSet::new();
    let mut letters = BTreeSet::new();
    for line in theirs.lines() {
        for word in line.split(|c: char| c.is_whitespace() || c == '=' || c == ',') {
            if word.starts_with("--") && word.len() > 2 {
                long_names.insert(word.to_string());
            }
        }
        let mut chars = line.chars();
        if let (Some('-'), Some(letter), Some(',' | ' ')) =
            (chars.next(), chars.next(), chars.next())
        {
            if letter.is_ascii_alphabetic() {
                letters.insert(letter);
            }
        }
    }
    // Guards against a parse of `memcached -h` that finds nothing.
    assert!(
        long_names.len() > 30 && letters.len() > 35,
        "{long_names:?} {letters:?}"
    );
    for long in &long_names {
        assert!(
            mentions(&ours, long),
            "tern serve --help does not list {long}"
        );
    }
    for letter in &letters {
        assert!(
            ours.contains(&format!("  -{letter}, --")),
            "tern serve --help does not list -{letter}"
        );
    }
    let options = memcached_extended_options();
    assert!(options.len() > 40, "{options:?}");
    for option in &options {
        assert!(
            mentions(&ours, option),
            "tern serve --help does not list -o {option}"
        );
    }
}

/// Debian's memcached's extended options with a value each accepts, in an order memcached takes
/// (a later option wins: lru_maintainer comes back after no_lru_maintainer, which
/// temporary_ttl needs).
const EXTENDED_ACCEPTED: &[&str] = &[
    "no_modern",
    "modern",
    "maxconns_fast",
    "hashpower=16",
    "tail_repair_time=30",
    "hash_algorithm=murmur3",
    "no_lru_crawler",
    "lru_crawler_sleep=100",
    "lru_crawler_tocrawl=0",
    "read_buf_mem_limit=0",
    "no_lru_maintainer",
    "lru_maintainer",
    "hot_lru_pct=20",
    "warm_lru_pct=40",
    "hot_max_factor=0.2",
    "warm_max_factor=2.0",
    "temporary_ttl=61",
    "idle_timeout=600",
    "slab_chunk_max=512",
    "watcher_logbuf_size=256",
    "worker_logbuf_size=64",
    "track_sizes",
    "no_hashexpand",
    "sock_cookie_id=0",
    "ext_page_size=64",
    "ext_wbuf_size=4",
    "ext_threads=1",
    "ext_item_size=512",
    "ext_item_age=3600",
    "ext_low_ttl=0",
    "ext_drop_unread",
    "ext_recache_rate=2000",
    "ext_compact_under=0",
    "ext_drop_under=0",
    "ext_max_frag=0.8",
    "ext_max_sleep=1000000",
    "slab_automove_freeratio=0.01",
    // Read without -Z too, as memcached reads them (they act only with -Z).
    "ssl_chain_cert=/etc/ssl/cert.pem",
    "ssl_key=/etc/ssl/key.pem",
    "ssl_keyformat=1",
    "ssl_verify_mode=0",
    "ssl_ciphers=HIGH",
    "ssl_ca_cert=/etc/ssl/ca.pem",
    "ssl_wbuf_size=16",
    "ssl_session_cache",
    "ssl_min_version=2",
];

/// The extended options tern refuses, with what its error says.
const EXTENDED_REFUSED: &[(&str, &str)] =
    &[("ssl_kernel_tls", "kernel TLS offload is not supported")];

fn option_name(item: &str) -> &str {
    item.split('=').next().unwrap()
}

#[test]
fn every_extended_option_of_debians_memcached_starts_tern_as_it_starts_memcached() {
    let listed = memcached_extended_options();
    let covered: BTreeSet<String> = EXTENDED_ACCEPTED
        .iter()
        .copied()
        .chain(EXTENDED_REFUSED.iter().map(|(item, _)| *item))
        .chain(["ext_path"])
        .map(|item| option_name(item).to_string())
        .filter(|name| name != "lru_maintainer")
        .collect();
    assert_eq!(
        covered, listed,
        "memcached -h lists other extended options than this test covers"
    );

    // Each server with a flash file of its own (memcached locks its file).
    let dir = Scratch::new("extended");
    let all = |flash: &str| {
        format!(
            "{},ext_path={}:64m",
            EXTENDED_ACCEPTED.join(","),
            dir.path(flash)
        )
    };
    let (tern_port, memcached_port) = (free_port(), free_port());
    let listen = |port: u16, flash: &str| {
        argv(&[
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-o",
            &all(flash),
        ])
    };
    let tern = Logged::tern(&listen(tern_port, "tern"), tern_port);
    let memcached = Logged::memcached(
        &[listen(memcached_port, "memcached"), argv(&["-U", "0"])].concat(),
        memcached_port,
    );
    let (ours, theirs) = (tern.settings(), memcached.settings());
    for name in [
        "maxconns_fast",
        "hashpower_init",
        "idle_timeout",
        "read_buf_mem_limit",
    ] {
        assert_eq!(ours.get(name), theirs.get(name), "stats settings {name}");
    }
    let warning = tern.stderr();
    for item in EXTENDED_ACCEPTED {
        let name = option_name(item);
        let named = mentions(&warning, name);
        // What acts, or does nothing in memcached either, is not in the warning.
        let acts = [
            "modern",
            "maxconns_fast",
            "idle_timeout",
            "read_buf_mem_limit",
        ]
        .contains(&name)
            || name.starts_with("ssl_")
            || name.starts_with("ext_");
        assert_eq!(named, !acts, "{name} in the start-up warning:\n{warning}");
    }

    for (item, says) in EXTENDED_REFUSED {
        let out = tern_output(&["-l", "127.0.0.1", "-p", "0", "-o", item]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "-o {item} was accepted");
        assert!(stderr.contains(says), "-o {item}: {stderr}");
    }
}

/// Runs Debian's memcached on `args` for at most 5 s; its exit status (124: still running).
fn memcached_exit(args: &[&str]) -> i32 {
    let port = free_port().to_string();
    let status = Command::new("timeout")
        .arg("5")
        .arg(memcached_bin())
        .args(["-l", "127.0.0.1", "-p", &port, "-U", "0", "-u", "root"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    status.code().unwrap()
}

#[test]
fn what_memcached_refuses_tern_refuses_with_a_message() {
    for (args, says) in [
        (&["--frobnicate"][..], "--frobnicate"),
        (&["-o", "bogus"], "unknown extended option \"bogus\""),
        (&["-o", "lru_segmented"], "unknown extended option"),
        (
            &["-o", "modern,,maxconns_fast"],
            "unknown extended option \"\"",
        ),
        (&["-o", "hashpower"], "hashpower: needs a value"),
        (&["-o", "hashpower=5"], "from 12 to 32"),
        (&["-o", "hot_lru_pct=80"], "from 1 to 79"),
        (&["-o", "slab_automove=3"], "from 0 to 2"),
        (&["-o", "hash_algorithm=md5"], "jenkins, murmur3, xxh3"),
        (&["-B", "text"], "text"),
        (&["-D", ""], "one character"),
        (&["-f", "1"], "greater than 1"),
        (&["-n", "0"], "greater than 0"),
        (&["-N", "0"], "greater than 0"),
        (&["-c", "0"], "at least 1"),
        (&["-t", "0"], "at least 1"),
        (&["-I", "512"], "less than 1024"),
    ] {
        let code = memcached_exit(args);
        assert!(code != 0 && code != 124, "memcached {args:?} exited {code}");
        let out = tern_output(&[&["-l", "127.0.0.1", "-p", "0"], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "tern serve {args:?} was accepted");
        assert!(stderr.contains(says), "tern serve {args:?}: {stderr}");
    }
}

#[test]
fn options_of_other_work_are_refused_with_a_reason() {
    for (args, says) in [
        (
            &["-l", "127.0.0.1", "-p", "0", "-S", "-B", "auto"][..],
            "-S: you cannot allow the ASCII protocol while using SASL",
        ),
        (
            &[
                "-l",
                "127.0.0.1",
                "-p",
                "0",
                "--auth-file",
                "/etc/memcached.auth",
            ],
            "-Y /etc/memcached.auth: No such file",
        ),
        (
            &["-l", "127.0.0.1", "-p", "0", "-Z"],
            "-Z: no certificate chain",
        ),
        (
            &["-l", "127.0.0.1", "-p", "0", "-o", "proxy_config=routelib"],
            "tern is a cache, not memcached's proxy",
        ),
        (
            &["-l", "proto[ascii]:127.0.0.1:11211"],
            "prefixes are not supported",
        ),
    ] {
        let out = tern_output(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "tern serve {args:?} was accepted");
        assert!(stderr.contains(says), "tern serve {args:?}: {stderr}");
    }
}

/// The `stats settings` lines of memcached's acting flags.
const ACTING: &[&str] = &[
    "binding_protocol",
    "stat_key_prefix",
    "detail_enabled",
    "dump_enabled",
    "maxconns_fast",
    "hashpower_init",
    "idle_timeout",
];

#[test]
fn acting_flags_show_in_stats_settings_as_memcached_shows_them() {
    for flags in [
        &[][..],
        &[
            "-B",
            "ascii",
            "-D",
            "|",
            "-X",
            "-W",
            "-o",
            "idle_timeout=30,hashpower=16",
            "-o",
            "no_maxconns_fast",
        ],
        &[
            "--protocol=auto",
            "--disable-dumping",
            "--extended=hashpower=20,maxconns_fast",
        ],
    ] {
        let (tern_port, memcached_port) = (free_port(), free_port());
        let listen = |port: u16| {
            [
                argv(&["-l", "127.0.0.1", "-p", &port.to_string()]),
                argv(flags),
            ]
            .concat()
        };
        let tern = Logged::tern(&listen(tern_port), tern_port);
        let memcached = Logged::memcached(
            &[listen(memcached_port), argv(&["-U", "0"])].concat(),
            memcached_port,
        );
        let (ours, theirs) = (tern.settings(), memcached.settings());
        for name in ACTING {
            assert!(
                ours.contains_key(*name),
                "tern's stats settings lack {name}"
            );
            assert_eq!(
                ours.get(*name),
                theirs.get(*name),
                "stats settings {name} with {flags:?}"
            );
        }
    }
}

#[test]
fn the_start_up_warning_names_each_ignored_option_once_and_the_server_serves() {
    let port = free_port();
    let args = argv(&[
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "2",
        "-f",
        "1.08",
        "-n",
        "64",
        "-r",
        "-N",
        "1",
        "-o",
        "slab_chunk_max=512,lru_crawler,hash_algorithm=xxh3",
        "-o",
        "lru_crawler",
    ]);
    let tern = Logged::tern(&args, port);
    tern.server.connect().expect(
        b"set k 0 0 1\r\nv\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
    let stderr = tern.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("accepted and ignored"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line = lines[0];
    assert!(line.contains("WARN"), "{line}");
    for name in ["-f", "-n", "slab_chunk_max", "-r", "-N", "hash_algorithm"] {
        assert!(mentions(line, name), "{name} not in {line}");
    }
    assert_eq!(line.matches("lru_crawler").count(), 1, "{line}");
    assert!(
        line.contains("tern has no slab classes") && line.contains("tern has no LRU"),
        "{line}"
    );
}

/// Debian's memcached.conf as the package ships it (postinst copies it to /etc/memcached.conf,
/// which a machine's admin may since have edited).
const DEBIAN_CONF: &str = "/usr/share/memcached/memcached.conf.default";

/// The uid a server given `-u memcache` must run as: memcache's as root (Debian's package
/// creates the user), ours otherwise (-u is for root only, in tern as in memcached).
fn expected_uid_under_memcache() -> String {
    let ours = uid_of(std::process::id());
    if ours == "0" {
        uid_of_user("memcache").expect("no memcache user: Debian's memcached package creates it")
    } else {
        ours
    }
}

#[test]
fn debians_memcached_conf_starts_tern_unchanged() {
    let conf = std::fs::read_to_string(DEBIAN_CONF)
        .unwrap_or_else(|e| panic!("{DEBIAN_CONF}: {e} (apt-get install memcached)"));
    let lines: Vec<&str> = conf.lines().collect();
    for line in [
        "-d",
        "logfile /var/log/memcached.log",
        "-m 64",
        "-p 11211",
        "-u memcache",
        "-l 127.0.0.1",
    ] {
        assert!(
            lines.contains(&line),
            "{DEBIAN_CONF} no longer has `{line}`"
        );
    }
    let dir = Scratch::new("debian-conf");
    let pidfile = dir.path("tern.pid");
    let port = free_port();
    // The port and pidfile are overridden on the command line (which wins over the file), so
    // that the test runs beside a memcached on 11211 and writes no system file.
    let args = argv(&[
        "--memcached-conf",
        DEBIAN_CONF,
        "-p",
        &port.to_string(),
        "-P",
        &pidfile,
    ]);
    let tern = Logged::tern(&args, port);
    let settings = tern.settings();
    assert_eq!(settings["inter"], "127.0.0.1");
    assert_eq!(settings["maxbytes"], (64 << 20).to_string());
    assert_eq!(settings["tcpport"], port.to_string());
    assert_eq!(tern.uid(), expected_uid_under_memcache(), "-u memcache");
    // -d is skipped, as Debian's scripts skip it: this process is the server.
    assert_eq!(
        std::fs::read_to_string(&pidfile).unwrap().trim(),
        tern.server.pid().to_string()
    );
    let stderr = tern.stderr();
    assert!(
        stderr.contains("-d in memcached.conf") && stderr.contains("logfile in memcached.conf"),
        "{stderr}"
    );
    tern.server.connect().expect(
        b"set k 0 0 1\r\nv\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
}

/// Debian's memcached.service runs `systemd-memcached-wrapper /etc/memcached.conf`, a Perl
/// script that turns the file into a command line and execs memcached with it. Run with its
/// `exec` made to print instead, it gives the exact command line the service runs. It refuses
/// to run unless root with a bare `exit`, made a no-op here so the test runs as any user.
const CAPTURE_EXEC: &str = r#"
BEGIN {
    *CORE::GLOBAL::exec = sub { print @_; CORE::exit(0) };
    *CORE::GLOBAL::exit = sub { };
}
@ARGV = ($ENV{CONF});
do $ENV{WRAPPER};
die "the wrapper did not exec memcached: $@";
"#;

const WRAPPER: &str = "/usr/share/memcached/scripts/systemd-memcached-wrapper";

#[test]
fn the_command_line_of_debians_memcached_service_starts_tern() {
    let unit = std::fs::read_to_string("/lib/systemd/system/memcached.service").unwrap();
    assert!(
        unit.lines()
            .any(|l| l == format!("ExecStart={WRAPPER} /etc/memcached.conf")),
        "memcached.service no longer runs the wrapper:\n{unit}"
    );
    let out = Command::new("perl")
        .args(["-e", CAPTURE_EXEC])
        .env("CONF", DEBIAN_CONF)
        .env("WRAPPER", WRAPPER)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let words = shlex::split(&line).unwrap();
    assert_eq!(words[0], "/usr/bin/memcached", "{line}");
    let debian_args = &words[1..];
    assert!(
        debian_args.windows(2).any(|w| w == ["-l", "127.0.0.1"]),
        "{line}"
    );

    let dir = Scratch::new("debian-service");
    let (tern_port, memcached_port) = (free_port(), free_port());
    // The same overrides as above, appended: in memcached as in tern a later flag wins.
    let overrides =
        |port: u16, pid: &str| argv(&["-p", &port.to_string(), "-P", &dir.path(pid), "-U", "0"]);
    let tern = Logged::tern(
        &[debian_args, &overrides(tern_port, "tern.pid")].concat(),
        tern_port,
    );
    let memcached = Logged::memcached(
        &[debian_args, &overrides(memcached_port, "memcached.pid")].concat(),
        memcached_port,
    );
    let (ours, theirs) = (tern.settings(), memcached.settings());
    for name in [
        "inter",
        "maxbytes",
        "maxconns",
        "num_threads",
        "item_size_max",
        "evictions",
        "binding_protocol",
    ] {
        assert_eq!(
            ours.get(name),
            theirs.get(name),
            "stats settings {name} from {line}"
        );
    }
    assert_eq!(tern.uid(), expected_uid_under_memcache(), "-u memcache");
    let stderr = tern.stderr();
    assert!(
        !stderr.contains("accepted and ignored"),
        "nothing in {line} is ignored: {stderr}"
    );
    tern.server.connect().expect(
        b"set k 0 0 1\r\nv\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
}

/// A memcached command line as unit files and /etc/memcached.conf files in the wild carry it,
/// with extended options, run by tern and by Debian's memcached.
const TYPICAL: &str = "memcached -m 64 -p 11211 -u memcache -l 127.0.0.1 -c 4096 -t 4 \
                       -P /var/run/memcached/memcached.pid -f 1.08 \
                       -o modern,maxconns_fast,lru_crawler,slab_reassign,slab_automove=1,hashpower=16";

#[test]
fn a_typical_memcached_command_line_with_extended_options_starts_tern_with_one_warning() {
    let words = shlex::split(TYPICAL).unwrap();
    let dir = Scratch::new("typical");
    let (tern_port, memcached_port) = (free_port(), free_port());
    let overrides =
        |port: u16, pid: &str| argv(&["-p", &port.to_string(), "-P", &dir.path(pid), "-U", "0"]);
    let tern = Logged::tern(
        &[&words[1..], &overrides(tern_port, "tern.pid")].concat(),
        tern_port,
    );
    let memcached = Logged::memcached(
        &[&words[1..], &overrides(memcached_port, "memcached.pid")].concat(),
        memcached_port,
    );
    let (ours, theirs) = (tern.settings(), memcached.settings());
    for name in [
        "maxconns",
        "num_threads",
        "maxconns_fast",
        "hashpower_init",
        "inter",
    ] {
        assert_eq!(ours.get(name), theirs.get(name), "stats settings {name}");
    }
    let stderr = tern.stderr();
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    for name in [
        "-f",
        "lru_crawler",
        "slab_reassign",
        "slab_automove",
        "hashpower",
    ] {
        assert!(mentions(warnings[0], name), "{name} not in {}", warnings[0]);
    }
    assert!(!mentions(warnings[0], "maxconns_fast") && !mentions(warnings[0], "modern"));
    tern.server.connect().expect(
        b"set k 0 0 1\r\nv\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
}
