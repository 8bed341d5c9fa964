//! `tern serve`'s command line: memcached 1.6's flags (same letters, long names and value
//! syntax), then tern's own. The same parser reads the flags of a memcached.conf file.

use std::path::PathBuf;

use clap::{Args, FromArgMatches};

use super::{extended, IoEngine, Protocol};

const MEMCACHED_IGNORED: &str =
    "memcached options tern accepts and ignores (named in a start-up warning)";
const TERN: &str = "tern's own options";
const FLASH: &str =
    "Flash tier, memcached's extstore (https://memcached.org/extstore): each flag is \
                     also `-o ext_...` and a TOML key";

/// `tern serve`'s command line. Options left out come from `--memcached-conf FILE`, then
/// `--config FILE`, then the defaults.
#[derive(Args, Debug, Default)]
#[command(
    about = "Run the memcached-compatible cache server",
    long_about = "Run the memcached-compatible cache server. Every memcached 1.6 option is \
                  accepted with the same letter, long name and value syntax: those with a meaning \
                  in tern act, those tied to memcached's slab allocator and LRU are named in one \
                  start-up warning and ignored. Every acting option also has a key in the TOML \
                  file given with --config (the long option name with '_' for '-'); \
                  --memcached-conf reads a Debian /etc/memcached.conf. The command line wins \
                  over --memcached-conf, which wins over --config.",
    // memcached (getopt) lets a repeated option replace the earlier one; so does tern, so a
    // memcached.conf line can be overridden on the command line.
    args_override_self = true,
    // -V is memcached's --version (see `version` below); clap's own would clash with it.
    disable_version_flag = true,
    version = concat!(env!("CARGO_PKG_VERSION"), " (license: ", env!("CARGO_PKG_LICENSE"), ")")
)]
pub struct ServeArgs {
    /// TOML file with any of the acting options (keys: the long names with '_'; see
    /// config/tern.toml for every key).
    #[arg(long, value_name = "FILE", help_heading = TERN)]
    pub config: Option<PathBuf>,
    /// A memcached.conf as Debian's memcached package keeps it (/etc/memcached.conf): one
    /// memcached flag per line, '#' comments, a `logfile` line. Lines starting with -d or -h are
    /// skipped, as Debian's start scripts skip them; `logfile` is ignored with a warning (tern
    /// logs to stderr). Flags on the command line win over the file.
    #[arg(long, value_name = "FILE", help_heading = TERN)]
    pub memcached_conf: Option<PathBuf>,
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Interface(s) to listen on: an address or address:port, repeated or separated by ',' or
    /// ';' [default: 0.0.0.0, every IPv4 interface].
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
    /// Item memory as a shared mapping of FILE (put it on tmpfs, e.g. /dev/shm or
    /// /run/tern): a graceful stop (SIGTERM, SIGINT, SIGUSR1, `shutdown graceful`) saves what a
    /// restart needs in FILE.meta, and the next start with the same -m/-I/-C restores every
    /// live item [default: none, the cache starts empty].
    #[arg(short = 'e', long, value_name = "FILE")]
    pub memory_file: Option<PathBuf>,
    /// Control socket for a live hand-over (docs/restart.md): a new tern started with
    /// --takeover and the same PATH receives this server's listening sockets, then this server
    /// stops accepting, answers what it has read, saves (-e) and exits 0 [default: none].
    #[arg(long, value_name = "PATH")]
    pub takeover_socket: Option<PathBuf>,
    /// Take over from the tern listening on --takeover-socket: its listening sockets (so no
    /// connection is refused) and, with -e, its items once it has saved them. Starts as usual
    /// when no server is there.
    #[arg(long)]
    pub takeover: bool,
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
    /// Protocols a connection may speak: auto (text or binary, chosen by the first byte),
    /// ascii (text and meta) or binary [default: auto].
    #[arg(short = 'B', long, value_enum, value_name = "auto|ascii|binary")]
    pub protocol: Option<Protocol>,
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
    /// Refuse `stats cachedump`, `stats detail` and `lru_crawler metadump`.
    #[arg(short = 'X', long)]
    pub disable_dumping: bool,
    /// Refuse `watch` (live logging).
    #[arg(short = 'W', long)]
    pub disable_watch: bool,
    /// The character between a key's prefix and the rest, for the per-prefix counts of
    /// `stats detail`; giving it turns `stats detail` on at start, as in memcached [default: ':'].
    #[arg(short = 'D', long, value_name = "CHAR")]
    pub prefix_delimiter: Option<String>,
    /// memcached's extended options: comma-separated, repeatable (`-o modern,idle_timeout=60`).
    #[arg(short = 'o', long, value_name = "OPT[=VALUE],...", long_help = extended::help())]
    pub extended: Vec<String>,
    /// Close a client connection idle this many seconds; 0 never does (memcached's
    /// `-o idle_timeout`) [default: 0].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// The most memory, in megabytes, all connections' read buffers may grow to hold values
    /// still arriving (past their standard 16 KiB); a storage command whose value would pass
    /// it is answered "SERVER_ERROR out of memory storing object". 0: no limit (memcached's
    /// `-o read_buf_mem_limit`) [default: 16].
    #[arg(long, value_name = "MB")]
    pub read_buf_mem_limit: Option<u64>,
    /// At the connection limit, answer a new client "ERROR Too many open connections" and close
    /// it (true), or stop accepting until a connection closes (false) (memcached's
    /// `-o maxconns_fast` / `no_maxconns_fast`) [default: true].
    #[arg(long, value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub maxconns_fast: Option<bool>,
    /// memcached's `-o hashpower`: the hash table's initial size as a power of two, 12 to 32.
    /// Accepted and shown in `stats settings`; tern's index grows by itself [default: none].
    #[arg(long, value_name = "N")]
    pub hashpower: Option<u32>,
    /// More logging on stderr: -v info, -vv debug, -vvv trace [default: warnings only].
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Run in the background (fork, new session, stdio to /dev/null); returns once it serves.
    #[arg(short = 'd', long)]
    pub daemon: bool,
    /// Drop root privileges to this user after opening the sockets (ignored when not root).
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Write the process id to this file (removed at exit).
    #[arg(short = 'P', long, value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// Print the version and exit.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// Print the version and the license, and exit.
    #[arg(short = 'i', long, action = clap::ArgAction::Version)]
    pub license: (),
    /// memcached's slab growth factor (> 1). Ignored: tern has no slab classes.
    #[arg(short = 'f', long, value_name = "FACTOR", help_heading = MEMCACHED_IGNORED)]
    pub slab_growth_factor: Option<f64>,
    /// memcached's smallest slab chunk, in bytes (> 0). Ignored: tern has no slab classes.
    #[arg(short = 'n', long, value_name = "BYTES", help_heading = MEMCACHED_IGNORED)]
    pub slab_min_size: Option<u32>,
    /// memcached's raise of the core-file size limit. Ignored: set the limit with the service
    /// manager (LimitCORE=) or `ulimit -c`.
    #[arg(short = 'r', long, help_heading = MEMCACHED_IGNORED)]
    pub enable_coredumps: bool,
    /// memcached's NAPI-ID based thread selection (> 0). Ignored: the kernel spreads
    /// connections over tern's workers (one SO_REUSEPORT socket each); place them with --pin.
    #[arg(short = 'N', long, visible_alias = "napi_ids", value_name = "N", help_heading = MEMCACHED_IGNORED)]
    pub napi_ids: Option<u32>,
    /// memcached's `-o ext_io_depth`, the I/O operations each extstore thread submits at once.
    /// Ignored: tern's flash tier has no such setting.
    #[arg(long, value_name = "N", help_heading = MEMCACHED_IGNORED)]
    pub ext_io_depth: Option<u32>,
    /// SASL authentication for binary clients: mechanism PLAIN against the `user:password`
    /// file named by the MEMCACHED_SASL_PWDB environment variable; text clients are refused.
    #[arg(short = 'S', long)]
    pub enable_sasl: bool,
    /// Text-protocol authentication: clients first `set` any key with `<user> <password>` as its
    /// data; FILE holds `user:password` lines (the password may be an `$argon2id$` hash); read
    /// again on SIGHUP.
    #[arg(short = 'Y', long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// TLS on every TCP listener not prefixed `notls:` (`-l notls:ADDR:PORT` stays plain,
    /// `-l mtls:ADDR:PORT` requires a client certificate); certificates and the rest from
    /// `-o ssl_chain_cert=FILE,ssl_key=FILE,ssl_ca_cert=FILE,ssl_verify_mode=0..3,
    /// ssl_min_version=tlsv1.2|tlsv1.3,ssl_ciphers=...,ssl_session_cache,ssl_wbuf_size=KB,
    /// ssl_keyformat=PEM|DER`. `refresh_certs` reloads the certificate and key.
    #[arg(short = 'Z', long)]
    pub enable_ssl: bool,
    /// TLS: a client that has not finished its handshake after this many seconds is
    /// disconnected, so a stalled client holds a connection slot and nothing more [default: 10].
    #[arg(long, value_name = "SECS", help_heading = TERN)]
    pub tls_handshake_timeout: Option<u64>,
    /// Serve the admin HTTP endpoint (/metrics, /stats, /health, /version, /settings,
    /// /hotkeys) on this TCP port, bound to the first listen address [default: off].
    #[arg(long, value_name = "PORT", help_heading = TERN)]
    pub admin_port: Option<u16>,
    /// Hot keys: sample about one request in N into the hot-key sketch; 0 turns hot-key
    /// tracking off [default: 64].
    #[arg(long, value_name = "N", help_heading = TERN)]
    pub hotkey_sample_rate: Option<u32>,
    /// Hot keys: the sliding window request rates are measured over, in seconds [default: 10].
    #[arg(long, value_name = "SECS", help_heading = TERN)]
    pub hotkey_window: Option<u64>,
    /// What to evict when memory is full: merge (segcache-style, keeps frequently read items),
    /// fifo, random, or none (same as -M) [default: merge].
    #[arg(long, value_name = "POLICY", help_heading = TERN)]
    pub eviction: Option<String>,
    /// Pin each worker thread to one CPU: a CPU list (worker i on the i-th CPU, e.g. 2-5,8) or
    /// `auto` (skips CPU 0 and the CPUs network interrupts are steered to, when there are enough
    /// others) [default: unpinned].
    #[arg(long, value_name = "auto|CPULIST", help_heading = TERN)]
    pub pin: Option<String>,
    /// Keep the heap and the worker threads on this NUMA node (memory policy bound to the node;
    /// threads on its CPUs, or on the --pin CPUs, which must be on the node).
    #[arg(long, value_name = "N", help_heading = TERN)]
    pub numa_node: Option<usize>,
    /// `-o ext_path=FILE:SIZE`: a file to keep items in beyond -m, SIZE with an m, g, t or p
    /// suffix (ext_path=/mnt/d1/extstore:1G); repeated, the files form one pool. Turns the flash
    /// tier on [default: none].
    #[arg(long, value_name = "FILE:SIZE", help_heading = FLASH)]
    pub ext_path: Vec<String>,
    /// `-o ext_page_size`: size in megabytes of storage pages [default: 64].
    #[arg(long, value_name = "MB", help_heading = FLASH)]
    pub ext_page_size: Option<u32>,
    /// `-o ext_wbuf_size`: size in megabytes of page write buffers; at least -I [default: 4].
    #[arg(long, value_name = "MB", help_heading = FLASH)]
    pub ext_wbuf_size: Option<u32>,
    /// `-o ext_threads`: number of IO threads to run [default: 1].
    #[arg(long, value_name = "N", help_heading = FLASH)]
    pub ext_threads: Option<u32>,
    /// `-o ext_item_size`: store items larger than this [bytes, default: 512].
    #[arg(long, value_name = "BYTES", help_heading = FLASH)]
    pub ext_item_size: Option<u32>,
    /// `-o ext_item_age`: store items idle at least this long [seconds, default: no age limit].
    #[arg(long, value_name = "SECS", help_heading = FLASH)]
    pub ext_item_age: Option<u32>,
    /// `-o ext_low_ttl`: consider TTLs lower than this specially [default: 0].
    #[arg(long, value_name = "SECS", help_heading = FLASH)]
    pub ext_low_ttl: Option<u32>,
    /// `-o ext_drop_unread`: don't re-write unread values during compaction [default: off].
    #[arg(long, help_heading = FLASH)]
    pub ext_drop_unread: bool,
    /// `-o ext_recache_rate`: recache an item every N accesses [default: 2000].
    #[arg(long, value_name = "N", help_heading = FLASH)]
    pub ext_recache_rate: Option<u32>,
    /// `-o ext_compact_under`: compact when fewer than this many free pages [default: 1 percent
    /// of the pages of the last ext_path, at least 1].
    #[arg(long, value_name = "PAGES", help_heading = FLASH)]
    pub ext_compact_under: Option<u32>,
    /// `-o ext_drop_under`: drop COLD items when fewer than this many free pages [default: as
    /// ext_compact_under, and set with it while that is not given].
    #[arg(long, value_name = "PAGES", help_heading = FLASH)]
    pub ext_drop_under: Option<u32>,
    /// `-o ext_max_frag`: only defrag pages if they are less full than this pct-wise
    /// [default: 0.80].
    #[arg(long, value_name = "RATIO", help_heading = FLASH)]
    pub ext_max_frag: Option<f64>,
    /// `-o ext_max_sleep`: max sleep time of background threads in us [default: 1000000].
    #[arg(long, value_name = "USECS", help_heading = FLASH)]
    pub ext_max_sleep: Option<u32>,
    /// `-o slab_automove_freeratio`: memcached's ratio of memory to hold free as buffer. Shown
    /// in `stats settings`; ignored, tern has no slab classes [default: 0.010].
    #[arg(long, value_name = "RATIO", help_heading = FLASH)]
    pub slab_automove_freeratio: Option<f64>,
    /// How workers do socket I/O: epoll (an event loop, a read and a write system call per
    /// wake-up) or uring (io_uring: multishot accept and receive into a buffer ring, a turn's
    /// sends submitted with one system call; Linux 6.1 or later, else epoll with a warning;
    /// not with -Z) [default: epoll].
    #[arg(long, value_enum, value_name = "epoll|uring", help_heading = TERN)]
    pub io_engine: Option<IoEngine>,
}

impl ServeArgs {
    /// Parses the flags of a memcached.conf with the command line's rules.
    pub(super) fn parse_words(words: &[String]) -> anyhow::Result<ServeArgs> {
        let command =
            ServeArgs::augment_args(clap::Command::new("memcached.conf")).no_binary_name(true);
        let matches = command
            .try_get_matches_from(words)
            .map_err(|e| match e.kind() {
                // clap hands back what --help or -i would print as an "error".
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    anyhow::anyhow!(
                        "-h and -i print and exit: they have no place in a memcached.conf"
                    )
                }
                // Its first line says what is wrong; the rest is usage for a command line.
                _ => {
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    anyhow::anyhow!("{}", first.trim_start_matches("error: "))
                }
            })?;
        let args = ServeArgs::from_arg_matches(&matches)?;
        if args.version || args.config.is_some() || args.memcached_conf.is_some() {
            anyhow::bail!("-V, --config and --memcached-conf have no place in a memcached.conf");
        }
        Ok(args)
    }
}
