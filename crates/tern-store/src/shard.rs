//! A shard: what its lock guards (index, TTL chains, counters), and the steps every command is
//! made of: find an item, link or unlink one, reserve room for one, rewrite one.

use parking_lot::MutexGuard;
use std::collections::VecDeque;

use crate::index::{self, Index, NO_SLOT};
use crate::item::{self, Header};
use crate::segments::{get32, set32, Loc, Owner, NO_SEGMENT};
use crate::stats::Counters;
use crate::store::Store;
use crate::ttl::{group_of, raise_max_expiry, GROUPS};
use crate::{Miss, Refused, UnixSecs};

/// An item this close to a segment's size goes to the large-item path, so a rewrite that adds
/// an expiry field and a kept CAS (a touch, 12 bytes) always fits an ordinary segment.
const GROWTH_ROOM: usize = 16;

pub(crate) struct Shard {
    /// The right to this shard's segments' bytes (see `segments`).
    pub(crate) owner: Owner,
    pub(crate) index: Index,
    /// Segments of each TTL group, oldest first; the last may be the group's `active` one.
    pub(crate) chains: [VecDeque<u32>; GROUPS],
    /// The segment each TTL group appends to, or `NO_SEGMENT`.
    pub(crate) active: [u32; GROUPS],
    /// The `flush_all` generation this shard has applied.
    pub(crate) flush_seq: u32,
    pub(crate) counters: Counters,
    /// Reused buffer for values built from an older version (see `rewrite`).
    scratch: Vec<u8>,
    /// Segments this shard has emptied, to hand back to the pool (or keep one).
    pub(crate) freed: Vec<u32>,
    /// Bumped whenever items leave the index other than by `unlink` of a known item (eviction,
    /// reclaim, merge, flush): a `Found` taken before is still exact while this is unchanged.
    pub(crate) churn: u64,
    pub(crate) rng: u64,
}

impl Shard {
    pub(crate) fn new(id: u32, rng_seed: u64) -> Shard {
        Shard {
            owner: Owner::new(id),
            index: Index::new(),
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

/// Keeps each shard's lock on its own cache lines.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// A key with its index tag, hashed once per command.
#[derive(Clone, Copy)]
pub(crate) struct Key<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) tag: u32,
}

/// A key hashed by a store: the shard it lives in and its index tag, worked out once. A
/// pipelined batch's read-ahead hashes each key (to start loading its index bucket), and the
/// get that follows reuses the hash. It is only made by [`Store::hash_key`], and a store keeps
/// its hash seeds for life, so a `HashedKey` always names its key's place in that store (a
/// server has one store).
#[derive(Clone, Copy)]
pub struct HashedKey<'a> {
    pub(crate) shard: usize,
    pub(crate) key: Key<'a>,
    /// The index slot where read-ahead saw the key's tag, tried first by the read (see
    /// `Index::find_hinted`); [`NO_SLOT`] when there is none.
    pub(crate) slot_hint: u32,
}

impl<'a> HashedKey<'a> {
    pub fn bytes(&self) -> &'a [u8] {
        self.key.bytes
    }
}

/// The key of a read: its bytes, hashed by the read, or a [`HashedKey`] hashed already.
pub trait ReadKey<'a>: Copy {
    fn hashed(self, store: &Store) -> HashedKey<'a>;
}

impl<'a, T: AsRef<[u8]> + ?Sized> ReadKey<'a> for &'a T {
    #[inline(always)]
    fn hashed(self, store: &Store) -> HashedKey<'a> {
        store.hash_key(self.as_ref())
    }
}

impl<'a> ReadKey<'a> for HashedKey<'a> {
    #[inline(always)]
    fn hashed(self, _: &Store) -> HashedKey<'a> {
        self
    }
}

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
    slot: usize,
    seg: u32,
    footprint: Footprint,
    fetched: bool,
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

impl Store {
    #[inline]
    pub(crate) fn hash<'k>(&self, key: &'k [u8]) -> (usize, Key<'k>) {
        let hash = self.hasher.hash_one(key);
        // Tag 0 is folded into 1: an empty index slot is all zero bits.
        let tag = ((hash >> (64 - index::TAG_BITS)) as u32).max(1);
        let shard = hash as usize & (self.shards.len() - 1);
        (shard, Key { bytes: key, tag })
    }

    /// `key` hashed, for a read to take later (see [`HashedKey`]).
    #[inline]
    pub fn hash_key<'k>(&self, key: &'k [u8]) -> HashedKey<'k> {
        let (shard, key) = self.hash(key);
        HashedKey {
            shard,
            key,
            slot_hint: NO_SLOT,
        }
    }

    #[inline]
    pub(crate) fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        self.shards[shard].0.lock()
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
            observe(crate::EvictedItem {
                key: h.key(item),
                fetched: h.has(item::FETCHED),
                expiry: crate::Expiry(h.expiry),
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
        if free_empty && live == 0 && sh.active[get32(&meta.group) as usize] != seg {
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

    /// Whether an item of `size` bytes goes to an ordinary segment (else a run).
    pub(crate) fn fits_segment(&self, size: usize) -> bool {
        size + GROWTH_ROOM <= self.segs.size()
    }

    /// Room for `size` bytes at the tail of TTL group `g`.
    #[inline(always)]
    fn reserve(&self, sh: &mut Shard, size: usize, g: usize, now: UnixSecs) -> Option<Loc> {
        let active = sh.active[g];
        if active != NO_SEGMENT {
            let meta = self.segs.meta(active);
            let off = get32(&meta.write_off);
            if off as usize + size <= self.segs.size() {
                set32(&meta.write_off, off + size as u32);
                return Some(Loc { seg: active, off });
            }
        }
        self.reserve_in_new_segment(sh, size, g, now)
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
        now: UnixSecs,
    ) -> Option<Loc> {
        let seg = self.make_room(sh, now)?;
        self.open_segment(sh, seg, size, g, now);
        let sealed = std::mem::replace(&mut sh.active[g], seg);
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
        debug_assert!(self.fits_segment(size));
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
        // Making room may have evicted `old`, or moved it (merge).
        let old = if sh.churn == churn {
            old
        } else {
            self.lookup(sh, key).map(Replaced::of)
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
