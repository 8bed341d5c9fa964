//! Large items: an item larger than a segment takes a run of contiguous segments of the same
//! heap, found free in the pool or made by emptying a window of the heap, shard by shard.

use super::key::Key;
use super::write::NewValue;
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::config::Eviction;
use crate::mechanics::item;
use crate::mechanics::segments::{get32, Loc, Run};
use crate::mechanics::shard::{Footprint, Replaced, Shard, Version};
use crate::mechanics::ttl::group_of;

impl Store {
    /// A run of `len` contiguous segments for a large item, evicting whatever holds a window of
    /// the heap when no free run exists. Called without any shard lock held. A run may warm
    /// segments that were given back to the OS while free segments elsewhere stay warm (it needs
    /// them contiguous), so once it has its run it gives back what is now warm past the limit.
    pub(crate) fn alloc_run(&self, len: usize) -> Option<Run> {
        self.alloc_run_holding(None, len)
    }

    /// `alloc_run` for a caller that holds `held`'s lock (an item brought back from flash):
    /// that shard's segments in the window are emptied through it, another shard's only when
    /// its lock is free (waiting for it while holding one could deadlock); `None` when none
    /// could be made.
    pub(crate) fn alloc_run_holding(
        &self,
        mut held: Option<&mut Shard>,
        len: usize,
    ) -> Option<Run> {
        if len > self.segs.count() {
            return None;
        }
        for _ in 0..8 {
            let mut pool = self.pool();
            if let Some(start) = pool.take_run(len) {
                let run = Run {
                    start: start as u32,
                    len,
                };
                self.segs.mark_pending_run(run.start, len);
                drop(pool);
                self.discard_excess_warm();
                return Some(run);
            }
            if self.config.eviction == Eviction::None {
                return None;
            }
            // Claim a window no other large write is using, then empty it.
            let start = pool.claim_window(len, |seg| !self.segs.is_pending(seg))? as u32;
            drop(pool);
            let window = start..start + len as u32;
            let now = self.clock.now();
            for seg in window.clone() {
                let Some(owner) = self.segs.owner_shard(seg) else {
                    continue;
                };
                match held.as_deref_mut() {
                    Some(sh) if sh.owner.id() as usize == owner => self.empty_for_run(sh, seg, now),
                    Some(_) => match self.shards[owner].0.try_lock() {
                        Some(mut sh) => self.empty_for_run(&mut sh, seg, now),
                        None => break,
                    },
                    None => self.empty_for_run(&mut self.lock(owner), seg, now),
                }
            }
            let mut pool = self.pool();
            pool.unclaim(start as usize, len);
            if window.clone().all(|seg| self.segs.is_free(seg)) {
                self.segs.mark_pending_run(start, len);
                drop(pool);
                self.discard_excess_warm();
                return Some(Run { start, len });
            }
            // Not emptied (a shard's lock was busy, with `held`); give back what is free and
            // retry.
            for seg in window {
                if self.segs.is_free(seg) && !pool.is_free(seg) {
                    pool.give(seg);
                }
            }
        }
        None
    }

    /// Empties the segment or run holding `seg`, if it is still `sh`'s (it may have been freed
    /// before the lock was taken), for a run over it.
    fn empty_for_run(&self, sh: &mut Shard, seg: u32, now: UnixSecs) {
        if self.segs.owner_shard(seg) == Some(sh.owner.id() as usize) {
            let head = get32(&self.segs.meta(seg).head);
            self.evict_segment(sh, head, now);
            self.release(sh, false);
        }
    }

    /// Gives back a run that was not used.
    pub(crate) fn free_run(&self, run: Run) {
        let mut pool = self.pool();
        for seg in run.start..run.start + run.len as u32 {
            self.segs.set_free(seg);
            pool.give(seg);
        }
    }

    /// Writes an item larger than a segment into a run found or made while `sh`'s lock is held
    /// (an item brought back from flash: `alloc_run_holding`); false when none could be made.
    pub(crate) fn put_large_holding(
        &self,
        sh: &mut Shard,
        key: Key,
        value: &[u8],
        version: Version,
        now: UnixSecs,
    ) -> bool {
        let size = item::large_item_size(key.bytes.len(), value.len(), version.flags);
        match self.alloc_run_holding(Some(sh), size.div_ceil(self.segs.size())) {
            Some(run) => {
                self.put_large(sh, key, NewValue::Whole(value), version, run, now);
                true
            }
            None => false,
        }
    }

    /// Makes `run` (reserved by `alloc_run` while no lock was held) part of the shard, writes
    /// the item into it and links it.
    pub(crate) fn put_large(
        &self,
        sh: &mut Shard,
        key: Key,
        value: NewValue,
        version: Version,
        run: Run,
        now: UnixSecs,
    ) -> Loc {
        let size = item::large_item_size(key.bytes.len(), value.len(), version.flags);
        for seg in run.start..run.start + run.len as u32 {
            self.segs.assign(seg, &sh.owner);
        }
        self.open_segment(sh, run.start, size, group_of(version.expiry, now), now);
        let loc = Loc {
            seg: run.start,
            off: 0,
        };
        // The CAS field holds the place's unique unless one was given (see `large_item_size`).
        let cas = version.cas.unwrap_or_else(|| self.segs.place_cas(loc));
        {
            let (old_value, bytes) = match value.joins() {
                Some(old) => {
                    let (from, to) = self.segs.read_write(&mut sh.owner, old.loc.seg, run.start);
                    (&from[old.loc.off as usize..][old.hdr.value_range()], to)
                }
                None => (&[][..], self.segs.write(&mut sh.owner, run.start)),
            };
            item::write(
                bytes,
                key.bytes,
                version.flags,
                version.expiry,
                true,
                Some(cas),
                value.parts(old_value),
                version.keep_bits,
                0,
            );
        }
        let old = self.lookup(sh, key).map(Replaced::of);
        let item = Footprint {
            data_len: key.bytes.len() + value.len(),
            size,
            expiry: version.expiry,
        };
        self.link(sh, key.tag, loc, item, old);
        loc
    }
}
