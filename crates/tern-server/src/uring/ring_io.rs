//! [`RingIo`]: a connection socket's I/O as the io_uring engine does it.

use super::*;

/// A connection socket as the io_uring engine drives it: the bytes its receives brought, not
/// yet read by the connection, and the replies written to it, queued for a send.
pub struct RingIo {
    /// Owns the descriptor (for `stats conns`, `watch`'s second handle and the close); never
    /// read or written directly.
    pub socket: Stream,
    pub(super) input: Vec<u8>,
    pub(super) read_at: usize,
    /// The peer closed its side, or the receive failed (errno): reads say so once the input
    /// is consumed.
    pub(super) eof: bool,
    pub(super) error: Option<i32>,
    /// Written, not handed to a send yet.
    pub(super) queued: Vec<u8>,
    /// The bytes of the send in flight, from `sent_at`: untouched until it completes.
    pub(super) sending: Vec<u8>,
    pub(super) sent_at: usize,
    pub(super) in_flight: bool,
}

impl RingIo {
    pub(super) fn new(socket: Stream) -> RingIo {
        RingIo {
            socket,
            input: Vec::new(),
            read_at: 0,
            eof: false,
            error: None,
            queued: Vec::new(),
            sending: Vec::new(),
            sent_at: 0,
            in_flight: false,
        }
    }

    /// Replies queued or in flight: the connection is not done writing.
    pub fn pending_output(&self) -> bool {
        self.in_flight || !self.queued.is_empty()
    }

    pub(super) fn unread(&self) -> usize {
        self.input.len() - self.read_at
    }

    /// Frees staging buffers grown past what an ordinary turn needs.
    pub(super) fn shrink(&mut self) {
        if self.unread() == 0 && self.input.capacity() > KEEP_CAPACITY {
            self.input = Vec::new();
            self.read_at = 0;
        }
        if !self.in_flight && self.sending.capacity() > KEEP_CAPACITY {
            self.sending = Vec::new();
        }
        if self.queued.is_empty() && self.queued.capacity() > KEEP_CAPACITY {
            self.queued = Vec::new();
        }
    }
}

impl Read for RingIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let unread = &self.input[self.read_at..];
        if !unread.is_empty() {
            let n = unread.len().min(buf.len());
            buf[..n].copy_from_slice(&unread[..n]);
            self.read_at += n;
            if self.read_at == self.input.len() {
                self.input.clear();
                self.read_at = 0;
            }
            return Ok(n);
        }
        match (self.error, self.eof) {
            (Some(errno), _) => Err(io::Error::from_raw_os_error(errno)),
            (None, true) => Ok(0),
            (None, false) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for RingIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(errno) = self.error {
            return Err(io::Error::from_raw_os_error(errno));
        }
        // All or nothing: a connection writes its whole write buffer at once, which it only
        // empties (and reuses from the start) once all of it is taken.
        if self.queued.len() >= SEND_QUEUE_LIMIT && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.queued.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn ring_io() -> (RingIo, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let stream = Stream::Unix(mio::net::UnixStream::from_std(ours));
        (RingIo::new(stream), theirs)
    }

    #[test]
    fn reads_take_what_receives_brought_then_would_block_then_the_end() {
        let (mut io, _peer) = ring_io();
        io.input.extend_from_slice(b"get a\r\nget b\r\n");
        let mut buf = [0u8; 7];
        assert_eq!(io.read(&mut buf).unwrap(), 7);
        assert_eq!(&buf, b"get a\r\n");
        assert_eq!(io.unread(), 7);
        let mut rest = [0u8; 64];
        assert_eq!(io.read(&mut rest).unwrap(), 7);
        assert_eq!(io.input.len(), 0, "consumed input is dropped");
        let e = io.read(&mut rest).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        io.eof = true;
        assert_eq!(io.read(&mut rest).unwrap(), 0);
        io.error = Some(libc::ECONNRESET);
        assert_eq!(
            io.read(&mut rest).unwrap_err().raw_os_error(),
            Some(libc::ECONNRESET)
        );
    }

    #[test]
    fn writes_queue_whole_until_the_limit() {
        let (mut io, _peer) = ring_io();
        assert!(!io.pending_output());
        let big = vec![b'v'; SEND_QUEUE_LIMIT + 10];
        // Under the limit a write is taken whole, however large, so a connection's write
        // buffer empties and restarts from its beginning.
        assert_eq!(io.write(&big).unwrap(), big.len());
        assert!(io.pending_output());
        let e = io.write(b"more").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(io.write(b"").unwrap(), 0);
        io.error = Some(libc::EPIPE);
        assert_eq!(
            io.write(b"x").unwrap_err().raw_os_error(),
            Some(libc::EPIPE)
        );
    }
}
