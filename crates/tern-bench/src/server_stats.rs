//! What tern bench reads from the servers' own `stats` (ASCII, on a connection of its own): the
//! memory limit that sizes the key space (`--key-space-factor`), whether a flash tier has gone
//! idle after the preload (`--settle`), and where the measured gets were answered, memory or
//! flash (memcached's extstore counters).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use serde::Serialize;

use crate::workload::{Plan, Target};

/// How long a server may take to accept the connection and answer `stats`.
const STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes an item is counted as taking beyond its key and value: memcached's item header on a
/// 64-bit machine (48), its CAS (8), the key's terminating NUL (1) and the value's CRLF (2).
/// Slab classes round items up, so memcached holds fewer keys than this implies.
pub const ITEM_OVERHEAD: u64 = 59;

/// One server's `stats`, by name.
#[derive(Clone, Debug, Default)]
pub struct ServerStats(HashMap<String, String>);

impl ServerStats {
    /// Reads `STAT name value` lines (the rest is ignored).
    pub fn parse(text: &str) -> ServerStats {
        ServerStats(
            text.lines()
                .filter_map(|line| {
                    let mut words = line.strip_prefix("STAT ")?.splitn(2, ' ');
                    Some((words.next()?.to_string(), words.next()?.trim().to_string()))
                })
                .collect(),
        )
    }

    pub fn number(&self, name: &str) -> Option<u64> {
        self.0.get(name)?.parse().ok()
    }
}

fn request(stream: &mut (impl Read + Write)) -> anyhow::Result<ServerStats> {
    stream.write_all(b"stats\r\n")?;
    stream.flush()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            bail!("the connection closed before the end of the stats reply");
        }
        reply.extend_from_slice(&buf[..n]);
        if reply.starts_with(b"END\r\n") || reply.ends_with(b"\r\nEND\r\n") {
            break;
        }
        if reply.ends_with(b"\r\n") && !reply.starts_with(b"STAT ") {
            bail!(
                "stats answered {:?}",
                String::from_utf8_lossy(&reply[..reply.len().min(80)])
            );
        }
    }
    Ok(ServerStats::parse(&String::from_utf8_lossy(&reply)))
}

/// Asks one server for its `stats`.
pub fn fetch(target: &Target, tls: Option<&Arc<ClientConfig>>) -> anyhow::Result<ServerStats> {
    match target {
        Target::Tcp { addr, .. } => {
            let tcp = std::net::TcpStream::connect_timeout(addr, STATS_TIMEOUT)
                .with_context(|| format!("connect to {addr}"))?;
            tcp.set_read_timeout(Some(STATS_TIMEOUT))?;
            tcp.set_write_timeout(Some(STATS_TIMEOUT))?;
            match tls {
                Some(config) => {
                    let name = ServerName::IpAddress(addr.ip().into());
                    let session = ClientConnection::new(config.clone(), name)?;
                    request(&mut StreamOwned::new(session, tcp))
                }
                None => {
                    let mut tcp = tcp;
                    request(&mut tcp)
                }
            }
            .with_context(|| format!("stats from {addr}"))
        }
        Target::Unix(path) => {
            let mut stream = std::os::unix::net::UnixStream::connect(path)
                .with_context(|| format!("connect to {}", path.display()))?;
            stream.set_read_timeout(Some(STATS_TIMEOUT))?;
            stream.set_write_timeout(Some(STATS_TIMEOUT))?;
            request(&mut stream).with_context(|| format!("stats from {}", path.display()))
        }
    }
}

/// Every server's `stats`, in the plan's order.
pub fn fetch_all(plan: &Plan) -> anyhow::Result<Vec<ServerStats>> {
    let tls = plan
        .tls_ca
        .as_deref()
        .map(crate::tls::client_config)
        .transpose()?;
    plan.targets
        .iter()
        .map(|t| fetch(t, tls.as_ref()))
        .collect()
}

/// How `--key-space-factor` sized the key space (the `key_space` of the JSON document).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KeySpace {
    pub factor: f64,
    /// The servers' `limit_maxbytes`, summed.
    pub limit_maxbytes: u64,
    /// Mean value size + key length + [`ITEM_OVERHEAD`].
    pub bytes_per_key: f64,
    pub keys: u64,
}

impl KeySpace {
    /// The keys whose items take `factor` × `limit_maxbytes` at `bytes_per_key` each, rounded up
    /// (so the data is never less than asked).
    pub fn new(factor: f64, limit_maxbytes: u64, bytes_per_key: f64) -> KeySpace {
        KeySpace {
            factor,
            limit_maxbytes,
            bytes_per_key,
            keys: ((factor * limit_maxbytes as f64 / bytes_per_key).ceil() as u64).max(1),
        }
    }

    /// Sizes `plan`'s key space from its servers' `limit_maxbytes`.
    pub fn of_servers(plan: &Plan, factor: f64) -> anyhow::Result<KeySpace> {
        let mut limit = 0;
        for (stats, target) in fetch_all(plan)?.iter().zip(&plan.targets) {
            limit += stats.number("limit_maxbytes").with_context(|| {
                let name = match target {
                    Target::Tcp { addr, .. } => addr.to_string(),
                    Target::Unix(path) => path.display().to_string(),
                };
                format!("key_space_factor: {name}'s stats have no limit_maxbytes")
            })?;
        }
        let bytes = plan.value_size.mean() + plan.key_len as f64 + ITEM_OVERHEAD as f64;
        Ok(KeySpace::new(factor, limit, bytes))
    }
}

/// What `--settle` waited for (the `settle` of the JSON document).
#[derive(Clone, Debug, Serialize)]
pub struct Settle {
    pub seconds: f64,
    /// False when the limit passed first.
    pub settled: bool,
}

/// Between two polls of the servers' `stats` while settling.
const SETTLE_POLL: Duration = Duration::from_millis(250);
/// A flash tier is idle once it has written nothing for this long: memcached's writer thread
/// sleeps up to `ext_max_sleep` (1 s by default) between looks for items to move.
const SETTLE_QUIET: Duration = Duration::from_secs(1);

/// Polls every server's `stats` until its flash tier is idle (nothing in `extstore_io_queue`,
/// `extstore_objects_written` unchanged for [`SETTLE_QUIET`]) or `limit` passes. A server
/// without those stats has no flash tier and is idle at once.
pub fn settle(plan: &Plan, limit: Duration) -> anyhow::Result<Settle> {
    let began = Instant::now();
    // Per server: the last count of objects written and since when it has held.
    let mut written: Vec<Option<(u64, Instant)>> = vec![None; plan.targets.len()];
    loop {
        let now = Instant::now();
        let mut idle = true;
        for (stats, last) in fetch_all(plan)?.iter().zip(&mut written) {
            let queued = stats.number("extstore_io_queue").unwrap_or(0);
            let Some(count) = stats.number("extstore_objects_written") else {
                idle &= queued == 0;
                continue;
            };
            let since = match *last {
                Some((before, since)) if before == count => since,
                _ => now,
            };
            *last = Some((count, since));
            idle &= queued == 0 && now.duration_since(since) >= SETTLE_QUIET;
        }
        let seconds = began.elapsed().as_secs_f64();
        if idle || began.elapsed() >= limit {
            return Ok(Settle {
                seconds,
                settled: idle,
            });
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

/// Where the servers answered the measured gets' keys (the `server_gets` of the JSON document),
/// from their counters' change over the measured phase. memcached counts a key whose item was
/// written to flash as a hit and in `get_extstore` when it starts the read, and in
/// `miss_from_extstore` too when the read finds the item gone (the client sees a miss).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ServerGets {
    /// Δget_hits − Δget_extstore.
    pub from_ram: u64,
    /// Δget_extstore − Δmiss_from_extstore.
    pub from_flash: u64,
    /// Δget_misses + Δmiss_from_extstore.
    pub misses: u64,
    /// Δmiss_from_extstore: reads of flash that found the item gone (among `misses`).
    pub flash_misses: u64,
}

impl ServerGets {
    /// The split between two snapshots of the same servers; none when no server has a flash
    /// tier (no `get_extstore`) or a counter went missing or backwards (a restart).
    pub fn between(before: &[ServerStats], after: &[ServerStats]) -> Option<ServerGets> {
        if !after.iter().any(|s| s.number("get_extstore").is_some()) {
            return None;
        }
        let mut gets = ServerGets::default();
        for (b, a) in before.iter().zip(after) {
            let delta = |name: &str| a.number(name)?.checked_sub(b.number(name)?);
            // A server without a flash tier answers every hit from memory.
            let flash_delta = |name: &str| match (a.number(name), b.number(name)) {
                (None, None) => Some(0),
                _ => delta(name),
            };
            let flash = flash_delta("get_extstore")?;
            let flash_misses = flash_delta("miss_from_extstore")?;
            gets.from_ram += delta("get_hits")?.saturating_sub(flash);
            gets.from_flash += flash.saturating_sub(flash_misses);
            gets.misses += delta("get_misses")? + flash_misses;
            gets.flash_misses += flash_misses;
        }
        Some(gets)
    }

    pub fn total(&self) -> u64 {
        self.from_ram + self.from_flash + self.misses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pairs: &[(&str, u64)]) -> ServerStats {
        let text: String = pairs
            .iter()
            .map(|(name, value)| format!("STAT {name} {value}\r\n"))
            .chain(["END\r\n".to_string()])
            .collect();
        ServerStats::parse(&text)
    }

    #[test]
    fn key_space_holds_factor_times_the_memory_at_the_bytes_per_key() {
        // 64 MiB, 1 KiB values, 16-byte keys: 1024 + 16 + 59 = 1099 bytes a key.
        let ks = KeySpace::new(3.0, 64 << 20, 1099.0);
        assert_eq!(ks.keys, 183_191); // 3 × 67108864 / 1099 = 183190.7, rounded up
        assert!(ks.keys as f64 * 1099.0 >= 3.0 * (64u64 << 20) as f64);
        assert!((ks.keys - 1) as f64 * 1099.0 < 3.0 * (64u64 << 20) as f64);
        // Exact multiples are not rounded past.
        assert_eq!(KeySpace::new(2.0, 1000, 100.0).keys, 20);
        // A tiny memory still gets a key.
        assert_eq!(KeySpace::new(0.001, 10, 1000.0).keys, 1);
    }

    #[test]
    fn bytes_per_key_uses_the_mean_value_size() {
        let plan = |value_size: &str| {
            Plan::new(&crate::workload::Workload {
                value_size: value_size.into(),
                key_len: 20,
                ..Default::default()
            })
            .unwrap()
        };
        let bytes = |p: &Plan| p.value_size.mean() + p.key_len as f64 + ITEM_OVERHEAD as f64;
        assert_eq!(bytes(&plan("1000")), 1079.0);
        assert_eq!(bytes(&plan("100-300")), 279.0);
        assert_eq!(bytes(&plan("64:3,1024:1")), 304.0 + 79.0);
    }

    #[test]
    fn gets_split_between_memory_and_flash() {
        let before = [stats(&[
            ("get_hits", 100),
            ("get_misses", 5),
            ("get_extstore", 40),
            ("miss_from_extstore", 1),
        ])];
        let after = [stats(&[
            ("get_hits", 1100),
            ("get_misses", 15),
            ("get_extstore", 340),
            ("miss_from_extstore", 3),
        ])];
        let gets = ServerGets::between(&before, &after).unwrap();
        assert_eq!(
            gets,
            ServerGets {
                from_ram: 700,
                from_flash: 298,
                misses: 12,
                flash_misses: 2
            }
        );
        // Every key asked for, once: Δget_hits + Δget_misses.
        assert_eq!(gets.total(), 1000 + 10);
    }

    #[test]
    fn no_split_without_a_flash_tier_or_across_a_restart() {
        let plain = |hits| stats(&[("get_hits", hits), ("get_misses", 0)]);
        assert_eq!(ServerGets::between(&[plain(1)], &[plain(9)]), None);
        let flash =
            |hits, ext| stats(&[("get_hits", hits), ("get_misses", 0), ("get_extstore", ext)]);
        assert_eq!(ServerGets::between(&[flash(50, 5)], &[flash(10, 1)]), None);
        // In a pool, a server without flash answers its hits from memory.
        let gets =
            ServerGets::between(&[flash(0, 0), plain(0)], &[flash(10, 4), plain(7)]).unwrap();
        assert_eq!((gets.from_ram, gets.from_flash), (6 + 7, 4));
    }

    #[test]
    fn stats_lines_parse_into_numbers() {
        let s = ServerStats::parse(
            "STAT pid 42\r\nSTAT version 1.6.45\r\nSTAT rusage_user 0.1\r\nEND\r\n",
        );
        assert_eq!(s.number("pid"), Some(42));
        assert_eq!(s.number("version"), None);
        assert_eq!(s.number("absent"), None);
    }
}
