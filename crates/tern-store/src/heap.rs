//! The heap: one anonymous mapping of `-m` bytes made at start. Pages are only backed when a
//! segment is first written, so RSS grows with use and never past the mapping.

use crate::StoreError;

/// How the heap's pages are backed, for the server's start-up log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Ordinary 4 KiB pages.
    Normal,
    /// Explicit huge pages (MAP_HUGETLB) from the reserved pool.
    HugeTlb,
    /// Transparent huge pages requested with madvise(MADV_HUGEPAGE).
    TransparentHuge,
}

pub(crate) struct Heap {
    base: *mut u8,
    len: usize,
    /// Bytes actually mapped: `len` rounded up to whole huge pages for MAP_HUGETLB.
    mapped: usize,
    pub(crate) pages: PageKind,
}

// SAFETY: the mapping is plain memory owned by the heap for its whole life; which thread may
// touch which bytes is decided by segment ownership (see `Heap::slice`).
unsafe impl Send for Heap {}
// SAFETY: as above; `Heap` itself hands out no references without the caller's ownership proof.
unsafe impl Sync for Heap {}

const HUGE_PAGE: usize = 2 << 20;

impl Heap {
    pub(crate) fn new(len: usize, large_pages: bool, lock: bool) -> Result<Heap, StoreError> {
        // MAP_HUGETLB (without MAP_NORESERVE, which would defer failure to a SIGBUS on first
        // touch) only succeeds when enough huge pages are reserved (vm.nr_hugepages); otherwise
        // fall back to ordinary pages with transparent huge pages requested.
        let rounded = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let huge = if large_pages {
            map(rounded, libc::MAP_HUGETLB)
        } else {
            None
        };
        let (base, mapped, pages) = match huge {
            Some(base) => (base, rounded, PageKind::HugeTlb),
            None => (map_or_err(len)?, len, PageKind::Normal),
        };
        let mut heap = Heap {
            base,
            len,
            mapped,
            pages,
        };
        if large_pages && pages == PageKind::Normal {
            // SAFETY: advice on our own mapping; failure only means no transparent huge pages.
            let rc = unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
            if rc == 0 {
                heap.pages = PageKind::TransparentHuge;
            }
        }
        if lock {
            // SAFETY: locks our own mapping; no memory is read or written.
            if unsafe { libc::mlock(base.cast(), len) } != 0 {
                let err = std::io::Error::last_os_error();
                return Err(StoreError::Lock(format!(
                    "cannot lock the {len}-byte heap in memory (mlock: {err}); raise the limit \
                     with `ulimit -l` / RLIMIT_MEMLOCK, or start without -k"
                )));
            }
        }
        Ok(heap)
    }

    /// `len` bytes at `start`.
    ///
    /// # Safety
    /// `start + len` is within the mapping, and for the life of the slice no other reference into
    /// those bytes exists: the caller holds the lock of the shard that owns the segments holding
    /// them (`Segments::read` and `Segments::write`, the only callers, see to it).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [u8] {
        debug_assert!(start + len <= self.len);
        // SAFETY: in bounds of our mapping (caller's contract), which lives as long as `self`;
        // exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(start), len) }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no slices outlive the heap because
        // they borrow it.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

fn map(len: usize, extra_flags: libc::c_int) -> Option<*mut u8> {
    // Ordinary pages are backed on first touch, like memcached's heap, so a large `-m` does
    // not need that much free memory up front.
    let reserve = if extra_flags == 0 {
        libc::MAP_NORESERVE
    } else {
        0
    };
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags | reserve,
            -1,
            0,
        )
    };
    (base != libc::MAP_FAILED).then_some(base.cast())
}

fn map_or_err(len: usize) -> Result<*mut u8, StoreError> {
    map(len, 0).ok_or_else(|| {
        StoreError::Config(format!(
            "cannot map a {len}-byte heap: {}",
            std::io::Error::last_os_error()
        ))
    })
}
