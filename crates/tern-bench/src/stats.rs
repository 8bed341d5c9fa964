//! What a generator thread counts, how threads' counts merge, and the summary a run reports.

use hdrhistogram::Histogram;
use serde::Serialize;
use tern_proto::client::{ErrorKind, Reply, Status};

/// Latencies are recorded in nanoseconds, up to a minute, to 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Counts of one thread, or of a whole run once merged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Replies received, by index into the plan's commands.
    #[serde(skip)]
    pub by_command: Vec<u64>,
    pub replies: u64,
    pub hits: u64,
    pub misses: u64,
    pub not_found: u64,
    pub not_stored: u64,
    pub exists: u64,
    pub errors: ErrorCounts,
    /// Open loop: requests sent more than `LATE_AFTER` after their scheduled time.
    pub late: u64,
    /// Requests sent and never answered (the run ended, or the connection closed).
    pub unanswered: u64,
    /// `--reconnect`: connections opened again after the server closed them.
    pub reconnects: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// `ERROR`
    pub error: u64,
    /// `CLIENT_ERROR ...`
    pub client_error: u64,
    /// `SERVER_ERROR ...`
    pub server_error: u64,
    /// Binary statuses with no name above.
    pub binary_status: u64,
    /// UDP replies that did not arrive within a second.
    pub timeout: u64,
    /// Connections the server closed (without `--reconnect`).
    pub disconnected: u64,
    /// `--reconnect`: connection attempts that failed (refused, reset, timed out).
    pub refused: u64,
}

impl ErrorCounts {
    pub fn total(&self) -> u64 {
        self.error
            + self.client_error
            + self.server_error
            + self.binary_status
            + self.timeout
            + self.disconnected
            + self.refused
    }

    /// Replies that were errors: `ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, binary error statuses.
    pub fn replies(&self) -> u64 {
        self.error + self.client_error + self.server_error + self.binary_status
    }

    fn add(&mut self, o: &ErrorCounts) {
        self.error += o.error;
        self.client_error += o.client_error;
        self.server_error += o.server_error;
        self.binary_status += o.binary_status;
        self.timeout += o.timeout;
        self.disconnected += o.disconnected;
        self.refused += o.refused;
    }
}

impl Counts {
    pub fn new(commands: usize) -> Counts {
        Counts {
            by_command: vec![0; commands],
            ..Counts::default()
        }
    }

    pub fn record(&mut self, command: usize, reply: &Reply) {
        self.by_command[command] += 1;
        self.replies += 1;
        self.hits += u64::from(reply.hits);
        self.misses += u64::from(reply.misses);
        match reply.status {
            Status::Ok => {}
            Status::NotFound => self.not_found += 1,
            Status::NotStored => self.not_stored += 1,
            Status::Exists => self.exists += 1,
            Status::Error(ErrorKind::Error) => self.errors.error += 1,
            Status::Error(ErrorKind::ClientError) => self.errors.client_error += 1,
            Status::Error(ErrorKind::ServerError) => self.errors.server_error += 1,
            Status::Error(ErrorKind::BinaryStatus(_)) => self.errors.binary_status += 1,
        }
    }

    pub fn add(&mut self, o: &Counts) {
        if self.by_command.len() < o.by_command.len() {
            self.by_command.resize(o.by_command.len(), 0);
        }
        for (a, b) in self.by_command.iter_mut().zip(&o.by_command) {
            *a += b;
        }
        self.replies += o.replies;
        self.hits += o.hits;
        self.misses += o.misses;
        self.not_found += o.not_found;
        self.not_stored += o.not_stored;
        self.exists += o.exists;
        self.errors.add(&o.errors);
        self.late += o.late;
        self.unanswered += o.unanswered;
        self.reconnects += o.reconnects;
    }
}

/// Everything one thread measured.
#[derive(Clone, Debug)]
pub struct Stats {
    pub latency: Histogram<u64>,
    pub counts: Counts,
    /// When the last measured reply arrived, in ns from the run's start.
    pub last_reply_ns: u64,
}

impl Stats {
    pub fn new(commands: usize) -> Stats {
        Stats {
            latency: new_histogram(),
            counts: Counts::new(commands),
            last_reply_ns: 0,
        }
    }

    pub fn add(&mut self, o: &Stats) {
        self.latency.add(&o.latency).expect("same histogram bounds");
        self.counts.add(&o.counts);
        self.last_reply_ns = self.last_reply_ns.max(o.last_reply_ns);
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
        }
    }
}
