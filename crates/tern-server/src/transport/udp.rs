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
//! ([`Ops::refused`]). Binary requests (first payload byte 0x80) get one message per frame.
//! The payload runs through the same serve loops as a connection's input (`text.rs`,
//! `binary.rs`), with [`Replies`] hooks that send each response (and each key of a multi-get)
//! as its own message.

use std::io;
use std::net::SocketAddr;

use anyhow::Context;
use mio::net::UdpSocket;
use socket2::{Domain, Socket, Type};
use tern_proto::binary as bin;

use crate::config::Protocol;
use crate::ops::Ops;
use crate::wire::framing::Replies;
use crate::wire::{binary, text};

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
    pub fn serve(&mut self, ops: &Ops<'_>, max_line: usize) -> bool {
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
            started.get_or_insert_with(crate::state::recording::monotonic_nanos);
            ops.worker.metrics.read_bytes(len as u64);
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
                ops,
            };
            serve_payload(ops, &request[HEADER..], max_line, &mut out);
        }
        if let Some(started) = started {
            ops.worker.finish_batch(started);
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
    ops: &'a Ops<'a>,
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
                Ok(n) => self.ops.worker.metrics.written_bytes(n as u64),
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

/// memcached answers each response as its own message, and each key of a multi-get too (`END`
/// goes with the last one).
impl Replies for Responder<'_> {
    fn buf(&mut self) -> &mut Vec<u8> {
        self.reply
    }

    fn between_keys(&mut self) {
        self.send();
    }

    fn request_done(&mut self) {
        self.send();
    }
}

/// Runs the requests of one datagram's payload through the same serve loops as a connection,
/// one response message each. A request cut off by the end of the datagram is dropped, and
/// `quit` or `shutdown` ends the datagram (there is no connection to close).
fn serve_payload(ops: &Ops<'_>, payload: &[u8], max_line: usize, out: &mut Responder) {
    let binary = match ops.shared.settings.protocol {
        Protocol::Auto => payload.first() == Some(&bin::REQUEST_MAGIC),
        Protocol::Ascii => false,
        Protocol::Binary => true,
    };
    let progress = if binary {
        binary::serve(ops, payload, usize::MAX, out)
    } else {
        text::serve(ops, payload, usize::MAX, max_line, out)
    };
    if progress.need > 0 {
        ops.refused();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tern_store::{Clock, Config, Store};

    use super::*;
    use crate::config::Settings;
    use crate::state::shared::Shared;

    #[test]
    fn a_turn_serves_a_bounded_number_of_datagrams() {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let shared = Shared::new(Settings::default(), store);
        let ops = Ops::new(&shared, 0);
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
        assert!(server.serve(&ops, 2048), "stops at the budget");
        assert!(!server.serve(&ops, 2048), "then drains the rest");
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
        let timed = ops.worker.metrics.snapshot().latency[get].count();
        assert_eq!(timed, waiting as u64);
        assert!(ops.worker.batch.is_empty());
    }
}
