//! Each worker's pool of connection buffers. A connection borrows a read buffer only while it
//! holds unparsed bytes (a partial request) and a write buffer only while replies wait unsent,
//! and gives both back at the end of its turn, so an idle connection holds no buffer at all
//! (as memcached's per-thread read buffer cache does). Buffers grown past their standard size
//! for a large request or reply are freed rather than kept, which shrinks a connection back.

use tern_admin::WorkerMetrics;

/// The standard size of a read buffer and the capacity of a new write buffer.
pub const BUFFER: usize = 16 * 1024;
/// Write buffers that grew past this are freed instead of pooled.
const WRITE_KEEP: usize = 64 * 1024;
/// Free buffers of each kind a worker keeps; more are freed. Only one connection runs at a
/// time, so the buffers in use at once are those of connections with a request or a reply
/// in flight, and this many covers bursts of them without holding much (1 MiB per kind).
const MAX_FREE: usize = 64;

#[derive(Default)]
pub struct BufferPool {
    free_read: Vec<Box<[u8]>>,
    free_write: Vec<Vec<u8>>,
    /// Read buffers allocated (held by connections or free here), in number and bytes.
    read_count: u64,
    read_bytes: u64,
    /// Write buffers held by connections (as last accounted at the end of their turn).
    write_count: u64,
    write_bytes: u64,
}

impl BufferPool {
    /// A read buffer of the standard size.
    #[inline]
    pub fn take_read(&mut self) -> Box<[u8]> {
        match self.free_read.pop() {
            Some(buf) => buf,
            None => self.alloc_read(BUFFER),
        }
    }

    /// A read buffer of `size` bytes, counted until it is given back.
    pub fn alloc_read(&mut self, size: usize) -> Box<[u8]> {
        self.read_count += 1;
        self.read_bytes += size as u64;
        vec![0; size].into_boxed_slice()
    }

    /// Takes back a read buffer: kept if of the standard size and the pool is not full.
    #[inline]
    pub fn put_read(&mut self, buf: Box<[u8]>) {
        if buf.len() == BUFFER && self.free_read.len() < MAX_FREE {
            self.free_read.push(buf);
        } else {
            self.read_count -= 1;
            self.read_bytes -= buf.len() as u64;
        }
    }

    /// An empty write buffer.
    #[inline]
    pub fn take_write(&mut self) -> Vec<u8> {
        let buf = self
            .free_write
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER));
        self.write_count += 1;
        self.write_bytes += buf.capacity() as u64;
        buf
    }

    /// Takes back an empty write buffer whose capacity was last accounted as `counted`.
    #[inline]
    pub fn put_write(&mut self, buf: Vec<u8>, counted: usize) {
        self.write_count -= 1;
        self.write_bytes -= counted as u64;
        if buf.capacity() <= WRITE_KEEP && self.free_write.len() < MAX_FREE {
            self.free_write.push(buf);
        }
    }

    /// A write buffer kept by its connection grew from `counted` to `now` bytes.
    pub fn write_grew(&mut self, counted: usize, now: usize) {
        self.write_bytes = self.write_bytes - counted as u64 + now as u64;
    }

    /// Publishes the pool's figures for `stats` (once per wake-up: it is not per request).
    pub fn publish(&self, metrics: &WorkerMetrics) {
        metrics.set_conn_buffers(tern_admin::ConnBuffers {
            read_buf_count: self.read_count,
            read_buf_bytes: self.read_bytes,
            read_buf_bytes_free: (self.free_read.len() * BUFFER) as u64,
            response_obj_count: self.write_count,
            response_obj_bytes: self.write_bytes,
        });
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
        let big = pool.alloc_read(1 << 20);
        assert_eq!(
            (pool.read_count, pool.read_bytes),
            (2, (BUFFER + (1 << 20)) as u64)
        );
        pool.put_read(big);
        pool.put_read(b);
        assert_eq!((pool.read_count, pool.read_bytes), (1, BUFFER as u64));
        assert_eq!(pool.free_read.len(), 1);
    }

    #[test]
    fn write_buffers_are_counted_while_held() {
        let mut pool = BufferPool::default();
        let mut w = pool.take_write();
        assert_eq!((pool.write_count, pool.write_bytes), (1, BUFFER as u64));
        w.extend_from_slice(&[0; WRITE_KEEP + 1]);
        pool.write_grew(BUFFER, w.capacity());
        assert_eq!(pool.write_bytes, w.capacity() as u64);
        w.clear();
        let cap = w.capacity();
        pool.put_write(w, cap);
        assert_eq!((pool.write_count, pool.write_bytes), (0, 0));
        assert!(pool.free_write.is_empty(), "a grown buffer is freed");
    }
}
