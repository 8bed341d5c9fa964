//! A shard: what its lock guards (index, TTL chains, counters, freed segments), the lock with
//! its sequence count for optimistic readers (see `seqlock`), and the plain
//! values its steps pass around (an item found, what linking one counts, a version to write).
//! The steps themselves work on a `Store` and live in `store/shard.rs`.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU32;

use parking_lot::{Mutex, MutexGuard};

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
    /// Segments of each TTL group, oldest first; the last may be the group's `active` one.
    pub(crate) chains: [VecDeque<u32>; GROUPS],
    /// The segment each TTL group appends to, or `NO_SEGMENT`.
    pub(crate) active: [u32; GROUPS],
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
            active: [NO_SEGMENT; GROUPS],
            flush_seq: 0,
            counters: Counters::default(),
            scratch: Vec::new(),
            freed: Vec::new(),
            churn: 0,
            rng: rng_seed,
        }
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
