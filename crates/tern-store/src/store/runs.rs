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
                if let Some(owner) = self.segs.owner_shard(seg) {
                    let mut sh = self.lock(owner);
                    // Re-checked under the lock: the shard may have freed it meanwhile.
                    if self.segs.owner_shard(seg) == Some(owner) {
                        let head = get32(&self.segs.meta(seg).head);
                        self.evict_segment(&mut sh, head, now);
                        self.release(&mut sh, false);
                    }
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
            // Not emptied (cannot happen while claims hold); give back what is free and retry.
            for seg in window {
                if self.segs.is_free(seg) && !pool.is_free(seg) {
                    pool.give(seg);
                }
            }
        }
        None
    }

    /// Gives back a run that was not used.
    pub(crate) fn free_run(&self, run: Run) {
        let mut pool = self.pool();
        for seg in run.start..run.start + run.len as u32 {
            self.segs.set_free(seg);
            pool.give(seg);
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
                0,
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
