//! The steps every command is made of, each on one shard under its lock: find an item, link
//! or unlink one, reserve room for one, rewrite one.

use super::key::Key;
use super::prefetch::{prefetch_lines, LINE};
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::flash::is_flash;
use crate::mechanics::index::NO_SLOT;
use crate::mechanics::item;
use crate::mechanics::segments::{get32, set32, Loc, NO_SEGMENT};
use crate::mechanics::shard::{Cause, Footprint, Found, Replaced, Shard, ShardGuard, Version};
use crate::mechanics::ttl::{group_of, raise_max_expiry};
use crate::mechanics::types::{EvictedItem, Expiry, Miss, Refused};

/// The most lines loaded ahead of a lane's next append (`prefetch_next_append`): 1 KiB, so a
/// large value's stores are not all waited for at once either.
const APPEND_LINES: usize = 16;

/// An item this close to a segment's size goes to the large-item path, so a rewrite that adds
/// an expiry field and a kept CAS (a touch, 12 bytes) always fits an ordinary segment.
const GROWTH_ROOM: usize = 16;

impl Store {
    #[inline]
    pub(crate) fn lock(&self, shard: usize) -> ShardGuard<'_> {
        self.shards[shard].0.lock()
    }

    /// Records where `sh`'s index table is now, after a rebuild (under its lock).
    pub(crate) fn refresh_hint(&self, sh: &Shard) {
        self.shards[sh.owner.id() as usize]
            .0
            .hint
            .refresh(&sh.index);
    }

    /// The item `key` maps to in this shard, expired or not.
    pub(crate) fn lookup(&self, sh: &Shard, key: Key) -> Option<Found> {
        self.find_item(sh, key).map(|(found, _)| found)
    }

    /// `lookup`, with the item's bytes (to its segment's end), inlined into the reads and
    /// writes that start with it (`live`): nothing is moved through memory, and the header
    /// fields a caller does not use are never decoded.
    #[inline(always)]
    pub(crate) fn find_item<'s>(&'s self, sh: &'s Shard, key: Key) -> Option<(Found, &'s [u8])> {
        self.find_item_hinted(sh, key, NO_SLOT)
    }

    /// [`Store::find_item`], trying index slot `hint` first (see `Index::find_hinted`).
    #[inline(always)]
    pub(crate) fn find_item_hinted<'s>(
        &'s self,
        sh: &'s Shard,
        key: Key,
        hint: u32,
    ) -> Option<(Found, &'s [u8])> {
        // Inlined too: returning a header from a call goes through memory.
        let (slot, (loc, hdr, item)) = sh.index.find_hinted(
            key.tag,
            hint,
            #[inline(always)]
            |packed| {
                // An item on flash is found by `Store::fetch`, which reads it.
                if is_flash(packed) {
                    return None;
                }
                let loc = Loc::unpack(packed);
                let item = &self.segs.read(&sh.owner, loc.seg)[loc.off as usize..];
                // The key first: its length and where it starts are all that takes.
                item::has_key(item, key.bytes).then(|| (loc, item::parse(item), item))
            },
        )?;
        Some((Found { slot, loc, hdr }, item))
    }

    /// The live item for `key`: an expired one is unlinked and reported. Inlined, so the
    /// `Found` never travels through memory (moving it cost a get ~50 instructions).
    #[inline(always)]
    pub(crate) fn live(&self, sh: &mut Shard, key: Key, now: UnixSecs) -> Result<Found, Miss> {
        let (found, _) = self.find_item(sh, key).ok_or(Miss::NotFound)?;
        if found.hdr.is_expired_at(now) {
            self.unlink_expired(sh, found.slot, found.loc);
            return Err(Miss::Expired);
        }
        Ok(found)
    }

    /// The item at index slot `slot` and place `loc`, its header read again: for the paths
    /// off a read's hot one, which take slot and place alone so that the read's `Found` stays
    /// in registers (one passed whole to a call was stored to memory on every read).
    pub(crate) fn found_at(&self, sh: &Shard, slot: usize, loc: Loc) -> Found {
        let hdr = item::parse(&self.segs.read(&sh.owner, loc.seg)[loc.off as usize..]);
        Found { slot, loc, hdr }
    }

    #[cold]
    pub(crate) fn unlink_expired(&self, sh: &mut Shard, slot: usize, loc: Loc) {
        let found = self.found_at(sh, slot, loc);
        self.unlink(sh, found, Cause::Expired, true);
    }

    /// The live item for `key`, if its CAS is `expected_cas` (when given).
    pub(crate) fn live_checked(
        &self,
        sh: &mut Shard,
        key: Key,
        now: UnixSecs,
        expected_cas: Option<u64>,
    ) -> Result<Found, Refused> {
        self.catch_up_flush(sh, Some(key), now)
            .map_err(|_| Refused::NotFound)?;
        let found = self.live(sh, key, now).map_err(|_| Refused::NotFound)?;
        match expected_cas {
            Some(cas) if cas != self.segs.cas_of(found.loc, found.hdr.cas) => Err(Refused::Exists),
            _ => Ok(found),
        }
    }

    /// Adds a freshly written item to the index under `tag`, replacing the key's older
    /// version `old` (looked up since the last eviction in this shard). Inlined: `old` passed
    /// to a call went through memory.
    #[inline(always)]
    pub(crate) fn link(
        &self,
        sh: &mut Shard,
        tag: u32,
        loc: Loc,
        written: Footprint,
        old: Option<Replaced>,
    ) {
        match old {
            // The same key, so the same tag: the new version takes the old one's slot.
            Some(old) => {
                sh.index.replace(old.slot, tag, loc.pack());
                self.uncount(sh, old.seg, old.footprint, old.fetched, Cause::Gone, true);
            }
            None => sh.index.insert(tag, loc.pack()),
        }
        let meta = self.segs.meta(loc.seg);
        set32(&meta.live, get32(&meta.live) + 1);
        raise_max_expiry(meta, written.expiry);
        let c = &mut sh.counters;
        c.curr_items += 1;
        c.bytes += written.data_len as u64;
        c.item_bytes += written.size as u64;
        c.flash_sized += u64::from(self.flash_sized(written.size));
    }

    /// Removes an item from the index and the counters. With `free_empty`, a sealed segment
    /// left with no live item goes back to the pool.
    pub(crate) fn unlink(&self, sh: &mut Shard, found: Found, cause: Cause, free_empty: bool) {
        sh.index.remove(found.slot);
        self.forget(sh, found, cause, free_empty);
    }

    /// `unlink` but for the index, which no longer points at the item.
    fn forget(&self, sh: &mut Shard, found: Found, cause: Cause, free_empty: bool) {
        if let (Cause::Evicted, Some(observe)) = (cause, self.eviction_observer.get()) {
            let meta = self.segs.meta(found.loc.seg);
            let item = &self.segs.read(&sh.owner, found.loc.seg)[found.loc.off as usize..];
            let h = found.hdr;
            observe(EvictedItem {
                key: h.key(item),
                fetched: h.has(item::FETCHED),
                expiry: Expiry(h.expiry),
                last_access: get32(&meta.created) + item::decode_age(h.access),
            });
        }
        let fetched = found.hdr.has(item::FETCHED);
        self.uncount(
            sh,
            found.loc.seg,
            found.hdr.footprint(),
            fetched,
            cause,
            free_empty,
        );
    }

    /// `forget` but for the eviction observer, from what a replaced item's header gives.
    /// Inlined into `link`: a replacing set reads no more of the old header than this.
    #[inline(always)]
    fn uncount(
        &self,
        sh: &mut Shard,
        seg: u32,
        item: Footprint,
        fetched: bool,
        cause: Cause,
        free_empty: bool,
    ) {
        let meta = self.segs.meta(seg);
        let live = get32(&meta.live) - 1;
        set32(&meta.live, live);
        let c = &mut sh.counters;
        c.curr_items -= 1;
        c.bytes -= item.data_len as u64;
        c.item_bytes -= item.size as u64;
        c.flash_sized -= u64::from(self.flash_sized(item.size));
        let unfetched = !fetched as u64;
        match cause {
            Cause::Gone => {}
            Cause::Evicted => {
                c.evictions += 1;
                c.evicted_unfetched += unfetched;
            }
            Cause::Expired => {
                c.reclaimed += 1;
                c.expired_unfetched += unfetched;
            }
        }
        if free_empty && live == 0 && !sh.active[get32(&meta.group) as usize].contains(seg) {
            self.drop_segment(sh, seg);
            self.release(sh, false);
        }
    }

    /// Hands the shard's freed segments to the pool, keeping one for the caller if asked and
    /// no large item has claimed it.
    pub(crate) fn release(&self, sh: &mut Shard, keep: bool) -> Option<u32> {
        if sh.freed.is_empty() {
            return None;
        }
        self.publish_oldest(sh);
        let mut pool = self.pool();
        let mut kept = None;
        for seg in sh.freed.drain(..) {
            self.segs.set_free(seg);
            if keep && kept.is_none() && !pool.is_claimed(seg) {
                // Owned again before the pool lock is dropped: a large write choosing a window
                // must never take a segment that is free in name only.
                self.segs.assign(seg, &sh.owner);
                kept = Some(seg);
            } else {
                pool.give(seg);
            }
        }
        kept
    }

    /// Whether an item of `size` bytes is one the flash tier would take by size: at least its
    /// starting `ext_item_size`, and its record no larger than a write buffer.
    #[inline(always)]
    pub(crate) fn flash_sized(&self, size: usize) -> bool {
        (self.flash_sized_from..=self.flash_sized_to).contains(&size)
    }

    /// Whether an item of `size` bytes goes to an ordinary segment (else a run).
    pub(crate) fn fits_segment(&self, size: usize) -> bool {
        size + GROWTH_ROOM <= self.segs.size()
    }

    /// Room for `size` bytes at the tail of TTL group `g`.
    #[inline(always)]
    fn reserve(&self, sh: &mut Shard, size: usize, g: usize, now: UnixSecs) -> Option<Loc> {
        let lane = self.lanes.of_this_thread();
        let active = sh.active[g].of(lane);
        if active != NO_SEGMENT {
            let meta = self.segs.meta(active);
            let off = get32(&meta.write_off);
            let end = off as usize + size;
            if end <= self.segs.size() {
                set32(&meta.write_off, end as u32);
                self.prefetch_next_append(active, end, size);
                return Some(Loc { seg: active, off });
            }
        }
        self.reserve_in_new_segment(sh, size, g, lane, now)
    }

    /// Loads the lines the lane's next append to segment `seg` will write, from `end` (this
    /// append's end) for about this item's `size` again, so that its stores find them in this
    /// core's cache. Without it the set's stores waited for those lines to arrive, the wait
    /// landing on the shard lock's release (73 % of `set_small`'s samples in `perf`): the server's
    /// CPU per request fell 3-9 % at 32 B to 4 KiB values (2026-11-27, docs/performance.md).
    #[inline(always)]
    fn prefetch_next_append(&self, seg: u32, end: usize, size: usize) {
        // Past the segment's end (once a segment) the hint only loads a line no append wants.
        let lines = (size / LINE + 2).min(APPEND_LINES);
        let next = self.segs.address(Loc {
            seg,
            off: end as u32,
        });
        prefetch_lines(next, lines);
    }

    /// `reserve` once the group's active segment is full (about once per segment's worth of
    /// writes, so kept off the hot path): opens a new one, freeing the sealed one if its items
    /// are all gone already.
    #[cold]
    fn reserve_in_new_segment(
        &self,
        sh: &mut Shard,
        size: usize,
        g: usize,
        lane: usize,
        now: UnixSecs,
    ) -> Option<Loc> {
        let seg = self.make_room(sh, now)?;
        self.open_segment(sh, seg, size, g, now);
        // Making room may have dropped the lane's segment (`Lanes::forget`): then none is sealed.
        let sealed = sh.active[g].replace(lane, seg);
        if sealed != NO_SEGMENT && get32(&self.segs.meta(sealed).live) == 0 {
            self.drop_segment(sh, sealed);
            self.release(sh, false);
        }
        Some(Loc { seg, off: 0 })
    }

    /// A free segment, owned by this shard: from the pool, else by reclaiming its expired
    /// segments, else by evicting (see `evict_for`).
    fn make_room(&self, sh: &mut Shard, now: UnixSecs) -> Option<u32> {
        for _ in 0..8 {
            let mut pool = self.pool();
            if let Some(seg) = pool.take() {
                // Owned before the pool lock is dropped (see `release`).
                self.segs.assign(seg, &sh.owner);
                return Some(seg);
            }
            drop(pool);
            if self.reclaim_shard(sh, now) == 0 && !self.evict_for(sh, now) {
                return None;
            }
            if let Some(seg) = self.release(sh, true) {
                return Some(seg);
            }
        }
        None
    }

    /// Writes a new version of `key` into its TTL group's segment; `None` when no room can be
    /// made. The older version, if any, is replaced (`old`: what the caller found just now).
    #[inline(always)]
    pub(crate) fn put_small(
        &self,
        sh: &mut Shard,
        key: Key,
        old: Option<Found>,
        version: Version,
        parts: [&[u8]; 2],
        now: UnixSecs,
    ) -> Option<Loc> {
        let churn = sh.churn;
        let old = old.map(Replaced::of);
        let Version {
            flags,
            expiry,
            cas,
            keep_bits,
        } = version;
        let value_len = parts[0].len() + parts[1].len();
        let size = item::item_size(
            key.bytes.len(),
            value_len,
            flags,
            expiry != 0,
            cas.is_some(),
        );
        // A new item leaves GROWTH_ROOM spare; a rewrite of one (a touch adding an expiry field
        // and its kept CAS) may take that room, never more than the segment.
        debug_assert!(
            self.fits_segment(size) || (old.is_some() && size <= self.segs.size()),
            "{size} bytes"
        );
        let loc = self.reserve(sh, size, group_of(expiry, now), now)?;
        let created = get32(&self.segs.meta(loc.seg).created);
        {
            let item = &mut self.segs.write(&mut sh.owner, loc.seg)[loc.off as usize..];
            let access = item::encode_age(now.saturating_sub(created));
            item::write(
                item,
                key.bytes,
                flags,
                expiry,
                expiry != 0,
                cas,
                parts,
                keep_bits,
                access,
            );
        }
        // Making room may have evicted `old`, moved it (merge), or sent it to flash, where its
        // entry would stay behind the new item (no lookup meets it while the item is in
        // memory): that entry goes.
        let old = if sh.churn == churn {
            old
        } else {
            let moved = self.lookup(sh, key).map(Replaced::of);
            if moved.is_none() && old.is_some() {
                self.drop_flash_candidates(sh, key);
            }
            moved
        };
        let item = Footprint {
            data_len: key.bytes.len() + value_len,
            size,
            expiry,
        };
        self.link(sh, key.tag, loc, item, old);
        Some(loc)
    }

    /// Writes a new version of the small item `old`, whose value `build` makes from the old
    /// value (`build(new, old)`); `None` when no room can be made. The value is built in the
    /// shard's scratch buffer first, because making room may move or free the old one.
    pub(crate) fn rewrite(
        &self,
        sh: &mut Shard,
        key: Key,
        old: Found,
        version: Version,
        now: UnixSecs,
        build: impl FnOnce(&mut Vec<u8>, &[u8]),
    ) -> Option<Loc> {
        let mut value = std::mem::take(&mut sh.scratch);
        value.clear();
        let old_bytes = &self.segs.read(&sh.owner, old.loc.seg)[old.loc.off as usize..];
        build(&mut value, &old_bytes[old.hdr.value_range()]);
        let written = self.put_small(sh, key, Some(old), version, [&value, &[]], now);
        sh.scratch = value;
        written
    }
}
