//! Eviction, when the pool is empty: which shard gives up room (the one holding the heap's
//! oldest segment), and how it does by the configured policy, merge included.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;

use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::config::Eviction;
use crate::mechanics::item::{self, Header};
use crate::mechanics::segments::{get32, set32, Loc, NO_SEGMENT};
use crate::mechanics::shard::{Cause, Found, Shard};
use crate::mechanics::ttl::{expiry_rank, GROUPS};
use crate::mechanics::types::Expiry;

/// Segments compacted into one by a merge eviction.
const MERGE_SEGMENTS: usize = 4;

impl Store {
    /// Frees segments by the eviction policy where the heap's oldest segment is, as one
    /// unsharded segcache would: in that shard when it is another one and its lock is free
    /// (what it frees goes to the pool), else in this shard, else in any shard that has some.
    /// Without this, shards that free several segments at once (merge) would feed the others
    /// through the pool and shrink while they grew. Another shard's lock is never waited for,
    /// so two shards evicting for each other cannot deadlock.
    pub(crate) fn evict_for(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        if self.config.eviction == Eviction::None {
            return false;
        }
        let me = sh.owner.id() as usize;
        let oldest = self.oldest_shard();
        if oldest != me && self.evict_in_other(oldest, now) {
            return true;
        }
        if self.evict_one(sh, now) {
            return true;
        }
        (0..self.shards.len()).any(|other| other != me && self.evict_in_other(other, now))
    }

    /// The shard holding the heap's oldest segment, as last published.
    pub(crate) fn oldest_shard(&self) -> usize {
        (0..self.shards.len())
            .min_by_key(|&s| self.oldest[s].load(Relaxed))
            .expect("at least one shard")
    }

    fn evict_in_other(&self, other: usize, now: UnixSecs) -> bool {
        let Some(mut guard) = self.shards[other].0.try_lock() else {
            return false;
        };
        self.evict_to_pool(&mut guard, now)
    }

    /// `evict_one`, handing what it frees to the pool.
    pub(crate) fn evict_to_pool(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        let evicted = self.evict_one(sh, now);
        if evicted {
            self.release(sh, false);
        }
        evicted
    }

    /// Publishes the age of this shard's oldest segment for `evict_for`; called whenever a
    /// shard opens or frees segments. A stale value only makes a worse victim choice.
    pub(crate) fn publish_oldest(&self, sh: &Shard) {
        let order = self.oldest_group(sh).map_or(u64::MAX, |g| {
            self.segs.meta(sh.chains[g][0]).order.load(Relaxed)
        });
        self.oldest[sh.owner.id() as usize].store(order, Relaxed);
    }

    /// Frees at least one segment of this shard into `sh.freed`, by the configured policy,
    /// and shrinks the shard's index if that left it sparse.
    fn evict_one(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        let evicted = self.evict_by_policy(sh, now);
        if evicted {
            self.shrink_index(sh);
        }
        evicted
    }

    fn evict_by_policy(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        match self.config.eviction {
            Eviction::None => false,
            Eviction::Merge => self.merge(sh, now),
            Eviction::Fifo => match self.oldest_group(sh) {
                Some(g) => {
                    self.evict_segment(sh, sh.chains[g][0], now);
                    true
                }
                None => false,
            },
            Eviction::Random => {
                let total: usize = sh.chains.iter().map(VecDeque::len).sum();
                if total == 0 {
                    return false;
                }
                sh.rng ^= sh.rng << 13;
                sh.rng ^= sh.rng >> 7;
                sh.rng ^= sh.rng << 17;
                let mut pick = (sh.rng % total as u64) as usize;
                let g = (0..GROUPS)
                    .find(|&g| {
                        let len = sh.chains[g].len();
                        if pick < len {
                            true
                        } else {
                            pick -= len;
                            false
                        }
                    })
                    .expect("pick < total");
                self.evict_segment(sh, sh.chains[g][pick], now);
                true
            }
        }
    }

    /// The item at `loc` in one of this locked shard's segments, and its index slot when the
    /// index still points there (an item deleted or replaced since has none).
    pub(crate) fn indexed_item(&self, sh: &Shard, loc: Loc) -> (Header, Option<usize>) {
        let item = &self.segs.read(&sh.owner, loc.seg)[loc.off as usize..];
        let hdr = item::parse(item);
        let tag = self.hash(hdr.key(item)).1.tag;
        let slot = sh.index.find(tag, |p| (p == loc.pack()).then_some(()));
        (hdr, slot.map(|(slot, ())| slot))
    }

    fn removal_cause(hdr: &Header, now: UnixSecs) -> Cause {
        if Expiry(hdr.expiry).is_expired_at(now) {
            Cause::Expired
        } else {
            Cause::Evicted
        }
    }

    /// Unlinks every live item of a segment (or run) and frees it. Whole items only: an item
    /// never spans segments except inside a run, which goes as one.
    pub(crate) fn evict_segment(&self, sh: &mut Shard, head: u32, now: UnixSecs) {
        sh.churn += 1;
        let end = get32(&self.segs.meta(head).write_off);
        let mut off = 0;
        while off < end {
            let loc = Loc { seg: head, off };
            let (hdr, slot) = self.indexed_item(sh, loc);
            off += hdr.size() as u32;
            if let Some(slot) = slot {
                let cause = Self::removal_cause(&hdr, now);
                let found = Found { slot, loc, hdr };
                if cause == Cause::Evicted && self.to_flash(sh, found, now) {
                    continue;
                }
                self.unlink(sh, found, cause, false);
            }
        }
        self.drop_segment(sh, head);
    }

    /// Segcache-style merge eviction, run as a clock over whole segments: the oldest segments
    /// of the oldest TTL group are read in order; an item read since it was written (or last
    /// kept) is kept, its mark cleared, and packed towards the front of what was read, the
    /// others are evicted. It stops as soon as the packed items fill a segment and a whole
    /// segment behind them is empty, leaving the rest of the segment being read in place for
    /// the next merge, so kept items always fill their segments (no half-empty merge output),
    /// and a hot item is never dropped for lack of room. The filled segments move to the young
    /// end, so a kept item has a whole cycle to be read again before it is looked at again.
    fn merge(&self, sh: &mut Shard, now: UnixSecs) -> bool {
        let Some(g) = self.oldest_group(sh) else {
            return false;
        };
        // Sealed ordinary segments only: a run goes whole, the active segment is being written.
        let mut sources = [NO_SEGMENT; MERGE_SEGMENTS];
        let mut n = 0;
        for &seg in sh.chains[g].iter().take(MERGE_SEGMENTS) {
            if get32(&self.segs.meta(seg).run_len) != 1 || sh.active[g].contains(seg) {
                break;
            }
            sources[n] = seg;
            n += 1;
        }
        if n < 2 {
            self.evict_segment(sh, sh.chains[g][0], now);
            return true;
        }
        sh.churn += 1;
        // Packing goes to `sources[out]` at `write`; it never passes the item being read, so
        // no unread item is overwritten.
        let mut out = 0;
        let mut write = 0usize;
        let mut max_expiry = 0u32;
        // The source left partly read, when the merge stops inside one.
        let mut stopped = None;
        'sources: for (i, &src) in sources[..n].iter().enumerate() {
            let src_meta = self.segs.meta(src);
            let src_created = get32(&src_meta.created);
            let end = get32(&src_meta.write_off);
            let mut off = 0;
            while off < end {
                let loc = Loc { seg: src, off };
                let (hdr, slot) = self.indexed_item(sh, loc);
                let size = hdr.size();
                let Some(slot) = slot else {
                    off += size as u32;
                    continue;
                };
                let found = Found { slot, loc, hdr };
                let cause = Self::removal_cause(&hdr, now);
                if cause == Cause::Expired || !hdr.has(item::REFERENCED) {
                    if cause == Cause::Evicted && self.to_flash(sh, found, now) {
                        off += size as u32;
                        continue;
                    }
                    self.unlink(sh, found, cause, false);
                    off += size as u32;
                    continue;
                }
                if write + size > self.segs.size() {
                    // `out < i` here: an item read from `sources[out]` itself fits where it is.
                    self.seal_merged(sources[out], write, max_expiry);
                    if out + 1 < i {
                        // Packed items fill a segment and a whole one behind them is empty.
                        stopped = Some(i);
                        break 'sources;
                    }
                    (out, write, max_expiry) = (i, 0, 0);
                }
                let dest = sources[out];
                let dest_created = get32(&self.segs.meta(dest).created);
                let last_access = src_created + item::decode_age(hdr.access);
                let age = item::encode_age(last_access.saturating_sub(dest_created));
                let from = off as usize;
                let moved = if src == dest {
                    let bytes = self.segs.write(&mut sh.owner, dest);
                    // `write <= from`: packing never passes the item being read.
                    bytes.copy_within(from..from + size, write);
                    &mut bytes[write..write + size]
                } else {
                    let (src_bytes, dest_bytes) = self.segs.read_write(&mut sh.owner, src, dest);
                    dest_bytes[write..write + size].copy_from_slice(&src_bytes[from..from + size]);
                    set32(&src_meta.live, get32(&src_meta.live) - 1);
                    let dest_meta = self.segs.meta(dest);
                    set32(&dest_meta.live, get32(&dest_meta.live) + 1);
                    &mut dest_bytes[write..write + size]
                };
                item::set_bits(moved, 0, item::REFERENCED);
                item::set_access(moved, age);
                let packed = Loc {
                    seg: dest,
                    off: write as u32,
                };
                sh.index.set_location(slot, packed.pack());
                write += size;
                max_expiry = max_expiry.max(expiry_rank(hdr.expiry));
                off += size as u32;
            }
        }
        let read = stopped.unwrap_or(n);
        if stopped.is_none() {
            self.seal_merged(sources[out], write, max_expiry);
        }
        // Segments holding packed items; every other fully read one is now empty.
        let kept = if write == 0 && stopped.is_none() {
            out
        } else {
            out + 1
        };
        let chain = &mut sh.chains[g];
        chain.drain(..read);
        for &seg in &sources[kept..read] {
            debug_assert_eq!(get32(&self.segs.meta(seg).live), 0);
            sh.freed.push(seg);
        }
        // Before the segments being appended to, which end the chain unless a merge or a
        // lane's newer segment came after them.
        let active = sh.active[g];
        let young_end = chain.len()
            - chain
                .iter()
                .rev()
                .take_while(|&&seg| active.contains(seg))
                .count();
        for (k, &seg) in sources[..kept].iter().enumerate() {
            chain.insert(young_end + k, seg);
            self.segs
                .meta(seg)
                .order
                .store(self.segs.next_epoch(), Relaxed);
        }
        sh.counters.merges += 1;
        if kept == read {
            // Every item read was hot and they packed with no room to spare: nothing freed, so
            // evict the oldest segment outright (their marks are cleared for the next pass).
            let oldest = sh.chains[g][0];
            self.evict_segment(sh, oldest, now);
        }
        true
    }

    /// Finishes a segment that merge packed `len` bytes of kept items into.
    fn seal_merged(&self, seg: u32, len: usize, max_expiry: u32) {
        let meta = self.segs.meta(seg);
        debug_assert_eq!(len == 0, get32(&meta.live) == 0);
        set32(&meta.write_off, len as u32);
        set32(&meta.max_expiry, max_expiry);
        // The kept items moved, so they take new CAS uniques: a unique never names two places.
        self.segs.renew_epoch(seg);
    }
}
