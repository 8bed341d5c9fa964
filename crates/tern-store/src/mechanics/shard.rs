//! A shard: what its lock guards (index, TTL chains, counters, freed segments), the lock with
//! its sequence count for optimistic readers (see `seqlock`), and the plain
//! values its steps pass around (an item found, what linking one counts, a version to write).
//! The steps themselves work on a `Store` and live in `store/shard.rs`.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::config::MAX_LANES;
use super::counters::Counters;
use super::index::Index;
use super::index_hints::Hint;
use super::item::{self, Header};
use super::segments::{Loc, Owner, NO_SEGMENT};
use super::seqlock::SeqCount;
use super::ttl::GROUPS;

/// `repr(C)` with the counters first: they follow the lock word, on the shard's first cache line
/// (see [`ShardLock`]).
#[repr(C)]
pub(crate) struct Shard {
    pub(crate) counters: Counters,
    /// The right to this shard's segments' bytes (see `segments`).
    pub(crate) owner: Owner,
    pub(crate) index: Index,
    /// Segments of each TTL group, oldest first; its lanes' `active` ones among the last.
    pub(crate) chains: [VecDeque<u32>; GROUPS],
    /// The segments each TTL group appends to, one per writer lane.
    pub(crate) active: [Lanes; GROUPS],
    /// The `flush_all` generation this shard has applied.
    pub(crate) flush_seq: u32,
    /// Reused buffer for values built from an older version (see `rewrite`).
    pub(crate) scratch: Vec<u8>,
    /// Segments this shard has emptied, to hand back to the pool (or keep one).
    pub(crate) freed: Vec<u32>,
    /// Bumped whenever items leave the index other than by `unlink` of a known item (eviction,
    /// reclaim, merge, flush): a `Found` taken before is still exact while this is unchanged.
    pub(crate) churn: u64,
    pub(crate) rng: u64,
}

impl Shard {
    /// Shard `id`, whose index may grow to `max_index_bytes`.
    pub(crate) fn new(id: u32, rng_seed: u64, max_index_bytes: usize) -> Shard {
        Shard {
            owner: Owner::new(id),
            index: Index::new(max_index_bytes),
            chains: std::array::from_fn(|_| VecDeque::new()),
            active: [Lanes::NONE; GROUPS],
            flush_seq: 0,
            counters: Counters::default(),
            scratch: Vec::new(),
            freed: Vec::new(),
            churn: 0,
            rng: rng_seed,
        }
    }
}

/// The segments a TTL group of a shard appends to, one per writer lane (`Config::writers`):
/// a thread writes to its own lane's, so sets from two cores to one shard write different
/// cache lines (item bytes and the segment's write offset), as they would to two shards.
/// `NO_SEGMENT` until the lane writes, and again once its segment is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lanes([u32; MAX_LANES]);

impl Lanes {
    pub(crate) const NONE: Lanes = Lanes([NO_SEGMENT; MAX_LANES]);

    pub(crate) fn of(&self, lane: usize) -> u32 {
        self.0[lane]
    }

    /// Makes `seg` lane `lane`'s segment; returns the one it replaces.
    pub(crate) fn replace(&mut self, lane: usize, seg: u32) -> u32 {
        std::mem::replace(&mut self.0[lane], seg)
    }

    /// Whether some lane appends to `seg`.
    pub(crate) fn contains(&self, seg: u32) -> bool {
        seg != NO_SEGMENT && self.0.contains(&seg)
    }

    /// `seg` is going: the lane appending to it, if any, opens a new segment next time.
    pub(crate) fn forget(&mut self, seg: u32) {
        for active in &mut self.0 {
            if *active == seg {
                *active = NO_SEGMENT;
            }
        }
    }

    /// A segment some lane appends to, or `NO_SEGMENT`: what a memory file records of a
    /// group, for its restore to check.
    pub(crate) fn any(&self) -> u32 {
        self.0
            .iter()
            .copied()
            .find(|&seg| seg != NO_SEGMENT)
            .unwrap_or(NO_SEGMENT)
    }
}

/// Which writer lane each thread takes in one store: the store's first `lanes` writer threads
/// (a server's workers) each get a lane of their own, in the order they first write; later
/// ones share them round-robin.
pub(crate) struct WriterLanes {
    lanes: usize,
    /// This store's number, which a thread's last lane is kept with.
    store: u64,
    writers: AtomicUsize,
}

impl WriterLanes {
    pub(crate) fn new(lanes: usize) -> WriterLanes {
        static STORES: AtomicU64 = AtomicU64::new(1);
        WriterLanes {
            lanes,
            store: STORES.fetch_add(1, Ordering::Relaxed),
            writers: AtomicUsize::new(0),
        }
    }

    /// The calling thread's lane.
    #[inline(always)]
    pub(crate) fn of_this_thread(&self) -> usize {
        if self.lanes == 1 {
            return 0;
        }
        // The store the thread last wrote to (0: none) and its lane there.
        thread_local!(static LAST: Cell<(u64, usize)> = const { Cell::new((0, 0)) });
        LAST.with(|last| match last.get() {
            (store, lane) if store == self.store => lane,
            _ => {
                let lane = self.writers.fetch_add(1, Ordering::Relaxed) % self.lanes;
                last.set((self.store, lane));
                lane
            }
        })
    }
}

/// A shard behind its lock, with what optimistic readers check instead of taking it.
///
/// `repr(C)`, in this order, so that what a set writes (the count, the lock word, the counters it
/// moves) and what a get reads (the count, the hint, the flush generation) start on one cache
/// line: a set on another core then takes two of the shard's lines, not four. Two threads'
/// uniform sets went from 1.26-1.30x to 1.38-1.41x one thread's (store bench, 2026-11-27).
#[repr(C)]
pub(crate) struct ShardLock {
    pub(crate) seq: SeqCount,
    /// Where the shard's index table is, for readers without the lock.
    pub(crate) hint: Hint,
    /// The `flush_all` generation the shard has applied (its `flush_seq`), for readers to see
    /// whether one is due without the lock.
    pub(crate) flush_applied: AtomicU32,
    shard: Mutex<Shard>,
}

impl ShardLock {
    pub(crate) fn new(shard: Shard) -> ShardLock {
        ShardLock {
            hint: Hint::of(&shard.index),
            shard: Mutex::new(shard),
            seq: SeqCount::new(),
            flush_applied: AtomicU32::new(0),
        }
    }

    /// The shard, exclusively; optimistic readers see the count odd until the guard is dropped.
    #[inline]
    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        let guard = self.shard.lock();
        let before = self.seq.begin_write();
        ShardGuard {
            guard,
            seq: &self.seq,
            before,
        }
    }

    /// [`ShardLock::lock`] if no one holds the lock now.
    pub(crate) fn try_lock(&self) -> Option<ShardGuard<'_>> {
        let guard = self.shard.try_lock()?;
        let before = self.seq.begin_write();
        Some(ShardGuard {
            guard,
            seq: &self.seq,
            before,
        })
    }
}

/// A locked shard (see [`ShardLock::lock`]).
pub(crate) struct ShardGuard<'a> {
    guard: MutexGuard<'a, Shard>,
    seq: &'a SeqCount,
    /// The count before this holder made it odd.
    before: u64,
}

impl ShardGuard<'_> {
    /// For a reader that took the lock after reading without it from count `start`: whether
    /// no other writer ran in between, so what it read is the shard as it is, and stays so
    /// while the guard lives (a seqlock read's upgrade).
    #[inline]
    pub(crate) fn unchanged_since(&self, start: u64) -> bool {
        self.before == start
    }
}

impl Drop for ShardGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Before the mutex is unlocked (fields drop after this), so counts never interleave.
        self.seq.end_write(self.before);
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard;

    #[inline]
    fn deref(&self) -> &Shard {
        &self.guard
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.guard
    }
}

/// Keeps each shard's lock on its own cache lines.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// An item the index points at, as looked up under the shard's lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pub(crate) slot: usize,
    pub(crate) loc: Loc,
    pub(crate) hdr: Header,
}

/// What linking an item counts of it: its key and value bytes, its whole size and its deadline
/// (0 = never). Three words, where passing the whole header went through memory.
#[derive(Clone, Copy)]
pub(crate) struct Footprint {
    pub(crate) data_len: usize,
    pub(crate) size: usize,
    pub(crate) expiry: u32,
}

/// What replacing an item needs of it: its index slot, its segment, its footprint and its
/// fetched mark. Taken from a `Found` before a write makes room, so that the `Found` a set
/// looked up is never merged whole with one looked up again (which stored all its fields).
#[derive(Clone, Copy)]
pub(crate) struct Replaced {
    pub(crate) slot: usize,
    pub(crate) seg: u32,
    pub(crate) footprint: Footprint,
    pub(crate) fetched: bool,
}

impl Replaced {
    #[inline(always)]
    pub(crate) fn of(found: Found) -> Replaced {
        Replaced {
            slot: found.slot,
            seg: found.loc.seg,
            footprint: found.hdr.footprint(),
            fetched: found.hdr.has(item::FETCHED),
        }
    }
}

impl Header {
    #[inline(always)]
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint {
            data_len: self.key_len + self.value_len,
            size: self.size(),
            expiry: self.expiry,
        }
    }
}

/// Why an item leaves the index, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Deleted or replaced: no counter.
    Gone,
    Evicted,
    Expired,
}

/// The header fields of an item version about to be written.
#[derive(Clone, Copy)]
pub(crate) struct Version {
    pub(crate) flags: u32,
    /// 0 = never.
    pub(crate) expiry: u32,
    /// The CAS unique to keep (a touch's rewrite); `None` takes the new place's.
    pub(crate) cas: Option<u64>,
    /// State bits carried over from the version it replaces.
    pub(crate) keep_bits: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of<T>(field: &T, base: usize) -> usize {
        (field as *const T as usize - base) / 64
    }

    #[test]
    fn what_a_set_writes_and_a_get_reads_starts_on_the_shards_first_line() {
        let cell = Padded(ShardLock::new(Shard::new(0, 1, 1 << 20)));
        let base = &cell as *const Padded<ShardLock> as usize;
        assert_eq!(base % 128, 0);
        let lock = &cell.0;
        assert_eq!(line_of(&lock.seq, base), 0);
        assert_eq!(line_of(&lock.hint, base), 0);
        assert_eq!(line_of(&lock.flush_applied, base), 0);
        // The mutex's lock word comes before the shard it guards.
        assert_eq!(line_of(&lock.shard, base), 0);
        let guard = lock.lock();
        let c = &guard.counters;
        for counter in [&c.curr_items, &c.bytes, &c.item_bytes] {
            assert_eq!(line_of(counter, base), 0);
        }
        for counter in [&c.flash_sized, &c.total_items, &c.set_bytes] {
            assert_eq!(line_of(counter, base), 1);
        }
    }
}
