//! A walk over every live item, for memcached's `lru_crawler metadump` and `stats cachedump`:
//! a step at a time, each under one shard's lock for a bounded number of items, so a dump of a
//! large cache never holds a lock for long.

use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::flash::is_flash;
use crate::mechanics::index::TAG_BITS;
use crate::mechanics::item;
use crate::mechanics::segments::{get32, Loc};
use crate::mechanics::types::Expiry;

const TAGS: u32 = 1 << TAG_BITS;

/// Where a walk stands: a shard and a tag (hash order). Items keep their tag when a shard's
/// index is rebuilt, so an item there for the whole walk is seen exactly once; one written or
/// removed meanwhile may or may not be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpCursor {
    shard: usize,
    tag: u32,
}

/// One live item as a dump lists it.
#[derive(Clone, Copy, Debug)]
pub struct ItemMeta<'a> {
    pub key: &'a [u8],
    pub expiry: Expiry,
    /// Unix seconds.
    pub last_access: UnixSecs,
    pub cas: u64,
    /// Read since it was written.
    pub fetched: bool,
    pub flags: u32,
    pub value_len: usize,
    /// Bytes the item takes in its segment: header, key and value.
    pub size: usize,
}

impl Store {
    /// Hands about `batch` live items from `from` on to `each`, under one shard's lock; returns
    /// where to go on, or `None` once every shard is done. Start from `DumpCursor::default()`.
    pub fn dump(
        &self,
        from: DumpCursor,
        batch: usize,
        mut each: impl FnMut(ItemMeta<'_>),
    ) -> Option<DumpCursor> {
        let now = self.clock.now();
        let mut guard = self.lock(from.shard);
        let _ = self.catch_up_flush(&mut guard, None, now);
        let sh = &*guard;
        // A tag range holding about `batch` of the shard's items (tags are uniform).
        let span = (u64::from(TAGS) * batch.max(1) as u64 / sh.index.len().max(1) as u64)
            .clamp(1, u64::from(TAGS)) as u32;
        let end = from.tag.saturating_add(span).min(TAGS);
        sh.index.entries_with_tags(from.tag..end, |packed| {
            // Items on flash are not listed: their keys are not in memory.
            if is_flash(packed) {
                return;
            }
            let loc = Loc::unpack(packed);
            let bytes = &self.segs.read(&sh.owner, loc.seg)[loc.off as usize..];
            let h = item::parse(bytes);
            if Expiry(h.expiry).is_expired_at(now) {
                return;
            }
            let created = get32(&self.segs.meta(loc.seg).created);
            each(ItemMeta {
                key: h.key(bytes),
                expiry: Expiry(h.expiry),
                last_access: created + item::decode_age(h.access),
                cas: self.segs.cas_of(loc, h.cas),
                fetched: h.has(item::FETCHED),
                flags: h.flags,
                value_len: h.value_len,
                size: h.size(),
            });
        });
        drop(guard);
        if end < TAGS {
            Some(DumpCursor {
                shard: from.shard,
                tag: end,
            })
        } else if from.shard + 1 < self.shards.len() {
            Some(DumpCursor {
                shard: from.shard + 1,
                tag: 0,
            })
        } else {
            None
        }
    }
}
