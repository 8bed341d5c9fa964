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

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> std::io::Result<AlignedBuf> {
        let len = len.max(BLOCK).next_multiple_of(BLOCK);
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
        // SAFETY: frees exactly the allocation made in `new`, with its layout; no slice
        // outlives `self`.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
    }
}
