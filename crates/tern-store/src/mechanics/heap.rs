//! The heap: one anonymous mapping made at start. Its address space is reserved up to the most
//! the memory limit may be raised to (`Config::max_heap_bytes`), but only the first `-m` bytes
//! are readable and writable (the rest is PROT_NONE until `grow` opens it, so nothing can touch
//! memory the limit has not allowed). Pages are only backed when a segment is first written,
//! so RSS grows with use and never past what is open; after the memory limit is lowered, free
//! segments' pages are given back (`discard`).
//!
//! With a memory file (memcached's `-e`, see `persist`) the heap is a shared mapping of that
//! file instead, so the items outlive the process; the file's space is reserved before it is
//! mapped, so no page of the mapping lacks its place in the file system. Such a heap, and one of
//! MAP_HUGETLB pages (whose pool is reserved up front), cannot grow.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::error::StoreError;

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
    /// Bytes open to reads and writes, from `base`: the start's, then as `grow` raised it.
    /// Changed only by `grow`, under the pool lock; read for bounds checks.
    len: AtomicUsize,
    /// Bytes `len` may grow to: the address space reserved.
    reserved: usize,
    /// Bytes actually mapped: `reserved` rounded up to whole huge pages for MAP_HUGETLB.
    mapped: usize,
    pub(crate) pages: PageKind,
    /// mlocked (`-k`): pages stay resident, and `discard` leaves them be.
    locked: bool,
    /// The smallest unit `discard` can give back.
    page_size: usize,
    /// A shared mapping of a memory file rather than anonymous memory.
    file_backed: bool,
}

// SAFETY: the mapping is plain memory owned by the heap for its whole life; which thread may
// touch which bytes is decided by segment ownership (see `Heap::slice`).
unsafe impl Send for Heap {}
// SAFETY: as above; `Heap` itself hands out no references without the caller's ownership proof.
unsafe impl Sync for Heap {}

const HUGE_PAGE: usize = 2 << 20;

impl Heap {
    /// A heap of `len` bytes that may grow to `reserve` (at least `len`). Where that much
    /// address space cannot be had (`ulimit -v`), or with MAP_HUGETLB pages, it cannot grow.
    pub(crate) fn new(
        len: usize,
        reserve: usize,
        large_pages: bool,
        lock: bool,
    ) -> Result<Heap, StoreError> {
        // MAP_HUGETLB (without MAP_NORESERVE, which would defer failure to a SIGBUS on first
        // touch) only succeeds when enough huge pages are reserved (vm.nr_hugepages); otherwise
        // fall back to ordinary pages with transparent huge pages requested.
        let rounded = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let huge = if large_pages {
            map(
                rounded,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_HUGETLB,
            )
        } else {
            None
        };
        if let Some(base) = huge {
            let mut heap = Heap {
                base,
                len: AtomicUsize::new(len),
                reserved: len,
                mapped: rounded,
                pages: PageKind::HugeTlb,
                locked: false,
                page_size: page_size(),
                file_backed: false,
            };
            heap.finish(large_pages, lock)?;
            return Ok(heap);
        }
        // Ordinary pages: the whole reservation without access, then the first `len` bytes
        // opened as `grow` opens more later.
        let reserve = reserve.max(len);
        let (base, reserved) = match map(reserve, libc::PROT_NONE, 0) {
            Some(base) => (base, reserve),
            None => (map_or_err(len)?, len),
        };
        let mut heap = Heap {
            base,
            len: AtomicUsize::new(0),
            reserved,
            mapped: reserved,
            pages: PageKind::Normal,
            locked: lock,
            page_size: page_size(),
            file_backed: false,
        };
        heap.grow(len).map_err(|e| match e {
            GrowError::Lock(err) => StoreError::Lock(lock_message(len, &err)),
            GrowError::Map(err) => {
                StoreError::Config(format!("cannot map a {len}-byte heap: {err}"))
            }
            // `reserved` is at least `len`.
            GrowError::Reserved => StoreError::Config(format!("cannot map a {len}-byte heap")),
        })?;
        // Growing later asks for them too (see `grow`).
        if large_pages && heap.advise_huge(0, len) {
            heap.pages = PageKind::TransparentHuge;
        }
        Ok(heap)
    }

    /// A shared mapping of the first `len` bytes of `file`, which is at least that long (a
    /// mapping past the end of a file faults with SIGBUS on touch) and whose space the caller
    /// has reserved (a hole the file system cannot fill faults with SIGBUS too). Not
    /// MAP_POPULATE: that would fault in every page of the heap at start, where faulting in
    /// only the segments a restore reads maps just what holds items.
    pub(crate) fn from_file(
        file: &std::fs::File,
        len: usize,
        large_pages: bool,
        lock: bool,
    ) -> Result<Heap, StoreError> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we hold open; nothing else in this process
        // refers to it. Another process changing the file is the operator's to prevent (as
        // with memcached's -e).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(StoreError::Config(format!(
                "cannot map the {len}-byte memory file: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut heap = Heap {
            base: base.cast(),
            len: AtomicUsize::new(len),
            reserved: len,
            mapped: len,
            pages: PageKind::Normal,
            locked: false,
            page_size: page_size(),
            file_backed: true,
        };
        heap.finish(large_pages, lock)?;
        Ok(heap)
    }

    /// `-L` (transparent huge pages where no MAP_HUGETLB mapping was had) and `-k`, for a
    /// heap mapped whole at start (a memory file's, or MAP_HUGETLB pages).
    fn finish(&mut self, large_pages: bool, lock: bool) -> Result<(), StoreError> {
        let len = self.len();
        if large_pages && self.pages == PageKind::Normal && self.advise_huge(0, len) {
            self.pages = PageKind::TransparentHuge;
        }
        if lock {
            // SAFETY: locks our own mapping; no memory is read or written.
            if unsafe { libc::mlock(self.base.cast(), len) } != 0 {
                let err = std::io::Error::last_os_error();
                return Err(StoreError::Lock(lock_message(len, &err)));
            }
            self.locked = true;
        }
        Ok(())
    }

    /// Asks for transparent huge pages over `len` bytes at `start`; false if refused.
    fn advise_huge(&self, start: usize, len: usize) -> bool {
        // SAFETY: advice on our own mapping; failure only means no transparent huge pages.
        unsafe { libc::madvise(self.base.add(start).cast(), len, libc::MADV_HUGEPAGE) == 0 }
    }

    /// Bytes open to reads and writes.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Bytes the heap may grow to.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Opens the heap up to `len` bytes (a raised memory limit): readable and writable, with
    /// transparent huge pages asked for where the rest has them, and locked in memory with
    /// `-k`. No page is touched, so memory is used only as segments there are written. The
    /// caller holds the pool lock (`Segments::grow`), so two growths never race.
    pub(crate) fn grow(&self, len: usize) -> Result<(), GrowError> {
        let from = self.len();
        if len <= from {
            return Ok(());
        }
        if len > self.reserved {
            return Err(GrowError::Reserved);
        }
        // SAFETY: `from..len` lies inside our own reservation, which nothing refers to yet
        // (no segment there has been handed out); changing its protection touches no memory.
        let (start, bytes) = (unsafe { self.base.add(from) }, len - from);
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: as above.
        if unsafe { libc::mprotect(start.cast(), bytes, rw) } != 0 {
            return Err(GrowError::Map(std::io::Error::last_os_error()));
        }
        if self.pages == PageKind::TransparentHuge {
            self.advise_huge(from, bytes);
        }
        // SAFETY: locks pages of our own mapping; no memory is read or written.
        if self.locked && unsafe { libc::mlock(start.cast(), bytes) } != 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: closes again what was opened above, which nothing refers to.
            unsafe { libc::mprotect(start.cast(), bytes, libc::PROT_NONE) };
            return Err(GrowError::Lock(err));
        }
        self.len.store(len, Relaxed);
        Ok(())
    }

    /// Writes the mapping's dirty pages back to its memory file (a no-op cost on tmpfs, where
    /// the page cache is the file).
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        if !self.file_backed {
            return Ok(());
        }
        // SAFETY: msync of exactly our own mapping; no memory is read or written by us.
        let rc = unsafe { libc::msync(self.base.cast(), self.mapped, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Whether `discard` may give memory back. Not for mlocked heaps: MADV_DONTNEED refuses
    /// locked pages (EINVAL), and -k asks for the heap to stay resident. Not for MAP_HUGETLB
    /// heaps: Linux before 5.18 refuses (EINVAL), 5.18 to 6.0 rounded the end up to a whole
    /// huge page, zeroing the segments that share it (fixed by "mm,madvise,hugetlb: fix
    /// unexpected data loss with MADV_DONTNEED on hugetlbfs"), and where it works, whole huge
    /// pages go back to the reserved huge page pool, not to the system. Transparent huge pages
    /// are fine: the kernel splits one to free part of it.
    pub(crate) fn can_discard(&self) -> bool {
        !self.locked && self.pages != PageKind::HugeTlb
    }

    /// Gives the memory of the whole pages within `len` bytes at `start` back to the OS with
    /// MADV_DONTNEED (MADV_REMOVE for a memory file: DONTNEED would only unmap the file's
    /// pages, not free them): RSS falls, and the next touch of those bytes faults in a zeroed
    /// page.
    /// Part pages at either end are kept, since the rest of such a page may be in use.
    /// Returns whether any memory was given back.
    ///
    /// # Safety
    /// `start + len` is within the mapping, no reference into those bytes is alive, and none
    /// is made until this returns (`Segments::discard`, the only caller, holds the free pool's
    /// lock over free segments).
    pub(crate) unsafe fn discard(&self, start: usize, len: usize) -> bool {
        debug_assert!(start + len <= self.len());
        let from = start.next_multiple_of(self.page_size);
        let to = (start + len) / self.page_size * self.page_size;
        if from >= to {
            return false;
        }
        let advice = if self.file_backed {
            libc::MADV_REMOVE
        } else {
            libc::MADV_DONTNEED
        };
        // SAFETY: whole pages inside our mapping (caller's contract), which no reference
        // points into (caller's contract), so zeroing them breaks no borrow.
        unsafe { libc::madvise(self.base.add(from).cast(), to - from, advice) == 0 }
    }

    /// Where byte `at` of the heap is, for a prefetch, or a read without the lock that checked
    /// `at` is inside the heap (`Segments::tail_racy`): it is not checked here.
    #[inline(always)]
    pub(crate) fn address(&self, at: usize) -> *const u8 {
        self.base.wrapping_add(at).cast_const()
    }

    /// `len` bytes at `start`.
    ///
    /// # Safety
    /// `start + len` is within the open part of the mapping (`len`), and for the life of the slice no other reference into
    /// those bytes exists: the caller holds the lock of the shard that owns the segments holding
    /// them (`Segments::read` and `Segments::write`, the only callers, see to it).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [u8] {
        debug_assert!(start + len <= self.len());
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

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Why a heap could not grow.
#[derive(Debug)]
pub(crate) enum GrowError {
    /// Past the address space reserved at start (or the heap cannot grow at all).
    Reserved,
    /// mprotect refused (strict overcommit: no memory to commit).
    Map(std::io::Error),
    /// mlock refused (`-k` past RLIMIT_MEMLOCK).
    Lock(std::io::Error),
}

impl std::fmt::Display for GrowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrowError::Reserved => write!(f, "past the address space reserved at start"),
            GrowError::Map(err) => write!(f, "mprotect: {err}"),
            GrowError::Lock(err) => write!(f, "mlock: {err}"),
        }
    }
}

fn lock_message(len: usize, err: &std::io::Error) -> String {
    format!(
        "cannot lock the {len}-byte heap in memory (mlock: {err}); raise the limit with \
         `ulimit -l` / RLIMIT_MEMLOCK, or start without -k"
    )
}

fn map(len: usize, prot: libc::c_int, extra_flags: libc::c_int) -> Option<*mut u8> {
    // Ordinary pages are backed on first touch, like memcached's heap, so a large `-m` (or
    // reservation) does not need that much free memory up front.
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
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags | reserve,
            -1,
            0,
        )
    };
    (base != libc::MAP_FAILED).then_some(base.cast())
}

fn map_or_err(len: usize) -> Result<*mut u8, StoreError> {
    map(len, libc::PROT_NONE, 0).ok_or_else(|| {
        StoreError::Config(format!(
            "cannot map a {len}-byte heap: {}",
            std::io::Error::last_os_error()
        ))
    })
}

#[cfg(test)]
impl Heap {
    /// Resident pages among the whole pages of `len` bytes at `start` (mincore).
    pub(crate) fn resident_pages(&self, start: usize, len: usize) -> usize {
        let pages = len / self.page_size;
        let mut vec = vec![0u8; pages];
        // SAFETY: whole pages inside our mapping; mincore writes one byte per page into `vec`,
        // which has that many.
        let rc = unsafe { libc::mincore(self.base.add(start).cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// Makes the heap read-only (or writable again), so a test can show an operation writes
    /// nothing to it: a write would fault.
    #[cfg(test)]
    pub(crate) fn set_read_only(&self, read_only: bool) {
        let prot = if read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: changes the protection of our own mapping's open part; the caller holds no
        // slice of it that it writes through while it is read-only.
        let rc = unsafe { libc::mprotect(self.base.cast(), self.len(), prot) };
        assert_eq!(rc, 0);
    }

    /// Asks for 4 KiB pages only, so a test's page counts do not depend on whether the
    /// machine backs anonymous memory with transparent huge pages.
    pub(crate) fn no_huge_pages(&self) {
        // SAFETY: advice on our own mapping; no memory is read or written.
        let rc = unsafe { libc::madvise(self.base.cast(), self.len(), libc::MADV_NOHUGEPAGE) };
        assert_eq!(rc, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_file_keeps_what_was_written_and_discard_frees_its_pages() {
        use std::os::unix::fs::MetadataExt;
        let page = page_size();
        let len = 16 * page;
        // On tmpfs, where memory files belong (and MADV_REMOVE works on any kernel).
        let dir = std::path::Path::new("/dev/shm");
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("tern-heap-file-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(len as u64).unwrap();
        {
            let heap = Heap::from_file(&file, len, false, false).unwrap();
            // SAFETY: the only reference into the heap, dropped at the end of the statement.
            unsafe { heap.slice(0, len) }.fill(7);
            heap.sync().unwrap();
        }
        let heap = Heap::from_file(&file, len, false, false).unwrap();
        // SAFETY: as above.
        assert!(unsafe { heap.slice(0, len) }.iter().all(|&b| b == 7));
        let blocks = file.metadata().unwrap().blocks();
        // SAFETY: whole pages of our mapping; no reference into them is alive.
        assert!(unsafe { heap.discard(4 * page, 8 * page) });
        assert!(file.metadata().unwrap().blocks() < blocks);
        // SAFETY: as above.
        let bytes = unsafe { heap.slice(0, len) };
        assert!(bytes[4 * page..12 * page].iter().all(|&b| b == 0));
        assert!(bytes[..4 * page]
            .iter()
            .chain(&bytes[12 * page..])
            .all(|&b| b == 7));
        drop(heap);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_heap_grows_within_its_reservation_and_no_further() {
        let page = page_size();
        let heap = Heap::new(4 * page, 16 * page, false, false).unwrap();
        assert_eq!((heap.len(), heap.reserved()), (4 * page, 16 * page));
        heap.grow(12 * page).unwrap();
        assert_eq!(heap.len(), 12 * page);
        // SAFETY: the only reference into the heap, inside its open part.
        let bytes = unsafe { heap.slice(0, 12 * page) };
        bytes.fill(5);
        assert!(bytes.iter().all(|&b| b == 5));
        assert!(matches!(heap.grow(17 * page), Err(GrowError::Reserved)));
        heap.grow(2 * page).unwrap();
        assert_eq!(heap.len(), 12 * page, "a heap never shrinks");
        // Reserved at its own size (as a memory file's or huge pages' heap is): no growth.
        let fixed = Heap::new(4 * page, 0, false, false).unwrap();
        assert_eq!(fixed.reserved(), 4 * page);
        assert!(matches!(fixed.grow(5 * page), Err(GrowError::Reserved)));
    }

    #[test]
    fn discarded_pages_leave_memory_and_read_back_zero_while_their_neighbours_stay() {
        let page = page_size();
        let len = 16 * page;
        let heap = Heap::new(len, len, false, false).unwrap();
        heap.no_huge_pages();
        // SAFETY: the only reference into the heap, dropped at the end of the statement.
        unsafe { heap.slice(0, len) }.fill(0xab);
        // SAFETY: no reference into the heap is alive, and the ranges are inside it.
        let (part, whole) = unsafe { (heap.discard(100, page - 200), heap.discard(100, 3 * page)) };
        assert!(!part && whole);
        assert_eq!(heap.resident_pages(page, 2 * page), 0);
        // SAFETY: the only reference into the heap from here on.
        let bytes = unsafe { heap.slice(0, len) };
        assert!(bytes[..page].iter().all(|&b| b == 0xab), "first page kept");
        assert!(bytes[page..3 * page].iter().all(|&b| b == 0));
        assert!(
            bytes[3 * page..].iter().all(|&b| b == 0xab),
            "last part page kept"
        );
    }
}
