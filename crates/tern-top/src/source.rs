//! Where samples come from: `stats` over the server's own TCP port (tern and memcached alike),
//! and for tern, when it serves one, the admin endpoint's `/metrics` (latency histograms) and
//! `/hotkeys`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::model::{Histogram, HotKey, Sample};

/// How to find a server's admin endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admin {
    /// The port `stats settings` names as `admin_port` (tern prints it; memcached does not).
    Discover,
    Port(u16),
    /// `stats` only.
    Off,
}

/// One server being watched, and the connections to it.
pub struct Source {
    addr: String,
    admin: Admin,
    timeout: Duration,
    hot_keys: usize,
    stats: Option<BufReader<TcpStream>>,
    /// The `version` answer, asked once per connection.
    version: String,
    /// `http://host:port` of the admin endpoint, once known.
    admin_url: Option<String>,
    http: ureq::Agent,
}

impl Source {
    /// `timeout` bounds each connect, read and HTTP request, so one stuck server cannot freeze
    /// the view for long.
    pub fn new(addr: &str, admin: Admin, hot_keys: usize, timeout: Duration) -> Source {
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .build()
            .into();
        Source {
            addr: addr.to_string(),
            admin,
            timeout,
            hot_keys,
            stats: None,
            version: String::new(),
            admin_url: None,
            http,
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `stats` now, plus the admin endpoint's latency and hot keys where there is one. Fails
    /// only when `stats` does; an admin endpoint that fails is noted in the sample.
    pub fn sample(&mut self) -> anyhow::Result<Sample> {
        let stats = match self.stats_request("stats") {
            Ok(stats) => stats,
            Err(err) => {
                // Reconnect on the next poll.
                self.stats = None;
                return Err(err);
            }
        };
        let mut sample = Sample {
            version: self.version.clone(),
            stats,
            ..Sample::default()
        };
        if let Some(url) = self.admin_url.clone() {
            match self.admin_sample(&url) {
                Ok((latency, hot_keys)) => {
                    sample.latency = latency;
                    sample.hot_keys = Some(hot_keys);
                }
                Err(err) => sample.admin_error = Some(format!("{url}: {err:#}")),
            }
        }
        Ok(sample)
    }

    /// Sends one request line and reads the answer's first line, connecting first if needed.
    fn request(&mut self, request: &str) -> anyhow::Result<String> {
        if self.stats.is_none() {
            self.connect()?;
        }
        let conn = self.stats.as_mut().expect("connected above");
        conn.get_mut()
            .write_all(format!("{request}\r\n").as_bytes())
            .with_context(|| format!("{}: sending {request}", self.addr))?;
        self.read_line(request)
    }

    fn read_line(&mut self, request: &str) -> anyhow::Result<String> {
        let conn = self.stats.as_mut().expect("connected");
        let mut line = String::new();
        if conn
            .read_line(&mut line)
            .with_context(|| format!("{}: reading the {request} reply", self.addr))?
            == 0
        {
            bail!("{}: the server closed the connection", self.addr);
        }
        Ok(line.trim_end().to_string())
    }

    /// Sends `stats ...` and returns the `STAT` lines by name.
    fn stats_request(&mut self, request: &str) -> anyhow::Result<HashMap<String, String>> {
        let mut stats = HashMap::new();
        let mut line = self.request(request)?;
        loop {
            if line == "END" {
                return Ok(stats);
            }
            match line.strip_prefix("STAT ").and_then(|l| l.split_once(' ')) {
                Some((name, value)) => {
                    stats.insert(name.to_string(), value.to_string());
                }
                None => bail!("{}: unexpected reply to {request}: {line:?}", self.addr),
            }
            line = self.read_line(request)?;
        }
    }

    fn connect(&mut self) -> anyhow::Result<()> {
        let addr = self
            .addr
            .to_socket_addrs()
            .with_context(|| format!("{}: cannot resolve", self.addr))?
            .next()
            .with_context(|| format!("{}: no address", self.addr))?;
        let stream = TcpStream::connect_timeout(&addr, self.timeout)
            .with_context(|| format!("{}: cannot connect", self.addr))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_nodelay(true)?;
        self.stats = Some(BufReader::new(stream));
        let version = self.request("version")?;
        self.version = match version.strip_prefix("VERSION ") {
            Some(v) => v.to_string(),
            None => bail!("{}: unexpected reply to version: {version:?}", self.addr),
        };
        let host = host_of(&self.addr).to_string();
        self.admin_url = match self.admin {
            Admin::Off => None,
            Admin::Port(port) => Some(format!("http://{host}:{port}")),
            Admin::Discover => {
                let settings = self.stats_request("stats settings")?;
                settings
                    .get("admin_port")
                    .and_then(|p| p.parse::<u16>().ok())
                    .map(|port| format!("http://{host}:{port}"))
            }
        };
        Ok(())
    }

    fn admin_sample(
        &self,
        url: &str,
    ) -> anyhow::Result<(BTreeMap<String, Histogram>, Vec<HotKey>)> {
        let metrics = self
            .http
            .get(format!("{url}/metrics"))
            .call()?
            .body_mut()
            .read_to_string()?;
        let hot = self
            .http
            .get(format!("{url}/hotkeys?n={}", self.hot_keys))
            .call()?
            .body_mut()
            .read_to_string()?;
        Ok((latency_histograms(&metrics), parse_hot_keys(&hot)?))
    }
}

/// `host` of `host:port` (brackets of an IPv6 address kept, as a URL wants them).
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(host, _)| host)
}

const LATENCY_BUCKET: &str = "tern_command_duration_seconds_bucket{";

/// The `tern_command_duration_seconds` buckets of a `/metrics` page, by command. Reads only the
/// lines tern itself writes (`name{command="c",le="b"} n`); a general Prometheus parser would
/// bring a regex engine and a date library in for these few lines.
pub fn latency_histograms(metrics: &str) -> BTreeMap<String, Histogram> {
    let mut histograms: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(LATENCY_BUCKET) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                kv.strip_prefix(name)
                    .and_then(|v| v.strip_prefix("=\""))
                    .and_then(|v| v.strip_suffix('"'))
            })
        };
        let (Some(command), Some(bound), Ok(count)) =
            (label("command"), label("le"), value.trim().parse::<u64>())
        else {
            continue;
        };
        let bound = if bound == "+Inf" {
            f64::INFINITY
        } else {
            match bound.parse() {
                Ok(b) => b,
                Err(_) => continue,
            }
        };
        histograms
            .entry(command.to_string())
            .or_default()
            .push((bound, count));
    }
    histograms
}

/// `/hotkeys`' JSON: `{"keys": [{"key", "rate_per_second", ...}, ...], ...}`.
pub fn parse_hot_keys(json: &str) -> anyhow::Result<Vec<HotKey>> {
    let doc: serde_json::Value = serde_json::from_str(json).context("/hotkeys is not JSON")?;
    let keys = doc["keys"]
        .as_array()
        .context("/hotkeys has no \"keys\" list")?;
    Ok(keys
        .iter()
        .filter_map(|k| {
            Some(HotKey {
                key: k["key"].as_str()?.to_string(),
                requests_per_second: k["rate_per_second"].as_f64()?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tern_latency_buckets_and_nothing_else() {
        let page = "# TYPE tern_command_duration_seconds histogram\n\
            tern_command_duration_seconds_bucket{command=\"get\",le=\"0.000000128\"} 0\n\
            tern_command_duration_seconds_bucket{command=\"get\",le=\"0.000262144\"} 2\n\
            tern_command_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 3\n\
            tern_command_duration_seconds_sum{command=\"get\"} 0.0003\n\
            memcached_commands_total{command=\"get\",status=\"hit\"} 1\n\
            tern_command_duration_seconds_bucket{command=\"set\",le=\"+Inf\"} 1\n";
        let h = latency_histograms(page);
        assert_eq!(
            h["get"],
            [(0.000000128, 0), (0.000262144, 2), (f64::INFINITY, 3)]
        );
        assert_eq!(h["set"], [(f64::INFINITY, 1)]);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn hot_keys_json() {
        let keys = parse_hot_keys(
            r#"{"keys":[{"key":"user:1","estimated_requests":640,"rate_per_second":64.0}],
                "sample_every":64,"window_seconds":10.0}"#,
        )
        .unwrap();
        assert_eq!(
            keys,
            [HotKey {
                key: "user:1".into(),
                requests_per_second: 64.0
            }]
        );
        assert!(parse_hot_keys("{}").is_err());
    }

    #[test]
    fn host_of_keeps_ipv6_brackets() {
        assert_eq!(host_of("127.0.0.1:11211"), "127.0.0.1");
        assert_eq!(host_of("[::1]:11211"), "[::1]");
        assert_eq!(host_of("cache.example:11211"), "cache.example");
    }
}
