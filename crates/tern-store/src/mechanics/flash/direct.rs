//! A worker's own io_uring for the reads its commands deferred: it submits them itself, without
//! waiting, and the kernel signals an eventfd the worker's event loop watches as they complete.
//! No I/O thread runs between a worker and its reads, so a read costs no thread hand-offs
//! (a futex wake, an I/O thread's sleep and wake-up, the waker's write); only what the read
//! itself costs. Workers without a ring (the kernel refused one, or an event loop that cannot
//! watch an fd) ask the I/O threads instead (`Flash::ask`), and so does a ring for a record
//! longer than a block: the worker never reads synchronously.
//!
//! Nor does its submission wait: all the rings together keep at most `read_depth` reads in
//! flight (half the device's request queue), the rest wait in each ring's backlog and start as
//! reads complete. And a completion does not interrupt the worker: its work is deferred to the
//! worker's next `reap` (DEFER_TASKRUN). The limit spared the worker 11-16 % of its time asleep
//! in the kernel; what it carries is within the virtual disk's noise (docs/performance.md,
//! 2026-11-27).
//!
//! The reads land where the I/O threads land theirs (`Flash::land`): another worker that asks
//! for a location in flight on this ring is woken when it lands.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::buf::{AlignedBuf, BLOCK};
use super::record::{record_len, ReadOutcome, RECORD_HEADER};
use super::{Flash, FlashWaker};

/// Reads one ring holds in flight; more wait in the I/O threads' queue.
const DIRECT_ENTRIES: u32 = 1024;

/// One worker's ring and the reads in flight on it.
pub(crate) struct DirectRing {
    ring: io_uring::IoUring,
    /// Signalled by the kernel for each completion, and by the worker itself when what it
    /// asked for landed without one (read already, or from a buffer not yet written).
    signal: OwnedFd,
    /// The reads in flight, by their index (an entry's user data); `None` is free.
    in_flight: Vec<Option<InFlight>>,
    free: Vec<usize>,
    /// Reads asked for and registered, waiting for room on the device (`Flash::ring_reads`).
    pub(super) backlog: VecDeque<u64>,
    /// Reads in flight on every worker's ring (`Flash::ring_reads`), shared with them. Relaxed:
    /// a soft limit, which workers checking it at once may pass by a read each.
    all_in_flight: Arc<AtomicUsize>,
    /// The worker's waker: another worker's read of a location this one also asked for wakes
    /// it, as does an I/O thread's read of what the ring handed over.
    wake: FlashWaker,
}

struct InFlight {
    location: u64,
    addr: u64,
    version: u32,
    buf: AlignedBuf,
}

impl DirectRing {
    /// The eventfd the worker's event loop watches (readable: something landed).
    pub(crate) fn fd(&self) -> RawFd {
        self.signal.as_raw_fd()
    }

    /// Signals the worker's own event loop.
    fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write from a live buffer to an eventfd this ring owns. A full
        // counter (EAGAIN) is already signalled.
        unsafe { libc::write(self.signal.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Reads in flight on this ring.
    pub(super) fn own_in_flight(&self) -> usize {
        self.in_flight.len() - self.free.len()
    }

    /// Clears the signal (before the completions are reaped, so none is missed).
    fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: an 8-byte read into a live buffer from a non-blocking eventfd this ring owns.
        unsafe {
            libc::read(
                self.signal.as_raw_fd(),
                count.as_mut_ptr().cast(),
                count.len(),
            )
        };
    }
}

impl Drop for DirectRing {
    /// The kernel writes into the buffers of reads in flight until they complete: wait for
    /// each before the buffers go.
    fn drop(&mut self) {
        let mut left = self.own_in_flight();
        self.all_in_flight.fetch_sub(left, Relaxed);
        while left > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => left = left.saturating_sub(self.ring.completion().count()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Nothing else can be done: leak the buffers rather than free them under
                    // the kernel's writes.
                    tracing::error!("flash tier: waiting for a worker's reads failed: {e}");
                    for read in self.in_flight.drain(..).flatten() {
                        std::mem::forget(read.buf);
                    }
                    return;
                }
            }
        }
    }
}

impl Flash {
    /// A ring for the calling worker's reads, woken through `wake`; `None` where the kernel
    /// gives no io_uring or eventfd.
    pub(crate) fn direct_ring(&self, wake: FlashWaker) -> Option<DirectRing> {
        // Only this worker submits and reaps, so a completion's work waits for its next
        // `reap` instead of interrupting it (DEFER_TASKRUN, Linux 6.1; the eventfd is signalled
        // when the first of a batch is queued). Older kernels: an ordinary ring.
        let ring = io_uring::IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(DIRECT_ENTRIES)
            .or_else(|_| io_uring::IoUring::new(DIRECT_ENTRIES))
            .ok()?;
        // SAFETY: eventfd with valid flags; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let signal = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(fd).ok()?;
        Some(DirectRing {
            ring,
            signal,
            in_flight: Vec::new(),
            free: Vec::new(),
            backlog: VecDeque::new(),
            all_in_flight: self.ring_reads.clone(),
            wake,
        })
    }

    /// Starts the reads of `locations` on `direct`: a location read already, or in a buffer
    /// not yet written, lands at once (the worker is signalled); one in flight or queued
    /// already gains the worker as an asker; the rest join the ring's backlog, which starts
    /// what the device has room for (`start_backlog`).
    pub(crate) fn submit(&self, direct: &mut DirectRing, locations: &[u64]) {
        let mut to_read = Vec::new();
        let mut landed_now = false;
        {
            let mut reads = self.reads.lock();
            for &location in locations {
                if reads.landed.contains_key(&location) {
                    landed_now = true;
                } else if let Some(askers) = reads.in_flight.get_mut(&location) {
                    if !askers.iter().any(|w| Arc::ptr_eq(w, &direct.wake)) {
                        askers.push(direct.wake.clone());
                    }
                } else if let Some((_, askers)) =
                    reads.queue.iter_mut().find(|(l, _)| *l == location)
                {
                    if !askers.iter().any(|w| Arc::ptr_eq(w, &direct.wake)) {
                        askers.push(direct.wake.clone());
                    }
                } else {
                    reads.in_flight.insert(location, vec![direct.wake.clone()]);
                    to_read.push(location);
                }
            }
        }
        direct.backlog.extend(to_read);
        self.start_backlog(direct, landed_now);
    }

    /// Starts the backlog's reads while the device has room for them: fewer than
    /// `ring_read_limit` in flight on all rings, or none on this one (so that every ring with a
    /// backlog has a read whose completion wakes it to start more). Past the device's request
    /// queue a submission would sleep in the kernel for a free request (see the module's doc).
    fn start_backlog(&self, direct: &mut DirectRing, mut landed_now: bool) {
        let mut handed_over = Vec::new();
        let mut landed = Vec::new();
        let mut started = 0;
        while let Some(&location) = direct.backlog.front() {
            let own = direct.own_in_flight();
            let room = own == 0
                || (own < DIRECT_ENTRIES as usize
                    && direct.all_in_flight.load(Relaxed) < self.ring_read_limit);
            if !room {
                break;
            }
            direct.backlog.pop_front();
            let addr = self.geometry.addr_of(location);
            let (version, mut buf) = match self.start_read(addr) {
                (version, Ok(buf)) => (version, buf),
                (_, Err(done)) => {
                    landed.push((location, done));
                    continue;
                }
            };
            let index = match direct.free.pop() {
                Some(index) => index,
                None => {
                    direct.in_flight.push(None);
                    direct.in_flight.len() - 1
                }
            };
            let read = self.block_read(addr, &mut buf, index as u64);
            // SAFETY: the buffer moves into `in_flight` (its heap memory stays put) and is
            // freed only once the read completed (`reap`, or the ring's drop waiting for it);
            // the file lives as long as `self`, which outlives every worker.
            if unsafe { direct.ring.submission().push(&read) }.is_err() {
                // The queue holds what the ring's entries hold, and no more are in flight.
                direct.free.push(index);
                handed_over.push(location);
                continue;
            }
            direct.in_flight[index] = Some(InFlight {
                location,
                addr,
                version,
                buf,
            });
            direct.all_in_flight.fetch_add(1, Relaxed);
            started += 1;
        }
        if started > 0 {
            if let Err(e) = direct.ring.submit() {
                tracing::warn!("flash tier: a worker's reads were not submitted: {e}");
            }
        }
        if !landed.is_empty() {
            landed_now = true;
            self.land_direct(direct, landed);
        }
        if !handed_over.is_empty() {
            self.hand_over(&direct.wake, &handed_over);
        }
        if landed_now {
            direct.signal();
        }
    }

    /// Lands the reads completed on `direct` (its fd was readable); a record longer than a
    /// block goes to the I/O threads to be read whole.
    pub(crate) fn reap(&self, direct: &mut DirectRing) {
        direct.clear();
        // Runs the completions' deferred work (the TASKRUN flag makes this enter carry
        // GETEVENTS), which posts them.
        if let Err(e) = direct.ring.submit() {
            tracing::warn!("flash tier: a worker's completions were not run: {e}");
        }
        let done: Vec<(usize, i32)> = direct
            .ring
            .completion()
            .map(|cqe| (cqe.user_data() as usize, cqe.result()))
            .collect();
        let mut landed = Vec::with_capacity(done.len());
        let mut handed_over = Vec::new();
        for (index, result) in done {
            let Some(read) = direct.in_flight.get_mut(index).and_then(Option::take) else {
                continue;
            };
            direct.free.push(index);
            direct.all_in_flight.fetch_sub(1, Relaxed);
            if result < 0 {
                let error = std::io::Error::from_raw_os_error(-result);
                landed.push((read.location, Err(error)));
            } else if result != BLOCK as i32 || record_end(&read) > BLOCK {
                // Short (past a file's end) or longer than a block: what a whole read makes
                // of it, on an I/O thread.
                handed_over.push(read.location);
            } else {
                let outcome = self.finish_read(read.addr, read.version, read.buf);
                landed.push((read.location, outcome));
            }
        }
        if !landed.is_empty() {
            self.land_direct(direct, landed);
        }
        if !handed_over.is_empty() {
            self.hand_over(&direct.wake, &handed_over);
        }
        self.start_backlog(direct, false);
    }

    /// Reads everything `direct` has in flight or in its backlog and lands it, for a worker
    /// that stops: the other workers that asked for the same locations wait for them to land.
    pub(crate) fn retire(&self, mut direct: DirectRing) {
        while direct.own_in_flight() > 0 {
            match direct.ring.submit_and_wait(1) {
                Ok(_) => self.reap(&mut direct),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!("flash tier: a stopping worker's reads failed: {e}");
                    break;
                }
            }
        }
        // Left only when the ring failed: the I/O threads read them.
        let left: Vec<u64> = direct.backlog.drain(..).collect();
        if !left.is_empty() {
            self.hand_over(&direct.wake, &left);
        }
    }

    /// Lands reads done on a worker's ring, waking the other workers that asked too.
    fn land_direct(&self, direct: &DirectRing, landed: Vec<(u64, std::io::Result<ReadOutcome>)>) {
        let woken = {
            let mut reads = self.reads.lock();
            let batch = landed
                .into_iter()
                .map(|(location, read)| {
                    let askers = reads.in_flight.remove(&location).unwrap_or_default();
                    (location, askers, read)
                })
                .collect();
            self.land(&mut reads, batch)
        };
        for wake in woken.iter().filter(|w| !Arc::ptr_eq(w, &direct.wake)) {
            wake();
        }
    }

    /// Queues for the I/O threads reads a ring does not do, with their askers.
    fn hand_over(&self, wake: &FlashWaker, locations: &[u64]) {
        {
            let mut reads = self.reads.lock();
            for &location in locations {
                let askers = reads
                    .in_flight
                    .remove(&location)
                    .unwrap_or_else(|| vec![wake.clone()]);
                reads.queue.push_back((location, askers));
            }
        }
        self.read_queued.notify_one();
    }
}

/// Where the record a read's first block starts ends, in the block's bytes.
fn record_end(read: &InFlight) -> usize {
    let skip = (read.addr % BLOCK as u64) as usize;
    skip + RECORD_HEADER + record_len(&read.buf, skip)
}
