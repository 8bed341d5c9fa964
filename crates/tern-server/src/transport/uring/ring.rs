//! The ring's set-up, the probe for what the engine needs, and the provided buffer ring that
//! multishot receives fill.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{opcode, types, IoUring};

/// Submission queue entries: a turn's sends, receives re-armed and cancels fit many times over
/// (a fuller queue is submitted early).
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: a turn's receives and sends (the kernel keeps what overflows).
const CQ_ENTRIES: u32 = 8192;
/// The provided buffer ring: this many receive buffers of this size per worker (1 MiB). A
/// receive completion's bytes are copied out at once and the buffer given back, so the ring
/// needs as many as completions arrive between two turns.
const RECV_BUFFERS: u16 = 128;
const RECV_BUFFER_SIZE: usize = 8 * 1024;
pub(super) const BUFFER_GROUP: u16 = 0;

/// The worker's provided buffer ring: `RECV_BUFFERS` buffers the kernel fills for multishot
/// receives, given back one by one once their bytes are copied out.
pub(super) struct BufRing {
    /// The ring of buffer descriptors (page-aligned, as the kernel requires), shared with the
    /// kernel: it reads the entries up to the tail we publish.
    pub(super) entries: NonNull<types::BufRingEntry>,
    pub(super) entries_len: usize,
    /// The buffers themselves, written by the kernel while it owns them.
    pub(super) buffers: NonNull<u8>,
    pub(super) buffers_len: usize,
    /// The next tail to publish.
    pub(super) tail: u16,
}

impl BufRing {
    pub(super) fn new() -> io::Result<BufRing> {
        let entries_len = usize::from(RECV_BUFFERS) * std::mem::size_of::<types::BufRingEntry>();
        let buffers_len = usize::from(RECV_BUFFERS) * RECV_BUFFER_SIZE;
        let entries = map_anonymous(entries_len)?;
        let buffers = match map_anonymous(buffers_len) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: mapped just above with this length, not shared with anyone yet.
                unsafe { libc::munmap(entries.as_ptr().cast(), entries_len) };
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries: entries.cast(),
            entries_len,
            buffers,
            buffers_len,
            tail: 0,
        };
        for bid in 0..RECV_BUFFERS {
            ring.give_back(bid);
        }
        Ok(ring)
    }

    /// Registers the ring as buffer group [`BUFFER_GROUP`] of `ring`.
    pub(super) fn register(&self, ring: &IoUring) -> io::Result<()> {
        // SAFETY: the descriptor ring stays mapped, at this address and length, until the
        // worker's `Drop` has unregistered it (`Engine`'s drop, then this one's).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.entries.as_ptr() as u64,
                RECV_BUFFERS,
                BUFFER_GROUP,
                0,
            )
        }
    }

    /// The first `len` bytes of buffer `bid`, which a completion just handed over.
    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < RECV_BUFFERS && len <= RECV_BUFFER_SIZE);
        // SAFETY: in bounds (checked); the kernel wrote these bytes before posting the
        // completion and writes no more into buffer `bid` until `give_back` publishes it again.
        unsafe {
            std::slice::from_raw_parts(
                self.buffers
                    .as_ptr()
                    .add(usize::from(bid) * RECV_BUFFER_SIZE),
                len,
            )
        }
    }

    /// Hands buffer `bid` (back) to the kernel.
    pub(super) fn give_back(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (RECV_BUFFERS - 1));
        // SAFETY: `slot` is within the mapped ring. The kernel has consumed the descriptor in
        // it: at most RECV_BUFFERS buffers exist and each is published once per use, so the
        // slot `RECV_BUFFERS` places behind the tail has been taken. The tail shares entry 0's
        // last field (the kernel's layout); it is stored with release ordering after the entry,
        // so the kernel sees the entry once it sees the tail.
        unsafe {
            let entry = &mut *self.entries.as_ptr().add(slot);
            let addr = self
                .buffers
                .as_ptr()
                .add(usize::from(bid) * RECV_BUFFER_SIZE);
            entry.set_addr(addr as u64);
            entry.set_len(RECV_BUFFER_SIZE as u32);
            entry.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            let tail = types::BufRingEntry::tail(self.entries.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both were mapped by `new` with these lengths; the ring is unregistered and no
        // request is left that could write into a buffer (`Engine`'s drop).
        unsafe {
            libc::munmap(self.entries.as_ptr().cast(), self.entries_len);
            libc::munmap(self.buffers.as_ptr().cast(), self.buffers_len);
        }
    }
}

pub(super) fn map_anonymous(len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping; nothing else refers to the range.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

pub(super) fn build_ring() -> io::Result<IoUring> {
    // One thread submits and reaps (SINGLE_ISSUER), so completion work waits for our next
    // enter instead of interrupting us (DEFER_TASKRUN, Linux 6.1, after multishot receive).
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(CQ_ENTRIES)
        .setup_submit_all()
        .build(SQ_ENTRIES)
}

/// Why this kernel cannot run the io_uring engine, if it cannot: the ring's set-up with the
/// flags the engine uses, the operations it submits, a provided buffer ring and registered
/// files, tried on a throwaway ring.
pub fn unavailable() -> Option<String> {
    let ring = match build_ring() {
        Ok(ring) => ring,
        Err(e) => return Some(format!("io_uring set-up failed ({e})")),
    };
    if !ring.params().is_feature_ext_arg() || !ring.params().is_feature_nodrop() {
        return Some("io_uring lacks timed waits or kept overflowing completions".into());
    }
    let mut probe = io_uring::Probe::new();
    if let Err(e) = ring.submitter().register_probe(&mut probe) {
        return Some(format!("io_uring probe failed ({e})"));
    }
    let needed = [
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::AsyncCancel::CODE, "async cancel"),
        (opcode::PollAdd::CODE, "poll"),
        (opcode::Close::CODE, "close"),
    ];
    if let Some((_, name)) = needed.iter().find(|(code, _)| !probe.is_supported(*code)) {
        return Some(format!("io_uring lacks the {name} operation"));
    }
    let registered = BufRing::new().and_then(|bufs| {
        bufs.register(&ring)?;
        ring.submitter().unregister_buf_ring(BUFFER_GROUP)
    });
    if let Err(e) = registered {
        return Some(format!("io_uring provided buffer rings unavailable ({e})"));
    }
    if let Err(e) = ring.submitter().register_files_sparse(1) {
        return Some(format!("io_uring registered files unavailable ({e})"));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    use io_uring::cqueue;

    use super::*;

    /// The buffer ring as the kernel uses it: multishot receives fill its buffers, each handed
    /// back after its bytes are read, more often than the ring has buffers.
    #[test]
    fn the_buffer_ring_carries_multishot_receives() {
        if let Some(why) = unavailable() {
            panic!("io_uring is needed for this test: {why}");
        }
        let mut ring = build_ring().unwrap();
        let mut bufs = BufRing::new().unwrap();
        bufs.register(&ring).unwrap();
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let recv = opcode::RecvMulti::new(types::Fd(ours.as_raw_fd()), BUFFER_GROUP).build();
        // SAFETY: a receive into provided buffers points at no memory of the test's.
        unsafe { ring.submission().push(&recv.user_data(7)).unwrap() };
        let mut received = Vec::new();
        let mut sent = Vec::new();
        for round in 0..(3 * usize::from(RECV_BUFFERS)) {
            let message = format!("message {round}\n");
            theirs.write_all(message.as_bytes()).unwrap();
            sent.extend_from_slice(message.as_bytes());
            while received.len() < sent.len() {
                ring.submit_and_wait(1).unwrap();
                let completions: Vec<_> = ring.completion().collect();
                for cqe in completions {
                    assert_eq!(cqe.user_data(), 7);
                    let len = usize::try_from(cqe.result()).expect("a receive's length");
                    let bid = cqueue::buffer_select(cqe.flags()).expect("a provided buffer");
                    received.extend_from_slice(bufs.bytes(bid, len));
                    bufs.give_back(bid);
                    assert!(cqueue::more(cqe.flags()), "the receive goes on");
                }
            }
        }
        assert_eq!(received, sent);
        let _ = ring
            .submitter()
            .register_sync_cancel(None, types::CancelBuilder::any());
        ring.submitter().unregister_buf_ring(BUFFER_GROUP).unwrap();
        drop(ring);
        drop(bufs);
    }
}
