//! Every server option in one place: memcached's flags (same letters, same meanings), a TOML file
//! with a key per option (`--config`), and the merged [`Settings`] the server runs with. Flags
//! given on the command line override the file; the file overrides the defaults.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Deserialize;
use tern_store::Eviction;
use tern_tune::pin::PinSpec;

/// `tern serve`'s command line. Options left out come from `--config FILE`, then the defaults.
#[derive(clap::Args, Debug, Default)]
#[command(
    about = "Run the memcached-compatible cache server",
    long_about = "Run the memcached-compatible cache server. The options are memcached's, with \
                  the same letters and meanings; every option also has a key in the TOML file \
                  given with --config (the key is the long option name with '_' for '-'), and \
                  options on the command line override the file."
)]
pub struct ServeArgs {
    /// TOML file with any of the options below (keys: port, listen, udp_port, unix_socket,
    /// unix_mask, memory_limit, threads, conn_limit, max_reqs_per_event, listen_backlog,
    /// max_item_size, disable_evictions, disable_cas, lock_memory, enable_largepages,
    /// enable_shutdown, disable_flush_all, verbose, daemon, user, pidfile, admin_port,
    /// hotkey_sample_rate, hotkey_window, eviction, pin, numa_node).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Interface(s) to listen on: an address or address:port, repeated or comma-separated
    /// [default: 0.0.0.0, every IPv4 interface].
    #[arg(short = 'l', long, value_delimiter = ',')]
    pub listen: Vec<String>,
    /// UDP port on the listen addresses; 0 turns UDP off [default: 0]. Off unless asked for: an
    /// open UDP port can be abused to reflect and amplify traffic.
    #[arg(short = 'U', long)]
    pub udp_port: Option<u16>,
    /// Unix socket path to listen on (in addition to TCP).
    #[arg(short = 's', long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Access mask for the unix socket, in octal [default: 0700].
    #[arg(short = 'a', long, value_name = "MASK")]
    pub unix_mask: Option<String>,
    /// Item memory in megabytes [default: 64].
    #[arg(short = 'm', long, value_name = "MB")]
    pub memory_limit: Option<usize>,
    /// Worker threads, each with its own event loop [default: 4].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Maximum simultaneous client connections; beyond it a new connection gets
    /// "ERROR Too many open connections" and is closed [default: 1024].
    #[arg(short = 'c', long, value_name = "N")]
    pub conn_limit: Option<usize>,
    /// Requests served per connection per wake-up before other connections get a turn
    /// [default: 20].
    #[arg(short = 'R', long, value_name = "N")]
    pub max_reqs_per_event: Option<usize>,
    /// Backlog of the listening sockets [default: 1024].
    #[arg(short = 'b', long, value_name = "N")]
    pub listen_backlog: Option<i32>,
    /// Largest value accepted, in bytes or with a k/m suffix [default: 1m; at least 1k, at most
    /// half of -m].
    #[arg(short = 'I', long, value_name = "SIZE")]
    pub max_item_size: Option<String>,
    /// Return "SERVER_ERROR out of memory storing object" instead of evicting when memory is full.
    #[arg(short = 'M', long)]
    pub disable_evictions: bool,
    /// Disable CAS: items carry no CAS unique (gets returns 0).
    #[arg(short = 'C', long)]
    pub disable_cas: bool,
    /// Lock all memory (mlockall); fails with a message when the OS refuses (RLIMIT_MEMLOCK).
    #[arg(short = 'k', long)]
    pub lock_memory: bool,
    /// Ask for large memory pages for the item heap (MAP_HUGETLB where huge pages are reserved,
    /// else transparent huge pages).
    #[arg(short = 'L', long)]
    pub enable_largepages: bool,
    /// Allow the `shutdown` command.
    #[arg(short = 'A', long)]
    pub enable_shutdown: bool,
    /// Answer `flush_all` with "CLIENT_ERROR flush_all not allowed".
    #[arg(short = 'F', long)]
    pub disable_flush_all: bool,
    /// More logging on stderr: -v info, -vv debug, -vvv trace [default: warnings only].
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Run in the background (fork, new session, stdio to /dev/null).
    #[arg(short = 'd', long)]
    pub daemon: bool,
    /// Drop root privileges to this user after opening the sockets.
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Write the process id to this file (removed at exit).
    #[arg(short = 'P', long, value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// Serve the admin HTTP endpoint (/metrics, /stats, /health, /version, /settings,
    /// /hotkeys) on this TCP port, bound to the first listen address [default: off].
    #[arg(long, value_name = "PORT")]
    pub admin_port: Option<u16>,
    /// Hot keys: sample about one request in N into the hot-key sketch; 0 turns hot-key
    /// tracking off [default: 64].
    #[arg(long, value_name = "N")]
    pub hotkey_sample_rate: Option<u32>,
    /// Hot keys: the sliding window request rates are measured over, in seconds [default: 10].
    #[arg(long, value_name = "SECS")]
    pub hotkey_window: Option<u64>,
    /// What to evict when memory is full: merge (segcache-style, keeps frequently read items),
    /// fifo, random, or none (same as -M) [default: merge].
    #[arg(long, value_name = "POLICY")]
    pub eviction: Option<String>,
    /// Pin each worker thread to one CPU: a CPU list (worker i on the i-th CPU, e.g. 2-5,8) or
    /// `auto` (skips CPU 0 and the CPUs network interrupts are steered to, when there are enough
    /// others) [default: unpinned].
    #[arg(long, value_name = "auto|CPULIST")]
    pub pin: Option<String>,
    /// Keep the heap and the worker threads on this NUMA node (memory policy bound to the node;
    /// threads on its CPUs, or on the --pin CPUs, which must be on the node).
    #[arg(long, value_name = "N")]
    pub numa_node: Option<usize>,
    /// Print the version and exit.
    #[arg(short = 'V', long)]
    pub version: bool,
}

/// The TOML file: one key per option, same names as the long flags (with `_`).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    port: Option<u16>,
    listen: Option<OneOrMany>,
    udp_port: Option<u16>,
    unix_socket: Option<PathBuf>,
    unix_mask: Option<String>,
    memory_limit: Option<usize>,
    threads: Option<usize>,
    conn_limit: Option<usize>,
    max_reqs_per_event: Option<usize>,
    listen_backlog: Option<i32>,
    max_item_size: Option<Size>,
    disable_evictions: Option<bool>,
    disable_cas: Option<bool>,
    lock_memory: Option<bool>,
    enable_largepages: Option<bool>,
    enable_shutdown: Option<bool>,
    disable_flush_all: Option<bool>,
    verbose: Option<u8>,
    daemon: Option<bool>,
    user: Option<String>,
    pidfile: Option<PathBuf>,
    admin_port: Option<u16>,
    hotkey_sample_rate: Option<u32>,
    hotkey_window: Option<u64>,
    eviction: Option<String>,
    pin: Option<String>,
    numa_node: Option<usize>,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

/// The settings the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub port: u16,
    pub listen: Vec<String>,
    pub udp_port: u16,
    pub unix_socket: Option<PathBuf>,
    pub unix_mask: u32,
    pub memory_limit_mb: usize,
    pub threads: usize,
    pub conn_limit: usize,
    pub max_reqs_per_event: usize,
    pub listen_backlog: i32,
    pub max_item_size: usize,
    pub disable_evictions: bool,
    pub disable_cas: bool,
    pub lock_memory: bool,
    pub enable_largepages: bool,
    pub enable_shutdown: bool,
    pub disable_flush_all: bool,
    pub verbose: u8,
    pub daemon: bool,
    pub user: Option<String>,
    pub pidfile: Option<PathBuf>,
    /// The admin HTTP endpoint's port; `None`: no endpoint.
    pub admin_port: Option<u16>,
    /// Mean requests per hot-key sample; 0: hot keys not tracked.
    pub hotkey_sample_rate: u32,
    /// The hot-key window in seconds.
    pub hotkey_window_secs: u64,
    /// `--eviction`; `-M` overrides it (see [`Settings::effective_eviction`]).
    pub eviction: Eviction,
    pub pin: Option<PinSpec>,
    pub numa_node: Option<usize>,
}

impl Default for Settings {
    /// memcached's defaults.
    fn default() -> Settings {
        Settings {
            port: 11211,
            listen: Vec::new(),
            udp_port: 0,
            unix_socket: None,
            unix_mask: 0o700,
            memory_limit_mb: 64,
            threads: 4,
            conn_limit: 1024,
            max_reqs_per_event: 20,
            listen_backlog: 1024,
            max_item_size: 1 << 20,
            disable_evictions: false,
            disable_cas: false,
            lock_memory: false,
            enable_largepages: false,
            enable_shutdown: false,
            disable_flush_all: false,
            verbose: 0,
            daemon: false,
            user: None,
            pidfile: None,
            admin_port: None,
            hotkey_sample_rate: 64,
            hotkey_window_secs: 10,
            eviction: Eviction::default(),
            pin: None,
            numa_node: None,
        }
    }
}

impl Settings {
    /// Defaults, then the `--config` file, then the flags; then checks the result.
    pub fn from_args(args: &ServeArgs) -> anyhow::Result<Settings> {
        let mut s = Settings::default();
        if let Some(path) = &args.config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --config {}", path.display()))?;
            s.apply_file(&text)
                .with_context(|| format!("in --config {}", path.display()))?;
        }
        s.apply_args(args)?;
        s.validate()?;
        Ok(s)
    }

    fn apply_file(&mut self, text: &str) -> anyhow::Result<()> {
        let f: FileConfig = toml::from_str(text)?;
        macro_rules! take {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = f.$field { self.$target = v; })*
            };
        }
        take!(
            port => port, udp_port => udp_port, memory_limit => memory_limit_mb,
            threads => threads, conn_limit => conn_limit,
            max_reqs_per_event => max_reqs_per_event, listen_backlog => listen_backlog,
            disable_evictions => disable_evictions, disable_cas => disable_cas,
            lock_memory => lock_memory, enable_largepages => enable_largepages,
            enable_shutdown => enable_shutdown, disable_flush_all => disable_flush_all,
            verbose => verbose, daemon => daemon, hotkey_sample_rate => hotkey_sample_rate,
            hotkey_window => hotkey_window_secs,
        );
        if f.admin_port.is_some() {
            self.admin_port = f.admin_port;
        }
        self.apply_placement(f.eviction.as_deref(), f.pin.as_deref(), f.numa_node)?;
        if let Some(listen) = f.listen {
            self.listen = match listen {
                OneOrMany::One(s) => split_list(&s),
                OneOrMany::Many(v) => v.iter().flat_map(|s| split_list(s)).collect(),
            };
        }
        if let Some(path) = f.unix_socket {
            self.unix_socket = Some(path);
        }
        if let Some(mask) = f.unix_mask {
            self.unix_mask = parse_mask(&mask)?;
        }
        if let Some(size) = f.max_item_size {
            self.max_item_size = match size {
                Size::Bytes(n) => n as usize,
                Size::Text(t) => parse_size(&t)?,
            };
        }
        if let Some(user) = f.user {
            self.user = Some(user);
        }
        if let Some(pidfile) = f.pidfile {
            self.pidfile = Some(pidfile);
        }
        Ok(())
    }

    fn apply_args(&mut self, a: &ServeArgs) -> anyhow::Result<()> {
        macro_rules! take {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = a.$field.clone() { self.$target = v; })*
            };
        }
        take!(
            port => port, udp_port => udp_port, memory_limit => memory_limit_mb,
            threads => threads, conn_limit => conn_limit,
            max_reqs_per_event => max_reqs_per_event, listen_backlog => listen_backlog,
            hotkey_sample_rate => hotkey_sample_rate, hotkey_window => hotkey_window_secs,
        );
        if a.admin_port.is_some() {
            self.admin_port = a.admin_port;
        }
        self.apply_placement(a.eviction.as_deref(), a.pin.as_deref(), a.numa_node)?;
        if !a.listen.is_empty() {
            self.listen = a.listen.iter().flat_map(|s| split_list(s)).collect();
        }
        if a.unix_socket.is_some() {
            self.unix_socket = a.unix_socket.clone();
        }
        if let Some(mask) = &a.unix_mask {
            self.unix_mask = parse_mask(mask)?;
        }
        if let Some(size) = &a.max_item_size {
            self.max_item_size = parse_size(size)?;
        }
        // A switch on the command line turns the option on; its absence leaves the file's value.
        self.disable_evictions |= a.disable_evictions;
        self.disable_cas |= a.disable_cas;
        self.lock_memory |= a.lock_memory;
        self.enable_largepages |= a.enable_largepages;
        self.enable_shutdown |= a.enable_shutdown;
        self.disable_flush_all |= a.disable_flush_all;
        self.daemon |= a.daemon;
        if a.verbose > 0 {
            self.verbose = a.verbose;
        }
        if a.user.is_some() {
            self.user = a.user.clone();
        }
        if a.pidfile.is_some() {
            self.pidfile = a.pidfile.clone();
        }
        Ok(())
    }

    /// `eviction`, `pin` and `numa_node`, from the file or the flags.
    fn apply_placement(
        &mut self,
        eviction: Option<&str>,
        pin: Option<&str>,
        numa_node: Option<usize>,
    ) -> anyhow::Result<()> {
        if let Some(policy) = eviction {
            self.eviction = policy.parse().map_err(|_| {
                anyhow::anyhow!("--eviction {policy}: expected merge, fifo, random or none")
            })?;
        }
        if let Some(spec) = pin {
            self.pin = Some(
                spec.parse()
                    .with_context(|| format!("--pin {spec}: expected auto or a CPU list"))?,
            );
        }
        if numa_node.is_some() {
            self.numa_node = numa_node;
        }
        Ok(())
    }

    /// The store's eviction policy: `-M` wins over `--eviction`.
    pub fn effective_eviction(&self) -> Eviction {
        if self.disable_evictions {
            Eviction::None
        } else {
            self.eviction
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 {
            bail!("-t: the number of threads must be at least 1");
        }
        if self.memory_limit_mb == 0 {
            bail!("-m: the memory limit must be at least 1 MB");
        }
        if self.conn_limit == 0 {
            bail!("-c: the connection limit must be at least 1");
        }
        if self.max_reqs_per_event == 0 {
            bail!("-R: the number of requests per event must be at least 1");
        }
        if self.max_item_size < 1024 {
            bail!("-I: the item size limit cannot be less than 1024 bytes");
        }
        if self.max_item_size > (self.memory_limit_mb << 20) / 2 {
            bail!("-I: the item size limit cannot be more than half of -m");
        }
        if self.max_item_size > 1 << 30 {
            bail!("-I: the item size limit cannot be more than 1 GB");
        }
        if self.hotkey_window_secs == 0 {
            bail!("--hotkey-window: the window must be at least 1 second");
        }
        Ok(())
    }

    /// The addresses to listen on (`-l`, each with `-p` unless it names its own port).
    pub fn listen_addrs(&self) -> anyhow::Result<Vec<std::net::SocketAddr>> {
        use std::net::ToSocketAddrs;
        let specs: Vec<String> = if self.listen.is_empty() {
            vec!["0.0.0.0".into()]
        } else {
            self.listen.clone()
        };
        let mut addrs = Vec::new();
        for spec in &specs {
            let resolved: Vec<_> = if let Ok(addr) = spec.parse::<std::net::SocketAddr>() {
                vec![addr]
            } else if let Ok(ip) = spec.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
                vec![(ip, self.port).into()]
            } else if spec.contains(':') {
                spec.to_socket_addrs()
                    .with_context(|| format!("-l {spec}: cannot resolve"))?
                    .collect()
            } else {
                (spec.as_str(), self.port)
                    .to_socket_addrs()
                    .with_context(|| format!("-l {spec}: cannot resolve"))?
                    .collect()
            };
            for addr in resolved {
                if !addrs.contains(&addr) {
                    addrs.push(addr);
                }
            }
        }
        Ok(addrs)
    }

    /// Paths made absolute, so they still mean the same after `-d` changes directory to `/`.
    pub fn absolutize_paths(&mut self) -> anyhow::Result<()> {
        let cwd = std::env::current_dir()?;
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(path) = p {
                if path.is_relative() {
                    *path = cwd.join(&*path);
                }
            }
        };
        fix(&mut self.pidfile);
        fix(&mut self.unix_socket);
        Ok(())
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

fn parse_mask(mask: &str) -> anyhow::Result<u32> {
    u32::from_str_radix(mask, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .with_context(|| format!("-a {mask}: the unix socket mask must be octal, like 0700"))
}

/// memcached's `-I` syntax: a number of bytes, or a number with a k or m suffix.
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1024),
        Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
        _ => (t, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .with_context(|| format!("-I {text}: expected bytes, or a number with a k or m suffix"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn settings(argv: &[&str]) -> anyhow::Result<Settings> {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))?;
        Settings::from_args(&cli.serve)
    }

    #[test]
    fn defaults_are_memcached_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!((s.port, s.threads, s.conn_limit), (11211, 4, 1024));
        assert_eq!((s.max_reqs_per_event, s.max_item_size), (20, 1 << 20));
        assert_eq!((s.admin_port, s.hotkey_sample_rate), (None, 64));
    }

    #[test]
    fn memcached_flags() {
        let s = settings(&[
            "-p",
            "1234",
            "-l",
            "127.0.0.1,::1",
            "-l",
            "10.0.0.1",
            "-m",
            "128",
            "-t",
            "2",
            "-c",
            "10",
            "-R",
            "5",
            "-b",
            "64",
            "-I",
            "2m",
            "-M",
            "-C",
            "-A",
            "-F",
            "-vv",
            "-U",
            "0",
            "-a",
            "0755",
        ])
        .unwrap();
        assert_eq!(s.port, 1234);
        assert_eq!(s.listen, ["127.0.0.1", "::1", "10.0.0.1"]);
        assert_eq!((s.memory_limit_mb, s.threads, s.conn_limit), (128, 2, 10));
        assert_eq!((s.max_reqs_per_event, s.listen_backlog), (5, 64));
        assert_eq!(s.max_item_size, 2 << 20);
        assert!(s.disable_evictions && s.disable_cas && s.enable_shutdown && s.disable_flush_all);
        assert_eq!((s.verbose, s.unix_mask), (2, 0o755));
    }

    #[test]
    fn udp_is_off_by_default_and_on_with_a_port() {
        assert_eq!(settings(&[]).unwrap().udp_port, 0);
        assert_eq!(settings(&["-U", "11211"]).unwrap().udp_port, 11211);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(settings(&["-I", "10"]).is_err());
        assert!(settings(&["-I", "1x"]).is_err());
        assert!(settings(&["-m", "1", "-I", "1m"]).is_err());
        assert!(settings(&["-t", "0"]).is_err());
        assert!(settings(&["--frobnicate"]).is_err());
        assert!(settings(&["-a", "999"]).is_err());
        assert!(settings(&["--hotkey-window", "0"]).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("m").is_err());
    }

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("tern-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tern.toml");
        std::fs::write(
            &path,
            "port = 2000\nthreads = 3\nlisten = [\"127.0.0.1\"]\nmax_item_size = \"2m\"\n\
             disable_cas = true\nverbose = 1\nadmin_port = 9150\nhotkey_sample_rate = 0\n",
        )
        .unwrap();
        let from_file = settings(&["--config", path.to_str().unwrap()]).unwrap();
        assert_eq!((from_file.port, from_file.threads), (2000, 3));
        assert_eq!(from_file.max_item_size, 2 << 20);
        assert!(from_file.disable_cas);
        assert_eq!(from_file.admin_port, Some(9150));
        assert_eq!(from_file.hotkey_sample_rate, 0);
        let p = path.to_str().unwrap();
        let both = settings(&["--config", p, "-p", "3000", "--admin-port", "9151"]).unwrap();
        assert_eq!((both.port, both.threads), (3000, 3));
        assert_eq!((both.admin_port, both.hotkey_sample_rate), (Some(9151), 0));
        std::fs::write(&path, "prot = 1\n").unwrap();
        let err = settings(&["--config", p]).unwrap_err();
        assert!(format!("{err:#}").contains("prot"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn listen_addresses() {
        let s = settings(&["-p", "7000", "-l", "127.0.0.1,127.0.0.2:7001,[::1]"]).unwrap();
        let addrs: Vec<String> = s
            .listen_addrs()
            .unwrap()
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(addrs, ["127.0.0.1:7000", "127.0.0.2:7001", "[::1]:7000"]);
    }

    #[test]
    fn eviction_pin_and_node_from_flags_and_file() {
        let s = settings(&["--eviction", "fifo", "--pin", "1-2", "--numa-node", "0"]).unwrap();
        assert_eq!(s.effective_eviction(), Eviction::Fifo);
        assert_eq!(s.pin, Some("1-2".parse().unwrap()));
        assert_eq!(s.numa_node, Some(0));
        // -M means no eviction whatever --eviction says, as memcached users expect of -M.
        let s = settings(&["--eviction", "random", "-M"]).unwrap();
        assert_eq!(s.effective_eviction(), Eviction::None);
        assert_eq!(
            settings(&["--pin", "auto"]).unwrap().pin,
            Some(PinSpec::Auto)
        );
        assert!(settings(&["--eviction", "lru"]).is_err());
        assert!(settings(&["--pin", "x"]).is_err());

        let dir = std::env::temp_dir().join(format!("tern-placement-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tern.toml");
        std::fs::write(
            &path,
            "eviction = \"random\"\npin = \"auto\"\nnuma_node = 0\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let s = settings(&["--config", p]).unwrap();
        assert_eq!(
            (s.effective_eviction(), s.pin.clone(), s.numa_node),
            (Eviction::Random, Some(PinSpec::Auto), Some(0))
        );
        let s = settings(&["--config", p, "--eviction", "none", "--pin", "1"]).unwrap();
        assert_eq!(s.effective_eviction(), Eviction::None);
        assert_eq!(s.pin, Some("1".parse().unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
