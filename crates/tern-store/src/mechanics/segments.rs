//! Segments: the heap cut into equal pieces, the bookkeeping kept beside each, and the only
//! door to their bytes.
//!
//! A segment belongs to one shard at a time, to the free pool, or to a large write that
//! reserved it (`SegMeta::owner`), and only the thread holding its shard's lock may touch its
//! bytes. That contract is kept here rather than at every use: each shard holds one [`Owner`],
//! reachable only through the shard's lock, and [`Segments::read`] and [`Segments::write`] take
//! it, shared or exclusive. So the borrow checker keeps a write from overlapping any other
//! access to the same shard's bytes, and debug builds assert that the shard owns the segment
//! (the stress tests, run in debug, check this under contention). Ownership changes only under
//! the pool's lock (`assign`, `set_free`, `mark_pending_run`), which orders the last owner's
//! accesses before the next one's, or on a run a large write reserved, which no one else
//! touches until that write has linked it.
//!
//! A free segment is no one's, so its memory can go back to the OS (`discard`), under the pool
//! lock that keeps it free meanwhile.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::clock::UnixSecs;
use super::heap::{GrowError, Heap, PageKind};
use super::pool::Pool;
use super::seqlock::reuse_fence;

/// Bits of an item location's byte offset: the largest segment is 1 MiB.
pub(crate) const OFFSET_BITS: u32 = 20;
pub(crate) const NO_SEGMENT: u32 = u32::MAX;
pub(crate) const OWNER_FREE: u32 = u32::MAX;
/// A run handed to a writer that has not linked it into its shard yet.
pub(crate) const OWNER_PENDING: u32 = u32::MAX - 1;

/// Where an item lives: segment (run head for large items) and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub(crate) seg: u32,
    pub(crate) off: u32,
}

impl Loc {
    /// Never 0, which marks an empty index slot.
    pub(crate) fn pack(self) -> u64 {
        ((self.seg as u64 + 1) << OFFSET_BITS) | self.off as u64
    }

    /// [`Loc::unpack`] for a location read without the lock, which may be garbage: a packed 0
    /// gives segment `u32::MAX`, which `Segments::tail_racy` refuses with any other beyond the
    /// heap.
    #[inline(always)]
    pub(crate) fn unpack_racy(packed: u64) -> Loc {
        Loc {
            seg: ((packed >> OFFSET_BITS) as u32).wrapping_sub(1),
            off: (packed & ((1 << OFFSET_BITS) - 1)) as u32,
        }
    }

    pub(crate) fn unpack(packed: u64) -> Loc {
        Loc {
            seg: (packed >> OFFSET_BITS) as u32 - 1,
            off: (packed & ((1 << OFFSET_BITS) - 1)) as u32,
        }
    }
}

/// Segments reserved for one large item: `len` of them from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) start: u32,
    pub(crate) len: usize,
}

/// Per-segment bookkeeping, beside the heap rather than in it. Fields are atomics only so the
/// table can be shared; each is written by whoever owns the segment (its shard, under the
/// shard's lock, or the pool, under its lock), and ownership changes through those locks, so
/// relaxed loads see the owner's last writes.
/// Two cache lines each, whole: neighbouring segments usually belong to different shards, and
/// a write to one segment's counters must not slow the other shard's readers (false sharing).
/// `repr(C)`: the first line holds what a get reads (`created`, `epoch`), written only when the
/// segment opens or its items move; the second what every append and replacement writes
/// (`write_off`, `live`, `max_expiry`). A get of an item in a segment another core is appending
/// to then takes no line from it: two threads' gets with 20 % sets on zipf 0.99 keys went from
/// 1.29-1.34x to 1.38-1.40x one thread's (store bench, 2026-11-27).
#[derive(Default)]
#[repr(C, align(64))]
pub(crate) struct SegMeta {
    owner: AtomicU32,
    /// First segment of the run this one belongs to (itself for an ordinary segment).
    pub(crate) head: AtomicU32,
    /// At a run head: segments in the run; 1 for an ordinary segment.
    pub(crate) run_len: AtomicU32,
    pub(crate) created: AtomicU32,
    pub(crate) group: AtomicU32,
    /// High bits of the CAS of every item here; renewed when items are rewritten in place.
    epoch: AtomicU64,
    /// Age order for FIFO and merge: the epoch the segment was opened with.
    pub(crate) order: AtomicU64,
    /// The first line's rest: the appends' fields start the second.
    _read_line_end: [u64; 3],
    pub(crate) write_off: AtomicU32,
    pub(crate) live: AtomicU32,
    /// Latest deadline of any item written here; 0 when empty, `NEVER_EXPIRES` for never.
    pub(crate) max_expiry: AtomicU32,
}

/// A segment's bookkeeping as saved across a restart (`persist`); `live` is recounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SavedSeg {
    pub(crate) owner: u32,
    pub(crate) head: u32,
    pub(crate) run_len: u32,
    pub(crate) write_off: u32,
    pub(crate) max_expiry: u32,
    pub(crate) created: u32,
    pub(crate) group: u32,
    pub(crate) epoch: u64,
    pub(crate) order: u64,
}

pub(crate) fn get32(a: &AtomicU32) -> u32 {
    a.load(Relaxed)
}

pub(crate) fn set32(a: &AtomicU32, v: u32) {
    a.store(v, Relaxed)
}

/// A shard's right to its segments' bytes. Each shard holds the one made for its id, so it is
/// reachable only under the shard's lock.
pub(crate) struct Owner {
    id: u32,
}

impl Owner {
    /// Made once per shard, by `Shard::new`.
    pub(crate) fn new(id: u32) -> Owner {
        Owner { id }
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

/// One `SegMeta` per segment the heap may grow to, in an anonymous mapping: the kernel backs a
/// page of it only when an entry there is first written (`Segments::grow` initialises the
/// entries of the segments it opens), so a heap that may grow far past `-m` costs no memory for
/// bookkeeping until it does. Entries never initialised read as zeros (valid for atomics) and
/// are never read: only segments below `Segments::count` are ever named.
struct MetaTable {
    base: NonNull<SegMeta>,
    len: usize,
}

// SAFETY: the table is plain memory of atomics owned by it for its whole life.
unsafe impl Send for MetaTable {}
// SAFETY: as above; every field is an atomic, so shared references are sound.
unsafe impl Sync for MetaTable {}

impl MetaTable {
    fn new(len: usize) -> MetaTable {
        let bytes = (len * size_of::<SegMeta>()).max(1);
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it. Page-aligned,
        // so aligned for `SegMeta` (64 bytes).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            base != libc::MAP_FAILED,
            "cannot map {bytes} bytes of segment bookkeeping: {}",
            std::io::Error::last_os_error()
        );
        MetaTable {
            base: NonNull::new(base.cast()).expect("mmap returned null"),
            len,
        }
    }
}

impl std::ops::Deref for MetaTable {
    type Target = [SegMeta];

    #[inline(always)]
    fn deref(&self) -> &[SegMeta] {
        // SAFETY: `len` entries of zero-initialised (the kernel's fresh pages) atomics, valid
        // as any bit pattern of zeros, in a mapping that lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl Drop for MetaTable {
    fn drop(&mut self) {
        let bytes = (self.len * size_of::<SegMeta>()).max(1);
        // SAFETY: unmaps exactly the mapping made in `new`; no reference outlives the table
        // because they borrow it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), bytes) };
    }
}

pub(crate) struct Segments {
    heap: Heap,
    metas: MetaTable,
    /// Segments open for use: the start's, then as `grow` raised it. Segments past it exist
    /// only as reserved address space; the pool hands out none of them.
    count: AtomicUsize,
    /// log2 of the segment size.
    shift: u32,
    /// Hands out segment epochs (the high bits of CAS uniques, and age order).
    epoch: AtomicU64,
    cas_enabled: bool,
}

impl Segments {
    /// `count` segments of `1 << shift` bytes over `heap`, which may grow to as many as its
    /// reservation holds.
    pub(crate) fn new(heap: Heap, count: usize, shift: u32, cas_enabled: bool) -> Segments {
        let segs = Segments {
            metas: MetaTable::new(heap.reserved() >> shift),
            heap,
            count: AtomicUsize::new(0),
            shift,
            epoch: AtomicU64::new(1),
            cas_enabled,
        };
        segs.init_metas(0..count);
        segs.count.store(count, Relaxed);
        segs
    }

    fn init_metas(&self, segs: std::ops::Range<usize>) {
        for (i, meta) in self.metas[segs.clone()].iter().enumerate() {
            set32(&meta.owner, OWNER_FREE);
            set32(&meta.head, (segs.start + i) as u32);
            set32(&meta.run_len, 1);
        }
    }

    /// Segments open for use.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Relaxed)
    }

    /// Segments the heap may grow to.
    pub(crate) fn reserved(&self) -> usize {
        self.metas.len()
    }

    /// Opens segments up to `count` (a raised memory limit), free; `pool`, whose lock the
    /// caller holds, is grown to match, so no one takes one before it is ready.
    pub(crate) fn grow(&self, pool: &mut Pool, count: usize) -> Result<(), GrowError> {
        let from = self.count();
        if count <= from {
            return Ok(());
        }
        if count > self.reserved() {
            return Err(GrowError::Reserved);
        }
        self.heap.grow(count << self.shift)?;
        self.init_metas(from..count);
        self.count.store(count, Relaxed);
        pool.grow(count);
        Ok(())
    }

    #[inline]
    pub(crate) fn size(&self) -> usize {
        1 << self.shift
    }

    pub(crate) fn page_kind(&self) -> PageKind {
        self.heap.pages
    }

    #[inline]
    pub(crate) fn meta(&self, seg: u32) -> &SegMeta {
        &self.metas[seg as usize]
    }

    pub(crate) fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Relaxed)
    }

    /// Resets the bookkeeping of `head` (a segment or run head its shard just took) for items
    /// of TTL group `group`, with `written` bytes already reserved.
    pub(crate) fn open(&self, head: u32, written: usize, group: usize, now: UnixSecs) {
        let meta = self.meta(head);
        let epoch = self.next_epoch();
        set32(&meta.write_off, written as u32);
        set32(&meta.live, 0);
        set32(&meta.max_expiry, 0);
        set32(&meta.created, now);
        set32(&meta.group, group as u32);
        meta.epoch.store(epoch, Relaxed);
        meta.order.store(epoch, Relaxed);
    }

    /// Gives every item in `seg` a new CAS unique (their bytes changed in place, or they moved).
    pub(crate) fn renew_epoch(&self, seg: u32) {
        self.meta(seg).epoch.store(self.next_epoch(), Relaxed);
    }

    /// Hands `seg` to `owner`'s shard; called under the pool lock, or on a run the caller
    /// reserved.
    pub(crate) fn assign(&self, seg: u32, owner: &Owner) {
        set32(&self.meta(seg).owner, owner.id);
        // The new owner's odd count came before the pool's lock, so it orders nothing of the
        // freeing writer's: this does, before the new owner writes (see `seqlock`).
        reuse_fence();
    }

    /// Marks `seg` free, an ordinary segment again; called under the pool lock.
    pub(crate) fn set_free(&self, seg: u32) {
        let meta = self.meta(seg);
        set32(&meta.owner, OWNER_FREE);
        set32(&meta.head, seg);
        set32(&meta.run_len, 1);
    }

    /// Makes `len` segments from `start` a run reserved for a writer that holds no shard lock;
    /// called under the pool lock, so no one sees the run as free in between.
    pub(crate) fn mark_pending_run(&self, start: u32, len: usize) {
        for seg in start..start + len as u32 {
            set32(&self.meta(seg).owner, OWNER_PENDING);
            set32(&self.meta(seg).head, start);
        }
        set32(&self.meta(start).run_len, len as u32);
        // The run's writer holds no shard lock: this orders its writes after the freeing
        // writer's odd count, for readers still copying from the old items (see `seqlock`).
        reuse_fence();
    }

    /// The shard that owns `seg`, if one does.
    pub(crate) fn owner_shard(&self, seg: u32) -> Option<usize> {
        match get32(&self.meta(seg).owner) {
            OWNER_FREE | OWNER_PENDING => None,
            shard => Some(shard as usize),
        }
    }

    pub(crate) fn is_free(&self, seg: u32) -> bool {
        get32(&self.meta(seg).owner) == OWNER_FREE
    }

    pub(crate) fn is_pending(&self, seg: u32) -> bool {
        get32(&self.meta(seg).owner) == OWNER_PENDING
    }

    /// The bytes from `loc` to its segment's end, for a reader without the shard's lock (see
    /// `seqlock`): they may change while it reads, and `loc` may be stale, so they are only as
    /// good as the reader's check afterwards. `None` when `loc` is no place in a segment.
    #[inline(always)]
    pub(crate) fn tail_racy(&self, loc: Loc) -> Option<&[u8]> {
        let (seg, off) = (loc.seg as usize, loc.off as usize);
        if seg >= self.metas.len() || off >= self.size() {
            return None;
        }
        // SAFETY: inside segment `seg` (checked), so inside the heap, mapped while `self`
        // lives. Writers may change the bytes meanwhile: the seqlock's reads, whose argument
        // `seqlock`'s module comment gives.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.heap.address((seg << self.shift) + off),
                self.size() - off,
            )
        })
    }

    /// Where the item at `loc` is, for a prefetch (see [`Heap::address`]): no segment
    /// bookkeeping is read, unlike [`Segments::read`].
    #[inline(always)]
    pub(crate) fn address(&self, loc: Loc) -> *const u8 {
        self.heap
            .address(((loc.seg as usize) << self.shift) + loc.off as usize)
    }

    /// The bytes of `seg`, or of the whole run it heads, for reading.
    #[inline(always)]
    pub(crate) fn read<'a>(&'a self, owner: &'a Owner, seg: u32) -> &'a [u8] {
        // SAFETY: the slice borrows `owner` shared, and writing needs it exclusive, so no
        // mutable slice of this shard's segments is alive while this one is.
        unsafe { self.bytes(owner, seg) }
    }

    /// The bytes of `seg`, or of the whole run it heads, for writing.
    #[inline(always)]
    pub(crate) fn write<'a>(&'a self, owner: &'a mut Owner, seg: u32) -> &'a mut [u8] {
        // SAFETY: the slice borrows `owner` exclusively, so no other slice of this shard's
        // segments is alive while this one is.
        unsafe { self.bytes(owner, seg) }
    }

    /// The bytes of `from` for reading and of `to` for writing, at once (a copy between two
    /// segments or runs of one shard).
    pub(crate) fn read_write<'a>(
        &'a self,
        owner: &'a mut Owner,
        from: u32,
        to: u32,
    ) -> (&'a [u8], &'a mut [u8]) {
        let end = |seg: u32| seg + get32(&self.meta(seg).run_len).max(1);
        assert!(
            end(from) <= to || end(to) <= from,
            "segments {from} and {to} overlap"
        );
        // SAFETY: both borrow `owner` exclusively, so no other slice of this shard's segments
        // is alive, and the two do not overlap (asserted above).
        unsafe { (self.bytes(owner, from), self.bytes(owner, to)) }
    }

    /// # Safety
    /// No other slice of these bytes is alive for the result's life. The caller's own borrow
    /// of `owner` is how `read`, `write` and `read_write` show that.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn bytes(&self, owner: &Owner, seg: u32) -> &mut [u8] {
        let meta = self.meta(seg);
        debug_assert_eq!(
            get32(&meta.owner),
            owner.id,
            "segment {seg} touched by shard {} which does not own it",
            owner.id
        );
        let run = get32(&meta.run_len).max(1) as usize;
        // SAFETY: `seg + run <= count` (segments past it are never handed out by the pool, so
        // no shard names one), so the range is inside the heap's open part. The segment belongs
        // to `owner`'s shard (asserted in debug builds: a shard's index, chains and `Found`s
        // name only its own segments, and a segment changes hands only through the pool), and
        // an `Owner` is reachable only under its shard's lock, so no other thread touches
        // these bytes; exclusivity within this thread is the caller's contract.
        unsafe {
            self.heap
                .slice((seg as usize) << self.shift, run << self.shift)
        }
    }

    #[cfg(test)]
    pub(crate) fn heap(&self) -> &Heap {
        &self.heap
    }

    /// Whether `discard` can give memory back for this heap (see `Heap::can_discard`).
    pub(crate) fn can_discard(&self) -> bool {
        self.heap.can_discard()
    }

    /// Gives the memory of the free segments `start..start + len` back to the OS and marks
    /// them cold in `pool`, whose lock the caller holds (`&mut Pool` is reached only through
    /// it). Their next owner finds zeros, which is as good as any old bytes: a segment is read
    /// only up to its write offset. Returns whether memory was given back.
    pub(crate) fn discard(&self, pool: &mut Pool, start: usize, len: usize) -> bool {
        assert!(
            (start..start + len).all(|seg| pool.is_free(seg as u32) && self.is_free(seg as u32)),
            "segments {start}..{} are not all free",
            start + len
        );
        // SAFETY: the segments are open (the pool, which knows only those below `count`, says
        // they are free), so the range is in the heap's open part. No reference into their
        // bytes is alive: bytes are reached only through `bytes`, by the
        // shard owning the segment, and each slice borrows that shard's `Owner`, so it ended
        // before the shard, holding itself exclusively, gave the segment up (`set_free` and
        // `Pool::give`, under the pool lock). None is made until this returns: a free segment
        // leaves the pool (`take`, `take_run`, `claim_window`) only under the pool lock, held
        // by the caller for `pool`'s life.
        let discarded = unsafe { self.heap.discard(start << self.shift, len << self.shift) };
        if discarded {
            pool.mark_cold(start, len);
        }
        discarded
    }

    /// Writes the heap's pages back to its memory file, if it has one.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        self.heap.sync()
    }

    /// The next segment epoch to hand out: every CAS unique given so far is below
    /// `high_water << shift`, so a restore that starts from it reuses none.
    pub(crate) fn epoch_high_water(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    pub(crate) fn set_epoch_high_water(&self, epoch: u64) {
        self.epoch.store(epoch, Relaxed);
    }

    /// `seg`'s bookkeeping, for a restart (`persist`).
    pub(crate) fn save(&self, seg: u32) -> SavedSeg {
        let m = self.meta(seg);
        SavedSeg {
            owner: get32(&m.owner),
            head: get32(&m.head),
            run_len: get32(&m.run_len),
            write_off: get32(&m.write_off),
            max_expiry: get32(&m.max_expiry),
            created: get32(&m.created),
            group: get32(&m.group),
            epoch: m.epoch.load(Relaxed),
            order: m.order.load(Relaxed),
        }
    }

    /// Puts `seg`'s saved bookkeeping back, with no live item counted yet (a restore links
    /// them again); a segment saved free or pending is free. Called before the store is
    /// shared.
    pub(crate) fn restore(&self, seg: u32, saved: &SavedSeg) {
        if matches!(saved.owner, OWNER_FREE | OWNER_PENDING) {
            self.set_free(seg);
            return;
        }
        let m = self.meta(seg);
        set32(&m.owner, saved.owner);
        set32(&m.head, saved.head);
        set32(&m.run_len, saved.run_len);
        set32(&m.write_off, saved.write_off);
        set32(&m.live, 0);
        set32(&m.max_expiry, saved.max_expiry);
        set32(&m.created, saved.created);
        set32(&m.group, saved.group);
        m.epoch.store(saved.epoch, Relaxed);
        m.order.store(saved.order, Relaxed);
    }

    /// The CAS unique of an item written at `loc` (its place). Offsets are below the segment
    /// size, so shifting the epoch by the segment size's bits keeps uniques distinct and as
    /// small as they can be (they grow by one segment's worth per segment opened).
    pub(crate) fn place_cas(&self, loc: Loc) -> u64 {
        if self.cas_enabled {
            (self.meta(loc.seg).epoch.load(Relaxed) << self.shift) | loc.off as u64
        } else {
            0
        }
    }

    /// The CAS unique of a stored item: the one it kept through a rewrite, else its place's.
    pub(crate) fn cas_of(&self, loc: Loc, kept: Option<u64>) -> u64 {
        match kept {
            Some(cas) if self.cas_enabled => cas,
            _ => self.place_cas(loc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments() -> Segments {
        Segments::new(
            Heap::new(16 << 12, 16 << 12, false, false).unwrap(),
            16,
            12,
            true,
        )
    }

    #[test]
    fn what_a_get_reads_of_a_segment_is_on_a_line_appends_do_not_write() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<SegMeta>(), 128);
        for read in [offset_of!(SegMeta, created), offset_of!(SegMeta, epoch)] {
            assert!(read + 8 <= 64, "{read}");
        }
        for appended in [
            offset_of!(SegMeta, write_off),
            offset_of!(SegMeta, live),
            offset_of!(SegMeta, max_expiry),
        ] {
            assert!(appended >= 64, "{appended}");
        }
    }

    #[test]
    fn an_owner_reads_what_it_wrote_across_a_run() {
        let segs = segments();
        let mut owner = Owner::new(3);
        segs.mark_pending_run(4, 3);
        for seg in 4..7 {
            segs.assign(seg, &owner);
        }
        segs.write(&mut owner, 4)[(3 << 12) - 1] = 7;
        assert_eq!(segs.read(&owner, 4).len(), 3 << 12);
        assert_eq!(segs.read(&owner, 4)[(3 << 12) - 1], 7);
        segs.assign(9, &owner);
        let (from, to) = segs.read_write(&mut owner, 4, 9);
        to[..4].copy_from_slice(&from[..4]);
        assert_eq!(segs.owner_shard(9), Some(3));
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn a_copy_within_one_run_is_refused() {
        let segs = segments();
        let mut owner = Owner::new(0);
        segs.mark_pending_run(2, 4);
        for seg in 2..6 {
            segs.assign(seg, &owner);
        }
        let _ = segs.read_write(&mut owner, 2, 3);
    }

    #[test]
    fn a_discarded_segment_comes_back_zeroed_and_its_neighbour_whole() {
        let segs = segments();
        segs.heap.no_huge_pages();
        let mut pool = Pool::new(16, segs.size());
        let mut owner = Owner::new(0);
        for (fill, seg) in [7, 9].into_iter().zip(0..) {
            assert_eq!(pool.take(), Some(seg));
            segs.assign(seg, &owner);
            segs.write(&mut owner, seg).fill(fill);
        }
        segs.set_free(0);
        pool.give(0);
        assert!(segs.discard(&mut pool, 0, 1));
        assert_eq!(segs.heap.resident_pages(0, 1 << 12), 0);
        assert_eq!(pool.take(), Some(0));
        segs.assign(0, &owner);
        assert!(segs.read(&owner, 0).iter().all(|&b| b == 0));
        assert!(segs.read(&owner, 1).iter().all(|&b| b == 9));
    }

    #[test]
    #[should_panic(expected = "not all free")]
    fn a_segment_in_use_is_never_discarded() {
        let segs = segments();
        let mut pool = Pool::new(16, segs.size());
        let seg = pool.take().unwrap();
        segs.assign(seg, &Owner::new(0));
        segs.discard(&mut pool, 0, 2);
    }

    /// The locking contract, checked where `cargo test` runs: debug builds.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "does not own it")]
    fn touching_another_shards_segment_panics_in_debug_builds() {
        let segs = segments();
        segs.assign(5, &Owner::new(1));
        let _ = segs.read(&Owner::new(2), 5);
    }
}
