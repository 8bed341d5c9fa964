//! The admin HTTP/1.1 endpoint: a `tiny_http` server answered from one thread of its own, off
//! the workers' event loops. It asks the server for data through [`AdminSource`] on each
//! request, so nothing is computed unless someone scrapes.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{json, Map, Value};
use tiny_http::{Header, Method, Request, Response, Server};

use crate::hotkeys::HotKeysReport;
use crate::snapshot::{general_stats, MemcachedCounters, Snapshot};
use crate::stats_text::DEFAULT_HOT_KEYS;
use crate::worker::{Command, Outcome};

/// What the server provides to the admin endpoint. Called from the admin thread.
pub trait AdminSource: Send + Sync + 'static {
    /// The current numbers (workers' metrics read with [`crate::WorkerMetrics::snapshot`], the
    /// store's stats, process facts).
    fn snapshot(&self) -> Snapshot;
    /// The settings in force, as `stats settings` prints them.
    fn settings(&self) -> Vec<(String, String)>;
    /// The `n` hottest keys ([`crate::HotKeys::top`]).
    fn hot_keys(&self, n: usize) -> HotKeysReport;
    /// `Ok` when the server is serving; `Err(reason)` makes `/health` answer 503.
    fn health(&self) -> Result<(), String>;
}

/// A running admin endpoint; stops when dropped.
pub struct AdminServer {
    server: Arc<Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port) and serves from a new thread named `tern-admin`.
    pub fn start(
        addr: impl ToSocketAddrs,
        source: Arc<dyn AdminSource>,
    ) -> io::Result<AdminServer> {
        AdminServer::from_listener(TcpListener::bind(addr)?, source)
    }

    /// Serves on a socket bound earlier (the server binds before it daemonizes, so a port in use
    /// is reported on the terminal, and starts this thread after the fork).
    pub fn from_listener(
        listener: TcpListener,
        source: Arc<dyn AdminSource>,
    ) -> io::Result<AdminServer> {
        let server = Arc::new(Server::from_listener(listener, None).map_err(io::Error::other)?);
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("admin endpoint bound to a non-IP address"))?;
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("tern-admin".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    respond(request, source.as_ref());
                }
            })?;
        Ok(AdminServer {
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// The address the endpoint listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
}

fn respond(request: Request, source: &dyn AdminSource) {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let (status, content_type, body) = if *request.method() != Method::Get {
        (
            405,
            "text/plain; charset=utf-8",
            "method not allowed\n".to_string(),
        )
    } else {
        route(path, query, source)
    };
    let response = Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type));
    // A client that hung up is not the server's problem.
    let _ = request.respond(response);
}

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

fn route(path: &str, query: &str, source: &dyn AdminSource) -> (u16, &'static str, String) {
    match path {
        "/metrics" => (
            200,
            crate::prometheus::CONTENT_TYPE,
            crate::prometheus::encode(&source.snapshot()),
        ),
        "/stats" => (200, JSON, stats_json(&source.snapshot()).to_string()),
        "/health" => match source.health() {
            Ok(()) => (200, TEXT, "OK\n".into()),
            Err(reason) => (503, TEXT, format!("{reason}\n")),
        },
        "/version" => (200, TEXT, format!("{}\n", source.snapshot().version)),
        "/settings" => {
            let map: Map<String, Value> = source
                .settings()
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            (200, JSON, Value::Object(map).to_string())
        }
        "/hotkeys" => match hot_keys_count(query) {
            Some(n) => (200, JSON, source.hot_keys(n).to_json().to_string()),
            None => (400, TEXT, "n must be a non-negative integer\n".into()),
        },
        _ => (404, TEXT, "not found\n".into()),
    }
}

/// `n` from a query string such as `n=20`; [`DEFAULT_HOT_KEYS`] when absent.
fn hot_keys_count(query: &str) -> Option<usize> {
    match query.split('&').find_map(|kv| kv.strip_prefix("n=")) {
        Some(n) => n.parse().ok(),
        None => Some(DEFAULT_HOT_KEYS),
    }
}

/// The `/stats` document: memcached's general stats (numbers as JSON numbers), per-command
/// outcome counts and latency summaries, per-worker counters, and the segment store.
pub fn stats_json(s: &Snapshot) -> Value {
    let general: Map<String, Value> = general_stats(s)
        .into_iter()
        .map(|(k, v)| {
            let value = if k == "version" {
                Value::String(v)
            } else if let Ok(n) = v.parse::<u64>() {
                json!(n)
            } else if let Ok(f) = v.parse::<f64>() {
                json!(f)
            } else {
                Value::String(v)
            };
            (k.to_string(), value)
        })
        .collect();
    let t = s.totals();
    let mut commands = Map::new();
    for &c in Command::ALL {
        if t.command_total(c) == 0 {
            continue;
        }
        let outcomes: Map<String, Value> = Outcome::ALL
            .iter()
            .filter(|&&o| t.get(c, o) > 0)
            .map(|&o| (o.label().to_string(), json!(t.get(c, o))))
            .collect();
        let h = &t.latency[c as usize];
        let micros = |q: f64| h.quantile_upper_bound_nanos(q).map(|ns| ns as f64 / 1e3);
        let count = h.count();
        commands.insert(
            c.label().to_string(),
            json!({
                "outcomes": outcomes,
                "latency": {
                    "count": count,
                    "mean_us": if count == 0 { None } else { Some(h.sum_nanos as f64 / count as f64 / 1e3) },
                    "p50_us_at_most": micros(0.5),
                    "p99_us_at_most": micros(0.99),
                    "p999_us_at_most": micros(0.999),
                },
            }),
        );
    }
    let workers: Vec<Value> = s
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            json!({
                "worker": i,
                "requests": w.requests(),
                "wakeups": w.wakeups,
                "connections": w.current_connections(),
                "bytes_read": w.bytes_read,
                "bytes_written": w.bytes_written,
            })
        })
        .collect();
    let seg = &s.store.segments;
    let m = MemcachedCounters::from_totals(&t);
    json!({
        "stats": general,
        "commands": commands,
        "memcached_commands": m.exporter_series().iter().map(|(c, st, v)| json!({"command": c, "status": st, "value": v})).collect::<Vec<_>>(),
        "workers": workers,
        "segments": {
            "segment_size": seg.segment_bytes,
            "segments_total": seg.segments_total,
            "segments_used": seg.segments_used(),
            "segments_free": seg.segments_free,
            "heap_bytes": seg.heap_bytes(),
            "live_bytes": seg.live_bytes,
            "dead_bytes": seg.dead_bytes,
            "merges": seg.merges,
            "segments_expired": seg.segments_expired,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_keys_count_parses_n() {
        assert_eq!(hot_keys_count(""), Some(DEFAULT_HOT_KEYS));
        assert_eq!(hot_keys_count("n=3"), Some(3));
        assert_eq!(hot_keys_count("x=1&n=7"), Some(7));
        assert_eq!(hot_keys_count("n=-1"), None);
    }
}
