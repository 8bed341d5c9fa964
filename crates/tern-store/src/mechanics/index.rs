//! A shard's hash index: one `u64` per item in buckets of eight (one cache line), probed
//! bucket by bucket.
//!
//! A slot holds a 24-bit tag (the hash's top bits) and the item's 40-bit location (segment + 1,
//! byte offset). The home bucket is computed from the tag alone, so growing the table never
//! reads a key: the shard's table is rebuilt 1.125x larger when 85% full, which keeps it between
//! 75% and 85% full (9.6-10.8 bytes per item, counting a one-byte overflow count per bucket;
//! a fuller table makes misses scan more buckets: at 88-92% a miss cost ~1.7x the instructions).
//! The small step keeps an item's whole overhead (header + index) under 16 bytes at every
//! point of the cycle; it costs more rebuilds while a shard fills (each item is moved about
//! eight times on the way to its final table size), none once the heap is full.
//! Eight slots per bucket keep probe sequences short at that load: an entry lands in its home
//! bucket or the next one or two, a bucket's overflow count says whether a search must go on,
//! and a removal just clears its slot. A rebuild holds only this shard's lock, for a time
//! proportional to the shard's items (`Config::shards` spreads the index).
//!
//! The tables count inside the memory limit: the store charges a new table before it is built
//! (`Store::grow_index`, making room by eviction when the heap is full), and a table that
//! evictions leave under 30% full is rebuilt smaller, giving its memory back to the items.
//!
//! Optimistic readers probe a table without the shard's lock (see `seqlock`), so a table a
//! rebuild replaces must stay readable: each shard's tables live in two address ranges
//! ([`Regions`]) reserved for the shard's life; a rebuild writes the one not in use, switches,
//! and gives the old one's pages back to the OS. A late reader of the old table reads it,
//! zeros or a newer table, never unmapped memory, and its check rejects what it read.

pub(crate) const TAG_BITS: u32 = 24;
const LOC_BITS: u32 = 40;
const LOC_MASK: u64 = (1 << LOC_BITS) - 1;
const WAYS: usize = 8;
const MIN_BUCKETS: usize = 8;
/// Bytes per bucket: its cache line and its overflow count.
const BUCKET_BYTES: usize = std::mem::size_of::<Bucket>() + 1;
/// An overflow count this high stays (it no longer knows how many passed).
const STUCK: u8 = u8::MAX;

#[repr(align(64))]
#[derive(Clone, Copy, Default)]
struct Bucket([u64; WAYS]);

impl Bucket {
    /// Bit `w` set where slot `w` holds `tag`: the whole bucket in one comparison (SSE2, which
    /// every x86_64 has: ~16 instructions, where a slot-by-slot scan took ~6 per slot up to
    /// the hit and 48 for a miss).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    fn slots_tagged(&self, tag: u32) -> u32 {
        use std::arch::x86_64::*;
        let slots = self.0.as_ptr().cast::<__m128i>();
        // SAFETY: SSE2 is enabled (the cfg above); the four loads read the bucket's 64 bytes,
        // which are 64-byte aligned (`repr(align(64))`), two slots each.
        unsafe {
            let [s01, s23, s45, s67] = [0, 1, 2, 3].map(|i| _mm_load_ps(slots.add(i).cast()));
            // The high halves of the slots, in slot order: a tag above 8 location bits.
            let high0 = _mm_castps_si128(_mm_shuffle_ps::<0b11_01_11_01>(s01, s23));
            let high1 = _mm_castps_si128(_mm_shuffle_ps::<0b11_01_11_01>(s45, s67));
            let tag_bits = _mm_set1_epi32(!0xff);
            let want = _mm_set1_epi32((tag << (LOC_BITS - 32)) as i32);
            let eq0 = _mm_cmpeq_epi32(_mm_and_si128(high0, tag_bits), want);
            let eq1 = _mm_cmpeq_epi32(_mm_and_si128(high1, tag_bits), want);
            let bytes = _mm_packs_epi16(_mm_packs_epi32(eq0, eq1), _mm_setzero_si128());
            _mm_movemask_epi8(bytes) as u32
        }
    }

    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline(always)]
    fn slots_tagged(&self, tag: u32) -> u32 {
        self.slots_tagged_portably(tag)
    }

    #[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
    fn slots_tagged_portably(&self, tag: u32) -> u32 {
        let mut hits = 0;
        for (w, &slot) in self.0.iter().enumerate() {
            hits |= u32::from(tag_of(slot) == tag) << w;
        }
        hits
    }
}

/// A table in a region: `n` buckets, then per bucket how many entries live past it (their home
/// bucket is this one or earlier and they were placed after it; a search stops at a bucket
/// whose count is 0).
pub(crate) struct Index {
    regions: Regions,
    /// Regions a raised memory limit outgrew (`widen`): their pages given back, their address
    /// space kept until the store goes, as a reader without the lock may still be probing them.
    outgrown: Vec<Regions>,
    /// The region the table is in (0 or 1).
    active: usize,
    /// Buckets in the table.
    n: usize,
    len: usize,
    /// The `len` at which the table is 85% full and wants rebuilding larger, computed once
    /// per table so that the check before every insert is one comparison.
    full_at: usize,
}

/// The bucket a tag's entry is placed in first, in a table of `buckets` buckets.
pub(crate) fn home_bucket(tag: u32, buckets: usize) -> usize {
    ((tag as u64 * buckets as u64) >> TAG_BITS) as usize
}

/// No slot hint (see [`Index::find_hinted`]): beyond any table, which holds far fewer than
/// 2^32 slots.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Bytes from one bucket to the next.
pub(crate) const BUCKET_STRIDE: usize = std::mem::size_of::<Bucket>();

fn tag_of(slot: u64) -> u32 {
    (slot >> LOC_BITS) as u32
}

impl Index {
    /// An empty table whose rebuilds may grow it to `max_bytes` (at least its first size).
    pub(crate) fn new(max_bytes: usize) -> Index {
        let mut index = Index {
            regions: Regions::reserve(Self::cap_for(max_bytes))
                .unwrap_or_else(|e| panic!("reserving address space for an index: {e}")),
            outgrown: Vec::new(),
            active: 0,
            n: 0,
            len: 0,
            full_at: 0,
        };
        index.switch(MIN_BUCKETS);
        index
    }

    fn cap_for(max_bytes: usize) -> usize {
        (max_bytes / BUCKET_BYTES).max(MIN_BUCKETS)
    }

    /// Lets rebuilds grow the table to `max_bytes` (a raised memory limit): moves the table into
    /// new, larger regions if its own are smaller. The caller holds the shard's lock and then
    /// refreshes its hint.
    pub(crate) fn widen(&mut self, max_bytes: usize) -> std::io::Result<()> {
        let cap = Self::cap_for(max_bytes);
        if cap <= self.regions.cap {
            return Ok(());
        }
        let old = std::mem::replace(&mut self.regions, Regions::reserve(cap)?);
        let (old_active, old_n) = (self.active, self.n);
        // `switch` flips to region 0 of the new pair, all zero.
        self.active = 1;
        self.switch(old_n);
        for b in 0..old_n {
            // SAFETY: bucket `b < old_n` of the table in `old`, which stays mapped (in
            // `outgrown`); the new table is in another mapping, so nothing written aliases it.
            let bucket = unsafe { *old.base(old_active).add(b) };
            for &slot in bucket.0.iter().filter(|&&s| s != 0) {
                self.place(slot);
            }
        }
        old.release(old_active, old_n);
        self.outgrown.push(old);
        Ok(())
    }

    /// Makes the other region's `n` buckets (all zero: see `Regions`) the table, leaving the
    /// entries of the one before for the caller to place, then release.
    fn switch(&mut self, n: usize) -> (usize, usize) {
        let old = (self.active, self.n);
        self.active ^= 1;
        self.n = n;
        // One more entry would take the table past 85%: (len + 1) * 20 > slots * 17.
        self.full_at = n * WAYS * 17 / 20;
        old
    }

    #[inline(always)]
    fn buckets(&self) -> &[Bucket] {
        // SAFETY: the region holds `n <= cap` buckets, zeroed or written only through `&mut
        // self`; readers without the lock only read (see `seqlock`).
        unsafe { std::slice::from_raw_parts(self.regions.base(self.active), self.n) }
    }

    #[inline(always)]
    fn buckets_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: as `buckets`, and `&mut self` makes this the one slice of them.
        unsafe { std::slice::from_raw_parts_mut(self.regions.base(self.active), self.n) }
    }

    #[inline(always)]
    fn overflow(&self) -> &[u8] {
        // SAFETY: the `n` counts after the `n` buckets, inside the region (`cap * BUCKET_BYTES`).
        unsafe {
            std::slice::from_raw_parts(overflow_of(self.regions.base(self.active), self.n), self.n)
        }
    }

    #[inline(always)]
    fn overflow_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `overflow`, and `&mut self` makes this the one slice of them.
        unsafe {
            std::slice::from_raw_parts_mut(
                overflow_of(self.regions.base(self.active), self.n),
                self.n,
            )
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every entry whose tag is in `tags`, by location, wherever probing placed it: from the
    /// home bucket of the first tag on, past the last tag's home bucket, until a bucket says no
    /// entry from before it lives further on. Tags order entries the same way whatever the
    /// table's size (a tag's home bucket scales with the table), so ranges of tags cut a walk
    /// into steps that a rebuild in between neither repeats nor skips.
    pub(crate) fn entries_with_tags(&self, tags: std::ops::Range<u32>, mut each: impl FnMut(u64)) {
        if tags.is_empty() || self.len == 0 {
            return;
        }
        let last = self.home(tags.end - 1);
        let mut b = self.home(tags.start);
        let mut reached_last = false;
        for _ in 0..self.n {
            for &slot in &self.buckets()[b].0 {
                if slot != 0 && tags.contains(&tag_of(slot)) {
                    each(slot & LOC_MASK);
                }
            }
            reached_last |= b == last;
            if reached_last && self.overflow()[b] == 0 {
                return;
            }
            b = self.next(b);
        }
    }

    /// Every whole slot (tag and location) whose location `keep` accepts: what a warm
    /// restart saves of the entries it cannot rebuild by hashing a key in memory.
    pub(crate) fn slots_where(&self, keep: impl Fn(u64) -> bool) -> Vec<u64> {
        self.buckets()
            .iter()
            .flat_map(|b| b.0)
            .filter(|&slot| slot != 0 && keep(slot & LOC_MASK))
            .collect()
    }

    /// Adds a slot `slots_where` gave, its tag checked; false when it cannot be one.
    pub(crate) fn insert_slot(&mut self, slot: u64) -> bool {
        let tag = tag_of(slot);
        if tag == 0 || slot & LOC_MASK == 0 {
            return false;
        }
        self.insert(tag, slot & LOC_MASK);
        true
    }

    pub(crate) fn bytes(&self) -> usize {
        self.n * BUCKET_BYTES
    }

    /// Slots in `bytes` of tables (the pool counts the index in bytes).
    pub(crate) fn slots_in(bytes: usize) -> usize {
        bytes / BUCKET_BYTES * WAYS
    }

    /// Entries the table has room for (its buckets' slots, full or not).
    pub(crate) fn slots(&self) -> usize {
        self.n * WAYS
    }

    /// Whether one more entry needs a larger table first (`grow`): past 85% full.
    #[inline]
    pub(crate) fn needs_room(&self) -> bool {
        self.len >= self.full_at
    }

    /// Bytes of the table `grow` builds.
    pub(crate) fn grown_bytes(&self) -> usize {
        self.grown_buckets() * BUCKET_BYTES
    }

    fn grown_buckets(&self) -> usize {
        (self.n * 9 / 8 + 1).min(self.regions.cap)
    }

    /// Whether the table is under 30% full (after evictions), so that `shrink` would give
    /// back more than half of it.
    pub(crate) fn is_sparse(&self) -> bool {
        self.n > MIN_BUCKETS && self.len * 10 < self.n * WAYS * 3
    }

    /// Bytes of the table `shrink` builds.
    pub(crate) fn shrunk_bytes(&self) -> usize {
        self.shrunk_buckets() * BUCKET_BYTES
    }

    /// About 80% full, as `reserve` leaves a table.
    fn shrunk_buckets(&self) -> usize {
        (self.len * 20).div_ceil(WAYS * 16).max(MIN_BUCKETS)
    }

    /// Rebuilds the table smaller (see `is_sparse`).
    pub(crate) fn shrink(&mut self) {
        self.rebuild(self.shrunk_buckets());
    }

    fn home(&self, tag: u32) -> usize {
        home_bucket(tag, self.n)
    }

    /// Where the table starts and how many buckets it has (for read-ahead without the lock:
    /// see `index_hints::Hint`).
    pub(crate) fn table(&self) -> (*mut u8, usize) {
        (self.regions.base(self.active).cast(), self.n)
    }

    /// Whether `grow` can build a larger table: not when the table fills its region.
    pub(crate) fn can_grow(&self) -> bool {
        self.n < self.regions.cap
    }

    fn next(&self, b: usize) -> usize {
        if b + 1 == self.n {
            0
        } else {
            b + 1
        }
    }

    /// The slot whose tag is `tag` and whose location `matches` accepts, with what it said.
    /// `tag` must not be 0 (see `Store::hash`).
    #[inline(always)]
    pub(crate) fn find<T>(
        &self,
        tag: u32,
        mut matches: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        let mut b = self.home(tag);
        for _ in 0..self.n {
            let bucket = &self.buckets()[b];
            // Tags are never 0, so an empty slot (all zero) never matches. With 24-bit tags a
            // bucket rarely holds a second slot with the same tag, so a hit calls `matches` once.
            let mut hits = bucket.slots_tagged(tag);
            while hits != 0 {
                let w = hits.trailing_zeros() as usize % WAYS;
                if let Some(found) = matches(bucket.0[w] & LOC_MASK) {
                    return Some((b * WAYS + w, found));
                }
                hits &= hits - 1;
            }
            if self.overflow()[b] == 0 {
                return None;
            }
            b = self.next(b);
        }
        None
    }

    /// [`Index::find`], trying slot `hint` first: read-ahead found the key's tag there
    /// moments before, and the table may have changed since, so the slot is checked like any
    /// other (its tag, then `matches`). A key has at most one entry, so a slot that matches is
    /// the one.
    #[inline(always)]
    pub(crate) fn find_hinted<T>(
        &self,
        tag: u32,
        hint: u32,
        mut matches: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        let slot = hint as usize;
        // A constant for callers without a hint: the test folds away.
        if hint == NO_SLOT {
            return self.find(tag, matches);
        }
        if let Some(bucket) = self.buckets().get(slot / WAYS) {
            let entry = bucket.0[slot % WAYS];
            if tag_of(entry) == tag {
                if let Some(found) = matches(entry & LOC_MASK) {
                    return Some((slot, found));
                }
            }
        }
        self.find(tag, matches)
    }

    #[cfg(test)]
    fn location(&self, i: usize) -> u64 {
        self.buckets()[i / WAYS].0[i % WAYS] & LOC_MASK
    }

    pub(crate) fn set_location(&mut self, i: usize, loc: u64) {
        let slot = &mut self.buckets_mut()[i / WAYS].0[i % WAYS];
        *slot = (*slot & !LOC_MASK) | loc;
    }

    /// Adds an entry (the caller has removed any older one for the same key, and grown the
    /// table when `needs_room` said so).
    pub(crate) fn insert(&mut self, tag: u32, loc: u64) {
        debug_assert!(loc != 0 && loc <= LOC_MASK && tag != 0 && tag < 1 << TAG_BITS);
        debug_assert!(self.len < self.n * WAYS, "a full table");
        self.place(((tag as u64) << LOC_BITS) | loc);
        self.len += 1;
    }

    fn place(&mut self, slot: u64) {
        let mut b = self.home(tag_of(slot));
        loop {
            if let Some(free) = self.buckets_mut()[b].0.iter_mut().find(|s| **s == 0) {
                *free = slot;
                return;
            }
            let count = &mut self.overflow_mut()[b];
            *count = count.saturating_add(1);
            b = self.next(b);
        }
    }

    /// Points slot `i`, which holds `tag`, at `loc` instead: a new version of the same key takes
    /// its older one's slot, with no removal and no search for a free one.
    pub(crate) fn replace(&mut self, i: usize, tag: u32, loc: u64) {
        let slot = &mut self.buckets_mut()[i / WAYS].0[i % WAYS];
        debug_assert!(tag_of(*slot) == tag && loc != 0 && loc <= LOC_MASK);
        *slot = ((tag as u64) << LOC_BITS) | loc;
    }

    /// Clears slot `i`, and the overflow counts it had raised.
    pub(crate) fn remove(&mut self, i: usize) {
        let (at, w) = (i / WAYS, i % WAYS);
        let mut b = self.home(tag_of(self.buckets()[at].0[w]));
        while b != at {
            let count = &mut self.overflow_mut()[b];
            if *count != STUCK {
                *count -= 1;
            }
            b = self.next(b);
        }
        self.buckets_mut()[at].0[w] = 0;
        self.len -= 1;
    }

    /// Clears every slot whose location `drop` accepts; how many.
    pub(crate) fn remove_where(&mut self, mut drop: impl FnMut(u64) -> bool) -> usize {
        let mut removed = 0;
        for i in 0..self.n * WAYS {
            let slot = self.buckets()[i / WAYS].0[i % WAYS];
            if slot != 0 && drop(slot & LOC_MASK) {
                self.remove(i);
                removed += 1;
            }
        }
        removed
    }

    pub(crate) fn clear(&mut self) {
        let (old, old_n) = self.switch(MIN_BUCKETS);
        self.len = 0;
        self.regions.release(old, old_n);
    }

    /// Makes room for `additional` more entries at once, about 80% full after them (within the
    /// 75-85% that growing keeps), so inserting them rebuilds nothing: a restore knows how many
    /// it is about to insert, and one rebuild instead of one per 12.5% of growth halves its time.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let buckets = ((self.len + additional) * 20).div_ceil(WAYS * 16);
        if buckets > self.n {
            self.rebuild(buckets.min(self.regions.cap));
        }
    }

    /// Bytes of the table `reserve(additional)` leaves.
    pub(crate) fn reserved_bytes(&self, additional: usize) -> usize {
        ((self.len + additional) * 20)
            .div_ceil(WAYS * 16)
            .max(self.n)
            * BUCKET_BYTES
    }

    /// Rebuilds the table 1.125x larger.
    pub(crate) fn grow(&mut self) {
        self.rebuild(self.grown_buckets());
    }

    fn rebuild(&mut self, buckets: usize) {
        debug_assert!(buckets <= self.regions.cap && self.len < buckets * WAYS);
        let (old, old_n) = self.switch(buckets.min(self.regions.cap));
        for b in 0..old_n {
            // SAFETY: bucket `b < old_n` of the old table, still in its region until released
            // below; this table is in the other region, so nothing written aliases it.
            let bucket = unsafe { *self.regions.base(old).add(b) };
            for &slot in bucket.0.iter().filter(|&&s| s != 0) {
                self.place(slot);
            }
        }
        self.regions.release(old, old_n);
    }
}

/// Where a table's overflow counts are: right after its `n` buckets.
fn overflow_of(buckets: *mut Bucket, n: usize) -> *mut u8 {
    buckets.wrapping_add(n).cast()
}

/// A shard's two table regions, each room for `cap` buckets and their overflow counts, reserved
/// (not backed: pages come as they are written) for the shard's life and unmapped with it. The
/// region not in use is all zero: a new one is, and a table left is given back (`release`).
struct Regions {
    start: *mut Bucket,
    cap: usize,
    /// Bytes from one region to the next: `cap` buckets and counts, in whole pages.
    stride: usize,
}

// SAFETY: the regions are plain memory; `Index` writes them only through `&mut self`.
unsafe impl Send for Regions {}
// SAFETY: as for `Send`; shared, they are only read (readers without the lock: see `seqlock`).
unsafe impl Sync for Regions {}

impl Regions {
    fn reserve(cap: usize) -> std::io::Result<Regions> {
        let stride = (cap * BUCKET_BYTES).next_multiple_of(page_size());
        let bytes = 2 * stride;
        let failed = |what: &str| {
            let e = std::io::Error::last_os_error();
            std::io::Error::new(
                e.kind(),
                format!("reserving {bytes} bytes of address space for an index ({what}): {e}"),
            )
        };
        // SAFETY: a new private anonymous mapping; no memory of ours is touched.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(failed("mmap"));
        }
        // Mapped without access, then unlocked, then opened: under `-k`'s mlockall(MCL_FUTURE)
        // a readable mapping would be filled page by page at once (all of its reserve), and a
        // locked one refuses `release`'s MADV_DONTNEED. The tables' pages stay unlocked.
        // SAFETY: the mapping just made, whole; munlock and mprotect change only its flags.
        let opened = unsafe {
            libc::munlock(start, bytes) == 0
                && libc::mprotect(start, bytes, libc::PROT_READ | libc::PROT_WRITE) == 0
        };
        if !opened {
            let e = failed("munlock, mprotect");
            // SAFETY: the mapping just made, not yet used.
            unsafe { libc::munmap(start, bytes) };
            return Err(e);
        }
        Ok(Regions {
            start: start.cast(),
            cap,
            stride,
        })
    }

    /// The first bucket of region `r` (page-aligned, so bucket-aligned).
    #[inline(always)]
    fn base(&self, r: usize) -> *mut Bucket {
        self.start.cast::<u8>().wrapping_add(r * self.stride).cast()
    }

    /// Gives back the pages of region `r`'s table of `n` buckets: they read as zeros after.
    fn release(&self, r: usize, n: usize) {
        let bytes = (n * BUCKET_BYTES).next_multiple_of(page_size());
        // SAFETY: the first `bytes` of region `r`, inside the mapping; no reference into them
        // outlives this call (the table moved to the other region). Readers without the lock
        // may read them meanwhile: they read the table or zeros (see `seqlock`).
        let done = unsafe { libc::madvise(self.base(r).cast(), bytes, libc::MADV_DONTNEED) };
        assert_eq!(done, 0, "madvise: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Regions {
    fn drop(&mut self) {
        // SAFETY: the mapping `reserve` made, unmapped once, when its index goes (with its
        // store: no reader is left).
        unsafe { libc::munmap(self.start.cast(), 2 * self.stride) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// [`Index::find_hinted`] for a reader without the shard's lock, in the table a shard's
/// hint (`ShardLock::hint`) named (`table`, `n`): it may be changing meanwhile, so what `matches` is
/// shown (any location, stale or from a newer table) is only as good as the reader's check
/// afterwards (see `seqlock`). Each slot and count is read once, a plain load.
///
/// # Safety
/// `table` and `n` were loaded from a hint of a live store (any pair of them: every table of a
/// shard has at most its regions' `cap` buckets, so any `n` stays inside either region).
#[inline(always)]
pub(crate) unsafe fn find_racy<T>(
    table: *mut u8,
    n: usize,
    tag: u32,
    hint: u32,
    mut matches: impl FnMut(u64) -> Option<T>,
) -> Option<T> {
    let buckets = table.cast::<Bucket>();
    let slot = hint as usize;
    if slot < n * WAYS {
        // SAFETY: bucket `slot / WAYS < n`, inside the region (the contract).
        let entry = unsafe { (*buckets.add(slot / WAYS)).0[slot % WAYS] };
        if tag_of(entry) == tag {
            if let Some(found) = matches(entry & LOC_MASK) {
                return Some(found);
            }
        }
    }
    let mut b = home_bucket(tag, n);
    for _ in 0..n {
        // SAFETY: `b < n` (a home bucket, then the next one round), inside the region.
        let bucket = unsafe { &*buckets.add(b) };
        let mut hits = bucket.slots_tagged(tag);
        while hits != 0 {
            let w = hits.trailing_zeros() as usize % WAYS;
            if let Some(found) = matches(bucket.0[w] & LOC_MASK) {
                return Some(found);
            }
            hits &= hits - 1;
        }
        // SAFETY: count `b < n`, after the `n` buckets: inside the region (`cap * BUCKET_BYTES`).
        if unsafe { *overflow_of(buckets, n).add(b) } == 0 {
            return None;
        }
        b = if b + 1 == n { 0 } else { b + 1 };
    }
    None
}

/// The slot and location of the first entry in `tag`'s home bucket with that tag, if any, for
/// read-ahead without the lock: not checked against the key, maybe stale (the read that uses
/// it as a hint checks it).
///
/// # Safety
/// As for [`find_racy`].
#[inline]
pub(crate) unsafe fn home_slot_racy(table: *mut u8, n: usize, tag: u32) -> Option<(u32, u64)> {
    let b = home_bucket(tag, n);
    // SAFETY: a home bucket is below `n`: inside the region (the contract).
    let bucket = unsafe { &*table.cast::<Bucket>().add(b) };
    let hits = bucket.slots_tagged(tag);
    (hits != 0).then(|| {
        let w = hits.trailing_zeros() as usize % WAYS;
        ((b * WAYS + w) as u32, bucket.0[w] & LOC_MASK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Inserts as the store does: growing first when the table says so.
    fn add(index: &mut Index, tag: u32, loc: u64) {
        if index.needs_room() {
            index.grow();
        }
        index.insert(tag, loc);
    }

    #[test]
    fn a_table_grows_to_its_regions_and_no_further_and_a_rebuild_leaves_zeros_behind() {
        let mut index = Index::new(100 * BUCKET_BYTES);
        let mut loc = 0;
        while index.can_grow() {
            loc += 1;
            add(
                &mut index,
                ((loc as u32 * 40_503) % (1 << TAG_BITS)) | 1,
                loc,
            );
        }
        assert_eq!(index.n, 100);
        assert!(index.bytes() <= 100 * BUCKET_BYTES);
        let (table, n) = index.table();
        index.clear();
        // SAFETY: the old table's region stays mapped; its pages were given back.
        let old = unsafe { std::slice::from_raw_parts(table, n * BUCKET_BYTES) };
        assert!(old.iter().all(|&b| b == 0));
        assert_eq!((index.len(), index.n), (0, MIN_BUCKETS));
    }

    #[test]
    fn widened_regions_keep_every_entry_and_let_the_table_grow_past_the_old_ones() {
        let mut index = Index::new(100 * BUCKET_BYTES);
        let tag_of_loc = |loc: u64| ((loc as u32).wrapping_mul(40_503) % (1 << TAG_BITS)) | 1;
        let mut loc = 0;
        while index.can_grow() {
            loc += 1;
            add(&mut index, tag_of_loc(loc), loc);
        }
        let (old_table, old_n) = index.table();
        index.widen(1000 * BUCKET_BYTES).unwrap();
        assert!(index.can_grow(), "the new regions leave room");
        assert_ne!(index.table().0, old_table);
        // SAFETY: the outgrown region stays mapped (in `outgrown`); its pages were given back.
        let old = unsafe { std::slice::from_raw_parts(old_table, old_n * BUCKET_BYTES) };
        assert!(old.iter().all(|&b| b == 0));
        let before = loc;
        while index.can_grow() {
            loc += 1;
            add(&mut index, tag_of_loc(loc), loc);
        }
        assert!(index.n > 100 && loc > 2 * before);
        for l in 1..=loc {
            assert!(
                index
                    .find(tag_of_loc(l), |at| (at == l).then_some(()))
                    .is_some(),
                "entry {l} lost"
            );
        }
        // A smaller limit leaves the regions as they are.
        let table = index.table();
        index.widen(10 * BUCKET_BYTES).unwrap();
        assert_eq!(index.table(), table);
    }

    #[test]
    fn a_table_wants_room_past_85_percent() {
        for buckets in [MIN_BUCKETS, 9, 10, 11, 12, 13, 100, 1001] {
            let mut index = Index::new(1 << 20);
            index.rebuild(buckets);
            for len in 0..buckets * WAYS {
                index.len = len;
                let past = (len + 1) * 20 > buckets * WAYS * 17;
                assert_eq!(index.needs_room(), past, "{buckets} buckets, {len} entries");
            }
        }
    }

    #[test]
    fn a_bucket_compares_its_tags_as_slot_by_slot() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let tag = ((next() >> 40) as u32).max(1);
            // Slots that hold the tag, a tag one bit away, any tag, or nothing; locations with
            // every bit set make sure no location bit leaks into the comparison.
            let bucket = Bucket(std::array::from_fn(|_| {
                let loc = match next() % 3 {
                    0 => LOC_MASK,
                    _ => next() & LOC_MASK,
                };
                match next() % 4 {
                    0 => ((tag as u64) << LOC_BITS) | loc,
                    1 => (((tag ^ 1 << (next() % 24)) as u64) << LOC_BITS) | loc,
                    2 => next(),
                    _ => 0,
                }
            }));
            assert_eq!(
                bucket.slots_tagged(tag),
                bucket.slots_tagged_portably(tag),
                "{:x?} {tag:x}",
                bucket.0
            );
        }
    }

    #[test]
    fn tag_ranges_find_every_entry_once_through_growth() {
        let mut index = Index::new(1 << 20);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for loc in 1..=5_000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let tag = ((rng >> 40) as u32).max(1);
            add(&mut index, tag, loc);
        }
        let mut seen = Vec::new();
        let step = 1 << 18;
        let mut lo = 0;
        while lo < 1 << TAG_BITS {
            index.entries_with_tags(lo..lo + step, |loc| seen.push(loc));
            // Growing between steps must not change what the rest of the walk finds.
            if lo == 4 * step {
                for loc in 5_001..=7_000u64 {
                    add(
                        &mut index,
                        (((loc * 2_654_435_761) >> 8) as u32 % (1 << TAG_BITS)) | 1,
                        loc,
                    );
                }
            }
            lo += step;
        }
        // Each entry there before the walk began is found exactly once.
        seen.sort_unstable();
        let before_growth: Vec<u64> = seen.iter().copied().filter(|&l| l <= 5_000).collect();
        assert_eq!(before_growth, (1..=5_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_reserved_index_takes_that_many_entries_without_a_rebuild() {
        let mut index = Index::new(1 << 20);
        index.reserve(50_000);
        let bytes = index.bytes();
        for loc in 1..=50_000u64 {
            add(
                &mut index,
                (((loc * 2_654_435_761) >> 8) as u32 % (1 << TAG_BITS)) | 1,
                loc,
            );
        }
        assert_eq!(index.bytes(), bytes);
        let load = index.len() as f64 / (index.bytes() / 65 * 8) as f64;
        assert!(load > 0.75 && load <= 0.85, "load {load}");
        for loc in (1..=50_000u64).step_by(97) {
            let tag = (((loc * 2_654_435_761) >> 8) as u32 % (1 << TAG_BITS)) | 1;
            assert!(index.find(tag, |l| (l == loc).then_some(())).is_some());
        }
    }

    #[test]
    fn matches_a_map_through_growth_and_removal() {
        let mut index = Index::new(1 << 20);
        let mut model = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..40_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let tag = ((x >> 40) as u32).max(1);
            let loc = round + 1;
            if round % 3 == 2 {
                let (&victim, &victim_tag) = model.iter().next().expect("non-empty");
                let (i, ()) = index
                    .find(victim_tag, |l| (l == victim).then_some(()))
                    .expect("present");
                index.remove(i);
                model.remove(&victim);
            } else {
                add(&mut index, tag, loc);
                model.insert(loc, tag);
            }
        }
        assert_eq!(index.len(), model.len());
        for (&loc, &tag) in &model {
            let (i, ()) = index
                .find(tag, |l| (l == loc).then_some(()))
                .expect("present");
            assert_eq!(index.location(i), loc);
        }
        let load = index.len() as f64 / (index.bytes() / 65 * 8) as f64;
        assert!(load > 0.5 && load <= 0.86, "load {load}");
    }
}
