//! Reading records: from a buffer not yet written or from the files, one at a time or a batch
//! through io_uring; and the reads workers ask for, served by the I/O threads and landed for
//! the commands' second runs.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::buf::{AlignedBuf, BLOCK};
use super::record::{check_record, record_len, ReadOutcome, RECORD_HEADER};
use super::{bump, Flash, FlashWaker, Reads, LANDED_BYTES, LANDED_MAX};

/// Reads one io_uring submission holds at most.
const RING_ENTRIES: u32 = 64;

thread_local! {
    /// The I/O thread's ring for its batches (`None`: the kernel refused one).
    static RING: std::cell::RefCell<Option<Option<io_uring::IoUring>>> =
        const { std::cell::RefCell::new(None) };
}

impl Flash {
    /// Reads the record at `addr`: from a buffer not yet written, else from its file with
    /// one aligned read (two for a record larger than what the first brought).
    pub(crate) fn read(&self, addr: u64) -> std::io::Result<ReadOutcome> {
        let version = self.version_at(addr);
        let buf = self.read_blocks(block_of(addr), BLOCK)?;
        self.finish_read(addr, version, buf)
    }

    /// `len` bytes from `block` on: from a buffer not yet written, else one aligned `pread`.
    fn read_blocks(&self, block: u64, len: usize) -> std::io::Result<AlignedBuf> {
        if let Some(buf) = self.read_buffered(block, len)? {
            return Ok(buf);
        }
        let mut buf = AlignedBuf::new(len)?;
        let (file, at) = self.file_at(block);
        file.read_exact_at(&mut buf[..len], at)?;
        Ok(buf)
    }

    /// How a read of the record at `addr` starts: done already (its first block is in a
    /// buffer not yet written, or no buffer could be had), or a buffer for that block to be
    /// read from the file through a ring (`block_read`); with the page version to check it by.
    pub(super) fn start_read(
        &self,
        addr: u64,
    ) -> (u32, Result<AlignedBuf, std::io::Result<ReadOutcome>>) {
        let version = self.version_at(addr);
        let started = match self.read_buffered(block_of(addr), BLOCK) {
            Ok(Some(buf)) => Err(self.finish_read(addr, version, buf)),
            Ok(None) => AlignedBuf::new(BLOCK).map_err(Err),
            Err(e) => Err(Err(e)),
        };
        (version, started)
    }

    /// The io_uring read of the block at `addr` into `buf` (a block long), tagged `user_data`.
    /// The caller keeps `buf` alive and in place until its completion is reaped.
    pub(super) fn block_read(
        &self,
        addr: u64,
        buf: &mut AlignedBuf,
        user_data: u64,
    ) -> io_uring::squeue::Entry {
        let (file, at) = self.file_at(block_of(addr));
        io_uring::opcode::Read::new(
            io_uring::types::Fd(file.as_raw_fd()),
            buf.as_mut_ptr(),
            BLOCK as u32,
        )
        .offset(at)
        .build()
        .user_data(user_data)
    }

    /// The low 32 bits of the version of the page `addr` is in, as its records carry it.
    fn version_at(&self, addr: u64) -> u32 {
        self.pages[self.page_of(addr) as usize]
            .version
            .load(Relaxed) as u32
    }

    /// The record at `addr` from its first block (`buf`), read further when it is longer,
    /// and checked against the page version taken before the read.
    pub(super) fn finish_read(
        &self,
        addr: u64,
        version: u32,
        mut buf: AlignedBuf,
    ) -> std::io::Result<ReadOutcome> {
        let skip = (addr % BLOCK as u64) as usize;
        let len = record_len(&buf, skip);
        let end = skip + RECORD_HEADER + len;
        if len == 0 || end > self.wbuf_size.max(BLOCK) + BLOCK {
            return Ok(ReadOutcome::Stale);
        }
        if end > BLOCK {
            buf = self.read_blocks(block_of(addr), end.next_multiple_of(BLOCK))?;
        }
        bump(&self.counters.objects_read, 1);
        bump(&self.counters.bytes_read, (RECORD_HEADER + len) as u64);
        Ok(check_record(buf, skip, version))
    }

    /// Reads the records at `addrs` with one io_uring submission where the kernel offers
    /// io_uring (reads from buffers not yet written, and the rest of records longer than a
    /// block, are served as `read` serves them), else one `pread` after another.
    pub(crate) fn read_batch(&self, addrs: &[u64]) -> Vec<std::io::Result<ReadOutcome>> {
        RING.with_borrow_mut(|ring| {
            let ring = ring.get_or_insert_with(|| io_uring::IoUring::new(RING_ENTRIES).ok());
            match ring {
                Some(ring) => addrs
                    .chunks(RING_ENTRIES as usize)
                    .flat_map(|chunk| self.read_ring(ring, chunk))
                    .collect(),
                None => addrs.iter().map(|&addr| self.read(addr)).collect(),
            }
        })
    }

    fn read_ring(
        &self,
        ring: &mut io_uring::IoUring,
        addrs: &[u64],
    ) -> Vec<std::io::Result<ReadOutcome>> {
        let mut results: Vec<Option<std::io::Result<ReadOutcome>>> =
            addrs.iter().map(|_| None).collect();
        let mut pending: Vec<(usize, u32, AlignedBuf)> = Vec::with_capacity(addrs.len());
        for (i, &addr) in addrs.iter().enumerate() {
            match self.start_read(addr) {
                (version, Ok(buf)) => pending.push((i, version, buf)),
                (_, Err(done)) => results[i] = Some(done),
            }
        }
        for (n, (i, _, buf)) in pending.iter_mut().enumerate() {
            let read = self.block_read(addrs[*i], buf, n as u64);
            // SAFETY: the buffer (`pending`, not touched until every completion is reaped
            // below) and the file (`self`) outlive the read.
            if unsafe { ring.submission().push(&read) }.is_err() {
                unreachable!("a chunk holds at most the ring's entries");
            }
        }
        let mut done = vec![None; pending.len()];
        let mut reaped = 0;
        while reaped < pending.len() {
            if let Err(e) = ring.submit_and_wait(pending.len() - reaped) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Reads submitted may still be running: wait them out one by one.
                for (i, _, _) in &pending {
                    results[*i]
                        .get_or_insert_with(|| Err(std::io::Error::new(e.kind(), e.to_string())));
                }
                while reaped < pending.len() {
                    let _ = ring.submit_and_wait(1);
                    reaped += ring.completion().count();
                }
                return results.into_iter().map(|r| r.expect("set")).collect();
            }
            for cqe in ring.completion() {
                done[cqe.user_data() as usize] = Some(cqe.result());
                reaped += 1;
            }
        }
        for ((i, version, buf), res) in pending.into_iter().zip(done) {
            let res = res.expect("every read reaped");
            results[i] = Some(if res == BLOCK as i32 {
                self.finish_read(addrs[i], version, buf)
            } else if res < 0 {
                Err(std::io::Error::from_raw_os_error(-res))
            } else {
                // A short read (past a file's end): what `read` makes of it.
                self.read(addrs[i])
            });
        }
        results.into_iter().map(|r| r.expect("set")).collect()
    }

    /// `len` bytes at `addr` if a buffer not yet written holds them.
    fn read_buffered(&self, addr: u64, len: usize) -> std::io::Result<Option<AlignedBuf>> {
        let w = self.writer.lock();
        let within =
            |start: u64, held: usize| addr >= start && addr + len as u64 <= start + held as u64;
        let filling = w
            .streams
            .iter()
            .filter_map(|s| s.filling.as_ref())
            .find(|f| within(f.addr, self.wbuf_size))
            .map(|f| &f.buf[(addr - f.addr) as usize..][..len]);
        let source: Option<&[u8]> = filling.or_else(|| {
            w.sealed
                .iter()
                .find(|s| within(s.addr, s.len))
                .map(|s| &s.data[(addr - s.addr) as usize..][..len])
        });
        let Some(bytes) = source else {
            return Ok(None);
        };
        let mut buf = AlignedBuf::new(len)?;
        buf[..len].copy_from_slice(bytes);
        Ok(Some(buf))
    }

    /// Queues reads of the records at `locations` (index entries), `wake` to be called once
    /// each has landed; a location queued already, or in flight on a worker's ring, just gains
    /// the waker.
    pub(crate) fn ask(&self, locations: &[u64], wake: &FlashWaker) {
        let mut reads = self.reads.lock();
        let mut queued = false;
        for &location in locations {
            let Reads {
                in_flight, queue, ..
            } = &mut *reads;
            let asking = in_flight.get_mut(&location).or_else(|| {
                queue
                    .iter_mut()
                    .find(|(l, _)| *l == location)
                    .map(|(_, wakers)| wakers)
            });
            if let Some(wakers) = asking {
                if !wakers.iter().any(|w| Arc::ptr_eq(w, wake)) {
                    wakers.push(wake.clone());
                }
            } else if reads.landed.contains_key(&location) {
                // Read already: the asker runs again at once.
                wake();
            } else {
                reads.queue.push_back((location, vec![wake.clone()]));
                queued = true;
            }
        }
        drop(reads);
        // An I/O thread is woken only for a read not asked for already (a wake is a system
        // call, and a worker may ask again for reads still queued).
        if queued {
            self.read_queued.notify_one();
        }
    }

    /// Whether one of `asked` has landed, or none of them is still queued or in flight on a
    /// worker's ring (read, and taken or dropped since).
    pub(crate) fn ready(&self, asked: &[u64]) -> bool {
        let reads = self.reads.lock();
        asked.iter().any(|l| reads.landed.contains_key(l))
            || !asked.iter().any(|l| {
                reads.in_flight.contains_key(l) || reads.queue.iter().any(|(queued, _)| queued == l)
            })
    }

    pub(crate) fn is_landed(&self, location: u64) -> bool {
        self.reads.lock().landed.contains_key(&location)
    }

    /// What reading `location` came to, taken.
    pub(crate) fn take_landed(&self, location: u64) -> Option<std::io::Result<ReadOutcome>> {
        let mut reads = self.reads.lock();
        let read = reads.landed.remove(&location)?;
        reads.landed_bytes -= held_by(&read);
        Some(read)
    }

    /// Waits up to `wait` for reads to be asked for, then reads every one queued, landing
    /// what each came to and waking their askers.
    pub(crate) fn serve_reads(&self, wait: std::time::Duration) {
        let batch: Vec<(u64, Vec<FlashWaker>)> = {
            let mut reads = self.reads.lock();
            if reads.queue.is_empty() {
                self.read_queued.wait_for(&mut reads, wait);
            }
            reads.queue.drain(..).collect()
        };
        let addrs: Vec<u64> = batch
            .iter()
            .map(|(location, _)| self.geometry.addr_of(*location))
            .collect();
        let results = self.read_batch(&addrs);
        let woken = {
            let mut reads = self.reads.lock();
            let batch = batch
                .into_iter()
                .zip(results)
                .map(|((location, wakers), read)| (location, wakers, read))
                .collect();
            self.land(&mut reads, batch)
        };
        for wake in woken {
            wake();
        }
    }

    /// Lands a batch of reads (location, who asked, what it came to) for the commands' second
    /// runs; returns who to wake, each once for the whole batch (a wake is a system call).
    pub(super) fn land(
        &self,
        reads: &mut Reads,
        batch: Vec<(u64, Vec<FlashWaker>, std::io::Result<ReadOutcome>)>,
    ) -> Vec<FlashWaker> {
        let incoming: usize = batch.iter().map(|(_, _, read)| held_by(read)).sum();
        let mut woken: Vec<FlashWaker> = Vec::new();
        // Room is made by dropping what landed before, never this batch: its askers run
        // again next, and a record dropped before they take it is read again (a multiget
        // of large items beyond the bound would never end).
        while reads.landed.len() + batch.len() > LANDED_MAX
            || reads.landed_bytes + incoming > LANDED_BYTES
        {
            let Some(oldest) = reads.landed_order.pop_front() else {
                break;
            };
            if let Some(read) = reads.landed.remove(&oldest) {
                reads.landed_bytes -= held_by(&read);
            }
        }
        for (location, wakers, read) in batch {
            reads.landed_bytes += held_by(&read);
            match reads.landed.insert(location, read) {
                Some(earlier) => reads.landed_bytes -= held_by(&earlier),
                None => reads.landed_order.push_back(location),
            }
            for wake in wakers {
                if !woken.iter().any(|w| Arc::ptr_eq(w, &wake)) {
                    woken.push(wake);
                }
            }
        }
        // Locations taken since they landed leave the order list too, now and then.
        if reads.landed_order.len() > 2 * LANDED_MAX {
            let Reads {
                landed,
                landed_order,
                ..
            } = reads;
            landed_order.retain(|l| landed.contains_key(l));
        }
        woken
    }
}

/// Bytes a read's outcome holds while it waits to be taken.
fn held_by(read: &std::io::Result<ReadOutcome>) -> usize {
    match read {
        Ok(ReadOutcome::Record(record)) => record.held(),
        _ => 0,
    }
}

/// The block `addr` lies in.
pub(super) fn block_of(addr: u64) -> u64 {
    addr - addr % BLOCK as u64
}
