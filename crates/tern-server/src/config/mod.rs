//! Every server option in one place: memcached's flags (same letters, long names and values,
//! `args`), its extended `-o` options (`extended`), a Debian memcached.conf
//! (`memcached_conf`), a TOML file with a key per acting option (`file`), and the merged
//! [`Settings`] the server runs with. The command line wins over the memcached.conf, which wins
//! over the TOML file, which wins over the defaults. memcached options that mean nothing to
//! tern are accepted and listed in `Settings::ignored` for one start-up warning (`ignored`).
//!
//! The bottom layer: parsing the options is start-up's work, but its product, [`Settings`], is
//! read by every layer, so it sits below them all and imports nothing from the crate.

mod args;
mod extended;
mod file;
mod flash;
mod ignored;
mod memcached_conf;
mod tls;

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Deserialize;
use tern_store::Eviction;
use tern_tune::pin::PinSpec;

pub use args::ServeArgs;
use file::FileConfig;
pub use flash::FlashOptions;
pub use ignored::{Ignored, Reason};
pub use tls::{ListenTls, TlsOptions, TlsVersion};

/// `-B`: the protocols a connection may speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Text or binary, told apart by the connection's first byte.
    #[default]
    Auto,
    /// The text protocol, meta commands included.
    Ascii,
    /// The binary protocol only.
    Binary,
}

impl Protocol {
    /// The name memcached's `stats settings` gives it (`binding_protocol`).
    pub fn memcached_name(self) -> &'static str {
        match self {
            Protocol::Auto => "auto-negotiate",
            Protocol::Ascii => "ascii",
            Protocol::Binary => "binary",
        }
    }
}

/// `--io-engine`: how a worker thread waits for and does its socket I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoEngine {
    /// One mio (epoll, edge-triggered) event loop per worker, a read and a write per wake-up.
    #[default]
    Epoll,
    /// io_uring: multishot accept and receive into a provided buffer ring, every send of a
    /// turn submitted with one system call (falls back to epoll where the kernel lacks it).
    Uring,
}

impl IoEngine {
    /// The name `stats settings` and `--io-engine` give it.
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Epoll => "epoll",
            IoEngine::Uring => "uring",
        }
    }
}

/// tern's `read_buf_mem_limit` when none is given (memcached's default is none): 16 MiB, so that
/// beside the standard buffers of 1,000 connections with a partial request (16 MiB) a server
/// stays within `-m` + 48 MiB however many clients upload large values at once.
pub const DEFAULT_READ_BUF_MEM_LIMIT: u64 = 16 << 20;

/// The settings the server runs with.
#[derive(Clone, Debug, PartialEq)]
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
    /// `-B`.
    pub protocol: Protocol,
    pub max_item_size: usize,
    pub disable_evictions: bool,
    pub disable_cas: bool,
    pub lock_memory: bool,
    pub enable_largepages: bool,
    pub enable_shutdown: bool,
    pub disable_flush_all: bool,
    /// `-X`: `stats cachedump`, `stats detail` and `lru_crawler metadump` refused.
    pub dumping_disabled: bool,
    /// `-W`: `watch` refused.
    pub watch_disabled: bool,
    /// `-D`: the byte between a key's prefix and the rest, for `stats detail`.
    pub prefix_delimiter: u8,
    /// `stats detail` on at start: memcached turns it on when `-D` is given.
    pub detail_enabled: bool,
    /// `-o idle_timeout`: close a connection idle this many seconds; 0 = never.
    pub idle_timeout_secs: u64,
    /// `-o read_buf_mem_limit`, in bytes: the bound on read buffers grown for values still
    /// arriving (`state::read_budget`); 0 = none.
    pub read_buf_mem_limit: u64,
    /// `-o maxconns_fast`: at `-c`, refuse a new client with an error (true) or leave it
    /// waiting in the backlog until a connection closes (false).
    pub maxconns_fast: bool,
    /// `-o hashpower`: memcached's initial hash table size, a power of two.
    pub hashpower: Option<u32>,
    pub verbose: u8,
    pub daemon: bool,
    pub user: Option<String>,
    pub pidfile: Option<PathBuf>,
    /// `-e`: the item heap is a shared mapping of this file, kept across graceful restarts.
    pub memory_file: Option<PathBuf>,
    /// `--takeover-socket`: where a successor asks this server for a live hand-over.
    pub takeover_socket: Option<PathBuf>,
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
    /// memcached options given that tern accepts and ignores, for [`Settings::warn_ignored`].
    pub ignored: Vec<Ignored>,
    /// `-Z` and `-o ssl_*`.
    pub tls: TlsOptions,
    /// `-Y`: the `user:password` file text clients authenticate against.
    pub auth_file: Option<PathBuf>,
    /// `-S`: binary clients authenticate with SASL PLAIN (users from `MEMCACHED_SASL_PWDB`).
    pub enable_sasl: bool,
    /// `--io-engine`; after start-up, the engine the workers actually run (epoll where the
    /// kernel lacks io_uring).
    pub io_engine: IoEngine,
    /// `-o ext_*`: the flash tier.
    pub flash: FlashOptions,
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
            protocol: Protocol::Auto,
            max_item_size: 1 << 20,
            disable_evictions: false,
            disable_cas: false,
            lock_memory: false,
            enable_largepages: false,
            enable_shutdown: false,
            disable_flush_all: false,
            dumping_disabled: false,
            watch_disabled: false,
            prefix_delimiter: b':',
            detail_enabled: false,
            idle_timeout_secs: 0,
            read_buf_mem_limit: DEFAULT_READ_BUF_MEM_LIMIT,
            maxconns_fast: true,
            hashpower: None,
            verbose: 0,
            daemon: false,
            user: None,
            pidfile: None,
            memory_file: None,
            takeover_socket: None,
            admin_port: None,
            hotkey_sample_rate: 64,
            hotkey_window_secs: 10,
            eviction: Eviction::default(),
            pin: None,
            numa_node: None,
            ignored: Vec::new(),
            tls: TlsOptions::default(),
            auth_file: None,
            enable_sasl: false,
            io_engine: IoEngine::Epoll,
            flash: FlashOptions::default(),
        }
    }
}

impl Settings {
    /// Defaults, then the `--config` file, then the `--memcached-conf` file, then the flags;
    /// then checks the result.
    pub fn from_args(args: &ServeArgs) -> anyhow::Result<Settings> {
        let mut s = Settings::default();
        let mut port_given = args.port.is_some();
        let mut udp_given = args.udp_port.is_some();
        if let Some(path) = &args.config {
            let in_file = || format!("in --config {}", path.display());
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --config {}", path.display()))?;
            let file = FileConfig::parse(&text).with_context(in_file)?;
            port_given |= file.names_port();
            s.apply_file(file).with_context(in_file)?;
        }
        if let Some(path) = &args.memcached_conf {
            let in_conf = || format!("in --memcached-conf {}", path.display());
            let conf = memcached_conf::read(path)?;
            let conf_args = ServeArgs::parse_words(&conf.words).with_context(in_conf)?;
            port_given |= conf_args.port.is_some();
            udp_given |= conf_args.udp_port.is_some();
            s.ignored.extend(conf.skipped);
            s.apply_args(&conf_args).with_context(in_conf)?;
        }
        s.apply_args(args)?;
        // memcached serves TCP on the -U port when no -p is given, so `memcached -U 11311`
        // answers TCP on 11311 too.
        if udp_given && s.udp_port != 0 && !port_given {
            s.port = s.udp_port;
        }
        if s.hashpower.is_some() {
            s.ignore("hashpower", Reason::HashTable);
        }
        s.validate()?;
        Ok(s)
    }

    /// The start-up warning naming every memcached option accepted and ignored, if any.
    pub fn warn_ignored(&self) {
        if let Some(line) = ignored::summary(&self.ignored) {
            tracing::warn!("{line}");
        }
    }

    fn ignore(&mut self, name: &str, reason: Reason) {
        self.ignored.push(Ignored {
            name: name.to_string(),
            reason,
        });
    }

    /// `slab_automove_freeratio`: kept for `stats settings`, else without use.
    fn set_slab_automove_freeratio(&mut self, ratio: f64) {
        self.flash.slab_automove_freeratio = ratio;
        self.ignore("slab_automove_freeratio", Reason::SlabClasses);
    }

    fn apply_args(&mut self, a: &ServeArgs) -> anyhow::Result<()> {
        self.apply_ignored_flags(a)?;
        // ext_path is repeatable: the files a source names replace an earlier source's, as -l's
        // addresses do.
        let earlier_files = std::mem::take(&mut self.flash.files);
        // -o first, so that the long flags naming the same settings win over it.
        for arg in &a.extended {
            extended::apply(self, arg)?;
        }
        self.apply_flash_args(a)?;
        if self.flash.files.is_empty() {
            self.flash.files = earlier_files;
        }
        macro_rules! take {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = a.$field.clone() { self.$target = v; })*
            };
        }
        take!(
            port => port, udp_port => udp_port, memory_limit => memory_limit_mb,
            threads => threads, conn_limit => conn_limit,
            max_reqs_per_event => max_reqs_per_event, listen_backlog => listen_backlog,
            protocol => protocol, idle_timeout => idle_timeout_secs,
            maxconns_fast => maxconns_fast, hotkey_sample_rate => hotkey_sample_rate,
            hotkey_window => hotkey_window_secs, io_engine => io_engine,
        );
        if let Some(mb) = a.read_buf_mem_limit {
            self.read_buf_mem_limit = mb << 20;
        }
        if a.hashpower.is_some() {
            self.hashpower = a.hashpower;
        }
        self.tls.enabled |= a.enable_ssl;
        if a.auth_file.is_some() {
            self.auth_file = a.auth_file.clone();
        }
        self.enable_sasl |= a.enable_sasl;
        // As memcached: SASL is binary-only, so -S implies `-B binary` and refuses another -B.
        if self.enable_sasl {
            match a.protocol {
                None | Some(Protocol::Binary) => self.protocol = Protocol::Binary,
                Some(_) => bail!("-S: you cannot allow the ASCII protocol while using SASL"),
            }
        }
        if let Some(secs) = a.tls_handshake_timeout {
            self.tls.handshake_timeout_secs = secs;
        }
        if a.admin_port.is_some() {
            self.admin_port = a.admin_port;
        }
        if let Some(delimiter) = &a.prefix_delimiter {
            self.set_prefix_delimiter(delimiter)?;
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
        self.dumping_disabled |= a.disable_dumping;
        self.watch_disabled |= a.disable_watch;
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
        if a.memory_file.is_some() {
            self.memory_file = a.memory_file.clone();
        }
        if a.takeover_socket.is_some() {
            self.takeover_socket = a.takeover_socket.clone();
        }
        Ok(())
    }

    /// The `--ext-*` flags (after `-o`'s, so they win).
    fn apply_flash_args(&mut self, a: &ServeArgs) -> anyhow::Result<()> {
        for path in &a.ext_path {
            if self.flash.add_path(path)?.is_some() {
                self.ignore("ext_path's bucket", Reason::FlashBucket);
            }
        }
        let f = &mut self.flash;
        macro_rules! take {
            ($($field:ident => $target:expr),* $(,)?) => {
                $(if let Some(v) = a.$field { $target = v; })*
            };
        }
        take!(
            ext_page_size => f.page_size_mb, ext_wbuf_size => f.wbuf_size_mb,
            ext_threads => f.threads, ext_item_size => f.knobs.item_size,
            ext_item_age => f.knobs.item_age, ext_low_ttl => f.knobs.low_ttl,
            ext_recache_rate => f.knobs.recache_rate,
            ext_compact_under => f.knobs.compact_under, ext_drop_under => f.knobs.drop_under,
            ext_max_frag => f.knobs.max_frag, ext_max_sleep => f.knobs.max_sleep_us,
        );
        f.knobs.drop_unread |= a.ext_drop_unread;
        if a.ext_io_depth.is_some() {
            self.ignore("ext_io_depth", Reason::FlashIoDepth);
        }
        if let Some(ratio) = a.slab_automove_freeratio {
            self.set_slab_automove_freeratio(ratio);
        }
        Ok(())
    }

    /// memcached's flags for its slab allocator and process chores: checked as memcached checks
    /// them (a command line memcached refuses is refused here too), then ignored.
    fn apply_ignored_flags(&mut self, a: &ServeArgs) -> anyhow::Result<()> {
        if let Some(factor) = a.slab_growth_factor {
            if factor.is_nan() || factor <= 1.0 {
                bail!("-f {factor}: the growth factor must be greater than 1");
            }
            self.ignore("-f", Reason::SlabClasses);
        }
        if let Some(size) = a.slab_min_size {
            if size == 0 {
                bail!("-n 0: the chunk size must be greater than 0");
            }
            self.ignore("-n", Reason::SlabClasses);
        }
        if a.enable_coredumps {
            self.ignore("-r", Reason::CoreLimit);
        }
        if let Some(ids) = a.napi_ids {
            if ids == 0 {
                bail!("-N 0: the number of NAPI IDs must be greater than 0");
            }
            self.ignore("-N", Reason::NapiIds);
        }
        Ok(())
    }

    /// `-D`: one byte, as memcached takes one; naming it turns `stats detail` on.
    fn set_prefix_delimiter(&mut self, delimiter: &str) -> anyhow::Result<()> {
        let &[byte] = delimiter.as_bytes() else {
            bail!("-D {delimiter:?}: the prefix delimiter is one character");
        };
        self.prefix_delimiter = byte;
        self.detail_enabled = true;
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
        if let Some(power) = self.hashpower.filter(|p| !(12..=32).contains(p)) {
            bail!("hashpower {power}: memcached's hash power runs from 12 to 32");
        }
        // memcached 1.6 can give each listener its own protocol or tag too; tern's listeners
        // differ only in TLS (`notls:`, `mtls:`).
        let prefixed = ["btls:", "proto[", "tag[", "tag_"];
        if let Some(spec) = self
            .listen
            .iter()
            .find(|spec| prefixed.iter().any(|p| spec.starts_with(p)))
        {
            bail!(
                "-l {spec}: per-listener protocol and tag prefixes are not supported (-B \
                 sets the protocol for every listener)"
            );
        }
        let modes: Vec<ListenTls> = self.listen_tls()?.into_iter().map(|(_, m)| m).collect();
        self.tls.validate(&modes)?;
        if self.enable_sasl && self.auth_file.is_some() {
            bail!("-S and -Y: choose one way to authenticate (SASL for binary, -Y for text)");
        }
        if (self.auth_file.is_some() || self.enable_sasl) && self.udp_port != 0 {
            bail!("-Y: UDP has no connection to authenticate; leave -U off with an auth file");
        }
        if self.tls.enabled && self.io_engine == IoEngine::Uring {
            bail!(
                "-Z: TLS is served by the epoll engine only; leave --io-engine=uring off with -Z"
            );
        }
        if self.tls.enabled && self.port == 0 {
            bail!("-Z: TLS needs a TCP port");
        }
        self.flash.validate(self.max_item_size, self.udp_port)?;
        Ok(())
    }

    /// The addresses to listen on (`-l`, each with `-p` unless it names its own port).
    pub fn listen_addrs(&self) -> anyhow::Result<Vec<std::net::SocketAddr>> {
        Ok(self.listen_tls()?.into_iter().map(|(a, _)| a).collect())
    }

    /// [`Settings::listen_addrs`], each with its TLS mode (`-Z`, `notls:`, `mtls:`).
    /// None with `-s`: memcached 1.6.45 binds no TCP or UDP socket when it has a unix socket,
    /// whatever `-l`, `-p` and `-U` say (`memcached.c` binds them only while
    /// `settings.socketpath == NULL`).
    pub fn listen_tls(&self) -> anyhow::Result<Vec<(std::net::SocketAddr, ListenTls)>> {
        use std::net::ToSocketAddrs;
        if self.unix_socket.is_some() {
            return Ok(Vec::new());
        }
        let specs: Vec<String> = if self.listen.is_empty() {
            vec!["0.0.0.0".into()]
        } else {
            self.listen.clone()
        };
        let mut addrs = Vec::new();
        for full_spec in &specs {
            let (mode, spec) = tls::split_listen_prefix(full_spec, self.tls.enabled);
            let resolved: Vec<_> = if let Ok(addr) = spec.parse::<std::net::SocketAddr>() {
                vec![addr]
            } else if let Ok(ip) = spec.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
                vec![(ip, self.port).into()]
            } else if spec.contains(':') {
                spec.to_socket_addrs()
                    .with_context(|| format!("-l {spec}: cannot resolve"))?
                    .collect()
            } else {
                (spec, self.port)
                    .to_socket_addrs()
                    .with_context(|| format!("-l {spec}: cannot resolve"))?
                    .collect()
            };
            for addr in resolved {
                if !addrs.iter().any(|(a, _)| *a == addr) {
                    addrs.push((addr, mode));
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
        fix(&mut self.memory_file);
        fix(&mut self.auth_file);
        fix(&mut self.takeover_socket);
        for file in &mut self.flash.files {
            if file.path.is_relative() {
                file.path = cwd.join(&file.path);
            }
        }
        Ok(())
    }
}

/// `-l`'s list: separated by ',' or ';', as memcached separates it.
fn split_list(s: &str) -> Vec<String> {
    s.split([',', ';'])
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

    fn error(argv: &[&str]) -> String {
        match settings(argv) {
            Ok(s) => panic!("{argv:?} was accepted: {s:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    fn ignored_names(s: &Settings) -> Vec<&str> {
        s.ignored.iter().map(|i| i.name.as_str()).collect()
    }

    /// A scratch directory of this test process, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("tern-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn file(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn io_engine_from_flag_and_file_and_never_uring_with_tls() {
        assert_eq!(settings(&[]).unwrap().io_engine, IoEngine::Epoll);
        let s = settings(&["--io-engine", "uring"]).unwrap();
        assert_eq!(s.io_engine, IoEngine::Uring);
        let dir = Scratch::new("io-engine");
        let toml = dir.file("tern.toml", "io_engine = \"uring\"\n");
        assert_eq!(
            settings(&["--config", &toml]).unwrap().io_engine,
            IoEngine::Uring
        );
        let flag_wins = settings(&["--config", &toml, "--io-engine=epoll"]).unwrap();
        assert_eq!(flag_wins.io_engine, IoEngine::Epoll);
        assert!(error(&["--io-engine", "poll"]).contains("invalid value 'poll'"));
        let tls = error(&["--io-engine=uring", "-Z", "-o", "ssl_chain_cert=/x.pem"]);
        assert!(
            tls.contains("TLS is served by the epoll engine only"),
            "{tls}"
        );
    }

    #[test]
    fn defaults_are_memcached_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!((s.port, s.threads, s.conn_limit), (11211, 4, 1024));
        assert_eq!((s.max_reqs_per_event, s.max_item_size), (20, 1 << 20));
        assert_eq!((s.admin_port, s.hotkey_sample_rate), (None, 64));
        assert_eq!((s.protocol, s.prefix_delimiter), (Protocol::Auto, b':'));
        assert!(!s.detail_enabled && !s.dumping_disabled && !s.watch_disabled);
        assert_eq!(
            (s.idle_timeout_secs, s.maxconns_fast, s.hashpower),
            (0, true, None)
        );
        assert!(s.ignored.is_empty());
    }

    #[test]
    fn memcached_flags_with_a_meaning() {
        let s = settings(&[
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
        ])
        .unwrap();
        assert_eq!((s.protocol, s.prefix_delimiter), (Protocol::Ascii, b'|'));
        // -D turns stats detail on, as in memcached.
        assert!(s.detail_enabled && s.dumping_disabled && s.watch_disabled);
        assert_eq!((s.idle_timeout_secs, s.maxconns_fast), (30, false));
        assert_eq!(s.hashpower, Some(16));
        // The index cannot be pre-sized: hashpower is kept for `stats settings` and warned about.
        assert_eq!(ignored_names(&s), ["hashpower"]);
        let long = settings(&[
            "--protocol=binary",
            "--prefix-delimiter",
            "#",
            "--disable-dumping",
            "--disable-watch",
            "--idle-timeout",
            "5",
            "--maxconns-fast",
            "false",
            "--hashpower",
            "20",
            "--extended",
            "modern",
        ])
        .unwrap();
        assert_eq!(
            (long.protocol, long.prefix_delimiter),
            (Protocol::Binary, b'#')
        );
        assert!(long.dumping_disabled && long.watch_disabled);
        assert_eq!((long.idle_timeout_secs, long.maxconns_fast), (5, false));
        assert_eq!(long.hashpower, Some(20));
        assert!(error(&["-B", "text"]).contains("text"));
        assert!(error(&["-D", "ab"]).contains("one character"));
        assert!(error(&["-D", ""]).contains("one character"));
        assert!(error(&["--hashpower", "40"]).contains("12 to 32"));
    }

    #[test]
    fn memcached_long_names() {
        let s = settings(&[
            "--port=7000",
            "--conn-limit=10",
            "--threads=2",
            "--max-reqs-per-event=7",
            "--memory-limit=32",
            "--max-item-size=512k",
            "--listen-backlog=8",
            "--unix-mask=0770",
            "--udp-port=0",
            "--disable-evictions",
            "--disable-cas",
            "--disable-flush-all",
            "--enable-shutdown",
            "--slab-growth-factor=1.08",
            "--slab-min-size=64",
            "--enable-coredumps",
            "--napi-ids=1",
            "--napi_ids=2",
        ])
        .unwrap();
        assert_eq!((s.port, s.conn_limit, s.threads), (7000, 10, 2));
        assert_eq!((s.max_reqs_per_event, s.memory_limit_mb), (7, 32));
        assert_eq!(
            (s.max_item_size, s.listen_backlog, s.unix_mask),
            (512 << 10, 8, 0o770)
        );
        assert!(s.disable_evictions && s.disable_cas && s.disable_flush_all && s.enable_shutdown);
        assert_eq!(ignored_names(&s), ["-f", "-n", "-r", "-N"]);
    }

    #[test]
    fn a_repeated_flag_replaces_the_earlier_one_as_in_memcached() {
        let s = settings(&["-p", "1", "-p", "2", "-m", "8", "-m", "16", "-M", "-M"]).unwrap();
        assert_eq!((s.port, s.memory_limit_mb), (2, 16));
        // -l, -o and -v add up, as in memcached.
        let s = settings(&[
            "-l",
            "127.0.0.1",
            "-l",
            "::1",
            "-v",
            "-v",
            "-o",
            "idle_timeout=1",
        ]);
        let s = s.unwrap();
        assert_eq!((s.listen.len(), s.verbose, s.idle_timeout_secs), (2, 2, 1));
    }

    #[test]
    fn extended_options_as_memcached_parses_them() {
        let s = settings(&[
            "-o",
            "idle_timeout=10,idle_timeout=20",
            "-o",
            "idle_timeout=30,",
        ])
        .unwrap();
        assert_eq!(s.idle_timeout_secs, 30, "later options win");
        // A value given to an option that takes none is ignored, as getsubopt leaves it.
        assert!(
            !settings(&["-o", "no_maxconns_fast=1"])
                .unwrap()
                .maxconns_fast
        );
        assert!(
            settings(&["-o", "no_modern,maxconns_fast"])
                .unwrap()
                .maxconns_fast
        );
        let s = settings(&["-o", "maxconns_fast,no_modern"]).unwrap();
        assert!(!s.maxconns_fast);
        assert_eq!(ignored_names(&s), ["no_modern"]);
        // Doing nothing in memcached 1.6 either: no warning.
        assert!(settings(&["-o", "modern,no_inline_ascii_resp"])
            .unwrap()
            .ignored
            .is_empty());
        assert!(settings(&["-o", ""]).unwrap().ignored.is_empty());
        // memcached-debug's option, which memcached's test harness always passes.
        let s = settings(&["-o", "relaxed_privileges"]).unwrap();
        assert_eq!(ignored_names(&s), ["relaxed_privileges"]);
        for (argv, says) in [
            ("bogus", "unknown extended option \"bogus\""),
            // Not an -o option in memcached either (only a `stats settings` line).
            ("lru_segmented", "unknown extended option"),
            (",modern", "unknown extended option \"\""),
            ("hashpower", "needs a value"),
            ("hashpower=5", "from 12 to 32"),
            ("idle_timeout=abc", "whole number"),
            ("hot_lru_pct=80", "from 1 to 79"),
            ("slab_automove=3", "from 0 to 2"),
            ("slab_automove_ratio=1.5", "above 0, at most 1"),
            ("hot_max_factor=0", "above 0"),
            ("hash_algorithm=md5", "jenkins, murmur3, xxh3"),
            ("tail_repair_time=5", "from 10"),
            ("ssl_kernel_tls", "kernel TLS offload is not supported"),
            ("ssl_verify_mode=4", "expected 0 (none)"),
            ("ext_path=/mnt/flash:64GB", "(m|g|t|p supported)"),
            ("ext_path", "missing argument to ext_path"),
            ("proxy_config=routelib", "not memcached's proxy"),
        ] {
            let err = error(&["-o", argv]);
            assert!(err.contains(says), "-o {argv}: {err}");
        }
    }

    #[test]
    fn slab_and_lru_options_are_checked_then_ignored_and_named_once() {
        let s = settings(&[
            "-f",
            "1.08",
            "-n",
            "64",
            "-o",
            "slab_chunk_max=512,lru_crawler,hot_lru_pct=20,slab_reassign,slab_automove",
            "-o",
            "lru_crawler,drop_privileges,ext_io_depth=2",
            "-r",
            "-N",
            "2",
        ])
        .unwrap();
        let line = ignored::summary(&s.ignored).unwrap();
        assert!(
            line.starts_with(
                "memcached options accepted and ignored: -f, -n, slab_chunk_max, slab_reassign, \
                 slab_automove (tern has no slab classes"
            ),
            "{line}"
        );
        assert_eq!(line.matches("lru_crawler").count(), 1, "{line}");
        for name in [
            "hot_lru_pct",
            "drop_privileges",
            "ext_io_depth",
            "-r (",
            "-N (",
        ] {
            assert!(line.contains(name), "{name} not in {line}");
        }
        assert_eq!(ignored::summary(&[]), None);
        assert!(error(&["-f", "1"]).contains("greater than 1"));
        assert!(error(&["-n", "0"]).contains("greater than 0"));
        assert!(error(&["-N", "0"]).contains("greater than 0"));
    }

    #[test]
    fn options_of_other_issues_are_refused_with_a_reason() {
        for (argv, says) in [
            (&["--enable-ssl"][..], "-Z: no certificate chain"),
            (
                &["-S", "-Y", "/etc/users"],
                "choose one way to authenticate",
            ),
            (
                &["-Y", "/etc/users", "-U", "11211"],
                "UDP has no connection",
            ),
        ] {
            assert!(error(argv).contains(says), "{argv:?}: {}", error(argv));
        }
    }

    #[test]
    fn flash_tier_from_extended_options_flags_and_file() {
        assert_eq!(settings(&[]).unwrap().flash.store_config(), None);
        let s = settings(&[
            "-o",
            "ext_path=/f1:1g,ext_page_size=32,ext_wbuf_size=2,ext_threads=3",
            "-o",
            "ext_item_size=100,ext_item_age=60,ext_low_ttl=5,ext_recache_rate=10,\
             ext_compact_under=4,ext_drop_under=3,ext_max_sleep=7,ext_max_frag=0.5,\
             ext_drop_unread,ext_path=/f2:2G,ext_io_depth=8",
        ])
        .unwrap();
        let f = s.flash.store_config().unwrap();
        let paths: Vec<_> = f
            .files
            .iter()
            .map(|f| (f.path.to_str().unwrap(), f.bytes))
            .collect();
        assert_eq!(paths, [("/f1", 1 << 30), ("/f2", 2 << 30)]);
        assert_eq!(
            (f.page_size, f.wbuf_size, f.io_threads),
            (32 << 20, 2 << 20, 3)
        );
        let k = f.knobs;
        assert_eq!((k.item_size, k.item_age, k.low_ttl), (100, 60, 5));
        assert_eq!((k.recache_rate, k.compact_under, k.drop_under), (10, 4, 3));
        assert_eq!((k.max_sleep_us, k.max_frag, k.drop_unread), (7, 0.5, true));
        assert_eq!(ignored_names(&s), ["ext_io_depth"]);

        let long = settings(&[
            "-o",
            "ext_path=/o:1g,ext_item_size=1",
            "--ext-path",
            "/a,b:1g",
            "--ext-item-size=2",
            "--ext-max-frag",
            "0.25",
            "--ext-drop-unread",
            "--ext-io-depth",
            "4",
            "--slab-automove-freeratio",
            "0.5",
        ])
        .unwrap();
        let f = long.flash.store_config().unwrap();
        // -o's files and the flags' together; a path may hold a comma on the flag.
        assert_eq!(f.files[1].path.to_str(), Some("/a,b"));
        assert_eq!((f.knobs.item_size, f.knobs.max_frag), (2, 0.25));
        assert!(f.knobs.drop_unread);
        assert_eq!(long.flash.slab_automove_freeratio, 0.5);
        assert_eq!(
            ignored_names(&long),
            ["ext_io_depth", "slab_automove_freeratio"]
        );
        let bucket = settings(&["-o", "ext_path=/f:1g:compact"]).unwrap();
        assert_eq!(ignored_names(&bucket), ["ext_path's bucket"]);

        let dir = Scratch::new("flash-toml");
        let toml = dir.file(
            "tern.toml",
            "ext_path = [\"/t1:1g\", \"/t2:1g\"]\next_item_size = 64\next_max_frag = 0.3\n\
             ext_drop_unread = true\nslab_automove_freeratio = 0.2\n",
        );
        let s = settings(&["--config", &toml]).unwrap();
        assert_eq!(s.flash.files.len(), 2);
        assert_eq!((s.flash.knobs.item_size, s.flash.knobs.max_frag), (64, 0.3));
        assert!(s.flash.knobs.drop_unread);
        assert_eq!(ignored_names(&s), ["slab_automove_freeratio"]);
        let one = dir.file("one.toml", "ext_path = \"/t:1g\"\n");
        assert_eq!(settings(&["--config", &one]).unwrap().flash.files.len(), 1);
        // The command line's files replace the file's, as its -l replaces the file's listen.
        let s = settings(&["--config", &toml, "-o", "ext_path=/c:1g"]).unwrap();
        let paths: Vec<_> = s.flash.files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(paths, [PathBuf::from("/c")]);
        // Otherwise the file's stay, the flags changing the rest.
        let s = settings(&["--config", &toml, "--ext-item-size", "9"]).unwrap();
        assert_eq!((s.flash.files.len(), s.flash.knobs.item_size), (2, 9));

        for (argv, says) in [
            (
                &["-o", "ext_path=/f:0g"][..],
                "supplied ext_path has zero size",
            ),
            (&["-o", "ext_path=/f:1g", "-U", "1"], "Cannot use UDP"),
            (&["--ext-path", "/f:1GB"], "(m|g|t|p supported)"),
            (
                &["--ext-path", "/f:1g", "--ext-threads", "0"],
                "ext_threads=0",
            ),
            (&["-o", "ext_item_size=x"], "ext_item_size=x"),
            (&["--ext-item-size", "-1"], "-1"),
        ] {
            assert!(error(argv).contains(says), "{argv:?}: {}", error(argv));
        }
        // Inert without ext_path, as in memcached: the knobs alone are not checked.
        assert!(settings(&["-o", "ext_threads=0", "-U", "1"]).is_ok());
    }

    #[test]
    fn flash_paths_are_made_absolute() {
        let mut s = settings(&["-o", "ext_path=rel/flash:1g,ext_path=/abs:1g"]).unwrap();
        s.absolutize_paths().unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(s.flash.files[0].path, cwd.join("rel/flash"));
        assert_eq!(s.flash.files[1].path, PathBuf::from("/abs"));
    }

    #[test]
    fn license_prints_and_exits() {
        let err = Cli::try_parse_from(["serve", "-i"]).err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
        assert!(err.to_string().contains("MIT OR Apache-2.0"), "{err}");
    }

    #[test]
    fn memcached_conf_between_the_toml_file_and_the_command_line() {
        let dir = Scratch::new("memcached-conf");
        let toml = dir.file("tern.toml", "port = 1000\nthreads = 3\nmemory_limit = 16\n");
        let conf = dir.file(
            "memcached.conf",
            "# Debian style\n-d\nlogfile /var/log/memcached.log\n-m 64\n-p 11211\n\
             -l 127.0.0.1\n-l ::1\n-v\n-v\n-o modern,idle_timeout=60\n-f 1.08\n",
        );
        let s = settings(&["--config", &toml, "--memcached-conf", &conf, "-p", "2000"]).unwrap();
        assert_eq!(s.port, 2000, "the command line wins");
        assert_eq!(
            s.memory_limit_mb, 64,
            "the memcached.conf wins over the TOML file"
        );
        assert_eq!(s.threads, 3, "the TOML file fills what the others leave");
        assert_eq!(s.listen, ["127.0.0.1", "::1"]);
        assert_eq!((s.verbose, s.idle_timeout_secs), (2, 60));
        assert!(
            !s.daemon,
            "-d in memcached.conf is skipped, as Debian's scripts skip it"
        );
        assert_eq!(
            ignored_names(&s),
            ["-d in memcached.conf", "logfile in memcached.conf", "-f"]
        );
        let nested = dir.file("nested.conf", "-m 64\n--config /etc/tern.toml\n");
        assert!(error(&["--memcached-conf", &nested]).contains("no place in"));
        let bad = dir.file("bad.conf", "-m 64\n--frobnicate\n");
        let err = error(&["--memcached-conf", &bad]);
        assert!(
            err.contains("bad.conf") && err.contains("--frobnicate"),
            "{err}"
        );
        assert!(error(&["--memcached-conf", "/nonexistent.conf"]).contains("/nonexistent.conf"));
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
    fn a_udp_port_without_a_tcp_port_is_the_tcp_port_too_as_in_memcached() {
        let s = settings(&["-U", "11311"]).unwrap();
        assert_eq!((s.port, s.udp_port), (11311, 11311));
        let s = settings(&["-U", "11311", "-p", "11211"]).unwrap();
        assert_eq!((s.port, s.udp_port), (11211, 11311));
        assert_eq!(settings(&["-U", "0"]).unwrap().port, 11211);
        let dir = Scratch::new("udp-port");
        let toml = dir.file("tern.toml", "port = 11211\n");
        assert_eq!(
            settings(&["--config", &toml, "-U", "11311"]).unwrap().port,
            11211
        );
        let conf = dir.file("memcached.conf", "-U 11311\n");
        let s = settings(&["--memcached-conf", &conf]).unwrap();
        assert_eq!((s.port, s.udp_port), (11311, 11311));
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
    fn toml_keys_of_the_memcached_options_with_a_meaning() {
        let dir = Scratch::new("toml-memcached");
        let path = dir.file(
            "tern.toml",
            "protocol = \"binary\"\nprefix_delimiter = \"/\"\ndisable_dumping = true\n\
             disable_watch = true\nidle_timeout = 90\nmaxconns_fast = false\nhashpower = 18\n",
        );
        let s = settings(&["--config", &path]).unwrap();
        assert_eq!((s.protocol, s.prefix_delimiter), (Protocol::Binary, b'/'));
        assert!(s.detail_enabled && s.dumping_disabled && s.watch_disabled);
        assert_eq!((s.idle_timeout_secs, s.maxconns_fast), (90, false));
        assert_eq!(s.hashpower, Some(18));
        let s = settings(&["--config", &path, "-B", "auto", "--maxconns-fast", "true"]).unwrap();
        assert_eq!((s.protocol, s.maxconns_fast), (Protocol::Auto, true));
        let bad = dir.file("bad.toml", "hashpower = 2\n");
        assert!(error(&["--config", &bad]).contains("12 to 32"));
        let bad = dir.file("bad.toml", "protocol = \"text\"\n");
        assert!(error(&["--config", &bad]).contains("text"));
    }

    #[test]
    fn listen_lists_and_memcached_listener_prefixes() {
        let s = settings(&["-l", "127.0.0.1;127.0.0.2,127.0.0.3"]).unwrap();
        assert_eq!(s.listen, ["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
        for spec in ["btls:127.0.0.1:11211", "proto[ascii]:127.0.0.1:11211"] {
            assert!(error(&["-l", spec]).contains("prefixes are not supported"));
        }
        let s = settings(&[
            "-Z",
            "-o",
            "ssl_chain_cert=c.pem",
            "-l",
            "notls:127.0.0.1:1,::1",
        ])
        .unwrap();
        let modes: Vec<ListenTls> = s.listen_tls().unwrap().iter().map(|a| a.1).collect();
        assert_eq!(modes, [ListenTls::Plain, ListenTls::Tls]);
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
        // memcached 1.6.45 listens on the unix socket only, whatever `-l` names.
        let s = settings(&["-s", "/tmp/t.sock", "-l", "127.0.0.1"]).unwrap();
        assert!(s.listen_addrs().unwrap().is_empty());
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
