//! The free-segment pool, shared by all shards: a bitmap rather than a list, so a large item
//! can find a run of contiguous free segments. It also holds the memory limit: how many
//! segments may be in use at once (`Store::set_memory_limit`), so a write past it makes room
//! the way it would in a full heap, and charges the shards' indexes to that limit: each
//! segment's worth of index is one segment fewer that items may use (see `Store::grow_index`).

pub(crate) struct Pool {
    free: Vec<u64>,
    /// Reserved for a large item being made room for: never handed out, even once free.
    claimed: Vec<u64>,
    /// Free segments whose pages hold no memory: never written since the heap was mapped, or
    /// given back to the OS since (`Store::discard_free`). Segments are handed out from the
    /// others first, so RSS stays as low as the data held allows.
    cold: Vec<u64>,
    free_count: usize,
    /// Segments marked in `cold`.
    cold_count: usize,
    segments: usize,
    segment_size: usize,
    /// Segments that may be in use (not free: owned, in a pending run, or claimed) at once,
    /// the index's charge (`index_segments`) counted among them.
    limit: usize,
    /// Bytes of every shard's index tables, a rebuild's new table included while it is built.
    index_bytes: usize,
    /// The most `index_bytes` has been once a rebuild dropped its old table (memcached's hash
    /// table never shrinks, so its `hash_power_level` is the largest it has been).
    index_peak: usize,
    /// Where the next large-item window starts, so evictions for runs rotate over the heap.
    window: usize,
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(bits: &mut [u64], i: usize, on: bool) {
    if on {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

impl Pool {
    pub(crate) fn new(segments: usize, segment_size: usize) -> Pool {
        let words = segments.div_ceil(64);
        let mut pool = Pool {
            free: vec![0; words],
            claimed: vec![0; words],
            cold: vec![0; words],
            free_count: segments,
            cold_count: segments,
            segments,
            segment_size,
            limit: segments,
            index_bytes: 0,
            index_peak: 0,
            window: 0,
        };
        for i in 0..segments {
            set_bit(&mut pool.free, i, true);
            set_bit(&mut pool.cold, i, true);
        }
        pool
    }

    /// Takes in the segments from `self.segments` up to `segments`, free and cold (the heap
    /// just opened them: `Segments::grow`).
    pub(crate) fn grow(&mut self, segments: usize) {
        let words = segments.div_ceil(64);
        for bits in [&mut self.free, &mut self.claimed, &mut self.cold] {
            bits.resize(words, 0);
        }
        for i in self.segments..segments {
            set_bit(&mut self.free, i, true);
            set_bit(&mut self.cold, i, true);
        }
        let added = segments - self.segments;
        self.free_count += added;
        self.cold_count += added;
        self.segments = segments;
    }

    /// Segments whose pages may hold memory: written since the heap was mapped and not given
    /// back since (memcached's `total_malloced`, in segments).
    pub(crate) fn warm(&self) -> usize {
        self.segments - self.cold_count
    }

    #[cfg(test)]
    pub(crate) fn free_count(&self) -> usize {
        self.free_count
    }

    pub(crate) fn in_use(&self) -> usize {
        self.segments - self.free_count
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Sets the memory limit in segments; segments in use beyond it stay until freed.
    pub(crate) fn set_limit(&mut self, segments: usize) {
        debug_assert!(segments <= self.segments);
        self.limit = segments;
    }

    /// Segments the index is charged: its bytes in whole segments, rounded down, so a small
    /// heap's first tables (a few KiB) do not take a segment from its items; what is left
    /// over is under one segment, within the bound docs/storage.md states.
    pub(crate) fn index_segments(&self) -> usize {
        self.index_bytes / self.segment_size
    }

    pub(crate) fn index_bytes(&self) -> usize {
        self.index_bytes
    }

    /// Whether the segments in use and the index together pass the limit.
    pub(crate) fn over_limit(&self) -> bool {
        self.in_use() + self.index_segments() > self.limit
    }

    /// Charges `bytes` more of index to the limit, if they fit beside the segments in use.
    pub(crate) fn charge_index(&mut self, bytes: usize) -> bool {
        let segments = (self.index_bytes + bytes) / self.segment_size;
        if self.in_use() + segments > self.limit {
            return false;
        }
        self.index_bytes += bytes;
        true
    }

    /// Charges `bytes` more of index whether or not they fit (a table that must exist: a
    /// restore's, or a shrink's smaller one); the caller then frees segments down to the limit.
    pub(crate) fn charge_index_anyway(&mut self, bytes: usize) {
        self.index_bytes += bytes;
    }

    /// Takes `bytes` of index off the charge: a table dropped, so what is left is what the
    /// tables hold, and the peak is taken here.
    pub(crate) fn uncharge_index(&mut self, bytes: usize) {
        debug_assert!(bytes <= self.index_bytes);
        self.index_bytes -= bytes;
        self.index_peak = self.index_peak.max(self.index_bytes);
    }

    /// The most bytes the index has held (see `index_peak`).
    pub(crate) fn index_peak(&self) -> usize {
        self.index_peak
    }

    /// Carries a saved store's peak over a restart (`persist`).
    pub(crate) fn restore_index_peak(&mut self, bytes: usize) {
        self.index_peak = self.index_peak.max(bytes);
    }

    /// Segments whose pages may be resident beyond what the limit leaves the heap once the
    /// index is charged: that many free ones must give their memory back.
    pub(crate) fn excess_warm(&self) -> usize {
        self.warm()
            .saturating_sub(self.limit.saturating_sub(self.index_segments()))
    }

    /// Segments that may still leave the pool before the limit is reached.
    fn room(&self) -> usize {
        self.limit
            .saturating_sub(self.in_use() + self.index_segments())
    }

    pub(crate) fn is_free(&self, seg: u32) -> bool {
        bit(&self.free, seg as usize)
    }

    pub(crate) fn is_claimed(&self, seg: u32) -> bool {
        bit(&self.claimed, seg as usize)
    }

    /// Takes `seg` out of the pool; its pages are about to be written.
    fn remove(&mut self, seg: usize) {
        debug_assert!(bit(&self.free, seg));
        set_bit(&mut self.free, seg, false);
        if bit(&self.cold, seg) {
            set_bit(&mut self.cold, seg, false);
            self.cold_count -= 1;
        }
        self.free_count -= 1;
    }

    /// A free segment, unless the limit is reached: the lowest one not cold (its pages may be
    /// resident), else the lowest cold one, so memory is faulted in only when no free segment
    /// has some already. After a shrink, that keeps RSS within the limit as writes go on.
    pub(crate) fn take(&mut self) -> Option<u32> {
        if self.room() == 0 {
            return None;
        }
        let mut lowest_cold = None;
        let mut pick = None;
        for (word, (&free, &cold)) in self.free.iter().zip(&self.cold).enumerate() {
            if free & !cold != 0 {
                pick = Some((word, free & !cold));
                break;
            }
            if lowest_cold.is_none() && free != 0 {
                lowest_cold = Some((word, free));
            }
        }
        let (word, bits) = pick.or(lowest_cold)?;
        let i = word * 64 + bits.trailing_zeros() as usize;
        self.remove(i);
        Some(i as u32)
    }

    /// Takes `seg` out of the pool for a restore: the saved store had it in use.
    pub(crate) fn take_restored(&mut self, seg: u32) {
        self.remove(seg as usize);
    }

    /// Takes `seg` back, unless a large write has claimed it (the claim takes it instead).
    pub(crate) fn give(&mut self, seg: u32) {
        let i = seg as usize;
        if !bit(&self.claimed, i) {
            debug_assert!(!bit(&self.free, i));
            set_bit(&mut self.free, i, true);
            self.free_count += 1;
        }
    }

    /// The first run of `len` segments that are all `wanted`.
    fn find_run(&self, len: usize, wanted: impl Fn(usize) -> bool) -> Option<usize> {
        let mut start = 0;
        for i in 0..self.segments {
            if !wanted(i) {
                start = i + 1;
            } else if i + 1 - start == len {
                return Some(start);
            }
        }
        None
    }

    /// Takes the first run of `len` free segments, preferring one whose pages are all
    /// resident, unless that would pass the limit.
    pub(crate) fn take_run(&mut self, len: usize) -> Option<usize> {
        if self.room() < len {
            return None;
        }
        let start = self
            .find_run(len, |i| bit(&self.free, i) && !bit(&self.cold, i))
            .or_else(|| self.find_run(len, |i| bit(&self.free, i)))?;
        for seg in start..start + len {
            self.remove(seg);
        }
        Some(start)
    }

    /// Claims the next window of `len` segments, from where the last one ended, that no other
    /// large write has claimed, whose every segment is `usable`, and whose free segments fit
    /// under the limit; those leave the pool, and the others stay out of it when freed, until
    /// `unclaim`. So a window of segments in use costs no room, and one with free segments
    /// costs what they add.
    pub(crate) fn claim_window(
        &mut self,
        len: usize,
        usable: impl Fn(u32) -> bool,
    ) -> Option<usize> {
        let starts = self.segments - len + 1;
        let room = self.room();
        let start = (0..starts).map(|i| (self.window + i) % starts).find(|&s| {
            (s..s + len).all(|seg| !bit(&self.claimed, seg) && usable(seg as u32))
                && (s..s + len).filter(|&seg| bit(&self.free, seg)).count() <= room
        })?;
        self.window = start + len;
        for seg in start..start + len {
            set_bit(&mut self.claimed, seg, true);
            if bit(&self.free, seg) {
                self.remove(seg);
            }
        }
        Some(start)
    }

    pub(crate) fn unclaim(&mut self, start: usize, len: usize) {
        for seg in start..start + len {
            set_bit(&mut self.claimed, seg, false);
        }
    }

    /// The next run of free segments whose pages may be resident, from segment `from` on, at
    /// most `max_len` long.
    pub(crate) fn warm_free_run(&self, from: usize, max_len: usize) -> Option<(usize, usize)> {
        let warm_free = |i: usize| bit(&self.free, i) && !bit(&self.cold, i);
        let start = (from..self.segments).find(|&i| warm_free(i))?;
        let len = (start..self.segments)
            .take(max_len)
            .take_while(|&i| warm_free(i))
            .count();
        Some((start, len))
    }

    /// Records that the free segments `start..start + len` hold no memory any more.
    pub(crate) fn mark_cold(&mut self, start: usize, len: usize) {
        for seg in start..start + len {
            debug_assert!(bit(&self.free, seg));
            if !bit(&self.cold, seg) {
                set_bit(&mut self.cold, seg, true);
                self.cold_count += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_segments_first_and_claims_keep_segments_out() {
        let mut pool = Pool::new(70, 4096);
        assert_eq!((pool.take(), pool.take()), (Some(0), Some(1)));
        pool.give(0);
        assert_eq!(pool.claim_window(3, |seg| seg != 2), Some(3));
        assert_eq!(pool.free_count(), 69 - 3);
        assert!(!pool.is_free(4) && pool.is_claimed(4));
        pool.unclaim(3, 3);
        pool.give(4);
        assert_eq!(pool.free_count(), 69 - 2);
        // No warm run of 6: the first free one. 0 and 4 were written, so they go before 2.
        assert_eq!(pool.take_run(6), Some(6));
        assert_eq!(pool.free_count(), 69 - 8);
        assert_eq!((pool.take_run(59), pool.take_run(58)), (None, Some(12)));
        assert_eq!(
            (pool.take(), pool.take(), pool.take()),
            (Some(0), Some(4), Some(2))
        );
    }

    #[test]
    fn nothing_leaves_the_pool_past_the_limit() {
        let mut pool = Pool::new(10, 4096);
        pool.set_limit(4);
        assert_eq!(pool.take_run(3), Some(0));
        assert_eq!(pool.take_run(2), None);
        assert_eq!((pool.take(), pool.take()), (Some(3), None));
        assert_eq!(pool.in_use(), 4);
        // A window of segments in use costs no room; its free segments cost one each.
        assert_eq!(pool.claim_window(2, |_| true), Some(0));
        pool.unclaim(0, 2);
        pool.give(3);
        assert_eq!(pool.claim_window(2, |_| true), Some(2));
        assert_eq!(pool.in_use(), 4);
        pool.unclaim(2, 2);
        assert_eq!(pool.claim_window(2, |_| true), Some(0));
        pool.unclaim(0, 2);
        // Below what is in use: nothing more until enough comes back.
        pool.set_limit(2);
        pool.give(0);
        pool.give(1);
        assert_eq!((pool.in_use(), pool.take()), (2, None));
        pool.set_limit(10);
        assert_eq!(pool.take_run(6), Some(4));
    }

    #[test]
    fn written_segments_go_out_before_cold_ones_until_discarded() {
        let mut pool = Pool::new(130, 4096);
        for seg in 0..70 {
            assert_eq!(pool.take(), Some(seg));
        }
        pool.give(66);
        pool.give(3);
        pool.give(4);
        assert_eq!(pool.warm_free_run(0, 8), Some((3, 2)));
        assert_eq!(pool.warm_free_run(0, 1), Some((3, 1)));
        assert_eq!(pool.warm_free_run(5, 8), Some((66, 1)));
        assert_eq!(pool.take(), Some(3));
        pool.mark_cold(4, 1);
        assert_eq!((pool.take(), pool.take()), (Some(66), Some(4)));
        assert_eq!((pool.warm_free_run(0, 8), pool.take()), (None, Some(70)));
    }
}
