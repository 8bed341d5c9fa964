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
//! Optimistic readers probe a table without the shard's lock (see `seqlock`) through its
//! [`TableView`]; so a table a rebuild replaces is retired, freed once no reader can be in it.
use super::seqlock::retire;

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

pub(crate) struct Index {
    buckets: Box<[Bucket]>,
    /// Where `buckets` and `overflow` are, for readers without the lock; boxed so its address
    /// outlives moves of the `Index`, fixed for the table's life.
    view: Box<TableView>,
    /// Per bucket: how many entries live past it (their home bucket is this one or earlier
    /// and they were placed after it). A search stops at a bucket whose count is 0.
    overflow: Box<[u8]>,
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
    pub(crate) fn new() -> Index {
        Index::with_buckets(MIN_BUCKETS)
    }

    fn with_buckets(n: usize) -> Index {
        let buckets = vec![Bucket::default(); n].into_boxed_slice();
        let overflow = vec![0; n].into_boxed_slice();
        Index {
            view: Box::new(TableView {
                buckets: buckets.as_ptr(),
                len: n,
                overflow: overflow.as_ptr(),
            }),
            buckets,
            overflow,
            len: 0,
            // One more entry would take the table past 85%: (len + 1) * 20 > slots * 17.
            full_at: n * WAYS * 17 / 20,
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
        for _ in 0..self.buckets.len() {
            for &slot in &self.buckets[b].0 {
                if slot != 0 && tags.contains(&tag_of(slot)) {
                    each(slot & LOC_MASK);
                }
            }
            reached_last |= b == last;
            if reached_last && self.overflow[b] == 0 {
                return;
            }
            b = self.next(b);
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.buckets.len() * BUCKET_BYTES
    }

    /// Entries the table has room for (its buckets' slots, full or not).
    pub(crate) fn slots(&self) -> usize {
        self.buckets.len() * WAYS
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
        self.buckets.len() * 9 / 8 + 1
    }

    /// Whether the table is under 30% full (after evictions), so that `shrink` would give
    /// back more than half of it.
    pub(crate) fn is_sparse(&self) -> bool {
        self.buckets.len() > MIN_BUCKETS && self.len * 10 < self.buckets.len() * WAYS * 3
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
        home_bucket(tag, self.buckets.len())
    }

    /// Where the table starts and how many buckets it has (for read-ahead without the lock:
    /// see `IndexHints`).
    pub(crate) fn table(&self) -> (*const u8, usize) {
        (self.buckets.as_ptr().cast(), self.buckets.len())
    }

    /// The table's view for optimistic readers: valid until the table is retired.
    pub(crate) fn view(&self) -> *const TableView {
        &*self.view
    }

    fn next(&self, b: usize) -> usize {
        if b + 1 == self.buckets.len() {
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
        for _ in 0..self.buckets.len() {
            let bucket = &self.buckets[b];
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
            if self.overflow[b] == 0 {
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
        if let Some(bucket) = self.buckets.get(slot / WAYS) {
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
        self.buckets[i / WAYS].0[i % WAYS] & LOC_MASK
    }

    pub(crate) fn set_location(&mut self, i: usize, loc: u64) {
        let slot = &mut self.buckets[i / WAYS].0[i % WAYS];
        *slot = (*slot & !LOC_MASK) | loc;
    }

    /// Adds an entry (the caller has removed any older one for the same key, and grown the
    /// table when `needs_room` said so).
    pub(crate) fn insert(&mut self, tag: u32, loc: u64) {
        debug_assert!(loc != 0 && loc <= LOC_MASK && tag != 0 && tag < 1 << TAG_BITS);
        debug_assert!(self.len < self.buckets.len() * WAYS, "a full table");
        self.place(((tag as u64) << LOC_BITS) | loc);
        self.len += 1;
    }

    fn place(&mut self, slot: u64) {
        let mut b = self.home(tag_of(slot));
        loop {
            if let Some(free) = self.buckets[b].0.iter_mut().find(|s| **s == 0) {
                *free = slot;
                return;
            }
            let count = &mut self.overflow[b];
            *count = count.saturating_add(1);
            b = self.next(b);
        }
    }

    /// Points slot `i`, which holds `tag`, at `loc` instead: a new version of the same key takes
    /// its older one's slot, with no removal and no search for a free one.
    pub(crate) fn replace(&mut self, i: usize, tag: u32, loc: u64) {
        let slot = &mut self.buckets[i / WAYS].0[i % WAYS];
        debug_assert!(tag_of(*slot) == tag && loc != 0 && loc <= LOC_MASK);
        *slot = ((tag as u64) << LOC_BITS) | loc;
    }

    /// Clears slot `i`, and the overflow counts it had raised.
    pub(crate) fn remove(&mut self, i: usize) {
        let (at, w) = (i / WAYS, i % WAYS);
        let mut b = self.home(tag_of(self.buckets[at].0[w]));
        while b != at {
            if self.overflow[b] != STUCK {
                self.overflow[b] -= 1;
            }
            b = self.next(b);
        }
        self.buckets[at].0[w] = 0;
        self.len -= 1;
    }

    pub(crate) fn clear(&mut self) {
        retire(std::mem::replace(self, Index::new()));
    }

    /// Makes room for `additional` more entries at once, about 80% full after them (within the
    /// 75-85% that growing keeps), so inserting them rebuilds nothing: a restore knows how many
    /// it is about to insert, and one rebuild instead of one per 12.5% of growth halves its time.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let buckets = ((self.len + additional) * 20).div_ceil(WAYS * 16);
        if buckets > self.buckets.len() {
            self.rebuild(buckets);
        }
    }

    /// Bytes of the table `reserve(additional)` leaves.
    pub(crate) fn reserved_bytes(&self, additional: usize) -> usize {
        ((self.len + additional) * 20)
            .div_ceil(WAYS * 16)
            .max(self.buckets.len())
            * BUCKET_BYTES
    }

    /// Rebuilds the table 1.125x larger.
    pub(crate) fn grow(&mut self) {
        self.rebuild(self.grown_buckets());
    }

    fn rebuild(&mut self, buckets: usize) {
        let old = std::mem::replace(self, Index::with_buckets(buckets));
        self.len = old.len;
        for bucket in old.buckets.iter() {
            for &slot in bucket.0.iter().filter(|&&s| s != 0) {
                self.place(slot);
            }
        }
        retire(old);
    }
}

/// Where a table's buckets and overflow counts are and how many buckets it has, for readers
/// without the shard's lock; made with the table and never changed, so a reader's probe stays
/// within the table it started in (which a writer may be changing meanwhile: see `seqlock`).
pub(crate) struct TableView {
    buckets: *const Bucket,
    len: usize,
    overflow: *const u8,
}

// SAFETY: a view is addresses and a length, never written after it is made; what it points at
// is read through it only as `TableView::find_racy`'s contract allows.
unsafe impl Send for TableView {}
// SAFETY: as for `Send`: shared, it is only read.
unsafe impl Sync for TableView {}

impl TableView {
    /// Bucket `b`, copied out of a table a writer may be changing (`b < self.len`).
    ///
    /// # Safety
    /// The table is not freed yet (see `find_racy`).
    #[inline(always)]
    unsafe fn bucket(&self, b: usize) -> Bucket {
        // SAFETY: `b < len`, so in the table, which is allocated (the caller's contract). A
        // plain copy that may race a writer: see the module comment of `seqlock`.
        unsafe { self.buckets.add(b).read() }
    }

    /// [`Index::find_hinted`] for a reader without the lock: what it returns is only as good
    /// as the reader's validation afterwards, and `matches` may be shown any location (a
    /// torn or stale one included).
    ///
    /// # Safety
    /// The table is not freed for the call: the caller got this view from its shard's hint
    /// while pinned (`seqlock::pin`) and still is.
    #[inline(always)]
    pub(crate) unsafe fn find_racy<T>(
        &self,
        tag: u32,
        hint: u32,
        mut matches: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        let slot = hint as usize;
        if slot < self.len * WAYS {
            // SAFETY: in the table (just checked); the caller's contract keeps it allocated.
            let entry = unsafe { self.bucket(slot / WAYS) }.0[slot % WAYS];
            if tag_of(entry) == tag {
                if let Some(found) = matches(entry & LOC_MASK) {
                    return Some((slot, found));
                }
            }
        }
        let mut b = home_bucket(tag, self.len);
        for _ in 0..self.len {
            // SAFETY: `b < len` (a home bucket, then `next`); allocated as above.
            let bucket = unsafe { self.bucket(b) };
            let mut hits = bucket.slots_tagged(tag);
            while hits != 0 {
                let w = hits.trailing_zeros() as usize % WAYS;
                if let Some(found) = matches(bucket.0[w] & LOC_MASK) {
                    return Some((b * WAYS + w, found));
                }
                hits &= hits - 1;
            }
            // SAFETY: `b < len`, the overflow counts' length too; allocated as above.
            if unsafe { self.overflow.add(b).read() } == 0 {
                return None;
            }
            b = if b + 1 == self.len { 0 } else { b + 1 };
        }
        None
    }

    /// The slot and location of the first entry in `tag`'s home bucket with that tag, if any,
    /// for read-ahead without the lock: not checked against the key, and maybe torn or stale
    /// (the read that uses it as a hint checks it).
    ///
    /// # Safety
    /// As for [`TableView::find_racy`].
    #[inline]
    pub(crate) unsafe fn home_slot_racy(&self, tag: u32) -> Option<(u32, u64)> {
        let b = home_bucket(tag, self.len);
        // SAFETY: a home bucket is below `len`; the caller's contract keeps the table allocated.
        let bucket = unsafe { self.bucket(b) };
        let hits = bucket.slots_tagged(tag);
        (hits != 0).then(|| {
            let w = hits.trailing_zeros() as usize % WAYS;
            ((b * WAYS + w) as u32, bucket.0[w] & LOC_MASK)
        })
    }
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
    fn a_table_wants_room_past_85_percent() {
        for buckets in [MIN_BUCKETS, 9, 10, 11, 12, 13, 100, 1001] {
            let mut index = Index::with_buckets(buckets);
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
        let mut index = Index::new();
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
        let mut index = Index::new();
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
        let mut index = Index::new();
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
