//! Memory for O_DIRECT: block-aligned buffers.

/// The unit of a read: records of at most this size never straddle one.
pub(crate) const BLOCK: usize = 4096;

/// Bytes in memory aligned to a block, as O_DIRECT wants them, zeroed: from the allocator
/// (a read's 4 KiB buffer costs no system call; a write buffer's megabytes come from a mapping
/// all the same).
pub(crate) struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its mapping outright; access goes through &/&mut self.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for AlignedBuf {}

/// How many freed one-block buffers a thread keeps for its next reads (256 KiB).
const SPARE_BLOCKS_KEPT: usize = 64;

/// One-block buffers this thread freed, kept for its next reads: the allocator's aligned
/// allocation and free of each read's block cost ~7 % of a server's CPU under a closed loop of
/// flash reads (`perf`, 2026-11-27; docs/performance.md).
struct SpareBlocks(Vec<std::ptr::NonNull<u8>>);

impl Drop for SpareBlocks {
    fn drop(&mut self) {
        for ptr in self.0.drain(..) {
            // SAFETY: each was allocated by `AlignedBuf::new` with a block's layout and is
            // owned by this list alone (its `AlignedBuf` gave it up when dropped).
            unsafe { std::alloc::dealloc(ptr.as_ptr(), AlignedBuf::layout(BLOCK)) };
        }
    }
}

thread_local! {
    static SPARE_BLOCKS: std::cell::RefCell<SpareBlocks> =
        const { std::cell::RefCell::new(SpareBlocks(Vec::new())) };
}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> std::io::Result<AlignedBuf> {
        let len = len.max(BLOCK).next_multiple_of(BLOCK);
        if len == BLOCK {
            let spare = SPARE_BLOCKS
                .try_with(|spare| spare.borrow_mut().0.pop())
                .ok()
                .flatten();
            if let Some(ptr) = spare {
                // SAFETY: a block allocated with this layout that no one else holds (see
                // `SpareBlocks`); zeroed again, as a new buffer is.
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, BLOCK) };
                return Ok(AlignedBuf { ptr, len });
            }
        }
        // SAFETY: the layout has a non-zero size (at least a block).
        let ptr = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        let ptr = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        Ok(AlignedBuf { ptr, len })
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, BLOCK).expect("a block-aligned size")
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated (and zeroed) for the buffer's life.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == BLOCK {
            let kept = SPARE_BLOCKS.try_with(|spare| {
                let mut spare = spare.borrow_mut();
                let room = spare.0.len() < SPARE_BLOCKS_KEPT;
                if room {
                    spare.0.push(self.ptr);
                }
                room
            });
            if kept == Ok(true) {
                return;
            }
        }
        // SAFETY: frees exactly the allocation made in `new`, with its layout; no slice
        // outlives `self`.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_freed_and_taken_again_comes_back_zeroed_and_never_shared() {
        let mut first = AlignedBuf::new(BLOCK).unwrap();
        first.fill(0xAB);
        let reused = first.ptr;
        drop(first);
        let again = AlignedBuf::new(BLOCK).unwrap();
        // The spare block is taken again, zeroed as a new one is.
        assert_eq!(again.ptr, reused);
        assert!(again.iter().all(|&b| b == 0));
        assert_eq!(again.as_ptr() as usize % BLOCK, 0);
        // While it is held, another buffer is another block.
        let other = AlignedBuf::new(BLOCK).unwrap();
        assert_ne!(other.ptr, again.ptr);
        // Larger buffers are the allocator's alone, each freed when dropped.
        let large = AlignedBuf::new(3 * BLOCK).unwrap();
        assert_eq!(large.len(), 3 * BLOCK);
        assert_eq!(large.as_ptr() as usize % BLOCK, 0);
    }

    #[test]
    fn a_thread_keeps_only_so_many_spare_blocks() {
        let held: Vec<AlignedBuf> = (0..SPARE_BLOCKS_KEPT + 10)
            .map(|_| AlignedBuf::new(BLOCK).unwrap())
            .collect();
        drop(held);
        let kept = SPARE_BLOCKS.with(|spare| spare.borrow().0.len());
        assert_eq!(kept, SPARE_BLOCKS_KEPT);
    }
}
