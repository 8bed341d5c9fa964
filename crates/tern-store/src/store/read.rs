//! Reads: get, get-and-touch, touch and the meta protocol's marked reads. A plain get reads
//! without the shard's lock (optimistic: see `mechanics/seqlock.rs`), copying the item out and
//! checking the shard's sequence count; the rest, and a get that must write (the first read
//! of an item, an expired one) or keeps failing its check, take one path that hands a borrowed
//! view of the item to the caller's closure under the lock.

use std::hint::spin_loop;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

use super::key::{HashedKey, Key, ReadKey};
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::item::{self, Header};
use crate::mechanics::segments::{get32, Loc};
use crate::mechanics::seqlock;
use crate::mechanics::shard::{Shard, Version};
use crate::mechanics::ttl::raise_max_expiry;
use crate::mechanics::types::{CasSource, Expiry, ItemView, Marks, Miss};

/// Bytes of an item (header, key, value) a get copies out without the lock; a larger item is
/// read under it, where copying it would cost more than the lock does.
const COPY_MAX: usize = 1024;
/// Bytes copied before the header is decoded: the longest header (23) and one.
const HEADER_MAX: usize = 24;
/// Optimistic tries a get makes before it takes the lock (a writer holds it briefly).
const TRIES: usize = 4;

/// What an optimistic get came to.
enum Optimistic<'b> {
    /// The item, copied and validated.
    Hit(Copied<'b>),
    NotFound,
    /// Read it under the lock: the read must write, or kept meeting writers.
    Locked,
}

/// An item copied out by an optimistic get, with what its view needs from its segment.
struct Copied<'b> {
    item: &'b [u8],
    hdr: Header,
    loc: Loc,
    cas: u64,
    created: UnixSecs,
}

/// What an optimistic probe made of a location with the key's tag.
enum Probed {
    /// The key's item, copied into the buffer: where it was and its header.
    Copied(Loc, Header),
    /// Not one this get can copy (too large, or garbage read in a race).
    GiveUp,
}

impl Store {
    /// Looks `key` up and hands the item to `read`. Writes nothing another thread reads in the
    /// common case: the item is copied out without the shard's lock (see
    /// `mechanics/seqlock.rs`), and `read` sees that copy.
    #[inline]
    pub fn get<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        let key = key.hashed(self);
        let mut buf = [MaybeUninit::uninit(); COPY_MAX];
        match self.read_optimistic(key, &mut buf) {
            Optimistic::Hit(c) => {
                let h = c.hdr;
                Ok(read(ItemView {
                    value: &c.item[h.value_range()],
                    flags: h.flags,
                    // The CAS as it was when validated: the segment may be reused since.
                    cas: CasSource {
                        segs: &self.segs,
                        loc: c.loc,
                        kept: Some(c.cas),
                    },
                    expiry: Expiry(h.expiry),
                    fetched: h.has(item::FETCHED),
                    last_access: c.created + item::decode_age(h.access),
                    stale: h.has(item::STALE),
                    win_sent: h.has(item::WIN_SENT),
                }))
            }
            Optimistic::NotFound => Err(Miss::NotFound),
            Optimistic::Locked => self.read_unmarked(key, None, read),
        }
    }

    /// A get without the shard's lock: finds `key` through the index's view, copies its item
    /// into `buf` and validates the copy against the shard's sequence count (see
    /// `mechanics/seqlock.rs`). Leaves to the locked path what must write: the first read of
    /// an item (its fetched and recently-read marks), a new access time, an expired item, a
    /// `flush_all` come due.
    #[inline(always)]
    fn read_optimistic<'b>(
        &self,
        key: HashedKey<'_>,
        buf: &'b mut [MaybeUninit<u8>; COPY_MAX],
    ) -> Optimistic<'b> {
        let cell = &self.shards[key.shard].0;
        let hint = &self.index_hints.0[key.shard];
        let now = self.clock.now();
        // Keeps the index table the view names allocated until the read is done.
        let _pinned = seqlock::pin();
        for _ in 0..TRIES {
            let Some(start) = cell.seq.begin_read() else {
                spin_loop();
                continue;
            };
            if self
                .flush
                .due(cell.flush_applied.load(Relaxed), now)
                .is_some()
            {
                return Optimistic::Locked;
            }
            let view = hint.view.load(Acquire);
            // SAFETY: pinned (above) before the view was loaded: the table it names is not
            // freed before `_pinned` is dropped (`seqlock::retire`). Every hint names a table.
            let probed = unsafe {
                (*view).find_racy(key.key.tag, key.slot_hint, |packed| {
                    self.copy_if_key(packed, key.key.bytes, buf)
                })
            };
            let (loc, hdr) = match probed {
                None if cell.seq.validate(start) => return Optimistic::NotFound,
                Some((_, Probed::Copied(loc, hdr))) => (loc, hdr),
                Some((_, Probed::GiveUp)) if cell.seq.validate(start) => return Optimistic::Locked,
                _ => continue,
            };
            // `copy_if_key` checked the segment is one.
            let created = get32(&self.segs.meta(loc.seg).created);
            let cas = self.segs.cas_of(loc, hdr.cas);
            if !cell.seq.validate(start) {
                continue;
            }
            let bumped = item::FETCHED | item::REFERENCED;
            if hdr.is_expired_at(now)
                || hdr.bits & bumped != bumped
                || hdr.access != item::encode_age(now.saturating_sub(created))
            {
                return Optimistic::Locked;
            }
            // SAFETY: `copy_if_key` initialised the item's bytes at the buffer's start.
            let item = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), hdr.size()) };
            return Optimistic::Hit(Copied {
                item,
                hdr,
                loc,
                cas,
                created,
            });
        }
        Optimistic::Locked
    }

    /// For an optimistic probe: copies the item at `packed` into `buf` and says whether it has
    /// `key` (`None`: not this one). Everything it reads may be garbage from a race, so every
    /// length is checked against the buffer and the heap before use.
    #[inline(always)]
    fn copy_if_key(
        &self,
        packed: u64,
        key: &[u8],
        buf: &mut [MaybeUninit<u8>; COPY_MAX],
    ) -> Option<Probed> {
        let Some(loc) = Loc::unpack_racy(packed) else {
            return Some(Probed::GiveUp);
        };
        let Some(head) = self.segs.copy_racy(loc, &mut buf[..HEADER_MAX]) else {
            return Some(Probed::GiveUp);
        };
        if head[0] as usize != key.len() {
            return None;
        }
        let hdr = item::parse(head);
        let size = hdr.size();
        if size > COPY_MAX {
            return Some(Probed::GiveUp);
        }
        let Some(item) = self.segs.copy_racy(loc, &mut buf[..size]) else {
            return Some(Probed::GiveUp);
        };
        item::has_key(item, key).then_some(Probed::Copied(loc, hdr))
    }

    /// Looks `key` up, sets its expiry (get-and-touch), and hands the item to `read`.
    pub fn get_and_touch<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        expiry: Expiry,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        self.read_unmarked(key, Some(expiry), read)
    }

    /// What `get` and `get_and_touch` share: a read whose reader leaves the marks alone.
    #[inline]
    fn read_unmarked<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<_, true, _>(key, touch, |item, _| read(item))
    }

    /// For the meta protocol: like `get`/`get_and_touch`, and `read` may change the item's
    /// stale and win-token marks, which are saved with the read (e.g. `mg` handing out a win
    /// token sets `win_sent` in the same locked step that saw it clear).
    pub fn get_marked<R>(
        &self,
        key: &[u8],
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<_, true, _>(key, touch, read)
    }

    /// `get_marked` for meta's `u` flag (memcached's "no LRU bump"): the read leaves the
    /// fetched mark, the recently-read mark merge eviction keeps items by, and the access time
    /// as they were. Only the marks `read` changes are saved.
    pub fn peek_marked<R>(
        &self,
        key: &[u8],
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        self.read_item::<_, false, _>(key, touch, read)
    }

    /// Sets the expiry of `key`; false when it is not there.
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> bool {
        self.read_item::<_, true, _>(key, Some(expiry), |_, _| ())
            .is_ok()
    }

    /// A read; with `BUMP` (every read but meta's `u`) it marks the item fetched and recently
    /// read and updates its access time. A const parameter, so a plain get carries no test.
    #[inline(always)]
    fn read_item<'k, K: ReadKey<'k>, const BUMP: bool, R>(
        &self,
        key: K,
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        let HashedKey {
            shard,
            key,
            slot_hint,
        } = key.hashed(self);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        self.catch_up_flush(sh, Some(key), now)?;
        // `live`, spelled out: the item's bytes found with it cannot leave a function that
        // may unlink the item.
        let (found, bytes) = self
            .find_item_hinted(sh, key, slot_hint)
            .ok_or(Miss::NotFound)?;
        if found.hdr.is_expired_at(now) {
            self.unlink_expired(sh, found.slot, found.loc);
            return Err(Miss::Expired);
        }
        let (loc, h, item) = match touch {
            None => (found.loc, found.hdr, bytes),
            Some(expiry) => {
                let (loc, h) = self.set_expiry(sh, found.slot, found.loc, key, expiry.0, now)?;
                (
                    loc,
                    h,
                    &self.segs.read(&sh.owner, loc.seg)[loc.off as usize..],
                )
            }
        };
        let created = get32(&self.segs.meta(loc.seg).created);
        let mut marks = Marks {
            stale: h.has(item::STALE),
            win_sent: h.has(item::WIN_SENT),
        };
        // The reader cannot keep the borrowed view: it ends with this function.
        let result = read(
            ItemView {
                value: &item[h.value_range()],
                flags: h.flags,
                cas: CasSource {
                    segs: &self.segs,
                    loc,
                    kept: h.cas,
                },
                expiry: Expiry(h.expiry),
                fetched: h.has(item::FETCHED),
                last_access: created + item::decode_age(h.access),
                stale: marks.stale,
                win_sent: marks.win_sent,
            },
            &mut marks,
        );
        let mark = |on: bool, bit: u8| if on { bit } else { 0 };
        let bump = if BUMP {
            item::FETCHED | item::REFERENCED
        } else {
            0
        };
        let set = bump | mark(marks.stale, item::STALE) | mark(marks.win_sent, item::WIN_SENT);
        let clear = mark(!marks.stale, item::STALE) | mark(!marks.win_sent, item::WIN_SENT);
        let access = if BUMP {
            item::encode_age(now.saturating_sub(created))
        } else {
            h.access
        };
        // Only write when something changes: repeated reads leave the cache line clean, and
        // skip finding the item's bytes again, for writing.
        if (h.bits & !clear) | set != h.bits || access != h.access {
            let item = &mut self.segs.write(&mut sh.owner, loc.seg)[loc.off as usize..];
            item::set_bits(item, set, clear);
            item::set_access(item, access);
        }
        Ok(result)
    }

    /// Gives an item a new deadline: in place when it has an expiry field, else by rewriting it
    /// with one (the one case besides merge where a value keeps its bytes but gets a new CAS).
    /// Returns where the item is and its header now.
    pub(crate) fn set_expiry(
        &self,
        sh: &mut Shard,
        slot: usize,
        loc: Loc,
        key: Key,
        expiry: u32,
        now: UnixSecs,
    ) -> Result<(Loc, Header), Miss> {
        let found = self.found_at(sh, slot, loc);
        let h = found.hdr;
        if let Some(at) = h.expiry_at() {
            let field = found.loc.off as usize + at;
            self.segs.write(&mut sh.owner, found.loc.seg)[field..field + 4]
                .copy_from_slice(&expiry.to_le_bytes());
            raise_max_expiry(self.segs.meta(found.loc.seg), expiry);
            return Ok((found.loc, Header { expiry, ..h }));
        }
        if expiry == 0 {
            return Ok((found.loc, h));
        }
        let version = Version {
            flags: h.flags,
            expiry,
            // A touch keeps the item's CAS unique, as memcached's does.
            cas: self
                .config
                .cas_enabled
                .then(|| self.segs.cas_of(found.loc, h.cas)),
            keep_bits: h.bits & item::STATE_BITS,
        };
        // With eviction off and the heap full the item cannot move; it is reported missing
        // rather than served with the wrong deadline.
        self.rewrite(sh, key, found, version, now, Vec::extend_from_slice)
            .ok_or(Miss::NotFound)?;
        let found = self.lookup(sh, key).ok_or(Miss::NotFound)?;
        Ok((found.loc, found.hdr))
    }
}
