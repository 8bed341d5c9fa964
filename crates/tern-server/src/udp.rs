//! memcached's UDP transport (`-U port`, off by default): each datagram starts with an 8-byte
//! frame header (request id, sequence number, datagram count, reserved; big-endian u16s) and
//! holds whole requests. Each worker owns one SO_REUSEPORT socket registered in its own poll.
//!
//! Replies follow memcached 1.6: every response (each key of a multi-get, each other command)
//! is its own message, cut into datagrams of at most [`DATAGRAM`] bytes, header included, each
//! carrying the request's id, its sequence number and the message's datagram count. A request
//! that says it spans several datagrams is dropped, as memcached drops it; so is a request cut
//! off by the end of its datagram (a line without its newline, a storage command without all
//! of its data, part of a binary frame), which counts as a refused request
//! ([`Executor::record_refused`]). Binary requests (first payload byte 0x80) get one message
//! per frame.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::Context;
use mio::net::UdpSocket;
use socket2::{Domain, Socket, Type};
use tern_proto::ascii::{self, Command, Frame, Keys};
use tern_proto::binary as bin;

use crate::exec::{After, Executor, Step};
use crate::{binary, meta};

/// The frame header memcached puts before every UDP payload.
pub const HEADER: usize = 8;
/// Largest datagram memcached sends (header included), so replies fit a typical MTU.
pub const DATAGRAM: usize = 1400;
/// Largest request datagram read, as memcached's UDP read buffer.
const RECEIVE: usize = 64 * 1024;
/// Datagrams served per turn of the event loop, so a flood of them cannot starve the worker's
/// TCP connections; the worker comes back for the rest after serving those.
pub const DATAGRAMS_PER_TURN: usize = 64;

/// Binds `workers` UDP sockets on `addr`, sharing the port through SO_REUSEPORT (the kernel
/// spreads datagrams by source address over the workers).
pub fn bind(addr: SocketAddr, workers: usize) -> anyhow::Result<Vec<UdpSocket>> {
    (0..workers)
        .map(|_| {
            let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            if addr.is_ipv6() {
                socket.set_only_v6(true)?;
            }
            socket.bind(&addr.into())?;
            socket.set_nonblocking(true)?;
            let std_socket: std::net::UdpSocket = socket.into();
            Ok(UdpSocket::from_std(std_socket))
        })
        .collect::<io::Result<_>>()
        .with_context(|| format!("cannot listen on UDP {addr}"))
}

/// A worker's UDP socket and its buffers (allocated once, reused for every datagram).
pub struct UdpServer {
    pub socket: UdpSocket,
    request: Box<[u8]>,
    /// One response, framed into datagrams when complete.
    reply: Vec<u8>,
    datagram: Vec<u8>,
}

impl UdpServer {
    pub fn new(socket: UdpSocket) -> UdpServer {
        UdpServer {
            socket,
            request: vec![0; RECEIVE].into_boxed_slice(),
            reply: Vec::with_capacity(DATAGRAM),
            datagram: Vec::with_capacity(DATAGRAM),
        }
    }

    /// Answers the datagrams waiting on the socket, up to [`DATAGRAMS_PER_TURN`]. True when it
    /// stopped there: more may be waiting, and no new readiness edge will say so.
    ///
    /// The turn is timed as a TCP wake-up is: its requests form one latency batch, from the
    /// clock read after the first receive to the one after the last send.
    pub fn serve(&mut self, exec: &Executor<'_>, max_line: usize) -> bool {
        let mut started = None;
        let mut more = true;
        for _ in 0..DATAGRAMS_PER_TURN {
            let (len, peer) = match self.socket.recv_from(&mut self.request) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        tracing::debug!("UDP receive failed: {e}");
                    }
                    more = false;
                    break;
                }
            };
            started.get_or_insert_with(Instant::now);
            exec.worker.metrics.read_bytes(len as u64);
            let request = &self.request[..len];
            // memcached ignores datagrams with no payload and requests of several datagrams.
            if len <= HEADER || request[4..6] != [0, 1] {
                continue;
            }
            let id = [request[0], request[1]];
            let mut out = Responder {
                socket: &self.socket,
                peer,
                id,
                reply: &mut self.reply,
                datagram: &mut self.datagram,
                exec,
            };
            serve_payload(exec, &request[HEADER..], max_line, &mut out);
        }
        if let Some(started) = started {
            exec.worker.finish_batch(started);
        }
        more
    }
}

/// Frames and sends the responses to one request datagram.
struct Responder<'a> {
    socket: &'a UdpSocket,
    peer: SocketAddr,
    id: [u8; 2],
    /// The response being built; [`Responder::send`] frames and sends it.
    reply: &'a mut Vec<u8>,
    datagram: &'a mut Vec<u8>,
    exec: &'a Executor<'a>,
}

impl Responder<'_> {
    /// Sends the response in `reply` (if any) as one message of numbered datagrams.
    fn send(&mut self) {
        if self.reply.is_empty() {
            return;
        }
        let chunk = DATAGRAM - HEADER;
        let total = self.reply.len().div_ceil(chunk);
        for (seq, part) in self.reply.chunks(chunk).enumerate() {
            self.datagram.clear();
            self.datagram.extend_from_slice(&self.id);
            // Sequence numbers and counts are 16-bit on the wire; a value over 90 MB would
            // wrap them, far beyond any item size.
            self.datagram.extend_from_slice(&(seq as u16).to_be_bytes());
            self.datagram
                .extend_from_slice(&(total as u16).to_be_bytes());
            self.datagram.extend_from_slice(&[0, 0]);
            self.datagram.extend_from_slice(part);
            match self.socket.send_to(self.datagram, self.peer) {
                Ok(n) => self.exec.worker.metrics.written_bytes(n as u64),
                // UDP promises nothing: a full socket buffer drops the rest of this reply,
                // which the client sees as a missing datagram, as with any loss.
                Err(e) => {
                    tracing::debug!("UDP send to {} failed: {e}", self.peer);
                    break;
                }
            }
        }
        self.reply.clear();
    }
}

/// Runs the requests of one datagram's payload, one response message each.
fn serve_payload(exec: &Executor<'_>, mut payload: &[u8], max_line: usize, out: &mut Responder) {
    if payload.first() == Some(&bin::REQUEST_MAGIC) {
        // One message per frame, as memcached answers; the frame's length is in its header,
        // and a frame cut off by the end of the datagram is dropped.
        while !payload.is_empty() {
            let frame = payload.get(..bin::HEADER_LEN).and_then(|header| {
                let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
                payload.get(..bin::HEADER_LEN + body as usize)
            });
            let Some(frame) = frame else {
                exec.record_refused();
                return;
            };
            let progress = binary::serve(exec, frame, usize::MAX, out.reply);
            out.send();
            if progress.after != After::Continue {
                return;
            }
            payload = &payload[frame.len()..];
        }
        return;
    }
    while !payload.is_empty() {
        let (consumed, parsed) = match ascii::parse(payload, max_line) {
            Frame::Line { consumed, parsed } => (consumed, parsed),
            // The rest of the request is not in this datagram: drop it.
            Frame::Incomplete | Frame::LineTooLong => {
                exec.record_refused();
                return;
            }
        };
        let after = &payload[consumed..];
        let step = match parsed {
            Err(rejection) => {
                exec.reject(rejection, out.reply);
                Step::Done(0)
            }
            Ok(cmd @ Command::Store { .. }) => exec.store_command(cmd, after, out.reply),
            Ok(Command::Meta { line }) => meta::run(exec, line, after, out.reply),
            Ok(Command::Get {
                keys,
                with_cas,
                touch,
            }) if !keys.is_empty() => {
                // memcached answers each key of a multi-get as its own message; `END` goes
                // with the last one.
                let mut keys = keys.peekable();
                while let Some(key) = keys.next() {
                    let single = Command::Get {
                        keys: Keys::new(key),
                        with_cas,
                        touch,
                    };
                    exec.execute(single, out.reply);
                    if key.len() > ascii::KEY_MAX_LENGTH {
                        break;
                    }
                    if keys.peek().is_some() && out.reply.ends_with(ascii::END) {
                        out.reply.truncate(out.reply.len() - ascii::END.len());
                    }
                    out.send();
                }
                Step::Done(0)
            }
            // quit and shutdown have no connection to close here.
            Ok(cmd) => {
                exec.execute(cmd, out.reply);
                Step::Done(0)
            }
        };
        let used = match step {
            Step::Done(data) | Step::Swallow(data) => consumed + data,
            // The data block is not in this datagram: drop the request.
            Step::Need(_) => {
                exec.record_refused();
                return;
            }
        };
        out.send();
        payload = payload.get(used..).unwrap_or(&[]);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tern_store::{Clock, Config, Store};

    use super::*;
    use crate::config::Settings;
    use crate::exec::Shared;

    #[test]
    fn a_turn_serves_a_bounded_number_of_datagrams() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let shared = Shared::new(Settings::default(), store);
        let exec = Executor::new(&shared, 0);
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let addr = socket.local_addr().unwrap();
        let mut server = UdpServer::new(UdpSocket::from_std(socket));
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let waiting = DATAGRAMS_PER_TURN + 10;
        for id in 0..waiting as u16 {
            let mut datagram = [id.to_be_bytes(), [0, 0], [0, 1], [0, 0]].concat();
            datagram.extend_from_slice(b"get k\r\n");
            client.send_to(&datagram, addr).unwrap();
        }
        assert!(server.serve(&exec, 2048), "stops at the budget");
        assert!(!server.serve(&exec, 2048), "then drains the rest");
        client.set_nonblocking(true).unwrap();
        let mut replies = 0;
        let mut buf = [0u8; 64];
        while let Ok(n) = client.recv(&mut buf) {
            assert_eq!(&buf[8..n], b"END\r\n");
            replies += 1;
        }
        assert_eq!(replies, waiting);
        // Each turn timed its own requests: none wait in the batch for a TCP connection.
        let get = tern_admin::Command::Get as usize;
        let timed = exec.worker.metrics.snapshot().latency[get].count();
        assert_eq!(timed, waiting as u64);
        assert!(exec.worker.batch.is_empty());
    }
}
