//! What to send: the workload as a user writes it (TOML file or flags) and the checked plan the
//! generator threads run.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use tern_proto::client::{Dialect, Op};
use tern_tune::CpuSet;

/// A workload as written in a TOML file (every field optional; see docs/bench.md for the format).
/// Strings are kept as written so a run's JSON echoes exactly what was asked.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// `host:port` or a unix socket path; several servers are spread by ketama.
    pub servers: Vec<String>,
    /// Connect over TLS, trusting the CA certificates in this PEM file (TCP servers only).
    pub tls_ca: Option<String>,
    /// `ascii`, `meta` or `binary`.
    pub protocol: String,
    /// `tcp` or `udp` (udp: get and multiget only, ASCII, on the same port number).
    pub transport: String,
    pub threads: usize,
    /// Connections per thread to each server.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Commands by weight: `get:8,set:2`; commands: get set multiget delete incr touch mg ms.
    pub mix: String,
    /// Keys per multiget request.
    pub multiget: usize,
    /// Number of distinct keys.
    pub keys: u64,
    /// Size the key space from the servers' memory instead of `keys`: keys × (mean value size
    /// + key_len + 59 bytes of item overhead) ≈ this × the sum of their `limit_maxbytes`.
    pub key_space_factor: Option<f64>,
    /// Bytes per key (`k` then the zero-padded key number).
    pub key_len: usize,
    /// `uniform`, `zipf:<exponent>` or `sequential`.
    pub key_distribution: String,
    /// `256` (fixed), `100-1000` (uniform range) or `64:8,1024:2` (size:weight list).
    pub value_size: String,
    /// Seconds; 0: never expire.
    pub ttl: u32,
    /// Store every key once before measuring.
    pub preload: bool,
    /// Preload at this many sets per second in total; none: as fast as the server answers.
    /// A flash tier's writer falls behind a fast preload, and the server evicts what it could
    /// not write.
    pub preload_rate: Option<f64>,
    /// Before measuring, wait up to this long (`30s`) for the servers' flash tier to go idle.
    pub settle: Option<String>,
    /// Run, but do not record, for this long first (`2s`, `500ms`).
    pub warmup: String,
    /// Measure for this long (ignored when `requests` is set).
    pub duration: String,
    /// Measure exactly this many requests instead of a duration.
    pub requests: Option<u64>,
    /// Open loop: total requests per second across all connections; none: closed loop.
    pub rate: Option<f64>,
    /// Open-loop arrivals: `constant` or `poisson`.
    pub arrivals: String,
    /// Open loop: how long before each send is due a thread stops sleeping and polls without
    /// waiting (`1ms`, `50us`). A thread that sleeps until close to a send is woken ahead of
    /// busy neighbours on its CPU, but with the machine's wake-up delay; one that polls keeps
    /// its CPU busy, and loses scheduler slices to any neighbour (see docs/bench.md).
    pub spin: String,
    pub seed: u64,
    /// When the server closes a connection, open a new one and send again what it left
    /// unanswered (as memcached clients do across a server's restart or hand-over).
    pub reconnect: bool,
    /// Generator threads' CPUs (a CPU list: `8-15`, `2,4,6`): thread i runs on the list's
    /// (i mod length)-th CPU. Unpinned threads migrate, and a second thread on a CPU delays
    /// the first's sends by a scheduler slice, which shows up as the server's tail latency.
    pub pin: Option<String>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            servers: vec!["127.0.0.1:11211".into()],
            tls_ca: None,
            protocol: "ascii".into(),
            transport: "tcp".into(),
            threads: 1,
            connections: 4,
            pipeline: 1,
            mix: "get:9,set:1".into(),
            multiget: 10,
            keys: 10_000,
            key_space_factor: None,
            key_len: 16,
            key_distribution: "uniform".into(),
            value_size: "32".into(),
            ttl: 0,
            preload: true,
            preload_rate: None,
            settle: None,
            warmup: "0s".into(),
            duration: "5s".into(),
            requests: None,
            rate: None,
            arrivals: "constant".into(),
            spin: "1ms".into(),
            seed: 1,
            reconnect: false,
            pin: None,
        }
    }
}

impl Workload {
    pub fn from_toml_file(path: &std::path::Path) -> anyhow::Result<Workload> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parse workload {}", path.display()))
    }
}

/// Where to connect.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp {
        addr: SocketAddr,
        /// As the user wrote it: ketama hashes this name, as libmemcached does.
        host: String,
        port: u16,
    },
    Unix(PathBuf),
}

impl Target {
    pub fn parse(spec: &str) -> anyhow::Result<Target> {
        if spec.starts_with('/') || spec.starts_with("./") {
            return Ok(Target::Unix(PathBuf::from(spec)));
        }
        let (host, port) = spec
            .rsplit_once(':')
            .with_context(|| format!("server {spec:?}: expected host:port or a socket path"))?;
        let port: u16 = port
            .parse()
            .with_context(|| format!("server {spec:?}: bad port"))?;
        let addr = (host.trim_matches(|c| c == '[' || c == ']'), port)
            .to_socket_addrs()
            .with_context(|| format!("resolve {spec:?}"))?
            .next()
            .with_context(|| format!("{spec:?} resolves to no address"))?;
        Ok(Target::Tcp {
            addr,
            host: host.to_string(),
            port,
        })
    }

    /// The server's name on the ketama ring: `host:port`, `host` alone for the default port, and
    /// `path:0` for a unix socket.
    pub fn ring_name(&self) -> String {
        match self {
            Target::Tcp { host, port, .. } if *port == 11211 => host.clone(),
            Target::Tcp { host, port, .. } => format!("{host}:{port}"),
            // libmemcached gives a unix socket port 0, and names it like any other port.
            Target::Unix(path) => format!("{}:0", path.display()),
        }
    }
}

/// One entry of the command mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub name: &'static str,
    pub op: Op,
    pub dialect: Dialect,
}

#[derive(Clone, Debug, PartialEq)]
pub enum KeyDistribution {
    Uniform,
    Zipf(f64),
    Sequential,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ValueSize {
    Fixed(usize),
    Range(usize, usize),
    Weighted(Vec<(usize, u32)>),
}

impl ValueSize {
    pub fn max(&self) -> usize {
        match self {
            ValueSize::Fixed(n) => *n,
            ValueSize::Range(_, hi) => *hi,
            ValueSize::Weighted(list) => list.iter().map(|(s, _)| *s).max().unwrap_or(0),
        }
    }

    /// The mean value size the workload stores.
    pub fn mean(&self) -> f64 {
        match self {
            ValueSize::Fixed(n) => *n as f64,
            ValueSize::Range(lo, hi) => (*lo + *hi) as f64 / 2.0,
            ValueSize::Weighted(list) => {
                let weight: u64 = list.iter().map(|(_, w)| u64::from(*w)).sum();
                let bytes: u64 = list.iter().map(|(s, w)| *s as u64 * u64::from(*w)).sum();
                bytes as f64 / weight as f64
            }
        }
    }
}

/// A checked workload, ready to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub dialect: Dialect,
    pub udp: bool,
    /// `tls_ca`: the CA file the TLS connections trust; `None`: plain connections.
    pub tls_ca: Option<std::path::PathBuf>,
    pub threads: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub commands: Vec<Command>,
    pub weights: Vec<u32>,
    pub multiget: usize,
    pub keys: u64,
    pub key_space_factor: Option<f64>,
    pub key_len: usize,
    pub key_distribution: KeyDistribution,
    pub value_size: ValueSize,
    pub ttl: u32,
    pub preload: bool,
    pub preload_rate: Option<f64>,
    pub settle: Option<Duration>,
    pub warmup: Duration,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub rate: Option<f64>,
    pub poisson: bool,
    pub spin: Duration,
    pub seed: u64,
    pub reconnect: bool,
    /// `pin`'s CPUs in order; empty: unpinned.
    pub pin: Vec<usize>,
}

fn duration(field: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text).with_context(|| format!("{field} = {text:?}"))
}

fn dialect(name: &str) -> anyhow::Result<Dialect> {
    Ok(match name {
        "ascii" => Dialect::Ascii,
        "meta" => Dialect::Meta,
        "binary" => Dialect::Binary,
        other => bail!("protocol {other:?}: expected ascii, meta or binary"),
    })
}

fn command(name: &str, dialect: Dialect) -> anyhow::Result<Command> {
    let (name, op, dialect) = match name {
        "get" => ("get", Op::Get, dialect),
        "set" => ("set", Op::Set, dialect),
        "multiget" => ("multiget", Op::MultiGet, dialect),
        "delete" => ("delete", Op::Delete, dialect),
        "incr" => ("incr", Op::Incr, dialect),
        "touch" => ("touch", Op::Touch, dialect),
        "mg" => ("mg", Op::Get, Dialect::Meta),
        "ms" => ("ms", Op::Set, Dialect::Meta),
        other => {
            bail!("command {other:?}: expected get, set, multiget, delete, incr, touch, mg or ms")
        }
    };
    Ok(Command { name, op, dialect })
}

fn weighted_list(field: &str, text: &str) -> anyhow::Result<Vec<(String, u32)>> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let (name, weight) = item.split_once(':').unwrap_or((item, "1"));
            let weight: u32 = weight
                .trim()
                .parse()
                .with_context(|| format!("{field}: bad weight in {item:?}"))?;
            Ok((name.trim().to_string(), weight))
        })
        .collect()
}

fn value_size(text: &str) -> anyhow::Result<ValueSize> {
    let size = |s: &str| -> anyhow::Result<usize> {
        s.trim()
            .parse()
            .with_context(|| format!("value_size {text:?}: bad size {s:?}"))
    };
    let parsed = if text.contains(':') || text.contains(',') {
        let list = weighted_list("value_size", text)?
            .into_iter()
            .map(|(s, w)| Ok((size(&s)?, w)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        ensure!(
            list.iter().any(|(_, w)| *w > 0),
            "value_size {text:?}: all weights are 0"
        );
        ValueSize::Weighted(list)
    } else if let Some((lo, hi)) = text.split_once('-') {
        let (lo, hi) = (size(lo)?, size(hi)?);
        ensure!(lo <= hi, "value_size {text:?}: empty range");
        ValueSize::Range(lo, hi)
    } else {
        ValueSize::Fixed(size(text)?)
    };
    // memcached's default item size limit.
    ensure!(
        parsed.max() <= 1024 * 1024,
        "value_size {text:?}: over 1 MiB"
    );
    Ok(parsed)
}

fn key_distribution(text: &str) -> anyhow::Result<KeyDistribution> {
    Ok(match text.split_once(':') {
        None if text == "uniform" => KeyDistribution::Uniform,
        None if text == "sequential" => KeyDistribution::Sequential,
        Some(("zipf", s)) => {
            let s: f64 = s
                .parse()
                .with_context(|| format!("key_distribution {text:?}: bad exponent"))?;
            ensure!(s > 0.0, "key_distribution {text:?}: exponent must be > 0");
            KeyDistribution::Zipf(s)
        }
        _ => bail!("key_distribution {text:?}: expected uniform, sequential or zipf:<exponent>"),
    })
}

impl Plan {
    pub fn new(w: &Workload) -> anyhow::Result<Plan> {
        ensure!(!w.servers.is_empty(), "no server given (-s host:port)");
        let targets = w
            .servers
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| Target::parse(s.trim()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let dialect = dialect(&w.protocol)?;
        let udp = match w.transport.as_str() {
            "tcp" => false,
            "udp" => true,
            other => bail!("transport {other:?}: expected tcp or udp"),
        };
        let mut commands = Vec::new();
        let mut weights = Vec::new();
        for (name, weight) in weighted_list("mix", &w.mix)? {
            let cmd = command(&name, dialect)?;
            ensure!(
                !(dialect == Dialect::Binary && cmd.dialect == Dialect::Meta),
                "mix: {name} is a meta command; it cannot share a binary-protocol connection"
            );
            if udp {
                ensure!(
                    matches!(cmd.op, Op::Get | Op::MultiGet) && cmd.dialect == Dialect::Ascii,
                    "mix: over UDP only ASCII get and multiget are sent, not {name}"
                );
            }
            commands.push(cmd);
            weights.push(weight);
        }
        ensure!(
            weights.iter().any(|&w| w > 0),
            "mix {:?}: all weights are 0",
            w.mix
        );
        ensure!(w.threads > 0, "threads must be at least 1");
        ensure!(w.connections > 0, "connections must be at least 1");
        ensure!(w.pipeline > 0, "pipeline must be at least 1");
        ensure!(w.multiget > 0, "multiget must be at least 1");
        ensure!(w.keys > 0, "keys must be at least 1");
        let digits = (w.keys - 1).max(1).ilog10() as usize + 1;
        ensure!(
            w.key_len > digits && w.key_len <= 250,
            "key_len {} cannot hold {} keys (need {}..=250)",
            w.key_len,
            w.keys,
            digits + 1
        );
        if udp {
            ensure!(dialect == Dialect::Ascii, "UDP is spoken in ASCII here");
            ensure!(
                targets.iter().all(|t| matches!(t, Target::Tcp { .. })),
                "UDP needs host:port servers"
            );
        }
        if let Some(factor) = w.key_space_factor {
            ensure!(
                factor.is_finite() && factor > 0.0,
                "key_space_factor must be a positive number"
            );
        }
        for (name, rate) in [("rate", w.rate), ("preload_rate", w.preload_rate)] {
            if let Some(rate) = rate {
                ensure!(
                    rate.is_finite() && rate > 0.0,
                    "{name} must be a positive number"
                );
            }
        }
        let poisson = match w.arrivals.as_str() {
            "constant" => false,
            "poisson" => true,
            other => bail!("arrivals {other:?}: expected constant or poisson"),
        };
        if w.tls_ca.is_some() {
            ensure!(!udp, "TLS is for TCP connections, not UDP");
            ensure!(
                targets.iter().all(|t| matches!(t, Target::Tcp { .. })),
                "TLS needs host:port servers"
            );
        }
        Ok(Plan {
            targets,
            dialect,
            udp,
            tls_ca: w.tls_ca.as_ref().map(std::path::PathBuf::from),
            threads: w.threads,
            connections: w.connections,
            pipeline: w.pipeline,
            commands,
            weights,
            multiget: w.multiget,
            keys: w.keys,
            key_space_factor: w.key_space_factor,
            key_len: w.key_len,
            key_distribution: key_distribution(&w.key_distribution)?,
            value_size: value_size(&w.value_size)?,
            ttl: w.ttl,
            preload: w.preload,
            preload_rate: w.preload_rate,
            settle: w
                .settle
                .as_ref()
                .map(|s| duration("settle", s))
                .transpose()?,
            warmup: duration("warmup", &w.warmup)?,
            duration: duration("duration", &w.duration)?,
            requests: w.requests,
            rate: w.rate,
            poisson,
            spin: duration("spin", &w.spin)?,
            seed: w.seed,
            reconnect: w.reconnect,
            pin: match &w.pin {
                Some(list) => CpuSet::parse(list)
                    .with_context(|| format!("pin = {list:?}"))?
                    .iter()
                    .collect(),
                None => Vec::new(),
            },
        })
    }

    /// Writes key number `index` (`k0000042` for key_len 8) into `out`.
    pub fn write_key(&self, out: &mut Vec<u8>, mut index: u64) {
        let start = out.len();
        out.resize(start + self.key_len, b'0');
        out[start] = b'k';
        let mut i = start + self.key_len;
        while index > 0 {
            i -= 1;
            out[i] = b'0' + (index % 10) as u8;
            index /= 10;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_workload_overrides_defaults() {
        let w: Workload = toml::from_str(
            r#"
            servers = ["127.0.0.1:11211", "127.0.0.1:11212"]
            protocol = "meta"
            mix = "get:8,set:2,mg:1"
            value_size = "64:8,1024:2"
            key_distribution = "zipf:0.99"
            rate = 50000.0
            spin = "50us"
            "#,
        )
        .unwrap();
        let plan = Plan::new(&w).unwrap();
        assert_eq!(plan.targets.len(), 2);
        assert_eq!(plan.dialect, Dialect::Meta);
        assert_eq!(plan.commands.len(), 3);
        assert_eq!(
            plan.value_size,
            ValueSize::Weighted(vec![(64, 8), (1024, 2)])
        );
        assert_eq!(plan.key_distribution, KeyDistribution::Zipf(0.99));
        assert_eq!(plan.rate, Some(50000.0));
        assert_eq!(plan.spin, Duration::from_micros(50));
        assert_eq!(
            Plan::new(&Workload::default()).unwrap().spin,
            Duration::from_millis(1)
        );
        assert!(toml::from_str::<Workload>("treads = 2").is_err());
    }

    #[test]
    fn rejects_what_cannot_run() {
        let bad = |f: fn(&mut Workload)| {
            let mut w = Workload::default();
            f(&mut w);
            Plan::new(&w).is_err()
        };
        assert!(!bad(|w| w.protocol = "binary".into()));
        assert!(bad(|w| {
            w.protocol = "binary".into();
            w.mix = "mg:1".into();
        }));
        assert!(bad(|w| {
            w.transport = "udp".into();
            w.mix = "get:1,set:1".into();
        }));
        assert!(bad(|w| w.keys = 100_000_000_000_000_000));
        assert!(bad(|w| w.value_size = "10-5".into()));
        assert!(bad(|w| w.spin = "soon".into()));
    }

    #[test]
    fn keys_are_fixed_length_and_distinct() {
        let plan = Plan::new(&Workload {
            key_len: 8,
            ..Workload::default()
        })
        .unwrap();
        let mut out = Vec::new();
        plan.write_key(&mut out, 42);
        plan.write_key(&mut out, 0);
        assert_eq!(out, b"k0000042k0000000");
    }
}
