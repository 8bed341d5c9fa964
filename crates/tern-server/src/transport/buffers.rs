//! Each worker's pool of connection buffers. A connection borrows a read buffer only while it
//! holds unparsed bytes (a partial request) and a write buffer only while replies wait unsent,
//! and gives both back at the end of its turn, so an idle connection holds no buffer at all
//! (as memcached's per-thread read buffer cache does). Buffers grown past their standard size
//! for a large request or reply are freed rather than kept, which shrinks a connection back.

use std::sync::Arc;

use tern_admin::WorkerMetrics;

use crate::state::read_budget::ReadBudget;

/// The standard size of a read buffer and the capacity of a write buffer.
pub const BUFFER: usize = 16 * 1024;
/// Free buffers of each kind a worker keeps; more are freed. Only one connection runs at a
/// time, so the buffers in use at once are those of connections with a request or a reply
/// in flight, and this many covers bursts of them without holding much (1 MiB per kind).
const MAX_FREE: usize = 64;

/// Lending and taking back happen on every turn of every connection, so the common case is a
/// move: one buffer of each kind waits in a `spare` slot (empty when none), the rest in a
/// list. Counting happens only when a buffer is allocated, freed or kept grown.
#[derive(Default)]
pub struct BufferPool {
    spare_read: Box<[u8]>,
    spare_write: Vec<u8>,
    free_read: Vec<Box<[u8]>>,
    free_write: Vec<Vec<u8>>,
    /// Buffers allocated (held by connections or free here), in number and bytes.
    read_count: u64,
    read_bytes: u64,
    write_count: u64,
    write_bytes: u64,
    /// Something counted changed since the last `publish`.
    changed: bool,
    /// Free read buffers as last published.
    published_free: usize,
    /// What read buffers grown past [`BUFFER`] are charged to (`-o read_buf_mem_limit`),
    /// shared by every worker.
    budget: Arc<ReadBudget>,
}

impl BufferPool {
    pub fn new(budget: Arc<ReadBudget>) -> BufferPool {
        BufferPool {
            budget,
            ..BufferPool::default()
        }
    }

    /// Makes sure a connection's read buffer may grow to `size` bytes: `charged` is what the
    /// connection holds of the budget, raised to `size` when the budget lends the difference.
    /// False when it does not (the caller refuses the request).
    pub fn charge_read(&self, charged: &mut usize, size: usize) -> bool {
        if size <= BUFFER.max(*charged) {
            return true;
        }
        if !self.budget.try_charge(size - *charged) {
            return false;
        }
        *charged = size;
        true
    }

    /// Gives back what a connection held of the budget, its grown buffer freed.
    pub fn release_charge(&self, charged: &mut usize) {
        if *charged != 0 {
            self.budget.release(std::mem::take(charged));
        }
    }

    /// A read buffer of the standard size.
    #[inline]
    pub fn take_read(&mut self) -> Box<[u8]> {
        if !self.spare_read.is_empty() {
            return std::mem::take(&mut self.spare_read);
        }
        match self.free_read.pop() {
            Some(buf) => buf,
            None => self.alloc_read(BUFFER),
        }
    }

    /// A read buffer of `size` bytes, counted until it is given back.
    pub fn alloc_read(&mut self, size: usize) -> Box<[u8]> {
        self.read_count += 1;
        self.read_bytes += size as u64;
        self.changed = true;
        vec![0; size].into_boxed_slice()
    }

    /// Takes back a read buffer: kept if of the standard size and the pool is not full.
    #[inline]
    pub fn put_read(&mut self, buf: Box<[u8]>) {
        if buf.len() == BUFFER && self.spare_read.is_empty() {
            self.spare_read = buf;
        } else if buf.len() == BUFFER && self.free_read.len() < MAX_FREE {
            self.free_read.push(buf);
        } else {
            self.read_count -= 1;
            self.read_bytes -= buf.len() as u64;
            self.changed = true;
        }
    }

    /// An empty write buffer of capacity [`BUFFER`].
    #[inline]
    pub fn take_write(&mut self) -> Vec<u8> {
        if self.spare_write.capacity() != 0 {
            return std::mem::take(&mut self.spare_write);
        }
        self.free_write.pop().unwrap_or_else(|| {
            self.write_count += 1;
            self.write_bytes += BUFFER as u64;
            self.changed = true;
            Vec::with_capacity(BUFFER)
        })
    }

    /// Takes back an empty write buffer that was counted as `BUFFER + extra` bytes: kept if
    /// it has its standard capacity, else freed (which shrinks a connection back after a
    /// large reply).
    #[inline]
    pub fn put_write(&mut self, buf: Vec<u8>, extra: usize) {
        if buf.capacity() == BUFFER && self.spare_write.capacity() == 0 {
            self.spare_write = buf;
        } else if buf.capacity() == BUFFER && self.free_write.len() < MAX_FREE {
            self.free_write.push(buf);
        } else {
            self.write_count -= 1;
            self.write_bytes -= (BUFFER + extra) as u64;
            self.changed = true;
        }
    }

    /// A write buffer kept by its connection (replies unsent) was counted `counted` bytes
    /// past its standard capacity and now has `now`.
    pub fn write_grew(&mut self, counted: usize, now: usize) {
        self.write_bytes = self.write_bytes - counted as u64 + now as u64;
        self.changed = true;
    }

    /// Publishes the pool's figures for `stats` when they changed (called once per wake-up,
    /// not per request).
    #[inline]
    pub fn publish(&mut self, metrics: &WorkerMetrics) {
        let free = self.free_read.len() + usize::from(!self.spare_read.is_empty());
        if self.changed || free != self.published_free {
            self.changed = false;
            self.published_free = free;
            metrics.set_conn_buffers(tern_admin::ConnBuffers {
                read_buf_count: self.read_count,
                read_buf_bytes: self.read_bytes,
                read_buf_bytes_free: (free * BUFFER) as u64,
                response_obj_count: self.write_count,
                response_obj_bytes: self.write_bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_buffers_are_reused_and_large_ones_freed() {
        let mut pool = BufferPool::default();
        let a = pool.take_read();
        let ptr = a.as_ptr();
        pool.put_read(a);
        let b = pool.take_read();
        assert_eq!(b.as_ptr(), ptr, "the same buffer comes back");
        let c = pool.take_read();
        let big = pool.alloc_read(1 << 20);
        let all = 2 * BUFFER + (1 << 20);
        assert_eq!((pool.read_count, pool.read_bytes), (3, all as u64));
        pool.put_read(big);
        pool.put_read(b);
        pool.put_read(c);
        assert_eq!((pool.read_count, pool.read_bytes), (2, 2 * BUFFER as u64));
        assert_eq!(pool.free_read.len(), 1, "one spare, one in the list");
    }

    #[test]
    fn write_buffers_are_counted_while_allocated() {
        let mut pool = BufferPool::default();
        let mut w = pool.take_write();
        assert_eq!((pool.write_count, pool.write_bytes), (1, BUFFER as u64));
        w.extend_from_slice(&[0; BUFFER + 1]);
        let extra = w.capacity() - BUFFER;
        pool.write_grew(0, extra);
        assert_eq!(pool.write_bytes, w.capacity() as u64);
        w.clear();
        pool.put_write(w, extra);
        assert_eq!(
            (pool.write_count, pool.write_bytes),
            (0, 0),
            "a grown one is freed"
        );
        let w = pool.take_write();
        pool.put_write(w, 0);
        assert_eq!((pool.write_count, pool.write_bytes), (1, BUFFER as u64));
        assert_eq!(pool.spare_write.capacity(), BUFFER, "kept");
    }
}
