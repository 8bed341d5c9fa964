//! Reads: get, get-and-touch, touch and the meta protocol's marked reads, all one path that
//! hands a borrowed view of the item to the caller's closure under the shard's lock.

use super::key::{HashedKey, Key, ReadKey};
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::item::{self, Header};
use crate::mechanics::segments::{get32, Loc};
use crate::mechanics::shard::{Shard, Version};
use crate::mechanics::ttl::raise_max_expiry;
use crate::mechanics::types::{CasSource, Expiry, ItemView, Marks, Miss};

impl Store {
    /// Looks `key` up and hands the item to `read`.
    pub fn get<'k, R>(
        &self,
        key: impl ReadKey<'k>,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        self.read_unmarked(key, None, read)
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
