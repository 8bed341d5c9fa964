//! The generator thread: one mio event loop driving all of the thread's connections.
//!
//! Each connection owns an output buffer, an input buffer and a fixed-capacity queue of requests
//! in flight; all are reused, so a request costs no allocation once the buffers have grown to the
//! workload's size. Latency is measured from when a request was *due*: its scheduled time in an
//! open loop (so a server that falls behind shows its queueing, no coordinated omission), the
//! moment it was written in a closed loop.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mio::net::{TcpStream, UdpSocket, UnixStream};

use crate::tls::TlsClient;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, WeightedIndex, Zipf};
use tern_proto::client::{self, Dialect, Op, Reply, UDP_HEADER_LEN};

use crate::alarm::Alarm;
use crate::ketama::Ketama;
use crate::stats::Stats;
use crate::workload::{KeyDistribution, Plan, Target, ValueSize};

/// An open-loop request sent later than this after its scheduled time counts as late.
pub const LATE_AFTER: Duration = Duration::from_millis(1);
/// A UDP request unanswered for this long is counted as timed out (UDP may drop).
const UDP_TIMEOUT_NS: u64 = 1_000_000_000;
/// After the measured time, replies still in flight are awaited this long.
const DRAIN_NS: u64 = 2_000_000_000;
/// With requests in flight and no reply for this long, the server is declared stuck.
const STUCK_NS: u64 = 10_000_000_000;
/// The poll token of a worker's alarm; connections are numbered from 0.
const ALARM: Token = Token(usize::MAX);
/// `--reconnect`: after a refused connection attempt, the next one waits this long.
const RECONNECT_BACKOFF_NS: u64 = 10_000_000;
/// Requests in flight per connection while preloading.
const PRELOAD_PIPELINE: usize = 32;
const INPUT_START: usize = 64 * 1024;
const UDP_DATAGRAM_MAX: usize = 65_536;

/// What a thread is asked to do.
#[derive(Clone, Copy, Debug)]
pub enum Job {
    /// Store keys `first..end` once each; `rate`: this thread's share of the preload rate in
    /// sets per second (none: as fast as the pipeline goes).
    Preload {
        first: u64,
        end: u64,
        rate: Option<f64>,
    },
    /// Run the workload; `quota`: requests to measure (else the plan's duration); `rate`: this
    /// thread's open-loop share in requests per second.
    Measure {
        quota: Option<u64>,
        rate: Option<f64>,
    },
}

/// A thread's counts for one second of the run (the last one may be partial).
pub struct Tick {
    pub second: u64,
    /// Seconds the tick covers: 1, or less for a thread's last.
    pub span: f64,
    pub measuring: bool,
    pub stats: Stats,
}

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    Udp(UdpSocket),
    Tls(Box<TlsClient>),
}

#[derive(Clone, Copy)]
struct InFlight {
    op: Op,
    dialect: Dialect,
    command: u16,
    keys: u32,
    due: u64,
    measured: bool,
    udp_id: u16,
    /// The request's bytes, kept in `Conn::sent` to send again after a reconnect.
    len: u32,
}

struct Conn {
    socket: Socket,
    /// Index into the plan's targets.
    server: usize,
    out: Vec<u8>,
    out_sent: usize,
    /// Stream input: bytes `in_start..in_end` are received and not yet parsed.
    input: Vec<u8>,
    in_start: usize,
    in_end: usize,
    inflight: VecDeque<InFlight>,
    open: bool,
    /// Registered for writability too: only while a write is blocked, because edge-triggered
    /// EPOLLOUT fires on every ACK and would wake the loop for nothing.
    wants_writable: bool,
    udp_next_id: u16,
    udp_datagram: Vec<u8>,
    udp_message: Vec<u8>,
    /// `--reconnect`: the bytes of the requests in flight (`sent_start..`), sent again on a new
    /// connection when the server closes this one.
    sent: Vec<u8>,
    sent_start: usize,
    /// `--reconnect`: the connection was lost; a new one is due at this time (ns of the run).
    reconnect_at: Option<u64>,
}

/// A request generated but not yet placed on a connection (its keys are in `Worker::keys`).
#[derive(Clone, Copy)]
struct Pending {
    command: usize,
    keys: usize,
    server: usize,
    due: u64,
}

fn connect(
    target: &Target,
    udp: bool,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Socket> {
    Ok(match target {
        Target::Tcp { addr, .. } if tls.is_some() && !udp => {
            let config = tls.expect("checked").clone();
            Socket::Tls(Box::new(TlsClient::connect(*addr, config)?))
        }
        Target::Tcp { addr, .. } if udp => {
            let local = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            let socket = std::net::UdpSocket::bind(local)?;
            socket.connect(addr)?;
            socket.set_nonblocking(true)?;
            Socket::Udp(UdpSocket::from_std(socket))
        }
        Target::Tcp { addr, .. } => {
            let stream =
                std::net::TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            Socket::Tcp(TcpStream::from_std(stream))
        }
        Target::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path)
                .with_context(|| format!("connect to {}", path.display()))?;
            stream.set_nonblocking(true)?;
            Socket::Unix(UnixStream::from_std(stream))
        }
    })
}

fn register(registry: &mio::Registry, socket: &mut Socket, token: Token) -> io::Result<()> {
    match socket {
        Socket::Tls(s) => registry.register(&mut s.tcp, token, Interest::READABLE),
        Socket::Tcp(s) => registry.register(s, token, Interest::READABLE),
        Socket::Unix(s) => registry.register(s, token, Interest::READABLE),
        Socket::Udp(s) => registry.register(s, token, Interest::READABLE),
    }
}

fn encode(plan: &Plan, op: Op, dialect: Dialect, keys: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let key = &keys[..plan.key_len];
    match op {
        Op::Get => client::encode_get(dialect, out, key),
        Op::MultiGet => client::encode_multiget(dialect, out, keys.chunks_exact(plan.key_len)),
        Op::Set => client::encode_set(dialect, out, key, value, plan.ttl),
        Op::Delete => client::encode_delete(dialect, out, key),
        Op::Incr => client::encode_incr(dialect, out, key),
        Op::Touch => client::encode_touch(dialect, out, key, plan.ttl),
    }
}

pub struct Worker<'p> {
    plan: &'p Plan,
    ring: Option<&'p Ketama>,
    job: Job,
    rng: SmallRng,
    mix: WeightedIndex<u32>,
    zipf: Option<Zipf<f64>>,
    value_weights: Option<WeightedIndex<u32>>,
    values: Vec<u8>,
    keys: Vec<u8>,
    next_key: u64,
    poll: Poll,
    /// Wakes `poll` before an open-loop send is due.
    alarm: Alarm,
    /// Kept for `--reconnect`'s new connections.
    tls: Option<Arc<rustls::ClientConfig>>,
    conns: Vec<Conn>,
    by_server: Vec<Vec<usize>>,
    round_robin: Vec<usize>,
    pending: Option<Pending>,
    pipeline: usize,
    /// This thread's place in `0..plan.threads`, to stagger open-loop schedules.
    thread: usize,
    pub stats: Stats,
    interval: Stats,
    last_reply: u64,
}

impl<'p> Worker<'p> {
    pub fn new(
        plan: &'p Plan,
        ring: Option<&'p Ketama>,
        job: Job,
        thread: usize,
    ) -> anyhow::Result<Self> {
        let preload = matches!(job, Job::Preload { .. });
        let udp = plan.udp && !preload;
        let poll = Poll::new()?;
        let mut conns = Vec::new();
        let mut by_server = vec![Vec::new(); plan.targets.len()];
        let tls = match &plan.tls_ca {
            Some(ca) => Some(crate::tls::client_config(ca)?),
            None => None,
        };
        for (server, target) in plan.targets.iter().enumerate() {
            for _ in 0..plan.connections {
                let mut socket = connect(target, udp, tls.as_ref())?;
                register(poll.registry(), &mut socket, Token(conns.len()))?;
                by_server[server].push(conns.len());
                let pipeline = if preload {
                    PRELOAD_PIPELINE
                } else {
                    plan.pipeline
                };
                conns.push(Conn {
                    socket,
                    server,
                    out: Vec::with_capacity(4096),
                    out_sent: 0,
                    input: if udp {
                        Vec::new()
                    } else {
                        vec![0; INPUT_START]
                    },
                    in_start: 0,
                    in_end: 0,
                    inflight: VecDeque::with_capacity(pipeline),
                    open: true,
                    wants_writable: false,
                    udp_next_id: 0,
                    udp_datagram: if udp {
                        vec![0; UDP_DATAGRAM_MAX]
                    } else {
                        Vec::new()
                    },
                    udp_message: Vec::new(),
                    sent: Vec::new(),
                    sent_start: 0,
                    reconnect_at: None,
                });
            }
        }
        let (commands, weights) = if preload {
            (1, vec![1])
        } else {
            (plan.commands.len(), plan.weights.clone())
        };
        let value_weights = match &plan.value_size {
            ValueSize::Weighted(list) => Some(WeightedIndex::new(list.iter().map(|(_, w)| *w))?),
            _ => None,
        };
        let zipf = match plan.key_distribution {
            KeyDistribution::Zipf(s) => Some(Zipf::new(plan.keys, s)?),
            _ => None,
        };
        let seed = plan.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ thread as u64;
        let next_key = match job {
            Job::Preload { first, .. } => first,
            // Sequential keys: threads start spread over the key space.
            Job::Measure { .. } => plan.keys / plan.threads as u64 * thread as u64,
        };
        let alarm = Alarm::new(poll.registry(), ALARM)?;
        Ok(Worker {
            plan,
            alarm,
            ring,
            job,
            rng: SmallRng::seed_from_u64(seed),
            mix: WeightedIndex::new(weights)?,
            zipf,
            value_weights,
            values: (0..plan.value_size.max())
                .map(|i| b'a' + (i % 26) as u8)
                .collect(),
            keys: Vec::with_capacity(plan.key_len * plan.multiget),
            next_key,
            poll,
            tls,
            conns,
            by_server,
            round_robin: vec![0; plan.targets.len()],
            pending: None,
            pipeline: if preload {
                PRELOAD_PIPELINE
            } else {
                plan.pipeline
            },
            thread,
            stats: Stats::new(commands),
            interval: Stats::new(commands),
            last_reply: 0,
        })
    }

    fn key_index(&mut self) -> u64 {
        match (&self.job, &self.plan.key_distribution) {
            (Job::Preload { .. }, _) | (_, KeyDistribution::Sequential) => {
                let k = self.next_key % self.plan.keys;
                self.next_key += 1;
                k
            }
            (_, KeyDistribution::Uniform) => self.rng.gen_range(0..self.plan.keys),
            (_, KeyDistribution::Zipf(_)) => {
                let zipf = self.zipf.as_ref().expect("zipf set up");
                zipf.sample(&mut self.rng) as u64 - 1
            }
        }
    }

    fn server_of(&self, key: &[u8]) -> usize {
        self.ring.map_or(0, |ring| ring.server_for(key))
    }

    /// Picks the next request's command and keys (all on one server).
    fn generate(&mut self, due: u64) -> Pending {
        let (command, op) = match self.job {
            Job::Preload { .. } => (0, Op::Set),
            Job::Measure { .. } => {
                let c = self.mix.sample(&mut self.rng);
                (c, self.plan.commands[c].op)
            }
        };
        let wanted = if op == Op::MultiGet {
            self.plan.multiget
        } else {
            1
        };
        self.keys.clear();
        let index = self.key_index();
        self.plan.write_key(&mut self.keys, index);
        let server = self.server_of(&self.keys);
        let kl = self.plan.key_len;
        let mut tries = 0;
        while self.keys.len() < wanted * kl {
            let index = self.key_index();
            let at = self.keys.len();
            self.plan.write_key(&mut self.keys, index);
            // A multiget goes to one server: redraw keys that live elsewhere (bounded, so a
            // tiny key space on many servers cannot loop forever).
            tries += 1;
            if tries < 64 * wanted && self.server_of(&self.keys[at..]) != server {
                self.keys.truncate(at);
            }
        }
        Pending {
            command,
            keys: wanted,
            server,
            due,
        }
    }

    fn value_len(&mut self) -> usize {
        match &self.plan.value_size {
            ValueSize::Fixed(n) => *n,
            ValueSize::Range(lo, hi) => self.rng.gen_range(*lo..=*hi),
            ValueSize::Weighted(list) => {
                let i = self
                    .value_weights
                    .as_ref()
                    .expect("weights set up")
                    .sample(&mut self.rng);
                list[i].0
            }
        }
    }

    /// Puts the pending request on a connection to its server with room; false if none has.
    fn place(&mut self, now: u64, warmup_end: u64) -> anyhow::Result<bool> {
        let p = self.pending.expect("a pending request");
        let candidates = &self.by_server[p.server];
        let start = self.round_robin[p.server];
        let Some(ci) = (0..candidates.len())
            .map(|k| candidates[(start + k) % candidates.len()])
            .find(|&ci| self.conns[ci].open && self.conns[ci].inflight.len() < self.pipeline)
        else {
            if candidates
                .iter()
                .all(|&ci| !self.conns[ci].open && self.conns[ci].reconnect_at.is_none())
            {
                bail!("the server closed every connection of this thread");
            }
            return Ok(false);
        };
        self.round_robin[p.server] = (start + 1) % candidates.len();
        let (op, dialect) = match self.job {
            Job::Preload { .. } => (Op::Set, self.plan.dialect),
            Job::Measure { .. } => {
                let c = self.plan.commands[p.command];
                (c.op, c.dialect)
            }
        };
        let value_len = if op == Op::Set { self.value_len() } else { 0 };
        let measured = p.due >= warmup_end;
        let conn = &mut self.conns[ci];
        let mut udp_id = 0;
        if matches!(conn.socket, Socket::Udp(_)) {
            udp_id = conn.udp_next_id;
            conn.udp_next_id = conn.udp_next_id.wrapping_add(1);
            conn.out.clear();
            client::encode_udp_header(&mut conn.out, udp_id);
        }
        let value = &self.values[..value_len];
        let encoded_from = conn.out.len();
        encode(self.plan, op, dialect, &self.keys, value, &mut conn.out);
        let len = conn.out.len() - encoded_from;
        if self.plan.reconnect && !matches!(conn.socket, Socket::Udp(_)) {
            conn.sent.extend_from_slice(&conn.out[encoded_from..]);
        }
        if let Socket::Udp(socket) = &conn.socket {
            // A datagram that cannot be sent now is lost like one the network drops: it times out.
            let _ = socket.send(&conn.out);
            conn.out.clear();
        }
        if conn.inflight.is_empty() {
            self.last_reply = now;
        }
        conn.inflight.push_back(InFlight {
            op,
            dialect,
            command: p.command as u16,
            keys: p.keys as u32,
            due: p.due,
            measured,
            udp_id,
            len: len as u32,
        });
        if measured && now.saturating_sub(p.due) > LATE_AFTER.as_nanos() as u64 {
            self.stats.counts.late += 1;
        }
        self.pending = None;
        Ok(true)
    }

    fn flush(&mut self, now: u64) -> anyhow::Result<()> {
        let registry = self.poll.registry();
        for (ci, conn) in self.conns.iter_mut().enumerate() {
            while conn.open && conn.out_sent < conn.out.len() {
                let pending = &conn.out[conn.out_sent..];
                let written = match &mut conn.socket {
                    Socket::Tcp(s) => s.write(pending),
                    Socket::Unix(s) => s.write(pending),
                    Socket::Tls(s) => s.write(pending),
                    Socket::Udp(_) => unreachable!("datagrams are sent as they are made"),
                };
                match written {
                    Ok(n) => conn.out_sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => Self::close(conn, &mut self.stats, self.plan.reconnect, now),
                }
            }
            // A TLS session's last records may still wait for the socket.
            if let Socket::Tls(s) = &mut conn.socket {
                if conn.open && s.flush().is_err() {
                    Self::close(conn, &mut self.stats, self.plan.reconnect, now);
                }
            }
            let tls_pending = matches!(&conn.socket, Socket::Tls(s) if s.pending_output());
            let blocked = conn.open && (conn.out_sent < conn.out.len() || tls_pending);
            if conn.out_sent == conn.out.len() {
                conn.out.clear();
                conn.out_sent = 0;
            }
            if blocked != conn.wants_writable {
                let interest = if blocked {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                match &mut conn.socket {
                    Socket::Tcp(s) => registry.reregister(s, Token(ci), interest)?,
                    Socket::Unix(s) => registry.reregister(s, Token(ci), interest)?,
                    Socket::Tls(s) => registry.reregister(&mut s.tcp, Token(ci), interest)?,
                    Socket::Udp(_) => unreachable!("datagrams are sent as they are made"),
                }
                conn.wants_writable = blocked;
            }
        }
        Ok(())
    }

    /// The server closed the connection (or reset it). With `--reconnect` its requests in flight
    /// stay, to be sent again on a new connection ([`Worker::reconnect_lost`]); else they are
    /// counted unanswered.
    fn close(conn: &mut Conn, stats: &mut Stats, reconnect: bool, now: u64) {
        conn.open = false;
        if reconnect {
            conn.reconnect_at = Some(now);
            return;
        }
        stats.counts.errors.disconnected += 1;
        stats.counts.unanswered += conn.inflight.iter().filter(|f| f.measured).count() as u64;
        conn.inflight.clear();
    }

    /// `--reconnect`: opens a new connection in place of each lost one that is due, and queues
    /// on it what the old one left unanswered (timed still from when each was due). A refused
    /// attempt is counted and tried again after [`RECONNECT_BACKOFF_NS`].
    fn reconnect_lost(&mut self, now: u64) -> anyhow::Result<()> {
        for ci in 0..self.conns.len() {
            let conn = &mut self.conns[ci];
            if conn.reconnect_at.is_none_or(|at| at > now) {
                continue;
            }
            let target = &self.plan.targets[conn.server];
            let mut socket = match connect(target, false, self.tls.as_ref()) {
                Ok(socket) => socket,
                Err(_) => {
                    self.stats.counts.errors.refused += 1;
                    self.interval.counts.errors.refused += 1;
                    conn.reconnect_at = Some(now + RECONNECT_BACKOFF_NS);
                    continue;
                }
            };
            // The old socket leaves the poll as it is dropped (closed) here.
            register(self.poll.registry(), &mut socket, Token(ci))?;
            conn.socket = socket;
            conn.open = true;
            conn.reconnect_at = None;
            conn.wants_writable = false;
            conn.in_start = 0;
            conn.in_end = 0;
            conn.udp_message.clear();
            conn.out.clear();
            conn.out.extend_from_slice(&conn.sent[conn.sent_start..]);
            conn.out_sent = 0;
            self.stats.counts.reconnects += 1;
            self.interval.counts.reconnects += 1;
            if !conn.inflight.is_empty() {
                self.last_reply = now;
            }
        }
        Ok(())
    }

    fn complete(&mut self, f: InFlight, reply: &Reply, now: u64) {
        self.last_reply = now;
        let latency = now.saturating_sub(f.due).max(1);
        self.interval.latency.saturating_record(latency);
        self.interval.counts.record(f.command as usize, reply);
        if f.measured {
            self.stats.last_reply_ns = now;
            self.stats.latency.saturating_record(latency);
            self.stats.counts.record(f.command as usize, reply);
        }
    }

    fn read_stream(&mut self, ci: usize, now: u64) -> anyhow::Result<()> {
        loop {
            let conn = &mut self.conns[ci];
            if !conn.open {
                return Ok(());
            }
            if conn.in_end == conn.input.len() {
                if conn.in_start > 0 {
                    conn.input.copy_within(conn.in_start..conn.in_end, 0);
                    conn.in_end -= conn.in_start;
                    conn.in_start = 0;
                } else {
                    // A reply larger than the buffer: grow once, keep the size for later.
                    let len = conn.input.len() * 2;
                    conn.input.resize(len, 0);
                }
            }
            let buf = &mut conn.input[conn.in_end..];
            let read = match &mut conn.socket {
                Socket::Tcp(s) => s.read(buf),
                Socket::Unix(s) => s.read(buf),
                Socket::Tls(s) => s.read(buf),
                Socket::Udp(_) => unreachable!("datagrams are read by read_datagrams"),
            };
            match read {
                Ok(0) => {
                    Self::close(conn, &mut self.stats, self.plan.reconnect, now);
                    return Ok(());
                }
                Ok(n) => {
                    let drained = conn.in_end + n < conn.input.len();
                    conn.in_end += n;
                    self.parse_replies(ci, now)?;
                    // A short read emptied the socket: skip the read that would only say
                    // WouldBlock (one syscall per reply saved); new bytes raise a new edge.
                    if drained {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    Self::close(conn, &mut self.stats, self.plan.reconnect, now);
                    return Ok(());
                }
            }
        }
    }

    fn parse_replies(&mut self, ci: usize, now: u64) -> anyhow::Result<()> {
        loop {
            let conn = &mut self.conns[ci];
            let received = &conn.input[conn.in_start..conn.in_end];
            let Some(&front) = conn.inflight.front() else {
                if !received.is_empty() {
                    bail!(
                        "unexpected bytes from the server, more than its replies (does it speak \
                         this protocol?): {:?}",
                        String::from_utf8_lossy(&received[..received.len().min(80)])
                    );
                }
                break;
            };
            let Some(reply) = client::parse_reply(front.dialect, front.op, front.keys, received)?
            else {
                break;
            };
            conn.in_start += reply.len;
            conn.inflight.pop_front();
            if self.plan.reconnect {
                conn.sent_start += front.len as usize;
                if conn.sent_start == conn.sent.len() {
                    conn.sent.clear();
                    conn.sent_start = 0;
                }
            }
            self.complete(front, &reply, now);
        }
        let conn = &mut self.conns[ci];
        if conn.in_start == conn.in_end {
            conn.in_start = 0;
            conn.in_end = 0;
        }
        Ok(())
    }

    fn read_datagrams(&mut self, ci: usize, now: u64) -> anyhow::Result<()> {
        loop {
            let conn = &mut self.conns[ci];
            let Socket::Udp(socket) = &conn.socket else {
                unreachable!("only UDP connections get here");
            };
            let n = match socket.recv(&mut conn.udp_datagram) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("receive a UDP reply"),
            };
            let Some(header) = client::parse_udp_header(&conn.udp_datagram[..n]) else {
                continue;
            };
            let Some(&front) = conn.inflight.front() else {
                continue; // a late answer to a request already timed out
            };
            if header.request_id != front.udp_id {
                continue;
            }
            // memcached 1.6 sends each part of a reply (every VALUE, then END) as its own
            // datagram, each numbered 0 of 1: so the reply is complete when it parses, not when
            // the frame header says so.
            conn.udp_message
                .extend_from_slice(&conn.udp_datagram[UDP_HEADER_LEN..n]);
            let Some(reply) =
                client::parse_reply(front.dialect, front.op, front.keys, &conn.udp_message)?
            else {
                continue;
            };
            conn.udp_message.clear();
            conn.inflight.pop_front();
            self.complete(front, &reply, now);
        }
    }

    fn expire_datagrams(&mut self, now: u64) {
        for conn in &mut self.conns {
            while let Some(front) = conn.inflight.front() {
                if now.saturating_sub(front.due) < UDP_TIMEOUT_NS {
                    break;
                }
                if front.measured {
                    self.stats.counts.errors.timeout += 1;
                }
                self.interval.counts.errors.timeout += 1;
                conn.inflight.pop_front();
                conn.udp_message.clear();
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.conns.iter().map(|c| c.inflight.len()).sum()
    }

    /// Runs the job. `start` is shared by all threads so their seconds line up; ticks go to `ticks`.
    pub fn run(mut self, start: Instant, ticks: Option<&Sender<Tick>>) -> anyhow::Result<Stats> {
        let ns = |d: Duration| d.as_nanos() as u64;
        let now_ns = || ns(start.elapsed());
        let (quota, rate) = match self.job {
            Job::Preload { first, end, rate } => (Some(end - first), rate),
            Job::Measure { quota, rate } => (quota, rate),
        };
        let warmup_end = match self.job {
            Job::Preload { .. } => 0,
            Job::Measure { .. } => ns(self.plan.warmup),
        };
        let end = match quota {
            Some(_) => u64::MAX,
            None => warmup_end + ns(self.plan.duration),
        };
        let udp = self
            .conns
            .iter()
            .any(|c| matches!(c.socket, Socket::Udp(_)));
        let gap_ns = rate.map(|r| 1e9 / r);
        let exp = match (rate, self.plan.poisson) {
            (Some(r), true) => Some(Exp::new(r)?),
            _ => None,
        };
        // Open-loop schedule: due times not yet sent, oldest first.
        let mut backlog: VecDeque<u64> = VecDeque::with_capacity(1024);
        // Threads' constant-rate schedules interleave instead of all firing at once.
        let stagger = gap_ns.map_or(0.0, |gap| {
            gap * self.thread as f64 / self.plan.threads as f64
        });
        let mut next_due = now_ns() as f64 + stagger;
        let mut scheduled = 0u64; // measured requests scheduled (open) or placed (closed)
        let mut next_tick = 1_000_000_000u64;
        let mut events = Events::with_capacity(1024);
        loop {
            let now = now_ns();
            if self.plan.reconnect {
                self.reconnect_lost(now)?;
            }
            let mut schedule_open = match quota {
                Some(q) => scheduled < q,
                None => now < end,
            };
            if let Some(gap) = gap_ns {
                while schedule_open && next_due as u64 <= now {
                    let due = next_due as u64;
                    if quota.is_some() || due < end {
                        backlog.push_back(due);
                        scheduled += u64::from(due >= warmup_end);
                    }
                    next_due += match &exp {
                        Some(exp) => exp.sample(&mut self.rng) * 1e9,
                        None => gap,
                    };
                    schedule_open = match quota {
                        Some(q) => scheduled < q,
                        None => (next_due as u64) < end,
                    };
                }
                while let Some(&due) = backlog.front() {
                    if self.pending.is_none() {
                        self.pending = Some(self.generate(due));
                    }
                    if !self.place(now, warmup_end)? {
                        break;
                    }
                    backlog.pop_front();
                }
            } else {
                while schedule_open {
                    match &mut self.pending {
                        None => self.pending = Some(self.generate(now)),
                        // Closed loop: a request waiting for a free connection is timed from
                        // when it goes out, as memtier does.
                        Some(p) => p.due = now,
                    }
                    if !self.place(now, warmup_end)? {
                        break;
                    }
                    scheduled += u64::from(now >= warmup_end);
                    schedule_open = match quota {
                        Some(q) => scheduled < q,
                        None => now < end,
                    };
                }
            }
            self.flush(now)?;
            // Ticks go out before the loop may end, so no thread skips a second.
            while now >= next_tick {
                if let Some(ticks) = ticks {
                    let stats = std::mem::replace(
                        &mut self.interval,
                        Stats::new(self.stats.counts.by_command.len()),
                    );
                    let second = next_tick / 1_000_000_000 - 1;
                    let measuring = next_tick > warmup_end;
                    // The receiver hangs up only when the run is abandoned.
                    let _ = ticks.send(Tick {
                        second,
                        span: 1.0,
                        measuring,
                        stats,
                    });
                }
                next_tick += 1_000_000_000;
            }
            let sending = schedule_open || !backlog.is_empty();
            let in_flight = self.in_flight();
            if !sending && in_flight == 0 {
                break;
            }
            if quota.is_none() && now > end.saturating_add(DRAIN_NS) {
                self.stats.counts.unanswered += self
                    .conns
                    .iter()
                    .flat_map(|c| &c.inflight)
                    .filter(|f| f.measured)
                    .count() as u64;
                self.stats.counts.unanswered += backlog.len() as u64;
                break;
            }
            if in_flight > 0 && now.saturating_sub(self.last_reply) > STUCK_NS && !udp {
                bail!(
                    "no reply from the server for {} s",
                    STUCK_NS / 1_000_000_000
                );
            }
            let mut wake = next_tick.min(now + 100_000_000);
            if schedule_open && gap_ns.is_some() {
                wake = wake.min(next_due as u64);
            }
            if quota.is_none() {
                wake = wake.min(if now < warmup_end {
                    warmup_end
                } else if now < end {
                    end
                } else {
                    end + DRAIN_NS
                });
            }
            if let Some(at) = self.conns.iter().filter_map(|c| c.reconnect_at).min() {
                wake = wake.min(at);
            }
            let until = wake.saturating_sub(now);
            let timeout = match gap_ns {
                // Open loop: sleep until `spin` before the next send is due, then poll without
                // waiting, so sends leave on time despite wake-up delays. The alarm wakes the
                // poll to the microsecond; the poll's own timeout, rounded up to milliseconds,
                // is a backstop.
                Some(_) if schedule_open => match until.saturating_sub(ns(self.plan.spin)) {
                    0 => Duration::ZERO,
                    sleep => {
                        self.alarm.set(Duration::from_nanos(sleep))?;
                        Duration::from_nanos(until)
                    }
                },
                _ => Duration::from_nanos(until),
            };
            self.poll.poll(&mut events, Some(timeout))?;
            let now = now_ns();
            for event in events.iter() {
                if event.token() == ALARM {
                    continue;
                }
                let ci = event.token().0;
                if udp {
                    self.read_datagrams(ci, now)?;
                } else if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.read_stream(ci, now)?;
                }
            }
            if udp {
                self.expire_datagrams(now);
            }
        }
        if let Some(ticks) = ticks {
            let now = now_ns();
            let _ = ticks.send(Tick {
                second: now / 1_000_000_000,
                span: (now + 1_000_000_000 - next_tick) as f64 / 1e9,
                measuring: now_ns() > warmup_end,
                stats: self.interval.clone(),
            });
        }
        Ok(self.stats)
    }
}
