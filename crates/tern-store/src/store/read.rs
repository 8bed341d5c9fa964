//! Reads: get, get-and-touch, touch and the meta protocol's marked reads. A plain get reads
//! without the shard's lock (optimistic: see `mechanics/seqlock.rs`), handing the item in place
//! to the caller's reader and then checking the shard's sequence count (a failed check undoes
//! what the reader wrote: `Sink`); the rest, and a get that must write (the first read
//! of an item, an expired one) or keeps failing its check, take one path that hands a borrowed
//! view of the item to the caller's closure under the lock.

use std::hint::spin_loop;
use std::sync::atomic::Ordering::Relaxed;

use super::flash::OnFlash;
use super::key::Key;
use super::key::{HashedKey, ReadKey};
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::index;
use crate::mechanics::item::{self, Header};
use crate::mechanics::segments::{get32, Loc};
use crate::mechanics::shard::{Shard, ShardGuard, ShardLock, Version};
use crate::mechanics::ttl::raise_max_expiry;
use crate::mechanics::types::{CasSource, Expiry, ItemView, Marks, Miss};

/// Reads without the lock a get tries before it takes the lock (a writer holds it briefly).
const TRIES: usize = 4;
/// Seconds a plain get leaves an item's access time as it is, as memcached's
/// `ITEM_UPDATE_INTERVAL`: renewing it takes the lock and dirties the item's line.
const ACCESS_INTERVAL: u32 = 60;

/// Where a get's reader writes, so that a read of a state a writer changed meanwhile can be
/// undone: the store marks it before the reader runs and rolls it back to the mark when its
/// check fails, so no caller can keep bytes from a torn read.
pub(crate) trait Sink {
    fn mark(&self) -> usize;
    fn undo(&mut self, mark: usize);
}

impl Sink for Vec<u8> {
    #[inline(always)]
    fn mark(&self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn undo(&mut self, mark: usize) {
        self.truncate(mark);
    }
}

/// A reader that only returns a value: nothing to undo.
impl Sink for () {
    #[inline(always)]
    fn mark(&self) -> usize {
        0
    }

    #[inline(always)]
    fn undo(&mut self, _: usize) {}
}

/// What a get without the lock came to, before its check.
enum Racy<'a, R> {
    Hit(R),
    NotFound,
    /// The item (at, header, its bytes on, its segment's opening time) as read, which must be
    /// marked read: under the lock, if no writer came since.
    Bump(Loc, Header, &'a [u8], UnixSecs),
    /// Read it under the lock: it must change, or is of an item this path does not read.
    Locked,
}

impl Store {
    /// Looks `key` up and hands the item to `read`, whose result it returns. Writes nothing
    /// another thread reads in the common case: the item is read in place without the shard's
    /// lock (see `mechanics/seqlock.rs`), so `read` may be run on a state a writer was changing
    /// and its result dropped, then run again: it can only return (`Fn`), and must not panic
    /// on what it reads (bytes are bounded to the item's segment, not checked): judge the
    /// returned result, not the view.
    #[inline]
    pub fn get<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        read: impl Fn(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        self.get_in(key, &mut (), |item, _| read(item))
    }

    /// [`Store::get`] for a reader that writes its reply into `out` (the server's encoders):
    /// what a read of a torn state wrote is cut off `out` again before `read` runs anew.
    #[inline]
    pub fn get_into<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        out: &mut Vec<u8>,
        read: impl Fn(ItemView<'_>, &mut Vec<u8>) -> R,
    ) -> Result<R, Miss> {
        self.get_in(key, out, read)
    }

    /// A get: a few tries without the shard's lock, each checked against its sequence count
    /// (see `mechanics/seqlock.rs`), then under the lock.
    #[inline(always)]
    fn get_in<'k, S: Sink, R>(
        &self,
        key: impl ReadKey<'k>,
        out: &mut S,
        read: impl Fn(ItemView<'_>, &mut S) -> R,
    ) -> Result<R, Miss> {
        let key = key.hashed(self);
        let cell = &self.shards[key.shard].0;
        let now = self.clock.now();
        for _ in 0..TRIES {
            let Some(start) = cell.seq.begin_read() else {
                spin_loop();
                continue;
            };
            let mark = out.mark();
            let racy = self.read_racy(key, cell, now, out, &read);
            match racy {
                // Both decided before `read` ran: nothing to undo.
                Racy::Locked => break,
                Racy::Bump(loc, h, item, created) => {
                    let mut guard = cell.lock();
                    if !guard.unchanged_since(start) {
                        break;
                    }
                    // No writer since `start`: what was read is the item as it is, and the
                    // lock keeps it so (the upgrade of a seqlock read).
                    let (view, marks) = self.view(loc, h, item, created);
                    let result = read(view, out);
                    self.save_marks::<true>(&mut guard, loc, h, marks, created, now);
                    return Ok(result);
                }
                _ => {}
            }
            if cell.seq.validate(start) {
                return match racy {
                    Racy::Hit(r) => Ok(r),
                    _ => Err(Miss::NotFound),
                };
            }
            out.undo(mark);
        }
        self.read_unmarked(key, None, |item| read(item, out))
    }

    /// One get without the shard's lock: probes the live index table, hands the item in place to
    /// `read`. Everything read may be a state a writer is changing (the caller's check decides),
    /// so every offset is checked before use (`index::find_racy`, `Segments::tail_racy`,
    /// `item::has_key`), and a value is at most a segment. Leaves to the locked path what must
    /// write: the first read of an item (its fetched and recently-read marks), an access time
    /// older than `ACCESS_INTERVAL`, an expired item, a `flush_all` come due; and an item larger than a segment.
    #[inline(always)]
    fn read_racy<'s, S, R>(
        &'s self,
        key: HashedKey<'_>,
        cell: &ShardLock,
        now: UnixSecs,
        out: &mut S,
        read: &impl Fn(ItemView<'_>, &mut S) -> R,
    ) -> Racy<'s, R> {
        if self
            .flush
            .due(cell.flush_applied.load(Relaxed), now)
            .is_some()
        {
            return Racy::Locked;
        }
        let hint = &cell.hint;
        let (table, n) = (hint.table.load(Relaxed), hint.buckets.load(Relaxed));
        // SAFETY: a hint of this store, which lives.
        let found = unsafe {
            index::find_racy(table, n, key.key.tag, key.slot_hint, |packed| {
                let loc = Loc::unpack_racy(packed);
                let Some(bytes) = self.segs.tail_racy(loc) else {
                    return Some(None);
                };
                item::has_key(bytes, key.key.bytes).then_some(Some((loc, bytes)))
            })
        };
        let (loc, bytes) = match found {
            None => return Racy::NotFound,
            Some(None) => return Racy::Locked,
            Some(Some(found)) => found,
        };
        // `has_key` saw the header and key inside `bytes`.
        let h = item::parse(bytes);
        let Some(item) = bytes.get(..h.size()) else {
            return Racy::Locked;
        };
        let created = get32(&self.segs.meta(loc.seg).created);
        let bumped = item::FETCHED | item::REFERENCED;
        // An access time up to `ACCESS_INTERVAL` old is left as it is (memcached's
        // ITEM_UPDATE_INTERVAL); an older one is renewed under the lock. Ages are coded
        // monotonically, so a code no smaller than that of the interval's start is recent.
        let renew_before = now.saturating_sub(ACCESS_INTERVAL).saturating_sub(created);
        if h.is_expired_at(now) {
            return Racy::Locked;
        }
        if h.bits & bumped != bumped || h.access < item::encode_age(renew_before) {
            return Racy::Bump(loc, h, item, created);
        }
        // The CAS is read from the segment only if `read` asks, before the check.
        Racy::Hit(read(self.view(loc, h, item, created).0, out))
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
    #[inline(never)]
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
        let Some((found, bytes)) = self.find_item_hinted(sh, key, slot_hint) else {
            if self.flash.is_some() {
                return self.read_flash(guard, shard, key, touch, read);
            }
            return Err(Miss::NotFound);
        };
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
        let (view, mut marks) = self.view(loc, h, item, created);
        // The reader cannot keep the borrowed view: it ends with this function.
        let result = read(view, &mut marks);
        self.save_marks::<BUMP>(sh, loc, h, marks, created, now);
        Ok(result)
    }

    /// `read_item` for a key with no item in memory and a flash tier: the item read from
    /// flash, or brought back into memory first (a touch, `ext_recache_rate`) and read there.
    #[cold]
    fn read_flash<R>(
        &self,
        guard: ShardGuard<'_>,
        shard: usize,
        key: Key,
        touch: Option<Expiry>,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> Result<R, Miss> {
        let now = self.clock.now();
        let (mut guard, fetched) = match self.fetch(guard, shard, key) {
            OnFlash::Absent(_) | OnFlash::Deferred => return Err(Miss::NotFound),
            OnFlash::Gone(_) => return Err(self.gone_from_flash()),
            OnFlash::Changed { gone } => {
                let again = self.read_item::<_, true, _>(key.bytes, touch, read);
                return match again {
                    Err(Miss::NotFound) if gone => Err(self.gone_from_flash()),
                    again => again,
                };
            }
            OnFlash::Found(guard, fetched) => (guard, fetched),
        };
        let sh = &mut *guard;
        let h = fetched.hdr;
        if h.is_expired_at(now) {
            if let Some(slot) = self.flash_slot(sh, key, fetched.location) {
                self.unlink_flash(sh, slot, fetched.location);
            }
            return Err(Miss::Expired);
        }
        if touch.is_some() || self.recache_due() {
            let bits = h.bits & item::STATE_BITS;
            if self.promote(sh, key, &fetched, bits, None, now) {
                if touch.is_none() {
                    // Read from flash, then brought back: counted as both, as memcached does.
                    self.count_flash_get();
                    self.count_recache();
                }
                drop(guard);
                return self.read_item::<_, true, _>(key.bytes, touch, read);
            }
        }
        self.count_flash_get();
        Ok(self.read_fetched(sh, key, &fetched, now, read))
    }

    /// A get whose entry named flash that no longer holds the item: counted a read from flash,
    /// as memcached counts it (`miss_from_extstore` counted it as it went).
    fn gone_from_flash(&self) -> Miss {
        self.count_flash_get();
        Miss::GoneFromFlash
    }

    /// A read's view of the item at `loc` (header `h`, bytes from `item` on, its segment opened
    /// at `created`), with its marks for the reader to change. Without the lock every field may
    /// be garbage until the check, so nothing here may panic on any value.
    #[inline(always)]
    fn view<'a>(
        &'a self,
        loc: Loc,
        h: Header,
        item: &'a [u8],
        created: UnixSecs,
    ) -> (ItemView<'a>, Marks) {
        let view = ItemView {
            value: &item[h.value_range()],
            flags: h.flags,
            cas: CasSource {
                segs: &self.segs,
                loc,
                kept: h.cas,
            },
            expiry: Expiry(h.expiry),
            fetched: h.has(item::FETCHED),
            last_access: created.wrapping_add(item::decode_age(h.access)),
            stale: h.has(item::STALE),
            win_sent: h.has(item::WIN_SENT),
        };
        let marks = Marks {
            stale: view.stale,
            win_sent: view.win_sent,
        };
        (view, marks)
    }

    /// The end of a locked read: saves the marks its reader left, and with `BUMP` the fetched
    /// and recently-read marks and the access time, writing only what changes.
    #[inline(always)]
    fn save_marks<const BUMP: bool>(
        &self,
        sh: &mut Shard,
        loc: Loc,
        h: Header,
        marks: Marks,
        created: UnixSecs,
        now: UnixSecs,
    ) {
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
